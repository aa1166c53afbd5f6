//! The heartbeat scheduler: one cycle drives every agent that has something to do, each in its
//! own task, so one slow agent never delays the others.

use std::collections::BTreeSet;
use std::sync::Arc;

use agent_core::protocol::Warning;
use agent_core::{AuditEvent, AuditLog, Clock, HeartbeatOutcome, new_message_id};
use agent_state::{Address, AgentId, Message, MessageKind};
use message_bus::MessageBus;
use tokio::task::JoinSet;

use crate::pool::AgentPool;

/// Seed 000's heartbeat period.
pub const DEFAULT_HEARTBEAT: std::time::Duration = std::time::Duration::from_secs(4);

/// What one cycle did.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct CycleReport {
    /// The heartbeat number.
    pub number: u64,
    /// Agents whose heartbeat was started (they had mail or pending work).
    pub started: usize,
    /// Idle agents with nothing new: answered without a task, an allocation or a reasoning call.
    pub idle: usize,
    /// Agents still busy with an earlier heartbeat: each counts a missed heartbeat.
    pub missed: Vec<AgentId>,
}

/// Drives the agents of a pool, one cycle per call to [`tick`](HeartbeatScheduler::tick).
pub struct HeartbeatScheduler {
    pool: Arc<AgentPool>,
    bus: Arc<dyn MessageBus>,
    audit: Arc<dyn AuditLog>,
    clock: Arc<dyn Clock>,
    running: JoinSet<(AgentId, Result<HeartbeatOutcome, String>)>,
    number: u64,
}

impl HeartbeatScheduler {
    /// A scheduler for `pool`.
    pub fn new(
        pool: Arc<AgentPool>,
        bus: Arc<dyn MessageBus>,
        audit: Arc<dyn AuditLog>,
        clock: Arc<dyn Clock>,
    ) -> Self {
        Self { pool, bus, audit, clock, running: JoinSet::new(), number: 0 }
    }

    /// The last heartbeat number.
    pub fn number(&self) -> u64 {
        self.number
    }

    /// Runs one cycle: starts a heartbeat for every agent with mail or pending work, answers for
    /// idle agents directly, and counts a missed heartbeat (with a warning to the supervisor) for
    /// every agent still busy with the previous one. Returns at once; heartbeats run in tasks.
    pub async fn tick(&mut self) -> CycleReport {
        self.number += 1;
        let number = self.number;
        self.reap();
        let with_mail = self.agents_with_mail().await;
        let mut report = CycleReport { number, ..CycleReport::default() };
        for slot in self.pool.all() {
            let Ok(mut guard) = slot.agent().clone().try_lock_owned() else {
                slot.count_missed();
                report.missed.push(slot.id().clone());
                self.warn_missed(slot.id(), slot.supervisor(), number).await;
                continue;
            };
            if !with_mail.contains(slot.id()) && !slot.wants_tick() {
                guard.ctx_mut().metrics_mut().heartbeats_responded += 1;
                report.idle += 1;
                continue;
            }
            report.started += 1;
            let slot = slot.clone();
            self.running.spawn(async move {
                let result = guard.heartbeat(number).await.map_err(|e| e.to_string());
                slot.set_wants_tick(guard.wants_tick());
                (slot.id().clone(), result)
            });
        }
        report
    }

    /// Waits for every running heartbeat to finish.
    pub async fn settle(&mut self) {
        while let Some(joined) = self.running.join_next().await {
            log_joined(joined);
        }
    }

    /// How many heartbeats are running.
    pub fn running(&self) -> usize {
        self.running.len()
    }

    fn reap(&mut self) {
        while let Some(joined) = self.running.try_join_next() {
            log_joined(joined);
        }
    }

    async fn agents_with_mail(&self) -> BTreeSet<AgentId> {
        let mut with_mail = BTreeSet::new();
        for slot in self.pool.all() {
            let inbox = Address::Agent(slot.id().clone());
            if self.bus.pending(&inbox).await.is_ok_and(|n| n > 0) {
                with_mail.insert(slot.id().clone());
            }
        }
        with_mail
    }

    async fn warn_missed(&self, agent: &AgentId, supervisor: Option<&AgentId>, number: u64) {
        let now = self.clock.now();
        if let Err(e) =
            self.audit.append(agent, now, AuditEvent::MissedHeartbeat { heartbeat: number }).await
        {
            tracing::warn!(agent = %agent, error = %e, "could not audit a missed heartbeat");
        }
        tracing::info!(agent = %agent, heartbeat = number, "missed heartbeat");
        let Some(supervisor) = supervisor else { return };
        let warning = Warning {
            about: agent.clone(),
            reason: format!("missed heartbeat {number}: still busy"),
        };
        let Ok(content) = serde_json::to_value(&warning) else { return };
        let message = Message::new(
            new_message_id(),
            Address::System,
            supervisor,
            MessageKind::Warning,
            content,
            now,
        );
        if let Err(e) = self.bus.send(message).await {
            tracing::warn!(agent = %agent, error = %e, "could not warn the supervisor of a missed heartbeat");
        }
    }
}

fn log_joined(joined: Result<(AgentId, Result<HeartbeatOutcome, String>), tokio::task::JoinError>) {
    match joined {
        Ok((agent, Ok(outcome))) => tracing::trace!(agent = %agent, ?outcome, "heartbeat done"),
        Ok((agent, Err(error))) => {
            tracing::warn!(agent = %agent, error = %error, "heartbeat could not complete")
        }
        Err(e) => tracing::error!(error = %e, "a heartbeat task panicked or was cancelled"),
    }
}
