//! `strata run` and `strata resume`: build the team on a run directory, drive it to the end,
//! show progress, handle Ctrl-C, print the summary.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};
use tracing::Instrument as _;

use agent_core::tools::{Sandbox, Shell, ToolContext, ToolRegistry};
use agent_core::{AuditEvent, TokioClock};
use agent_llm::{ApprovalDesk, OnExceed, UsageLedger};
use agent_pool::{Team, TeamServices};
use agent_state::{AgentId, AgentLayer, AgentStatus, Task, TaskFailure, TaskOutcome, Timestamp};
use anyhow::Context;
use run_store::{Durability, RunStore};
use serde::{Deserialize, Serialize};
use team_file::{ReadError, ReasonerKind, TeamFile};

use crate::cli::{OutputArgs, RUN_WORKSPACE, ResumeArgs, RunArgs, StartArgs};
use crate::nats::Stores;
use crate::reasoners;
use crate::{Failure, INTERRUPTED, TASK_FAILED, bad_input, view};
use agent_pool::Share;
use agent_pool::placement::{self, PlacedRun, Registry};

#[cfg(test)]
mod tests;

/// The file in a run directory that describes the run for `strata runs` and `resume`.
pub(crate) const RUN_FILE: &str = "run.json";
/// The team file as the run used it.
pub(crate) const TEAM_FILE: &str = "team.toml";
/// The plan file as the run used it.
pub(crate) const PLAN_FILE: &str = "plan.toml";
/// Where side-effecting tool calls keep their crash journals.
pub(crate) const JOURNAL_DIR: &str = "journal";

/// Where a run stands.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub(crate) enum RunStatus {
    /// Running, or killed while running.
    Running,
    /// Stopped by Ctrl-C; resumable.
    Interrupted,
    /// The task succeeded.
    Succeeded,
    /// The task failed.
    Failed,
}

/// `run.json`.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub(crate) struct RunInfo {
    /// The run id.
    pub(crate) run_id: String,
    /// The task id.
    pub(crate) task_id: String,
    /// The task's goal.
    pub(crate) goal: String,
    /// The workspace the tools work in (absolute).
    pub(crate) workspace: PathBuf,
    /// Heartbeat in milliseconds.
    pub(crate) heartbeat_ms: u64,
    /// The reasoner override given on the command line, if any.
    #[serde(default)]
    pub(crate) reasoner: Option<String>,
    /// `--base-url` and `--model`, and `$OPENAI_BASE_URL`, as the run started with them.
    #[serde(flatten)]
    pub(crate) flags: ModelFlags,
    /// When the run started (ms since the epoch).
    pub(crate) started_at: u64,
    /// When it ended, if it did.
    #[serde(default)]
    pub(crate) finished_at: Option<u64>,
    /// Where it stands.
    pub(crate) status: RunStatus,
    /// Why it failed, if it did.
    #[serde(default)]
    pub(crate) failure: Option<String>,
    /// Whether `shell` commands ran without the sandbox (`--unsandboxed`) in any session of
    /// the run.
    #[serde(default)]
    pub(crate) unsandboxed: bool,
    /// The NATS server the run's bus, whiteboards, governance, audit log and state store are
    /// on (`--nats URL`; the namespace is the run id); `None`: they are in the run's database.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) nats: Option<String>,
    /// On NATS, every agent runs in the run's own process even when workers are live
    /// (`--local`); `resume` keeps it so.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub(crate) local: bool,
    /// What its model calls used, as the usage ledger had it when the run last stopped
    /// (`None` for a run without a model, or one that has not stopped yet): `strata runs` and
    /// the dashboard's runs list show it without opening the run's database.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) usage: Option<RunUsage>,
}

/// A run's model usage in `run.json`: the totals of its usage ledger.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub(crate) struct RunUsage {
    /// Model calls answered.
    pub(crate) calls: u64,
    /// Prompt and generated tokens.
    pub(crate) tokens: u64,
    /// Cost in US dollars; `None` while a model without a price was called (the cost is not
    /// known).
    pub(crate) cost_usd: Option<f64>,
}

impl RunUsage {
    /// The totals of `ledger`, if the run has one.
    pub(crate) fn of(ledger: Option<&agent_llm::UsageLedger>) -> Option<Self> {
        let total = ledger?.report().total;
        Some(Self {
            calls: total.calls,
            tokens: total.input_tokens + total.output_tokens,
            cost_usd: (total.unpriced_calls == 0).then_some(total.cost_usd),
        })
    }
}

/// What a run's agents reason with beside `--reasoner`, kept in `run.json` so that `resume`
/// and the workers of a placed run use the same: `--base-url`, `--model`, `--small-model` and
/// `$OPENAI_BASE_URL` as it was when the run started (a resume in another shell, or a worker on
/// another machine, reaches the same server).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct ModelFlags {
    /// `--base-url`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) base_url: Option<String>,
    /// `--model`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) model: Option<String>,
    /// `$OPENAI_BASE_URL` (not blank) when the run started.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) openai_base_url: Option<String>,
    /// `--small-model`.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub(crate) small_model: bool,
}

impl ModelFlags {
    /// The flags of a new run (or `exec`), with `$OPENAI_BASE_URL` read now.
    pub(crate) fn of(args: &StartArgs) -> Self {
        let env = std::env::var(reasoners::OPENAI_BASE_URL_VAR).ok();
        Self {
            base_url: args.base_url.clone(),
            model: args.model.clone(),
            openai_base_url: env.map(|v| v.trim().to_owned()).filter(|v| !v.is_empty()),
            small_model: args.small_model,
        }
    }
}

impl RunStatus {
    /// The name `runs` and `inspect` print.
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            RunStatus::Running => "running",
            RunStatus::Interrupted => "interrupted",
            RunStatus::Succeeded => "succeeded",
            RunStatus::Failed => "failed",
        }
    }
}

impl RunInfo {
    pub(crate) fn read(dir: &Path) -> anyhow::Result<Self> {
        read_json(&dir.join(RUN_FILE))
    }

    pub(crate) fn write(&self, dir: &Path) -> anyhow::Result<()> {
        write_atomic(&dir.join(RUN_FILE), &serde_json::to_vec_pretty(self)?)
    }
}

/// A JSON file the command wrote (`run.json`, `evolution.json`, a genome), read back.
pub(crate) fn read_json<T: serde::de::DeserializeOwned>(path: &Path) -> anyhow::Result<T> {
    let bytes = std::fs::read(path).with_context(|| format!("cannot read {}", path.display()))?;
    serde_json::from_slice(&bytes).with_context(|| format!("{} is damaged", path.display()))
}

/// Writes a file through a temporary file and a rename.
pub(crate) fn write_atomic(path: &Path, bytes: &[u8]) -> anyhow::Result<()> {
    let tmp = path.with_extension("tmp");
    std::fs::write(&tmp, bytes).with_context(|| format!("cannot write {}", tmp.display()))?;
    std::fs::File::open(&tmp)
        .and_then(|f| f.sync_all())
        .with_context(|| format!("cannot sync {}", tmp.display()))?;
    std::fs::rename(&tmp, path).with_context(|| format!("cannot write {}", path.display()))
}

pub(crate) fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
        .unwrap_or(0)
}

/// Reads a team or plan file: at most `limit` bytes of UTF-8 text, or a `file:line:column`
/// error at the first invalid byte or where the limit is passed ([`team_file::read`]).
pub(crate) fn read_input(path: &Path, what: &str, limit: usize) -> Result<String, Failure> {
    team_file::read(path, limit).map_err(|e| match e {
        ReadError::Io { source, .. } => {
            bad_input(anyhow::anyhow!("cannot read the {what} {}: {source}", path.display()))
        }
        ReadError::File(e) => bad_input(e),
    })
}

