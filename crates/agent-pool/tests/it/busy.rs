//! Busy is not missed (issue #32): an agent whose turn is still working (a model call producing
//! tokens, a tool running) answers its heartbeat as busy, with its progress, and is never
//! counted missed nor its supervisor warned; an agent whose turn is silent past its silence
//! limit (wedged) is missed. Every answer is stored in the liveness ledger.

use std::sync::Arc;
use std::time::Duration;

use agent_core::testing::StuckReasoner;
use agent_core::{
    Activity, AgentBehavior, AgentContext, AgentDeps, AgentError, AuditEvent, Conflict, Reasoner,
};
use agent_pool::{AgentPool, CycleReport, HeartbeatScheduler, stored_metrics};
use agent_state::{
    Address, AgentConfig, AgentId, AgentLayer, BoardSnapshot, Message, MessageKind, Timeouts,
};
use async_trait::async_trait;

use crate::support::*;

const HEARTBEAT: Duration = Duration::from_secs(4);
const SILENCE: Duration = Duration::from_secs(10);

/// What the agent's one turn of work does.
#[derive(Clone, Copy)]
enum Work {
    /// Asks its reasoner for a vote (a trickling [`StuckReasoner`]: a slow model).
    Reason,
    /// Hangs without a sign of life.
    Hang,
}

/// An agent with one turn of work to do, without mail.
struct OneTurn {
    work: Work,
    done: bool,
}

#[async_trait]
impl AgentBehavior for OneTurn {
    fn responsibilities(&self) -> &'static str {
        "works"
    }

    async fn on_process(
        &mut self,
        ctx: &mut AgentContext,
        _messages: &[Message],
        _board: &BoardSnapshot,
    ) -> Result<(), AgentError> {
        match self.work {
            Work::Reason => {
                let conflict = Conflict {
                    id: "c1".into(),
                    issue: "which".into(),
                    parties: vec![ctx.id().clone()],
                    options: vec!["a".into(), "b".into()],
                };
                ctx.reasoner().vote(ctx.persona(), &conflict).await?;
            }
            Work::Hang => std::future::pending().await,
        }
        self.done = true;
        Ok(())
    }

    fn wants_tick(&self) -> bool {
        !self.done
    }
}

/// A pool of one agent, `bottom-1` under `mid-1`, doing `work` with `reasoner` (a silence limit
/// of 10 s, reasoning and turn limits of an hour), and its scheduler with a ledger.
async fn one_agent(
    dir: &std::path::Path,
    work: Work,
    reasoner: Arc<dyn Reasoner>,
) -> (Arc<AgentPool>, HeartbeatScheduler, agent_pool::TeamServices) {
    let services = services(dir);
    let timeouts = Timeouts {
        reasoning_ms: 3_600_000,
        silence_ms: SILENCE.as_millis() as u64,
        turn_ms: 3_600_000,
        ..Timeouts::default()
    };
    let deps = Arc::new(AgentDeps {
        bus: services.bus.clone(),
        boards: services.boards.clone(),
        governance: services.governance.clone(),
        audit: services.audit.clone(),
        reasoner,
        tools: services.tools.clone(),
        workspace: services.workspace.clone(),
        clock: services.clock.clone(),
        state: services.state.clone(),
        spawner: None,
        timeouts,
    });
    services.bus.register(&AgentId::new("mid-1")).await.unwrap();
    let pool = Arc::new(AgentPool::new(10));
    let config = AgentConfig::new("bottom-1", "worker", AgentLayer::Bottom)
        .with_supervisor("mid-1")
        .with_timeout_ms(3_600_000);
    pool.create(config, Box::new(OneTurn { work, done: false }), deps).await.unwrap();
    let scheduler = HeartbeatScheduler::new(
        pool.clone(),
        services.bus.clone(),
        services.audit.clone(),
        services.clock.clone(),
    )
    .with_ledger(services.state.clone());
    (pool, scheduler, services)
}

/// One heartbeat cycle, then a heartbeat's time.
async fn cycle(scheduler: &mut HeartbeatScheduler) -> CycleReport {
    let report = scheduler.tick().await;
    tokio::time::sleep(HEARTBEAT).await;
    report
}

/// The audited missed heartbeats of `bottom-1`.
async fn missed_audited(services: &agent_pool::TeamServices) -> usize {
    let records = services.audit.records(Some(&AgentId::new("bottom-1"))).await.unwrap();
    records.iter().filter(|r| matches!(r.event, AuditEvent::MissedHeartbeat { .. })).count()
}

