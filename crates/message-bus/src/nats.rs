//! The NATS JetStream backend (feature `nats`): every inbox a subject of one stream, the
//! registrations in a key-value bucket, and which messages are in flight held by the connection.

use std::collections::{HashMap, HashSet, VecDeque};
use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

use agent_state::{Address, AgentId, BackendError, Message, MessageId, check_agent_id};
use async_nats::HeaderMap;
use async_nats::jetstream::consumer::{AckPolicy, DeliverPolicy, PullConsumer, pull};
use async_nats::jetstream::context::{PublishErrorKind, RequestErrorKind};
use async_nats::jetstream::kv;
use async_nats::jetstream::message::PublishMessage;
use async_nats::jetstream::publish::PublishAck;
use async_nats::jetstream::stream::{self, DiscardPolicy, StorageType};
use async_trait::async_trait;
use futures_util::StreamExt as _;
use nats_store::{BACKEND, NatsError, NatsStore, backend_error};
use thiserror::Error;

use crate::{DEFAULT_INBOX_CAPACITY, InboxError, MessageBus, RegisterError, SendError};

/// A [`MessageBus`] on a NATS server with JetStream, shared by every process of a run that
/// connects with the same namespace.
///
/// **Layout** (names from [`NatsStore::name`] and [`NatsStore::subject`], `<ns>` the namespace):
/// - the stream `strata_<ns>_bus` ([`STREAM`](Self::STREAM)), file storage, holds every message
///   still in an inbox, pending or in flight: the `system` inbox is the subject
///   `strata.<ns>.bus.system`, an agent's inbox is `strata.<ns>.bus.agent.<id>`. The stream's
///   order is each inbox's send order. The payload is the message in its versioned envelope
///   ([`agent_state::encode`]); a broadcast stores one copy per inbox. Agent ids are written
///   into subjects (and keys) escaped: ASCII letters, digits, `-` and `_` stand for themselves,
///   any other byte is `=` and two uppercase hex digits, so every id has exactly one subject
///   token and back (today's ids, [`check_agent_id`], need no escape);
/// - the capacity of an inbox is the stream's `max_messages_per_subject`, with
///   `discard: new` per subject: the server itself refuses a message into a full inbox, so the
///   check costs no round trip, holds against senders in other processes, and a reopened bus
///   keeps its capacity (it is stored in the stream);
/// - the key-value bucket `strata_<ns>_bus-agents` ([`AGENTS_BUCKET`](Self::AGENTS_BUCKET)):
///   one key per agent that was ever registered (its escaped id), a value while registered, a
///   delete marker once unregistered.
///
/// **Operations.**
/// - `send` to one inbox is one JetStream publish and its acknowledgement (the recipient's
///   registration comes from the cache below). Each publish carries a `Nats-Msg-Id` made for
///   that call, so when an acknowledgement is lost (a timeout) the publish is sent again and
///   the server drops the duplicate (the stream's duplicate window is
///   [`DUPLICATE_WINDOW`](Self::DUPLICATE_WINDOW), longer than the retries take, and short so
///   that the server does not keep many ids). Two sends of one [`MessageId`] are two messages:
///   the bus does not deduplicate. When `send` fails with a backend error the message may or
///   may not be stored: send it again, the receiver deduplicates by [`MessageId`].
/// - `broadcast` goes to the agents the cache holds as registered. It publishes the copies
///   together and waits for every acknowledgement. JetStream (2.9) has no atomic publish to
///   several subjects: if one copy is refused because its inbox is full, the copies already
///   stored are deleted again before [`SendError::InboxFull`] is returned, so a refused
///   broadcast leaves nothing behind. A reader that takes from one of the other inboxes in
///   that moment (a concurrent task, or another process) may get a copy; it is deleted all
///   the same, and acknowledging it is harmless.
/// - `send_many` checks every sender and recipient, then publishes the batch's copies in
///   order on the one connection (chunks of 256) and waits for their acknowledgements: one
///   round trip per chunk, not per message. Like a broadcast, a batch that is refused (a full
///   inbox, an unknown recipient after messages that were published to learn whether they
///   are refused first) or fails has the copies already stored deleted again.
/// - `take` serves first the messages this connection released, then reads the inbox's subject
///   with a pull consumer of this connection (no acknowledgements on the server, started after
///   the last message read). `take` and `release` are not stored: which messages are in flight
///   is memory of the connection, and a new connection (a restart) reads every message not
///   acknowledged from the start of its inbox, in send order.
/// - `ack` deletes the messages from the stream, erasing each record in the server's store (a
///   deletion with `no_erase` reaches nats-server 2.9's disk only at its next index write, so
///   a server killed before that would bring acknowledged messages back); an acknowledged
///   message is never delivered again to anyone.
/// - `pending` and `inboxes_with_mail` ask the stream how many messages each inbox subject
///   holds (one request, answered in time proportional to the inboxes that hold messages) and
///   subtract this connection's in-flight ones: asked from another process than the inbox's
///   reader, the reader's in-flight messages count as pending.
/// - Registrations are read from a cache that a watch of the bucket keeps up to date with the
///   other processes' changes; this process's own changes are in it when the call returns.
///   An agent the cache does not hold as registered is looked up on the server before a call
///   is refused, so an agent registered by another process a moment ago is never refused. An
///   agent another process unregistered a moment ago may still receive a message until the
///   watch brings the change (milliseconds): the message is kept, as any message of an
///   unregistered agent, and read when it registers again. If the watch fails (it logs a
///   warning; its consumer is remade by the client as long as the connection lives), other
///   processes' changes reach the cache only through those lookups.
///
/// **Several processes.** Any number of processes may send to any inbox: the stream orders the
/// messages of one inbox, so each sender's order is kept. Each inbox must be read (taken,
/// acknowledged, released) by one connection at a time: two readers of one inbox would both
/// take its messages.
///
/// **Connections.** A restart is a new connection ([`NatsStore::reconnect`]) and a new
/// [`NatsBus::open`]: the registrations and the messages are on the server, the capacity is the
/// stream's; what the old object held (in-flight messages, its inbox consumers, which the
/// server drops after [`CONSUMER_IDLE`](Self::CONSUMER_IDLE)) is gone.
///
/// **Durability** is the server's (see `nats_store`): when `send`, `ack`, `register` or
/// `unregister` returns `Ok`, the server has stored the change.
pub struct NatsBus {
    store: NatsStore,
    stream: stream::Stream,
    agents: kv::Store,
    /// `strata.<ns>.bus`.
    prefix: String,
    /// `$KV.<bucket>.`, the subject prefix of the bucket's keys.
    agents_prefix: String,
    capacity: usize,
    registry: Arc<Mutex<Registry>>,
    readers: Mutex<HashMap<String, Arc<tokio::sync::Mutex<Reader>>>>,
    watch: tokio::task::JoinHandle<()>,
    /// Unique to this bus object: the first part of the `Nats-Msg-Id` of its publishes.
    instance: String,
    /// The second part: how many publishes this bus object made.
    publishes: AtomicU64,
    /// Room for the copies batches have published and not yet seen acknowledged
    /// ([`BATCH_ACKS_IN_FLIGHT`]).
    batch_room: tokio::sync::Semaphore,
}

