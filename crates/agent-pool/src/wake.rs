//! Wake on work: a bus that tells the team's driver which agent got mail, through a ready
//! queue, so an agent with new mail runs as soon as it arrives instead of at the next
//! heartbeat, and a delivery costs the scheduler the same however many agents the team has.

use std::collections::HashSet;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use agent_state::{Address, AgentId, BackendError, Message, MessageId};
use async_trait::async_trait;
use message_bus::{InboxError, MessageBus, RegisterError, SendError};
use rustc_hash::FxBuildHasher;
use tokio::sync::Notify;

/// The agents a delivery made runnable since the team's driver last looked: the ready queue.
///
/// The team's [`WakingBus`] pushes the recipient of every delivery and signals the driver;
/// [`HeartbeatScheduler::wake`](crate::HeartbeatScheduler::wake) drains the queue and starts a
/// turn for exactly those agents, in the order they became ready. A delivery costs one hash
/// lookup here and one in the scheduler, however many agents the team has and however many of
/// them have mail: nothing lists the inboxes. An agent is queued at most once until the next
/// drain, so the queue holds at most one entry per agent, and the driver is signalled at most
/// once between two drains: a storm of mail signals it once. An agent the scheduler queued
/// again without a signal (its lock was held, its allowance spent)
/// is still signalled for by the next delivery to it, so that delivery is never left waiting
/// for the heartbeat.
///
/// Mail the queue cannot name (delivered by another process and seen on the server, a
/// broadcast) asks for a [`rescan`](Self::rescan): the next wake lists the inboxes with mail
/// ([`MessageBus::inboxes_with_mail`]) as well. The heartbeat always lists them, so mail that
/// reached an inbox without passing here (a durable bus restarted, messages released by a
/// failed turn) is taken at the next heartbeat at the latest.
///
/// ```
/// use agent_pool::ReadyQueue;
/// use agent_state::AgentId;
///
/// let ready = ReadyQueue::new();
/// ready.push(&AgentId::new("bottom-1"));
/// ready.push(&AgentId::new("bottom-1")); // already queued: nothing more
/// assert_eq!(ready.len(), 1);
/// ```
#[derive(Default)]
pub struct ReadyQueue {
    state: Mutex<Ready>,
    signal: Notify,
}

/// What the queue holds between two drains.
#[derive(Default)]
struct Ready {
    /// The agents made ready, in the order they became ready (deterministic, unlike a set).
    order: Vec<AgentId>,
    /// The same agents, to refuse a second entry.
    queued: HashSet<AgentId, FxBuildHasher>,
    /// Mail arrived that the queue cannot name: list the inboxes with mail.
    rescan: bool,
    /// The driver was signalled since the last drain (a push need not signal it again).
    signalled: bool,
}

impl ReadyQueue {
    /// An empty queue.
    pub fn new() -> Self {
        Self::default()
    }

    /// Makes `agent` runnable and signals the driver, unless the driver has been signalled
    /// since its last drain already (it will drain this agent too). An agent that is queued
    /// without a signal (by the scheduler) gets one now.
    pub fn push(&self, agent: &AgentId) {
        let signal = {
            let mut ready = self.lock();
            ready.enqueue(agent);
            !std::mem::replace(&mut ready.signalled, true)
        };
        if signal {
            self.signal.notify_one();
        }
    }

    /// Mail arrived that the queue cannot name: the next wake lists the inboxes with mail.
    /// Signals the driver.
    pub fn rescan(&self) {
        self.lock().rescan = true;
        self.signal.notify_one();
    }

    /// Signals the driver without making an agent runnable (mail for `system`, which the
    /// driver of a run's coordinator reads after every wake).
    pub fn nudge(&self) {
        self.signal.notify_one();
    }

    /// Waits for a signal (one given while nobody waited is kept for the next wait).
    pub async fn notified(&self) {
        self.signal.notified().await;
    }

    /// How many agents are queued.
    pub fn len(&self) -> usize {
        self.lock().order.len()
    }

    /// Whether no agent is queued.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Queues `agent` again without a signal: it is looked at in the driver's next wake (a
    /// turn ended, another delivery, the timer of a spent allowance).
    pub(crate) fn requeue(&self, agent: &AgentId) {
        self.lock().enqueue(agent);
    }

    /// Moves the queued agents, in order, to the end of `into`; `true` if a rescan was asked.
    /// Costs time in the number of agents drained.
    pub(crate) fn drain(&self, into: &mut Vec<AgentId>) -> bool {
        let mut ready = self.lock();
        let ready = &mut *ready;
        for agent in &ready.order {
            ready.queued.remove(agent);
        }
        into.append(&mut ready.order);
        ready.signalled = false;
        std::mem::take(&mut ready.rescan)
    }

