//! The NATS backend, against the server at `STRATA_NATS_URL` (default `nats://127.0.0.1:4222`):
//! the conformance suite with restarts as new connections, redelivery after a reconnect, two
//! processes on one bus, refused input that changes nothing on the server, and a stream or
//! capacity that does not fit.
//!
//! Every test works in namespaces of its own (nats-store's `TestNamespaces`), deleted at the
//! end, also when it fails.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, reason = "tests")]

use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use agent_state::{Address, AgentId, Message, MessageId, MessageKind, Timestamp};
use async_nats::jetstream::stream;
use futures_util::StreamExt as _;
use message_bus::testing::{BusFactory, run_conformance};
use message_bus::{
    DEFAULT_INBOX_CAPACITY, InboxError, MessageBus, NatsBus, NatsBusError, RegisterError, SendError,
};
use nats_store::{NatsError, NatsStore, TestNamespaces};

/// Makes NATS buses, each in a new namespace; `reopen` drops the bus and opens it again on a
/// new connection, as a restarted process would.
struct Nats {
    namespaces: TestNamespaces,
    /// The store of each live bus, by the address of its allocation.
    open: Mutex<HashMap<usize, NatsStore>>,
    reopens: Arc<AtomicUsize>,
}

fn key(bus: &Arc<dyn MessageBus>) -> usize {
    Arc::as_ptr(bus).cast::<()>() as usize
}

impl Nats {
    fn keep(&self, store: NatsStore, bus: NatsBus) -> Arc<dyn MessageBus> {
        let bus: Arc<dyn MessageBus> = Arc::new(bus);
        self.open.lock().unwrap().insert(key(&bus), store);
        bus
    }
}

#[async_trait::async_trait]
impl BusFactory for Nats {
    async fn fresh(&self) -> Arc<dyn MessageBus> {
        let store = self.namespaces.connect().await.unwrap();
        let bus = NatsBus::open(&store).await.unwrap();
        self.keep(store, bus)
    }

    async fn reopen(&self, bus: Arc<dyn MessageBus>) -> Option<Arc<dyn MessageBus>> {
        let store = self.open.lock().unwrap().remove(&key(&bus))?;
        assert_eq!(Arc::strong_count(&bus), 1, "the suite holds another handle to the bus");
        drop(bus);
        let store = store.reconnect().await.unwrap();
        // `open`, not `with_capacity`: the capacity must come back from the server.
        let bus = NatsBus::open(&store).await.unwrap();
        self.reopens.fetch_add(1, Ordering::Relaxed);
        Some(self.keep(store, bus))
    }

    async fn fresh_with_capacity(&self, per_inbox: usize) -> Option<Arc<dyn MessageBus>> {
        let store = self.namespaces.connect().await.unwrap();
        let bus = NatsBus::with_capacity(&store, per_inbox).await.unwrap();
        Some(self.keep(store, bus))
    }
}

#[test]
fn nats_bus_passes_the_conformance_suite_with_reconnects() {
    let reopens = Arc::new(AtomicUsize::new(0));
    run_conformance(Nats {
        namespaces: TestNamespaces::new(),
        open: Mutex::new(HashMap::new()),
        reopens: Arc::clone(&reopens),
    });
    // The probe, the restart scenario's two, and the generated sequences' restarts.
    assert!(reopens.load(Ordering::Relaxed) > 3, "the suite reopened {reopens:?} times");
}

// ---------------------------------------------------------------------------------------------

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap()
}

fn id(n: u128) -> MessageId {
    MessageId::from_u128(n)
}

fn msg(n: u128, from: impl Into<Address>, to: impl Into<Address>) -> Message {
    Message::new(
        id(n),
        from,
        to,
        MessageKind::TaskAssign,
        serde_json::json!({ "n": n as u64, "text": format!("message {n}") }),
        Timestamp(n as u64),
    )
}

/// The bus on `store`, with `agents` registered.
async fn registered<const N: usize>(store: &NatsStore, agents: [&AgentId; N]) -> NatsBus {
    let bus = NatsBus::open(store).await.unwrap();
    for agent in agents {
        bus.register(agent).await.unwrap();
    }
    bus
}