/// One copy of a message of a `send_many` batch: which message, and the inbox it goes into.
struct BatchCopy {
    /// Its index in the batch.
    message: usize,
    /// The inbox.
    address: Address,
    /// The inbox's subject.
    subject: String,
}

/// Why a [`NatsBus`] could not be opened.
#[derive(Debug, Error)]
pub enum NatsBusError {
    /// The store refused (another schema version made the stream or bucket) or the server
    /// failed.
    #[error(transparent)]
    Store(#[from] NatsError),
    /// The capacity cannot be a stream's per-subject limit.
    #[error("an inbox capacity of {requested} messages cannot be kept on NATS: use 1 to {max}")]
    BadCapacity {
        /// The capacity asked for.
        requested: usize,
        /// The largest capacity.
        max: i64,
    },
    /// The bus exists with another capacity; changing it could drop stored messages.
    #[error(
        "the message bus `{stream}` holds inboxes of {stored} messages, not {requested}: open it with its capacity (`NatsBus::open`), or use another namespace"
    )]
    CapacityMismatch {
        /// The stream's name.
        stream: String,
        /// The capacity it was made with.
        stored: usize,
        /// The capacity asked for.
        requested: usize,
    },
    /// The stream of that name is not laid out as a bus (made by hand, or damaged).
    #[error("the stream `{stream}` is not a Strata message bus: {reason}")]
    NotABus {
        /// The stream's name.
        stream: String,
        /// What differs.
        reason: String,
    },
}

impl From<NatsBusError> for BackendError {
    fn from(err: NatsBusError) -> Self {
        match err {
            NatsBusError::Store(err) => err.into(),
            other => BackendError::new(BACKEND, other.to_string()),
        }
    }
}

/// The registrations this connection knows, with the bucket revision each was read at.
#[derive(Default)]
struct Registry {
    agents: HashMap<AgentId, (bool, u64)>,
}

impl Registry {
    /// Records that `agent` is (or is not) registered as of `revision`, unless a newer
    /// revision is known.
    fn apply(&mut self, agent: AgentId, registered: bool, revision: u64) {
        let slot = self.agents.entry(agent).or_insert((registered, revision));
        if revision >= slot.1 {
            *slot = (registered, revision);
        }
    }

    fn get(&self, agent: &AgentId) -> Option<(bool, u64)> {
        self.agents.get(agent).copied()
    }
}

/// What this connection holds of one inbox it reads.
struct Reader {
    /// Taken and not acknowledged, in send order.
    in_flight: VecDeque<Entry>,
    /// Released (or read and not handed out): pending, older than anything the consumer has
    /// not delivered yet, in send order.
    released: VecDeque<Entry>,
    /// The consumer reading the inbox's subject, made when first needed.
    consumer: Option<PullConsumer>,
    /// The consumer sequence of the last message it delivered (a gap means a lost delivery).
    consumer_seq: u64,
    /// The stream sequence after the last message read: where a new consumer starts.
    next_seq: u64,
    /// When the consumer last answered.
    used: Instant,
}

impl Reader {
    /// A reader of an inbox from its first message, with no consumer yet.
    fn new() -> Self {
        Self {
            in_flight: VecDeque::new(),
            released: VecDeque::new(),
            consumer: None,
            consumer_seq: 0,
            next_seq: 1,
            used: Instant::now(),
        }
    }
}

/// A message in an inbox and its stream sequence.
struct Entry {
    seq: u64,
    message: Message,
}

/// How many messages one fetch asks for at most.
const FETCH_BATCH: usize = 1_024;
/// How long one fetch from an inbox's consumer may take before the consumer is given up.
const FETCH_TIMEOUT: Duration = Duration::from_secs(2);
/// How many times one read makes a new consumer after a failure or a lost delivery.
const MAX_RENEWALS: usize = 3;
/// How many copies of a batch of `send_many` are published before their acknowledgements are
/// awaited.
const BATCH_CHUNK: usize = 256;
/// How many copies the batches of one bus may have published and not yet seen acknowledged,
/// together: below the client's own bound on acknowledgements awaited (5 000), so that batches
/// holding some of it never leave a publish waiting for room forever.
const BATCH_ACKS_IN_FLIGHT: usize = 4_096;
/// How many times a publish whose acknowledgement timed out is sent again.
const PUBLISH_RETRIES: usize = 2;
/// How many times a deletion (an acknowledgement) that timed out is sent again.
const DELETE_RETRIES: usize = 2;
/// How long a deletion waits before it is sent again when nothing answered it (a server that
/// is back, its JetStream not yet).
const NO_RESPONDERS_PAUSE: Duration = Duration::from_millis(100);
/// How many times a deletion waits [`NO_RESPONDERS_PAUSE`] for an answer at most.
const NO_RESPONDERS_PAUSES: usize = 20;
/// How long opening waits for the registrations to be read.
const LOAD_TIMEOUT: Duration = Duration::from_secs(10);
/// The JetStream error code of a store failure, which "maximum messages per subject exceeded"
/// (a full inbox) is.
const STORE_FAILED: u64 = 10077;
/// The JetStream error code of "no message found" (reading a message that is not there).
const NO_MESSAGE_FOUND: u64 = 10037;
/// The JetStream error code of a deletion that failed, with the store's reason (for a message
/// deleted already: "no message found" or "deleted message").
const DELETE_FAILED: u64 = 10057;
/// The JetStream error code of "sequence N not found" (a deletion of a sequence that holds no
/// message: deleted and erased already).
const SEQUENCE_NOT_FOUND: u64 = 10043;

impl NatsBus {
    /// The part (of [`NatsStore::name`] and [`NatsStore::subject`]) of the messages stream.
    pub const STREAM: &'static str = "bus";
    /// The part of the registrations bucket.
    pub const AGENTS_BUCKET: &'static str = "bus-agents";
    /// How long the server remembers a publish's `Nats-Msg-Id` to drop a resent duplicate.
    pub const DUPLICATE_WINDOW: Duration = Duration::from_secs(30);
    /// How long the consumer reading an inbox lives on the server once its bus stops using it
    /// (a bus that reads again after that makes a new one).
    pub const CONSUMER_IDLE: Duration = Duration::from_secs(120);

    /// Opens the bus of `store`'s namespace, creating it with inboxes of
    /// [`DEFAULT_INBOX_CAPACITY`] messages if it does not exist; an existing bus keeps the
    /// capacity it was made with. Every message not acknowledged is pending, in send order.
    pub async fn open(store: &NatsStore) -> Result<Self, NatsBusError> {
        Self::open_with(store, None).await
    }

