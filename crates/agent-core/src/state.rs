//! What an agent keeps across a restart: its metrics, retry count, processed message ids and its
//! layer's own state; the results of side-effecting tool calls; and closed tasks' outcomes.
//!
//! A store that [keeps parts](StateStore::keeps_parts) (sled; in memory when asked) is handed
//! a layer's state as what changed since the agent's last save ([`AgentRecord::parts`], see
//! [`parts`](crate::parts)), so a record does not grow with the agent's subordinates, results
//! or tool calls, and what did not change is not written again.

use std::collections::BTreeMap;
use std::sync::Mutex;

use agent_state::{
    AgentId, AgentMetrics, BackendError, DecodeError, MessageId, Stored, TaskOutcome, Versioned,
};
use async_trait::async_trait;
use serde::{Deserialize, Serialize};

use crate::parts::BehaviorDelta;
use crate::tools::ToolOutput;

/// One agent's saved state, written after each heartbeat that changed it and before the
/// heartbeat's messages are acknowledged. Its status lives in the audit log.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct AgentRecord {
    /// The agent.
    pub id: AgentId,
    /// Its metrics.
    pub metrics: AgentMetrics,
    /// Retries spent on the current work.
    pub retries: u32,
    /// The last heartbeat it processed.
    pub heartbeat: u64,
    /// The ids of the messages its last heartbeat processed. The record is stored before those
    /// messages are acknowledged, so these are the only ones a crash can deliver again; earlier
    /// ones were acknowledged and are gone from the bus.
    pub processed: Vec<MessageId>,
    /// The layer's own state ([`AgentBehavior::snapshot`](crate::AgentBehavior::snapshot)).
    /// `null` in a record handed to [`StateStore::save_agent`] with [`parts`](Self::parts);
    /// [`StateStore::agents`] always returns it whole.
    pub behavior: serde_json::Value,
    /// The last audit record this agent had appended when the record was saved: an anchor of
    /// the audit log kept outside it, so that `verify` notices records cut from the log's end
    /// (see [`check_anchors`](crate::check_anchors)). A lower bound: the agent may append more
    /// records before its next save. `None` before its first record, and in records saved
    /// before anchors existed.
    #[serde(default)]
    pub audit_head: Option<crate::audit::AuditAnchor>,
    /// The layer's state as what changed since the agent's last save, for a store that
    /// [keeps parts](StateStore::keeps_parts): the state is the parts the store holds for
    /// this agent with this delta applied. The store keeps the delta in the record and applies
    /// it to the parts after the record is written, so a crash between the two loses nothing.
    /// `None`: the state is [`behavior`](Self::behavior), whole (records of version 1).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub parts: Option<BehaviorDelta>,
}

impl Versioned for AgentRecord {
    const KIND: &'static str = "agent_record";
    /// 2: [`parts`](Self::parts). Version 1 records (no parts) are read by
    /// [`AgentRecord::decode`].
    const VERSION: u32 = 2;
}

impl AgentRecord {
    /// Decodes a stored record of this version or of version 1 (the same fields, without
    /// [`parts`](Self::parts)).
    pub fn decode(bytes: &[u8]) -> Result<Self, DecodeError> {
        match agent_state::decode::<Self>(bytes) {
            Err(DecodeError::IncompatibleVersion { found: 1, .. }) => {
                let stored: Stored<Self> = serde_json::from_slice(bytes).map_err(|source| {
                    DecodeError::Malformed { expected_kind: Self::KIND, source }
                })?;
                Ok(Self { parts: None, ..stored.value })
            }
            other => other,
        }
    }
}

/// An agent's counts as its saved record holds them ([`StateStore::agent_counts`]).
#[derive(Clone, Debug, PartialEq, Deserialize)]
pub struct AgentCounts {
    /// The agent.
    pub id: AgentId,
    /// Its metrics.
    pub metrics: AgentMetrics,
    /// Retries spent on its current work.
    pub retries: u32,
}

