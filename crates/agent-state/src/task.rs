//! Tasks, plans and subtasks, and the payloads the layers exchange about them.
//!
//! A [`Task`] is a goal with [`PlanStep`]s. The top layer approves it as a decision, hands each
//! mid lead a [`WorkPackage`] with the steps for its domain, the lead turns steps into
//! [`Subtask`]s for its executors, and [`SubtaskResult`]s flow back up as progress reports.

use serde::{Deserialize, Serialize};

use crate::{AgentId, DecisionId, QUOTE_CHARS, quote};

/// Who a plan step is for.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum StepTarget {
    /// Any lead whose domain matches.
    Domain(String),
    /// One named agent (a lead, or an executor under some lead).
    Agent(AgentId),
    /// Whoever can run the tool.
    Any,
}

/// One step of a plan: what to do, for whom, and either which tool to run with which
/// arguments (a scripted step) or only the description (a goal step: the executor's reasoner
/// chooses its tool calls).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct PlanStep {
    /// Unique within the task, such as `write-readme`.
    pub id: String,
    /// What the step does, in words.
    pub description: String,
    /// Who should do it.
    pub target: StepTarget,
    /// The tool to call; empty in a goal step, whose executor chooses its own calls.
    #[serde(default)]
    pub tool: String,
    /// The tool's arguments.
    #[serde(default)]
    pub args: serde_json::Value,
    /// Steps that must finish first; each must be listed earlier in the plan. Steps with nothing
    /// to wait for run in parallel.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub after: Vec<String>,
    /// Running the step twice has the same effect as once, so a tool call of it that a crash
    /// interrupted may simply run again. A step that is not idempotent (the default) is never
    /// run again after such an interruption: the task stops with
    /// [`TaskFailure::Interrupted`] and a person decides.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub idempotent: bool,
    /// The role of the agents the step needs, when a plan names one: a lead that
    /// spawns its workers spawns this role for the step.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub role: Option<String>,
    /// How to tell the step is done well (an acceptance check, in words), if the plan says.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub acceptance: String,
}

impl PlanStep {
    /// A goal step: `description` for `target`, with no tool; the executor's reasoner chooses
    /// its calls. It waits for nothing, is not idempotent, and names no role or acceptance
    /// check (the `with_` methods add them).
    pub fn goal(id: impl Into<String>, description: impl Into<String>, target: StepTarget) -> Self {
        Self {
            id: id.into(),
            description: description.into(),
            target,
            tool: String::new(),
            args: serde_json::Value::Null,
            after: Vec::new(),
            idempotent: false,
            role: None,
            acceptance: String::new(),
        }
    }

    /// A scripted step: `description` for `target`, done by calling `tool` with `args`;
    /// otherwise as [`goal`](Self::goal).
    pub fn scripted(
        id: impl Into<String>,
        description: impl Into<String>,
        target: StepTarget,
        tool: impl Into<String>,
        args: serde_json::Value,
    ) -> Self {
        Self { tool: tool.into(), args, ..Self::goal(id, description, target) }
    }

    /// The same step, waiting for the steps `ids` (each listed earlier in the plan).
    #[must_use]
    pub fn with_after(mut self, ids: impl IntoIterator<Item = impl Into<String>>) -> Self {
        self.after = ids.into_iter().map(Into::into).collect();
        self
    }

    /// The same step, marked idempotent (`true`: a call of it a crash interrupted may run
    /// again) or not.
    #[must_use]
    pub fn with_idempotent(mut self, idempotent: bool) -> Self {
        self.idempotent = idempotent;
        self
    }

    /// The same step, for agents of `role`.
    #[must_use]
    pub fn with_role(mut self, role: impl Into<String>) -> Self {
        self.role = Some(role.into());
        self
    }

    /// The same step, with how to tell it is done well.
    #[must_use]
    pub fn with_acceptance(mut self, acceptance: impl Into<String>) -> Self {
        self.acceptance = acceptance.into();
        self
    }

    /// Whether the step names its tool (a scripted step) rather than leaving the calls to the
    /// executor's reasoner (a goal step).
    pub fn is_scripted(&self) -> bool {
        !self.tool.trim().is_empty()
    }
}

/// A mid-layer lead the top layer asks to create for a task (dynamic team formation, seed
/// 001): part of the plan the powers sign; once signed, the pool creates it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct LeadRequest {
    /// The mid role to create.
    pub role: String,
    /// The domain it leads: the steps whose target is this domain go to it.
    pub domain: String,
}

