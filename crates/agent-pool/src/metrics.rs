//! The metrics calculator: performance scores for agents and a team summary.

use agent_state::{AgentId, AgentLayer, AgentMetrics, AgentStatus};
use serde::{Deserialize, Serialize};

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
    /// Its performance score, 0 to 100 (seed 000 §9).
    pub score: f64,
}

/// Computes scores (seed 000 §9 `AgentMetricsCalculator`).
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
