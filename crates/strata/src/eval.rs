//! A durable eval (`strata eval`): every task of a suite run by each team given, `repeat`
//! times, each attempt an ordinary durable run in the data directory, started through
//! [`Run::start`](crate::run::Run::start) as `strata run` starts one (so `strata runs`,
//! `inspect` and the dashboard show it), its task's check run in the team's sandbox on the
//! run's final workspace; and the figures of it all ([`Report`]): passes out of the attempts,
//! wall time (median, p90), model calls, tokens, cost, answer repairs, typed stop reasons
//! ([`StopReason`]: loop, ping-pong, no progress, wait cycle, budget, ...) and runaway runs, as
//! a table, JSON, or an SVG plot ([`Report::svg`]).
//!
//! A suite is the folder evolution uses ([`SuiteFile`]: `suite.toml`, and `tasks/NAME/` with
//! `task.toml` (`check` or `check_script`; `goal`, or a `plan.toml`) and optional `files/`
//! copied into the attempt's workspace first). The teams come from the caller, else from the
//! suite's `team`; any reasoner runs (rule-based, OpenAI-compatible, Anthropic, the embedded
//! model), as in `strata run`, with the same overrides.
//!
//! An eval's directory in the data directory holds `eval.json` ([`EvalInfo`]: the plan (suite,
//! teams, repeat count) and each attempt with its run id, written before its run starts, and
//! its result, written once it has one), a run store held while the eval runs (so `strata runs`
//! tells a running eval from a killed one) and `workspaces/<run id>/`, each attempt's workspace.
//! Killed or stopped, the eval goes on with [`Evaluating::resume`]: an attempt with a result is
//! kept, an interrupted run is resumed, the rest are started; the suite and team files must be
//! unchanged (their SHA-256 are recorded).
//!
//! Everything is checked before anything is written: the suite, and every task with every team
//! as `strata run` checks a run ([`Prepared`]: the team file, the plan or goal, the reasoners'
//! settings, keys and servers) and the teams' sandboxes. Bad input names the path and why.
//!
//! ```no_run
//! # async fn eval() -> strata::Result<()> {
//! use std::path::{Path, PathBuf};
//!
//! use strata::eval::{EvalOptions, Evaluating};
//!
//! let options = EvalOptions::new(".strata/runs");
//! let teams = [PathBuf::from("team.toml")];
//! let evaluating = Evaluating::start(Path::new("suite"), &teams, 3, &options).await?;
//! // Stopped early (as by Ctrl-C), it is resumable with `Evaluating::resume`.
//! let evaluated = evaluating.run(std::future::pending::<()>()).await?;
//! println!("{}", evaluated.report.table());
//! # Ok(()) }
//! ```

use std::future::Future;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use agent_evolution::{Check, SuiteFile, TaskFile, Work};
use agent_state::{RunId, TaskFailure, Timestamp, sha256_hex};
use run_store::{Durability, RunStore};
use serde::{Deserialize, Serialize};

use crate::error::{Context as _, Error, Result};
use crate::run::{Prepared, StartOptions};
use crate::run_dir::{ModelFlags, RunStatus, new_run_id, now_ms, read_json, write_atomic};

mod attempt;
mod report;
mod svg;

pub use crate::run_dir::EVAL_FILE;
pub use report::{Report, Row, WallTime};

/// The folder, in an eval's directory, of its attempts' workspaces (`<run id>/` each).
pub const WORKSPACES_DIR: &str = "workspaces";
/// The most attempts of one task by one team.
pub const MAX_REPEAT: u32 = 1000;

/// Where an eval stands.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum EvalStatus {
    /// Running, or killed while running.
    Running,
    /// Stopped (by Ctrl-C); resumable.
    Interrupted,
    /// Every attempt has its result.
    Finished,
    /// It stopped with an error; resumable.
    Failed,
}

/// A team of an eval.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct EvalTeam {
    /// Its name in reports: the path as given (the suite's team: as `suite.toml` names it).
    pub label: String,
    /// The team file (absolute).
    pub path: PathBuf,
    /// The SHA-256 of its text when the eval started.
    pub sha256: String,
}

