//! Unit tests of the three layers, each driven through `agent-core` agents on in-memory services
//! and paused tokio time. The parties around the agent under test are bare inboxes, so a test
//! sees exactly what the agent sends; `team` runs all three layers together.
#![allow(clippy::unwrap_used, clippy::expect_used, reason = "tests")]

mod bottom;
mod mid;
mod peers;
mod team;
mod top;
mod work;

use std::sync::Arc;

use agent_core::tools::{ToolContext, ToolRegistry};
use agent_core::{
    Agent, AgentBehavior, AgentDeps, AuditEvent, AuditLog, InMemoryAuditLog, InMemoryStateStore,
    Reasoner, RuleBasedReasoner, TokioClock, new_message_id, payload,
};
use agent_state::{
    Actor, Address, AgentConfig, AgentId, AgentLayer, AgentStatus, BoardId, Message, MessageId,
    MessageKind, PlanStep, StepTarget, Subtask, Timestamp,
};
use governance::InMemoryGovernance;
use message_bus::{InMemoryBus, MessageBus};
use serde::Serialize;
use serde::de::DeserializeOwned;
use tempfile::TempDir;
use whiteboard::{InMemoryWhiteboard, Whiteboard};

/// Where every test clock starts.
const START: Timestamp = Timestamp(1_700_000_000_000);

fn id(s: &str) -> AgentId {
    AgentId::new(s)
}

fn addr(s: &str) -> Address {
    Address::Agent(id(s))
}

fn step(id: &str, domain: &str, tool: &str, args: serde_json::Value) -> PlanStep {
    PlanStep::scripted(
        id,
        format!("{id} with {tool}"),
        StepTarget::Domain(domain.into()),
        tool,
        args,
    )
}

fn subtask(task: &str, step: PlanStep, assignee: &str) -> Subtask {
    Subtask { task_id: task.into(), step, assignee: id(assignee), attempt: 1 }
}

/// The in-memory bus as the agents under test see it: every call to send is recorded.
struct Recorded {
    inner: Arc<InMemoryBus>,
    sends: Arc<std::sync::Mutex<Vec<usize>>>,
}

#[async_trait::async_trait]
impl MessageBus for Recorded {
    async fn register(&self, agent: &AgentId) -> Result<(), message_bus::RegisterError> {
        self.inner.register(agent).await
    }
    async fn unregister(&self, agent: &AgentId) -> Result<(), message_bus::RegisterError> {
        self.inner.unregister(agent).await
    }
    async fn is_registered(&self, agent: &AgentId) -> Result<bool, agent_state::BackendError> {
        self.inner.is_registered(agent).await
    }
    async fn registered(&self) -> Result<Vec<AgentId>, agent_state::BackendError> {
        self.inner.registered().await
    }
    async fn send(&self, message: Message) -> Result<usize, message_bus::SendError> {
        self.sends.lock().unwrap().push(1);
        self.inner.send(message).await
    }
    async fn send_many(
        &self,
        messages: Vec<Message>,
    ) -> Result<Vec<usize>, message_bus::SendError> {
        self.sends.lock().unwrap().push(messages.len());
        self.inner.send_many(messages).await
    }
    async fn take(
        &self,
        inbox: &Address,
        max: usize,
    ) -> Result<Vec<Message>, message_bus::InboxError> {
        self.inner.take(inbox, max).await
    }
    async fn ack(
        &self,
        inbox: &Address,
        ids: &[MessageId],
    ) -> Result<usize, message_bus::InboxError> {
        self.inner.ack(inbox, ids).await
    }
    async fn release(&self, inbox: &Address) -> Result<usize, message_bus::InboxError> {
        self.inner.release(inbox).await
    }
    async fn pending(&self, inbox: &Address) -> Result<usize, message_bus::InboxError> {
        self.inner.pending(inbox).await
    }
    async fn inboxes_with_mail(&self) -> Result<Vec<AgentId>, agent_state::BackendError> {
        self.inner.inboxes_with_mail().await
    }
}

/// In-memory services shared by the agents of one test.
struct World {
    bus: Arc<InMemoryBus>,
    /// The size of each call the agents made to send (1 for a `send`, the batch's for a
    /// `send_many`), in order.
    sends: Arc<std::sync::Mutex<Vec<usize>>>,
    boards: Arc<InMemoryWhiteboard>,
    governance: Arc<InMemoryGovernance>,
    audit: Arc<InMemoryAuditLog>,
    tools: Arc<ToolRegistry>,
    workspace: Arc<ToolContext>,
    clock: Arc<TokioClock>,
    dir: TempDir,
}

impl World {
    fn new() -> Self {
        Self::with_tools(ToolRegistry::with_builtins())
    }

    fn with_tools(tools: ToolRegistry) -> Self {
        let dir = tempfile::tempdir().unwrap();
        Self {
            bus: Arc::new(InMemoryBus::new()),
            sends: Arc::default(),
            boards: Arc::new(InMemoryWhiteboard::new()),
            governance: Arc::new(InMemoryGovernance::new()),
            audit: Arc::new(InMemoryAuditLog::new()),
            tools: Arc::new(tools),
            workspace: Arc::new(ToolContext::new(dir.path()).unwrap()),
            clock: Arc::new(TokioClock::starting_at(START)),
            dir,
        }
    }

