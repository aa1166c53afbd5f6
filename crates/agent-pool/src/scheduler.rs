//! The heartbeat scheduler: one cycle drives every agent that has something to do, each in its
//! own task, so one slow agent never delays the others; idle agents cost nothing.

use std::collections::{BTreeSet, HashMap};
use std::sync::{Arc, Mutex, PoisonError};

use agent_core::protocol::Warning;
use agent_core::{AuditEvent, AuditLog, Clock, HeartbeatOutcome};
use agent_state::{Address, AgentId, Message, MessageKind};
use message_bus::MessageBus;
use tokio::task::JoinSet;

use crate::pool::AgentPool;

/// Seed 000's heartbeat period.
pub const DEFAULT_HEARTBEAT: std::time::Duration = std::time::Duration::from_secs(4);

/// How many turns one agent can take in a burst because mail arrived (wake on work).
pub const WAKE_BURST: u32 = 256;

/// How many turns per second one agent takes at most, once its burst is spent: a storm of
/// messages to one agent cannot keep it running at the others' expense (each turn takes up to
/// [`MAX_MESSAGES_PER_HEARTBEAT`](agent_core::MAX_MESSAGES_PER_HEARTBEAT) messages, so this
/// still lets a busy agent through millions of messages per second). Its mail waits, at most
/// `1 / WAKE_RATE` seconds, and is then taken.
pub const WAKE_RATE: f64 = 20_000.0;

/// One agent's allowance of wake-up turns: a token bucket of [`WAKE_BURST`] turns refilled
/// at [`WAKE_RATE`] per second.
#[derive(Clone, Copy, Debug)]
struct Allowance {
    tokens: f64,
    at: tokio::time::Instant,
}

impl Allowance {
    /// Takes one turn now, or says when one is available.
    fn take(&mut self, now: tokio::time::Instant) -> Result<(), tokio::time::Instant> {
        let refill = now.saturating_duration_since(self.at).as_secs_f64() * WAKE_RATE;
        self.tokens = (self.tokens + refill).min(f64::from(WAKE_BURST));
        self.at = now;
        if self.tokens >= 1.0 {
            self.tokens -= 1.0;
            Ok(())
        } else {
            let wait = (1.0 - self.tokens) / WAKE_RATE;
            Err(now + std::time::Duration::from_secs_f64(wait))
        }
    }
}

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
///
/// A cycle costs time in the number of agents with something to do (mail, pending work, or
/// still busy), not in the size of the pool: the bus names the inboxes with mail, the scheduler
/// remembers who asked for another tick, and an idle agent's heartbeat is counted as answered
/// without touching it ([`AgentSlot::metrics`](crate::AgentSlot::metrics) adds those cycles).
pub struct HeartbeatScheduler {
    pool: Arc<AgentPool>,
    bus: Arc<dyn MessageBus>,
    audit: Arc<dyn AuditLog>,
    clock: Arc<dyn Clock>,
    running: JoinSet<(AgentId, Result<HeartbeatOutcome, String>)>,
    /// Agents with a turn running, in order (missed heartbeats are warned about in id order).
    busy: BTreeSet<AgentId>,
    ticking: Arc<Mutex<BTreeSet<AgentId>>>,
    number: u64,
    /// Each agent's allowance of wake-up turns.
    wakes: HashMap<AgentId, Allowance>,
    /// When an agent whose allowance ran out may take its mail: the driver wakes then.
    next_wake: Option<tokio::time::Instant>,
}

impl HeartbeatScheduler {
    /// A scheduler for `pool`.
    pub fn new(
        pool: Arc<AgentPool>,
        bus: Arc<dyn MessageBus>,
        audit: Arc<dyn AuditLog>,
        clock: Arc<dyn Clock>,
    ) -> Self {
        Self {
            pool,
            bus,
            audit,
            clock,
            running: JoinSet::new(),
            busy: BTreeSet::new(),
            ticking: Arc::default(),
            number: 0,
            wakes: HashMap::new(),
            next_wake: None,
        }
    }

    /// The last heartbeat number.
    pub fn number(&self) -> u64 {
        self.number
    }