fn ids(messages: &[Message]) -> Vec<MessageId> {
    messages.iter().map(|m| m.id).collect()
}

/// How many messages the bus's stream holds, per subject.
async fn stored(store: &NatsStore) -> HashMap<String, usize> {
    let stream = store.jetstream().get_stream(store.name(NatsBus::STREAM)).await.unwrap();
    stream
        .info_with_subjects(format!("{}.>", store.subject(NatsBus::STREAM)))
        .await
        .unwrap()
        .map(|s| s.unwrap())
        .collect()
        .await
}

/// The keys of the registrations bucket (delete markers included) and its last revision.
async fn registrations(store: &NatsStore) -> (Vec<String>, u64) {
    let name = store.name(NatsBus::AGENTS_BUCKET);
    let mut stream = store.jetstream().get_stream(format!("KV_{name}")).await.unwrap();
    let last = stream.info().await.unwrap().state.last_sequence;
    let mut keys: Vec<String> = stream
        .info_with_subjects(format!("$KV.{name}.>"))
        .await
        .unwrap()
        .map(|s| s.unwrap().0)
        .collect()
        .await;
    keys.sort();
    (keys, last)
}

/// A message taken and not acknowledged is delivered again on a new connection, unchanged and
/// in order; an acknowledged one is deleted from the stream and never comes back.
#[test]
fn unacked_messages_come_back_after_a_reconnect_and_acked_ones_do_not() {
    let namespaces = TestNamespaces::new();
    let (lead, worker) = (AgentId::new("mid-1"), AgentId::new("bottom-1"));
    let inbox = Address::from(&worker);
    runtime().block_on(async {
        let store = namespaces.connect().await.unwrap();
        let bus = NatsBus::open(&store).await.unwrap();
        assert_eq!(bus.capacity(), DEFAULT_INBOX_CAPACITY);
        bus.register(&lead).await.unwrap();
        bus.register(&worker).await.unwrap();
        for n in 1..=4 {
            assert_eq!(bus.send(msg(n, &lead, &worker)).await.unwrap(), 1);
        }
        let subject = bus.inbox_subject(&inbox);
        assert_eq!(subject, format!("{}.agent.bottom-1", store.subject("bus")));
        let taken = bus.take(&inbox, 3).await.unwrap();
        assert_eq!(
            taken,
            vec![msg(1, &lead, &worker), msg(2, &lead, &worker), msg(3, &lead, &worker)]
        );
        assert_eq!(bus.ack(&inbox, &[id(1), id(3)]).await.unwrap(), 2);
        assert_eq!(stored(&store).await, HashMap::from([(subject.clone(), 2)]));
        drop(bus);

        let store = store.reconnect().await.unwrap();
        let bus = NatsBus::open(&store).await.unwrap();
        assert_eq!(bus.registered().await.unwrap(), vec![worker.clone(), lead.clone()]);
        assert_eq!(bus.pending(&inbox).await.unwrap(), 2);
        assert_eq!(bus.inboxes_with_mail().await.unwrap(), vec![worker.clone()]);
        let again = bus.take(&inbox, 10).await.unwrap();
        assert_eq!(again, vec![msg(2, &lead, &worker), msg(4, &lead, &worker)]);
        assert_eq!(bus.inboxes_with_mail().await.unwrap(), Vec::<AgentId>::new());
        assert_eq!(bus.ack(&inbox, &[id(2), id(4)]).await.unwrap(), 2);
        drop(bus);

        let store = store.reconnect().await.unwrap();
        let bus = NatsBus::open(&store).await.unwrap();
        assert_eq!(bus.pending(&inbox).await.unwrap(), 0);
        assert_eq!(bus.take(&inbox, 10).await.unwrap(), vec![]);
        assert_eq!(bus.release(&inbox).await.unwrap(), 0);
        assert_eq!(stored(&store).await, HashMap::new());
    });
}

