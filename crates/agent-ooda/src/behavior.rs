//! [`OodaBehavior`]: an OODA loop as a Strata agent. The runtime drives it like any layer's
//! agent; each turn it takes its messages into the inbox and runs one loop.

use agent_core::protocol::{HelpRequest, HelpResponse, StatusReport};
use agent_core::{AgentBehavior, AgentContext, AgentError, AuditEvent};
use agent_state::ooda::{MessageRole, OodaEvent, OodaEventKind, OodaMessage, StopReason};
use agent_state::{
    Address, AgentStatus, Assignment, BoardSnapshot, CommandOrigin, CommandOutcome, Message,
    MessageKind, OnStuck, OperatorCommand, ProgressReport, ProgressStatus, SubtaskResult,
    TaskFailure,
};
use async_trait::async_trait;
use serde_json::{Value, json};
use tokio::sync::broadcast;

use crate::ooda::Ooda;

/// An operator's command to an OODA agent: [`OperatorCommand`], sent as an
/// `operator_command` message by `system` (for example from `strata rollback RUN AGENT
/// VERSION`) or the agent's supervisor. The name this crate gave it before it moved to the
/// vocabulary.
pub type OodaCommand = OperatorCommand;

/// An OODA agent in a Strata team: the runtime's lifecycle, heartbeat, retries, budget and
/// audit, with one loop ([`Ooda::step`]) per turn.
///
/// - A `task_assign` with a subtask from its supervisor gives it an objective (the step); when
///   the loop stops it reports a `progress_report` with the result, as an executor does. With
///   a supervisor it works on such subtasks only; without one, on its own goal.
/// - A `peer_help_request` that speaks to it joins its inbox (answered at once with where it
///   stands); a `peer_help_response` joins it too. The next observe processes them.
/// - Messages it decides to send are routed by the bus at the end of the step.
/// - An [`OperatorCommand`] (an `operator_command` message) from `system` or its supervisor
///   is recorded in this turn and carried out in the next (so that it is saved before it has
///   any effect); the sender is answered with a [`CommandOutcome`]: `refused` at once, or
///   `applied` once the new version is in place. (A command sent as a `task_assign`, as
///   before the kind existed, is still carried out, unanswered.)
pub struct OodaBehavior {
    ooda: Ooda,
    /// It has a supervisor: it works on its lead's subtasks only, not on its own goal.
    under_lead: bool,
    /// The runtime settings its team gave it, before any configuration of its own changed
    /// them: what a setting its configuration leaves out (after a rollback) goes back to.
    team_settings: Option<agent_core::Tuning>,
}

impl OodaBehavior {
    /// The agent running `ooda`.
    pub fn new(ooda: Ooda) -> Self {
        Self { ooda, under_lead: false, team_settings: None }
    }

    /// Its loop.
    pub fn ooda(&self) -> &Ooda {
        &self.ooda
    }

    /// Whether it has something to do at its next turn: a change in progress, or a loop not
    /// stopped on an objective (its lead's subtask; its own goal when it has no lead).
    fn has_work(&self) -> bool {
        self.ooda.pending.is_some()
            || (self.ooda.stop.is_none() && (self.ooda.task.is_some() || !self.under_lead))
    }

    /// Its events as they happen (see [`Ooda::subscribe`]).
    pub fn subscribe(&self) -> broadcast::Receiver<OodaEvent> {
        self.ooda.subscribe()
    }

