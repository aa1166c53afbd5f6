//! The sled backend (feature `sled`): the bus's inboxes in a run's database, an in-memory mirror
//! for reads, and every stored change committed (flushed and `fdatasync`ed) before a call returns.

use std::collections::HashMap;
use std::fmt;
use std::sync::{Mutex, MutexGuard, PoisonError};

use agent_state::{
    Address, AgentId, BackendError, DecodeError, Message, MessageId, SYSTEM, check_agent_id,
};
use async_trait::async_trait;
use run_store::RunStore;
use rustc_hash::FxBuildHasher;

use crate::inbox::{Acked, AgentMap, AgentSet, Target, plan_batch};
use crate::{DEFAULT_INBOX_CAPACITY, InboxError, MessageBus, RegisterError, SendError};

/// A durable [`MessageBus`] in the sled database of a [`RunStore`].
///
/// **Durability.** When `register`, `unregister`, `send` or `ack` returns `Ok`, what it changed
/// is in the run's database and has been flushed and `fdatasync`ed through
/// [`RunStore::commit`]: it survives a crash of the process and a loss of power (with
/// [`Durability::Synced`](run_store::Durability::Synced); with `NoSync` a power loss may undo
/// it). Concurrent calls share one sync, and [`send_many`](MessageBus::send_many) writes its
/// whole batch under one lock, as one record per inbox it reaches, and waits for one commit:
/// with many senders, batching several messages per call is what lifts the rate (the CPU cost
/// of sled's inserts, not the disk, is the limit; see `BENCHMARKS.md`). `take` and `release` are not stored: which messages
/// are in flight is deliberately forgotten, so after a restart every message that was not
/// acknowledged is pending again, in the order it was sent, and is delivered again
/// (at-least-once).
///
/// When a call fails with a backend error after the change was written (the commit failed),
/// the change may or may not survive a crash: a sender that gets an error should send again,
/// and the receiver deduplicates by [`MessageId`].
///
/// **Layout.** Three trees of the run's database:
/// - [`REGISTERED_TREE`](Self::REGISTERED_TREE): one key per agent ever registered (its id),
///   an empty value while it is registered and a single `0x00` byte once it is unregistered
///   (kept, not removed: sled removes a key at several times the cost of overwriting it, and
///   a team unregisters every agent as it shuts down);
/// - [`MESSAGES_TREE`](Self::MESSAGES_TREE): the messages in the inboxes, keyed by the inbox's
///   name (an agent id, or `system`), a zero byte, and a big-endian 64-bit sequence number, so
///   that sled's key order is each inbox's send order. A `send` stores one record per message:
///   the value is the message in its versioned envelope ([`agent_state::encode`]). A
///   `send_many` stores the messages it sends to one inbox as one record, keyed by the first
///   one's sequence number: a batch record, whose value is a `0x01` byte, a layout version
///   byte (`1`), then for each message its sequence number (8 bytes), the length of its
///   envelope (4 bytes, both big-endian) and the envelope. Acknowledging some messages of a
///   batch record stores the rest again, keyed by the first of them, before the old record
///   goes. A broadcast stores one copy per inbox, all with the same sequence number, one
///   insert each (no sled batch: see `run_store`'s docs, "No batches"); a broadcast cut short
///   by a crash before `send` returned may have reached some inboxes, like any send that did
///   not return `Ok`;
/// - [`ACKED_TREE`](Self::ACKED_TREE): every acknowledged message, keyed and stored as in the
///   messages tree (the messages of one record that one `ack` acknowledges as one record, keyed
///   by the first of them), moved there by `ack` (written before the message leaves its inbox,
///   in the same commit). It is never read by the bus itself, only by
///   [`history`](Self::history), so that a run's messages can be shown after it ends;
/// - [`META_TREE`](Self::META_TREE): `next_seq`, a bound below which sequence numbers may have
///   been used. Sequence numbers are never reused, across restarts too.
///
/// **Reads** come from a mirror of the inboxes in memory, loaded when the bus opens, so `take`,
/// `pending` and `inboxes_with_mail` cost what they cost on [`InMemoryBus`](crate::InMemoryBus).
/// Every write goes to sled while the mirror's lock is held (so sled's order is the mirror's),
/// and the lock is released before waiting for the commit.
///
/// **Damaged records.** [`open`](Self::open) reads every record; one that cannot be decoded is
/// an error naming the tree and the record, and nothing is changed or dropped: the rest of the
/// database stays readable.
///
/// ```
/// use agent_state::{Address, AgentId, Message, MessageId, MessageKind, Timestamp};
/// use message_bus::{MessageBus, SledBus};
/// use run_store::{Durability, RunStore};
///
/// # tokio_test_block_on(async {
/// let dir = tempfile::tempdir()?;
/// let run = dir.path().join("run-1");
/// let store = RunStore::create(&run, "run-1", Timestamp(0), Durability::Synced)?;
/// let bus = SledBus::open(&store)?;
/// let worker = AgentId::new("bottom-1");
/// bus.register(&worker).await?;
/// let msg = Message::new(MessageId::from_u128(1), Address::System, &worker,
///                        MessageKind::TaskAssign, serde_json::json!("write hello.txt"), Timestamp(0));
/// bus.send(msg.clone()).await?; // durable when this returns
/// assert_eq!(bus.take(&Address::from(&worker), 8).await?, vec![msg.clone()]);
/// drop((bus, store)); // a crash before the ack
///
/// let store = RunStore::open(&run, Durability::Synced)?;
/// let bus = SledBus::open(&store)?;
/// assert_eq!(bus.take(&Address::from(&worker), 8).await?, vec![msg]); // delivered again
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// # }).unwrap();
/// # fn tokio_test_block_on<F: std::future::Future>(f: F) -> F::Output {
/// #     tokio::runtime::Builder::new_current_thread().build().unwrap().block_on(f)
/// # }
/// ```
pub struct SledBus {
    capacity: usize,
    registered: sled::Tree,
    messages: sled::Tree,
    acked: sled::Tree,
    meta: sled::Tree,
    state: Mutex<State>,
    // Declared after the trees, so it drops after them: a store that closes while a tree of
    // its database is alive cannot seal the run (see `run_store`).
    store: RunStore,
}

