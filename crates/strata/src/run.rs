//! The durable run of a team file: start one ([`Run::start`]), resume one ([`Run::resume`]),
//! and drive it to its end ([`Run::drive`]), with its directory, `run.json`, stores, services,
//! MCP servers, budget desk and, on NATS, its placement on workers.
//!
//! Everything the user gave is checked before anything is written ([`Prepared`]); a run
//! refused once its directory was made (an MCP server that does not start) leaves nothing
//! behind. A failure caused by a full disk says so, with the way on.
//!
//! What a front end shows (progress, a summary, warnings) it learns from an [`Observer`] and
//! from what [`Run::drive`] returns ([`Ended`]); the engine prints nothing.
//!
//! [`resume_in_background`] resumes a run in a process of its own (the dashboard's resume).
//!
//! ```no_run
//! # async fn go() -> strata::Result<()> {
//! use std::path::Path;
//! use strata::run::{Prepared, Run, StartOptions};
//!
//! let prepared = Prepared::from_files(
//!     Some(Path::new("examples/hello/team.toml")),
//!     Path::new("examples/hello/plan.toml"),
//!     &StartOptions::new(".strata/runs"),
//! )
//! .await?;
//! let run = Run::start(prepared, &StartOptions::new(".strata/runs")).await?;
//! let ended = run.drive(std::future::pending()).await?;
//! println!("{}: {}", ended.info.run_id, ended.info.status.as_str());
//! # Ok(()) }
//! ```

use std::future::Future;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use agent_core::AuditEvent;
use agent_core::tools::ToolRegistry;
use agent_llm::{ApprovalDesk, OnExceed, UsageLedger};
use agent_pool::placement::{self, PlacedRun, Registry};
use agent_pool::{Share, Team, TeamServices};
use agent_state::{
    AgentId, AgentLayer, AgentStatus, RunId, Task, TaskFailure, TaskOutcome, Timestamp,
};
use run_store::{Durability, RunStore};
use team_file::{ReadError, TeamFile};
use tracing::Instrument as _;

use crate::error::{Context as _, Error, Result};
use crate::run_dir::{
    JOURNAL_DIR, ModelFlags, PLAN_FILE, RUN_FILE, RUN_WORKSPACE, RunInfo, RunStatus, RunUsage,
    TEAM_FILE, data_dir, new_run_id, now_ms, resolve_run, write_atomic,
};
use crate::services::{
    Tooling, check_planning, check_reasoners, sandbox, services, store_large_contents, top_ids,
};
use crate::stores::Stores;

mod background;
pub use background::{BackgroundError, BackgroundResume, resume_in_background};

/// What a front end is told as a run goes, beside what [`Run::drive`] returns.
pub trait Observer: Send + Sync {
    /// The run is recorded (`run.json` written, its inputs' hashes in its audit log), started
    /// or resumed, and its team is about to start.
    fn recorded(&self, info: &RunInfo, dir: &Path, how: How) {
        let _ = (info, dir, how);
    }

    /// A warning for the user (an MCP server outside the sandbox, workers that did not
    /// answer): logged by default.
    fn warn(&self, text: &str) {
        tracing::warn!("{text}");
    }
}

/// An observer that only logs.
#[derive(Debug, Default)]
pub struct Quiet;

impl Observer for Quiet {}

/// How a run came to be running.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum How {
    /// A new run.
    Started,
    /// An existing run, resumed.
    Resumed,
}

/// How a new run is started: where its data goes, where it works, what it reasons with.
#[derive(Clone)]
pub struct StartOptions {
    /// The data directory (the run's directory is `<data>/<run id>`).
    pub data: PathBuf,
    /// The workspace the tools work in; `None`: the run's own (`<run dir>/workspace`).
    pub workspace: Option<PathBuf>,
    /// The run id; `None`: a new one from the task id and the time ([`new_run_id`]).
    pub run_id: Option<RunId>,
    /// The heartbeat, over the team file's.
    pub heartbeat: Option<Duration>,
    /// The reasoner kind over the team file's (`rule_based`, `openai`, `anthropic`, `local`).
    pub reasoner: Option<String>,
    /// `--base-url`, `--model`, `--small-model` and `$OPENAI_BASE_URL`.
    pub flags: ModelFlags,
    /// Commands run without the sandbox (recorded in the run).
    pub unsandboxed: bool,
    /// Commits are not synced to disk (faster; a power loss can lose acknowledged data).
    pub no_sync: bool,
    /// The run's stores on this NATS JetStream server instead of its sled database.
    pub nats: Option<String>,
    /// On NATS, every agent runs in this process even when workers are live.
    pub local: bool,
    /// What the front end is told.
    pub observer: Arc<dyn Observer>,
}

impl StartOptions {
    /// A run in the data directory `data`, with the team file's settings, synced, sandboxed,
    /// on its own sled database.
    pub fn new(data: impl Into<PathBuf>) -> Self {
        Self {
            data: data.into(),
            workspace: None,
            run_id: None,
            heartbeat: None,
            reasoner: None,
            flags: ModelFlags::with_env(None, None, false),
            unsandboxed: false,
            no_sync: false,
            nats: None,
            local: false,
            observer: Arc::new(Quiet),
        }
    }
}

/// How a run is resumed.
#[derive(Clone)]
pub struct ResumeOptions {
    /// The data directory the run is in.
    pub data: PathBuf,
    /// Commands run without the sandbox from now on (recorded in the run).
    pub unsandboxed: bool,
    /// Commits are not synced to disk.
    pub no_sync: bool,
    /// What the front end is told.
    pub observer: Arc<dyn Observer>,
}

impl ResumeOptions {
    /// A resume of a run in the data directory `data`, synced, sandboxed.
    pub fn new(data: impl Into<PathBuf>) -> Self {
        Self { data: data.into(), unsandboxed: false, no_sync: false, observer: Arc::new(Quiet) }
    }
}

/// Reads a team or plan file: at most `limit` bytes of UTF-8 text, or a `file:line:column`
/// error at the first invalid byte or where the limit is passed ([`team_file::read`]).
pub fn read_input(path: &Path, what: &str, limit: usize) -> Result<String> {
    team_file::read(path, limit).map_err(|e| match e {
        ReadError::Io { source, .. } => {
            Error::bad_input(format!("cannot read the {what} {}: {source}", path.display()))
        }
        ReadError::File(e) => Error::bad_input_from(e),
    })
}