/// Why a run stopped without success, by kind: the task's typed failure.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum StopReason {
    /// The loop guard: an agent repeated the same call ([`TaskFailure::Loop`]).
    Loop,
    /// Two agents handed a work item back and forth ([`TaskFailure::PingPong`]).
    PingPong,
    /// Nothing moved for too many heartbeats ([`TaskFailure::NoProgress`]).
    NoProgress,
    /// Agents waited on each other in a cycle ([`TaskFailure::WaitCycle`]).
    WaitCycle,
    /// The reasoning budget ([`TaskFailure::BudgetExceeded`]).
    Budget,
    /// A time limit of the team file ([`TaskFailure::TimedOut`]).
    TimedOut,
    /// A top power or lead failed ([`TaskFailure::AgentFailed`]).
    AgentFailed,
    /// Any other failure (a step failed, the task judged incomplete, ...).
    Failed,
}

impl StopReason {
    /// The kind of `failure`.
    pub fn of(failure: &TaskFailure) -> Self {
        match failure {
            TaskFailure::Loop { .. } => Self::Loop,
            TaskFailure::PingPong { .. } => Self::PingPong,
            TaskFailure::NoProgress { .. } => Self::NoProgress,
            TaskFailure::WaitCycle { .. } => Self::WaitCycle,
            TaskFailure::BudgetExceeded { .. } => Self::Budget,
            TaskFailure::TimedOut { .. } => Self::TimedOut,
            TaskFailure::AgentFailed { .. } => Self::AgentFailed,
            _ => Self::Failed,
        }
    }

    /// Its name in reports.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Loop => "loop",
            Self::PingPong => "ping-pong",
            Self::NoProgress => "no progress",
            Self::WaitCycle => "wait cycle",
            Self::Budget => "budget",
            Self::TimedOut => "timed out",
            Self::AgentFailed => "agent failed",
            Self::Failed => "failed",
        }
    }
}

/// How a task's check went on an attempt's final workspace.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct CheckResult {
    /// It exited 0.
    pub passed: bool,
    /// Its exit code (`None`: it did not run to its end).
    pub code: Option<i32>,
    /// What it said on standard error, or why it could not run.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

/// What one attempt came to.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct AttemptResult {
    /// The run succeeded and the check passed.
    pub passed: bool,
    /// Where the run stands (`interrupted` for a runaway run the eval stopped).
    pub status: RunStatus,
    /// Why it stopped without success, by kind.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stop: Option<StopReason>,
    /// It ran past the suite's `task_timeout_ms` and the eval stopped it.
    #[serde(default)]
    pub runaway: bool,
    /// Why it failed, in words.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub failure: Option<String>,
    /// The check (`None`: not run, as the run did not succeed).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub check: Option<CheckResult>,
    /// From the run's start to its end, in milliseconds.
    pub wall_ms: u64,
    /// Model calls answered.
    pub model_calls: u64,
    /// Prompt and generated tokens.
    pub tokens: u64,
    /// Cost in US dollars (`None`: a model without a price was called).
    pub cost_usd: Option<f64>,
    /// Model answers sent back for repair.
    pub repairs: u64,
}

impl AttemptResult {
    /// How the attempt went, in words: `passed`, `runaway`, `failed`, `failed (REASON)` for a
    /// stop other than a plain failure, or `failed its check`.
    pub fn verdict(&self) -> String {
        match (self.passed, self.stop, self.runaway) {
            (true, ..) => "passed".to_owned(),
            (false, _, true) => "runaway".to_owned(),
            (false, Some(StopReason::Failed), _) => "failed".to_owned(),
            (false, Some(stop), _) => format!("failed ({})", stop.as_str()),
            (false, None, _) if self.check.is_some() => "failed its check".to_owned(),
            (false, None, _) => "failed".to_owned(),
        }
    }
}

