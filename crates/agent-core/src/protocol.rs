//! The contents of the messages the layers exchange, one type per message kind that has content.

use agent_state::{
    AgentId, AgentMetrics, AgentStatus, BallotChoice, DecisionId, Subtask, Tally, TaskOutcome,
};
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

/// `conflict_report`: a conflict for the top layer to arbitrate. The reporter must be one of
/// the conflict's parties.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ConflictReport {
    /// The conflict.
    pub conflict: Conflict,
    /// What it is about, so that the parties know how to act on the ruling; `None` for a
    /// conflict the runtime does not act on by itself.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub subject: Option<ConflictSubject>,
}

/// What a conflict is about: the situations the runtime raises a conflict for (see
/// [`ArbitrationSettings`](agent_state::ArbitrationSettings)) and the ballot of each
/// ([`agent_state::BallotChoice`]).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "about", rename_all = "snake_case")]
pub enum ConflictSubject {
    /// A lead cannot finish a step: every able executor failed it. Ballot: `abandon` (the
    /// proposing power fails the task with `failure`) or `retry` (the lead places the step
    /// again, once).
    Escalation {
        /// The task.
        task_id: String,
        /// The step.
        step: String,
        /// The lead.
        lead: AgentId,
        /// Why the lead cannot finish it.
        failure: agent_state::TaskFailure,
    },
    /// A lead finds an executor's result falls short of the step's acceptance check while
    /// the executor reports it done. Ballot: `redo` (the lead has another executor do the
    /// step) or `accept` (the result stands).
    Acceptance {
        /// The task.
        task_id: String,
        /// The step.
        step: String,
        /// The lead.
        lead: AgentId,
        /// The executor whose result is disputed.
        executor: AgentId,
        /// The lead's objection, in words.
        objection: String,
    },
    /// A power vetoed a plan its proposer stands by, and the team arbitrates vetoed plans.
    /// Ballot: `proceed` (the plan runs) or `abandon` (the veto stands).
    VetoedPlan {
        /// The task.
        task_id: String,
        /// The plan's decision.
        decision: DecisionId,
        /// Who vetoed.
        by: AgentId,
        /// The veto's reason.
        reason: String,
    },
}

impl ConflictSubject {
    /// The task the conflict is about.
    pub fn task_id(&self) -> &str {
        match self {
            ConflictSubject::Escalation { task_id, .. }
            | ConflictSubject::Acceptance { task_id, .. }
            | ConflictSubject::VetoedPlan { task_id, .. } => task_id,
        }
    }
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
    pub choice: BallotChoice,
    /// The voter's weight.
    pub weight: f64,
}

/// `arbitration_result`: the outcome, sent to every party.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ArbitrationResult {
    /// The conflict.
    pub conflict_id: String,
    /// The winning option.
    pub resolution: BallotChoice,
    /// The tally behind it.
    pub tally: Tally,
    /// Who arbitrated.
    pub arbitrator: AgentId,
    /// What the conflict was about (from its report), for the parties to act on.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub subject: Option<ConflictSubject>,
}

/// What a peer asks for in a `peer_help_request`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "help", rename_all = "snake_case")]
pub enum HelpRequest {
    /// Share what is on your board.
    ShareKnowledge,
    /// Take over this subtask if you are idle (and hold its tool): sent by an executor that
    /// cannot finish it to a peer of the same lead.
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

/// What a failed agent answers at once to every request it cannot serve (`speak_to_agent`,
/// peer help, a status query) until its supervisor gives it new work: the requester learns
/// it now instead of waiting for an answer that cannot come.
pub fn failed_refusal(agent: &AgentId) -> String {
    format!("agent {agent} has failed and cannot process messages")
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
    /// An executor took over a subtask from a peer of the same lead (which could not finish
    /// it and asked with [`HelpRequest::TakeOverTask`]): sent by the one that took it to their
    /// lead, which makes it the step's assignee.
    HandedOver {
        /// The task.
        task_id: String,
        /// The step.
        step_id: String,
        /// The executor that gave it up.
        from: AgentId,
        /// The executor that has it now (the sender).
        to: AgentId,
    },
    /// The agent cannot answer the query: it has failed ([`failed_refusal`]).
    Refused {
        /// Why.
        reason: String,
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