/// `strata run`.
pub(crate) async fn run(args: RunArgs) -> Result<u8, Failure> {
    // Everything the user gave is checked before anything is written. The team file's MCP
    // tools are checked by name first (the servers start in the run's workspace, once it is
    // made: [`start`] checks them again with the tools the servers offer).
    let builtins = ToolRegistry::with_builtins();
    let (team_path, team_text, team, tools) = match &args.start.team {
        Some(path) => {
            let text = read_input(path, "team file", team_file::MAX_TEAM_FILE_BYTES)?;
            let servers = team_file::mcp_servers(path, &text).map_err(bad_input)?;
            let tools = team_file::with_unstarted_tools(&servers, &text, &builtins);
            let team = team_file::parse_team(path, &text, &tools).map_err(bad_input)?;
            (path.clone(), text, team, tools)
        }
        // A goal is planned into roles: the goal example's powers and roles, with the
        // reasoner the command line gives.
        None if args.goal.is_some() => {
            let path = PathBuf::from("(the built-in goal team)");
            let text = goal_team_toml();
            let team = team_file::parse_team(&path, &text, &builtins).map_err(bad_input)?;
            (path, text, team, builtins)
        }
        None => (
            PathBuf::from("(the default team)"),
            team_file::example_team_toml().to_owned(),
            team_file::default_team(),
            builtins,
        ),
    };
    run_with(args, team_path, team_text, team, tools).await
}

/// `strata run` once the team file is read.
async fn run_with(
    args: RunArgs,
    team_path: PathBuf,
    team_text: String,
    mut team: TeamFile,
    mut tools: ToolRegistry,
) -> Result<u8, Failure> {
    if let Some(heartbeat) = args.start.heartbeat {
        team.spec.heartbeat = heartbeat;
    }
    check_reasoners(&team, args.start.reasoner.as_deref(), &ModelFlags::of(&args.start)).await?;
    let (plan_path, plan_text, task) = match (&args.plan, &args.goal) {
        (_, Some(goal)) => {
            let (text, task) = goal_plan(goal, &team, &tools)?;
            (PathBuf::from("--goal"), text, task)
        }
        (Some(plan), None) => {
            let text = read_input(plan, "plan file", team_file::MAX_PLAN_FILE_BYTES)?;
            // The MCP tools it names, too, until the servers offer theirs.
            tools = team_file::with_unstarted_tools(&team.mcp_servers, &text, &tools);
            let task = team_file::parse_plan(plan, &text, &team.spec, &tools).map_err(bad_input)?;
            (plan.clone(), text, task)
        }
        // clap requires one of them.
        (None, None) => {
            return Err(bad_input(anyhow::anyhow!("give a plan file or --goal \"what to do\"")));
        }
    };
    check_planning(&team, args.start.reasoner.as_deref(), &task)?;
    let prepared = Prepared { team_path, team_text, team, plan_path, plan_text, task, tools };
    start(prepared, &args.start).await
}

/// A run whose files are read and checked: the team and plan files as the run stores them
/// (`team.toml`, `plan.toml`, which `resume` reads back) and what they are.
pub(crate) struct Prepared {
    /// The team file, as named in messages.
    pub(crate) team_path: PathBuf,
    /// The team file's text.
    pub(crate) team_text: String,
    /// The team (with `--heartbeat` applied).
    pub(crate) team: TeamFile,
    /// The plan file, as named in messages.
    pub(crate) plan_path: PathBuf,
    /// The plan file's text.
    pub(crate) plan_text: String,
    /// The task.
    pub(crate) task: Task,
    /// The tools the team's executors come from: with a tool that cannot run for each MCP
    /// tool the team file names ([`team_file::with_unstarted_tools`]), replaced by the
    /// servers' own when [`start`] starts them.
    pub(crate) tools: ToolRegistry,
}

/// Starts `prepared` as a new run with `args`' data directory, workspace, run id, reasoner,
/// sync and output options (its plan, goal and team are read already), and drives it to its
/// end: `strata run`, and `strata exec` on the run it generates.
///
/// The team file's MCP servers start once the run's directory and workspace are made (they
/// work in the workspace, as on `resume`); the team and plan files are checked again with
/// their tools. A server that does not start, or a check that fails then, is bad input and
/// the run's directory is removed again: nothing is left written in the data directory.
///
/// A failure caused by a full disk says so ([`disk_full`]).
pub(crate) async fn start(prepared: Prepared, args: &StartArgs) -> Result<u8, Failure> {
    let run_id = args.run_id.clone().unwrap_or_else(|| new_run_id(&prepared.task.id));
    start_as(prepared, args, run_id.clone()).await.map_err(|failure| {
        let dir = args.data.join(&run_id);
        // A run the disk filled up before it was recorded (no run.json: nothing to resume)
        // is removed, so that it can be run again as it was.
        let unrecorded = dir.join(run_store::RUN_MARKER).is_file() && !dir.join(RUN_FILE).exists();
        let way_on = if unrecorded {
            "the run was not recorded yet and is removed: free space and run it again".to_owned()
        } else {
            format!("free space and `strata resume {run_id}`")
        };
        let failure = disk_full(failure, &way_on);
        if unrecorded && matches!(&failure, Failure::Other(e) if e.is::<DiskFull>()) {
            unmake(&dir, &[], &[]);
        }
        failure
    })
}

