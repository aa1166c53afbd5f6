//! Benchmarks of the pool at scale: one heartbeat cycle over many idle agents (and with their
//! answers stored in the liveness ledger), agents created per second, and the memory one idle
//! agent holds.
//!
//! Memory is not something criterion measures: before the criterion groups run, `main` reads the
//! process's resident set size, creates [`MEMORY_AGENTS`] idle agents (each with its bus inbox,
//! whiteboard and audit record), reads it again, prints bytes per agent and writes them as JSON
//! to `<target>/strata-bench/memory.json`, where `cargo xtask bench` picks them up. It runs
//! first, in a fresh process, so memory freed by other benches does not hide the growth.
//!
//! The same figure at one million executors in one process (about 1 GB and a few seconds) is
//! opt-in: with `STRATA_BENCH_MEMORY_1M=1` set, the bench measures [`MEMORY_AGENTS_1M`] agents
//! instead, writes `memory_1000000.json` (`pool/memory_per_idle_agent_1000000`, also picked up
//! by `cargo xtask bench`) and stops there, without the criterion groups:
//! `STRATA_BENCH_MEMORY_1M=1 cargo bench -p strata-agent-pool --bench pool`.
#![allow(missing_docs)]
#![allow(clippy::unwrap_used, clippy::expect_used, reason = "benchmarks")]
#![allow(clippy::print_stdout, reason = "the memory figure is printed next to criterion's output")]

mod support;

use std::hint::black_box;
use std::sync::{Arc, LazyLock};
use std::time::{Duration, Instant};
use support::{resident_bytes, target_dir};

use agent_core::tools::{ToolContext, ToolRegistry};
use agent_core::{
    AgentBehavior, AgentDeps, InMemoryAuditLog, InMemoryStateStore, RuleBasedReasoner,
    SledStateStore, StateStore, TokioClock,
};
use agent_layers::{BottomAgent, BottomSpec};
use agent_pool::{AgentPool, HeartbeatScheduler};
use agent_state::{AgentConfig, AgentId, AgentLayer, Timestamp};
use criterion::{BenchmarkId, Criterion, SamplingMode, Throughput, criterion_group};
use governance::InMemoryGovernance;
use message_bus::InMemoryBus;
use tokio::runtime::Runtime;
use whiteboard::InMemoryWhiteboard;

/// Pool sizes for one heartbeat cycle.
const TICK_SIZES: [usize; 3] = [1_000, 10_000, 100_000];
/// Agents created per iteration of the creation benchmark.
const CREATE_BATCH: usize = 10_000;
/// Idle agents created for the memory figure.
const MEMORY_AGENTS: usize = 100_000;
/// The memory figure's id in the `cargo xtask bench` table.
const MEMORY_ID: &str = "pool/memory_per_idle_agent";
/// Idle agents created for the opt-in memory figure at one million.
const MEMORY_AGENTS_1M: usize = 1_000_000;
/// The variable that asks for it.
const MEMORY_1M_VAR: &str = "STRATA_BENCH_MEMORY_1M";

/// The tools of an executor in the standard team of the integration tests.
const TOOLS: [&str; 4] = ["read_file", "write_file", "list_dir", "shell"];

fn main() {
    let bench_mode = std::env::args().any(|arg| arg == "--bench");
    if bench_mode && std::env::var_os(MEMORY_1M_VAR).is_some_and(|v| v == "1") {
        memory_per_idle_agent(MEMORY_AGENTS_1M, "pool/memory_per_idle_agent_1000000");
        return;
    }
    let agents = if bench_mode { MEMORY_AGENTS } else { 1_000 };
    memory_per_idle_agent(agents, MEMORY_ID);
    benches();
    Criterion::default().configure_from_args().final_summary();
}

fn runtime() -> Runtime {
    tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap()
}

/// The in-memory services a pool's agents share, as `Team` assembles them.
struct Services {
    deps: Arc<AgentDeps>,
    /// Keeps the tools' workspace alive.
    _workspace: tempfile::TempDir,
}

