//! A world of in-memory services and a workspace, and an OODA agent's context in it.

use std::sync::Arc;

use agent_core::tools::{ToolContext, ToolRegistry};
use agent_core::{
    AgentContext, AgentDeps, AuditEvent, AuditLog, InMemoryAuditLog, InMemoryStateStore,
    NextAction, Reasoner, ScriptedAnswer, ScriptedReasoner, TokioClock, ToolCall,
};
use agent_ooda::{Ooda, ReasonerLoop};
use agent_state::ooda::{OodaConfig, OodaEvent};
use agent_state::{AgentConfig, AgentId, AgentLayer, Timestamp};
use governance::InMemoryGovernance;
use message_bus::{InMemoryBus, MessageBus};
use serde_json::{Value, json};
use whiteboard::InMemoryWhiteboard;

pub(crate) const START: Timestamp = Timestamp(1_700_000_000_000);
pub(crate) const ME: &str = "ooda-1";

pub(crate) struct World {
    pub(crate) bus: Arc<InMemoryBus>,
    pub(crate) governance: Arc<InMemoryGovernance>,
    pub(crate) audit: Arc<InMemoryAuditLog>,
    pub(crate) state: Arc<InMemoryStateStore>,
    pub(crate) workspace: Arc<ToolContext>,
    pub(crate) dir: tempfile::TempDir,
}

impl World {
    pub(crate) async fn new() -> Self {
        let dir = tempfile::tempdir().unwrap();
        let world = Self {
            bus: Arc::new(InMemoryBus::new()),
            governance: Arc::new(InMemoryGovernance::new()),
            audit: Arc::new(InMemoryAuditLog::new()),
            state: Arc::new(InMemoryStateStore::new()),
            workspace: Arc::new(ToolContext::new(dir.path()).unwrap()),
            dir,
        };
        world.bus.register(&AgentId::new(ME)).await.unwrap();
        world
    }

    pub(crate) fn write(&self, path: &str, content: &str) {
        let full = self.dir.path().join(path);
        std::fs::create_dir_all(full.parent().unwrap()).unwrap();
        std::fs::write(full, content).unwrap();
    }

    pub(crate) fn read(&self, path: &str) -> String {
        std::fs::read_to_string(self.dir.path().join(path)).unwrap()
    }

    /// The context of agent `ooda-1` with `reasoner`.
    pub(crate) fn ctx(&self, reasoner: impl Reasoner) -> AgentContext {
        self.ctx_shared(Arc::new(reasoner))
    }

    /// The context of agent `ooda-1` with a reasoner the test keeps.
    pub(crate) fn ctx_shared(&self, reasoner: Arc<dyn Reasoner>) -> AgentContext {
        self.ctx_as(reasoner, AgentConfig::new(ME, "Improver", AgentLayer::Bottom))
    }

    /// The context of agent `ooda-1` with `config` (its capabilities, say).
    pub(crate) fn ctx_as(&self, reasoner: Arc<dyn Reasoner>, config: AgentConfig) -> AgentContext {
        let deps = Arc::new(AgentDeps {
            bus: self.bus.clone(),
            boards: Arc::new(InMemoryWhiteboard::new()),
            governance: self.governance.clone(),
            audit: self.audit.clone(),
            reasoner,
            tools: Arc::new(ToolRegistry::with_builtins()),
            workspace: self.workspace.clone(),
            clock: Arc::new(TokioClock::starting_at(START)),
            state: self.state.clone(),
            spawner: None,
            timeouts: Default::default(),
        });
        AgentContext::new(config, "improves notes", deps)
    }

    /// Every OODA event audited, in order.
    pub(crate) async fn events(&self) -> Vec<OodaEvent> {
        self.audit
            .records(Some(&AgentId::new(ME)))
            .await
            .unwrap()
            .into_iter()
            .filter_map(|r| match r.event {
                AuditEvent::Ooda { ooda } => Some(ooda),
                _ => None,
            })
            .collect()
    }

    /// The `modify_self` events' data, in order.
    pub(crate) async fn modifications(&self) -> Vec<Value> {
        self.events()
            .await
            .into_iter()
            .filter(|e| e.kind == agent_state::ooda::OodaEventKind::ModifySelf)
            .map(|e| e.data)
            .collect()
    }
}

pub(crate) fn tools() -> Vec<String> {
    ["read_file", "write_file", "list_dir"].map(String::from).to_vec()
}

/// A config that may modify itself up to `level`.
pub(crate) fn config(level: u8) -> OodaConfig {
    let mut c = OodaConfig::new("Improver", "make notes.md say hello");
    c.tools = tools();
    c.self_modification_enabled = true;
    c.self_modification_level = level.try_into().unwrap();
    c
}

pub(crate) fn ooda(config: OodaConfig) -> Ooda {
    Ooda::new(AgentId::new(ME), config, ReasonerLoop, &tools(), START).unwrap()
}

pub(crate) fn call(tool: &str, args: Value) -> ScriptedAnswer {
    ScriptedAnswer::Action(NextAction::Call(ToolCall { tool: tool.into(), args }))
}

pub(crate) fn finish(summary: &str) -> ScriptedAnswer {
    ScriptedAnswer::Action(NextAction::Finish { success: true, summary: summary.into() })
}

pub(crate) fn modify(kind: &str, target: &str, change: Value, level: i64) -> ScriptedAnswer {
    call(
        agent_ooda::MODIFY_SELF,
        json!({"modification_type": kind, "target": target, "change": change, "safety_level": level}),
    )
}

pub(crate) fn script(answers: impl IntoIterator<Item = ScriptedAnswer>) -> ScriptedReasoner {
    ScriptedReasoner::from_answers(answers)
}
