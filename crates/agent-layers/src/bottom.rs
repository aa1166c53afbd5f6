//! The bottom layer: executors that run tools for their lead, record results on their board,
//! report progress, help peers and answer status queries (docs/concepts.md#layers).
//!
//! **Peer help.** An executor knows its peers, the other executors of its lead
//! ([`BottomAgent::with_peers`]), and helps only them:
//! - a subtask it cannot finish — a scripted step whose tool it lacks, or a failure that would
//!   exhaust its retries — it first offers to its peers able to run it (holding the step's
//!   tool), one at a time, each at most once per subtask (`take_over_task`). A peer accepts
//!   when it is idle (nothing queued, not retrying) and able, and tells their lead
//!   (`StatusReport::HandedOver`), which makes it the step's assignee; the subtask leaves the
//!   asker's queue. A refusal (busy, unable, too late; a failed peer refuses at once, the
//!   runtime answering for it) or no answer within
//!   [`PEER_HELP_TIMEOUT_MS`] moves on to the next peer; when none is left the asker fails as
//!   it would have ([`AgentError::GaveUp`]: its lead gets the subtask back with an
//!   `error_report` and reassigns or escalates it). A subtask taken over from a peer is never
//!   offered again: its failure goes to the lead. The pending offer is part of the saved
//!   state, so a crash neither loses it nor makes it twice;
//! - when a goal step (its reasoner chooses the calls) fails and will be retried, it asks one
//!   peer not asked yet to share its board (`share_knowledge`); the answer joins the retried
//!   tool loop's history, for the reasoner to use;
//! - a request from anyone else (an executor of another lead) is refused, audited as
//!   [`AuditEvent::Denied`].
//!
//! Every ask and answer is audited ([`AuditEvent::PeerHelp`]) and noted on the executor's
//! board.

use std::collections::{BTreeMap, VecDeque};
use std::sync::Arc;

use agent_core::protocol::{HelpRequest, HelpResponse, StatusReport};
use agent_core::{
    AgentBehavior, AgentContext, AgentError, AuditEvent, PeerHelpOutcome, PeerHelpRequest,
};
use agent_state::{
    Action, AgentId, AgentResult, Assignment, BoardId, BoardSnapshot, ErrorClass, GuardSettings,
    Message, MessageId, MessageKind, OnStuck, ProgressReport, ProgressStatus, ResultStatus,
    Subtask, SubtaskResult, TaskFailure, Timestamp,
};

use crate::desk::{Desk, DeskMail};
use crate::kind::{self, KindEnd, KindRunner};
use crate::work::{Means, Outcome, Progress, WorkLoop};
use async_trait::async_trait;
use serde::{Deserialize, Serialize};

/// An executor's settings.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct BottomSpec {
    /// The tools it may call. Shared: executors with the same tools hold one list (a team of
    /// 100 000 executors holds a handful of lists, not 100 000).
    pub tools: Arc<[String]>,
    /// The executor kind it runs its subtasks through, such as `research_agent`;
    /// `None`: its reasoner chooses tool calls.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kind: Option<Arc<str>>,
    /// An OODA agent (`agent-ooda`) with this configuration instead of a tool-loop
    /// executor: it takes its lead's subtasks as objectives and runs its own loop; `tools` is
    /// the most it may hold (its configuration's tools, and any it adds to itself, are among
    /// them).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ooda: Option<Arc<agent_state::ooda::OodaConfig>>,
}

impl BottomSpec {
    /// An executor allowed `tools`.
    pub fn new<S: Into<String>>(tools: impl IntoIterator<Item = S>) -> Self {
        Self { tools: tools.into_iter().map(Into::into).collect(), kind: None, ooda: None }
    }

    /// The same executor as an OODA agent with `config` (see [`ooda`](Self::ooda)).
    #[must_use]
    pub fn with_ooda(mut self, config: agent_state::ooda::OodaConfig) -> Self {
        self.ooda = Some(Arc::new(config));
        self
    }

    /// The same executor running its subtasks through the executor kind `kind`. The kind is
    /// also one of its tools, so that a lead places a step whose `tool` is the kind on it.
    #[must_use]
    pub fn with_kind(mut self, kind: impl Into<Arc<str>>) -> Self {
        let kind = kind.into();
        if !self.tools.iter().any(|t| **t == *kind) {
            self.tools = self.tools.iter().cloned().chain([kind.to_string()]).collect();
        }
        self.kind = Some(kind);
        self
    }
}

/// How long an executor waits for a peer's answer to a take-over request before it asks the
/// next peer (on the run's clock). A peer refuses a request older than half of it as too late,
/// so that an acceptance does not cross the asker moving on.
pub const PEER_HELP_TIMEOUT_MS: u64 = 20_000;

/// The executors of one lead and their tools, shared by all of them.
pub type Peers = Arc<[(AgentId, Arc<[String]>)]>;

/// Peer help for one subtask, kept in the executor's saved state.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
struct Help {
    /// Taken over from this peer: never offered to a peer again.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    taken_from: Option<AgentId>,
    /// The failure that made the executor offer it (what its lead gets if no peer takes it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    failure: Option<String>,
    /// The peers offered it so far, with their answers.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    asked: Vec<(AgentId, String)>,
    /// The offer waiting for its answer.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    waiting: Option<Ask>,
    /// The peers asked to share their knowledge.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    knowledge: Vec<Ask>,
}

/// One request to a peer.
#[derive(Clone, Debug, Serialize, Deserialize)]
struct Ask {
    peer: AgentId,
    message: MessageId,
    since: Timestamp,
    #[serde(default)]
    answered: bool,
}