/// Reads the team file at `path` and checks it as a stored run's is: its MCP servers' tools
/// are not started, so a tool list naming one is taken as it is. Bad input names what to fix.
pub fn read_team(path: &Path) -> Result<TeamFile> {
    let text = read_input(path, "team file", team_file::MAX_TEAM_FILE_BYTES)?;
    team_file::parse_stored_team(path, &text, &ToolRegistry::with_builtins())
        .map_err(Error::bad_input_from)
}

/// A run whose files are read and checked: the team and plan files as the run stores them
/// (`team.toml`, `plan.toml`, which `resume` reads back) and what they are. A copy starts
/// another run of the same files (`strata eval` starts each attempt from one).
#[derive(Clone)]
pub struct Prepared {
    /// The team file, as named in messages.
    pub team_path: PathBuf,
    /// The team file's text.
    pub team_text: String,
    /// The team (with the heartbeat override applied).
    pub team: TeamFile,
    /// The plan file, as named in messages.
    pub plan_path: PathBuf,
    /// The plan file's text.
    pub plan_text: String,
    /// The task.
    pub task: Task,
    /// The tools the team's executors come from: with a tool that cannot run for each MCP
    /// tool the team file names ([`team_file::with_unstarted_tools`]), replaced by the
    /// servers' own when [`Run::start`] starts them.
    pub tools: ToolRegistry,
}

/// Where a new run's team comes from.
enum TeamSource<'a> {
    /// A team file.
    File(&'a Path),
    /// The built-in goal team ([`goal_team_toml`]).
    Goal,
    /// The default team (`team_file::default_team`).
    Default,
}