/// The warnings about `bottom-1` in `mid-1`'s inbox.
async fn warnings(services: &agent_pool::TeamServices) -> Vec<String> {
    let inbox = Address::Agent(AgentId::new("mid-1"));
    let taken = services.bus.take(&inbox, 1_000).await.unwrap();
    services.bus.release(&inbox).await.unwrap();
    taken
        .iter()
        .filter(|m| m.kind == MessageKind::Warning)
        .map(|m| m.content["reason"].as_str().unwrap_or_default().to_owned())
        .collect()
}

#[tokio::test(start_paused = true)]
async fn an_agent_whose_model_call_produces_tokens_answers_busy_and_is_never_missed() {
    let dir = tempfile::tempdir().unwrap();
    // A model call of just over 2 minutes, a token every 2 s: thirty heartbeats, four times the
    // old 30 s limit of a whole turn.
    let model = Arc::new(StuckReasoner::trickling(Duration::from_secs(2), 61));
    let (pool, mut scheduler, services) = one_agent(dir.path(), Work::Reason, model).await;
    let slot = pool.get(&AgentId::new("bottom-1")).unwrap();

    let first = cycle(&mut scheduler).await;
    assert_eq!(first.started, 1, "{first:?}");
    let mut busy = 0;
    let mut last_tokens = 0;
    loop {
        let report = cycle(&mut scheduler).await;
        assert!(report.missed.is_empty(), "cycle {}: {report:?}", report.number);
        if report.busy.is_empty() {
            assert_eq!(report.idle, 1, "the turn ended: idle again ({report:?})");
            break;
        }
        busy += 1;
        let answer = slot.last_busy().unwrap();
        assert_eq!(answer.activity, Activity::Model, "{answer:?}");
        assert!(answer.tokens > last_tokens, "tokens so far grow: {answer:?}");
        assert_eq!(answer.elapsed_ms, busy * HEARTBEAT.as_millis() as u64, "{answer:?}");
        assert_eq!(slot.last_ack(), Some(report.number), "a busy answer is an answer");
        last_tokens = answer.tokens;
    }
    assert_eq!(busy, 30, "one busy answer per heartbeat of the 2-minute call");
    assert_eq!((slot.busy(), slot.missed()), (30, 0));
    assert_eq!(missed_audited(&services).await, 0, "no missed heartbeat audited");
    assert!(warnings(&services).await.is_empty(), "its supervisor was not warned");
    let metrics = slot.metrics().await;
    assert_eq!(metrics.heartbeats_missed, 0, "{metrics:?}");
    assert!(metrics.heartbeats_responded >= 31, "{metrics:?}");
    assert_eq!(metrics.performance_score(), 100.0, "its score does not drop: {metrics:?}");

    // Every answer is stored: the ledger holds the busy answers and the last one's progress.
    scheduler.settle().await;
    let stored = stored_metrics(services.state.as_ref()).await.unwrap();
    let line = stored.iter().find(|m| m.agent.as_str() == "bottom-1").unwrap();
    assert_eq!((line.busy, line.metrics.heartbeats_missed), (30, 0), "{line:?}");
    assert_eq!(line.metrics.heartbeats_responded, metrics.heartbeats_responded, "{line:?}");
    assert_eq!(line.last_busy.as_ref().map(|b| b.tokens), Some(last_tokens), "{line:?}");
    assert_eq!(line.score, 100.0);
}

#[tokio::test(start_paused = true)]
async fn an_agent_whose_turn_is_silent_past_the_silence_limit_is_missed_and_its_lead_warned() {
    let dir = tempfile::tempdir().unwrap();
    let model = Arc::new(StuckReasoner::trickling(Duration::ZERO, 0));
    let (pool, mut scheduler, services) = one_agent(dir.path(), Work::Hang, model).await;
    let slot = pool.get(&AgentId::new("bottom-1")).unwrap();

    assert_eq!(cycle(&mut scheduler).await.started, 1);
    // Silent 4 s and 8 s into its turn: still within the 10 s silence limit, busy.
    for _ in 0..2 {
        let report = cycle(&mut scheduler).await;
        assert_eq!(report.busy.len(), 1, "{report:?}");
        assert_eq!(slot.last_busy().unwrap().activity, Activity::Turn);
    }
    // From 12 s on: wedged, missed every cycle, audited, the lead warned.
    for n in 1..=3 {
        let report = cycle(&mut scheduler).await;
        assert_eq!(report.missed, vec![AgentId::new("bottom-1")], "{report:?}");
        assert!(report.busy.is_empty(), "{report:?}");
        assert_eq!(slot.missed(), n);
    }
    assert_eq!((slot.busy(), slot.missed()), (2, 3));
    assert_eq!(missed_audited(&services).await, 3);
    let warned = warnings(&services).await;
    assert_eq!(warned.len(), 3, "{warned:?}");
    assert!(warned[0].contains("no progress for 12000 ms"), "{warned:?}");
    assert!(warned[0].contains("silence_ms"), "{warned:?}");
}