impl Services {
    fn new() -> Self {
        let workspace = tempfile::tempdir().unwrap();
        let deps = Arc::new(AgentDeps {
            bus: Arc::new(InMemoryBus::new()),
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
        Self { deps, _workspace: workspace }
    }
}

/// The configuration and behaviour of executor `n`, under lead `mid-1`, with `tools` (one list
/// shared by every executor, as a team file's executors with the same tools share theirs, and
/// one lead id, as `Team` shares it).
fn executor(n: usize, tools: &Arc<[String]>) -> (AgentConfig, Box<dyn AgentBehavior>) {
    static LEAD: LazyLock<AgentId> = LazyLock::new(|| AgentId::new("mid-1"));
    let id = format!("bottom-{n}");
    let config = AgentConfig::new(id.as_str(), format!("Executor {id}"), AgentLayer::Bottom)
        .with_supervisor(LEAD.clone());
    (
        config,
        Box::new(BottomAgent::new(BottomSpec { tools: tools.clone(), kind: None, ooda: None })),
    )
}

/// The executors' tools, one list for all.
fn tools() -> Arc<[String]> {
    TOOLS.iter().map(|t| (*t).to_owned()).collect()
}

/// Creates executors `range` in `pool` (each initialized: inbox, whiteboard, audit record).
async fn populate(pool: &AgentPool, services: &Services, range: std::ops::Range<usize>) {
    let tools = tools();
    for n in range {
        let (config, behavior) = executor(n, &tools);
        pool.create(config, behavior, services.deps.clone()).await.unwrap();
    }
}

/// One `HeartbeatScheduler::tick` over pools of idle agents with no mail.
fn tick(c: &mut Criterion) {
    let rt = runtime();
    let mut group = c.benchmark_group("pool/tick_idle");
    group.measurement_time(Duration::from_secs(2)).warm_up_time(Duration::from_millis(500));
    for size in TICK_SIZES {
        // Built once per size, outside the timing; creating 100 000 agents takes a while.
        let services = Services::new();
        let pool = Arc::new(AgentPool::new(usize::MAX));
        rt.block_on(populate(&pool, &services, 0..size));
        let deps = &services.deps;
        let mut scheduler = HeartbeatScheduler::new(
            pool.clone(),
            deps.bus.clone(),
            deps.audit.clone(),
            deps.clock.clone(),
        );
        let report = rt.block_on(scheduler.tick());
        assert_eq!((report.started, report.idle), (0, size), "every agent must be idle");

        group.throughput(Throughput::Elements(size as u64));
        group.bench_with_input(BenchmarkId::from_parameter(size), &size, |bench, _| {
            bench.iter_custom(|iters| {
                rt.block_on(async {
                    let start = Instant::now();
                    for _ in 0..iters {
                        black_box(scheduler.tick().await);
                    }
                    start.elapsed()
                })
            });
        });
        drop(scheduler);
        drop(pool);
    }
    group.finish();
}

/// `AgentPool::create` of fresh executors one after the other, CREATE_BATCH per iteration, and
/// `AgentPool::create_many` of CREATE_BATCH as one batch; each batch into a new pool on new
/// services. Building the configurations and dropping the pool are not timed.
fn create(c: &mut Criterion) {
    let rt = runtime();
    let mut group = c.benchmark_group("pool");
    group
        .sample_size(10)
        .sampling_mode(SamplingMode::Flat)
        .measurement_time(Duration::from_secs(3))
        .warm_up_time(Duration::from_millis(500))
        .throughput(Throughput::Elements(CREATE_BATCH as u64));
    group.bench_function(format!("create_{CREATE_BATCH}"), |bench| {
        bench.iter_custom(|iters| {
            let mut spent = Duration::ZERO;
            for _ in 0..iters {
                let services = Services::new();
                let pool = AgentPool::new(usize::MAX);
                let tools = tools();
                let batch: Vec<_> = (0..CREATE_BATCH).map(|n| executor(n, &tools)).collect();
                spent += rt.block_on(async {
                    let start = Instant::now();
                    for (config, behavior) in batch {
                        pool.create(config, behavior, services.deps.clone()).await.unwrap();
                    }
                    start.elapsed()
                });
                assert_eq!(pool.len(), CREATE_BATCH);
                drop(pool);
                drop(services);
            }
            spent
        });
    });
    group.bench_function(format!("create_many_{CREATE_BATCH}"), |bench| {
        bench.iter_custom(|iters| {
            let mut spent = Duration::ZERO;
            for _ in 0..iters {
                let services = Services::new();
                let pool = AgentPool::new(usize::MAX);
                let tools = tools();
                let batch: Vec<_> = (0..CREATE_BATCH)
                    .map(|n| {
                        let (config, behavior) = executor(n, &tools);
                        (config, behavior, services.deps.clone())
                    })
                    .collect();
                spent += rt.block_on(async {
                    let start = Instant::now();
                    let created = pool.create_many(batch).await;
                    let elapsed = start.elapsed();
                    assert!(created.iter().all(Result::is_ok), "every agent is created");
                    elapsed
                });
                assert_eq!(pool.len(), CREATE_BATCH);
                drop(pool);
                drop(services);
            }
            spent
        });
    });
    group.finish();
}

/// Pool sizes for the liveness ledger's cost.
const LEDGER_SIZES: [usize; 2] = [1_000, 10_000];

/// One cycle over idle agents with every answer stored (`tick` then `settle`, which waits for
/// the cycle's write): without a ledger, with the in-memory store's, and with a sled run
/// store's (synced: one `fdatasync` a cycle). Every idle agent's count changes each cycle, so
/// each cycle writes every agent's record.
fn tick_ledger(c: &mut Criterion) {
    let rt = runtime();
    let mut group = c.benchmark_group("pool/tick_ledger");
    group.measurement_time(Duration::from_secs(3)).warm_up_time(Duration::from_millis(500));
    for size in LEDGER_SIZES {
        let services = Services::new();
        let pool = Arc::new(AgentPool::new(usize::MAX));
        rt.block_on(populate(&pool, &services, 0..size));
        let dir = tempfile::tempdir().unwrap();
        let store = run_store::RunStore::create(
            &dir.path().join("run"),
            "bench",
            Timestamp(1_700_000_000_000),
            run_store::Durability::Synced,
        )
        .unwrap();
        let sled: Arc<dyn StateStore> = Arc::new(SledStateStore::open(&store).unwrap());
        let memory: Arc<dyn StateStore> = Arc::new(InMemoryStateStore::new());
        for (name, ledger) in [("none", None), ("memory", Some(memory)), ("sled", Some(sled))] {
            let deps = &services.deps;
            let mut scheduler = HeartbeatScheduler::new(
                pool.clone(),
                deps.bus.clone(),
                deps.audit.clone(),
                deps.clock.clone(),
            );
            if let Some(ledger) = ledger {
                scheduler = scheduler.with_ledger(ledger);
            }
            group.throughput(Throughput::Elements(size as u64));
            group.bench_with_input(BenchmarkId::new(name, size), &size, |bench, _| {
                bench.iter_custom(|iters| {
                    rt.block_on(async {
                        let start = Instant::now();
                        for _ in 0..iters {
                            black_box(scheduler.tick().await);
                            scheduler.settle().await;
                        }
                        start.elapsed()
                    })
                });
            });
        }
        drop(pool);
    }
    group.finish();
}

criterion_group!(benches, tick, create, tick_ledger);

/// Resident memory per idle agent, from the growth of the process's resident set while
/// `agents` agents are created. Printed, and written for `cargo xtask bench` as `id` when run
/// as a benchmark (`cargo test` runs it on a few agents as a smoke test and writes nothing).
fn memory_per_idle_agent(agents: usize, id: &str) {
    let bench_mode = std::env::args().any(|arg| arg == "--bench");
    let rt = runtime();
    let services = Services::new();
    let pool = AgentPool::new(usize::MAX);

    let before = resident_bytes();
    rt.block_on(populate(&pool, &services, 0..agents));
    let after = resident_bytes();
    assert_eq!(pool.len(), agents);

    let bytes_per_agent = after.saturating_sub(before) as f64 / agents as f64;
    println!("{id}: {bytes_per_agent:.1} bytes per idle agent ({agents} agents)");
    if bench_mode {
        let figure = serde_json::json!({
            "id": id,
            "bytes_per_agent": (bytes_per_agent * 10.0).round() / 10.0,
            "agents": agents,
        });
        let dir = target_dir().join("strata-bench");
        std::fs::create_dir_all(&dir).unwrap();
        let file = if id == MEMORY_ID {
            "memory.json".to_owned()
        } else {
            format!("memory_{agents}.json")
        };
        let path = dir.join(file);
        std::fs::write(&path, format!("{figure}\n")).unwrap();
        println!("{id}: written to {}", path.display());
    }
    drop(pool);
}