/// Where a new run's plan comes from.
enum PlanSource<'a> {
    /// A plan file.
    File(&'a Path),
    /// A goal in words.
    Goal(&'a str),
}

impl Prepared {
    /// The team file at `team` (`None`: the default team) and the plan file at `plan`, read
    /// and checked with `options`' heartbeat and reasoner: bad input names the file, the line
    /// and what to fix.
    pub async fn from_files(
        team: Option<&Path>,
        plan: &Path,
        options: &StartOptions,
    ) -> Result<Self> {
        let team = team.map_or(TeamSource::Default, TeamSource::File);
        Self::read(team, PlanSource::File(plan), options).await
    }

    /// A goal in words for the team file at `team` (`None`: the built-in goal team, whose
    /// roles a planning reasoner fills), checked with `options`.
    pub async fn from_goal(
        team: Option<&Path>,
        goal: &str,
        options: &StartOptions,
    ) -> Result<Self> {
        let team = team.map_or(TeamSource::Goal, TeamSource::File);
        Self::read(team, PlanSource::Goal(goal), options).await
    }

    /// One executor-kind run (`strata exec`): the kind `kind` on `objective` with its
    /// `inputs` (JSON, `null` for none), as a one-step plan for the team file at `team` (`None`:
    /// the default team) with an executor of that kind. The request is checked against the
    /// kind's inputs once the team file is read.
    pub async fn from_exec(
        team: Option<&Path>,
        kind: &str,
        objective: &str,
        inputs: serde_json::Value,
        options: &StartOptions,
    ) -> Result<Self> {
        let (team_path, team_text) = match team {
            Some(path) => {
                (path.to_path_buf(), read_input(path, "team file", team_file::MAX_TEAM_FILE_BYTES)?)
            }
            None => {
                (PathBuf::from("(the default team)"), team_file::example_team_toml().to_owned())
            }
        };
        let request = agent_executor::RunRequest::new(kind, objective).with_inputs(inputs.clone());
        agent_executor::Executor::new(agent_executor::builtins())
            .check(&request)
            .map_err(Error::bad_input_from)?;
        // The team file's MCP tools are checked by name here; `Run::start` starts the servers
        // in the run's workspace and checks again with their tools.
        let servers =
            team_file::mcp_servers(&team_path, &team_text).map_err(Error::bad_input_from)?;
        let tools =
            team_file::with_unstarted_tools(&servers, &team_text, &ToolRegistry::with_builtins());
        let exec = team_file::with_executor_kind(&team_path, &team_text, kind, &tools)
            .map_err(Error::bad_input_from)?;
        let mut team = exec.team;
        if let Some(heartbeat) = options.heartbeat {
            team.spec.heartbeat = heartbeat;
        }
        let reasoner = options.reasoner.as_deref();
        check_reasoners(&team, reasoner, &options.flags).await?;
        let plan_text = team_file::exec_plan_toml(kind, objective, &inputs, &exec.executor)
            .map_err(|m| Error::bad_input(format!("inputs of the `{kind}` run: {m}")))?;
        let plan_path = PathBuf::from("(the exec plan)");
        let task = team_file::parse_plan(&plan_path, &plan_text, &team.spec, &tools)
            .map_err(Error::bad_input_from)?;
        check_planning(&team, reasoner, &task)?;
        Ok(Self { team_path, team_text: exec.text, team, plan_path, plan_text, task, tools })
    }

    async fn read(
        team: TeamSource<'_>,
        plan: PlanSource<'_>,
        options: &StartOptions,
    ) -> Result<Self> {
        // Everything the user gave is checked before anything is written. The team file's MCP
        // tools are checked by name first (the servers start in the run's workspace, once it is
        // made: [`Run::start`] checks them again with the tools the servers offer).
        let builtins = ToolRegistry::with_builtins();
        let (team_path, team_text, mut team, mut tools) = match team {
            TeamSource::File(path) => {
                let text = read_input(path, "team file", team_file::MAX_TEAM_FILE_BYTES)?;
                let servers = team_file::mcp_servers(path, &text).map_err(Error::bad_input_from)?;
                let tools = team_file::with_unstarted_tools(&servers, &text, &builtins);
                let team =
                    team_file::parse_team(path, &text, &tools).map_err(Error::bad_input_from)?;
                (path.to_path_buf(), text, team, tools)
            }
            // A goal is planned into roles: the goal example's powers and roles, with the
            // reasoner the options give.
            TeamSource::Goal => {
                let path = PathBuf::from("(the built-in goal team)");
                let text = goal_team_toml();
                let team = team_file::parse_team(&path, &text, &builtins)
                    .map_err(Error::bad_input_from)?;
                (path, text, team, builtins)
            }
            TeamSource::Default => (
                PathBuf::from("(the default team)"),
                team_file::example_team_toml().to_owned(),
                team_file::default_team(),
                builtins,
            ),
        };
        if let Some(heartbeat) = options.heartbeat {
            team.spec.heartbeat = heartbeat;
        }
        let reasoner = options.reasoner.as_deref();
        check_reasoners(&team, reasoner, &options.flags).await?;
        let (plan_path, plan_text, task) = match plan {
            PlanSource::Goal(goal) => {
                let (text, task) = goal_plan(goal, &team, &tools)?;
                (PathBuf::from("--goal"), text, task)
            }
            PlanSource::File(plan) => {
                let text = read_input(plan, "plan file", team_file::MAX_PLAN_FILE_BYTES)?;
                // The MCP tools it names, too, until the servers offer theirs.
                tools = team_file::with_unstarted_tools(&team.mcp_servers, &text, &tools);
                let task = team_file::parse_plan(plan, &text, &team.spec, &tools)
                    .map_err(Error::bad_input_from)?;
                (plan.to_path_buf(), text, task)
            }
        };
        check_planning(&team, reasoner, &task)?;
        Ok(Self { team_path, team_text, team, plan_path, plan_text, task, tools })
    }
}

/// A run that is recorded and whose team is working: drive it to its end with
/// [`Run::drive`].
pub struct Run {
    team: Arc<Team>,
    services: TeamServices,
    /// The run's store: a failed sync ends the run.
    store: RunStore,
    /// The usage ledger, when some agent reasons with a model.
    ledger: Option<Arc<UsageLedger>>,
    /// The team file as the run uses it.
    team_file: TeamFile,
    /// The workers host the agents; this process coordinates.
    placed: Option<Placed>,
    /// The audit log again, when it is on NATS (for a verification of the live run).
    nats_audit: Option<Arc<agent_core::NatsAuditLog>>,
    /// The team file's MCP servers, stopped when the run ends.
    servers: agent_mcp::McpServers,
    /// What the front end is told.
    observer: Arc<dyn Observer>,
    task: Task,
    info: RunInfo,
    dir: PathBuf,
    span: tracing::Span,
}

/// What [`Run::resume`] found.
pub enum Resumed {
    /// The run had ended already: nothing was started.
    Finished {
        /// Its `run.json`.
        info: Box<RunInfo>,
        /// Its directory.
        dir: PathBuf,
    },
    /// The run goes on.
    Running(Box<Run>),
}

/// How a run ended.
#[derive(Debug)]
pub enum End {
    /// The task has an outcome.
    Outcome(TaskOutcome),
    /// Stopped by the caller (Ctrl-C, a cancel); resumable. `cut_short`: a turn was still in a
    /// long tool call after the patience (it goes on by itself where it runs, and the
    /// process had better exit now rather than wait for it).
    Interrupted {
        /// A turn was cut short.
        cut_short: bool,
    },
    /// The budget stopped it: the task failed.
    Budget(agent_llm::BudgetExceeded),
    /// A top power or a mid lead failed: which, and why; the task failed.
    LeaderFailed(AgentId, String),
    /// The run's storage failed: why. The run stays resumable.
    Storage(String),
}

/// A run driven to its end. Its database stays open (and locked to this process) while this
/// value, which holds its team and services, lives.
pub struct Ended {
    /// How it ended.
    pub end: End,
    /// Its `run.json` as written at the end.
    pub info: RunInfo,
    /// Its directory.
    pub dir: PathBuf,
    /// The team (stopped or shut down).
    pub team: Arc<Team>,
    /// Its services.
    pub services: TeamServices,
    /// The task.
    pub task: Task,
}

impl Ended {
    /// The task's outcome, when it has one: its own, or a failure by budget or a leader.
    pub fn outcome(&self) -> Option<TaskOutcome> {
        let task_id = self.task.id.clone();
        match &self.end {
            End::Outcome(outcome) => Some(outcome.clone()),
            End::Budget(stop) => Some(TaskOutcome::Failed {
                task_id,
                reason: TaskFailure::BudgetExceeded { reason: stop.to_string() },
            }),
            End::LeaderFailed(agent, reason) => Some(TaskOutcome::Failed {
                task_id,
                reason: TaskFailure::AgentFailed { agent: agent.clone(), reason: reason.clone() },
            }),
            End::Interrupted { .. } | End::Storage(_) => None,
        }
    }

    /// Whether the task succeeded.
    pub fn succeeded(&self) -> bool {
        matches!(&self.end, End::Outcome(outcome) if outcome.is_success())
    }
}

/// How long after one heartbeat a stop waits for the running turns to store what they did.
const INTERRUPT_GRACE: Duration = Duration::from_secs(1);

impl Run {
    /// Starts `prepared` as a new run with `options`, and submits its task.
    ///
    /// The team file's MCP servers start once the run's directory and workspace are made
    /// (they work in the workspace, as on resume); the team and plan files are checked again
    /// with their tools. A server that does not start, or a check that fails then, is bad
    /// input and the run's directory is removed again: nothing is left written in the data
    /// directory. A failure caused by a full disk says so.
    pub async fn start(prepared: Prepared, options: &StartOptions) -> Result<Self> {
        let run_id = match &options.run_id {
            Some(id) => id.clone(),
            None => new_run_id(&prepared.task.id),
        };
        Self::start_as(prepared, options, run_id.clone()).await.map_err(|error| {
            let dir = options.data.join(&run_id);
            // A run the disk filled up before it was recorded (no run.json: nothing to
            // resume) is removed, so that it can be run again as it was.
            let unrecorded =
                dir.join(run_store::RUN_MARKER).is_file() && !dir.join(RUN_FILE).exists();
            let way_on = if unrecorded {
                "the run was not recorded yet and is removed: free space and run it again"
                    .to_owned()
            } else {
                format!("free space and `strata resume {run_id}`")
            };
            let (error, full) = disk_full(error, &way_on);
            if unrecorded && full {
                unmake(&dir, &[], &[]);
            }
            error
        })
    }

    async fn start_as(prepared: Prepared, options: &StartOptions, run_id: RunId) -> Result<Self> {
        let Prepared { team_path, team_text, team, plan_path, plan_text, task, tools } = prepared;
        let data = &options.data;
        check_dirs(data, options.workspace.as_deref())?;
        // Nothing is created for a run whose commands could not be sandboxed.
        let sandbox = sandbox(&team, options.unsandboxed)?;
        let dir = data.join(&run_id);
        // On NATS, the server is checked (it answers, has JetStream, holds no run of this
        // id) before anything is written, there or here.
        let server = match &options.nats {
            Some(url) => Some(crate::stores::connect_new(url, &run_id).await?),
            None => None,
        };
        // With live workers of this version there, the agents are placed on them (checked
        // before anything is written: live workers of another version only refuse the run).
        let registry = match &server {
            Some(server) if !options.local => crate::placement::live_registry(server).await?,
            _ => None,
        };
        // What is made from here on is removed again if the MCP servers do not start.
        let made_data = missing_dirs(data);
        let made_workspace = options.workspace.as_deref().map(missing_dirs).unwrap_or_default();
        let store = create_store(&dir, &run_id, options.no_sync)?;
        let workspace = run_workspace(options.workspace.as_deref(), &dir)?;
        let observer = options.observer.clone();
        let warn = move |text: &str| observer.warn(text);
        let place = crate::mcp::Place {
            workspace: &workspace,
            unsandboxed: options.unsandboxed,
            hide: vec![data_dir(data), data_dir(&dir)],
            warn: &warn,
        };
        let started = start_checked(&team_path, &team_text, &team, &plan_path, &plan_text, &place);
        let (servers, tools) = match started.await {
            Ok(Some(started)) => started,
            Ok(None) => (agent_mcp::McpServers::default(), tools),
            Err(error) => {
                drop(store);
                unmake(&dir, &made_data, &made_workspace);
                return Err(error);
            }
        };
        let info = RunInfo {
            nats: server.as_ref().map(|s| s.url().to_owned()),
            ..started_info(&run_id, &task, workspace, &team, options)
        };
        let span = run_span(&run_id, &task.id, "started");
        let tooling = Tooling {
            tools,
            sandbox: sandbox.hide(data_dir(data)),
            journal: dir.join(JOURNAL_DIR),
        };
        let recording = Recording { store, team, team_text, plan_text, task, info, dir, tooling };
        let begun = recording.begin(server, registry, options).instrument(span.clone()).await;
        match begun {
            Ok(run) => Ok(Run { servers, span, observer: options.observer.clone(), ..run }),
            Err(error) => {
                servers.shutdown().await;
                Err(error)
            }
        }
    }

    /// Resumes the run `run` (an id in `options.data`, or a directory): its stored team file,
    /// plan and `run.json` must be the ones it recorded (else bad input, nothing started); its
    /// MCP servers start again, its agents are restored from the stores, and the task goes on
    /// where it stopped. A run that has ended already is [`Resumed::Finished`].
    pub async fn resume(run: &str, options: &ResumeOptions) -> Result<Resumed> {
        let dir = resolve_run(&options.data, run)?;
        let durability = if options.no_sync { Durability::NoSync } else { Durability::Synced };
        let store = RunStore::open(&dir, durability).map_err(Error::bad_input_from)?;
        // Before anything reads the audit log: a newer anchor in the data directory's copy
        // counts.
        store
            .keep_anchor_copy_in(&crate::run_dir::anchor_index(&dir))
            .map_err(Error::bad_input_from)?;
        let info = RunInfo::read(&dir).map_err(Error::bad_input_from)?;
        if matches!(info.status, RunStatus::Succeeded | RunStatus::Failed) {
            return Ok(Resumed::Finished { info: Box::new(info), dir });
        }
        // The stored team file, plan and run.json are the ones the run recorded, or nothing
        // starts (no MCP server, no agent).
        crate::inputs::check(&store, &dir, &info).await?;
        let mut tools = ToolRegistry::with_builtins();
        let team_path = dir.join(TEAM_FILE);
        let team_text = read_input(&team_path, "team file", team_file::MAX_TEAM_FILE_BYTES)?;
        // The MCP servers start again (before anything is marked running), with their tools.
        let observer = options.observer.clone();
        let warn = move |text: &str| observer.warn(text);
        let place = crate::mcp::Place {
            workspace: &info.workspace,
            unsandboxed: info.unsandboxed || options.unsandboxed,
            hide: vec![data_dir(&options.data), dir.clone()],
            warn: &warn,
        };
        let servers = crate::mcp::start_servers(&team_path, &team_text, &mut tools, &place).await?;
        let run_id = info.run_id.clone();
        let stored = Stored { dir, store, info, team_path, team_text, tools };
        match stored.resume(options).await {
            Ok((run, span)) => {
                let observer = options.observer.clone();
                Ok(Resumed::Running(Box::new(Run { servers, span, observer, ..run })))
            }
            Err(error) => {
                servers.shutdown().await;
                Err(disk_full(error, &format!("free space and `strata resume {run_id}` again")).0)
            }
        }
    }

    /// `run.json` as it is now.
    pub fn info(&self) -> &RunInfo {
        &self.info
    }

    /// The run's directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The working team.
    pub fn team(&self) -> &Arc<Team> {
        &self.team
    }

    /// The team's services (stores, tools, reasoners, events).
    pub fn services(&self) -> &TeamServices {
        &self.services
    }

    /// The run's store.
    pub fn store(&self) -> &RunStore {
        &self.store
    }

    /// The usage ledger, when some agent reasons with a model.
    pub fn ledger(&self) -> Option<&Arc<UsageLedger>> {
        self.ledger.as_ref()
    }

    /// The team file as the run uses it.
    pub fn team_file(&self) -> &TeamFile {
        &self.team_file
    }

    /// The task.
    pub fn task(&self) -> &Task {
        &self.task
    }

    /// The run's stores, as a reader of the live run sees them.
    pub fn stores(&self) -> Stores {
        let s = &self.services;
        Stores {
            bus: s.bus.clone(),
            boards: s.boards.clone(),
            governance: s.governance.clone(),
            audit: s.audit.clone(),
            state: s.state.clone(),
            nats_audit: self.nats_audit.clone(),
        }
    }

    /// What the dashboard follows of this run ([`crate::dashboard::Live`]): its event stream,
    /// its store and stores in memory, its usage ledger.
    pub fn live(&self) -> crate::dashboard::Live {
        crate::dashboard::Live {
            events: self.services.events.clone(),
            store: self.store.clone(),
            stores: self.stores(),
            ledger: self.ledger.clone(),
        }
    }

    /// The server of the run's operator inbox ([`crate::operator::serve`]): the requests of
    /// `strata approve`, `veto`, `rollback`, `adopt` and the dashboard, read every heartbeat
    /// (50 to 500 ms) and applied with the team file's authority; a cancel is told through
    /// `cancel`.
    pub fn operator_server(&self, cancel: Arc<crate::operator::Cancel>) -> crate::operator::Server {
        let s = &self.services;
        crate::operator::Server {
            dir: self.dir.clone(),
            authority: crate::operator::Authority::of(&self.team_file.spec),
            governance: s.governance.clone(),
            bus: s.bus.clone(),
            audit: s.audit.clone(),
            clock: s.clock.clone(),
            every: Duration::from_millis(self.info.heartbeat_ms.clamp(50, 500)),
            cancel,
        }
    }

    /// Drives the run to its end: the task's outcome, a budget stop, a failed leader, a
    /// storage failure, or `stop` (Ctrl-C, a cancel: the heartbeats stop within one
    /// heartbeat and a grace, and the run stays resumable). `run.json` records the end and
    /// the usage; the MCP servers are stopped.
    pub async fn drive(mut self, stop: impl Future<Output = ()>) -> Result<Ended> {
        let span = self.span.clone();
        let servers = std::mem::take(&mut self.servers);
        let result = self.drive_to_end(stop).instrument(span).await;
        servers.shutdown().await;
        result
    }

    /// [`Self::drive`] with the run's operator inbox served meanwhile
    /// ([`Self::operator_server`]: `strata approve`, `veto`, `rollback`, `adopt`, the
    /// dashboard's cancel), as `strata run` drives a run: `stop` or an applied cancel stops
    /// it, resumable, and `stopping` is called then, once (to say so).
    pub async fn drive_operated(
        self,
        stop: impl Future<Output = ()>,
        stopping: impl FnOnce(),
    ) -> Result<Ended> {
        let cancel = Arc::new(crate::operator::Cancel { since_ms: now_ms(), ..Default::default() });
        let inbox = tokio::spawn(crate::operator::serve(self.operator_server(cancel.clone())));
        let stop = async move {
            tokio::select! {
                () = stop => {}
                () = cancel.asked.notified() => {}
            }
            stopping();
        };
        let ended = self.drive(stop).await;
        inbox.abort();
        ended
    }
}

/// A recorded run whose team is about to start (or resume) on its stores.
struct Working {
    store: RunStore,
    stores: Stores,
    team: TeamFile,
    placed: Option<Placed>,
    tooling: Tooling,
    task: Task,
    info: RunInfo,
    dir: PathBuf,
}

impl Working {
    /// Builds the team's services, starts (or resumes) the team and submits the task (again,
    /// on resume, if it has no outcome yet): the run, without its MCP servers and span.
    async fn begin(self, how: How) -> Result<Run> {
        let Working { store, stores, team, placed, tooling, task, info, dir } = self;
        let nats_audit = stores.nats_audit.clone();
        let (services, ledger) = services(&store, stores, &info, &team, tooling).await?;
        let task = store_large_contents(task, &services).await?;
        let handle = match (&placed, how) {
            (Some(placed), _) => placed.coordinate(&team, services.clone()).await?,
            (None, How::Started) => Team::start(team.spec.clone(), services.clone())
                .await
                .context("cannot start the team")?,
            (None, How::Resumed) => Team::resume(team.spec.clone(), services.clone())
                .await
                .context("cannot resume the team")?,
        };
        match how {
            How::Started => {
                handle.submit(task.clone()).await.context("cannot submit the task")?;
            }
            // The task may never have reached the top power before the interruption; a
            // second copy of the assignment is ignored by the power if it has the task.
            How::Resumed if handle.outcome(&task.id).is_none() => {
                match handle.submit(task.clone()).await {
                    Ok(()) | Err(agent_pool::SubmitError::Duplicate(_)) => {}
                    Err(e) => {
                        return Err(Error::failed_from(e).context("cannot resubmit the task"));
                    }
                }
            }
            How::Resumed => {}
        }
        Ok(Run {
            team: Arc::new(handle),
            services,
            store,
            ledger,
            team_file: team,
            placed,
            nats_audit,
            servers: agent_mcp::McpServers::default(),
            observer: Arc::new(Quiet),
            task,
            info,
            dir,
            span: tracing::Span::none(),
        })
    }
}

/// A run being resumed, its MCP servers started: what was read from its directory.
struct Stored {
    dir: PathBuf,
    store: RunStore,
    info: RunInfo,
    team_path: PathBuf,
    team_text: String,
    tools: ToolRegistry,
}

impl Stored {
    /// Checks the stored files again with the servers' tools and the environment, marks the
    /// run running and resumes its team.
    async fn resume(self, options: &ResumeOptions) -> Result<(Run, tracing::Span)> {
        let Stored { dir, store, mut info, team_path, team_text, tools } = self;
        let mut team =
            team_file::parse_team(&team_path, &team_text, &tools).map_err(Error::bad_input_from)?;
        team.spec.heartbeat = team_file::check_heartbeat(Duration::from_millis(info.heartbeat_ms))
            .map_err(|m| {
                Error::bad_input(format!("{}: `heartbeat_ms`: {m}", dir.join(RUN_FILE).display()))
            })?;
        let plan_path = dir.join(PLAN_FILE);
        let plan_text = read_input(&plan_path, "plan file", team_file::MAX_PLAN_FILE_BYTES)?;
        let task = team_file::parse_plan(&plan_path, &plan_text, &team.spec, &tools)
            .map_err(Error::bad_input_from)?;
        check_planning(&team, info.reasoner.as_deref(), &task)?;
        // Keys, URLs, models and the model file are checked again: the environment may have
        // changed since the run started. Nothing is marked running before they pass.
        check_reasoners(&team, info.reasoner.as_deref(), &info.flags).await?;
        let sandbox = sandbox(&team, options.unsandboxed)?.hide(data_dir(&options.data)).hide(&dir);
        // A run on NATS: its server must answer and hold the run before it is marked running.
        // With live workers of this version there, its agents are placed on them again.
        let (stores, placed) = match &info.nats {
            Some(url) => {
                let server = crate::stores::connect_existing(url, &dir, &info).await?;
                let registry = match info.local {
                    true => None,
                    false => crate::placement::live_registry(&server).await?,
                };
                let unsandboxed = info.unsandboxed || options.unsandboxed;
                let spec = placed_spec(&team_text, &RunInfo { unsandboxed, ..info.clone() }, &dir);
                let run_id = info.run_id.clone();
                let placed = registry.map(|registry| Placed {
                    registry,
                    observer: options.observer.clone(),
                    server: server.clone(),
                    run: PlacedRun::new(run_id, &team.spec, spec),
                });
                (Stores::nats(&server).await?.anchored_in(&store), placed)
            }
            None => (Stores::sled(&store)?, None),
        };
        info.status = RunStatus::Running;
        info.finished_at = None;
        info.unsandboxed |= options.unsandboxed;
        crate::inputs::record_and_write(stores.audit.as_ref(), &dir, &info).await?;
        options.observer.recorded(&info, &dir, How::Resumed);
        let span = run_span(&info.run_id, &task.id, "resumed");
        let tooling = Tooling { tools, sandbox, journal: dir.join(JOURNAL_DIR) };
        let working = Working { store, stores, team, placed, tooling, task, info, dir };
        let run = working.begin(How::Resumed).instrument(span.clone()).await?;
        Ok((run, span))
    }
}

impl Run {
    async fn drive_to_end(self, stop: impl Future<Output = ()>) -> Result<Ended> {
        let Run {
            team,
            services,
            store,
            ledger,
            team_file,
            placed,
            task,
            mut info,
            dir,
            observer,
            ..
        } = self;
        let heartbeat = Duration::from_millis(info.heartbeat_ms);
        let watchers =
            Watchers::start(&team, &services, &team_file, heartbeat, ledger.as_ref(), &placed);
        let end = tokio::select! {
            outcome = team.wait(&task.id) => End::Outcome(outcome),
            () = stop => End::Interrupted { cut_short: false },
            stop = budget_stop(ledger.clone(), Duration::from_millis(100)) => End::Budget(stop),
            (agent, reason) = leader_failed(team.clone(), Duration::from_millis(100)) => {
                End::LeaderFailed(agent, reason)
            }
            error = storage_failed(store.clone(), Duration::from_millis(100)) => End::Storage(error),
        };
        watchers.stop(&end, placed.as_ref()).await;
        let end = end.settle(&team, heartbeat).await?;
        // The usage ledger stored, and its totals put in run.json.
        if let Some(ledger) = &ledger
            && !matches!(end, End::Storage(_))
            && let Err(e) = ledger.flush()
        {
            tracing::error!(error = %e, "could not store the usage ledger");
        }
        info.usage = RunUsage::of(ledger.as_deref());
        info.finished_at = Some(now_ms());
        let (status, failure) = end.status();
        info.status = status;
        if failure.is_some() {
            info.failure = failure;
        }
        match (&end, info.write(&dir)) {
            (_, Ok(())) => {}
            // Nothing more can be stored: run.json may not be writable either.
            (End::Storage(_), Err(e)) => {
                observer
                    .warn(&format!("warning: could not record the stop in run.json either: {e}"));
            }
            (_, Err(e)) => return Err(e),
        }
        Ok(Ended { end, info, dir, team, services, task })
    }
}

impl End {
    /// Brings the team to rest for this end: a clean shutdown after an outcome; after an
    /// interruption the heartbeats stop within one heartbeat (and a grace to store what they
    /// did); otherwise the team stops.
    async fn settle(self, team: &Team, heartbeat: Duration) -> Result<End> {
        Ok(match self {
            End::Interrupted { .. } => {
                // A turn still in a long tool call then is cut short: its call goes on by
                // itself where it runs (a shell command under its journal, to its own
                // timeout) and `resume` takes its result, as after a kill.
                let cut_short = !team.stop_within(heartbeat + INTERRUPT_GRACE).await;
                End::Interrupted { cut_short }
            }
            End::Outcome(outcome) => {
                team.shutdown().await.context("the team did not shut down cleanly")?;
                End::Outcome(outcome)
            }
            other => {
                team.stop().await;
                other
            }
        })
    }

    /// The status and failure text `run.json` records for this end.
    fn status(&self) -> (RunStatus, Option<String>) {
        match self {
            End::Outcome(outcome) => match outcome {
                TaskOutcome::Failed { reason, .. } => (RunStatus::Failed, Some(reason.to_string())),
                _ if outcome.is_success() => (RunStatus::Succeeded, None),
                _ => (RunStatus::Failed, None),
            },
            End::Interrupted { .. } => (RunStatus::Interrupted, None),
            End::Budget(stop) => (RunStatus::Failed, Some(stop.to_string())),
            End::LeaderFailed(agent, reason) => (
                RunStatus::Failed,
                Some(
                    TaskFailure::AgentFailed { agent: agent.clone(), reason: reason.clone() }
                        .to_string(),
                ),
            ),
            End::Storage(error) => (
                RunStatus::Interrupted,
                Some(TaskFailure::Storage { error: error.clone() }.to_string()),
            ),
        }
    }
}

/// What runs beside a driven run until it ends: the approval desk for budget extensions
/// and, for a placed run, the follower of the workers' mail and the bridge of their records.
struct Watchers {
    desk: Option<tokio::task::JoinHandle<()>>,
    follower: Option<tokio::task::JoinHandle<()>>,
    bridge: Option<(Bridge, tokio::task::JoinHandle<()>)>,
}

impl Watchers {
    fn start(
        team: &Arc<Team>,
        services: &TeamServices,
        team_file: &TeamFile,
        heartbeat: Duration,
        ledger: Option<&Arc<UsageLedger>>,
        placed: &Option<Placed>,
    ) -> Self {
        // Mail the workers send (the outcome on `system`) wakes the coordinator at once, and
        // the records the workers' agents append reach the event stream.
        let follower = placed.as_ref().map(|p| {
            let team = Arc::downgrade(team);
            placement::follow(&p.server, move |_| {
                if let Some(team) = team.upgrade() {
                    team.wake();
                }
            })
        });
        let bridge = placed.as_ref().map(|_| {
            let bridge = Bridge {
                audit: services.audit.clone(),
                events: services.events.clone(),
                last: Arc::default(),
            };
            let running = tokio::spawn(bridge.clone().run());
            (bridge, running)
        });
        let desk = approval_desk(team_file, ledger, services, heartbeat);
        Watchers { desk, follower, bridge }
    }

    /// Stops them; a placed run is closed (after an outcome) or withdrawn from its workers.
    async fn stop(self, end: &End, placed: Option<&Placed>) {
        if let Some(desk) = self.desk {
            desk.abort();
        }
        if let Some(follower) = self.follower {
            follower.abort();
        }
        if let Some(placed) = placed {
            match end {
                End::Outcome(_) => placed.close().await,
                _ => placed.withdraw().await,
            }
        }
        if let Some((bridge, running)) = self.bridge {
            running.abort();
            // What the workers appended up to now (their agents shut down) is shown.
            bridge.pass().await;
        }
    }
}

/// Budget extensions: the top powers sign them ("ask"), or one of the team's humans
/// (`strata approve` / `strata veto`; "ask_human", which the team file allows only with
/// humans listed). `None` when the run has no ledger or its budget does not ask.
fn approval_desk(
    team: &TeamFile,
    ledger: Option<&Arc<UsageLedger>>,
    services: &TeamServices,
    heartbeat: Duration,
) -> Option<tokio::task::JoinHandle<()>> {
    let tops = top_ids(team);
    // The agent the run's tasks go to proposes the extension (a crew's lead, a single agent).
    let (ledger, proposer) = (ledger?, team.spec.entry()?.config.id.clone());
    let on_exceed = ledger.report().budget.on_exceed;
    if !on_exceed.asks() {
        return None;
    }
    let (signers, humans) = match on_exceed {
        OnExceed::AskHuman => (Vec::new(), team.spec.approvals.humans.clone()),
        _ => (tops, Vec::new()),
    };
    let heartbeat_ms = u64::try_from(heartbeat.as_millis()).unwrap_or(u64::MAX);
    Some(tokio::spawn(
        ApprovalDesk {
            ledger: ledger.clone(),
            governance: services.governance.clone(),
            bus: services.bus.clone(),
            clock: services.clock.clone(),
            proposer,
            signers,
            humans,
            poll: Duration::from_millis(heartbeat_ms.clamp(10, 1_000)),
        }
        .run(),
    ))
}

/// A new run's data directory and workspace, when they exist, must be directories.
fn check_dirs(data: &Path, workspace: Option<&Path>) -> Result<()> {
    if data.exists() && !data.is_dir() {
        return Err(Error::bad_input(format!(
            "the data directory {} is a file; give --data a directory",
            data.display()
        )));
    }
    if let Some(workspace) = workspace
        && workspace.exists()
        && !workspace.is_dir()
    {
        return Err(Error::bad_input(format!(
            "the workspace {} is a file; give --workspace a directory",
            workspace.display()
        )));
    }
    Ok(())
}

/// Creates a new run's directory and store; a run of this id already there is bad input.
fn create_store(dir: &Path, run_id: &str, no_sync: bool) -> Result<RunStore> {
    let durability = if no_sync { Durability::NoSync } else { Durability::Synced };
    match RunStore::create(dir, run_id, Timestamp(now_ms()), durability) {
        Ok(store) => Ok(store),
        Err(
            e @ (run_store::StoreError::AlreadyExists { .. }
            | run_store::StoreError::BadRunId { .. }),
        ) => Err(Error::bad_input_from(e)),
        Err(e) => Err(Error::failed_from(e)
            .context(format!("cannot create the run directory {}", dir.display()))),
    }
}

/// The run's own workspace unless one was chosen (`resume` finds it in `run.json`),
/// created and resolved.
fn run_workspace(chosen: Option<&Path>, dir: &Path) -> Result<PathBuf> {
    let workspace = chosen.map_or_else(|| dir.join(RUN_WORKSPACE), Path::to_path_buf);
    std::fs::create_dir_all(&workspace)
        .with_context(|| format!("cannot create the workspace {}", workspace.display()))?;
    std::fs::canonicalize(&workspace)
        .with_context(|| format!("cannot resolve the workspace {}", workspace.display()))
}

/// `run.json` of a run that starts now (not on NATS).
fn started_info(
    run_id: &RunId,
    task: &Task,
    workspace: PathBuf,
    team: &TeamFile,
    options: &StartOptions,
) -> RunInfo {
    RunInfo {
        run_id: run_id.clone(),
        task_id: task.id.clone(),
        goal: task.goal.clone(),
        workspace,
        heartbeat_ms: u64::try_from(team.spec.heartbeat.as_millis()).unwrap_or(u64::MAX),
        reasoner: options.reasoner.clone(),
        flags: options.flags.clone(),
        started_at: now_ms(),
        finished_at: None,
        status: RunStatus::Running,
        failure: None,
        unsandboxed: options.unsandboxed,
        nats: None,
        local: options.local,
        usage: None,
    }
}

/// A new run whose store exists and whose MCP servers started: what it records before its
/// team starts.
struct Recording {
    store: RunStore,
    team: TeamFile,
    team_text: String,
    plan_text: String,
    task: Task,
    info: RunInfo,
    dir: PathBuf,
    tooling: Tooling,
}

impl Recording {
    /// Writes the stored inputs and `run.json`, opens the stores (on NATS: creates them)
    /// and the anchor copy, records the inputs' hashes, then starts the team.
    async fn begin(
        self,
        server: Option<nats_store::NatsStore>,
        registry: Option<Registry>,
        options: &StartOptions,
    ) -> Result<Run> {
        let Recording { store, team, team_text, plan_text, task, info, dir, tooling } = self;
        write_atomic(&dir.join(TEAM_FILE), team_text.as_bytes())?;
        write_atomic(&dir.join(PLAN_FILE), plan_text.as_bytes())?;
        // The second copy of the run's anchor file, in the data directory
        // ([`crate::run_dir::ANCHOR_INDEX`]).
        store
            .keep_anchor_copy_in(&crate::run_dir::anchor_index(&dir))
            .context("cannot keep the run's anchor")?;
        // The stores are opened (on NATS: created) before `run.json` is written: a run
        // that `resume` can find has its streams on the server.
        let stores = match &server {
            Some(server) => Stores::nats(server).await?.anchored_in(&store),
            None => Stores::sled(&store)?,
        };
        // The stored inputs' hashes, which `resume` checks before it starts anything, then
        // run.json.
        crate::inputs::record_and_write(stores.audit.as_ref(), &dir, &info).await?;
        options.observer.recorded(&info, &dir, How::Started);
        let placed = match (registry, server) {
            (Some(registry), Some(server)) => Some(Placed {
                registry,
                observer: options.observer.clone(),
                server,
                run: PlacedRun::new(
                    info.run_id.clone(),
                    &team.spec,
                    placed_spec(&team_text, &info, &dir),
                ),
            }),
            _ => None,
        };
        Working { store, stores, team, placed, tooling, task, info, dir }.begin(How::Started).await
    }
}

/// `error`, said as a full disk with the way on when its cause is one (a write refused with
/// `ENOSPC`, wherever it came from: the run's database, the usage ledger, `run.json`), and
/// whether it was.
fn disk_full(error: Error, way_on: &str) -> (Error, bool) {
    if error.is_bad_input() || !error.is_disk_full() {
        return (error, false);
    }
    let text = format!(
        "the data directory's disk is full (No space left on device): {}; {way_on}",
        error.chain_text()
    );
    (Error::failed(text), true)
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
) -> Result<Option<(agent_mcp::McpServers, ToolRegistry)>> {
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
            Err(Error::bad_input_from(e))
        }
    }
}

