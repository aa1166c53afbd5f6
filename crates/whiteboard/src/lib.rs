//! Whiteboards: the shared, versioned notes of a Strata team, with layer permissions.
//!
//! The package is `strata-whiteboard` (`strata-whiteboard = "0.1"` in `Cargo.toml`); code
//! names it `whiteboard`.
//!
//! Each agent has one board, created under its layer; the team has one global board. The
//! backend, not the agent, enforces the policy of [`agent_state::board_permits`]: an agent writes
//! only its own board; anyone appends to the global board; an agent reads its own board, the
//! boards of its own layer and of the layers below, and the global board; the system reads all.
//! Every write and append bumps the board's version, which reads return.
//!
//! This crate holds the trait, its errors, the [`InMemoryWhiteboard`] backend, and (feature
//! `testing`) the conformance suite every backend must pass; the durable `SledWhiteboard` sits
//! behind feature `sled`, and `NatsWhiteboard`, which the processes of a team on several
//! machines share through NATS JetStream, behind feature `nats`.
//!
//! # Feature flags
//!
//! | feature   | what it adds |
//! |-----------|--------------|
//! | `testing` | module `testing`: the conformance suite, for backend authors |
//! | `sled`    | `SledWhiteboard` and `BOARDS_TREE`: boards in a run's sled database (crate `run-store`); a change is durable (sled flush + `fdatasync`) when the call returns `Ok` |
//! | `nats`    | `NatsWhiteboard`, `BOARDS_BUCKET` and `RECORD_HEADROOM`: boards in a NATS JetStream key-value bucket (crate `nats-store`), one key per board, every change a revision-checked write, so two processes never overwrite each other's writes; a change is acknowledged by JetStream when the call returns `Ok`; a board holds at most the server's `max_payload` less `RECORD_HEADROOM` |
//!
//! ```
//! use agent_state::{Actor, AgentId, AgentLayer, BoardId, Timestamp};
//! use whiteboard::{InMemoryWhiteboard, Whiteboard};
//!
//! # tokio_test_block_on(async {
//! let boards = InMemoryWhiteboard::new();
//! let lead = AgentId::new("mid-1");
//! boards.create(&lead, AgentLayer::Mid).await?;
//! let version = boards.write(&lead, &BoardId::from(&lead), "## Plan".into(), Timestamp(5)).await?;
//! assert_eq!(version, 1);
//!
//! let seen = boards.read(&Actor::System, &BoardId::from(&lead)).await?;
//! assert_eq!((seen.content.as_str(), seen.version), ("## Plan", 1));
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! # }).unwrap();
//! # fn tokio_test_block_on<F: std::future::Future>(f: F) -> F::Output {
//! #     tokio::runtime::Builder::new_current_thread().build().unwrap().block_on(f)
//! # }
//! ```

use agent_state::{
    Actor, AgentId, AgentLayer, BackendError, BoardAccess, BoardId, BoardSnapshot, Timestamp,
};
use async_trait::async_trait;
use thiserror::Error;

mod memory;
#[cfg(feature = "nats")]
mod nats;
mod rules;
#[cfg(feature = "sled")]
mod sled;
#[cfg(any(test, feature = "testing"))]
pub mod testing;

#[cfg(feature = "nats")]
pub use self::nats::{BOARDS_BUCKET, NatsWhiteboard, RECORD_HEADROOM};
#[cfg(feature = "sled")]
pub use self::sled::{BOARDS_TREE, SledWhiteboard};
pub use memory::{InMemoryWhiteboard, MAX_BOARD_BYTES};