/// One attempt of the eval's plan: a task by a team, the `repeat`-th time.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Attempt {
    /// The task (its folder's name).
    pub task: String,
    /// The team (its index in [`EvalInfo::teams`]).
    pub team: usize,
    /// Which repetition, from 1.
    pub repeat: u32,
    /// Its run, once it has one (recorded before the run starts).
    #[serde(default)]
    pub run_id: Option<RunId>,
    /// What it came to, once it has.
    #[serde(default)]
    pub result: Option<AttemptResult>,
}

/// `eval.json`: what an eval is (its plan) and how it stands.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct EvalInfo {
    /// Its id.
    pub eval_id: RunId,
    /// The suite folder (absolute).
    pub suite: PathBuf,
    /// The SHA-256 of the suite's settings and tasks (`suite.toml`, each `task.toml`, plan and
    /// check script) when it started.
    pub suite_sha256: String,
    /// The teams.
    pub teams: Vec<EvalTeam>,
    /// Attempts of each task by each team.
    pub repeat: u32,
    /// The reasoner kind over the team files', if one was given.
    #[serde(default)]
    pub reasoner: Option<String>,
    /// `--base-url`, `--model`, `--small-model` and `$OPENAI_BASE_URL` as it started.
    #[serde(default)]
    pub flags: ModelFlags,
    /// Commands (and checks) run without the sandbox.
    #[serde(default)]
    pub unsandboxed: bool,
    /// When it started (ms since the epoch).
    pub started_at: u64,
    /// When it last stopped or ended.
    #[serde(default)]
    pub finished_at: Option<u64>,
    /// How it stands.
    pub status: EvalStatus,
    /// Why it failed.
    #[serde(default)]
    pub failure: Option<String>,
    /// Every attempt, in the order they run.
    pub attempts: Vec<Attempt>,
}

impl EvalInfo {
    /// The `eval.json` of the eval in `dir`.
    pub fn read(dir: &Path) -> Result<Self> {
        read_json(&dir.join(EVAL_FILE))
    }

    /// Writes it into `dir`, atomically.
    pub fn write(&self, dir: &Path) -> Result<()> {
        write_atomic(&dir.join(EVAL_FILE), &serde_json::to_vec_pretty(self)?)
    }

    /// The status `strata runs` shows, an eval killed while running included (`dir` is its
    /// directory).
    pub fn effective_status(&self, dir: &Path) -> &'static str {
        match self.status {
            EvalStatus::Finished => "finished",
            EvalStatus::Failed => "failed",
            EvalStatus::Interrupted => "interrupted",
            EvalStatus::Running => match RunStore::is_in_use(dir) {
                Ok(true) => "running",
                _ => "killed (resumable)",
            },
        }
    }

    /// How many attempts have their result.
    pub fn done(&self) -> usize {
        self.attempts.iter().filter(|a| a.result.is_some()).count()
    }
}

/// What the front end is told as an eval goes.
pub trait EvalObserver: Send + Sync {
    /// Attempt `index` of `info` is about to run (or to be resumed).
    fn started(&self, info: &EvalInfo, index: usize) {
        let _ = (info, index);
    }

    /// Attempt `index` of `info` has its result.
    fn finished(&self, info: &EvalInfo, index: usize) {
        let _ = (info, index);
    }

    /// A warning for the user (the runs' too): logged by default.
    fn warn(&self, text: &str) {
        tracing::warn!("{text}");
    }
}

/// An observer that only logs.
#[derive(Debug, Default)]
pub struct Quiet;

impl EvalObserver for Quiet {}

/// The runs' observer: their warnings go to the eval's.
struct RunWarnings(Arc<dyn EvalObserver>);

impl crate::run::Observer for RunWarnings {
    fn warn(&self, text: &str) {
        self.0.warn(text);
    }
}