/// [`start`] as run `run_id`.
async fn start_as(prepared: Prepared, args: &StartArgs, run_id: String) -> Result<u8, Failure> {
    let Prepared { team_path, team_text, team, plan_path, plan_text, task, tools } = prepared;
    if args.data.exists() && !args.data.is_dir() {
        return Err(bad_input(anyhow::anyhow!(
            "the data directory {} is a file; give --data a directory",
            args.data.display()
        )));
    }
    if let Some(workspace) = &args.workspace
        && workspace.exists()
        && !workspace.is_dir()
    {
        return Err(bad_input(anyhow::anyhow!(
            "the workspace {} is a file; give --workspace a directory",
            workspace.display()
        )));
    }

    // Nothing is created for a run whose commands could not be sandboxed.
    let sandbox = sandbox(&team, args.unsandboxed)?;
    // The dashboard's port is taken before anything is written: one in use is bad input.
    let serving = match &args.serve {
        Some(addr) => Some(crate::serve::bind("--serve", addr, None).await?),
        None => None,
    };
    let dir = args.data.join(&run_id);
    // On NATS, the server is checked (it answers, has JetStream, holds no run of this id)
    // before anything is written, there or here.
    let server = match &args.nats {
        Some(url) => Some(crate::nats::connect_new(url, &run_id).await?),
        None => None,
    };
    // With live workers of this version there, the agents are placed on them (checked before
    // anything is written: live workers of another version only refuse the run).
    let registry = match &server {
        Some(server) if !args.local => crate::worker::live_registry(server).await?,
        _ => None,
    };
    let durability = if args.no_sync { Durability::NoSync } else { Durability::Synced };
    // What is made from here on is removed again if the MCP servers do not start.
    let made_data = missing_dirs(&args.data);
    let made_workspace = args.workspace.as_deref().map(missing_dirs).unwrap_or_default();
    let store = match RunStore::create(&dir, &run_id, Timestamp(now_ms()), durability) {
        Ok(store) => store,
        Err(e @ run_store::StoreError::AlreadyExists { .. }) => return Err(bad_input(e)),
        Err(e) => {
            return Err(Failure::Other(
                anyhow::Error::new(e)
                    .context(format!("cannot create the run directory {}", dir.display())),
            ));
        }
    };
    // The run's own workspace unless one was chosen; `resume` finds it in `run.json`.
    let workspace = args.workspace.clone().unwrap_or_else(|| dir.join(RUN_WORKSPACE));
    std::fs::create_dir_all(&workspace)
        .with_context(|| format!("cannot create the workspace {}", workspace.display()))?;
    let workspace = std::fs::canonicalize(&workspace)
        .with_context(|| format!("cannot resolve the workspace {}", workspace.display()))?;
    let place = crate::mcp::Place {
        workspace: &workspace,
        unsandboxed: args.unsandboxed,
        hide: vec![data_dir(&args.data), data_dir(&dir)],
    };
    let started = start_checked(&team_path, &team_text, &team, &plan_path, &plan_text, &place);
    let (servers, tools) = match started.await {
        Ok(Some(started)) => started,
        Ok(None) => (agent_mcp::McpServers::default(), tools),
        Err(failure) => {
            drop(store);
            unmake(&dir, &made_data, &made_workspace);
            return Err(failure);
        }
    };
    write_atomic(&dir.join(TEAM_FILE), team_text.as_bytes())?;
    write_atomic(&dir.join(PLAN_FILE), plan_text.as_bytes())?;
    // The second copy of the run's anchor file, in the data directory (see `runs::ANCHOR_INDEX`).
    store
        .keep_anchor_copy_in(&crate::runs::anchor_index(&dir))
        .context("cannot keep the run's anchor")?;
    let info = RunInfo {
        run_id: run_id.clone(),
        task_id: task.id.clone(),
        goal: task.goal.clone(),
        workspace,
        heartbeat_ms: u64::try_from(team.spec.heartbeat.as_millis()).unwrap_or(u64::MAX),
        reasoner: args.reasoner.clone(),
        flags: ModelFlags::of(args),
        started_at: now_ms(),
        finished_at: None,
        status: RunStatus::Running,
        failure: None,
        unsandboxed: args.unsandboxed,
        nats: server.as_ref().map(|s| s.url().to_owned()),
        local: args.local,
        usage: None,
    };
    let span = run_span(&run_id, &task.id, "started");
    let result = async move {
        // The stores are opened (on NATS: created) before `run.json` is written: a run that
        // `resume` can find has its streams on the server.
        let stores = match &server {
            Some(server) => Stores::nats(server).await?.anchored_in(&store),
            None => Stores::sled(&store)?,
        };
        let nats_audit = stores.nats_audit.clone();
        info.write(&dir)?;
        // The stored inputs' hashes, which `resume` checks before it starts anything.
        crate::inputs::record(stores.audit.as_ref(), &dir).await?;
        view::started(&args.output, &info, &dir);
        warn_if_unsynced(args.no_sync);
        warn_if_unsandboxed(args.unsandboxed);
        let sandbox = sandbox.hide(data_dir(&args.data));
        let (services, ledger) =
            services(&store, stores, &info, &team, tools, sandbox, dir.join(JOURNAL_DIR)).await?;
        let task = store_large_contents(task, &services).await?;
        let placed = match (registry, &server) {
            (Some(registry), Some(server)) => Some(Placed {
                registry,
                server: server.clone(),
                run: PlacedRun::new(&run_id, &team.spec, placed_spec(&team_text, &info, &dir)),
            }),
            _ => None,
        };
        let team_handle = match &placed {
            Some(placed) => placed.coordinate(&team, services.clone()).await?,
            None => Team::start(team.spec.clone(), services.clone())
                .await
                .context("cannot start the team")?,
        };
        team_handle.submit(task.clone()).await.context("cannot submit the task")?;
        let run = Running {
            team: team_handle,
            services,
            store,
            ledger,
            tops: top_ids(&team),
            humans: team.spec.approvals.humans.clone(),
            authority: crate::operator::Authority::of(&team.spec),
            placed,
            nats_audit,
        };
        drive(run, task, info, dir, &args.output, serving).await
    }
    .instrument(span)
    .await;
    servers.shutdown().await;
    result
}

/// A failure whose cause is a full disk (a write refused with `ENOSPC`, wherever it came from:
/// the run's database, the usage ledger, `run.json`), said as such, with the way on; any other
/// failure is returned as it is.
fn disk_full(failure: Failure, way_on: &str) -> Failure {
    let Failure::Other(error) = failure else { return failure };
    let full = error.chain().any(|cause| {
        cause.downcast_ref::<std::io::Error>().is_some_and(|e| {
            e.kind() == std::io::ErrorKind::StorageFull || e.raw_os_error() == Some(28)
        }) || cause.to_string().contains("No space left on device")
    });
    if !full {
        return Failure::Other(error);
    }
    Failure::Other(anyhow::Error::new(DiskFull(format!("{error:#}; {way_on}"))))
}

/// A failure caused by a full disk: what failed, and the way on.
#[derive(Debug, thiserror::Error)]
#[error("the data directory's disk is full (No space left on device): {0}")]
struct DiskFull(String);

/// Starts the MCP servers `team` declares (none: `None`) as `place` says, and checks the
/// team file (`team_text` at `team_path`) and plan file again with their tools; the servers
/// are stopped if a check fails.
async fn start_checked(
    team_path: &Path,
    team_text: &str,
    team: &TeamFile,
    plan_path: &Path,
    plan_text: &str,
    place: &crate::mcp::Place<'_>,
) -> Result<Option<(agent_mcp::McpServers, ToolRegistry)>, Failure> {
    if team.mcp_servers.is_empty() {
        return Ok(None);
    }
    let mut tools = ToolRegistry::with_builtins();
    let servers = crate::mcp::start_servers(team_path, team_text, &mut tools, place).await?;
    let checked = team_file::parse_team(team_path, team_text, &tools).and_then(|checked| {
        team_file::parse_plan(plan_path, plan_text, &checked.spec, &tools).map(|_| ())
    });
    match checked {
        Ok(()) => Ok(Some((servers, tools))),
        Err(e) => {
            servers.shutdown().await;
            Err(bad_input(e))
        }
    }
}

/// `path` and those of its ancestors that do not exist, deepest first: what making `path`
/// makes.
fn missing_dirs(path: &Path) -> Vec<PathBuf> {
    let Ok(path) = std::path::absolute(path) else {
        return Vec::new();
    };
    path.ancestors().take_while(|p| !p.exists()).map(Path::to_path_buf).collect()
}

/// Removes a new run's directory `dir`, then the directories in `made` (deepest first) that
/// are empty: a run refused once its directory was made leaves nothing behind.
fn unmake(dir: &Path, made_data: &[PathBuf], made_workspace: &[PathBuf]) {
    if let Err(e) = std::fs::remove_dir_all(dir) {
        tracing::warn!(dir = %dir.display(), error = %e, "cannot remove the refused run's directory");
    }
    for made in made_data.iter().chain(made_workspace) {
        // Only if empty: what else came to be there is not ours to remove.
        let _ = std::fs::remove_dir(made);
    }
}

/// The plan of `strata run --goal TEXT`: a goal-only plan file (stored in the run as its
/// `plan.toml`, so `resume` reads it like any plan) and the task it is.
fn goal_plan(goal: &str, team: &TeamFile, tools: &ToolRegistry) -> Result<(String, Task), Failure> {
    if goal.trim().is_empty() {
        return Err(bad_input(anyhow::anyhow!(
            "--goal is empty; say in words what the team should achieve"
        )));
    }
    let text = team_file::goal_plan_toml(&goal_task_id(goal), goal);
    let task =
        team_file::parse_plan(Path::new("--goal"), &text, &team.spec, tools).map_err(bad_input)?;
    Ok((text, task))
}

