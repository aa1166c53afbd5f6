//! Agents per worker at steady state (#19): what one worker of `agent_pool::placement` costs to
//! keep a placed run's agents hosted while they have nothing to do, and whether it keeps them.
//!
//! For each size in [`SIZES`] (agents; [`SIZES_VAR`] names others, such as `100,10000`), on a
//! `nats-server` of its own (nats-store's `TestServer`, JetStream in a temporary directory: the
//! registry of workers is one per server, so no other test or bench sees this worker, nor this
//! bench theirs), and a tokio multi-thread runtime of its own:
//!
//! - one [`Worker`] in this process, with every agent in its filter and a capacity of exactly
//!   the run's agents, builds the run's team on `TeamServices::on_nats` (the rule-based
//!   reasoner, a temporary workspace);
//! - once it has announced itself, the run is placed ([`Registry::publish`], on a connection of
//!   its own, as the coordinating process would): one top power, leads of
//!   [`EXECUTORS_PER_LEAD`] executors each (`max_subordinates` raised to fit) and the
//!   executors, the given number of agents in all, a heartbeat of [`HEARTBEAT`] (the period of
//!   the worker's lease renewals too). No task is submitted and no coordinator hosts the run:
//!   the agents stay idle.
//! - `place_ms`: from the publish until the worker's [`WorkerEvent::Hosting`] events cover
//!   every agent: the worker's next beat (at most `WORKER_BEAT`, 1 s, away) joins the run, then
//!   takes a lease per agent, one after the other, for at most one heartbeat per beat, and
//!   creates those with one `Team::join` (so a large run comes in a few groups);
//!   `host_ms`, the part from the worker's `Joined` event.
//! - after [`SETTLE`] (the agents' first heartbeats), over a window of [`WINDOW`]:
//!   `cpu_percent_of_one_core`, the CPU time (user and system, `/proc/self/stat`) this process
//!   spent per second of the window (100 is one core busy; the process holds the worker, its
//!   team and the idle coordinator's connection); `server_cpu_percent_of_one_core`, the same
//!   for the `nats-server`; `lost_leases`, the agents of the worker's [`WorkerEvent::Lost`]
//!   events (a lease not renewed in time) and `troubles` its `Trouble` events;
//!   `missed_heartbeats`, the `AuditEvent::MissedHeartbeat` records appended (an agent that did
//!   not answer its cycle); `audit_records` and `bus_messages`, everything appended to the
//!   audit log and sent on the bus (an idle team sends nothing); `held`, the agents the worker
//!   still leases after it ([`placement::placement`]).
//! - `lost_before_window`: the agents lost from the publish to the window (a worker that took
//!   longer to lease and create a group than its leases live would lose it; the worker renews a
//!   group's leases once it is created, before its agents act).
//!
//! `--quick` (what `cargo xtask bench --quick` passes) halves the window. Each line of output is
//! one size; every event of the worker but its joining and the first hosting of every agent is
//! printed too (none is expected). Under `cargo bench`, `main` writes
//! `<target>/strata-bench/placement_agents_per_worker.json`, where `cargo xtask bench` picks it
//! up: the largest size's figures at the top level (`lost_leases`, `missed_heartbeats` and
//! `lost_before_window` summed over every size), every size's in `runs`. Run without `--bench`
//! (as `cargo test --benches` does) or with `--test`, one small run over a short window checks
//! that it works and writes nothing. Needs `nats-server` on the `PATH` (Debian's nats-server
//! package); the server at `STRATA_NATS_URL` is not used. Linux only (`/proc`).
#![allow(missing_docs)]
#![allow(clippy::unwrap_used, clippy::expect_used, reason = "benchmarks")]
#![allow(
    clippy::print_stdout,
    clippy::print_stderr,
    reason = "the figures are printed, and why the bench cannot run"
)]

mod support;

use std::collections::BTreeSet;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use agent_core::tools::ToolContext;
use agent_core::{AuditEvent, AuditLog, NatsAuditLog, RuleBasedReasoner};
use agent_layers::{BottomSpec, MidSpec, TopSpec};
use agent_pool::placement::{
    self, HostedRun, PlacedRun, REGISTRY, Registry, RunBuilder, Worker, WorkerConfig, WorkerEvent,
    WorkerFilter,
};
use agent_pool::{AgentSpec, RoleSpec, TeamServices, TeamSpec};
use agent_state::{AgentConfig, AgentLayer, RunId};
use async_trait::async_trait;
use message_bus::NatsBus;
use nats_store::{NatsStore, TestServer};
use serde_json::json;
use support::target_dir;
use tokio::sync::watch;