    /// [`open`](Self::open) with inboxes (the `system` inbox included) that hold `per_inbox`
    /// messages each, pending and in flight together. The capacity is stored in the stream; a
    /// bus that exists with another one is refused ([`NatsBusError::CapacityMismatch`]),
    /// changing nothing, since lowering it on the server would drop messages.
    pub async fn with_capacity(store: &NatsStore, per_inbox: usize) -> Result<Self, NatsBusError> {
        Self::open_with(store, Some(per_inbox)).await
    }

    async fn open_with(store: &NatsStore, requested: Option<usize>) -> Result<Self, NatsBusError> {
        let capacity = requested.unwrap_or(DEFAULT_INBOX_CAPACITY);
        let limit = i64::try_from(capacity)
            .ok()
            .filter(|&n| n > 0)
            .ok_or(NatsBusError::BadCapacity { requested: capacity, max: i64::MAX })?;
        let prefix = store.subject(Self::STREAM);
        let config = stream::Config {
            subjects: vec![format!("{prefix}.>")],
            storage: StorageType::File,
            discard: DiscardPolicy::New,
            discard_new_per_subject: true,
            max_messages_per_subject: limit,
            allow_direct: true,
            duplicate_window: Self::DUPLICATE_WINDOW,
            ..Default::default()
        };
        let mut stream = store.stream(Self::STREAM, config).await?;
        let name = store.name(Self::STREAM);
        let info = stream.info().await.map_err(|e| {
            NatsError::from(backend_error(format!("reading the stream `{name}`"), e))
        })?;
        let not_a_bus = |reason: String| NatsBusError::NotABus { stream: name.clone(), reason };
        if info.config.subjects != [format!("{prefix}.>")] {
            return Err(not_a_bus(format!("its subjects are {:?}", info.config.subjects)));
        }
        if info.config.discard != DiscardPolicy::New || !info.config.discard_new_per_subject {
            return Err(not_a_bus("it does not refuse messages into a full subject".into()));
        }
        let stored = usize::try_from(info.config.max_messages_per_subject)
            .ok()
            .filter(|&n| n > 0)
            .ok_or_else(|| {
                not_a_bus(format!(
                    "its per-subject limit is {}",
                    info.config.max_messages_per_subject
                ))
            })?;
        if let Some(requested) = requested
            && requested != stored
        {
            return Err(NatsBusError::CapacityMismatch { stream: name, stored, requested });
        }

        let agents = store
            .bucket(
                Self::AGENTS_BUCKET,
                kv::Config { history: 1, storage: StorageType::File, ..Default::default() },
            )
            .await?;
        let agents_prefix = format!("$KV.{}.", store.name(Self::AGENTS_BUCKET));
        let registry = Arc::new(Mutex::new(Registry::default()));
        let watch = load_registrations(store, &agents, Arc::clone(&registry)).await?;
        tracing::debug!(stream = %name, capacity = stored, "opened the NATS message bus");
        Ok(Self {
            store: store.clone(),
            stream,
            agents,
            prefix,
            agents_prefix,
            capacity: stored,
            registry,
            readers: Mutex::new(HashMap::new()),
            watch,
            // A new inbox name is a fresh NUID under the client's prefix: unique to this object.
            instance: store.client().new_inbox(),
            publishes: AtomicU64::new(0),
            batch_room: tokio::sync::Semaphore::new(BATCH_ACKS_IN_FLIGHT),
        })
    }

    /// How many messages one inbox holds, pending and in flight together.
    pub fn capacity(&self) -> usize {
        self.capacity
    }

    /// The store (connection and namespace) the bus lives in.
    pub fn store(&self) -> &NatsStore {
        &self.store
    }

    /// The subject of the inbox `address` names: `system` or an agent (not `broadcast`).
    pub fn inbox_subject(&self, address: &Address) -> String {
        match address {
            Address::Agent(agent) => format!("{}.agent.{}", self.prefix, escape(agent.as_str())),
            _ => format!("{}.system", self.prefix),
        }
    }

    /// Every inbox that holds messages on the server, with how many: `system` first, then the
    /// agents by id. Unlike [`pending`](MessageBus::pending) and
    /// [`inboxes_with_mail`](MessageBus::inboxes_with_mail), an agent that is not registered
    /// (a run that ended unregistered its agents) is listed too, and the messages in flight
    /// (taken, not acknowledged) count: this is what is left on the server, for a look at a
    /// run from outside it.
    pub async fn held(&self) -> Result<Vec<(Address, usize)>, BackendError> {
        let counts = self.counts(&format!("{}.>", self.prefix)).await?;
        let system = self.inbox_subject(&Address::System);
        let agent_prefix = format!("{}.agent.", self.prefix);
        let mut held = Vec::new();
        let mut agents = Vec::new();
        for (subject, count) in counts {
            if count == 0 {
                continue;
            }
            if subject == system {
                held.push((Address::System, count));
            } else if let Some(id) = subject.strip_prefix(&agent_prefix).and_then(unescape) {
                agents.push((AgentId::new(id), count));
            } else {
                tracing::warn!(subject, "a subject of the bus is not an inbox");
            }
        }
        agents.sort_unstable();
        held.extend(agents.into_iter().map(|(agent, count)| (Address::Agent(agent), count)));
        Ok(held)
    }

    /// Up to `max` of the messages `inbox` holds, oldest first, registered or not, read
    /// without taking them: nothing changes on the server (the consumer that reads them keeps
    /// no acknowledgements and is deleted again) nor in this bus (what it has in flight or
    /// released stays so).
    pub async fn peek(&self, inbox: &Address, max: usize) -> Result<Vec<Message>, InboxError> {
        if *inbox == Address::Broadcast {
            return Err(InboxError::NotAnInbox);
        }
        let subject = self.inbox_subject(inbox);
        let mut reader = Reader::new();
        let read = self.fetch(&subject, &mut reader, max).await;
        if let Some(consumer) = reader.consumer.take() {
            let name = consumer.cached_info().name.clone();
            if let Err(e) = self.stream.delete_consumer(&name).await {
                tracing::debug!(subject, error = %e, "the consumer of a look at an inbox is left to expire");
            }
        }
        Ok(read?.into_iter().map(|entry| entry.message).collect())
    }

    /// A `Nats-Msg-Id` no other publish uses.
    fn next_msg_id(&self) -> String {
        format!("{}.{}", self.instance, self.publishes.fetch_add(1, Ordering::Relaxed))
    }

