//! Strata against a peer runtime, ractor, on the same workloads with agents that do nothing;
//! `cargo xtask bench --peers` runs this, then AutoGen (`xtask/peers/autogen_bench.py`), and
//! prints and publishes one table (`BENCHMARKS.md`).
//!
//! The workloads, each at several agent counts, every Strata agent a real agent in an
//! [`AgentPool`] whose behaviour's `on_process` does nothing:
//!
//! - **throughput**: N agents, 100 messages each sent round-robin by one task, timed from the
//!   first send until every message is processed. Strata: sent on the in-memory bus wrapped in
//!   the [`WakingBus`], which makes each recipient ready in the team's [`ReadyQueue`], taken
//!   by the agents' turns ([`HeartbeatScheduler::wake`] on that queue, driven as `Team` drives
//!   it) and acknowledged; the clock stops at the last acknowledgement. ractor:
//!   `cast` to N actors, each counting what it handled; the clock stops at the last one.
//! - **idle**: one [`HeartbeatScheduler::tick`] over N idle agents (Strata only: ractor and
//!   AutoGen have no heartbeat, so there is nothing to measure for them);
//! - **create**: agents created one after the other, per second (`AgentPool::create`: bus
//!   inbox, whiteboard, audit record; ractor: `Actor::spawn`, which waits for `pre_start`);
//! - **memory**: the growth of the resident set while N agents are created, per agent, each N
//!   in a fresh process (this binary again, `--memory RUNTIME N`), so memory freed by an
//!   earlier workload does not hide the growth.
//!
//! Both runtimes run on the same tokio multi-thread runtime (one worker per core, as `strata`
//! runs), the timed code in a task of it. Each figure is the median of at least five
//! repetitions (three for creation, 101 cycles for the idle cycle), more until they add up to a
//! second, after an untimed warm-up. Figures are written as one JSON object per file to
//! `<target>/peers/figures/RUNTIME-WORKLOAD-N.json`: an `id` (`strata/throughput/1000`) and
//! numbers, named by their unit as `cargo xtask bench` reads them.
//!
//! It runs in full only when asked: `STRATA_PEERS=full` (or `quick`: the smaller sizes) with
//! `cargo bench -p strata-agent-pool --bench peers`; a plain `cargo bench` (which
//! `cargo xtask bench` runs) prints a note and measures nothing. `STRATA_PEERS_ONLY=ID` measures only the
//! figures with that id or under it (`strata/throughput`: Strata's throughput at every size;
//! `strata/throughput/10000`: at one). Run without `--bench` (`cargo test --benches`),
//! it does each workload once on a few agents as a smoke test and writes nothing.
#![allow(missing_docs)]
#![allow(clippy::unwrap_used, clippy::expect_used, reason = "benchmarks")]
#![allow(clippy::print_stdout, clippy::print_stderr, reason = "the figures are printed")]

mod support;

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};
use support::{resident_bytes, target_dir};

use agent_core::tools::{ToolContext, ToolRegistry};
use agent_core::{
    AgentBehavior, AgentContext, AgentDeps, AgentError, InMemoryAuditLog, InMemoryStateStore,
    RuleBasedReasoner, TokioClock, new_message_id,
};
use agent_pool::{AgentPool, HeartbeatScheduler, ReadyQueue, WakingBus};
use agent_state::{
    Address, AgentConfig, AgentId, AgentLayer, BackendError, BoardSnapshot, Message, MessageId,
    MessageKind, Timestamp,
};
use async_trait::async_trait;
use governance::InMemoryGovernance;
use message_bus::{InMemoryBus, InboxError, MessageBus, RegisterError, SendError};
use ractor::{Actor, ActorProcessingErr, ActorRef};
use serde_json::{Value, json};
use tokio::runtime::Runtime;
use tokio::sync::{Notify, watch};
use whiteboard::InMemoryWhiteboard;