/// The runs' sizes, in agents, under `cargo bench`.
const SIZES: [usize; 4] = [50, 200, 1_000, 10_000];
/// Other sizes, such as `100,10000`.
const SIZES_VAR: &str = "STRATA_PLACEMENT_AGENTS";
/// The one run's size of a smoke run (`cargo test --benches`).
const SMOKE_SIZE: usize = 10;
/// The team's heartbeat: also the period of the worker's lease renewals.
const HEARTBEAT: Duration = Duration::from_secs(1);
/// Executors per lead (the last lead may have fewer).
const EXECUTORS_PER_LEAD: usize = 20;
/// From all agents hosted to the window: their first heartbeats.
const SETTLE: Duration = Duration::from_secs(3);
/// The window measured, under `cargo bench` (half of it with `--quick`).
const WINDOW: Duration = Duration::from_secs(10);
/// The longest the bench waits for the worker (announced, every agent hosted, stopped).
const PATIENCE: Duration = Duration::from_secs(120);
/// The worker's id.
const WORKER_ID: &str = "bench-worker";
/// The figure's id in the `cargo xtask bench` table.
const ID: &str = "placement/agents_per_worker";
/// The unit of the CPU times in `/proc/<pid>/stat` (`USER_HZ`, 100 on Linux).
const TICKS_PER_S: f64 = 100.0;

/// What one size's run measured.
struct Measurement {
    agents: usize,
    /// From the publish to every agent hosted.
    place: Duration,
    /// From the worker's `Joined` to every agent hosted.
    host: Duration,
    /// `Hosting` events it took (groups of agents hosted together).
    groups: usize,
    window: Duration,
    cpu_percent: f64,
    server_cpu_percent: f64,
    /// The worker's events in the window.
    during: Tally,
    /// Its events from the publish to the window, but for its `Joined` and the `Hosting`
    /// events that first covered every agent.
    before: Tally,
    missed: usize,
    audit_records: usize,
    bus_messages: u64,
    /// Agents leased by the worker after the window.
    held: usize,
    /// From the worker's stop to its end (teams stopped, leases released).
    stop: Duration,
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let has = |flag: &str| args.iter().any(|arg| arg == flag);
    let full = has("--bench") && !has("--test");
    let sizes = match std::env::var(SIZES_VAR) {
        Ok(sizes) => sizes
            .split(',')
            .map(|size| match size.trim().parse::<usize>() {
                Ok(size) if size >= 3 => size,
                _ => {
                    eprintln!("{SIZES_VAR}: `{size}` is not a number of agents of 3 or more");
                    std::process::exit(1);
                }
            })
            .collect(),
        Err(_) if full => SIZES.to_vec(),
        Err(_) => vec![SMOKE_SIZE],
    };
    let (settle, window) = match (full, has("--quick")) {
        (true, false) => (SETTLE, WINDOW),
        (true, true) => (SETTLE, WINDOW / 2),
        (false, _) => (HEARTBEAT, HEARTBEAT * 2),
    };
    let mut runs = Vec::new();
    for agents in sizes {
        let data = tempfile::tempdir().unwrap();
        let server = TestServer::with_jetstream(data.path()).unwrap_or_else(|e| {
            eprintln!(
                "the placement bench starts a nats-server of its own and needs `nats-server` on the PATH (Debian's nats-server package): {e}"
            );
            std::process::exit(1);
        });
        // A runtime per run: nothing of one run (connections, tasks) lives on into the next
        // one's window.
        let rt = tokio::runtime::Builder::new_multi_thread().enable_all().build().unwrap();
        let measured = rt.block_on(measure(&server.url(), agents, settle, window));
        rt.shutdown_timeout(Duration::from_secs(5));
        drop(server);
        print(&measured);
        runs.push(measured);
    }
    if full {
        write_figure(&runs);
    }
}

