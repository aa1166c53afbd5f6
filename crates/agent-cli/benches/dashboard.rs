//! The dashboard's server side at 10 000 agents (`strata serve`, issue #20): the time to fold
//! one audit record into a run's model and serialise the delta sent to the browsers, and the
//! time to serialise the whole snapshot (`GET /api/runs/{id}`).
//!
//! The model is the library's (`strata::dashboard::model`), built here with a plain event line
//! formatter in place of the `strata` command's.
#![allow(missing_docs)]
#![allow(clippy::unwrap_used, clippy::expect_used, reason = "benchmarks")]

use agent_core::{AuditEvent, AuditRecord, GENESIS_HASH};
use agent_state::{AgentId, AgentLayer, AgentStatus, Timestamp};
use criterion::{Criterion, criterion_group, criterion_main};
use strata::dashboard::model::{Outline, RunModel, Seed};

/// Agents in the run.
const AGENTS: usize = 10_000;
/// Leads; the rest (but three powers) are executors spread under them.
const LEADS: usize = 100;

fn line(r: &AuditRecord, start: u64) -> String {
    let t = r.at.0.saturating_sub(start) as f64 / 1000.0;
    let what = match &r.event {
        AuditEvent::Transition { from, to, reason } => format!("{from} -> {to} ({reason})"),
        other => format!("{other:?}"),
    };
    format!("[{t:>7.2}s] {:<12} {what}", r.agent.as_str())
}

fn team() -> Vec<Seed> {
    let mut seeds = Vec::with_capacity(AGENTS);
    for i in 0..3 {
        seeds.push(Seed {
            id: AgentId::new(format!("top-{i}")),
            layer: AgentLayer::Top,
            parent: None,
            role: None,
        });
    }
    for i in 0..LEADS {
        seeds.push(Seed {
            id: AgentId::new(format!("mid-{i}")),
            layer: AgentLayer::Mid,
            parent: Some(AgentId::new("top-0")),
            role: Some("lead".into()),
        });
    }
    for i in 0..AGENTS - 3 - LEADS {
        seeds.push(Seed {
            id: AgentId::new(format!("bottom-{i}")),
            layer: AgentLayer::Bottom,
            parent: Some(AgentId::new(format!("mid-{}", i % LEADS))),
            role: Some("executor".into()),
        });
    }
    seeds
}

fn transition(seq: u64, agent: &str, from: AgentStatus, to: AgentStatus) -> AuditRecord {
    AuditRecord {
        seq,
        at: Timestamp(1_000 + seq),
        agent: AgentId::new(agent),
        event: AuditEvent::Transition { from, to, reason: "heartbeat".into() },
        prev_hash: GENESIS_HASH,
        hash: GENESIS_HASH,
    }
}

/// A run of [`AGENTS`] agents, each of which went idle.
fn run() -> (RunModel, u64) {
    let seeds = team();
    let ids: Vec<String> = seeds.iter().map(|s| s.id.to_string()).collect();
    // A goal: the counter says `planning` (no plan is known), as a run starts.
    let task = agent_state::Task { id: "t".into(), goal: "a big team".into(), steps: Vec::new() };
    let outline = Outline {
        run_id: agent_state::RunId::parse("bench").unwrap(),
        title: "a big team".into(),
        started_at: 1_000,
        agents: seeds,
        humans: vec!["alice".into()],
    };
    let mut model = RunModel::new(outline, &task, line);
    let mut seq = 0;
    for id in &ids {
        model.fold(&transition(seq, id, AgentStatus::Initializing, AgentStatus::Idle));
        seq += 1;
    }
    (model, seq)
}

fn fold(c: &mut Criterion) {
    let (mut model, mut seq) = run();
    let mut records: Vec<AuditRecord> = (0..AGENTS)
        .step_by(97)
        .map(|i| {
            let agent = if i < 3 {
                format!("top-{i}")
            } else if i < 3 + LEADS {
                format!("mid-{}", i - 3)
            } else {
                format!("bottom-{}", i - 3 - LEADS)
            };
            transition(0, &agent, AgentStatus::Idle, AgentStatus::Working)
        })
        .collect();
    let mut k = 0;
    c.bench_function("dashboard/fold_and_serialise_delta_10k_agents", |b| {
        b.iter(|| {
            let n = records.len();
            let r = &mut records[k % n];
            k += 1;
            r.seq = seq;
            seq += 1;
            let delta = model.fold(r).expect("a new record");
            std::hint::black_box(serde_json::to_string(&delta).unwrap());
        });
    });
}

fn snapshot(c: &mut Criterion) {
    let (model, _) = run();
    let bytes = model.snapshot_json(500).len();
    c.bench_function("dashboard/snapshot_10k_agents", |b| {
        b.iter(|| std::hint::black_box(model.snapshot_json(500)));
    });
    #[allow(clippy::print_stdout, reason = "the figure is printed")]
    {
        println!("dashboard/snapshot_10k_agents: {bytes} bytes of JSON");
    }
}

criterion_group!(benches, fold, snapshot);
criterion_main!(benches);
