//! The audit log and the state store on NATS JetStream (feature `nats`), shared by every
//! process and machine of a team that connects to the same server and namespace.
//!
//! **Layout.** Every name lives under the run's namespace (see [`nats_store`]):
//!
//! - the audit log is the stream `strata_<ns>_audit`, one subject per agent,
//!   `strata.<ns>.audit.<agent>`. Record `n` is the stream's message `n + 1`: each append is a
//!   publish carrying `Nats-Expected-Last-Sequence: n`, so the server takes record `n` from one
//!   writer only; a writer that lost the race reads the new tail and builds its record again
//!   on it. The chain stays linear however many processes append. (It is optimistic: a
//!   writer appending in a tight loop wins nearly every race against one whose tail is stale,
//!   which retries up to 1000 times before giving up with an error.) The stream refuses deleting
//!   and purging messages; [`AuditLog::head_of`] is the last message on the agent's subject,
//!   read from the server (so it includes what other processes appended).
//! - the state store is four key-value buckets (history 1): `strata_<ns>_agents` (by agent
//!   id), `strata_<ns>_tools` (the tool journal, by journal key; `forget_tool` leaves a delete
//!   marker), `strata_<ns>_outcomes` (by task id, written create-only: the first outcome wins
//!   across processes) and `strata_<ns>_blobs`. A blob is cut into parts that fit in one
//!   message (`<blob>.<put id>.<n>`) and becomes visible only when its manifest (`<blob>`,
//!   create-only) is written after every part: a blob larger than the server's maximum message
//!   (1 MB by default) is stored like any other, and a put that fails half-way leaves no blob
//!   (its parts are deleted, if the server still answers).
//!
//! Names of agents, journal keys and task ids may hold any text; a subject token or key holds
//! `_` followed by the text with every byte outside `[A-Za-z0-9_-]` written `=XX` (reversible),
//! or, when that is longer than 200 bytes, `=` followed by the SHA-256 of the text (every
//! value carries the whole text; the tool journal checks it on reading).
//!
//! **Anchors.** [`AuditLog::head_of`] keeps the meaning it has on sled (the last record the
//! agent appended), across processes. What the sled backend keeps in a closed run's seal, the
//! log's exact final record, is [`NatsAuditLog::last_anchor`] here; nothing on the server seals
//! a run yet.
//!
//! **Limits.** An audit record, an agent's state or a tool record must fit in one message of
//! the server (`max_payload`, 1 MB by default): a larger one is refused with an error naming
//! it and its size, and nothing is written. Listing (records, agents, outcomes) reads through
//! a short-lived consumer that the server deletes after a minute if the reader dies.
//!
//! **Durability.** Every write returns once the server acknowledged it, that is once it is in
//! the server's file store: `begin_tool` and `record_tool` are on the server before they
//! return, as the sled store's are on disk, and survive a crash of this process or of the
//! server process. The server syncs its files to the device periodically, not on every write,
//! so an acknowledged write can be lost on a power loss of the server's machine: short of what
//! the [`AuditLog`] and [`StateStore`] docs promise of a durable backend. nats-server 2.10 and
//! later close that gap with `sync_interval: always`; Debian 12's nats-server 2.9 does not
//! have it (see the crate documentation of [`nats_store`]). A restart is a new connection
//! ([`nats_store::NatsStore::reconnect`]): what was acknowledged is on the server; nothing is
//! kept in the process but the tail of the log, which the server checks on every append.

use std::time::Duration;

use agent_state::{AgentId, BackendError, TaskOutcome, Timestamp, Versioned, decode, encode};
use async_nats::jetstream::consumer::{AckPolicy, DeliverPolicy, pull};
use async_nats::jetstream::context::PublishErrorKind;
use async_nats::jetstream::kv;
use async_nats::jetstream::stream::{self, LastRawMessageErrorKind};
use async_trait::async_trait;
use futures_util::StreamExt as _;
use nats_store::{NatsStore, backend_error};
use serde::{Deserialize, Serialize};

