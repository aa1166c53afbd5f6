//! The NATS JetStream whiteboard backend: every board one key of a key-value bucket, every change
//! a revision-checked write.

use std::fmt;

use agent_state::{
    Actor, AgentId, AgentLayer, BackendError, BoardAccess, BoardId, BoardSnapshot, GLOBAL_BOARD,
    Principal, Timestamp, board_permits, check_agent_id, decode, encode,
};
use async_nats::jetstream::kv;
use async_trait::async_trait;
use nats_store::{Found, NatsError, NatsStore, backend_error};

use crate::rules::{bump, check_owner, check_recreate, empty_board, needs_separator, permit};
use crate::{BoardError, CreateError, MAX_BOARD_BYTES, Whiteboard};

/// The part of the namespace the boards bucket is named after: the bucket is
/// `strata_<namespace>_boards` ([`NatsStore::name`]).
pub const BOARDS_BUCKET: &str = "boards";

/// The bytes of one NATS message a board's content may not use: its record's header (the board's
/// id, layer, version and time, at most a few hundred bytes) and the revision check's message
/// header. A board holds at most the server's `max_payload` less this.
pub const RECORD_HEADROOM: usize = 1024;

/// How many times one call re-reads and retries after another writer changed the board between
/// its read and its write. Every lost race is another writer's success; this bounds a call that
/// keeps losing to a flood of writers to the same board, which then fails with a backend error
/// and changes nothing.
const MAX_ATTEMPTS: usize = 1000;

/// A [`Whiteboard`] on a NATS JetStream key-value bucket, shared by every process of a team that
/// opens the same namespace.
///
/// It behaves like [`InMemoryWhiteboard`](crate::InMemoryWhiteboard): the same checks in the
/// same order, the same errors, the same results. What differs:
///
/// - **Layout.** One bucket, `strata_<namespace>_boards` (its stream is
///   `KV_strata_<namespace>_boards`, file storage, history 1). Each board is one key: `global`
///   for the global board, the owner's agent id for an agent board (agent ids are ASCII letters,
///   digits, `-` and `_`, all valid in keys, and `global` is not one; an id that cannot name an
///   agent never has a board and is never looked up). A record is the board's
///   [`agent_state::encode`]d [`BoardSnapshot`] with empty content, a newline, then the content
///   as raw UTF-8: the record is at most [`RECORD_HEADROOM`] bytes larger than the content,
///   whatever the content holds. The global board has no record until its first append; until
///   then it reads as empty at version 0.
/// - **Size limit.** A record is one NATS message, so a board holds at most the server's
///   `max_payload` (1 MiB by default) less [`RECORD_HEADROOM`]: [`open`](Self::open) takes that
///   or [`MAX_BOARD_BYTES`], whichever is smaller.
/// - **Concurrency.** Every change is a revision-checked write: `create` writes only if the key
///   has no value, `write` and `append` only if the board is still at the revision they read. A
///   write that loses the race to another process is not applied; the call reads the board
///   again, checks the rules and the size again on what is now stored, and retries. So two
///   processes never overwrite each other's write or lose each other's append, and every
///   acknowledged change bumps the version by exactly one. Any number of `NatsWhiteboard`
///   values, in any number of processes, may share a namespace.
/// - **Durability.** `create`, `write` and `append` return `Ok` only after JetStream
///   acknowledged the write (or, for `create` of a board that exists, after reading what the
///   server holds), so the change survives a restart of this process and of the server; whether
///   it also survives a loss of power depends on the server's `sync_interval` (see the
///   [`nats_store`] crate's documentation on durability). If a write fails without an answer (a
///   timeout), the call returns a backend error and the change may or may not have been stored.
/// - **Records that cannot be decoded** (written by something else, another schema version, a
///   record whose board does not match its key) are never overwritten. A call that needs such a
///   record fails with [`BoardError::Backend`] (or [`CreateError::Backend`]) naming the bucket
///   and the key; `list` **skips** it with a `tracing` warning naming it.
///
/// ```no_run
/// use agent_state::{Actor, AgentId, AgentLayer, BoardId, Timestamp};
/// use nats_store::NatsStore;
/// use whiteboard::{NatsWhiteboard, Whiteboard};
///
/// # async fn example() -> Result<(), Box<dyn std::error::Error>> {
/// let store = NatsStore::connect("nats://127.0.0.1:4222", "run-1").await?;
/// let boards = NatsWhiteboard::open(&store).await?;
/// let lead = AgentId::new("mid-1");
/// boards.create(&lead, AgentLayer::Mid).await?;
/// // When this returns, JetStream has the new content, written over exactly version 0.
/// boards.write(&lead, &BoardId::from(&lead), "## Plan".into(), Timestamp(5)).await?;
///
/// let seen = boards.read(&Actor::System, &BoardId::from(&lead)).await?;
/// assert_eq!((seen.content.as_str(), seen.version), ("## Plan", 1));
/// # Ok(())
/// # }
/// ```
#[derive(Clone)]
pub struct NatsWhiteboard {
    bucket: kv::Store,
    /// The bucket's name, for errors.
    name: String,
    /// The namespace, for `Debug`.
    namespace: String,
    max_bytes: usize,
}

