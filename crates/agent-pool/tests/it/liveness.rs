//! The liveness ledger (issue #31 item 7): every heartbeat answer the scheduler books (an idle
//! agent's ack by the sweep, a miss) is stored, once per cycle in one write for all agents;
//! the stored metrics are what the team's summary shows; a resumed team counts on from them.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use agent_core::tools::ToolOutput;
use agent_core::{AgentRecord, LivenessRecord, StateStore};
use agent_pool::{HeartbeatScheduler, Team, TeamServices, stored_metrics};
use agent_state::{AgentId, AgentMetrics, BackendError, TaskOutcome};
use async_trait::async_trait;

use crate::support::*;

/// A state store that counts the ledger's writes and the records they carry.
struct Counting {
    inner: Arc<dyn StateStore>,
    writes: AtomicUsize,
    records: AtomicUsize,
}

#[async_trait]
impl StateStore for Counting {
    async fn save_agent(&self, record: &AgentRecord) -> Result<(), BackendError> {
        self.inner.save_agent(record).await
    }
    async fn agents(&self) -> Result<Vec<AgentRecord>, BackendError> {
        self.inner.agents().await
    }
    async fn save_liveness(&self, records: Vec<LivenessRecord>) -> Result<(), BackendError> {
        self.writes.fetch_add(1, Ordering::SeqCst);
        self.records.fetch_add(records.len(), Ordering::SeqCst);
        self.inner.save_liveness(records).await
    }
    async fn liveness(&self) -> Result<Vec<LivenessRecord>, BackendError> {
        self.inner.liveness().await
    }
    async fn begin_tool(&self, key: &str) -> Result<(), BackendError> {
        self.inner.begin_tool(key).await
    }
    async fn record_tool(&self, key: &str, output: &ToolOutput) -> Result<(), BackendError> {
        self.inner.record_tool(key, output).await
    }
    async fn forget_tool(&self, key: &str) -> Result<(), BackendError> {
        self.inner.forget_tool(key).await
    }
    async fn tool(&self, key: &str) -> Result<Option<Option<ToolOutput>>, BackendError> {
        self.inner.tool(key).await
    }
    async fn record_outcome(&self, outcome: &TaskOutcome) -> Result<(), BackendError> {
        self.inner.record_outcome(outcome).await
    }
    async fn outcomes(&self) -> Result<Vec<TaskOutcome>, BackendError> {
        self.inner.outcomes().await
    }
    async fn put_blob(&self, hash: &str, content: &[u8]) -> Result<(), BackendError> {
        self.inner.put_blob(hash, content).await
    }
    async fn blob(&self, hash: &str) -> Result<Option<Vec<u8>>, BackendError> {
        self.inner.blob(hash).await
    }
}

fn counting(services: &mut TeamServices) -> Arc<Counting> {
    let counting = Arc::new(Counting {
        inner: services.state.clone(),
        writes: AtomicUsize::new(0),
        records: AtomicUsize::new(0),
    });
    services.state = counting.clone();
    counting
}

/// The stored metrics of `agent`.
async fn stored(state: &dyn StateStore, agent: &AgentId) -> AgentMetrics {
    stored_metrics(state)
        .await
        .unwrap()
        .into_iter()
        .find(|s| &s.agent == agent)
        .map(|s| s.metrics)
        .unwrap_or_default()
}

/// The heartbeat counts of `metrics` (an agent that never ran a turn has no record, so its
/// `last_active` is not stored).
fn beats(metrics: &AgentMetrics) -> (u64, u64) {
    (metrics.heartbeats_responded, metrics.heartbeats_missed)
}

/// The ledger's record of `agent`.
async fn ledger(state: &dyn StateStore, agent: &AgentId) -> Option<LivenessRecord> {
    state.liveness().await.unwrap().into_iter().find(|l| &l.id == agent)
}

