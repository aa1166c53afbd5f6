//! Evolution benches: evaluations per second on the shipped suite, the flight recorder's
//! events per second with real `fdatasync`, and the cost of one seeded mutation.
//!
//! - `evolution/suite_evaluation`: one genome (2 retries, a 1 s tool limit: the shipped
//!   evolution's usual winner) evaluated on `examples/evolve/suite`: four tasks, each a real
//!   team run with sandboxed commands, then its check. Most of its time is the tasks' own
//!   (a command that hangs until its tool limit, one that takes 0.6 s), so the figure says
//!   how many evaluations of this suite a core runs per second, not the evaluator's overhead.
//! - `evolution/recorder_synced`: one event appended to a [`SledRecorder`] on a run store with
//!   `Durability::Synced` (the commit waits for `fdatasync`).
//! - `evolution/recorder_memory`: the same on a [`MemoryRecorder`].
//! - `evolution/mutate_spawn`: a seeded mutation drawn and applied (child genome, its id).

#![allow(clippy::expect_used, reason = "benchmarks")]

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use agent_evolution::{
    EvalContext, EventKey, EvolutionFile, FitnessEvaluator, FlightRecorder, MemoryRecorder,
    SledRecorder, SuiteEvaluator, TaskSuite,
};
use agent_state::Timestamp;
use agent_state::evolution::{EvolutionaryEvent, EvolutionaryEventType, Genome, SeededRng};
use criterion::{Criterion, Throughput};
use run_store::{Durability, RunStore};
use serde_json::json;

fn example() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../examples/evolve/evolution.toml")
}

fn event(genome: &Genome) -> EvolutionaryEvent {
    EvolutionaryEvent {
        timestamp: Timestamp(1),
        genome_id: genome.id.clone(),
        parent_id: None,
        generation: 0,
        event_type: EvolutionaryEventType::GymEval,
        payload: json!({"evaluation_complete": true}),
        fitness_metrics: None,
        agent_id: "evolution/0/0".into(),
        lineage_path: genome.lineage_path.clone(),
    }
}

fn benches(c: &mut Criterion) {
    let file = EvolutionFile::read(&example()).expect("the shipped evolution file");
    let suite = TaskSuite::load(&file.suite).expect("the shipped suite");
    let genesis = file.genesis(&suite).expect("its genesis");
    let mut config = genesis.config.clone();
    config.max_retries = 2;
    config.strategy.insert("tool_timeout_ms".into(), json!(1000));
    let tuned = Genome::genesis(config, genesis.permissions.clone()).expect("a valid genome");
    let evaluator = SuiteEvaluator::new(suite).expect("the sandbox works here");
    let multi = tokio::runtime::Builder::new_multi_thread().enable_all().build().expect("runtime");

    let mut group = c.benchmark_group("evolution");
    group.sample_size(10).measurement_time(Duration::from_secs(25));
    group.throughput(Throughput::Elements(1));
    let ctx = EvalContext { generation: 0, index: 0, agent_id: "bench".into() };
    group.bench_function("suite_evaluation", |b| {
        b.iter(|| multi.block_on(evaluator.evaluate(&tuned, &ctx)).expect("evaluates"));
    });
    group.finish();

    let mut group = c.benchmark_group("evolution");
    group.throughput(Throughput::Elements(1));
    let dir = tempfile::tempdir().expect("a temporary directory");
    let store = RunStore::create(&dir.path().join("evo"), "evo", Timestamp(0), Durability::Synced)
        .expect("a run store");
    let synced = Arc::new(SledRecorder::open(&store).expect("the recorder"));
    let memory = Arc::new(MemoryRecorder::new());
    let e = event(&genesis);
    for (name, recorder) in [
        ("recorder_synced", synced as Arc<dyn FlightRecorder>),
        ("recorder_memory", memory as Arc<dyn FlightRecorder>),
    ] {
        let mut n = 0u32;
        group.bench_function(name, |b| {
            b.iter(|| {
                n += 1;
                let key = EventKey { generation: n, phase: EventKey::EVAL, index: 0, seq: 0 };
                assert!(multi.block_on(recorder.record(key, &e)).expect("records"));
            });
        });
    }
    let mut rng = SeededRng::new(42);
    group.bench_function("mutate_spawn", |b| {
        b.iter(|| {
            let m = file.space.mutation(&genesis, &mut rng).expect("a mutation");
            genesis.spawn(&m, &file.space).expect("a child")
        });
    });
    group.finish();
}

fn main() {
    let mut c = Criterion::default().configure_from_args();
    benches(&mut c);
    c.final_summary();
}