    fn deps(&self, reasoner: Arc<dyn Reasoner>) -> Arc<AgentDeps> {
        Arc::new(AgentDeps {
            bus: Arc::new(Recorded { inner: self.bus.clone(), sends: self.sends.clone() }),
            boards: self.boards.clone(),
            governance: self.governance.clone(),
            audit: self.audit.clone(),
            reasoner,
            tools: self.tools.clone(),
            workspace: self.workspace.clone(),
            clock: self.clock.clone(),
            state: Arc::new(InMemoryStateStore::new()),
            spawner: None,
            timeouts: Default::default(),
        })
    }

    /// Opens bare inboxes for parties the test plays itself.
    async fn parties(&self, ids: &[&str]) {
        for party in ids {
            self.bus.register(&id(party)).await.unwrap();
        }
    }

    /// An initialized agent with the rule-based reasoner.
    async fn spawn(&self, config: AgentConfig, behavior: impl AgentBehavior) -> Agent {
        self.spawn_with(config, behavior, RuleBasedReasoner::new()).await
    }

    /// An initialized agent with its own reasoner.
    async fn spawn_with(
        &self,
        config: AgentConfig,
        behavior: impl AgentBehavior,
        reasoner: impl Reasoner,
    ) -> Agent {
        self.spawn_sharing(config, behavior, Arc::new(reasoner)).await
    }

    /// An initialized agent with a reasoner the test keeps a handle on.
    async fn spawn_sharing(
        &self,
        config: AgentConfig,
        behavior: impl AgentBehavior,
        reasoner: Arc<dyn Reasoner>,
    ) -> Agent {
        let mut agent = Agent::new(config, Box::new(behavior), self.deps(reasoner)).unwrap();
        agent.initialize().await.unwrap();
        agent
    }

    /// Puts a message with `content` into `to`'s inbox and returns its id.
    async fn send(
        &self,
        from: Address,
        to: &str,
        kind: MessageKind,
        content: &impl Serialize,
    ) -> MessageId {
        let id = new_message_id();
        let content = serde_json::to_value(content).unwrap();
        let message = Message::new(id, from, addr(to), kind, content, Timestamp(START.0));
        self.bus.send(message).await.unwrap();
        id
    }

    /// Takes and acknowledges everything in `inbox`.
    async fn drain(&self, inbox: &Address) -> Vec<Message> {
        let messages = self.bus.take(inbox, usize::MAX).await.unwrap();
        let ids: Vec<MessageId> = messages.iter().map(|m| m.id).collect();
        self.bus.ack(inbox, &ids).await.unwrap();
        messages
    }

    /// Takes everything in `inbox` and returns the contents of the messages of `kind`.
    async fn received<T: DeserializeOwned>(&self, inbox: &Address, kind: MessageKind) -> Vec<T> {
        self.drain(inbox)
            .await
            .iter()
            .filter(|m| m.kind == kind)
            .map(|m| payload::<T>(m).unwrap())
            .collect()
    }

    /// The kinds of the messages in `inbox`, heartbeat acks left out; takes them.
    async fn kinds(&self, inbox: &Address) -> Vec<MessageKind> {
        self.drain(inbox)
            .await
            .iter()
            .map(|m| m.kind)
            .filter(|k| *k != MessageKind::HeartbeatAck)
            .collect()
    }

    async fn events(&self, agent: &str) -> Vec<AuditEvent> {
        self.audit.records(Some(&id(agent))).await.unwrap().into_iter().map(|r| r.event).collect()
    }

    /// `agent`'s audited refusals, by action.
    async fn denied(&self, agent: &str) -> Vec<String> {
        self.events(agent)
            .await
            .into_iter()
            .filter_map(|e| match e {
                AuditEvent::Denied { action, .. } => Some(action),
                _ => None,
            })
            .collect()
    }

    /// How many tool calls `agent` made.
    async fn tool_calls(&self, agent: &str) -> usize {
        self.events(agent).await.iter().filter(|e| matches!(e, AuditEvent::ToolCall { .. })).count()
    }

    /// The content of `agent`'s board, or of the global board.
    async fn board(&self, board: BoardId) -> String {
        self.boards.read(&Actor::System, &board).await.unwrap().content
    }

    /// The final status of every agent, after checking the whole log's transition chain.
    async fn chain(&self) -> Vec<(AgentId, AgentStatus)> {
        agent_core::check_transition_chain(&self.audit.records(None).await.unwrap()).unwrap()
    }

    fn file(&self, path: &str) -> Option<String> {
        std::fs::read_to_string(self.dir.path().join(path)).ok()
    }
}

fn config(agent: &str, layer: AgentLayer, supervisor: Option<&str>) -> AgentConfig {
    let config = AgentConfig::new(agent, format!("Agent {agent}"), layer);
    match supervisor {
        Some(s) => config.with_supervisor(s),
        None => config,
    }
}