/// The goal example (`examples/goal/team.toml`), from which the built-in goal team is made: a
/// copy inside the crate, since a packaged crate holds no file outside its directory (a test
/// checks that the two are the same).
const GOAL_EXAMPLE: &str = include_str!("run/goal_team.toml");

/// The team of `strata run --goal` without `--team`: the goal example's three powers and
/// `[[roles]]` (its settings too), without its opening comment and its `[reasoner]` table, so
/// that the reasoner is the rule-based default unless `--reasoner`, `--base-url` and `--model`
/// say otherwise (a goal on the rule-based reasoner is refused). Stored in the run as its
/// `team.toml`, which `resume` reads back.
pub(crate) fn goal_team_toml() -> String {
    let mut text = String::from(
        "# The built-in goal team of `strata run --goal` without --team: the powers and roles of\n\
         # examples/goal/team.toml, without its [reasoner] table (the command line gives it).\n\n",
    );
    let mut opening = true;
    let mut in_reasoner = false;
    for line in GOAL_EXAMPLE.lines() {
        let trimmed = line.trim();
        if opening && (trimmed.is_empty() || trimmed.starts_with('#')) {
            continue;
        }
        opening = false;
        if trimmed.starts_with('[') {
            let header = trimmed.split('#').next().unwrap_or_default().trim();
            in_reasoner = header == "[reasoner]";
        }
        if !in_reasoner {
            text.push_str(line);
            text.push('\n');
        }
    }
    text
}

/// The task id of a goal in words: `goal-` and its first words, such as
/// `goal-write-a-readme-for-the`: the same for the same goal, and readable in the run id that
/// starts with it (which adds the time and a random suffix).
fn goal_task_id(goal: &str) -> String {
    const LONGEST: usize = 24;
    let mut slug = String::new();
    for word in goal.split(|c: char| !c.is_ascii_alphanumeric()).filter(|w| !w.is_empty()) {
        let word = word.to_ascii_lowercase();
        if slug.is_empty() {
            slug.extend(word.chars().take(LONGEST));
        } else if slug.len() + 1 + word.len() <= LONGEST {
            slug.push('-');
            slug.push_str(&word);
        } else {
            break;
        }
    }
    if slug.is_empty() { "goal".to_owned() } else { format!("goal-{slug}") }
}

/// Refuses a task with goal steps (or only a goal) when a reasoner that must plan it does not
/// ([`reasoners::check_planning`]): bad input, before anything is written.
pub(crate) fn check_planning(
    team: &TeamFile,
    kind: Option<&str>,
    task: &Task,
) -> Result<(), Failure> {
    reasoners::check_planning(team, reasoner_kind(kind)?, task).map_err(bad_input)
}

/// The task with every large string of its steps' arguments stored once in the run and
/// replaced by a reference (see `agent_core::blob`): messages, decisions, agents' saved state
/// and the audit log then carry a few bytes instead of the content. Storing is idempotent, so
/// a resumed run gets the same references.
async fn store_large_contents(mut task: Task, services: &TeamServices) -> Result<Task, Failure> {
    for step in &mut task.steps {
        agent_core::blob::externalize(
            &mut step.args,
            services.state.as_ref(),
            agent_core::blob::BLOB_THRESHOLD,
        )
        .await
        .context("cannot store the plan's large contents")?;
    }
    Ok(task)
}

/// `strata resume`.
pub(crate) async fn resume(args: ResumeArgs) -> Result<u8, Failure> {
    let dir = resolve_run(&args.data, &args.run)?;
    // The dashboard's port is taken before anything is written: one in use is bad input.
    let serving = match &args.serve {
        Some(addr) => Some(crate::serve::bind("--serve", addr, None).await?),
        None => None,
    };
    let durability = if args.no_sync { Durability::NoSync } else { Durability::Synced };
    let store = RunStore::open(&dir, durability).map_err(bad_input)?;
    // Before anything reads the audit log: a newer anchor in the data directory's copy counts.
    store.keep_anchor_copy_in(&crate::runs::anchor_index(&dir)).map_err(bad_input)?;
    let info = RunInfo::read(&dir).map_err(bad_input)?;
    if matches!(info.status, RunStatus::Succeeded | RunStatus::Failed) {
        view::already_finished(&args.output, &info, &dir);
        return Ok(if info.status == RunStatus::Succeeded { 0 } else { TASK_FAILED });
    }
    // The stored team file, plan and run.json are the ones the run recorded, or nothing starts
    // (no MCP server, no agent).
    crate::inputs::check(&store, &dir, &info).await?;
    let mut tools = ToolRegistry::with_builtins();
    let team_path = dir.join(TEAM_FILE);
    let team_text = read_input(&team_path, "team file", team_file::MAX_TEAM_FILE_BYTES)?;
    // The MCP servers start again (before anything is marked running), with their tools.
    let place = crate::mcp::Place {
        workspace: &info.workspace,
        unsandboxed: info.unsandboxed || args.unsandboxed,
        hide: vec![data_dir(&args.data), dir.clone()],
    };
    let servers = crate::mcp::start_servers(&team_path, &team_text, &mut tools, &place).await?;
    let run_id = info.run_id.clone();
    let result = resume_with(args, dir, store, info, team_path, team_text, tools, serving).await;
    servers.shutdown().await;
    result.map_err(|failure| {
        disk_full(failure, &format!("free space and `strata resume {run_id}` again"))
    })
}

/// `strata resume` once the team file's MCP servers are started.
#[allow(clippy::too_many_arguments, reason = "what `resume` read and checked, passed on")]
async fn resume_with(
    args: ResumeArgs,
    dir: PathBuf,
    store: RunStore,
    mut info: RunInfo,
    team_path: PathBuf,
    team_text: String,
    tools: ToolRegistry,
    serving: Option<crate::serve::Bound>,
) -> Result<u8, Failure> {
    let mut team = team_file::parse_team(&team_path, &team_text, &tools).map_err(bad_input)?;
    team.spec.heartbeat = team_file::check_heartbeat(Duration::from_millis(info.heartbeat_ms))
        .map_err(|m| {
            bad_input(anyhow::anyhow!("{}: `heartbeat_ms`: {m}", dir.join(RUN_FILE).display()))
        })?;
    let plan_path = dir.join(PLAN_FILE);
    let plan_text = read_input(&plan_path, "plan file", team_file::MAX_PLAN_FILE_BYTES)?;
    let task =
        team_file::parse_plan(&plan_path, &plan_text, &team.spec, &tools).map_err(bad_input)?;
    check_planning(&team, info.reasoner.as_deref(), &task)?;
    // Keys, URLs, models and the model file are checked again: the environment may have
    // changed since the run started. Nothing is marked running before they pass.
    check_reasoners(&team, info.reasoner.as_deref(), &info.flags).await?;
    let sandbox = sandbox(&team, args.unsandboxed)?.hide(data_dir(&args.data)).hide(&dir);
    // A run on NATS: its server must answer and hold the run before it is marked running.
    // With live workers of this version there, its agents are placed on them again.
    let (stores, placed) = match &info.nats {
        Some(url) => {
            let server = crate::nats::connect_existing(url, &dir, &info).await?;
            let registry = match info.local {
                true => None,
                false => crate::worker::live_registry(&server).await?,
            };
            let placed = registry.map(|registry| Placed {
                registry,
                server: server.clone(),
                run: PlacedRun::new(
                    &info.run_id,
                    &team.spec,
                    placed_spec(
                        &team_text,
                        &RunInfo {
                            unsandboxed: info.unsandboxed || args.unsandboxed,
                            ..info.clone()
                        },
                        &dir,
                    ),
                ),
            });
            (Stores::nats(&server).await?.anchored_in(&store), placed)
        }
        None => (Stores::sled(&store)?, None),
    };
    let nats_audit = stores.nats_audit.clone();
    info.status = RunStatus::Running;
    info.finished_at = None;
    info.unsandboxed |= args.unsandboxed;
    info.write(&dir)?;
    crate::inputs::record(stores.audit.as_ref(), &dir).await?;
    view::resumed(&args.output, &info, &dir);
    warn_if_unsynced(args.no_sync);
    warn_if_unsandboxed(args.unsandboxed);
    let span = run_span(&info.run_id, &task.id, "resumed");
    async move {
        let (services, ledger) =
            services(&store, stores, &info, &team, tools, sandbox, dir.join(JOURNAL_DIR)).await?;
        let task = store_large_contents(task, &services).await?;
        let team_handle = match &placed {
            Some(placed) => placed.coordinate(&team, services.clone()).await?,
            None => Team::resume(team.spec.clone(), services.clone())
                .await
                .context("cannot resume the team")?,
        };
        if team_handle.outcome(&task.id).is_none() {
            // The task may never have reached the top power before the interruption; a second
            // copy of the assignment is ignored by the power if it already has the task.
            match team_handle.submit(task.clone()).await {
                Ok(()) | Err(agent_pool::SubmitError::Duplicate(_)) => {}
                Err(e) => {
                    return Err(Failure::Other(
                        anyhow::Error::new(e).context("cannot resubmit the task"),
                    ));
                }
            }
        }
        let run = Running {
            team: team_handle,
            services,
            store,
            ledger,
            tops: top_ids(&team),
            humans: team.spec.approvals.humans.clone(),
            authority: crate::operator::Authority::of(&team.spec),
            placed,
            nats_audit,
        };
        drive(run, task, info, dir, &args.output, serving).await
    }
    .instrument(span)
    .await
}

