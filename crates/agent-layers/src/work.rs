//! One piece of work carried out through the reasoner's tool loop, kept across heartbeats: the
//! executor's subtask, or a supervising lead's step.
//!
//! Each turn the reasoner chooses the next call. Workspace tools run through the agent's tool
//! journal (a resumed run does not repeat a side effect); the agent-management tools of seed 003
//! run through the team's [`Spawner`](agent_core::Spawner) and the bus:
//! - `spawn_agent` creates a subordinate and sends it its task (a call with any argument
//!   besides `role_name` and `task_prompt`, such as `tools` or `network`, is refused and
//!   audited: the new agent holds what its role defines); `get_agents` lists them;
//!   `despawn_agent` dismisses one;
//! - `speak_to_agent` sends a message and **suspends** the loop until the reply arrives (or
//!   [`SPEAK_TIMEOUT_MS`] passes): the loop is part of the agent's saved state, so a pending
//!   reply survives a crash;
//! - `return_results` concludes the work with a structured result, checked against the schema
//!   and against the paths this loop's own calls wrote (and its workers' trusted results): a
//!   claim of a file nobody wrote is sent back to the reasoner once, then kept as untrusted.
//!
//! Finishing while subordinates still work suspends the loop until their results arrive; each
//! arrives in the history as a `return_results` record from that agent. Every refusal reaches the
//! reasoner as a failed call and is audited; none stops the agent.

use std::collections::BTreeSet;

use agent_core::protocol::HelpRequest;
use agent_core::spawn::{
    DESPAWN_AGENT, GET_AGENTS, RETURN_RESULTS, SPAWN_AGENT, SPEAK_TO_AGENT, SUPERVISOR_TOOLS,
};
use agent_core::tools::ToolError;
use agent_core::{
    AgentContext, AgentError, AuditEvent, FINISH_TOOL, NextAction, SpawnError, SpawnRequest,
    ToolCall, ToolCallRecord,
};
use agent_state::{
    Action, AgentId, AgentResult, Assignment, GuardSettings, Limit, MessageId, MessageKind,
    PlanStep, QUOTE_CHARS, ResultStatus, StepTarget, Subtask, SubtaskResult, TaskFailure,
    Timestamp, WaitEdge, call_fingerprint, detect_loop, quote, same_path,
};
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

/// Most tool calls for a scripted step (one naming its tool) before the executor gives up.
pub const MAX_TOOL_CALLS_PER_SUBTASK: usize = 8;

/// Most tool calls for a goal step (a description only: the reasoner chooses every call).
pub const MAX_TOOL_CALLS_PER_GOAL_STEP: usize = 40;

/// How long `speak_to_agent` waits for the reply before it reports a timeout to the reasoner.
pub const SPEAK_TIMEOUT_MS: u64 = 120_000;

/// The tool name under which a subordinate's result, or a message spoken to this agent, enters
/// the history the reasoner sees.
pub const MESSAGE_RECORD: &str = "message";

/// A subordinate spawned by this loop.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub(crate) struct Child {
    pub(crate) id: AgentId,
    pub(crate) role: String,
    pub(crate) result: Option<SubtaskResult>,
    pub(crate) despawned: bool,
}

impl Child {
    fn working(&self) -> bool {
        self.result.is_none() && !self.despawned
    }
}

/// What the loop waits for.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub(crate) enum Wait {
    /// The reply to a `speak_to_agent` message.
    Reply { to: AgentId, message: MessageId, since: Timestamp, call: ToolCall },
    /// The results of the subordinates still working.
    Results,
}

/// How the loop ended.
pub(crate) struct Outcome {
    pub(crate) success: bool,
    pub(crate) summary: String,
    pub(crate) result: Option<AgentResult>,
    /// The error to fail the step with (the last call's, when the reasoner gave up on it).
    pub(crate) error: Option<AgentError>,
    /// An interrupted side-effecting call: `(tool, partial output)`.
    pub(crate) interrupted: Option<(String, String)>,
    /// A guard stopped the loop (it repeated itself), or it ran out of time
    /// ([`TaskFailure::TimedOut`]): the typed reason.
    pub(crate) stuck: Option<TaskFailure>,
}

pub(crate) enum Progress {
    Suspended,
    Done(Box<Outcome>),
}