/// A bottom-layer agent.
pub struct BottomAgent {
    spec: BottomSpec,
    /// Spawned by a supervisor: it concludes with `return_results`.
    returns: bool,
    /// The team's executor, for an executor with a `kind`.
    runner: Option<KindRunner>,
    /// The team's guards (a tool loop that repeats itself is stopped).
    guards: GuardSettings,
    /// The executors of the same lead (this one may be among them).
    peers: Option<Peers>,
    /// Its work: made by the first change to it (see [`LazyWork`]).
    work: LazyWork,
}

/// What an executor has to do and has done. Boxed, and made by its first change: an idle
/// executor that never worked holds none of it (a hundred thousand of them would each hold its
/// size).
#[derive(Default)]
struct Work {
    queue: VecDeque<Subtask>,
    done: Vec<String>,
    /// The tool loop of the subtask at the front of the queue, while it waits (boxed: its size
    /// is held only while a subtask waits).
    current: Option<Box<WorkLoop>>,
    /// Peer help by subtask key, while the subtask is queued.
    help: BTreeMap<String, Help>,
    /// The peers' requests answered lately (not saved): a turn that fails after answering
    /// takes the request again, and it is not answered (nor audited) twice.
    answered: VecDeque<MessageId>,
    /// A single agent ([`BottomAgent::solo`]): the tasks it takes itself, from `system`.
    desk: Option<Desk>,
}

/// The work of an executor that has none yet, which [`LazyWork`] reads as its own.
static NO_WORK: Work = Work {
    queue: VecDeque::new(),
    done: Vec::new(),
    current: None,
    help: BTreeMap::new(),
    answered: VecDeque::new(),
    desk: None,
};

/// An executor's [`Work`], made by its first change: read, it is [`NO_WORK`] until then;
/// borrowed mutably, it is made (empty) and kept.
#[derive(Default)]
struct LazyWork(Option<Box<Work>>);

impl std::ops::Deref for LazyWork {
    type Target = Work;

    fn deref(&self) -> &Work {
        self.0.as_deref().unwrap_or(&NO_WORK)
    }
}

impl std::ops::DerefMut for LazyWork {
    fn deref_mut(&mut self) -> &mut Work {
        self.0.get_or_insert_with(Box::default)
    }
}

/// How many answered peer requests an executor remembers.
const MAX_ANSWERED: usize = 16;

impl BottomAgent {
    /// An executor with its tools.
    pub fn new(spec: BottomSpec) -> Self {
        Self {
            spec,
            returns: false,
            runner: None,
            guards: GuardSettings::default(),
            peers: None,
            work: LazyWork::default(),
        }
    }

    /// The same executor as a team's single agent: with no lead, it takes the team's tasks
    /// from `system` itself (a goal planned by its reasoner) and works their steps in turn,
    /// wave by wave as their `after` steps succeed, each with its own tool loop (or its kind);
    /// once every step has a result it judges them and closes the task (see `desk.rs`). A
    /// step that fails for good (a failed result, an error past its retries, or one that must
    /// not run again) fails the task: there is no other executor to hand it to.
    #[must_use]
    pub fn solo(mut self) -> Self {
        self.work.desk = Some(Desk::default());
        self
    }

    /// Where its reports go: its lead, or a single agent itself (its desk reads them).
    fn reports_to(&self, ctx: &AgentContext) -> Option<AgentId> {
        match &self.work.desk {
            Some(_) => Some(ctx.id().clone()),
            None => ctx.config().supervisor.clone(),
        }
    }

    /// The same executor with its peers: the executors of its lead, with their tools (the list
    /// may hold this executor too: it is skipped). It offers them the subtasks it cannot finish,
    /// asks them for knowledge, and answers their requests; without peers (a spawned
    /// executor) it asks no one and refuses every peer's request.
    #[must_use]
    pub fn with_peers(mut self, peers: impl Into<Peers>) -> Self {
        self.peers = Some(peers.into());
        self
    }

    /// The same executor with the team's guards: a tool loop that repeats the same call
    /// `repeat_limit` times in a row is stopped with [`TaskFailure::Loop`]; with
    /// [`OnStuck::Stop`] its lead escalates that (the task stops), with
    /// [`OnStuck::Escalate`] it is reported to its lead as the step's failure, for the lead to
    /// decide (reassign it, or its model chooses).
    #[must_use]
    pub fn with_guards(mut self, guards: GuardSettings) -> Self {
        self.guards = guards;
        self
    }

    /// The same executor with the team's executor and event stream: if its spec has a `kind`,
    /// its goal steps and the steps that call the kind run as runs of it (see
    /// [`KindRunner`]).
    #[must_use]
    pub fn with_runner(mut self, runner: KindRunner) -> Self {
        self.runner = Some(runner);
        self
    }

    /// An executor spawned by a supervisor: it is offered `return_results`, and its
    /// structured result goes to its supervisor.
    #[must_use]
    pub fn spawned(mut self) -> Self {
        self.returns = true;
        self
    }

    /// The executor's settings.
    pub fn spec(&self) -> &BottomSpec {
        &self.spec
    }

    fn accept(&mut self, subtask: Subtask) {
        let key = subtask.key();
        if self.work.done.contains(&key) || self.work.queue.iter().any(|s| s.key() == key) {
            return; // redelivered
        }
        self.work.queue.push_back(subtask);
    }

