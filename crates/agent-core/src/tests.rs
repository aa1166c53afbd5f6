//! Unit tests of the agent runtime: lifecycle, heartbeat, retries and failure, the context's
//! audited acts, the transition-chain check and the rule-based reasoner, on in-memory services
//! and paused tokio time.
#![allow(clippy::unwrap_used, clippy::expect_used, reason = "tests")]

mod anchors;
mod blob;
mod capability;
mod context;
mod events;
mod heartbeat;
mod lifecycle;
mod once;
mod parts;
mod reasoner;
mod state_store;
mod timeouts;

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use agent_state::{
    Address, AgentConfig, AgentId, AgentLayer, AgentStatus, BackendError, BoardId, BoardSnapshot,
    Message, MessageId, MessageKind, PlanStep, StepTarget, Subtask, Timestamp,
};
use async_trait::async_trait;
use governance::InMemoryGovernance;
use message_bus::{InMemoryBus, MessageBus};
use tempfile::TempDir;
use whiteboard::InMemoryWhiteboard;

use crate::tools::{ToolContext, ToolRegistry};
use crate::{
    Agent, AgentBehavior, AgentContext, AgentDeps, AgentError, AuditEvent, AuditLog,
    InMemoryAuditLog, InMemoryStateStore, Reasoner, RuleBasedReasoner, TokioClock, new_message_id,
};

/// Where every test clock starts.
const START: Timestamp = Timestamp(1_700_000_000_000);
/// The agent under test in most tests: a bottom executor.
const ME: &str = "bottom-1";
/// Its supervisor, present only as an inbox.
const SUPERVISOR: &str = "mid-1";
/// The responsibilities of [`TestBehavior`].
const RESPONSIBILITIES: &str = "- Run the scripted steps\n- Report what happened";

fn id(s: &str) -> AgentId {
    AgentId::new(s)
}

fn inbox(s: &str) -> Address {
    Address::Agent(id(s))
}

/// A bottom executor under [`SUPERVISOR`] with two retries.
fn bottom_config() -> AgentConfig {
    AgentConfig::new(ME, "Executor One", AgentLayer::Bottom)
        .with_role("executor")
        .with_supervisor(SUPERVISOR)
        .with_max_retries(2)
}

/// A top power, which has no supervisor.
fn top_config(agent: &str) -> AgentConfig {
    AgentConfig::new(agent, "Power A", AgentLayer::Top).with_role("governance").with_max_retries(2)
}

fn subtask(step: &str) -> Subtask {
    Subtask {
        task_id: "task-1".into(),
        step: PlanStep::scripted(
            step,
            format!("do {step}"),
            StepTarget::Any,
            "write_file",
            serde_json::json!({"path": "a.txt", "content": "a"}),
        ),
        assignee: id(ME),
        attempt: 1,
    }
}

/// In-memory services for one test, with the supervisor's inbox open.
struct Services {
    bus: Arc<InMemoryBus>,
    boards: Arc<InMemoryWhiteboard>,
    governance: Arc<InMemoryGovernance>,
    audit: Arc<InMemoryAuditLog>,
    deps: Arc<AgentDeps>,
    _workspace: TempDir,
}

impl Services {
    async fn new() -> Self {
        Self::with_reasoner(RuleBasedReasoner::new()).await
    }

    async fn with_reasoner(reasoner: impl Reasoner) -> Self {
        let workspace = tempfile::tempdir().unwrap();
        let bus = Arc::new(InMemoryBus::new());
        let boards = Arc::new(InMemoryWhiteboard::new());
        let governance = Arc::new(InMemoryGovernance::new());
        let audit = Arc::new(InMemoryAuditLog::new());
        let deps = Arc::new(AgentDeps {
            bus: bus.clone(),
            boards: boards.clone(),
            governance: governance.clone(),
            audit: audit.clone(),
            reasoner: Arc::new(reasoner),
            tools: Arc::new(ToolRegistry::with_builtins()),
            workspace: Arc::new(ToolContext::new(workspace.path()).unwrap()),
            clock: Arc::new(TokioClock::starting_at(START)),
            state: Arc::new(InMemoryStateStore::new()),
            spawner: None,
            timeouts: Default::default(),
        });
        bus.register(&id(SUPERVISOR)).await.unwrap();
        Self { bus, boards, governance, audit, deps, _workspace: workspace }
    }

    fn agent(&self, config: AgentConfig, probe: &Probe) -> Agent {
        Agent::new(config, Box::new(TestBehavior(probe.clone())), self.deps.clone()).unwrap()
    }

    /// An initialized bottom executor.
    async fn ready(&self, probe: &Probe) -> Agent {
        let mut agent = self.agent(bottom_config(), probe);
        agent.initialize().await.unwrap();
        agent
    }

    fn now(&self) -> Timestamp {
        self.deps.clock.now()
    }

    /// Puts a message into `to`'s inbox and returns its id.
    async fn send(
        &self,
        from: Address,
        to: &str,
        kind: MessageKind,
        content: serde_json::Value,
    ) -> MessageId {
        let id = new_message_id();
        self.bus.send(Message::new(id, from, inbox(to), kind, content, self.now())).await.unwrap();
        id
    }

    /// Takes and acknowledges everything in `inbox`.
    async fn drain(&self, inbox: &Address) -> Vec<Message> {
        let messages = self.bus.take(inbox, usize::MAX).await.unwrap();
        let ids: Vec<MessageId> = messages.iter().map(|m| m.id).collect();
        self.bus.ack(inbox, &ids).await.unwrap();
        messages
    }

