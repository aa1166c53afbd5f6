//! Spawning and speaking through a supervising lead's tool loop, on a running team
//! on the in-memory services, real time, tokio's multi-thread runtime (one worker per core, as
//! `strata` runs):
//!
//! - **`pool/spawn_agent`**: agents spawned per second. A goal is planned (by a scripted
//!   reasoner) into steps for one lead of a role that enables a worker role; the lead's loop
//!   for each step calls `spawn_agent` [`SPAWNS_PER_STEP`] times in a row, then finishes. A
//!   loop may make at most 39 calls (`MAX_TOOL_CALLS_PER_GOAL_STEP` is 40, and the loop must
//!   still finish), so the [`SPAWNS`] spawns are made by several steps' loops, all in the
//!   lead's one turn. Timed from `Team::submit` (planning, signatures and the lead's creation
//!   included) to the moment the lead's reasoner is asked its next action after the last spawn
//!   returned: the agent created, audited and sent its task. Each spawned worker takes its task
//!   and finishes at once, concurrently with the spawning, as workers do.
//! - **`pool/speak_to_agent_round_trip`**: the round trip of `speak_to_agent` on the in-memory
//!   bus, [`SPEAKS`] of them. Each step's loop spawns one worker, which finishes its task at
//!   once and stays idle, then speaks to it [`SPEAKS_PER_STEP`] times, one after the other; the
//!   steps run one after the other (each `after` the one before). A round trip is timed from
//!   the moment the lead's reasoner returns the call to the moment it is asked again with the
//!   reply in its history: the message sent, the lead's turn ended, the worker woken, its
//!   answer (a scripted reply) sent, the lead woken and its loop resumed.
//! - **`pool/speak_to_agent_round_trip_after`**: the same round trip by how many calls the
//!   loop had made before it: 1, 10 and 38 (a goal step's loop makes at most
//!   `MAX_TOOL_CALLS_PER_GOAL_STEP`, 40, and its reasoner is not asked again after the 40th,
//!   so 100 cannot be reached). Each step's loop spawns one worker and speaks to it until it
//!   has made 39 calls, then finishes; only the round trips after
//!   [`SPEAK_AFTER`] earlier calls are timed. Flat means a turn's cost does not grow with
//!   the loop's history (its saved state, its journal).
//!
//! The heartbeat is an hour away, so every turn is a wake-up on mail, never a heartbeat: a
//! lost wake-up stalls a run, which then panics after [`PATIENCE`] with what every agent is
//! doing (status, a turn in progress, a failed turn's retry, the mail in its inbox). `main`
//! prints the figures and, under `cargo bench`, writes them to
//! `<target>/strata-bench/spawn_agent.json` and `speak_round_trip.json`, where `cargo xtask
//! bench` picks them up. `--quick` (what `cargo xtask bench --quick` passes) runs fewer
//! repetitions; run without `--bench` (`cargo test --benches`) or with `--test`, each workload
//! runs once on a few agents as a smoke test and writes nothing.
#![allow(missing_docs)]
#![allow(clippy::unwrap_used, clippy::expect_used, reason = "benchmarks")]
#![allow(clippy::print_stdout, reason = "the figures are printed")]

mod support;

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use support::target_dir;

use agent_core::spawn::{SPAWN_AGENT, SPEAK_TO_AGENT};
use agent_core::tools::{ToolContext, ToolRegistry};
use agent_core::{
    InMemoryAuditLog, InMemoryStateStore, NextAction, Plan, ReasoningRequest, ScriptedAnswer,
    ScriptedReasoner, TokioClock, ToolCall, ToolCallRecord,
};
use agent_layers::TopSpec;
use agent_pool::{AgentSpec, RoleSpec, Team, TeamServices, TeamSpec};
use agent_state::{
    AgentConfig, AgentLayer, LeadRequest, PlanStep, Role, RoleBook, StepTarget, Task, TaskOutcome,
    Timestamp,
};
use governance::InMemoryGovernance;
use message_bus::InMemoryBus;
use serde_json::{Value, json};
use tokio::runtime::Runtime;
use tokio::sync::Notify;
use whiteboard::InMemoryWhiteboard;