impl NatsWhiteboard {
    /// The whiteboards of `store`'s namespace; the bucket is created if it does not exist. The
    /// size limit of a board is [`MAX_BOARD_BYTES`] or [`largest_max_bytes`](Self::largest_max_bytes),
    /// whichever is smaller.
    ///
    /// Fails with [`NatsError::SchemaMismatch`] if a bucket of that name was made by another
    /// schema version (it is left as it is), or with a backend error if the server does not
    /// answer.
    pub async fn open(store: &NatsStore) -> Result<Self, NatsError> {
        let max_bytes = MAX_BOARD_BYTES.min(Self::largest_max_bytes(store));
        Self::with_max_bytes(store, max_bytes).await
    }

    /// The whiteboards of `store`'s namespace, whose boards hold at most `max_bytes` bytes each;
    /// a write or append that would pass it is [`BoardError::TooLarge`]. Boards already stored
    /// are not checked against the limit until they change.
    ///
    /// Fails as [`open`](Self::open) does, and with a backend error, creating nothing, if
    /// `max_bytes` is more than [`largest_max_bytes`](Self::largest_max_bytes).
    pub async fn with_max_bytes(store: &NatsStore, max_bytes: usize) -> Result<Self, NatsError> {
        let largest = Self::largest_max_bytes(store);
        if max_bytes > largest {
            return Err(BackendError::new(
                nats_store::BACKEND,
                format!(
                    "a board limit of {max_bytes} bytes does not fit in one message of the NATS server at {}: its max_payload is {} bytes, so a board holds at most {largest}; lower the limit or raise max_payload in the server's configuration",
                    store.url(),
                    store.client().max_payload()
                ),
            )
            .into());
        }
        let config = kv::Config {
            history: 1,
            storage: async_nats::jetstream::stream::StorageType::File,
            ..Default::default()
        };
        let bucket = store.bucket(BOARDS_BUCKET, config).await?;
        Ok(Self {
            bucket,
            name: store.name(BOARDS_BUCKET),
            namespace: store.namespace().to_owned(),
            max_bytes,
        })
    }

    /// The largest board the server `store` is connected to can hold: its `max_payload` less
    /// [`RECORD_HEADROOM`].
    pub fn largest_max_bytes(store: &NatsStore) -> usize {
        store.client().max_payload().saturating_sub(RECORD_HEADROOM)
    }

    /// The size limit of one board, in bytes.
    pub fn max_bytes(&self) -> usize {
        self.max_bytes
    }

    async fn create_now(
        &self,
        owner: &AgentId,
        layer: AgentLayer,
    ) -> Result<BoardSnapshot, CreateError> {
        check_owner(owner)?;
        let key = owner.as_str();
        let board = empty_board(BoardId::from(owner), Some(layer));
        for _ in 0..MAX_ATTEMPTS {
            let revision = match self.entry(key).await? {
                Some(Found::Value(entry)) => {
                    let existing = self.decode(key, &entry.value)?;
                    if let Some(existing_layer) = existing.layer {
                        check_recreate(owner, existing_layer, layer)?;
                    }
                    return Ok(existing);
                }
                Some(Found::Deleted(revision)) => revision,
                None => 0,
            };
            if self.write_at(&board, revision).await? {
                tracing::debug!(%owner, %layer, "whiteboard created");
                return Ok(board);
            }
        }
        Err(self.too_many_races(key).into())
    }

    /// Changes `board` as `writer` with `access`: checks the actor, the board and the policy,
    /// lets `apply` change a copy (it checks the size), bumps the version and writes the copy at
    /// the revision read; on a lost race, again from a new read.
    async fn change(
        &self,
        writer: &AgentId,
        board: &BoardId,
        access: BoardAccess,
        at: Timestamp,
        apply: impl Fn(&mut BoardSnapshot) -> Result<(), BoardError>,
    ) -> Result<u64, BoardError> {
        let actor = Actor::from(writer);
        // An agent's layer never changes once its board exists, so it is read once.
        let principal = self.principal(&actor).await?;
        for _ in 0..MAX_ATTEMPTS {
            let (mut target, revision) = self.board(board).await?;
            permit(&principal, &actor, access, &target)?;
            apply(&mut target)?;
            let version = bump(&mut target, at);
            if self.write_at(&target, revision).await? {
                return Ok(version);
            }
            tracing::debug!(%board, bucket = %self.name, "whiteboard changed by another writer; retrying");
        }
        Err(self.too_many_races(board.as_str()).into())
    }