    /// Works through the queue: each subtask's tool loop runs until it ends or has to wait. A
    /// subtask offered to a peer waits for the answer.
    async fn work(&mut self, ctx: &mut AgentContext) -> Result<(), AgentError> {
        while let Some(subtask) = self.work.queue.front().cloned() {
            let key = subtask.key();
            if self.work.help.get(&key).is_some_and(|h| h.failure.is_some()) {
                return self.hand_over(ctx, &subtask).await;
            }
            match self.run_front(ctx, &subtask).await {
                Ok(true) => {
                    self.work.queue.pop_front();
                    self.work.help.remove(&key);
                    self.work.done.push(key);
                }
                Ok(false) => return Ok(()),
                Err(error) => return self.failed(ctx, &subtask, error).await,
            }
        }
        Ok(())
    }

    /// Runs the subtask at the front of the queue: `true` when it is over (reported), `false`
    /// when its loop waits.
    async fn run_front(
        &mut self,
        ctx: &mut AgentContext,
        subtask: &Subtask,
    ) -> Result<bool, AgentError> {
        ctx.require(Action::Execute, &format!("(subtask {})", subtask.key())).await?;
        if let (Some(kind), Some(runner)) = (self.spec.kind.clone(), self.runner.clone())
            && kind::runs_through(&kind, subtask)
        {
            self.run_kind(ctx, &runner, &kind, subtask).await?;
            return Ok(true);
        }
        if subtask.step.is_scripted() && !self.spec.tools.contains(&subtask.step.tool) {
            return Err(AgentError::NotAllowed(format!(
                "executor `{}` does not have the tool `{}` (it has: {})",
                ctx.id(),
                subtask.step.tool,
                self.spec.tools.join(", ")
            )));
        }
        let mut work = match self.work.current.take() {
            Some(w) if w.key() == subtask.key() => w,
            _ => Box::new(WorkLoop::new(subtask.clone(), ctx.now())),
        };
        let means = Means {
            tools: &self.spec.tools,
            supervises: false,
            returns: self.returns,
            guards: self.guards,
        };
        // On an error the loop is dropped: the retry starts the subtask's loop again (its
        // side-effecting calls are journaled, so none runs twice), on the same clock: the
        // subtask's time limit counts from its first start. What a peer shares meanwhile joins
        // the new loop.
        let progress = match work.run(ctx, &means).await {
            Ok(progress) => progress,
            Err(error) => {
                self.work.current = Some(Box::new(WorkLoop::new(subtask.clone(), work.started)));
                return Err(error);
            }
        };
        match progress {
            Progress::Suspended => {
                self.work.current = Some(work);
                Ok(false)
            }
            Progress::Done(outcome) => {
                if let Err(error) = self.finish(ctx, subtask, work.started, *outcome).await {
                    self.work.current =
                        Some(Box::new(WorkLoop::new(subtask.clone(), work.started)));
                    return Err(error);
                }
                Ok(true)
            }
        }
    }

    /// Runs `subtask` as one run of the executor's kind and reports how it ended.
    async fn run_kind(
        &mut self,
        ctx: &mut AgentContext,
        runner: &KindRunner,
        kind: &str,
        subtask: &Subtask,
    ) -> Result<(), AgentError> {
        let started = ctx.now();
        let outcome = match kind::run(ctx, runner, kind, subtask).await? {
            KindEnd::Ran(response) => {
                let result = kind::result_of(&response);
                kind::record_result(ctx, subtask, &result).await?;
                Outcome {
                    success: response.success(),
                    summary: match &response.failure {
                        Some(failure) if !response.success() => failure.to_string(),
                        _ => response.primary_output.clone(),
                    },
                    result: Some(result),
                    error: None,
                    interrupted: None,
                    stuck: None,
                }
            }
            KindEnd::Refused(error) => {
                let summary = format!("the `{kind}` run was refused: {error}");
                let result = AgentResult {
                    status: ResultStatus::Failure,
                    summary: summary.clone(),
                    artifacts: Vec::new(),
                    known_issues: vec![error.to_string()],
                };
                Outcome {
                    success: false,
                    summary,
                    result: Some(result),
                    error: None,
                    interrupted: None,
                    stuck: None,
                }
            }
            KindEnd::Blocked { missing } => {
                let failure = TaskFailure::Blocked {
                    step: subtask.step.id.clone(),
                    agent: ctx.id().clone(),
                    executor_kind: kind.to_owned(),
                    missing,
                };
                return self.escalate(ctx, subtask, failure).await;
            }
            KindEnd::Interrupted { partial } => {
                return self.interrupted(ctx, subtask, kind.to_owned(), partial).await;
            }
        };
        self.finish(ctx, subtask, started, outcome).await
    }

    async fn finish(
        &mut self,
        ctx: &mut AgentContext,
        subtask: &Subtask,
        started: agent_state::Timestamp,
        outcome: Outcome,
    ) -> Result<(), AgentError> {
        if let Some((tool, partial)) = outcome.interrupted {
            return self.interrupted(ctx, subtask, tool, partial).await;
        }
        if let Some(failure) = outcome.stuck {
            // A step out of time stops the task: on another executor it would run out again.
            let stop = self.guards.on_stuck == OnStuck::Stop
                || matches!(failure, TaskFailure::TimedOut { .. });
            return self.report_failure(ctx, subtask, failure, stop).await;
        }
        let Outcome { success, summary, result, error, .. } = outcome;
        if !success && result.is_none() {
            return Err(error.unwrap_or_else(|| AgentError::ToolFailed {
                tool: subtask.step.tool.clone(),
                output: summary,
            }));
        }
        let duration = ctx.now().millis_since(started);
        let now = ctx.now();
        ctx.metrics_mut().record_task(success, duration, now);
        ctx.write_board(format!(
            "## Task Execution Result\n\nTask: {}\nStatus: {}\nOutput:\n```\n{}\n```",
            subtask.step.description,
            if success { "Success" } else { "Failure" },
            summary
        ))
        .await?;
        let result = SubtaskResult {
            task_id: subtask.task_id.clone(),
            step_id: subtask.step.id.clone(),
            agent: ctx.id().clone(),
            success,
            output: summary,
            result,
        };
        let report = ProgressReport {
            task_id: subtask.task_id.clone(),
            status: if success { ProgressStatus::Completed } else { ProgressStatus::Failed },
            percentage: 100,
            description: subtask.step.description.clone(),
            results: vec![result],
            failure: None,
        };
        if let Some(to) = self.reports_to(ctx) {
            ctx.send(&to, MessageKind::ProgressReport, &report).await?;
        }
        Ok(())
    }
}