    /// Runs one cycle: starts a heartbeat for every agent with mail or pending work, counts a
    /// missed heartbeat (with a warning to the supervisor) for every agent still busy with the
    /// previous one, and counts everyone else as idle. Returns at once; heartbeats run in tasks.
    pub async fn tick(&mut self) -> CycleReport {
        let number = self.pool.next_cycle();
        self.number = number;
        self.reap();
        let mut report = CycleReport { number, ..CycleReport::default() };
        let mut due: BTreeSet<AgentId> = match self.bus.inboxes_with_mail().await {
            Ok(agents) => agents.into_iter().collect(),
            Err(e) => {
                tracing::warn!(error = %e, "cannot list inboxes with mail; driving every agent this cycle");
                self.pool.all().iter().map(|s| s.id().clone()).collect()
            }
        };
        {
            let mut ticking = self.ticking.lock().unwrap_or_else(PoisonError::into_inner);
            // A newly added (or restored) agent may have work without mail: ask it once.
            for id in self.pool.take_arrivals() {
                let Some(slot) = self.pool.get(&id) else { continue };
                match slot.agent().try_lock() {
                    Ok(agent) if !agent.wants_tick() => {}
                    _ => {
                        ticking.insert(id);
                    }
                }
            }
            due.extend(ticking.iter().cloned());
        }

        let busy: Vec<AgentId> = self.busy.iter().cloned().collect();
        for id in busy {
            if let Some(slot) = self.pool.get(&id) {
                slot.count_missed();
                self.warn_missed(&id, slot.supervisor(), number).await;
                report.missed.push(id);
            }
        }
        for id in due {
            if self.busy.contains(&id) {
                continue;
            }
            let Some(slot) = self.pool.get(&id) else { continue };
            let Ok(mut guard) = slot.agent().clone().try_lock_owned() else {
                // Someone else is acting as the agent right now: it cannot answer this cycle.
                slot.count_missed();
                report.missed.push(id);
                continue;
            };
            slot.count_ran();
            report.started += 1;
            self.busy.insert(id.clone());
            let ticking = self.ticking.clone();
            self.running.spawn(async move {
                let result = guard.heartbeat(number).await.map_err(|e| e.to_string());
                let mut ticking = ticking.lock().unwrap_or_else(PoisonError::into_inner);
                if guard.wants_tick() {
                    ticking.insert(id.clone());
                } else {
                    ticking.remove(&id);
                }
                (id, result)
            });
        }
        report.idle = self.pool.len().saturating_sub(report.started + report.missed.len());
        report
    }

    /// Wake on work: starts a turn ([`Agent::wake`](agent_core::Agent::wake)) for every agent
    /// with mail that is not busy and has a turn left in its allowance ([`WAKE_BURST`] at once,
    /// [`WAKE_RATE`] per second). Costs time in the inboxes with mail, like a cycle. Returns how
    /// many turns it started; they run in tasks, as heartbeats do. An agent left waiting for its
    /// allowance is due at [`next_wake`](Self::next_wake).
    pub async fn wake(&mut self) -> usize {
        self.reap();
        self.next_wake = None;
        let with_mail = match self.bus.inboxes_with_mail().await {
            Ok(agents) => agents,
            Err(e) => {
                tracing::debug!(error = %e, "cannot list inboxes with mail; waiting for the heartbeat");
                return 0;
            }
        };
        let now = tokio::time::Instant::now();
        let mut started = 0;
        for id in with_mail {
            if self.busy.contains(&id) {
                continue;
            }
            let Some(slot) = self.pool.get(&id) else { continue };
            let Ok(mut guard) = slot.agent().clone().try_lock_owned() else { continue };
            let allowance = self
                .wakes
                .entry(id.clone())
                .or_insert(Allowance { tokens: f64::from(WAKE_BURST), at: now });
            if let Err(due) = allowance.take(now) {
                self.next_wake = Some(self.next_wake.map_or(due, |next| next.min(due)));
                continue;
            }
            started += 1;
            self.busy.insert(id.clone());
            let ticking = self.ticking.clone();
            self.running.spawn(async move {
                let result = guard.wake().await.map_err(|e| e.to_string());
                let mut ticking = ticking.lock().unwrap_or_else(PoisonError::into_inner);
                if guard.wants_tick() {
                    ticking.insert(id.clone());
                } else {
                    ticking.remove(&id);
                }
                (id, result)
            });
        }
        started
    }

    /// When an agent that used up its wake-up allowance may take its mail, if one is waiting.
    pub fn next_wake(&self) -> Option<tokio::time::Instant> {
        self.next_wake
    }

    /// Waits until one running turn ends and books it; `false` when none is running.
    pub async fn next_finished(&mut self) -> bool {
        match self.running.join_next().await {
            Some(joined) => {
                self.finished(joined);
                true
            }
            None => false,
        }
    }

    /// Waits for every running heartbeat to finish.
    pub async fn settle(&mut self) {
        while let Some(joined) = self.running.join_next().await {
            self.finished(joined);
        }
    }

    /// How many heartbeats are running.
    pub fn running(&self) -> usize {
        self.running.len()
    }

    /// How many heartbeats are still running, after booking those that ended.
    pub fn still_running(&mut self) -> usize {
        self.reap();
        self.running.len()
    }

    fn reap(&mut self) {
        while let Some(joined) = self.running.try_join_next() {
            self.finished(joined);
        }
    }

    fn finished(
        &mut self,
        joined: Result<(AgentId, Result<HeartbeatOutcome, String>), tokio::task::JoinError>,
    ) {
        match joined {
            Ok((agent, result)) => {
                match result {
                    Ok(outcome) => tracing::trace!(agent = %agent, ?outcome, "heartbeat done"),
                    Err(error) => {
                        tracing::warn!(agent = %agent, error = %error, "heartbeat could not complete")
                    }
                }
                self.busy.remove(&agent);
            }
            Err(e) => {
                // The task panicked: its agent stays marked busy, so it is reported as missing
                // every cycle instead of silently disappearing.
                tracing::error!(error = %e, "a heartbeat task panicked or was cancelled");
            }
        }
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
            self.clock.message_id(),
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
