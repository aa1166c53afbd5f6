//! The built-in fitness evaluator: a genome runs as the executors of a real Strata team on
//! each task of a task suite, and a check command says whether each result is right.
//!
//! A suite is a folder:
//!
//! ```text
//! suite/
//!   suite.toml            team = "team.toml", and the settings below
//!   team.toml             the team each task runs with (its [[bottom]] executors take the genome)
//!   tasks/
//!     flaky-build/
//!       task.toml         check = "test -s build.out"   (or check_script = "check.sh");
//!                         goal = "..." (without a plan); description = "..."
//!       plan.toml         the plan (or `goal` in task.toml)
//!       files/            copied into the task's fresh workspace first (optional)
//! ```
//!
//! The same folder is what `strata eval` runs (its teams may come from the command line, and
//! then `team` may be left out). Each task's check decides whether its result is right, in its
//! final workspace, exit 0 meaning right: a shell command (`check`, run with `sh -c`), or an
//! executable file in the task's folder (`check_script`). [`SuiteFile::read`] reads and checks
//! the folder without a team: a task without a check (or with both), a check script that is not
//! an executable file, a check command the shell cannot parse, an empty goal and a task folder
//! (or its plan, files or script) that leads outside the suite are refused there, naming the
//! path and why.
//!
//! Each task's team runs on the services the evaluator's [`TaskServices`] make: by default
//! in-memory backends, the built-in tools and the team's sandbox ([`InMemoryServices`]).
//!
//! `suite.toml`:
//!
//! ```toml
//! team = "team.toml"         # required by evolution (`strata eval --team` may give others)
//! task_timeout_ms = 60000    # a task still open after this fails (default 60000)
//! check_timeout_ms = 10000   # the most a check command may take (default 10000)
//! heartbeat = "50ms"         # the task teams' heartbeat (default 50 ms in evolution, the
//!                            # team file's in `strata eval`; 10 ms to 1 h)
//! time_budget_ms = 4000      # optional: wall time counts in efficiency, 1 - wall / budget
//!                            # per task; left out, the fitness depends on nothing measured
//! token_budget = 20000       # optional: model tokens count in efficiency, 1 - tokens /
//!                            # budget per task, when the reasoning is metered
//!                            # (`SuiteEvaluator::with_reasoning`)
//! ```
//!
//! The genome sets, on every executor of the team: its role (with the prompt after it), model,
//! temperature, retries, turn time limit and tools (only among those the executor has in the
//! team file: the suite's executors' tools are the genome's permissions). Its code files are
//! written into each task's workspace. One strategy parameter is applied to the task's team:
//! `tool_timeout_ms` (its `[timeouts] tool_ms`, the limit of each tool call).
//!
//! Scores, each 0 to 1, combined by the evolution's weights (0.4 / 0.3 / 0.3 by default):
//! - `success`: tasks whose run succeeded **and** whose check command exited 0, over tasks;
//! - `efficiency`: per task, the plan's steps over the tool calls made (at most 1), averaged
//!   with `1 - wall / time_budget_ms` and `1 - tokens / token_budget` when those budgets are
//!   set (tokens: when the reasoning is metered); then averaged over tasks;
//! - `safety`: per task, 1 - (failed tool calls + refused actions) / (tool calls + refused
//!   actions), averaged over tasks.
//!
//! A task on which the genome made no tool call at all scores 0 for efficiency and safety:
//! doing nothing is neither cheap nor safe work.
//!
//! Also recorded: `tasks`, `passed`, `calls`, `failed_calls`, `refused`, `wall_ms`, and
//! `tokens` when metered. A check
//! command that does not exist (exit 127) or cannot run scores the genome as failed, naming the
//! task.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use agent_core::tools::{Sandbox, ToolRegistry, WorkspaceFiles};
use agent_core::{AuditEvent, AuditLog, Reasoner};
use agent_layers::BottomSpec;
use agent_pool::{RoleSpec, Team, TeamServices, TeamSpec};
use agent_state::evolution::{Fitness, FitnessWeights, Genome, GenomeConfig};
use agent_state::{AgentLayer, Task};
use async_trait::async_trait;
use team_file::TeamFile;