/// A run whose agents are placed on workers (`strata worker`): this process coordinates.
struct Placed {
    registry: Registry,
    /// The run's namespace on the server.
    server: nats_store::NatsStore,
    run: PlacedRun,
}

/// How often the coordinator of a placed run reads the audit log for the workers' records.
const BRIDGE_EVERY: Duration = Duration::from_millis(500);

/// Brings the records a placed run's workers append to its audit log (on the server) to the
/// coordinator's event stream, so its view shows what its agents do elsewhere. It reads the
/// whole log at each pass: fine for a run's thousands of records; reading from the last one
/// is for when logs grow larger.
#[derive(Clone)]
struct Bridge {
    audit: Arc<dyn agent_core::AuditLog>,
    events: agent_core::EventHub,
    /// The last record published.
    last: Arc<tokio::sync::Mutex<Option<u64>>>,
}

impl Bridge {
    /// Publishes the records appended since the last pass.
    async fn pass(&self) {
        let mut last = self.last.lock().await;
        match self.audit.records(None).await {
            Ok(records) => {
                for record in records {
                    if last.is_none_or(|seq| record.seq > seq) {
                        *last = Some(record.seq);
                        self.events.publish(agent_core::TeamEvent::Audit(record));
                    }
                }
            }
            Err(e) => tracing::debug!(error = %e, "cannot read the run's audit log; retrying"),
        }
    }

    /// A pass every [`BRIDGE_EVERY`], until aborted.
    async fn run(self) {
        loop {
            self.pass().await;
            tokio::time::sleep(BRIDGE_EVERY).await;
        }
    }
}

/// How long a finished placed run waits for its workers to shut its agents down.
const RELEASE_PATIENCE: Duration = Duration::from_secs(30);
/// How long a placed run waits for a worker to host its proposing power.
const PLACEMENT_PATIENCE: Duration = Duration::from_secs(60);

impl Placed {
    /// The coordinator's share of the run, and the run placed for the workers to take.
    async fn coordinate(&self, team: &TeamFile, services: TeamServices) -> Result<Team, Failure> {
        let proposer = top_ids(team).into_iter().next();
        let bus = services.bus.clone();
        let (audit, clock) = (services.audit.clone(), services.clock.clone());
        let handle = Team::join(team.spec.clone(), services, Share::Coordinator)
            .await
            .context("cannot start the team")?;
        // The run's guards read the agents the workers host, and lost workers are audited.
        let watch = placement::PlacedWatch::start(
            &self.server,
            self.registry.clone(),
            &self.run,
            audit,
            clock,
        )
        .await
        .context("cannot watch the run's agents on the workers")?;
        handle.watch_remote(watch);
        self.registry.publish(&self.run).await.context("cannot place the run on the workers")?;
        // The task goes to the proposing power once a worker hosts it.
        let Some(proposer) = proposer else { return Ok(handle) };
        let until = tokio::time::Instant::now() + PLACEMENT_PATIENCE;
        loop {
            match bus.is_registered(&proposer).await {
                Ok(true) => return Ok(handle),
                // A bus that fails (its server restarting) is asked again, as patiently.
                Ok(false) | Err(_) if tokio::time::Instant::now() < until => {}
                outcome => {
                    self.withdraw().await;
                    let why = match outcome {
                        Err(e) => format!("the bus failed: {e}"),
                        Ok(_) => format!(
                            "no worker took it within {}s (do the live workers' --agents, --layer and --capacity leave it out?)",
                            PLACEMENT_PATIENCE.as_secs()
                        ),
                    };
                    return Err(Failure::Other(anyhow::anyhow!(
                        "the run could not be placed: the proposing power `{proposer}` is not hosted: {why}"
                    )));
                }
            }
            tokio::time::sleep(self.run.lease_period()).await;
        }
    }

    /// The run is over: the workers shut its agents down and release them.
    async fn close(&self) {
        if let Err(e) = self.registry.close(&self.run.run_id).await {
            errln!("warning: could not tell the workers the run is over: {e}");
            return;
        }
        match placement::wait_released(&self.server, &self.run, RELEASE_PATIENCE).await {
            Ok(true) => {
                // Nothing more for the workers to do with it.
                if let Err(e) = self.registry.remove(&self.run.run_id).await {
                    errln!("warning: could not remove the closed run from the registry: {e}");
                }
            }
            Ok(false) => errln!(
                "warning: some agents were still held by workers {}s after the run closed",
                RELEASE_PATIENCE.as_secs()
            ),
            Err(e) => errln!("warning: could not see the workers release the agents: {e}"),
        }
    }

    /// The run stops here (interrupted, failed): the workers stop its agents, which stay
    /// resumable (`strata resume` places them again).
    async fn withdraw(&self) {
        if let Err(e) = self.registry.remove(&self.run.run_id).await {
            errln!("warning: could not take the run back from the workers: {e}");
        }
    }
}

/// What the workers build a placed run's team from: the team file, the run's reasoner
/// override and sandbox setting, and its workspace (the workers' default); with its goal, task,
/// start and plan (from the run's directory `dir`) for a dashboard on another machine.
fn placed_spec(team_text: &str, info: &RunInfo, dir: &Path) -> serde_json::Value {
    serde_json::to_value(crate::worker::PlacedSpec {
        team: team_text.to_owned(),
        reasoner: info.reasoner.clone(),
        flags: info.flags.clone(),
        unsandboxed: info.unsandboxed,
        workspace: Some(info.workspace.clone()),
        goal: info.goal.clone(),
        task_id: info.task_id.clone(),
        started_at: info.started_at,
        plan: std::fs::read_to_string(dir.join(PLAN_FILE)).ok(),
    })
    .unwrap_or_default()
}

