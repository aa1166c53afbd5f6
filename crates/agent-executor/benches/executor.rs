//! Executor benches: runs per second of a kind that returns at once (alone and in parallel
//! batches), and the executor's overhead per run.
//!
//! `executor/run_immediate` is one `Executor::execute` of a kind whose handler returns at
//! once: the median is the executor's overhead per run (check, lifecycle, capsule, the task
//! the handler runs in, timers, the response), since the handler itself costs nothing.
//! `executor/parallel_batch_1000` runs 1 000 such requests with `execute_parallel` (64 at a
//! time) on the multi-threaded runtime. Under `cargo bench` the bench also samples 200 000
//! single runs and writes their p50 and p99 to `<target>/strata-bench/executor_overhead.json`
//! for `cargo xtask bench` (`executor/overhead_per_run`).

#![allow(clippy::expect_used, reason = "benchmarks")]
#![allow(clippy::print_stdout, reason = "the figures are printed")]

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Instant;

use agent_core::RuleBasedReasoner;
use agent_executor::{Executor, FnKind, KindOutput, Registry, RunContext, RunRequest};
use criterion::{Criterion, Throughput};
use serde_json::json;

fn executor() -> Executor {
    let mut registry = Registry::new();
    registry
        .register(FnKind::new("now", "returns at once", |_, _| {
            Box::pin(async { Ok(KindOutput::new("done", 1.0)) })
        }))
        .expect("a fresh registry takes the kind");
    Executor::new(registry)
}

fn request(n: usize) -> RunRequest {
    RunRequest {
        run_id: format!("run-{n}").parse().expect("a run id"),
        kind: "now".into(),
        objective: "return at once".into(),
        inputs: serde_json::Value::Null,
    }
}

fn benches(c: &mut Criterion) {
    let executor = executor();
    let cx = RunContext::standalone("now", Arc::new(RuleBasedReasoner::new()));
    let mut group = c.benchmark_group("executor");

    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().expect("runtime");
    group.throughput(Throughput::Elements(1));
    group.bench_function("run_immediate", |b| {
        b.iter(|| rt.block_on(executor.execute(request(0), cx.clone())).expect("runs"));
    });

    let multi = tokio::runtime::Builder::new_multi_thread().enable_all().build().expect("runtime");
    group.throughput(Throughput::Elements(1_000));
    group.bench_function("parallel_batch_1000", |b| {
        b.iter(|| {
            let requests = (0..1_000).map(request).collect();
            let results = multi.block_on(executor.execute_parallel(requests, cx.clone(), 64));
            assert!(results.iter().all(|r| r.as_ref().is_ok_and(|r| r.success())));
        });
    });
    group.finish();
}

/// Samples single runs and writes their percentiles for `cargo xtask bench`.
fn overhead_figure() {
    let executor = executor();
    let cx = RunContext::standalone("now", Arc::new(RuleBasedReasoner::new()));
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().expect("runtime");
    let runs = 200_000;
    let mut samples = Vec::with_capacity(runs);
    rt.block_on(async {
        for n in 0..runs {
            let request = request(n);
            let started = Instant::now();
            let response = executor.execute(request, cx.clone()).await.expect("runs");
            samples.push(started.elapsed().as_secs_f64() * 1e6);
            assert!(response.success());
        }
    });
    samples.sort_by(f64::total_cmp);
    let at = |p: f64| samples[((samples.len() - 1) as f64 * p).round() as usize];
    let (p50, p99) = (at(0.50), at(0.99));
    let round = |v: f64| (v * 100.0).round() / 100.0;
    println!("executor/overhead_per_run: p50 {p50:.2} µs, p99 {p99:.2} µs over {runs} runs");
    let dir = target_dir().join("strata-bench");
    std::fs::create_dir_all(&dir).expect("create the figures directory");
    let figure = json!({
        "id": "executor/overhead_per_run",
        "p50_us": round(p50),
        "p99_us": round(p99),
        "runs": runs,
    });
    std::fs::write(dir.join("executor_overhead.json"), format!("{figure}\n"))
        .expect("write the figure");
}

/// The workspace's target directory: `CARGO_TARGET_DIR` (set by `cargo xtask bench`) or
/// `target`, from the workspace root (benches run in their package's directory).
fn target_dir() -> PathBuf {
    let here = std::env::current_dir().unwrap_or_default();
    let root = here
        .ancestors()
        .find(|dir| dir.join("Cargo.lock").is_file())
        .unwrap_or(&here)
        .to_path_buf();
    match std::env::var_os("CARGO_TARGET_DIR") {
        Some(dir) => root.join(dir),
        None => root.join("target"),
    }
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let benching = args.iter().any(|a| a == "--bench") && !args.iter().any(|a| a == "--test");
    let mut criterion = Criterion::default().configure_from_args();
    benches(&mut criterion);
    if benching {
        overhead_figure();
    }
    criterion.final_summary();
}
