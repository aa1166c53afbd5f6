//! The team event hub and [`PublishingAuditLog`]: records are published in order, after they
//! are stored, never when the append fails; a subscriber that never reads blocks nobody and is
//! told how many events it lost, while the log keeps every record.

use std::sync::atomic::{AtomicBool, Ordering};

use agent_state::AgentStatus::*;

use super::*;
use crate::{AuditRecord, EventHub, PublishingAuditLog, Received, TeamEvent};

fn transition(from: AgentStatus, to: AgentStatus) -> AuditEvent {
    AuditEvent::Transition { from, to, reason: "test".into() }
}

/// The audit record a received event holds; panics on anything else.
fn audit_record(received: Received) -> AuditRecord {
    match received {
        Received::Event(event) => match &*event {
            TeamEvent::Audit(record) => record.clone(),
            other => panic!("not an audit record: {other:?}"),
        },
        other => panic!("no event: {other:?}"),
    }
}

/// An audit log whose appends fail while `failing` is set; appends nothing then.
#[derive(Default)]
struct Flaky {
    inner: InMemoryAuditLog,
    failing: AtomicBool,
}

#[async_trait]
impl AuditLog for Flaky {
    async fn append(
        &self,
        agent: &AgentId,
        at: Timestamp,
        event: AuditEvent,
    ) -> Result<u64, BackendError> {
        if self.failing.load(Ordering::SeqCst) {
            return Err(BackendError::new("flaky", "the disk is full"));
        }
        self.inner.append(agent, at, event).await
    }

    async fn records(&self, agent: Option<&AgentId>) -> Result<Vec<AuditRecord>, BackendError> {
        self.inner.records(agent).await
    }
}

#[tokio::test]
async fn published_records_arrive_in_order_and_equal_the_stored_ones() {
    let hub = EventHub::new(64);
    let log = PublishingAuditLog::new(Arc::new(InMemoryAuditLog::new()), hub.clone());
    let mut stream = hub.subscribe();
    let steps = [(Initializing, Idle), (Idle, Working), (Working, Idle), (Idle, Terminated)];
    for (i, (from, to)) in steps.into_iter().enumerate() {
        let agent = if i % 2 == 0 { id("a") } else { id("b") };
        let seq = log.append(&agent, Timestamp(i as u64), transition(from, to)).await.unwrap();
        assert_eq!(seq, i as u64);
    }
    let stored = log.records(None).await.unwrap();
    assert_eq!(stored.len(), 4);
    for record in &stored {
        assert_eq!(&audit_record(stream.next().await), record);
    }
    assert_eq!(stream.try_next(), None, "one event per record, no more");
    assert_eq!(crate::verify_chain(&stored), Ok(4));
}

/// A batch is published record by record, in order, once the whole batch is stored; a batch
/// the log refuses publishes nothing.
#[tokio::test]
async fn a_batch_is_published_in_order_after_it_is_stored_and_a_refused_one_not_at_all() {
    let hub = EventHub::new(64);
    let flaky = Arc::new(Flaky::default());
    let log = PublishingAuditLog::new(flaky.clone(), hub.clone());
    let mut stream = hub.subscribe();
    let entry = |agent: &str, at, (from, to)| crate::AuditEntry {
        agent: id(agent),
        at: Timestamp(at),
        event: transition(from, to),
    };
    log.append(&id("a"), Timestamp(0), transition(Initializing, Idle)).await.unwrap();
    let batch = vec![
        entry("b", 1, (Initializing, Idle)),
        entry("a", 2, (Idle, ShuttingDown)),
        entry("b", 3, (Idle, ShuttingDown)),
    ];

    let appended = log.append_many(batch).await.unwrap();

    let stored = log.records(None).await.unwrap();
    assert_eq!(appended, stored[1..]);
    for record in &stored {
        assert_eq!(&audit_record(stream.next().await), record);
    }
    assert_eq!(stream.try_next(), None, "one event per record, no more");

    flaky.failing.store(true, Ordering::SeqCst);
    let refused = vec![entry("a", 4, (ShuttingDown, Terminated))];
    assert!(log.append_many(refused).await.is_err());
    assert_eq!(stream.try_next(), None, "nothing published for a refused batch");
    assert_eq!(log.records(None).await.unwrap(), stored);
}

#[tokio::test]
async fn a_subscriber_that_never_reads_blocks_no_append_and_is_told_what_it_lost() {
    let hub = EventHub::new(4);
    let log = PublishingAuditLog::new(Arc::new(InMemoryAuditLog::new()), hub.clone());
    let mut idle = hub.subscribe();
    for i in 0..10 {
        log.append(&id("a"), Timestamp(i), AuditEvent::MissedHeartbeat { heartbeat: i })
            .await
            .unwrap();
    }
    // The log is lossless: every record is stored.
    let stored = log.records(None).await.unwrap();
    assert_eq!(stored.len(), 10);
    // The stream is not: the subscriber kept only the newest 4 and learns it lost 6.
    assert_eq!(idle.next().await, Received::Lagged(6));
    for record in &stored[6..] {
        assert_eq!(&audit_record(idle.next().await), record);
    }
    assert_eq!(idle.try_next(), None);
}

