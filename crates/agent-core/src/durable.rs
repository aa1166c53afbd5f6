//! The audit log and the state store on a sled run directory (feature `sled`).

use std::collections::HashMap;
use std::sync::{Mutex, PoisonError};

use agent_state::{
    AgentId, BackendError, DecodeError, Stored, TaskOutcome, Timestamp, Versioned, decode, encode,
};
use async_trait::async_trait;
use run_store::RunStore;

use crate::audit::{
    AuditAnchor, AuditEntry, AuditEvent, AuditHash, AuditLog, AuditRecord, GENESIS_HASH,
};
use crate::state::{
    AgentCounts, AgentRecord, LivenessRecord, OutcomeRecord, StateStore, ToolRecord,
};
use crate::tools::ToolOutput;

const AUDIT_TREE: &str = "audit";
const AGENTS_TREE: &str = "agents";
const TOOLS_TREE: &str = "tools";
const OUTCOMES_TREE: &str = "outcomes";
const BLOBS_TREE: &str = "blobs";
const LIVENESS_TREE: &str = "liveness";
/// The parts of agents' layer states (`parts`): key `<agent id> NUL <path>`, value its JSON.
const PARTS_TREE: &str = "agent_parts";
/// The name of the audit log's anchor in the run's seal: the log's final record.
pub const AUDIT_ANCHOR: &str = "audit";

/// The most bytes of encoded records [`SledAuditLog::append_many`] stores as one value of the
/// audit tree (a record larger than this is stored alone). sled inserts a new key at several
/// times the cost of overwriting one (splitting its leaves as the tree grows), so a batch of
/// records costs a few inserts, not one each; a value this small keeps sled's leaves (16
/// values) inline in its log, not in blob files.
const CHUNK_BYTES: usize = 4 * 1024;

/// Consecutive audit records stored as one value of the audit tree, keyed by the first one's
/// sequence number: what [`SledAuditLog::append_many`] writes for a batch. Each record keeps
/// its own envelope, so its schema version is checked as a record stored alone is.
#[derive(serde::Serialize, serde::Deserialize)]
struct AuditChunk(Vec<Stored<AuditRecord>>);

impl Versioned for AuditChunk {
    const KIND: &'static str = "audit_chunk";
    const VERSION: u32 = 1;
}

/// The value that stores the records `encoded` (each an [`AuditRecord`] in its envelope): the
/// one record as it is, or several as an [`AuditChunk`], built from their encodings without
/// encoding them again.
fn chunk_value(mut encoded: Vec<Vec<u8>>) -> Vec<u8> {
    if encoded.len() == 1 {
        return encoded.pop().unwrap_or_default();
    }
    let head = format!(
        r#"{{"kind":"{}","schema_version":{},"value":["#,
        AuditChunk::KIND,
        AuditChunk::VERSION
    );
    let len = head.len() + encoded.iter().map(|e| e.len() + 1).sum::<usize>() + 2;
    let mut value = Vec::with_capacity(len);
    value.extend_from_slice(head.as_bytes());
    for (i, record) in encoded.iter().enumerate() {
        if i > 0 {
            value.push(b',');
        }
        value.extend_from_slice(record);
    }
    value.extend_from_slice(b"]}");
    value
}