fn print(m: &Measurement) {
    println!(
        "{ID}: {} agents on one worker, idle, heartbeat {} s: this process {:.1}% of one core, \
         nats-server {:.1}%, over {:.1} s; in it {} leases lost, {} heartbeats missed, {} audit \
         records and {} bus messages, {} of {} agents held after it; placed in {:.0} ms from \
         the publish ({:.0} ms from the worker's join, {} group(s)); stopped in {:.0} ms",
        m.agents,
        HEARTBEAT.as_secs_f64(),
        m.cpu_percent,
        m.server_cpu_percent,
        m.window.as_secs_f64(),
        m.during.lost,
        m.missed,
        m.audit_records,
        m.bus_messages,
        m.held,
        m.agents,
        ms(m.place),
        ms(m.host),
        m.groups,
        ms(m.stop),
    );
    for (when, tally) in [("before the window", &m.before), ("in the window", &m.during)] {
        if tally.lost + tally.rehosted + tally.troubles > 0 {
            println!(
                "{ID}: {} agents, {when}: {} agents lost, {} hosted again, {} troubles (printed \
                 above)",
                m.agents, tally.lost, tally.rehosted, tally.troubles
            );
        }
    }
}

fn ms(duration: Duration) -> f64 {
    duration.as_secs_f64() * 1e3
}

/// Writes the figure to `<target>/strata-bench/placement_agents_per_worker.json`.
fn write_figure(runs: &[Measurement]) {
    let round = |value: f64| (value * 100.0).round() / 100.0;
    let run = |m: &Measurement| {
        json!({
            "agents": m.agents,
            "cpu_percent_of_one_core": round(m.cpu_percent),
            "server_cpu_percent_of_one_core": round(m.server_cpu_percent),
            "lost_leases": m.during.lost,
            "missed_heartbeats": m.missed,
            "troubles": m.during.troubles,
            "audit_records": m.audit_records,
            "bus_messages": m.bus_messages,
            "held": m.held,
            "window_s": round(m.window.as_secs_f64()),
            "place_ms": ms(m.place).round(),
            "host_ms": ms(m.host).round(),
            "hosting_groups": m.groups,
            "lost_before_window": m.before.lost,
            "stop_ms": ms(m.stop).round(),
        })
    };
    let largest = runs.iter().max_by_key(|m| m.agents).unwrap();
    let sum = |count: fn(&Measurement) -> usize| runs.iter().map(count).sum::<usize>();
    let figure = json!({
        "id": ID,
        "agents": largest.agents,
        "cpu_percent_of_one_core": round(largest.cpu_percent),
        "server_cpu_percent_of_one_core": round(largest.server_cpu_percent),
        "place_ms": ms(largest.place).round(),
        "heartbeat_ms": HEARTBEAT.as_millis() as u64,
        "lost_leases": sum(|m| m.during.lost),
        "missed_heartbeats": sum(|m| m.missed),
        "lost_before_window": sum(|m| m.before.lost),
        "runs": runs.iter().map(run).collect::<Vec<_>>(),
    });
    let dir = target_dir().join("strata-bench");
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("placement_agents_per_worker.json");
    std::fs::write(&path, format!("{figure}\n")).unwrap();
    println!("{ID}: written to {}", path.display());
}

