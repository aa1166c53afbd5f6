//! The audit log and the state store on a sled run directory (feature `sled`).

use std::sync::Mutex;

use agent_state::{AgentId, BackendError, TaskOutcome, Timestamp, decode, encode};
use async_trait::async_trait;
use run_store::RunStore;

use crate::audit::{AuditEvent, AuditHash, AuditLog, AuditRecord, GENESIS_HASH};
use crate::state::{AgentRecord, OutcomeRecord, StateStore, ToolRecord};
use crate::tools::ToolOutput;

const AUDIT_TREE: &str = "audit";
const AGENTS_TREE: &str = "agents";
const TOOLS_TREE: &str = "tools";
const OUTCOMES_TREE: &str = "outcomes";

/// The audit log in a run directory: records keyed by sequence number, each chained to the one
/// before by hash. If `append` returns `Ok`, the record survives a crash and a power loss.
pub struct SledAuditLog {
    tree: sled::Tree,
    /// The next sequence number and the last record's hash; appends are serialised under it.
    tail: Mutex<(u64, AuditHash)>,
    // Declared after the tree: the store closes cleanly only once its trees are gone.
    store: RunStore,
}

impl SledAuditLog {
    /// Opens the log of `store`, reading where it ends. A last record that does not decode is
    /// an error naming it (run `verify` to see the whole chain).
    pub fn open(store: &RunStore) -> Result<Self, BackendError> {
        let tree = store.tree(AUDIT_TREE)?;
        let tail = match tree.last().map_err(sled_error)? {
            None => (0, GENESIS_HASH),
            Some((key, value)) => {
                let record: AuditRecord = decode(&value).map_err(|e| {
                    BackendError::with_source(
                        "sled",
                        format!("audit record {} cannot be read", key_seq(&key)),
                        e,
                    )
                })?;
                (record.seq + 1, record.hash)
            }
        };
        Ok(Self { tree, tail: Mutex::new(tail), store: store.clone() })
    }
}

#[async_trait]
impl AuditLog for SledAuditLog {
    async fn append(
        &self,
        agent: &AgentId,
        at: Timestamp,
        event: AuditEvent,
    ) -> Result<u64, BackendError> {
        let seq = {
            let mut tail = self.tail.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
            let record = AuditRecord::new(tail.0, at, agent.clone(), event, tail.1);
            let bytes = encode(&record).map_err(|e| {
                BackendError::with_source("sled", "cannot encode an audit record", e)
            })?;
            self.tree.insert(record.seq.to_be_bytes(), bytes).map_err(sled_error)?;
            *tail = (record.seq + 1, record.hash);
            record.seq
        };
        self.store.commit().await?;
        Ok(seq)
    }

    async fn records(&self, agent: Option<&AgentId>) -> Result<Vec<AuditRecord>, BackendError> {
        let mut records = Vec::new();
        for item in self.tree.iter() {
            let (key, value) = item.map_err(sled_error)?;
            let record: AuditRecord = decode(&value).map_err(|e| {
                BackendError::with_source(
                    "sled",
                    format!("audit record {} cannot be read", key_seq(&key)),
                    e,
                )
            })?;
            if agent.is_none_or(|a| *a == record.agent) {
                records.push(record);
            }
        }
        Ok(records)
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
    // Declared after the trees: the store closes cleanly only once its trees are gone.
    store: RunStore,
}

impl SledStateStore {
    /// Opens the state trees of `store`.
    pub fn open(store: &RunStore) -> Result<Self, BackendError> {
        Ok(Self {
            agents: store.tree(AGENTS_TREE)?,
            tools: store.tree(TOOLS_TREE)?,
            outcomes: store.tree(OUTCOMES_TREE)?,
            store: store.clone(),
        })
    }
}

#[async_trait]
impl StateStore for SledStateStore {
    async fn save_agent(&self, record: &AgentRecord) -> Result<(), BackendError> {
        let bytes = encode(record)
            .map_err(|e| BackendError::with_source("sled", "cannot encode an agent record", e))?;
        self.agents.insert(record.id.as_str().as_bytes(), bytes).map_err(sled_error)?;
        self.store.commit().await
    }

    async fn agents(&self) -> Result<Vec<AgentRecord>, BackendError> {
        let mut records = Vec::new();
        for item in self.agents.iter() {
            let (key, value) = item.map_err(sled_error)?;
            records.push(decode(&value).map_err(|e| {
                BackendError::with_source(
                    "sled",
                    format!("state of agent `{}` cannot be read", String::from_utf8_lossy(&key)),
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
}

fn key_seq(key: &[u8]) -> String {
    <[u8; 8]>::try_from(key)
        .map_or_else(|_| format!("{key:?}"), |b| u64::from_be_bytes(b).to_string())
}

fn sled_error(e: sled::Error) -> BackendError {
    BackendError::with_source("sled", "run database operation failed", e)
}
