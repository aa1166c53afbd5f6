//! `strata worker --nats URL`: a process that hosts a share of the agents of every run placed on
//! the server (`agent_pool::placement`), and the other half of it in `strata run --nats`: a run
//! started while workers of this version are live is placed on them, and the run's process
//! only coordinates (hands the task over, reads the outcome).
//!
//! A worker builds each run's team from what the run placed (the team file's text, the
//! `--reasoner` override, `--unsandboxed`), with its own directory per run under
//! `<data>/worker-<id>/<run>` (the usage ledger and the conversations). It works in the
//! `--workspace` it was given, or else in the run's workspace (the path the run was started
//! with: on one machine every agent shares it). The `shell` commands' crash journal is
//! `<data>/<run>/journal`, so workers sharing a data directory adopt each other's commands.

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use agent_core::tools::ToolRegistry;
use agent_pool::placement::{
    BuildError, HostedRun, PlacedRun, REGISTRY, RunBuilder, VERSION, Worker, WorkerConfig,
    WorkerError, WorkerEvent, WorkerFilter,
};
use agent_state::{AgentLayer, Timestamp};
use anyhow::Context as _;
use async_trait::async_trait;
use message_bus::NatsBusError;
use nats_store::{NatsError, NatsStore};
use run_store::{Durability, RunStore};

use crate::cli::{RUN_WORKSPACE, WorkerArgs};
use crate::{Failure, bad_input};
use strata::run_dir::{RunInfo, RunStatus, TEAM_FILE, now_ms, write_atomic};
use strata::stores::{FLAG, Stores};

/// `strata worker`.
pub(crate) async fn worker(args: WorkerArgs) -> Result<u8, Failure> {
    let id = match &args.id {
        Some(id) => id.clone(),
        None => default_id(),
    };
    let filter = WorkerFilter { agents: args.agents.clone(), layers: args.layer.clone() };
    if args.data.exists() && !args.data.is_dir() {
        return Err(bad_input(anyhow::anyhow!(
            "the data directory {} is a file; give --data a directory",
            args.data.display()
        )));
    }
    let server = strata::stores::connect_flag(&args.nats, REGISTRY).await?;
    let builder = Arc::new(CliBuilder {
        server: server.clone(),
        dir: args.data.join(format!("worker-{id}")),
        data: args.data.clone(),
        workspace: args.workspace.clone(),
        unsandboxed: args.unsandboxed,
        servers: Mutex::default(),
    });
    let config = WorkerConfig { id: id.clone(), filter, capacity: args.capacity };
    let (worker, mut events) =
        Worker::new(&server, config, builder.clone()).await.map_err(|e| match e {
            WorkerError::Backend(_) => Failure::Other(anyhow::Error::new(e)),
            e => bad_input(anyhow::anyhow!("{FLAG} {}: {e}", args.nats)),
        })?;
    outln!("worker {id} (Strata {VERSION}) on {}: waiting for runs; Ctrl-C stops it", args.nats);
    let (stop, stopped) = tokio::sync::watch::channel(false);
    let working = tokio::spawn(worker.run(stopped));
    let printer = tokio::spawn(async move {
        while let Some(event) = events.recv().await {
            print_event(&event);
        }
    });
    let interrupted = shutdown_signal().await;
    outln!("worker {id}: stopping (its agents are released to the other workers)");
    let _ = stop.send(true);
    if let Err(e) = working.await {
        errln!("error: the worker stopped abnormally: {e}");
    }
    printer.abort();
    builder.stop_servers().await;
    outln!("worker {id}: stopped");
    // A turn stopped mid-command leaves the thread waiting for that command in the runtime's
    // blocking pool, which a normal return would wait for (up to the command's timeout). The
    // command goes on in its own process group, journaled, for the agent's next holder to
    // adopt; nothing of this worker is left to store, so it exits now.
    crate::finish_telemetry();
    std::process::exit(if interrupted { 0 } else { i32::from(crate::TASK_FAILED) })
}

/// Waits for Ctrl-C or SIGTERM: `true`; `false` if neither can be waited for.
async fn shutdown_signal() -> bool {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{SignalKind, signal};
        match signal(SignalKind::terminate()) {
            Ok(mut term) => tokio::select! {
                r = tokio::signal::ctrl_c() => r.is_ok(),
                _ = term.recv() => true,
            },
            Err(_) => tokio::signal::ctrl_c().await.is_ok(),
        }
    }
    #[cfg(not(unix))]
    {
        tokio::signal::ctrl_c().await.is_ok()
    }
}