/// A message of [`SledBus::history`].
#[derive(Debug, Clone, PartialEq)]
pub struct StoredMessage {
    /// Its sequence number: the bus's send order (a broadcast's copies share one).
    pub seq: u64,
    /// The inbox it went into: an agent or `system`.
    pub inbox: Address,
    /// The message.
    pub message: Message,
    /// Whether its receiver acknowledged it (`false`: pending or in flight).
    pub acknowledged: bool,
}

/// The mirror of the stored inboxes, plus the in-flight state that is not stored.
#[derive(Default)]
struct State {
    /// Every agent registered or holding messages; unregistered agents keep their inbox with
    /// `registered` off.
    agents: AgentMap<Inbox>,
    /// The runtime's inbox, which always exists.
    system: Inbox,
    /// Agents with pending messages (registered or not).
    with_mail: AgentSet,
    /// The sequence number the next send uses.
    next_seq: u64,
    /// The `next_seq` bound stored in the meta tree: sequence numbers below it may be used
    /// without writing it again.
    reserved: u64,
    /// The batch records of the messages tree (by key) and how many of their messages are
    /// still in an inbox: a record goes once all of them are acknowledged.
    batches: HashMap<Vec<u8>, usize, FxBuildHasher>,
}

/// One inbox of this backend.
type Inbox = crate::inbox::Inbox<Entry>;

/// A message, its sequence number, and the key of the record it is stored in.
struct Entry {
    seq: u64,
    /// The sequence number in the key of its record: its own for a record of one message, that
    /// of the first message of a batch record.
    record: u64,
    message: Message,
}

/// The backend name in errors.
const BACKEND: &str = "sled";
/// The key of the sequence bound in the meta tree.
const NEXT_SEQ_KEY: &[u8] = b"next_seq";
/// Sequence numbers reserved with one write of the bound.
const SEQ_BLOCK: u64 = 1 << 16;

impl SledBus {
    /// The tree of registered agents.
    pub const REGISTERED_TREE: &'static str = "bus.registered";
    /// The tree of messages, keyed by inbox and sequence number.
    pub const MESSAGES_TREE: &'static str = "bus.messages";
    /// The tree holding the sequence bound.
    pub const META_TREE: &'static str = "bus.meta";
    /// The tree of acknowledged messages, keyed like the messages tree.
    pub const ACKED_TREE: &'static str = "bus.acked";

    /// Opens the bus stored in `store` (an empty bus in a new run), with inboxes of
    /// [`DEFAULT_INBOX_CAPACITY`] messages. Every stored message is pending, in send order.
    ///
    /// Fails, changing nothing, if a record cannot be decoded; the error names its tree and key.
    pub fn open(store: &RunStore) -> Result<Self, BackendError> {
        Self::with_capacity(store, DEFAULT_INBOX_CAPACITY)
    }

    /// [`open`](Self::open) with inboxes (the `system` inbox included) that hold `per_inbox`
    /// messages each, pending and in flight together. The capacity is not stored: an inbox
    /// that holds more after a restart with a smaller one refuses sends until it is drained.
    pub fn with_capacity(store: &RunStore, per_inbox: usize) -> Result<Self, BackendError> {
        let registered = store.tree(Self::REGISTERED_TREE)?;
        let messages = store.tree(Self::MESSAGES_TREE)?;
        let meta = store.tree(Self::META_TREE)?;
        let acked = store.tree(Self::ACKED_TREE)?;
        let state = load(&registered, &messages, &meta)?;
        Ok(Self {
            capacity: per_inbox,
            registered,
            messages,
            acked,
            meta,
            state: Mutex::new(state),
            store: store.clone(),
        })
    }

