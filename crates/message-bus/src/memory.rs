//! The in-memory backend: one mutex over a map of inboxes, each one queue of its in-flight messages
//! followed by its pending ones.

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::{Mutex, MutexGuard, PoisonError};
use std::task::{Context, Poll};

use agent_state::{Address, AgentId, BackendError, Message, MessageId, check_agent_id};
use async_trait::async_trait;

use crate::inbox::{AgentMap, AgentSet, Target, plan_batch};
use crate::{InboxError, MessageBus, RegisterError, SendError};

/// Messages one inbox holds by default, pending and in flight together.
///
/// Large enough that a healthy team never reaches it (a team has at most 50 agents by default,
/// each answering within its cycle), small enough that a receiver that stopped reading is
/// noticed as [`SendError::InboxFull`] long before it exhausts memory.
pub const DEFAULT_INBOX_CAPACITY: usize = 65_536;

/// A [`MessageBus`] that lives in the process and keeps nothing across a restart.
///
/// Every call takes one short-lived lock and never awaits while holding it. `send` to one inbox
/// is O(1): one hash lookup and one push, with no allocation beyond the queue's own growth.
/// `take` moves nothing: a taken message stays in its inbox's one queue, ahead of the pending
/// ones, until it is acknowledged (dropped from the front when acknowledged in the order taken)
/// or released (which only resets the in-flight count).
/// [`send_many`](MessageBus::send_many) checks and delivers its whole batch under one lock.
///
/// `send` and `register` do their work when they are called, not when first polled (they
/// have nothing to wait for): the message is delivered, or the agent registered, even if the
/// future returned is dropped unpolled. That future is already complete, and for a send into
/// one inbox or a registration zero-sized, so boxing it allocates nothing.
///
/// Each inbox holds at most its capacity in messages, pending and in flight together: a taken
/// message still counts until it is acknowledged.
///
/// ```
/// use message_bus::{DEFAULT_INBOX_CAPACITY, InMemoryBus};
///
/// assert_eq!(InMemoryBus::new().capacity(), DEFAULT_INBOX_CAPACITY);
/// assert_eq!(InMemoryBus::with_capacity(8).capacity(), 8);
/// ```
pub struct InMemoryBus {
    capacity: usize,
    state: Mutex<State>,
}

/// Everything behind the lock.
#[derive(Default)]
struct State {
    /// Every agent ever registered; unregistered agents keep their inbox with `registered` off.
    agents: AgentMap<Inbox>,
    /// The runtime's inbox, which always exists.
    system: Inbox,
    /// Agents with pending messages (registered or not), kept on every change so
    /// that `inboxes_with_mail` costs time in the size of its answer.
    with_mail: AgentSet,
}

/// One inbox of this backend.
type Inbox = crate::inbox::Inbox<Message>;

impl InMemoryBus {
    /// An empty bus whose inboxes hold [`DEFAULT_INBOX_CAPACITY`] messages each.
    pub fn new() -> Self {
        Self::with_capacity(DEFAULT_INBOX_CAPACITY)
    }

    /// An empty bus whose inboxes (the `system` inbox included) hold `per_inbox` messages each,
    /// pending and in flight together. With `0` every send is refused as full.
    pub fn with_capacity(per_inbox: usize) -> Self {
        Self { capacity: per_inbox, state: Mutex::new(State::default()) }
    }

    /// How many messages one inbox holds, pending and in flight together.
    pub fn capacity(&self) -> usize {
        self.capacity
    }