impl BottomAgent {
    /// A side-effecting call of `subtask` was interrupted by a crash and may not run again:
    /// the step is over for this executor (it is not retried), and its lead is told it was
    /// interrupted, so that the lead does not hand it to another executor either.
    async fn interrupted(
        &mut self,
        ctx: &mut AgentContext,
        subtask: &Subtask,
        tool: String,
        partial: String,
    ) -> Result<(), AgentError> {
        let partial = agent_state::shorten_bytes(partial.trim(), MAX_PARTIAL);
        let failure = TaskFailure::Interrupted {
            step: subtask.step.id.clone(),
            agent: ctx.id().clone(),
            tool,
            partial,
        };
        self.escalate(ctx, subtask, failure).await
    }

    /// The step is over for this executor without a result, and must not be retried nor
    /// reassigned (interrupted, or blocked on a missing input): its lead is told why, and
    /// escalates it.
    async fn escalate(
        &mut self,
        ctx: &mut AgentContext,
        subtask: &Subtask,
        failure: TaskFailure,
    ) -> Result<(), AgentError> {
        self.report_failure(ctx, subtask, failure, true).await
    }

    /// Reports the step failed with `failure`: marked as such in the report when `stop` (its
    /// lead escalates it, neither retrying nor reassigning it), else as a plain failure with
    /// the reason in words (its lead handles it like any failed step).
    async fn report_failure(
        &mut self,
        ctx: &mut AgentContext,
        subtask: &Subtask,
        failure: TaskFailure,
        stop: bool,
    ) -> Result<(), AgentError> {
        let (heading, status) = match failure {
            TaskFailure::Blocked { .. } => {
                ("Blocked", "blocked on a missing input, needs a decision")
            }
            TaskFailure::TimedOut { .. } => {
                ("Timed out", "ran past its time limit, the task stops")
            }
            ref f if f.is_stuck() && stop => ("Stopped", "stuck, the task stops"),
            ref f if f.is_stuck() => ("Stopped", "stuck, reported to the lead"),
            _ => ("Interrupted", "interrupted, needs a decision"),
        };
        ctx.append_own(&format!(
            "## {heading}\n\nTask: {}\nStatus: {status}\n{failure}",
            subtask.step.description
        ))
        .await?;
        let result = SubtaskResult {
            task_id: subtask.task_id.clone(),
            step_id: subtask.step.id.clone(),
            agent: ctx.id().clone(),
            success: false,
            output: failure.to_string(),
            result: None,
        };
        let report = ProgressReport {
            task_id: subtask.task_id.clone(),
            status: ProgressStatus::Failed,
            percentage: 0,
            description: subtask.step.description.clone(),
            results: vec![result],
            failure: stop.then_some(failure),
        };
        if let Some(to) = self.reports_to(ctx) {
            ctx.send(&to, MessageKind::ProgressReport, &report).await?;
        }
        Ok(())
    }
}

/// Why a single agent's task fails on a step it reported failed: the typed failure it gave,
/// else the step's failure with its output.
fn solo_failure(report: ProgressReport) -> TaskFailure {
    if let Some(failure) = report.failure {
        return failure;
    }
    let failed = report.results.into_iter().find(|r| !r.success);
    TaskFailure::StepFailed {
        step: failed.as_ref().map(|r| r.step_id.clone()).unwrap_or_default(),
        attempts: 1,
        error: failed.map(|r| r.output).unwrap_or(report.description),
    }
}

/// Errors of the work itself (a tool, the reasoner), which another executor may not meet;
/// not those of the services every agent shares.
fn work_error(error: &AgentError) -> bool {
    matches!(error, AgentError::ToolFailed { .. } | AgentError::Tool(_) | AgentError::Reason(_))
}

/// Audits a peer-help event and notes it on the executor's board.
async fn note(
    ctx: &AgentContext,
    peer: &AgentId,
    step: Option<&str>,
    request: PeerHelpRequest,
    outcome: PeerHelpOutcome,
) -> Result<(), AgentError> {
    let line = match step {
        Some(step) => format!("- peer help ({request}) {step} with [{peer}]: {outcome}"),
        None => format!("- peer help ({request}) with [{peer}]: {outcome}"),
    };
    ctx.audit(AuditEvent::PeerHelp {
        peer: peer.clone(),
        step: step.map(str::to_owned),
        request,
        outcome,
    })
    .await?;
    ctx.append_own(&line).await?;
    Ok(())
}

impl BottomAgent {
    fn is_peer(&self, me: &AgentId, agent: &AgentId) -> bool {
        agent != me && self.peers.iter().flat_map(|p| p.iter()).any(|(p, _)| p == agent)
    }