    /// Every message the bus holds or held, in send order (a broadcast's copies by inbox):
    /// those still in an inbox (pending or in flight) with `acknowledged: false`, and those
    /// acknowledged, kept for this view (see the layout above). Reads the database, not the
    /// mirror; fails if a record cannot be decoded, naming it.
    pub fn history(&self) -> Result<Vec<StoredMessage>, BackendError> {
        let mut all: Vec<StoredMessage> = Vec::new();
        for (tree, name, acknowledged) in
            [(&self.acked, Self::ACKED_TREE, true), (&self.messages, Self::MESSAGES_TREE, false)]
        {
            for record in tree.iter() {
                let (key, value) = record.map_err(|e| read_failed(name, e))?;
                let Some((inbox, seq)) = parse_message_key(&key) else {
                    return Err(damaged(
                        name,
                        &raw_key(&key),
                        "not an inbox name, a zero byte and a sequence number",
                    ));
                };
                for (seq, message) in decode_record(name, &inbox, seq, &value)? {
                    all.push(StoredMessage { seq, inbox: inbox.clone(), message, acknowledged });
                }
            }
        }
        // Acknowledged first, so a message a crash left in both trees counts as acknowledged.
        all.sort_by(|a, b| (a.seq, a.inbox.as_str()).cmp(&(b.seq, b.inbox.as_str())));
        all.dedup_by(|later, earlier| later.seq == earlier.seq && later.inbox == earlier.inbox);
        Ok(all)
    }

    /// How many messages one inbox holds, pending and in flight together.
    pub fn capacity(&self) -> usize {
        self.capacity
    }

    /// The run store the bus lives in.
    pub fn store(&self) -> &RunStore {
        &self.store
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        // Every critical section writes to sled before it changes the mirror, and changes the
        // mirror with calls that do not panic, so a poisoned lock still guards valid data.
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn full(&self, inbox: &Inbox) -> bool {
        inbox.len() >= self.capacity
    }

    /// Waits until everything written so far is durable.
    async fn commit(&self) -> Result<(), BackendError> {
        self.store.commit().await
    }

    /// A sequence number for the next send, writing a new bound first if the reserved ones are
    /// used up. Call with the lock held, once the send is known to go ahead; the caller
    /// advances `next_seq` once the message is stored.
    fn reserve_seq(&self, state: &mut State) -> Result<u64, BackendError> {
        let seq = state.next_seq;
        if seq >= state.reserved {
            let bound = seq.saturating_add(SEQ_BLOCK);
            self.meta
                .insert(NEXT_SEQ_KEY, &bound.to_be_bytes())
                .map_err(|e| write_failed(Self::META_TREE, e))?;
            state.reserved = bound;
        }
        Ok(seq)
    }

    /// Sends to one inbox: `system` or a registered agent.
    fn send_one(&self, state: &mut State, message: Message, value: &[u8]) -> Result<(), SendError> {
        let inbox = match &message.to {
            Address::Agent(agent) => match state.agents.get(agent) {
                Some(inbox) if inbox.registered => inbox,
                _ => {
                    return Err(SendError::UnknownRecipient {
                        id: message.id,
                        kind: message.kind.as_str(),
                        recipient: agent.clone(),
                    });
                }
            },
            _ => &state.system,
        };
        if self.full(inbox) {
            return Err(SendError::InboxFull {
                id: message.id,
                inbox: message.to.clone(),
                capacity: self.capacity,
            });
        }
        let seq = self.reserve_seq(state)?;
        self.messages
            .insert(message_key(&message.to, seq), value)
            .map_err(|e| write_failed(Self::MESSAGES_TREE, e))?;
        state.next_seq = seq + 1;
        let inbox = match &message.to {
            Address::Agent(agent) => {
                state.with_mail.insert(agent.clone());
                state.agents.get_mut(agent)
            }
            _ => Some(&mut state.system),
        };
        if let Some(inbox) = inbox {
            inbox.push(Entry { seq, record: seq, message });
        }
        Ok(())
    }

    /// Sends to every registered agent but the sender: one record per inbox, all with one
    /// sequence number; a write that fails takes back the copies written before it.
    fn broadcast(
        &self,
        state: &mut State,
        message: Message,
        value: &[u8],
    ) -> Result<usize, SendError> {
        let sender = message.from.agent();
        let mut targets: Vec<AgentId> = state
            .agents
            .iter()
            .filter(|(id, inbox)| inbox.registered && Some(*id) != sender)
            .map(|(id, _)| id.clone())
            .collect();
        targets.sort_unstable();
        // Report the full inbox with the smallest id, so the error is stable.
        if let Some(full) =
            targets.iter().find(|id| state.agents.get(*id).is_some_and(|inbox| self.full(inbox)))
        {
            return Err(SendError::InboxFull {
                id: message.id,
                inbox: Address::Agent(full.clone()),
                capacity: self.capacity,
            });
        }
        if targets.is_empty() {
            return Ok(0);
        }
        let seq = self.reserve_seq(state)?;
        // One insert per copy, not a sled batch: a batch takes sled's process-wide write lock,
        // which waits forever behind a flush that a full disk wedged (see `run_store`'s docs).
        for (written, agent) in targets.iter().enumerate() {
            let key = message_key(&Address::Agent(agent.clone()), seq);
            if let Err(e) = self.messages.insert(key, value) {
                // Take back the copies stored, so the failed broadcast delivers to none (sled
                // refuses every write after an I/O error, so this is for other errors).
                for stored in &targets[..written] {
                    let _ = self.messages.remove(message_key(&Address::Agent(stored.clone()), seq));
                }
                return Err(write_failed(Self::MESSAGES_TREE, e).into());
            }
        }
        state.next_seq = seq + 1;
        for agent in &targets {
            if let Some(inbox) = state.agents.get_mut(agent) {
                inbox.push(Entry { seq, record: seq, message: message.clone() });
                state.with_mail.insert(agent.clone());
            }
        }
        Ok(targets.len())
    }
}

impl SledBus {
    /// Writes a batch of `send_many` (`values` the encoded messages) and adds it to the mirror,
    /// all or nothing: checked against the mirror first, and a write that fails takes back the
    /// records written before it. Each message gets its own sequence number (a broadcast's
    /// copies share one), in batch order; the messages that go to one inbox are stored as one
    /// record (a batch record when there are several), so a batch costs one insert per inbox
    /// it reaches, not one per message.
    fn write_batch(
        &self,
        state: &mut State,
        messages: Vec<Message>,
        values: &[Vec<u8>],
    ) -> Result<Vec<usize>, SendError> {
        let plan = plan_batch(&state.agents, &state.system, self.capacity, &messages)?;
        let records = self.number_batch(state, &plan)?;
        self.store_batch(state, &records, values)?;
        let counts = plan.iter().map(Target::count).collect();
        for ((message, target), seq) in messages.into_iter().zip(plan).zip(&records.seqs) {
            let Some(seq) = *seq else { continue };
            match target {
                Target::System => {
                    let record = records.record_of(&Address::System);
                    state.system.push(Entry { seq, record, message });
                }
                Target::Agent(agent) => {
                    let record = records.record_of(&Address::Agent(agent.clone()));
                    state.deliver(agent, Entry { seq, record, message });
                }
                Target::Broadcast(agents) => {
                    for agent in agents {
                        let record = records.record_of(&Address::Agent(agent.clone()));
                        state.deliver(agent, Entry { seq, record, message: message.clone() });
                    }
                }
            }
        }
        Ok(counts)
    }