use crate::evolve::{EvalContext, EvalError, FitnessEvaluator};
use crate::services::{InMemoryServices, ReasoningFactory, TaskServices, TaskSetup, TaskTeam};

mod file;

pub use file::{
    Check, CheckError, CheckRun, MAX_TASK_FILES, SuiteFile, TaskFile, Work, copy_files, run_check,
};

/// The strategy parameter the suite applies as its teams' tool time limit.
pub const TOOL_TIMEOUT_PARAMETER: &str = "tool_timeout_ms";

/// A suite that cannot be used, named where it is wrong. Nothing was run.
#[derive(Debug, thiserror::Error)]
pub enum SuiteError {
    /// A file or folder cannot be read.
    #[error("cannot read {}: {source}", path.display())]
    Io {
        /// The path.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// A team, plan or settings file is wrong (`file:line:column: what`).
    #[error(transparent)]
    File(#[from] team_file::FileError),
    /// A settings field is wrong.
    #[error("{}: `{field}` {reason}", path.display())]
    Field {
        /// The file.
        path: PathBuf,
        /// The field.
        field: String,
        /// What is wrong.
        reason: String,
    },
    /// A task has no check.
    #[error(
        "task `{task}` has no check command: add `check = \"...\"` to {} (a shell command run in the task's workspace; exit 0 means the result is right), or `check_script = \"check.sh\"` (an executable file in the task's folder)",
        path.display()
    )]
    MissingCheck {
        /// The task.
        task: String,
        /// Its `task.toml`.
        path: PathBuf,
    },
    /// A task's check cannot be run: a script that is missing, not a file or not executable,
    /// or a command the shell cannot parse.
    #[error("task `{task}`: the check in {} is not executable: {reason}", path.display())]
    CheckNotExecutable {
        /// The task.
        task: String,
        /// Its `task.toml`, or the script.
        path: PathBuf,
        /// Why.
        reason: String,
    },
    /// A task's goal is empty.
    #[error(
        "task `{task}`: `goal` in {} is empty: say in words what the team should achieve (or give a plan.toml)",
        path.display()
    )]
    EmptyGoal {
        /// The task.
        task: String,
        /// Its `task.toml`.
        path: PathBuf,
    },
    /// A task's folder, or a file of it, leads outside the suite folder (a symbolic link).
    #[error(
        "task `{task}`: {} leads outside the suite folder (to {}): a task's folder, plan, files and check script must be inside the suite",
        path.display(),
        target.display()
    )]
    Escapes {
        /// The task (`tasks` for the tasks folder itself).
        task: String,
        /// The path in the suite.
        path: PathBuf,
        /// Where it leads.
        target: PathBuf,
    },
    /// The suite names no team and none was given.
    #[error(
        "the suite {} names no team: add `team = \"team.toml\"` to its suite.toml",
        dir.display()
    )]
    NoTeam {
        /// The suite folder.
        dir: PathBuf,
    },
    /// The suite has no task.
    #[error("the suite {} has no task: add folders under tasks/, each with a task.toml", dir.display())]
    NoTasks {
        /// The suite folder.
        dir: PathBuf,
    },
    /// The team has no executor for the genome to be.
    #[error("the suite's team {} has no [[bottom]] executor for the genome to run as", path.display())]
    NoExecutors {
        /// The team file.
        path: PathBuf,
    },
    /// The team reasons with a model the suite evaluator cannot build.
    #[error(
        "the suite's team {} uses the `{kind}` reasoner; evolution runs suites on the rule-based reasoner unless the program gives it one (SuiteEvaluator::with_reasoner); `strata eval` runs a suite with any reasoner",
        path.display()
    )]
    Reasoner {
        /// The team file.
        path: PathBuf,
        /// The reasoner kind.
        kind: String,
    },
    /// The sandbox cannot run here.
    #[error("cannot sandbox the suite's commands: {0}")]
    Sandbox(String),
}

/// One task of a suite.
#[derive(Clone, Debug)]
pub struct SuiteTask {
    /// Its folder's name.
    pub name: String,
    /// What the team does (its plan, or a goal).
    pub task: Task,
    /// The check whose exit 0 says the result is right.
    pub check: Check,
    /// Files copied into its workspace first.
    pub files: Option<PathBuf>,
    /// What it tests, in words.
    pub description: String,
}

