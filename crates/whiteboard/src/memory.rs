//! The in-memory whiteboard backend: every board in one map behind a mutex; nothing survives
//! the process.

use std::borrow::Cow;
use std::collections::BTreeMap;
use std::sync::{Mutex, MutexGuard, PoisonError};

use agent_state::{
    Actor, AgentId, AgentLayer, BoardAccess, BoardId, BoardSnapshot, Principal, Timestamp,
    board_permits,
};
use async_trait::async_trait;

use crate::rules::{bump, check_owner, check_recreate, empty_board, needs_separator, permit};
use crate::{BoardError, CreateError, Whiteboard};

/// The default size limit of one board, in bytes of UTF-8 content: 1 MiB.
pub const MAX_BOARD_BYTES: usize = 1 << 20;

/// A [`Whiteboard`] that keeps every board in memory.
///
/// Calls never wait on each other for longer than a map update, and never fail with
/// [`BoardError::Backend`]. Nothing is kept across a restart of the process.
#[derive(Debug)]
pub struct InMemoryWhiteboard {
    max_bytes: usize,
    boards: Mutex<Boards>,
}

impl InMemoryWhiteboard {
    /// An empty store (only the global board) with the [`MAX_BOARD_BYTES`] limit.
    pub fn new() -> Self {
        Self::with_max_bytes(MAX_BOARD_BYTES)
    }

    /// An empty store whose boards hold at most `max_bytes` bytes each; a write or append
    /// that would pass it is [`BoardError::TooLarge`].
    pub fn with_max_bytes(max_bytes: usize) -> Self {
        Self { max_bytes, boards: Mutex::new(Boards::new()) }
    }

    /// The size limit of one board, in bytes.
    pub fn max_bytes(&self) -> usize {
        self.max_bytes
    }

    fn check_size(&self, board: &BoardId, size: usize) -> Result<(), BoardError> {
        if size > self.max_bytes {
            return Err(BoardError::TooLarge { board: board.clone(), size, limit: self.max_bytes });
        }
        Ok(())
    }

    /// Locks the map. Every update below is a single assignment made after all checks pass, so
    /// a panic elsewhere while the lock was held cannot leave a board half-changed: the data
    /// behind a poisoned lock is still consistent and is used as is.
    fn lock(&self) -> MutexGuard<'_, Boards> {
        self.boards.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

impl Default for InMemoryWhiteboard {
    fn default() -> Self {
        Self::new()
    }
}

#[async_trait]
impl Whiteboard for InMemoryWhiteboard {
    async fn create(
        &self,
        owner: &AgentId,
        layer: AgentLayer,
    ) -> Result<BoardSnapshot, CreateError> {
        check_owner(owner)?;
        let mut boards = self.lock();
        // One search of the map for both the look-up and the insertion.
        match boards.agents.entry(owner.clone()) {
            std::collections::btree_map::Entry::Occupied(existing) => {
                check_recreate(owner, existing.get().layer(), layer)?;
                return Ok(existing.get().snapshot(owner).into_owned());
            }
            std::collections::btree_map::Entry::Vacant(entry) => {
                entry.insert(Stored::Empty(layer));
            }
        }
        tracing::debug!(%owner, %layer, "whiteboard created");
        Ok(empty_board(BoardId::from(owner), Some(layer)))
    }

    async fn read(&self, reader: &Actor, board: &BoardId) -> Result<BoardSnapshot, BoardError> {
        let boards = self.lock();
        let principal = boards.principal(reader)?;
        let target = boards.get(board)?;
        permit(&principal, reader, BoardAccess::Read, &target)?;
        Ok(target.into_owned())
    }

    async fn write(
        &self,
        writer: &AgentId,
        board: &BoardId,
        content: String,
        at: Timestamp,
    ) -> Result<u64, BoardError> {
        let mut boards = self.lock();
        let actor = Actor::from(writer);
        let principal = boards.principal(&actor)?;
        let target = boards.get(board)?;
        permit(&principal, &actor, BoardAccess::Write, &target)?;
        self.check_size(board, content.len())?;
        let target = boards.get_mut(board)?;
        target.content = content;
        Ok(bump(target, at))
    }