    /// Stores the acknowledgement of the in-flight messages of `queue` (the inbox `inbox`) at
    /// `removed` (ascending positions among the in-flight ones): each record's acknowledged
    /// messages into the acked tree, then the record removed, or rewritten without them when
    /// some of a batch record's messages are left. Returns the batch records gone and those
    /// rewritten, for the mirror; changes nothing in it.
    fn store_ack(
        &self,
        inbox: &Address,
        queue: &Inbox,
        batches: &HashMap<Vec<u8>, usize, FxBuildHasher>,
        removed: &[usize],
    ) -> Result<(Vec<Vec<u8>>, Vec<Rewritten>), BackendError> {
        // The acknowledged messages by record: a record's messages are next to each other in
        // their inbox, in order.
        let mut groups: Vec<(u64, Vec<&Entry>)> = Vec::new();
        let mut next = removed.iter().peekable();
        for (i, entry) in queue.in_flight().enumerate() {
            if next.next_if_eq(&&i).is_none() {
                continue;
            }
            match groups.last_mut() {
                Some((record, entries)) if *record == entry.record => entries.push(entry),
                _ => groups.push((entry.record, vec![entry])),
            }
        }
        // Batch records gone, and batch records rewritten without the acknowledged messages.
        let mut gone = Vec::new();
        let mut rewritten = Vec::new();
        for (record, entries) in &groups {
            // Kept for `history` first: a crash in between leaves the message in its inbox
            // (delivered again) rather than lost from the history. One write per record, not
            // sled batches (see `broadcast`).
            let value = record_value(entries.iter().map(|e| (e.seq, &e.message)))?;
            let first = entries.first().map_or(*record, |e| e.seq);
            self.acked
                .insert(message_key(inbox, first), value)
                .map_err(|e| write_failed(Self::ACKED_TREE, e))?;
            let key = message_key(inbox, *record);
            let left: Vec<&Entry> = if batches.contains_key(&key) {
                queue
                    .entries()
                    .enumerate()
                    .filter(|(i, e)| e.record == *record && removed.binary_search(i).is_err())
                    .map(|(_, e)| e)
                    .collect()
            } else {
                Vec::new()
            };
            let Some(new) = left.first().map(|e| e.seq) else {
                self.messages
                    .remove(key.as_slice())
                    .map_err(|e| write_failed(Self::MESSAGES_TREE, e))?;
                gone.push(key);
                continue;
            };
            // Some messages of a batch record are left: they are stored again, as a record
            // keyed by the first of them, before the old record goes (a crash in between
            // delivers them twice rather than never).
            let value = record_value(left.iter().map(|e| (e.seq, &e.message)))?;
            let new_key = message_key(inbox, new);
            self.messages
                .insert(new_key.as_slice(), value)
                .map_err(|e| write_failed(Self::MESSAGES_TREE, e))?;
            if new_key != key {
                self.messages
                    .remove(key.as_slice())
                    .map_err(|e| write_failed(Self::MESSAGES_TREE, e))?;
            }
            rewritten.push(Rewritten { record: *record, key, new, new_key, left: left.len() });
        }
        Ok((gone, rewritten))
    }

