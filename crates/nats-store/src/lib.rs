//! Strata on NATS JetStream: one checked connection that hands out the streams and key-value
//! buckets the distributed backends are built on.
//!
//! The package is `strata-nats-store` (`strata-nats-store = "0.1"` in `Cargo.toml`); code
//! names it `nats_store`.
//!
//! This crate is to the NATS backends what `run-store` is to the sled ones: it does not know
//! what is stored. [`NatsStore::connect`] connects to a server, checks that it answers and has
//! JetStream, and fixes a **namespace** (a run, or a test) that every stream, bucket and subject
//! of the backends is named under, so several runs share one server without meeting:
//!
//! - a stream or bucket for `part` is named `strata_<namespace>_<part>`
//!   ([`NatsStore::name`]); a namespace follows the run id rule ([`agent_state::RunId`]): it
//!   holds no `_`, so no two namespaces share a name, and no `.`, which splits a subject;
//! - its subjects begin with `strata.<namespace>.<part>` ([`NatsStore::subject`]).
//!
//! Every stream and bucket made through [`NatsStore::stream`] and [`NatsStore::bucket`] carries
//! the schema version in its description (`strata schema 1: <part>`); opening one that another
//! schema version made is refused with [`NatsError::SchemaMismatch`], changing nothing.
//!
//! **Durability.** A JetStream write is acknowledged once the server has written it to its
//! file store; the server syncs those files to the device periodically, not on every write
//! (every 2 minutes by default in nats-server 2.10 and later). So an acknowledged write
//! survives a crash of the server process, but can be lost on a power loss of the server's
//! machine. nats-server 2.10 and later close that gap with `sync_interval: always` in the
//! `jetstream` block (a sync per write, at the cost of a device flush on every
//! acknowledgement). Debian 12's nats-server (2.9.10, the one this project is tested on)
//! refuses that setting: it cannot be had, nor its cost measured, on that server.
//!
//! [`Leases`] are the primitive of placing work on processes: a key held by one holder at a
//! time, lost when not renewed within its time to live.
//!
//! With the feature `testing`, [`TestNamespaces`] gives tests fresh namespaces on the server at
//! [`test_url`] and deletes them afterwards.
//!
//! A *restart* of a backend is a new client connection ([`NatsStore::reconnect`]): what was
//! acknowledged is on the server; what the old connection held in memory (such as which
//! messages it had taken) is gone.
//!
//! ```no_run
//! use nats_store::NatsStore;
//!
//! # async fn example() -> Result<(), nats_store::NatsError> {
//! let store = NatsStore::connect("nats://127.0.0.1:4222", "run-1").await?;
//! assert_eq!(store.name("bus"), "strata_run-1_bus");
//! assert_eq!(store.subject("bus"), "strata.run-1.bus");
//! # Ok(())
//! # }
//! ```

use std::fmt::Display;
use std::time::Duration;

use agent_state::BackendError;
use async_nats::jetstream::{self, kv, stream};
use thiserror::Error;

/// The schema version written into every stream's and bucket's description.
pub const SCHEMA_VERSION: u32 = 1;

/// The backend name in [`BackendError`]s of the NATS backends.
pub const BACKEND: &str = "nats";

/// The environment variable the tests (and `.ci/run`) read the server's URL from.
pub const URL_VAR: &str = "STRATA_NATS_URL";

/// The server tests use when [`URL_VAR`] is not set.
pub const DEFAULT_URL: &str = "nats://127.0.0.1:4222";

/// How long connecting, and each JetStream request, may take.
const TIMEOUT: Duration = Duration::from_secs(5);