impl AgentCounts {
    /// The counts of `record`.
    pub fn of(record: AgentRecord) -> Self {
        Self { id: record.id, metrics: record.metrics, retries: record.retries }
    }
}

/// The heartbeat answers of one agent that its scheduler booked without running a heartbeat
/// (the liveness ledger): the cycles its sweep recorded the agent's answer while it was idle,
/// the cycles it answered busy (a turn still working, showing progress: see
/// [`progress`](crate::progress)), and the cycles it could not answer. The heartbeats the agent
/// ran count in its own [`AgentRecord::metrics`]; the two are disjoint, and an agent's
/// heartbeat counts are their sum ([`LivenessRecord::add_to`]): an idle or a busy answer is an
/// answer. The scheduler saves the records of every agent whose counts changed once per cycle,
/// in one write ([`StateStore::save_liveness`]), and a resumed run counts on from them.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct LivenessRecord {
    /// The agent.
    pub id: AgentId,
    /// Cycles in which it was idle and the scheduler's sweep recorded its answer.
    pub answered: u64,
    /// Cycles in which it answered busy: a turn of it was still working and showed progress
    /// (tokens, a tool running, a wait for a decision). Not in `answered`.
    #[serde(default)]
    pub busy: u64,
    /// Cycles in which it could not answer (held by another task through the cycle, or a turn
    /// of it silent past its silence limit).
    pub missed: u64,
    /// The last heartbeat cycle counted.
    pub cycle: u64,
    /// Its last busy answer: what its turn was doing, its tokens so far and how long it had
    /// run. `None` before its first one (and in records stored before busy answers existed).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_busy: Option<crate::progress::BusyAnswer>,
}

impl Versioned for LivenessRecord {
    const KIND: &'static str = "liveness_record";
    const VERSION: u32 = 1;
}

impl LivenessRecord {
    /// `metrics` (an agent's own, from its record) with these answers (idle and busy) and
    /// misses added.
    pub fn add_to(&self, metrics: &mut AgentMetrics) {
        let answered = self.answered.saturating_add(self.busy);
        metrics.heartbeats_responded = metrics.heartbeats_responded.saturating_add(answered);
        metrics.heartbeats_missed = metrics.heartbeats_missed.saturating_add(self.missed);
    }
}

/// A side-effecting tool call as kept so that a resumed run does not run it twice: started
/// (written before the tool runs), then its result.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ToolRecord {
    /// The journal key: agent, subtask, attempt and call number.
    pub key: String,
    /// What the tool returned; `None` while it runs (or if a crash interrupted it).
    pub output: Option<ToolOutput>,
}

impl Versioned for ToolRecord {
    const KIND: &'static str = "tool_record";
    const VERSION: u32 = 1;
}

/// A closed task, kept so a resumed team still knows how it ended.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct OutcomeRecord {
    /// How it ended.
    pub outcome: TaskOutcome,
}

impl Versioned for OutcomeRecord {
    const KIND: &'static str = "task_outcome";
    const VERSION: u32 = 1;
}