/// The `--reasoner` kind, if one was given.
fn reasoner_kind(kind: Option<&str>) -> Result<Option<ReasonerKind>, Failure> {
    kind.map(|kind| {
        kind.parse::<ReasonerKind>()
            .map_err(|e| bad_input(anyhow::anyhow!("--reasoner {kind}: {e}")))
    })
    .transpose()
}

/// What `--reasoner kind` and `flags` set over the team file's reasoner settings.
fn overrides(kind: Option<&str>, flags: &ModelFlags) -> Result<reasoners::Overrides, Failure> {
    Ok(reasoners::Overrides {
        kind: reasoner_kind(kind)?,
        base_url: flags.base_url.clone(),
        model: flags.model.clone(),
        openai_base_url: flags.openai_base_url.clone(),
        small_model: flags.small_model,
    })
}

/// Every reasoner setting of `team` (with `--reasoner kind` and `flags`), checked before
/// anything is written or marked: a wrong setting is bad input, a server that cannot answer
/// now is not.
pub(crate) async fn check_reasoners(
    team: &TeamFile,
    kind: Option<&str>,
    flags: &ModelFlags,
) -> Result<(), Failure> {
    match reasoners::check(team, &overrides(kind, flags)?).await {
        Ok(()) => Ok(()),
        Err(e @ reasoners::CheckError::Setting(_)) => Err(bad_input(e)),
        Err(e @ reasoners::CheckError::Unavailable(_)) => Err(Failure::Other(e.into())),
    }
}

/// Says so at start when commits are not synced (`--no-sync`).
/// The sandbox of a run's commands: the team file's, checked to work here (else the run is
/// refused, exit 2, saying how to fix it or to pass `--unsandboxed`), or none when
/// `unsandboxed`.
pub(crate) fn sandbox(team: &TeamFile, unsandboxed: bool) -> Result<Sandbox, Failure> {
    if unsandboxed {
        return Ok(Sandbox::unsandboxed().pass_env(team.sandbox.env.iter().cloned()));
    }
    let sandbox = team.sandbox.sandbox();
    sandbox.check().map_err(|err| bad_input(anyhow::anyhow!("cannot start the run: {err}")))?;
    Ok(sandbox)
}

/// The tool registries of the configured agents, and of the roles (for the agents spawned
/// with them), whose commands' network differs from the team's `[sandbox] network` (their own
/// `network`, or their role's): the team's tools with a `shell` that says so.
fn network_tools(
    team: &TeamFile,
    tools: &ToolRegistry,
) -> (NetworkTools<AgentId>, NetworkTools<String>) {
    let settings = &team.sandbox;
    let with_network = |network: bool| -> Option<Arc<ToolRegistry>> {
        if network == settings.network || tools.get(Shell::NAME).is_none() {
            return None;
        }
        let mut own = tools.clone();
        // The built-in `shell`'s schema passes the check, so this cannot fail.
        own.replace(Arc::new(Shell::new().with_network(network))).ok()?;
        Some(Arc::new(own))
    };
    let mut agents = BTreeMap::new();
    for agent in &team.spec.agents {
        let id = &agent.config.id;
        let role = team.spec.agent_roles.get(id).map(String::as_str);
        if let Some(registry) = with_network(settings.network_for(id, role)) {
            agents.insert(id.clone(), registry);
        }
    }
    let mut roles = BTreeMap::new();
    for (role, network) in &settings.role_network {
        if let Some(registry) = with_network(*network) {
            roles.insert(role.clone(), registry);
        }
    }
    (agents, roles)
}

/// Tool registries by agent id or role name.
type NetworkTools<K> = BTreeMap<K, Arc<ToolRegistry>>;

/// The data directory as the sandbox hides it (absolute; every run in it).
fn data_dir(data: &Path) -> PathBuf {
    std::fs::canonicalize(data).unwrap_or_else(|_| std::path::absolute(data).unwrap_or_default())
}

fn warn_if_unsandboxed(unsandboxed: bool) {
    if unsandboxed {
        tracing::warn!("--unsandboxed: shell commands run without a sandbox");
        errln!(
            "warning: --unsandboxed: shell commands run without a sandbox, with your user's files \
             and network; the run records it"
        );
    }
}

fn warn_if_unsynced(no_sync: bool) {
    if no_sync {
        errln!(
            "warning: --no-sync: commits are not fdatasync'ed; a power loss can lose acknowledged data"
        );
    }
}

/// Finds a run by id in `data`, or takes `run` as a directory.
pub(crate) fn resolve_run(data: &Path, run: &str) -> Result<PathBuf, Failure> {
    let by_id = data.join(run);
    let dir = if by_id.is_dir() { by_id } else { PathBuf::from(run) };
    if !dir.is_dir() {
        return Err(bad_input(anyhow::anyhow!(
            "no run `{run}`: it is neither a run id in {} nor a directory; `strata runs` lists the runs",
            data.display()
        )));
    }
    if dir.join(crate::evolve::EVOLUTION_FILE).is_file() {
        return Err(bad_input(anyhow::anyhow!(
            "`{run}` is an evolution, not a team run: `strata inspect {run} lineage` and `strata lineage {run}` show it, `strata evolve --resume {run}` goes on with it"
        )));
    }
    if !dir.join(RUN_FILE).is_file() || !dir.join(run_store::RUN_MARKER).is_file() {
        return Err(bad_input(anyhow::anyhow!(
            "{} is not a Strata run (no {} or {}); `strata runs` lists the runs",
            dir.display(),
            RUN_FILE,
            run_store::RUN_MARKER
        )));
    }
    Ok(dir)
}

/// The team's services on `stores`, and the reasoning (with the run's ledger, if any agent
/// uses a model; the ledger and the conversations are kept in `store`). Every reasoner setting
/// is checked here, before any agent runs.
pub(crate) async fn services(
    store: &RunStore,
    stores: Stores,
    info: &RunInfo,
    team: &TeamFile,
    tools: ToolRegistry,
    sandbox: Sandbox,
    journal: PathBuf,
) -> Result<(TeamServices, Option<Arc<UsageLedger>>), Failure> {
    let overrides = overrides(info.reasoner.as_deref(), &info.flags)?;
    let Stores { bus, boards, governance, audit, state, nats_audit: _ } = stores;
    // MCP servers running outside the sandbox are on the record.
    crate::mcp::audit_opt_outs(team, info.unsandboxed, audit.as_ref()).await?;
    // The team's event stream: the model reasoners publish their answers on it as they stream.
    let events = agent_core::EventHub::default();
    let reasoning = reasoners::build(team, &overrides, store, boards.clone(), &tools, &events)
        .await
        .map_err(bad_input)?;
    let mut context = ToolContext::new(&info.workspace)
        .context("cannot use the workspace")?
        .with_journal(journal)
        // What commands cannot see (the data directory), the file tools cannot reach either.
        .with_masked(sandbox.hidden().to_vec())
        .with_sandbox(sandbox);
    if info.nats.is_some() {
        // Its agents may have run on workers, on other hosts.
        context = context.with_foreign_calls();
    }
    let workspace = Arc::new(context);
    let (agent_tools, role_tools) = network_tools(team, &tools);
    let clock: Arc<dyn agent_core::Clock> = Arc::new(TokioClock::new());
    let services = TeamServices {
        bus,
        boards,
        governance,
        audit,
        state,
        // The team file's `[http]`, `[[endpoints]]` and `[executor]`, in the run's workspace.
        executor: Some(Arc::new(team.executor(workspace.clone()).with_clock(clock.clone()))),
        clock,
        workspace,
        tools: Arc::new(tools),
        reasoner: reasoning.default,
        reasoners: reasoning.per_agent,
        agent_tools,
        role_reasoners: reasoning.per_role,
        role_tools,
        costs: reasoning.ledger.clone().map(|ledger| -> Arc<dyn agent_core::CostMeter> { ledger }),
        events,
    };
    Ok((services, reasoning.ledger))
}

