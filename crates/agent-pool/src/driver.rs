//! The team's driver: the one heartbeat loop that moves a team's agents ([`Driver`]).
//!
//! A heartbeat every period, and in between, wake on work: when mail arrives (the team's
//! [`WakingBus`](crate::WakingBus) puts every recipient in the [`ReadyQueue`] and signals) or
//! a turn ends (mail may have reached its agent meanwhile), the agents made ready run at
//! once. A driver that coordinates the run (a
//! [`Share`](crate::Share) other than a worker's share of agents) also reads the `system`
//! inbox (the tasks' outcomes) and expires the tasks past their limit; the run's guards watch
//! every cycle. [`Driver::spawn`] runs it in its own task, stopped through the
//! [`DriverHandle`] it returns.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use agent_core::protocol::StatusReport;
use agent_core::{StateStore, payload};
use agent_state::{Address, CommandOutcome, MessageId, MessageKind, TaskOutcome};
use message_bus::MessageBus;
use tokio::sync::watch;
use tokio::task::JoinHandle;

use crate::deadline::TaskDeadlines;
use crate::guard::RunGuard;
use crate::scheduler::HeartbeatScheduler;
use crate::wake::ReadyQueue;

/// The outcomes of a run's tasks as the driver reads them, by task id.
pub type Outcomes = watch::Sender<BTreeMap<String, TaskOutcome>>;

/// The answers to operator commands sent by `system` as the driver reads them, by the
/// command's message id.
pub(crate) type Commands = watch::Sender<BTreeMap<MessageId, CommandOutcome>>;

/// What woke the driver.
enum Event {
    Heartbeat,
    Mail,
    TurnEnded,
    Stop,
}

/// The heartbeat loop of a team: owns the scheduler and what the loop needs between cycles
/// (the ready queue that wakes it, the run's guards, the `system` inbox it reads as coordinator), so
/// one loop serves every way a team is run. Build it with [`Driver::new`] and the `with_`
/// methods, then [`run`](Self::run) it, or [`spawn`](Self::spawn) it into its own task.
pub struct Driver {
    scheduler: HeartbeatScheduler,
    period: Duration,
    ready: Arc<ReadyQueue>,
    guard: Option<RunGuard>,
    /// The tasks' outcomes, published as read; dropped when the driver ends, so whoever waits
    /// on them learns the team is stopped.
    outcomes: Outcomes,
    coordination: Option<Coordination>,
}

/// What the coordinator of a run does each cycle besides the heartbeat: read the `system`
/// inbox into the outcomes, and close the tasks past their limit.
pub(crate) struct Coordination {
    bus: Arc<dyn MessageBus>,
    state: Arc<dyn StateStore>,
    deadlines: Arc<TaskDeadlines>,
    /// The answers to operator commands, published as read.
    commands: Commands,
    /// System messages read whose acknowledgement failed (a bus outage): sent again each cycle.
    unacked: Vec<agent_state::MessageId>,
}

impl Coordination {
    /// Reads `system` from `bus`, storing outcomes in `state` and publishing the answers to
    /// operator commands on `commands`; closes the tasks `deadlines` says are past their limit.
    pub(crate) fn new(
        bus: Arc<dyn MessageBus>,
        state: Arc<dyn StateStore>,
        deadlines: Arc<TaskDeadlines>,
        commands: Commands,
    ) -> Self {
        Self { bus, state, deadlines, commands, unacked: Vec::new() }
    }

    /// Closes the tasks past their limit.
    async fn expire(&self, outcomes: &Outcomes) {
        self.deadlines.expire(self.bus.as_ref(), outcomes).await;
    }

    /// One read of the `system` inbox into `outcomes`; `true` if nothing is left
    /// unacknowledged.
    async fn drain(&mut self, outcomes: &Outcomes) -> bool {
        let reports = Reports { tasks: outcomes, commands: &self.commands };
        drain_system(self.bus.as_ref(), self.state.as_ref(), &reports, &mut self.unacked).await
    }
}

impl Driver {
    /// A driver of `scheduler`'s pool with a heartbeat every `period`, woken by nothing but
    /// its heartbeat, its turns' ends and the scheduler's ready queue (if it has one), with no
    /// guards, coordinating nothing.
    pub fn new(scheduler: HeartbeatScheduler, period: Duration) -> Self {
        let ready = scheduler.ready().cloned().unwrap_or_default();
        Self {
            scheduler,
            period,
            ready,
            guard: None,
            outcomes: watch::channel(BTreeMap::new()).0,
            coordination: None,
        }
    }

    /// Publishing the tasks' outcomes on `outcomes` (its receivers see the sender dropped
    /// when the driver ends).
    pub fn with_outcomes(mut self, outcomes: Outcomes) -> Self {
        self.outcomes = outcomes;
        self
    }