    /// The peers that could run `subtask` (for a scripted step: those holding its tool), in
    /// the lead's order.
    fn able_peers(&self, me: &AgentId, subtask: &Subtask) -> Vec<AgentId> {
        self.peers
            .iter()
            .flat_map(|p| p.iter())
            .filter(|(p, tools)| {
                p != me && (!subtask.step.is_scripted() || tools.contains(&subtask.step.tool))
            })
            .map(|(p, _)| p.clone())
            .collect()
    }

    /// The subtask at the front of the queue failed with `error`. One it cannot finish (its
    /// tool is missing, or the failure would exhaust its retries) is offered to its able peers
    /// first, unless it was taken over from a peer; a goal step's failure that will be retried
    /// asks a peer for its knowledge. Otherwise (and then too) the error goes on as before.
    async fn failed(
        &mut self,
        ctx: &mut AgentContext,
        subtask: &Subtask,
        error: AgentError,
    ) -> Result<(), AgentError> {
        if self.work.desk.is_some() {
            return self.failed_alone(ctx, subtask, error).await;
        }
        let key = subtask.key();
        let taken = self.work.help.get(&key).is_some_and(|h| h.taken_from.is_some());
        let missing_tool = matches!(error, AgentError::NotAllowed(_))
            && subtask.step.is_scripted()
            && !self.spec.tools.contains(&subtask.step.tool);
        let transient = error.class() == ErrorClass::Transient && work_error(&error);
        let exhausted = transient && ctx.retries() >= ctx.config().max_retries;
        if !taken && (missing_tool || exhausted) && !self.able_peers(ctx.id(), subtask).is_empty() {
            tracing::info!(agent = %ctx.id(), step = %key, %error, "offering the subtask to a peer");
            self.work.current = None;
            self.work.help.entry(key).or_default().failure = Some(error.to_string());
            return self.hand_over(ctx, subtask).await;
        }
        if transient && !exhausted && !subtask.step.is_scripted() {
            self.ask_knowledge(ctx, subtask).await?;
        }
        Err(error)
    }

    /// A single agent's step failed with `error`: retried as any failed turn while it has
    /// retries left (a transient error of the work itself); past them, or for good (a
    /// permanent error, such as a tool it does not have), the step is over and the task fails
    /// with it, audited, the agent alive for the next task. An error of the services every
    /// agent shares goes on as before (the agent fails once its retries are spent).
    async fn failed_alone(
        &mut self,
        ctx: &mut AgentContext,
        subtask: &Subtask,
        error: AgentError,
    ) -> Result<(), AgentError> {
        let own = work_error(&error) || matches!(error, AgentError::NotAllowed(_));
        let max = ctx.config().max_retries;
        let spent = error.class() == ErrorClass::Permanent || ctx.retries() >= max;
        if !own || !spent {
            return Err(error);
        }
        let key = subtask.key();
        self.work.queue.retain(|s| s.key() != key);
        self.work.current = None;
        self.work.done.push(key);
        ctx.audit(AuditEvent::Error {
            error: error.to_string(),
            retry: ctx.retries(),
            max_retries: max,
        })
        .await?;
        let now = ctx.now();
        ctx.metrics_mut().record_task(false, 0, now);
        let failure = TaskFailure::StepFailed {
            step: subtask.step.id.clone(),
            attempts: ctx.retries().saturating_add(1),
            error: error.to_string(),
        };
        ctx.append_own(&format!("## Failed\n\nTask: {}\n{failure}", subtask.step.description))
            .await?;
        self.task_failed(ctx, &subtask.task_id, failure).await
    }

    /// A single agent's task `task_id` fails with `failure`: closed at its desk, and the
    /// steps of it still queued dropped.
    async fn task_failed(
        &mut self,
        ctx: &mut AgentContext,
        task_id: &str,
        failure: TaskFailure,
    ) -> Result<(), AgentError> {
        let Some(desk) = self.work.desk.as_mut() else { return Ok(()) };
        desk.fail(ctx, task_id, failure).await?;
        self.work.queue.retain(|s| s.task_id != task_id);
        if self
            .work
            .current
            .as_ref()
            .is_some_and(|w| !self.work.queue.iter().any(|s| s.key() == w.key()))
        {
            self.work.current = None;
        }
        Ok(())
    }

    /// A single agent's desk: a task from `system`, the team's escalation of one (its time
    /// limit, its guards), and the reports it sends itself of its steps; `false` for anything
    /// else, or an executor that is not a single agent.
    async fn at_desk(
        &mut self,
        ctx: &mut AgentContext,
        message: &Message,
    ) -> Result<bool, AgentError> {
        let Some(desk) = self.work.desk.as_mut() else { return Ok(false) };
        match desk.read_mail(ctx, message, "a single agent").await? {
            DeskMail::NotMine => return Ok(false),
            DeskMail::Handled => {}
            DeskMail::Work(work) => {
                let me = ctx.id().clone();
                for step in work.steps {
                    let task_id = work.task_id.clone();
                    self.accept(Subtask { task_id, step, assignee: me.clone(), attempt: 1 });
                }
            }
            DeskMail::Escalated { task_id, failure } => {
                self.task_failed(ctx, &task_id, failure).await?;
            }
            DeskMail::Failed(report) => {
                let task_id = report.task_id.clone();
                self.task_failed(ctx, &task_id, solo_failure(report)).await?;
            }
        }
        Ok(true)
    }