/// The records of one value of the audit tree, stored at `key`: a record alone, or an
/// [`AuditChunk`] whose records are numbered on from the key without gaps.
fn records_in(key: &[u8], value: &[u8]) -> Result<Vec<AuditRecord>, BackendError> {
    let cannot_read = || format!("audit record {} cannot be read", key_seq(key));
    let undecodable = |e: DecodeError| BackendError::with_source("sled", cannot_read(), e);
    let unreadable =
        |e: &dyn std::fmt::Display| BackendError::new("sled", format!("{}: {e}", cannot_read()));
    let stored = match decode::<AuditRecord>(value) {
        Ok(record) => return Ok(vec![record]),
        Err(DecodeError::WrongKind { found, .. }) if found == AuditChunk::KIND => {
            decode::<AuditChunk>(value).map_err(undecodable)?
        }
        Err(e) => return Err(undecodable(e)),
    };
    let first = <[u8; 8]>::try_from(key).map(u64::from_be_bytes).ok();
    let mut records = Vec::with_capacity(stored.0.len());
    for (i, record) in stored.0.into_iter().enumerate() {
        if record.kind != AuditRecord::KIND || record.schema_version != AuditRecord::VERSION {
            return Err(unreadable(&format_args!(
                "it holds a {} record of schema version {}, this build reads {} version {}",
                record.kind,
                record.schema_version,
                AuditRecord::KIND,
                AuditRecord::VERSION
            )));
        }
        let expected = first.and_then(|f| f.checked_add(u64::try_from(i).ok()?));
        if Some(record.value.seq) != expected {
            return Err(unreadable(&format_args!(
                "its record {i} is numbered {}, not in order from the key",
                record.value.seq
            )));
        }
        records.push(record.value);
    }
    if records.is_empty() {
        return Err(unreadable(&"it is an empty chunk"));
    }
    Ok(records)
}

/// The key of the value of `tree` that holds record `seq` if the log has it: the greatest key
/// not above `seq`.
fn value_holding(
    tree: &sled::Tree,
    seq: u64,
) -> Result<Option<(sled::IVec, sled::IVec)>, BackendError> {
    tree.range(..=seq.to_be_bytes()).next_back().transpose().map_err(sled_error)
}

/// The last record of the log in `tree`, if any.
fn last_record(tree: &sled::Tree) -> Result<Option<AuditRecord>, BackendError> {
    match tree.last().map_err(sled_error)? {
        None => Ok(None),
        Some((key, value)) => Ok(records_in(&key, &value)?.pop()),
    }
}

/// The last record each agent appended. `complete` once the whole log was read: until then an
/// agent missing from `heads` may have records from before the log was opened.
#[derive(Default)]
struct Heads {
    heads: HashMap<AgentId, AuditAnchor>,
    complete: bool,
}

/// The audit log in a run directory: records keyed by sequence number, each chained to the one
/// before by hash; the records of a batch ([`AuditLog::append_many`]) are stored several to a
/// value (an `audit_chunk`, up to 4 KiB), keyed by the first of them. If `append` returns
/// `Ok`, the record survives a crash and a power loss.
///
/// The last record is kept as the store's [`AUDIT_ANCHOR`] (in the seal of a cleanly closed
/// run), and [`AuditLog::head_of`] answers from memory (the log is read once, the first time
/// an agent that has appended nothing since the log opened is asked for).
pub struct SledAuditLog {
    tree: sled::Tree,
    /// The next sequence number and the last record's hash; appends are serialised under it.
    tail: Mutex<(u64, AuditHash)>,
    heads: Mutex<Heads>,
    // Declared after the tree: the store closes cleanly only once its trees are gone.
    store: RunStore,
}

impl SledAuditLog {
    /// Opens the log of `store`, reading where it ends. A last record that does not decode is
    /// an error naming it (run `verify` to see the whole chain).
    pub fn open(store: &RunStore) -> Result<Self, BackendError> {
        let tree = store.tree(AUDIT_TREE)?;
        reaches_kept_anchor(store, &tree)?;
        let tail = match last_record(&tree)? {
            None => (0, GENESIS_HASH),
            Some(record) => {
                store.set_anchor(AUDIT_ANCHOR, anchor_json(AuditAnchor::of(&record)));
                (record.seq + 1, record.hash)
            }
        };
        Ok(Self { tree, tail: Mutex::new(tail), heads: Mutex::default(), store: store.clone() })
    }

    /// The anchor of the log's last record that the run's seal held when the store opened it:
    /// `Ok(None)` when the run was not sealed or its seal has no audit anchor (written before
    /// anchors existed).
    pub fn sealed_anchor(store: &RunStore) -> Result<Option<AuditAnchor>, BackendError> {
        store
            .sealed_anchor(AUDIT_ANCHOR)
            .map(|value| {
                serde_json::from_value(value).map_err(|e| {
                    BackendError::with_source("sled", "the seal's audit anchor cannot be read", e)
                })
            })
            .transpose()
    }
}