/// Agents spawned in one run.
const SPAWNS: usize = 1_000;
/// `spawn_agent` calls of one step's loop: the plan has `SPAWNS / SPAWNS_PER_STEP` steps.
const SPAWNS_PER_STEP: usize = 25;
/// Round trips of `speak_to_agent` in one run.
const SPEAKS: usize = 500;
/// `speak_to_agent` calls of one step's loop (after its one `spawn_agent`): the plan has
/// `SPEAKS / SPEAKS_PER_STEP` steps.
const SPEAKS_PER_STEP: usize = 25;
const _: () =
    assert!(SPAWNS.is_multiple_of(SPAWNS_PER_STEP) && SPEAKS.is_multiple_of(SPEAKS_PER_STEP));
/// The pool's limit: room for every spawned agent.
const MAX_AGENTS: usize = 10_000;
/// The longest a run may take before the bench gives up on it.
const PATIENCE: Duration = Duration::from_secs(120);
/// The figures' ids in the `cargo xtask bench` table.
const SPAWN_ID: &str = "pool/spawn_agent";
const SPEAK_ID: &str = "pool/speak_to_agent_round_trip";
const SPEAK_AFTER_ID: &str = "pool/speak_to_agent_round_trip_after";
/// The round trips timed by `SPEAK_AFTER_ID`: after this many earlier calls of the loop.
const SPEAK_AFTER: [usize; 3] = [1, 10, 38];
/// Steps of one run of `SPEAK_AFTER_ID`.
const SPEAK_AFTER_STEPS: usize = 25;

/// How much to measure.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Mode {
    /// `cargo bench`.
    Full,
    /// `cargo bench -- --quick`.
    Quick,
    /// Once, on a few agents, nothing written (`cargo test --benches`, `-- --test`).
    Smoke,
}

/// The size of one workload's run, and how many runs.
#[derive(Clone, Copy)]
struct Size {
    steps: usize,
    calls_per_step: usize,
    runs: usize,
}

impl Mode {
    fn spawn(self) -> Size {
        let runs = match self {
            Mode::Full => 15,
            Mode::Quick => 5,
            Mode::Smoke => return Size { steps: 2, calls_per_step: 5, runs: 1 },
        };
        Size { steps: SPAWNS / SPAWNS_PER_STEP, calls_per_step: SPAWNS_PER_STEP, runs }
    }

    fn speak_after(self) -> Size {
        let runs = match self {
            Mode::Full => 8,
            Mode::Quick => 2,
            Mode::Smoke => return Size { steps: 1, calls_per_step: 12, runs: 1 },
        };
        let calls = agent_layers::MAX_TOOL_CALLS_PER_GOAL_STEP - 1;
        Size { steps: SPEAK_AFTER_STEPS, calls_per_step: calls, runs }
    }

    fn speak(self) -> Size {
        let runs = match self {
            Mode::Full => 8,
            Mode::Quick => 2,
            Mode::Smoke => return Size { steps: 2, calls_per_step: 3, runs: 1 },
        };
        Size { steps: SPEAKS / SPEAKS_PER_STEP, calls_per_step: SPEAKS_PER_STEP, runs }
    }
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let has = |flag: &str| args.iter().any(|arg| arg == flag);
    let mode = match (has("--bench") && !has("--test"), has("--quick")) {
        (false, _) => Mode::Smoke,
        (true, true) => Mode::Quick,
        (true, false) => Mode::Full,
    };
    let rt = tokio::runtime::Builder::new_multi_thread().enable_all().build().unwrap();

    let (spawn, speak) = (mode.spawn(), mode.speak());
    if mode != Mode::Smoke {
        // Untimed warm-up: the first run of each pays for the allocator's first growth.
        run(&rt, spawn_run(spawn));
        run(&rt, speak_run(speak));
    }

    let spawned = spawn.steps * spawn.calls_per_step;
    let (mut times, mut firsts): (Vec<Duration>, Vec<Duration>) =
        (0..spawn.runs).map(|_| run(&rt, spawn_run(spawn))).unzip();
    times.sort();
    firsts.sort();
    let median = times[times.len() / 2];
    let first = firsts[firsts.len() / 2];
    let per_s = spawned as f64 / median.as_secs_f64();
    println!(
        "{SPAWN_ID}: {per_s:.0} spawns/s ({spawned} spawns in {:.1} ms from the submit, the \
         first after {:.1} ms; median of {} runs)",
        median.as_secs_f64() * 1e3,
        first.as_secs_f64() * 1e3,
        times.len()
    );

