//! The team's task limit (`[timeouts] task_ms`): every task submitted through
//! [`Team::submit`](crate::Team::submit) must close within it, counted on the run's clock from
//! its submission. At each heartbeat the team's driver tells the proposing power, for every
//! open task past its limit, that it ran out of time: an `issue_escalation` from `system` with
//! [`TaskFailure::TimedOut`]. The power closes the task with that reason through its usual
//! path (audited as `TimedOut`, the outcome stored and reported to `system`), so the outcome
//! has one writer. It is told again at each heartbeat until the task is closed (a power busy
//! planning it takes the task first).
//!
//! The task's soft limit (`[timeouts] task_soft_ms`, by default half of `task_ms`): at the
//! first heartbeat past it an open task is told about once: a tracing warning, an
//! [`AuditEvent::SoftTimeout`](agent_core::AuditEvent::SoftTimeout) (as the proposing power's
//! record; the run's output shows it) and a `warning` message to `system`, the task's
//! submitter. The task goes on to `task_ms` as before.
//!
//! Known limit: the submission times are kept in memory, so after [`Team::resume`]
//! (crate::Team::resume) a task submitted before the interruption is no longer bounded.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, PoisonError};

use agent_core::protocol::{Escalation, Warning};
use agent_core::{AuditEvent, AuditLog, Clock};
use agent_state::{
    Address, AgentId, Limit, LimitPhase, Message, MessageKind, TaskFailure, TaskOutcome, Timestamp,
    limit_phase,
};
use message_bus::MessageBus;
use tokio::sync::watch;

/// An open task: when it was submitted, and whether it was told about its soft limit.
#[derive(Clone, Copy, Debug)]
struct Open {
    at: Timestamp,
    soft_told: bool,
}

/// The open tasks' submission times and the limits they are held to.
pub(crate) struct TaskDeadlines {
    limit_ms: u64,
    soft_ms: Option<u64>,
    proposer: AgentId,
    clock: Arc<dyn Clock>,
    audit: Arc<dyn AuditLog>,
    open: Mutex<BTreeMap<String, Open>>,
}

impl TaskDeadlines {
    /// Tasks held to `limit_ms`, told at `soft_ms` (see [`agent_state::soft_limit`]).
    pub(crate) fn new(
        limit_ms: u64,
        soft_ms: Option<u64>,
        proposer: AgentId,
        clock: Arc<dyn Clock>,
        audit: Arc<dyn AuditLog>,
    ) -> Self {
        Self { limit_ms, soft_ms, proposer, clock, audit, open: Mutex::new(BTreeMap::new()) }
    }

    fn open(&self) -> std::sync::MutexGuard<'_, BTreeMap<String, Open>> {
        self.open.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Task `task_id` was submitted now.
    pub(crate) fn submitted(&self, task_id: &str) {
        let now = self.clock.now();
        self.open().insert(task_id.to_owned(), Open { at: now, soft_told: false });
    }

    /// Tells the proposing power about every open task past its limit. Tasks with an outcome
    /// are forgotten first.
    pub(crate) async fn expire(
        &self,
        bus: &dyn MessageBus,
        outcomes: &watch::Sender<BTreeMap<String, TaskOutcome>>,
    ) {
        let now = self.clock.now();
        let (due, slow): (Vec<String>, Vec<String>) = {
            let mut open = self.open();
            if open.is_empty() {
                return;
            }
            let closed = outcomes.borrow();
            open.retain(|id, _| !closed.contains_key(id));
            let mut due = Vec::new();
            let mut slow = Vec::new();
            for (id, task) in open.iter_mut() {
                match limit_phase(now.millis_since(task.at), self.soft_ms, self.limit_ms) {
                    LimitPhase::Hard => due.push(id.clone()),
                    LimitPhase::Soft if !task.soft_told => {
                        task.soft_told = true;
                        slow.push(id.clone());
                    }
                    LimitPhase::Soft | LimitPhase::Within => {}
                }
            }
            (due, slow)
        };
        for task_id in slow {
            self.soft_timeout(bus, task_id, now).await;
        }
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

    /// Tells that open task `task_id` passed its soft limit: a warning, an audit record and a
    /// `warning` message to `system`.
    async fn soft_timeout(&self, bus: &dyn MessageBus, task_id: String, now: Timestamp) {
        let soft_ms = self.soft_ms.unwrap_or_default();
        let what = format!("task `{task_id}`");
        tracing::warn!(task = %task_id, soft_ms, hard_ms = self.limit_ms, "task past its soft time limit; still running");
        let event = AuditEvent::SoftTimeout {
            limit: Limit::Task,
            what: what.clone(),
            soft_ms,
            hard_ms: self.limit_ms,
        };
        if let Err(error) = self.audit.append(&self.proposer, now, event).await {
            tracing::warn!(%error, "could not audit a task's soft timeout");
        }
        let reason = format!(
            "{what} has been open {soft_ms} ms, past its soft limit (`[timeouts] task_soft_ms`); \
             still running, stopped at {} ms",
            self.limit_ms
        );
        let warning = Warning { about: self.proposer.clone(), reason };
        let content = match serde_json::to_value(&warning) {
            Ok(content) => content,
            Err(error) => {
                tracing::error!(%error, "cannot encode a task's soft timeout");
                return;
            }
        };
        let message = Message::new(
            self.clock.message_id(),
            Address::System,
            Address::System,
            MessageKind::Warning,
            content,
            now,
        );
        if let Err(error) = bus.send(message).await {
            tracing::warn!(%error, "cannot tell system that a task passed its soft limit");
        }
    }
}