    async fn list_now(&self, reader: &Actor) -> Result<Vec<BoardSnapshot>, BoardError> {
        let principal = self.principal(reader).await?;
        let mut global = Some(empty_board(BoardId::Global, None));
        let mut agents = Vec::new();
        for key in self.keys().await? {
            if key != GLOBAL_BOARD && check_agent_id(&key).is_err() {
                tracing::warn!(bucket = %self.name, key = %key, "skipping a key that names no board");
                continue;
            }
            let entry = match self.entry(&key).await? {
                Some(Found::Value(entry)) => entry,
                Some(Found::Deleted(_)) | None => continue,
            };
            match (self.decode(&key, &entry.value), key == GLOBAL_BOARD) {
                (Ok(board), true) => global = Some(board),
                (Ok(board), false) => agents.push(board),
                (Err(error), is_global) => {
                    if is_global {
                        global = None;
                    }
                    tracing::warn!(
                        bucket = %self.name,
                        key = %key,
                        %error,
                        "skipping a whiteboard record that cannot be decoded; reading that board reports the error"
                    );
                }
            }
        }
        // The keys come in no particular order; agent ids sort as the other backends list them.
        agents.sort_by(|a, b| a.board.as_str().cmp(b.board.as_str()));
        Ok(global
            .into_iter()
            .chain(agents)
            .filter(|b| board_permits(&principal, BoardAccess::Read, &b.board, b.layer))
            .collect())
    }

    /// Who `actor` is for the policy: an agent's layer is the one its board was created under.
    async fn principal(&self, actor: &Actor) -> Result<Principal, BoardError> {
        match actor {
            Actor::System => Ok(Principal::System),
            Actor::Agent(id) => {
                let unknown = || BoardError::UnknownActor { agent: id.clone() };
                // An id that cannot name an agent never got a board.
                if check_agent_id(id.as_str()).is_err() {
                    return Err(unknown());
                }
                match self.entry(id.as_str()).await? {
                    Some(Found::Value(entry)) => {
                        match self.decode(id.as_str(), &entry.value)?.layer {
                            Some(layer) => Ok(Principal::Agent { id: id.clone(), layer }),
                            None => Err(unknown()),
                        }
                    }
                    Some(Found::Deleted(_)) | None => Err(unknown()),
                }
            }
        }
    }

    /// A board and the revision to write it at; the global board reads as empty (revision 0, or
    /// that of a delete marker) until its first append.
    async fn board(&self, board: &BoardId) -> Result<(BoardSnapshot, u64), BoardError> {
        let unknown = || BoardError::UnknownBoard { board: board.clone() };
        if let BoardId::Agent(owner) = board
            && check_agent_id(owner.as_str()).is_err()
        {
            return Err(unknown());
        }
        let key = board.as_str();
        match (self.entry(key).await?, board) {
            (Some(Found::Value(entry)), _) => Ok((self.decode(key, &entry.value)?, entry.revision)),
            (Some(Found::Deleted(revision)), BoardId::Global) => {
                Ok((empty_board(BoardId::Global, None), revision))
            }
            (None, BoardId::Global) => Ok((empty_board(BoardId::Global, None), 0)),
            (Some(Found::Deleted(_)) | None, BoardId::Agent(_)) => Err(unknown()),
        }
    }

    /// Writes `board` under its key if the key is still at `revision` (0: never written).
    /// `Ok(false)`: another writer got there first, and nothing was written.
    async fn write_at(&self, board: &BoardSnapshot, revision: u64) -> Result<bool, BackendError> {
        let key = board.board.as_str();
        let record = encode_record(board).map_err(|e| {
            backend_error(format!("cannot encode whiteboard `{key}` for bucket `{}`", self.name), e)
        })?;
        match self.bucket.update(key, record.into(), revision).await {
            Ok(_) => Ok(true),
            Err(e) if e.kind() == kv::UpdateErrorKind::WrongLastRevision => Ok(false),
            Err(e) => Err(backend_error(
                format!(
                    "cannot write key `{key}` of bucket `{}` (if the server did not answer, the change may or may not be stored)",
                    self.name
                ),
                e,
            )),
        }
    }

    /// Every key of the bucket (see [`nats_store::keys`]).
    async fn keys(&self) -> Result<Vec<String>, BackendError> {
        nats_store::keys(&self.bucket, &self.name).await
    }

