//! Whiteboard addressing and the permission policy every whiteboard backend enforces.
//!
//! The policy:
//! - an agent writes (replaces) and appends only to its own board;
//! - anyone may append to the global board; nobody replaces it;
//! - an agent reads its own board, the boards of its own layer, the boards of the layers
//!   below it, and the global board;
//! - the system (the runtime, `inspect`) reads every board and writes none.

use std::fmt;

use serde::{Deserialize, Deserializer, Serialize, Serializer};

use crate::{AgentId, AgentLayer, Timestamp, Versioned};

/// The name of the global board on the wire.
pub const GLOBAL_BOARD: &str = "global";

/// Which board.
#[derive(Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum BoardId {
    /// The team's global board: append-only.
    Global,
    /// One agent's board.
    Agent(AgentId),
}

impl BoardId {
    /// The wire form: `global` or the owner's id.
    pub fn as_str(&self) -> &str {
        match self {
            BoardId::Global => GLOBAL_BOARD,
            BoardId::Agent(id) => id.as_str(),
        }
    }
}

impl From<AgentId> for BoardId {
    fn from(id: AgentId) -> Self {
        BoardId::Agent(id)
    }
}

impl From<&AgentId> for BoardId {
    fn from(id: &AgentId) -> Self {
        BoardId::Agent(id.clone())
    }
}

impl fmt::Debug for BoardId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl fmt::Display for BoardId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl Serialize for BoardId {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(self.as_str())
    }
}

impl<'de> Deserialize<'de> for BoardId {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let s = String::deserialize(deserializer)?;
        Ok(if s == GLOBAL_BOARD { BoardId::Global } else { BoardId::Agent(AgentId::new(s)) })
    }
}

/// Who acts on a board.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum Principal {
    /// The runtime itself: reads everything, writes nothing.
    System,
    /// An agent, with the layer its board was created under.
    Agent {
        /// The agent.
        id: AgentId,
        /// Its layer.
        layer: AgentLayer,
    },
}

/// What a principal wants to do.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum BoardAccess {
    /// Read content and version.
    Read,
    /// Replace the content.
    Write,
    /// Add to the end.
    Append,
}

impl fmt::Display for BoardAccess {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            BoardAccess::Read => "read",
            BoardAccess::Write => "write",
            BoardAccess::Append => "append to",
        })
    }
}

/// Whether `principal` may perform `access` on `board`, whose owner (for an agent board) sits
/// in `board_layer`. For the global board `board_layer` is ignored.
pub fn board_permits(
    principal: &Principal,
    access: BoardAccess,
    board: &BoardId,
    board_layer: Option<AgentLayer>,
) -> bool {
    match (principal, board) {
        (Principal::System, _) => access == BoardAccess::Read,
        (Principal::Agent { .. }, BoardId::Global) => {
            matches!(access, BoardAccess::Read | BoardAccess::Append)
        }
        (Principal::Agent { id, layer }, BoardId::Agent(owner)) => match access {
            BoardAccess::Write | BoardAccess::Append => id == owner,
            BoardAccess::Read => {
                id == owner || board_layer.is_some_and(|bl| bl == *layer || layer.is_above(bl))
            }
        },
    }
}

/// A board's content at one version.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct BoardSnapshot {
    /// Which board.
    pub board: BoardId,
    /// The owner's layer; `None` for the global board.
    pub layer: Option<AgentLayer>,
    /// The content.
    pub content: String,
    /// Bumped by every write and append; 0 for a board never written.
    pub version: u64,
    /// When it was last changed, as given by the writer; `None` if never written.
    pub updated_at: Option<Timestamp>,
}

impl Versioned for BoardSnapshot {
    const KIND: &'static str = "board";
    const VERSION: u32 = 1;
}

/// Who calls a whiteboard backend: the runtime itself, or one agent. The backend looks up the
/// agent's layer from the board it created for it and applies [`board_permits`].
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum Actor {
    /// The runtime (inspection, final reports): reads every board, writes none.
    System,
    /// An agent.
    Agent(AgentId),
}

impl From<AgentId> for Actor {
    fn from(id: AgentId) -> Self {
        Actor::Agent(id)
    }
}

impl From<&AgentId> for Actor {
    fn from(id: &AgentId) -> Self {
        Actor::Agent(id.clone())
    }
}

impl fmt::Display for Actor {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Actor::System => f.write_str(crate::SYSTEM),
            Actor::Agent(id) => f.write_str(id.as_str()),
        }
    }
}
