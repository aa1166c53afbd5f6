//! Benchmarks of the sled bus: durable sends per second with 1, 8 and 64 concurrent senders,
//! durable batches (`send_many` of 4, 8 and 32 messages) with 64 senders, and the latency of
//! both.
//!
//! Every send returns only once its message is flushed and `fdatasync`ed ([`RunStore::commit`],
//! `Durability::Synced`); concurrent sends share one sync, and a batch is one commit. Each
//! sender is a task on a multi-threaded tokio runtime that awaits each send (or batch) before
//! the next, to an inbox of its own; the inboxes are drained between samples, outside the
//! timing. The run directories live in `<target>/strata-bench`, on the disk the build uses,
//! not in a `/tmp` that may be in memory.
//!
//! Before the criterion groups, `main` runs 64 senders for a warm-up second and three measured
//! seconds, timing every call, once sending one message at a time and once per batch size, and
//! writes each run's p50 and p99 (per message: a message of a batch waits for its whole call),
//! messages per second, the messages and the syncs as JSON to
//! `<target>/strata-bench/durable_send.json` and `durable_send_many_<n>.json`, where
//! `cargo xtask bench` picks them up. A filter given to the bench (`-- send_many`) also picks
//! which of these runs run.
#![allow(missing_docs)]
#![allow(clippy::unwrap_used, clippy::expect_used, reason = "benchmarks")]
#![allow(
    clippy::print_stdout,
    reason = "the latency figures are printed next to criterion's output"
)]

use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use agent_state::{Address, AgentId, Message, MessageId, MessageKind, Timestamp};
use criterion::{BenchmarkId, Criterion, SamplingMode, Throughput, criterion_group};
use message_bus::{MessageBus, SledBus};
use run_store::{Durability, RunStore};
use tokio::runtime::Runtime;

/// Concurrent senders in the throughput benchmark.
const SENDERS: [usize; 3] = [1, 8, 64];
/// Senders in the latency run.
const LATENCY_SENDERS: usize = 64;
/// The latency figure's id in the `cargo xtask bench` table.
const LATENCY_ID: &str = "message-bus/durable_send_latency_64";
/// Messages per `send_many` in the batch benchmarks.
const BATCHES: [usize; 3] = [4, 8, 32];
const WARM_UP: Duration = Duration::from_secs(1);
const MEASUREMENT: Duration = Duration::from_secs(3);

fn main() {
    // Criterion's filter, if any: the first argument that is not a flag.
    let filter = std::env::args().skip(1).find(|arg| !arg.starts_with('-'));
    let wanted = |id: &str| filter.as_deref().is_none_or(|filter| id.contains(filter));
    if wanted(LATENCY_ID) {
        durable_send_latency(1);
    }
    for batch in BATCHES {
        if wanted(&batch_latency_id(batch)) {
            durable_send_latency(batch);
        }
    }
    benches();
    Criterion::default().configure_from_args().final_summary();
}

fn runtime() -> Runtime {
    tokio::runtime::Builder::new_multi_thread().enable_all().build().unwrap()
}

/// A run directory with a bus, `senders` pairs of agents registered (`mid-i` sends to
/// `bottom-i`), and nothing else.
struct Run {
    bus: Arc<SledBus>,
    store: RunStore,
    pairs: Vec<(AgentId, AgentId)>,
    next_id: Arc<AtomicU64>,
    _dir: tempfile::TempDir,
}

impl Run {
    fn new(rt: &Runtime, senders: usize) -> Self {
        let root = target_dir().join("strata-bench");
        std::fs::create_dir_all(&root).unwrap();
        let dir = tempfile::Builder::new().prefix("durable-run-").tempdir_in(&root).unwrap();
        let store =
            RunStore::create(dir.path(), "bench", Timestamp(0), Durability::Synced).unwrap();
        // No capacity limit: the inboxes are drained between samples, not during them.
        let bus = Arc::new(SledBus::with_capacity(&store, usize::MAX).unwrap());
        let pairs: Vec<(AgentId, AgentId)> = (0..senders)
            .map(|i| (AgentId::new(format!("mid-{i}")), AgentId::new(format!("bottom-{i}"))))
            .collect();
        rt.block_on(async {
            for (from, to) in &pairs {
                bus.register(from).await.unwrap();
                bus.register(to).await.unwrap();
            }
        });
        Self { bus, store, pairs, next_id: Arc::new(AtomicU64::new(0)), _dir: dir }
    }