/// How an eval is started or resumed.
#[derive(Clone)]
pub struct EvalOptions {
    /// The data directory (the eval's directory is `<data>/<id>`, its runs `<data>/<run id>`).
    pub data: PathBuf,
    /// A new eval's id; `None`: `eval-` and the time.
    pub eval_id: Option<RunId>,
    /// The reasoner kind of every agent, over the team files' (`rule-based`, `openai`,
    /// `anthropic`, `local`); a resumed eval keeps its own.
    pub reasoner: Option<String>,
    /// `--base-url`, `--model`, `--small-model` and `$OPENAI_BASE_URL`; a resumed eval keeps
    /// its own.
    pub flags: ModelFlags,
    /// Commands and checks run without the sandbox (recorded, and kept on resume).
    pub unsandboxed: bool,
    /// The runs' commits are not synced to disk.
    pub no_sync: bool,
    /// What the front end is told.
    pub observer: Arc<dyn EvalObserver>,
}

impl EvalOptions {
    /// An eval in the data directory `data`, with the team files' reasoners, synced,
    /// sandboxed.
    pub fn new(data: impl Into<PathBuf>) -> Self {
        Self {
            data: data.into(),
            eval_id: None,
            reasoner: None,
            flags: ModelFlags::with_env(None, None, false),
            unsandboxed: false,
            no_sync: false,
            observer: Arc::new(Quiet),
        }
    }

    /// The options of its runs (their id and workspace set per attempt).
    fn start_options(&self, suite: &SuiteFile) -> StartOptions {
        StartOptions {
            heartbeat: suite.heartbeat,
            reasoner: self.reasoner.clone(),
            flags: self.flags.clone(),
            unsandboxed: self.unsandboxed,
            no_sync: self.no_sync,
            observer: Arc::new(RunWarnings(self.observer.clone())),
            ..StartOptions::new(&self.data)
        }
    }
}

/// Finds an eval by id in `data`, or takes `eval` as its directory; bad input if neither
/// holds one.
pub fn resolve(data: &Path, eval: &str) -> Result<PathBuf> {
    let by_id = data.join(eval);
    let dir = if by_id.is_dir() { by_id } else { PathBuf::from(eval) };
    if !dir.join(EVAL_FILE).is_file() {
        return Err(Error::bad_input(format!(
            "no eval `{eval}`: it is neither an eval id in {} nor an eval's directory (no {EVAL_FILE}); `strata runs` lists them",
            data.display()
        )));
    }
    Ok(dir)
}

/// An eval recorded (started, or found to resume) with its suite and every (team, task) run
/// prepared: what [`run`](Self::run) runs.
pub struct Evaluating {
    dir: PathBuf,
    info: EvalInfo,
    suite: SuiteFile,
    /// Per team, per task (in the suite's order): the run to start.
    prepared: Vec<Vec<Prepared>>,
    options: EvalOptions,
    /// Held while the eval runs.
    store: RunStore,
}

impl Evaluating {
    /// Starts an eval of the suite in `suite` by `teams` (none: the suite's `team`), `repeat`
    /// attempts of each task by each team. The suite, and every task with every team, are
    /// checked before anything is written (bad input otherwise); then its directory is made
    /// with `eval.json`.
    pub async fn start(
        suite: &Path,
        teams: &[PathBuf],
        repeat: u32,
        options: &EvalOptions,
    ) -> Result<Self> {
        if !(1..=MAX_REPEAT).contains(&repeat) {
            return Err(Error::bad_input(format!(
                "--repeat is {repeat}; give 1 to {MAX_REPEAT} attempts of each task by each team"
            )));
        }
        let suite = read_suite(suite.to_path_buf()).await?;
        let paths = team_paths(&suite, teams)?;
        let data = &options.data;
        if data.exists() && !data.is_dir() {
            return Err(Error::bad_input(format!(
                "the data directory {} is a file; give --data a directory",
                data.display()
            )));
        }
        let prepared = prepare_all(&suite, &paths, options).await?;
        let eval_id = options.eval_id.clone().unwrap_or_else(|| new_run_id("eval"));
        let teams: Vec<EvalTeam> = paths
            .into_iter()
            .zip(&prepared)
            .map(|((label, path), row)| EvalTeam {
                label,
                path,
                sha256: row.first().map(|p| sha256_hex(p.team_text.as_bytes())).unwrap_or_default(),
            })
            .collect();
        let info = EvalInfo {
            suite_sha256: suite_digest(&suite)?,
            suite: suite.dir.clone(),
            attempts: plan(&suite, teams.len(), repeat),
            teams,
            repeat,
            reasoner: options.reasoner.clone(),
            flags: options.flags.clone(),
            unsandboxed: options.unsandboxed,
            started_at: now_ms(),
            finished_at: None,
            status: EvalStatus::Running,
            failure: None,
            eval_id,
        };
        let dir = data.join(&info.eval_id);
        let store = create_store(&dir, &info.eval_id, options)?;
        info.write(&dir)?;
        Ok(Self { dir, info, suite, prepared, options: options.clone(), store })
    }

