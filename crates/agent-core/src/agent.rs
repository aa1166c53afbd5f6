//! One agent: its context (the handles and state every layer uses), the contract the layers
//! implement, and the runtime that drives it through initialize, heartbeats and shutdown.

use std::borrow::Cow;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use agent_state::{
    Action, Actor, Address, AgentConfig, AgentId, AgentMetrics, AgentStatus, BoardId,
    BoardSnapshot, CommandOrigin, CommandOutcome, Decision, DecisionId, ErrorClass, Lifecycle,
    Message, MessageId, MessageKind, SignError, SignOutcome, Subtask, Timestamp,
};
use async_trait::async_trait;
use governance::{DecideError, Governance};
use message_bus::MessageBus;
use serde::Serialize;
use serde::de::DeserializeOwned;
use tracing::Instrument as _;
use whiteboard::{BoardError, Whiteboard};

use crate::audit::{AuditAnchor, AuditEntry, AuditEvent, AuditLog, AuditRecord};
use crate::clock::Clock;
use crate::error::AgentError;
use crate::protocol::{ErrorReport, HeartbeatAck};
use crate::reasoner::{Persona, Reasoner, ToolCall};
use crate::state::{AgentRecord, StateStore};
use crate::toolpath::{Caller, ToolPath};
use crate::tools::{ToolContext, ToolOutput, ToolRegistry};

/// The reason of the move initializing → idle.
const INITIALIZED: &str = "initialization complete";

/// Most messages one heartbeat takes from the inbox (messages are handled in batches).
pub const MAX_MESSAGES_PER_HEARTBEAT: usize = 256;

/// How many heartbeat turns of one agent may panic in a row: the first ones reload it from its
/// stored state and try again; this one fails it ([`AuditEvent::AgentPanicked`]).
pub const MAX_PANICS: u32 = 3;

/// How often a heartbeat past its timeout checks whether its side-effecting call has ended.
const EFFECT_POLL: Duration = Duration::from_millis(10);

/// The shared services an agent runs on.
#[derive(Clone)]
pub struct AgentDeps {
    /// The message bus.
    pub bus: Arc<dyn MessageBus>,
    /// The whiteboards.
    pub boards: Arc<dyn Whiteboard>,
    /// The governance engine.
    pub governance: Arc<dyn Governance>,
    /// The audit log.
    pub audit: Arc<dyn AuditLog>,
    /// The reasoner.
    pub reasoner: Arc<dyn Reasoner>,
    /// The tools this agent may call.
    pub tools: Arc<ToolRegistry>,
    /// The workspace the tools are confined to.
    pub workspace: Arc<ToolContext>,
    /// The clock.
    pub clock: Arc<dyn Clock>,
    /// Where the agent's state, tool results and task outcomes are kept across restarts.
    pub state: Arc<dyn StateStore>,
    /// Creates and dismisses agents on this agent's behalf (`spawn_agent`, `despawn_agent`);
    /// `None` in a team without roles.
    pub spawner: Option<Arc<dyn crate::Spawner>>,
    /// The team's time limits (`[timeouts]`): the runtime bounds every reasoning call with
    /// `reasoning_ms` ([`AgentContext::reasoner`]) and the layers every subtask with
    /// `subtask_ms`. (The tool limit is the workspace's [`ToolContext::tool_timeout`], the
    /// turn limit the agent's `timeout_ms`, the task limit the team's.)
    pub timeouts: agent_state::Timeouts,
}

impl AgentDeps {
    /// Services for an agent that works alone, outside a team (what `strata exec` runs a kind
    /// with): `tools` confined to `workspace`, and a bus, whiteboards, governance, audit log
    /// and state store of its own in memory, which nothing else reads; the rule-based
    /// reasoner, tokio's clock and the default time limits.
    pub fn standalone(tools: Arc<ToolRegistry>, workspace: Arc<ToolContext>) -> Self {
        Self {
            bus: Arc::new(message_bus::InMemoryBus::new()),
            boards: Arc::new(whiteboard::InMemoryWhiteboard::new()),
            governance: Arc::new(governance::InMemoryGovernance::new()),
            audit: Arc::new(crate::InMemoryAuditLog::new()),
            reasoner: Arc::new(crate::RuleBasedReasoner::new()),
            tools,
            workspace,
            clock: Arc::new(crate::TokioClock::new()),
            state: Arc::new(crate::InMemoryStateStore::new()),
            spawner: None,
            timeouts: agent_state::Timeouts::default(),
        }
    }
}

/// Runtime settings to change on a live agent ([`AgentContext::tune`]); `None` keeps one.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Tuning {
    /// Retries of a failed turn before the agent fails.
    pub max_retries: Option<u32>,
    /// One turn's time limit, in milliseconds.
    pub timeout_ms: Option<u64>,
    /// The model its reasoner uses.
    pub model: Option<String>,
    /// The model's sampling temperature.
    pub temperature: Option<f32>,
}

/// Everything a layer's code can reach: its configuration, status, metrics and the services.
///
/// Status changes only through [`AgentContext::transition`], which applies the table of
/// `agent-state` and writes the audit log; there is no other way to set a status.
pub struct AgentContext {
    config: AgentConfig,
    /// The status; transitions go through [`Lifecycle::apply`] (the id is the config's).
    status: AgentStatus,
    /// Its metrics, made by its first count (see [`Metrics`]).
    metrics: Metrics,
    retries: u32,
    heartbeat: u64,
    responsibilities: &'static str,
    /// Made by its first use. Boxed twice, for a thin pointer: a context that never used it
    /// holds 16 bytes, not 24.
    #[allow(clippy::redundant_allocation, reason = "a thin pointer, see above")]
    system_prompt: OnceLock<Box<Box<str>>>,
    deps: Arc<AgentDeps>,
    /// What its turns keep between them: made by the first change to it (see [`LazyTurns`]).
    turns: LazyTurns,
}

/// What an agent's turns keep between them. Boxed, and made by its first change: an idle
/// agent that never took a turn holds none of it.
#[derive(Default)]
struct Turns {
    processed: Vec<MessageId>,
    /// Set while a side-effecting tool call runs: the heartbeat's timeout waits for it. Made
    /// by the first heartbeat with work.
    effect_in_flight: Option<Arc<AtomicUsize>>,
    /// After a failed turn that will be retried: the heartbeat its next attempt is due at
    /// (a retry waits for a later heartbeat). Until then it takes no turn. Not
    /// saved: a resumed run (whose heartbeats count from 1 again) retries at once.
    retry_due: Option<u64>,
    /// How many turns in a row have panicked ([`MAX_PANICS`]). Not saved.
    panics: u32,
    /// What its last save wrote, so that the next writes only what changed.
    saved: crate::parts::Saved,
}

/// The turns of an agent that has taken none, which [`LazyTurns`] reads as its own.
static NO_TURNS: Turns = Turns {
    processed: Vec::new(),
    effect_in_flight: None,
    retry_due: None,
    panics: 0,
    saved: crate::parts::Saved::Unknown,
};

/// An agent's [`Turns`], made by their first change: read, they are [`NO_TURNS`] until then;
/// borrowed mutably, they are made (empty) and kept.
#[derive(Default)]
struct LazyTurns(Option<Box<Turns>>);

impl std::ops::Deref for LazyTurns {
    type Target = Turns;

    fn deref(&self) -> &Turns {
        self.0.as_deref().unwrap_or(&NO_TURNS)
    }
}

impl std::ops::DerefMut for LazyTurns {
    fn deref_mut(&mut self) -> &mut Turns {
        self.0.get_or_insert_with(Box::default)
    }
}

/// An agent's metrics as its context keeps them: made by the first count, so that an agent
/// that never counted anything (an idle executor among a hundred thousand) keeps only when it
/// was last active, not the whole [`AgentMetrics`].
#[derive(Debug, Default)]
struct Metrics {
    /// When it was last active, while it has no counts (with counts, theirs is the one).
    last_active: agent_state::Timestamp,
    counts: Option<Box<AgentMetrics>>,
}

impl Metrics {
    /// The metrics.
    fn get(&self) -> AgentMetrics {
        match &self.counts {
            Some(counts) => (**counts).clone(),
            None => AgentMetrics { last_active: self.last_active, ..AgentMetrics::default() },
        }
    }

    /// The metrics, to count.
    fn get_mut(&mut self) -> &mut AgentMetrics {
        let last_active = self.last_active;
        self.counts.get_or_insert_with(|| {
            Box::new(AgentMetrics { last_active, ..AgentMetrics::default() })
        })
    }

    /// It was active at `at`.
    fn set_last_active(&mut self, at: agent_state::Timestamp) {
        match &mut self.counts {
            Some(counts) => counts.last_active = at,
            None => self.last_active = at,
        }
    }
}

impl From<AgentMetrics> for Metrics {
    /// Metrics restored from a record: counts only if it has any.
    fn from(metrics: AgentMetrics) -> Self {
        let last_active = metrics.last_active;
        let counts = (metrics != AgentMetrics { last_active, ..AgentMetrics::default() })
            .then(|| Box::new(metrics));
        Self { last_active, counts }
    }
}

/// The contract each layer implements.
#[async_trait]
pub trait AgentBehavior: Send + Sync + 'static {
    /// The responsibilities, one per line, used in the system prompt.
    fn responsibilities(&self) -> &'static str;

    /// Layer-specific set-up, after the agent registered and got its board.
    async fn on_initialize(&mut self, _ctx: &mut AgentContext) -> Result<(), AgentError> {
        Ok(())
    }

    /// Processes one heartbeat's messages with the agent's board. An error is retried: the same
    /// messages come again on the next heartbeat, so processing must be idempotent.
    async fn on_process(
        &mut self,
        ctx: &mut AgentContext,
        messages: &[Message],
        board: &BoardSnapshot,
    ) -> Result<(), AgentError>;

    /// Layer-specific clean-up at shutdown.
    async fn on_shutdown(&mut self, _ctx: &mut AgentContext) -> Result<(), AgentError> {
        Ok(())
    }

    /// The layer's own state, saved after every heartbeat so a resumed run carries on from it.
    fn snapshot(&self) -> serde_json::Value {
        serde_json::Value::Null
    }

    /// Restores what [`snapshot`](AgentBehavior::snapshot) saved.
    fn restore(&mut self, _state: serde_json::Value) -> Result<(), AgentError> {
        Ok(())
    }

    /// Whether the agent has something to do even with an empty inbox (waiting on a decision,
    /// collecting votes). The scheduler skips agents that return `false` and have no mail.
    fn wants_tick(&self) -> bool {
        false
    }

    /// What the agent is working on, for status reports and live views.
    fn current_work(&self) -> Option<String> {
        None
    }

    /// Gives up the current subtask when the agent fails, so its supervisor can reassign it.
    fn abandon_work(&mut self) -> Option<Subtask> {
        None
    }

    /// Whom the agent (`me`) waits on now and for what: a `speak_to_agent` reply, its
    /// workers' or executors' results, signatures. The team's driver builds the wait-for
    /// graph from these to find agents waiting on each other in a cycle. None by default.
    fn waiting_on(&self, _me: &AgentId) -> Vec<agent_state::WaitEdge> {
        Vec::new()
    }

    /// The tasks the agent still has open work for (ids), so that a guard stops the right
    /// task. None by default.
    fn open_tasks(&self) -> Vec<String> {
        Vec::new()
    }

    /// Whether the agent carries out operator commands (`operator_command` messages, which
    /// it then answers itself with [`AgentContext::answer_command`]). By default it does not:
    /// the runtime refuses each one, audited, and answers the sender with
    /// [`CommandOutcome::Refused`], before the turn sees it.
    fn takes_commands(&self) -> bool {
        false
    }
}

