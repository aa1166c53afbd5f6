//! Benchmarks of the in-memory bus through `Arc<dyn MessageBus>`: send throughput and round trips.
#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

use std::sync::Arc;
use std::time::{Duration, Instant};

use agent_state::{Address, AgentId, Message, MessageId, MessageKind, Timestamp};
use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use message_bus::{InMemoryBus, MessageBus};
use tokio::runtime::Runtime;

/// Messages the receiver takes and acknowledges at once in the fire-and-forget benchmarks.
const BATCH: usize = 256;

fn runtime() -> Runtime {
    tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap()
}

/// A bus with agents `a` and `b` registered.
fn pair(rt: &Runtime) -> (Arc<dyn MessageBus>, AgentId, AgentId) {
    let bus: Arc<dyn MessageBus> = Arc::new(InMemoryBus::new());
    let (a, b) = (AgentId::new("mid-1"), AgentId::new("bottom-1"));
    rt.block_on(async {
        bus.register(&a).await.unwrap();
        bus.register(&b).await.unwrap();
    });
    (bus, a, b)
}

fn message(n: u64, from: &AgentId, to: &AgentId, kind: MessageKind) -> Message {
    Message::new(
        MessageId::from_u128(u128::from(n)),
        from,
        to,
        kind,
        serde_json::Value::Null,
        Timestamp(n),
    )
}

/// Takes and acknowledges everything pending in `inbox`.
async fn drain(bus: &dyn MessageBus, inbox: &Address, ids: &mut Vec<MessageId>) {
    loop {
        let taken = bus.take(inbox, BATCH).await.unwrap();
        if taken.is_empty() {
            return;
        }
        ids.clear();
        ids.extend(taken.iter().map(|m| m.id));
        assert_eq!(bus.ack(inbox, ids).await.unwrap(), ids.len());
    }
}

fn fire_and_forget(c: &mut Criterion) {
    let rt = runtime();
    let (bus, a, b) = pair(&rt);
    let inbox = Address::from(&b);
    let template = message(0, &a, &b, MessageKind::ProgressReport);
    let mut group = c.benchmark_group("in_memory");
    group.throughput(Throughput::Elements(1));

    // One sender, one inbox; the receiver takes and acknowledges every BATCH messages, and
    // that cost is included.
    group.bench_function("send_with_batched_take_ack", |bench| {
        bench.iter_custom(|iters| {
            rt.block_on(async {
                let mut ids = Vec::with_capacity(BATCH);
                let start = Instant::now();
                for i in 0..iters {
                    let mut m = template.clone();
                    m.id = MessageId::from_u128(u128::from(i));
                    bus.send(m).await.unwrap();
                    if (i + 1) % BATCH as u64 == 0 {
                        drain(&*bus, &inbox, &mut ids).await;
                    }
                }
                drain(&*bus, &inbox, &mut ids).await;
                start.elapsed()
            })
        });
    });

    // The same, timing only the sends.
    group.bench_function("send_only", |bench| {
        bench.iter_custom(|iters| {
            rt.block_on(async {
                let mut ids = Vec::with_capacity(BATCH);
                let mut spent = Duration::ZERO;
                let mut sent = 0;
                while sent < iters {
                    let batch = (iters - sent).min(BATCH as u64);
                    let start = Instant::now();
                    for i in sent..sent + batch {
                        let mut m = template.clone();
                        m.id = MessageId::from_u128(u128::from(i));
                        bus.send(m).await.unwrap();
                    }
                    spent += start.elapsed();
                    sent += batch;
                    drain(&*bus, &inbox, &mut ids).await;
                }
                spent
            })
        });
    });
    group.finish();
}

fn request_reply(c: &mut Criterion) {
    let rt = runtime();
    let (bus, a, b) = pair(&rt);
    let (a_inbox, b_inbox) = (Address::from(&a), Address::from(&b));
    let mut group = c.benchmark_group("in_memory");
    group.throughput(Throughput::Elements(1));

    // A sends a request to B; B takes it, replies and acknowledges; A takes the reply and
    // acknowledges it. Six bus calls per round trip.
    group.bench_function("request_reply_round_trip", |bench| {
        bench.iter_custom(|iters| {
            rt.block_on(async {
                let start = Instant::now();
                for i in 0..iters {
                    let request = message(2 * i, &a, &b, MessageKind::StatusQuery);
                    bus.send(request).await.unwrap();
                    let taken = bus.take(&b_inbox, 1).await.unwrap();
                    let reply = message(2 * i + 1, &b, &a, MessageKind::StatusReport)
                        .in_reply_to(taken[0].id);
                    bus.send(reply).await.unwrap();
                    bus.ack(&b_inbox, &[taken[0].id]).await.unwrap();
                    let answer = bus.take(&a_inbox, 1).await.unwrap();
                    assert_eq!(answer[0].correlation_id, Some(taken[0].id));
                    bus.ack(&a_inbox, &[answer[0].id]).await.unwrap();
                }
                start.elapsed()
            })
        });
    });
    group.finish();
}

criterion_group!(benches, fire_and_forget, request_reply);
criterion_main!(benches);