    /// Puts every in-flight message of every inbox (unregistered agents' included) back to
    /// pending, ahead of newer messages and in original order, as a durable backend does when
    /// it restarts; registrations and pending messages stay. Returns how many were released.
    ///
    /// For simulations and tests of crash recovery without a durable backend.
    pub fn restart(&self) -> usize {
        let mut state = self.lock();
        let state = &mut *state;
        let mut released = state.system.release();
        for (id, inbox) in state.agents.iter_mut() {
            released += inbox.release();
            if inbox.pending_len() > 0 {
                state.with_mail.insert(id.clone());
            }
        }
        released
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        // Every critical section leaves the state consistent before anything can panic, so a
        // poisoned lock still guards valid data.
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// [`MessageBus::register`], done now.
    fn register_now(&self, agent: &AgentId) -> Result<(), RegisterError> {
        check_agent_id(agent.as_str()).map_err(|kind| RegisterError::InvalidAgent {
            agent: agent.to_string(),
            reason: kind.to_string(),
        })?;
        // One search of the map for both the look-up and the insertion.
        self.lock().agents.entry(agent.clone()).or_default().registered = true;
        Ok(())
    }

    /// [`MessageBus::send`], done now.
    fn send_now(&self, message: Message) -> Result<usize, SendError> {
        if message.from == Address::Broadcast {
            return Err(SendError::InvalidSender { id: message.id });
        }
        let mut state = self.lock();
        let state = &mut *state;
        let inbox = match &message.to {
            Address::Broadcast => return self.broadcast(state, message),
            Address::System => &mut state.system,
            Address::Agent(agent) => match state.agents.get_mut(agent) {
                Some(inbox) if inbox.registered => inbox,
                _ => {
                    return Err(SendError::UnknownRecipient {
                        id: message.id,
                        kind: message.kind.as_str(),
                        recipient: agent.clone(),
                    });
                }
            },
        };
        if self.full(inbox) {
            return Err(SendError::InboxFull {
                id: message.id,
                inbox: message.to.clone(),
                capacity: self.capacity,
            });
        }
        if inbox.pending_len() == 0
            && let Address::Agent(agent) = &message.to
        {
            state.with_mail.insert(agent.clone());
        }
        inbox.push(message);
        Ok(1)
    }

    fn full(&self, inbox: &Inbox) -> bool {
        inbox.len() >= self.capacity
    }

    fn broadcast(&self, state: &mut State, message: Message) -> Result<usize, SendError> {
        let sender = message.from.agent();
        // All or nothing: report the full inbox with the smallest id, so the error is stable.
        if let Some(full) = state
            .agents
            .iter()
            .filter(|(id, inbox)| inbox.registered && Some(*id) != sender && self.full(inbox))
            .map(|(id, _)| id)
            .min()
        {
            return Err(SendError::InboxFull {
                id: message.id,
                inbox: Address::Agent(full.clone()),
                capacity: self.capacity,
            });
        }
        let mut delivered = 0;
        for (id, inbox) in state.agents.iter_mut() {
            if inbox.registered && Some(id) != sender {
                if inbox.pending_len() == 0 {
                    state.with_mail.insert(id.clone());
                }
                inbox.push(message.clone());
                delivered += 1;
            }
        }
        Ok(delivered)
    }
}

impl Default for InMemoryBus {
    fn default() -> Self {
        Self::new()
    }
}

impl fmt::Debug for InMemoryBus {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let state = self.lock();
        f.debug_struct("InMemoryBus")
            .field("capacity", &self.capacity)
            .field("agents", &state.agents.len())
            .finish_non_exhaustive()
    }
}

impl State {
    /// Unregisters `agent`; `true` if it was registered.
    fn unregister(&mut self, agent: &AgentId) -> bool {
        match self.agents.get_mut(agent) {
            Some(inbox) if inbox.registered => {
                inbox.registered = false;
                true
            }
            _ => false,
        }
    }

    /// The inbox `address` names, for reading: `system` or a registered agent.
    fn inbox_mut(&mut self, address: &Address) -> Result<&mut Inbox, InboxError> {
        crate::inbox::inbox_mut(&mut self.agents, &mut self.system, address)
    }

    /// Adds `message` to the inbox of `agent`, known to exist.
    fn deliver(&mut self, agent: AgentId, message: Message) {
        if let Some(inbox) = self.agents.get_mut(&agent) {
            inbox.push(message);
            self.with_mail.insert(agent);
        }
    }
}