    /// Carries on offering `subtask` to a peer: waits for the pending answer, asks the next
    /// able peer, or, when none is left, gives it up ([`AgentError::GaveUp`]: the agent fails
    /// and its lead gets the subtask back).
    async fn hand_over(
        &mut self,
        ctx: &mut AgentContext,
        subtask: &Subtask,
    ) -> Result<(), AgentError> {
        let key = subtask.key();
        let now = ctx.now();
        let able = self.able_peers(ctx.id(), subtask);
        let Some(help) = self.work.help.get_mut(&key) else { return Ok(()) };
        if let Some(ask) = &help.waiting {
            if now.millis_since(ask.since) < PEER_HELP_TIMEOUT_MS {
                return Ok(());
            }
            let peer = ask.peer.clone();
            help.waiting = None;
            help.asked.push((peer.clone(), "no answer".into()));
            note(ctx, &peer, Some(&key), PeerHelpRequest::TakeOver, PeerHelpOutcome::NoAnswer)
                .await?;
        }
        let next = able.into_iter().find(|p| !help.asked.iter().any(|(a, _)| a == p));
        let Some(peer) = next else {
            let peers: Vec<String> = help.asked.iter().map(|(p, r)| format!("{p}: {r}")).collect();
            let error = help.failure.clone().unwrap_or_default();
            return Err(AgentError::GaveUp { error, peers: peers.join("; ") });
        };
        let request = HelpRequest::TakeOverTask { subtask: Box::new(subtask.clone()) };
        let message = ctx.send(&peer, MessageKind::PeerHelpRequest, &request).await?;
        help.waiting = Some(Ask { peer: peer.clone(), message, since: now, answered: false });
        note(ctx, &peer, Some(&key), PeerHelpRequest::TakeOver, PeerHelpOutcome::Asked).await
    }

    /// Asks one peer not asked yet for `subtask` to share its knowledge (its board).
    async fn ask_knowledge(
        &mut self,
        ctx: &mut AgentContext,
        subtask: &Subtask,
    ) -> Result<(), AgentError> {
        let key = subtask.key();
        let me = ctx.id().clone();
        let help = self.work.help.entry(key.clone()).or_default();
        let Some(peer) = self
            .peers
            .iter()
            .flat_map(|p| p.iter())
            .map(|(p, _)| p)
            .find(|p| **p != me && !help.knowledge.iter().any(|a| &a.peer == *p))
            .cloned()
        else {
            return Ok(());
        };
        let now = ctx.now();
        let message =
            ctx.send(&peer, MessageKind::PeerHelpRequest, &HelpRequest::ShareKnowledge).await?;
        help.knowledge.push(Ask { peer: peer.clone(), message, since: now, answered: false });
        note(ctx, &peer, Some(&key), PeerHelpRequest::ShareKnowledge, PeerHelpOutcome::Asked).await
    }

    /// Who asks for help in `message`, if it is a peer; anyone else is refused, audited.
    async fn asking_peer(
        &self,
        ctx: &AgentContext,
        message: &Message,
    ) -> Result<Result<AgentId, HelpResponse>, AgentError> {
        if let Some(peer) = message.from.agent().filter(|a| self.is_peer(ctx.id(), a)) {
            return Ok(Ok(peer.clone()));
        }
        ctx.audit(AuditEvent::Denied {
            action: format!("peer help request from {}", message.from),
            error: "an executor helps only the executors of its own lead".into(),
        })
        .await?;
        Ok(Err(HelpResponse::Refused {
            reason: "only executors of my own lead may ask me for help".into(),
        }))
    }

    /// A peer asks for this executor's knowledge: its board.
    /// A peer asks for help (its knowledge, or to take over a subtask), or its supervisor
    /// speaks to it: it answers once (a peer's request answered in a turn that failed after is
    /// not answered again); anyone else speaking to it is refused.
    async fn help_requested(
        &mut self,
        ctx: &mut AgentContext,
        message: &Message,
        from_supervisor: bool,
    ) -> Result<(), AgentError> {
        let Some(request) = ctx.read_payload::<HelpRequest>(message).await? else {
            return Ok(());
        };
        let from_peer = !matches!(request, HelpRequest::Speak { .. });
        if from_peer && self.work.answered.contains(&message.id) {
            return Ok(()); // answered in a turn that failed after: the answer went out
        }
        let response = match request {
            HelpRequest::ShareKnowledge => self.share(ctx, message).await?,
            HelpRequest::TakeOverTask { subtask } => self.take_over(ctx, message, *subtask).await?,
            HelpRequest::Speak { message: said } => {
                let Some(from) = message.from.agent().cloned().filter(|_| from_supervisor) else {
                    ctx.audit(AuditEvent::Denied {
                        action: format!("speak from {}", message.from),
                        error: "an executor answers only its supervisor".into(),
                    })
                    .await?;
                    let refused = HelpResponse::Refused {
                        reason: "only my supervisor may speak to me".into(),
                    };
                    ctx.reply(message, MessageKind::PeerHelpResponse, &refused).await?;
                    return Ok(());
                };
                let context = match &self.work.current {
                    Some(work) => work.context(),
                    None => self.current_work().unwrap_or_default(),
                };
                let reply = crate::answer(ctx, &from, &said, &context).await;
                if let Some(work) = self.work.current.as_mut() {
                    work.heard(&from, &said);
                }
                HelpResponse::Said { reply }
            }
        };
        ctx.reply(message, MessageKind::PeerHelpResponse, &response).await?;
        if from_peer {
            if self.work.answered.len() == MAX_ANSWERED {
                self.work.answered.pop_front();
            }
            self.work.answered.push_back(message.id);
        }
        Ok(())
    }

