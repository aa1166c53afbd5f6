//! Agent metrics and the performance score (docs/concepts.md#metrics).

use serde::{Deserialize, Serialize};

use crate::{Timestamp, Versioned};

/// Weight of the success rate in the score.
pub const SUCCESS_WEIGHT: f64 = 40.0;
/// Weight of responsiveness in the score.
pub const RESPONSIVENESS_WEIGHT: f64 = 30.0;
/// Weight of heartbeat reliability in the score.
pub const RELIABILITY_WEIGHT: f64 = 30.0;
/// Average task duration at which responsiveness scores zero, in milliseconds.
pub const RESPONSIVENESS_CAP_MS: f64 = 60_000.0;

/// What one agent has done.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct AgentMetrics {
    /// Tasks finished successfully.
    pub tasks_completed: u64,
    /// Tasks that failed after their retries.
    pub tasks_failed: u64,
    /// Mean duration of finished tasks, in milliseconds.
    pub average_task_duration_ms: f64,
    /// Messages handled (sent or processed).
    pub messages_processed: u64,
    /// Heartbeats answered.
    pub heartbeats_responded: u64,
    /// Heartbeats missed or failed.
    pub heartbeats_missed: u64,
    /// Warnings received.
    pub warnings_received: u64,
    /// Retries spent.
    pub retries: u64,
    /// Decisions signed (top layer).
    pub decisions_signed: u64,
    /// Decisions vetoed (top layer).
    pub decisions_vetoed: u64,
    /// Conflicts arbitrated (top layer).
    pub conflicts_arbitrated: u64,
    /// Last time the agent did anything.
    pub last_active: Timestamp,
}

impl Versioned for AgentMetrics {
    const KIND: &'static str = "agent_metrics";
    const VERSION: u32 = 1;
}

impl AgentMetrics {
    /// Records a finished task and updates the running mean duration.
    pub fn record_task(&mut self, success: bool, duration_ms: u64, at: Timestamp) {
        // Counted in f64 so counts near `u64::MAX` cannot overflow; the counters saturate.
        let finished = self.tasks_completed as f64 + self.tasks_failed as f64;
        let total = self.average_task_duration_ms * finished + duration_ms as f64;
        if success {
            self.tasks_completed = self.tasks_completed.saturating_add(1);
        } else {
            self.tasks_failed = self.tasks_failed.saturating_add(1);
        }
        self.average_task_duration_ms = total / (finished + 1.0);
        self.last_active = self.last_active.max(at);
    }

    /// The performance score, 0 to 100: 40 % success rate, 30 % responsiveness (an average task
    /// of 60 s or more scores zero), 30 % heartbeat reliability. An agent with no history scores 100.
    pub fn performance_score(&self) -> f64 {
        let success = ratio(self.tasks_completed, self.tasks_failed);
        let duration = if self.average_task_duration_ms.is_finite() {
            self.average_task_duration_ms.max(0.0)
        } else {
            RESPONSIVENESS_CAP_MS
        };
        let responsiveness = 1.0 - (duration / RESPONSIVENESS_CAP_MS).min(1.0);
        let reliability = ratio(self.heartbeats_responded, self.heartbeats_missed);
        let score = success * SUCCESS_WEIGHT
            + responsiveness * RESPONSIVENESS_WEIGHT
            + reliability * RELIABILITY_WEIGHT;
        score.clamp(0.0, 100.0)
    }
}

/// `part / (part + rest)`, 1 when both are zero. Summed in f64: `part + rest` may overflow `u64`.
fn ratio(part: u64, rest: u64) -> f64 {
    if part == 0 && rest == 0 { 1.0 } else { part as f64 / (part as f64 + rest as f64) }
}
