//! Runs on NATS JetStream (`strata run --nats URL`): the run's message bus, whiteboards,
//! governance, audit log and state store (with the tool journal's records) on a NATS server,
//! under the namespace that is the run id (see `nats_store`).
//!
//! The run's directory in the data directory stays: `run.json` (which records the server's URL
//! in `nats`, so that `resume`, `verify`, `inspect` and the operator commands find the rest),
//! the team and plan files, the `shell` commands' crash journal, the operator inbox, and the
//! run's sled database for what has no home on NATS yet (the usage ledger and the
//! conversations).
//!
//! A new run checks everything before anything is written, here or on the server: the server
//! answers, has JetStream, and holds nothing under the run's namespace (a stream there is a
//! run already, or one of another schema version). An existing run's server must answer and
//! hold the run's streams, made by this schema version, before anything is opened on it.

use std::path::Path;
use std::sync::Arc;

use crate::error::Context as _;
use agent_core::{AuditLog, NatsAuditLog, SledAuditLog, SledStateStore, StateStore};
use agent_pool::{NatsStores, TeamStores};
use governance::{Governance, SledGovernance};
use message_bus::{MessageBus, SledBus};
use nats_store::{NatsError, NatsStore, SCHEMA_VERSION};
use run_store::RunStore;
use whiteboard::{SledWhiteboard, Whiteboard};

use crate::error::Error;
use crate::run_dir::{RUN_FILE, RunInfo};

/// The option that puts a run on NATS.
pub const FLAG: &str = "--nats";

/// The five stores of a run: on its sled database, or on NATS.
#[derive(Clone)]
pub struct Stores {
    /// The message bus.
    pub bus: Arc<dyn MessageBus>,
    /// The whiteboards.
    pub boards: Arc<dyn Whiteboard>,
    /// Governance.
    pub governance: Arc<dyn Governance>,
    /// The audit log.
    pub audit: Arc<dyn AuditLog>,
    /// The state store, with the tool journal's records.
    pub state: Arc<dyn StateStore>,
    /// The audit log again, when it is on NATS: its last record is what the seal of a sled
    /// run anchors.
    pub nats_audit: Option<Arc<NatsAuditLog>>,
}

impl Stores {
    /// Stores in memory, gone with the process: an evolution's task teams run on them.
    pub fn in_memory() -> Self {
        TeamStores::in_memory().into()
    }

    /// The stores in the run's sled database.
    pub fn sled(store: &RunStore) -> crate::Result<Self> {
        Ok(Self {
            bus: Arc::new(SledBus::open(store).context("cannot open the message bus")?),
            boards: Arc::new(SledWhiteboard::open(store).context("cannot open the whiteboards")?),
            governance: Arc::new(SledGovernance::open(store).context("cannot open governance")?),
            audit: Arc::new(SledAuditLog::open(store).context("cannot open the audit log")?),
            state: Arc::new(SledStateStore::open(store).context("cannot open the state store")?),
            nats_audit: None,
        })
    }

    /// For a run on NATS: its audit log anchored, as it grows, in the anchor files of `store`
    /// (the run's local directory; see `agent_core::AnchoredAuditLog`). Unchanged otherwise.
    pub fn anchored_in(mut self, store: &RunStore) -> Self {
        if self.nats_audit.is_some() {
            self.audit = Arc::new(agent_core::AnchoredAuditLog::new(self.audit, store.clone()));
        }
        self
    }

    /// The stores on NATS under `store`'s namespace, created there if they are not
    /// ([`NatsStores::open`], whose error names the store and the server's URL).
    pub async fn nats(store: &NatsStore) -> crate::Result<Self> {
        let stores = NatsStores::open(store).await?;
        let nats_audit = Some(stores.audit.clone());
        Ok(Self { nats_audit, ..TeamStores::from(stores).into() })
    }

    /// The stores of the run in `dir` described by `info`: in `store` (its database, or a copy
    /// of it), or on the NATS server `run.json` names, which must hold the run.
    pub async fn of_run(store: &RunStore, dir: &Path, info: &RunInfo) -> crate::Result<Self> {
        match &info.nats {
            None => Ok(Self::sled(store)?),
            Some(url) => {
                let server = connect_existing(url, dir, info).await?;
                Self::nats(&server).await.map_err(Error::bad_input_from)
            }
        }
    }
}

impl From<TeamStores> for Stores {
    /// `stores`, with no audit log on NATS to anchor.
    fn from(stores: TeamStores) -> Self {
        let TeamStores { bus, boards, governance, audit, state } = stores;
        Self { bus, boards, governance, audit, state, nats_audit: None }
    }
}

/// Why a connection was made, for its errors: the option of a new run, or `run.json` of an
/// existing one.
enum Setting<'a> {
    Flag,
    RunFile(&'a Path),
}