    /// Gives each message of a planned batch its sequence number, in batch order, and gathers
    /// the messages by inbox.
    fn number_batch(
        &self,
        state: &mut State,
        plan: &[Target],
    ) -> Result<BatchRecords, BackendError> {
        let mut records = BatchRecords {
            seqs: Vec::with_capacity(plan.len()),
            inboxes: Vec::new(),
            index: HashMap::default(),
        };
        for (i, target) in plan.iter().enumerate() {
            if target.count() == 0 {
                records.seqs.push(None);
                continue;
            }
            let seq = self.reserve_seq(state)?;
            state.next_seq = seq + 1;
            records.seqs.push(Some(seq));
            match target {
                Target::System => records.add(Address::System, seq, i),
                Target::Agent(agent) => records.add(Address::Agent(agent.clone()), seq, i),
                Target::Broadcast(agents) => {
                    for agent in agents {
                        records.add(Address::Agent(agent.clone()), seq, i);
                    }
                }
            }
        }
        Ok(records)
    }

    /// Stores a numbered batch, one record per inbox (one insert each, not a sled batch: see
    /// `broadcast`); a write that fails takes back the records written before it.
    fn store_batch(
        &self,
        state: &mut State,
        records: &BatchRecords,
        values: &[Vec<u8>],
    ) -> Result<(), BackendError> {
        let mut written: Vec<Vec<u8>> = Vec::with_capacity(records.inboxes.len());
        for (address, messages) in &records.inboxes {
            let key = message_key(address, messages[0].0);
            let value = match messages.as_slice() {
                [(_, i)] => values[*i].clone(),
                _ => batch_value(messages.iter().map(|(seq, i)| (*seq, values[*i].as_slice()))),
            };
            if let Err(e) = self.messages.insert(key.as_slice(), value) {
                // Take back the records stored, so the failed batch delivers nothing (sled
                // refuses every write after an I/O error, so this is for other errors). The
                // sequence numbers used stay used: they are never reused, gaps are harmless.
                for key in &written {
                    let _ = self.messages.remove(key.as_slice());
                    state.batches.remove(key);
                }
                let first_seq = records.seqs.iter().flatten().next();
                tracing::debug!(?first_seq, error = %e, "a batch of sends failed and was taken back");
                return Err(write_failed(Self::MESSAGES_TREE, e));
            }
            if messages.len() > 1 {
                state.batches.insert(key.clone(), messages.len());
            }
            written.push(key);
        }
        Ok(())
    }
}

/// A batch record rewritten by an acknowledgement: its old record (sequence number and key),
/// the new one, and how many messages it holds now.
struct Rewritten {
    record: u64,
    key: Vec<u8>,
    new: u64,
    new_key: Vec<u8>,
    left: usize,
}

/// The messages of a `send_many` by inbox, once numbered.
struct BatchRecords {
    /// Each message's sequence number, in batch order (`None` for a broadcast that reaches no
    /// inbox).
    seqs: Vec<Option<u64>>,
    /// Each inbox the batch reaches, with its messages' (sequence number, index in the batch),
    /// in batch order.
    inboxes: Vec<(Address, Vec<(u64, usize)>)>,
    /// Where each inbox is in `inboxes`.
    index: HashMap<Address, usize, FxBuildHasher>,
}

impl BatchRecords {
    fn add(&mut self, address: Address, seq: u64, i: usize) {
        match self.index.get(&address) {
            Some(&at) => self.inboxes[at].1.push((seq, i)),
            None => {
                self.index.insert(address.clone(), self.inboxes.len());
                self.inboxes.push((address, vec![(seq, i)]));
            }
        }
    }

    /// The record `address`'s messages went into: the sequence number of its first.
    fn record_of(&self, address: &Address) -> u64 {
        self.index.get(address).map_or(0, |&at| self.inboxes[at].1[0].0)
    }
}

impl fmt::Debug for SledBus {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let state = self.lock();
        f.debug_struct("SledBus")
            .field("run", &self.store.dir())
            .field("capacity", &self.capacity)
            .field("agents", &state.agents.len())
            .finish_non_exhaustive()
    }
}

impl State {
    /// The inbox `address` names, for reading: `system` or a registered agent.
    fn inbox_mut(&mut self, address: &Address) -> Result<&mut Inbox, InboxError> {
        crate::inbox::inbox_mut(&mut self.agents, &mut self.system, address)
    }

    /// Adds `entry` to the inbox of `agent`, known to exist.
    fn deliver(&mut self, agent: AgentId, entry: Entry) {
        if let Some(inbox) = self.agents.get_mut(&agent) {
            inbox.push(entry);
            self.with_mail.insert(agent);
        }
    }
}