/// A task for a team: a goal and the plan to reach it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Task {
    /// Unique id, supplied by the submitter.
    pub id: String,
    /// What the team should achieve.
    pub goal: String,
    /// The steps.
    pub steps: Vec<PlanStep>,
}

/// The part of a task that one mid lead is responsible for.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct WorkPackage {
    /// The task.
    pub task_id: String,
    /// The task's goal.
    pub goal: String,
    /// The decision that approved the plan.
    pub decision: DecisionId,
    /// Which dispatch of the task this is: 1 for the steps that wait for nothing, then one more
    /// each time finished steps release others.
    pub wave: u32,
    /// The steps for this lead.
    pub steps: Vec<PlanStep>,
}

/// A step handed to one executor.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Subtask {
    /// The task.
    pub task_id: String,
    /// The step it carries out.
    pub step: PlanStep,
    /// The executor.
    pub assignee: AgentId,
    /// 1 for the first assignment, 2 after one reassignment, and so on.
    pub attempt: u32,
}

impl Subtask {
    /// `task/step`, unique within a run.
    pub fn key(&self) -> String {
        format!("{}/{}", self.task_id, self.step.id)
    }
}

/// What an executor reports for a subtask.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct SubtaskResult {
    /// The task.
    pub task_id: String,
    /// The step.
    pub step_id: String,
    /// Who did it.
    pub agent: AgentId,
    /// Whether it succeeded.
    pub success: bool,
    /// Output or error text.
    pub output: String,
    /// The structured result (`return_results`), when the worker gave one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub result: Option<crate::AgentResult>,
}

/// How a task ended.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "outcome", rename_all = "snake_case")]
pub enum TaskOutcome {
    /// Every step succeeded.
    Succeeded {
        /// The task.
        task_id: String,
        /// Every step's result, in plan order.
        results: Vec<SubtaskResult>,
    },
    /// The task failed.
    Failed {
        /// The task.
        task_id: String,
        /// Why.
        reason: TaskFailure,
    },
}

impl TaskOutcome {
    /// The task id.
    pub fn task_id(&self) -> &str {
        match self {
            TaskOutcome::Succeeded { task_id, .. } | TaskOutcome::Failed { task_id, .. } => task_id,
        }
    }

    /// Whether the task succeeded.
    pub fn is_success(&self) -> bool {
        matches!(self, TaskOutcome::Succeeded { .. })
    }
}