    async fn command(
        &mut self,
        ctx: &mut AgentContext,
        message: &Message,
    ) -> Result<(), AgentError> {
        // Only a command of the kind of its own is answered (one sent as a `task_assign`, as
        // before that kind, has a sender that waits for no answer).
        let origin =
            (message.kind == MessageKind::OperatorCommand).then(|| CommandOrigin::of(message));
        let command = match serde_json::from_value::<OperatorCommand>(message.content.clone()) {
            Ok(c) => c,
            Err(e) => {
                let error = format!("not a command this agent knows (rollback, adopt): {e}");
                let action = format!("command from {}", message.from);
                ctx.audit(AuditEvent::Denied { action, error: error.clone() }).await?;
                return answer(ctx, origin.as_ref(), CommandOutcome::Refused { reason: error })
                    .await;
            }
        };
        let asked = command.describe();
        let result = match &command {
            OperatorCommand::Rollback { version } => self.ooda.rollback(*version),
            OperatorCommand::Adopt { genome } => self.ooda.adopt(genome),
        };
        match result {
            Ok((next, dropped)) => {
                if let Some(pending) = self.ooda.pending.as_mut() {
                    pending.origin = origin;
                }
                ctx.append_own(&format!(
                    "- {asked} asked by {}: it becomes version {next}",
                    message.from
                ))
                .await?;
                if dropped.is_some() && ctx.status() == AgentStatus::WaitingApproval {
                    ctx.transition(
                        AgentStatus::Working,
                        "a rollback or hot-swap replaces the change waiting for a human",
                    )
                    .await?;
                }
                let data = match &command {
                    OperatorCommand::Rollback { version } => json!({
                        "outcome": "rollback_scheduled",
                        "to": version,
                        "version": next,
                        "dropped_decision": dropped,
                    }),
                    OperatorCommand::Adopt { genome } => json!({
                        "outcome": "hot_swap_scheduled",
                        "genome_id": genome.id,
                        "from": self.ooda.genome(),
                        "version": next,
                        "dropped_decision": dropped,
                    }),
                };
                self.ooda.emit(ctx, OodaEventKind::ModifySelf, data).await?;
            }
            Err(e) => {
                let error = e.to_string();
                ctx.audit(AuditEvent::Denied { action: asked.clone(), error: error.clone() })
                    .await?;
                let data = match &command {
                    OperatorCommand::Rollback { version } => {
                        json!({ "outcome": "refused", "rollback_to": version, "error": error })
                    }
                    OperatorCommand::Adopt { genome } => {
                        json!({ "outcome": "refused", "genome_id": genome.id, "error": error })
                    }
                };
                self.ooda.emit(ctx, OodaEventKind::ModifySelf, data).await?;
                answer(ctx, origin.as_ref(), CommandOutcome::Refused { reason: error }).await?;
            }
        }
        Ok(())
    }

    /// Tells its supervisor how the lead's subtask ended.
    async fn report(
        &mut self,
        ctx: &mut AgentContext,
        stop: &StopReason,
    ) -> Result<(), AgentError> {
        let Some(task) = self.ooda.task.take() else { return Ok(()) };
        self.ooda.done.push(task.key());
        let Some(supervisor) = ctx.config().supervisor.clone() else { return Ok(()) };
        let success = matches!(stop, StopReason::Finished { .. });
        let output = match stop {
            StopReason::Finished { summary } => summary.clone(),
            other => other.to_string(),
        };
        let now = ctx.now();
        if success {
            ctx.metrics_mut().record_task(true, 0, now);
        }
        let result = SubtaskResult {
            task_id: task.task_id.clone(),
            step_id: task.step.id.clone(),
            agent: ctx.id().clone(),
            success,
            output: output.clone(),
            result: None,
        };
        // Stopped by a guard: reported as an executor's stuck step is, the typed reason
        // marked (its lead escalates it) when the team stops stuck work or the step ran out
        // of time.
        let failure = match stop {
            StopReason::Stuck { failure }
                if self.ooda.guards.on_stuck == OnStuck::Stop
                    || matches!(failure, TaskFailure::TimedOut { .. }) =>
            {
                Some(failure.clone())
            }
            _ => None,
        };
        let report = ProgressReport {
            task_id: task.task_id.clone(),
            status: if success { ProgressStatus::Completed } else { ProgressStatus::Failed },
            percentage: 100,
            description: task.step.description.clone(),
            results: vec![result],
            failure,
        };
        ctx.send(&supervisor, MessageKind::ProgressReport, &report).await?;
        Ok(())
    }

    /// The runtime settings its team gave it, taken from its configuration at its first turn
    /// (before any configuration of its own changes them).
    fn team_settings(&mut self, ctx: &AgentContext) -> agent_core::Tuning {
        self.team_settings
            .get_or_insert_with(|| {
                let c = ctx.config();
                agent_core::Tuning {
                    max_retries: Some(c.max_retries),
                    timeout_ms: Some(c.timeout_ms),
                    model: c.model.clone(),
                    temperature: c.temperature,
                }
            })
            .clone()
    }

