//! The loop: [`Ooda`] holds an agent's configuration, state, history and versions, and runs
//! its phases through an [`OodaAgent`] on the agent's [`AgentContext`].

use std::sync::Arc;

use agent_core::{AgentContext, AgentError, AuditEvent, NextAction, ToolCall, ToolCallRecord};
use agent_state::ooda::{
    MessageRole, ModificationError, OodaConfig, OodaEvent, OodaEventKind, OodaMessage,
    OodaSchemaError, OodaState, Phase, StopReason,
};
use agent_state::{
    Action, AgentId, GuardSettings, PlanStep, StepTarget, Subtask, Timestamp, shorten_bytes,
};
use async_trait::async_trait;
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};
use thiserror::Error;
use tokio::sync::broadcast;

use crate::modify::{Pending, VersionRecord};

pub use agent_state::ooda::{MODIFY_SELF, SEND_MESSAGE};

/// How many of its past actions (and messages received) an agent's decide sees.
pub const MAX_HISTORY: usize = 64;

/// How many events a slow subscriber may fall behind before it is told it lagged.
const EVENT_BUFFER: usize = 1024;

/// Longest output kept in memory and history per action.
const MAX_OUTPUT: usize = 4096;

/// What decide chose.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "choice", rename_all = "snake_case")]
pub enum Choice {
    /// Call one of its tools.
    Act(ToolCall),
    /// Modify itself: the request as decide gave it, checked when it is acted on.
    Modify(Value),
    /// Send a message to another agent (through the outbox).
    Send {
        /// The receiver.
        to: AgentId,
        /// What to say.
        content: String,
    },
    /// Stop: the goal is reached, or cannot be.
    Stop {
        /// Whether it was reached.
        success: bool,
        /// In words.
        summary: String,
    },
}

impl Choice {
    /// The call it makes, as the history records it (`None` for a stop).
    pub fn call(&self) -> Option<ToolCall> {
        match self {
            Choice::Act(call) => Some(call.clone()),
            Choice::Modify(request) => {
                Some(ToolCall { tool: MODIFY_SELF.into(), args: request.clone() })
            }
            Choice::Send { to, content } => Some(ToolCall {
                tool: SEND_MESSAGE.into(),
                args: json!({ "to": to, "content": content }),
            }),
            Choice::Stop { .. } => None,
        }
    }
}

/// What an action came to.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Outcome {
    /// Whether it succeeded.
    pub success: bool,
    /// Its output, or the error.
    pub output: String,
    /// The call, when it was a tool call (or a `modify_self` or `send_message`).
    pub call: Option<ToolCall>,
}

/// One phase's result.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct AgentStep {
    /// Which phase (or `modify_self`).
    pub step_type: OodaEventKind,
    /// The state after it.
    pub state: OodaState,
    /// What it produced: what was observed, the choice, the outcome, the lesson.
    pub result: Value,
    /// Whether it succeeded.
    pub success: bool,
    /// The error, when it did not.
    pub error: Option<String>,
}

/// What one call of [`Ooda::step`] did.
#[derive(Clone, Debug, PartialEq)]
pub struct StepEnd {
    /// The phases run, in order.
    pub steps: Vec<AgentStep>,
    /// Set when the loop stopped (now or before).
    pub stop: Option<StopReason>,
    /// Whether it waits (for a human's signature on a change): nothing ran.
    pub waiting: bool,
}

/// An OODA loop could not go on.
#[derive(Debug, Error)]
pub enum OodaError {
    /// The runtime failed (bus, store, reasoner, tool backend): transient ones are retried by
    /// the runtime.
    #[error(transparent)]
    Agent(#[from] AgentError),
    /// The configuration or a state document is not valid.
    #[error(transparent)]
    Schema(#[from] OodaSchemaError),
    /// A configuration gives the agent more than its supervisor holds, or turns off what it
    /// may not.
    #[error("the OODA agent's configuration is refused: {0}")]
    Config(String),
    /// A self-modification or rollback was refused; nothing changed.
    #[error(transparent)]
    Modification(#[from] ModificationError),
    /// A rollback to a version the agent never had, or that is its current one.
    #[error(
        "cannot roll back to version {asked}: the agent is at version {current}; roll back to a version from 1 to {}",
        current.saturating_sub(1)
    )]
    NoSuchVersion {
        /// The version asked for.
        asked: u64,
        /// The current version.
        current: u64,
    },
    /// Copying the workspace, running the test command or writing a file failed.
    #[error("validation could not run: {0}")]
    Validation(String),
    /// The agent's `test_command` failed on the copy of the workspace: before the change (the
    /// work is broken already: no change is tried on it), or after it (the change is dropped:
    /// rolled back before it reached the workspace).
    #[error(
        "the tests ({command}) fail {}: {output}",
        if *after { "after the change, so it was rolled back" } else { "before the change, so it was not tried" }
    )]
    TestsFailed {
        /// The command.
        command: String,
        /// Whether they failed after the change (else before).
        after: bool,
        /// The end of their output.
        output: String,
    },
}