/// A started team and what drives it.
struct Running {
    team: Team,
    services: TeamServices,
    /// The run's store: a failed sync ends the run.
    store: RunStore,
    /// The usage ledger, when some agent reasons with a model.
    ledger: Option<Arc<UsageLedger>>,
    /// The top powers, in file order: the first proposes budget extensions.
    tops: Vec<AgentId>,
    /// The team's `[approvals] humans`: with `on_exceed = "ask_human"` one of them decides
    /// budget extensions.
    humans: Vec<String>,
    /// Who may operate the run (its requests are checked against it as they are applied).
    authority: crate::operator::Authority,
    /// The workers host the agents; this process coordinates.
    placed: Option<Placed>,
    /// The audit log again, when it is on NATS (for the dashboard's verification).
    nats_audit: Option<Arc<agent_core::NatsAuditLog>>,
}

/// The top powers of `team`, in file order.
fn top_ids(team: &TeamFile) -> Vec<AgentId> {
    team.spec
        .agents
        .iter()
        .filter(|a| a.config.layer == agent_state::AgentLayer::Top)
        .map(|a| a.config.id.clone())
        .collect()
}

/// How long after one heartbeat a Ctrl-C waits for the running turns to store what they did.
const INTERRUPT_GRACE: Duration = Duration::from_secs(1);

/// How the run ended.
enum End {
    Outcome(TaskOutcome),
    Interrupted,
    Budget(agent_llm::BudgetExceeded),
    /// A top power or a mid lead failed: which, and why.
    LeaderFailed(AgentId, String),
    /// The run's storage failed: why.
    Storage(String),
}

/// Waits until `store` stops accepting writes (a failed sync), looking every `every`, and
/// returns why: the run must end then rather than retry into a dead store.
async fn storage_failed(store: RunStore, every: Duration) -> String {
    loop {
        if let Some(failure) = store.failure() {
            return failure;
        }
        tokio::time::sleep(every).await;
    }
}

/// Waits until a top power or a mid lead of `team` is failed, looking every `every`, and
/// returns it with the reason of its failure.
///
/// A failed executor is handled by its lead (the step goes to another executor, or the task
/// fails), but nothing brings back a failed top power (it has no supervisor) or lead (its
/// supervisor only notes the error report): a task that needs its signature or its work would
/// wait forever. That happens when an agent's reasoner keeps failing, such as a model API
/// answering 401 or 500 past the agent's retries.
async fn leader_failed(team: Arc<Team>, every: Duration) -> (AgentId, String) {
    loop {
        // A glance at each leader without waiting for its heartbeat; the audit log is read
        // only once one is seen failed, for the reason.
        let failed = [AgentLayer::Top, AgentLayer::Mid]
            .into_iter()
            .flat_map(|layer| team.pool().by_layer(layer))
            .find(|slot| slot.try_peek().is_some_and(|p| p.status == AgentStatus::Failed));
        if let Some(slot) = failed {
            let agent = slot.id().clone();
            let reason = match team.services().audit.records(Some(&agent)).await {
                Ok(records) => records
                    .iter()
                    .rev()
                    .find_map(|r| match &r.event {
                        AuditEvent::Transition { to: AgentStatus::Failed, reason, .. } => {
                            Some(reason.to_string())
                        }
                        _ => None,
                    })
                    .unwrap_or_else(|| "its retries were exhausted".into()),
                Err(e) => format!("(its audit record could not be read: {e})"),
            };
            return (agent, reason);
        }
        tokio::time::sleep(every).await;
    }
}

/// Waits until the ledger stops the run (a budget limit passed or an extension refused).
async fn budget_stop(
    ledger: Option<Arc<UsageLedger>>,
    every: Duration,
) -> agent_llm::BudgetExceeded {
    let Some(ledger) = ledger else {
        return std::future::pending().await;
    };
    loop {
        if let Some(stop) = ledger.check_wall() {
            return stop;
        }
        tokio::time::sleep(every).await;
    }
}

/// Drives `run` to its end, serving the dashboard meanwhile on `serving` (`--serve`): the
/// server sends the run's last records and its end, then stops.
async fn drive(
    run: Running,
    task: Task,
    info: RunInfo,
    dir: PathBuf,
    output: &OutputArgs,
    serving: Option<crate::serve::Bound>,
) -> Result<u8, Failure> {
    let server = match serving {
        Some(bound) => {
            let s = &run.services;
            let live = crate::serve::Live {
                events: s.events.clone(),
                store: run.store.clone(),
                stores: Stores {
                    bus: s.bus.clone(),
                    boards: s.boards.clone(),
                    governance: s.governance.clone(),
                    audit: s.audit.clone(),
                    state: s.state.clone(),
                    nats_audit: run.nats_audit.clone(),
                },
                ledger: run.ledger.clone(),
            };
            let data = dir.parent().map_or_else(|| dir.clone(), Path::to_path_buf);
            Some(crate::serve::serve_run(bound, data, &dir, &info.run_id, live).await?)
        }
        None => None,
    };
    let result = drive_run(run, task, info, dir, output).await;
    if let Some(server) = server {
        server.finish().await;
    }
    result
}