/// The plan of `strata run --goal TEXT`: a goal-only plan file (stored in the run as its
/// `plan.toml`, so `resume` reads it like any plan) and the task it is.
fn goal_plan(goal: &str, team: &TeamFile, tools: &ToolRegistry) -> Result<(String, Task)> {
    if goal.trim().is_empty() {
        return Err(Error::bad_input("--goal is empty; say in words what the team should achieve"));
    }
    let text = team_file::goal_plan_toml(&goal_task_id(goal), goal);
    let task = team_file::parse_plan(Path::new("--goal"), &text, &team.spec, tools)
        .map_err(Error::bad_input_from)?;
    Ok((text, task))
}

/// The goal example (`examples/goal/team.toml`), from which the built-in goal team is made.
const GOAL_EXAMPLE: &str = include_str!("run/goal_team.toml");

/// The team of `strata run --goal` without `--team`: the goal example's three powers and
/// `[[roles]]` (its settings too), without its opening comment and its `[reasoner]` table, so
/// that the reasoner is the rule-based default unless `--reasoner`, `--base-url` and `--model`
/// say otherwise (a goal on the rule-based reasoner is refused). Stored in the run as its
/// `team.toml`, which `resume` reads back.
pub fn goal_team_toml() -> String {
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

/// A run whose agents are placed on workers (`strata worker`): this process coordinates.
struct Placed {
    registry: Registry,
    /// Where warnings go.
    observer: Arc<dyn Observer>,
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
    async fn coordinate(&self, team: &TeamFile, services: TeamServices) -> Result<Team> {
        let proposer = team.spec.entry().map(|a| a.config.id.clone());
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
                    return Err(Error::failed(format!(
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
            self.observer
                .warn(&format!("warning: could not tell the workers the run is over: {e}"));
            return;
        }
        match placement::wait_released(&self.server, &self.run, RELEASE_PATIENCE).await {
            Ok(true) => {
                // Nothing more for the workers to do with it.
                if let Err(e) = self.registry.remove(&self.run.run_id).await {
                    self.observer.warn(&format!(
                        "warning: could not remove the closed run from the registry: {e}"
                    ));
                }
            }
            Ok(false) => self.observer.warn(&format!(
                "warning: some agents were still held by workers {}s after the run closed",
                RELEASE_PATIENCE.as_secs()
            )),
            Err(e) => self
                .observer
                .warn(&format!("warning: could not see the workers release the agents: {e}")),
        }
    }

    /// The run stops here (interrupted, failed): the workers stop its agents, which stay
    /// resumable (`strata resume` places them again).
    async fn withdraw(&self) {
        if let Err(e) = self.registry.remove(&self.run.run_id).await {
            self.observer
                .warn(&format!("warning: could not take the run back from the workers: {e}"));
        }
    }
}

/// What the workers build a placed run's team from: the team file, the run's reasoner
/// override and sandbox setting, and its workspace (the workers' default); with its goal, task,
/// start and plan (from the run's directory `dir`) for a dashboard on another machine.
fn placed_spec(team_text: &str, info: &RunInfo, dir: &Path) -> serde_json::Value {
    serde_json::to_value(crate::placement::PlacedSpec {
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

/// Waits until a top power or a mid lead of `team`, or the agent its tasks go to (a single
/// agent), is failed, looking every `every`, and returns it with the reason of its failure.
///
/// A failed executor is handled by its lead (the step goes to another executor, or the task
/// fails), but nothing brings back a failed top power (it has no supervisor), lead (its
/// supervisor only notes the error report) or single agent: a task that needs its signature
/// or its work would wait forever. That happens when an agent's reasoner keeps failing, such
/// as a model API answering 401 or 500 past the agent's retries.
async fn leader_failed(team: Arc<Team>, every: Duration) -> (AgentId, String) {
    loop {
        // A glance at each leader without waiting for its heartbeat; the audit log is read
        // only once one is seen failed, for the reason.
        let failed = [AgentLayer::Top, AgentLayer::Mid]
            .into_iter()
            .flat_map(|layer| team.pool().by_layer(layer))
            .chain(team.pool().get(team.entry()))
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

/// The telemetry span of a run in this process (`strata run`, `resume`): every agent's and
/// task's span in it knows the run ([`agent_core::otel`]). Disabled when telemetry is off.
pub fn run_span(run_id: &str, task_id: &str, how: &'static str) -> tracing::Span {
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

#[cfg(test)]
mod tests;