impl From<OodaError> for AgentError {
    fn from(e: OodaError) -> Self {
        match e {
            OodaError::Agent(e) => e,
            other => AgentError::NotAllowed(other.to_string()),
        }
    }
}

/// What the phases of an [`OodaAgent`] see besides the state.
pub struct View<'a> {
    /// The agent's configuration.
    pub config: &'a OodaConfig,
    /// Its past actions and messages received, oldest first.
    pub history: &'a [ToolCallRecord],
    /// The task it works on, when its lead gave it one.
    pub task: Option<&'a Subtask>,
}

/// The four phases of an OODA agent (docs/concepts.md#ooda-agents). Each gets the state and returns
/// a new one; the defaults make the agent a reasoner-driven loop over its tools ([`ReasonerLoop`]).
#[async_trait]
pub trait OodaAgent: Send + Sync + 'static {
    /// Observe: by default, processes the inbox (its messages join memory).
    async fn observe(
        &self,
        ctx: &mut AgentContext,
        _view: &View<'_>,
        state: OodaState,
    ) -> Result<(OodaState, Value), OodaError> {
        let (state, taken) = state.taking_inbox(ctx.now());
        let from: Vec<String> =
            taken.iter().map(|m| m.from.as_ref().map_or("?", |f| f.as_str()).to_owned()).collect();
        Ok((state, json!({ "received": taken.len(), "from": from })))
    }

    /// Decide: by default, the agent's reasoner chooses the next call over its goal and
    /// history, among its tools, `send_message`, and (when enabled) `modify_self`; a finish
    /// stops the loop.
    async fn decide(
        &self,
        ctx: &mut AgentContext,
        view: &View<'_>,
        state: OodaState,
    ) -> Result<(OodaState, Choice), OodaError> {
        let mut tools = view.config.tools.clone();
        tools.push(SEND_MESSAGE.to_owned());
        if view.config.self_modification_enabled {
            tools.push(MODIFY_SELF.to_owned());
        }
        let subtask = objective(ctx.id(), view, &state);
        let next = ctx
            .reasoner()
            .next_action(ctx.persona_with(&tools, &[]), &subtask, view.history)
            .await
            .map_err(AgentError::from)?;
        let choice = match next {
            NextAction::Finish { success, summary } => Choice::Stop { success, summary },
            NextAction::Call(call) if call.tool == MODIFY_SELF => Choice::Modify(call.args),
            NextAction::Call(call) if call.tool == SEND_MESSAGE => {
                match (call.args.get("to").and_then(Value::as_str), call.args.get("content")) {
                    (Some(to), Some(Value::String(content))) => {
                        Choice::Send { to: AgentId::new(to), content: content.clone() }
                    }
                    _ => Choice::Act(call), // refused as a tool it does not hold, with the reason
                }
            }
            NextAction::Call(call) => Choice::Act(call),
        };
        let next_action = match &choice {
            Choice::Act(call) => Some(call.tool.clone()),
            Choice::Modify(_) => Some(MODIFY_SELF.to_owned()),
            Choice::Send { .. } => Some(SEND_MESSAGE.to_owned()),
            Choice::Stop { .. } => None,
        };
        Ok((OodaState { next_action, ..state }, choice))
    }

    /// Act: by default, calls the tool through the runtime's journal (never repeated across a
    /// crash; `shell` runs in the workspace sandbox). A tool the agent does not hold is refused
    /// and audited; a failed call is an outcome, not an error.
    async fn act(
        &self,
        ctx: &mut AgentContext,
        view: &View<'_>,
        state: OodaState,
        call: &ToolCall,
    ) -> Result<(OodaState, Outcome), OodaError> {
        if !view.config.tools.contains(&call.tool) {
            let error = format!(
                "`{}` is not one of this agent's tools (it has: {})",
                call.tool,
                view.config.tools.join(", ")
            );
            ctx.audit(AuditEvent::Denied {
                action: format!("tool {}", call.tool),
                error: error.clone(),
            })
            .await?;
            return Ok((
                state,
                Outcome { success: false, output: error, call: Some(call.clone()) },
            ));
        }
        let key =
            format!("ooda/{}/{}/{}", ctx.id(), state.iteration, crate::modify::hash_json(call));
        let outcome = match ctx.call_tool_once(&key, call).await {
            Ok(out) => {
                Outcome { success: out.success, output: out.output, call: Some(call.clone()) }
            }
            Err(
                e @ (AgentError::Tool(_)
                | AgentError::ToolFailed { .. }
                | AgentError::NotAllowed(_)),
            ) => Outcome { success: false, output: e.to_string(), call: Some(call.clone()) },
            Err(e) => return Err(e.into()),
        };
        Ok((state, outcome))
    }

    /// Reflect: by default, the outcome joins memory, and knowledge keeps the last outcome and
    /// how many actions failed.
    async fn reflect(
        &self,
        ctx: &mut AgentContext,
        _view: &View<'_>,
        state: OodaState,
        outcome: &Outcome,
    ) -> Result<(OodaState, Value), OodaError> {
        let now = ctx.now();
        let mut message =
            OodaMessage::new(MessageRole::Tool, shorten_bytes(&outcome.output, MAX_OUTPUT), now);
        if let Some(call) = &outcome.call {
            message.metadata.insert("tool".into(), Value::String(call.tool.clone()));
        }
        message.metadata.insert("success".into(), Value::Bool(outcome.success));
        let failures = state.knowledge.get("failures").and_then(Value::as_u64).unwrap_or(0)
            + u64::from(!outcome.success);
        let state = state
            .remembering(message)
            .learning("last_outcome", json!({"success": outcome.success}), now)
            .learning("failures", json!(failures), now);
        Ok((state, json!({ "success": outcome.success, "failures": failures })))
    }
}