/// Why a NATS store could not be opened or used.
#[derive(Debug, Error)]
pub enum NatsError {
    /// The URL does not parse or the server does not answer.
    #[error(
        "cannot connect to the NATS server at {url}: {reason}; check the URL given with `--nats` (or {URL_VAR}) and that nats-server is running there"
    )]
    Unreachable {
        /// The URL tried.
        url: String,
        /// What went wrong.
        reason: String,
    },
    /// The server answers but has JetStream disabled.
    #[error(
        "the NATS server at {url} has no JetStream: start it with `-js` (or a `jetstream {{}}` block in its configuration)"
    )]
    NoJetStream {
        /// The server's URL.
        url: String,
    },
    /// A stream or bucket of the same name exists, made by another schema version (or not by
    /// Strata at all).
    #[error(
        "the {kind} `{name}` on the NATS server was made by {found:?}, not by this Strata ({expected:?}): use another namespace (run id), or delete it if it is no longer needed"
    )]
    SchemaMismatch {
        /// `stream` or `bucket`.
        kind: &'static str,
        /// Its name.
        name: String,
        /// The description found.
        found: String,
        /// The description this version writes.
        expected: String,
    },
    /// The namespace cannot name streams and subjects: it breaks the run id rule
    /// ([`agent_state::RunId`]), which a namespace follows whether it is a run's or not.
    #[error("namespace {namespace:?}: {}", agent_state::RUN_ID_RULE)]
    BadNamespace {
        /// The namespace given.
        namespace: String,
    },
    /// A request to the server failed.
    #[error(transparent)]
    Backend(#[from] BackendError),
}

impl From<NatsError> for BackendError {
    fn from(err: NatsError) -> Self {
        match err {
            NatsError::Backend(err) => err,
            other => BackendError::with_source(BACKEND, other.to_string(), other),
        }
    }
}

/// A [`BackendError`] of the NATS backends: `what` failed because of `err`.
pub fn backend_error(
    what: impl Display,
    err: impl std::error::Error + Send + Sync + 'static,
) -> BackendError {
    BackendError::with_source(BACKEND, format!("{what}: {err}"), err)
}

/// The URL of the server tests use: [`URL_VAR`], or [`DEFAULT_URL`].
pub fn test_url() -> String {
    std::env::var(URL_VAR).ok().filter(|u| !u.is_empty()).unwrap_or_else(|| DEFAULT_URL.to_owned())
}

/// A connection to a NATS server with JetStream, and the namespace the backends name their
/// streams, buckets and subjects under. Cheap to clone: clones share the connection.
#[derive(Clone, Debug)]
pub struct NatsStore {
    url: String,
    namespace: String,
    client: async_nats::Client,
    jetstream: jetstream::Context,
}

impl NatsStore {
    /// Connects to the server at `url`, checks that it has JetStream, and uses `namespace`.
    ///
    /// Nothing is created on the server. Fails with [`NatsError::BadNamespace`],
    /// [`NatsError::Unreachable`] (within 5 s when nothing answers) or
    /// [`NatsError::NoJetStream`].
    pub async fn connect(url: &str, namespace: &str) -> Result<Self, NatsError> {
        check_namespace(namespace)?;
        let unreachable = |reason: String| NatsError::Unreachable { url: url.to_owned(), reason };
        let options = async_nats::ConnectOptions::new()
            .name(format!("strata {}", env!("CARGO_PKG_VERSION")))
            .connection_timeout(TIMEOUT)
            .request_timeout(Some(TIMEOUT));
        let client = match tokio::time::timeout(TIMEOUT * 2, options.connect(url)).await {
            Ok(Ok(client)) => client,
            Ok(Err(err)) => return Err(unreachable(err.to_string())),
            Err(_) => {
                return Err(unreachable(format!("no answer within {} s", (TIMEOUT * 2).as_secs())));
            }
        };
        let mut jetstream = jetstream::new(client.clone());
        jetstream.set_timeout(TIMEOUT);
        // The account's JetStream information, read raw: the typed `query_account` of
        // async-nats wants fields that older servers (Debian's 2.9) do not send.
        match client.request("$JS.API.INFO", "".into()).await {
            Ok(reply) => {
                let info: serde_json::Value =
                    serde_json::from_slice(&reply.payload).map_err(|e| {
                        unreachable(format!("its JetStream answered something unreadable: {e}"))
                    })?;
                if let Some(error) = info.get("error") {
                    let code = error.get("err_code").and_then(serde_json::Value::as_u64);
                    if matches!(code, Some(10076 | 10039)) {
                        return Err(NatsError::NoJetStream { url: url.to_owned() });
                    }
                    return Err(unreachable(format!("its JetStream refused: {error}")));
                }
            }
            Err(err) if err.kind() == async_nats::RequestErrorKind::NoResponders => {
                return Err(NatsError::NoJetStream { url: url.to_owned() });
            }
            Err(err) => return Err(unreachable(format!("its JetStream does not answer: {err}"))),
        }
        tracing::debug!(url, namespace, "connected to NATS");
        Ok(Self { url: url.to_owned(), namespace: namespace.to_owned(), client, jetstream })
    }