/// Refuses to open a log that does not hold the record the run's anchors held when the store
/// opened it ([`RunStore::kept_anchor`]: the seal's, or the anchor file's kept while the run
/// went): a log cut or altered while the seal was gone. Appending to it would move the anchors
/// onto the damaged log and hide the damage.
fn reaches_kept_anchor(store: &RunStore, tree: &sled::Tree) -> Result<(), BackendError> {
    let Some(value) = store.kept_anchor(AUDIT_ANCHOR) else { return Ok(()) };
    let anchor = SledAuditLog::anchor_of(value)?;
    let held = match value_holding(tree, anchor.seq)? {
        None => None,
        Some((key, value)) => match records_in(&key, &value) {
            Ok(records) => records.into_iter().find(|r| r.seq == anchor.seq).map(Ok),
            Err(_) => Some(Err(())),
        },
    };
    let found = match held {
        None => match tree.last().map_err(sled_error)? {
            None => "the log is empty".to_owned(),
            Some((key, value)) => {
                let last = records_in(&key, &value).ok().and_then(|mut r| r.pop());
                let end = last.map_or_else(|| key_seq(&key), |record| record.seq.to_string());
                format!("the log ends at record {end}")
            }
        },
        Some(Ok(record)) if record.hash == anchor.hash => return Ok(()),
        Some(Ok(record)) => format!("record {} has hash {}", record.seq, record.hash),
        Some(Err(())) => format!("record {} cannot be read", anchor.seq),
    };
    Err(BackendError::new(
        "sled",
        format!(
            "the run is damaged: its anchors (kept outside the database) hold audit {anchor},              but {found}: the audit log was truncated or altered; nothing was changed,              `strata verify` shows what is broken; restore the run directory from a copy"
        ),
    ))
}

impl SledAuditLog {
    /// An audit anchor as the store keeps it (in the seal and in the anchor files).
    pub fn anchor_of(value: serde_json::Value) -> Result<AuditAnchor, BackendError> {
        serde_json::from_value(value)
            .map_err(|e| BackendError::with_source("sled", "an audit anchor cannot be read", e))
    }
}

fn anchor_json(anchor: AuditAnchor) -> serde_json::Value {
    serde_json::json!({"seq": anchor.seq, "hash": anchor.hash.to_string()})
}

#[async_trait]
impl AuditLog for SledAuditLog {
    async fn append(
        &self,
        agent: &AgentId,
        at: Timestamp,
        event: AuditEvent,
    ) -> Result<u64, BackendError> {
        Ok(self.append_record(agent, at, event).await?.seq)
    }

    async fn append_record(
        &self,
        agent: &AgentId,
        at: Timestamp,
        event: AuditEvent,
    ) -> Result<AuditRecord, BackendError> {
        let entry = AuditEntry { agent: agent.clone(), at, event };
        self.append_many(vec![entry]).await?.pop().ok_or_else(|| {
            BackendError::new("sled", "an append of one audit record answered no record")
        })
    }