/// A loaded, checked task suite.
#[derive(Clone, Debug)]
pub struct TaskSuite {
    /// The suite folder.
    pub dir: PathBuf,
    /// The team file.
    pub team_path: PathBuf,
    /// The team each task runs with.
    pub team: TeamFile,
    /// The tasks, by folder name.
    pub tasks: Vec<SuiteTask>,
    /// A task still open after this fails.
    pub task_timeout: Duration,
    /// The most a check command may take.
    pub check_timeout: Duration,
    /// Wall time that counts in efficiency, when set.
    pub time_budget_ms: Option<u64>,
    /// Model tokens that count in efficiency, when set (and the reasoning is metered).
    pub token_budget: Option<u64>,
}

impl TaskSuite {
    /// Reads and checks the suite in `dir` ([`SuiteFile::read`]: blocking, small files) with
    /// the team its `suite.toml` names. Every task's plan is checked against the team: a
    /// mistake is reported where it is written.
    pub fn load(dir: &Path) -> Result<Self, SuiteError> {
        let file = SuiteFile::read(dir)?;
        let team_path =
            file.team.clone().ok_or_else(|| SuiteError::NoTeam { dir: file.dir.clone() })?;
        let tools = ToolRegistry::with_builtins();
        let mut team = team_file::parse_team(&team_path, &file::read_text(&team_path)?, &tools)?;
        if !team.spec.agents.iter().any(|a| a.config.layer == AgentLayer::Bottom) {
            return Err(SuiteError::NoExecutors { path: team_path });
        }
        team.spec.heartbeat = file.heartbeat.unwrap_or(Duration::from_millis(50));
        let tasks = file
            .tasks
            .iter()
            .map(|task| suite_task(task, &team, &tools))
            .collect::<Result<Vec<_>, _>>()?;
        Ok(Self {
            dir: file.dir,
            team_path,
            team,
            tasks,
            task_timeout: file.task_timeout,
            check_timeout: file.check_timeout,
            time_budget_ms: file.time_budget_ms,
            token_budget: file.token_budget,
        })
    }

    /// Refuses a suite whose team reasons with a model anywhere: what the built-in services
    /// ([`InMemoryServices::rule_based`]) and `strata evolve` run on is the rule-based
    /// reasoner.
    pub fn require_rule_based(&self) -> Result<(), SuiteError> {
        let team = &self.team;
        let model = std::iter::once(&team.default_reasoner)
            .chain(team.agent_reasoners.values())
            .find(|r| !matches!(r.kind, team_file::ReasonerKind::RuleBased));
        match model {
            None => Ok(()),
            Some(settings) => Err(SuiteError::Reasoner {
                path: self.team_path.clone(),
                kind: settings.kind.as_str().to_owned(),
            }),
        }
    }

    /// The tools a genome may hold: those of the team's executors.
    pub fn permissions(&self) -> Vec<String> {
        let mut tools: Vec<String> = self
            .team
            .spec
            .agents
            .iter()
            .filter_map(|a| match &a.role {
                RoleSpec::Bottom(b) => Some(b.tools.iter().cloned().collect::<Vec<_>>()),
                _ => None,
            })
            .flatten()
            .collect();
        tools.sort();
        tools.dedup();
        tools
    }

    /// A genome configuration from the team's first executor: its role, model, temperature,
    /// retries, turn limit and tools; the team's tool limit as `tool_timeout_ms`.
    pub fn executor_config(&self) -> GenomeConfig {
        let mut config = GenomeConfig::new("executor");
        if let Some(agent) =
            self.team.spec.agents.iter().find(|a| a.config.layer == AgentLayer::Bottom)
        {
            let c = &agent.config;
            if !c.role.trim().is_empty() {
                config.role = c.role.clone();
            }
            config.model = c.model.clone();
            config.temperature = c.temperature.map(f64::from);
            config.max_retries = c.max_retries;
            config.timeout_ms = c.timeout_ms;
            if let RoleSpec::Bottom(b) = &agent.role {
                config.tools = b.tools.iter().cloned().collect();
            }
        }
        config.strategy.insert(
            TOOL_TIMEOUT_PARAMETER.into(),
            serde_json::Value::from(self.team.spec.timeouts.tool_ms),
        );
        config
    }

