//! The audit log: every status change and every notable act of an agent, in order.

use std::sync::Mutex;

use agent_state::{
    AgentId, AgentStatus, BackendError, DecisionId, Timestamp, TransitionRecord, Versioned,
};
use async_trait::async_trait;
use serde::{Deserialize, Serialize};
use thiserror::Error;

/// What happened.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "event", rename_all = "snake_case")]
pub enum AuditEvent {
    /// A status change, applied through [`agent_state::Lifecycle::apply`].
    Transition {
        /// Before.
        from: AgentStatus,
        /// After.
        to: AgentStatus,
        /// Why.
        reason: String,
    },
    /// An act the backends or the runtime refused (a permission or rule violation).
    Denied {
        /// What was attempted, such as `write board mid-1`.
        action: String,
        /// The refusal.
        error: String,
    },
    /// A tool call and its outcome.
    ToolCall {
        /// The tool.
        tool: String,
        /// Its arguments.
        args: serde_json::Value,
        /// Whether it succeeded.
        success: bool,
        /// Output or error, shortened.
        summary: String,
    },
    /// A failed heartbeat or task, and the retry it leads to.
    Error {
        /// The error.
        error: String,
        /// Retries spent so far, this one included.
        retry: u32,
        /// The agent's limit.
        max_retries: u32,
    },
    /// A governance act.
    Decision {
        /// The decision.
        decision: DecisionId,
        /// `proposed`, `signed`, `approved` or `vetoed`.
        action: String,
        /// Detail, such as a veto reason.
        detail: String,
    },
    /// A heartbeat the agent did not answer within its cycle.
    MissedHeartbeat {
        /// The heartbeat number.
        heartbeat: u64,
    },
}

/// One record of the audit log.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct AuditRecord {
    /// Position in the log, from 0, without gaps.
    pub seq: u64,
    /// When.
    pub at: Timestamp,
    /// Which agent.
    pub agent: AgentId,
    /// What happened.
    pub event: AuditEvent,
}

impl Versioned for AuditRecord {
    const KIND: &'static str = "audit_record";
    const VERSION: u32 = 1;
}

impl AuditRecord {
    /// The transition this record holds, if it is one.
    pub fn transition(&self) -> Option<TransitionRecord> {
        match &self.event {
            AuditEvent::Transition { from, to, reason } => Some(TransitionRecord {
                agent: self.agent.clone(),
                from: *from,
                to: *to,
                reason: reason.clone(),
                at: self.at,
            }),
            _ => None,
        }
    }
}

/// The audit log. Object-safe: hold it as `Arc<dyn AuditLog>`.
///
/// Guarantees: records come back in the order they were appended, numbered from 0 without gaps.
/// Durability: when `append` returns `Ok` on a durable backend, the record survives a crash of
/// the process; the in-memory backend keeps nothing across a restart.
#[async_trait]
pub trait AuditLog: Send + Sync + 'static {
    /// Appends one record and returns its sequence number.
    async fn append(
        &self,
        agent: &AgentId,
        at: Timestamp,
        event: AuditEvent,
    ) -> Result<u64, BackendError>;

    /// Every record, or only `agent`'s, in order.
    async fn records(&self, agent: Option<&AgentId>) -> Result<Vec<AuditRecord>, BackendError>;
}

/// An audit log in memory.
#[derive(Debug, Default)]
pub struct InMemoryAuditLog {
    records: Mutex<Vec<AuditRecord>>,
}

impl InMemoryAuditLog {
    /// An empty log.
    pub fn new() -> Self {
        Self::default()
    }
}

fn poisoned() -> BackendError {
    BackendError::new("memory", "audit log lock poisoned by a panic in another thread")
}

#[async_trait]
impl AuditLog for InMemoryAuditLog {
    async fn append(
        &self,
        agent: &AgentId,
        at: Timestamp,
        event: AuditEvent,
    ) -> Result<u64, BackendError> {
        let mut records = self.records.lock().map_err(|_| poisoned())?;
        let seq = records.len() as u64;
        records.push(AuditRecord { seq, at, agent: agent.clone(), event });
        Ok(seq)
    }

    async fn records(&self, agent: Option<&AgentId>) -> Result<Vec<AuditRecord>, BackendError> {
        let records = self.records.lock().map_err(|_| poisoned())?;
        Ok(records.iter().filter(|r| agent.is_none_or(|a| &r.agent == a)).cloned().collect())
    }
}

/// A break in an agent's chain of transitions.
#[derive(Clone, Debug, PartialEq, Eq, Error)]
pub enum ChainError {
    /// The first transition does not start at `initializing`.
    #[error("agent `{agent}`: first transition (record {seq}) starts at {from}, not initializing")]
    BadStart {
        /// The agent.
        agent: AgentId,
        /// The record.
        seq: u64,
        /// Where it starts.
        from: AgentStatus,
    },
    /// A transition does not start where the previous one ended.
    #[error(
        "agent `{agent}`: record {seq} starts at {from} but the previous transition ended at {previous}"
    )]
    Gap {
        /// The agent.
        agent: AgentId,
        /// The record.
        seq: u64,
        /// Where it starts.
        from: AgentStatus,
        /// Where the previous one ended.
        previous: AgentStatus,
    },
    /// A transition that the table does not allow.
    #[error("agent `{agent}`: record {seq} is the forbidden transition {from} -> {to}")]
    Forbidden {
        /// The agent.
        agent: AgentId,
        /// The record.
        seq: u64,
        /// From.
        from: AgentStatus,
        /// To.
        to: AgentStatus,
    },
}

/// Checks that, per agent, the transitions form a chain of allowed edges starting at
/// `initializing`. Returns each agent's final status, sorted by agent id.
pub fn check_transition_chain(
    records: &[AuditRecord],
) -> Result<Vec<(AgentId, AgentStatus)>, ChainError> {
    let mut last: std::collections::BTreeMap<AgentId, AgentStatus> = Default::default();
    for record in records {
        let AuditEvent::Transition { from, to, .. } = &record.event else { continue };
        let agent = record.agent.clone();
        match last.get(&agent) {
            None if *from != AgentStatus::Initializing => {
                return Err(ChainError::BadStart { agent, seq: record.seq, from: *from });
            }
            Some(previous) if previous != from => {
                return Err(ChainError::Gap {
                    agent,
                    seq: record.seq,
                    from: *from,
                    previous: *previous,
                });
            }
            _ => {}
        }
        if !from.can_transition_to(*to) {
            return Err(ChainError::Forbidden { agent, seq: record.seq, from: *from, to: *to });
        }
        last.insert(agent, *to);
    }
    Ok(last.into_iter().collect())
}