/// The default OODA agent: every phase as [`OodaAgent`]'s defaults say.
#[derive(Clone, Copy, Debug, Default)]
pub struct ReasonerLoop;

impl OodaAgent for ReasonerLoop {}

/// The objective decide works on: the lead's step when it has one, else the agent's goal (with
/// its prompt), as a goal step (no tool named: the reasoner chooses).
fn objective(me: &AgentId, view: &View<'_>, state: &OodaState) -> Subtask {
    if let Some(task) = view.task {
        let mut task = task.clone();
        if !view.config.prompt.is_empty() {
            task.step.description = format!("{}\n\n{}", task.step.description, view.config.prompt);
        }
        return task;
    }
    let mut description = state.goal.clone();
    if !view.config.prompt.is_empty() {
        description = format!("{description}\n\n{}", view.config.prompt);
    }
    Subtask {
        task_id: format!("ooda-{me}"),
        step: PlanStep::goal(
            format!("iteration-{}", state.iteration + 1),
            description,
            StepTarget::Any,
        ),
        assignee: me.clone(),
        attempt: 1,
    }
}

/// An OODA agent's loop: its configuration, state, history, recorded versions and any change
/// in progress. [`snapshot`](Ooda::snapshot) and [`restore`](Ooda::restore) keep it across a
/// crash (an [`OodaBehavior`](crate::OodaBehavior) does this through the runtime).
pub struct Ooda {
    pub(crate) config: OodaConfig,
    pub(crate) state: OodaState,
    pub(crate) agent: Arc<dyn OodaAgent>,
    pub(crate) history: Vec<ToolCallRecord>,
    pub(crate) versions: Vec<VersionRecord>,
    /// A change decided (its intent recorded) and not applied yet, or waiting for a human.
    pub(crate) pending: Option<Pending>,
    pub(crate) stop: Option<StopReason>,
    /// The tools its supervisor holds: no change may give it others.
    pub(crate) ceiling: Vec<String>,
    /// The humans who may sign a level-4 change.
    pub(crate) approvers: Vec<String>,
    /// The settings its team file (or supervisor) gave it that bound its own authority: kept
    /// whatever a change, a rollback or a restored snapshot says.
    pub(crate) supervised: OodaConfig,
    /// The lead's subtask, when it works as an executor.
    pub(crate) task: Option<Subtask>,
    /// When it took the lead's subtask: the subtask limit counts from there.
    pub(crate) task_started: Option<Timestamp>,
    /// The team's guards: how many identical calls in a row are a loop.
    pub(crate) guards: GuardSettings,
    /// The subtasks it finished (`task/step`): a redelivered assignment of one is not run again.
    pub(crate) done: Vec<String>,
    events: broadcast::Sender<OodaEvent>,
}