/// A tool loop in progress.
#[derive(Debug, Serialize, Deserialize)]
pub(crate) struct WorkLoop {
    pub(crate) subtask: Subtask,
    pub(crate) history: Vec<ToolCallRecord>,
    pub(crate) children: Vec<Child>,
    pub(crate) waiting: Option<Wait>,
    /// When the loop began.
    pub(crate) started: Timestamp,
    rejected_once: bool,
    /// Paths this loop's own successful calls wrote, and the commands it ran.
    touched: Vec<String>,
    commands: Vec<String>,
    /// The last failed call's error, while the reasoner has not moved past it: if it gives
    /// up there, the step fails with that error (and its class), as it would without a loop.
    #[serde(skip)]
    last_error: Option<AgentError>,
}

/// What the owner of a loop lends it.
pub(crate) struct Means<'a> {
    /// The workspace tools the agent holds.
    pub(crate) tools: &'a [String],
    /// Whether the agent may spawn (its role enables roles).
    pub(crate) supervises: bool,
    /// Whether it concludes with `return_results` (it was spawned by a supervisor).
    pub(crate) returns: bool,
    /// The team's guards: how many identical calls in a row are a loop.
    pub(crate) guards: GuardSettings,
}

impl Means<'_> {
    fn offered(&self) -> Vec<String> {
        let mut tools: Vec<String> = self.tools.to_vec();
        if self.supervises {
            tools.extend(SUPERVISOR_TOOLS.iter().map(|t| (*t).to_owned()));
        }
        if self.returns {
            tools.push(RETURN_RESULTS.to_owned());
        }
        tools
    }
}

impl WorkLoop {
    pub(crate) fn new(subtask: Subtask, started: Timestamp) -> Self {
        Self {
            subtask,
            history: Vec::new(),
            children: Vec::new(),
            waiting: None,
            started,
            rejected_once: false,
            touched: Vec::new(),
            commands: Vec::new(),
            last_error: None,
        }
    }

    pub(crate) fn key(&self) -> String {
        self.subtask.key()
    }

    /// Whether it waits for a reply that may time out (the agent wants heartbeats then).
    pub(crate) fn wants_tick(&self) -> bool {
        matches!(self.waiting, Some(Wait::Reply { .. }))
    }

    /// Whom the loop waits on (`me` is its agent): the agent it spoke to, or its workers still
    /// working.
    pub(crate) fn waits(&self, me: &AgentId) -> Vec<WaitEdge> {
        let task = Some(self.subtask.task_id.clone());
        match &self.waiting {
            Some(Wait::Reply { to, .. }) => vec![WaitEdge {
                waiter: me.clone(),
                on: to.clone(),
                what: format!("the reply to speak_to_agent (step {})", self.subtask.key()),
                task,
            }],
            Some(Wait::Results) => self
                .children
                .iter()
                .filter(|c| c.working())
                .map(|c| WaitEdge {
                    waiter: me.clone(),
                    on: c.id.clone(),
                    what: format!("the results of its work on {}", self.subtask.key()),
                    task: task.clone(),
                })
                .collect(),
            None => Vec::new(),
        }
    }

    pub(crate) fn has_child(&self, id: &AgentId) -> bool {
        self.children.iter().any(|c| &c.id == id)
    }

    /// Takes `id`, spawned by this loop before a crash made it run again, as its worker.
    pub(crate) fn adopt(&mut self, id: AgentId, role: String) {
        if !self.has_child(&id) {
            self.children.push(Child { id, role, result: None, despawned: false });
        }
    }

    /// A subordinate's report (result or failure) arrived.
    pub(crate) fn child_reported(&mut self, from: &AgentId, result: SubtaskResult) {
        let Some(child) = self.children.iter_mut().find(|c| &c.id == from) else { return };
        if child.result.is_some() {
            return; // redelivered
        }
        let output = match &result.result {
            Some(r) => serde_json::to_string(r).unwrap_or_else(|_| result.output.clone()),
            None => result.output.clone(),
        };
        self.history.push(ToolCallRecord {
            call: ToolCall { tool: RETURN_RESULTS.into(), args: json!({ "agent_id": from }) },
            success: result.success,
            output: format!("results from {from} ({}): {output}", child.role),
            event: true,
        });
        child.result = Some(result);
        if matches!(self.waiting, Some(Wait::Results)) {
            self.waiting = None;
        }
    }

    /// The reply to this loop's pending `speak_to_agent` arrived.
    pub(crate) fn replied(&mut self, correlation: Option<MessageId>, reply: &str) -> bool {
        let Some(Wait::Reply { message, call, to, .. }) = &self.waiting else { return false };
        if correlation != Some(*message) {
            return false;
        }
        self.history.push(ToolCallRecord {
            call: call.clone(),
            success: true,
            output: json!({ "agent_id": to, "agent_response": reply }).to_string(),
            event: false,
        });
        self.waiting = None;
        true
    }

