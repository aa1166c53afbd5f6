//! The bottom layer: executors that run tools for their lead, record results on their board,
//! report progress, help peers and answer status queries (seed 000 §6).

use std::collections::VecDeque;
use std::sync::Arc;

use agent_core::protocol::{HelpRequest, HelpResponse, StatusReport};
use agent_core::{AgentBehavior, AgentContext, AgentError, AuditEvent};
use agent_state::{
    AgentResult, Assignment, BoardId, BoardSnapshot, GuardSettings, Message, MessageKind, OnStuck,
    ProgressReport, ProgressStatus, ResultStatus, Subtask, SubtaskResult, TaskFailure,
};

use crate::kind::{self, KindEnd, KindRunner};
use crate::work::{Means, Outcome, Progress, WorkLoop};
use async_trait::async_trait;
use serde::{Deserialize, Serialize};

/// An executor's settings (seed 000 §6 `BottomLayerAgentConfig`).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct BottomSpec {
    /// The tools it may call. Shared: executors with the same tools hold one list (a team of
    /// 100 000 executors holds a handful of lists, not 100 000).
    pub tools: Arc<[String]>,
    /// The executor kind (seed 002) it runs its subtasks through, such as `research_agent`;
    /// `None`: its reasoner chooses tool calls.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kind: Option<Arc<str>>,
}

