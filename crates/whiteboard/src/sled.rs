//! The sled whiteboard backend: every board an encoded [`BoardSnapshot`] in one tree of a run's
//! database, each change made durable before the call returns.

use std::fmt;
use std::sync::{Mutex, MutexGuard, PoisonError};

use agent_state::{
    Actor, AgentId, AgentLayer, BackendError, BoardAccess, BoardId, BoardSnapshot, GLOBAL_BOARD,
    Principal, Timestamp, board_permits, decode, encode,
};
use async_trait::async_trait;
use run_store::RunStore;

use crate::rules::{bump, check_owner, check_recreate, empty_board, needs_separator, permit};
use crate::{BoardError, CreateError, MAX_BOARD_BYTES, Whiteboard};

/// The tree of the run database that holds the boards: one record per board, keyed by the
/// board's wire name (`global`, or the owner's agent id), each an [`agent_state::encode`]d
/// [`BoardSnapshot`].
pub const BOARDS_TREE: &str = "boards";

/// A [`Whiteboard`] that keeps its boards in a run's sled database ([`RunStore`]).
///
/// It behaves exactly like [`InMemoryWhiteboard`](crate::InMemoryWhiteboard): the same checks in
/// the same order, the same errors, the same results. What differs:
///
/// - **Durability.** `create`, `write` and `append` store the board and then wait for
///   [`RunStore::commit`] (a sled flush and an `fdatasync`, shared with concurrent writers) before
///   they return `Ok`: the change survives a crash of the process and a loss of power (with
///   [`Durability::Synced`](run_store::Durability::Synced); with `NoSync`, a crash of the process
///   only). If the commit fails, the call returns [`BoardError::Backend`]; the change may then be
///   visible to later reads and may or may not survive a crash.
/// - **Concurrency.** Each call reads, checks and writes under a mutex of this value, never held
///   across an `.await`, so calls through one `SledWhiteboard` never lose each other's changes.
///   Open one `SledWhiteboard` per run store: two values on the same store do not serialize with
///   each other.
/// - **Records that cannot be decoded** (damaged bytes, another kind of record, another schema
///   version, a record whose board does not match its key) are never overwritten and never cause a
///   panic. A call that needs such a record fails with [`BoardError::Backend`] (or
///   [`CreateError::Backend`]) naming the tree and the key: reading, writing or appending to that
///   board, creating it again, and any call by its owner (whose layer is unknown). `list` **skips**
///   such a record with a `tracing` warning naming it, so the rest of the store stays listable.
/// - **The global board** has no record until the first append; until then it reads as empty at
///   version 0.
///
/// ```
/// use agent_state::{Actor, AgentId, AgentLayer, BoardId, Timestamp};
/// use run_store::{Durability, RunStore};
/// use whiteboard::{SledWhiteboard, Whiteboard};
///
/// # tokio_test_block_on(async {
/// let dir = tempfile::tempdir()?;
/// let run = dir.path().join("run-1");
/// let store = RunStore::create(&run, "run-1", Timestamp(0), Durability::Synced)?;
/// let boards = SledWhiteboard::open(&store)?;
/// let lead = AgentId::new("mid-1");
/// boards.create(&lead, AgentLayer::Mid).await?;
/// // When this returns, the new content survives a crash and a loss of power.
/// boards.write(&lead, &BoardId::from(&lead), "## Plan".into(), Timestamp(5)).await?;
///
/// let seen = boards.read(&Actor::System, &BoardId::from(&lead)).await?;
/// assert_eq!((seen.content.as_str(), seen.version), ("## Plan", 1));
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// # }).unwrap();
/// # fn tokio_test_block_on<F: std::future::Future>(f: F) -> F::Output {
/// #     tokio::runtime::Builder::new_current_thread().build().unwrap().block_on(f)
/// # }
/// ```
pub struct SledWhiteboard {
    /// Declared before `store`, so it drops first: the store seals the run when it closes only
    /// if no tree is left.
    boards: ::sled::Tree,
    store: RunStore,
    max_bytes: usize,
    /// Serializes every read-check-write; never held across an `.await`.
    lock: Mutex<()>,
}

impl SledWhiteboard {
    /// The whiteboards of `store`, with the [`MAX_BOARD_BYTES`] limit.
    pub fn open(store: &RunStore) -> Result<Self, BackendError> {
        Self::with_max_bytes(store, MAX_BOARD_BYTES)
    }