    let mut samples = Vec::new();
    for _ in 0..speak.runs {
        samples.extend(run(&rt, speak_run(speak)));
    }
    samples.sort_by(f64::total_cmp);
    let (p50, p99) = (percentile(&samples, 0.50), percentile(&samples, 0.99));
    println!("{SPEAK_ID}: p50 {p50:.1} µs, p99 {p99:.1} µs over {} round trips", samples.len());

    let speak_after = speak_after_figures(&rt, mode);

    if mode != Mode::Smoke {
        let round = |value: f64| (value * 10.0).round() / 10.0;
        let dir = target_dir().join("strata-bench");
        std::fs::create_dir_all(&dir).unwrap();
        let spawn_figure = json!({
            "id": SPAWN_ID,
            "spawns_per_s": round(per_s),
            "median_ms": round(median.as_secs_f64() * 1e3),
            "to_first_spawn_ms": round(first.as_secs_f64() * 1e3),
            "spawned": spawned,
            "runs": times.len(),
        });
        std::fs::write(dir.join("spawn_agent.json"), format!("{spawn_figure}\n")).unwrap();
        let speak_figure = json!({
            "id": SPEAK_ID,
            "p50_us": round(p50),
            "p99_us": round(p99),
            "round_trips": samples.len(),
        });
        std::fs::write(dir.join("speak_round_trip.json"), format!("{speak_figure}\n")).unwrap();
        let mut after = speak_after;
        if let Value::Object(fields) = &mut after {
            fields.insert("id".to_owned(), json!(SPEAK_AFTER_ID));
        }
        std::fs::write(dir.join("speak_round_trip_after.json"), format!("{after}\n")).unwrap();
        println!("{SPAWN_ID}, {SPEAK_ID}: written to {}", dir.display());
    }
}

/// Runs `work` as a task of `rt` (on a worker, like the agents), not on the calling thread.
fn run<T: Send + 'static>(rt: &Runtime, work: impl Future<Output = T> + Send + 'static) -> T {
    rt.block_on(async { tokio::spawn(work).await.unwrap() })
}

// ---------------------------------------------------------------------------------------------
// The team

fn top(id: &str, weight: f64) -> AgentSpec {
    AgentSpec {
        config: AgentConfig::new(id, id, AgentLayer::Top).with_role("governance"),
        role: RoleSpec::Top(TopSpec {
            power_type: id.into(),
            vote_weight: weight,
            signature_authority: vec!["plan".into()],
        }),
    }
}

/// Three powers, and two roles: a lead that may spawn workers, and a worker.
fn spec() -> TeamSpec {
    let lead = Role {
        description: "spawns and speaks to workers".into(),
        enabled_agents: vec!["worker".into()],
        ..Role::new("lead", AgentLayer::Mid)
    };
    let worker = Role {
        description: "does what it is told".into(),
        tools: vec!["read_file".into()],
        ..Role::new("worker", AgentLayer::Bottom)
    };
    let mut spec = TeamSpec::new(vec![top("top-a", 2.0), top("top-b", 1.0), top("top-c", 1.0)]);
    spec.roles = RoleBook::new([lead, worker]).unwrap();
    spec.max_agents = MAX_AGENTS;
    spec.heartbeat = Duration::from_secs(3600);
    spec
}

fn services(workspace: &std::path::Path, reasoner: Arc<ScriptedReasoner>) -> TeamServices {
    TeamServices {
        bus: Arc::new(InMemoryBus::new()),
        boards: Arc::new(InMemoryWhiteboard::new()),
        governance: Arc::new(InMemoryGovernance::new()),
        audit: Arc::new(InMemoryAuditLog::new()),
        clock: Arc::new(TokioClock::starting_at(Timestamp(1_700_000_000_000))),
        workspace: Arc::new(ToolContext::new(workspace).unwrap()),
        tools: Arc::new(ToolRegistry::with_builtins()),
        reasoner,
        state: Arc::new(InMemoryStateStore::new()),
        reasoners: BTreeMap::new(),
        agent_tools: BTreeMap::new(),
        role_reasoners: Default::default(),
        role_tools: Default::default(),
        costs: None,
        executor: None,
        events: agent_core::EventHub::default(),
    }
}