impl Setting<'_> {
    fn name(&self, url: &str) -> String {
        match self {
            Setting::Flag => format!("{FLAG} {url}"),
            Setting::RunFile(dir) => {
                format!("the run's NATS server {url} (`nats` in {})", dir.join(RUN_FILE).display())
            }
        }
    }
}

/// A connection to `url` under `namespace`, with the connection's failure as bad input that
/// names where the URL came from.
async fn connect(url: &str, namespace: &str, setting: &Setting<'_>) -> crate::Result<NatsStore> {
    NatsStore::connect(url, namespace).await.map_err(|err| {
        let name = setting.name(url);
        Error::bad_input(match err {
            NatsError::Unreachable { reason, .. } => format!(
                "{name}: cannot connect to the NATS server: {reason}; check the URL and that nats-server is running there"
            ),
            NatsError::NoJetStream { .. } => format!(
                "{name}: the NATS server has no JetStream: start it with `-js` (or a `jetstream {{}}` block in its configuration)"
            ),
            NatsError::BadNamespace { namespace } => format!(
                "--run-id {namespace}: a run on NATS ({FLAG}) needs an id of 1 to 64 ASCII letters, digits or `-` (it names the run's streams on the server)"
            ),
            other => format!("{name}: {other}"),
        })
    })
}

/// A connection to `url` given with `--nats`, under `namespace`; its failure is bad input
/// naming `--nats`.
pub async fn connect_flag(url: &str, namespace: &str) -> crate::Result<NatsStore> {
    connect(url, namespace, &Setting::Flag).await
}

/// The streams (key-value buckets included) of `store`'s namespace, with their descriptions.
async fn streams(store: &NatsStore, setting: &Setting<'_>) -> crate::Result<Vec<(String, String)>> {
    let failed = |what: &str, e: &dyn std::fmt::Display| {
        Error::bad_input(format!("{}: {what}: {e}", setting.name(store.url())))
    };
    let jetstream = store.jetstream();
    let mine = store.streams().await.map_err(|e| failed("cannot list the streams", &e))?;
    let mut out = Vec::with_capacity(mine.len());
    for name in mine {
        let stream = jetstream
            .get_stream(&name)
            .await
            .map_err(|e| failed(&format!("cannot read the stream `{name}`"), &e))?;
        let description = stream.cached_info().config.description.clone().unwrap_or_default();
        out.push((name, description));
    }
    Ok(out)
}

/// The first stream of `streams` that this schema version did not make.
fn foreign(streams: &[(String, String)]) -> Option<&(String, String)> {
    let ours = format!("strata schema {SCHEMA_VERSION}: ");
    streams.iter().find(|(_, description)| !description.starts_with(&ours))
}

/// The server of a new run, checked: `url` answers, has JetStream, and holds nothing under
/// `run_id`. Nothing is written on the server; every refusal is bad input naming `--nats`
/// (or `--run-id`).
pub async fn connect_new(url: &str, run_id: &str) -> crate::Result<NatsStore> {
    let setting = Setting::Flag;
    if run_id == agent_pool::placement::REGISTRY {
        return Err(Error::bad_input(format!(
            "--run-id {run_id}: on NATS ({FLAG}) the id `{run_id}` is the workers' registry; choose another run id"
        )));
    }
    let store = connect(url, run_id, &setting).await?;
    let found = streams(&store, &setting).await?;
    if let Some((name, description)) = foreign(&found) {
        return Err(Error::bad_input(format!(
            "{FLAG} {url}: the stream `{name}` of run id `{run_id}` on the server was made by {description:?}, not by this Strata (schema {SCHEMA_VERSION}): choose another --run-id, or delete it if it is no longer needed"
        )));
    }
    if let Some((name, _)) = found.first() {
        return Err(Error::bad_input(format!(
            "{FLAG} {url}: the server holds a run `{run_id}` already ({} streams, such as `{name}`): `strata resume {run_id}` goes on with it, or choose another --run-id",
            found.len()
        )));
    }
    Ok(store)
}

/// The server of the existing run in `dir`, checked: the URL of its `run.json` answers, has
/// JetStream, and holds the run's streams, made by this schema version. Nothing is written on
/// the server; every refusal is bad input naming the server and `run.json`.
pub async fn connect_existing(url: &str, dir: &Path, info: &RunInfo) -> crate::Result<NatsStore> {
    let setting = Setting::RunFile(dir);
    let store = connect(url, &info.run_id, &setting).await?;
    let found = streams(&store, &setting).await?;
    if let Some((name, description)) = foreign(&found) {
        return Err(Error::bad_input(format!(
            "{}: the stream `{name}` of run `{}` was made by {description:?}, not by this Strata (schema {SCHEMA_VERSION}): read it with the Strata that made it",
            setting.name(url),
            info.run_id
        )));
    }
    if found.is_empty() {
        return Err(Error::bad_input(format!(
            "{}: the server holds nothing of run `{}` (deleted, or another server?); nothing was changed",
            setting.name(url),
            info.run_id
        )));
    }
    Ok(store)
}