async fn drive_run(
    run: Running,
    task: Task,
    mut info: RunInfo,
    dir: PathBuf,
    output: &OutputArgs,
) -> Result<u8, Failure> {
    let Running { team, services, store, ledger, tops, humans, authority, placed, nats_audit: _ } =
        run;
    let team = Arc::new(team);
    // Mail the workers send (the outcome on `system`) wakes the coordinator at once, and the
    // records the workers' agents append reach the view.
    let follower = placed.as_ref().map(|p| {
        let team = Arc::downgrade(&team);
        placement::follow(&p.server, move |_| {
            if let Some(team) = team.upgrade() {
                team.wake();
            }
        })
    });
    let bridge = placed.as_ref().map(|_| Bridge {
        audit: services.audit.clone(),
        events: services.events.clone(),
        last: Arc::default(),
    });
    let bridging = bridge.clone().map(|b| tokio::spawn(b.run()));
    let watcher =
        view::watch(team.clone(), services.clone(), task.clone(), info.clone(), output.clone());
    // Budget extensions: the top powers sign them ("ask"), or one of the team's humans
    // (`strata approve` / `strata veto`; "ask_human", which the team file allows only with
    // humans listed).
    let desk = match (&ledger, tops.first()) {
        (Some(ledger), Some(proposer)) if ledger.report().budget.on_exceed.asks() => {
            let (signers, humans) = match ledger.report().budget.on_exceed {
                OnExceed::AskHuman => (Vec::new(), humans),
                _ => (tops.clone(), Vec::new()),
            };
            Some(tokio::spawn(
                ApprovalDesk {
                    ledger: ledger.clone(),
                    governance: services.governance.clone(),
                    bus: services.bus.clone(),
                    clock: services.clock.clone(),
                    proposer: proposer.clone(),
                    signers,
                    humans,
                    poll: Duration::from_millis(info.heartbeat_ms.clamp(10, 1_000)),
                }
                .run(),
            ))
        }
        _ => None,
    };
    // A cancel (the dashboard's) stops the run as Ctrl-C does.
    let cancel = Arc::new(crate::operator::Cancel { since_ms: now_ms(), ..Default::default() });
    // Operator requests (`strata approve`, `strata veto`, `strata rollback`, the dashboard's
    // cancel) dropped into the run's inbox.
    let inbox = tokio::spawn(crate::operator::serve(
        dir.clone(),
        authority,
        team.services().governance.clone(),
        team.services().bus.clone(),
        team.services().audit.clone(),
        team.services().clock.clone(),
        Duration::from_millis(info.heartbeat_ms.clamp(50, 500)),
        cancel.clone(),
    ));
    let end = tokio::select! {
        outcome = team.wait(&task.id) => End::Outcome(outcome),
        _ = tokio::signal::ctrl_c() => End::Interrupted,
        () = cancel.asked.notified() => End::Interrupted,
        stop = budget_stop(ledger.clone(), Duration::from_millis(100)) => End::Budget(stop),
        (agent, reason) = leader_failed(team.clone(), Duration::from_millis(100)) => {
            End::LeaderFailed(agent, reason)
        }
        error = storage_failed(store.clone(), Duration::from_millis(100)) => End::Storage(error),
    };
    if let Some(desk) = desk {
        desk.abort();
    }
    inbox.abort();
    if let Some(follower) = follower {
        follower.abort();
    }
    if let Some(placed) = &placed {
        match end {
            End::Outcome(_) => placed.close().await,
            _ => placed.withdraw().await,
        }
    }
    if let (Some(bridging), Some(bridge)) = (bridging, &bridge) {
        bridging.abort();
        // What the workers appended up to now (their agents shut down) is shown.
        bridge.pass().await;
    }
    // The usage ledger stored, and its totals put in run.json (written next).
    let flush = |ledger: &Option<Arc<UsageLedger>>, info: &mut RunInfo| {
        if let Some(ledger) = ledger
            && let Err(e) = ledger.flush()
        {
            tracing::error!(error = %e, "could not store the usage ledger");
        }
        info.usage = RunUsage::of(ledger.as_deref());
    };
    let outcome = match end {
        End::Outcome(outcome) => outcome,
        End::Interrupted => {
            view::interrupting(output);
            // A second Ctrl-C exits at once; what is stored so far is enough to resume.
            tokio::spawn(async {
                if tokio::signal::ctrl_c().await.is_ok() {
                    errln!("stopped at once; the run can still be resumed");
                    std::process::exit(i32::from(INTERRUPTED));
                }
            });
            // The heartbeats stop within one heartbeat (and a second to store what they did);
            // a turn still in a long tool call then is cut short: its call goes on by itself
            // where it runs (a shell command under its journal, to its own timeout) and
            // `resume` takes its result, as after a kill, rather than running it again.
            let patience = Duration::from_millis(info.heartbeat_ms) + INTERRUPT_GRACE;
            let cut_short = !team.stop_within(patience).await;
            if cut_short {
                view::left_running(output);
            }
            watcher.stop().await;
            flush(&ledger, &mut info);
            info.status = RunStatus::Interrupted;
            info.finished_at = Some(now_ms());
            info.write(&dir)?;
            view::interrupted(output, &info, &dir);
            if cut_short {
                // The cut turn's call holds a thread of the blocking pool, which the runtime
                // would wait for on its way out: leave now, as the second Ctrl-C does. What
                // was committed is durable; the run is recovered when it resumes.
                std::process::exit(i32::from(INTERRUPTED));
            }
            return Ok(INTERRUPTED);
        }
        End::Budget(stop) => {
            team.stop().await;
            watcher.stop().await;
            flush(&ledger, &mut info);
            let outcome = TaskOutcome::Failed {
                task_id: task.id.clone(),
                reason: TaskFailure::BudgetExceeded { reason: stop.to_string() },
            };
            info.finished_at = Some(now_ms());
            info.status = RunStatus::Failed;
            info.failure = Some(stop.to_string());
            info.write(&dir)?;
            view::summary(output, &team, &services, &task, &outcome, &info, &dir).await?;
            return Ok(TASK_FAILED);
        }
        End::Storage(error) => {
            // Nothing more can be stored: stop the heartbeats (their writes fail at once), say
            // why, and leave the run resumable. run.json may not be writable either.
            team.stop().await;
            watcher.stop().await;
            let failure = TaskFailure::Storage { error };
            let cause = failure.to_string();
            info.usage = RunUsage::of(ledger.as_deref());
            info.finished_at = Some(now_ms());
            info.status = RunStatus::Interrupted;
            info.failure = Some(cause.clone());
            if let Err(e) = info.write(&dir) {
                errln!("warning: could not record the stop in run.json either: {e}");
            }
            errln!("error: {cause}");
            outln!(
                "run {}: data in {}; resume it with: strata resume {}",
                info.run_id,
                dir.display(),
                info.run_id
            );
            return Ok(TASK_FAILED);
        }
        End::LeaderFailed(agent, reason) => {
            team.stop().await;
            watcher.stop().await;
            flush(&ledger, &mut info);
            let failure = TaskFailure::AgentFailed { agent, reason };
            let cause = failure.to_string();
            let outcome = TaskOutcome::Failed { task_id: task.id.clone(), reason: failure };
            info.finished_at = Some(now_ms());
            info.status = RunStatus::Failed;
            info.failure = Some(cause.clone());
            info.write(&dir)?;
            view::summary(output, &team, &services, &task, &outcome, &info, &dir).await?;
            errln!("error: {cause}");
            return Ok(TASK_FAILED);
        }
    };
    team.shutdown().await.context("the team did not shut down cleanly")?;
    watcher.stop().await;
    flush(&ledger, &mut info);
    info.finished_at = Some(now_ms());
    info.status = if outcome.is_success() { RunStatus::Succeeded } else { RunStatus::Failed };
    if let TaskOutcome::Failed { reason, .. } = &outcome {
        info.failure = Some(reason.to_string());
    }
    info.write(&dir)?;
    view::summary(output, &team, &services, &task, &outcome, &info, &dir).await?;
    Ok(if outcome.is_success() { 0 } else { TASK_FAILED })
}

/// A readable, unique run id: the task id, the UTC time, and four random hex digits.
fn new_run_id(task_id: &str) -> String {
    let secs = now_ms() / 1000;
    let (days, rest) = (secs / 86_400, secs % 86_400);
    let (y, m, d) = civil_from_days(i64::try_from(days).unwrap_or(0));
    let slug: String = task_id
        .chars()
        .map(|c| if c.is_ascii_alphanumeric() || c == '-' { c } else { '-' })
        .take(32)
        .collect();
    let suffix = &uuid::Uuid::new_v4().simple().to_string()[..4];
    format!(
        "{slug}-{y:04}{m:02}{d:02}-{:02}{:02}{:02}-{suffix}",
        rest / 3600,
        rest % 3600 / 60,
        rest % 60
    )
}

/// Days since 1970-01-01 to (year, month, day), proleptic Gregorian (Howard Hinnant's algorithm).
pub(crate) fn civil_from_days(z: i64) -> (i64, u32, u32) {
    let z = z + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let y = yoe + era * 400;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = u32::try_from(doy - (153 * mp + 2) / 5 + 1).unwrap_or(1);
    let m = u32::try_from(if mp < 10 { mp + 3 } else { mp - 9 }).unwrap_or(1);
    (if m <= 2 { y + 1 } else { y }, m, d)
}

/// The telemetry span of a run in this process (`strata run`, `resume`): every agent's and
/// task's span in it knows the run ([`agent_core::otel`]). Disabled when telemetry is off.
pub(crate) fn run_span(run_id: &str, task_id: &str, how: &'static str) -> tracing::Span {
    if !agent_core::otel::enabled() {
        return tracing::Span::none();
    }
    tracing::info_span!(
        target: "strata::otel",
        "strata.run",
        run.id = run_id,
        run.task = task_id,
        run.how = how,
        strata.version = env!("CARGO_PKG_VERSION"),
    )
}