/// One run of `agents` agents on one worker, on the server at `url`.
async fn measure(url: &str, agents: usize, settle: Duration, window: Duration) -> Measurement {
    let spec = team(agents);
    let run_id = format!("agents-{agents}");
    let workspace = tempfile::tempdir().unwrap();

    // The worker, on a connection of its own.
    let worker_store = NatsStore::connect(url, REGISTRY).await.unwrap();
    let builder = Arc::new(Builder {
        server: worker_store.clone(),
        spec: spec.clone(),
        workspace: workspace.path().to_owned(),
    });
    let config =
        WorkerConfig { id: WORKER_ID.into(), filter: WorkerFilter::default(), capacity: agents };
    let (worker, mut events) = Worker::new(&worker_store, config, builder).await.unwrap();
    drop(worker_store);
    let (stop, stopped) = watch::channel(false);
    let working = tokio::spawn(worker.run(stopped));

    // The coordinating side, on another connection: waits for the worker, places the run.
    let coordinator = NatsStore::connect(url, &run_id).await.unwrap();
    let registry = Registry::open(&coordinator).await.unwrap();
    patiently("the worker to announce itself", async {
        while !registry.workers().await.unwrap().iter().any(|w| w.id == WORKER_ID) {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await;
    let run = PlacedRun::new(RunId::parse(&run_id).unwrap(), &spec, serde_json::Value::Null);
    let published = Instant::now();
    registry.publish(&run).await.unwrap();
    let mut hosted = BTreeSet::new();
    let (mut joined, mut groups, mut before) = (None, 0, Tally::default());
    patiently("every agent hosted", async {
        while hosted.len() < agents {
            let event = events.recv().await.expect("the worker ended");
            match event {
                WorkerEvent::Joined { .. } => joined = Some(Instant::now()),
                WorkerEvent::Hosting { agents, .. } => {
                    groups += 1;
                    hosted.extend(agents);
                }
                WorkerEvent::Refused { reason, .. } => {
                    panic!("the worker refused the run: {reason}")
                }
                other => before.count(other),
            }
        }
    })
    .await;
    let all_hosted = Instant::now();
    let place = all_hosted - published;
    let host = all_hosted - joined.expect("a Joined event before Hosting");
    let leased = held(&coordinator, &run).await;
    if leased < agents {
        eprintln!(
            "{ID}: {agents} agents: only {leased} leased by the worker when it reported them all hosted"
        );
    }

    // Steady state.
    tokio::time::sleep(settle).await;
    while let Ok(event) = events.try_recv() {
        before.count(event);
    }
    let audit = NatsAuditLog::open(&coordinator).await.unwrap();
    let audit_from = audit.records(None).await.unwrap().len() as u64;
    let bus_from = bus_sequence(&coordinator).await;
    let server_pid = child_pid("nats-server");
    let (cpu_from, server_from) = (cpu_ticks("self"), cpu_ticks(&server_pid));
    let start = Instant::now();
    tokio::time::sleep(window).await;
    let (cpu_to, server_to) = (cpu_ticks("self"), cpu_ticks(&server_pid));
    let window = start.elapsed();
    let percent = |ticks: u64| ticks as f64 / TICKS_PER_S / window.as_secs_f64() * 100.0;
    let (cpu_percent, server_cpu_percent) =
        (percent(cpu_to - cpu_from), percent(server_to - server_from));

    let mut during = Tally::default();
    while let Ok(event) = events.try_recv() {
        during.count(event);
    }
    let appended = audit.records_from(audit_from).await.unwrap();
    let missed =
        appended.iter().filter(|r| matches!(r.event, AuditEvent::MissedHeartbeat { .. })).count();
    let bus_messages = bus_sequence(&coordinator).await - bus_from;
    let held = held(&coordinator, &run).await;

    let stopping = Instant::now();
    stop.send(true).unwrap();
    patiently("the worker to stop", async { working.await.unwrap() }).await;
    let stop = stopping.elapsed();
    Measurement {
        agents,
        place,
        host,
        groups,
        window,
        cpu_percent,
        server_cpu_percent,
        during,
        before,
        missed,
        audit_records: appended.len(),
        bus_messages,
        held,
        stop,
    }
}

/// A worker's events once every agent was hosted, counted (and printed: none is expected).
#[derive(Default)]
struct Tally {
    /// The agents of `Lost` events: leases not renewed in time.
    lost: usize,
    /// The agents of `Hosting` events: hosted again after a loss.
    rehosted: usize,
    /// `Trouble` events.
    troubles: usize,
}

impl Tally {
    fn count(&mut self, event: WorkerEvent) {
        match event {
            WorkerEvent::Lost { agents, reason, .. } => {
                eprintln!("{ID}: the worker lost {} agents: {reason}", agents.len());
                self.lost += agents.len();
            }
            WorkerEvent::Hosting { agents, .. } => {
                eprintln!("{ID}: the worker hosts {} agents again", agents.len());
                self.rehosted += agents.len();
            }
            WorkerEvent::Trouble { error, .. } => {
                eprintln!("{ID}: the worker's trouble: {error}");
                self.troubles += 1;
            }
            other => eprintln!("{ID}: unexpected worker event: {other:?}"),
        }
    }
}

/// Waits for `what` up to [`PATIENCE`], else fails the bench naming it.
async fn patiently<T>(what: &str, work: impl Future<Output = T>) -> T {
    tokio::time::timeout(PATIENCE, work)
        .await
        .unwrap_or_else(|_| panic!("waited {} s for {what}", PATIENCE.as_secs()))
}

/// How many of `run`'s agents the worker holds leases of.
async fn held(store: &NatsStore, run: &PlacedRun) -> usize {
    let placed = placement::placement(store, run).await.unwrap();
    placed.values().filter(|holder| holder.as_deref() == Some(WORKER_ID)).count()
}

/// The last sequence number of the run's bus stream: how many messages were ever sent on it.
async fn bus_sequence(store: &NatsStore) -> u64 {
    let mut stream = store.jetstream().get_stream(store.name(NatsBus::STREAM)).await.unwrap();
    stream.info().await.unwrap().state.last_sequence
}

/// The user and system CPU time of process `pid` (`self` for this one) so far, in ticks of
/// [`TICKS_PER_S`].
fn cpu_ticks(pid: &str) -> u64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .expect("the CPU time is read from /proc/<pid>/stat (Linux only)");
    // After the command's name in parentheses: state (field 3), ..., utime (14), stime (15).
    let (_, fields) = stat.rsplit_once(')').unwrap();
    let fields: Vec<&str> = fields.split_whitespace().collect();
    let field = |n: usize| fields[n - 3].parse::<u64>().unwrap();
    field(14) + field(15)
}

/// The process id of this process's child named `name` (the `TestServer`'s).
fn child_pid(name: &str) -> String {
    let me = std::process::id().to_string();
    for entry in std::fs::read_dir("/proc").unwrap() {
        let entry = entry.unwrap();
        let pid = entry.file_name().to_string_lossy().into_owned();
        if !pid.bytes().all(|b| b.is_ascii_digit()) {
            continue;
        }
        let Ok(stat) = std::fs::read_to_string(entry.path().join("stat")) else { continue };
        // `pid (comm) state ppid ...`, where the command's name may hold anything.
        let (Some(open), Some(close)) = (stat.find('('), stat.rfind(')')) else { continue };
        let comm = &stat[open + 1..close];
        let ppid = stat[close + 1..].split_whitespace().nth(1);
        if comm == name && ppid == Some(me.as_str()) {
            return pid;
        }
    }
    panic!("no child process named {name}");
}

/// Builds the run's team on the worker: the bench's spec, on the run's namespace.
struct Builder {
    /// The worker's connection.
    server: NatsStore,
    spec: TeamSpec,
    workspace: PathBuf,
}

#[async_trait]
impl RunBuilder for Builder {
    async fn build(&self, run: &PlacedRun) -> Result<HostedRun, placement::BuildError> {
        let store = self.server.with_namespace(&run.run_id).map_err(|e| e.to_string())?;
        let workspace = ToolContext::new(&self.workspace).map_err(|e| e.to_string())?;
        let services = TeamServices::on_nats(&store, workspace, Arc::new(RuleBasedReasoner::new()))
            .await
            .map_err(|e| e.to_string())?;
        Ok(HostedRun { spec: self.spec.clone(), services, store })
    }
}

/// One top power, `(agents - 1) / (EXECUTORS_PER_LEAD + 1)` leads (rounded up) and the rest
/// executors, spread evenly over the leads: `agents` in all.
fn team(agents: usize) -> TeamSpec {
    assert!(agents >= 3, "a team of a power, a lead and an executor at least");
    let leads = (agents - 1).div_ceil(EXECUTORS_PER_LEAD + 1);
    let executors = agents - 1 - leads;
    let per_lead = executors.div_ceil(leads);
    let mut members = vec![AgentSpec {
        config: AgentConfig::new("top", "Power top", AgentLayer::Top).with_role("governance"),
        role: RoleSpec::Top(TopSpec {
            power_type: "top".into(),
            vote_weight: 1.0,
            signature_authority: vec!["plan".into()],
        }),
    }];
    for lead in 0..leads {
        members.push(AgentSpec {
            config: AgentConfig::new(
                format!("lead-{lead}"),
                format!("Lead {lead}"),
                AgentLayer::Mid,
            )
            .with_supervisor("top"),
            role: RoleSpec::Mid(MidSpec {
                domain: format!("domain-{lead}"),
                max_subordinates: per_lead,
            }),
        });
    }
    for executor in 0..executors {
        let id = format!("exec-{executor}");
        members.push(AgentSpec {
            config: AgentConfig::new(id.as_str(), format!("Executor {id}"), AgentLayer::Bottom)
                .with_supervisor(format!("lead-{}", executor % leads)),
            role: RoleSpec::Bottom(BottomSpec::new(["read_file", "write_file"])),
        });
    }
    let mut spec = TeamSpec::new(members);
    spec.heartbeat = HEARTBEAT;
    spec.max_agents = agents;
    spec
}