/// What one heartbeat did.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum HeartbeatOutcome {
    /// Nothing to do.
    Idle,
    /// Messages or pending work processed.
    Processed {
        /// Messages handled.
        messages: usize,
    },
    /// Processing failed; the messages are back in the inbox for the attempt due at a later
    /// heartbeat ([`Agent::retry_due`]).
    Retrying {
        /// Retries spent.
        retry: u32,
        /// The error.
        error: String,
    },
    /// Waiting for the next attempt of a failed turn, due at heartbeat `due`: nothing taken.
    Waiting {
        /// The heartbeat the attempt is due at.
        due: u64,
    },
    /// Retries exhausted (or a permanent error): the agent is failed.
    Failed {
        /// The error.
        error: String,
    },
    /// The agent is not running (terminated, shutting down, failed without new orders).
    Skipped {
        /// Its status.
        status: AgentStatus,
    },
}

/// What a failed agent's turn does with its supervisor's orders.
enum Orders {
    /// The turn is over (no orders, or a dismissal).
    Over(HeartbeatOutcome),
    /// New work brought it back to working: these messages are the turn's.
    Work(Vec<Message>),
}

/// One agent: its context and its layer's behaviour.
pub struct Agent {
    ctx: AgentContext,
    behavior: Box<dyn AgentBehavior>,
}

impl AgentContext {
    /// A context for `config` in `initializing`. The configuration must already be valid.
    pub fn new(config: AgentConfig, responsibilities: &'static str, deps: Arc<AgentDeps>) -> Self {
        Self {
            status: AgentStatus::Initializing,
            metrics: Metrics::default(),
            retries: 0,
            heartbeat: 0,
            responsibilities,
            system_prompt: OnceLock::new(),
            config,
            deps,
            turns: LazyTurns::default(),
        }
    }

    /// The agent's id.
    pub fn id(&self) -> &AgentId {
        &self.config.id
    }

    /// The configuration.
    pub fn config(&self) -> &AgentConfig {
        &self.config
    }

    /// Changes the runtime settings the agent runs with from now on (its next turn's time
    /// limit, the retries its next failure gets, the model and temperature its reasoner is
    /// told): what a hot-swapped configuration carries (`agent-evolution`). Each `None` keeps
    /// the current setting. Checked like a configuration; a value it refuses changes nothing.
    pub fn tune(&mut self, tuning: &Tuning) -> Result<(), AgentError> {
        let mut next = self.config.clone();
        if let Some(retries) = tuning.max_retries {
            next.max_retries = retries;
        }
        if let Some(ms) = tuning.timeout_ms {
            next.timeout_ms = ms;
        }
        if let Some(model) = &tuning.model {
            next.model = Some(model.clone());
        }
        if let Some(t) = tuning.temperature {
            next.temperature = Some(t);
        }
        next.validate()
            .map_err(|e| AgentError::NotAllowed(format!("cannot tune the agent: {e}")))?;
        if next != self.config {
            tracing::debug!(agent = %self.config.id, ?tuning, "runtime settings tuned");
            self.config = next;
        }
        Ok(())
    }

    /// The current status.
    pub fn status(&self) -> AgentStatus {
        self.status
    }

    /// The metrics (a copy: an agent that never counted anything keeps only when it was last
    /// active, and its metrics are made from that).
    pub fn metrics(&self) -> AgentMetrics {
        self.metrics.get()
    }

    /// The metrics, for a layer to count its own acts.
    pub fn metrics_mut(&mut self) -> &mut AgentMetrics {
        self.metrics.get_mut()
    }

    /// Retries spent on the current work.
    pub fn retries(&self) -> u32 {
        self.retries
    }

    /// The current heartbeat number.
    pub fn heartbeat_number(&self) -> u64 {
        self.heartbeat
    }

    /// The heartbeat the next attempt of a failed turn is due at, while the agent waits for
    /// it ([`AuditEvent::Retry`]).
    pub fn retry_due(&self) -> Option<u64> {
        self.turns.retry_due
    }

    /// The system prompt, built on first use so that an
    /// agent that never reasons never pays for it.
    pub fn system_prompt(&self) -> &str {
        self.system_prompt
            .get_or_init(|| Box::new(system_prompt(&self.config, self.responsibilities).into()))
    }

