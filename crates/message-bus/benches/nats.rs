//! Benchmarks of the NATS bus (`NatsBus`, feature `nats`, #19) on the server at
//! `STRATA_NATS_URL` (default `nats://127.0.0.1:4222`), which must be running with JetStream:
//! the bench fails, naming the URL, when it is not. Every message is a status report like the
//! ones agents send every heartbeat; the bus stores it in its encoded envelope.
//!
//! - `nats_bus/bare_publish_ack` (criterion): a bare async-nats JetStream publish of that
//!   envelope's bytes, awaiting its acknowledgement before the next publish, to one subject of a
//!   stream made like the bus's (file storage, discard new per subject, the same per-subject
//!   limit, direct get, the same duplicate window), without a `Nats-Msg-Id`.
//! - `nats_bus/bus_send` (criterion): `NatsBus::send` of the same message to one registered
//!   agent, awaited before the next: the encoding, the recipient's registration (from the
//!   cache), one publish with a `Nats-Msg-Id` (which the server checks for duplicates) and its
//!   acknowledgement.
//!
//!   Both go through one connection and one tokio multi-thread runtime. Nothing reads the
//!   messages: both streams are purged between samples, outside the timing, and the bus's
//!   inboxes are large enough that none fills within a sample.
//! - `nats_bus/send_vs_bare` (figure, written by this bench to
//!   `<target>/strata-bench/nats_send_vs_bare.json`): the same two loops timed by the bench
//!   itself in the same process, in [`ROUNDS`] rounds of [`ROUND`] messages each (the order of
//!   the two alternating from round to round, both streams purged before each round):
//!   `publish_acks_per_s` and `bus_sends_per_s` over all rounds, and `bus_over_bare`, the median
//!   over the rounds of the bus's rate divided by the bare rate of the same round (steadier on a
//!   loaded machine than the ratio of the totals, which is printed too). #19's target is at
//!   least 0.8.
//! - `nats_bus/cross_worker_hop` (figure, `<target>/strata-bench/nats_cross_worker_hop.json`):
//!   two client connections to the server (`NatsStore::connect` twice, as two processes would
//!   have), each with its own `NatsBus` of the same namespace, the sender and the receiver two
//!   tasks of one multi-thread runtime. The sender sends on one; the receiver, on the other,
//!   reads its inbox as a worker would with this bus, which has no push delivery: `take` in a
//!   loop with no pause (each `take` that finds nothing is one no-wait fetch, a round trip to
//!   the server), then `ack` of what it took. One message is in flight at a time: the next is
//!   sent once the receiver has acknowledged the last. A hop is the time from just before
//!   `send` until the `take` that returns the message has returned (one clock: both ends are in
//!   this process), so it includes the publish and its acknowledgement (`send_p50_us`: the
//!   `send` call alone), the wait until one of the receiver's `take`s finds the message, and its
//!   delivery and decoding; not the `ack`. `p50_us`, `p99_us` over [`HOPS`] hops after
//!   [`WARM_UP_HOPS`] unmeasured ones, and `takes_per_hop`: how many `take`s the receiver made
//!   per message, the one that found it included. It measures the bus and the server on one
//!   machine (loopback, both clients and the server sharing its cores), not a network.
//!
//! Each of the three works in a namespace of its own (nats-store's `TestNamespaces`), deleted at
//! the end, also when the bench fails. Run without `--bench` (as `cargo test --benches` does), the two
//! figures are measured over a few messages and not written.
#![allow(missing_docs)]
#![allow(clippy::unwrap_used, clippy::expect_used, reason = "benchmarks")]
#![allow(
    clippy::print_stdout,
    clippy::print_stderr,
    reason = "the figures are printed next to criterion's output"
)]

use std::path::PathBuf;
use std::time::{Duration, Instant};

use agent_state::{Address, AgentId, Message, MessageId, MessageKind, Timestamp};
use async_nats::jetstream::stream::{self, DiscardPolicy, StorageType};
use criterion::{Criterion, SamplingMode, Throughput};
use message_bus::{MessageBus, NatsBus};
use nats_store::{DEFAULT_URL, NatsStore, TestNamespaces, URL_VAR, test_url};
use tokio::runtime::Runtime;

