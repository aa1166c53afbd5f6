//! Errors of the agent runtime.

use agent_state::{BackendError, ErrorClass, MessageKind, TransitionError};
use thiserror::Error;

use crate::reasoner::ReasonError;
use crate::tools::ToolError;

/// Something an agent's heartbeat, task or lifecycle step could not do.
#[derive(Debug, Error)]
pub enum AgentError {
    /// A refused status change (a bug in a layer, never a silent status write).
    #[error(transparent)]
    Transition(#[from] TransitionError),
    /// Sending a message failed.
    #[error(transparent)]
    Send(#[from] message_bus::SendError),
    /// Reading or acknowledging the inbox failed.
    #[error(transparent)]
    Inbox(#[from] message_bus::InboxError),
    /// Registering on the bus failed.
    #[error(transparent)]
    Register(#[from] message_bus::RegisterError),
    /// A whiteboard call was refused or failed.
    #[error(transparent)]
    Board(#[from] whiteboard::BoardError),
    /// Creating the agent's whiteboard failed.
    #[error(transparent)]
    BoardCreate(#[from] whiteboard::CreateError),
    /// Submitting a decision failed.
    #[error(transparent)]
    Submit(#[from] governance::SubmitError),
    /// Signing or vetoing failed.
    #[error(transparent)]
    Decide(#[from] governance::DecideError),
    /// A tool call failed.
    #[error(transparent)]
    Tool(#[from] ToolError),
    /// A tool ran and reported failure.
    #[error("tool `{tool}` failed: {output}")]
    ToolFailed {
        /// The tool.
        tool: String,
        /// Its output.
        output: String,
    },
    /// The reasoner could not decide.
    #[error(transparent)]
    Reason(#[from] ReasonError),
    /// A backend (audit log, store) failed.
    #[error(transparent)]
    Backend(#[from] BackendError),
    /// A heartbeat turn ran past the agent's timeout (its `timeout_ms`, by default the team's
    /// `[timeouts] turn_ms`). Transient: the turn is retried up to `max_retries`.
    #[error(
        "heartbeat turn timed out after {after_ms} ms (the agent's `timeout_ms`, or the team's \
         `[timeouts] turn_ms`)"
    )]
    Timeout {
        /// The timeout.
        after_ms: u64,
    },
    /// A message's content does not match its kind.
    #[error("message {id} of kind {kind} has content that cannot be read: {error}")]
    BadPayload {
        /// The message.
        id: agent_state::MessageId,
        /// Its kind.
        kind: MessageKind,
        /// What is wrong.
        error: String,
    },
    /// A content value could not be encoded.
    #[error("cannot encode {kind} content: {error}")]
    Encode {
        /// The kind.
        kind: MessageKind,
        /// What is wrong.
        error: String,
    },
    /// A content stored once could not be stored or read back.
    #[error(transparent)]
    Blob(#[from] crate::blob::BlobError),
    /// The agent was asked to do something its configuration forbids.
    #[error("{0}")]
    NotAllowed(String),
    /// The agent gives up work it cannot finish: it failed it past its retries (or lacks its
    /// tool) and no peer of the same lead took it over. Permanent: the agent fails and its
    /// supervisor gets the work back.
    #[error("{error}; no peer took it over ({peers})")]
    GaveUp {
        /// The failure.
        error: String,
        /// The peers asked and their answers, in words.
        peers: String,
    },
    /// The agent tried an act that needs a capability it is not configured with.
    #[error("agent {agent} may not {action}: it lacks the `{capability}` capability")]
    MissingCapability {
        /// The agent.
        agent: agent_state::AgentId,
        /// What it tried.
        action: agent_state::Action,
        /// The capability that act needs ([`agent_state::Action::required_capability`]).
        capability: agent_state::Capability,
    },
}

impl AgentError {
    /// Whether retrying may help. Refusals (permissions, rules, bad content, bad arguments) are
    /// permanent and fail the agent at once; everything else is retried up to `max_retries`.
    pub fn class(&self) -> ErrorClass {
        use whiteboard::BoardError;
        match self {
            AgentError::Transition(_)
            | AgentError::BadPayload { .. }
            | AgentError::Encode { .. }
            | AgentError::NotAllowed(_)
            | AgentError::GaveUp { .. }
            | AgentError::MissingCapability { .. }
            | AgentError::Board(BoardError::PermissionDenied { .. })
            | AgentError::Decide(governance::DecideError::Rule(_)) => ErrorClass::Permanent,
            AgentError::Tool(e) => e.class(),
            AgentError::Blob(crate::blob::BlobError::Missing { .. })
            | AgentError::Blob(crate::blob::BlobError::Damaged { .. }) => ErrorClass::Permanent,
            _ => ErrorClass::Transient,
        }
    }
}