    /// The agent this loop spoke to refused to answer (it has failed: `reason` says so): the
    /// `speak_to_agent` call fails with it at once, for the reasoner to move on (another
    /// worker, a replacement, or giving up the step).
    pub(crate) fn refused(&mut self, correlation: Option<MessageId>, reason: &str) -> bool {
        let Some(Wait::Reply { message, call, to, .. }) = &self.waiting else { return false };
        if correlation != Some(*message) {
            return false;
        }
        self.history.push(ToolCallRecord {
            call: call.clone(),
            success: false,
            output: json!({ "agent_id": to, "error": reason }).to_string(),
            event: false,
        });
        self.waiting = None;
        true
    }

    /// Something said to this agent (by its supervisor or a subordinate) that the reasoner
    /// should see at its next choice.
    pub(crate) fn heard(&mut self, from: &AgentId, message: &str) {
        self.history.push(ToolCallRecord {
            call: ToolCall { tool: MESSAGE_RECORD.into(), args: json!({ "from": from }) },
            success: true,
            output: format!("{from} says: {message}"),
            event: true,
        });
    }

    /// Whether [`heard`](Self::heard) took this already.
    pub(crate) fn has_heard(&self, from: &AgentId, message: &str) -> bool {
        let output = format!("{from} says: {message}");
        self.history.iter().any(|r| r.event && r.output == output)
    }

    /// Where the work stands, in a line (for `answer` and status reports).
    pub(crate) fn context(&self) -> String {
        let last = self.history.last().map(|r| {
            format!("; last: {} {}", r.call.tool, if r.success { "ok" } else { "failed" })
        });
        format!(
            "working on {}: {} ({} call(s) so far{}{})",
            self.subtask.key(),
            self.subtask.step.description,
            self.calls(),
            last.unwrap_or_default(),
            match &self.waiting {
                Some(Wait::Reply { to, .. }) => format!("; waiting for {to} to answer"),
                Some(Wait::Results) => "; waiting for subordinates' results".into(),
                None => String::new(),
            }
        )
    }

    /// The calls this loop made so far (events that reached it are not counted): the index of
    /// the next call in the tool journal, the same when the loop runs again after a crash even
    /// if workers' results or messages arrive in another order.
    fn made(&self) -> usize {
        self.history.iter().filter(|r| !r.event).count()
    }

    /// The tool calls made so far: the calls made, without the finishes put off while workers
    /// still worked (what the call limit counts).
    fn calls(&self) -> usize {
        self.history.iter().filter(|r| !r.event && r.call.tool != FINISH_TOOL).count()
    }

    fn limit(&self) -> usize {
        if self.subtask.step.is_scripted() {
            MAX_TOOL_CALLS_PER_SUBTASK
        } else {
            MAX_TOOL_CALLS_PER_GOAL_STEP
        }
    }

    /// Runs the loop until it finishes or has to wait. When it ends, the reasoner is told
    /// ([`Reasoner::concluded`](agent_core::Reasoner::concluded)), so a conversation keeps the
    /// step as one turn.
    pub(crate) async fn run(
        &mut self,
        ctx: &mut AgentContext,
        means: &Means<'_>,
    ) -> Result<Progress, AgentError> {
        let offered = means.offered();
        // A supervisor's reasoner is told which roles it may spawn.
        let roles = match ctx.spawner() {
            Some(spawner) if means.supervises => spawner.enabled_roles(ctx.id()),
            _ => Vec::new(),
        };
        let progress = self.turns(ctx, &offered, &roles, &means.guards).await?;
        if let Progress::Done(outcome) = &progress {
            let ending = match (&outcome.result, &outcome.interrupted) {
                (_, Some((tool, _))) => format!("interrupted while `{tool}` ran"),
                (Some(result), _) => format!(
                    "returned results: {}",
                    serde_json::to_string(result).unwrap_or_else(|_| result.summary.clone())
                ),
                (None, None) => {
                    format!("finished: success={}, {}", outcome.success, outcome.summary)
                }
            };
            let reasoner = ctx.reasoner();
            let who = ctx.persona_with(&offered, &roles);
            if let Err(error) = reasoner.concluded(who, &self.subtask, &self.history, &ending).await
            {
                tracing::warn!(agent = %ctx.id(), %error, "the reasoner could not remember the step");
            }
        }
        Ok(progress)
    }

