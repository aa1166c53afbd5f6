//! The bottom layer: executors that run tools for their lead, record results on their board,
//! report progress, help peers and answer status queries (seed 000 §6).

use std::collections::VecDeque;
use std::sync::Arc;

use agent_core::protocol::{HelpRequest, HelpResponse, StatusReport};
use agent_core::tools::ToolError;
use agent_core::{AgentBehavior, AgentContext, AgentError, AuditEvent, NextAction, ToolCallRecord};
use agent_state::{
    Assignment, BoardId, BoardSnapshot, Message, MessageKind, ProgressReport, ProgressStatus,
    Subtask, SubtaskResult, TaskFailure,
};
use async_trait::async_trait;
use serde::{Deserialize, Serialize};

/// Most tool calls an executor makes for one subtask before it gives up.
pub const MAX_TOOL_CALLS_PER_SUBTASK: usize = 8;

/// An executor's settings (seed 000 §6 `BottomLayerAgentConfig`).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct BottomSpec {
    /// The tools it may call. Shared: executors with the same tools hold one list (a team of
    /// 100 000 executors holds a handful of lists, not 100 000).
    pub tools: Arc<[String]>,
}

impl BottomSpec {
    /// An executor allowed `tools`.
    pub fn new<S: Into<String>>(tools: impl IntoIterator<Item = S>) -> Self {
        Self { tools: tools.into_iter().map(Into::into).collect() }
    }
}

/// A bottom-layer agent.
pub struct BottomAgent {
    spec: BottomSpec,
    queue: VecDeque<Subtask>,
    done: Vec<String>,
}

impl BottomAgent {
    /// An executor with its tools.
    pub fn new(spec: BottomSpec) -> Self {
        Self { spec, queue: VecDeque::new(), done: Vec::new() }
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

    async fn execute(
        &mut self,
        ctx: &mut AgentContext,
        subtask: &Subtask,
    ) -> Result<(), AgentError> {
        if !self.spec.tools.contains(&subtask.step.tool) {
            return Err(AgentError::NotAllowed(format!(
                "executor `{}` does not have the tool `{}` (it has: {})",
                ctx.id(),
                subtask.step.tool,
                self.spec.tools.join(", ")
            )));
        }
        let started = ctx.now();
        let mut history: Vec<ToolCallRecord> = Vec::new();
        // The last call's error, while the reasoner has not moved past it: if it gives up
        // there, the step fails with that error (and its class), as it would without a loop.
        let mut last_error: Option<AgentError> = None;
        let (success, summary) = loop {
            if history.len() >= MAX_TOOL_CALLS_PER_SUBTASK {
                break (false, format!("gave up after {MAX_TOOL_CALLS_PER_SUBTASK} tool calls"));
            }
            match ctx.reasoner().next_action(ctx.persona(), subtask, &history).await? {
                NextAction::Finish { success, summary } => break (success, summary),
                NextAction::Call(call) => {
                    if !self.spec.tools.contains(&call.tool) {
                        // The reasoner's mistake, not the step's: it sees the refusal as the
                        // call's result and may choose again.
                        let error = AgentError::NotAllowed(format!(
                            "executor `{}` does not have the tool `{}` (it has: {})",
                            ctx.id(),
                            call.tool,
                            self.spec.tools.join(", ")
                        ));
                        ctx.audit(AuditEvent::Denied {
                            action: format!("call tool {}", call.tool),
                            error: error.to_string(),
                        })
                        .await?;
                        history.push(ToolCallRecord {
                            call,
                            success: false,
                            output: format!("error: {error}"),
                        });
                        last_error = Some(error);
                        continue;
                    }
                    // One journal entry per subtask, attempt and call: a resumed run reuses a
                    // recorded side effect instead of running it again.
                    let key = format!("{}#{}#{}", subtask.key(), subtask.attempt, history.len());
                    let (success, output) =
                        match ctx.call_step_tool(&key, &call, subtask.step.idempotent).await {
                            Ok(output) => {
                                last_error = None;
                                (output.success, output.output)
                            }
                            Err(AgentError::Tool(ToolError::Interrupted { tool, partial })) => {
                                return self.interrupted(ctx, subtask, tool, partial).await;
                            }
                            // Arguments the schema refuses, a path outside the workspace, an
                            // edit whose text is not there: the reasoner sees the error as the
                            // call's result (it is audited as a failed call) and may try again.
                            Err(AgentError::Tool(error))
                                if error.class() == agent_state::ErrorClass::Permanent =>
                            {
                                let output = format!("error: {error}");
                                last_error = Some(AgentError::Tool(error));
                                (false, output)
                            }
                            Err(error) => return Err(error),
                        };
                    history.push(ToolCallRecord { call, success, output });
                }
            }
        };
        if !success {
            if let Some(error) = last_error {
                return Err(error);
            }
            return Err(AgentError::ToolFailed {
                tool: subtask.step.tool.clone(),
                output: summary,
            });
        }
        let duration = ctx.now().millis_since(started);
        let now = ctx.now();
        ctx.metrics_mut().record_task(true, duration, now);
        ctx.write_board(format!(
            "## Task Execution Result\n\nTask: {}\nStatus: Success\nOutput:\n```\n{}\n```",
            subtask.step.description, summary
        ))
        .await?;
        let result = SubtaskResult {
            task_id: subtask.task_id.clone(),
            step_id: subtask.step.id.clone(),
            agent: ctx.id().clone(),
            success: true,
            output: summary,
            result: None,
        };
        let report = ProgressReport {
            task_id: subtask.task_id.clone(),
            status: ProgressStatus::Completed,
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
        ctx.append_own(&format!(
            "## Interrupted\n\nTask: {}\nStatus: interrupted, needs a decision\n{failure}",
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
            failure: Some(failure),
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
        while let Some(subtask) = self.queue.front().cloned() {
            self.execute(ctx, &subtask).await?;
            self.queue.pop_front();
            self.done.push(subtask.key());
        }
        Ok(())
    }

    async fn on_shutdown(&mut self, ctx: &mut AgentContext) -> Result<(), AgentError> {
        if !self.queue.is_empty() {
            tracing::warn!(agent = %ctx.id(), pending = self.queue.len(), "executor shutting down with incomplete tasks");
        }
        Ok(())
    }

    fn wants_tick(&self) -> bool {
        !self.queue.is_empty()
    }

    fn snapshot(&self) -> serde_json::Value {
        if self.queue.is_empty() && self.done.is_empty() {
            return serde_json::Value::Null;
        }
        serde_json::json!({ "queue": self.queue, "done": self.done })
    }

    fn restore(&mut self, state: serde_json::Value) -> Result<(), AgentError> {
        #[derive(Deserialize)]
        struct Saved {
            queue: VecDeque<Subtask>,
            done: Vec<String>,
        }
        if state.is_null() {
            return Ok(());
        }
        let saved: Saved = serde_json::from_value(state).map_err(|e| {
            AgentError::NotAllowed(format!("saved state of an executor cannot be read: {e}"))
        })?;
        self.queue = saved.queue;
        self.done = saved.done;
        Ok(())
    }

    fn current_work(&self) -> Option<String> {
        self.queue.front().map(|s| format!("{}: {}", s.key(), s.step.description))
    }

    fn abandon_work(&mut self) -> Option<Subtask> {
        self.queue.pop_front()
    }
}
