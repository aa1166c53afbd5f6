//! `strata run` and `strata resume`: build the team on a run directory, drive it to the end,
//! show progress, handle Ctrl-C, print the summary.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use agent_core::tools::{ToolContext, ToolRegistry};
use agent_core::{Reasoner, RuleBasedReasoner, SledAuditLog, SledStateStore, TokioClock};
use agent_pool::{Team, TeamServices};
use agent_state::{AgentId, Task, TaskOutcome, Timestamp};
use anyhow::Context;
use governance::SledGovernance;
use message_bus::SledBus;
use run_store::{Durability, RunStore};
use serde::{Deserialize, Serialize};
use whiteboard::SledWhiteboard;

use crate::cli::{OutputArgs, ResumeArgs, RunArgs};
use crate::files::{self, ReasonerSettings, TeamFile};
use crate::{Failure, INTERRUPTED, TASK_FAILED, bad_input, view};

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
        let path = dir.join(RUN_FILE);
        let bytes =
            std::fs::read(&path).with_context(|| format!("cannot read {}", path.display()))?;
        serde_json::from_slice(&bytes).with_context(|| format!("{} is damaged", path.display()))
    }

    pub(crate) fn write(&self, dir: &Path) -> anyhow::Result<()> {
        let bytes = serde_json::to_vec_pretty(self)?;
        write_atomic(&dir.join(RUN_FILE), &bytes)
    }
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

fn read_input(path: &Path, what: &str) -> Result<String, Failure> {
    std::fs::read_to_string(path)
        .map_err(|e| bad_input(anyhow::anyhow!("cannot read the {what} {}: {e}", path.display())))
}

/// `strata run`.
pub(crate) async fn run(args: RunArgs) -> Result<u8, Failure> {
    // Everything the user gave is checked before anything is written.
    let tools = ToolRegistry::with_builtins();
    let (team_text, mut team) = match &args.team {
        Some(path) => {
            let text = read_input(path, "team file")?;
            let team = files::parse_team(path, &text, &tools).map_err(bad_input)?;
            (text, team)
        }
        None => (files::example_team_toml().to_owned(), files::default_team()),
    };
    if let Some(heartbeat) = args.heartbeat {
        team.spec.heartbeat = heartbeat;
    }
    if let Some(kind) = &args.reasoner {
        files::check_reasoner_kind(kind)
            .map_err(|e| bad_input(anyhow::anyhow!("--reasoner {kind}: {e}")))?;
    }
    let plan_text = read_input(&args.plan, "plan file")?;
    let task = files::parse_plan(&args.plan, &plan_text, &team.spec, &tools).map_err(bad_input)?;
    if args.data.exists() && !args.data.is_dir() {
        return Err(bad_input(anyhow::anyhow!(
            "the data directory {} is a file; give --data a directory",
            args.data.display()
        )));
    }
    if args.workspace.exists() && !args.workspace.is_dir() {
        return Err(bad_input(anyhow::anyhow!(
            "the workspace {} is a file; give --workspace a directory",
            args.workspace.display()
        )));
    }

    let run_id = args.run_id.clone().unwrap_or_else(|| new_run_id(&task.id));
    let dir = args.data.join(&run_id);
    let durability = if args.no_sync { Durability::NoSync } else { Durability::Synced };
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
    std::fs::create_dir_all(&args.workspace)
        .with_context(|| format!("cannot create the workspace {}", args.workspace.display()))?;
    let workspace = std::fs::canonicalize(&args.workspace)
        .with_context(|| format!("cannot resolve the workspace {}", args.workspace.display()))?;
    write_atomic(&dir.join(TEAM_FILE), team_text.as_bytes())?;
    write_atomic(&dir.join(PLAN_FILE), plan_text.as_bytes())?;
    let info = RunInfo {
        run_id: run_id.clone(),
        task_id: task.id.clone(),
        goal: task.goal.clone(),
        workspace,
        heartbeat_ms: u64::try_from(team.spec.heartbeat.as_millis()).unwrap_or(u64::MAX),
        reasoner: args.reasoner.clone(),
        started_at: now_ms(),
        finished_at: None,
        status: RunStatus::Running,
        failure: None,
    };
    info.write(&dir)?;
    view::started(&args.output, &info, &dir);
    warn_if_unsynced(args.no_sync);
    let services = services(&store, &info, &team, tools)?;
    let team_handle =
        Team::start(team.spec.clone(), services.clone()).await.context("cannot start the team")?;
    team_handle.submit(task.clone()).await.context("cannot submit the task")?;
    drive(team_handle, services, task, info, dir, &args.output).await
}

