//! The driver's wait-cycle guard on agents that report waiting on each other: the cycle is
//! broken after `wait_heartbeats` idle heartbeats with a typed, audited reason sent to the
//! proposing power; agents waiting without a cycle are left alone.

#![allow(clippy::unwrap_used, clippy::expect_used, reason = "tests")]

use std::sync::Arc;

use agent_core::tools::{ToolContext, ToolRegistry};
use agent_core::{
    AgentBehavior, AgentContext, AgentDeps, AgentError, AuditEvent, AuditLog, InMemoryAuditLog,
    InMemoryStateStore, RuleBasedReasoner, TokioClock,
};
use agent_state::{
    AgentConfig, AgentId, AgentLayer, BoardSnapshot, GuardSettings, Message, MessageKind,
    TaskFailure, Timestamp, WaitEdge,
};
use async_trait::async_trait;
use message_bus::{InMemoryBus, MessageBus};

use super::{Observer, RunGuard};
use crate::pool::AgentPool;

/// An agent that waits on `on` (if any) for task `t`, which it has open.
struct Waiting {
    on: Option<&'static str>,
}

#[async_trait]
impl AgentBehavior for Waiting {
    fn responsibilities(&self) -> &'static str {
        "waits"
    }

    async fn on_process(
        &mut self,
        _ctx: &mut AgentContext,
        _messages: &[Message],
        _board: &BoardSnapshot,
    ) -> Result<(), AgentError> {
        Ok(())
    }

    fn waiting_on(&self, me: &AgentId) -> Vec<WaitEdge> {
        self.on
            .map(|on| WaitEdge {
                waiter: me.clone(),
                on: AgentId::new(on),
                what: format!("the reply of {on}"),
                task: Some("t".into()),
            })
            .into_iter()
            .collect()
    }

    fn open_tasks(&self) -> Vec<String> {
        vec!["t".into()]
    }
}

/// A guard over `agents` (id, whom it waits on), the first being the proposer.
async fn guarded(
    agents: &[(&str, Option<&'static str>)],
) -> (RunGuard, Arc<InMemoryBus>, Arc<InMemoryAuditLog>, tempfile::TempDir) {
    let dir = tempfile::tempdir().unwrap();
    let bus = Arc::new(InMemoryBus::new());
    let audit = Arc::new(InMemoryAuditLog::new());
    let clock = Arc::new(TokioClock::starting_at(Timestamp(1_000)));
    let deps = Arc::new(AgentDeps {
        bus: bus.clone(),
        boards: Arc::new(whiteboard::InMemoryWhiteboard::new()),
        governance: Arc::new(governance::InMemoryGovernance::new()),
        audit: audit.clone(),
        reasoner: Arc::new(RuleBasedReasoner::new()),
        tools: Arc::new(ToolRegistry::with_builtins()),
        workspace: Arc::new(ToolContext::new(dir.path()).unwrap()),
        clock: clock.clone(),
        state: Arc::new(InMemoryStateStore::new()),
        spawner: None,
        timeouts: Default::default(),
    });
    let pool = Arc::new(AgentPool::new(10));
    for (id, on) in agents {
        let config = AgentConfig::new(*id, *id, AgentLayer::Top);
        pool.create(config, Box::new(Waiting { on: *on }), deps.clone()).await.unwrap();
    }
    let settings = GuardSettings { wait_heartbeats: 2, ..GuardSettings::default() };
    let proposer = AgentId::new(agents[0].0);
    let guard = RunGuard::new(
        settings,
        Arc::new(Observer::default()),
        pool,
        bus.clone(),
        audit.clone(),
        clock,
        proposer,
    );
    (guard, bus, audit, dir)
}

async fn escalations(bus: &InMemoryBus, to: &str) -> Vec<TaskFailure> {
    let taken = bus.take(&agent_state::Address::Agent(AgentId::new(to)), 100).await.unwrap();
    taken
        .iter()
        .filter(|m| m.kind == MessageKind::IssueEscalation)
        .map(|m| {
            serde_json::from_value::<agent_core::protocol::Escalation>(m.content.clone())
                .unwrap()
                .failure
        })
        .collect()
}

#[tokio::test(start_paused = true)]
async fn a_cycle_is_broken_after_its_idle_heartbeats_with_a_typed_audited_reason() {
    let (mut guard, bus, audit, _dir) =
        guarded(&[("power", None), ("lead", Some("worker")), ("worker", Some("lead"))]).await;
    guard.heartbeat(false).await;
    assert!(escalations(&bus, "power").await.is_empty(), "seen once: not yet");
    guard.heartbeat(false).await;
    let sent = escalations(&bus, "power").await;
    assert_eq!(sent.len(), 1, "{sent:?}");
    let TaskFailure::WaitCycle { cycle, waits } = &sent[0] else { panic!("{sent:?}") };
    assert_eq!(cycle, &[AgentId::new("lead"), AgentId::new("worker")]);
    assert_eq!(waits, &["the reply of worker", "the reply of lead"]);
    let stuck: Vec<_> = audit
        .records(None)
        .await
        .unwrap()
        .into_iter()
        .filter(|r| matches!(&r.event, AuditEvent::Stuck { task: Some(t), .. } if t == "t"))
        .collect();
    assert_eq!(stuck.len(), 1);
    // The task is stopped once: later heartbeats do not stop it again.
    guard.heartbeat(false).await;
    guard.heartbeat(false).await;
    assert!(escalations(&bus, "power").await.is_empty());
}

#[tokio::test(start_paused = true)]
async fn waits_without_a_cycle_or_while_agents_work_are_left_alone() {
    let (mut guard, bus, _audit, _dir) =
        guarded(&[("power", None), ("lead", Some("worker")), ("worker", None)]).await;
    guard.heartbeat(false).await;
    guard.heartbeat(false).await;
    assert!(escalations(&bus, "power").await.is_empty(), "a chain is not a cycle");

    let (mut guard, bus, _audit, _dir) =
        guarded(&[("power", None), ("lead", Some("worker")), ("worker", Some("lead"))]).await;
    for _ in 0..4 {
        guard.heartbeat(true).await; // some agent is running a turn: not idle
    }
    assert!(escalations(&bus, "power").await.is_empty(), "busy heartbeats are not idle");
}