    /// A receiver of the tasks' outcomes as the driver reads them.
    pub fn outcomes(&self) -> watch::Receiver<BTreeMap<String, TaskOutcome>> {
        self.outcomes.subscribe()
    }

    /// Woken between heartbeats whenever `ready` is signalled (by a
    /// [`WakingBus`](crate::WakingBus), or by hand, [`ReadyQueue::rescan`], for mail another
    /// process delivered); each wake starts the agents it made ready
    /// ([`HeartbeatScheduler::with_ready`]).
    pub fn with_wake(mut self, ready: Arc<ReadyQueue>) -> Self {
        self.scheduler = self.scheduler.with_ready(ready.clone());
        self.ready = ready;
        self
    }

    /// Watched by the run's guards every cycle.
    pub(crate) fn with_guard(mut self, guard: RunGuard) -> Self {
        self.guard = Some(guard);
        self
    }

    /// Coordinating the run: reading its outcomes and keeping its tasks' deadlines.
    pub(crate) fn with_coordination(mut self, coordination: Coordination) -> Self {
        self.coordination = Some(coordination);
        self
    }

    /// Runs the driver in its own task, in the caller's span (a run's telemetry knows which
    /// run every agent's span belongs to), until the returned handle stops it.
    pub fn spawn(self) -> DriverHandle {
        let (stop, stopped) = watch::channel(false);
        let task = tokio::spawn(tracing::Instrument::in_current_span(self.run(stopped)));
        DriverHandle { stop, task }
    }

    /// Runs cycles until `stop` says `true` (or its sender is dropped), then lets the running
    /// turns finish, reads `system` a last time if it coordinates, and gives back the
    /// scheduler.
    pub async fn run(mut self, mut stop: watch::Receiver<bool>) -> HeartbeatScheduler {
        let mut interval = tokio::time::interval(self.period);
        interval.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        // The first cycle starts before a stop is heeded (the interval's first tick is at
        // once): a resumed team's agents first take the turns an interruption cut short, their
        // unacknowledged mail, and a stop waits for those turns. Without this, a run killed
        // after its task closed but before the closing turn acknowledged its message would
        // resume, see the outcome, and shut down with that message never acknowledged.
        interval.tick().await;
        let mut event = Event::Heartbeat;
        loop {
            match event {
                Event::Stop => {
                    self.finish().await;
                    return self.scheduler;
                }
                Event::Heartbeat => self.heartbeat().await,
                Event::Mail | Event::TurnEnded => self.wake().await,
            }
            if let Some(coordination) = &mut self.coordination {
                coordination.drain(&self.outcomes).await;
            }
            event = self.next_event(&mut interval, &mut stop).await;
        }
    }

    /// One heartbeat: the guards' look at the run, the deadlines, every agent's cycle.
    async fn heartbeat(&mut self) {
        match (&mut self.guard, &self.coordination) {
            (guard, Some(coordination)) => {
                if let Some(guard) = guard {
                    guard.heartbeat(self.scheduler.still_running() > 0).await;
                }
                coordination.expire(&self.outcomes).await;
            }
            // A share of a run sees only its own agents: whether the run moves is the
            // coordinator's to judge; bounces are followed here.
            (Some(guard), None) => guard.bounces().await,
            (None, None) => {}
        }
        let report = self.scheduler.tick().await;
        tracing::trace!(
            heartbeat = report.number,
            started = report.started,
            idle = report.idle,
            missed = report.missed.len(),
            "cycle"
        );
    }

    /// Wake on work: the agents made ready take their turns now.
    async fn wake(&mut self) {
        if let Some(guard) = &mut self.guard {
            guard.bounces().await;
        }
        let woken = self.scheduler.wake().await;
        tracing::trace!(woken, "wake on work");
    }

    /// Lets the running heartbeats finish, then reads what they reported. A bus that fails now
    /// (its server restarting) is read again, a heartbeat later, a few times at most: what the
    /// agents reported last is not left in `system`.
    async fn finish(&mut self) {
        self.scheduler.settle().await;
        let Some(coordination) = &mut self.coordination else { return };
        for attempt in 1..=FINAL_DRAINS {
            if coordination.drain(&self.outcomes).await {
                break;
            }
            if attempt < FINAL_DRAINS {
                tokio::time::sleep(self.period).await;
            }
        }
    }

    /// Waits for what wakes the driver next.
    async fn next_event(
        &mut self,
        interval: &mut tokio::time::Interval,
        stop: &mut watch::Receiver<bool>,
    ) -> Event {
        let running = self.scheduler.running() > 0;
        let allowance = self.scheduler.next_wake();
        tokio::select! {
            biased;
            _ = stop.changed() => Event::Stop,
            _ = interval.tick() => Event::Heartbeat,
            () = self.ready.notified() => Event::Mail,
            true = self.scheduler.next_finished(), if running => Event::TurnEnded,
            () = sleep_until_some(allowance), if allowance.is_some() => Event::Mail,
        }
    }
}