/// A plan of `steps` goal steps for one lead of role `lead` in domain `work`, each `after` the
/// one before when `chained`.
fn plan(steps: usize, chained: bool) -> Plan {
    let steps = (0..steps)
        .map(|n| {
            PlanStep::goal(
                format!("step-{n}"),
                format!("step {n}"),
                StepTarget::Domain("work".into()),
            )
            .with_after((chained && n > 0).then(|| format!("step-{}", n - 1)))
            .with_role("worker")
        })
        .collect();
    Plan { leads: vec![LeadRequest { role: "lead".into(), domain: "work".into() }], steps }
}

fn call(tool: &str, args: Value) -> ScriptedAnswer {
    ScriptedAnswer::Action(NextAction::Call(ToolCall { tool: tool.into(), args }))
}

fn finish(summary: &str) -> ScriptedAnswer {
    ScriptedAnswer::Action(NextAction::Finish { success: true, summary: summary.into() })
}

fn count(history: &[ToolCallRecord], tool: &str) -> usize {
    history.iter().filter(|r| r.call.tool == tool).count()
}

/// The lead's `n`th spawn. Each asks for something else: the runtime's loop guard stops a lead
/// that makes the same call `repeat_limit` (3) times in a row, which identical spawns are.
fn spawn_worker(n: usize) -> ScriptedAnswer {
    let task = format!("report back at once ({n})");
    call(SPAWN_AGENT, json!({"role_name": "worker", "task_prompt": task}))
}

/// Starts a team whose every agent reasons with `script`.
async fn start(
    script: impl Fn(&ReasoningRequest) -> ScriptedAnswer + Send + Sync + 'static,
) -> (Team, tempfile::TempDir) {
    let workspace = tempfile::tempdir().unwrap();
    let reasoner = Arc::new(ScriptedReasoner::from_fn(script));
    let team = Team::start(spec(), services(workspace.path(), reasoner)).await.unwrap();
    (team, workspace)
}

/// What every agent of a stalled run is doing, for the panic that ends the bench: its status
/// (or that a turn holds it), the heartbeat a failed turn's retry waits for, its current work
/// and the mail waiting in its inbox.
async fn stalled(team: &Team) -> String {
    let bus = &team.services().bus;
    let mut lines = vec![format!("heartbeats run: {}; the agents:", team.pool().cycles())];
    for slot in team.pool().all() {
        let mail = bus.pending(&agent_state::Address::Agent(slot.id().clone())).await;
        let state = match slot.agent().try_lock() {
            Ok(agent) => format!(
                "{:?}, retry due {:?}, work {:?}",
                agent.status(),
                agent.retry_due(),
                agent.current_work()
            ),
            Err(_) => "in a turn".to_owned(),
        };
        lines.push(format!("  {}: {state}, mail {mail:?}", slot.id()));
    }
    lines.join("\n")
}

/// Waits for the task to close (checking the run did what it should), and shuts the team down.
async fn close(team: Team, task: &str) {
    let Ok(outcome) = tokio::time::timeout(PATIENCE, team.wait(task)).await else {
        panic!("the task did not close; {}", stalled(&team).await);
    };
    assert!(matches!(outcome, TaskOutcome::Succeeded { .. }), "{outcome:?}");
    team.shutdown().await.unwrap();
}

// ---------------------------------------------------------------------------------------------
// Spawning

/// What the spawning script counts.
#[derive(Default)]
struct Spawns {
    /// Spawns returned, as the lead's reasoner saw them.
    returned: usize,
    /// Spawns refused.
    refused: Vec<String>,
    /// When the lead's reasoner returned the first `spawn_agent` call.
    first: Option<Instant>,
    /// When the last one returned.
    last: Option<Instant>,
}