/// What [`Ooda::snapshot`] saves.
#[derive(Serialize, Deserialize)]
struct Saved {
    config: OodaConfig,
    state: OodaState,
    #[serde(default)]
    history: Vec<ToolCallRecord>,
    #[serde(default)]
    versions: Vec<VersionRecord>,
    #[serde(default)]
    pending: Option<Pending>,
    #[serde(default)]
    stop: Option<StopReason>,
    #[serde(default)]
    task: Option<Subtask>,
    #[serde(default)]
    task_started: Option<Timestamp>,
    #[serde(default)]
    done: Vec<String>,
}

impl Ooda {
    /// A loop for agent `id` with `config`, its phases by `agent`, under a supervisor holding
    /// the tools `ceiling`. Refused: an invalid configuration, a tool its supervisor does not
    /// hold, `sandbox_enabled = false` (actions always run in the run's sandbox).
    pub fn new(
        id: AgentId,
        config: OodaConfig,
        agent: impl OodaAgent,
        ceiling: &[String],
        now: Timestamp,
    ) -> Result<Self, OodaError> {
        check_config(&config, ceiling)?;
        let state = OodaState::new(id, &config, now);
        let supervised = config.clone();
        let (events, _) = broadcast::channel(EVENT_BUFFER);
        Ok(Self {
            config,
            state,
            agent: Arc::new(agent),
            history: Vec::new(),
            versions: Vec::new(),
            pending: None,
            stop: None,
            ceiling: ceiling.to_vec(),
            approvers: Vec::new(),
            supervised,
            task: None,
            task_started: None,
            guards: GuardSettings::default(),
            done: Vec::new(),
            events,
        })
    }

    /// The humans any one of whom may sign a level-4 change (the team's `[approvals]
    /// humans`); without any, a level-4 change is refused.
    #[must_use]
    pub fn with_approvers(mut self, humans: Vec<String>) -> Self {
        self.approvers = humans;
        self
    }

    /// The team's guards (`[guards]`), which its decide/act loop runs inside as every working
    /// agent's loop does: a call repeating itself `repeat_limit` times in a row is not made and
    /// stops the loop ([`StopReason::Stuck`]). The defaults without it.
    #[must_use]
    pub fn with_guards(mut self, guards: GuardSettings) -> Self {
        self.guards = guards;
        self
    }

    /// The events of every phase from now on, as they happen. A subscriber that falls more
    /// than 1 024 events behind is told how many it missed; the audit keeps them all.
    pub fn subscribe(&self) -> broadcast::Receiver<OodaEvent> {
        self.events.subscribe()
    }

    /// The current state.
    pub fn state(&self) -> &OodaState {
        &self.state
    }

    /// The current configuration.
    pub fn config(&self) -> &OodaConfig {
        &self.config
    }

    /// Every applied change and rollback, oldest first.
    pub fn versions(&self) -> &[VersionRecord] {
        &self.versions
    }

    /// The change in progress, if any.
    pub fn pending(&self) -> Option<&Pending> {
        self.pending.as_ref()
    }

    /// Why the loop stopped, once it has.
    pub fn stopped(&self) -> Option<&StopReason> {
        self.stop.as_ref()
    }

    /// Whether there is something to do at the next turn: a change in progress, or a loop
    /// not stopped.
    pub fn wants_turn(&self) -> bool {
        self.pending.is_some() || self.stop.is_none()
    }