    /// A new client connection to the same server and namespace, as after a restart of the
    /// process: nothing the old connection held in memory carries over.
    pub async fn reconnect(&self) -> Result<Self, NatsError> {
        Self::connect(&self.url, &self.namespace).await
    }

    /// The same server and connection under another namespace.
    pub fn with_namespace(&self, namespace: &str) -> Result<Self, NatsError> {
        check_namespace(namespace)?;
        Ok(Self { namespace: namespace.to_owned(), ..self.clone() })
    }

    /// The server's URL.
    pub fn url(&self) -> &str {
        &self.url
    }

    /// The namespace.
    pub fn namespace(&self) -> &str {
        &self.namespace
    }

    /// The client connection.
    pub fn client(&self) -> &async_nats::Client {
        &self.client
    }

    /// The JetStream context.
    pub fn jetstream(&self) -> &jetstream::Context {
        &self.jetstream
    }

    /// The name of the stream or bucket for `part`: `strata_<namespace>_<part>` (`part` is
    /// one of the backends' own names: ASCII letters, digits and `-`).
    pub fn name(&self, part: &str) -> String {
        format!("strata_{}_{part}", self.namespace)
    }

    /// The subject prefix for `part`: `strata.<namespace>.<part>`.
    pub fn subject(&self, part: &str) -> String {
        format!("strata.{}.{part}", self.namespace)
    }

    /// The description a stream or bucket for `part` carries.
    pub fn description(part: &str) -> String {
        format!("strata schema {SCHEMA_VERSION}: {part}")
    }

    /// The stream for `part`, created with `config` if it does not exist (its name and
    /// description are set here). An existing stream is used as it is, after checking that this
    /// schema version made it.
    pub async fn stream(
        &self,
        part: &str,
        config: stream::Config,
    ) -> Result<stream::Stream, NatsError> {
        let name = self.name(part);
        let expected = Self::description(part);
        let config =
            stream::Config { name: name.clone(), description: Some(expected.clone()), ..config };
        let mut stream = self
            .jetstream
            .get_or_create_stream(config)
            .await
            .map_err(|e| backend_error(format!("opening the stream `{name}`"), e))?;
        let info = stream
            .info()
            .await
            .map_err(|e| backend_error(format!("reading the stream `{name}`"), e))?;
        let found = info.config.description.clone().unwrap_or_default();
        if found != expected {
            return Err(NatsError::SchemaMismatch { kind: "stream", name, found, expected });
        }
        Ok(stream)
    }