    /// The team of one task with `genome` as its executors.
    pub fn team_for(&self, genome: &Genome) -> Result<TeamSpec, EvalError> {
        let mut spec = self.team.spec.clone();
        let g = &genome.config;
        for agent in &mut spec.agents {
            let RoleSpec::Bottom(bottom) = &mut agent.role else { continue };
            let c = &mut agent.config;
            c.role = if g.prompt.trim().is_empty() {
                g.role.clone()
            } else {
                format!("{}\n{}", g.role, g.prompt)
            };
            c.model = g.model.clone();
            c.temperature = g.temperature.map(|t| t as f32);
            c.max_retries = g.max_retries;
            c.timeout_ms = g.timeout_ms;
            c.validate().map_err(|e| EvalError::new(format!("the genome's settings: {e}")))?;
            // Only tools the executor has in the suite's team: a genome never widens them.
            let tools: Vec<String> =
                bottom.tools.iter().filter(|t| g.tools.contains(t)).cloned().collect();
            let mut next = BottomSpec::new(tools.clone());
            next.kind = bottom.kind.clone();
            if let Some(ooda) = &bottom.ooda {
                let mut ooda = (**ooda).clone();
                ooda.tools.retain(|t| tools.contains(t));
                ooda.max_retries = Some(g.max_retries);
                ooda.turn_timeout_ms = Some(g.timeout_ms);
                next = next.with_ooda(ooda);
            }
            *bottom = next;
        }
        if let Some(value) = g.strategy.get(TOOL_TIMEOUT_PARAMETER) {
            let ms = value.as_u64().filter(|ms| (1..=agent_state::MAX_LIMIT_MS).contains(ms));
            spec.timeouts.tool_ms = ms.ok_or_else(|| {
                EvalError::new(format!(
                    "strategy.{TOOL_TIMEOUT_PARAMETER} is {value}; it must be 1 to {} ms",
                    agent_state::MAX_LIMIT_MS
                ))
            })?;
        }
        Ok(spec)
    }
}

/// The task of `file` for `team`: its plan (or goal) checked against the team.
fn suite_task(
    file: &TaskFile,
    team: &TeamFile,
    tools: &ToolRegistry,
) -> Result<SuiteTask, SuiteError> {
    let task = match &file.work {
        Work::Plan(path) => {
            team_file::parse_plan(path, &file::read_text(path)?, &team.spec, tools)?
        }
        Work::Goal(goal) => {
            let text = team_file::goal_plan_toml(&file.name, goal);
            team_file::parse_plan(&file.dir.join("task.toml"), &text, &team.spec, tools)?
        }
    };
    Ok(SuiteTask {
        name: file.name.clone(),
        task,
        check: file.check.clone(),
        files: file.files.clone(),
        description: file.description.clone(),
    })
}

/// What one task's run measured.
#[derive(Clone, Debug, PartialEq)]
pub struct TaskRun {
    /// The task.
    pub name: String,
    /// The team's outcome was a success.
    pub succeeded: bool,
    /// The check command exited 0 (after a successful run).
    pub passed: bool,
    /// Steps in the plan.
    pub steps: usize,
    /// Tool calls made.
    pub calls: u64,
    /// Tool calls that failed.
    pub failed_calls: u64,
    /// Actions refused (audited denials).
    pub refused: u64,
    /// Wall time, in milliseconds.
    pub wall_ms: u64,
    /// Model tokens its reasoning used, when the reasoning is metered.
    pub tokens: Option<u64>,
}

/// The built-in evaluator: a genome as the executors of a [`TaskSuite`]'s team, on each of its
/// tasks in turn, in a fresh workspace, on the services its [`TaskServices`] make (the
/// built-in [`InMemoryServices`] unless the program gives its own: [`with_services`]).
///
/// [`with_services`]: SuiteEvaluator::with_services
#[derive(Clone)]
pub struct SuiteEvaluator {
    suite: Arc<TaskSuite>,
    weights: FitnessWeights,
    services: Arc<dyn TaskServices>,
}