/// Messages in one round of the ratio's measurement: short rounds, so that a burst of load from
/// elsewhere on the machine falls on both loops alike.
const ROUND: u64 = 200;
/// Rounds of the ratio's measurement.
const ROUNDS: u64 = 50;
/// Measured hops.
const HOPS: usize = 2_000;
/// Hops before the measured ones (the receiver's consumer is made on its first `take`).
const WARM_UP_HOPS: usize = 100;
/// How long the sender waits for one hop before the bench fails.
const HOP_TIMEOUT: Duration = Duration::from_secs(10);
/// The inbox capacity of the buses (and the per-subject limit of the bare stream): more than a
/// sample sends.
const CAPACITY: usize = 1_000_000;
/// The part (stream name and subject) of the bare stream.
const BARE: &str = "bare";
const RATIO_ID: &str = "nats_bus/send_vs_bare";
const HOP_ID: &str = "nats_bus/cross_worker_hop";

fn main() {
    let bench_mode = std::env::args().any(|arg| arg == "--bench");
    let rt = runtime();
    let namespaces = Namespaces::new(&rt);
    send_vs_bare(&rt, &namespaces, bench_mode);
    cross_worker_hop(&rt, &namespaces, bench_mode);
    let mut criterion = Criterion::default().configure_from_args();
    nats_bus(&mut criterion, &rt, &namespaces);
    criterion.final_summary();
    drop(namespaces);
}

fn runtime() -> Runtime {
    tokio::runtime::Builder::new_multi_thread().enable_all().build().unwrap()
}

/// The namespaces this run made (nats-store's `TestNamespaces`: deleted when dropped, also
/// when the bench fails).
struct Namespaces(TestNamespaces);

impl Namespaces {
    /// Checks that the server answers, with a clear message when it does not.
    fn new(rt: &Runtime) -> Self {
        let url = test_url();
        if let Err(err) = rt.block_on(NatsStore::connect(&url, "bench")) {
            eprintln!(
                "the nats bench needs a NATS server with JetStream, at {url} ({URL_VAR}, default {DEFAULT_URL}); {err}"
            );
            std::process::exit(1);
        }
        Self(TestNamespaces::new())
    }

    /// A connection to a new namespace.
    fn connect(&self, rt: &Runtime) -> NatsStore {
        rt.block_on(self.0.connect()).unwrap_or_else(|err| panic!("connecting again: {err}"))
    }