    /// Gives the loop a new objective (a lead's subtask): it starts again from iteration 0.
    /// `false` (nothing changes) for the subtask it works on or finished already: a redelivered
    /// assignment.
    pub(crate) fn assign(&mut self, task: Subtask, now: Timestamp) -> bool {
        let key = task.key();
        if self.done.contains(&key) || self.task.as_ref().is_some_and(|t| t.key() == key) {
            return false;
        }
        self.task = Some(task);
        self.task_started = Some(now);
        self.stop = None;
        self.history.clear();
        self.state =
            OodaState { iteration: 0, current_step: None, next_action: None, ..self.state.clone() };
        self.state.last_updated = now;
        true
    }

    /// A message for the next observe: it waits in the inbox.
    pub fn receive_message(&mut self, message: OodaMessage) {
        self.state = self.state.receiving(message);
    }

    /// Saves everything but the event stream.
    pub fn snapshot(&self) -> Value {
        let saved = Saved {
            config: self.config.clone(),
            state: self.state.clone(),
            history: self.history.clone(),
            versions: self.versions.clone(),
            pending: self.pending.clone(),
            stop: self.stop.clone(),
            task: self.task.clone(),
            task_started: self.task_started,
            done: self.done.clone(),
        };
        serde_json::to_value(saved).unwrap_or(Value::Null)
    }

    /// Takes back what [`snapshot`](Self::snapshot) saved (migrating a version-1 state);
    /// `Null` leaves it as it is.
    pub fn restore(&mut self, saved: Value, now: Timestamp) -> Result<(), OodaError> {
        if saved.is_null() {
            return Ok(());
        }
        let mut saved = saved;
        let state = saved.get_mut("state").map(Value::take).unwrap_or(Value::Null);
        let config = saved.get_mut("config").map(Value::take).unwrap_or(Value::Null);
        let state = OodaState::from_json(state, now)?;
        let config = OodaConfig::from_json(config)?;
        if let Value::Object(map) = &mut saved {
            map.insert("state".into(), serde_json::to_value(&state).unwrap_or_default());
            map.insert("config".into(), serde_json::to_value(&config).unwrap_or_default());
        }
        let saved: Saved = serde_json::from_value(saved).map_err(|e| {
            OodaError::Schema(OodaSchemaError::Invalid { what: "state", reason: e.to_string() })
        })?;
        self.config = self.supervise(saved.config);
        self.state = saved.state;
        self.history = saved.history;
        self.versions = saved.versions;
        self.pending = saved.pending.map(|mut p| {
            p.applied.config = self.supervise(p.applied.config);
            p
        });
        self.stop = saved.stop;
        self.task = saved.task;
        self.task_started = saved.task_started;
        self.done = saved.done;
        Ok(())
    }

    /// `config` with the settings only its team file or supervisor sets (its safety and
    /// self-modification levels, whether it may modify itself, its sandbox, its test command)
    /// as they were given: a saved or rolled-back configuration cannot carry others.
    pub(crate) fn supervise(&self, config: OodaConfig) -> OodaConfig {
        let given = &self.supervised;
        OodaConfig {
            safety_level: given.safety_level,
            self_modification_enabled: given.self_modification_enabled,
            self_modification_level: given.self_modification_level,
            sandbox_enabled: given.sandbox_enabled,
            test_command: given.test_command.clone(),
            ..config
        }
    }

    /// Emits an event: audited, then streamed.
    pub(crate) async fn emit(
        &self,
        ctx: &AgentContext,
        kind: OodaEventKind,
        data: Value,
    ) -> Result<(), OodaError> {
        let event = OodaEvent {
            kind,
            agent_id: self.state.agent_id.clone(),
            iteration: self.state.iteration,
            state_version: self.state.state_version,
            data,
            at: ctx.now(),
        };
        ctx.audit(AuditEvent::Ooda { ooda: event.clone() }).await?;
        let _ = self.events.send(event);
        Ok(())
    }

    fn record(&mut self, call: ToolCall, success: bool, output: &str, event: bool) {
        self.history.push(ToolCallRecord {
            call,
            success,
            output: shorten_bytes(output, MAX_OUTPUT),
            event,
        });
        let excess = self.history.len().saturating_sub(MAX_HISTORY);
        self.history.drain(..excess);
    }

