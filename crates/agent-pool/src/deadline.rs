//! The team's task limit (`[timeouts] task_ms`): every task submitted through
//! [`Team::submit`](crate::Team::submit) must close within it, counted on the run's clock from
//! its submission. At each heartbeat the team's driver tells the proposing power, for every
//! open task past its limit, that it ran out of time: an `issue_escalation` from `system` with
//! [`TaskFailure::TimedOut`]. The power closes the task with that reason through its usual
//! path (audited as `TimedOut`, the outcome stored and reported to `system`), so the outcome
//! has one writer. It is told again at each heartbeat until the task is closed (a power busy
//! planning it takes the task first).
//!
//! Known limit: the submission times are kept in memory, so after [`Team::resume`]
//! (crate::Team::resume) a task submitted before the interruption is no longer bounded.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, PoisonError};

use agent_core::Clock;
use agent_core::protocol::Escalation;
use agent_state::{
    Address, AgentId, Limit, Message, MessageKind, TaskFailure, TaskOutcome, Timestamp,
};
use message_bus::MessageBus;
use tokio::sync::watch;

/// The open tasks' submission times and the limit they are held to.
pub(crate) struct TaskDeadlines {
    limit_ms: u64,
    proposer: AgentId,
    clock: Arc<dyn Clock>,
    open: Mutex<BTreeMap<String, Timestamp>>,
}

impl TaskDeadlines {
    pub(crate) fn new(limit_ms: u64, proposer: AgentId, clock: Arc<dyn Clock>) -> Self {
        Self { limit_ms, proposer, clock, open: Mutex::new(BTreeMap::new()) }
    }

    fn open(&self) -> std::sync::MutexGuard<'_, BTreeMap<String, Timestamp>> {
        self.open.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Task `task_id` was submitted now.
    pub(crate) fn submitted(&self, task_id: &str) {
        let now = self.clock.now();
        self.open().insert(task_id.to_owned(), now);
    }

    /// Tells the proposing power about every open task past its limit. Tasks with an outcome
    /// are forgotten first.
    pub(crate) async fn expire(
        &self,
        bus: &dyn MessageBus,
        outcomes: &watch::Sender<BTreeMap<String, TaskOutcome>>,
    ) {
        let now = self.clock.now();
        let due: Vec<String> = {
            let mut open = self.open();
            if open.is_empty() {
                return;
            }
            let closed = outcomes.borrow();
            open.retain(|id, _| !closed.contains_key(id));
            open.iter()
                .filter(|(_, at)| now.millis_since(**at) >= self.limit_ms)
                .map(|(id, _)| id.clone())
                .collect()
        };
        for task_id in due {
            let failure = TaskFailure::TimedOut {
                limit: Limit::Task,
                what: format!("task `{task_id}`"),
                limit_ms: self.limit_ms,
            };
            tracing::warn!(task = %task_id, limit_ms = self.limit_ms, "task timed out");
            let escalation = Escalation { task_id, failure };
            let content = match serde_json::to_value(&escalation) {
                Ok(content) => content,
                Err(error) => {
                    tracing::error!(%error, "cannot encode a task timeout");
                    continue;
                }
            };
            let message = Message::new(
                self.clock.message_id(),
                Address::System,
                &self.proposer,
                MessageKind::IssueEscalation,
                content,
                now,
            );
            // Not sent: told again at the next heartbeat.
            if let Err(error) = bus.send(message).await {
                tracing::warn!(%error, "cannot tell the proposing power that a task timed out");
            }
        }
    }
}
