//! The lifecycle: eight statuses, the transition table (docs/concepts.md#lifecycle), and the
//! apply step.

use std::borrow::Cow;
use std::fmt;

use serde::{Deserialize, Serialize};
use thiserror::Error;

use crate::{AgentId, Timestamp, Versioned};

/// The eight lifecycle statuses of an agent.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum AgentStatus {
    /// Created, not yet registered and ready.
    Initializing,
    /// Ready, nothing to do.
    Idle,
    /// Processing messages or a task.
    Working,
    /// Waiting for a signature or an approval.
    WaitingApproval,
    /// Waiting for a dependency.
    Blocked,
    /// Retries exhausted; a supervisor may reassign or dismiss.
    Failed,
    /// Shutting down.
    ShuttingDown,
    /// Gone. Absorbing: no transition leaves it.
    Terminated,
}

impl AgentStatus {
    /// All eight statuses.
    pub const ALL: [AgentStatus; 8] = [
        AgentStatus::Initializing,
        AgentStatus::Idle,
        AgentStatus::Working,
        AgentStatus::WaitingApproval,
        AgentStatus::Blocked,
        AgentStatus::Failed,
        AgentStatus::ShuttingDown,
        AgentStatus::Terminated,
    ];

    /// The wire name, such as `waiting_approval`.
    pub const fn as_str(self) -> &'static str {
        match self {
            AgentStatus::Initializing => "initializing",
            AgentStatus::Idle => "idle",
            AgentStatus::Working => "working",
            AgentStatus::WaitingApproval => "waiting_approval",
            AgentStatus::Blocked => "blocked",
            AgentStatus::Failed => "failed",
            AgentStatus::ShuttingDown => "shutting_down",
            AgentStatus::Terminated => "terminated",
        }
    }

    /// The statuses reachable from `self` in one step: the transition table,
    /// the only place the table is written down.
    pub const fn successors(self) -> &'static [AgentStatus] {
        use AgentStatus::*;
        match self {
            Initializing => &[Idle, Failed],
            Idle => &[Working, WaitingApproval, ShuttingDown],
            Working => &[Idle, Blocked, Failed, WaitingApproval],
            WaitingApproval => &[Working, Idle, Blocked],
            Blocked => &[Working, Failed],
            Failed => &[Working, Terminated],
            ShuttingDown => &[Terminated],
            Terminated => &[],
        }
    }

    /// Whether `self → to` is an allowed edge.
    pub fn can_transition_to(self, to: AgentStatus) -> bool {
        self.successors().contains(&to)
    }

    /// Whether no transition leaves this status.
    pub fn is_terminal(self) -> bool {
        self.successors().is_empty()
    }
}

impl fmt::Display for AgentStatus {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Whether `from → to` is allowed by the transition table.
pub fn can_transition(from: AgentStatus, to: AgentStatus) -> bool {
    from.can_transition_to(to)
}

/// One applied status change, ready for the audit log.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct TransitionRecord {
    /// The agent that changed status.
    pub agent: AgentId,
    /// Status before.
    pub from: AgentStatus,
    /// Status after.
    pub to: AgentStatus,
    /// Why, in words.
    pub reason: Cow<'static, str>,
    /// When, as given by the caller.
    pub at: Timestamp,
}

impl Versioned for TransitionRecord {
    const KIND: &'static str = "transition_record";
    const VERSION: u32 = 1;
}

/// A refused transition. The status is unchanged.
#[derive(Clone, Debug, PartialEq, Eq, Error)]
#[error("agent {agent}: transition {from} -> {to} is not allowed (allowed from {from}: {allowed})")]
pub struct TransitionError {
    /// The agent.
    pub agent: AgentId,
    /// Its current status.
    pub from: AgentStatus,
    /// The refused target.
    pub to: AgentStatus,
    /// The allowed targets, comma-separated, or `none` for a terminal status.
    pub allowed: String,
}

/// One agent's status with the only way to change it.
///
/// `apply` checks the table; on success it changes the status and returns the record the
/// caller must append to the audit log; on error the status is unchanged.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Lifecycle {
    agent: AgentId,
    status: AgentStatus,
}

impl Lifecycle {
    /// A new agent, in `initializing`.
    pub fn new(agent: AgentId) -> Self {
        Self { agent, status: AgentStatus::Initializing }
    }

    /// Restores a lifecycle at a status read back from storage.
    pub fn restore(agent: AgentId, status: AgentStatus) -> Self {
        Self { agent, status }
    }

    /// The agent.
    pub fn agent(&self) -> &AgentId {
        &self.agent
    }

    /// The current status.
    pub fn status(&self) -> AgentStatus {
        self.status
    }

    /// Moves to `to` if the table allows it.
    #[must_use = "the transition record must be written to the audit log"]
    pub fn apply(
        &mut self,
        to: AgentStatus,
        reason: impl Into<Cow<'static, str>>,
        at: Timestamp,
    ) -> Result<TransitionRecord, TransitionError> {
        let from = self.status;
        if !from.can_transition_to(to) {
            let allowed = from.successors().iter().map(|s| s.as_str()).collect::<Vec<_>>();
            return Err(TransitionError {
                agent: self.agent.clone(),
                from,
                to,
                allowed: if allowed.is_empty() { "none".to_owned() } else { allowed.join(", ") },
            });
        }
        self.status = to;
        Ok(TransitionRecord { agent: self.agent.clone(), from, to, reason: reason.into(), at })
    }
}