#[async_trait]
impl MessageBus for SledBus {
    async fn register(&self, agent: &AgentId) -> Result<(), RegisterError> {
        check_agent_id(agent.as_str()).map_err(|kind| RegisterError::InvalidAgent {
            agent: agent.to_string(),
            reason: kind.to_string(),
        })?;
        {
            let mut state = self.lock();
            let registered = state.agents.get(agent).is_some_and(|inbox| inbox.registered);
            if !registered {
                self.registered
                    .insert(agent.as_str(), REGISTERED)
                    .map_err(|e| write_failed(Self::REGISTERED_TREE, e))?;
                state.agents.entry(agent.clone()).or_default().registered = true;
            }
        }
        // Commit even when already registered: the call that registered it may not have
        // committed yet.
        Ok(self.commit().await?)
    }

    async fn unregister(&self, agent: &AgentId) -> Result<(), RegisterError> {
        match self.unregister_many(std::slice::from_ref(agent)).await?.first() {
            Some(true) => Ok(()),
            _ => Err(RegisterError::NotRegistered { agent: agent.clone() }),
        }
    }

    /// Every registered agent of the batch marked unregistered under one lock (one sled insert
    /// each, no batch: see `run_store`'s docs, "No batches"), then one commit for all (none
    /// when no agent of the batch was registered).
    async fn unregister_many(&self, agents: &[AgentId]) -> Result<Vec<bool>, BackendError> {
        if agents.is_empty() {
            return Ok(Vec::new());
        }
        let unregistered = {
            let mut state = self.lock();
            let mut unregistered = Vec::with_capacity(agents.len());
            for agent in agents {
                unregistered.push(match state.agents.get_mut(agent) {
                    Some(inbox) if inbox.registered => {
                        self.registered
                            .insert(agent.as_str(), UNREGISTERED)
                            .map_err(|e| write_failed(Self::REGISTERED_TREE, e))?;
                        inbox.registered = false;
                        true
                    }
                    _ => false,
                });
            }
            unregistered
        };
        if unregistered.contains(&true) {
            self.commit().await?;
        }
        Ok(unregistered)
    }

    async fn is_registered(&self, agent: &AgentId) -> Result<bool, BackendError> {
        Ok(self.lock().agents.get(agent).is_some_and(|inbox| inbox.registered))
    }

    async fn registered(&self) -> Result<Vec<AgentId>, BackendError> {
        let mut agents: Vec<AgentId> = self
            .lock()
            .agents
            .iter()
            .filter(|(_, inbox)| inbox.registered)
            .map(|(id, _)| id.clone())
            .collect();
        agents.sort_unstable();
        Ok(agents)
    }

    async fn send(&self, message: Message) -> Result<usize, SendError> {
        if message.from == Address::Broadcast {
            return Err(SendError::InvalidSender { id: message.id });
        }
        // Encode before taking the lock: senders serialise only on the sled write.
        let value = agent_state::encode(&message).map_err(|e| {
            BackendError::with_source(BACKEND, format!("cannot encode message {}", message.id), e)
        })?;
        let delivered = {
            let mut state = self.lock();
            if message.to == Address::Broadcast {
                self.broadcast(&mut state, message, &value)?
            } else {
                self.send_one(&mut state, message, &value)?;
                1
            }
        };
        self.commit().await?;
        Ok(delivered)
    }

    /// The whole batch checked, then written under one lock, then one commit (one `fdatasync`
    /// shared with concurrent calls) for all of it.
    async fn send_many(&self, messages: Vec<Message>) -> Result<Vec<usize>, SendError> {
        if messages.is_empty() {
            return Ok(Vec::new());
        }
        // Encode before taking the lock: senders serialise only on the sled writes. (A refusal,
        // such as `broadcast` as a sender, is found in batch order under the lock.)
        let values = messages
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
        let counts = {
            let mut state = self.lock();
            self.write_batch(&mut state, messages, &values)?
        };
        self.commit().await?;
        Ok(counts)
    }

    async fn take(&self, inbox: &Address, max: usize) -> Result<Vec<Message>, InboxError> {
        let mut state = self.lock();
        let queue = state.inbox_mut(inbox)?;
        let taken: Vec<Message> = queue.take(max).map(|entry| entry.message.clone()).collect();
        if queue.pending_len() == 0
            && let Address::Agent(agent) = inbox
        {
            state.with_mail.remove(agent);
        }
        Ok(taken)
    }

    async fn ack(&self, inbox: &Address, ids: &[MessageId]) -> Result<usize, InboxError> {
        let removed = {
            let mut state = self.lock();
            let State { agents, system, batches, .. } = &mut *state;
            let queue = crate::inbox::inbox_mut(agents, system, inbox)?;
            let mut acked = Acked::new(ids);
            // Positions among the in-flight messages, ascending.
            let removed: Vec<usize> = queue
                .in_flight()
                .enumerate()
                .filter(|(i, entry)| acked.contains(*i, entry.message.id))
                .map(|(i, _)| i)
                .collect();
            if !removed.is_empty() {
                let (gone, rewritten) = self.store_ack(inbox, queue, batches, &removed)?;
                for key in gone {
                    batches.remove(&key);
                }
                queue.remove_in_flight(|i, _| removed.binary_search(&i).is_ok());
                for Rewritten { record, key, new, new_key, left } in rewritten {
                    batches.remove(&key);
                    if left > 1 {
                        batches.insert(new_key, left);
                    }
                    if new != record {
                        queue.entries_mut().filter(|e| e.record == record).for_each(|e| {
                            e.record = new;
                        });
                    }
                }
            }
            removed.len()
        };
        // Commit even when nothing was removed: a concurrent ack of the same ids may not have
        // committed yet, and this one's `Ok` promises the messages are gone.
        self.commit().await?;
        Ok(removed)
    }