use crate::audit::{AuditAnchor, AuditEvent, AuditHash, AuditLog, AuditRecord, GENESIS_HASH};
use crate::state::{AgentRecord, LivenessRecord, OutcomeRecord, StateStore, ToolRecord};
use crate::tools::ToolOutput;

/// The stream part of the audit log, and the bucket parts of the state store.
const AUDIT: &str = "audit";
const AGENTS: &str = "agents";
const TOOLS: &str = "tools";
const OUTCOMES: &str = "outcomes";
const BLOBS: &str = "blobs";
const LIVENESS: &str = "liveness";

/// How many times an append reads the tail again after another writer took its place.
const MAX_APPEND_ATTEMPTS: u32 = 1000;
/// How many times an append sends its record again after the acknowledgement was lost (a
/// timeout or a broken connection: a server restarting) and the log shows it was not stored.
const LOST_ACK_RETRIES: u32 = 3;
/// How long an append waits before it sends a record whose acknowledgement was lost again.
const LOST_ACK_PAUSE: Duration = Duration::from_millis(200);
/// Messages fetched per request when reading a stream.
const BATCH: usize = 256;
/// Room left in a message for its subject and headers.
const MESSAGE_OVERHEAD: usize = 4096;
/// Encoded names longer than this are replaced by their hash.
const MAX_NAME: usize = 200;
/// How long the server keeps a reading consumer whose reader went away.
const READER_TIMEOUT: Duration = Duration::from_secs(60);

/// The subject token or key of `text` (see the module doc).
fn token(text: &str) -> String {
    let mut out = String::with_capacity(text.len() + 1);
    out.push('_');
    for byte in text.bytes() {
        if byte.is_ascii_alphanumeric() || byte == b'_' || byte == b'-' {
            out.push(char::from(byte));
        } else {
            out.push_str(&format!("={byte:02X}"));
        }
    }
    if out.len() <= MAX_NAME {
        return out;
    }
    format!("={}", agent_state::sha256_hex(text.as_bytes()))
}

/// An error of this backend that no NATS error caused.
fn broken(what: String) -> BackendError {
    BackendError::new(nats_store::BACKEND, what)
}

/// The largest value one message of the server holds, with room for its subject and headers.
fn max_value(store: &NatsStore) -> usize {
    store.client().server_info().max_payload.saturating_sub(MESSAGE_OVERHEAD).max(1024)
}

/// Refuses a value of `len` bytes that does not fit in one message.
fn fits(what: impl FnOnce() -> String, len: usize, max: usize) -> Result<(), BackendError> {
    if len <= max {
        return Ok(());
    }
    Err(broken(format!(
        "{} is {len} bytes, more than the {max} bytes one message of the NATS server holds \
         (its max_payload): not written",
        what()
    )))
}

/// Every message of `stream` on `filter` from `deliver` on, in stream order, with its stream
/// sequence number, read through a short-lived consumer. A reader that stalls (the server said
/// messages were pending and sent none, or a batch's end never came) is given up and the read
/// made again with a new one, a few times.
async fn read_stream(
    stream: &stream::Stream,
    filter: String,
    deliver: DeliverPolicy,
    what: &str,
) -> Result<Vec<(u64, async_nats::Message)>, BackendError> {
    let mut attempt = 0;
    loop {
        attempt += 1;
        match read_once(stream, filter.clone(), deliver, what).await {
            Ok(messages) => return Ok(messages),
            Err(Read::Stalled(pending)) if attempt < READ_ATTEMPTS => {
                tracing::debug!(what, pending, attempt, "a reader stalled; reading again");
            }
            Err(Read::Stalled(pending)) => {
                return Err(broken(format!(
                    "reading {what}: the server announced {pending} more messages but sent none, {READ_ATTEMPTS} times"
                )));
            }
            Err(Read::Failed(e)) => return Err(e),
        }
    }
}