    /// Sends `total` messages from all senders at once; returns how long it took.
    fn send(&self, rt: &Runtime, total: u64) -> Duration {
        let senders = self.pairs.len() as u64;
        rt.block_on(async {
            let start = Instant::now();
            let tasks: Vec<_> = self
                .pairs
                .iter()
                .enumerate()
                .map(|(i, (from, to))| {
                    let each = total / senders + u64::from((i as u64) < total % senders);
                    let (bus, next_id) = (Arc::clone(&self.bus), Arc::clone(&self.next_id));
                    let (from, to) = (from.clone(), to.clone());
                    tokio::spawn(async move {
                        for _ in 0..each {
                            let n = next_id.fetch_add(1, Ordering::Relaxed);
                            bus.send(message(n, &from, &to)).await.unwrap();
                        }
                    })
                })
                .collect();
            for task in tasks {
                task.await.unwrap();
            }
            start.elapsed()
        })
    }

    /// Sends `total` messages from all senders at once, in batches of `batch` (`send_many`);
    /// returns how long it took.
    fn send_batches(&self, rt: &Runtime, total: u64, batch: usize) -> Duration {
        let senders = self.pairs.len() as u64;
        rt.block_on(async {
            let start = Instant::now();
            let tasks: Vec<_> = self
                .pairs
                .iter()
                .enumerate()
                .map(|(i, (from, to))| {
                    let each = total / senders + u64::from((i as u64) < total % senders);
                    let (bus, next_id) = (Arc::clone(&self.bus), Arc::clone(&self.next_id));
                    let (from, to) = (from.clone(), to.clone());
                    tokio::spawn(async move {
                        let mut left = each;
                        while left > 0 {
                            let n = left.min(batch as u64);
                            left -= n;
                            let messages = (0..n)
                                .map(|_| {
                                    message(next_id.fetch_add(1, Ordering::Relaxed), &from, &to)
                                })
                                .collect();
                            bus.send_many(messages).await.unwrap();
                        }
                    })
                })
                .collect();
            for task in tasks {
                task.await.unwrap();
            }
            start.elapsed()
        })
    }

    /// Takes and acknowledges everything pending.
    fn drain(&self, rt: &Runtime) {
        rt.block_on(async {
            for (_, to) in &self.pairs {
                let inbox = Address::from(to);
                loop {
                    let taken = self.bus.take(&inbox, 4_096).await.unwrap();
                    if taken.is_empty() {
                        break;
                    }
                    let ids: Vec<MessageId> = taken.iter().map(|m| m.id).collect();
                    assert_eq!(self.bus.ack(&inbox, &ids).await.unwrap(), ids.len());
                }
            }
        });
    }
}

/// A status report like the ones agents send every heartbeat.
fn message(n: u64, from: &AgentId, to: &AgentId) -> Message {
    Message::new(
        MessageId::from_u128(u128::from(n)),
        from,
        to,
        MessageKind::ProgressReport,
        serde_json::json!({ "task": "write hello.txt", "progress": 0.5 }),
        Timestamp(n),
    )
}

fn durable_sends(c: &mut Criterion) {
    let rt = runtime();
    let mut group = c.benchmark_group("durable");
    group
        .sampling_mode(SamplingMode::Flat)
        .sample_size(10)
        .warm_up_time(WARM_UP)
        .measurement_time(MEASUREMENT)
        .throughput(Throughput::Elements(1));
    for senders in SENDERS {
        let run = Run::new(&rt, senders);
        group.bench_function(BenchmarkId::new("send", format!("{senders}_senders")), |bench| {
            bench.iter_custom(|iters| {
                let spent = run.send(&rt, iters);
                run.drain(&rt);
                spent
            });
        });
        let sends = run.next_id.load(Ordering::Relaxed);
        if sends == 0 {
            continue; // filtered out
        }
        println!(
            "durable/send/{senders}_senders: {sends} sends in {} syncs ({:.1} sends per sync)",
            run.store.syncs(),
            sends as f64 / run.store.syncs().max(1) as f64
        );
    }
    group.finish();
}