/// Agent counts of the throughput workload.
const THROUGHPUT_AGENTS: [usize; 3] = [100, 1_000, 10_000];
/// Messages each agent receives in one repetition of the throughput workload.
const MESSAGES_PER_AGENT: usize = 100;
/// Agent counts of the idle, creation and memory workloads.
const SCALE_AGENTS: [usize; 3] = [1_000, 10_000, 100_000];
/// Timed repetitions of the throughput workload (after one untimed message per agent), at
/// least; more while they add up to less than [`ENOUGH`].
const THROUGHPUT_REPETITIONS: usize = 5;
/// Timed repetitions of the creation workload, each into a new pool (or a new set of actors),
/// at least; more while they add up to less than [`ENOUGH`].
const CREATE_REPETITIONS: usize = 3;
/// The time the repetitions of one figure add up to at least (up to [`MAX_REPETITIONS`]): a
/// repetition of a small workload takes a few milliseconds, and a median of five such is noise.
const ENOUGH: Duration = Duration::from_secs(1);
/// The most repetitions of one figure.
const MAX_REPETITIONS: usize = 100;
/// Heartbeat cycles timed over idle agents.
const TICKS: usize = 101;

/// How much to measure.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Mode {
    /// Every size (`STRATA_PEERS=full`).
    Full,
    /// The two smaller sizes of each workload (`STRATA_PEERS=quick`).
    Quick,
    /// Each workload once on a few agents, nothing written (`cargo test --benches`).
    Smoke,
}

impl Mode {
    fn throughput_agents(self) -> Vec<usize> {
        match self {
            Mode::Full => THROUGHPUT_AGENTS.to_vec(),
            Mode::Quick => THROUGHPUT_AGENTS[..2].to_vec(),
            Mode::Smoke => vec![10],
        }
    }

    fn scale_agents(self) -> Vec<usize> {
        match self {
            Mode::Full => SCALE_AGENTS.to_vec(),
            Mode::Quick => SCALE_AGENTS[..2].to_vec(),
            Mode::Smoke => vec![100],
        }
    }

    /// Whether `times` are enough repetitions, at least `min`.
    fn enough(self, times: &[Duration], min: usize) -> bool {
        let total: Duration = times.iter().sum();
        // A smoke test does each workload once (none would leave no median to take).
        (self == Mode::Smoke && !times.is_empty())
            || times.len() >= MAX_REPETITIONS
            || (times.len() >= min && total >= ENOUGH)
    }
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if let Some(at) = args.iter().position(|arg| arg == "--memory") {
        // A child of `memory_figure`: one memory figure on stdout.
        let runtime = args.get(at + 1).expect("--memory RUNTIME N");
        let agents = args.get(at + 2).and_then(|n| n.parse().ok()).expect("--memory RUNTIME N");
        println!("{}", memory_child(runtime, agents));
        return;
    }
    let mode = if !args.iter().any(|arg| arg == "--bench") {
        Mode::Smoke
    } else {
        match std::env::var("STRATA_PEERS").as_deref() {
            Ok("full" | "1") => Mode::Full,
            Ok("quick") => Mode::Quick,
            Ok(other) => {
                eprintln!("peers: STRATA_PEERS is `{other}`; expected `full` or `quick`");
                std::process::exit(2);
            }
            Err(_) => {
                println!(
                    "peers: the peer comparison runs only when asked: `cargo xtask bench --peers` \
                     (or STRATA_PEERS=full cargo bench -p strata-agent-pool --bench peers)"
                );
                return;
            }
        }
    };
    let out = (mode != Mode::Smoke).then(|| target_dir().join("peers").join("figures"));
    if let Some(dir) = &out {
        std::fs::create_dir_all(dir).unwrap();
    }
    let record = |figure: Value| {
        println!("{figure}");
        if let Some(dir) = &out {
            let id = figure["id"].as_str().expect("every figure has an id");
            let path = dir.join(format!("{}.json", id.replace('/', "-")));
            std::fs::write(path, format!("{figure}\n")).unwrap();
        }
    };