/// One run: the time from submitting the goal until the lead's last spawn returned, and until
/// its reasoner returned the first `spawn_agent` call.
async fn spawn_run(size: Size) -> (Duration, Duration) {
    let target = size.steps * size.calls_per_step;
    let spawns = Arc::new(Mutex::new(Spawns::default()));
    let done = Arc::new(Notify::new());
    let script = {
        let (spawns, done) = (spawns.clone(), done.clone());
        move |request: &ReasoningRequest| match request {
            ReasoningRequest::Plan { .. } => ScriptedAnswer::Plan(plan(size.steps, false)),
            ReasoningRequest::NextAction { agent, history, .. }
                if agent.as_str().starts_with("lead") =>
            {
                let mut spawns = spawns.lock().unwrap();
                if let Some(last) = history.last().filter(|r| r.call.tool == SPAWN_AGENT) {
                    spawns.returned += 1;
                    if !last.success {
                        spawns.refused.push(last.output.clone());
                    }
                    if spawns.returned == target {
                        spawns.last = Some(Instant::now());
                        done.notify_one();
                    }
                }
                let spawned = count(history, SPAWN_AGENT);
                if spawned < size.calls_per_step {
                    spawns.first.get_or_insert_with(Instant::now);
                    spawn_worker(spawned)
                } else {
                    finish("spawned my workers")
                }
            }
            ReasoningRequest::NextAction { .. } => finish("reported at once"),
            _ => ScriptedAnswer::Fallback,
        }
    };
    let (team, _workspace) = start(script).await;
    let submitted = Instant::now();
    team.submit(Task::goal("spawn", "spawn workers")).await.unwrap();
    if tokio::time::timeout(PATIENCE, done.notified()).await.is_err() {
        let returned = spawns.lock().unwrap().returned;
        panic!("{returned} of {target} spawns returned; {}", stalled(&team).await);
    }
    let elapsed = {
        let spawns = spawns.lock().unwrap();
        assert!(spawns.refused.is_empty(), "spawns refused: {:?}", spawns.refused);
        let first = spawns.first.expect("the first spawn's time") - submitted;
        (spawns.last.expect("the last spawn's time") - submitted, first)
    };
    assert_eq!(team.pool().len(), 3 + 1 + target, "three powers, the lead and its workers");
    close(team, "spawn").await;
    elapsed
}

// ---------------------------------------------------------------------------------------------
// Speaking

/// What the speaking script measures.
#[derive(Default)]
struct Speaking {
    /// When the speak in flight was returned to the lead's loop.
    pending: Option<Instant>,
    /// Round trips, in µs.
    samples: Vec<f64>,
    /// Speaks that came back without a reply.
    failed: Vec<String>,
}

/// One run: each round trip's time, in µs.
async fn speak_run(size: Size) -> Vec<f64> {
    let speaking = Arc::new(Mutex::new(Speaking::default()));
    let script = {
        let speaking = speaking.clone();
        move |request: &ReasoningRequest| match request {
            ReasoningRequest::Plan { .. } => ScriptedAnswer::Plan(plan(size.steps, true)),
            ReasoningRequest::NextAction { agent, history, .. }
                if agent.as_str().starts_with("lead") =>
            {
                let mut speaking = speaking.lock().unwrap();
                if let Some(sent) = speaking.pending.take() {
                    // The loop resumes only with the reply (or after a timeout) in its history.
                    let elapsed = sent.elapsed().as_secs_f64() * 1e6;
                    match history.iter().rev().find(|r| r.call.tool == SPEAK_TO_AGENT) {
                        Some(reply) if reply.success => speaking.samples.push(elapsed),
                        other => speaking.failed.push(format!("{other:?}")),
                    }
                }
                let Some(first) = history.first() else { return spawn_worker(0) };
                let spoken = count(history, SPEAK_TO_AGENT);
                if spoken >= size.calls_per_step {
                    return finish("spoke to my worker");
                }
                let worker: Value = serde_json::from_str(&first.output).unwrap_or_default();
                speaking.pending = Some(Instant::now());
                // Numbered, as the spawns are, so that the loop guard sees no repeat.
                let message = format!("there? ({spoken})");
                call(SPEAK_TO_AGENT, json!({"agent_id": worker["agent_id"], "message": message}))
            }
            // The worker reports at once, then answers from idle.
            ReasoningRequest::NextAction { .. } => finish("reported at once"),
            ReasoningRequest::Answer { .. } => ScriptedAnswer::Reply("here".into()),
            _ => ScriptedAnswer::Fallback,
        }
    };
    let (team, _workspace) = start(script).await;
    team.submit(Task::goal("speak", "speak to workers")).await.unwrap();
    close(team, "speak").await;
    let speaking = std::mem::take(&mut *speaking.lock().unwrap());
    assert!(speaking.failed.is_empty(), "speaks without a reply: {:?}", speaking.failed);
    assert_eq!(speaking.samples.len(), size.steps * size.calls_per_step);
    speaking.samples
}