/// An acknowledgement holds when the server is killed (`kill -9`) right after it and started
/// again: nats-server 2.9 writes a deletion made with `no_erase` to disk only with its index,
/// so acknowledged messages used to come back (erased records do not).
#[test]
fn acknowledged_messages_stay_deleted_when_the_server_is_killed() {
    let dir = tempfile::tempdir().unwrap();
    let mut server = nats_store::TestServer::with_jetstream(dir.path()).unwrap();
    let (lead, worker) = (AgentId::new("mid-1"), AgentId::new("bottom-1"));
    let inbox = Address::from(&worker);
    runtime().block_on(async {
        let store = NatsStore::connect(&server.url(), "killed").await.unwrap();
        let bus = registered(&store, [&lead, &worker]).await;
        for n in 1..=4 {
            bus.send(msg(n, &lead, &worker)).await.unwrap();
        }
        bus.send(msg(5, &lead, Address::System)).await.unwrap();
        assert_eq!(bus.take(&inbox, 10).await.unwrap().len(), 4);
        assert_eq!(bus.ack(&inbox, &[id(1), id(2), id(4)]).await.unwrap(), 3);
        assert_eq!(bus.take(&Address::System, 10).await.unwrap().len(), 1);
        assert_eq!(bus.ack(&Address::System, &[id(5)]).await.unwrap(), 1);
        drop(bus);
        drop(store);

        server.kill();
        server.restart().unwrap();
        let store = NatsStore::connect(&server.url(), "killed").await.unwrap();
        let bus = NatsBus::open(&store).await.unwrap();
        assert_eq!(bus.held().await.unwrap(), vec![(inbox.clone(), 1)]);
        assert_eq!(bus.take(&inbox, 10).await.unwrap(), vec![msg(3, &lead, &worker)]);
        assert_eq!(bus.take(&Address::System, 10).await.unwrap(), vec![]);
    });
}

/// A message in flight that is no longer on the server (deleted by an earlier attempt whose
/// answer was lost, or by another connection) is acknowledged without an error.
#[test]
fn acknowledging_a_message_deleted_already_is_harmless() {
    let namespaces = TestNamespaces::new();
    let (lead, worker) = (AgentId::new("mid-1"), AgentId::new("bottom-1"));
    let inbox = Address::from(&worker);
    runtime().block_on(async {
        let store = namespaces.connect().await.unwrap();
        let bus = registered(&store, [&lead, &worker]).await;
        bus.send(msg(1, &lead, &worker)).await.unwrap();
        bus.send(msg(2, &lead, &worker)).await.unwrap();
        assert_eq!(bus.take(&inbox, 10).await.unwrap().len(), 2);
        // The first erased (its sequence holds nothing now), the second dropped from the index.
        let subject = format!("STREAM.MSG.DELETE.{}", store.name(NatsBus::STREAM));
        for (seq, no_erase) in [(1, false), (2, true)] {
            let request = serde_json::json!({ "seq": seq, "no_erase": no_erase });
            let reply: serde_json::Value =
                store.jetstream().request(subject.clone(), &request).await.unwrap();
            assert_eq!(reply["success"], true, "{reply}");
        }

        assert_eq!(bus.ack(&inbox, &[id(1), id(2)]).await.unwrap(), 2);
        assert_eq!(bus.release(&inbox).await.unwrap(), 0, "nothing left in flight");
        assert_eq!(bus.pending(&inbox).await.unwrap(), 0);
    });
}

