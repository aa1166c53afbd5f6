//! The NATS JetStream backends, against the server at `STRATA_NATS_URL` (default
//! `nats://127.0.0.1:4222`): the conformance suite with restarts (new connections) and second
//! connections, two connections appending at once, the failover of the tool journal, refused
//! values that leave everything as it was, and a damaged record. Every test uses a namespace
//! of its own, deleted afterwards (also when it fails).

use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use agent_core::testing::{StoreFactory, Stores, run_conformance};
use agent_core::tools::ToolOutput;
use agent_core::{
    AgentRecord, AuditAnchor, AuditEvent, AuditLog, NatsAuditLog, NatsStateStore, StateStore,
    verify_chain,
};
use agent_state::{AgentId, TaskFailure, TaskOutcome, Timestamp};
use nats_store::{NatsStore, TestNamespaces};
use serde_json::json;

/// Makes NATS stores, each in a namespace of its own; `reopen` is a new connection, `share`
/// another one beside the first, and `discard` deletes the namespace.
#[derive(Default)]
struct Nats {
    /// Each open handle's connection, by the address of its audit log.
    open: Mutex<HashMap<usize, NatsStore>>,
    reopens: AtomicUsize,
    namespaces: AtomicUsize,
    /// Every namespace made, deleted from the server at the end (also when the test fails).
    made: TestNamespaces,
}

fn key(stores: &Stores) -> usize {
    Arc::as_ptr(&stores.audit).cast::<()>() as usize
}

impl Nats {
    async fn keep(&self, store: NatsStore) -> Stores {
        let stores = Stores {
            audit: Arc::new(NatsAuditLog::open(&store).await.unwrap()),
            state: Arc::new(NatsStateStore::open(&store).await.unwrap()),
        };
        self.open.lock().unwrap().insert(key(&stores), store);
        stores
    }
}

#[async_trait::async_trait]
impl StoreFactory for Nats {
    async fn fresh(&self) -> Stores {
        self.namespaces.fetch_add(1, Ordering::Relaxed);
        self.keep(self.made.connect().await.unwrap()).await
    }

    async fn reopen(&self, stores: Stores) -> Option<Stores> {
        let store = self.open.lock().unwrap().remove(&key(&stores))?;
        drop(stores);
        let again = store.reconnect().await.unwrap();
        drop(store);
        self.reopens.fetch_add(1, Ordering::Relaxed);
        Some(self.keep(again).await)
    }

    async fn share(&self, stores: &Stores) -> Option<Stores> {
        let store = self.open.lock().unwrap().get(&key(stores))?.clone();
        Some(self.keep(store.reconnect().await.unwrap()).await)
    }

    async fn discard(&self, stores: Stores) {
        let store = self.open.lock().unwrap().remove(&key(&stores));
        drop(stores);
        if let Some(store) = store {
            store.delete_namespace().await.unwrap();
        }
    }
}

#[test]
fn nats_stores_pass_the_conformance_suite_with_reconnects() {
    let factory = Nats::default();
    run_conformance(&factory);
    // The probe and the restart scenarios' three, at least.
    let reopens = factory.reopens.load(Ordering::Relaxed);
    assert!(reopens >= 4, "the suite reconnected {reopens} times");
    assert!(factory.open.lock().unwrap().is_empty(), "the suite left namespaces behind");
}