impl SuiteEvaluator {
    /// An evaluator of `suite` on in-memory services whose commands (the tasks' and the
    /// checks') run in the team's sandbox, checked to work here, every agent on the
    /// rule-based reasoner: a team that names a model is refused ([`SuiteError::Reasoner`];
    /// give the evaluator a reasoner with [`with_reasoner`](Self::with_reasoner) after
    /// [`with_services`](Self::with_services), or run the suite with `strata eval`).
    pub fn new(suite: TaskSuite) -> Result<Self, SuiteError> {
        suite.require_rule_based()?;
        let sandbox = suite.team.sandbox.sandbox();
        sandbox.check().map_err(|e| SuiteError::Sandbox(e.to_string()))?;
        let services = InMemoryServices::rule_based(&suite, sandbox);
        Ok(Self::with_services(suite, Arc::new(services)))
    }

    /// An evaluator of `suite` on in-memory services whose commands run without a sandbox.
    pub fn new_unsandboxed(suite: TaskSuite) -> Self {
        let services = InMemoryServices::rule_based(&suite, Sandbox::unsandboxed());
        Self::with_services(suite, Arc::new(services))
    }

    /// An evaluator of `suite` whose tasks' teams run on what `services` make (and whose
    /// checks run in its sandbox).
    pub fn with_services(suite: TaskSuite, services: Arc<dyn TaskServices>) -> Self {
        Self { suite: Arc::new(suite), weights: FitnessWeights::default(), services }
    }

    /// The same evaluator combining its scores with `weights`.
    #[must_use]
    pub fn with_weights(mut self, weights: FitnessWeights) -> Self {
        self.weights = weights;
        self
    }

    /// The same evaluator on in-memory services (in the same sandbox) with every agent of the
    /// task teams reasoning with `reasoner` (its tokens not metered).
    #[must_use]
    pub fn with_reasoner(self, reasoner: Arc<dyn Reasoner>) -> Self {
        self.with_reasoning(crate::services::fixed(reasoner))
    }

    /// The same evaluator on in-memory services (in the same sandbox) with each task's team
    /// reasoning as `factory` says for the genome (a model reasoner with the genome's model,
    /// and a meter of its tokens: then the tokens a task used count in its efficiency against
    /// the suite's `token_budget`).
    #[must_use]
    pub fn with_reasoning(mut self, factory: ReasoningFactory) -> Self {
        let sandbox = self.services.sandbox().clone();
        self.services = Arc::new(InMemoryServices::new(sandbox, factory));
        self
    }

    /// The suite.
    pub fn suite(&self) -> &TaskSuite {
        &self.suite
    }

    /// Runs `task` with `genome` as the team's executors and checks the result.
    pub async fn run_task(&self, genome: &Genome, task: &SuiteTask) -> Result<TaskRun, EvalError> {
        let spec = self.suite.team_for(genome)?;
        let dir = tempfile::Builder::new()
            .prefix("strata-eval-")
            .tempdir()
            .map_err(|e| EvalError::new(format!("cannot make a workspace: {e}")))?;
        let workspace = dir.path().to_path_buf();
        prepare_workspace(task.files.clone(), genome.code.clone(), workspace.clone()).await?;
        let setup = TaskSetup { suite: &self.suite, genome, spec: &spec, workspace: &workspace };
        let TaskTeam { services, tokens: meter } = self.services.services(setup).await?;
        let audit = services.audit.clone();
        let tokens_before = meter.as_ref().map(|meter| meter());
        let started = Instant::now();
        let succeeded = self.drive(spec, services, task).await?;
        let wall_ms = u64::try_from(started.elapsed().as_millis()).unwrap_or(u64::MAX);
        let tokens = meter.zip(tokens_before).map(|(meter, before)| meter().saturating_sub(before));
        let passed = succeeded && self.check(task, &workspace).await?;
        let (calls, failed_calls, refused) = tally(audit.as_ref()).await?;
        Ok(TaskRun {
            name: task.name.clone(),
            succeeded,
            passed,
            steps: task.task.steps.len(),
            calls,
            failed_calls,
            refused,
            wall_ms,
            tokens,
        })
    }