/// `strata resume`.
pub(crate) async fn resume(args: ResumeArgs) -> Result<u8, Failure> {
    let dir = resolve_run(&args.data, &args.run)?;
    let durability = if args.no_sync { Durability::NoSync } else { Durability::Synced };
    let store = RunStore::open(&dir, durability).map_err(bad_input)?;
    let mut info = RunInfo::read(&dir).map_err(bad_input)?;
    if matches!(info.status, RunStatus::Succeeded | RunStatus::Failed) {
        view::already_finished(&args.output, &info, &dir);
        return Ok(if info.status == RunStatus::Succeeded { 0 } else { TASK_FAILED });
    }
    let tools = ToolRegistry::with_builtins();
    let team_path = dir.join(TEAM_FILE);
    let team_text = read_input(&team_path, "team file")?;
    let mut team = files::parse_team(&team_path, &team_text, &tools).map_err(bad_input)?;
    team.spec.heartbeat = Duration::from_millis(info.heartbeat_ms.max(1));
    let plan_path = dir.join(PLAN_FILE);
    let plan_text = read_input(&plan_path, "plan file")?;
    let task = files::parse_plan(&plan_path, &plan_text, &team.spec, &tools).map_err(bad_input)?;
    info.status = RunStatus::Running;
    info.finished_at = None;
    info.write(&dir)?;
    view::resumed(&args.output, &info, &dir);
    warn_if_unsynced(args.no_sync);
    let services = services(&store, &info, &team, tools)?;
    let team_handle = Team::resume(team.spec.clone(), services.clone())
        .await
        .context("cannot resume the team")?;
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
    drive(team_handle, services, task, info, dir, &args.output).await
}

/// Says so at start when commits are not synced (`--no-sync`).
fn warn_if_unsynced(no_sync: bool) {
    if no_sync {
        eprintln!(
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

fn services(
    store: &RunStore,
    info: &RunInfo,
    team: &TeamFile,
    tools: ToolRegistry,
) -> anyhow::Result<TeamServices> {
    let reasoner = |settings: &ReasonerSettings| -> Arc<dyn Reasoner> {
        Arc::new(
            RuleBasedReasoner::new()
                .forbid_tools(settings.forbid_tools.clone())
                .prefer(settings.prefer.clone()),
        )
    };
    let reasoners: BTreeMap<AgentId, Arc<dyn Reasoner>> =
        team.agent_reasoners.iter().map(|(id, s)| (id.clone(), reasoner(s))).collect();
    Ok(TeamServices {
        bus: Arc::new(SledBus::open(store)?),
        boards: Arc::new(SledWhiteboard::open(store)?),
        governance: Arc::new(SledGovernance::open(store)?),
        audit: Arc::new(SledAuditLog::open(store)?),
        state: Arc::new(SledStateStore::open(store)?),
        clock: Arc::new(TokioClock::new()),
        workspace: Arc::new(
            ToolContext::new(&info.workspace)?.with_journal(store.dir().join(JOURNAL_DIR)),
        ),
        tools: Arc::new(tools),
        reasoner: reasoner(&team.default_reasoner),
        reasoners,
        agent_tools: BTreeMap::new(),
    })
}

async fn drive(
    team: Team,
    services: TeamServices,
    task: Task,
    mut info: RunInfo,
    dir: PathBuf,
    output: &OutputArgs,
) -> Result<u8, Failure> {
    let team = Arc::new(team);
    let watcher =
        view::watch(team.clone(), services.clone(), task.clone(), info.clone(), output.clone());
    let outcome = tokio::select! {
        outcome = team.wait(&task.id) => Some(outcome),
        _ = tokio::signal::ctrl_c() => None,
    };
    let Some(outcome) = outcome else {
        view::interrupting(output);
        // A second Ctrl-C exits at once; what is stored so far is enough to resume.
        tokio::spawn(async {
            if tokio::signal::ctrl_c().await.is_ok() {
                eprintln!("stopped at once; the run can still be resumed");
                std::process::exit(i32::from(INTERRUPTED));
            }
        });
        team.stop().await;
        watcher.stop().await;
        info.status = RunStatus::Interrupted;
        info.finished_at = Some(now_ms());
        info.write(&dir)?;
        view::interrupted(output, &info, &dir);
        return Ok(INTERRUPTED);
    };
    team.shutdown().await.context("the team did not shut down cleanly")?;
    watcher.stop().await;
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