    async fn share(
        &mut self,
        ctx: &mut AgentContext,
        message: &Message,
    ) -> Result<HelpResponse, AgentError> {
        let peer = match self.asking_peer(ctx, message).await? {
            Ok(peer) => peer,
            Err(refused) => return Ok(refused),
        };
        let board = ctx.read_board(&BoardId::Agent(ctx.id().clone())).await?;
        note(ctx, &peer, None, PeerHelpRequest::ShareKnowledge, PeerHelpOutcome::Shared).await?;
        Ok(HelpResponse::Knowledge { knowledge: board.content })
    }

    /// A peer offers `subtask`: taken when this executor is idle (nothing queued, not
    /// retrying) and able (holds a scripted step's tool) and the offer is recent; their lead is
    /// told who has it now.
    async fn take_over(
        &mut self,
        ctx: &mut AgentContext,
        message: &Message,
        mut subtask: Subtask,
    ) -> Result<HelpResponse, AgentError> {
        let peer = match self.asking_peer(ctx, message).await? {
            Ok(peer) => peer,
            Err(refused) => return Ok(refused),
        };
        let key = subtask.key();
        if self.work.queue.iter().any(|s| s.key() == key) {
            return Ok(HelpResponse::Accepted); // redelivered: taken already
        }
        let refusal = if self.work.done.contains(&key) {
            Some("I ran this step already".to_owned())
        } else if subtask.step.is_scripted() && !self.spec.tools.contains(&subtask.step.tool) {
            Some(format!("I do not have the tool `{}`", subtask.step.tool))
        } else if !self.work.queue.is_empty() || ctx.retries() > 0 {
            Some("busy".to_owned())
        } else if ctx.now().millis_since(message.timestamp) >= PEER_HELP_TIMEOUT_MS / 2 {
            Some("the request came too late".to_owned())
        } else {
            None
        };
        if let Some(reason) = refusal {
            let outcome = PeerHelpOutcome::Refused { reason: reason.clone() };
            note(ctx, &peer, Some(&key), PeerHelpRequest::TakeOver, outcome).await?;
            return Ok(HelpResponse::Refused { reason });
        }
        let me = ctx.id().clone();
        subtask.assignee = me.clone();
        subtask.attempt += 1;
        note(ctx, &peer, Some(&key), PeerHelpRequest::TakeOver, PeerHelpOutcome::Accepted).await?;
        if let Some(lead) = ctx.config().supervisor.clone() {
            let report = StatusReport::HandedOver {
                task_id: subtask.task_id.clone(),
                step_id: subtask.step.id.clone(),
                from: peer.clone(),
                to: me,
            };
            ctx.send(&lead, MessageKind::StatusReport, &report).await?;
        }
        self.work.help.insert(key, Help { taken_from: Some(peer), ..Help::default() });
        self.accept(subtask);
        Ok(HelpResponse::Accepted)
    }

    /// A peer answered one of this executor's requests.
    async fn answered(
        &mut self,
        ctx: &mut AgentContext,
        message: &Message,
    ) -> Result<(), AgentError> {
        let (Some(from), Some(correlation)) =
            (message.from.agent().cloned(), message.correlation_id)
        else {
            return Ok(());
        };
        let offer = self.work.help.iter().find_map(|(key, h)| {
            h.waiting
                .as_ref()
                .filter(|a| a.message == correlation && a.peer == from)
                .map(|_| key.clone())
        });
        let knowledge = self.work.help.iter().find_map(|(key, h)| {
            h.knowledge
                .iter()
                .any(|a| a.message == correlation && a.peer == from)
                .then(|| key.clone())
        });
        if offer.is_none() && knowledge.is_none() {
            return Ok(()); // not awaited (answered already, or given up)
        }
        let Some(response) = ctx.read_payload::<HelpResponse>(message).await? else {
            return Ok(());
        };
        if let Some(key) = offer {
            match response {
                HelpResponse::Accepted => {
                    let outcome = PeerHelpOutcome::HandedOver;
                    note(ctx, &from, Some(&key), PeerHelpRequest::TakeOver, outcome).await?;
                    self.work.queue.retain(|s| s.key() != key);
                    if self.work.current.as_ref().is_some_and(|w| w.key() == key) {
                        self.work.current = None;
                    }
                    self.work.help.remove(&key);
                }
                HelpResponse::Refused { reason } => {
                    let outcome = PeerHelpOutcome::Refused { reason: reason.clone() };
                    note(ctx, &from, Some(&key), PeerHelpRequest::TakeOver, outcome).await?;
                    if let Some(help) = self.work.help.get_mut(&key) {
                        help.waiting = None;
                        help.asked.push((from, reason));
                    }
                }
                _ => {}
            }
            return Ok(());
        }
        let Some(key) = knowledge else { return Ok(()) };
        let first = self
            .work
            .help
            .get_mut(&key)
            .and_then(|h| h.knowledge.iter_mut().find(|a| a.message == correlation))
            .is_some_and(|a| !std::mem::replace(&mut a.answered, true));
        let (outcome, said) = match response {
            HelpResponse::Knowledge { knowledge } => (
                PeerHelpOutcome::Shared,
                Some(format!("shared what it knows (its board):\n{knowledge}")),
            ),
            HelpResponse::Refused { reason } => (PeerHelpOutcome::Refused { reason }, None),
            _ => return Ok(()),
        };
        if first {
            note(ctx, &from, Some(&key), PeerHelpRequest::ShareKnowledge, outcome).await?;
        }
        // Heard by the subtask's loop (again if a failed turn's retry dropped it).
        if let (Some(said), Some(work)) =
            (said, self.work.current.as_mut().filter(|w| w.key() == key))
            && !work.has_heard(&from, &said)
        {
            work.heard(&from, &said);
        }
        Ok(())
    }
}