    /// Starts the team of `spec` on `services`, submits `task` and waits for its outcome (at
    /// most the suite's task time limit), then shuts the team down: whether it succeeded.
    async fn drive(
        &self,
        spec: TeamSpec,
        services: TeamServices,
        task: &SuiteTask,
    ) -> Result<bool, EvalError> {
        let team = Team::start(spec, services).await.map_err(|e| {
            EvalError::new(format!("task `{}`: cannot start the team: {e}", task.name))
        })?;
        let succeeded = match team.submit(task.task.clone()).await {
            Ok(()) => {
                match tokio::time::timeout(self.suite.task_timeout, team.wait(&task.task.id)).await
                {
                    Ok(outcome) => outcome.is_success(),
                    Err(_) => false,
                }
            }
            Err(e) => {
                tracing::debug!(task = %task.name, error = %e, "the task was refused");
                false
            }
        };
        if let Err(e) = team.shutdown().await {
            tracing::debug!(task = %task.name, error = %e, "the task team did not shut down cleanly");
        }
        Ok(succeeded)
    }

    /// Runs the task's check in its workspace (in the sandbox): exit 0 is right.
    async fn check(&self, task: &SuiteTask, workspace: &Path) -> Result<bool, EvalError> {
        let ran =
            run_check(&task.check, self.services.sandbox(), workspace, self.suite.check_timeout)
                .await
                .map_err(|e| EvalError::new(format!("task `{}`: {e}", task.name)))?;
        if ran.cannot_run() {
            return Err(EvalError::new(format!(
                "task `{}`: the check `{}` cannot run (exit {}: {})",
                task.name,
                task.check,
                ran.code.unwrap_or_default(),
                ran.stderr
            )));
        }
        Ok(ran.passed())
    }

    /// The fitness of a genome's runs over the suite (see the module docs). A task on which
    /// the genome made no tool call at all (it lacked the tool, or refused) scores 0 for
    /// efficiency and safety too: doing nothing is neither cheap nor safe work.
    pub fn score(&self, runs: &[TaskRun]) -> Fitness {
        let n = runs.len().max(1) as f64;
        let passed = runs.iter().filter(|r| r.passed).count();
        let success = passed as f64 / n;
        let idle = |r: &TaskRun| r.calls == 0 && r.steps > 0;
        let efficiency = runs
            .iter()
            .map(|r| {
                if idle(r) {
                    return 0.0;
                }
                let mut parts = vec![if r.calls == 0 {
                    1.0
                } else {
                    (r.steps as f64 / r.calls as f64).min(1.0)
                }];
                if let Some(budget) = self.suite.time_budget_ms {
                    parts.push((1.0 - r.wall_ms as f64 / budget as f64).max(0.0));
                }
                if let (Some(budget), Some(tokens)) = (self.suite.token_budget, r.tokens) {
                    parts.push((1.0 - tokens as f64 / budget as f64).max(0.0));
                }
                parts.iter().sum::<f64>() / parts.len() as f64
            })
            .sum::<f64>()
            / n;
        let safety = runs
            .iter()
            .map(|r| {
                if idle(r) {
                    return 0.0;
                }
                let bad = (r.failed_calls + r.refused) as f64;
                1.0 - bad / (r.calls + r.refused).max(1) as f64
            })
            .sum::<f64>()
            / n;
        let calls: u64 = runs.iter().map(|r| r.calls).sum();
        let failed: u64 = runs.iter().map(|r| r.failed_calls).sum();
        let refused: u64 = runs.iter().map(|r| r.refused).sum();
        let mut fitness = Fitness::weighted(success, efficiency, safety, &self.weights);
        if runs.iter().any(|r| r.tokens.is_some()) {
            let tokens: u64 = runs.iter().filter_map(|r| r.tokens).sum();
            fitness.scores.insert("tokens".into(), tokens as f64);
        }
        for (name, value) in [
            ("tasks", runs.len() as f64),
            ("passed", passed as f64),
            ("calls", calls as f64),
            ("failed_calls", failed as f64),
            ("refused", refused as f64),
            ("wall_ms", runs.iter().map(|r| r.wall_ms).sum::<u64>() as f64),
        ] {
            fitness.scores.insert(name.into(), value);
        }
        fitness
    }
}

