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

use super::{Observer, Outlets, RunGuard};
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
    let outlets = Outlets { bus: bus.clone(), audit: audit.clone(), clock };
    let guard = RunGuard::new(settings, Arc::new(Observer::default()), pool, proposer, outlets);
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

/// What a coordinator's guard reads of agents hosted by workers.
struct Remote {
    agents: std::sync::Mutex<Vec<super::AgentView>>,
    progress: std::sync::atomic::AtomicU64,
}

#[async_trait]
impl super::RemoteAgents for Remote {
    async fn agents(&self) -> Vec<super::AgentView> {
        self.agents.lock().unwrap().clone()
    }

    fn progress(&self) -> u64 {
        self.progress.load(std::sync::atomic::Ordering::Relaxed)
    }
}

fn view(id: &str, on: Option<&str>, busy: bool) -> super::AgentView {
    super::AgentView {
        id: AgentId::new(id),
        supervisor: None,
        open_tasks: vec!["t".into()],
        waits: on
            .map(|on| WaitEdge {
                waiter: AgentId::new(id),
                on: AgentId::new(on),
                what: format!("the reply of {on}"),
                task: Some("t".into()),
            })
            .into_iter()
            .collect(),
        busy,
    }
}

/// A coordinator's guard: it hosts no agent, and reads them from `remote`.
async fn coordinating(
    remote: Arc<Remote>,
) -> (RunGuard, Arc<InMemoryBus>, Arc<InMemoryAuditLog>, tempfile::TempDir) {
    let (guard, bus, audit, dir) = guarded(&[("unused", None)]).await;
    // The power's inbox, which its worker opened.
    bus.register(&AgentId::new("power")).await.unwrap();
    let observer = Arc::new(Observer::default());
    observer.set_remote(remote);
    let outlets = Outlets { bus: bus.clone(), audit: audit.clone(), clock: guard.clock.clone() };
    let guard = RunGuard::new(
        GuardSettings { wait_heartbeats: 2, idle_heartbeats: 4, ..GuardSettings::default() },
        observer,
        Arc::new(AgentPool::new(10)),
        AgentId::new("power"),
        outlets,
    );
    (guard, bus, audit, dir)
}

#[tokio::test(start_paused = true)]
async fn a_coordinator_breaks_a_cycle_among_agents_hosted_elsewhere() {
    let remote = Arc::new(Remote {
        agents: std::sync::Mutex::new(vec![
            view("power", Some("lead"), false),
            view("lead", Some("worker"), false),
            view("worker", Some("lead"), false),
        ]),
        progress: Default::default(),
    });
    let (mut guard, bus, _audit, _dir) = coordinating(remote.clone()).await;
    guard.heartbeat(false).await;
    guard.heartbeat(false).await;
    let sent = escalations(&bus, "power").await;
    let [TaskFailure::WaitCycle { cycle, .. }] = sent.as_slice() else { panic!("{sent:?}") };
    assert_eq!(cycle, &[AgentId::new("lead"), AgentId::new("worker")]);
}

#[tokio::test(start_paused = true)]
async fn a_coordinator_sees_work_moving_or_agents_busy_elsewhere_as_progress() {
    let remote = Arc::new(Remote {
        agents: std::sync::Mutex::new(vec![
            view("power", Some("lead"), false),
            view("lead", None, true),
        ]),
        progress: Default::default(),
    });
    let (mut guard, bus, _audit, _dir) = coordinating(remote.clone()).await;
    for _ in 0..6 {
        guard.heartbeat(false).await;
    }
    assert!(escalations(&bus, "power").await.is_empty(), "a busy agent elsewhere is work");
    // Not busy, but work moves on the bus at every heartbeat: progress.
    *remote.agents.lock().unwrap() =
        vec![view("power", Some("lead"), false), view("lead", None, false)];
    for _ in 0..6 {
        remote.progress.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        guard.heartbeat(false).await;
    }
    assert!(escalations(&bus, "power").await.is_empty(), "work moving is progress");
    // Nothing moves and nobody works: no progress after the idle heartbeats.
    for _ in 0..4 {
        guard.heartbeat(false).await;
    }
    let sent = escalations(&bus, "power").await;
    let [TaskFailure::NoProgress { heartbeats: 4, agents }] = sent.as_slice() else {
        panic!("{sent:?}")
    };
    assert_eq!(agents, &[AgentId::new("lead"), AgentId::new("power")]);
}