impl BottomSpec {
    /// An executor allowed `tools`.
    pub fn new<S: Into<String>>(tools: impl IntoIterator<Item = S>) -> Self {
        Self { tools: tools.into_iter().map(Into::into).collect(), kind: None }
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

/// A bottom-layer agent.
pub struct BottomAgent {
    spec: BottomSpec,
    queue: VecDeque<Subtask>,
    done: Vec<String>,
    /// The tool loop of the subtask at the front of the queue, while it waits.
    current: Option<WorkLoop>,
    /// Spawned by a supervisor: it concludes with `return_results`.
    returns: bool,
    /// The team's executor, for an executor with a `kind`.
    runner: Option<KindRunner>,
    /// The team's guards (a tool loop that repeats itself is stopped).
    guards: GuardSettings,
}

impl BottomAgent {
    /// An executor with its tools.
    pub fn new(spec: BottomSpec) -> Self {
        Self {
            spec,
            queue: VecDeque::new(),
            done: Vec::new(),
            current: None,
            returns: false,
            runner: None,
            guards: GuardSettings::default(),
        }
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

    /// An executor spawned by a supervisor (seed 003): it is offered `return_results`, and its
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
        if self.done.contains(&key) || self.queue.iter().any(|s| s.key() == key) {
            return; // redelivered
        }
        self.queue.push_back(subtask);
    }

    /// Works through the queue: each subtask's tool loop runs until it ends or has to wait.
    async fn work(&mut self, ctx: &mut AgentContext) -> Result<(), AgentError> {
        while let Some(subtask) = self.queue.front().cloned() {
            if let (Some(kind), Some(runner)) = (self.spec.kind.clone(), self.runner.clone())
                && kind::runs_through(&kind, &subtask)
            {
                self.run_kind(ctx, &runner, &kind, &subtask).await?;
                self.queue.pop_front();
                self.done.push(subtask.key());
                continue;
            }
            if subtask.step.is_scripted() && !self.spec.tools.contains(&subtask.step.tool) {
                return Err(AgentError::NotAllowed(format!(
                    "executor `{}` does not have the tool `{}` (it has: {})",
                    ctx.id(),
                    subtask.step.tool,
                    self.spec.tools.join(", ")
                )));
            }
            let mut work = match self.current.take() {
                Some(w) if w.key() == subtask.key() => w,
                _ => WorkLoop::new(subtask.clone(), ctx.now()),
            };
            let means = Means {
                tools: &self.spec.tools,
                supervises: false,
                returns: self.returns,
                guards: self.guards,
            };
            // On an error the loop is dropped: the retry starts the subtask's loop again (its
            // side-effecting calls are journaled, so none runs twice), on the same clock: the
            // subtask's time limit counts from its first start.
            let progress = match work.run(ctx, &means).await {
                Ok(progress) => progress,
                Err(error) => {
                    self.current = Some(WorkLoop::new(subtask.clone(), work.started));
                    return Err(error);
                }
            };
            match progress {
                Progress::Suspended => {
                    self.current = Some(work);
                    return Ok(());
                }
                Progress::Done(outcome) => {
                    self.finish(ctx, &subtask, work.started, *outcome).await?;
                    self.queue.pop_front();
                    self.done.push(subtask.key());
                }
            }
        }
        Ok(())
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
        if let Some(supervisor) = ctx.config().supervisor.clone() {
            ctx.send(&supervisor, MessageKind::ProgressReport, &report).await?;
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
        let partial = shorten(&partial);
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
        if let Some(supervisor) = ctx.config().supervisor.clone() {
            ctx.send(&supervisor, MessageKind::ProgressReport, &report).await?;
        }
        Ok(())
    }
}

/// At most this much of an interrupted call's output travels in reports.
const MAX_PARTIAL: usize = 1024;

fn shorten(text: &str) -> String {
    let text = text.trim();
    if text.len() <= MAX_PARTIAL {
        return text.to_owned();
    }
    let mut end = MAX_PARTIAL;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}…", &text[..end])
}

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
                    let Some(request) = ctx.read_payload::<HelpRequest>(message).await? else {
                        continue;
                    };
                    let response = match request {
                        HelpRequest::ShareKnowledge => {
                            let board = ctx.read_board(&BoardId::Agent(ctx.id().clone())).await?;
                            HelpResponse::Knowledge { knowledge: board.content }
                        }
                        HelpRequest::TakeOverTask { subtask } => {
                            let idle = self.queue.is_empty() && ctx.retries() == 0;
                            if idle {
                                self.accept(*subtask);
                                HelpResponse::Accepted
                            } else {
                                HelpResponse::Refused { reason: "busy".into() }
                            }
                        }
                        HelpRequest::Speak { message: said } => {
                            let Some(from) =
                                message.from.agent().cloned().filter(|_| from_supervisor)
                            else {
                                ctx.audit(AuditEvent::Denied {
                                    action: format!("speak from {}", message.from),
                                    error: "an executor answers only its supervisor".into(),
                                })
                                .await?;
                                let refused = HelpResponse::Refused {
                                    reason: "only my supervisor may speak to me".into(),
                                };
                                ctx.reply(message, MessageKind::PeerHelpResponse, &refused).await?;
                                continue;
                            };
                            let context = match &self.current {
                                Some(work) => work.context(),
                                None => self.current_work().unwrap_or_default(),
                            };
                            let reply = crate::answer(ctx, &from, &said, &context).await;
                            if let Some(work) = self.current.as_mut() {
                                work.heard(&from, &said);
                            }
                            HelpResponse::Said { reply }
                        }
                    };
                    ctx.reply(message, MessageKind::PeerHelpResponse, &response).await?;
                }
                MessageKind::StatusQuery if from_supervisor => {
                    let report =
                        StatusReport::Agent { status: ctx.status(), current: self.current_work() };
                    ctx.reply(message, MessageKind::StatusReport, &report).await?;
                }
                _ => {}
            }
        }
        self.work(ctx).await
    }

    async fn on_shutdown(&mut self, ctx: &mut AgentContext) -> Result<(), AgentError> {
        if !self.queue.is_empty() {
            tracing::warn!(agent = %ctx.id(), pending = self.queue.len(), "executor shutting down with incomplete tasks");
        }
        Ok(())
    }

    fn wants_tick(&self) -> bool {
        !self.queue.is_empty()
            && self.current.as_ref().is_none_or(|w| w.waiting.is_none() || w.wants_tick())
    }

    fn snapshot(&self) -> serde_json::Value {
        if self.queue.is_empty() && self.done.is_empty() {
            return serde_json::Value::Null;
        }
        serde_json::json!({ "queue": self.queue, "done": self.done, "current": self.current })
    }

    fn restore(&mut self, state: serde_json::Value) -> Result<(), AgentError> {
        #[derive(Deserialize)]
        struct Saved {
            queue: VecDeque<Subtask>,
            done: Vec<String>,
            #[serde(default)]
            current: Option<WorkLoop>,
        }
        if state.is_null() {
            return Ok(());
        }
        let saved: Saved = serde_json::from_value(state).map_err(|e| {
            AgentError::NotAllowed(format!("saved state of an executor cannot be read: {e}"))
        })?;
        self.queue = saved.queue;
        self.done = saved.done;
        self.current = saved.current;
        Ok(())
    }

    fn current_work(&self) -> Option<String> {
        self.queue.front().map(|s| format!("{}: {}", s.key(), s.step.description))
    }

    fn abandon_work(&mut self) -> Option<Subtask> {
        self.current = None;
        self.queue.pop_front()
    }

    fn waiting_on(&self, me: &agent_state::AgentId) -> Vec<agent_state::WaitEdge> {
        self.current.as_ref().map(|w| w.waits(me)).unwrap_or_default()
    }

    fn open_tasks(&self) -> Vec<String> {
        let mut tasks: Vec<String> = self.queue.iter().map(|s| s.task_id.clone()).collect();
        tasks.dedup();
        tasks
    }
}