    /// The whole batch built, encoded and inserted under the tail's lock, then one commit for
    /// all. Consecutive records are stored together, up to 4 KiB of them to a value (an
    /// `audit_chunk`): one insert per value, no sled batch (see `run_store`'s docs, "No
    /// batches"), each value whole or absent after a crash, so what survives a crash is still
    /// a prefix of the batch. A record that cannot be encoded is found before anything is
    /// inserted.
    async fn append_many(
        &self,
        entries: Vec<AuditEntry>,
    ) -> Result<Vec<AuditRecord>, BackendError> {
        if entries.is_empty() {
            return Ok(Vec::new());
        }
        let records = {
            let mut tail = self.tail.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
            let (mut seq, mut prev) = *tail;
            let mut records = Vec::with_capacity(entries.len());
            let mut encoded = Vec::with_capacity(entries.len());
            for AuditEntry { agent, at, event } in entries {
                let record = AuditRecord::new(seq, at, agent, event, prev);
                encoded.push(record.encoded().map_err(|e| {
                    BackendError::with_source("sled", "cannot encode an audit record", e)
                })?);
                (seq, prev) = (record.seq + 1, record.hash);
                records.push(record);
            }
            let mut heads = self.heads.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
            let mut newest = None;
            let mut failed = None;
            let mut encoded = encoded.into_iter().peekable();
            let mut stored = records.iter();
            while let Some(first) = encoded.next() {
                let mut bytes = first.len();
                let mut chunk = vec![first];
                while let Some(next) = encoded.next_if(|next| bytes + 1 + next.len() <= CHUNK_BYTES)
                {
                    bytes += 1 + next.len();
                    chunk.push(next);
                }
                let in_chunk: Vec<&AuditRecord> = stored.by_ref().take(chunk.len()).collect();
                let Some(key) = in_chunk.first().map(|r| r.seq.to_be_bytes()) else { break };
                if let Err(e) = self.tree.insert(key, chunk_value(chunk)) {
                    failed = Some(sled_error(e));
                    break;
                }
                for record in in_chunk {
                    *tail = (record.seq + 1, record.hash);
                    let anchor = AuditAnchor::of(record);
                    heads.heads.insert(record.agent.clone(), anchor);
                    newest = Some(anchor);
                }
            }
            // As far as the inserts went: those before a failure are in the log.
            if let Some(anchor) = newest {
                self.store.set_anchor(AUDIT_ANCHOR, anchor_json(anchor));
            }
            if let Some(e) = failed {
                return Err(e);
            }
            records
        };
        self.store.commit().await?;
        Ok(records)
    }

    async fn records_from(&self, from: u64) -> Result<Vec<AuditRecord>, BackendError> {
        // From the value that holds record `from`, which may begin before it.
        let start = match value_holding(&self.tree, from)? {
            Some((key, _)) => key.to_vec(),
            None => from.to_be_bytes().to_vec(),
        };
        let mut records = Vec::new();
        for item in self.tree.range(start..) {
            let (key, value) = item.map_err(sled_error)?;
            records.extend(records_in(&key, &value)?.into_iter().filter(|r| r.seq >= from));
        }
        Ok(records)
    }

    async fn head_of(&self, agent: &AgentId) -> Result<Option<AuditAnchor>, BackendError> {
        {
            let heads = self.heads.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
            if heads.complete || heads.heads.contains_key(agent) {
                return Ok(heads.heads.get(agent).copied());
            }
        }
        // Read the whole log once. Appends go on meanwhile; a record read here that is older
        // than one an append put in `heads` does not replace it.
        let mut found: HashMap<AgentId, AuditAnchor> = HashMap::new();
        for record in self.records(None).await? {
            found.insert(record.agent.clone(), AuditAnchor::of(&record));
        }
        let mut heads = self.heads.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        for (id, anchor) in found {
            let head = heads.heads.entry(id).or_insert(anchor);
            if head.seq < anchor.seq {
                *head = anchor;
            }
        }
        heads.complete = true;
        Ok(heads.heads.get(agent).copied())
    }

    /// Decodes only the stored values whose bytes hold `"event":"<name>"` for a name of
    /// `events`. A record is stored as compact JSON, where that text stands only where an event
    /// of that name is, or where some other object in a record has that key and value
    /// (decoded, then left out); inside a string its quotes would be escaped. A value skipped
    /// is not read at all, so a damaged one is an error here only if it may hold an event
    /// asked for (`strata verify` reads every one).
    async fn records_of(&self, events: &[&str]) -> Result<Vec<AuditRecord>, BackendError> {
        let needles: Vec<String> = events.iter().map(|e| format!("\"event\":\"{e}\"")).collect();
        let finders: Vec<memchr::memmem::Finder<'_>> =
            needles.iter().map(|n| memchr::memmem::Finder::new(n.as_bytes())).collect();
        let mut records = Vec::new();
        for item in self.tree.iter() {
            let (key, value) = item.map_err(sled_error)?;
            if !finders.iter().any(|f| f.find(&value).is_some()) {
                continue;
            }
            let held = records_in(&key, &value)?;
            records.extend(held.into_iter().filter(|r| events.contains(&r.event.name())));
        }
        Ok(records)
    }