    /// The whiteboards of `store`, whose boards hold at most `max_bytes` bytes each; a write or
    /// append that would pass it is [`BoardError::TooLarge`]. Boards already stored are not
    /// checked against the limit until they change.
    pub fn with_max_bytes(store: &RunStore, max_bytes: usize) -> Result<Self, BackendError> {
        let boards = store.tree(BOARDS_TREE)?;
        Ok(Self { boards, store: store.clone(), max_bytes, lock: Mutex::new(()) })
    }

    /// The size limit of one board, in bytes.
    pub fn max_bytes(&self) -> usize {
        self.max_bytes
    }

    fn create_now(&self, owner: &AgentId, layer: AgentLayer) -> Result<BoardSnapshot, CreateError> {
        check_owner(owner)?;
        let _guard = self.lock();
        if let Some(existing) = self.load(owner.as_str())? {
            if let Some(existing_layer) = existing.layer {
                check_recreate(owner, existing_layer, layer)?;
            }
            return Ok(existing);
        }
        let board = empty_board(BoardId::from(owner), Some(layer));
        self.store_board(&board)?;
        tracing::debug!(%owner, %layer, "whiteboard created");
        Ok(board)
    }

    fn read_now(&self, reader: &Actor, board: &BoardId) -> Result<BoardSnapshot, BoardError> {
        let _guard = self.lock();
        let principal = self.principal(reader)?;
        let target = self.board(board)?;
        permit(&principal, reader, BoardAccess::Read, &target)?;
        Ok(target)
    }

    fn write_now(
        &self,
        writer: &AgentId,
        board: &BoardId,
        content: String,
        at: Timestamp,
    ) -> Result<u64, BoardError> {
        let _guard = self.lock();
        let actor = Actor::from(writer);
        let principal = self.principal(&actor)?;
        let mut target = self.board(board)?;
        permit(&principal, &actor, BoardAccess::Write, &target)?;
        self.check_size(board, content.len())?;
        target.content = content;
        let version = bump(&mut target, at);
        self.store_board(&target)?;
        Ok(version)
    }

    fn append_now(
        &self,
        writer: &AgentId,
        board: &BoardId,
        content: &str,
        at: Timestamp,
    ) -> Result<u64, BoardError> {
        let _guard = self.lock();
        let actor = Actor::from(writer);
        let principal = self.principal(&actor)?;
        let mut target = self.board(board)?;
        permit(&principal, &actor, BoardAccess::Append, &target)?;
        let separator = needs_separator(&target.content);
        self.check_size(board, target.content.len() + usize::from(separator) + content.len())?;
        if separator {
            target.content.push('\n');
        }
        target.content.push_str(content);
        let version = bump(&mut target, at);
        self.store_board(&target)?;
        Ok(version)
    }

    fn list_now(&self, reader: &Actor) -> Result<Vec<BoardSnapshot>, BoardError> {
        let _guard = self.lock();
        let principal = self.principal(reader)?;
        let mut boards = Vec::new();
        match self.load(GLOBAL_BOARD) {
            Ok(global) => boards.push(global.unwrap_or_else(|| empty_board(BoardId::Global, None))),
            Err(e) => skip_record(GLOBAL_BOARD, &e),
        }
        // sled iterates keys in byte order, which is the order of agent ids.
        for entry in self.boards.iter() {
            let (key, bytes) = entry.map_err(|e| {
                BackendError::with_source("sled", format!("cannot list tree `{BOARDS_TREE}`"), e)
            })?;
            let Ok(key) = std::str::from_utf8(&key) else {
                tracing::warn!(
                    tree = BOARDS_TREE,
                    key = ?key,
                    "skipping a whiteboard record whose key is not UTF-8"
                );
                continue;
            };
            if key == GLOBAL_BOARD {
                continue;
            }
            match decode_board(key, &bytes) {
                Ok(board) => boards.push(board),
                Err(e) => skip_record(key, &e),
            }
        }
        boards.retain(|b| board_permits(&principal, BoardAccess::Read, &b.board, b.layer));
        Ok(boards)
    }

    /// Who `actor` is for the policy: an agent's layer is the one its board was created under.
    fn principal(&self, actor: &Actor) -> Result<Principal, BoardError> {
        match actor {
            Actor::System => Ok(Principal::System),
            Actor::Agent(id) => match self.load(id.as_str())?.and_then(|b| b.layer) {
                Some(layer) => Ok(Principal::Agent { id: id.clone(), layer }),
                None => Err(BoardError::UnknownActor { agent: id.clone() }),
            },
        }
    }

    /// A board; the global board reads as empty until its first append.
    fn board(&self, board: &BoardId) -> Result<BoardSnapshot, BoardError> {
        match (self.load(board.as_str())?, board) {
            (Some(stored), _) => Ok(stored),
            (None, BoardId::Global) => Ok(empty_board(BoardId::Global, None)),
            (None, BoardId::Agent(_)) => Err(BoardError::UnknownBoard { board: board.clone() }),
        }
    }

