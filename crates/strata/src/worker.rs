//! The host of a worker (`strata worker --nats URL`): what builds the team of each run placed
//! on the server ([`agent_pool::placement`]) for the share of its agents the worker hosts, as
//! `strata run` would build it. The other half is `strata run --nats`: a run started while
//! workers of this version are live is placed on them, and the run's process only coordinates
//! (hands the task over, reads the outcome).
//!
//! A worker ([`join`]: a [`WorkerHost`] handed to
//! [`Worker::new`](agent_pool::placement::Worker::new))
//! builds each run's team from what the run placed (the team file's text, the
//! `--reasoner` override, `--unsandboxed`), with its own directory per run under
//! `<data>/worker-<id>/<run>` (the usage ledger and the conversations). It works in the
//! `--workspace` it was given, or else in the run's workspace (the path the run was started
//! with: on one machine every agent shares it). The `shell` commands' crash journal is
//! `<data>/<run>/journal`, so workers sharing a data directory adopt each other's commands.
//!
//! ```no_run
//! # async fn host() -> strata::Result<()> {
//! use agent_pool::placement::{WorkerConfig, WorkerFilter};
//! use strata::worker::{HostOptions, Joined};
//!
//! let config = WorkerConfig { id: "w1".into(), filter: WorkerFilter::default(), capacity: 50 };
//! let options = HostOptions::new(".strata/runs", "w1");
//! let Joined { worker, host, .. } = strata::worker::join("nats://127.0.0.1:4222", options, config).await?;
//! let (_stop, stopped) = tokio::sync::watch::channel(false);
//! worker.run(stopped).await;
//! host.stop_servers().await;
//! # Ok(()) }
//! ```

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use agent_core::tools::ToolRegistry;
use agent_pool::placement::{
    BuildError, HostedRun, PlacedRun, REGISTRY, RunBuilder, Worker, WorkerConfig, WorkerError,
    WorkerEvent,
};
use agent_state::Timestamp;
use async_trait::async_trait;
use message_bus::NatsBusError;
use nats_store::{NatsError, NatsStore};
use run_store::{Durability, RunStore};

use crate::error::{Context as _, Error, Result};
use crate::run_dir::{RUN_WORKSPACE, RunInfo, RunStatus, TEAM_FILE, now_ms, write_atomic};
use crate::stores::Stores;

/// A worker id (`strata worker --id`), given back as it is: 1 to 64 ASCII letters, digits or
/// `-`, else what is wrong with it.
pub fn parse_id(text: &str) -> std::result::Result<String, String> {
    if !text.is_empty()
        && text.len() <= 64
        && text.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-')
    {
        Ok(text.to_owned())
    } else {
        Err(format!("`{text}` cannot be a worker id: use 1 to 64 ASCII letters, digits or `-`"))
    }
}

/// A worker id unique among the live workers of one machine: its host name (reduced to ASCII
/// letters, digits and `-`) and the process id.
pub fn default_id() -> String {
    let host = std::fs::read_to_string("/etc/hostname")
        .ok()
        .map(|h| h.trim().to_owned())
        .filter(|h| !h.is_empty())
        .unwrap_or_else(|| "worker".to_owned());
    let host: String =
        host.chars().map(|c| if c.is_ascii_alphanumeric() || c == '-' { c } else { '-' }).collect();
    format!("{host}-{}", std::process::id())
}

/// A worker that joined a NATS server ([`join`]).
pub struct Joined {
    /// The worker: [`Worker::run`] hosts its share of the placed runs until told to stop.
    pub worker: Worker,
    /// What it does, as it does it (joined, hosting, lost, ...).
    pub events: tokio::sync::mpsc::Receiver<WorkerEvent>,
    /// Its host: [`WorkerHost::stop_servers`] once the worker has stopped.
    pub host: Arc<WorkerHost>,
}