/// How a read through one consumer ended, when it did not return the messages.
enum Read {
    /// Messages were pending and none came: this many.
    Stalled(u64),
    /// A request failed.
    Failed(BackendError),
}

/// How many times a stalled read is made again with a new consumer.
const READ_ATTEMPTS: usize = 3;

/// How long one message of a fetched batch (or the batch's end) may take to arrive.
const BATCH_WAIT: Duration = Duration::from_secs(2);

/// [`read_stream`] through one consumer.
async fn read_once(
    stream: &stream::Stream,
    filter: String,
    deliver: DeliverPolicy,
    what: &str,
) -> Result<Vec<(u64, async_nats::Message)>, Read> {
    let config = pull::Config {
        deliver_policy: deliver,
        ack_policy: AckPolicy::None,
        filter_subject: filter,
        inactive_threshold: READER_TIMEOUT,
        memory_storage: true,
        ..Default::default()
    };
    let consumer = stream
        .create_consumer(config)
        .await
        .map_err(|e| Read::Failed(backend_error(format!("opening a reader of {what}"), e)))?;
    let name = consumer.cached_info().name.clone();
    let mut pending = consumer.cached_info().num_pending;
    let mut out = Vec::new();
    let mut idle = 0;
    let result = loop {
        if pending == 0 {
            break Ok(());
        }
        let mut batch = match consumer.fetch().max_messages(BATCH).messages().await {
            Ok(batch) => batch,
            Err(e) => break Err(Read::Failed(backend_error(format!("reading {what}"), e))),
        };
        let before = out.len();
        let mut failed = None;
        // A batch whose end never comes (its status lost on the way) is not waited for
        // forever: what arrived is kept, and the next fetch goes on from there.
        while let Ok(Some(message)) = tokio::time::timeout(BATCH_WAIT, batch.next()).await {
            let message = match message {
                Ok(message) => message,
                Err(e) => {
                    failed = Some(broken(format!("reading {what}: {e}")));
                    break;
                }
            };
            let info = match message.info() {
                Ok(info) => info,
                Err(e) => {
                    failed = Some(broken(format!(
                        "reading {what}: a message without stream information: {e}"
                    )));
                    break;
                }
            };
            pending = info.pending;
            let seq = info.stream_sequence;
            out.push((seq, message.message));
        }
        if let Some(e) = failed {
            break Err(Read::Failed(e));
        }
        if out.len() == before {
            // The server said messages were pending, then sent none: ask again a few times.
            idle += 1;
            if idle > 5 {
                break Err(Read::Stalled(pending));
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    };
    if let Err(err) = stream.delete_consumer(&name).await {
        // The server deletes it on its own once it is idle.
        tracing::debug!(consumer = %name, error = %err, "could not delete a reader");
    }
    result.map(|()| out)
}

/// The audit log on a JetStream stream (see the [module](self) doc).
pub struct NatsAuditLog {
    stream: stream::Stream,
    store: NatsStore,
    /// `strata.<ns>.audit`.
    subject: String,
    max_value: usize,
    /// The next sequence number and the last record's hash as this handle last saw them
    /// (`None`: read them from the server). Appends of this handle are serialised under it;
    /// the server checks the guess on every append.
    tail: tokio::sync::Mutex<Option<(u64, AuditHash)>>,
}

impl NatsAuditLog {
    /// Opens (or creates) the audit log of `store`'s namespace.
    pub async fn open(store: &NatsStore) -> Result<Self, BackendError> {
        let subject = store.subject(AUDIT);
        let config = stream::Config {
            subjects: vec![format!("{subject}.>")],
            allow_direct: true,
            deny_delete: true,
            deny_purge: true,
            storage: stream::StorageType::File,
            ..Default::default()
        };
        let stream = store.stream(AUDIT, config).await?;
        Ok(Self {
            stream,
            store: store.clone(),
            subject,
            max_value: max_value(store),
            tail: tokio::sync::Mutex::new(None),
        })
    }

    /// The log's last record, as the server has it: what a run's seal anchors.
    pub async fn last_anchor(&self) -> Result<Option<AuditAnchor>, BackendError> {
        let (next, hash) = self.read_tail().await?;
        Ok(next.checked_sub(1).map(|seq| AuditAnchor { seq, hash }))
    }

    /// The agent's subject.
    fn agent_subject(&self, agent: &AgentId) -> String {
        format!("{}.{}", self.subject, token(agent.as_str()))
    }

    /// The next sequence number and the last record's hash, from the server.
    async fn read_tail(&self) -> Result<(u64, AuditHash), BackendError> {
        let info = self.stream.get_info().await.map_err(|e| {
            backend_error(format!("reading the audit stream `{}`", self.store.name(AUDIT)), e)
        })?;
        let last = info.state.last_sequence;
        if last == 0 {
            return Ok((0, GENESIS_HASH));
        }
        let message = self
            .stream
            .get_raw_message(last)
            .await
            .map_err(|e| backend_error(format!("reading audit message {last}"), e))?;
        let record = decode_record(last, &message.payload)?;
        Ok((last, record.hash))
    }

    /// Decodes messages read from the stream.
    fn records_of(
        messages: Vec<(u64, async_nats::Message)>,
    ) -> Result<Vec<AuditRecord>, BackendError> {
        messages.into_iter().map(|(seq, message)| decode_record(seq, &message.payload)).collect()
    }
}

/// Record `seq - 1`, stored as stream message `seq`.
fn decode_record(seq: u64, payload: &[u8]) -> Result<AuditRecord, BackendError> {
    let record: AuditRecord = decode(payload).map_err(|e| {
        BackendError::with_source(
            nats_store::BACKEND,
            format!("audit record {} cannot be read", seq.saturating_sub(1)),
            e,
        )
    })?;
    if record.seq + 1 != seq {
        return Err(broken(format!(
            "audit message {seq} holds record {}, not record {}: the stream was altered",
            record.seq,
            seq.saturating_sub(1)
        )));
    }
    Ok(record)
}

impl NatsAuditLog {
    /// Publishes `record` on `subject`, expected right after stream sequence `record.seq`
    /// (the server refuses it anywhere else); the outer error is a record that cannot be
    /// encoded or is too large, the inner one the server's answer.
    async fn publish(
        &self,
        subject: &str,
        record: &AuditRecord,
    ) -> Result<
        Result<
            async_nats::jetstream::publish::PublishAck,
            async_nats::jetstream::context::PublishError,
        >,
        BackendError,
    > {
        let bytes = record.encoded().map_err(|e| {
            BackendError::with_source(nats_store::BACKEND, "cannot encode an audit record", e)
        })?;
        let agent = &record.agent;
        fits(|| format!("the audit record of `{agent}`"), bytes.len(), self.max_value)?;
        let mut headers = async_nats::HeaderMap::new();
        headers.insert(async_nats::header::NATS_EXPECTED_LAST_SEQUENCE, record.seq.to_string());
        let jetstream = self.store.jetstream();
        Ok(match jetstream.publish_with_headers(subject.to_owned(), headers, bytes.into()).await {
            Ok(ack) => ack.await,
            Err(err) => Err(err),
        })
    }
}

#[async_trait]
impl AuditLog for NatsAuditLog {
    async fn append(
        &self,
        agent: &AgentId,
        at: Timestamp,
        event: AuditEvent,
    ) -> Result<u64, BackendError> {
        Ok(self.append_record(agent, at, event).await?.seq)
    }

    async fn append_record(
        &self,
        agent: &AgentId,
        at: Timestamp,
        event: AuditEvent,
    ) -> Result<AuditRecord, BackendError> {
        let subject = self.agent_subject(agent);
        let mut tail = self.tail.lock().await;
        // Acknowledgements lost so far: sending the record again is safe, as the expected last
        // sequence refuses a second copy (then the log's tail tells whether it was ours).
        let mut lost = 0;
        for _ in 0..MAX_APPEND_ATTEMPTS {
            let (seq, prev) = match *tail {
                Some(known) => known,
                None => self.read_tail().await?,
            };
            let record = AuditRecord::new(seq, at, agent.clone(), event.clone(), prev);
            match self.publish(&subject, &record).await? {
                Ok(ack) if ack.sequence == seq + 1 => {
                    *tail = Some((seq + 1, record.hash));
                    return Ok(record);
                }
                Ok(ack) => {
                    *tail = None;
                    return Err(broken(format!(
                        "audit record {seq} was stored as message {}, not {}: the stream was altered",
                        ack.sequence,
                        seq + 1
                    )));
                }
                Err(err) if err.kind() == PublishErrorKind::WrongLastSequence => {
                    *tail = None;
                    // After a lost acknowledgement the record in place may be this one.
                    if lost > 0
                        && let Ok((next, hash)) = self.read_tail().await
                        && next == seq + 1
                        && hash == record.hash
                    {
                        *tail = Some((next, hash));
                        return Ok(record);
                    }
                    // Another writer appended record `seq` first: build on the new tail.
                }
                Err(err) => {
                    *tail = None;
                    // The server may have stored the record before the acknowledgement was
                    // lost: if the log now ends with exactly this record, it was appended. If it
                    // ends where it did, or cannot be read (the server is not back yet), the
                    // record goes again, still expected at `seq`, so it cannot land twice.
                    let lost_ack = matches!(
                        err.kind(),
                        PublishErrorKind::TimedOut | PublishErrorKind::BrokenPipe
                    );
                    let read = self.read_tail().await;
                    if let Ok((next, hash)) = read
                        && next == seq + 1
                        && hash == record.hash
                    {
                        *tail = Some((next, hash));
                        return Ok(record);
                    }
                    let unchanged = read.as_ref().map_or(true, |&(next, _)| next == seq);
                    if unchanged && lost_ack && lost < LOST_ACK_RETRIES {
                        lost += 1;
                        tracing::debug!(seq, attempt = lost, error = %err, "audit record not acknowledged, sending it again");
                        *tail = Some((seq, prev));
                        tokio::time::sleep(LOST_ACK_PAUSE).await;
                        continue;
                    }
                    return Err(backend_error(format!("appending audit record {seq}"), err));
                }
            }
        }
        Err(broken(format!(
            "appending to the audit log: other writers took the next place {MAX_APPEND_ATTEMPTS} times in a row"
        )))
    }

    async fn records(&self, agent: Option<&AgentId>) -> Result<Vec<AuditRecord>, BackendError> {
        let filter = match agent {
            Some(agent) => self.agent_subject(agent),
            None => format!("{}.>", self.subject),
        };
        let messages =
            read_stream(&self.stream, filter, DeliverPolicy::All, "the audit log").await?;
        Self::records_of(messages)
    }

    async fn records_from(&self, from: u64) -> Result<Vec<AuditRecord>, BackendError> {
        let Some(start_sequence) = from.checked_add(1) else { return Ok(Vec::new()) };
        let messages = read_stream(
            &self.stream,
            format!("{}.>", self.subject),
            DeliverPolicy::ByStartSequence { start_sequence },
            "the audit log",
        )
        .await?;
        Self::records_of(messages)
    }

    async fn head_of(&self, agent: &AgentId) -> Result<Option<AuditAnchor>, BackendError> {
        match self.stream.get_last_raw_message_by_subject(&self.agent_subject(agent)).await {
            Ok(message) => {
                let record = decode_record(message.sequence, &message.payload)?;
                Ok(Some(AuditAnchor::of(&record)))
            }
            Err(err) if err.kind() == LastRawMessageErrorKind::NoMessageFound => Ok(None),
            Err(err) => {
                Err(backend_error(format!("reading the last audit record of `{agent}`"), err))
            }
        }
    }
}

/// A blob's manifest: where its parts are.
#[derive(Debug, Serialize, Deserialize)]
struct BlobManifest {
    /// The content's length.
    bytes: u64,
    /// How many parts.
    parts: u64,
    /// The put that wrote the parts: they are `<blob>.<put>.<n>`.
    put: String,
}

impl Versioned for BlobManifest {
    const KIND: &'static str = "blob_manifest";
    const VERSION: u32 = 1;
}

/// Agents' state, the tool journal, task outcomes and blobs in key-value buckets (see the
/// [module](self) doc).
pub struct NatsStateStore {
    agents: Bucket,
    tools: Bucket,
    outcomes: Bucket,
    blobs: Bucket,
    liveness: Bucket,
    max_value: usize,
}

/// A bucket and its stream, for listing it.
struct Bucket {
    kv: kv::Store,
    stream: stream::Stream,
    /// `$KV.<bucket>.>`.
    keys: String,
    name: String,
}

impl Bucket {
    async fn open(store: &NatsStore, part: &str) -> Result<Self, BackendError> {
        let config =
            kv::Config { history: 1, storage: stream::StorageType::File, ..Default::default() };
        let kv = store.bucket(part, config).await?;
        let name = store.name(part);
        let stream = store
            .jetstream()
            .get_stream(format!("KV_{name}"))
            .await
            .map_err(|e| backend_error(format!("opening the bucket `{name}`"), e))?;
        Ok(Self { kv, stream, keys: format!("$KV.{name}.>"), name })
    }

    async fn get(
        &self,
        key: &str,
        what: impl FnOnce() -> String,
    ) -> Result<Option<Vec<u8>>, BackendError> {
        match self.kv.get(key).await {
            Ok(value) => Ok(value.map(|v| v.to_vec())),
            Err(err) => Err(backend_error(format!("reading {} from `{}`", what(), self.name), err)),
        }
    }

    async fn put(
        &self,
        key: &str,
        value: Vec<u8>,
        what: impl FnOnce() -> String,
    ) -> Result<(), BackendError> {
        match self.kv.put(key, value.into()).await {
            Ok(_) => Ok(()),
            Err(err) => Err(backend_error(format!("writing {} to `{}`", what(), self.name), err)),
        }
    }

    /// Writes `key` unless it exists; `Ok(false)` if it did.
    async fn create(
        &self,
        key: &str,
        value: Vec<u8>,
        what: impl FnOnce() -> String,
    ) -> Result<bool, BackendError> {
        match self.kv.create(key, value.into()).await {
            Ok(_) => Ok(true),
            Err(err) if err.kind() == kv::CreateErrorKind::AlreadyExists => Ok(false),
            Err(err) => Err(backend_error(format!("writing {} to `{}`", what(), self.name), err)),
        }
    }

    async fn delete(&self, key: &str, what: impl FnOnce() -> String) -> Result<(), BackendError> {
        self.kv
            .delete(key)
            .await
            .map_err(|e| backend_error(format!("deleting {} from `{}`", what(), self.name), e))
    }

    /// Every live value, in the order they were written.
    async fn values(&self) -> Result<Vec<Vec<u8>>, BackendError> {
        let what = format!("the bucket `{}`", self.name);
        let messages =
            read_stream(&self.stream, self.keys.clone(), DeliverPolicy::LastPerSubject, &what)
                .await?;
        Ok(messages
            .into_iter()
            .filter(|(_, message)| {
                let op = message.headers.as_ref().and_then(|h| h.get("KV-Operation"));
                !op.is_some_and(|op| op.as_str() == "DEL" || op.as_str() == "PURGE")
            })
            .map(|(_, message)| message.payload.to_vec())
            .collect())
    }
}

impl NatsStateStore {
    /// Opens (or creates) the state buckets of `store`'s namespace.
    pub async fn open(store: &NatsStore) -> Result<Self, BackendError> {
        Ok(Self {
            agents: Bucket::open(store, AGENTS).await?,
            tools: Bucket::open(store, TOOLS).await?,
            outcomes: Bucket::open(store, OUTCOMES).await?,
            blobs: Bucket::open(store, BLOBS).await?,
            liveness: Bucket::open(store, LIVENESS).await?,
            max_value: max_value(store),
        })
    }

    async fn put_tool(&self, key: &str, output: Option<ToolOutput>) -> Result<(), BackendError> {
        let record = ToolRecord { key: key.to_owned(), output };
        let bytes = encode(&record).map_err(|e| {
            BackendError::with_source(nats_store::BACKEND, "cannot encode a tool record", e)
        })?;
        fits(|| format!("the tool record `{key}`"), bytes.len(), self.max_value)?;
        self.tools.put(&token(key), bytes, || format!("the tool record `{key}`")).await
    }

    /// Deletes the parts `0..parts` of a put that did not become a blob.
    async fn drop_parts(&self, prefix: &str, parts: u64) {
        for n in 0..parts {
            if let Err(err) = self.blobs.kv.purge(format!("{prefix}.{n}")).await {
                tracing::debug!(part = %format!("{prefix}.{n}"), error = %err, "could not delete an unused blob part");
            }
        }
    }
}

#[async_trait]
impl StateStore for NatsStateStore {
    async fn save_liveness(&self, records: Vec<LivenessRecord>) -> Result<(), BackendError> {
        for record in &records {
            let id = &record.id;
            let bytes = encode(record).map_err(|e| {
                BackendError::with_source(nats_store::BACKEND, "cannot encode a liveness record", e)
            })?;
            self.liveness
                .put(&token(id.as_str()), bytes, || format!("the heartbeat answers of `{id}`"))
                .await?;
        }
        Ok(())
    }

    async fn liveness(&self) -> Result<Vec<LivenessRecord>, BackendError> {
        let mut records = Vec::new();
        for value in self.liveness.values().await? {
            let record: LivenessRecord = decode(&value).map_err(|e| {
                BackendError::with_source(
                    nats_store::BACKEND,
                    "the heartbeat answers of an agent cannot be read",
                    e,
                )
            })?;
            records.push(record);
        }
        records.sort_by(|a, b| a.id.cmp(&b.id));
        Ok(records)
    }

    async fn save_agent(&self, record: &AgentRecord) -> Result<(), BackendError> {
        let id = &record.id;
        let bytes = encode(record).map_err(|e| {
            BackendError::with_source(nats_store::BACKEND, "cannot encode an agent record", e)
        })?;
        fits(|| format!("the state of agent `{id}`"), bytes.len(), self.max_value)?;
        self.agents.put(&token(id.as_str()), bytes, || format!("the state of agent `{id}`")).await
    }

    async fn agents(&self) -> Result<Vec<AgentRecord>, BackendError> {
        let mut records = Vec::new();
        for value in self.agents.values().await? {
            let record = AgentRecord::decode(&value).map_err(|e| {
                BackendError::with_source(
                    nats_store::BACKEND,
                    "the state of an agent cannot be read",
                    e,
                )
            })?;
            records.push(record);
        }
        records.sort_by(|a, b| a.id.cmp(&b.id));
        Ok(records)
    }

    async fn begin_tool(&self, key: &str) -> Result<(), BackendError> {
        self.put_tool(key, None).await
    }

    async fn record_tool(&self, key: &str, output: &ToolOutput) -> Result<(), BackendError> {
        self.put_tool(key, Some(output.clone())).await
    }

    async fn forget_tool(&self, key: &str) -> Result<(), BackendError> {
        self.tools.delete(&token(key), || format!("the tool record `{key}`")).await
    }

    async fn tool(&self, key: &str) -> Result<Option<Option<ToolOutput>>, BackendError> {
        let what = || format!("the tool record `{key}`");
        let Some(value) = self.tools.get(&token(key), what).await? else { return Ok(None) };
        let record: ToolRecord = decode(&value).map_err(|e| {
            BackendError::with_source(
                nats_store::BACKEND,
                format!("tool record `{key}` cannot be read"),
                e,
            )
        })?;
        if record.key != key {
            return Err(broken(format!(
                "tool record `{key}` holds the record of `{}` (two keys with one hash)",
                record.key
            )));
        }
        Ok(Some(record.output))
    }

    async fn record_outcome(&self, outcome: &TaskOutcome) -> Result<(), BackendError> {
        let task = outcome.task_id();
        let record = OutcomeRecord { outcome: outcome.clone() };
        let bytes = encode(&record).map_err(|e| {
            BackendError::with_source(nats_store::BACKEND, "cannot encode an outcome", e)
        })?;
        fits(|| format!("the outcome of task `{task}`"), bytes.len(), self.max_value)?;
        // The first outcome recorded for a task wins: a later one finds the key taken.
        self.outcomes
            .create(&token(task), bytes, || format!("the outcome of task `{task}`"))
            .await?;
        Ok(())
    }

    async fn outcomes(&self) -> Result<Vec<TaskOutcome>, BackendError> {
        let mut outcomes = Vec::new();
        for value in self.outcomes.values().await? {
            let record: OutcomeRecord = decode(&value).map_err(|e| {
                BackendError::with_source(
                    nats_store::BACKEND,
                    "the outcome of a task cannot be read",
                    e,
                )
            })?;
            outcomes.push(record.outcome);
        }
        outcomes.sort_by(|a, b| a.task_id().cmp(b.task_id()));
        Ok(outcomes)
    }

    async fn put_blob(&self, hash: &str, content: &[u8]) -> Result<(), BackendError> {
        let key = token(hash);
        let what = || format!("blob `{hash}`");
        if self.blobs.get(&key, what).await?.is_some() {
            return Ok(());
        }
        let put = uuid::Uuid::new_v4().simple().to_string();
        let prefix = format!("{key}.{put}");
        let mut parts = 0u64;
        for chunk in content.chunks(self.max_value) {
            let part = format!("{prefix}.{parts}");
            if let Err(err) = self
                .blobs
                .put(&part, chunk.to_vec(), || format!("part {parts} of blob `{hash}`"))
                .await
            {
                self.drop_parts(&prefix, parts).await;
                return Err(err);
            }
            parts += 1;
        }
        let manifest = BlobManifest { bytes: content.len() as u64, parts, put };
        let bytes = encode(&manifest).map_err(|e| {
            BackendError::with_source(nats_store::BACKEND, "cannot encode a blob manifest", e)
        })?;
        match self.blobs.create(&key, bytes, what).await {
            Ok(true) => Ok(()),
            // Another writer stored the same blob first: its parts are the blob.
            Ok(false) => {
                self.drop_parts(&prefix, parts).await;
                Ok(())
            }
            Err(err) => {
                self.drop_parts(&prefix, parts).await;
                Err(err)
            }
        }
    }

    async fn blob(&self, hash: &str) -> Result<Option<Vec<u8>>, BackendError> {
        let key = token(hash);
        let Some(value) = self.blobs.get(&key, || format!("blob `{hash}`")).await? else {
            return Ok(None);
        };
        let manifest: BlobManifest = decode(&value).map_err(|e| {
            BackendError::with_source(
                nats_store::BACKEND,
                format!("blob `{hash}` cannot be read"),
                e,
            )
        })?;
        let mut content = Vec::with_capacity(usize::try_from(manifest.bytes).unwrap_or(0));
        for n in 0..manifest.parts {
            let part = format!("{key}.{}.{n}", manifest.put);
            let Some(chunk) =
                self.blobs.get(&part, || format!("part {n} of blob `{hash}`")).await?
            else {
                return Err(broken(format!(
                    "part {n} of blob `{hash}` is missing from `{}`",
                    self.blobs.name
                )));
            };
            content.extend_from_slice(&chunk);
        }
        if content.len() as u64 != manifest.bytes {
            return Err(broken(format!(
                "blob `{hash}` has {} bytes in its parts, not the {} its manifest says",
                content.len(),
                manifest.bytes
            )));
        }
        Ok(Some(content))
    }
}