    async fn release(&self, inbox: &Address) -> Result<usize, InboxError> {
        let mut state = self.lock();
        let released = state.inbox_mut(inbox)?.release();
        if released > 0
            && let Address::Agent(agent) = inbox
        {
            state.with_mail.insert(agent.clone());
        }
        Ok(released)
    }

    async fn pending(&self, inbox: &Address) -> Result<usize, InboxError> {
        Ok(self.lock().inbox_mut(inbox)?.pending_len())
    }

    async fn inboxes_with_mail(&self) -> Result<Vec<AgentId>, BackendError> {
        let state = self.lock();
        let mut agents: Vec<AgentId> = state
            .with_mail
            .iter()
            .filter(|id| state.agents.get(*id).is_some_and(|inbox| inbox.registered))
            .cloned()
            .collect();
        agents.sort_unstable();
        Ok(agents)
    }
}

/// The value of a registered agent's key in the registered tree.
const REGISTERED: &[u8] = &[];
/// The value of an unregistered agent's key in the registered tree.
const UNREGISTERED: &[u8] = &[0];

/// Reads every stored record into a fresh mirror.
fn load(
    registered: &sled::Tree,
    messages: &sled::Tree,
    meta: &sled::Tree,
) -> Result<State, BackendError> {
    let mut state = State::default();
    for record in registered.iter() {
        let (key, value) = record.map_err(|e| read_failed(SledBus::REGISTERED_TREE, e))?;
        let agent = std::str::from_utf8(&key)
            .ok()
            .filter(|id| check_agent_id(id).is_ok())
            .ok_or_else(|| damaged(SledBus::REGISTERED_TREE, &raw_key(&key), "not an agent id"))?;
        match &value[..] {
            REGISTERED => {
                state.agents.insert(AgentId::new(agent), Inbox::registered());
            }
            UNREGISTERED => {}
            _ => {
                return Err(damaged(
                    SledBus::REGISTERED_TREE,
                    &raw_key(&key),
                    "neither registered (an empty value) nor unregistered (a zero byte)",
                ));
            }
        }
    }

    let mut end = 0;
    for record in messages.iter() {
        let (key, value) = record.map_err(|e| read_failed(SledBus::MESSAGES_TREE, e))?;
        let Some((address, seq)) = parse_message_key(&key) else {
            return Err(damaged(
                SledBus::MESSAGES_TREE,
                &raw_key(&key),
                "not an inbox name, a zero byte and a sequence number",
            ));
        };
        let stored = decode_record(SledBus::MESSAGES_TREE, &address, seq, &value)?;
        if value.first() == Some(&BATCH_MAGIC) {
            state.batches.insert(key.to_vec(), stored.len());
        }
        let inbox = match &address {
            Address::Agent(agent) => {
                state.with_mail.insert(agent.clone());
                state.agents.entry(agent.clone()).or_default()
            }
            _ => &mut state.system,
        };
        // Keys come in order, so each inbox's records come in sequence order (and a batch
        // record's messages are in order). A crash in the middle of an ack that rewrote a batch
        // record may leave both the old record and the rewritten one: their messages are then
        // delivered twice, which at-least-once allows.
        let record = seq;
        for (seq, message) in stored {
            inbox.push(Entry { seq, record, message });
            end = end.max(seq.saturating_add(1));
        }
    }

    let bound = match meta.get(NEXT_SEQ_KEY).map_err(|e| read_failed(SledBus::META_TREE, e))? {
        None => 0,
        Some(value) => {
            let bytes = <[u8; 8]>::try_from(value.as_ref()).map_err(|_| {
                damaged(SledBus::META_TREE, "`next_seq`", "not a 64-bit sequence number")
            })?;
            u64::from_be_bytes(bytes)
        }
    };
    state.next_seq = end.max(bound);
    state.reserved = state.next_seq;
    Ok(state)
}

/// The key of the record of message `seq` in `inbox` (an agent or `system`).
fn message_key(inbox: &Address, seq: u64) -> Vec<u8> {
    let name = inbox.as_str().as_bytes();
    let mut key = Vec::with_capacity(name.len() + 9);
    key.extend_from_slice(name);
    key.push(0);
    key.extend_from_slice(&seq.to_be_bytes());
    key
}

/// The first byte of a batch record's value; a record of one message is a JSON envelope, which
/// starts with `{`.
const BATCH_MAGIC: u8 = 0x01;
/// The layout version of batch records, their second byte.
const BATCH_VERSION: u8 = 1;