    async fn turns(
        &mut self,
        ctx: &mut AgentContext,
        offered: &[String],
        roles: &[(String, String)],
        guards: &GuardSettings,
    ) -> Result<Progress, AgentError> {
        loop {
            if let Some(progress) = self.out_of_time(ctx).await? {
                return Ok(progress);
            }
            if let Some(Wait::Reply { since, to, call, .. }) = &self.waiting {
                if ctx.now().millis_since(*since) < SPEAK_TIMEOUT_MS {
                    return Ok(Progress::Suspended);
                }
                let output = format!(
                    "error: {to} did not answer within {} s; it may be busy: try again later or \
                     call get_agents",
                    SPEAK_TIMEOUT_MS / 1000
                );
                self.history.push(ToolCallRecord {
                    call: call.clone(),
                    success: false,
                    output,
                    event: false,
                });
                self.waiting = None;
            }
            if self.waiting.is_some() {
                return Ok(Progress::Suspended);
            }
            if self.calls() >= self.limit() {
                return Ok(self.done(
                    false,
                    format!("gave up after {} tool calls", self.limit()),
                    None,
                ));
            }
            let reasoner = ctx.reasoner();
            let action = reasoner
                .next_action(ctx.persona_with(offered, roles), &self.subtask, &self.history)
                .await?;
            match action {
                NextAction::Finish { success, summary } => {
                    let working: Vec<String> = self
                        .children
                        .iter()
                        .filter(|c| c.working())
                        .map(|c| c.id.to_string())
                        .collect();
                    if !working.is_empty() {
                        self.history.push(ToolCallRecord {
                            call: ToolCall {
                                tool: FINISH_TOOL.into(),
                                args: json!({ "success": success, "summary": summary }),
                            },
                            success: false,
                            output: format!(
                                "not finished yet: your agents {} are still working; their \
                                 results will arrive here. Finish once you have them (or \
                                 despawn_agent those you no longer need).",
                                working.join(", ")
                            ),
                            event: false,
                        });
                        self.waiting = Some(Wait::Results);
                        return Ok(Progress::Suspended);
                    }
                    // The reasoner gave up in its own words (not just passing on the output of
                    // the call that failed last, as the rule-based reasoner does): the step
                    // fails with them, quoted (a model's text, perhaps with its chat template's
                    // markup in it).
                    let echoes = self
                        .history
                        .iter()
                        .rev()
                        .find(|r| !r.event)
                        .is_some_and(|r| !r.success && r.output == summary);
                    if !success && self.last_error.is_none() && !echoes {
                        let tool = if self.subtask.step.is_scripted() {
                            self.subtask.step.tool.clone()
                        } else {
                            FINISH_TOOL.to_owned()
                        };
                        let output = format!(
                            "`{}` gave up on the step: {}",
                            ctx.id(),
                            quote(&summary, QUOTE_CHARS)
                        );
                        self.last_error = Some(AgentError::ToolFailed { tool, output });
                    }
                    return Ok(self.done(success, summary, None));
                }
                NextAction::Call(call) => {
                    if let Some(progress) = self.repeats(ctx, &call, guards).await? {
                        return Ok(progress);
                    }
                    if let Some(progress) = self.call(ctx, offered, call).await? {
                        return Ok(progress);
                    }
                }
            }
        }
    }

    fn done(&mut self, success: bool, summary: String, result: Option<AgentResult>) -> Progress {
        let error = if success {
            None
        } else {
            Some(self.last_error.take().unwrap_or_else(|| AgentError::ToolFailed {
                tool: self.subtask.step.tool.clone(),
                output: summary.clone(),
            }))
        };
        Progress::Done(Box::new(Outcome {
            success,
            summary,
            result,
            error,
            interrupted: None,
            stuck: None,
        }))
    }