/// Where agents' state, tool results and task outcomes are kept. Object-safe.
///
/// Durability: if a `save_*` or `record_*` call returns `Ok` on a durable backend, the data
/// survives a crash of the process and a loss of power; the in-memory backend keeps nothing
/// across a restart.
#[async_trait]
pub trait StateStore: Send + Sync + 'static {
    /// Saves (replaces) one agent's state. A record with [`parts`](AgentRecord::parts) is
    /// handed only to a store that [keeps parts](Self::keeps_parts).
    async fn save_agent(&self, record: &AgentRecord) -> Result<(), BackendError>;

    /// Whether [`save_agent`](Self::save_agent) takes records whose layer state is a delta
    /// ([`AgentRecord::parts`]) and keeps the parts under the agent's own keys. The default
    /// (`false`): an agent hands its state whole.
    fn keeps_parts(&self) -> bool {
        false
    }

    /// Saves (replaces) several agents' states as one call, each as
    /// [`save_agent`](Self::save_agent) would, in the order given (a later record of the same
    /// agent replaces an earlier one). An empty batch does nothing.
    ///
    /// If this returns `Ok`, every record is saved, and on a durable backend survives a crash
    /// as a saved record does. On `Err`, any of them may be saved, as a failed `save_agent`
    /// may have saved its record: each record stands alone, so saving the batch again is safe.
    ///
    /// The default saves one record at a time, stopping at the first error; the sled store
    /// writes them all and waits for one commit.
    async fn save_agents(&self, records: &[AgentRecord]) -> Result<(), BackendError> {
        for record in records {
            self.save_agent(record).await?;
        }
        Ok(())
    }

    /// Every saved agent, by id, with its layer state whole (`parts` is `None`).
    async fn agents(&self) -> Result<Vec<AgentRecord>, BackendError>;

    /// Every saved agent's counts, by id: its metrics and retries, without its layer state,
    /// which a run's summary of a large team does not need. The default reads
    /// [`agents`](Self::agents); the sled store decodes only these fields of each record.
    async fn agent_counts(&self) -> Result<Vec<AgentCounts>, BackendError> {
        Ok(self.agents().await?.into_iter().map(AgentCounts::of).collect())
    }

    /// Saves (replaces) the liveness records of several agents in one write (one commit on a
    /// durable backend), so a scheduler stores every agent's heartbeat answers of a cycle at
    /// once. The default keeps nothing (a store without a ledger); the in-memory, sled and
    /// NATS stores keep them.
    async fn save_liveness(&self, records: Vec<LivenessRecord>) -> Result<(), BackendError> {
        let _ = records;
        Ok(())
    }

    /// Every saved liveness record, by id.
    async fn liveness(&self) -> Result<Vec<LivenessRecord>, BackendError> {
        Ok(Vec::new())
    }

    /// Records that the side-effecting tool call `key` is about to run (before it runs).
    async fn begin_tool(&self, key: &str) -> Result<(), BackendError>;

    /// Records the result of the side-effecting tool call `key`.
    async fn record_tool(&self, key: &str, output: &ToolOutput) -> Result<(), BackendError>;

    /// Forgets the call `key` (it failed, and may run again on a retry).
    async fn forget_tool(&self, key: &str) -> Result<(), BackendError>;

    /// What is recorded under `key`: nothing, started (`Some(None)`), or its result.
    async fn tool(&self, key: &str) -> Result<Option<Option<ToolOutput>>, BackendError>;

    /// Records how a task ended. The first outcome recorded for a task wins.
    async fn record_outcome(&self, outcome: &TaskOutcome) -> Result<(), BackendError>;

    /// Every recorded outcome, by task id.
    async fn outcomes(&self) -> Result<Vec<TaskOutcome>, BackendError>;

    /// Stores a large content under `hash` (its [`hash_of`](crate::blob::hash_of)), once:
    /// storing the same hash again changes nothing. If this returns `Ok`, the content survives
    /// a crash (for a durable store). See [`blob`](crate::blob).
    async fn put_blob(&self, hash: &str, content: &[u8]) -> Result<(), BackendError>;

    /// The content stored under `hash`, if any.
    async fn blob(&self, hash: &str) -> Result<Option<Vec<u8>>, BackendError>;
}

/// A state store in memory. It keeps each record whole, as saved: cutting a layer's state
/// into parts (see [`crate::parts`]) saves writes to a disk, and in memory it only costs the
/// hashing ([`keeping_parts`](Self::keeping_parts) makes one that keeps parts, as the sled
/// store does).
#[derive(Debug, Default)]
pub struct InMemoryStateStore {
    inner: Mutex<Inner>,
    keep_parts: bool,
}

#[derive(Debug, Default)]
struct Inner {
    agents: BTreeMap<AgentId, AgentRecord>,
    parts: BTreeMap<AgentId, BTreeMap<String, serde_json::Value>>,
    liveness: BTreeMap<AgentId, LivenessRecord>,
    tools: BTreeMap<String, Option<ToolOutput>>,
    outcomes: BTreeMap<String, TaskOutcome>,
    blobs: BTreeMap<String, std::sync::Arc<[u8]>>,
}

