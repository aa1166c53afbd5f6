//! The metrics calculator: performance scores for agents and a team summary; the liveness
//! ledger (the heartbeat answers the scheduler books, idle, busy or missed, stored once per
//! cycle) and [`stored_metrics`], the one source of the numbers the CLI shows.

use std::collections::BTreeMap;
use std::sync::Arc;

use agent_core::{LivenessRecord, StateStore};
use agent_state::{AgentId, AgentLayer, AgentMetrics, AgentStatus, BackendError};
use serde::{Deserialize, Serialize};

use crate::pool::{AgentPool, AgentSlot};

/// One agent's line in a team summary.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct AgentSummary {
    /// The agent.
    pub id: AgentId,
    /// Its layer.
    pub layer: AgentLayer,
    /// Its status.
    pub status: AgentStatus,
    /// Its metrics.
    pub metrics: AgentMetrics,
    /// Its performance score, 0 to 100 (docs/concepts.md#metrics).
    pub score: f64,
}

/// Computes scores.
#[derive(Clone, Copy, Debug, Default)]
pub struct MetricsCalculator;

impl MetricsCalculator {
    /// The performance score: 40 % success rate, 30 % responsiveness, 30 % heartbeat reliability.
    pub fn performance_score(metrics: &AgentMetrics) -> f64 {
        metrics.performance_score()
    }

    /// A summary line for one agent.
    pub fn summarize(
        id: AgentId,
        layer: AgentLayer,
        status: AgentStatus,
        metrics: AgentMetrics,
    ) -> AgentSummary {
        let score = metrics.performance_score();
        AgentSummary { id, layer, status, metrics, score }
    }
}

/// One agent's metrics as the run's stores hold them: what `strata run`'s summary,
/// `strata inspect RUN metrics` and the dashboard all show (see [`stored_metrics`]).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct StoredMetrics {
    /// The agent.
    pub agent: AgentId,
    /// Its metrics: its record's, with the heartbeat answers (idle and busy) and misses its
    /// scheduler booked.
    pub metrics: AgentMetrics,
    /// Its performance score, 0 to 100 ([`AgentMetrics::performance_score`]).
    pub score: f64,
    /// Retries spent on its current work (its record's).
    pub retries: u32,
    /// Of its heartbeat answers (`metrics.heartbeats_responded`), those it gave busy: a turn
    /// still working, with progress.
    #[serde(default)]
    pub busy: u64,
    /// Its last busy answer: what its turn was doing, its tokens so far, how long it had run.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_busy: Option<agent_core::BusyAnswer>,
}

/// Every agent's metrics as stored, by id: its saved record's (the heartbeats it ran, answered
/// or failed, its tasks, messages, retries) with its liveness record's answers, idle and busy,
/// and misses (the cycles its scheduler booked without running it) added. The one source of
/// the numbers and scores the CLI shows: the run summary, `inspect RUN metrics` and the
/// dashboard. An agent with answers but no record yet (it never ran a turn) has default
/// metrics plus them.
pub async fn stored_metrics(state: &dyn StateStore) -> Result<Vec<StoredMetrics>, BackendError> {
    type Line = (AgentMetrics, u32, Option<LivenessRecord>);
    let mut agents: BTreeMap<AgentId, Line> = state
        .agent_counts()
        .await?
        .into_iter()
        .map(|c| (c.id, (c.metrics, c.retries, None)))
        .collect();
    for liveness in state.liveness().await? {
        let line = agents.entry(liveness.id.clone()).or_default();
        liveness.add_to(&mut line.0);
        line.2 = Some(liveness);
    }
    Ok(agents
        .into_iter()
        .map(|(agent, (metrics, retries, liveness))| StoredMetrics {
            score: metrics.performance_score(),
            agent,
            metrics,
            retries,
            busy: liveness.as_ref().map_or(0, |l| l.busy),
            last_busy: liveness.and_then(|l| l.last_busy),
        })
        .collect())
}

/// The scheduler's side of the liveness ledger: at the end of each cycle, the counts of every
/// agent that changed go to the state store in one write, made in a task (one at a time).
pub(crate) struct Ledger {
    state: Arc<dyn StateStore>,
    writing: Option<tokio::task::JoinHandle<()>>,
}

impl Ledger {
    pub(crate) fn new(state: Arc<dyn StateStore>) -> Self {
        Self { state, writing: None }
    }

    /// Starts storing the counts that changed by cycle `number`, unless the last write is still
    /// in flight (they are stored with a later cycle's).
    pub(crate) fn store(&mut self, pool: &AgentPool, number: u64) {
        if self.writing.as_ref().is_some_and(|w| !w.is_finished()) {
            return;
        }
        self.writing = changed(pool, number).map(|(slots, records)| {
            let state = self.state.clone();
            tokio::spawn(tracing::Instrument::in_current_span(write(state, slots, records)))
        });
    }

    /// Waits for the write in flight, then stores what is left, and returns once it is stored.
    pub(crate) async fn flush(&mut self, pool: &AgentPool, number: u64) {
        if let Some(writing) = self.writing.take()
            && let Err(e) = writing.await
        {
            tracing::warn!(error = %e, "the liveness write stopped");
        }
        if let Some((slots, records)) = changed(pool, number) {
            write(self.state.clone(), slots, records).await;
        }
    }
}

type Changed = (Vec<Arc<AgentSlot>>, Vec<LivenessRecord>);

/// The agents whose counts changed since the ledger last stored them, marked stored.
fn changed(pool: &AgentPool, number: u64) -> Option<Changed> {
    let (mut slots, mut records) = (Vec::new(), Vec::new());
    pool.for_each(|slot| {
        if let Some((record, changes)) = slot.liveness_due(number) {
            slot.liveness_stored(changes);
            slots.push(slot.clone());
            records.push(record);
        }
    });
    (!records.is_empty()).then_some((slots, records))
}

/// Stores `records` in one write; on failure their agents are due again.
async fn write(
    state: Arc<dyn StateStore>,
    slots: Vec<Arc<AgentSlot>>,
    records: Vec<LivenessRecord>,
) {
    let count = records.len();
    if let Err(e) = state.save_liveness(records).await {
        tracing::warn!(agents = count, error = %e, "cannot store the agents' heartbeat answers; trying again next cycle");
        for slot in &slots {
            slot.liveness_unstored();
        }
    }
}
