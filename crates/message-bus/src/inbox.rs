//! One inbox's queues, and finding an inbox by address: shared by the in-memory and sled buses.

use std::collections::{HashMap, VecDeque};

use agent_state::{Address, AgentId, Message};

use crate::{InboxError, SendError};

/// One inbox: pending messages and those taken but not yet acknowledged, of any entry type.
///
/// An empty inbox holds no queues at all (a few bytes per idle agent); the first message gives
/// it its queues and they are dropped again once both are empty.
pub(crate) struct Inbox<T> {
    /// Whether the agent is registered; an unregistered agent keeps its messages.
    pub(crate) registered: bool,
    queues: Option<Box<Queues<T>>>,
}

/// The queues of an inbox that has messages.
struct Queues<T> {
    /// Not yet taken, oldest first.
    pending: VecDeque<T>,
    /// Taken and not yet acknowledged, in the order they were taken (which is the send order).
    in_flight: VecDeque<T>,
}

impl<T> Default for Inbox<T> {
    fn default() -> Self {
        Self { registered: false, queues: None }
    }
}

impl<T> Inbox<T> {
    /// An empty inbox of a registered agent.
    pub(crate) fn registered() -> Self {
        Self { registered: true, queues: None }
    }

    /// Messages not yet taken.
    pub(crate) fn pending_len(&self) -> usize {
        self.queues.as_ref().map_or(0, |q| q.pending.len())
    }

    /// Messages held, pending and in flight.
    pub(crate) fn len(&self) -> usize {
        self.queues.as_ref().map_or(0, |q| q.pending.len() + q.in_flight.len())
    }

    /// Adds `entry` after the pending ones.
    pub(crate) fn push(&mut self, entry: T) {
        self.queues
            .get_or_insert_with(|| {
                Box::new(Queues { pending: VecDeque::new(), in_flight: VecDeque::new() })
            })
            .pending
            .push_back(entry);
    }

    /// Moves up to `max` pending entries, oldest first, to in flight, showing each to `each`.
    pub(crate) fn take(&mut self, max: usize, mut each: impl FnMut(&T)) {
        let Some(queues) = self.queues.as_deref_mut() else { return };
        let Queues { pending, in_flight } = queues;
        let n = max.min(pending.len());
        for entry in pending.drain(..n) {
            each(&entry);
            in_flight.push_back(entry);
        }
    }

    /// The in-flight entries, to acknowledge some; call [`tidy`](Self::tidy) after.
    pub(crate) fn in_flight_mut(&mut self) -> Option<&mut VecDeque<T>> {
        self.queues.as_deref_mut().map(|q| &mut q.in_flight)
    }

    /// Drops the queues once both are empty.
    pub(crate) fn tidy(&mut self) {
        if self.len() == 0 {
            self.queues = None;
        }
    }

    /// Puts every in-flight entry back to pending, ahead and in order; returns how many.
    pub(crate) fn release(&mut self) -> usize {
        let Some(queues) = self.queues.as_deref_mut() else { return 0 };
        let Queues { pending, in_flight } = queues;
        let released = in_flight.len();
        if pending.is_empty() {
            std::mem::swap(pending, in_flight);
        } else {
            for entry in in_flight.drain(..).rev() {
                pending.push_front(entry);
            }
        }
        released
    }
}

/// The inbox `address` names, for reading: `system` or a registered agent.
pub(crate) fn inbox_mut<'a, T>(
    agents: &'a mut HashMap<AgentId, Inbox<T>>,
    system: &'a mut Inbox<T>,
    address: &Address,
) -> Result<&'a mut Inbox<T>, InboxError> {
    match address {
        Address::System => Ok(system),
        Address::Broadcast => Err(InboxError::NotAnInbox),
        Address::Agent(agent) => match agents.get_mut(agent) {
            Some(inbox) if inbox.registered => Ok(inbox),
            _ => Err(InboxError::NotRegistered { agent: agent.clone() }),
        },
    }
}

/// Where one message of a batch goes, once the batch is known to go ahead.
pub(crate) enum Target {
    /// The `system` inbox.
    System,
    /// One registered agent.
    Agent(AgentId),
    /// A broadcast: these registered agents, sorted by id (possibly none).
    Broadcast(Vec<AgentId>),
}

impl Target {
    /// How many inboxes the message goes into.
    pub(crate) fn count(&self) -> usize {
        match self {
            Target::System | Target::Agent(_) => 1,
            Target::Broadcast(agents) => agents.len(),
        }
    }
}

/// Checks a batch of `send_many` against the inboxes, each message as if the messages before
/// it were delivered, and says where each goes; the first refusal, in batch order, is returned
/// and nothing is changed. Broadcast targets are sorted by id, and a broadcast that finds
/// several full inboxes names the smallest id.
pub(crate) fn plan_batch<T>(
    agents: &HashMap<AgentId, Inbox<T>>,
    system: &Inbox<T>,
    capacity: usize,
    messages: &[Message],
) -> Result<Vec<Target>, SendError> {
    let mut added: HashMap<&AgentId, usize> = HashMap::new();
    let mut added_system = 0;
    let full = |inbox: &Inbox<T>, added: usize| inbox.len().saturating_add(added) >= capacity;
    let mut plan = Vec::with_capacity(messages.len());
    for message in messages {
        if message.from == Address::Broadcast {
            return Err(SendError::InvalidSender { id: message.id });
        }
        let target = match &message.to {
            Address::System => {
                if full(system, added_system) {
                    return Err(SendError::InboxFull {
                        id: message.id,
                        inbox: Address::System,
                        capacity,
                    });
                }
                added_system += 1;
                Target::System
            }
            Address::Agent(agent) => match agents.get_key_value(agent) {
                Some((id, inbox)) if inbox.registered => {
                    let slot = added.entry(id).or_insert(0);
                    if full(inbox, *slot) {
                        return Err(SendError::InboxFull {
                            id: message.id,
                            inbox: message.to.clone(),
                            capacity,
                        });
                    }
                    *slot += 1;
                    Target::Agent(id.clone())
                }
                _ => {
                    return Err(SendError::UnknownRecipient {
                        id: message.id,
                        kind: message.kind.as_str(),
                        recipient: agent.clone(),
                    });
                }
            },
            Address::Broadcast => {
                let sender = message.from.agent();
                let mut targets: Vec<(&AgentId, &Inbox<T>)> = agents
                    .iter()
                    .filter(|(id, inbox)| inbox.registered && Some(*id) != sender)
                    .collect();
                targets.sort_unstable_by(|a, b| a.0.cmp(b.0));
                if let Some((id, _)) = targets
                    .iter()
                    .find(|(id, inbox)| full(inbox, added.get(*id).copied().unwrap_or(0)))
                {
                    return Err(SendError::InboxFull {
                        id: message.id,
                        inbox: Address::Agent((*id).clone()),
                        capacity,
                    });
                }
                for (id, _) in &targets {
                    *added.entry(id).or_insert(0) += 1;
                }
                Target::Broadcast(targets.into_iter().map(|(id, _)| id.clone()).collect())
            }
        };
        plan.push(target);
    }
    Ok(plan)
}