fn event(n: u64) -> AuditEvent {
    AuditEvent::MissedHeartbeat { heartbeat: n }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_connections_appending_at_once_keep_one_linear_chain() {
    let namespaces = TestNamespaces::new();
    let store = namespaces.connect().await.unwrap();
    let mut writers = Vec::new();
    let start = Arc::new(tokio::sync::Barrier::new(2));
    for w in 0..2 {
        let connection = store.reconnect().await.unwrap();
        let log = NatsAuditLog::open(&connection).await.unwrap();
        let start = Arc::clone(&start);
        writers.push(tokio::spawn(async move {
            let agent = AgentId::new(format!("writer-{w}"));
            start.wait().await;
            let mut mine = Vec::new();
            for i in 0..40 {
                mine.push(log.append_record(&agent, Timestamp(i), event(i)).await.unwrap());
                // Agents append between pieces of work, not in a tight loop (a writer in a
                // tight loop wins nearly every race against one whose tail is stale).
                tokio::time::sleep(std::time::Duration::from_micros(500)).await;
            }
            mine
        }));
    }
    let mut returned = Vec::new();
    for writer in writers {
        returned.extend(writer.await.unwrap());
    }
    let reader = NatsAuditLog::open(&store.reconnect().await.unwrap()).await.unwrap();
    let log = reader.records(None).await.unwrap();
    assert_eq!(verify_chain(&log).unwrap(), 80);
    returned.sort_by_key(|r| r.seq);
    assert_eq!(log, returned, "every append returned the record the log holds");
    // Both writers really interleaved: neither took all of its places in one run.
    let switches = log.windows(2).filter(|w| w[0].agent != w[1].agent).count();
    assert!(switches > 1, "the writers did not interleave: {switches} switches");
    for w in 0..2 {
        let agent = AgentId::new(format!("writer-{w}"));
        let last = log.iter().rfind(|r| r.agent == agent).map(AuditAnchor::of);
        assert_eq!(reader.head_of(&agent).await.unwrap(), last);
    }
    assert_eq!(reader.last_anchor().await.unwrap(), log.last().map(AuditAnchor::of));
}

#[tokio::test]
async fn an_append_on_a_stale_tail_is_refused_by_the_server_and_built_again() {
    let namespaces = TestNamespaces::new();
    let store = namespaces.connect().await.unwrap();
    let first = NatsAuditLog::open(&store).await.unwrap();
    let second = NatsAuditLog::open(&store.reconnect().await.unwrap()).await.unwrap();
    let (a, b) = (AgentId::new("a"), AgentId::new("b"));
    assert_eq!(first.append(&a, Timestamp(0), event(0)).await.unwrap(), 0);
    // `second` reads the tail (record 0) and appends record 1; `first` still believes the log
    // ends at record 0, and must not write a second record 1.
    assert_eq!(second.append(&b, Timestamp(1), event(1)).await.unwrap(), 1);
    let record = first.append_record(&a, Timestamp(2), event(2)).await.unwrap();
    assert_eq!(record.seq, 2);
    let log = second.records(None).await.unwrap();
    assert_eq!(record.prev_hash, log[1].hash);
    assert_eq!(verify_chain(&log).unwrap(), 3);
    assert_eq!(log[2], record);
    // The first append of a log expects last sequence 0, which the server checks too: record 0
    // cannot be written twice either.
    let mut headers = async_nats::HeaderMap::new();
    headers.insert(async_nats::header::NATS_EXPECTED_LAST_SEQUENCE, "0");
    let subject = format!("{}._a", store.subject("audit"));
    let refused = match store.jetstream().publish_with_headers(subject, headers, "x".into()).await {
        Ok(ack) => ack.await.map(|_| ()),
        Err(err) => Err(err),
    };
    let err = refused.unwrap_err();
    assert_eq!(err.kind(), async_nats::jetstream::context::PublishErrorKind::WrongLastSequence);
    assert_eq!(second.records(None).await.unwrap(), log);
}

#[tokio::test]
async fn a_call_begun_before_a_kill_is_seen_by_the_next_connection() {
    let namespaces = TestNamespaces::new();
    let store = namespaces.connect().await.unwrap();
    let key = "bottom-1/task-1:s1#1#0";
    {
        let first = store.reconnect().await.unwrap();
        let journal = NatsStateStore::open(&first).await.unwrap();
        journal.begin_tool(key).await.unwrap();
        // The process dies here, mid-command: its connection goes with it.
    }
    let second = NatsStateStore::open(&store.reconnect().await.unwrap()).await.unwrap();
    assert_eq!(
        second.tool(key).await.unwrap(),
        Some(None),
        "the call is begun, not to be run again"
    );
    let output = ToolOutput { success: true, output: "done".into(), data: json!({"exit_code": 0}) };
    second.record_tool(key, &output).await.unwrap();
    let third = NatsStateStore::open(&store.reconnect().await.unwrap()).await.unwrap();
    assert_eq!(third.tool(key).await.unwrap(), Some(Some(output)));
}

#[tokio::test]
async fn values_too_large_for_a_message_are_refused_and_change_nothing() {
    let namespaces = TestNamespaces::new();
    let store = namespaces.connect().await.unwrap();
    let log = NatsAuditLog::open(&store).await.unwrap();
    let state = NatsStateStore::open(&store).await.unwrap();
    let agent = AgentId::new("bottom-1");
    let huge = "x".repeat(2 * 1024 * 1024);
    log.append(&agent, Timestamp(0), event(0)).await.unwrap();
    let refused = AuditEvent::Denied { action: huge.clone(), error: "too big".into() };
    let err = log.append(&agent, Timestamp(1), refused).await.unwrap_err();
    assert!(err.to_string().contains("max_payload"), "{err}");
    assert!(err.to_string().contains("bottom-1"), "{err}");
    assert_eq!(log.records(None).await.unwrap().len(), 1, "the refused record is not in the log");
    assert_eq!(log.append(&agent, Timestamp(2), event(2)).await.unwrap(), 1);
    assert_eq!(verify_chain(&log.records(None).await.unwrap()).unwrap(), 2);

    let key = "bottom-1/task-1:s1#1#0";
    state.begin_tool(key).await.unwrap();
    let big = ToolOutput { success: true, output: huge.clone(), data: json!(null) };
    let err = state.record_tool(key, &big).await.unwrap_err();
    assert!(err.to_string().contains(key), "{err}");
    assert_eq!(state.tool(key).await.unwrap(), Some(None), "the call is still begun");

    let record = AgentRecord {
        id: agent.clone(),
        metrics: Default::default(),
        retries: 0,
        heartbeat: 3,
        processed: Vec::new(),
        behavior: json!({}),
        audit_head: None,
        parts: None,
    };
    state.save_agent(&record).await.unwrap();
    let bloated = AgentRecord { behavior: json!({ "notes": huge.clone() }), ..record.clone() };
    let err = state.save_agent(&bloated).await.unwrap_err();
    assert!(err.to_string().contains("agent `bottom-1`"), "{err}");
    assert_eq!(state.agents().await.unwrap(), vec![record]);

    let outcome = TaskOutcome::Failed {
        task_id: "task-1".into(),
        reason: TaskFailure::InvalidPlan { reason: huge },
    };
    assert!(state.record_outcome(&outcome).await.is_err());
    assert_eq!(state.outcomes().await.unwrap(), Vec::new());
}

#[tokio::test]
async fn a_damaged_audit_message_is_an_error_naming_its_record() {
    let namespaces = TestNamespaces::new();
    let store = namespaces.connect().await.unwrap();
    let log = NatsAuditLog::open(&store).await.unwrap();
    let agent = AgentId::new("bottom-1");
    log.append(&agent, Timestamp(0), event(0)).await.unwrap();
    // Written past the log's checks, as a foreign writer could.
    let subject = format!("{}._bottom-1", store.subject("audit"));
    store.jetstream().publish(subject, "not a record".into()).await.unwrap().await.unwrap();

    let err = log.records(None).await.unwrap_err();
    assert!(err.to_string().contains("audit record 1 cannot be read"), "{err}");
    let err = log.append(&agent, Timestamp(2), event(2)).await.unwrap_err();
    assert!(err.to_string().contains("audit record 1 cannot be read"), "{err}");
}

/// An append whose acknowledgement is lost goes on: the record is sent again, expected at the
/// same place, and the log ends with one linear chain, each record once. The server is frozen
/// (SIGSTOP) with the first record sent to it, past the 5 s its acknowledgement is waited for
/// and the 5 s the look at the log's tail that follows waits, then goes on and stores it
/// (regression: an acknowledgement lost with the tail unreadable failed the append, and an
/// agent shutting down then failed to shut down, after a NATS restart).
#[test]
fn appends_whose_acknowledgement_is_lost_go_on_and_land_once() {
    let dir = tempfile::tempdir().unwrap();
    let server = nats_store::TestServer::with_jetstream(dir.path()).unwrap();
    let runtime =
        tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
    let agent = AgentId::new("top-b");
    let (store, log) = runtime.block_on(async {
        let store = NatsStore::connect(&server.url(), "lost-ack").await.unwrap();
        let log = Arc::new(NatsAuditLog::open(&store).await.unwrap());
        log.append(&agent, Timestamp(0), event(0)).await.unwrap();
        (store, log)
    });
    server.freeze().unwrap();
    let writer = {
        let (log, agent) = (Arc::clone(&log), agent.clone());
        runtime.spawn(async move {
            let mut seqs = Vec::new();
            for n in 1..=3 {
                seqs.push(log.append(&agent, Timestamp(n), event(n)).await);
            }
            seqs
        })
    };
    std::thread::sleep(std::time::Duration::from_secs(11));
    server.thaw().unwrap();
    let seqs = runtime.block_on(writer).unwrap();
    let seqs: Vec<u64> = seqs.into_iter().map(|s| s.expect("the append went on")).collect();
    assert_eq!(seqs, vec![1, 2, 3]);
    let records = runtime.block_on(async {
        let reader = NatsAuditLog::open(&store.reconnect().await.unwrap()).await.unwrap();
        reader.records(None).await.unwrap()
    });
    assert_eq!(verify_chain(&records).unwrap(), 4);
    let events: Vec<&AuditEvent> = records.iter().map(|r| &r.event).collect();
    assert_eq!(events, vec![&event(0), &event(1), &event(2), &event(3)]);
}