impl InMemoryStateStore {
    /// An empty store that keeps records whole.
    pub fn new() -> Self {
        Self::default()
    }

    /// An empty store that keeps a layer's state in parts and is handed only what changed,
    /// as the sled store is.
    pub fn keeping_parts() -> Self {
        Self { keep_parts: true, ..Self::default() }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

impl Inner {
    /// Saves (replaces) `record`, its delta applied to the parts kept (or the parts dropped,
    /// for a record whose state is whole).
    fn save(&mut self, record: &AgentRecord) {
        let mut record = record.clone();
        match record.parts.take() {
            Some(delta) => {
                let parts = self.parts.entry(record.id.clone()).or_default();
                crate::parts::apply(parts, &delta);
            }
            None => {
                self.parts.remove(&record.id);
            }
        }
        self.agents.insert(record.id.clone(), record);
    }
}

#[async_trait]
impl StateStore for InMemoryStateStore {
    async fn save_agent(&self, record: &AgentRecord) -> Result<(), BackendError> {
        self.lock().save(record);
        Ok(())
    }

    async fn save_agents(&self, records: &[AgentRecord]) -> Result<(), BackendError> {
        let mut inner = self.lock();
        for record in records {
            inner.save(record);
        }
        Ok(())
    }

    fn keeps_parts(&self) -> bool {
        self.keep_parts
    }

    async fn agents(&self) -> Result<Vec<AgentRecord>, BackendError> {
        let inner = self.lock();
        let mut records = Vec::with_capacity(inner.agents.len());
        for record in inner.agents.values() {
            let mut record = record.clone();
            if let Some(parts) = inner.parts.get(&record.id) {
                record.behavior = crate::parts::assemble(parts.clone())
                    .map_err(|e| BackendError::with_source("memory", "agent state", e))?;
            }
            records.push(record);
        }
        Ok(records)
    }

    async fn save_liveness(&self, records: Vec<LivenessRecord>) -> Result<(), BackendError> {
        let mut inner = self.lock();
        for record in records {
            inner.liveness.insert(record.id.clone(), record);
        }
        Ok(())
    }

    async fn liveness(&self) -> Result<Vec<LivenessRecord>, BackendError> {
        Ok(self.lock().liveness.values().cloned().collect())
    }

    async fn begin_tool(&self, key: &str) -> Result<(), BackendError> {
        self.lock().tools.insert(key.to_owned(), None);
        Ok(())
    }

    async fn record_tool(&self, key: &str, output: &ToolOutput) -> Result<(), BackendError> {
        self.lock().tools.insert(key.to_owned(), Some(output.clone()));
        Ok(())
    }

    async fn forget_tool(&self, key: &str) -> Result<(), BackendError> {
        self.lock().tools.remove(key);
        Ok(())
    }

    async fn tool(&self, key: &str) -> Result<Option<Option<ToolOutput>>, BackendError> {
        Ok(self.lock().tools.get(key).cloned())
    }

    async fn record_outcome(&self, outcome: &TaskOutcome) -> Result<(), BackendError> {
        self.lock().outcomes.entry(outcome.task_id().to_owned()).or_insert_with(|| outcome.clone());
        Ok(())
    }

    async fn outcomes(&self) -> Result<Vec<TaskOutcome>, BackendError> {
        Ok(self.lock().outcomes.values().cloned().collect())
    }

    async fn put_blob(&self, hash: &str, content: &[u8]) -> Result<(), BackendError> {
        self.lock().blobs.entry(hash.to_owned()).or_insert_with(|| content.into());
        Ok(())
    }

    async fn blob(&self, hash: &str) -> Result<Option<Vec<u8>>, BackendError> {
        Ok(self.lock().blobs.get(hash).map(|b| b.to_vec()))
    }
}