    /// Who this agent is, for the reasoner.
    pub fn persona(&self) -> Persona<'_> {
        Persona {
            config: &self.config,
            system_prompt: self.system_prompt(),
            tools: &[],
            roles: &[],
            domains: &[],
        }
    }

    /// Who this agent is, holding `tools` (its workspace tools and, when it may spawn, the
    /// supervisor tools) and allowed to spawn `roles` (name and what it is for), for a reasoner
    /// choosing its next tool call.
    pub fn persona_with<'a>(
        &'a self,
        tools: &'a [String],
        roles: &'a [(String, String)],
    ) -> Persona<'a> {
        Persona {
            config: &self.config,
            system_prompt: self.system_prompt(),
            tools,
            roles,
            domains: &[],
        }
    }

    /// The spawner, if this team can spawn agents.
    pub fn spawner(&self) -> Option<Arc<dyn crate::Spawner>> {
        self.deps.spawner.clone()
    }

    /// The reasoner, every call bounded by the team's reasoning limit
    /// ([`Timeouts::reasoning_ms`](agent_state::Timeouts)) and its silence limit
    /// (`silence_ms`: no token for that long): a call still running then is stopped, audited as
    /// [`AuditEvent::TimedOut`] and fails with
    /// [`ReasonError::TimedOut`](crate::ReasonError::TimedOut) (or
    /// [`ReasonError::Silent`](crate::ReasonError::Silent)), which is transient (the
    /// heartbeat is retried, up to the agent's `max_retries`).
    pub fn reasoner(&self) -> Arc<dyn Reasoner> {
        Arc::new(crate::timed::TimedReasoner {
            inner: self.deps.reasoner.clone(),
            limit_ms: self.deps.timeouts.reasoning_ms,
            silence_ms: self.deps.timeouts.silence_ms,
            agent: self.config.id.clone(),
            audit: self.deps.audit.clone(),
            clock: self.deps.clock.clone(),
        })
    }

    /// The team's time limits.
    pub fn timeouts(&self) -> &agent_state::Timeouts {
        &self.deps.timeouts
    }

    /// The services.
    pub fn deps(&self) -> &Arc<AgentDeps> {
        &self.deps
    }

    /// Now, from the runtime's clock.
    pub fn now(&self) -> Timestamp {
        self.deps.clock.now()
    }

    /// Changes status through the transition table and appends the change to the audit log.
    /// On any error the status is unchanged.
    pub async fn transition(
        &mut self,
        to: AgentStatus,
        reason: impl Into<Cow<'static, str>>,
    ) -> Result<(), AgentError> {
        let now = self.now();
        self.transition_at(to, reason, now).await
    }

    /// [`transition`](Self::transition) at `at`, a time the caller read from the clock.
    async fn transition_at(
        &mut self,
        to: AgentStatus,
        reason: impl Into<Cow<'static, str>>,
        at: Timestamp,
    ) -> Result<(), AgentError> {
        let mut next = Lifecycle::restore(self.config.id.clone(), self.status);
        let record = next.apply(to, reason, at)?;
        self.deps
            .audit
            .append(
                &record.agent,
                record.at,
                AuditEvent::Transition {
                    from: record.from,
                    to: record.to,
                    reason: record.reason.clone(),
                },
            )
            .await?;
        tracing::debug!(agent = %record.agent, from = %record.from, to = %record.to, reason = %record.reason, "transition");
        crate::otel::transition(&record.agent, self.config.layer, record.to);
        self.status = next.status();
        Ok(())
    }

    /// A move to `to`, checked as [`transition`](Self::transition) checks it, as the audit
    /// entry to append; the status is unchanged until [`transitioned`](Self::transitioned)
    /// is given the appended record (a transition in two steps, for a batch of agents).
    fn transition_entry(
        &self,
        to: AgentStatus,
        reason: &'static str,
    ) -> Result<AuditEntry, agent_state::TransitionError> {
        let mut next = Lifecycle::restore(self.config.id.clone(), self.status);
        let record = next.apply(to, reason, self.now())?;
        Ok(AuditEntry {
            agent: record.agent,
            at: record.at,
            event: AuditEvent::Transition {
                from: record.from,
                to: record.to,
                reason: record.reason,
            },
        })
    }

    /// Takes the status a [`transition_entry`](Self::transition_entry) leads to, once its
    /// record is in the audit log.
    fn transitioned(&mut self, record: &AuditRecord) {
        if let AuditEvent::Transition { from, to, reason } = &record.event {
            tracing::debug!(agent = %record.agent, from = %from, to = %to, reason = %reason, "transition");
            crate::otel::transition(&record.agent, self.config.layer, *to);
            self.status = *to;
        }
    }

    /// Remembers the ids this heartbeat processed, so that if a crash delivers them again
    /// before they are acknowledged they are skipped (see [`AgentRecord::processed`]).
    fn remember(&mut self, ids: &[MessageId]) {
        self.turns.processed.clear();
        self.turns.processed.extend_from_slice(ids);
    }

    /// Reads a message's content as `T`. Content that does not fit is refused, audited as
    /// `Denied` and ignored (`Ok(None)`): a malformed message from another agent must not fail
    /// the agent that receives it.
    pub async fn read_payload<T: DeserializeOwned>(
        &self,
        message: &Message,
    ) -> Result<Option<T>, AgentError> {
        match payload(message) {
            Ok(value) => Ok(Some(value)),
            Err(e) => {
                tracing::warn!(agent = %self.id(), from = %message.from, kind = %message.kind, error = %e, "unreadable message ignored");
                self.audit(AuditEvent::Denied {
                    action: format!("{} from {}", message.kind, message.from),
                    error: format!("unreadable content, ignored: {e}"),
                })
                .await?;
                Ok(None)
            }
        }
    }

    /// Appends an event to the audit log.
    pub async fn audit(&self, event: AuditEvent) -> Result<(), AgentError> {
        self.deps.audit.append(self.id(), self.now(), event).await?;
        Ok(())
    }

    /// Sends a message with `content` and returns its id.
    pub async fn send(
        &mut self,
        to: impl Into<Address>,
        kind: MessageKind,
        content: &impl Serialize,
    ) -> Result<MessageId, AgentError> {
        self.send_message(to.into(), kind, content, None).await
    }

    /// Sends an answer to `request`, back to its sender.
    pub async fn reply(
        &mut self,
        request: &Message,
        kind: MessageKind,
        content: &impl Serialize,
    ) -> Result<MessageId, AgentError> {
        self.send_message(request.from.clone(), kind, content, Some(request.id)).await
    }

    /// Answers the operator command that came from `origin` with `outcome`: a
    /// `command_outcome` message to its sender, in reply to it.
    pub async fn answer_command(
        &mut self,
        origin: &CommandOrigin,
        outcome: &CommandOutcome,
    ) -> Result<MessageId, AgentError> {
        let to = origin.from.clone();
        self.send_message(to, MessageKind::CommandOutcome, outcome, Some(origin.message)).await
    }

    /// Sends to every registered agent but this one.
    pub async fn broadcast(
        &mut self,
        kind: MessageKind,
        content: &impl Serialize,
    ) -> Result<MessageId, AgentError> {
        self.send_message(Address::Broadcast, kind, content, None).await
    }

    /// Sends several messages in one call to the bus ([`MessageBus::send_many`]): all of them
    /// or, when one is refused, none (a durable bus stores the whole batch with one commit).
    /// Each is sent as [`send`](Self::send) would send it (its capability checked, its content
    /// encoded, its own id), in the order given; returns their ids in that order. A refused
    /// capability or content that cannot be encoded stops the batch before anything is sent.
    pub async fn send_all<A, C>(
        &mut self,
        sends: impl IntoIterator<Item = (A, MessageKind, C)>,
    ) -> Result<Vec<MessageId>, AgentError>
    where
        A: Into<Address>,
        C: Serialize,
    {
        let sends: Vec<(Address, MessageKind, serde_json::Result<serde_json::Value>)> = sends
            .into_iter()
            .map(|(to, kind, content)| (to.into(), kind, serde_json::to_value(&content)))
            .collect();
        let mut messages = Vec::with_capacity(sends.len());
        for (to, kind, content) in sends {
            self.require(Action::of_message(kind), &format!("({kind} to {to})")).await?;
            let content = content.map_err(|e| AgentError::Encode { kind, error: e.to_string() })?;
            let id = self.deps.clock.message_id();
            messages.push(Message::new(id, self.config.id.clone(), to, kind, content, self.now()));
        }
        let ids: Vec<MessageId> = messages.iter().map(|m| m.id).collect();
        match messages.len() {
            0 => return Ok(ids),
            1 => {
                if let Some(message) = messages.pop() {
                    self.deliver(message).await?;
                }
            }
            n => {
                // Each message has its span, open while the batch is sent.
                let spans: Vec<tracing::Span> = messages
                    .iter()
                    .map(|m| crate::otel::message(m, Some(self.config.layer)))
                    .collect();
                self.deps.bus.send_many(messages).await?;
                drop(spans);
                self.metrics.get_mut().messages_processed += n as u64;
            }
        }
        Ok(ids)
    }

    /// Checks that this agent holds the capability `action` needs
    /// ([`Action::required_capability`]). A refusal is audited as `Denied` and returned as
    /// [`AgentError::MissingCapability`]; nothing else is done.
    ///
    /// Sending a message checks the action its kind performs ([`Action::of_message`]),
    /// writing a whiteboard [`Action::Coordinate`], proposing a decision [`Action::Plan`],
    /// signing or vetoing one [`Action::Review`], and every tool call [`Action::CallTool`]
    /// (and [`Action::WriteCode`] for a tool that writes the workspace, [`Action::of_tool`]);
    /// an act that does not go through the context (spawning, decomposing a task, working a
    /// subtask, an OODA agent's reflection, code change or tests) calls this first.
    pub async fn require(&self, action: Action, target: &str) -> Result<(), AgentError> {
        self.caller().require(action, target).await
    }

    async fn send_message(
        &mut self,
        to: Address,
        kind: MessageKind,
        content: &impl Serialize,
        correlation: Option<MessageId>,
    ) -> Result<MessageId, AgentError> {
        self.require(Action::of_message(kind), &format!("({kind} to {to})")).await?;
        let content = serde_json::to_value(content)
            .map_err(|e| AgentError::Encode { kind, error: e.to_string() })?;
        let id = self.deps.clock.message_id();
        let mut message = Message::new(id, self.config.id.clone(), to, kind, content, self.now());
        message.correlation_id = correlation;
        self.deliver(message).await?;
        Ok(id)
    }

    /// Sends one message on the bus, in its span, and counts it.
    async fn deliver(&mut self, message: Message) -> Result<(), AgentError> {
        let span = crate::otel::message(&message, Some(self.config.layer));
        if span.is_disabled() {
            self.deps.bus.send(message).await?;
        } else {
            self.deps.bus.send(message).instrument(span).await?;
        }
        self.metrics.get_mut().messages_processed += 1;
        Ok(())
    }

    /// Reads a board. A refusal is audited.
    pub async fn read_board(&self, board: &BoardId) -> Result<BoardSnapshot, AgentError> {
        let result = self.deps.boards.read(&Actor::Agent(self.id().clone()), board).await;
        self.audit_refusal(result, || format!("read board {board}")).await
    }

    /// Replaces the content of this agent's own board.
    pub async fn write_board(&self, content: String) -> Result<u64, AgentError> {
        self.write_to(&BoardId::Agent(self.id().clone()), content).await
    }

    /// Replaces the content of `board`. Only the agent's own board is allowed; a refusal is audited.
    /// The secrets this process knows are redacted first ([`crate::secrets`]).
    pub async fn write_to(&self, board: &BoardId, mut content: String) -> Result<u64, AgentError> {
        self.require(Action::Coordinate, &format!("(write board {board})")).await?;
        crate::secrets::redact_string(&mut content);
        let result = self.deps.boards.write(self.id(), board, content, self.now()).await;
        self.audit_refusal(result, || format!("write board {board}")).await
    }

    /// Appends a line to this agent's own board.
    pub async fn append_own(&self, content: &str) -> Result<u64, AgentError> {
        self.append_to(&BoardId::Agent(self.id().clone()), content).await
    }

    /// Appends to a board (its own, or the global board). A refusal is audited. The secrets
    /// this process knows are redacted first ([`crate::secrets`]).
    pub async fn append_to(&self, board: &BoardId, content: &str) -> Result<u64, AgentError> {
        self.require(Action::Coordinate, &format!("(append to board {board})")).await?;
        let content = &*crate::secrets::redact(content);
        let result = self.deps.boards.append(self.id(), board, content, self.now()).await;
        self.audit_refusal(result, || format!("append to board {board}")).await
    }

    async fn audit_refusal<T>(
        &self,
        result: Result<T, BoardError>,
        action: impl FnOnce() -> String,
    ) -> Result<T, AgentError> {
        match result {
            Err(e @ BoardError::PermissionDenied { .. }) => {
                self.audit(AuditEvent::Denied { action: action(), error: e.to_string() }).await?;
                tracing::warn!(agent = %self.id(), error = %e, "whiteboard permission denied");
                Err(e.into())
            }
            other => Ok(other?),
        }
    }

    /// Proposes a decision that `signers` must sign, and returns its id.
    pub async fn propose(
        &mut self,
        content: serde_json::Value,
        signers: Vec<AgentId>,
    ) -> Result<DecisionId, AgentError> {
        self.propose_with_humans(content, signers, None).await
    }

    /// [`propose`](Self::propose), and with `humans` the decision also needs the signature of
    /// one of these humans ([`Decision::with_human_approval`]), who sign as `human:<name>`.
    pub async fn propose_with_humans(
        &mut self,
        content: serde_json::Value,
        signers: Vec<AgentId>,
        humans: Option<Vec<String>>,
    ) -> Result<DecisionId, AgentError> {
        let id = self.deps.clock.decision_id();
        self.submit_proposal(id, content, signers, humans).await
    }

    /// [`propose_with_humans`](Self::propose_with_humans) at most once for the message
    /// `cause` (the one this turn handles): the decision takes the message's id, so a turn
    /// done again after a crash (the message redelivered because the first turn never ended)
    /// finds the decision it proposed then, signatures and all, instead of proposing a second
    /// one that nobody was asked about. Returns the decision as it stands now.
    pub async fn propose_once(
        &mut self,
        cause: MessageId,
        content: serde_json::Value,
        signers: Vec<AgentId>,
        humans: Option<Vec<String>>,
    ) -> Result<Decision, AgentError> {
        if let Some(existing) = self.proposed_for(cause).await? {
            tracing::debug!(agent = %self.id(), decision = %existing.id, "proposed before this turn was redone");
            return Ok(existing);
        }
        let id = DecisionId::for_message(cause);
        self.submit_proposal(id, content, signers, humans).await?;
        self.deps.governance.get(id).await?.ok_or_else(|| {
            AgentError::NotAllowed(format!("decision {id} was submitted but cannot be read back"))
        })
    }

    /// The decision this agent proposed with [`propose_once`](Self::propose_once) for the
    /// message `cause`, if it did (in an earlier try of this turn). One with that id proposed
    /// by another agent is refused: a message is one agent's.
    pub async fn proposed_for(&self, cause: MessageId) -> Result<Option<Decision>, AgentError> {
        let id = DecisionId::for_message(cause);
        match self.deps.governance.get(id).await? {
            Some(existing) if existing.proposer != *self.id() => {
                Err(AgentError::NotAllowed(format!(
                    "decision {id} for message {cause} was proposed by {}, not {}",
                    existing.proposer,
                    self.id()
                )))
            }
            found => Ok(found),
        }
    }

    /// Submits the decision `id` and audits it.
    async fn submit_proposal(
        &mut self,
        id: DecisionId,
        content: serde_json::Value,
        signers: Vec<AgentId>,
        humans: Option<Vec<String>>,
    ) -> Result<DecisionId, AgentError> {
        self.require(Action::Plan, "(propose a decision)").await?;
        let mut decision = Decision::propose(id, self.id().clone(), content, signers, self.now())
            .map_err(|e| AgentError::Submit(e.into()))?;
        if let Some(humans) = humans {
            decision =
                decision.with_human_approval(humans).map_err(|e| AgentError::Submit(e.into()))?;
        }
        let span = crate::otel::decision("propose", &id, self.id());
        crate::otel::decided(&span, &decision);
        self.deps.governance.submit(decision).instrument(span).await?;
        self.audit(AuditEvent::Decision {
            decision: id,
            action: "proposed".into(),
            detail: String::new(),
        })
        .await?;
        Ok(id)
    }

    /// Signs a decision. A refusal (not a required signer, already decided) is audited.
    pub async fn sign(&mut self, id: DecisionId) -> Result<SignOutcome, AgentError> {
        self.require(Action::Review, &format!("(sign decision {id})")).await?;
        let span = crate::otel::decision("sign", &id, self.id());
        let result =
            self.deps.governance.sign(id, self.id(), self.now()).instrument(span.clone()).await;
        self.record_decision(&span, id).await;
        let outcome = self.audit_decision(result, id, "sign").await?;
        if outcome != SignOutcome::AlreadySigned {
            self.metrics.get_mut().decisions_signed += 1;
            let action = if outcome == SignOutcome::Approved { "approved" } else { "signed" };
            self.audit(AuditEvent::Decision {
                decision: id,
                action: action.into(),
                detail: String::new(),
            })
            .await?;
        }
        Ok(outcome)
    }

    /// Vetoes a decision. A refusal is audited.
    pub async fn veto(&mut self, id: DecisionId, reason: &str) -> Result<(), AgentError> {
        self.require(Action::Review, &format!("(veto decision {id})")).await?;
        let span = crate::otel::decision("veto", &id, self.id());
        let result = self
            .deps
            .governance
            .veto(id, self.id(), reason, self.now())
            .instrument(span.clone())
            .await;
        self.record_decision(&span, id).await;
        self.audit_decision(result, id, "veto").await?;
        self.metrics.get_mut().decisions_vetoed += 1;
        self.audit(AuditEvent::Decision {
            decision: id,
            action: "vetoed".into(),
            detail: reason.into(),
        })
        .await?;
        Ok(())
    }

    /// Records decision `id`'s state on `span` (telemetry on only: it reads the decision).
    async fn record_decision(&self, span: &tracing::Span, id: DecisionId) {
        if span.is_disabled() {
            return;
        }
        if let Ok(Some(decision)) = self.deps.governance.get(id).await {
            crate::otel::decided(span, &decision);
        }
    }

    async fn audit_decision<T>(
        &self,
        result: Result<T, DecideError>,
        id: DecisionId,
        what: &str,
    ) -> Result<T, AgentError> {
        match result {
            Err(DecideError::Rule(
                e @ (SignError::NotARequiredSigner { .. } | SignError::AlreadyDecided { .. }),
            )) => {
                self.audit(AuditEvent::Denied {
                    action: format!("{what} decision {id}"),
                    error: e.to_string(),
                })
                .await?;
                Err(DecideError::Rule(e).into())
            }
            other => Ok(other?),
        }
    }

    /// A decision by id.
    pub async fn decision(&self, id: DecisionId) -> Result<Option<Decision>, AgentError> {
        Ok(self.deps.governance.get(id).await?)
    }

    /// Calls a tool with side effects once per `key`, across crashes:
    ///
    /// 1. a result recorded under `key` is returned without running the tool again;
    /// 2. otherwise the call is recorded as started (durably), runs with a crash journal where
    ///    the tool keeps one, and its result is recorded before it is returned (a failed call
    ///    is forgotten, so a retry runs it again); the journal is removed once the result is
    ///    stored;
    /// 3. a call found started but without a result was interrupted by a crash: the tool's
    ///    journal says whether it completed (its result is adopted), never started (it runs),
    ///    or was stopped part-way (still running: waited for until its own timeout, then
    ///    killed). A call stopped part-way, or one whose fate cannot be known, runs again only
    ///    if the tool is idempotent; any other fails with
    ///    [`ToolError::Interrupted`](crate::tools::ToolError::Interrupted) carrying its partial
    ///    output, and that is recorded, so no later call under `key` runs it either.
    ///
    /// Tools without side effects simply run. See [`call_step_tool`](Self::call_step_tool) for
    /// a call whose plan step declares that running it twice is safe.
    pub async fn call_tool_once(
        &mut self,
        key: &str,
        call: &ToolCall,
    ) -> Result<ToolOutput, AgentError> {
        self.call_step_tool(key, call, false).await
    }

    /// [`call_tool_once`](Self::call_tool_once) for a plan step that may be declared
    /// `idempotent`: then an interrupted call runs again even if the tool is not idempotent by
    /// nature.
    ///
    /// While the call runs (or is being recovered), the heartbeat's timeout does not cut it
    /// short: it is bounded by its own timeout, and cutting it would leave its outcome
    /// unrecorded.
    pub async fn call_step_tool(
        &mut self,
        key: &str,
        call: &ToolCall,
        idempotent: bool,
    ) -> Result<ToolOutput, AgentError> {
        self.caller().call_step_tool(key, call, idempotent).await
    }

    /// Runs `effect`, a side effect that is not a registered tool (an executor kind's run),
    /// at most once under `key`, like [`call_tool_once`](Self::call_tool_once): the start is
    /// recorded durably before it runs and its output after (whether it succeeded or not: the
    /// effect did its own retries), and `call` is audited as the tool call it stands for.
    ///
    /// - An output recorded under `key` is returned without running `effect` again.
    /// - A start recorded without an output means a crash interrupted the effect: unless
    ///   `idempotent`, it is not run again; the interruption is recorded and
    ///   [`ToolError::Interrupted`](crate::tools::ToolError::Interrupted) returned (as for a
    ///   tool without a journal, its partial output is unknown).
    /// - An `Err` from `effect` is forgotten, so a retry runs it again.
    ///
    /// While it runs the heartbeat's timeout does not cut it short (it has its own).
    pub async fn call_effect_once<F>(
        &mut self,
        key: &str,
        call: &ToolCall,
        idempotent: bool,
        effect: F,
    ) -> Result<ToolOutput, AgentError>
    where
        F: std::future::Future<Output = Result<ToolOutput, AgentError>> + Send,
    {
        self.caller().call_effect_once(key, call, idempotent, effect).await
    }

    /// Calls a tool through the registry, confined to the workspace, and audits the call.
    ///
    /// Contents stored once (see [`blob`](crate::blob)) are put back into the arguments
    /// before the tool runs; large strings the call carries are stored once and audited as
    /// references.
    pub async fn call_tool(&mut self, call: &ToolCall) -> Result<ToolOutput, AgentError> {
        self.caller().call_tool(call).await
    }

    /// This agent's tool path as an owned handle: the same capability check, audit, journal
    /// and exactly-once recording as [`call_step_tool`](Self::call_step_tool), for work that
    /// runs apart from the context (an executor kind's capsule). Taken in a turn, its calls
    /// hold that turn's timeout off while they run, as the context's own do.
    pub fn tool_path(&self) -> ToolPath {
        ToolPath::of_context(&self.config, &self.deps, self.turns.effect_in_flight.as_ref())
    }

    fn caller(&self) -> Caller<'_> {
        Caller {
            config: &self.config,
            deps: &self.deps,
            in_flight: self.turns.effect_in_flight.as_ref(),
        }
    }
}