    fn registry(&self) -> MutexGuard<'_, Registry> {
        lock(&self.registry)
    }

    /// Whether `agent` is registered: from the cache when it says so, else from the server.
    async fn check_registered(&self, agent: &AgentId) -> Result<bool, BackendError> {
        if check_agent_id(agent.as_str()).is_err() {
            return Ok(false);
        }
        if let Some((true, _)) = self.registry().get(agent) {
            return Ok(true);
        }
        Ok(self.read_registration(agent).await?.0)
    }

    /// Reads `agent`'s registration from the server into the cache; returns it and its
    /// revision (0: never registered).
    async fn read_registration(&self, agent: &AgentId) -> Result<(bool, u64), BackendError> {
        let entry = self
            .agents
            .entry(escape(agent.as_str()))
            .await
            .map_err(|e| backend_error(format!("reading the registration of `{agent}`"), e))?;
        let (registered, revision) = match entry {
            Some(entry) => (entry.operation == kv::Operation::Put, entry.revision),
            None => (false, 0),
        };
        self.registry().apply(agent.clone(), registered, revision);
        Ok((registered, revision))
    }

    /// The reader of the inbox at `subject`.
    fn reader(&self, subject: &str) -> Arc<tokio::sync::Mutex<Reader>> {
        let mut readers = lock(&self.readers);
        Arc::clone(
            readers
                .entry(subject.to_owned())
                .or_insert_with(|| Arc::new(tokio::sync::Mutex::new(Reader::new()))),
        )
    }

    /// The subject of the inbox `address` names, for reading: `system` or a registered agent.
    async fn readable(&self, address: &Address) -> Result<String, InboxError> {
        match address {
            Address::Broadcast => Err(InboxError::NotAnInbox),
            Address::System => Ok(self.inbox_subject(address)),
            Address::Agent(agent) => {
                if self.check_registered(agent).await? {
                    Ok(self.inbox_subject(address))
                } else {
                    Err(InboxError::NotRegistered { agent: agent.clone() })
                }
            }
        }
    }

    /// The copies of a batch of `send_many`, in order, and how many inboxes each message goes
    /// into, from the checks that need no publish (sender, recipient), in batch order up to the
    /// first refusal, which is returned too: the messages before it are still published, to
    /// learn whether one of them is refused first (a full inbox).
    async fn batch_copies(
        &self,
        messages: &[Message],
    ) -> Result<(Vec<BatchCopy>, Vec<usize>, Option<SendError>), BackendError> {
        let mut copies = Vec::new();
        let mut counts = Vec::with_capacity(messages.len());
        let mut refusal = None;
        let mut known: HashSet<&AgentId> = HashSet::new();
        for (index, message) in messages.iter().enumerate() {
            if message.from == Address::Broadcast {
                refusal = Some(SendError::InvalidSender { id: message.id });
                break;
            }
            let targets = match &message.to {
                Address::Broadcast => {
                    let sender = message.from.agent();
                    let mut targets: Vec<AgentId> = self
                        .registry()
                        .agents
                        .iter()
                        .filter(|(id, (registered, _))| *registered && Some(*id) != sender)
                        .map(|(id, _)| id.clone())
                        .collect();
                    targets.sort_unstable();
                    targets.into_iter().map(Address::Agent).collect()
                }
                Address::System => vec![Address::System],
                Address::Agent(agent) => {
                    if !known.contains(agent) {
                        if !self.check_registered(agent).await? {
                            refusal = Some(SendError::UnknownRecipient {
                                id: message.id,
                                kind: message.kind.as_str(),
                                recipient: agent.clone(),
                            });
                            break;
                        }
                        known.insert(agent);
                    }
                    vec![message.to.clone()]
                }
            };
            counts.push(targets.len());
            copies.extend(targets.into_iter().map(|address| BatchCopy {
                message: index,
                subject: self.inbox_subject(&address),
                address,
            }));
        }
        Ok((copies, counts, refusal))
    }

    /// Publishes the copies of a batch of `send_many` (`payloads` indexed by message), in
    /// order, a chunk at a time: every copy of a chunk is sent, then every acknowledgement
    /// awaited. Returns the stream sequences of the copies stored and the first copy (by
    /// index) whose outcome is not a clean store, where publishing stopped.
    ///
    /// One connection sends the copies in order, so the server stores them in that order. A
    /// copy whose acknowledgement was lost is published again under its `Nats-Msg-Id` to learn
    /// its sequence: a duplicate was stored in its place; one stored only now may be out of
    /// order, so it counts as a failure and the caller takes the batch back.
    async fn publish_batch(
        &self,
        copies: &[BatchCopy],
        payloads: Vec<Vec<u8>>,
    ) -> (Vec<u64>, Option<(usize, PublishFailure)>) {
        let js = self.store.jetstream();
        let base = self.next_msg_id();
        let mut stored = Vec::with_capacity(copies.len());
        for (chunk_index, chunk) in copies.chunks(BATCH_CHUNK).enumerate() {
            let first = chunk_index * BATCH_CHUNK;
            // Room among the client's acknowledgements awaited, taken for the whole chunk at
            // once: a batch never waits for room while it holds some.
            let room = u32::try_from(chunk.len()).unwrap_or(u32::MAX);
            let _room = match self.batch_room.acquire_many(room).await {
                Ok(permit) => permit,
                Err(err) => {
                    let err = backend_error("publishing a batch of messages", err);
                    return (stored, Some((first, PublishFailure::Backend(err))));
                }
            };
            let mut sent = Vec::with_capacity(chunk.len());
            for (k, copy) in chunk.iter().enumerate() {
                let publish = PublishMessage::build()
                    .payload(payloads[copy.message].clone().into())
                    .message_id(format!("{base}.{}", first + k));
                sent.push(js.send_publish(copy.subject.clone(), publish).await);
            }
            let acks = sent.into_iter().map(|sent| async move {
                match sent {
                    Ok(ack) => ack.await,
                    Err(err) => Err(err),
                }
            });
            let results = futures_util::future::join_all(acks).await;
            let mut failure = None;
            for (k, result) in results.into_iter().enumerate() {
                let (index, copy) = (first + k, &chunk[k]);
                let outcome = match result {
                    Ok(ack) => Ok(ack.sequence),
                    Err(err) if is_full(&err) => Err(PublishFailure::Full),
                    Err(err)
                        if matches!(
                            err.kind(),
                            PublishErrorKind::TimedOut | PublishErrorKind::BrokenPipe
                        ) =>
                    {
                        let msg_id = format!("{base}.{index}");
                        let payload: &[u8] = &payloads[copy.message];
                        self.publish_again(copy, payload, &msg_id, &mut stored).await
                    }
                    Err(err) => Err(PublishFailure::Backend(backend_error(
                        format!("publishing to `{}`", copy.subject),
                        err,
                    ))),
                };
                match outcome {
                    Ok(seq) => stored.push(seq),
                    Err(failed) => {
                        failure.get_or_insert((index, failed));
                    }
                }
            }
            if failure.is_some() {
                return (stored, failure);
            }
        }
        (stored, None)
    }

    /// A copy of a batch whose acknowledgement was lost, published again under its
    /// `Nats-Msg-Id`: its sequence if it was stored in its place (the server answers a
    /// duplicate); one stored only now (added to `stored`, to be taken back) may be out of
    /// order, which fails the batch.
    async fn publish_again(
        &self,
        copy: &BatchCopy,
        payload: &[u8],
        msg_id: &str,
        stored: &mut Vec<u64>,
    ) -> Result<u64, PublishFailure> {
        let ack = self.publish(&copy.subject, payload, msg_id).await?;
        if ack.duplicate {
            return Ok(ack.sequence);
        }
        stored.push(ack.sequence);
        Err(PublishFailure::Backend(BackendError::new(
            BACKEND,
            format!(
                "publishing to `{}`: a message of a batch was not acknowledged in time and was stored late, out of order",
                copy.subject
            ),
        )))
    }

    /// Publishes one copy of a message and waits for the server to store it; a lost
    /// acknowledgement is retried under the same `Nats-Msg-Id`.
    async fn publish(
        &self,
        subject: &str,
        payload: &[u8],
        msg_id: &str,
    ) -> Result<PublishAck, PublishFailure> {
        let js = self.store.jetstream();
        let mut attempt = 0;
        loop {
            let publish =
                PublishMessage::build().payload(payload.to_vec().into()).message_id(msg_id);
            let result = match js.send_publish(subject.to_owned(), publish).await {
                Ok(ack) => ack.await,
                Err(err) => Err(err),
            };
            match result {
                Ok(ack) => return Ok(ack),
                Err(err) if is_full(&err) => return Err(PublishFailure::Full),
                Err(err)
                    if attempt < PUBLISH_RETRIES
                        && matches!(
                            err.kind(),
                            PublishErrorKind::TimedOut | PublishErrorKind::BrokenPipe
                        ) =>
                {
                    attempt += 1;
                    tracing::debug!(subject, attempt, error = %err, "publish not acknowledged, sending it again");
                }
                Err(err) => {
                    return Err(PublishFailure::Backend(backend_error(
                        format!("publishing to `{subject}`"),
                        err,
                    )));
                }
            }
        }
    }

    /// Deletes the message `seq` from the stream; `Ok(false)` if it was not there.
    ///
    /// The record is erased (overwritten in the server's block file, marked deleted there),
    /// not only dropped from the server's index: nats-server 2.9 writes a deletion made with
    /// `no_erase` to disk only with its index, at its periodic sync or a clean shutdown, so a
    /// server killed before that brings every message acknowledged since back; an erased
    /// record stays deleted.
    async fn delete(&self, seq: u64) -> Result<bool, BackendError> {
        let request = serde_json::json!({ "seq": seq, "no_erase": false });
        let subject = format!("STREAM.MSG.DELETE.{}", self.stream.cached_info().config.name);
        let js = self.store.jetstream();
        let (mut attempt, mut paused) = (0, 0);
        let reply: serde_json::Value = loop {
            match js.request(subject.clone(), &request).await {
                Ok(reply) => break reply,
                // Sent again: a deletion sent to a server that died before it answered is
                // lost, and one it made already is answered "no message found" the second
                // time.
                Err(err)
                    if attempt < DELETE_RETRIES && err.kind() == RequestErrorKind::TimedOut =>
                {
                    attempt += 1;
                    tracing::debug!(seq, attempt, error = %err, "deletion not answered, sending it again");
                }
                // A server that is back, its JetStream not yet: nothing answers at all.
                Err(err)
                    if paused < NO_RESPONDERS_PAUSES
                        && err.kind() == RequestErrorKind::NoResponders =>
                {
                    paused += 1;
                    tokio::time::sleep(NO_RESPONDERS_PAUSE).await;
                }
                Err(err) => {
                    return Err(backend_error(format!("deleting message #{seq} of the bus"), err));
                }
            }
        };
        if let Some(error) = reply.get("error") {
            if is_not_found(error) {
                return Ok(false);
            }
            return Err(BackendError::new(
                BACKEND,
                format!("deleting message #{seq} of the bus: the server refused: {error}"),
            ));
        }
        if reply.get("success").and_then(serde_json::Value::as_bool) != Some(true) {
            return Err(BackendError::new(
                BACKEND,
                format!("deleting message #{seq} of the bus: the server answered {reply}"),
            ));
        }
        Ok(true)
    }

    /// How many messages each inbox subject matching `filter` holds, pending and in flight.
    async fn counts(&self, filter: &str) -> Result<HashMap<String, usize>, BackendError> {
        let mut subjects = self
            .stream
            .info_with_subjects(filter)
            .await
            .map_err(|e| backend_error("counting the messages of the inboxes", e))?;
        let mut counts = HashMap::new();
        while let Some(item) = subjects.next().await {
            let (subject, count) =
                item.map_err(|e| backend_error("counting the messages of the inboxes", e))?;
            counts.insert(subject, count);
        }
        Ok(counts)
    }

    /// How many messages of the inbox at `subject` this connection has in flight.
    async fn in_flight_len(&self, subject: &str) -> usize {
        let reader = lock(&self.readers).get(subject).cloned();
        match reader {
            Some(reader) => reader.lock().await.in_flight.len(),
            None => 0,
        }
    }

    /// Sends to one inbox: `system` or a registered agent.
    async fn send_one(&self, message: &Message, payload: &[u8]) -> Result<(), SendError> {
        if let Address::Agent(agent) = &message.to
            && !self.check_registered(agent).await?
        {
            return Err(SendError::UnknownRecipient {
                id: message.id,
                kind: message.kind.as_str(),
                recipient: agent.clone(),
            });
        }
        let subject = self.inbox_subject(&message.to);
        match self.publish(&subject, payload, &self.next_msg_id()).await {
            Ok(_) => Ok(()),
            Err(PublishFailure::Full) => Err(SendError::InboxFull {
                id: message.id,
                inbox: message.to.clone(),
                capacity: self.capacity,
            }),
            Err(PublishFailure::Backend(err)) => Err(err.into()),
        }
    }

    /// Sends to every registered agent but the sender, all or nothing.
    async fn broadcast(&self, message: &Message, payload: &[u8]) -> Result<usize, SendError> {
        let sender = message.from.agent();
        let mut targets: Vec<AgentId> = self
            .registry()
            .agents
            .iter()
            .filter(|(id, (registered, _))| *registered && Some(*id) != sender)
            .map(|(id, _)| id.clone())
            .collect();
        targets.sort_unstable();
        if targets.is_empty() {
            return Ok(0);
        }
        let base = self.next_msg_id();
        let copies = targets.iter().enumerate().map(|(i, agent)| {
            let subject = self.inbox_subject(&Address::Agent(agent.clone()));
            let msg_id = format!("{base}.{i}");
            async move { self.publish(&subject, payload, &msg_id).await.map(|ack| ack.sequence) }
        });
        let results = futures_util::future::join_all(copies).await;
        let mut full = None;
        let mut failed = None;
        let mut stored = Vec::new();
        for (agent, result) in targets.iter().zip(results) {
            match result {
                Ok(seq) => stored.push(seq),
                Err(PublishFailure::Full) => {
                    full.get_or_insert_with(|| agent.clone());
                }
                Err(PublishFailure::Backend(err)) => {
                    failed.get_or_insert(err);
                }
            }
        }
        if full.is_none() && failed.is_none() {
            return Ok(targets.len());
        }
        // Take back the copies stored, so the refused broadcast delivers to none.
        let undo = futures_util::future::join_all(stored.iter().map(|&seq| self.delete(seq))).await;
        if let Some(err) = undo.into_iter().find_map(Result::err) {
            return Err(BackendError::new(
                BACKEND,
                format!(
                    "broadcast {} was refused by one inbox and some copies could not be taken back ({err}); they will be delivered",
                    message.id
                ),
            )
            .into());
        }
        match (full, failed) {
            (_, Some(err)) => Err(err.into()),
            (Some(agent), None) => Err(SendError::InboxFull {
                id: message.id,
                inbox: Address::Agent(agent),
                capacity: self.capacity,
            }),
            (None, None) => Ok(targets.len()),
        }
    }

    /// Reads up to `max` messages after the ones already read from the inbox at `subject`.
    ///
    /// A failure after some messages were read returns those (the next call goes on from
    /// there). A consumer made by an earlier call may be gone from the server (idle for
    /// [`CONSUMER_IDLE`](Self::CONSUMER_IDLE)); its failure, and a delivery lost on the way, are met by making a
    /// new consumer that starts after the last message read, a few times at most.
    async fn fetch(
        &self,
        subject: &str,
        reader: &mut Reader,
        max: usize,
    ) -> Result<Vec<Entry>, BackendError> {
        let mut read = Vec::new();
        let mut renewals = 0;
        while read.len() < max {
            let want = (max - read.len()).min(FETCH_BATCH);
            let consumer = self.consumer(subject, reader).await?;
            let before = read.len();
            let end = read_batch_within(subject, &consumer, reader, want, &mut read).await;
            reader.used = Instant::now();
            match end {
                Ok(BatchEnd::Done) if read.len() - before < want => break,
                Ok(BatchEnd::Done) => {}
                Ok(BatchEnd::Gap) | Err(BatchError::Failed(_)) if renewals < MAX_RENEWALS => {
                    if let Err(BatchError::Failed(err)) = &end {
                        tracing::debug!(subject, error = %err, "reading an inbox failed, with a new consumer again");
                    }
                    reader.consumer = None;
                    renewals += 1;
                }
                Ok(BatchEnd::Gap) => {
                    reader.consumer = None;
                    if read.is_empty() {
                        return Err(BackendError::new(
                            BACKEND,
                            format!("reading the inbox `{subject}`: deliveries keep getting lost"),
                        ));
                    }
                    break;
                }
                Err(BatchError::Failed(err) | BatchError::Damaged(err)) => {
                    reader.consumer = None;
                    if read.is_empty() {
                        return Err(err);
                    }
                    break;
                }
            }
        }
        Ok(read)
    }

    /// The consumer reading the inbox at `subject` for `reader`: its own, or a new one that
    /// starts after the last message read. A consumer idle for half its lifetime on the server
    /// is not trusted to be there.
    async fn consumer(
        &self,
        subject: &str,
        reader: &mut Reader,
    ) -> Result<PullConsumer, BackendError> {
        if reader.used.elapsed() > Self::CONSUMER_IDLE / 2 {
            reader.consumer = None;
        }
        if let Some(consumer) = &reader.consumer {
            return Ok(consumer.clone());
        }
        let consumer = self
            .stream
            .create_consumer(pull::Config {
                filter_subject: subject.to_owned(),
                deliver_policy: DeliverPolicy::ByStartSequence {
                    start_sequence: reader.next_seq.max(1),
                },
                ack_policy: AckPolicy::None,
                inactive_threshold: Self::CONSUMER_IDLE,
                ..Default::default()
            })
            .await
            .map_err(|e| backend_error(format!("reading the inbox `{subject}`"), e))?;
        reader.consumer = Some(consumer.clone());
        reader.consumer_seq = 0;
        Ok(consumer)
    }
}