    /// One full loop: observe, decide, act, reflect. A change in progress is
    /// dealt with first, in a turn of its own (applied, or still waiting for a human: then
    /// nothing else runs). Past `max_iterations` the loop stops with
    /// [`StopReason::MaxIterations`]; after a stop, `step` does nothing and says why.
    pub async fn step(&mut self, ctx: &mut AgentContext) -> Result<StepEnd, OodaError> {
        if let Some(stop) = &self.stop {
            return Ok(StepEnd { steps: Vec::new(), stop: Some(stop.clone()), waiting: false });
        }
        if self.pending.is_some() {
            return self.settle_pending(ctx).await;
        }
        if self.state.iteration >= u64::from(self.config.max_iterations) {
            let stop = StopReason::MaxIterations { limit: self.config.max_iterations };
            self.stop = Some(stop.clone());
            return Ok(StepEnd { steps: Vec::new(), stop: Some(stop), waiting: false });
        }
        if let Some(stop) = self.out_of_time(ctx).await? {
            return Ok(StepEnd { steps: Vec::new(), stop: Some(stop), waiting: false });
        }
        let mut steps = Vec::with_capacity(4);
        steps.push(self.observe_phase(ctx).await?);
        let (choice, chosen) = self.decide_phase(ctx).await?;
        steps.push(self.step_record(OodaEventKind::Decide, chosen.clone(), true, None));
        if let Some(stop) = self.repeats(ctx, &choice).await? {
            return Ok(StepEnd { steps, stop: Some(stop), waiting: false });
        }

        // Act, unless decide stopped the loop.
        let outcome = match choice {
            Choice::Stop { success, summary } => {
                let stop = if success {
                    StopReason::Finished { summary }
                } else {
                    StopReason::Failed { phase: Phase::Decide, error: summary }
                };
                self.stop = Some(stop.clone());
                self.state = self.state.iterated(ctx.now());
                self.route_outbox(ctx).await?;
                return Ok(StepEnd { steps, stop: Some(stop), waiting: false });
            }
            Choice::Act(call) => self.act_call(ctx, chosen, &call).await?,
            Choice::Send { to, content } => self.act_send(ctx, chosen, to, content).await?,
            Choice::Modify(request) => {
                self.begin_act(ctx, chosen).await?;
                let call = ToolCall { tool: MODIFY_SELF.into(), args: request.clone() };
                let (success, output, step) = self.request_change(ctx, request).await?;
                steps.push(step);
                Outcome { success, output, call: Some(call) }
            }
        };
        if let Some(call) = outcome.call.clone() {
            self.record(call, outcome.success, &outcome.output, false);
        }
        steps.push(self.step_record(
            OodaEventKind::Act,
            serde_json::to_value(&outcome).unwrap_or(Value::Null),
            outcome.success,
            (!outcome.success).then(|| outcome.output.clone()),
        ));
        steps.push(self.reflect_phase(ctx, &outcome).await?);
        self.route_outbox(ctx).await?;
        Ok(StepEnd { steps, stop: None, waiting: false })
    }

    /// The observe phase. When it took the inbox, the messages join the history (as
    /// `message` calls) so that decide sees them.
    async fn observe_phase(&mut self, ctx: &mut AgentContext) -> Result<AgentStep, OodaError> {
        self.state = self.state.entering(Phase::Observe, ctx.now());
        self.emit(ctx, OodaEventKind::Observe, Value::Null).await?;
        let inbox = self.state.inbox.clone();
        let (agent, config, history, task) = self.parts();
        let view = View { config: &config, history: &history, task: task.as_ref() };
        let result = agent.observe(ctx, &view, self.state.clone()).await;
        let (state, observed) = self.check(ctx, Phase::Observe, result).await?;
        if state.inbox.is_empty() {
            for message in inbox {
                let from = message.from.as_ref().map_or("?", |f| f.as_str()).to_owned();
                let call = ToolCall { tool: "message".into(), args: json!({ "from": from }) };
                self.record(call, true, &message.content, true);
            }
        }
        self.state = state;
        Ok(self.step_record(OodaEventKind::Observe, observed, true, None))
    }