#[tokio::test(start_paused = true)]
async fn idle_answers_are_stored_in_one_write_per_cycle() {
    let dir = tempfile::tempdir().unwrap();
    let mut services = services(dir.path());
    let counting = counting(&mut services);
    let team = Team::start(standard_team(), services).await.unwrap();
    team.stop().await;
    let state = team.services().state.clone();
    let mut scheduler = HeartbeatScheduler::new(
        team.pool().clone(),
        team.services().bus.clone(),
        team.services().audit.clone(),
        team.services().clock.clone(),
    )
    .with_ledger(state.clone());
    let agents = team.pool().len();
    let (writes, records) =
        (counting.writes.load(Ordering::SeqCst), counting.records.load(Ordering::SeqCst));

    for n in 1..=3 {
        let report = scheduler.tick().await;
        scheduler.settle().await;
        assert_eq!(report.idle, agents, "{report:?}");
        assert_eq!(counting.writes.load(Ordering::SeqCst), writes + n, "one write a cycle");
        assert_eq!(
            counting.records.load(Ordering::SeqCst),
            records + n * agents,
            "every idle agent's answer in it"
        );
    }
    for slot in team.pool().all() {
        let record = ledger(state.as_ref(), slot.id()).await.unwrap();
        assert_eq!((record.answered, record.missed), (slot.acked(), slot.missed()), "{record:?}");
        let stored = stored(state.as_ref(), slot.id()).await;
        assert_eq!(beats(&stored), beats(&slot.metrics().await), "{}", slot.id());
    }
    // Nothing changed: nothing written.
    scheduler.settle().await;
    assert_eq!(counting.writes.load(Ordering::SeqCst), writes + 3);
}

#[tokio::test(start_paused = true)]
async fn a_missed_heartbeat_is_stored_and_the_summary_shows_the_stored_numbers() {
    let dir = tempfile::tempdir().unwrap();
    let team = Team::start(standard_team(), services(dir.path())).await.unwrap();
    team.stop().await;
    let state = team.services().state.clone();
    let mut scheduler = HeartbeatScheduler::new(
        team.pool().clone(),
        team.services().bus.clone(),
        team.services().audit.clone(),
        team.services().clock.clone(),
    )
    .with_ledger(state.clone());
    let id = AgentId::new("bottom-d1");
    let slot = team.pool().get(&id).unwrap();
    let held = slot.agent().lock().await;
    let report = scheduler.tick().await;
    assert_eq!(report.missed, vec![id.clone()]);
    drop(held);
    scheduler.tick().await;
    scheduler.settle().await;

    let metrics = stored(state.as_ref(), &id).await;
    assert_eq!(metrics.heartbeats_missed, 1, "{metrics:?}");
    assert_eq!(beats(&metrics), beats(&slot.metrics().await));
    let summary = team.summary().await;
    let line = summary.iter().find(|a| a.id == id).unwrap();
    assert_eq!(line.metrics, metrics);
    assert!(line.score < 100.0, "a miss lowers the score: {line:?}");
    for line in &summary {
        assert_eq!(line.metrics, stored(state.as_ref(), &line.id).await, "{}", line.id);
    }
}

#[tokio::test(start_paused = true)]
async fn a_resumed_team_counts_on_from_the_stored_answers() {
    let dir = tempfile::tempdir().unwrap();
    let services = services(dir.path());
    let spec = standard_team();
    let period = spec.heartbeat;
    let team = Team::start(spec, services.clone()).await.unwrap();
    tokio::time::sleep(period * 5).await;
    team.stop().await;
    let id = AgentId::new("bottom-d1");
    let before = ledger(services.state.as_ref(), &id).await.unwrap();
    assert!(before.answered >= 3, "{before:?}");
    let summary_before = team.summary().await;
    drop(team);

    let team = Team::resume(standard_team(), services.clone()).await.unwrap();
    tokio::time::sleep(period * 3).await;
    team.stop().await;
    let slot = team.pool().get(&id).unwrap();
    let after = ledger(services.state.as_ref(), &id).await.unwrap();
    let cycles = team.pool().cycles();
    assert!(cycles >= 3, "{cycles}");
    // Not reset: counted on from the stored answers; not counted twice: at most one answer a
    // cycle of the resumed team.
    assert_eq!(slot.acked(), after.answered);
    assert!(after.answered > before.answered, "{before:?} then {after:?}");
    assert!(after.answered <= before.answered + cycles, "{before:?} then {after:?}");
    let was = summary_before.iter().find(|a| a.id == id).unwrap();
    let now = team.summary().await;
    let now = now.iter().find(|a| a.id == id).unwrap();
    assert!(now.metrics.heartbeats_responded > was.metrics.heartbeats_responded, "{now:?}");
    assert_eq!(now.metrics, stored(services.state.as_ref(), &id).await);
    assert_eq!(beats(&now.metrics), beats(&slot.metrics().await));
}