/// Why a task failed.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, thiserror::Error)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum TaskFailure {
    /// A top power vetoed the plan and it could not be revised.
    #[error("plan vetoed by `{by}`: {}", quote(reason, QUOTE_CHARS))]
    Vetoed {
        /// Who vetoed.
        by: AgentId,
        /// The veto's reason, as given (a model's or a person's words: shown quoted and cut).
        reason: String,
    },
    /// Every step had its result, and the top power that closes the task judged it incomplete
    /// or not acceptable (its reasoner's judgement of the results and the global board).
    #[error("{}", judged(by, reason, *succeeded, *steps))]
    JudgedIncomplete {
        /// The power that judged.
        by: AgentId,
        /// Its judgement, as given (a model's words: shown quoted and cut).
        reason: String,
        /// How many of the plan's steps had a successful result when it judged.
        #[serde(default)]
        succeeded: u32,
        /// How many steps the plan has (0: not known).
        #[serde(default)]
        steps: u32,
    },
    /// An agent reported the task, or one step of it, failed without a typed reason (an
    /// executor or an OODA agent reporting straight to a power, say): what it said.
    #[error(
        "`{by}` reported {} failed: {}",
        step.as_ref().map_or_else(|| "the task".to_owned(), |s| format!("step `{s}`")),
        quote(reason, QUOTE_CHARS)
    )]
    ReportedFailed {
        /// The agent that reported it.
        by: AgentId,
        /// The step, when the report names one.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        step: Option<String>,
        /// What it said, as given (shown quoted and cut).
        reason: String,
    },
    /// The leads a signed plan asks for (dynamic team formation) could not be created.
    #[error("the team the plan asks for could not be formed: {reason}")]
    TeamNotFormed {
        /// Why.
        reason: String,
    },
    /// No lead or executor can take a step.
    #[error("step `{step}` cannot be placed: {reason}")]
    Unplaceable {
        /// The step.
        step: String,
        /// Why.
        reason: String,
    },
    /// A step failed on every executor that tried it.
    #[error("step `{step}` failed after {attempts} attempt(s): {error}")]
    StepFailed {
        /// The step.
        step: String,
        /// How many executors tried.
        attempts: u32,
        /// The last error.
        error: String,
    },
    /// A side-effecting tool call of a step was interrupted (the run was killed while it ran)
    /// and the step is not idempotent, so it is not run again automatically: running it twice
    /// could repeat its effect. A person must look at the workspace and decide.
    #[error(
        "step `{step}` was interrupted while `{agent}` ran `{tool}`, and it is not run again \
         automatically because running it twice could repeat its effect; needs a decision: \
         check the workspace, then re-run the step (declare it `idempotent = true` if running it \
         again is safe) or change the plan{}",
        if partial.is_empty() { String::new() } else { format!("; partial output: {partial}") }
    )]
    Interrupted {
        /// The step.
        step: String,
        /// The executor that ran it.
        agent: AgentId,
        /// The tool.
        tool: String,
        /// What the call had printed before it was stopped (shortened).
        #[serde(default)]
        partial: String,
    },
    /// An executor kind's run of a step is blocked: it cannot proceed without an
    /// input it was not given. Not retried and not reassigned (another executor would miss the
    /// same input): escalated for a person or a model to supply it.
    #[error(
        "step `{step}` is blocked: `{agent}` ran `{executor_kind}` and it needs {missing}; supply it (in \
         the step's `args.inputs` or the objective) and run the step again"
    )]
    Blocked {
        /// The step.
        step: String,
        /// The executor that ran it.
        agent: AgentId,
        /// The executor kind.
        executor_kind: String,
        /// What is missing, in words.
        missing: String,
    },
    /// The run's storage failed (a full disk, an I/O error, a file system remounted
    /// read-only): nothing more can be recorded, so the run stops. What was stored before is
    /// kept, and the run can be resumed once the storage works again.
    #[error(
        "the run's storage failed, so the run stopped: {error}; nothing stored before is lost: \
         free space (or fix the disk) and run `strata resume` on the run"
    )]
    Storage {
        /// What the storage reported.
        error: String,
    },
    /// The plan is not valid.
    #[error("invalid plan: {reason}")]
    InvalidPlan {
        /// What is wrong.
        reason: String,
    },
    /// The team shut down before the task finished.
    #[error("the team shut down before the task finished")]
    ShutDown,
    /// A top power or a mid lead failed (its retries exhausted, such as a model API refusing
    /// every call), and nothing replaces it, so the task cannot finish.
    #[error("agent `{agent}` failed and is not replaced, so the task cannot finish: {reason}")]
    AgentFailed {
        /// The agent.
        agent: AgentId,
        /// Why it failed.
        reason: String,
    },
    /// The run stopped on its reasoning budget (tokens, cost, wall time or calls), or the top
    /// layer refused to extend it.
    #[error("stopped: {reason}")]
    BudgetExceeded {
        /// Which limit, how much was used, and what to raise.
        reason: String,
    },
    /// A time limit of the team (its `[timeouts]`) ran out: a subtask's (the step is not
    /// retried nor reassigned: it would likely run out again) or the whole task's.
    #[error(
        "{what} ran past its {limit} limit of {limit_ms} ms; raise `{key}` in the team file's \
         `[timeouts]`, or give it less to do",
        key = .limit.key()
    )]
    TimedOut {
        /// Which limit.
        limit: crate::Limit,
        /// What ran out of time, in words (`step `build` on `exec-1``, `task `t1``).
        what: String,
        /// The limit, in milliseconds.
        limit_ms: u64,
    },
    /// An agent repeated the same call (the same tool with the same arguments, or the same
    /// short block of calls) `repeats` times in a row: it is going round in a loop.
    #[error(
        "stopped a loop: `{agent}` repeated {item} {repeats} times in a row without getting \
         anywhere; change the step (its description, arguments or acceptance) or the agent's \
         instructions, or raise `guards.repeat_limit` if the repetition is intended"
    )]
    Loop {
        /// The agent.
        agent: AgentId,
        /// What it repeated (`tool {arguments}`, blocks joined by ` then `).
        item: String,
        /// How many times in a row.
        repeats: u32,
    },
    /// Two agents handed the same work item back and forth `hops` times.
    #[error(
        "stopped a ping-pong: `{}` and `{}` handed {item} back and forth {hops} times; decide \
         which of them owns it (name the agent in the step's target) or raise \
         `guards.bounce_limit`",
        agents.first().map(AgentId::as_str).unwrap_or_default(),
        agents.get(1).map(AgentId::as_str).unwrap_or_default()
    )]
    PingPong {
        /// The two agents.
        agents: Vec<AgentId>,
        /// The work item.
        item: String,
        /// How many hand-overs.
        hops: u32,
    },
    /// A task was open and nothing moved for `heartbeats` heartbeats in a row.
    #[error(
        "stopped: no progress for {heartbeats} heartbeats while the task was open (agents still \
         on it: {}); check why they wait (`strata inspect` shows their last acts), or raise \
         `guards.idle_heartbeats` for work that is slow on purpose",
        if agents.is_empty() { "none".to_owned() } else {
            agents.iter().map(AgentId::as_str).collect::<Vec<_>>().join(", ")
        }
    )]
    NoProgress {
        /// How many heartbeats.
        heartbeats: u32,
        /// The agents with the task's work still open.
        agents: Vec<AgentId>,
    },
    /// Agents waited on each other in a cycle, so none of them could go on.
    #[error(
        "stopped a wait cycle: {}; nobody in it can go on: let one side answer without waiting \
         (or stop waiting) in the agents' instructions or the plan",
        cycle.iter().zip(waits.iter()).enumerate().map(|(i, (agent, what))| {
            let next = cycle.get(i + 1).or(cycle.first()).map(AgentId::as_str).unwrap_or_default();
            format!("`{agent}` waits on `{next}` for {what}")
        }).collect::<Vec<_>>().join(", ")
    )]
    WaitCycle {
        /// The agents of the cycle, each waiting on the next and the last on the first.
        cycle: Vec<AgentId>,
        /// What each waits for, in the same order.
        waits: Vec<String>,
    },
}