    /// The record under `key`, decoded and checked against its key.
    fn load(&self, key: &str) -> Result<Option<BoardSnapshot>, BackendError> {
        let bytes = self.boards.get(key.as_bytes()).map_err(|e| {
            BackendError::with_source(
                "sled",
                format!("cannot read record `{key}` of tree `{BOARDS_TREE}`"),
                e,
            )
        })?;
        bytes.map(|bytes| decode_board(key, &bytes)).transpose()
    }

    /// Writes `board` to the tree (not yet durable: the caller commits after releasing the lock).
    fn store_board(&self, board: &BoardSnapshot) -> Result<(), BackendError> {
        let key = board.board.as_str();
        let bytes = encode(board).map_err(|e| {
            BackendError::with_source("sled", format!("cannot encode whiteboard `{key}`"), e)
        })?;
        self.boards.insert(key.as_bytes(), bytes).map_err(|e| {
            BackendError::with_source(
                "sled",
                format!("cannot write record `{key}` of tree `{BOARDS_TREE}`"),
                e,
            )
        })?;
        Ok(())
    }

    fn check_size(&self, board: &BoardId, size: usize) -> Result<(), BoardError> {
        if size > self.max_bytes {
            return Err(BoardError::TooLarge { board: board.clone(), size, limit: self.max_bytes });
        }
        Ok(())
    }

    /// The lock guards no data (the tree holds it), so a poisoned lock is used as is: every
    /// change is one `insert` made after all checks passed.
    fn lock(&self) -> MutexGuard<'_, ()> {
        self.lock.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

impl fmt::Debug for SledWhiteboard {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SledWhiteboard")
            .field("run", &self.store.dir())
            .field("tree", &BOARDS_TREE)
            .field("max_bytes", &self.max_bytes)
            .finish_non_exhaustive()
    }
}

#[async_trait]
impl Whiteboard for SledWhiteboard {
    async fn create(
        &self,
        owner: &AgentId,
        layer: AgentLayer,
    ) -> Result<BoardSnapshot, CreateError> {
        let board = self.create_now(owner, layer)?;
        // Also when the board existed: it may have been stored by a concurrent call that has not
        // committed yet, and `Ok` promises it is durable.
        self.store.commit().await?;
        Ok(board)
    }

    async fn read(&self, reader: &Actor, board: &BoardId) -> Result<BoardSnapshot, BoardError> {
        self.read_now(reader, board)
    }

    async fn write(
        &self,
        writer: &AgentId,
        board: &BoardId,
        content: String,
        at: Timestamp,
    ) -> Result<u64, BoardError> {
        let version = self.write_now(writer, board, content, at)?;
        self.store.commit().await?;
        Ok(version)
    }

    async fn append(
        &self,
        writer: &AgentId,
        board: &BoardId,
        content: &str,
        at: Timestamp,
    ) -> Result<u64, BoardError> {
        let version = self.append_now(writer, board, content, at)?;
        self.store.commit().await?;
        Ok(version)
    }

    async fn list(&self, reader: &Actor) -> Result<Vec<BoardSnapshot>, BoardError> {
        self.list_now(reader)
    }
}

/// Decodes the record under `key` and checks that it is the board `key` names: an agent board
/// with a layer, or the global board without one.
fn decode_board(key: &str, bytes: &[u8]) -> Result<BoardSnapshot, BackendError> {
    let board: BoardSnapshot = decode(bytes).map_err(|e| {
        BackendError::new(
            "sled",
            format!("cannot decode record `{key}` of tree `{BOARDS_TREE}`: {e}"),
        )
    })?;
    let mismatch = |what: &str| {
        BackendError::new(
            "sled",
            format!("cannot decode record `{key}` of tree `{BOARDS_TREE}`: it holds {what}"),
        )
    };
    if board.board.as_str() != key {
        return Err(mismatch(&format!("board `{}`", board.board)));
    }
    match (&board.board, board.layer) {
        (BoardId::Global, Some(layer)) => {
            Err(mismatch(&format!("a global board with layer {layer}")))
        }
        (BoardId::Agent(_), None) => Err(mismatch("an agent board without a layer")),
        _ => Ok(board),
    }
}

/// Logs a record `list` leaves out because it cannot be decoded.
fn skip_record(key: &str, error: &BackendError) {
    tracing::warn!(
        tree = BOARDS_TREE,
        key,
        %error,
        "skipping a whiteboard record that cannot be decoded; reading that board reports the error"
    );
}
