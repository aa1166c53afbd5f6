//! Benchmarks of group commit: durable commits per second with 1, 8 and 64 concurrent writers,
//! the disk's own `fdatasync` rate as their ceiling, writers that batch records per commit, and
//! the latency of one durable write.
//!
//! A durable write is what a backend does: insert a record of about 200 bytes into a tree, then
//! [`RunStore::commit`] (`Durability::Synced`: sled flush, then `fdatasync`). Each writer is a
//! task on a multi-threaded tokio runtime that awaits each commit before its next write.
//! Everything lives in `<target>/strata-bench`, on the disk the build uses, not in a `/tmp` that
//! may be in memory.
//!
//! Before the criterion groups, `main` runs 64 writers for a warm-up second and three measured
//! seconds, timing every write, and writes p50, p99, the commits and the syncs as JSON to
//! `<target>/strata-bench/commit_latency.json`, where `cargo xtask bench` picks them up.
#![allow(missing_docs)]
#![allow(clippy::unwrap_used, clippy::expect_used, reason = "benchmarks")]
#![allow(
    clippy::print_stdout,
    reason = "the latency figures are printed next to criterion's output"
)]

use std::fs::File;
use std::io::Write;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use agent_state::Timestamp;
use criterion::{BenchmarkId, Criterion, SamplingMode, Throughput, criterion_group};
use run_store::{Durability, RunStore};
use tokio::runtime::Runtime;

/// Concurrent writers in the throughput benchmark.
const WRITERS: [usize; 3] = [1, 8, 64];
/// Writers, and records per commit, in the batching benchmark.
const BATCHED: [(usize, usize); 3] = [(64, 8), (8, 64), (1, 512)];
/// Writers in the latency run.
const LATENCY_WRITERS: usize = 64;
/// The latency figure's id in the `cargo xtask bench` table.
const LATENCY_ID: &str = "run-store/commit_latency_64_writers";
const RECORD_BYTES: usize = 200;
const WARM_UP: Duration = Duration::from_secs(1);
const MEASUREMENT: Duration = Duration::from_secs(3);

fn main() {
    commit_latency();
    benches();
    Criterion::default().configure_from_args().final_summary();
}

fn runtime() -> Runtime {
    tokio::runtime::Builder::new_multi_thread().enable_all().build().unwrap()
}

/// A fresh directory under `<target>/strata-bench`.
fn bench_dir(prefix: &str) -> tempfile::TempDir {
    let root = target_dir().join("strata-bench");
    std::fs::create_dir_all(&root).unwrap();
    tempfile::Builder::new().prefix(prefix).tempdir_in(&root).unwrap()
}

/// A run and a source of unique keys.
struct Run {
    store: RunStore,
    tree: sled::Tree,
    next_key: Arc<AtomicU64>,
    commits: Arc<AtomicU64>,
    _dir: tempfile::TempDir,
}

impl Run {
    fn new(durability: Durability) -> Self {
        let dir = bench_dir("commit-run-");
        let store =
            RunStore::create(&dir.path().join("run"), "bench", Timestamp(0), durability).unwrap();
        let tree = store.tree("records").unwrap();
        Self {
            store,
            tree,
            next_key: Arc::new(AtomicU64::new(0)),
            commits: Arc::new(AtomicU64::new(0)),
            _dir: dir,
        }
    }

    /// `writers` tasks share `commits` commits of `batch` records each; returns how long it
    /// took.
    fn write(&self, rt: &Runtime, writers: usize, batch: usize, commits: u64) -> Duration {
        let writers = writers as u64;
        rt.block_on(async {
            let start = Instant::now();
            let tasks: Vec<_> = (0..writers)
                .map(|i| {
                    let each = commits / writers + u64::from(i < commits % writers);
                    let (store, tree) = (self.store.clone(), self.tree.clone());
                    let (next_key, done) = (self.next_key.clone(), self.commits.clone());
                    tokio::spawn(async move {
                        let value = [b'r'; RECORD_BYTES];
                        for _ in 0..each {
                            for _ in 0..batch {
                                let key = next_key.fetch_add(1, Ordering::Relaxed);
                                tree.insert(key.to_be_bytes(), &value[..]).unwrap();
                            }
                            store.commit().await.unwrap();
                        }
                        done.fetch_add(each, Ordering::Relaxed);
                    })
                })
                .collect();
            for task in tasks {
                task.await.unwrap();
            }
            start.elapsed()
        })
    }

    fn report(&self, id: &str) {
        let commits = self.commits.load(Ordering::Relaxed);
        if commits == 0 {
            return; // filtered out
        }
        let syncs = self.store.syncs().max(1);
        println!(
            "{id}: {commits} commits in {syncs} syncs ({:.1} commits per sync)",
            commits as f64 / syncs as f64
        );
    }
}

/// The ceiling: append 200 bytes to a file and `fdatasync` it, one at a time, on the same file
/// system as the runs.
fn disk_fdatasync(c: &mut Criterion) {
    let dir = bench_dir("fdatasync-");
    let mut file = File::create(dir.path().join("log")).unwrap();
    let record = [b'r'; RECORD_BYTES];
    let mut group = c.benchmark_group("run-store");
    group
        .sampling_mode(SamplingMode::Flat)
        .sample_size(10)
        .warm_up_time(WARM_UP)
        .measurement_time(MEASUREMENT)
        .throughput(Throughput::Elements(1));
    group.bench_function("disk_fdatasync", |bench| {
        bench.iter(|| {
            file.write_all(&record).unwrap();
            file.sync_data().unwrap();
        });
    });
    group.finish();
}