    /// Finds the eval `eval` (an id in the data directory, or a directory) to go on with: its
    /// suite and team files must be as they were (else bad input), and every task with every
    /// team is checked again. Its own reasoner, model flags and sandbox setting are kept
    /// (`options` may only add `unsandboxed`). A finished eval runs nothing more.
    pub async fn resume(eval: &str, options: &EvalOptions) -> Result<Self> {
        let dir = resolve(&options.data, eval)?;
        let mut info = EvalInfo::read(&dir).map_err(Error::bad_input_from)?;
        let suite = read_suite(info.suite.clone()).await?;
        if suite_digest(&suite)? != info.suite_sha256 {
            return Err(Error::bad_input(format!(
                "the suite {} changed since eval {} started (suite.toml, or a task's task.toml, plan, check script or files): start a new eval",
                suite.dir.display(),
                info.eval_id
            )));
        }
        info.unsandboxed |= options.unsandboxed;
        let options = EvalOptions {
            reasoner: info.reasoner.clone(),
            flags: info.flags.clone(),
            unsandboxed: info.unsandboxed,
            ..options.clone()
        };
        let paths: Vec<(String, PathBuf)> =
            info.teams.iter().map(|t| (t.label.clone(), t.path.clone())).collect();
        let prepared = prepare_all(&suite, &paths, &options).await?;
        for (team, row) in info.teams.iter().zip(&prepared) {
            let now = row.first().map(|p| sha256_hex(p.team_text.as_bytes())).unwrap_or_default();
            if now != team.sha256 {
                return Err(Error::bad_input(format!(
                    "the team file {} changed since eval {} started: start a new eval",
                    team.path.display(),
                    info.eval_id
                )));
            }
        }
        let durability = if options.no_sync { Durability::NoSync } else { Durability::Synced };
        let store = RunStore::open(&dir, durability).map_err(Error::bad_input_from)?;
        Ok(Self { dir, info, suite, prepared, options, store })
    }

    /// What `eval.json` says.
    pub fn info(&self) -> &EvalInfo {
        &self.info
    }

    /// The eval's directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Runs every attempt without a result, in order, until they all have one or `stop`
    /// completes (then the eval is interrupted and resumable: the running attempt's run is
    /// interrupted, as by Ctrl-C, and resumed by [`resume`](Self::resume)). `eval.json`
    /// records each attempt's run before it starts and its result once it has one. An attempt
    /// that cannot run (its run cannot start, its storage fails) stops the eval as failed, and
    /// its error is returned; it stays resumable.
    pub async fn run(self, stop: impl Future<Output = ()>) -> Result<Evaluated> {
        let Evaluating { dir, mut info, suite, prepared, options, store } = self;
        info.status = EvalStatus::Running;
        info.finished_at = None;
        info.failure = None;
        info.write(&dir)?;
        let runner = attempt::Runner {
            dir: &dir,
            suite: &suite,
            prepared: &prepared,
            options: &options,
            start: options.start_options(&suite),
        };
        let mut stop = std::pin::pin!(stop);
        let mut status = EvalStatus::Finished;
        for index in 0..info.attempts.len() {
            if info.attempts[index].result.is_some() {
                continue;
            }
            options.observer.started(&info, index);
            match runner.run(&mut info, index, stop.as_mut()).await {
                Ok((result, stopped)) => {
                    if let Some(result) = result {
                        info.attempts[index].result = Some(result);
                        info.write(&dir)?;
                        options.observer.finished(&info, index);
                    }
                    // A stop that came as the run ended still stops the eval.
                    if stopped {
                        status = EvalStatus::Interrupted;
                        break;
                    }
                }
                Err(error) => {
                    info.status = EvalStatus::Failed;
                    info.failure = Some(error.chain_text());
                    info.finished_at = Some(now_ms());
                    info.write(&dir)?;
                    return Err(error.context(format!("eval {} failed", info.eval_id)));
                }
            }
        }
        info.status = status;
        info.finished_at = Some(now_ms());
        info.write(&dir)?;
        drop(store);
        let report = Report::of(&info);
        Ok(Evaluated { info, dir, report })
    }
}