#[async_trait]
impl MessageBus for InMemoryBus {
    /// Done when called, as `send` is (see [`InMemoryBus`]); the future returned is already
    /// complete, and zero-sized when the agent is registered.
    fn register<'life0, 'life1, 'async_trait>(
        &'life0 self,
        agent: &'life1 AgentId,
    ) -> Pin<Box<dyn Future<Output = Result<(), RegisterError>> + Send + 'async_trait>>
    where
        'life0: 'async_trait,
        'life1: 'async_trait,
        Self: 'async_trait,
    {
        match self.register_now(agent) {
            Ok(()) => Box::pin(Registered),
            refused => Box::pin(std::future::ready(refused)),
        }
    }

    async fn unregister(&self, agent: &AgentId) -> Result<(), RegisterError> {
        if self.lock().unregister(agent) {
            Ok(())
        } else {
            Err(RegisterError::NotRegistered { agent: agent.clone() })
        }
    }

    async fn unregister_many(&self, agents: &[AgentId]) -> Result<Vec<bool>, BackendError> {
        let mut state = self.lock();
        Ok(agents.iter().map(|agent| state.unregister(agent)).collect())
    }

    async fn is_registered(&self, agent: &AgentId) -> Result<bool, BackendError> {
        Ok(self.lock().agents.get(agent).is_some_and(|inbox| inbox.registered))
    }

    async fn registered(&self) -> Result<Vec<AgentId>, BackendError> {
        let mut agents: Vec<AgentId> = self
            .lock()
            .agents
            .iter()
            .filter(|(_, inbox)| inbox.registered)
            .map(|(id, _)| id.clone())
            .collect();
        agents.sort_unstable();
        Ok(agents)
    }

    /// Done when called (see [`InMemoryBus`]); the future returned is already complete.
    fn send<'life0, 'async_trait>(
        &'life0 self,
        message: Message,
    ) -> Pin<Box<dyn Future<Output = Result<usize, SendError>> + Send + 'async_trait>>
    where
        'life0: 'async_trait,
        Self: 'async_trait,
    {
        match self.send_now(message) {
            // Zero-sized: boxed, it allocates nothing.
            Ok(1) => Box::pin(SentToOne),
            sent => Box::pin(std::future::ready(sent)),
        }
    }

    /// One lock for the whole batch: checked first, then delivered.
    async fn send_many(&self, messages: Vec<Message>) -> Result<Vec<usize>, SendError> {
        if messages.is_empty() {
            return Ok(Vec::new());
        }
        let mut state = self.lock();
        let state = &mut *state;
        let plan = plan_batch(&state.agents, &state.system, self.capacity, &messages)?;
        let counts = plan.iter().map(Target::count).collect();
        for (message, target) in messages.into_iter().zip(plan) {
            match target {
                Target::System => state.system.push(message),
                Target::Agent(agent) => state.deliver(agent, message),
                Target::Broadcast(agents) => {
                    for agent in agents {
                        state.deliver(agent, message.clone());
                    }
                }
            }
        }
        Ok(counts)
    }

    async fn take(&self, inbox: &Address, max: usize) -> Result<Vec<Message>, InboxError> {
        let mut state = self.lock();
        let queue = state.inbox_mut(inbox)?;
        let taken: Vec<Message> = queue.take(max).cloned().collect();
        if queue.pending_len() == 0
            && let Address::Agent(agent) = inbox
        {
            state.with_mail.remove(agent);
        }
        Ok(taken)
    }

    async fn ack(&self, inbox: &Address, ids: &[MessageId]) -> Result<usize, InboxError> {
        let mut state = self.lock();
        let inbox = state.inbox_mut(inbox)?;
        Ok(inbox.ack(ids, |message| message.id))
    }

    async fn release(&self, inbox: &Address) -> Result<usize, InboxError> {
        let mut state = self.lock();
        let released = state.inbox_mut(inbox)?.release();
        if released > 0
            && let Address::Agent(agent) = inbox
        {
            state.with_mail.insert(agent.clone());
        }
        Ok(released)
    }

    async fn inboxes_with_mail(&self) -> Result<Vec<AgentId>, BackendError> {
        let state = self.lock();
        let mut agents: Vec<AgentId> = state
            .with_mail
            .iter()
            .filter(|id| state.agents.get(*id).is_some_and(|inbox| inbox.registered))
            .cloned()
            .collect();
        agents.sort_unstable();
        Ok(agents)
    }

    async fn pending(&self, inbox: &Address) -> Result<usize, InboxError> {
        Ok(self.lock().inbox_mut(inbox)?.pending_len())
    }
}

/// The answer of a send that went into one inbox, already there: `Ok(1)`.
struct SentToOne;

impl Future for SentToOne {
    type Output = Result<usize, SendError>;

    fn poll(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<Self::Output> {
        Poll::Ready(Ok(1))
    }
}

/// The answer of a registration that was done, already there: `Ok(())`.
struct Registered;

impl Future for Registered {
    type Output = Result<(), RegisterError>;

    fn poll(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<Self::Output> {
        Poll::Ready(Ok(()))
    }
}

#[cfg(test)]
mod tests;