/// [`read_batch`] within [`FETCH_TIMEOUT`]: a request to a consumer the server no longer has is
/// not answered at all, so the wait is bounded, and what arrived until then is kept
/// (`read_batch` records each message as it comes, so stopping it between two loses nothing).
async fn read_batch_within(
    subject: &str,
    consumer: &PullConsumer,
    reader: &mut Reader,
    want: usize,
    read: &mut Vec<Entry>,
) -> Result<BatchEnd, BatchError> {
    match tokio::time::timeout(FETCH_TIMEOUT, read_batch(subject, consumer, reader, want, read))
        .await
    {
        Ok(end) => end,
        Err(_) => Err(BatchError::Failed(BackendError::new(
            BACKEND,
            format!(
                "reading the inbox `{subject}`: no answer within {} ms",
                FETCH_TIMEOUT.as_millis()
            ),
        ))),
    }
}

/// How a batch of deliveries ended, when it did not fail.
enum BatchEnd {
    /// The server sent what it had, up to the number asked for.
    Done,
    /// A delivery was lost on the way: the consumer must start again after the last one read.
    Gap,
}

/// How a batch of deliveries failed.
enum BatchError {
    /// The request or a delivery failed.
    Failed(BackendError),
    /// A message cannot be decoded: not read past, so the next read meets it again.
    Damaged(BackendError),
}