    async fn records(&self, agent: Option<&AgentId>) -> Result<Vec<AuditRecord>, BackendError> {
        let mut records = Vec::new();
        for item in self.tree.iter() {
            let (key, value) = item.map_err(sled_error)?;
            for record in records_in(&key, &value)? {
                if agent.is_none_or(|a| *a == record.agent) {
                    records.push(record);
                }
            }
        }
        Ok(records)
    }
}

/// The name of a NATS run's audit anchor in its local run directory's anchor files.
pub const NATS_AUDIT_ANCHOR: &str = "nats_audit";

/// An audit log kept elsewhere (on a NATS server) whose newest record is anchored in a run
/// directory's anchor files (see `run_store::AnchorFile`) as each append is acknowledged: a
/// lower bound kept apart from the server, so that records cut from the end of the server's
/// log, or altered there, show. Reads go to the log itself.
pub struct AnchoredAuditLog {
    inner: std::sync::Arc<dyn AuditLog>,
    store: RunStore,
    /// The newest anchor set: appends can finish out of order; the anchor only moves forward.
    newest: Mutex<Option<u64>>,
}

impl AnchoredAuditLog {
    /// `inner`, anchored in `store`'s anchor files under [`NATS_AUDIT_ANCHOR`].
    pub fn new(inner: std::sync::Arc<dyn AuditLog>, store: RunStore) -> Self {
        Self { inner, store, newest: Mutex::new(None) }
    }
}

#[async_trait]
impl AuditLog for AnchoredAuditLog {
    async fn append(
        &self,
        agent: &AgentId,
        at: Timestamp,
        event: AuditEvent,
    ) -> Result<u64, BackendError> {
        Ok(self.append_record(agent, at, event).await?.seq)
    }

    async fn append_record(
        &self,
        agent: &AgentId,
        at: Timestamp,
        event: AuditEvent,
    ) -> Result<AuditRecord, BackendError> {
        let record = self.inner.append_record(agent, at, event).await?;
        let mut newest = self.newest.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        if newest.is_none_or(|seq| seq < record.seq) {
            *newest = Some(record.seq);
            self.store.set_anchor(NATS_AUDIT_ANCHOR, anchor_json(AuditAnchor::of(&record)));
            self.store.anchors_durable();
        }
        Ok(record)
    }

    async fn append_many(
        &self,
        entries: Vec<AuditEntry>,
    ) -> Result<Vec<AuditRecord>, BackendError> {
        let records = self.inner.append_many(entries).await?;
        if let Some(record) = records.iter().max_by_key(|r| r.seq) {
            let mut newest = self.newest.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
            if newest.is_none_or(|seq| seq < record.seq) {
                *newest = Some(record.seq);
                self.store.set_anchor(NATS_AUDIT_ANCHOR, anchor_json(AuditAnchor::of(record)));
                self.store.anchors_durable();
            }
        }
        Ok(records)
    }

    async fn records(&self, agent: Option<&AgentId>) -> Result<Vec<AuditRecord>, BackendError> {
        self.inner.records(agent).await
    }

    async fn records_from(&self, from: u64) -> Result<Vec<AuditRecord>, BackendError> {
        self.inner.records_from(from).await
    }

    async fn records_of(&self, events: &[&str]) -> Result<Vec<AuditRecord>, BackendError> {
        self.inner.records_of(events).await
    }

    async fn head_of(&self, agent: &AgentId) -> Result<Option<AuditAnchor>, BackendError> {
        self.inner.head_of(agent).await
    }
}

impl SledStateStore {
    async fn put_tool(&self, key: &str, output: Option<ToolOutput>) -> Result<(), BackendError> {
        let record = ToolRecord { key: key.to_owned(), output };
        let bytes = encode(&record)
            .map_err(|e| BackendError::with_source("sled", "cannot encode a tool record", e))?;
        self.tools.insert(key.as_bytes(), bytes).map_err(sled_error)?;
        self.store.commit().await
    }
}