/// Why an agent starts working: how many messages, and what the first is about (its kind,
/// and the task and step it names), such as `processing 1 message(s): task_assign hello/greet`,
/// so that a watcher (the live view, the dashboard) can show what an agent is working on.
fn working_reason(messages: &[Message]) -> String {
    use std::fmt::Write as _;
    let mut reason = format!("processing {} message(s)", messages.len());
    if let Some(first) = messages.first() {
        let _ = write!(reason, ": {}", first.kind);
        if let Some(task) = crate::otel::task_of(&first.content) {
            let _ = write!(reason, " {task}");
            if let Some(step) = crate::otel::step_of(&first.content) {
                let _ = write!(reason, "/{step}");
            }
        }
    }
    reason
}

/// An agent's system prompt: its name, layer, role, capabilities, `responsibilities` and the
/// rules of working in a team.
pub fn system_prompt(config: &AgentConfig, responsibilities: &str) -> String {
    let capabilities =
        config.capabilities.iter().map(|c| c.as_str()).collect::<Vec<_>>().join(", ");
    format!(
        "You are {name}, a {layer}-layer agent.\nRole: {role}\nCapabilities: {capabilities}\n\n\
         Responsibilities:\n{responsibilities}\n\n\
         Collaboration rules:\n- Communicate via message bus\n- Share information via whiteboards\n\
         - Major decisions require signatures\n- Report issues to supervisor\n\
         - Respond to heartbeats every cycle",
        name = config.name,
        layer = config.layer,
        role = config.role,
    )
}

/// Reads a message's content as `T`.
pub fn payload<T: DeserializeOwned>(message: &Message) -> Result<T, AgentError> {
    serde_json::from_value(message.content.clone()).map_err(|e| AgentError::BadPayload {
        id: message.id,
        kind: message.kind,
        error: e.to_string(),
    })
}

impl Agent {
    /// An agent in `initializing`. Validates the configuration.
    pub fn new(
        config: AgentConfig,
        behavior: Box<dyn AgentBehavior>,
        deps: Arc<AgentDeps>,
    ) -> Result<Self, agent_state::ConfigError> {
        config.validate()?;
        let ctx = AgentContext::new(config, behavior.responsibilities(), deps);
        Ok(Self { ctx, behavior })
    }

    /// The context.
    pub fn ctx(&self) -> &AgentContext {
        &self.ctx
    }

    /// The context, mutably (tests and the pool use it to act as the agent).
    pub fn ctx_mut(&mut self) -> &mut AgentContext {
        &mut self.ctx
    }

    /// The agent's id.
    pub fn id(&self) -> &AgentId {
        self.ctx.id()
    }

    /// The current status.
    pub fn status(&self) -> AgentStatus {
        self.ctx.status()
    }

    /// What the agent is working on.
    pub fn current_work(&self) -> Option<String> {
        self.behavior.current_work()
    }

    /// Whom the agent waits on now, and for what ([`AgentBehavior::waiting_on`]).
    pub fn waiting_on(&self) -> Vec<agent_state::WaitEdge> {
        self.behavior.waiting_on(self.id())
    }

    /// The tasks the agent has open work for ([`AgentBehavior::open_tasks`]).
    pub fn open_tasks(&self) -> Vec<String> {
        self.behavior.open_tasks()
    }

    /// Whether the agent wants a heartbeat even with an empty inbox.
    pub fn wants_tick(&self) -> bool {
        self.behavior.wants_tick()
            || matches!(
                self.status(),
                AgentStatus::Working | AgentStatus::WaitingApproval | AgentStatus::Blocked
            )
    }

    /// Registers on the bus, creates the whiteboard, runs the layer's set-up, and goes
    /// initializing → idle. On failure the agent goes failed and the error is returned.
    pub async fn initialize(&mut self) -> Result<(), AgentError> {
        let result = self.try_initialize().await;
        match result {
            Ok(()) => Ok(()),
            Err(e) => Err(self.initialization_failed(e).await),
        }
    }

    async fn try_initialize(&mut self) -> Result<(), AgentError> {
        self.initialize_own().await?;
        self.become_idle().await
    }

    /// The steps of [`initialize`](Self::initialize) that are the agent's own: its inbox
    /// registered, its whiteboard created, its layer's set-up.
    async fn initialize_own(&mut self) -> Result<(), AgentError> {
        let deps = self.ctx.deps.clone();
        deps.bus.register(self.ctx.id()).await?;
        deps.boards.create(self.ctx.id(), self.ctx.config.layer).await?;
        self.behavior.on_initialize(&mut self.ctx).await?;
        Ok(())
    }

    /// What a failed initialization leaves: the agent failed (when it was still
    /// initializing) and the error to answer, `error` or, when even the move to failed
    /// fails, that failure.
    async fn initialization_failed(&mut self, error: AgentError) -> AgentError {
        tracing::warn!(agent = %self.id(), error = %error, "initialization failed");
        if self.status() == AgentStatus::Initializing
            && let Err(e) = self
                .ctx
                .transition(AgentStatus::Failed, format!("initialization failed: {error}"))
                .await
        {
            return e;
        }
        error
    }