    /// The loop rule: whether making `call` now repeats the calls since anything new arrived
    /// (a worker's result, a message) `guards.repeat_limit` times in a row. The repeated call
    /// is not made; the loop ends with [`TaskFailure::Loop`], audited.
    async fn repeats(
        &mut self,
        ctx: &mut AgentContext,
        call: &ToolCall,
        guards: &GuardSettings,
    ) -> Result<Option<Progress>, AgentError> {
        let since_news = self.history.iter().rposition(|r| r.event).map_or(0, |i| i + 1);
        let mut calls: Vec<String> = self.history[since_news..]
            .iter()
            .map(|r| call_fingerprint(&r.call.tool, &r.call.args))
            .collect();
        calls.push(call_fingerprint(&call.tool, &call.args));
        let Some(repetition) = detect_loop(&calls, guards.repeat_limit) else { return Ok(None) };
        let block = &calls[calls.len() - repetition.period..];
        let item = agent_state::shorten(&block.join(" then "), MAX_ITEM);
        let failure = TaskFailure::Loop {
            agent: ctx.id().clone(),
            item,
            repeats: u32::try_from(repetition.times).unwrap_or(u32::MAX),
        };
        tracing::warn!(agent = %ctx.id(), step = %self.subtask.key(), %failure, "loop stopped");
        let escalated_to = match guards.on_stuck {
            agent_state::OnStuck::Stop => None,
            agent_state::OnStuck::Escalate => ctx.config().supervisor.clone(),
        };
        ctx.audit(AuditEvent::Stuck {
            task: Some(self.subtask.task_id.clone()),
            reason: failure.clone(),
            escalated_to,
        })
        .await?;
        let summary = failure.to_string();
        Ok(Some(Progress::Done(Box::new(Outcome {
            success: false,
            summary: summary.clone(),
            result: None,
            error: Some(AgentError::ToolFailed { tool: call.tool.clone(), output: summary }),
            interrupted: None,
            stuck: Some(failure),
        }))))
    }

    /// The subtask limit (`[timeouts] subtask_ms`): once that long has passed on the run's
    /// clock since the loop [started](Self::started) (across heartbeats, suspensions and
    /// retries), the loop ends with [`TaskFailure::TimedOut`], audited; its owner reports the
    /// step failed with that reason and its lead escalates it (neither retried nor
    /// reassigned). Checked before every choice of the reasoner and whenever a suspended loop
    /// runs again.
    async fn out_of_time(
        &mut self,
        ctx: &mut AgentContext,
    ) -> Result<Option<Progress>, AgentError> {
        let limit_ms = ctx.timeouts().subtask_ms;
        if ctx.now().millis_since(self.started) < limit_ms {
            return Ok(None);
        }
        let what = format!(
            "step `{}` of task `{}` on `{}`",
            self.subtask.step.id,
            self.subtask.task_id,
            ctx.id()
        );
        tracing::warn!(agent = %ctx.id(), step = %self.subtask.key(), limit_ms, "subtask timed out");
        ctx.audit(AuditEvent::TimedOut { limit: Limit::Subtask, what: what.clone(), limit_ms })
            .await?;
        let failure = TaskFailure::TimedOut { limit: Limit::Subtask, what, limit_ms };
        let summary = failure.to_string();
        Ok(Some(Progress::Done(Box::new(Outcome {
            success: false,
            summary: summary.clone(),
            result: None,
            error: Some(AgentError::ToolFailed {
                tool: self.subtask.step.tool.clone(),
                output: summary,
            }),
            interrupted: None,
            stuck: Some(failure),
        }))))
    }

    /// Carries out one call; `Some` when the loop stops (suspends or ends) with it.
    async fn call(
        &mut self,
        ctx: &mut AgentContext,
        offered: &[String],
        call: ToolCall,
    ) -> Result<Option<Progress>, AgentError> {
        if !offered.contains(&call.tool) {
            let error = format!(
                "agent `{}` does not have the tool `{}` (it has: {})",
                ctx.id(),
                call.tool,
                offered.join(", ")
            );
            return self.refuse(ctx, call, error).await.map(|()| None);
        }
        match call.tool.as_str() {
            SPAWN_AGENT => self.spawn(ctx, call).await.map(|()| None),
            SPEAK_TO_AGENT => self.speak(ctx, call).await,
            GET_AGENTS => self.list(ctx, call).await.map(|()| None),
            DESPAWN_AGENT => self.despawn(ctx, call).await.map(|()| None),
            RETURN_RESULTS => self.return_results(ctx, call).await,
            _ => self.workspace(ctx, call).await,
        }
    }

    async fn refuse(
        &mut self,
        ctx: &mut AgentContext,
        call: ToolCall,
        error: String,
    ) -> Result<(), AgentError> {
        ctx.audit(AuditEvent::Denied {
            action: format!("call tool {}", call.tool),
            error: error.clone(),
        })
        .await?;
        self.history.push(ToolCallRecord {
            call,
            success: false,
            output: format!("error: {error}"),
            event: false,
        });
        self.last_error = Some(AgentError::NotAllowed(error));
        Ok(())
    }

