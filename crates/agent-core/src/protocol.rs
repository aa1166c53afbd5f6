//! The contents of the messages the layers exchange, one type per message kind that has content.

use agent_state::{AgentId, AgentMetrics, AgentStatus, DecisionId, Subtask, Tally, TaskOutcome};
use serde::{Deserialize, Serialize};

use crate::reasoner::Conflict;

/// `heartbeat_ack`: an agent answered heartbeat `heartbeat`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct HeartbeatAck {
    /// The heartbeat number.
    pub heartbeat: u64,
}

/// `error_report`: an agent exhausted its retries.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ErrorReport {
    /// The last error.
    pub error: String,
    /// The work it abandoned, for the supervisor to reassign.
    #[serde(default)]
    pub work: Option<Subtask>,
    /// Its metrics at the time.
    pub metrics: AgentMetrics,
}

/// `signature_request`: please sign or veto this decision.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct SignatureRequest {
    /// The decision.
    pub decision: DecisionId,
}

/// `conflict_report`: a conflict for the top layer to arbitrate.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ConflictReport {
    /// The conflict.
    pub conflict: Conflict,
}

/// `vote_request`: an arbitrator asks the other powers to vote.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct VoteRequest {
    /// The conflict.
    pub conflict: Conflict,
}

/// `vote_response`: one power's vote.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct VoteResponse {
    /// The conflict.
    pub conflict_id: String,
    /// The option chosen.
    pub choice: String,
    /// The voter's weight.
    pub weight: f64,
}

/// `arbitration_result`: the outcome, sent to every party.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ArbitrationResult {
    /// The conflict.
    pub conflict_id: String,
    /// The winning option.
    pub resolution: String,
    /// The tally behind it.
    pub tally: Tally,
    /// Who arbitrated.
    pub arbitrator: AgentId,
}

/// What a peer asks for in a `peer_help_request`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "help", rename_all = "snake_case")]
pub enum HelpRequest {
    /// Share what is on your board.
    ShareKnowledge,
    /// Take over this subtask if you are idle.
    TakeOverTask {
        /// The subtask (boxed: it is much larger than the other variant).
        subtask: Box<Subtask>,
    },
    /// A supervisor (or a subordinate) speaks to the agent (`speak_to_agent`): it answers
    /// with [`HelpResponse::Said`], and the message joins what its reasoner sees.
    Speak {
        /// What is said.
        message: String,
    },
}

/// `peer_help_response`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "response", rename_all = "snake_case")]
pub enum HelpResponse {
    /// The helper's board content.
    Knowledge {
        /// The content.
        knowledge: String,
    },
    /// Took the task over.
    Accepted,
    /// Refused.
    Refused {
        /// Why, such as `busy`.
        reason: String,
    },
    /// The answer to [`HelpRequest::Speak`].
    Said {
        /// The reply.
        reply: String,
    },
}

/// `status_report`: an answer to a status query, or a task's final outcome sent to `system`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "report", rename_all = "snake_case")]
pub enum StatusReport {
    /// An agent's status.
    Agent {
        /// Its status.
        status: AgentStatus,
        /// What it is working on, if anything.
        current: Option<String>,
    },
    /// A task finished (top layer to `system`).
    TaskClosed {
        /// How it ended.
        outcome: TaskOutcome,
    },
    /// A power signed or vetoed a decision it was asked to sign (to the proposer, in answer
    /// to its `signature_request`): the proposer looks at the decision at once instead of at
    /// its next heartbeat.
    Decided {
        /// The decision.
        decision: agent_state::DecisionId,
        /// Its status after this power's signature or veto.
        status: agent_state::DecisionStatus,
    },
}

/// `issue_escalation`: a lead raises a problem to the top layer.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Escalation {
    /// The task.
    pub task_id: String,
    /// The failure that stops the lead.
    pub failure: agent_state::TaskFailure,
}

/// `warning`: something the recipient should know, such as a subordinate's missed heartbeat.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Warning {
    /// Who it is about.
    pub about: AgentId,
    /// What happened.
    pub reason: String,
}

/// `peer_coordination` and its response: leads tell each other what they are doing.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct PeerCoordination {
    /// The task.
    pub task_id: String,
    /// What the sender is doing.
    pub note: String,
}