    async fn events(&self, agent: &str) -> Vec<AuditEvent> {
        self.audit.records(Some(&id(agent))).await.unwrap().into_iter().map(|r| r.event).collect()
    }

    /// `agent`'s transitions as (from, to, reason).
    async fn transitions(&self, agent: &str) -> Vec<(AgentStatus, AgentStatus, String)> {
        self.events(agent)
            .await
            .into_iter()
            .filter_map(|e| match e {
                AuditEvent::Transition { from, to, reason } => {
                    Some((from, to, reason.into_owned()))
                }
                _ => None,
            })
            .collect()
    }

    /// `agent`'s transitions as (from, to) edges.
    async fn edges(&self, agent: &str) -> Vec<(AgentStatus, AgentStatus)> {
        self.transitions(agent).await.into_iter().map(|(from, to, _)| (from, to)).collect()
    }

    /// `agent`'s audited errors as (error, retry, max_retries).
    async fn errors(&self, agent: &str) -> Vec<(String, u32, u32)> {
        self.events(agent)
            .await
            .into_iter()
            .filter_map(|e| match e {
                AuditEvent::Error { error, retry, max_retries } => {
                    Some((error, retry, max_retries))
                }
                _ => None,
            })
            .collect()
    }

    /// `agent`'s audited refusals as (action, error).
    async fn denied(&self, agent: &str) -> Vec<(String, String)> {
        self.events(agent)
            .await
            .into_iter()
            .filter_map(|e| match e {
                AuditEvent::Denied { action, error } => Some((action, error)),
                _ => None,
            })
            .collect()
    }

    /// The final status of every agent, after checking the whole log's transition chain.
    async fn chain(&self) -> Vec<(AgentId, AgentStatus)> {
        crate::check_transition_chain(&self.audit.records(None).await.unwrap()).unwrap()
    }
}

/// What [`TestBehavior`] does on one `on_process` call.
#[derive(Clone, Copy, Debug)]
enum Step {
    /// A transient error (a backend hiccup): retried.
    Transient,
    /// A permanent error (a refusal): fails at once.
    Permanent,
    /// Sleeps this long, then succeeds.
    Sleep(Duration),
}

/// What `on_initialize` saw.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct InitSeen {
    registered: bool,
    board_version: Option<u64>,
    status: AgentStatus,
}

/// One `on_process` call.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Call {
    messages: Vec<MessageId>,
    board: BoardId,
}

/// The script a [`TestBehavior`] follows, and what it observed.
#[derive(Default)]
struct Script {
    fail_initialize: bool,
    /// What successive `on_process` calls do; once empty, they succeed.
    steps: VecDeque<Step>,
    wants_tick: bool,
    abandon: Option<Subtask>,
    init_seen: Option<InitSeen>,
    calls: Vec<Call>,
    shutdowns: u32,
}

/// A handle the test keeps on the behaviour's script.
#[derive(Clone, Default)]
struct Probe(Arc<Mutex<Script>>);

impl Probe {
    fn with<R>(&self, f: impl FnOnce(&mut Script) -> R) -> R {
        f(&mut self.0.lock().unwrap())
    }

    fn steps(&self, steps: impl IntoIterator<Item = Step>) {
        self.with(|s| s.steps.extend(steps));
    }

    fn calls(&self) -> Vec<Call> {
        self.with(|s| s.calls.clone())
    }
}

/// A layer whose behaviour the test scripts.
struct TestBehavior(Probe);

fn transient() -> AgentError {
    AgentError::Backend(BackendError::new("test", "store briefly unreachable"))
}

fn permanent() -> AgentError {
    AgentError::NotAllowed("the configuration forbids this".into())
}

#[async_trait]
impl AgentBehavior for TestBehavior {
    fn responsibilities(&self) -> &'static str {
        RESPONSIBILITIES
    }

    async fn on_initialize(&mut self, ctx: &mut AgentContext) -> Result<(), AgentError> {
        let registered = ctx.deps().bus.is_registered(ctx.id()).await.unwrap();
        let board = ctx.read_board(&BoardId::Agent(ctx.id().clone())).await.ok();
        let seen =
            InitSeen { registered, board_version: board.map(|b| b.version), status: ctx.status() };
        let fail = self.0.with(|s| {
            s.init_seen = Some(seen);
            s.fail_initialize
        });
        if fail { Err(transient()) } else { Ok(()) }
    }

    async fn on_process(
        &mut self,
        _ctx: &mut AgentContext,
        messages: &[Message],
        board: &BoardSnapshot,
    ) -> Result<(), AgentError> {
        let step = self.0.with(|s| {
            s.calls.push(Call {
                messages: messages.iter().map(|m| m.id).collect(),
                board: board.board.clone(),
            });
            s.steps.pop_front()
        });
        match step {
            None => Ok(()),
            Some(Step::Transient) => Err(transient()),
            Some(Step::Permanent) => Err(permanent()),
            Some(Step::Sleep(d)) => {
                tokio::time::sleep(d).await;
                Ok(())
            }
        }
    }

    async fn on_shutdown(&mut self, _ctx: &mut AgentContext) -> Result<(), AgentError> {
        self.0.with(|s| s.shutdowns += 1);
        Ok(())
    }

    fn wants_tick(&self) -> bool {
        self.0.with(|s| s.wants_tick)
    }

    fn abandon_work(&mut self) -> Option<Subtask> {
        self.0.with(|s| s.abandon.take())
    }
}