/// Reads one batch of up to `want` messages from `consumer` into `read`, advancing `reader`'s
/// position past each one read.
async fn read_batch(
    subject: &str,
    consumer: &PullConsumer,
    reader: &mut Reader,
    want: usize,
    read: &mut Vec<Entry>,
) -> Result<BatchEnd, BatchError> {
    let failed = |err: &dyn fmt::Display| {
        BatchError::Failed(BackendError::new(
            BACKEND,
            format!("reading the inbox `{subject}`: {err}"),
        ))
    };
    let mut batch = consumer.fetch().max_messages(want).messages().await.map_err(|e| failed(&e))?;
    while let Some(delivered) = batch.next().await {
        let delivered = delivered.map_err(|e| failed(&e))?;
        let info = delivered.info().map_err(|e| failed(&e))?;
        let (seq, consumer_seq) = (info.stream_sequence, info.consumer_sequence);
        if consumer_seq != reader.consumer_seq + 1 {
            return Ok(BatchEnd::Gap);
        }
        let message = agent_state::decode::<Message>(&delivered.payload).map_err(|e| {
            BatchError::Damaged(BackendError::with_source(
                BACKEND,
                format!(
                    "cannot read message #{seq} of the inbox `{subject}`: {e}; the bus is damaged, delete that message from the stream to go on"
                ),
                e,
            ))
        })?;
        reader.consumer_seq = consumer_seq;
        reader.next_seq = seq + 1;
        read.push(Entry { seq, message });
    }
    Ok(BatchEnd::Done)
}

/// Why a publish did not store its message.
enum PublishFailure {
    /// The inbox is full.
    Full,
    Backend(BackendError),
}

/// Whether the server refused a publish because its subject holds the maximum.
fn is_full(err: &async_nats::jetstream::context::PublishError) -> bool {
    let Some(source) = std::error::Error::source(err) else { return false };
    source.downcast_ref::<async_nats::jetstream::Error>().is_some_and(|error| {
        error.error_code().0 == STORE_FAILED && error.to_string().contains("per subject")
    })
}