    fn lock(&self) -> MutexGuard<'_, Ready> {
        // Every critical section leaves the queue consistent before anything can panic.
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

impl Ready {
    /// Queues `agent` unless it is queued.
    fn enqueue(&mut self, agent: &AgentId) {
        if self.queued.insert(agent.clone()) {
            self.order.push(agent.clone());
        }
    }
}

impl std::fmt::Debug for ReadyQueue {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let ready = self.lock();
        f.debug_struct("ReadyQueue")
            .field("queued", &ready.order.len())
            .field("rescan", &ready.rescan)
            .finish_non_exhaustive()
    }
}

/// A [`MessageBus`] that delegates everything to another and, after every delivery, makes its
/// recipient ready in a [`ReadyQueue`] (a broadcast asks for a rescan; mail for `system`
/// signals the driver). Every backend gets wake-on-work this way without knowing about it.
///
/// A take that fills its limit leaves its agent ready: the rest of its mail is taken by its
/// next turn, not at the next heartbeat. Messages released back to pending (a failed turn) do
/// not make the agent ready, and the scheduler takes no turn of an agent whose failed turn's
/// next attempt is not due yet
/// ([`Agent::waits_for_retry`](agent_core::Agent::waits_for_retry)), whatever mail arrives: a
/// retry waits for its heartbeat (1, 2, 4 heartbeats, capped). A failed agent holds the mail
/// it does not refuse (taken, not released), so it does not spin either.
pub struct WakingBus {
    inner: Arc<dyn MessageBus>,
    ready: Arc<ReadyQueue>,
    /// The team's guards, shown every delivered message.
    observer: Option<Arc<crate::guard::Observer>>,
}

impl WakingBus {
    /// Wraps `inner`; each delivery makes its recipient ready in `ready`.
    pub fn new(inner: Arc<dyn MessageBus>, ready: Arc<ReadyQueue>) -> Self {
        Self { inner, ready, observer: None }
    }

    /// The same bus showing every delivered message to the team's guards.
    pub(crate) fn observed(mut self, observer: Arc<crate::guard::Observer>) -> Self {
        self.observer = Some(observer);
        self
    }
}

#[async_trait]
impl MessageBus for WakingBus {
    async fn register(&self, agent: &AgentId) -> Result<(), RegisterError> {
        self.inner.register(agent).await
    }

    async fn unregister(&self, agent: &AgentId) -> Result<(), RegisterError> {
        self.inner.unregister(agent).await
    }

    async fn unregister_many(&self, agents: &[AgentId]) -> Result<Vec<bool>, BackendError> {
        self.inner.unregister_many(agents).await
    }

    async fn is_registered(&self, agent: &AgentId) -> Result<bool, BackendError> {
        self.inner.is_registered(agent).await
    }

    async fn registered(&self) -> Result<Vec<AgentId>, BackendError> {
        self.inner.registered().await
    }

    async fn send(&self, message: Message) -> Result<usize, SendError> {
        // Shown before it is sent (without a copy): a refused send is rare and harmless to
        // the guards (it counts as activity, and as a hand-over that did not happen).
        if let Some(observer) = &self.observer {
            observer.saw(&message);
        }
        let to = match &message.to {
            Address::Agent(agent) => Some(agent.clone()),
            Address::System | Address::Broadcast => None,
        };
        let broadcast = message.to == Address::Broadcast;
        let delivered = self.inner.send(message).await?;
        if delivered > 0 {
            match to {
                Some(agent) => self.ready.push(&agent),
                None if broadcast => self.ready.rescan(),
                None => self.ready.nudge(),
            }
        }
        Ok(delivered)
    }

    /// One batch for the inner bus; then each message's delivery makes its recipient ready, as
    /// `send` does.
    async fn send_many(&self, messages: Vec<Message>) -> Result<Vec<usize>, SendError> {
        if let Some(observer) = &self.observer {
            for message in &messages {
                observer.saw(message);
            }
        }
        let addresses: Vec<Address> = messages.iter().map(|m| m.to.clone()).collect();
        let delivered = self.inner.send_many(messages).await?;
        for (to, &count) in addresses.iter().zip(&delivered) {
            if count > 0 {
                match to {
                    Address::Agent(agent) => self.ready.push(agent),
                    Address::Broadcast => self.ready.rescan(),
                    Address::System => self.ready.nudge(),
                }
            }
        }
        Ok(delivered)
    }

    async fn take(&self, inbox: &Address, max: usize) -> Result<Vec<Message>, InboxError> {
        let taken = self.inner.take(inbox, max).await?;
        if taken.len() >= max
            && max > 0
            && let Address::Agent(agent) = inbox
        {
            // More may wait: the agent's next turn takes it.
            self.ready.push(agent);
        }
        Ok(taken)
    }

    async fn ack(&self, inbox: &Address, ids: &[MessageId]) -> Result<usize, InboxError> {
        self.inner.ack(inbox, ids).await
    }

    async fn release(&self, inbox: &Address) -> Result<usize, InboxError> {
        self.inner.release(inbox).await
    }

    async fn pending(&self, inbox: &Address) -> Result<usize, InboxError> {
        self.inner.pending(inbox).await
    }