/// At most this much of an interrupted call's output travels in reports.
const MAX_PARTIAL: usize = 1024;

#[async_trait]
impl AgentBehavior for BottomAgent {
    fn responsibilities(&self) -> &'static str {
        "- Receive specific tasks from mid-layer supervisor\n\
         - Execute tasks using available tools\n\
         - Record execution results to whiteboard\n\
         - Report progress and results to supervisor\n\
         - Collaborate with peers when needed"
    }

    async fn on_process(
        &mut self,
        ctx: &mut AgentContext,
        messages: &[Message],
        _board: &BoardSnapshot,
    ) -> Result<(), AgentError> {
        let supervisor = ctx.config().supervisor.clone();
        for message in messages {
            if self.at_desk(ctx, message).await? {
                continue;
            }
            let from_supervisor =
                supervisor.as_ref().is_some_and(|s| message.from.agent() == Some(s));
            match message.kind {
                MessageKind::TaskAssign if from_supervisor => {
                    if let Some(Assignment::Subtask { subtask }) =
                        ctx.read_payload::<Assignment>(message).await?
                    {
                        self.accept(subtask);
                    }
                }
                MessageKind::TaskAssign => {
                    ctx.audit(AuditEvent::Denied {
                        action: format!("task_assign from {}", message.from),
                        error: "an executor takes tasks only from its supervisor".into(),
                    })
                    .await?;
                }
                MessageKind::PeerHelpRequest => {
                    self.help_requested(ctx, message, from_supervisor).await?
                }
                MessageKind::PeerHelpResponse => self.answered(ctx, message).await?,
                MessageKind::StatusQuery if from_supervisor => {
                    let report =
                        StatusReport::Agent { status: ctx.status(), current: self.current_work() };
                    ctx.reply(message, MessageKind::StatusReport, &report).await?;
                }
                MessageKind::ArbitrationResult => {
                    // A party to a dispute over its result: its lead acts on the ruling (takes
                    // the result, or has another executor redo the step); it keeps the record.
                    if let Some(ruling) =
                        ctx.read_payload::<agent_core::protocol::ArbitrationResult>(message).await?
                    {
                        crate::note_ruling(ctx, &ruling).await?;
                    }
                }
                _ => {}
            }
        }
        self.work(ctx).await
    }

    async fn on_shutdown(&mut self, ctx: &mut AgentContext) -> Result<(), AgentError> {
        if !self.work.queue.is_empty() {
            tracing::warn!(agent = %ctx.id(), pending = self.work.queue.len(), "executor shutting down with incomplete tasks");
        }
        Ok(())
    }

    fn wants_tick(&self) -> bool {
        !self.work.queue.is_empty()
            && self.work.current.as_ref().is_none_or(|w| w.waiting.is_none() || w.wants_tick())
    }

    fn snapshot(&self) -> serde_json::Value {
        let desk = self.work.desk.as_ref().filter(|d| !d.is_empty());
        if self.work.queue.is_empty()
            && self.work.done.is_empty()
            && self.work.help.is_empty()
            && desk.is_none()
        {
            return serde_json::Value::Null;
        }
        let mut saved = serde_json::json!({ "queue": self.work.queue, "done": self.work.done, "current": self.work.current });
        if !self.work.help.is_empty() {
            saved["help"] = serde_json::json!(self.work.help);
        }
        if let Some(desk) = desk {
            // A top power's shape: `task_progress` reads it.
            saved["tasks"] = serde_json::json!(desk);
        }
        saved
    }

    fn restore(&mut self, state: serde_json::Value) -> Result<(), AgentError> {
        #[derive(Deserialize)]
        struct Saved {
            queue: VecDeque<Subtask>,
            done: Vec<String>,
            #[serde(default)]
            current: Option<Box<WorkLoop>>,
            #[serde(default)]
            help: BTreeMap<String, Help>,
            #[serde(default)]
            tasks: Option<Desk>,
        }
        if state.is_null() {
            return Ok(());
        }
        let saved: Saved = serde_json::from_value(state).map_err(|e| {
            AgentError::NotAllowed(format!("saved state of an executor cannot be read: {e}"))
        })?;
        self.work.queue = saved.queue;
        self.work.done = saved.done;
        self.work.current = saved.current;
        self.work.help = saved.help;
        if let (Some(desk), Some(tasks)) = (self.work.desk.as_mut(), saved.tasks) {
            *desk = tasks;
        }
        Ok(())
    }

    fn current_work(&self) -> Option<String> {
        self.work
            .queue
            .front()
            .map(|s| format!("{}: {}", s.key(), s.step.description))
            .or_else(|| self.work.desk.as_ref().and_then(Desk::current_work))
    }

    fn abandon_work(&mut self) -> Option<Subtask> {
        self.work.current = None;
        let abandoned = self.work.queue.pop_front();
        if let Some(subtask) = &abandoned {
            self.work.help.remove(&subtask.key());
        }
        abandoned
    }

    fn waiting_on(&self, me: &agent_state::AgentId) -> Vec<agent_state::WaitEdge> {
        self.work.current.as_ref().map(|w| w.waits(me)).unwrap_or_default()
    }

    fn open_tasks(&self) -> Vec<String> {
        let mut tasks: Vec<String> = self.work.queue.iter().map(|s| s.task_id.clone()).collect();
        tasks.extend(self.work.desk.iter().flat_map(Desk::open_tasks).cloned());
        tasks.sort();
        tasks.dedup();
        tasks
    }
}