fn durable_batches(c: &mut Criterion) {
    let rt = runtime();
    let mut group = c.benchmark_group("durable");
    group
        .sampling_mode(SamplingMode::Flat)
        .sample_size(10)
        .warm_up_time(WARM_UP)
        .measurement_time(MEASUREMENT)
        .throughput(Throughput::Elements(1));
    for batch in BATCHES {
        let run = Run::new(&rt, LATENCY_SENDERS);
        let name = format!("{LATENCY_SENDERS}_senders_x{batch}");
        group.bench_function(BenchmarkId::new("send_many", &name), |bench| {
            bench.iter_custom(|iters| {
                let spent = run.send_batches(&rt, iters, batch);
                run.drain(&rt);
                spent
            });
        });
        let sends = run.next_id.load(Ordering::Relaxed);
        if sends == 0 {
            continue; // filtered out
        }
        println!(
            "durable/send_many/{name}: {sends} messages in {} syncs ({:.1} messages per sync)",
            run.store.syncs(),
            sends as f64 / run.store.syncs().max(1) as f64
        );
    }
    group.finish();
}

criterion_group!(benches, durable_sends, durable_batches);

/// The id of the latency figure of batches of `batch` messages.
fn batch_latency_id(batch: usize) -> String {
    format!("message-bus/durable_send_many_{LATENCY_SENDERS}x{batch}")
}

/// 64 senders for [`WARM_UP`], then [`MEASUREMENT`] with every call timed, each sending
/// `batch` messages (`send` for 1, else `send_many`); prints p50 and p99 per message and, under
/// `cargo bench`, writes them to `<target>/strata-bench/durable_send.json` (one at a time) or
/// `durable_send_many_<batch>.json`.
fn durable_send_latency(batch: usize) {
    let id = if batch == 1 { LATENCY_ID.to_owned() } else { batch_latency_id(batch) };
    let bench_mode = std::env::args().any(|arg| arg == "--bench");
    let (warm_up, measurement) = if bench_mode {
        (WARM_UP, MEASUREMENT)
    } else {
        (Duration::from_millis(50), Duration::from_millis(100))
    };
    let rt = runtime();
    let run = Run::new(&rt, LATENCY_SENDERS);
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
        let tasks: Vec<_> = run
            .pairs
            .iter()
            .map(|(from, to)| {
                let (bus, next_id) = (Arc::clone(&run.bus), Arc::clone(&run.next_id));
                let (from, to) = (from.clone(), to.clone());
                tokio::spawn(async move {
                    let mut measured = Vec::new();
                    loop {
                        let mut messages: Vec<Message> = (0..batch)
                            .map(|_| message(next_id.fetch_add(1, Ordering::Relaxed), &from, &to))
                            .collect();
                        let sent = Instant::now();
                        if batch == 1 {
                            bus.send(messages.pop().unwrap()).await.unwrap();
                        } else {
                            bus.send_many(messages).await.unwrap();
                        }
                        let done = Instant::now();
                        if done > stop_at {
                            return measured;
                        }
                        if sent >= measure_from {
                            measured.push(done - sent);
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
    let (p50, p99) = (percentile(0.50), percentile(0.99));
    let calls = latencies.len();
    let sends = calls * batch;
    let per_second = sends as f64 / measurement.as_secs_f64();
    println!(
        "{id}: p50 {p50:.0} µs, p99 {p99:.0} µs per message over {sends} messages in {calls} calls ({per_second:.0} messages per second) in about {syncs} syncs ({:.1} messages per sync, {:.0} µs per sync)",
        sends as f64 / syncs.max(1) as f64,
        measurement.as_secs_f64() * 1e6 / syncs.max(1) as f64,
    );
    if bench_mode {
        let mut figure = serde_json::json!({
            "id": id,
            "p50_us": p50.round(),
            "p99_us": p99.round(),
            "sends": sends,
            "syncs": syncs,
        });
        let file = if batch == 1 {
            "durable_send.json".to_owned()
        } else {
            figure["messages_per_s"] = per_second.round().into();
            figure["batch"] = batch.into();
            format!("durable_send_many_{batch}.json")
        };
        let dir = target_dir().join("strata-bench");
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join(file);
        std::fs::write(&path, format!("{figure}\n")).unwrap();
        println!("{id}: written to {}", path.display());
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