/// An eval's run as it ended.
#[derive(Debug)]
pub struct Evaluated {
    /// `eval.json` as it ended ([`EvalStatus::Finished`], or `Interrupted`: resumable).
    pub info: EvalInfo,
    /// The eval's directory.
    pub dir: PathBuf,
    /// Its figures (of the attempts that have a result).
    pub report: Report,
}

/// Reads and checks the suite folder `dir` on a blocking thread: bad input if it cannot be
/// used.
async fn read_suite(dir: PathBuf) -> Result<SuiteFile> {
    tokio::task::spawn_blocking(move || SuiteFile::read(&dir))
        .await
        .context("reading the suite failed")?
        .map_err(Error::bad_input_from)
}

/// The teams' labels and paths: `teams` as given, else the suite's own; bad input if there is
/// none.
fn team_paths(suite: &SuiteFile, teams: &[PathBuf]) -> Result<Vec<(String, PathBuf)>> {
    let paths: Vec<(String, PathBuf)> = if teams.is_empty() {
        let team = suite.team.clone().ok_or_else(|| {
            Error::bad_input(format!(
                "no team: give --team FILE, or name one in {} (`team = \"team.toml\"`)",
                suite.dir.join("suite.toml").display()
            ))
        })?;
        let label = team.strip_prefix(&suite.dir).unwrap_or(&team).display().to_string();
        vec![(label, team)]
    } else {
        teams
            .iter()
            .map(|t| {
                (t.display().to_string(), std::path::absolute(t).unwrap_or_else(|_| t.clone()))
            })
            .collect()
    };
    let mut labels = std::collections::BTreeSet::new();
    for (label, _) in &paths {
        if !labels.insert(label) {
            return Err(Error::bad_input(format!("the team {label} is given twice")));
        }
    }
    Ok(paths)
}

/// Every task of `suite` with every team, checked as `strata run` checks a run: per team,
/// per task.
async fn prepare_all(
    suite: &SuiteFile,
    teams: &[(String, PathBuf)],
    options: &EvalOptions,
) -> Result<Vec<Vec<Prepared>>> {
    let start = options.start_options(suite);
    let mut prepared = Vec::new();
    for (label, path) in teams {
        let mut row = Vec::new();
        for task in &suite.tasks {
            let run = match &task.work {
                Work::Plan(plan) => Prepared::from_files(Some(path), plan, &start).await,
                Work::Goal(goal) => Prepared::from_goal(Some(path), goal, &start).await,
            };
            row.push(
                run.map_err(|e| e.context(format!("task `{}` with the team {label}", task.name)))?,
            );
        }
        if let Some(first) = row.first() {
            crate::services::sandbox(&first.team, options.unsandboxed)
                .map_err(|e| e.context(format!("the team {label}")))?;
        }
        prepared.push(row);
    }
    Ok(prepared)
}

/// The attempts: each team, each task, `repeat` times.
fn plan(suite: &SuiteFile, teams: usize, repeat: u32) -> Vec<Attempt> {
    let mut attempts = Vec::new();
    for team in 0..teams {
        for task in &suite.tasks {
            for n in 1..=repeat {
                attempts.push(Attempt {
                    task: task.name.clone(),
                    team,
                    repeat: n,
                    run_id: None,
                    result: None,
                });
            }
        }
    }
    attempts
}