#[tokio::test]
async fn a_failed_append_publishes_nothing() {
    let hub = EventHub::new(16);
    let flaky = Arc::new(Flaky::default());
    let log = PublishingAuditLog::new(flaky.clone(), hub.clone());
    let mut stream = hub.subscribe();

    flaky.failing.store(true, Ordering::SeqCst);
    let failed = log.append(&id("a"), Timestamp(1), transition(Initializing, Idle)).await;
    assert!(failed.is_err());
    let failed = log.append_record(&id("a"), Timestamp(1), transition(Initializing, Idle)).await;
    assert!(failed.is_err());
    assert_eq!(stream.try_next(), None, "a record that is not stored is not published");

    flaky.failing.store(false, Ordering::SeqCst);
    // Through the trait's default `append_record`: append, then read back.
    log.append(&id("a"), Timestamp(2), transition(Initializing, Idle)).await.unwrap();
    let record = audit_record(stream.try_next().unwrap());
    assert_eq!(record.seq, 0);
    assert_eq!(record.at, Timestamp(2));
    assert_eq!(log.records(None).await.unwrap(), [record]);
    assert_eq!(stream.try_next(), None);
}

#[tokio::test]
async fn reads_go_to_the_inner_log_and_nothing_is_published_unwatched() {
    let hub = EventHub::new(16);
    let inner: Arc<dyn AuditLog> = Arc::new(InMemoryAuditLog::new());
    let log = PublishingAuditLog::new(inner.clone(), hub.clone());
    assert!(!hub.is_watched());
    log.append(&id("a"), Timestamp(1), transition(Initializing, Idle)).await.unwrap();
    let mut stream = hub.subscribe();
    assert!(hub.is_watched());
    assert_eq!(stream.try_next(), None, "an event published before subscribing is not seen");
    log.append(&id("b"), Timestamp(2), transition(Initializing, Idle)).await.unwrap();
    assert_eq!(audit_record(stream.try_next().unwrap()).seq, 1);

    assert_eq!(log.records(None).await.unwrap(), inner.records(None).await.unwrap());
    assert_eq!(log.records_from(1).await.unwrap(), inner.records_from(1).await.unwrap());
    assert_eq!(log.records(Some(&id("a"))).await.unwrap().len(), 1);
    assert_eq!(log.head_of(&id("b")).await.unwrap(), inner.head_of(&id("b")).await.unwrap());
    assert_eq!(log.head_of(&id("b")).await.unwrap().map(|a| a.seq), Some(1));
}

#[tokio::test]
async fn run_events_reach_every_subscriber() {
    let hub = EventHub::new(16);
    let mut first = hub.subscribe();
    let mut second = hub.subscribe();
    let progress = agent_state::RunEvent::Progress {
        run_id: "3f2a".parse().unwrap(),
        kind: "research_agent".into(),
        percent: 40,
        message: "reading docs/a.md".into(),
    };
    hub.publish(TeamEvent::Run { agent: id("exec-1"), event: progress.clone() });
    drop(hub);
    for stream in [&mut first, &mut second] {
        let Received::Event(event) = stream.next().await else { panic!("no event") };
        assert_eq!(*event, TeamEvent::Run { agent: id("exec-1"), event: progress.clone() });
        assert_eq!(stream.next().await, Received::Closed, "the hub is gone");
    }
}

/// Both backends return from `append_record` the record they store.
#[tokio::test]
async fn append_record_returns_what_the_backends_store() {
    let memory = InMemoryAuditLog::new();
    let root = tempfile::tempdir().unwrap();
    let store = run_store::RunStore::create(
        &root.path().join("run"),
        "run-1",
        Timestamp(0),
        run_store::Durability::Synced,
    )
    .unwrap();
    let sled = crate::SledAuditLog::open(&store).unwrap();
    for log in [&memory as &dyn AuditLog, &sled] {
        let (a, b) = (id("a"), id("b"));
        let first = log.append_record(&a, Timestamp(1), transition(Initializing, Idle)).await;
        let first = first.unwrap();
        log.append(&b, Timestamp(2), transition(Initializing, Idle)).await.unwrap();
        let third = log.append_record(&a, Timestamp(3), transition(Idle, Working)).await;
        let third = third.unwrap();
        let stored = log.records(None).await.unwrap();
        assert_eq!(stored.len(), 3);
        assert_eq!(first, stored[0]);
        assert_eq!(third, stored[2]);
        assert_eq!(third.prev_hash, stored[1].hash);
        assert_eq!(crate::verify_chain(&stored), Ok(3));
    }
}

/// An audit log whose appends wait for `open` before storing: an append caught half-way.
#[derive(Default)]
struct Slow {
    inner: InMemoryAuditLog,
    open: tokio::sync::Notify,
}

#[async_trait]
impl AuditLog for Slow {
    async fn append(
        &self,
        agent: &AgentId,
        at: Timestamp,
        event: AuditEvent,
    ) -> Result<u64, BackendError> {
        self.open.notified().await;
        self.inner.append(agent, at, event).await
    }

    async fn records(&self, agent: Option<&AgentId>) -> Result<Vec<AuditRecord>, BackendError> {
        self.inner.records(agent).await
    }
}

#[tokio::test]
async fn a_record_stored_while_a_watcher_subscribes_is_read_or_received() {
    let hub = EventHub::new(16);
    let slow = Arc::new(Slow::default());
    let log = Arc::new(PublishingAuditLog::new(slow.clone(), hub.clone()));
    // An append begins while nobody watches...
    let appending = tokio::spawn({
        let log = log.clone();
        async move { log.append(&id("a"), Timestamp(1), transition(Initializing, Idle)).await }
    });
    tokio::task::yield_now().await;
    // ...a watcher subscribes and reads the log before the record is there...
    let mut stream = hub.subscribe();
    assert!(log.records(None).await.unwrap().is_empty());
    // ...and the record, stored after, reaches it on the stream.
    slow.open.notify_one();
    assert_eq!(appending.await.unwrap().unwrap(), 0);
    let received = stream.try_next().expect("the record, published before the append returned");
    assert_eq!(audit_record(received).seq, 0);
}