    /// The latest entry of `key`.
    async fn entry(&self, key: &str) -> Result<Option<Found>, BackendError> {
        nats_store::entry(&self.bucket, &self.name, key).await
    }

    /// Decodes the record under `key` and checks that it is the board `key` names: an agent
    /// board with a layer, or the global board without one.
    fn decode(&self, key: &str, record: &[u8]) -> Result<BoardSnapshot, BackendError> {
        let cannot = |why: String| {
            BackendError::new(
                nats_store::BACKEND,
                format!("cannot decode key `{key}` of bucket `{}`: {why}", self.name),
            )
        };
        let board = decode_record(record).map_err(cannot)?;
        if board.board.as_str() != key {
            return Err(cannot(format!("it holds board `{}`", board.board)));
        }
        match (&board.board, board.layer) {
            (BoardId::Global, Some(layer)) => {
                Err(cannot(format!("it holds a global board with layer {layer}")))
            }
            (BoardId::Agent(_), None) => {
                Err(cannot("it holds an agent board without a layer".into()))
            }
            _ => Ok(board),
        }
    }

    fn check_size(&self, board: &BoardId, size: usize) -> Result<(), BoardError> {
        if size > self.max_bytes {
            return Err(BoardError::TooLarge { board: board.clone(), size, limit: self.max_bytes });
        }
        Ok(())
    }

    fn too_many_races(&self, key: &str) -> BackendError {
        nats_store::too_many_races(&self.name, key, MAX_ATTEMPTS)
    }
}

/// A board's record: its snapshot without content, encoded, a newline, then the content.
fn encode_record(board: &BoardSnapshot) -> Result<Vec<u8>, agent_state::EncodeError> {
    let header = BoardSnapshot {
        board: board.board.clone(),
        layer: board.layer,
        content: String::new(),
        version: board.version,
        updated_at: board.updated_at,
    };
    // Compact JSON: a newline inside a string is escaped, so the first newline ends the header.
    let mut record = encode(&header)?;
    record.reserve(1 + board.content.len());
    record.push(b'\n');
    record.extend_from_slice(board.content.as_bytes());
    Ok(record)
}

/// Reads a record [`encode_record`] wrote.
fn decode_record(record: &[u8]) -> Result<BoardSnapshot, String> {
    let split = record
        .iter()
        .position(|&b| b == b'\n')
        .ok_or("no newline after the header of a whiteboard record")?;
    let (header, content) = (&record[..split], &record[split + 1..]);
    let mut board: BoardSnapshot = decode(header).map_err(|e| e.to_string())?;
    if !board.content.is_empty() {
        return Err("the header of a whiteboard record holds content".into());
    }
    board.content = std::str::from_utf8(content)
        .map_err(|e| format!("the content is not UTF-8: {e}"))?
        .to_owned();
    Ok(board)
}

impl fmt::Debug for NatsWhiteboard {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("NatsWhiteboard")
            .field("namespace", &self.namespace)
            .field("bucket", &self.name)
            .field("max_bytes", &self.max_bytes)
            .finish_non_exhaustive()
    }
}

#[async_trait]
impl Whiteboard for NatsWhiteboard {
    async fn create(
        &self,
        owner: &AgentId,
        layer: AgentLayer,
    ) -> Result<BoardSnapshot, CreateError> {
        self.create_now(owner, layer).await
    }

    async fn read(&self, reader: &Actor, board: &BoardId) -> Result<BoardSnapshot, BoardError> {
        let principal = self.principal(reader).await?;
        let (target, _) = self.board(board).await?;
        permit(&principal, reader, BoardAccess::Read, &target)?;
        Ok(target)
    }

    async fn write(
        &self,
        writer: &AgentId,
        board: &BoardId,
        content: String,
        at: Timestamp,
    ) -> Result<u64, BoardError> {
        self.change(writer, board, BoardAccess::Write, at, |target| {
            self.check_size(board, content.len())?;
            target.content.clone_from(&content);
            Ok(())
        })
        .await
    }

    async fn append(
        &self,
        writer: &AgentId,
        board: &BoardId,
        content: &str,
        at: Timestamp,
    ) -> Result<u64, BoardError> {
        self.change(writer, board, BoardAccess::Append, at, |target| {
            let separator = needs_separator(&target.content);
            self.check_size(board, target.content.len() + usize::from(separator) + content.len())?;
            if separator {
                target.content.push('\n');
            }
            target.content.push_str(content);
            Ok(())
        })
        .await
    }

    async fn list(&self, reader: &Actor) -> Result<Vec<BoardSnapshot>, BoardError> {
        self.list_now(reader).await
    }
}
