//! Operator commands to a live agent and what became of them: typed, with message kinds of
//! their own.
//!
//! An [`OperatorCommand`] travels as a [`MessageKind::OperatorCommand`] message from `system`
//! (the operator: `strata rollback`, `strata adopt`, a hot-swap) or the agent's supervisor.
//! The agent answers with a [`MessageKind::CommandOutcome`] message to the sender, in reply to
//! the command (its `correlation_id`), whose content is a [`CommandOutcome`]: refused at once
//! (nothing changed), or carried out once the change is applied. An agent that takes no
//! commands refuses every one.

use serde::{Deserialize, Serialize};

#[cfg(doc)]
use crate::MessageKind;
use crate::evolution::Genome;
use crate::{Address, MessageId};

/// An operator's command to an agent (an OODA agent carries them out; any other refuses).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "command", rename_all = "snake_case")]
pub enum OperatorCommand {
    /// Go back to the configuration and files of `version`, as a new version.
    Rollback {
        /// The version.
        version: u64,
    },
    /// Become `genome` (a hot-swap), as a new version.
    Adopt {
        /// The genome.
        genome: Box<Genome>,
    },
}

impl OperatorCommand {
    /// The command in words, such as `rollback to version 2`.
    pub fn describe(&self) -> String {
        match self {
            OperatorCommand::Rollback { version } => format!("rollback to version {version}"),
            OperatorCommand::Adopt { genome } => {
                format!("hot-swap to genome {}", genome.id.short())
            }
        }
    }
}

/// What became of an [`OperatorCommand`]: the content of a [`MessageKind::CommandOutcome`].
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "outcome", rename_all = "snake_case")]
pub enum CommandOutcome {
    /// Carried out: the agent runs as `version` now.
    Applied {
        /// The version it became.
        version: u64,
        /// For a hot-swap, the genome it was before, if it was one.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        from: Option<String>,
    },
    /// Refused, or dropped before it applied (a human vetoed it): the agent is unchanged.
    Refused {
        /// Why, in words.
        reason: String,
    },
}

/// Where the outcome of a command goes: the command's sender, in reply to the command. Kept
/// with a change until it applies.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct CommandOrigin {
    /// Who sent it.
    pub from: Address,
    /// The command's message.
    pub message: MessageId,
}

impl CommandOrigin {
    /// The origin of the command `message`.
    pub fn of(message: &crate::Message) -> Self {
        Self { from: message.from.clone(), message: message.id }
    }
}