fn print_event(event: &WorkerEvent) {
    let names = |agents: &[agent_state::AgentId]| {
        agents.iter().map(|a| a.as_str()).collect::<Vec<_>>().join(", ")
    };
    match event {
        WorkerEvent::Joined { run } => outln!("run {run}: joined"),
        WorkerEvent::Refused { run, reason } => errln!("run {run}: refused: {reason}"),
        WorkerEvent::Hosting { run, agents } => outln!("run {run}: hosting {}", names(agents)),
        WorkerEvent::Lost { run, agents, reason } => {
            outln!("run {run}: stopped hosting {}: {reason}", names(agents))
        }
        WorkerEvent::Withdrawn { run } => {
            outln!("run {run}: stopped by its coordinator; its agents here are released")
        }
        WorkerEvent::Closed { run } => outln!("run {run}: closed; its agents here shut down"),
        WorkerEvent::Trouble { run: Some(run), error } => errln!("run {run}: warning: {error}"),
        WorkerEvent::Trouble { run: None, error } => errln!("warning: {error}"),
    }
}

/// The host name and process id: unique among the live workers of one machine.
fn default_id() -> String {
    let host = std::fs::read_to_string("/etc/hostname")
        .ok()
        .map(|h| h.trim().to_owned())
        .filter(|h| !h.is_empty())
        .unwrap_or_else(|| "worker".to_owned());
    let host: String =
        host.chars().map(|c| if c.is_ascii_alphanumeric() || c == '-' { c } else { '-' }).collect();
    format!("{host}-{}", std::process::id())
}

/// Builds a placed run's team on this worker, as `strata run` would.
struct CliBuilder {
    server: NatsStore,
    /// `<data>/worker-<id>`: one directory per run below.
    dir: PathBuf,
    /// The data directory, hidden from sandboxed commands.
    data: PathBuf,
    workspace: Option<PathBuf>,
    unsandboxed: bool,
    /// The MCP servers of the runs' team files, stopped with the worker.
    servers: Mutex<Vec<agent_mcp::McpServers>>,
}

impl CliBuilder {
    async fn stop_servers(&self) {
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
    ) -> Result<HostedRun, Failure> {
        let placed: strata::placement::PlacedSpec = serde_json::from_value(run.spec.clone())
            .context("the run's placement is not what this Strata writes")?;
        let dir = self.dir.join(&run.run_id);
        let store = open_or_create(&dir, &run.run_id)?;
        let team_path = dir.join(TEAM_FILE);
        write_atomic(&team_path, placed.team.as_bytes())?;
        let workspace = self
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
        let place = strata::mcp::Place {
            workspace: &workspace,
            unsandboxed: placed.unsandboxed || self.unsandboxed,
            hide: vec![self.data.clone()],
            warn: &|warning| errln!("{warning}"),
        };
        let servers =
            strata::mcp::start_servers(&team_path, &placed.team, &mut tools, &place).await?;
        self.servers.lock().unwrap_or_else(PoisonError::into_inner).push(servers);
        let mut team =
            team_file::parse_team(&team_path, &placed.team, &tools).map_err(bad_input)?;
        team.spec.heartbeat = Duration::from_millis(run.heartbeat_ms);
        strata::services::check_reasoners(&team, placed.reasoner.as_deref(), &placed.flags).await?;
        let unsandboxed = placed.unsandboxed || self.unsandboxed;
        let sandbox = strata::services::sandbox(&team, unsandboxed)?.hide(&self.data);
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
        let journal = self.data.join(&run.run_id).join(strata::run_dir::JOURNAL_DIR);
        let tooling = strata::services::Tooling { tools, sandbox, journal };
        let (services, _ledger) =
            strata::services::services(&store, stores, &info, &team, tooling).await?;
        Ok(HostedRun { spec: team.spec, services, store: server })
    }
}

#[async_trait]
impl RunBuilder for CliBuilder {
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
        self.try_build(run, server, stores).await.map_err(|e| match e {
            Failure::BadInput(e) | Failure::Other(e) => BuildError::Refused(format!("{e:#}")),
        })
    }
}

/// Whether opening a run's stores on NATS failed for good: they were made by another schema,
/// or are not laid out as this Strata lays them out, or the server has no JetStream. Any other
/// failure (a request not answered, the server out of reach) is the server's for now.
fn for_good(error: &strata::Error) -> bool {
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
fn open_or_create(dir: &Path, run_id: &str) -> Result<RunStore, Failure> {
    if dir.join(run_store::RUN_MARKER).exists() {
        return RunStore::open(dir, Durability::Synced)
            .with_context(|| format!("cannot open {}", dir.display()))
            .map_err(Failure::Other);
    }
    RunStore::create(dir, run_id, Timestamp(now_ms()), Durability::Synced)
        .with_context(|| format!("cannot create {}", dir.display()))
        .map_err(Failure::Other)
}

/// A layer name for `--layer`.
pub(crate) fn parse_layer(text: &str) -> Result<AgentLayer, String> {
    match text {
        "top" => Ok(AgentLayer::Top),
        "mid" => Ok(AgentLayer::Mid),
        "bottom" => Ok(AgentLayer::Bottom),
        other => Err(format!("`{other}` is not a layer: use top, mid or bottom")),
    }
}