/// Joins the NATS server at `url` (`strata worker --nats URL`) as the worker `config`
/// describes, each run it takes built by a [`WorkerHost`] with `options`. A server that cannot
/// be reached, or that refuses the worker (its id in use, no capacity), is bad input; a
/// failure of the server's storage is not.
pub async fn join(url: &str, options: HostOptions, config: WorkerConfig) -> Result<Joined> {
    let server = crate::stores::connect_flag(url, REGISTRY).await?;
    let host = Arc::new(WorkerHost::new(server.clone(), options));
    let (worker, events) =
        Worker::new(&server, config, host.clone()).await.map_err(|e| match e {
            WorkerError::Backend(_) => Error::failed_from(e),
            e => Error::bad_input(format!("{} {url}: {e}", crate::stores::FLAG)),
        })?;
    Ok(Joined { worker, events, host })
}

/// Where warnings for the user go (the `strata` command prints them on standard error).
pub type Warn = Arc<dyn Fn(&str) + Send + Sync>;

/// How a [`WorkerHost`] builds the runs it hosts.
pub struct HostOptions {
    /// The worker's own directory (`<data>/worker-<id>`): one directory per run below.
    pub dir: PathBuf,
    /// The data directory, hidden from sandboxed commands; the runs' crash journals are there.
    pub data: PathBuf,
    /// `--workspace`: where the agents work; `None`: in the run's workspace.
    pub workspace: Option<PathBuf>,
    /// `--unsandboxed`: commands and MCP servers are not sandboxed here.
    pub unsandboxed: bool,
    /// Where warnings go; by default, logged.
    pub warn: Warn,
}

impl HostOptions {
    /// The options of worker `id` on the data directory `data`: its directory
    /// `<data>/worker-<id>`, the runs' own workspaces, sandboxed, warnings logged.
    pub fn new(data: impl Into<PathBuf>, id: &str) -> Self {
        let data = data.into();
        Self {
            dir: data.join(format!("worker-{id}")),
            data,
            workspace: None,
            unsandboxed: false,
            warn: Arc::new(|warning| tracing::warn!("{warning}")),
        }
    }
}

/// Builds a placed run's team on a worker, as `strata run` would: the [`RunBuilder`] a
/// [`Worker`] is given.
pub struct WorkerHost {
    server: NatsStore,
    options: HostOptions,
    /// The MCP servers of the runs' team files, stopped with the worker.
    servers: Mutex<Vec<agent_mcp::McpServers>>,
}

impl WorkerHost {
    /// A host of the runs placed on `server` (the worker's connection), as `options` say.
    pub fn new(server: NatsStore, options: HostOptions) -> Self {
        Self { server, options, servers: Mutex::default() }
    }

    /// Stops the MCP servers the runs hosted here started: once the worker has stopped.
    pub async fn stop_servers(&self) {
        let servers: Vec<_> =
            std::mem::take(&mut *self.servers.lock().unwrap_or_else(PoisonError::into_inner));
        for s in servers {
            s.shutdown().await;
        }
    }

    async fn try_build(
        &self,
        run: &PlacedRun,
        server: NatsStore,
        stores: Stores,
    ) -> Result<HostedRun> {
        let placed: crate::placement::PlacedSpec = serde_json::from_value(run.spec.clone())
            .context("the run's placement is not what this Strata writes")?;
        let dir = self.options.dir.join(&run.run_id);
        let store = open_or_create(&dir, &run.run_id)?;
        let team_path = dir.join(TEAM_FILE);
        write_atomic(&team_path, placed.team.as_bytes())?;
        let workspace = self
            .options
            .workspace
            .clone()
            .or_else(|| placed.workspace.clone())
            .unwrap_or_else(|| dir.join(RUN_WORKSPACE));
        std::fs::create_dir_all(&workspace)
            .with_context(|| format!("cannot create the workspace {}", workspace.display()))?;
        let workspace = std::fs::canonicalize(&workspace)
            .with_context(|| format!("cannot resolve the workspace {}", workspace.display()))?;
        let mut tools = ToolRegistry::with_builtins();
        // The MCP servers start in the run's workspace, in its sandbox.
        let place = crate::mcp::Place {
            workspace: &workspace,
            unsandboxed: placed.unsandboxed || self.options.unsandboxed,
            hide: vec![self.options.data.clone()],
            warn: &*self.options.warn,
        };
        let servers =
            crate::mcp::start_servers(&team_path, &placed.team, &mut tools, &place).await?;
        self.servers.lock().unwrap_or_else(PoisonError::into_inner).push(servers);
        let mut team = team_file::parse_team(&team_path, &placed.team, &tools)
            .map_err(Error::bad_input_from)?;
        team.spec.heartbeat = Duration::from_millis(run.heartbeat_ms);
        crate::services::check_reasoners(&team, placed.reasoner.as_deref(), &placed.flags).await?;
        let unsandboxed = placed.unsandboxed || self.options.unsandboxed;
        let sandbox = crate::services::sandbox(&team, unsandboxed)?.hide(&self.options.data);
        let info = RunInfo {
            run_id: run.run_id.clone(),
            task_id: String::new(),
            goal: String::new(),
            workspace,
            heartbeat_ms: run.heartbeat_ms,
            reasoner: placed.reasoner.clone(),
            flags: placed.flags.clone(),
            started_at: now_ms(),
            finished_at: None,
            status: RunStatus::Running,
            failure: None,
            unsandboxed,
            nats: Some(self.server.url().to_owned()),
            local: false,
            usage: None,
        };
        // The commands' crash journal where the run's own directory keeps it: workers that
        // share the data directory (one machine) adopt each other's commands.
        let journal = self.options.data.join(&run.run_id).join(crate::run_dir::JOURNAL_DIR);
        let tooling = crate::services::Tooling { tools, sandbox, journal };
        let (services, _ledger) =
            crate::services::services(&store, stores, &info, &team, tooling).await?;
        Ok(HostedRun { spec: team.spec, services, store: server })
    }
}