/// The SHA-256 of what defines the suite's tasks: `suite.toml`, and each task's name,
/// `task.toml`, plan, check script and files to start from (each file's path and content).
fn suite_digest(suite: &SuiteFile) -> Result<String> {
    let read = |path: &Path| -> Result<Vec<u8>> {
        std::fs::read(path).with_context(|| format!("cannot read {}", path.display()))
    };
    let mut bytes = read(&suite.dir.join("suite.toml"))?;
    for task in &suite.tasks {
        let mut parts: Vec<&[u8]> = Vec::new();
        let toml = read(&task.dir.join("task.toml"))?;
        let plan = match &task.work {
            Work::Plan(path) => read(path)?,
            Work::Goal(_) => Vec::new(),
        };
        let script = match &task.check {
            Check::Script(path) => read(path)?,
            Check::Command(_) => Vec::new(),
        };
        let mut files = Vec::new();
        if let Some(dir) = &task.files {
            tree_bytes(dir, dir, &mut files)?;
        }
        parts.extend([task.name.as_bytes(), &toml, &plan, &script, &files]);
        for part in parts {
            bytes.extend_from_slice(&(part.len() as u64).to_le_bytes());
            bytes.extend_from_slice(part);
        }
    }
    Ok(sha256_hex(&bytes))
}

/// Appends every file under `dir` to `out`, in name order: its path relative to `root`, then
/// its content, each with its length first. Symbolic links are taken as their target's path.
fn tree_bytes(root: &Path, dir: &Path, out: &mut Vec<u8>) -> Result<()> {
    let mut entries: Vec<_> = std::fs::read_dir(dir)
        .with_context(|| format!("cannot read {}", dir.display()))?
        .collect::<std::io::Result<_>>()
        .with_context(|| format!("cannot read {}", dir.display()))?;
    entries.sort_by_key(std::fs::DirEntry::file_name);
    for entry in entries {
        let path = entry.path();
        let kind = entry.file_type().with_context(|| format!("cannot read {}", path.display()))?;
        let name = path.strip_prefix(root).unwrap_or(&path).to_string_lossy().into_owned();
        let content = if kind.is_dir() {
            tree_bytes(root, &path, out)?;
            continue;
        } else if kind.is_symlink() {
            std::fs::read_link(&path)
                .with_context(|| format!("cannot read {}", path.display()))?
                .to_string_lossy()
                .into_owned()
                .into_bytes()
        } else {
            std::fs::read(&path).with_context(|| format!("cannot read {}", path.display()))?
        };
        for part in [name.as_bytes(), &content] {
            out.extend_from_slice(&(part.len() as u64).to_le_bytes());
            out.extend_from_slice(part);
        }
    }
    Ok(())
}

/// Creates a new eval's directory and store; one of this id already there is bad input.
fn create_store(dir: &Path, id: &str, options: &EvalOptions) -> Result<RunStore> {
    let durability = if options.no_sync { Durability::NoSync } else { Durability::Synced };
    match RunStore::create(dir, id, Timestamp(now_ms()), durability) {
        Ok(store) => Ok(store),
        Err(
            e @ (run_store::StoreError::AlreadyExists { .. }
            | run_store::StoreError::BadRunId { .. }),
        ) => Err(Error::bad_input_from(e)),
        Err(e) => Err(Error::failed_from(e)
            .context(format!("cannot create the eval directory {}", dir.display()))),
    }
}

/// The task of `info`'s attempt in `suite`.
fn task_of<'a>(suite: &'a SuiteFile, name: &str) -> Result<(usize, &'a TaskFile)> {
    suite.tasks.iter().enumerate().find(|(_, t)| t.name == name).ok_or_else(|| {
        Error::bad_input(format!("the suite {} has no task `{name}` any more", suite.dir.display()))
    })
}

#[cfg(test)]
mod tests;