    /// Initializes several agents together, each as [`initialize`](Self::initialize) would,
    /// and answers each one's result, in order.
    ///
    /// Each agent's own steps (its inbox registered, its whiteboard created, its layer's
    /// set-up) run concurrently on the calling task, so a durable backend's group commit
    /// serves many of them with one sync; in memory each finishes when first polled, so the
    /// batch costs no task and no wake-up. Then the agents that got through them and share
    /// the first agent's audit log go initializing → idle with one
    /// [`AuditLog::append_many`] (one commit on a durable backend); any other goes idle on
    /// its own. An agent whose own steps fail goes failed with its error, as with
    /// `initialize`; a failed append is each of its agents' error, and each of them goes
    /// failed as far as the audit log lets it.
    pub async fn initialize_many(agents: &mut [Agent]) -> Vec<Result<(), AgentError>> {
        let mut results = Self::initialize_own_all(agents).await;
        let Some(audit) = agents.first().map(|a| a.ctx.deps.audit.clone()) else {
            return Vec::new();
        };
        let mut moving = Vec::with_capacity(agents.len());
        let mut entries = Vec::with_capacity(agents.len());
        for (i, agent) in agents.iter_mut().enumerate() {
            if results[i].is_err() {
                continue;
            }
            if !Arc::ptr_eq(&agent.ctx.deps.audit, &audit) {
                results[i] = agent.become_idle().await;
                continue;
            }
            match agent.ctx.transition_entry(AgentStatus::Idle, INITIALIZED) {
                Ok(entry) => {
                    moving.push(i);
                    entries.push(entry);
                }
                Err(e) => results[i] = Err(e.into()),
            }
        }
        if !entries.is_empty() {
            match audit.append_many(entries).await {
                Ok(records) => {
                    for (i, record) in moving.into_iter().zip(records) {
                        agents[i].ctx.transitioned(&record);
                        // Last active when it became idle.
                        agents[i].ctx.metrics.set_last_active(record.at);
                    }
                }
                Err(e) => {
                    for i in moving {
                        results[i] = Err(AgentError::Backend(share_error(&e)));
                    }
                }
            }
        }
        let mut answers = Vec::with_capacity(results.len());
        for (agent, result) in agents.iter_mut().zip(results) {
            answers.push(match result {
                Ok(()) => Ok(()),
                Err(e) => Err(agent.initialization_failed(e).await),
            });
        }
        answers
    }

    /// The end of an initialization, after the agent's own steps: initializing → idle.
    async fn become_idle(&mut self) -> Result<(), AgentError> {
        // One reading of the clock for both: it became idle, and last active, then.
        let now = self.ctx.now();
        self.ctx.transition_at(AgentStatus::Idle, INITIALIZED, now).await?;
        self.ctx.metrics.set_last_active(now);
        // Nothing to save yet: an agent restored without a record starts from its defaults.
        Ok(())
    }