/// Agents' state, tool results and outcomes in a run directory.
pub struct SledStateStore {
    agents: sled::Tree,
    tools: sled::Tree,
    outcomes: sled::Tree,
    blobs: sled::Tree,
    liveness: sled::Tree,
    parts: sled::Tree,
    /// The agents with parts in `parts` (few: those whose state is large), so that saving a
    /// record with its state inline looks for parts to remove only where there are some.
    with_parts: Mutex<std::collections::HashSet<AgentId>>,
    // Declared after the trees: the store closes cleanly only once its trees are gone.
    store: RunStore,
}

impl SledStateStore {
    /// Opens the state trees of `store`.
    pub fn open(store: &RunStore) -> Result<Self, BackendError> {
        let parts = store.tree(PARTS_TREE)?;
        let with_parts = Mutex::new(agents_with_parts(&parts)?);
        Ok(Self {
            agents: store.tree(AGENTS_TREE)?,
            tools: store.tree(TOOLS_TREE)?,
            outcomes: store.tree(OUTCOMES_TREE)?,
            blobs: store.tree(BLOBS_TREE)?,
            liveness: store.tree(LIVENESS_TREE)?,
            parts,
            with_parts,
            store: store.clone(),
        })
    }
}

/// The error for the stored state of the agent keyed `key` that cannot be read.
fn unreadable_agent(key: &[u8], e: &dyn std::fmt::Display) -> BackendError {
    BackendError::new(
        "sled",
        format!("state of agent `{}` cannot be read: {e}", String::from_utf8_lossy(key)),
    )
}

/// The agents that have parts in `parts`: one seek per agent, past its keys.
fn agents_with_parts(
    parts: &sled::Tree,
) -> Result<std::collections::HashSet<AgentId>, BackendError> {
    let mut agents = std::collections::HashSet::new();
    let mut from: Vec<u8> = Vec::new();
    while let Some(item) = parts.range(from.as_slice()..).next() {
        let (key, _) = item.map_err(sled_error)?;
        let Some(end) = key.iter().position(|b| *b == 0) else { break };
        let id = key.get(..end).unwrap_or_default();
        agents.insert(AgentId::new(String::from_utf8_lossy(id).as_ref()));
        from = id.to_vec();
        from.push(1);
    }
    Ok(agents)
}

#[async_trait]
impl StateStore for SledStateStore {
    async fn save_agent(&self, record: &AgentRecord) -> Result<(), BackendError> {
        self.save_agents(std::slice::from_ref(record)).await
    }

    /// Every record encoded first (one that cannot be is found before anything is written),
    /// then each written with its parts (no sled batch: see `run_store`'s docs, "No batches"),
    /// then one commit for all.
    async fn save_agents(&self, records: &[AgentRecord]) -> Result<(), BackendError> {
        if records.is_empty() {
            return Ok(());
        }
        let mut encoded = Vec::with_capacity(records.len());
        for record in records {
            encoded.push(encode(record).map_err(|e| {
                BackendError::with_source("sled", "cannot encode an agent record", e)
            })?);
        }
        for (record, bytes) in records.iter().zip(encoded) {
            // The record first, with its delta: once it is written the delta is what counts,
            // and applying it to the parts below again after a crash changes nothing.
            self.agents.insert(record.id.as_str().as_bytes(), bytes).map_err(sled_error)?;
            self.apply_parts(record)?;
        }
        self.store.commit().await
    }

    fn keeps_parts(&self) -> bool {
        true
    }

    async fn agents(&self) -> Result<Vec<AgentRecord>, BackendError> {
        let mut records = Vec::new();
        for item in self.agents.iter() {
            let (key, value) = item.map_err(sled_error)?;
            let unreadable = |e: &dyn std::fmt::Display| unreadable_agent(&key, e);
            let mut record = AgentRecord::decode(&value).map_err(|e| unreadable(&e))?;
            if let Some(delta) = record.parts.take() {
                let mut parts = self.stored_parts(&record.id)?;
                crate::parts::apply(&mut parts, &delta);
                record.behavior = crate::parts::assemble(parts).map_err(|e| unreadable(&e))?;
            }
            records.push(record);
        }
        Ok(records)
    }