    async fn inboxes_with_mail(&self) -> Result<Vec<AgentId>, BackendError> {
        self.inner.inboxes_with_mail().await
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, reason = "tests")]

    use agent_state::{MessageKind, Timestamp};
    use message_bus::InMemoryBus;

    use super::*;

    fn note(n: u128, to: impl Into<Address>) -> Message {
        Message::new(
            MessageId::from_u128(n),
            Address::System,
            to,
            MessageKind::StatusQuery,
            serde_json::json!({}),
            Timestamp(0),
        )
    }

    async fn bus_of(agents: &[&str]) -> (WakingBus, Arc<ReadyQueue>) {
        let inner = Arc::new(InMemoryBus::new());
        for agent in agents {
            inner.register(&AgentId::new(*agent)).await.unwrap();
        }
        let ready = Arc::new(ReadyQueue::new());
        (WakingBus::new(inner, ready.clone()), ready)
    }

    fn drained(ready: &ReadyQueue) -> (Vec<AgentId>, bool) {
        let mut agents = Vec::new();
        let rescan = ready.drain(&mut agents);
        (agents, rescan)
    }

    #[tokio::test]
    async fn each_delivery_makes_exactly_its_recipient_ready_once_until_drained() {
        let (bus, ready) = bus_of(&["a", "b", "c"]).await;
        for (n, to) in ["b", "a", "b", "b"].into_iter().enumerate() {
            bus.send(note(n as u128, AgentId::new(to))).await.unwrap();
        }
        assert_eq!(drained(&ready), (vec![AgentId::new("b"), AgentId::new("a")], false));
        assert!(ready.is_empty());
        // Drained: the next delivery queues its agent again.
        bus.send(note(9, AgentId::new("b"))).await.unwrap();
        assert_eq!(drained(&ready), (vec![AgentId::new("b")], false));
    }

    #[tokio::test]
    async fn a_refused_delivery_makes_nobody_ready() {
        let (bus, ready) = bus_of(&["a"]).await;
        assert!(bus.send(note(1, AgentId::new("stranger"))).await.is_err());
        assert_eq!(drained(&ready), (Vec::new(), false));
    }

    #[tokio::test]
    async fn a_broadcast_asks_for_a_rescan_and_system_mail_only_signals() {
        let (bus, ready) = bus_of(&["a", "b"]).await;
        bus.send(note(1, Address::System)).await.unwrap();
        assert_eq!(drained(&ready), (Vec::new(), false));
        ready.notified().await; // the signal was kept
        let mut all = note(2, Address::Broadcast);
        all.from = Address::Agent(AgentId::new("a"));
        bus.send(all).await.unwrap();
        assert_eq!(drained(&ready), (Vec::new(), true));
        assert_eq!(drained(&ready), (Vec::new(), false), "a rescan is asked once");
    }

    /// Whether the driver has a signal waiting (a permit kept for its next wait).
    async fn signalled(ready: &ReadyQueue) -> bool {
        tokio::select! {
            biased;
            () = ready.notified() => true,
            () = std::future::ready(()) => false,
        }
    }

    #[tokio::test]
    async fn a_storm_of_mail_signals_the_driver_once_until_it_drains() {
        let (bus, ready) = bus_of(&["a", "b"]).await;
        for (n, to) in ["a", "b", "a"].into_iter().enumerate() {
            bus.send(note(n as u128, AgentId::new(to))).await.unwrap();
        }
        assert!(signalled(&ready).await);
        assert!(!signalled(&ready).await, "one signal for the three deliveries");
        drained(&ready);
        bus.send(note(9, AgentId::new("a"))).await.unwrap();
        assert!(signalled(&ready).await, "drained: the next delivery signals again");
    }

    /// Regression (issue #36, the spawn bench that waited out its limit): an agent the
    /// scheduler queued again without a signal (its lock was held when the driver looked)
    /// was already queued when its next mail arrived, so that delivery did not signal the
    /// driver either, and the mail waited for the heartbeat (an hour, in the bench).
    #[tokio::test]
    async fn a_delivery_to_an_agent_queued_again_without_a_signal_signals_the_driver() {
        let (bus, ready) = bus_of(&["a"]).await;
        let a = AgentId::new("a");
        ready.requeue(&a);
        assert!(!signalled(&ready).await, "a requeue does not signal");
        bus.send(note(1, &a)).await.unwrap();
        assert!(signalled(&ready).await, "the delivery signals");
        assert_eq!(drained(&ready), (vec![a], false), "queued once");
    }

    #[tokio::test]
    async fn a_take_that_fills_its_limit_leaves_its_agent_ready() {
        let (bus, ready) = bus_of(&["a"]).await;
        let a = AgentId::new("a");
        for n in 0..3 {
            bus.send(note(n, &a)).await.unwrap();
        }
        drained(&ready);
        assert_eq!(bus.take(&Address::Agent(a.clone()), 2).await.unwrap().len(), 2);
        assert_eq!(drained(&ready), (vec![a.clone()], false), "one more waits");
        assert_eq!(bus.take(&Address::Agent(a.clone()), 2).await.unwrap().len(), 1);
        assert_eq!(drained(&ready), (Vec::new(), false), "all taken");
    }
}