/// The message of [`TaskFailure::JudgedIncomplete`]: who judged, its words quoted, and what the
/// results said, so that a judgement that contradicts them shows it.
fn judged(by: &AgentId, reason: &str, succeeded: u32, steps: u32) -> String {
    let quoted = quote(reason, QUOTE_CHARS);
    let said = if quoted.len() <= 2 {
        " without giving a reason".to_owned()
    } else {
        format!(": {quoted}")
    };
    let results = match (succeeded, steps) {
        (_, 0) => String::new(),
        (s, n) if s == n => format!(" (the results: all {n} step(s) succeeded)"),
        (s, n) => format!(" (the results: {s} of {n} step(s) succeeded)"),
    };
    format!("`{by}` judged the task incomplete{said}{results}")
}

impl TaskFailure {
    /// Whether a guard stopped the task ([`Loop`](Self::Loop), [`PingPong`](Self::PingPong),
    /// [`NoProgress`](Self::NoProgress), [`WaitCycle`](Self::WaitCycle)): not retried nor
    /// reassigned, like an interrupted step.
    pub fn is_stuck(&self) -> bool {
        matches!(
            self,
            TaskFailure::Loop { .. }
                | TaskFailure::PingPong { .. }
                | TaskFailure::NoProgress { .. }
                | TaskFailure::WaitCycle { .. }
        )
    }
}

impl Task {
    /// A task with only a goal: the top layer's reasoner plans its steps.
    pub fn goal(id: impl Into<String>, goal: impl Into<String>) -> Self {
        Self { id: id.into(), goal: goal.into(), steps: Vec::new() }
    }

    /// Whether every step names its tool and arguments, so any reasoner can carry it out;
    /// `false` for a goal-only task (no steps: the top layer plans it) or a plan with goal
    /// steps (a description only), which only a reasoner that plans and chooses tools can do.
    pub fn is_scripted(&self) -> bool {
        !self.steps.is_empty() && self.steps.iter().all(PlanStep::is_scripted)
    }

    /// Checks a task as submitted: like [`check`](Self::check), except that it may have no
    /// steps at all (a goal-only task, planned by the top layer).
    pub fn check_request(&self) -> Result<(), TaskFailure> {
        if self.steps.is_empty() {
            let planned = Task {
                steps: vec![PlanStep::goal("goal", self.goal.clone(), StepTarget::Any)],
                ..self.clone()
            };
            return planned.check();
        }
        self.check()
    }