    async fn append(
        &self,
        writer: &AgentId,
        board: &BoardId,
        content: &str,
        at: Timestamp,
    ) -> Result<u64, BoardError> {
        let mut boards = self.lock();
        let actor = Actor::from(writer);
        let principal = boards.principal(&actor)?;
        let target = boards.get(board)?;
        permit(&principal, &actor, BoardAccess::Append, &target)?;
        let separator = needs_separator(&target.content);
        self.check_size(board, target.content.len() + usize::from(separator) + content.len())?;
        let target = boards.get_mut(board)?;
        if separator {
            target.content.push('\n');
        }
        target.content.push_str(content);
        Ok(bump(target, at))
    }

    async fn list(&self, reader: &Actor) -> Result<Vec<BoardSnapshot>, BoardError> {
        let boards = self.lock();
        let principal = boards.principal(reader)?;
        // `agents` is a BTreeMap keyed by owner id, so the agent boards come out sorted.
        Ok(std::iter::once(Cow::Borrowed(&boards.global))
            .chain(boards.agents.iter().map(|(owner, stored)| stored.snapshot(owner)))
            .filter(|b| board_permits(&principal, BoardAccess::Read, &b.board, b.layer))
            .map(Cow::into_owned)
            .collect())
    }
}

/// Every board: the global one and one per agent, by owner id.
#[derive(Debug)]
struct Boards {
    global: BoardSnapshot,
    agents: BTreeMap<AgentId, Stored>,
}

/// An agent's board as kept: a board never written is only its layer (a few bytes per idle
/// agent); the first write gives it its content.
#[derive(Debug)]
enum Stored {
    Empty(AgentLayer),
    Written(AgentLayer, Box<BoardSnapshot>),
}

impl Stored {
    /// The owner's layer.
    fn layer(&self) -> AgentLayer {
        match self {
            Self::Empty(layer) | Self::Written(layer, _) => *layer,
        }
    }

    /// The board `owner` has.
    fn snapshot(&self, owner: &AgentId) -> Cow<'_, BoardSnapshot> {
        match self {
            Self::Empty(layer) => Cow::Owned(empty_board(BoardId::from(owner), Some(*layer))),
            Self::Written(_, board) => Cow::Borrowed(board),
        }
    }
}

impl Boards {
    fn new() -> Self {
        Self { global: empty_board(BoardId::Global, None), agents: BTreeMap::new() }
    }

    /// Who `actor` is for the policy: an agent's layer is the one its board was created under.
    fn principal(&self, actor: &Actor) -> Result<Principal, BoardError> {
        match actor {
            Actor::System => Ok(Principal::System),
            Actor::Agent(id) => match self.agents.get(id) {
                Some(stored) => Ok(Principal::Agent { id: id.clone(), layer: stored.layer() }),
                None => Err(BoardError::UnknownActor { agent: id.clone() }),
            },
        }
    }

    fn get(&self, board: &BoardId) -> Result<Cow<'_, BoardSnapshot>, BoardError> {
        match board {
            BoardId::Global => Ok(Cow::Borrowed(&self.global)),
            BoardId::Agent(owner) => self
                .agents
                .get(owner)
                .map(|stored| stored.snapshot(owner))
                .ok_or_else(|| BoardError::UnknownBoard { board: board.clone() }),
        }
    }

    /// The board to change; a board never written gets its content now.
    fn get_mut(&mut self, board: &BoardId) -> Result<&mut BoardSnapshot, BoardError> {
        match board {
            BoardId::Global => Ok(&mut self.global),
            BoardId::Agent(owner) => {
                let stored = self
                    .agents
                    .get_mut(owner)
                    .ok_or_else(|| BoardError::UnknownBoard { board: board.clone() })?;
                if let Stored::Empty(layer) = *stored {
                    let content = Box::new(empty_board(board.clone(), Some(layer)));
                    *stored = Stored::Written(layer, content);
                }
                match stored {
                    Stored::Written(_, snapshot) => Ok(snapshot),
                    // Given its content just above.
                    Stored::Empty(_) => Err(BoardError::UnknownBoard { board: board.clone() }),
                }
            }
        }
    }
}

#[cfg(test)]
mod tests;