/// The whiteboard system. Object-safe: hold it as `Arc<dyn Whiteboard>`.
///
/// Guarantees every backend keeps (the conformance suite checks each):
/// - permissions are checked on every call, from the layer the board was created under;
/// - every successful write or append bumps the version by exactly one;
/// - a refused call changes nothing: content and version stay as they were;
/// - the global board always exists, starts empty at version 0, and is append-only;
/// - a call is refused with the first error that applies, in this order: the acting agent has no
///   board ([`BoardError::UnknownActor`]), the target board does not exist
///   ([`BoardError::UnknownBoard`]), the policy forbids the access
///   ([`BoardError::PermissionDenied`], with the rule of [`denial_rule`]), the content would pass
///   the backend's size limit ([`BoardError::TooLarge`]).
///
/// Durability: if `write` or `append` returns `Ok` on a durable backend, the change survives a
/// crash of the process and a loss of power; so does a board that `create` returned. The
/// in-memory backend keeps nothing across a restart.
#[async_trait]
pub trait Whiteboard: Send + Sync + 'static {
    /// Creates `owner`'s board under `layer`, empty at version 0. Creating it again under the
    /// same layer changes nothing and returns the current board; under another layer it is
    /// [`CreateError::LayerMismatch`]. The owner id is checked first, with
    /// [`agent_state::check_agent_id`]: an id that cannot name an agent is
    /// [`CreateError::InvalidOwner`].
    async fn create(
        &self,
        owner: &AgentId,
        layer: AgentLayer,
    ) -> Result<BoardSnapshot, CreateError>;

    /// Reads a board as `reader`.
    async fn read(&self, reader: &Actor, board: &BoardId) -> Result<BoardSnapshot, BoardError>;

    /// Replaces the content of `writer`'s own board and sets its `updated_at` to `at`. Returns
    /// the new version.
    async fn write(
        &self,
        writer: &AgentId,
        board: &BoardId,
        content: String,
        at: Timestamp,
    ) -> Result<u64, BoardError>;

    /// Adds `content` on a new line at the end of `writer`'s own board or of the global board,
    /// and sets its `updated_at` to `at`: a `'\n'` goes before `content` when the board is not
    /// empty and does not already end with one. Returns the new version.
    async fn append(
        &self,
        writer: &AgentId,
        board: &BoardId,
        content: &str,
        at: Timestamp,
    ) -> Result<u64, BoardError>;

    /// Every board `reader` may read, the global board first, then agent boards by owner id.
    /// An agent without a board is [`BoardError::UnknownActor`].
    async fn list(&self, reader: &Actor) -> Result<Vec<BoardSnapshot>, BoardError>;
}

/// Creating a board failed.
#[derive(Debug, Error)]
pub enum CreateError {
    /// The owner id cannot name an agent.
    #[error("cannot create a board for `{owner}`: {reason}")]
    InvalidOwner {
        /// The id given.
        owner: String,
        /// Why.
        reason: String,
    },
    /// The board exists under another layer.
    #[error("board of `{owner}` exists under layer {existing}, not {requested}")]
    LayerMismatch {
        /// The owner.
        owner: AgentId,
        /// The layer it has.
        existing: AgentLayer,
        /// The layer asked for.
        requested: AgentLayer,
    },
    /// The backend failed.
    #[error(transparent)]
    Backend(#[from] BackendError),
}

/// Reading or writing a board failed; nothing changed.
#[derive(Debug, Error)]
pub enum BoardError {
    /// No such board.
    #[error("no whiteboard `{board}`; create the agent's board first")]
    UnknownBoard {
        /// The board.
        board: BoardId,
    },
    /// The acting agent has no board, so its layer is unknown.
    #[error("agent `{agent}` has no whiteboard, so its layer is unknown; create its board first")]
    UnknownActor {
        /// The agent.
        agent: AgentId,
    },
    /// The policy forbids it.
    #[error("`{actor}` may not {access} whiteboard `{board}`: {rule}")]
    PermissionDenied {
        /// Who tried.
        actor: Actor,
        /// What they tried.
        access: BoardAccess,
        /// Which board.
        board: BoardId,
        /// The rule that refuses it.
        rule: &'static str,
    },
    /// The content would pass the board's size limit.
    #[error("whiteboard `{board}` would hold {size} bytes, more than the limit of {limit}")]
    TooLarge {
        /// The board.
        board: BoardId,
        /// The size it would have.
        size: usize,
        /// The limit.
        limit: usize,
    },
    /// The backend failed.
    #[error(transparent)]
    Backend(#[from] BackendError),
}

/// The rule, in words, that refuses `access` to `board` for an agent; used in
/// [`BoardError::PermissionDenied`] messages.
pub fn denial_rule(actor: &Actor, access: BoardAccess, board: &BoardId) -> &'static str {
    match (actor, access, board) {
        (Actor::System, _, _) => "the system reads boards but never writes them",
        (_, BoardAccess::Write, BoardId::Global) => "the global board is append-only",
        (_, BoardAccess::Write | BoardAccess::Append, _) => "an agent writes only its own board",
        (_, BoardAccess::Read, _) => {
            "an agent reads its own board, its layer's, the layers below, and the global board"
        }
    }
}