/// `held` lists every inbox holding messages, an agent's that is no longer registered too, and
/// `peek` reads one without taking anything: the reader's view does not change, and no
/// consumer is left on the server.
#[test]
fn held_and_peek_show_every_inbox_and_change_nothing() {
    let namespaces = TestNamespaces::new();
    let (lead, worker) = (AgentId::new("mid-1"), AgentId::new("bottom-1"));
    let inbox = Address::from(&worker);
    runtime().block_on(async {
        let store = namespaces.connect().await.unwrap();
        let bus = registered(&store, [&lead, &worker]).await;
        bus.send(msg(1, &lead, &worker)).await.unwrap();
        bus.send(msg(2, &lead, &worker)).await.unwrap();
        bus.send(msg(3, &lead, Address::System)).await.unwrap();
        bus.send(msg(4, &worker, &lead)).await.unwrap();
        assert_eq!(bus.take(&Address::from(&lead), 10).await.unwrap().len(), 1);
        bus.unregister(&worker).await.unwrap();

        // In flight counts: it is not acknowledged.
        let held = bus.held().await.unwrap();
        assert_eq!(held, vec![(Address::System, 1), (inbox.clone(), 2), (Address::from(&lead), 1)]);
        assert_eq!(bus.inboxes_with_mail().await.unwrap(), Vec::<AgentId>::new());
        let peeked = bus.peek(&inbox, 10).await.unwrap();
        assert_eq!(peeked, vec![msg(1, &lead, &worker), msg(2, &lead, &worker)]);
        assert_eq!(bus.peek(&inbox, 1).await.unwrap(), vec![msg(1, &lead, &worker)]);
        assert_eq!(bus.peek(&Address::from(&lead), 10).await.unwrap().len(), 1);
        assert!(matches!(bus.peek(&Address::Broadcast, 1).await, Err(InboxError::NotAnInbox)));

        let stream = store.jetstream().get_stream(store.name(NatsBus::STREAM)).await.unwrap();
        let names: Vec<String> = stream.consumer_names().map(|n| n.unwrap()).collect().await;
        assert_eq!(names.len(), 1, "only the lead's reader is left: {names:?}");
        assert_eq!(
            bus.take(&Address::System, 10).await.unwrap(),
            vec![msg(3, &lead, Address::System)]
        );
        bus.register(&worker).await.unwrap();
        assert_eq!(bus.take(&inbox, 10).await.unwrap(), peeked);
        assert_eq!(bus.release(&Address::from(&lead)).await.unwrap(), 1);
    });
}