    /// Each record's envelope and counts decoded, the rest of it (its layer state, its
    /// processed ids) skipped. A value that is not a record of a version this build reads is
    /// decoded as [`agents`](StateStore::agents) decodes it, for the same error.
    async fn agent_counts(&self) -> Result<Vec<AgentCounts>, BackendError> {
        /// A stored agent record with only its counts read.
        #[derive(serde::Deserialize)]
        struct Counted {
            kind: String,
            schema_version: u32,
            value: AgentCounts,
        }
        let mut counts = Vec::new();
        for item in self.agents.iter() {
            let (key, value) = item.map_err(sled_error)?;
            match serde_json::from_slice::<Counted>(&value) {
                Ok(c)
                    if c.kind == AgentRecord::KIND
                        && (c.schema_version == 1 || c.schema_version == AgentRecord::VERSION) =>
                {
                    counts.push(c.value);
                }
                _ => {
                    let record =
                        AgentRecord::decode(&value).map_err(|e| unreadable_agent(&key, &e))?;
                    counts.push(AgentCounts::of(record));
                }
            }
        }
        Ok(counts)
    }

    async fn save_liveness(&self, records: Vec<LivenessRecord>) -> Result<(), BackendError> {
        if records.is_empty() {
            return Ok(());
        }
        // Every agent of the cycle, encoded and written off the runtime (a pool may hold many
        // agents), then one group commit. One insert each, not a sled batch: a batch takes
        // sled's process-wide write lock, which a flush wedged by a full disk holds off forever
        // (see `run_store`'s module docs); each record stands alone, so nothing needs a batch.
        let tree = self.liveness.clone();
        tokio::task::spawn_blocking(move || {
            for record in &records {
                let bytes = encode(record).map_err(|e| {
                    BackendError::with_source("sled", "cannot encode a liveness record", e)
                })?;
                tree.insert(record.id.as_str().as_bytes(), bytes).map_err(sled_error)?;
            }
            Ok::<(), BackendError>(())
        })
        .await
        .map_err(|e| BackendError::with_source("sled", "the liveness write stopped", e))??;
        self.store.commit().await
    }

    async fn liveness(&self) -> Result<Vec<LivenessRecord>, BackendError> {
        let mut records = Vec::new();
        for item in self.liveness.iter() {
            let (key, value) = item.map_err(sled_error)?;
            records.push(decode(&value).map_err(|e| {
                BackendError::with_source(
                    "sled",
                    format!(
                        "heartbeat answers of agent `{}` cannot be read",
                        String::from_utf8_lossy(&key)
                    ),
                    e,
                )
            })?);
        }
        Ok(records)
    }

    async fn begin_tool(&self, key: &str) -> Result<(), BackendError> {
        self.put_tool(key, None).await
    }

    async fn record_tool(&self, key: &str, output: &ToolOutput) -> Result<(), BackendError> {
        self.put_tool(key, Some(output.clone())).await
    }

    async fn forget_tool(&self, key: &str) -> Result<(), BackendError> {
        self.tools.remove(key.as_bytes()).map_err(sled_error)?;
        self.store.commit().await
    }

    async fn tool(&self, key: &str) -> Result<Option<Option<ToolOutput>>, BackendError> {
        let Some(value) = self.tools.get(key.as_bytes()).map_err(sled_error)? else {
            return Ok(None);
        };
        let record: ToolRecord = decode(&value).map_err(|e| {
            BackendError::with_source("sled", format!("tool record `{key}` cannot be read"), e)
        })?;
        Ok(Some(record.output))
    }

    async fn record_outcome(&self, outcome: &TaskOutcome) -> Result<(), BackendError> {
        let record = OutcomeRecord { outcome: outcome.clone() };
        let bytes = encode(&record)
            .map_err(|e| BackendError::with_source("sled", "cannot encode an outcome", e))?;
        // The first outcome recorded for a task wins.
        let _ = self
            .outcomes
            .compare_and_swap(outcome.task_id().as_bytes(), None as Option<&[u8]>, Some(bytes))
            .map_err(sled_error)?;
        self.store.commit().await
    }