fn durable_commits(c: &mut Criterion) {
    let rt = runtime();
    let mut group = c.benchmark_group("run-store");
    group
        .sampling_mode(SamplingMode::Flat)
        .sample_size(10)
        .warm_up_time(WARM_UP)
        .measurement_time(MEASUREMENT);
    group.throughput(Throughput::Elements(1));
    for writers in WRITERS {
        let run = Run::new(Durability::Synced);
        let parameter = format!("{writers}_writers");
        group.bench_function(BenchmarkId::new("durable_commit", &parameter), |bench| {
            bench.iter_custom(|iters| run.write(&rt, writers, 1, iters));
        });
        run.report(&format!("run-store/durable_commit/{parameter}"));
    }
    // Where the time goes: sled's flush alone (its `sync_file_range` waits for the write but
    // not for the device's cache), without the `fdatasync`.
    {
        let run = Run::new(Durability::NoSync);
        group.bench_function(BenchmarkId::new("no_sync_commit", "64_writers"), |bench| {
            bench.iter_custom(|iters| run.write(&rt, 64, 1, iters));
        });
        run.report("run-store/no_sync_commit/64_writers");
    }
    for (writers, batch) in BATCHED {
        let run = Run::new(Durability::Synced);
        group.throughput(Throughput::Elements(batch as u64));
        let parameter = format!("{writers}_writers_x{batch}");
        group.bench_function(BenchmarkId::new("batched_commit", &parameter), |bench| {
            bench.iter_custom(|iters| run.write(&rt, writers, batch, iters));
        });
        run.report(&format!("run-store/batched_commit/{parameter}"));
    }
    group.finish();
}

criterion_group!(benches, disk_fdatasync, durable_commits);

/// 64 writers for [`WARM_UP`], then [`MEASUREMENT`] with every durable write (insert and
/// commit) timed; prints p50 and p99 and, under `cargo bench`, writes them to
/// `<target>/strata-bench/commit_latency.json`.
fn commit_latency() {
    let bench_mode = std::env::args().any(|arg| arg == "--bench");
    let (warm_up, measurement) = if bench_mode {
        (WARM_UP, MEASUREMENT)
    } else {
        (Duration::from_millis(50), Duration::from_millis(100))
    };
    let rt = runtime();
    let run = Run::new(Durability::Synced);
    let start = Instant::now();
    let (measure_from, stop_at) = (start + warm_up, start + warm_up + measurement);
    // Count the syncs of the measured window from a thread that wakes at its two ends.
    let counter = {
        let store = run.store.clone();
        std::thread::spawn(move || {
            std::thread::sleep(measure_from.saturating_duration_since(Instant::now()));
            let before = store.syncs();
            std::thread::sleep(stop_at.saturating_duration_since(Instant::now()));
            store.syncs() - before
        })
    };
    let mut latencies: Vec<Duration> = rt.block_on(async {
        let tasks: Vec<_> = (0..LATENCY_WRITERS)
            .map(|_| {
                let (store, tree, next_key) =
                    (run.store.clone(), run.tree.clone(), run.next_key.clone());
                tokio::spawn(async move {
                    let value = [b'r'; RECORD_BYTES];
                    let mut measured = Vec::new();
                    loop {
                        let key = next_key.fetch_add(1, Ordering::Relaxed);
                        let began = Instant::now();
                        tree.insert(key.to_be_bytes(), &value[..]).unwrap();
                        store.commit().await.unwrap();
                        let done = Instant::now();
                        if done > stop_at {
                            return measured;
                        }
                        if began >= measure_from {
                            measured.push(done - began);
                        }
                    }
                })
            })
            .collect();
        let mut all = Vec::new();
        for task in tasks {
            all.extend(task.await.unwrap());
        }
        all
    });
    let syncs = counter.join().unwrap();
    latencies.sort_unstable();
    let percentile = |p: f64| {
        let i = ((latencies.len() as f64 * p).ceil() as usize).clamp(1, latencies.len()) - 1;
        latencies[i].as_secs_f64() * 1e6
    };
    let (p50, p99, max) = (percentile(0.50), percentile(0.99), percentile(1.0));
    let commits = latencies.len();
    println!(
        "{LATENCY_ID}: p50 {p50:.0} µs, p99 {p99:.0} µs, max {max:.0} µs over {commits} commits \
         ({:.0} per second) in about {syncs} syncs ({:.1} commits per sync, {:.0} µs per sync)",
        commits as f64 / measurement.as_secs_f64(),
        commits as f64 / syncs.max(1) as f64,
        measurement.as_secs_f64() * 1e6 / syncs.max(1) as f64,
    );
    if bench_mode {
        let figure = serde_json::json!({
            "id": LATENCY_ID,
            "p50_us": p50.round(),
            "p99_us": p99.round(),
            "commits": commits,
            "syncs": syncs,
        });
        let dir = target_dir().join("strata-bench");
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("commit_latency.json");
        std::fs::write(&path, format!("{figure}\n")).unwrap();
        println!("{LATENCY_ID}: written to {}", path.display());
    }
}

/// Cargo's target directory: `CARGO_TARGET_DIR` when set (relative to the workspace root when
/// relative), else `target/` in the workspace root, the nearest directory up from here with a
/// `Cargo.lock`.
fn target_dir() -> PathBuf {
    let here = std::env::current_dir().unwrap();
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