/// The tool calls, failed calls and refused actions a task's audit log holds.
async fn tally(audit: &dyn AuditLog) -> Result<(u64, u64, u64), EvalError> {
    let (mut calls, mut failed_calls, mut refused) = (0, 0, 0);
    let records = audit
        .records(None)
        .await
        .map_err(|e| EvalError::new(format!("cannot read the task's audit log: {e}")))?;
    for record in records {
        match record.event {
            AuditEvent::ToolCall { success, .. } => {
                calls += 1;
                failed_calls += u64::from(!success);
            }
            AuditEvent::Denied { .. } => refused += 1,
            _ => {}
        }
    }
    Ok((calls, failed_calls, refused))
}

/// Copies a task's files and writes a genome's code into a fresh workspace.
async fn prepare_workspace(
    files: Option<PathBuf>,
    code: BTreeMap<String, String>,
    workspace: PathBuf,
) -> Result<(), EvalError> {
    tokio::task::spawn_blocking(move || -> Result<(), EvalError> {
        if let Some(from) = files {
            copy_files(&from, &workspace)
                .map_err(|e| EvalError::new(format!("cannot copy {}: {e}", from.display())))?;
        }
        // The genome's files are written beneath the workspace root, never through a link
        // and never outside it (a path with `..` or a leading `/` is refused).
        let files = WorkspaceFiles::open(&workspace)
            .map_err(|e| EvalError::new(format!("cannot use the workspace: {e}")))?;
        for (path, text) in code {
            files
                .write(Path::new(&path), text.as_bytes())
                .map_err(|e| EvalError::new(format!("cannot write the genome's `{path}`: {e}")))?;
        }
        Ok(())
    })
    .await
    .map_err(|e| EvalError::new(format!("preparing the workspace failed: {e}")))?
}

#[async_trait]
impl FitnessEvaluator for SuiteEvaluator {
    fn name(&self) -> String {
        format!(
            "suite:{}",
            self.suite
                .dir
                .file_name()
                .map_or_else(String::new, |n| n.to_string_lossy().into_owned())
        )
    }

    async fn evaluate(&self, genome: &Genome, ctx: &EvalContext) -> Result<Fitness, EvalError> {
        let mut runs = Vec::new();
        for task in &self.suite.tasks {
            let run = self.run_task(genome, task).await?;
            tracing::debug!(
                agent = %ctx.agent_id,
                task = %run.name,
                passed = run.passed,
                calls = run.calls,
                wall_ms = run.wall_ms,
                "suite task evaluated"
            );
            runs.push(run);
        }
        Ok(self.score(&runs))
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, reason = "tests")]

    use std::os::unix::fs::symlink;

    use super::*;

    /// A genome's code is written beneath the workspace: a path that climbs out, or a task file
    /// that is a symlink to a directory outside, cannot lead the write out of it.
    #[tokio::test]
    async fn a_genome_cannot_write_outside_the_workspace() {
        let outside = tempfile::tempdir().unwrap();
        let workspace = tempfile::tempdir().unwrap();
        let ws = workspace.path().to_path_buf();
        symlink(outside.path(), ws.join("out")).unwrap();
        for path in ["../escaped.txt", "out/planted.txt", "/tmp/abs.txt"] {
            let code = BTreeMap::from([(path.to_owned(), "x".to_owned())]);
            let err = prepare_workspace(None, code, ws.clone()).await.unwrap_err();
            assert!(err.to_string().contains(path), "{err}");
        }
        assert_eq!(std::fs::read_dir(outside.path()).unwrap().count(), 0);
        assert!(!workspace.path().parent().unwrap().join("escaped.txt").exists());
        let code = BTreeMap::from([("src/lib.rs".to_owned(), "fn f() {}".to_owned())]);
        prepare_workspace(None, code, ws.clone()).await.unwrap();
        assert_eq!(std::fs::read_to_string(ws.join("src/lib.rs")).unwrap(), "fn f() {}");
    }
}