    /// The key-value bucket for `part`, created with `config` if it does not exist (its name
    /// and description are set here). An existing bucket is used as it is, after checking that
    /// this schema version made it.
    pub async fn bucket(&self, part: &str, config: kv::Config) -> Result<kv::Store, NatsError> {
        let name = self.name(part);
        let expected = Self::description(part);
        match self.jetstream.get_stream(format!("KV_{name}")).await {
            Ok(mut existing) => {
                let info = existing
                    .info()
                    .await
                    .map_err(|e| backend_error(format!("reading the bucket `{name}`"), e))?;
                let found = info.config.description.clone().unwrap_or_default();
                if found != expected {
                    return Err(NatsError::SchemaMismatch {
                        kind: "bucket",
                        name,
                        found,
                        expected,
                    });
                }
                self.jetstream
                    .get_key_value(&name)
                    .await
                    .map_err(|e| backend_error(format!("opening the bucket `{name}`"), e).into())
            }
            Err(err)
                if matches!(
                    err.kind(),
                    jetstream::context::GetStreamErrorKind::JetStream(ref inner)
                        if inner.error_code() == jetstream::ErrorCode::STREAM_NOT_FOUND
                ) =>
            {
                // The bucket's stream is made here, as async-nats's `create_key_value` would
                // make it: that call first reads the account in a form older servers (Debian's
                // 2.9) do not send, and fails there.
                let stream = stream::Config {
                    name: format!("KV_{name}"),
                    description: Some(expected),
                    subjects: vec![format!("$KV.{name}.>")],
                    max_messages_per_subject: config.history.max(1),
                    max_bytes: config.max_bytes,
                    max_age: config.max_age,
                    max_message_size: config.max_value_size,
                    storage: config.storage,
                    num_replicas: config.num_replicas.max(1),
                    allow_rollup: true,
                    deny_delete: true,
                    allow_direct: true,
                    discard: stream::DiscardPolicy::New,
                    ..Default::default()
                };
                self.jetstream
                    .create_stream(stream)
                    .await
                    .map_err(|e| backend_error(format!("creating the bucket `{name}`"), e))?;
                self.jetstream
                    .get_key_value(&name)
                    .await
                    .map_err(|e| backend_error(format!("opening the bucket `{name}`"), e).into())
            }
            Err(err) => Err(backend_error(format!("looking for the bucket `{name}`"), err).into()),
        }
    }

    /// The names of this namespace's streams and of its buckets' streams (`KV_<bucket>`), and
    /// of no other namespace's.
    pub async fn streams(&self) -> Result<Vec<String>, NatsError> {
        use futures_util::StreamExt as _;
        let prefix = self.name("");
        let kv_prefix = format!("KV_{prefix}");
        let mut names = self.jetstream.stream_names();
        let mut mine = Vec::new();
        while let Some(name) = names.next().await {
            let name = name.map_err(|e| backend_error("listing the streams", e))?;
            if name.starts_with(&prefix) || name.starts_with(&kv_prefix) {
                mine.push(name);
            }
        }
        mine.sort();
        Ok(mine)
    }

    /// Deletes every stream and bucket of this namespace, and of no other (for tests, and for
    /// removing a run). Returns how many were deleted.
    pub async fn delete_namespace(&self) -> Result<usize, NatsError> {
        let mine = self.streams().await?;
        for name in &mine {
            self.jetstream
                .delete_stream(name)
                .await
                .map_err(|e| backend_error(format!("deleting the stream `{name}`"), e))?;
        }
        Ok(mine.len())
    }
}

mod keys;
mod lease;
#[cfg(feature = "testing")]
pub mod testing;

#[cfg(feature = "testing")]
pub use testing::{TestNamespaces, TestServer};

pub use keys::{Found, entry, escape_token, keys, too_many_races};
pub use lease::{Lease, Leases};

/// A namespace follows the run id rule ([`agent_state::check_run_id`]): a run's namespace is its
/// run id, and the rule is the one under which no two namespaces share a stream's name.
fn check_namespace(namespace: &str) -> Result<(), NatsError> {
    agent_state::check_run_id(namespace)
        .map_err(|_| NatsError::BadNamespace { namespace: namespace.to_owned() })
}

#[cfg(test)]
mod tests;