    /// Checks the plan: an id and a goal, at least one step, unique step ids, every step with a
    /// tool name or (a goal step) a description, every `after` naming a step listed earlier (so
    /// there are no cycles), and no control character (see [`find_control`](crate::find_control))
    /// in the task id or a step's id, tool, role, target or `after`.
    pub fn check(&self) -> Result<(), TaskFailure> {
        let invalid = |reason: String| Err(TaskFailure::InvalidPlan { reason });
        // Ids and names are printed in events and summaries: one line of printable text each.
        let control = |what: &str, value: &str| {
            crate::find_control(value).map(|(index, c)| {
                format!(
                    "{what} has the control character {} at character {}; ids and names are \
                     one line of printable text",
                    c.escape_unicode(),
                    index + 1
                )
            })
        };
        if self.id.trim().is_empty() {
            return invalid("the task needs an `id`".into());
        }
        if let Some(reason) = control("the task's `id`", &self.id) {
            return invalid(reason);
        }
        if self.goal.trim().is_empty() {
            return invalid("the task needs a `goal`".into());
        }
        if self.steps.is_empty() {
            return invalid("the plan has no steps; add at least one".into());
        }
        for (i, step) in self.steps.iter().enumerate() {
            if step.id.trim().is_empty() {
                return invalid(format!("step {} has an empty `id`", i + 1));
            }
            if let Some(reason) = control(&format!("the `id` of step {}", i + 1), &step.id) {
                return invalid(reason);
            }
            let target = match &step.target {
                StepTarget::Domain(domain) => domain.as_str(),
                StepTarget::Agent(agent) => agent.as_str(),
                StepTarget::Any => "",
            };
            let names = [
                ("`tool`", step.tool.as_str()),
                ("target", target),
                ("`role`", step.role.as_deref().unwrap_or_default()),
            ]
            .into_iter()
            .chain(step.after.iter().map(|a| ("`after`", a.as_str())));
            for (what, value) in names {
                if let Some(reason) = control(&format!("the {what} of step `{}`", step.id), value) {
                    return invalid(reason);
                }
            }
            if self.steps[..i].iter().any(|s| s.id == step.id) {
                return invalid(format!("step id `{}` is used twice", step.id));
            }
            if step.tool.trim().is_empty() && step.description.trim().is_empty() {
                return invalid(format!(
                    "step `{}` names no `tool` and has no `description`; give the tool and its \
                     arguments, or describe the step for a reasoner that chooses its tools",
                    step.id
                ));
            }
            if let Some(dep) =
                step.after.iter().find(|d| !self.steps[..i].iter().any(|s| &s.id == *d))
            {
                return invalid(format!(
                    "step `{}` waits for `{dep}`, which is not a step listed before it",
                    step.id
                ));
            }
        }
        Ok(())
    }
}

/// The content of a `task_assign` message.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "assign", rename_all = "snake_case")]
pub enum Assignment {
    /// A whole task, from the submitter to the proposing top power.
    Task {
        /// The task.
        task: Task,
    },
    /// A lead's part of an approved task, from a top power.
    Work {
        /// The work package.
        work: WorkPackage,
    },
    /// One step for an executor, from its lead.
    Subtask {
        /// The subtask.
        subtask: Subtask,
    },
    /// A lead dismisses its failed executor (failed → terminated).
    Dismiss {
        /// Why.
        reason: String,
    },
}

/// Where a piece of work stands, in a `progress_report`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ProgressStatus {
    /// Started.
    InProgress,
    /// Done.
    Completed,
    /// Failed for good.
    Failed,
}

/// The content of a `progress_report` message.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ProgressReport {
    /// The task.
    pub task_id: String,
    /// Where it stands.
    pub status: ProgressStatus,
    /// Percentage done, 0 to 100.
    pub percentage: u8,
    /// What happened, in words.
    pub description: String,
    /// Results so far (one per finished step).
    #[serde(default)]
    pub results: Vec<SubtaskResult>,
    /// Why it failed, if it did.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub failure: Option<TaskFailure>,
}

impl WorkPackage {
    /// The key a lead files this package under: `task#wave`.
    pub fn key(&self) -> String {
        format!("{}#{}", self.task_id, self.wave)
    }
}