/// A running [`Driver`]: stops it, or aborts it as if the process died.
pub struct DriverHandle {
    stop: watch::Sender<bool>,
    task: JoinHandle<HeartbeatScheduler>,
}

impl DriverHandle {
    /// Stops the driver and waits for the running heartbeats to finish, every agent left in its
    /// current status with everything stored.
    pub async fn stop(self) {
        let _ = self.stop.send(true);
        match self.task.await {
            Ok(mut scheduler) => scheduler.settle().await,
            Err(e) => tracing::error!(error = %e, "the team's driver task failed"),
        }
    }

    /// Stops the driver as [`stop`](Self::stop) does, waiting at most `patience` for the
    /// running heartbeats; past it they are aborted, as if the process died. `false` if it had
    /// to abort.
    pub async fn stop_within(self, patience: Duration) -> bool {
        let Self { stop, mut task } = self;
        let _ = stop.send(true);
        match tokio::time::timeout(patience, &mut task).await {
            Ok(Ok(mut scheduler)) => {
                scheduler.settle().await;
                true
            }
            Ok(Err(e)) => {
                tracing::error!(error = %e, "the team's driver task failed");
                true
            }
            Err(_) => {
                task.abort();
                false
            }
        }
    }

    /// Aborts the driver and every running heartbeat at once, as if the process died.
    pub fn abort(self) {
        self.task.abort();
    }
}

async fn sleep_until_some(at: Option<tokio::time::Instant>) {
    if let Some(at) = at {
        tokio::time::sleep_until(at).await;
    }
}

/// How many times the driver's last read of `system` (at a stop) is made when the bus fails.
const FINAL_DRAINS: u32 = 3;

/// Publishes the answer `message` gives to an operator command sent by `system`.
fn command_answered(message: &agent_state::Message, commands: &Commands) {
    match (payload::<CommandOutcome>(message), message.correlation_id) {
        (Ok(outcome), Some(command)) => {
            tracing::info!(agent = %message.from, ?outcome, "operator command answered");
            commands.send_modify(|c| {
                c.insert(command, outcome);
            });
        }
        (Ok(_), None) => {
            tracing::warn!(from = %message.from, "a command outcome that answers no command");
        }
        (Err(e), _) => {
            tracing::warn!(error = %e, "unreadable command outcome on the system inbox");
        }
    }
}

/// What the agents report to `system`, published by the driver as it reads them.
struct Reports<'a> {
    /// The tasks' outcomes, by task id.
    tasks: &'a Outcomes,
    /// The answers to operator commands, by the command's message id.
    commands: &'a Commands,
}

/// Reads the `system` inbox: heartbeat acks are dropped, task outcomes stored and published,
/// answers to operator commands published.
/// A message is acknowledged only after its outcome is stored. `true` if everything read (now
/// and before) is acknowledged; `false` if the bus or the store failed, leaving something for
/// the next drain.
async fn drain_system(
    bus: &dyn MessageBus,
    state: &dyn StateStore,
    reports: &Reports<'_>,
    unacked: &mut Vec<agent_state::MessageId>,
) -> bool {
    let messages = match bus.take(&Address::System, usize::MAX).await {
        Ok(m) => m,
        Err(e) => {
            tracing::warn!(error = %e, "cannot read the system inbox");
            ack_system(bus, unacked, Vec::new()).await;
            return false;
        }
    };
    for message in &messages {
        if message.kind == MessageKind::CommandOutcome {
            command_answered(message, reports.commands);
            continue;
        }
        if message.kind != MessageKind::StatusReport {
            continue;
        }
        match payload::<StatusReport>(message) {
            Ok(StatusReport::TaskClosed { outcome }) => {
                if let Err(e) = state.record_outcome(&outcome).await {
                    // Not acknowledged: the report comes again on the next cycle.
                    tracing::warn!(error = %e, "cannot store a task outcome; will retry");
                    let _ = bus.release(&Address::System).await;
                    ack_system(bus, unacked, Vec::new()).await;
                    return false;
                }
                tracing::info!(task = %outcome.task_id(), success = outcome.is_success(), "task closed");
                reports.tasks.send_modify(|o| {
                    o.entry(outcome.task_id().to_owned()).or_insert(outcome);
                });
            }
            Ok(_) => {}
            Err(e) => tracing::warn!(error = %e, "unreadable status report on the system inbox"),
        }
    }
    ack_system(bus, unacked, messages.iter().map(|m| m.id).collect()).await
}