    /// Takes one message of the turn (`from_supervisor`: its supervisor sent it). Whether it
    /// was a command: then the loop does not run in this turn.
    async fn take(
        &mut self,
        ctx: &mut AgentContext,
        message: &Message,
        from_supervisor: bool,
    ) -> Result<bool, AgentError> {
        let now = ctx.now();
        match message.kind {
            MessageKind::OperatorCommand if from_supervisor || message.from == Address::System => {
                self.command(ctx, message).await?;
                return Ok(true);
            }
            MessageKind::OperatorCommand => {
                let reason = "an OODA agent takes commands only from system and its supervisor";
                let action = format!("{} from {}", message.kind, message.from);
                ctx.audit(AuditEvent::Denied { action, error: reason.into() }).await?;
                let outcome = CommandOutcome::Refused { reason: reason.into() };
                ctx.answer_command(&CommandOrigin::of(message), &outcome).await?;
            }
            MessageKind::TaskAssign
                if (from_supervisor || message.from == Address::System)
                    && message.content.get("command").is_some() =>
            {
                self.command(ctx, message).await?;
                return Ok(true);
            }
            MessageKind::TaskAssign if from_supervisor => {
                self.assignment(ctx, message, now).await?;
            }
            MessageKind::TaskAssign => {
                ctx.audit(AuditEvent::Denied {
                    action: format!("task_assign from {}", message.from),
                    error: "an OODA agent takes work only from its supervisor, and commands from system".into(),
                })
                .await?;
            }
            MessageKind::PeerHelpRequest => self.help_request(ctx, message, now).await?,
            MessageKind::PeerHelpResponse => self.help_response(ctx, message, now).await?,
            MessageKind::StatusQuery if from_supervisor => {
                let report =
                    StatusReport::Agent { status: ctx.status(), current: self.current_work() };
                ctx.reply(message, MessageKind::StatusReport, &report).await?;
            }
            _ => {}
        }
        Ok(false)
    }

    /// A `task_assign` from its supervisor: a subtask to work on, or a dismissal.
    async fn assignment(
        &mut self,
        ctx: &mut AgentContext,
        message: &Message,
        now: agent_state::Timestamp,
    ) -> Result<(), AgentError> {
        match ctx.read_payload::<Assignment>(message).await? {
            Some(Assignment::Subtask { subtask }) => {
                let line = format!("- took {}: {}", subtask.key(), subtask.step.description);
                // A redelivered assignment (working on it, or done) is not run again.
                if self.ooda.assign(subtask, now) {
                    ctx.append_own(&line).await?;
                }
            }
            Some(Assignment::Dismiss { reason }) => {
                ctx.append_own(&format!("- dismissed: {reason}")).await?;
            }
            _ => {}
        }
        Ok(())
    }

    /// A `peer_help_request`: what is said to it joins its inbox; it is answered at once with
    /// where it stands (or its knowledge, or a refusal to take over a subtask).
    async fn help_request(
        &mut self,
        ctx: &mut AgentContext,
        message: &Message,
        now: agent_state::Timestamp,
    ) -> Result<(), AgentError> {
        let Some(request) = ctx.read_payload::<HelpRequest>(message).await? else {
            return Ok(());
        };
        let answer = match request {
            HelpRequest::Speak { message: said } => {
                let mut m = OodaMessage::new(MessageRole::Agent, said, now);
                m.from = message.from.agent().cloned();
                m.to = Some(ctx.id().clone());
                self.ooda.receive_message(m);
                HelpResponse::Said {
                    reply: format!(
                        "noted; I am at iteration {} of: {}",
                        self.ooda.state.iteration, self.ooda.state.goal
                    ),
                }
            }
            HelpRequest::ShareKnowledge => HelpResponse::Knowledge {
                knowledge: serde_json::to_string(&self.ooda.state.knowledge).unwrap_or_default(),
            },
            HelpRequest::TakeOverTask { .. } => {
                HelpResponse::Refused { reason: "an OODA agent does not take over subtasks".into() }
            }
        };
        ctx.reply(message, MessageKind::PeerHelpResponse, &answer).await?;
        Ok(())
    }

    /// A `peer_help_response`: its text joins the inbox.
    async fn help_response(
        &mut self,
        ctx: &mut AgentContext,
        message: &Message,
        now: agent_state::Timestamp,
    ) -> Result<(), AgentError> {
        let text = match ctx.read_payload::<HelpResponse>(message).await? {
            Some(HelpResponse::Said { reply }) => reply,
            Some(HelpResponse::Knowledge { knowledge }) => knowledge,
            Some(other) => text_of(&serde_json::to_value(other).unwrap_or_default()),
            None => return Ok(()),
        };
        let mut m = OodaMessage::new(MessageRole::Agent, text, now);
        m.from = message.from.agent().cloned();
        m.to = Some(ctx.id().clone());
        self.ooda.receive_message(m);
        Ok(())
    }
}