    /// Every agent's [`initialize_own`](Self::initialize_own), polled together on this task
    /// until all have ended; each one's result, in order. Each wake-up polls those still
    /// running (a batch is a bounded number of agents).
    async fn initialize_own_all(agents: &mut [Agent]) -> Vec<Result<(), AgentError>> {
        type Step<'a> = std::pin::Pin<
            Box<dyn std::future::Future<Output = Result<(), AgentError>> + Send + 'a>,
        >;
        let mut steps: Vec<Option<Step<'_>>> = agents
            .iter_mut()
            .map(|agent| Some(Box::pin(agent.initialize_own()) as Step<'_>))
            .collect();
        let mut results: Vec<Result<(), AgentError>> = Vec::with_capacity(steps.len());
        results.resize_with(steps.len(), || Ok(()));
        std::future::poll_fn(|cx| {
            let mut running = false;
            for (step, result) in steps.iter_mut().zip(results.iter_mut()) {
                if let Some(future) = step {
                    match future.as_mut().poll(cx) {
                        std::task::Poll::Ready(outcome) => {
                            *result = outcome;
                            *step = None;
                        }
                        std::task::Poll::Pending => running = true,
                    }
                }
            }
            if running { std::task::Poll::Pending } else { std::task::Poll::Ready(()) }
        })
        .await;
        results
    }

    /// One heartbeat (docs/concepts.md#heartbeat): take the pending messages, go working when
    /// there is work, read the board, process, acknowledge what was processed, update metrics,
    /// ack the heartbeat to `system`, and return to idle. A failure is retried on the next
    /// heartbeat up to `max_retries`; then the agent goes failed and reports to its supervisor.
    pub async fn heartbeat(&mut self, number: u64) -> Result<HeartbeatOutcome, AgentError> {
        self.ctx.heartbeat = number;
        self.turn(number, true).await
    }

    /// A turn between two heartbeats, taken because new mail arrived (wake on work): the same
    /// work as a heartbeat (take, process, store, acknowledge), but it is not a heartbeat of
    /// the cycle: it neither acks the heartbeat to `system` nor counts as one answered.
    pub async fn wake(&mut self) -> Result<HeartbeatOutcome, AgentError> {
        self.turn(self.ctx.heartbeat, false).await
    }

    /// [`wake`](Self::wake) in heartbeat cycle `cycle`, the scheduler's current one: the turn
    /// knows which heartbeat it belongs to, so a failure in it is retried counting from there.
    pub async fn wake_in(&mut self, cycle: u64) -> Result<HeartbeatOutcome, AgentError> {
        self.ctx.heartbeat = self.ctx.heartbeat.max(cycle);
        self.wake().await
    }

    /// Whether the agent waits, in heartbeat cycle `cycle`, for the next attempt of a failed
    /// turn ([`AuditEvent::Retry`]): a scheduler takes no turn of it, for mail or work, before
    /// the heartbeat the attempt is due at.
    pub fn waits_for_retry(&self, cycle: u64) -> bool {
        self.ctx.turns.retry_due.is_some_and(|due| cycle < due)
    }

    /// The heartbeat the next attempt of a failed turn is due at, while the agent waits.
    pub fn retry_due(&self) -> Option<u64> {
        self.ctx.turns.retry_due
    }

    /// A turn; one that fails outside its layer's processing (a status change, a save, an
    /// acknowledgement the backend refused: a bus or store briefly unreachable) puts the
    /// messages it took back to pending, and its next attempt waits for the next heartbeat.
    /// Left in flight, no later turn of this process would see them again (on NATS, until the
    /// run ends): they come again instead, and those processed already are acknowledged
    /// without being processed twice, as after a restart.
    async fn turn(&mut self, number: u64, cycle: bool) -> Result<HeartbeatOutcome, AgentError> {
        let result = self.take_turn(number, cycle).await;
        if result.is_err() {
            let inbox = Address::Agent(self.id().clone());
            if let Err(e) = self.ctx.deps.bus.release(&inbox).await {
                tracing::debug!(agent = %self.id(), error = %e, "releasing the inbox after a failed turn");
            }
            let next = self.ctx.heartbeat.saturating_add(1);
            self.ctx.turns.retry_due =
                Some(self.ctx.turns.retry_due.map_or(next, |due| due.max(next)));
        }
        result
    }

    async fn take_turn(
        &mut self,
        number: u64,
        cycle: bool,
    ) -> Result<HeartbeatOutcome, AgentError> {
        let status = self.status();
        if matches!(
            status,
            AgentStatus::Initializing | AgentStatus::ShuttingDown | AgentStatus::Terminated
        ) {
            return Ok(HeartbeatOutcome::Skipped { status });
        }
        if let Some(due) = self.ctx.turns.retry_due {
            if number < due {
                // A failed turn's next attempt waits for its heartbeat: the mail
                // stays in the inbox; the agent is alive and answers the heartbeat.
                if cycle {
                    self.ctx.metrics.get_mut().heartbeats_responded += 1;
                }
                return Ok(HeartbeatOutcome::Waiting { due });
            }
            self.ctx.turns.retry_due = None;
        }
        let inbox = Address::Agent(self.id().clone());
        let bus = self.ctx.deps.bus.clone();
        let taken = bus.take(&inbox, MAX_MESSAGES_PER_HEARTBEAT).await?;
        // A message processed before a crash, but not acknowledged, comes again: skip it.
        let (seen, messages) = split_processed(&self.ctx.turns.processed, taken);
        if !seen.is_empty() {
            let ids: Vec<MessageId> = seen.iter().map(|m| m.id).collect();
            tracing::debug!(agent = %self.id(), count = ids.len(), "skipping messages processed before a restart");
            bus.ack(&inbox, &ids).await?;
        }

        let messages = if status == AgentStatus::Failed {
            match self.handle_supervisor_orders(messages).await? {
                Orders::Over(outcome) => return Ok(outcome),
                Orders::Work(messages) => messages,
            }
        } else {
            messages
        };
        if messages.is_empty() && !self.wants_tick() {
            if cycle {
                self.ctx.metrics.get_mut().heartbeats_responded += 1;
                // Every answer is stored (rare here: the scheduler ran it for mail or work
                // that was gone by the time it looked).
                self.save_counts().await;
            }
            return Ok(HeartbeatOutcome::Idle);
        }
        let span =
            crate::otel::heartbeat(self.id(), self.ctx.config.layer, number, cycle, &messages);
        if span.is_disabled() {
            // Telemetry off: no wrapper around the turn at all.
            return self.work(number, cycle, messages).await;
        }
        self.work(number, cycle, messages).instrument(span).await
    }

    /// The rest of a turn that has work: `messages` (perhaps none, for a tick) are processed,
    /// the effects stored, the messages acknowledged.
    async fn work(
        &mut self,
        number: u64,
        cycle: bool,
        messages: Vec<Message>,
    ) -> Result<HeartbeatOutcome, AgentError> {
        let inbox = Address::Agent(self.id().clone());
        let bus = self.ctx.deps.bus.clone();
        if self.status() == AgentStatus::Idle {
            self.ctx.transition(AgentStatus::Working, working_reason(&messages)).await?;
        }

        // A panic in the layer is the crash of this one agent: see `recover_from_panic`.
        let result = match crate::fault::CatchPanic(Box::pin(self.process(&messages))).await {
            Ok(result) => result,
            Err(panic) => return self.recover_from_panic(panic, &messages).await,
        };
        match result {
            Ok(()) => {
                let ids: Vec<MessageId> = messages.iter().map(|m| m.id).collect();
                self.ctx.retries = 0;
                self.ctx.turns.panics = 0;
                self.ctx.metrics.get_mut().messages_processed += messages.len() as u64;
                self.ctx.metrics.set_last_active(self.ctx.now());
                self.ctx.remember(&ids);
                if cycle {
                    self.ctx.metrics.get_mut().heartbeats_responded += 1;
                    self.ctx
                        .send(
                            Address::System,
                            MessageKind::HeartbeatAck,
                            &HeartbeatAck { heartbeat: number },
                        )
                        .await?;
                }
                // The heartbeat's effects are stored before its messages are acknowledged.
                self.save().await?;
                bus.ack(&inbox, &ids).await?;
                if self.status() == AgentStatus::Working {
                    self.ctx.transition(AgentStatus::Idle, "work complete").await?;
                }
                Ok(HeartbeatOutcome::Processed { messages: messages.len() })
            }
            Err(error) => self.handle_error(error, &messages).await,
        }
    }

    /// Refuses the operator commands among `messages`, for an agent that takes none: each is
    /// audited as denied and answered with [`CommandOutcome::Refused`]. (The layer's turn
    /// sees them too, and leaves a kind it does not know alone.)
    async fn refuse_commands(&mut self, messages: &[Message]) -> Result<(), AgentError> {
        for message in messages.iter().filter(|m| m.kind == MessageKind::OperatorCommand) {
            let reason = format!(
                "agent `{}` takes no operator commands (only an OODA agent does)",
                self.id()
            );
            let action = format!("{} from {}", MessageKind::OperatorCommand, message.from);
            self.ctx.audit(AuditEvent::Denied { action, error: reason.clone() }).await?;
            let origin = CommandOrigin::of(message);
            self.ctx.answer_command(&origin, &CommandOutcome::Refused { reason }).await?;
        }
        Ok(())
    }

    /// The agent's state as saved after each heartbeat.
    pub fn record(&self) -> AgentRecord {
        AgentRecord {
            id: self.id().clone(),
            metrics: self.ctx.metrics.get(),
            retries: self.ctx.retries,
            heartbeat: self.ctx.heartbeat,
            processed: self.ctx.turns.processed.clone(),
            behavior: self.behavior.snapshot(),
            audit_head: None,
            parts: None,
        }
    }

    /// Saves [`record`](Self::record), anchored at the last audit record this agent appended.
    /// To a store that [keeps parts](StateStore::keeps_parts), only what changed since the
    /// last save: nothing if nothing did, else the record's fields and the layer state's
    /// changed parts (see [`parts`](crate::parts)).
    async fn save(&mut self) -> Result<(), AgentError> {
        let audit_head = self.ctx.deps.audit.head_of(self.id()).await?;
        let Some((record, next)) = self.record_to_save(audit_head) else { return Ok(()) };
        self.ctx.deps.state.clone().save_agent(&record).await?;
        self.saved(next);
        Ok(())
    }

    /// What [`save`](Self::save) writes, anchored at `audit_head`, and what the agent knows
    /// was saved once the store took it (`None` for a store that is handed records whole);
    /// `None` when nothing changed since the last save. Until [`saved`](Self::saved) is
    /// called, the agent counts on nothing being saved: a failed save may have written part.
    fn record_to_save(
        &mut self,
        audit_head: Option<AuditAnchor>,
    ) -> Option<(AgentRecord, Option<crate::parts::Saved>)> {
        let mut record = self.record();
        record.audit_head = audit_head;
        if !self.ctx.deps.state.keeps_parts() {
            return Some((record, None));
        }
        let head = (
            &record.metrics,
            record.retries,
            record.heartbeat,
            &record.processed,
            &record.audit_head,
        );
        let head = crate::parts::hash_bytes(&serde_json::to_vec(&head).unwrap_or_default());
        let plan = self.ctx.turns.saved.plan(head, &record.behavior)?;
        record.behavior = plan.behavior;
        record.parts = plan.parts;
        // Unknown until the store answers: a failed save may have written part of it.
        self.ctx.turns.saved = crate::parts::Saved::Unknown;
        Some((record, Some(plan.next)))
    }

    /// Notes that the record [`record_to_save`](Self::record_to_save) gave is stored.
    fn saved(&mut self, next: Option<crate::parts::Saved>) {
        if let Some(next) = next {
            self.ctx.turns.saved = next;
        }
    }

    /// Saves the record after a turn that changed only its counts (an idle answer, a retried
    /// failure), so that every heartbeat answer and miss is stored. A store that refuses it is
    /// logged, not the turn's failure: the counts are saved again with the next record.
    async fn save_counts(&mut self) {
        if let Err(e) = self.save().await {
            tracing::warn!(agent = %self.id(), error = %e, "cannot store the agent's heartbeat counts");
        }
    }

    /// Rebuilds an agent after a restart: its status from the audit log, the rest from its saved
    /// record. It registers again (idempotent) unless terminated; an agent that crashed while
    /// initializing is initialized again.
    pub async fn restore(
        config: AgentConfig,
        behavior: Box<dyn AgentBehavior>,
        deps: Arc<AgentDeps>,
        status: AgentStatus,
        record: Option<AgentRecord>,
    ) -> Result<Self, AgentError> {
        let mut agent =
            Self::new(config, behavior, deps).map_err(|e| AgentError::NotAllowed(e.to_string()))?;
        if status == AgentStatus::Initializing {
            agent.initialize().await?;
            return Ok(agent);
        }
        agent.ctx.status = status;
        if let Some(record) = record {
            agent.ctx.metrics = Metrics::from(record.metrics);
            agent.ctx.retries = record.retries;
            agent.ctx.heartbeat = record.heartbeat;
            if !record.processed.is_empty() {
                agent.ctx.turns.processed = record.processed;
            }
            agent.behavior.restore(record.behavior)?;
        }
        if status != AgentStatus::Terminated {
            let deps = agent.ctx.deps.clone();
            deps.bus.register(agent.id()).await?;
            deps.boards.create(agent.id(), agent.ctx.config.layer).await?;
        }
        tracing::info!(agent = %agent.id(), %status, "agent restored");
        Ok(agent)
    }

    async fn process(&mut self, messages: &[Message]) -> Result<(), AgentError> {
        crate::fault::panic_if_due(self.id());
        if !self.behavior.takes_commands() {
            self.refuse_commands(messages).await?;
        }
        let board = self.ctx.read_board(&BoardId::Agent(self.id().clone())).await?;
        let after_ms = self.ctx.config.timeout_ms;
        let timeout = Duration::from_millis(after_ms);
        // The turn's soft limit: told once (audited, the supervisor warned), the turn goes on.
        let mut soft_ms = agent_state::soft_limit(after_ms, self.ctx.deps.timeouts.turn_soft_ms);
        let soft_notice =
            (self.ctx.deps.clone(), self.id().clone(), self.ctx.config.supervisor.clone());
        let in_flight = self
            .ctx
            .turns
            .effect_in_flight
            .get_or_insert_with(|| Arc::new(AtomicUsize::new(0)))
            .clone();
        let finished = {
            // Time in untimed sections (a reasoning call waiting for a budget decision) does
            // not count against the turn.
            let (mut clock, work) = crate::offclock::Stopwatch::start(
                timeout,
                self.behavior.on_process(&mut self.ctx, messages, &board),
            );
            tokio::pin!(work);
            // Past the deadline while a side-effecting call runs: when to look again.
            let mut effect_poll: Option<tokio::time::Instant> = None;
            loop {
                let hard_at = clock.deadline();
                let deadline = hard_at.map(|d| effect_poll.map_or(d, |p| p.max(d)));
                // The soft deadline moves with the hard one (untimed sections do not count).
                let soft_at = soft_ms.zip(hard_at).map(|(soft, hard)| {
                    hard - Duration::from_millis(after_ms.saturating_sub(soft))
                });
                tokio::select! {
                    // In order: the work first, so a turn that ends at its deadline is kept
                    // (and a simulation does not depend on tokio's random branch choice).
                    biased;
                    result = &mut work => break Some(result),
                    () = clock.changed() => {}
                    () = crate::offclock::sleep_until_some(soft_at), if soft_ms.is_some() => {
                        let soft = crate::timed::SoftTimeout {
                            limit: agent_state::Limit::Turn,
                            what: "heartbeat turn".into(),
                            soft_ms: soft_ms.take().unwrap_or_default(),
                            hard_ms: after_ms,
                        };
                        let (deps, id, supervisor) = &soft_notice;
                        crate::timed::soft_timeout(deps, id, supervisor.as_ref(), soft).await;
                    }
                    () = crate::offclock::sleep_until_some(deadline) => {
                        // A side-effecting call is never cut short: its outcome must be
                        // recorded. It is bounded by its own timeout (at most the tool limit);
                        // the heartbeat's applies once it is over.
                        if in_flight.load(Ordering::SeqCst) == 0 {
                            break None;
                        }
                        effect_poll = Some(tokio::time::Instant::now() + EFFECT_POLL);
                    }
                }
            }
        };
        if let Some(result) = finished {
            return result;
        }
        self.ctx
            .audit(AuditEvent::TimedOut {
                limit: agent_state::Limit::Turn,
                what: "heartbeat turn".into(),
                limit_ms: after_ms,
            })
            .await?;
        Err(AgentError::Timeout { after_ms })
    }

    /// A failed agent only listens to its supervisor: a new assignment brings it back to
    /// working (failed → working, "reassigned by supervisor"), a dismissal terminates it.
    /// Every request it cannot serve — `speak_to_agent` and peer help (`peer_help_request`),
    /// a `status_query` — is refused at once with [`failed_refusal`](crate::protocol::failed_refusal),
    /// audited as `Denied`, so that nobody waits for an answer that cannot come. Other mail is
    /// held (taken, neither acknowledged nor released, so it does not wake the agent again)
    /// until new work brings it back: then it is processed with the orders, in order.
    async fn handle_supervisor_orders(
        &mut self,
        messages: Vec<Message>,
    ) -> Result<Orders, AgentError> {
        let inbox = Address::Agent(self.id().clone());
        let bus = self.ctx.deps.bus.clone();
        let supervisor = self.ctx.config.supervisor.clone().map(Address::Agent);
        let is_order =
            |m: &Message| m.kind == MessageKind::TaskAssign && Some(&m.from) == supervisor.as_ref();
        let orders: Vec<Option<agent_state::Assignment>> = messages
            .iter()
            .filter(|m| is_order(m))
            .map(|m| payload::<agent_state::Assignment>(m).ok())
            .collect();
        if orders.is_empty() {
            self.refuse_requests(&messages).await?;
            return Ok(Orders::Over(HeartbeatOutcome::Skipped { status: AgentStatus::Failed }));
        }
        // A dismissal anywhere in the batch wins over new work in the same batch.
        let dismissal = orders.iter().find_map(|a| match a {
            Some(agent_state::Assignment::Dismiss { reason }) => Some(reason.clone()),
            _ => None,
        });
        if let Some(reason) = dismissal {
            let ids: Vec<MessageId> = messages.iter().map(|m| m.id).collect();
            self.ctx.remember(&ids);
            self.ctx
                .transition(AgentStatus::Terminated, format!("dismissed by supervisor: {reason}"))
                .await?;
            self.save().await?;
            bus.ack(&inbox, &ids).await?;
            // The mail it held goes back to its inbox, as before it failed.
            bus.release(&inbox).await?;
            bus.unregister(self.id()).await?;
            return Ok(Orders::Over(HeartbeatOutcome::Skipped { status: AgentStatus::Terminated }));
        }
        self.ctx.retries = 0;
        self.ctx.turns.retry_due = None;
        self.ctx.transition(AgentStatus::Working, "reassigned by supervisor").await?;
        // The mail held while it was failed comes first, then this batch, in order.
        bus.release(&inbox).await?;
        let taken = bus.take(&inbox, MAX_MESSAGES_PER_HEARTBEAT).await?;
        let (seen, messages) = split_processed(&self.ctx.turns.processed, taken);
        if !seen.is_empty() {
            let ids: Vec<MessageId> = seen.iter().map(|m| m.id).collect();
            bus.ack(&inbox, &ids).await?;
        }
        Ok(Orders::Work(messages))
    }

    /// A failed agent's answers to the requests among `messages` (see
    /// [`handle_supervisor_orders`](Self::handle_supervisor_orders)): each refused and
    /// acknowledged; the rest stays held.
    async fn refuse_requests(&mut self, messages: &[Message]) -> Result<(), AgentError> {
        let inbox = Address::Agent(self.id().clone());
        let reason = crate::protocol::failed_refusal(self.id());
        let mut answered = Vec::new();
        for message in messages {
            let sent = match message.kind {
                MessageKind::PeerHelpRequest => {
                    let refused = crate::protocol::HelpResponse::Refused { reason: reason.clone() };
                    self.ctx.reply(message, MessageKind::PeerHelpResponse, &refused).await
                }
                MessageKind::StatusQuery => {
                    let refused = crate::protocol::StatusReport::Refused { reason: reason.clone() };
                    self.ctx.reply(message, MessageKind::StatusReport, &refused).await
                }
                _ => continue,
            };
            if let Err(e) = sent {
                // Its requester's limit ends the wait then; the failed agent stays as it is.
                tracing::warn!(agent = %self.id(), error = %e, "cannot refuse a request while failed");
                continue;
            }
            self.ctx
                .audit(AuditEvent::Denied {
                    action: format!("{} from {}", message.kind, message.from),
                    error: reason.clone(),
                })
                .await?;
            answered.push(message.id);
        }
        if !answered.is_empty() {
            self.ctx.remember(&answered);
            self.save().await?;
            self.ctx.deps.bus.ack(&inbox, &answered).await?;
            tracing::debug!(agent = %self.id(), count = answered.len(), "requests refused: the agent has failed");
        }
        Ok(())
    }

    /// A failed turn, as [`agent_state::plan_retry`] says: a
    /// transient failure with retries left is retried at a later heartbeat (1, 2, 4
    /// heartbeats after this one, capped), its messages back in the inbox and no turn taken
    /// before then; a permanent one, or one past `max_retries`, fails the agent and reports
    /// to its supervisor. Either way audited: the error ([`AuditEvent::Error`]), then the
    /// attempt, the failure's class and when the next attempt is due ([`AuditEvent::Retry`]).
    async fn handle_error(
        &mut self,
        error: AgentError,
        messages: &[Message],
    ) -> Result<HeartbeatOutcome, AgentError> {
        let inbox = Address::Agent(self.id().clone());
        let bus = self.ctx.deps.bus.clone();
        let max = self.ctx.config.max_retries;
        let text = error.to_string();
        let class = error.class();
        let heartbeat = self.ctx.heartbeat;
        let attempt = self.ctx.retries.saturating_add(1);
        self.ctx.metrics.get_mut().heartbeats_missed += 1;
        let plan = agent_state::plan_retry(class, self.ctx.retries, max, heartbeat);
        if let agent_state::RetryPlan::Retry { retry, wait_beats, due } = plan {
            self.ctx.retries = retry;
            self.ctx.metrics.get_mut().retries += 1;
            self.ctx.turns.retry_due = Some(due);
            crate::otel::retry(self.id(), self.ctx.config.layer, retry);
            self.ctx
                .audit(AuditEvent::Error { error: text.clone(), retry, max_retries: max })
                .await?;
            self.ctx
                .audit(AuditEvent::Retry {
                    attempt,
                    max_retries: max,
                    class,
                    heartbeat,
                    wait_beats: Some(wait_beats),
                    due_heartbeat: Some(due),
                })
                .await?;
            // The missed heartbeat and the retry are stored (the messages come again).
            self.save_counts().await;
            bus.release(&inbox).await?;
            tracing::info!(agent = %self.id(), retry, max, wait_beats, due, error = %text, "heartbeat failed, will retry");
            return Ok(HeartbeatOutcome::Retrying { retry, error: text });
        }
        self.ctx.turns.retry_due = None;
        self.ctx
            .audit(AuditEvent::Error {
                error: text.clone(),
                retry: self.ctx.retries,
                max_retries: max,
            })
            .await?;
        self.ctx
            .audit(AuditEvent::Retry {
                attempt,
                max_retries: max,
                class,
                heartbeat,
                wait_beats: None,
                due_heartbeat: None,
            })
            .await?;
        let reason = if class == ErrorClass::Permanent {
            format!("permanent error: {text}")
        } else {
            format!("retry limit exceeded: {text}")
        };
        self.fail_and_report(&reason, text, messages).await
    }

    /// Fails the agent with `reason` and reports `error` to its supervisor (`system` for a
    /// top power) with the work it abandons; `messages`, the turn's, are consumed by the
    /// report: acknowledged and remembered, so a reassigned agent does not redo them.
    async fn fail_and_report(
        &mut self,
        reason: &str,
        error: String,
        messages: &[Message],
    ) -> Result<HeartbeatOutcome, AgentError> {
        self.fail(reason).await?;
        self.ctx.metrics.get_mut().tasks_failed += 1;
        let report = ErrorReport {
            error: error.clone(),
            work: self.behavior.abandon_work(),
            metrics: self.ctx.metrics.get(),
        };
        let to = self.ctx.config.supervisor.clone().map_or(Address::System, Address::Agent);
        if let Err(e) = self.ctx.send(to, MessageKind::ErrorReport, &report).await {
            tracing::warn!(agent = %self.id(), error = %e, "could not send error report");
        }
        let ids: Vec<MessageId> = messages.iter().map(|m| m.id).collect();
        self.ctx.remember(&ids);
        self.save().await?;
        self.ctx.deps.bus.ack(&Address::Agent(self.id().clone()), &ids).await?;
        tracing::warn!(agent = %self.id(), error = %error, "agent failed");
        Ok(HeartbeatOutcome::Failed { error })
    }

    /// Walks to `failed` along allowed edges from wherever the agent is.
    async fn fail(&mut self, reason: &str) -> Result<(), AgentError> {
        loop {
            let next = match self.status() {
                AgentStatus::Failed | AgentStatus::Terminated | AgentStatus::ShuttingDown => {
                    return Ok(());
                }
                AgentStatus::Initializing | AgentStatus::Working | AgentStatus::Blocked => {
                    AgentStatus::Failed
                }
                AgentStatus::Idle => AgentStatus::Working,
                AgentStatus::WaitingApproval => AgentStatus::Blocked,
            };
            self.ctx.transition(next, reason.to_owned()).await?;
        }
    }

    /// Shuts down: back to idle if working, shutting_down, the layer's
    /// clean-up, unregister, terminated. A failed agent is dismissed (failed → terminated).
    pub async fn shutdown(&mut self) -> Result<(), AgentError> {
        loop {
            match self.status() {
                AgentStatus::Terminated => return Ok(()),
                AgentStatus::Idle => break,
                AgentStatus::Working | AgentStatus::WaitingApproval => {
                    self.ctx.transition(AgentStatus::Idle, "stopping work for shutdown").await?;
                }
                AgentStatus::Initializing | AgentStatus::Blocked => {
                    self.ctx
                        .transition(AgentStatus::Failed, "shutdown before work could finish")
                        .await?;
                }
                AgentStatus::Failed => {
                    self.ctx.transition(AgentStatus::Terminated, "dismissed at shutdown").await?;
                    self.unregister_quietly().await;
                    // Saved once more so that its record anchors its last audit record.
                    return self.save().await;
                }
                AgentStatus::ShuttingDown => break,
            }
        }
        if self.status() == AgentStatus::Idle {
            self.ctx.transition(AgentStatus::ShuttingDown, "shutdown requested").await?;
        }
        if let Err(e) = self.behavior.on_shutdown(&mut self.ctx).await {
            tracing::warn!(agent = %self.id(), error = %e, "clean-up failed during shutdown");
        }
        self.read_late_notices().await;
        self.unregister_quietly().await;
        self.ctx.transition(AgentStatus::Terminated, "shutdown complete").await?;
        // Saved once more so that its record anchors its last audit record.
        self.save().await
    }

    /// Shuts several agents down together, each as [`shutdown`](Self::shutdown) would, and
    /// answers each one's result, in order.
    ///
    /// The agents that are idle or already shutting down, and share the first agent's audit
    /// log, state store and bus, go through each step of a shutdown together, the durable
    /// writes of a step for all of them as one call (one commit on a durable backend) before
    /// the next step starts: their `shutting_down` transitions
    /// ([`AuditLog::append_many`]); then, one agent after the other, the layer's clean-up
    /// ([`AgentBehavior::on_shutdown`]) and the late notices; their unregistrations
    /// ([`MessageBus::unregister_many`]); their `terminated` transitions; and their records,
    /// each anchored at its `terminated` record ([`StateStore::save_agents`]). So whatever a
    /// crash interrupts, each agent is left where a crash in its own `shutdown` could leave
    /// it, and a resumed run goes on from there. The other agents (working, failed, ...) are
    /// shut down one at a time with `shutdown`.
    ///
    /// A step that fails for the batch (a backend error) is each of its agents' error, and
    /// those agents go no further, as `shutdown` stops at its first error; the other agents'
    /// results are their own.
    pub async fn shutdown_many(agents: &mut [&mut Agent]) -> Vec<Result<(), AgentError>> {
        let mut results: Vec<Option<Result<(), AgentError>>> =
            agents.iter().map(|_| None).collect();
        let Some(deps) = agents.first().map(|a| a.ctx.deps.clone()) else { return Vec::new() };
        let mut batch = Vec::with_capacity(agents.len());
        for (i, agent) in agents.iter_mut().enumerate() {
            let shares = Arc::ptr_eq(&agent.ctx.deps.audit, &deps.audit)
                && Arc::ptr_eq(&agent.ctx.deps.state, &deps.state)
                && Arc::ptr_eq(&agent.ctx.deps.bus, &deps.bus);
            if shares && matches!(agent.status(), AgentStatus::Idle | AgentStatus::ShuttingDown) {
                batch.push(i);
            } else if let Some(result) = results.get_mut(i) {
                *result = Some(agent.shutdown().await);
            }
        }

        let idle: Vec<usize> =
            batch.iter().copied().filter(|&i| agents[i].status() == AgentStatus::Idle).collect();
        Self::transition_all(
            agents,
            &mut results,
            &idle,
            AgentStatus::ShuttingDown,
            "shutdown requested",
            &deps.audit,
        )
        .await;
        batch.retain(|&i| results[i].is_none());
        Self::clean_up_all(agents, &batch, &deps.bus).await;
        let heads = Self::transition_all(
            agents,
            &mut results,
            &batch,
            AgentStatus::Terminated,
            "shutdown complete",
            &deps.audit,
        )
        .await;
        Self::save_all(agents, &mut results, heads, &deps.state).await;
        results.into_iter().map(|r| r.unwrap_or(Ok(()))).collect()
    }

    /// The middle of [`shutdown_many`](Self::shutdown_many) for the agents at `which`: each
    /// one's clean-up and late notices, then their unregistrations in one call (whose failure
    /// is logged, as [`shutdown`](Self::shutdown) logs it).
    async fn clean_up_all(agents: &mut [&mut Agent], which: &[usize], bus: &Arc<dyn MessageBus>) {
        for &i in which {
            let agent = &mut *agents[i];
            if let Err(e) = agent.behavior.on_shutdown(&mut agent.ctx).await {
                tracing::warn!(agent = %agent.id(), error = %e, "clean-up failed during shutdown");
            }
            agent.read_late_notices().await;
        }
        let ids: Vec<AgentId> = which.iter().map(|&i| agents[i].id().clone()).collect();
        match bus.unregister_many(&ids).await {
            Ok(unregistered) => {
                for (id, _) in ids.iter().zip(unregistered).filter(|(_, done)| !done) {
                    tracing::debug!(agent = %id, "unregister at shutdown: not registered");
                }
            }
            Err(e) => {
                tracing::debug!(agents = ids.len(), error = %e, "unregister at shutdown");
            }
        }
    }

    /// The end of [`shutdown_many`](Self::shutdown_many): the records of the agents in `heads`
    /// saved in one call, each anchored at its agent's last audit record; each agent's result
    /// set in `results`.
    async fn save_all(
        agents: &mut [&mut Agent],
        results: &mut [Option<Result<(), AgentError>>],
        heads: Vec<(usize, AuditAnchor)>,
        state: &Arc<dyn StateStore>,
    ) {
        let mut saving = Vec::with_capacity(heads.len());
        let mut records = Vec::with_capacity(heads.len());
        for (i, head) in heads {
            if let Some((record, next)) = agents[i].record_to_save(Some(head)) {
                saving.push((i, next));
                records.push(record);
            } else if let Some(result) = results.get_mut(i) {
                *result = Some(Ok(()));
            }
        }
        let saved = state.save_agents(&records).await;
        for (i, next) in saving {
            let result = match &saved {
                Ok(()) => {
                    agents[i].saved(next);
                    Ok(())
                }
                Err(e) => Err(AgentError::Backend(share_error(e))),
            };
            if let Some(slot) = results.get_mut(i) {
                *slot = Some(result);
            }
        }
    }

    /// Moves the agents at `which` to `to` with one [`AuditLog::append_many`]; an agent the
    /// move is refused to, or all of them when the append fails, get their error in
    /// `results`. Answers, for each agent moved, its index and its new last audit record.
    async fn transition_all(
        agents: &mut [&mut Agent],
        results: &mut [Option<Result<(), AgentError>>],
        which: &[usize],
        to: AgentStatus,
        reason: &'static str,
        audit: &Arc<dyn AuditLog>,
    ) -> Vec<(usize, AuditAnchor)> {
        let mut moving = Vec::with_capacity(which.len());
        let mut entries = Vec::with_capacity(which.len());
        for &i in which {
            match agents[i].ctx.transition_entry(to, reason) {
                Ok(entry) => {
                    moving.push(i);
                    entries.push(entry);
                }
                Err(e) => results[i] = Some(Err(e.into())),
            }
        }
        if entries.is_empty() {
            return Vec::new();
        }
        match audit.append_many(entries).await {
            Ok(records) => moving
                .into_iter()
                .zip(records)
                .map(|(i, record)| {
                    agents[i].ctx.transitioned(&record);
                    (i, AuditAnchor::of(&record))
                })
                .collect(),
            Err(e) => {
                for i in moving {
                    results[i] = Some(Err(AgentError::Backend(share_error(&e))));
                }
                Vec::new()
            }
        }
    }

    /// Acknowledges the messages still in the inbox at shutdown that ask for nothing and that
    /// no layer acts on: the runtime's warnings (a missed heartbeat of a subordinate, sent by
    /// the scheduler's last cycle as the run closed; the scheduler has stopped, so none comes
    /// after) and another lead's `peer_coordination_response` (its acknowledgement of a note,
    /// sent from its own last turn while this agent was shutting down). Every other message is
    /// put back, unacknowledged, for a run that resumes.
    async fn read_late_notices(&self) {
        let bus = &self.ctx.deps.bus;
        let inbox = Address::Agent(self.id().clone());
        let taken = match bus.take(&inbox, usize::MAX).await {
            Ok(taken) => taken,
            Err(e) => {
                tracing::debug!(agent = %self.id(), error = %e, "reading the inbox at shutdown");
                return;
            }
        };
        let notices: Vec<MessageId> = taken
            .iter()
            .filter(|m| {
                (m.kind == MessageKind::Warning && m.from == Address::System)
                    || m.kind == MessageKind::PeerCoordinationResponse
            })
            .map(|m| m.id)
            .collect();
        if !notices.is_empty() {
            if let Err(e) = bus.ack(&inbox, &notices).await {
                tracing::debug!(agent = %self.id(), error = %e, "acknowledging notices at shutdown");
            }
            tracing::debug!(agent = %self.id(), count = notices.len(), "late notices read at shutdown");
        }
        if let Err(e) = bus.release(&inbox).await {
            tracing::debug!(agent = %self.id(), error = %e, "releasing the inbox at shutdown");
        }
    }

    async fn unregister_quietly(&self) {
        if let Err(e) = self.ctx.deps.bus.unregister(self.id()).await {
            tracing::debug!(agent = %self.id(), error = %e, "unregister at shutdown");
        }
    }
}

/// Splits `taken` into the messages among `processed` (processed before a crash, not yet
/// acknowledged) and the rest, each in order. `processed` holds the last turn's ids (up to
/// [`MAX_MESSAGES_PER_HEARTBEAT`]): looked up in a set when it is long, so a full turn costs
/// time in its messages, not in their square. When none of `taken` was processed (every turn
/// but the first after a crash), `taken` is returned as it is, without moving a message.
fn split_processed(processed: &[MessageId], taken: Vec<Message>) -> (Vec<Message>, Vec<Message>) {
    /// Up to this many ids, a scan is cheaper than building a set.
    const SCAN: usize = 8;
    if processed.is_empty() {
        return (Vec::new(), taken);
    }
    if processed.len() <= SCAN {
        return split_where(taken, |id| processed.contains(id));
    }
    // Fx: the set holds at most one turn's ids, so even crafted ids cannot make it slow.
    let set: std::collections::HashSet<&MessageId, rustc_hash::FxBuildHasher> =
        processed.iter().collect();
    split_where(taken, |id| set.contains(id))
}

/// `taken` split into the messages whose id is `seen` and the rest, each in order.
fn split_where(
    taken: Vec<Message>,
    seen: impl Fn(&MessageId) -> bool,
) -> (Vec<Message>, Vec<Message>) {
    if !taken.iter().any(|m| seen(&m.id)) {
        return (Vec::new(), taken);
    }
    taken.into_iter().partition(|m| seen(&m.id))
}

/// A copy of `error` for each agent of a batch it failed: its backend, and its message with
/// its sources.
fn share_error(error: &agent_state::BackendError) -> agent_state::BackendError {
    let mut message = error.message.clone();
    let mut source = std::error::Error::source(error);
    while let Some(e) = source {
        message.push_str(": ");
        message.push_str(&e.to_string());
        source = e.source();
    }
    agent_state::BackendError::new(error.backend, message)
}

/// Whether `error` comes from a run store that refused a sync (`run_store::StoreFailed`): it
/// refuses every later write, so waiting for it is waiting forever.
fn store_refuses_writes(error: &agent_state::BackendError) -> bool {
    #[cfg(feature = "sled")]
    {
        run_store::StoreFailed::is_cause_of(error)
    }
    #[cfg(not(feature = "sled"))]
    {
        let _ = error;
        false
    }
}

/// How long a call's outcome waits for the state store to take it.
pub(crate) const OUTCOME_PATIENCE: Duration = Duration::from_secs(60);

/// Stores a side effect's outcome with `write`, waiting out a state store that fails for a
/// while (a restarting server, a lost connection): the effect has run, and until stored its
/// outcome is only in memory, so giving up at once would leave the call to be recovered as
/// interrupted. Tries again after 100 ms, doubling up to 2 s, for up to [`OUTCOME_PATIENCE`]
/// (on tokio's clock), then returns the last error; at once for a run store that failed (a
/// full disk: see [`store_refuses_writes`]), which never takes a write again.
pub(crate) async fn store_outcome<F, Fut>(
    key: &str,
    mut write: F,
) -> Result<(), agent_state::BackendError>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<(), agent_state::BackendError>>,
{
    let started = tokio::time::Instant::now();
    let mut pause = Duration::from_millis(100);
    loop {
        match write().await {
            Ok(()) => return Ok(()),
            // A run store that refused a sync refuses every later write: no point waiting.
            Err(error)
                if started.elapsed() + pause <= OUTCOME_PATIENCE
                    && !store_refuses_writes(&error) =>
            {
                tracing::warn!(key, error = %error, retry_in_ms = pause.as_millis() as u64, "cannot store a call's outcome; trying again");
                tokio::time::sleep(pause).await;
                pause = (pause * 2).min(Duration::from_secs(2));
            }
            Err(error) => return Err(error),
        }
    }
}

impl Agent {
    /// A turn that panicked while processing `messages`, handled as the crash of this one
    /// agent (every fault ends in a typed outcome). Audited as
    /// [`AuditEvent::AgentPanicked`]. Below [`MAX_PANICS`] panics in a row, the agent is
    /// reloaded from its stored record as a resumed run reloads it (its layer's state, its
    /// processed messages and counts: what the panicking turn changed in memory is dropped) and
    /// `messages` go back to its inbox for the next turn, whose journaled tool calls are not run
    /// again ([`HeartbeatOutcome::Retrying`]). At the limit it fails with reason
    /// `panicked: <message>` and reports to its supervisor with the work it abandons, as a turn
    /// past its retries does ([`HeartbeatOutcome::Failed`]).
    pub async fn recover_from_panic(
        &mut self,
        panic: String,
        messages: &[Message],
    ) -> Result<HeartbeatOutcome, AgentError> {
        self.ctx.turns.panics = self.ctx.turns.panics.saturating_add(1);
        let count = self.ctx.turns.panics;
        let failed = count >= MAX_PANICS;
        tracing::error!(agent = %self.id(), panic = %panic, count, failed, "a heartbeat turn panicked");
        let inbox = Address::Agent(self.id().clone());
        let bus = self.ctx.deps.bus.clone();
        self.ctx.turns.effect_in_flight = None;
        self.ctx.turns.retry_due = None;
        let record = self.ctx.deps.state.agents().await?.into_iter().find(|r| r.id == *self.id());
        if let Some(record) = record {
            self.ctx.metrics = Metrics::from(record.metrics);
            self.ctx.retries = record.retries;
            self.ctx.heartbeat = self.ctx.heartbeat.max(record.heartbeat);
            self.ctx.turns.processed = record.processed;
            self.behavior.restore(record.behavior)?;
        }
        self.ctx.metrics.get_mut().heartbeats_missed += 1;
        self.ctx.audit(AuditEvent::AgentPanicked { message: panic.clone(), count, failed }).await?;
        if !failed {
            self.save_counts().await;
            bus.release(&inbox).await?;
            return Ok(HeartbeatOutcome::Retrying {
                retry: count,
                error: format!("panicked: {panic}"),
            });
        }
        let reason = format!("panicked: {panic}");
        self.fail_and_report(&reason, reason.clone(), messages).await
    }
}

#[cfg(test)]
mod split_tests {
    use super::*;

    fn message(n: u128) -> Message {
        Message::new(
            MessageId::from_u128(n),
            Address::System,
            AgentId::new("a"),
            MessageKind::StatusQuery,
            serde_json::Value::Null,
            Timestamp(0),
        )
    }

    fn ids(messages: &[Message]) -> Vec<u128> {
        messages.iter().map(|m| m.id.as_uuid().as_u128()).collect()
    }

    /// The seen and the new keep their order, whether the last turn's ids are scanned (few)
    /// or looked up in a set (many).
    #[test]
    fn split_processed_keeps_the_order_of_both_sides() {
        for last_turn in [0_u128, 3, 8, 9, 256] {
            let processed: Vec<MessageId> = (0..last_turn).map(MessageId::from_u128).collect();
            let taken: Vec<Message> = (0..300).rev().map(message).collect();
            let (seen, new) = split_processed(&processed, taken);
            assert_eq!(ids(&seen), (0..last_turn).rev().collect::<Vec<_>>(), "{last_turn}");
            assert_eq!(ids(&new), (last_turn..300).rev().collect::<Vec<_>>(), "{last_turn}");
        }
    }

    /// A turn whose mail holds none of the last turn's ids (every turn but the first after a
    /// crash) gets all of it back, in order.
    #[test]
    fn split_processed_gives_back_mail_it_never_saw() {
        for last_turn in [3_u128, 9, 256] {
            let processed: Vec<MessageId> =
                (1_000..1_000 + last_turn).map(MessageId::from_u128).collect();
            let taken: Vec<Message> = (0..50).rev().map(message).collect();
            let (seen, new) = split_processed(&processed, taken);
            assert!(seen.is_empty(), "{last_turn}");
            assert_eq!(ids(&new), (0..50).rev().collect::<Vec<_>>(), "{last_turn}");
        }
    }
}