/// Acknowledges `read` on the system inbox, with the ids in `unacked` whose acknowledgement
/// failed before: a failed acknowledgement (the bus unreachable for a while) keeps them all in
/// `unacked`, to be sent again at the next drain, so none stays pending once the bus is back.
/// Acknowledging an id again is harmless (a bus ignores ids no longer in flight). `true` if
/// nothing is left unacknowledged.
async fn ack_system(
    bus: &dyn MessageBus,
    unacked: &mut Vec<agent_state::MessageId>,
    read: Vec<agent_state::MessageId>,
) -> bool {
    unacked.extend(read);
    if unacked.is_empty() {
        return true;
    }
    match bus.ack(&Address::System, unacked).await {
        Ok(_) => {
            unacked.clear();
            true
        }
        Err(e) => {
            tracing::warn!(error = %e, pending = unacked.len(), "cannot acknowledge the system inbox; will send the acknowledgement again");
            false
        }
    }
}

#[cfg(test)]
mod drain_tests {
    #![allow(clippy::unwrap_used, reason = "tests")]
    use std::sync::atomic::{AtomicU32, Ordering};

    use agent_state::{BackendError, MessageId, Timestamp};
    use async_trait::async_trait;
    use message_bus::{InMemoryBus, InboxError, RegisterError, SendError};

    use agent_state::{AgentId, Message};

    use super::*;

    /// An in-memory bus whose next `fails` acknowledgements fail (a server restarting).
    struct FlakyAcks {
        inner: InMemoryBus,
        fails: AtomicU32,
    }

    #[async_trait]
    impl MessageBus for FlakyAcks {
        async fn register(&self, agent: &AgentId) -> Result<(), RegisterError> {
            self.inner.register(agent).await
        }
        async fn unregister(&self, agent: &AgentId) -> Result<(), RegisterError> {
            self.inner.unregister(agent).await
        }
        async fn is_registered(&self, agent: &AgentId) -> Result<bool, BackendError> {
            self.inner.is_registered(agent).await
        }
        async fn registered(&self) -> Result<Vec<AgentId>, BackendError> {
            self.inner.registered().await
        }
        async fn send(&self, message: Message) -> Result<usize, SendError> {
            self.inner.send(message).await
        }
        async fn send_many(&self, messages: Vec<Message>) -> Result<Vec<usize>, SendError> {
            self.inner.send_many(messages).await
        }
        async fn take(&self, inbox: &Address, max: usize) -> Result<Vec<Message>, InboxError> {
            self.inner.take(inbox, max).await
        }
        async fn ack(&self, inbox: &Address, ids: &[MessageId]) -> Result<usize, InboxError> {
            if self
                .fails
                .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1))
                .is_ok()
            {
                return Err(InboxError::Backend(BackendError::new("test", "server restarting")));
            }
            self.inner.ack(inbox, ids).await
        }
        async fn release(&self, inbox: &Address) -> Result<usize, InboxError> {
            self.inner.release(inbox).await
        }
        async fn pending(&self, inbox: &Address) -> Result<usize, InboxError> {
            self.inner.pending(inbox).await
        }
    }

    #[tokio::test]
    async fn a_failed_system_ack_is_sent_again_at_the_next_drain() {
        let bus = FlakyAcks { inner: InMemoryBus::new(), fails: AtomicU32::new(1) };
        let from = AgentId::new("worker");
        bus.register(&from).await.unwrap();
        for heartbeat in 1..=2u64 {
            let ack = Message::new(
                agent_core::new_message_id(),
                Address::Agent(from.clone()),
                Address::System,
                MessageKind::HeartbeatAck,
                serde_json::json!({ "heartbeat": heartbeat }),
                Timestamp(heartbeat),
            );
            bus.send(ack).await.unwrap();
        }
        let state = agent_core::InMemoryStateStore::default();
        let (outcomes, _) = watch::channel(BTreeMap::new());
        let (commands, _) = watch::channel(BTreeMap::new());
        let reports = Reports { tasks: &outcomes, commands: &commands };
        let mut unacked = Vec::new();
        // The acknowledgement fails during the outage: both are kept, and the drain says so
        // (a stop's last drain is made again).
        assert!(!drain_system(&bus, &state, &reports, &mut unacked).await);
        assert_eq!(unacked.len(), 2);
        // Back: the next drain, with nothing new to read, acknowledges them.
        assert!(drain_system(&bus, &state, &reports, &mut unacked).await);
        assert!(unacked.is_empty());
        assert_eq!(bus.pending(&Address::System).await.unwrap(), 0);
        assert_eq!(
            bus.release(&Address::System).await.unwrap(),
            0,
            "left in flight, unacknowledged"
        );
    }
}