    let only = std::env::var("STRATA_PEERS_ONLY").unwrap_or_default();
    let wanted = |runtime: &str, workload: &str, agents: usize| {
        let id = format!("{runtime}/{workload}/{agents}");
        only.is_empty() || id == only || id.starts_with(&format!("{only}/"))
    };
    let rt = runtime();
    for agents in mode.throughput_agents() {
        if wanted("strata", "throughput", agents) {
            record(run(&rt, strata_throughput(agents, mode)));
        }
        if wanted("ractor", "throughput", agents) {
            record(run(&rt, ractor_throughput(agents, mode)));
        }
    }
    for agents in mode.scale_agents() {
        if wanted("strata", "create", agents) || wanted("strata", "idle", agents) {
            let (create, idle) = run(&rt, strata_create_and_tick(agents, mode));
            record(create);
            record(idle);
        }
        if wanted("ractor", "create", agents) {
            record(run(&rt, ractor_create(agents, mode)));
        }
    }
    drop(rt);
    for agents in mode.scale_agents() {
        for runtime in ["strata", "ractor"] {
            if wanted(runtime, "memory", agents) {
                record(memory_figure(runtime, agents, mode));
            }
        }
    }
}

/// The runtime both sides run on: tokio's multi-thread runtime, one worker per core, as
/// `strata` builds it.
fn runtime() -> Runtime {
    tokio::runtime::Builder::new_multi_thread().enable_all().build().unwrap()
}

/// Runs `work` as a task of `rt` (on a worker, like the agents), not on the calling thread.
fn run<T: Send + 'static>(rt: &Runtime, work: impl Future<Output = T> + Send + 'static) -> T {
    rt.block_on(async { tokio::spawn(work).await.unwrap() })
}

/// Counts processed messages and wakes the timing task when the count reaches its target.
#[derive(Default)]
struct Progress {
    done: AtomicUsize,
    target: AtomicUsize,
    reached: Notify,
}

impl Progress {
    /// Starts a count towards `target`.
    fn expect(&self, target: usize) {
        self.done.store(0, Ordering::SeqCst);
        self.target.store(target, Ordering::SeqCst);
    }

    fn add(&self, n: usize) {
        let done = self.done.fetch_add(n, Ordering::SeqCst) + n;
        if done >= self.target.load(Ordering::SeqCst) {
            self.notify_one();
        }
    }

    fn notify_one(&self) {
        self.reached.notify_one();
    }