    /// The decide phase: the choice, and the choice as its step records it.
    async fn decide_phase(&mut self, ctx: &mut AgentContext) -> Result<(Choice, Value), OodaError> {
        self.state = self.state.entering(Phase::Decide, ctx.now());
        self.emit(ctx, OodaEventKind::Decide, Value::Null).await?;
        let (agent, config, history, task) = self.parts();
        let view = View { config: &config, history: &history, task: task.as_ref() };
        let result = agent.decide(ctx, &view, self.state.clone()).await;
        let (state, choice) = self.check(ctx, Phase::Decide, result).await?;
        self.state = state;
        let chosen = serde_json::to_value(&choice).unwrap_or(Value::Null);
        Ok((choice, chosen))
    }

    /// The act phase for a tool call (`chosen`: the choice, which its event names).
    async fn act_call(
        &mut self,
        ctx: &mut AgentContext,
        chosen: Value,
        call: &ToolCall,
    ) -> Result<Outcome, OodaError> {
        self.begin_act(ctx, chosen).await?;
        let (agent, config, history, task) = self.parts();
        let view = View { config: &config, history: &history, task: task.as_ref() };
        let result = agent.act(ctx, &view, self.state.clone(), call).await;
        let (state, outcome) = self.check(ctx, Phase::Act, result).await?;
        self.state = state;
        Ok(outcome)
    }

    /// The act phase for a message: it joins the outbox, routed at the end of the step.
    async fn act_send(
        &mut self,
        ctx: &AgentContext,
        chosen: Value,
        to: AgentId,
        content: String,
    ) -> Result<Outcome, OodaError> {
        self.begin_act(ctx, chosen).await?;
        self.state = self.state.sending(to.clone(), content.clone(), ctx.now());
        let call =
            ToolCall { tool: SEND_MESSAGE.into(), args: json!({ "to": to, "content": content }) };
        Ok(Outcome { success: true, output: format!("message to {to} queued"), call: Some(call) })
    }

    /// The reflect phase (a capability of its own: an agent configured without it stops
    /// here), which ends the iteration.
    async fn reflect_phase(
        &mut self,
        ctx: &mut AgentContext,
        outcome: &Outcome,
    ) -> Result<AgentStep, OodaError> {
        ctx.require(Action::Reflect, "(reflect on the act)").await?;
        self.state = self.state.entering(Phase::Reflect, ctx.now());
        self.emit(ctx, OodaEventKind::Reflect, json!({ "success": outcome.success })).await?;
        let (agent, config, history, task) = self.parts();
        let view = View { config: &config, history: &history, task: task.as_ref() };
        let result = agent.reflect(ctx, &view, self.state.clone(), outcome).await;
        let (state, lesson) = self.check(ctx, Phase::Reflect, result).await?;
        self.state = state.iterated(ctx.now());
        Ok(self.step_record(OodaEventKind::Reflect, lesson, true, None))
    }

    /// Runs up to `max_iterations` loops, fewer when the loop stops or waits
    /// for a human; returns every phase run and why it ended (`None`: it waits, or the
    /// iterations asked for ran without reaching `max_iterations`).
    pub async fn run(
        &mut self,
        ctx: &mut AgentContext,
        max_iterations: u32,
    ) -> Result<StepEnd, OodaError> {
        let mut all = Vec::new();
        for _ in 0..max_iterations {
            let end = self.step(ctx).await?;
            all.extend(end.steps);
            if end.stop.is_some() || end.waiting {
                return Ok(StepEnd { steps: all, stop: end.stop, waiting: end.waiting });
            }
        }
        Ok(StepEnd { steps: all, stop: self.stop.clone(), waiting: false })
    }

    /// The loop rule every working agent's loop runs inside
    /// ([`work_guard::repeated_call`](agent_core::work_guard::repeated_call)): a choice that
    /// would repeat the calls made since anything new arrived `repeat_limit` times in a row is
    /// not acted on; the loop stops with [`StopReason::Stuck`], audited.
    async fn repeats(
        &mut self,
        ctx: &AgentContext,
        choice: &Choice,
    ) -> Result<Option<StopReason>, OodaError> {
        let Some(call) = choice.call() else { return Ok(None) };
        let task = self.task.as_ref();
        let found =
            agent_core::work_guard::repeated_call(ctx, task, &self.history, &call, &self.guards)
                .await?;
        Ok(found.map(|failure| self.stuck(ctx, failure)))
    }