    async fn outcomes(&self) -> Result<Vec<TaskOutcome>, BackendError> {
        let mut outcomes = Vec::new();
        for item in self.outcomes.iter() {
            let (key, value) = item.map_err(sled_error)?;
            let record: OutcomeRecord = decode(&value).map_err(|e| {
                BackendError::with_source(
                    "sled",
                    format!("outcome of task `{}` cannot be read", String::from_utf8_lossy(&key)),
                    e,
                )
            })?;
            outcomes.push(record.outcome);
        }
        Ok(outcomes)
    }

    async fn put_blob(&self, hash: &str, content: &[u8]) -> Result<(), BackendError> {
        if self.blobs.contains_key(hash.as_bytes()).map_err(sled_error)? {
            return Ok(());
        }
        self.blobs.insert(hash.as_bytes(), content).map_err(sled_error)?;
        self.store.commit().await
    }

    async fn blob(&self, hash: &str) -> Result<Option<Vec<u8>>, BackendError> {
        Ok(self.blobs.get(hash.as_bytes()).map_err(sled_error)?.map(|v| v.to_vec()))
    }
}

fn key_seq(key: &[u8]) -> String {
    <[u8; 8]>::try_from(key)
        .map_or_else(|_| format!("{key:?}"), |b| u64::from_be_bytes(b).to_string())
}

impl SledStateStore {
    /// The key prefix of `agent`'s parts.
    fn parts_prefix(agent: &AgentId) -> Vec<u8> {
        let mut prefix = agent.as_str().as_bytes().to_vec();
        prefix.push(0);
        prefix
    }

    /// The parts stored for `agent`, by path (as written, before its record's delta).
    fn stored_parts(
        &self,
        agent: &AgentId,
    ) -> Result<std::collections::BTreeMap<String, serde_json::Value>, BackendError> {
        let prefix = Self::parts_prefix(agent);
        let mut parts = std::collections::BTreeMap::new();
        for item in self.parts.scan_prefix(&prefix) {
            let (key, value) = item.map_err(sled_error)?;
            let path = String::from_utf8_lossy(key.get(prefix.len()..).unwrap_or_default());
            let value = serde_json::from_slice(&value).map_err(|e| {
                BackendError::with_source("sled", format!("a part of agent `{agent}`'s state"), e)
            })?;
            parts.insert(path.into_owned(), value);
        }
        Ok(parts)
    }

    /// Writes `record`'s delta to its parts; a record without one (its state whole) has none,
    /// so those stored earlier are removed.
    fn apply_parts(&self, record: &AgentRecord) -> Result<(), BackendError> {
        let prefix = Self::parts_prefix(&record.id);
        let replace = record.parts.as_ref().is_none_or(|d| d.replace);
        let had_parts = {
            let mut with_parts = self.with_parts.lock().unwrap_or_else(PoisonError::into_inner);
            if record.parts.is_some() {
                !with_parts.insert(record.id.clone())
            } else {
                with_parts.remove(&record.id)
            }
        };
        if replace && had_parts {
            for key in self.parts.scan_prefix(&prefix).keys() {
                self.parts.remove(key.map_err(sled_error)?).map_err(sled_error)?;
            }
        }
        let Some(delta) = &record.parts else { return Ok(()) };
        for change in &delta.changes {
            let mut key = prefix.clone();
            key.extend_from_slice(change.path.as_bytes());
            match &change.value {
                Some(value) => {
                    let bytes = serde_json::to_vec(value).map_err(|e| {
                        BackendError::with_source("sled", "cannot encode a part of a state", e)
                    })?;
                    self.parts.insert(key, bytes).map_err(sled_error)?;
                }
                None => {
                    self.parts.remove(key).map_err(sled_error)?;
                }
            }
        }
        Ok(())
    }
}

fn sled_error(e: sled::Error) -> BackendError {
    BackendError::with_source("sled", "run database operation failed", e)
}