/// Whether the server's `error` answer to a deletion says the message is not there (deleted
/// already: by an earlier attempt whose answer was lost, or by another connection).
fn is_not_found(error: &serde_json::Value) -> bool {
    let code = error.get("err_code").and_then(serde_json::Value::as_u64);
    let description = error.get("description").and_then(serde_json::Value::as_str);
    match code {
        Some(NO_MESSAGE_FOUND | SEQUENCE_NOT_FOUND) => true,
        Some(DELETE_FAILED) => matches!(description, Some("no message found" | "deleted message")),
        _ => false,
    }
}

fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    // Every critical section changes the data with calls that do not panic.
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}

/// Reads every registration into `registry`, then keeps it up to date from a watch of the
/// bucket in a task of its own (stopped when the bus drops).
async fn load_registrations(
    store: &NatsStore,
    agents: &kv::Store,
    registry: Arc<Mutex<Registry>>,
) -> Result<tokio::task::JoinHandle<()>, NatsError> {
    let bucket = store.name(NatsBus::AGENTS_BUCKET);
    let mut kv_stream = store
        .jetstream()
        .get_stream(format!("KV_{bucket}"))
        .await
        .map_err(|e| backend_error(format!("opening the bucket `{bucket}`"), e))?;
    let state = kv_stream
        .info()
        .await
        .map_err(|e| backend_error(format!("reading the bucket `{bucket}`"), e))?
        .state
        .clone();
    let mut watch = agents
        .watch_with_history(">")
        .await
        .map_err(|e| backend_error(format!("watching the bucket `{bucket}`"), e))?;
    // The newest record of the bucket is the newest of its key: the watch's first pass
    // (the last record of every key) ends with it, or later.
    if state.messages > 0 {
        let load = async {
            while let Some(entry) = watch.next().await {
                let entry = entry
                    .map_err(|e| backend_error(format!("reading the bucket `{bucket}`"), e))?;
                let revision = entry.revision;
                apply_entry(&registry, entry);
                if revision >= state.last_sequence {
                    return Ok(());
                }
            }
            Err(BackendError::new(BACKEND, format!("the watch of the bucket `{bucket}` ended")))
        };
        match tokio::time::timeout(LOAD_TIMEOUT, load).await {
            Ok(result) => result?,
            Err(_) => {
                return Err(BackendError::new(
                    BACKEND,
                    format!(
                        "reading the registrations in the bucket `{bucket}` took more than {} s",
                        LOAD_TIMEOUT.as_secs()
                    ),
                )
                .into());
            }
        }
    }
    Ok(tokio::spawn(async move {
        while let Some(entry) = watch.next().await {
            match entry {
                Ok(entry) => apply_entry(&registry, entry),
                Err(err) => {
                    tracing::warn!(bucket, error = %err, "the watch of the registrations failed");
                }
            }
        }
        tracing::debug!(bucket, "the watch of the registrations ended");
    }))
}

/// Applies one record of the registrations bucket to the cache.
fn apply_entry(registry: &Mutex<Registry>, entry: kv::Entry) {
    let Some(id) = unescape(&entry.key) else {
        tracing::warn!(
            key = entry.key,
            "a key of the registrations bucket is not an escaped agent id"
        );
        return;
    };
    let registered = entry.operation == kv::Operation::Put;
    lock(registry).apply(AgentId::new(id), registered, entry.revision);
}

/// An agent id as one subject token (and key): letters, digits, `-` and `_` as they are, any
/// other byte as `=XX` (uppercase hex).
fn escape(id: &str) -> String {
    nats_store::escape_token(id)
}

/// The agent id `token` stands for, if it is an escaped one.
fn unescape(token: &str) -> Option<String> {
    let mut bytes = Vec::with_capacity(token.len());
    let mut rest = token.as_bytes();
    while let Some((&b, tail)) = rest.split_first() {
        if b == b'=' {
            let hex = std::str::from_utf8(tail.get(..2)?).ok()?;
            bytes.push(u8::from_str_radix(hex, 16).ok()?);
            rest = &tail[2..];
        } else if b.is_ascii_alphanumeric() || b == b'-' || b == b'_' {
            bytes.push(b);
            rest = tail;
        } else {
            return None;
        }
    }
    String::from_utf8(bytes).ok()
}

impl Drop for NatsBus {
    fn drop(&mut self) {
        self.watch.abort();
    }
}

impl fmt::Debug for NatsBus {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("NatsBus")
            .field("url", &self.store.url())
            .field("namespace", &self.store.namespace())
            .field("capacity", &self.capacity)
            .finish_non_exhaustive()
    }
}

#[async_trait]
impl MessageBus for NatsBus {
    async fn register(&self, agent: &AgentId) -> Result<(), RegisterError> {
        check_agent_id(agent.as_str()).map_err(|kind| RegisterError::InvalidAgent {
            agent: agent.to_string(),
            reason: kind.to_string(),
        })?;
        let revision = self
            .agents
            .put(escape(agent.as_str()), "1".into())
            .await
            .map_err(|e| backend_error(format!("registering `{agent}`"), e))?;
        self.registry().apply(agent.clone(), true, revision);
        Ok(())
    }

    async fn unregister(&self, agent: &AgentId) -> Result<(), RegisterError> {
        let not_registered = || RegisterError::NotRegistered { agent: agent.clone() };
        if check_agent_id(agent.as_str()).is_err() {
            return Err(not_registered());
        }
        let key = escape(agent.as_str());
        let mut known = self.registry().get(agent);
        loop {
            let (registered, revision) = match known {
                Some((true, revision)) => (true, revision),
                _ => self.read_registration(agent).await?,
            };
            if !registered {
                return Err(not_registered());
            }
            // A delete marker, only if nothing changed the registration since it was read.
            let mut headers = HeaderMap::new();
            headers.insert("KV-Operation", "DEL");
            headers.insert(
                async_nats::header::NATS_EXPECTED_LAST_SUBJECT_SEQUENCE,
                revision.to_string().as_str(),
            );
            let subject = format!("{}{key}", self.agents_prefix);
            let result = match self
                .store
                .jetstream()
                .publish_with_headers(subject, headers, "".into())
                .await
            {
                Ok(ack) => ack.await,
                Err(err) => Err(err),
            };
            match result {
                Ok(ack) => {
                    self.registry().apply(agent.clone(), false, ack.sequence);
                    return Ok(());
                }
                Err(err) if err.kind() == PublishErrorKind::WrongLastSequence => {
                    // Changed by another process: read it again.
                    known = None;
                }
                Err(err) => {
                    return Err(backend_error(format!("unregistering `{agent}`"), err).into());
                }
            }
        }
    }

    async fn is_registered(&self, agent: &AgentId) -> Result<bool, BackendError> {
        self.check_registered(agent).await
    }

    async fn registered(&self) -> Result<Vec<AgentId>, BackendError> {
        let mut agents: Vec<AgentId> = self
            .registry()
            .agents
            .iter()
            .filter(|(_, (registered, _))| *registered)
            .map(|(id, _)| id.clone())
            .collect();
        agents.sort_unstable();
        Ok(agents)
    }