/// Two processes (two connections) send to one inbox at the same time: every message arrives
/// once, each sender's in its order. What one registers, the other sees at once when it sends,
/// and through the watch in its list; an unregistration too.
#[test]
fn two_connections_share_one_bus() {
    const EACH: u128 = 100;
    let namespaces = TestNamespaces::new();
    let (a, b, reader) =
        (AgentId::new("sender-a"), AgentId::new("sender-b"), AgentId::new("reader"));
    runtime().block_on(async {
        let first = namespaces.connect().await.unwrap();
        let second = first.reconnect().await.unwrap();
        let bus_a = Arc::new(NatsBus::open(&first).await.unwrap());
        let bus_b = Arc::new(NatsBus::open(&second).await.unwrap());
        bus_a.register(&reader).await.unwrap();
        // Registered by the other process a moment ago: not refused.
        assert_eq!(bus_b.send(msg(1, &b, &reader)).await.unwrap(), 1);
        assert!(bus_b.is_registered(&reader).await.unwrap());

        let mut tasks = Vec::new();
        for (s, (bus, from)) in [(Arc::clone(&bus_a), a.clone()), (Arc::clone(&bus_b), b.clone())]
            .into_iter()
            .enumerate()
        {
            let to = reader.clone();
            tasks.push(tokio::spawn(async move {
                for n in 0..EACH {
                    bus.send(msg(1_000 * (s as u128 + 1) + n, &from, &to)).await.unwrap();
                }
            }));
        }
        for task in tasks {
            task.await.unwrap();
        }
        let inbox = Address::from(&reader);
        assert_eq!(bus_a.pending(&inbox).await.unwrap(), 1 + 2 * EACH as usize);
        assert_eq!(bus_b.pending(&inbox).await.unwrap(), 1 + 2 * EACH as usize);
        let taken = bus_a.take(&inbox, 1_000).await.unwrap();
        assert_eq!(taken.len(), 1 + 2 * EACH as usize);
        assert_eq!(taken[0].id, id(1));
        for (s, from) in [(1, &a), (2, &b)] {
            let from = Address::from(from);
            let got: Vec<MessageId> =
                taken.iter().filter(|m| m.from == from).map(|m| m.id).collect();
            let mut want: Vec<MessageId> = (0..EACH).map(|n| id(1_000 * s + n)).collect();
            if s == 2 {
                want.insert(0, id(1));
            }
            assert_eq!(got, want, "order of {from}'s messages");
        }
        // The reader's in-flight messages are its own: the other connection counts them as
        // pending (it does not read this inbox), the reader does not.
        assert_eq!(bus_a.pending(&inbox).await.unwrap(), 0);
        assert_eq!(bus_a.ack(&inbox, &ids(&taken)).await.unwrap(), taken.len());
        assert_eq!(bus_b.pending(&inbox).await.unwrap(), 0);

        // The watch brings the other process's changes into the list of agents.
        let eventually = |bus: Arc<NatsBus>, want: Vec<AgentId>| async move {
            let deadline = Instant::now() + Duration::from_secs(5);
            loop {
                let got = bus.registered().await.unwrap();
                if got == want {
                    return;
                }
                assert!(Instant::now() < deadline, "registered() is {got:?}, not {want:?}");
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
        };
        eventually(Arc::clone(&bus_b), vec![reader.clone()]).await;
        bus_a.unregister(&reader).await.unwrap();
        eventually(Arc::clone(&bus_b), vec![]).await;
        assert!(!bus_b.is_registered(&reader).await.unwrap());
        // Unregistered by the other process: refused here too.
        match bus_b.unregister(&reader).await {
            Err(RegisterError::NotRegistered { agent }) => assert_eq!(agent, reader),
            other => panic!("expected NotRegistered, got {other:?}"),
        }
        match bus_b.send(msg(9, &b, &reader)).await {
            Err(SendError::UnknownRecipient { recipient, .. }) => assert_eq!(recipient, reader),
            other => panic!("expected UnknownRecipient, got {other:?}"),
        }
    });
}

/// Refused calls store nothing: no message in the stream, no key in the bucket.
#[test]
fn refused_input_changes_nothing_on_the_server() {
    let namespaces = TestNamespaces::new();
    runtime().block_on(async {
        let store = namespaces.connect().await.unwrap();
        let bus = NatsBus::with_capacity(&store, 1).await.unwrap();
        let (a, b) = (AgentId::new("agent-a"), AgentId::new("agent-b"));
        bus.register(&a).await.unwrap();
        bus.register(&b).await.unwrap();
        bus.send(msg(1, &a, &b)).await.unwrap();
        let messages = stored(&store).await;
        let keys = registrations(&store).await;

        for bad in ["", "system", "has space", "a.b", "a>", "é"] {
            match bus.register(&AgentId::new(bad)).await {
                Err(RegisterError::InvalidAgent { agent, .. }) => assert_eq!(agent, bad),
                other => panic!("register({bad:?}): expected InvalidAgent, got {other:?}"),
            }
            match bus.send(msg(2, &a, AgentId::new(bad))).await {
                Err(SendError::UnknownRecipient { recipient, .. }) => {
                    assert_eq!(recipient.as_str(), bad);
                }
                other => panic!("send to {bad:?}: expected UnknownRecipient, got {other:?}"),
            }
            let inbox = Address::Agent(AgentId::new(bad));
            {
                match bus.take(&inbox, 10).await {
                    Err(InboxError::NotRegistered { agent }) => assert_eq!(agent.as_str(), bad),
                    other => panic!("take({bad:?}): expected NotRegistered, got {other:?}"),
                }
                assert!(!bus.is_registered(&AgentId::new(bad)).await.unwrap());
                assert!(matches!(
                    bus.unregister(&AgentId::new(bad)).await,
                    Err(RegisterError::NotRegistered { .. })
                ));
            }
        }
        match bus.send(msg(3, &a, AgentId::new("ghost"))).await {
            Err(SendError::UnknownRecipient { .. }) => {}
            other => panic!("send to ghost: expected UnknownRecipient, got {other:?}"),
        }
        match bus.send(msg(4, &a, &b)).await {
            Err(SendError::InboxFull { inbox, capacity: 1, .. }) => {
                assert_eq!(inbox, Address::from(&b));
            }
            other => panic!("send to a full inbox: expected InboxFull, got {other:?}"),
        }
        // agent-a's inbox has room, agent-b's not: the broadcast stores no copy at all.
        match bus.send(msg(5, Address::System, Address::Broadcast)).await {
            Err(SendError::InboxFull { inbox, capacity: 1, .. }) => {
                assert_eq!(inbox, Address::from(&b));
            }
            other => panic!("broadcast: expected InboxFull, got {other:?}"),
        }
        assert_eq!(stored(&store).await, messages);
        assert_eq!(registrations(&store).await, keys);
        assert_eq!(bus.pending(&Address::from(&a)).await.unwrap(), 0);
        assert_eq!(ids(&bus.take(&Address::from(&b), 10).await.unwrap()), vec![id(1)]);
    });
}

/// A stream of the bus's name made by another schema version is refused and left as it was; a
/// bus opened with another capacity than it was made with is refused; `open` keeps the stored
/// capacity.
#[test]
fn a_foreign_stream_or_another_capacity_is_refused() {
    let namespaces = TestNamespaces::new();
    runtime().block_on(async {
        let store = namespaces.connect().await.unwrap();
        let foreign = stream::Config {
            name: store.name(NatsBus::STREAM),
            description: Some("strata schema 0: bus".into()),
            subjects: vec![format!("{}.>", store.subject(NatsBus::STREAM))],
            ..Default::default()
        };
        store.jetstream().create_stream(foreign).await.unwrap();
        match NatsBus::open(&store).await {
            Err(NatsBusError::Store(NatsError::SchemaMismatch {
                kind: "stream", found, ..
            })) => {
                assert_eq!(found, "strata schema 0: bus");
            }
            other => panic!("expected SchemaMismatch, got {other:?}"),
        }
        let mut kept = store.jetstream().get_stream(store.name(NatsBus::STREAM)).await.unwrap();
        let info = kept.info().await.unwrap();
        assert_eq!(info.config.description.as_deref(), Some("strata schema 0: bus"));
        assert_eq!(info.config.max_messages_per_subject, -1);

        let store = namespaces.connect().await.unwrap();
        let bus = NatsBus::with_capacity(&store, 3).await.unwrap();
        drop(bus);
        match NatsBus::with_capacity(&store, 5).await {
            Err(NatsBusError::CapacityMismatch { stored: 3, requested: 5, .. }) => {}
            other => panic!("expected CapacityMismatch, got {other:?}"),
        }
        assert!(matches!(
            NatsBus::with_capacity(&store, 0).await,
            Err(NatsBusError::BadCapacity { requested: 0, .. })
        ));
        let bus = NatsBus::open(&store.reconnect().await.unwrap()).await.unwrap();
        assert_eq!(bus.capacity(), 3);
    });
}

/// An inbox's consumer that the server dropped (idle too long, or deleted) is made again where
/// the reader stopped: nothing is skipped or taken twice.
#[test]
fn a_consumer_dropped_by_the_server_is_made_again() {
    let namespaces = TestNamespaces::new();
    let (a, b) = (AgentId::new("agent-a"), AgentId::new("agent-b"));
    let inbox = Address::from(&b);
    runtime().block_on(async {
        let store = namespaces.connect().await.unwrap();
        let bus = NatsBus::open(&store).await.unwrap();
        bus.register(&a).await.unwrap();
        bus.register(&b).await.unwrap();
        for n in 1..=3 {
            bus.send(msg(n, &a, &b)).await.unwrap();
        }
        assert_eq!(ids(&bus.take(&inbox, 1).await.unwrap()), vec![id(1)]);
        let stream = store.jetstream().get_stream(store.name(NatsBus::STREAM)).await.unwrap();
        let names: Vec<String> = stream.consumer_names().map(|n| n.unwrap()).collect().await;
        assert_eq!(names.len(), 1, "one consumer reads agent-b's inbox: {names:?}");
        for name in &names {
            stream.delete_consumer(name).await.unwrap();
        }
        bus.send(msg(4, &a, &b)).await.unwrap();
        assert_eq!(ids(&bus.take(&inbox, 10).await.unwrap()), vec![id(2), id(3), id(4)]);
        assert_eq!(bus.release(&inbox).await.unwrap(), 4);
        assert_eq!(ids(&bus.take(&inbox, 10).await.unwrap()), vec![id(1), id(2), id(3), id(4)]);
    });
}

/// A record in an inbox that is not a message stops `take` there with an error naming it;
/// the messages before it are delivered, and once it is deleted the rest follow.
#[test]
fn an_undecodable_record_is_an_error_naming_it_and_nothing_is_skipped() {
    let namespaces = TestNamespaces::new();
    let (a, b) = (AgentId::new("agent-a"), AgentId::new("agent-b"));
    let inbox = Address::from(&b);
    runtime().block_on(async {
        let store = namespaces.connect().await.unwrap();
        let bus = NatsBus::open(&store).await.unwrap();
        bus.register(&a).await.unwrap();
        bus.register(&b).await.unwrap();
        bus.send(msg(1, &a, &b)).await.unwrap();
        let damaged = store
            .jetstream()
            .publish(bus.inbox_subject(&inbox), "{not json".into())
            .await
            .unwrap()
            .await
            .unwrap()
            .sequence;
        bus.send(msg(3, &a, &b)).await.unwrap();
        assert_eq!(ids(&bus.take(&inbox, 10).await.unwrap()), vec![id(1)]);
        let err = bus.take(&inbox, 10).await.unwrap_err();
        let want =
            format!("cannot read message #{damaged} of the inbox `{}`", bus.inbox_subject(&inbox));
        assert!(err.to_string().contains(&want), "{err}");
        assert_eq!(bus.pending(&inbox).await.unwrap(), 2);
        let stream = store.jetstream().get_stream(store.name(NatsBus::STREAM)).await.unwrap();
        stream.delete_message(damaged).await.unwrap();
        assert_eq!(ids(&bus.take(&inbox, 10).await.unwrap()), vec![id(3)]);
    });
}

/// The capacity is the server's: two connections sending to one inbox at once store exactly
/// as many messages as it holds, and a bus opened again finds the capacity it was made with.
#[test]
fn the_capacity_holds_across_connections() {
    let namespaces = TestNamespaces::new();
    let (a, b) = (AgentId::new("agent-a"), AgentId::new("agent-b"));
    runtime().block_on(async {
        let first = namespaces.connect().await.unwrap();
        let bus_a = Arc::new(NatsBus::with_capacity(&first, 3).await.unwrap());
        bus_a.register(&a).await.unwrap();
        bus_a.register(&b).await.unwrap();
        let bus_b = Arc::new(NatsBus::open(&first.reconnect().await.unwrap()).await.unwrap());
        assert_eq!(bus_b.capacity(), 3);
        let mut tasks = Vec::new();
        for (s, bus) in [Arc::clone(&bus_a), Arc::clone(&bus_b)].into_iter().enumerate() {
            let (from, to) = (a.clone(), b.clone());
            tasks.push(tokio::spawn(async move {
                let mut outcomes = Vec::new();
                for n in 0..3 {
                    outcomes.push(bus.send(msg(10 * (s as u128 + 1) + n, &from, &to)).await);
                }
                outcomes
            }));
        }
        let mut stored_ok = 0;
        for task in tasks {
            for outcome in task.await.unwrap() {
                match outcome {
                    Ok(1) => stored_ok += 1,
                    Err(SendError::InboxFull { capacity: 3, .. }) => {}
                    other => panic!("expected a delivery or InboxFull, got {other:?}"),
                }
            }
        }
        assert_eq!(stored_ok, 3);
        assert_eq!(
            stored(&first).await,
            HashMap::from([(bus_a.inbox_subject(&Address::from(&b)), 3)])
        );
        assert_eq!(bus_a.take(&Address::from(&b), 10).await.unwrap().len(), 3);
    });
}