    fn ok(&mut self, call: ToolCall, output: Value) {
        self.last_error = None;
        self.history.push(ToolCallRecord {
            call,
            success: true,
            output: output.to_string(),
            event: false,
        });
    }

    async fn workspace(
        &mut self,
        ctx: &mut AgentContext,
        call: ToolCall,
    ) -> Result<Option<Progress>, AgentError> {
        // One journal entry per subtask, attempt and call: a resumed run reuses a recorded
        // side effect instead of running it again.
        let key = format!("{}#{}#{}", self.subtask.key(), self.subtask.attempt, self.made());
        let (success, output) =
            match ctx.call_step_tool(&key, &call, self.subtask.step.idempotent).await {
                Ok(output) => {
                    self.last_error = None;
                    (output.success, output.output)
                }
                // A call interrupted by a crash, or one past the tool limit that may still be
                // running where it is served (not idempotent): never sent again; the step
                // goes to the lead to decide.
                Err(AgentError::Tool(ToolError::OutcomeUnknown { tool, after_ms, cancelled })) => {
                    let said =
                        ToolError::OutcomeUnknown { tool: tool.clone(), after_ms, cancelled };
                    return Ok(Some(Progress::Done(Box::new(Outcome {
                        success: false,
                        summary: String::new(),
                        result: None,
                        error: None,
                        interrupted: Some((tool, said.to_string())),
                        stuck: None,
                    }))));
                }
                Err(AgentError::Tool(ToolError::Interrupted { tool, partial })) => {
                    return Ok(Some(Progress::Done(Box::new(Outcome {
                        success: false,
                        summary: String::new(),
                        result: None,
                        error: None,
                        interrupted: Some((tool, partial)),
                        stuck: None,
                    }))));
                }
                // Arguments the schema refuses, a path outside the workspace, an edit whose
                // text is not there, a call cut at the team's tool limit: the reasoner sees the
                // error as the call's result (it is audited as a failed call) and may try again
                // (with less to do: the subtask's own limit bounds the whole loop).
                Err(AgentError::Tool(error))
                    if error.class() == agent_state::ErrorClass::Permanent
                        || matches!(error, ToolError::Timeout { .. }) =>
                {
                    let output = format!("error: {error}");
                    self.last_error = Some(AgentError::Tool(error));
                    (false, output)
                }
                Err(error) => return Err(error),
            };
        if success {
            if let Some(path) = call.args.get("path").and_then(Value::as_str)
                && matches!(call.tool.as_str(), "write_file" | "edit_file")
            {
                self.touched.push(path.to_owned());
            }
            if let Some(command) = call.args.get("command").and_then(Value::as_str) {
                self.commands.push(command.to_owned());
            }
        }
        self.history.push(ToolCallRecord { call, success, output, event: false });
        Ok(None)
    }

    fn spawner(ctx: &AgentContext) -> Result<std::sync::Arc<dyn agent_core::Spawner>, SpawnError> {
        ctx.spawner().ok_or(SpawnError::Unavailable)
    }