/// The value of a batch record: the magic byte and the layout version, then, for each message
/// in order, its sequence number (big-endian 64 bits), the length of its envelope (big-endian
/// 32 bits) and the envelope ([`agent_state::encode`]), as a record of one message holds it.
fn batch_value<'a>(messages: impl Iterator<Item = (u64, &'a [u8])>) -> Vec<u8> {
    let mut value = vec![BATCH_MAGIC, BATCH_VERSION];
    for (seq, envelope) in messages {
        value.extend_from_slice(&seq.to_be_bytes());
        // An envelope over 4 GiB cannot be sent: sled refuses values that large long before.
        let len = u32::try_from(envelope.len()).unwrap_or(u32::MAX);
        value.extend_from_slice(&len.to_be_bytes());
        value.extend_from_slice(envelope);
    }
    value
}

/// The messages of a stored record, with their sequence numbers: one for a record of one
/// message (`seq` from its key), each of a batch record. `tree` and `inbox` name the record in
/// errors.
fn decode_record(
    tree: &str,
    inbox: &Address,
    seq: u64,
    value: &[u8],
) -> Result<Vec<(u64, Message)>, BackendError> {
    let Some(rest) = value.strip_prefix(&[BATCH_MAGIC]) else {
        let message =
            agent_state::decode::<Message>(value).map_err(|e| undecodable(tree, inbox, seq, e))?;
        return Ok(vec![(seq, message)]);
    };
    let cut =
        |what: &str| damaged(tree, &format!("`{inbox} #{seq}`"), &format!("a batch record {what}"));
    let Some((&BATCH_VERSION, mut rest)) = rest.split_first() else {
        return Err(cut("of an unknown layout version"));
    };
    let mut messages = Vec::new();
    while !rest.is_empty() {
        let (Some(head), Some(len)) = (rest.get(..8), rest.get(8..12)) else {
            return Err(cut("cut short"));
        };
        let mut seq_bytes = [0; 8];
        seq_bytes.copy_from_slice(head);
        let mut len_bytes = [0; 4];
        len_bytes.copy_from_slice(len);
        let message_seq = u64::from_be_bytes(seq_bytes);
        let len = u32::from_be_bytes(len_bytes) as usize;
        let Some(envelope) = rest.get(12..12 + len) else { return Err(cut("cut short")) };
        let message = agent_state::decode::<Message>(envelope)
            .map_err(|e| undecodable(tree, inbox, message_seq, e))?;
        messages.push((message_seq, message));
        rest = &rest[12 + len..];
    }
    if messages.is_empty() {
        return Err(cut("with no message"));
    }
    Ok(messages)
}

/// The value a record of `messages` (with their sequence numbers) is stored with: a record of
/// one message, or a batch record.
fn record_value<'a>(
    messages: impl Iterator<Item = (u64, &'a Message)>,
) -> Result<Vec<u8>, BackendError> {
    let encode = |message: &Message| {
        agent_state::encode(message).map_err(|e| {
            BackendError::with_source(BACKEND, format!("cannot encode message {}", message.id), e)
        })
    };
    let mut envelopes = messages
        .map(|(seq, message)| Ok::<_, BackendError>((seq, encode(message)?)))
        .collect::<Result<Vec<_>, _>>()?;
    if envelopes.len() == 1
        && let Some((_, envelope)) = envelopes.pop()
    {
        return Ok(envelope);
    }
    Ok(batch_value(envelopes.iter().map(|(seq, envelope)| (*seq, envelope.as_slice()))))
}

/// The inbox and sequence number of a message key, if it is one.
fn parse_message_key(key: &[u8]) -> Option<(Address, u64)> {
    let split = key.iter().position(|&b| b == 0)?;
    let name = std::str::from_utf8(&key[..split]).ok()?;
    let seq = u64::from_be_bytes(key[split + 1..].try_into().ok()?);
    let address = if name == SYSTEM {
        Address::System
    } else {
        check_agent_id(name).ok()?;
        Address::Agent(AgentId::new(name))
    };
    Some((address, seq))
}

/// A key that cannot be parsed, as printable text.
fn raw_key(key: &[u8]) -> String {
    format!("\"{}\"", key.escape_ascii())
}

fn damaged(tree: &str, key: &str, what: &str) -> BackendError {
    BackendError::new(
        BACKEND,
        format!(
            "cannot read record {key} of tree `{tree}`: {what}; the run's message bus is damaged, restore the run from a copy or remove that record"
        ),
    )
}

fn undecodable(tree: &str, inbox: &Address, seq: u64, error: DecodeError) -> BackendError {
    BackendError::with_source(
        BACKEND,
        format!(
            "cannot read record `{inbox} #{seq}` of tree `{tree}`: {error}; the run's message bus is damaged, restore the run from a copy or remove that record"
        ),
        error,
    )
}

fn read_failed(tree: &str, error: sled::Error) -> BackendError {
    BackendError::with_source(BACKEND, format!("cannot read tree `{tree}`"), error)
}

fn write_failed(tree: &str, error: sled::Error) -> BackendError {
    BackendError::with_source(BACKEND, format!("cannot write to tree `{tree}`"), error)
}