/// Runs `pool/speak_to_agent_round_trip_after` and prints its figures: p50 and p99 by the
/// number of earlier calls.
fn speak_after_figures(rt: &Runtime, mode: Mode) -> Value {
    let size = mode.speak_after();
    if mode != Mode::Smoke {
        run(rt, speak_after_run(size));
    }
    let mut by_earlier: BTreeMap<usize, Vec<f64>> = BTreeMap::new();
    for _ in 0..size.runs {
        for (earlier, sample) in run(rt, speak_after_run(size)) {
            by_earlier.entry(earlier).or_default().push(sample);
        }
    }
    // Flat fields (`p50_after_10_us`), as `cargo xtask bench` shows a figure's numbers.
    let mut figures = serde_json::Map::new();
    for (earlier, mut samples) in by_earlier {
        samples.sort_by(f64::total_cmp);
        let (p50, p99) = (percentile(&samples, 0.50), percentile(&samples, 0.99));
        println!(
            "{SPEAK_AFTER_ID}: after {earlier} earlier calls: p50 {p50:.1} µs, p99 {p99:.1} µs \
             over {} round trips",
            samples.len()
        );
        figures.insert(format!("p50_after_{earlier}_us"), json!((p50 * 10.0).round() / 10.0));
        figures.insert(format!("p99_after_{earlier}_us"), json!((p99 * 10.0).round() / 10.0));
    }
    Value::Object(figures)
}

/// One run of `pool/speak_to_agent_round_trip_after`: (earlier calls, round trip in µs) of the
/// timed round trips.
async fn speak_after_run(size: Size) -> Vec<(usize, f64)> {
    #[derive(Default)]
    struct Timed {
        pending: Option<(usize, Instant)>,
        samples: Vec<(usize, f64)>,
    }
    let timed = Arc::new(Mutex::new(Timed::default()));
    let script = {
        let timed = timed.clone();
        move |request: &ReasoningRequest| match request {
            ReasoningRequest::Plan { .. } => ScriptedAnswer::Plan(plan(size.steps, true)),
            ReasoningRequest::NextAction { agent, history, .. }
                if agent.as_str().starts_with("lead") =>
            {
                let mut timed = timed.lock().unwrap();
                if let Some((earlier, sent)) = timed.pending.take() {
                    timed.samples.push((earlier, sent.elapsed().as_secs_f64() * 1e6));
                }
                let Some(first) = history.first() else { return spawn_worker(0) };
                let made = history.iter().filter(|r| !r.event).count();
                if made >= size.calls_per_step {
                    return finish("spoke to my worker");
                }
                if SPEAK_AFTER.contains(&made) {
                    timed.pending = Some((made, Instant::now()));
                }
                let worker: Value = serde_json::from_str(&first.output).unwrap_or_default();
                let message = format!("there? ({made})");
                call(SPEAK_TO_AGENT, json!({"agent_id": worker["agent_id"], "message": message}))
            }
            ReasoningRequest::NextAction { .. } => finish("reported at once"),
            ReasoningRequest::Answer { .. } => ScriptedAnswer::Reply("here".into()),
            _ => ScriptedAnswer::Fallback,
        }
    };
    let (team, _workspace) = start(script).await;
    team.submit(Task::goal("speak", "speak to workers")).await.unwrap();
    close(team, "speak").await;
    let timed = std::mem::take(&mut *timed.lock().unwrap());
    timed.samples
}

fn percentile(sorted: &[f64], p: f64) -> f64 {
    let index = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[index.min(sorted.len() - 1)]
}