    /// Waits until the count reaches the target (a stale wake-up from an earlier count is
    /// checked and waited past).
    async fn reached(&self) {
        while self.done.load(Ordering::SeqCst) < self.target.load(Ordering::SeqCst) {
            self.reached.notified().await;
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Strata

/// An agent behaviour whose message handler does nothing.
struct Noop;

#[async_trait]
impl AgentBehavior for Noop {
    fn responsibilities(&self) -> &'static str {
        "does nothing"
    }

    async fn on_process(
        &mut self,
        _ctx: &mut AgentContext,
        _messages: &[Message],
        _board: &BoardSnapshot,
    ) -> Result<(), AgentError> {
        Ok(())
    }
}

/// The in-memory bus, counting the messages acknowledged from agents' inboxes: a message is
/// acknowledged after its turn processed it and stored the agent's record.
struct CountingBus {
    inner: InMemoryBus,
    progress: Arc<Progress>,
}

#[async_trait]
impl MessageBus for CountingBus {
    async fn register(&self, agent: &AgentId) -> Result<(), RegisterError> {
        self.inner.register(agent).await
    }
    async fn unregister(&self, agent: &AgentId) -> Result<(), RegisterError> {
        self.inner.unregister(agent).await
    }
    async fn is_registered(&self, agent: &AgentId) -> Result<bool, BackendError> {
        self.inner.is_registered(agent).await
    }
    async fn registered(&self) -> Result<Vec<AgentId>, BackendError> {
        self.inner.registered().await
    }
    async fn send(&self, message: Message) -> Result<usize, SendError> {
        self.inner.send(message).await
    }
    async fn send_many(&self, messages: Vec<Message>) -> Result<Vec<usize>, SendError> {
        self.inner.send_many(messages).await
    }
    async fn take(&self, inbox: &Address, max: usize) -> Result<Vec<Message>, InboxError> {
        self.inner.take(inbox, max).await
    }
    async fn ack(&self, inbox: &Address, ids: &[MessageId]) -> Result<usize, InboxError> {
        let acked = self.inner.ack(inbox, ids).await?;
        if acked > 0 && matches!(inbox, Address::Agent(_)) {
            self.progress.add(acked);
        }
        Ok(acked)
    }
    async fn release(&self, inbox: &Address) -> Result<usize, InboxError> {
        self.inner.release(inbox).await
    }
    async fn pending(&self, inbox: &Address) -> Result<usize, InboxError> {
        self.inner.pending(inbox).await
    }
    async fn inboxes_with_mail(&self) -> Result<Vec<AgentId>, BackendError> {
        self.inner.inboxes_with_mail().await
    }
}

/// A pool of no-op agents on the in-memory services, with a waking, counting bus, as `Team`
/// assembles them (without the layers: no reasoning, no tools are used).
struct Strata {
    deps: Arc<AgentDeps>,
    pool: Arc<AgentPool>,
    progress: Arc<Progress>,
    ready: Arc<ReadyQueue>,
    ids: Vec<AgentId>,
    /// Keeps the tools' workspace alive.
    _workspace: tempfile::TempDir,
}

impl Strata {
    fn new() -> Self {
        let workspace = tempfile::tempdir().unwrap();
        let progress = Arc::new(Progress::default());
        let ready = Arc::new(ReadyQueue::new());
        let counting =
            Arc::new(CountingBus { inner: InMemoryBus::new(), progress: progress.clone() });
        let deps = Arc::new(AgentDeps {
            bus: Arc::new(WakingBus::new(counting, ready.clone())),
            boards: Arc::new(InMemoryWhiteboard::new()),
            governance: Arc::new(InMemoryGovernance::new()),
            audit: Arc::new(InMemoryAuditLog::new()),
            reasoner: Arc::new(RuleBasedReasoner::new()),
            tools: Arc::new(ToolRegistry::with_builtins()),
            workspace: Arc::new(ToolContext::new(workspace.path()).unwrap()),
            clock: Arc::new(TokioClock::starting_at(Timestamp(1_700_000_000_000))),
            state: Arc::new(InMemoryStateStore::new()),
            spawner: None,
            timeouts: Default::default(),
        });
        let pool = Arc::new(AgentPool::new(usize::MAX));
        Self { deps, pool, progress, ready, ids: Vec::new(), _workspace: workspace }
    }

    /// Creates `agents` no-op executors, one after the other.
    async fn populate(&mut self, agents: usize) {
        for n in 0..agents {
            let id = format!("agent-{n}");
            let config = AgentConfig::new(id.as_str(), id.as_str(), AgentLayer::Bottom)
                .with_supervisor("lead");
            self.pool.create(config, Box::new(Noop), self.deps.clone()).await.unwrap();
            self.ids.push(AgentId::new(id));
        }
    }

    fn scheduler(&self) -> HeartbeatScheduler {
        HeartbeatScheduler::new(
            self.pool.clone(),
            self.deps.bus.clone(),
            self.deps.audit.clone(),
            self.deps.clock.clone(),
        )
        .with_ready(self.ready.clone())
    }

    /// Sends `rounds` messages to every agent, round-robin, and waits until all are processed.
    async fn exchange(&self, rounds: usize) -> Duration {
        self.progress.expect(rounds * self.ids.len());
        let start = Instant::now();
        let mut n = 0_u64;
        for _ in 0..rounds {
            for id in &self.ids {
                let message = Message::new(
                    new_message_id(),
                    Address::System,
                    id,
                    MessageKind::StatusQuery,
                    json!({ "n": n }),
                    Timestamp(0),
                );
                self.deps.bus.send(message).await.unwrap();
                n += 1;
            }
        }
        self.progress.reached().await;
        start.elapsed()
    }
}

/// The team's driver without its heartbeat (an hour away in `wake.rs` terms): a turn for every
/// agent made ready whenever mail arrives or a turn ends, as `Team`'s `Driver` does it.
async fn drive(
    mut scheduler: HeartbeatScheduler,
    ready: Arc<ReadyQueue>,
    mut stop: watch::Receiver<bool>,
) {
    loop {
        let running = scheduler.running() > 0;
        let allowance = scheduler.next_wake();
        tokio::select! {
            biased;
            _ = stop.changed() => {
                scheduler.settle().await;
                return;
            }
            () = ready.notified() => {}
            true = scheduler.next_finished(), if running => {}
            () = sleep_until_some(allowance), if allowance.is_some() => {}
        }
        scheduler.wake().await;
    }
}

async fn sleep_until_some(at: Option<tokio::time::Instant>) {
    if let Some(at) = at {
        tokio::time::sleep_until(at).await;
    }
}

async fn strata_throughput(agents: usize, mode: Mode) -> Value {
    let mut strata = Strata::new();
    strata.populate(agents).await;
    let (stop, stopped) = watch::channel(false);
    let driver = tokio::spawn(drive(strata.scheduler(), strata.ready.clone(), stopped));
    strata.exchange(1).await;
    let mut times: Vec<Duration> = Vec::new();
    while !mode.enough(&times, THROUGHPUT_REPETITIONS) {
        times.push(strata.exchange(MESSAGES_PER_AGENT).await);
    }
    stop.send(true).unwrap();
    driver.await.unwrap();
    throughput_figure("strata", agents, &mut times)
}

/// Agents created per second, and one heartbeat cycle over the last pool, all idle.
async fn strata_create_and_tick(agents: usize, mode: Mode) -> (Value, Value) {
    let mut times = Vec::new();
    let mut last = None;
    while !mode.enough(&times, CREATE_REPETITIONS) {
        // The previous pool is dropped first, untimed.
        drop(last.take());
        let mut strata = Strata::new();
        let start = Instant::now();
        strata.populate(agents).await;
        times.push(start.elapsed());
        assert_eq!(strata.pool.len(), agents);
        last = Some(strata);
    }
    let create = create_figure("strata", agents, &mut times);

    let strata = last.expect("at least one repetition");
    let mut scheduler = strata.scheduler();
    // The first cycle asks each newly added agent once whether it has work: not timed.
    let report = scheduler.tick().await;
    assert_eq!((report.started, report.idle), (0, agents), "every agent must be idle");
    let ticks = if mode == Mode::Smoke { 1 } else { TICKS };
    let mut times = Vec::with_capacity(ticks);
    for _ in 0..ticks {
        let start = Instant::now();
        let report = scheduler.tick().await;
        times.push(start.elapsed());
        assert_eq!(report.idle, agents);
    }
    let median = median(&mut times);
    let idle = json!({
        "id": format!("strata/idle/{agents}"),
        "agents": agents,
        "tick_us": round(median.as_secs_f64() * 1e6),
        "ticks": ticks,
    });
    (create, idle)
}

// ---------------------------------------------------------------------------------------------
// ractor

/// An actor whose handler does nothing but count, so the timing task knows when all is done.
struct NoopActor;

impl Actor for NoopActor {
    type Msg = u64;
    type State = Arc<Progress>;
    type Arguments = Arc<Progress>;

    async fn pre_start(
        &self,
        _myself: ActorRef<Self::Msg>,
        progress: Arc<Progress>,
    ) -> Result<Self::State, ActorProcessingErr> {
        Ok(progress)
    }

    async fn handle(
        &self,
        _myself: ActorRef<Self::Msg>,
        _message: Self::Msg,
        progress: &mut Self::State,
    ) -> Result<(), ActorProcessingErr> {
        progress.add(1);
        Ok(())
    }
}

/// `agents` actors, spawned one after the other.
async fn spawn_actors(agents: usize, progress: &Arc<Progress>) -> Vec<ActorRef<u64>> {
    let mut actors = Vec::with_capacity(agents);
    for _ in 0..agents {
        let (actor, _handle) = Actor::spawn(None, NoopActor, progress.clone()).await.unwrap();
        actors.push(actor);
    }
    actors
}

async fn stop_actors(actors: Vec<ActorRef<u64>>) {
    for actor in actors {
        actor.stop_and_wait(None, None).await.unwrap();
    }
}

async fn ractor_exchange(actors: &[ActorRef<u64>], progress: &Progress, rounds: usize) -> Duration {
    progress.expect(rounds * actors.len());
    let start = Instant::now();
    let mut n = 0_u64;
    for _ in 0..rounds {
        for actor in actors {
            actor.cast(n).unwrap();
            n += 1;
        }
    }
    progress.reached().await;
    start.elapsed()
}

async fn ractor_throughput(agents: usize, mode: Mode) -> Value {
    let progress = Arc::new(Progress::default());
    let actors = spawn_actors(agents, &progress).await;
    ractor_exchange(&actors, &progress, 1).await;
    let mut times = Vec::new();
    while !mode.enough(&times, THROUGHPUT_REPETITIONS) {
        times.push(ractor_exchange(&actors, &progress, MESSAGES_PER_AGENT).await);
    }
    stop_actors(actors).await;
    throughput_figure("ractor", agents, &mut times)
}

async fn ractor_create(agents: usize, mode: Mode) -> Value {
    let progress = Arc::new(Progress::default());
    let mut times = Vec::new();
    while !mode.enough(&times, CREATE_REPETITIONS) {
        let start = Instant::now();
        let actors = spawn_actors(agents, &progress).await;
        times.push(start.elapsed());
        stop_actors(actors).await;
    }
    create_figure("ractor", agents, &mut times)
}

// ---------------------------------------------------------------------------------------------
// Memory, in a child process per figure

/// Runs this binary again as `--memory RUNTIME N` and reads the figure it prints.
fn memory_figure(runtime: &str, agents: usize, mode: Mode) -> Value {
    let exe = std::env::current_exe().unwrap();
    let mut child = std::process::Command::new(exe);
    child.args(["--memory", runtime, &agents.to_string()]);
    if mode != Mode::Smoke {
        child.arg("--bench");
    }
    let output = child.stderr(std::process::Stdio::inherit()).output().unwrap();
    assert!(output.status.success(), "the memory child for {runtime} failed: {}", output.status);
    let stdout = String::from_utf8(output.stdout).unwrap();
    let line = stdout.lines().last().expect("the memory child prints its figure");
    serde_json::from_str(line).unwrap()
}

/// Creates `agents` agents of `runtime` and measures the growth of the resident set.
fn memory_child(runtime: &str, agents: usize) -> Value {
    let rt = self::runtime();
    let bytes = match runtime {
        "strata" => run(&rt, async move {
            let mut strata = Strata::new();
            let before = resident_bytes();
            strata.populate(agents).await;
            let after = resident_bytes();
            assert_eq!(strata.pool.len(), agents);
            after.saturating_sub(before)
        }),
        "ractor" => run(&rt, async move {
            let progress = Arc::new(Progress::default());
            let before = resident_bytes();
            let actors = spawn_actors(agents, &progress).await;
            let after = resident_bytes();
            assert_eq!(actors.len(), agents);
            after.saturating_sub(before)
        }),
        other => panic!("no runtime `{other}`: expected strata or ractor"),
    };
    json!({
        "id": format!("{runtime}/memory/{agents}"),
        "agents": agents,
        "bytes_per_agent": round(bytes as f64 / agents as f64),
    })
}

// ---------------------------------------------------------------------------------------------
// Figures

fn throughput_figure(runtime: &str, agents: usize, times: &mut [Duration]) -> Value {
    let messages = agents * MESSAGES_PER_AGENT;
    let median = median(times);
    json!({
        "id": format!("{runtime}/throughput/{agents}"),
        "agents": agents,
        "messages": messages,
        "messages_per_s": round(messages as f64 / median.as_secs_f64()),
        "median_ms": round(median.as_secs_f64() * 1e3),
        "repetitions": times.len(),
    })
}

fn create_figure(runtime: &str, agents: usize, times: &mut [Duration]) -> Value {
    let median = median(times);
    json!({
        "id": format!("{runtime}/create/{agents}"),
        "agents": agents,
        "agents_per_s": round(agents as f64 / median.as_secs_f64()),
        "median_ms": round(median.as_secs_f64() * 1e3),
        "repetitions": times.len(),
    })
}

fn median(times: &mut [Duration]) -> Duration {
    times.sort();
    times[times.len() / 2]
}

/// To three decimals: figures are read by people.
fn round(value: f64) -> f64 {
    (value * 1e3).round() / 1e3
}