#[async_trait]
impl RunBuilder for WorkerHost {
    async fn build(&self, run: &PlacedRun) -> Result<HostedRun, BuildError> {
        let server = self
            .server
            .with_namespace(&run.run_id)
            .map_err(|e| BuildError::Refused(e.to_string()))?;
        // The run's stores first, before anything starts here (its MCP servers): a server
        // that does not answer now (restarting) is tried again at the next beat, not refused.
        let stores = match Stores::nats(&server).await {
            Ok(stores) => stores,
            Err(e) if for_good(&e) => return Err(BuildError::Refused(e.chain_text())),
            Err(e) => return Err(BuildError::Unavailable(e.chain_text())),
        };
        self.try_build(run, server, stores).await.map_err(|e| BuildError::Refused(e.chain_text()))
    }
}

/// Whether opening a run's stores on NATS failed for good: they were made by another schema,
/// or are not laid out as this Strata lays them out, or the server has no JetStream. Any other
/// failure (a request not answered, the server out of reach) is the server's for now.
fn for_good(error: &Error) -> bool {
    let store = |e: &NatsError| {
        matches!(
            e,
            NatsError::SchemaMismatch { .. }
                | NatsError::NoJetStream { .. }
                | NatsError::BadNamespace { .. }
        )
    };
    let mut cause: Option<&(dyn std::error::Error + 'static)> = Some(error);
    while let Some(error) = cause {
        let found = error.downcast_ref::<NatsError>().is_some_and(store)
            || error.downcast_ref::<NatsBusError>().is_some_and(|e| match e {
                NatsBusError::Store(e) => store(e),
                _ => true,
            });
        if found {
            return true;
        }
        cause = error.source();
    }
    false
}

/// The worker's directory of `run_id`, made on first use.
fn open_or_create(dir: &Path, run_id: &str) -> Result<RunStore> {
    if dir.join(run_store::RUN_MARKER).exists() {
        return RunStore::open(dir, Durability::Synced)
            .with_context(|| format!("cannot open {}", dir.display()));
    }
    RunStore::create(dir, run_id, Timestamp(now_ms()), Durability::Synced)
        .with_context(|| format!("cannot create {}", dir.display()))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, reason = "tests")]

    use super::*;

    #[test]
    fn a_worker_id_is_short_plain_ascii_and_the_default_is_one() {
        assert_eq!(parse_id("w-1").unwrap(), "w-1");
        for bad in ["", "a b", "w_1", "é", &"w".repeat(65)] {
            let e = parse_id(bad).unwrap_err();
            assert!(e.contains("cannot be a worker id"), "{bad}: {e}");
        }
        let id = default_id();
        assert!(id.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-'), "{id}");
        assert!(id.ends_with(&format!("-{}", std::process::id())), "{id}");
    }
}
