//! The message envelope, the message kinds the seeds use, and addresses.

use std::fmt;

use serde::{Deserialize, Deserializer, Serialize, Serializer};

use crate::{AgentId, MessageId, Timestamp, Versioned};

/// The address of the runtime itself: heartbeat acks and warnings go here.
pub const SYSTEM: &str = "system";
/// The address that reaches every registered agent.
pub const BROADCAST: &str = "broadcast";

/// Where a message goes, or where it came from.
///
/// On the wire an address is a plain string: `system`, `broadcast`, or an agent id.
#[derive(Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Address {
    /// One agent.
    Agent(AgentId),
    /// The runtime.
    System,
    /// Every registered agent but the sender.
    Broadcast,
}

impl Address {
    /// Parses the wire form.
    pub fn parse(s: &str) -> Self {
        match s {
            SYSTEM => Address::System,
            BROADCAST => Address::Broadcast,
            other => Address::Agent(AgentId::new(other)),
        }
    }

    /// The wire form.
    pub fn as_str(&self) -> &str {
        match self {
            Address::Agent(id) => id.as_str(),
            Address::System => SYSTEM,
            Address::Broadcast => BROADCAST,
        }
    }

    /// The agent id, if this addresses one agent.
    pub fn agent(&self) -> Option<&AgentId> {
        match self {
            Address::Agent(id) => Some(id),
            _ => None,
        }
    }
}

impl From<AgentId> for Address {
    fn from(id: AgentId) -> Self {
        Address::Agent(id)
    }
}

impl From<&AgentId> for Address {
    fn from(id: &AgentId) -> Self {
        Address::Agent(id.clone())
    }
}

impl fmt::Debug for Address {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl fmt::Display for Address {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl Serialize for Address {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(self.as_str())
    }
}

impl<'de> Deserialize<'de> for Address {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let s = String::deserialize(deserializer)?;
        Ok(Address::parse(&s))
    }
}

/// The kinds of message the seeds use.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum MessageKind {
    /// An agent answers a heartbeat (to `system`).
    HeartbeatAck,
    /// An agent exhausted its retries (to its supervisor).
    ErrorReport,
    /// A decision asks to be signed (to a top power).
    SignatureRequest,
    /// Progress on a task (upward).
    ProgressReport,
    /// A conflict for the top layer to arbitrate.
    ConflictReport,
    /// The outcome of an arbitration (to the parties).
    ArbitrationResult,
    /// A task handed down.
    TaskAssign,
    /// A lead coordinates with a peer lead.
    PeerCoordination,
    /// The peer's answer.
    PeerCoordinationResponse,
    /// A problem raised to the layer above.
    IssueEscalation,
    /// An executor asks a peer for help.
    PeerHelpRequest,
    /// The peer's answer.
    PeerHelpResponse,
    /// A supervisor asks for status.
    StatusQuery,
    /// The answer to a status query.
    StatusReport,
    /// A top power asks the others to vote.
    VoteRequest,
    /// A vote.
    VoteResponse,
    /// A warning, such as a missed heartbeat.
    Warning,
    /// An operator's command to an agent ([`OperatorCommand`](crate::OperatorCommand)), from
    /// `system` or the agent's supervisor.
    OperatorCommand,
    /// What became of an operator command ([`CommandOutcome`](crate::CommandOutcome)), to
    /// its sender, in reply to it.
    CommandOutcome,
}

impl MessageKind {
    /// All kinds.
    pub const ALL: [MessageKind; 19] = [
        MessageKind::HeartbeatAck,
        MessageKind::ErrorReport,
        MessageKind::SignatureRequest,
        MessageKind::ProgressReport,
        MessageKind::ConflictReport,
        MessageKind::ArbitrationResult,
        MessageKind::TaskAssign,
        MessageKind::PeerCoordination,
        MessageKind::PeerCoordinationResponse,
        MessageKind::IssueEscalation,
        MessageKind::PeerHelpRequest,
        MessageKind::PeerHelpResponse,
        MessageKind::StatusQuery,
        MessageKind::StatusReport,
        MessageKind::VoteRequest,
        MessageKind::VoteResponse,
        MessageKind::Warning,
        MessageKind::OperatorCommand,
        MessageKind::CommandOutcome,
    ];

    /// The wire name, such as `task_assign`.
    pub const fn as_str(self) -> &'static str {
        match self {
            MessageKind::HeartbeatAck => "heartbeat_ack",
            MessageKind::ErrorReport => "error_report",
            MessageKind::SignatureRequest => "signature_request",
            MessageKind::ProgressReport => "progress_report",
            MessageKind::ConflictReport => "conflict_report",
            MessageKind::ArbitrationResult => "arbitration_result",
            MessageKind::TaskAssign => "task_assign",
            MessageKind::PeerCoordination => "peer_coordination",
            MessageKind::PeerCoordinationResponse => "peer_coordination_response",
            MessageKind::IssueEscalation => "issue_escalation",
            MessageKind::PeerHelpRequest => "peer_help_request",
            MessageKind::PeerHelpResponse => "peer_help_response",
            MessageKind::StatusQuery => "status_query",
            MessageKind::StatusReport => "status_report",
            MessageKind::VoteRequest => "vote_request",
            MessageKind::VoteResponse => "vote_response",
            MessageKind::Warning => "warning",
            MessageKind::OperatorCommand => "operator_command",
            MessageKind::CommandOutcome => "command_outcome",
        }
    }
}

impl fmt::Display for MessageKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// One message on the bus.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Message {
    /// Unique id, supplied by the sender.
    pub id: MessageId,
    /// Sender.
    pub from: Address,
    /// Recipient: an agent, `system`, or `broadcast`.
    pub to: Address,
    /// Kind.
    pub kind: MessageKind,
    /// Payload.
    pub content: serde_json::Value,
    /// When it was sent, as given by the sender.
    pub timestamp: Timestamp,
    /// The message this one answers, if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub correlation_id: Option<MessageId>,
}

impl Versioned for Message {
    const KIND: &'static str = "message";
    const VERSION: u32 = 1;
}

impl Message {
    /// A new message with no correlation id.
    pub fn new(
        id: MessageId,
        from: impl Into<Address>,
        to: impl Into<Address>,
        kind: MessageKind,
        content: serde_json::Value,
        timestamp: Timestamp,
    ) -> Self {
        Self {
            id,
            from: from.into(),
            to: to.into(),
            kind,
            content,
            timestamp,
            correlation_id: None,
        }
    }

    /// Marks this message as the answer to `request`.
    pub fn in_reply_to(mut self, request: MessageId) -> Self {
        self.correlation_id = Some(request);
        self
    }
}