    async fn spawn(&mut self, ctx: &mut AgentContext, call: ToolCall) -> Result<(), AgentError> {
        let role =
            call.args.get("role_name").and_then(Value::as_str).unwrap_or_default().to_owned();
        let prompt =
            call.args.get("task_prompt").and_then(Value::as_str).unwrap_or_default().to_owned();
        if role.trim().is_empty() || prompt.trim().is_empty() {
            let error =
                "spawn_agent needs `role_name` and `task_prompt`, both non-empty strings".into();
            return self.refuse(ctx, call, error).await;
        }
        ctx.require(Action::Spawn, &format!("a `{role}`")).await?;
        // A spawn names a role and a task: asking for tools, network or capabilities is refused.
        if let Err(e) = agent_core::spawn::check_spawn_arguments(&call.args) {
            return self.refuse(ctx, call, format!("cannot spawn: {e}")).await;
        }
        let request = SpawnRequest {
            parent: ctx.id().clone(),
            role: role.clone(),
            task_prompt: prompt.clone(),
            // The n-th spawn of this role in this loop: the same agent when the call is made
            // again after a crash, however the workers' results interleaved with the calls.
            key: format!(
                "{}#{}#spawn-{}-{}",
                self.subtask.key(),
                self.subtask.attempt,
                role,
                self.history
                    .iter()
                    .filter(|r| r.call.tool == SPAWN_AGENT && r.success && !r.event)
                    .filter(|r| r.call.args.get("role_name").and_then(Value::as_str)
                        == Some(role.as_str()))
                    .count()
            ),
            domain: None,
        };
        let spawned = match Self::spawner(ctx) {
            Ok(spawner) => spawner.spawn(request).await,
            Err(e) => Err(e),
        };
        let record = match spawned {
            Ok(record) => record,
            Err(e) => return self.refuse(ctx, call, format!("cannot spawn: {e}")).await,
        };
        let step = PlanStep::goal(
            record.agent.to_string(),
            prompt,
            StepTarget::Agent(record.agent.clone()),
        )
        .with_role(role.clone());
        let subtask = Subtask {
            task_id: self.subtask.task_id.clone(),
            step,
            assignee: record.agent.clone(),
            attempt: 1,
        };
        ctx.send(&record.agent, MessageKind::TaskAssign, &Assignment::Subtask { subtask }).await?;
        if !self.has_child(&record.agent) {
            self.children.push(Child {
                id: record.agent.clone(),
                role: role.clone(),
                result: None,
                despawned: false,
            });
        }
        let output = json!({
            "agent_id": record.agent,
            "status": "spawned",
            "role_name": role,
            "message": format!(
                "Spawned {role} agent {}. Spawn other agents if needed; its results will arrive \
                 here when it calls return_results.",
                record.agent
            ),
        });
        self.ok(call, output);
        Ok(())
    }

    async fn speak(
        &mut self,
        ctx: &mut AgentContext,
        call: ToolCall,
    ) -> Result<Option<Progress>, AgentError> {
        let target = call.args.get("agent_id").and_then(Value::as_str).unwrap_or_default();
        let message = call.args.get("message").and_then(Value::as_str).unwrap_or_default();
        if target.trim().is_empty() || message.trim().is_empty() {
            let error =
                "speak_to_agent needs `agent_id` and `message`, both non-empty strings".into();
            return self.refuse(ctx, call, error).await.map(|()| None);
        }
        let target = AgentId::new(target);
        let supervisor = ctx.config().supervisor.clone();
        let known = self.has_child(&target)
            || supervisor.as_ref() == Some(&target)
            || Self::spawner(ctx)
                .ok()
                .and_then(|s| s.record(&target))
                .is_some_and(|r| &r.parent == ctx.id());
        if !known {
            let exists = ctx.spawner().is_some_and(|s| s.exists(&target));
            let error = if exists {
                SpawnError::Stranger { agent: target.to_string() }
            } else {
                SpawnError::NoSuchAgent { agent: target.to_string() }
            };
            return self.refuse(ctx, call, error.to_string()).await.map(|()| None);
        }
        if self.children.iter().any(|c| c.id == target && c.despawned) {
            let error = format!("agent `{target}` was despawned; spawn a new one");
            return self.refuse(ctx, call, error).await.map(|()| None);
        }
        let sent = ctx
            .send(
                &target,
                MessageKind::PeerHelpRequest,
                &HelpRequest::Speak { message: message.into() },
            )
            .await?;
        self.waiting = Some(Wait::Reply { to: target, message: sent, since: ctx.now(), call });
        Ok(Some(Progress::Suspended))
    }

    async fn list(&mut self, ctx: &mut AgentContext, call: ToolCall) -> Result<(), AgentError> {
        let include_completed =
            call.args.get("include_completed").and_then(Value::as_bool).unwrap_or(true);
        let Ok(spawner) = Self::spawner(ctx) else {
            let error = SpawnError::Unavailable.to_string();
            return self.refuse(ctx, call, error).await;
        };
        let mut agents = spawner.subordinates(ctx.id()).await;
        for a in &mut agents {
            if let Some(child) = self.children.iter().find(|c| c.id == a.agent_id) {
                a.has_result = a.has_result || child.result.is_some();
            }
        }
        if !include_completed {
            agents.retain(|a| !a.has_result && a.status != agent_state::AgentStatus::Terminated);
        }
        let total = agents.len();
        let output = json!({ "agents": agents, "total_count": total });
        self.ok(call, output);
        Ok(())
    }