    async fn send(&self, message: Message) -> Result<usize, SendError> {
        if message.from == Address::Broadcast {
            return Err(SendError::InvalidSender { id: message.id });
        }
        let payload = agent_state::encode(&message).map_err(|e| {
            BackendError::with_source(BACKEND, format!("cannot encode message {}", message.id), e)
        })?;
        if message.to == Address::Broadcast {
            self.broadcast(&message, &payload).await
        } else {
            self.send_one(&message, &payload).await.map(|()| 1)
        }
    }

    /// Checks every sender and recipient first (from the cache, or the server), then publishes
    /// the batch's copies in order and waits for their acknowledgements (see
    /// `publish_batch`). JetStream (2.9) has no atomic publish: when a
    /// copy is refused (a full inbox) or fails, the copies already stored are deleted again
    /// before the error is returned, as for a refused broadcast; a reader may take one of them
    /// in that moment.
    async fn send_many(&self, messages: Vec<Message>) -> Result<Vec<usize>, SendError> {
        if messages.is_empty() {
            return Ok(Vec::new());
        }
        let (copies, counts, refusal) = self.batch_copies(&messages).await?;
        let payloads = messages[..counts.len()]
            .iter()
            .map(|message| {
                agent_state::encode(message).map_err(|e| {
                    BackendError::with_source(
                        BACKEND,
                        format!("cannot encode message {}", message.id),
                        e,
                    )
                })
            })
            .collect::<Result<Vec<_>, _>>()?;
        let (stored, failure) = self.publish_batch(&copies, payloads).await;
        if failure.is_none() && refusal.is_none() {
            return Ok(counts);
        }
        // Take back the copies stored, so the refused batch delivers nothing.
        let undo = futures_util::future::join_all(stored.iter().map(|&seq| self.delete(seq))).await;
        if let Some(err) = undo.into_iter().find_map(Result::err) {
            return Err(BackendError::new(
                BACKEND,
                format!(
                    "a batch of {} messages was refused and some of them could not be taken back ({err}); they will be delivered",
                    messages.len()
                ),
            )
            .into());
        }
        match (failure, refusal) {
            (Some((index, PublishFailure::Full)), _) => {
                let copy = &copies[index];
                Err(SendError::InboxFull {
                    id: messages[copy.message].id,
                    inbox: copy.address.clone(),
                    capacity: self.capacity,
                })
            }
            (Some((_, PublishFailure::Backend(err))), _) => Err(err.into()),
            (None, Some(refusal)) => Err(refusal),
            (None, None) => Ok(counts),
        }
    }

    async fn take(&self, inbox: &Address, max: usize) -> Result<Vec<Message>, InboxError> {
        let subject = self.readable(inbox).await?;
        let reader = self.reader(&subject);
        let mut reader = reader.lock().await;
        let from_released = max.min(reader.released.len());
        let mut taken: Vec<Entry> = reader.released.drain(..from_released).collect();
        if taken.len() < max {
            match self.fetch(&subject, &mut reader, max - taken.len()).await {
                Ok(read) => taken.extend(read),
                Err(err) => {
                    // Nothing taken: what was served from the released ones is pending again.
                    for entry in taken.into_iter().rev() {
                        reader.released.push_front(entry);
                    }
                    return Err(err.into());
                }
            }
        }
        let messages = taken.iter().map(|entry| entry.message.clone()).collect();
        reader.in_flight.extend(taken);
        Ok(messages)
    }

    async fn ack(&self, inbox: &Address, ids: &[MessageId]) -> Result<usize, InboxError> {
        let subject = self.readable(inbox).await?;
        let reader = self.reader(&subject);
        let mut reader = reader.lock().await;
        let listed: HashSet<MessageId> = ids.iter().copied().collect();
        let acked: Vec<usize> = reader
            .in_flight
            .iter()
            .enumerate()
            .filter(|(_, entry)| listed.contains(&entry.message.id))
            .map(|(i, _)| i)
            .collect();
        if acked.is_empty() {
            return Ok(0);
        }
        let deletions = acked.iter().map(|&i| self.delete(reader.in_flight[i].seq));
        let results = futures_util::future::join_all(deletions).await;
        // Every message deleted (or already gone) leaves the in-flight ones; one that could
        // not be deleted stays in flight.
        let mut first_error = None;
        let mut gone = Vec::with_capacity(acked.len());
        for (&i, result) in acked.iter().zip(results) {
            match result {
                Ok(_) => gone.push(i),
                Err(err) => {
                    first_error.get_or_insert(err);
                }
            }
        }
        let mut remove = vec![false; reader.in_flight.len()];
        for &i in &gone {
            remove[i] = true;
        }
        let mut index = 0;
        reader.in_flight.retain(|_| {
            let keep = !remove[index];
            index += 1;
            keep
        });
        match first_error {
            Some(err) => Err(err.into()),
            None => Ok(gone.len()),
        }
    }

    async fn release(&self, inbox: &Address) -> Result<usize, InboxError> {
        let subject = self.readable(inbox).await?;
        let reader = self.reader(&subject);
        let mut reader = reader.lock().await;
        let Reader { in_flight, released, .. } = &mut *reader;
        let count = in_flight.len();
        in_flight.append(released);
        std::mem::swap(in_flight, released);
        Ok(count)
    }

    async fn pending(&self, inbox: &Address) -> Result<usize, InboxError> {
        let subject = self.readable(inbox).await?;
        let held = self.counts(&subject).await?.get(&subject).copied().unwrap_or(0);
        Ok(held.saturating_sub(self.in_flight_len(&subject).await))
    }

    async fn inboxes_with_mail(&self) -> Result<Vec<AgentId>, BackendError> {
        let agent_prefix = format!("{}.agent.", self.prefix);
        let counts = self.counts(&format!("{agent_prefix}>")).await?;
        let mut with_mail = Vec::new();
        for (subject, held) in counts {
            let Some(id) = subject.strip_prefix(&agent_prefix).and_then(unescape) else {
                continue;
            };
            let agent = AgentId::new(id);
            let registered = matches!(self.registry().get(&agent), Some((true, _)));
            if registered && held > self.in_flight_len(&subject).await {
                with_mail.push(agent);
            }
        }
        with_mail.sort_unstable();
        Ok(with_mail)
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, reason = "tests")]

    use super::*;

    #[test]
    fn ids_escape_to_one_token_and_back() {
        for id in ["agent-1", "a_b", "a.b", "a b", "=", "é*>", ""] {
            let token = escape(id);
            assert!(
                token.bytes().all(|b| b.is_ascii_alphanumeric() || b"-_=".contains(&b)),
                "{id:?} -> {token:?}"
            );
            assert_eq!(unescape(&token).as_deref(), Some(id), "{token:?}");
        }
        assert_eq!(escape("mid-1"), "mid-1");
        assert_eq!(escape("a.b"), "a=2Eb");
        assert_eq!(unescape("a.b"), None);
        assert_eq!(unescape("=4"), None);
        assert_eq!(unescape("=ZZ"), None);
    }
}