    /// Another connection to `namespace`, as another process would make.
    fn connect_to(&self, rt: &Runtime, namespace: &str) -> NatsStore {
        rt.block_on(NatsStore::connect(&test_url(), namespace))
            .unwrap_or_else(|err| panic!("connecting again: {err}"))
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

/// A bus with `mid-1` and `bottom-1` registered, and a stream made like its own for bare
/// publishes, in `store`'s namespace.
struct Pair {
    bus: NatsBus,
    bare: stream::Stream,
    bare_subject: String,
    from: AgentId,
    to: AgentId,
    /// The envelope the bus stores for a [`message`], as the bare publishes' payload.
    payload: Vec<u8>,
    next_id: u64,
}

impl Pair {
    fn new(rt: &Runtime, store: &NatsStore) -> Self {
        rt.block_on(async {
            let bus = NatsBus::with_capacity(store, CAPACITY).await.unwrap();
            let (from, to) = (AgentId::new("mid-1"), AgentId::new("bottom-1"));
            bus.register(&from).await.unwrap();
            bus.register(&to).await.unwrap();
            let mut bus_stream =
                store.jetstream().get_stream(store.name(NatsBus::STREAM)).await.unwrap();
            let like = bus_stream.info().await.unwrap().config.clone();
            let prefix = store.subject(BARE);
            let config = stream::Config {
                subjects: vec![format!("{prefix}.>")],
                storage: StorageType::File,
                discard: DiscardPolicy::New,
                discard_new_per_subject: true,
                max_messages_per_subject: like.max_messages_per_subject,
                allow_direct: true,
                duplicate_window: like.duplicate_window,
                ..Default::default()
            };
            let bare = store.stream(BARE, config).await.unwrap();
            let check = bare.cached_info().config.clone();
            assert_eq!(
                (
                    check.storage,
                    check.discard,
                    check.discard_new_per_subject,
                    check.max_messages_per_subject,
                    check.allow_direct,
                    check.duplicate_window,
                    check.num_replicas
                ),
                (
                    like.storage,
                    like.discard,
                    like.discard_new_per_subject,
                    like.max_messages_per_subject,
                    like.allow_direct,
                    like.duplicate_window,
                    like.num_replicas
                ),
                "the bare stream is not made like the bus's"
            );
            let payload = agent_state::encode(&message(0, &from, &to)).unwrap();
            Self {
                bare_subject: format!("{prefix}.agent.{to}"),
                bus,
                bare,
                from,
                to,
                payload,
                next_id: 0,
            }
        })
    }

    /// `count` bare publishes, each acknowledged before the next.
    async fn publish_bare(&self, count: u64) -> Duration {
        let js = self.bus.store().jetstream();
        let start = Instant::now();
        for _ in 0..count {
            js.publish(self.bare_subject.clone(), self.payload.clone().into())
                .await
                .unwrap()
                .await
                .unwrap();
        }
        start.elapsed()
    }

    /// `count` sends on the bus, each returned before the next.
    async fn send(&mut self, count: u64) -> Duration {
        let start = Instant::now();
        for _ in 0..count {
            self.next_id += 1;
            self.bus.send(message(self.next_id, &self.from, &self.to)).await.unwrap();
        }
        start.elapsed()
    }

    /// Empties both streams.
    async fn purge(&mut self) {
        let store = self.bus.store();
        let bus_stream = store.jetstream().get_stream(store.name(NatsBus::STREAM)).await.unwrap();
        bus_stream.purge().await.unwrap();
        self.bare.purge().await.unwrap();
    }
}

/// Bus sends against bare publishes in alternating rounds; prints the ratio and, under
/// `cargo bench`, writes it to `<target>/strata-bench/nats_send_vs_bare.json`.
fn send_vs_bare(rt: &Runtime, namespaces: &Namespaces, bench_mode: bool) {
    let (round, rounds) = if bench_mode { (ROUND, ROUNDS) } else { (20, 2) };
    let store = namespaces.connect(rt);
    let mut pair = Pair::new(rt, &store);
    let (mut bare, mut bus) = (Duration::ZERO, Duration::ZERO);
    let mut ratios = Vec::new();
    rt.block_on(async {
        // Unmeasured: the first publishes on a connection and to a stream cost more.
        pair.publish_bare(round).await;
        pair.send(round).await;
        for r in 0..rounds {
            pair.purge().await;
            let (bare_round, bus_round) = if r % 2 == 0 {
                let bare = pair.publish_bare(round).await;
                (bare, pair.send(round).await)
            } else {
                let bus = pair.send(round).await;
                (pair.publish_bare(round).await, bus)
            };
            bare += bare_round;
            bus += bus_round;
            ratios.push(bare_round.as_secs_f64() / bus_round.as_secs_f64());
        }
        pair.purge().await;
    });
    let messages = round * rounds;
    let bare_per_s = messages as f64 / bare.as_secs_f64();
    let bus_per_s = messages as f64 / bus.as_secs_f64();
    ratios.sort_by(f64::total_cmp);
    let median = ratios[ratios.len() / 2];
    println!(
        "{RATIO_ID}: bus {bus_per_s:.0} sends/s, bare {bare_per_s:.0} publish+acks/s over {messages} messages each; bus/bare median {median:.3} over {rounds} rounds (from {:.3} to {:.3}), {:.3} from the totals",
        ratios[0],
        ratios[ratios.len() - 1],
        bus_per_s / bare_per_s,
    );
    if bench_mode {
        write_figure(
            "nats_send_vs_bare.json",
            &serde_json::json!({
                "id": RATIO_ID,
                "publish_acks_per_s": bare_per_s.round(),
                "bus_sends_per_s": bus_per_s.round(),
                "bus_over_bare": (median * 1000.0).round() / 1000.0,
                "messages": messages,
            }),
        );
    }
}

/// One message at a time from a bus on one connection to a worker polling `take` on another;
/// prints p50 and p99 and, under `cargo bench`, writes them to
/// `<target>/strata-bench/nats_cross_worker_hop.json`.
fn cross_worker_hop(rt: &Runtime, namespaces: &Namespaces, bench_mode: bool) {
    let (hops, warm_up) = if bench_mode { (HOPS, WARM_UP_HOPS) } else { (20, 5) };
    let sender_store = namespaces.connect(rt);
    let receiver_store = namespaces.connect_to(rt, sender_store.namespace());
    let (from, to) = (AgentId::new("mid-1"), AgentId::new("bottom-1"));
    let (sends, mut latencies, takes) = rt.block_on(async {
        let sender = NatsBus::open(&sender_store).await.unwrap();
        sender.register(&from).await.unwrap();
        sender.register(&to).await.unwrap();
        let receiver = NatsBus::open(&receiver_store).await.unwrap();
        let total = warm_up + hops;
        let base = Instant::now();
        let (done_tx, mut done_rx) = tokio::sync::mpsc::unbounded_channel::<()>();
        let inbox = Address::from(&to);
        let worker = tokio::spawn(async move {
            let mut latencies = Vec::with_capacity(total);
            let mut takes = 0_u64;
            while latencies.len() < total {
                let taken = receiver.take(&inbox, 16).await.unwrap();
                let now = base.elapsed();
                takes += 1;
                for m in &taken {
                    let sent =
                        m.content.get("sent_ns").and_then(serde_json::Value::as_u64).unwrap();
                    latencies.push(now - Duration::from_nanos(sent));
                }
                if !taken.is_empty() {
                    let ids: Vec<MessageId> = taken.iter().map(|m| m.id).collect();
                    assert_eq!(receiver.ack(&inbox, &ids).await.unwrap(), ids.len());
                    for _ in &taken {
                        let _ = done_tx.send(());
                    }
                }
            }
            (latencies, takes)
        });
        let mut sends = Vec::with_capacity(total);
        for n in 0..total {
            let sent = base.elapsed();
            let mut m = message(n as u64, &from, &to);
            m.content =
                serde_json::json!({ "task": "write hello.txt", "sent_ns": sent.as_nanos() as u64 });
            sender.send(m).await.unwrap();
            sends.push(base.elapsed() - sent);
            match tokio::time::timeout(HOP_TIMEOUT, done_rx.recv()).await {
                Ok(Some(())) => {}
                Ok(None) => panic!("the receiver stopped after {n} hops"),
                Err(_) => panic!("hop {n} did not arrive within {} s", HOP_TIMEOUT.as_secs()),
            }
        }
        let (latencies, takes) = worker.await.unwrap();
        (sends, latencies, takes)
    });
    // Polls are counted over all hops, the warm-up's too.
    let takes_per_hop = takes as f64 / latencies.len() as f64;
    let mut sends = sends[warm_up..].to_vec();
    latencies.drain(..warm_up);
    let (p50, p99) = (percentile_us(&mut latencies, 0.50), percentile_us(&mut latencies, 0.99));
    let send_p50 = percentile_us(&mut sends, 0.50);
    println!(
        "{HOP_ID}: p50 {p50:.0} µs, p99 {p99:.0} µs over {hops} hops (send alone: p50 {send_p50:.0} µs; {takes_per_hop:.2} takes per hop)"
    );
    if bench_mode {
        write_figure(
            "nats_cross_worker_hop.json",
            &serde_json::json!({
                "id": HOP_ID,
                "p50_us": p50.round(),
                "p99_us": p99.round(),
                "send_p50_us": send_p50.round(),
                "hops": hops,
                "takes_per_hop": (takes_per_hop * 100.0).round() / 100.0,
            }),
        );
    }
}

/// The `p` quantile of `times`, in microseconds.
fn percentile_us(times: &mut [Duration], p: f64) -> f64 {
    times.sort_unstable();
    let i = ((times.len() as f64 * p).ceil() as usize).clamp(1, times.len()) - 1;
    times[i].as_secs_f64() * 1e6
}

fn nats_bus(c: &mut Criterion, rt: &Runtime, namespaces: &Namespaces) {
    let store = namespaces.connect(rt);
    let mut pair = Pair::new(rt, &store);
    let mut group = c.benchmark_group("nats_bus");
    group
        .sampling_mode(SamplingMode::Flat)
        .sample_size(10)
        .warm_up_time(Duration::from_secs(1))
        .measurement_time(Duration::from_secs(3))
        .throughput(Throughput::Elements(1));
    group.bench_function("bare_publish_ack", |bench| {
        bench.iter_custom(|iters| {
            rt.block_on(async {
                let spent = pair.publish_bare(iters).await;
                pair.purge().await;
                spent
            })
        });
    });
    group.bench_function("bus_send", |bench| {
        bench.iter_custom(|iters| {
            rt.block_on(async {
                let spent = pair.send(iters).await;
                pair.purge().await;
                spent
            })
        });
    });
    group.finish();
}

/// Writes `figure` to `<target>/strata-bench/<file>`, where `cargo xtask bench` reads it.
fn write_figure(file: &str, figure: &serde_json::Value) {
    let dir = target_dir().join("strata-bench");
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join(file);
    std::fs::write(&path, format!("{figure}\n")).unwrap();
    println!("written to {}", path.display());
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