/// The runtime settings of `config` (a hot-swapped genome's retries, turn limit, model and
/// temperature) applied to the agent; settings it leaves out are `team`'s, the ones its team
/// gave it.
fn tune(
    ctx: &mut AgentContext,
    config: &agent_state::ooda::OodaConfig,
    team: &agent_core::Tuning,
) -> Result<(), AgentError> {
    ctx.tune(&agent_core::Tuning {
        max_retries: config.max_retries.or(team.max_retries),
        timeout_ms: config.turn_timeout_ms.or(team.timeout_ms),
        model: config.model.clone().or_else(|| team.model.clone()),
        temperature: config.temperature.or(team.temperature),
    })
}

/// Answers the command from `origin`, if it is to be answered.
async fn answer(
    ctx: &mut AgentContext,
    origin: Option<&CommandOrigin>,
    outcome: CommandOutcome,
) -> Result<(), AgentError> {
    if let Some(origin) = origin {
        ctx.answer_command(origin, &outcome).await?;
    }
    Ok(())
}

fn text_of(content: &Value) -> String {
    match content {
        Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

#[async_trait]
impl AgentBehavior for OodaBehavior {
    fn takes_commands(&self) -> bool {
        true
    }

    fn responsibilities(&self) -> &'static str {
        "- Observe messages and the workspace\n\
         - Decide the next action toward the goal\n\
         - Act through the tools, inside the sandbox\n\
         - Reflect on the outcome and learn\n\
         - Modify itself only within its safety level, through validation"
    }

    async fn on_process(
        &mut self,
        ctx: &mut AgentContext,
        messages: &[Message],
        _board: &BoardSnapshot,
    ) -> Result<(), AgentError> {
        let team = self.team_settings(ctx);
        tune(ctx, self.ooda.config(), &team)?;
        let supervisor = ctx.config().supervisor.clone();
        self.under_lead = supervisor.is_some();
        let mut commanded = false;
        for message in messages {
            let from_supervisor =
                supervisor.as_ref().is_some_and(|s| message.from.agent() == Some(s));
            commanded |= self.take(ctx, message, from_supervisor).await?;
        }
        if commanded || !self.has_work() {
            return Ok(());
        }
        let was_stopped = self.ooda.stop.is_some();
        let end = self.ooda.step(ctx).await;
        // A version applied in this step (a hot-swap) sets the runtime for the next turn.
        tune(ctx, self.ooda.config(), &team)?;
        let end = end?;
        if let (false, Some(stop)) = (was_stopped, &end.stop) {
            ctx.append_own(&format!("- stopped: {stop}")).await?;
            self.report(ctx, stop).await?;
        }
        Ok(())
    }

    async fn on_initialize(&mut self, ctx: &mut AgentContext) -> Result<(), AgentError> {
        self.under_lead = ctx.config().supervisor.is_some();
        Ok(())
    }

    fn wants_tick(&self) -> bool {
        self.has_work()
    }

    fn snapshot(&self) -> Value {
        self.ooda.snapshot()
    }

    fn restore(&mut self, state: Value) -> Result<(), AgentError> {
        let now = self.ooda.state.last_updated;
        self.ooda.restore(state, now).map_err(AgentError::from)
    }

    fn current_work(&self) -> Option<String> {
        if self.ooda.stop.is_some() && self.ooda.pending.is_none() {
            return None;
        }
        let goal = match &self.ooda.task {
            Some(t) => t.step.description.clone(),
            None => self.ooda.state.goal.clone(),
        };
        Some(format!(
            "iteration {} (v{}): {goal}",
            self.ooda.state.iteration, self.ooda.state.state_version
        ))
    }

    fn waiting_on(&self, me: &agent_state::AgentId) -> Vec<agent_state::WaitEdge> {
        // A change waiting for a human's signature: a person may take a while, which the run's
        // guards do not count as idle.
        let Some(pending) = self.ooda.pending.as_ref().filter(|p| p.decision.is_some()) else {
            return Vec::new();
        };
        let Some(human) =
            self.ooda.approvers.first().and_then(|h| agent_state::AgentId::human(h).ok())
        else {
            return Vec::new();
        };
        vec![agent_state::WaitEdge {
            waiter: me.clone(),
            on: human,
            what: format!(
                "a human's signature ({}) on its change to version {}",
                self.ooda.approvers.join(" or "),
                pending.version
            ),
            task: self.ooda.task.as_ref().map(|t| t.task_id.clone()),
        }]
    }

    fn open_tasks(&self) -> Vec<String> {
        self.ooda.task.iter().map(|t| t.task_id.clone()).collect()
    }
}