    async fn despawn(&mut self, ctx: &mut AgentContext, call: ToolCall) -> Result<(), AgentError> {
        let target = call.args.get("agent_id").and_then(Value::as_str).unwrap_or_default();
        if target.trim().is_empty() {
            return self
                .refuse(ctx, call, "despawn_agent needs `agent_id`, a non-empty string".into())
                .await;
        }
        let target = AgentId::new(target);
        let result = match Self::spawner(ctx) {
            Ok(spawner) => spawner.despawn(ctx.id(), &target).await,
            Err(e) => Err(e),
        };
        match result {
            Ok(summary) => {
                if let Some(child) = self.children.iter_mut().find(|c| c.id == target) {
                    child.despawned = true;
                }
                ctx.audit(AuditEvent::Despawned {
                    agent: target.clone(),
                    summary: summary.clone(),
                })
                .await?;
                self.ok(
                    call,
                    json!({ "agent_id": target, "status": "despawned", "final_summary": summary }),
                );
                Ok(())
            }
            Err(e) => self.refuse(ctx, call, format!("cannot despawn: {e}")).await,
        }
    }

    async fn return_results(
        &mut self,
        ctx: &mut AgentContext,
        call: ToolCall,
    ) -> Result<Option<Progress>, AgentError> {
        let parsed = match call.args.get("result") {
            Some(value) => AgentResult::parse(value),
            None => Err("return_results needs a `result` object".into()),
        };
        let result = match parsed {
            Ok(r) => r,
            Err(problem) => return self.refuse(ctx, call, problem).await.map(|()| None),
        };
        let mut touched: BTreeSet<String> = self.touched.iter().cloned().collect();
        for child in &self.children {
            if let Some(r) = child.result.as_ref().and_then(|r| r.result.as_ref()) {
                touched.extend(r.artifacts.iter().map(|a| a.file_path.clone()));
            }
        }
        let touched: Vec<String> = touched.into_iter().collect();
        let unverified: Vec<String> = result
            .unverified_artifacts(&touched)
            .into_iter()
            .filter(|a| !self.commands.iter().any(|c| mentions(c, &a.file_path)))
            .map(|a| a.file_path.clone())
            .collect();
        let trusted = unverified.is_empty();
        if !trusted && !self.rejected_once {
            self.rejected_once = true;
            let error = format!(
                "result rejected: {} claimed as created or modified, but none of your own tool \
                 calls wrote {}; call return_results again with only the files you changed \
                 (mark files you only read as `referenced`)",
                unverified.join(", "),
                if unverified.len() == 1 { "it" } else { "them" }
            );
            return self.refuse(ctx, call, error).await.map(|()| None);
        }
        // Once per subtask and attempt: a turn run again after a crash returns the same result
        // without a second record of it.
        let key = format!("{}/{}#{}#results", ctx.id(), self.subtask.key(), self.subtask.attempt);
        let state = ctx.deps().state.clone();
        if !matches!(state.tool(&key).await?, Some(Some(_))) {
            ctx.audit(AuditEvent::Result {
                task: self.subtask.key(),
                result: result.clone(),
                trusted,
            })
            .await?;
            let output = agent_core::tools::ToolOutput {
                success: trusted,
                output: serde_json::to_string(&result).unwrap_or_default(),
                data: Value::Null,
            };
            state.record_tool(&key, &output).await?;
        }
        let success = result.status == ResultStatus::Success;
        // A result short of success is the step's failure: its words quoted (a model's text).
        let words =
            if success { result.summary.clone() } else { quote(&result.summary, QUOTE_CHARS) };
        let summary = if trusted {
            words
        } else {
            format!("{words} (UNTRUSTED: claims files it did not write: {})", unverified.join(", "))
        };
        self.ok(call, json!({ "status": "returned", "trusted": trusted }));
        self.last_error = None;
        Ok(Some(Progress::Done(Box::new(Outcome {
            success,
            summary,
            result: Some(result),
            error: None,
            interrupted: None,
            stuck: None,
        }))))
    }
}

/// At most this many characters of a repeated call go into a stop reason.
const MAX_ITEM: usize = 300;

/// Whether a shell command mentions the file: a word of it is the path or its file name (or
/// ends with `/` and either).
pub(crate) fn mentions(command: &str, path: &str) -> bool {
    let path = path.trim().trim_start_matches("./");
    if path.is_empty() {
        return false;
    }
    let name = path.rsplit('/').next().unwrap_or(path);
    command
        .split(|c: char| c.is_whitespace() || matches!(c, '>' | '<' | '|' | ';' | '&' | '\'' | '"'))
        .filter(|w| !w.is_empty())
        .any(|w| [path, name].iter().any(|p| same_path(w, p) || w.ends_with(&format!("/{p}"))))
}