    /// The subtask limit every working agent's loop runs inside
    /// ([`work_guard::out_of_time`](agent_core::work_guard::out_of_time), `[timeouts]
    /// subtask_ms`): a lead's subtask worked on for that long stops the loop with
    /// [`StopReason::Stuck`], audited.
    async fn out_of_time(&mut self, ctx: &AgentContext) -> Result<Option<StopReason>, OodaError> {
        let (Some(task), Some(started)) = (&self.task, self.task_started) else { return Ok(None) };
        let found = agent_core::work_guard::out_of_time(ctx, task, started).await?;
        Ok(found.map(|failure| self.stuck(ctx, failure)))
    }

    /// Stops the loop for a guard's `failure`.
    fn stuck(&mut self, ctx: &AgentContext, failure: agent_state::TaskFailure) -> StopReason {
        let stop = StopReason::Stuck { failure };
        self.stop = Some(stop.clone());
        self.state = self.state.iterated(ctx.now());
        stop
    }

    /// The act phase begins: its event names the action.
    async fn begin_act(&mut self, ctx: &AgentContext, chosen: Value) -> Result<(), OodaError> {
        self.state = self.state.entering(Phase::Act, ctx.now());
        self.emit(ctx, OodaEventKind::Act, json!({ "action": chosen })).await
    }

    /// What a phase needs, cloned so that the phase may borrow the context mutably.
    fn parts(&self) -> (Arc<dyn OodaAgent>, OodaConfig, Vec<ToolCallRecord>, Option<Subtask>) {
        (self.agent.clone(), self.config.clone(), self.history.clone(), self.task.clone())
    }

    /// A phase's result: a failure is emitted as an `error` event and fails the step (the
    /// runtime retries the turn).
    async fn check<T>(
        &mut self,
        ctx: &AgentContext,
        phase: Phase,
        result: Result<T, OodaError>,
    ) -> Result<T, OodaError> {
        if let Err(e) = &result {
            self.emit(ctx, OodaEventKind::Error, json!({ "phase": phase, "error": e.to_string() }))
                .await?;
        }
        result
    }

    pub(crate) fn step_record(
        &self,
        step_type: OodaEventKind,
        result: Value,
        success: bool,
        error: Option<String>,
    ) -> AgentStep {
        AgentStep { step_type, state: self.state.clone(), result, success, error }
    }

    /// Sends the outbox's messages through the bus (as `speak_to_agent`-style requests), as one
    /// batch (`send_all`: one commit on a durable bus, and none sent if one is refused).
    pub(crate) async fn route_outbox(&mut self, ctx: &mut AgentContext) -> Result<(), OodaError> {
        let (state, out) = self.state.taking_outbox();
        let requests: Vec<_> = out
            .into_iter()
            .filter_map(|message| {
                let request = agent_core::protocol::HelpRequest::Speak { message: message.content };
                Some((message.to?, agent_state::MessageKind::PeerHelpRequest, request))
            })
            .collect();
        ctx.send_all(requests).await?;
        self.state = state;
        Ok(())
    }
}

/// Checks an OODA agent's configuration as [`Ooda::new`] does: valid, no tool beyond
/// `ceiling` (what its supervisor grants it), the sandbox on.
pub fn check_config(config: &OodaConfig, ceiling: &[String]) -> Result<(), OodaError> {
    config.validate()?;
    check_ceiling(config, ceiling)
}

/// Refuses a configuration with a tool the supervisor does not hold, or without the sandbox.
pub(crate) fn check_ceiling(config: &OodaConfig, ceiling: &[String]) -> Result<(), OodaError> {
    if let Some(tool) = config.tools.iter().find(|t| !ceiling.contains(t)) {
        return Err(OodaError::Config(format!(
            "the tool `{tool}` is not one its supervisor holds (it holds: {})",
            ceiling.join(", ")
        )));
    }
    if !config.sandbox_enabled {
        return Err(OodaError::Config(
            "`sandbox_enabled = false`: an OODA agent's actions always run in the run's sandbox \
             (the run's `--unsandboxed` decides that, not the agent)"
                .into(),
        ));
    }
    Ok(())
}
