//! One inbox's queues, and finding an inbox by address: shared by the in-memory and sled buses.

use std::collections::{HashMap, HashSet, VecDeque};

use agent_state::{Address, AgentId, Message, MessageId};

use rustc_hash::FxBuildHasher;

use crate::{InboxError, SendError};

/// A map keyed by agent id, with a fast hash: a send looks its recipient up, and SipHash was a
/// sixth of a send's instructions. The ids are the run's own (validated when registered), not
/// chosen by an adversary who could make them collide.
pub(crate) type AgentMap<V> = HashMap<AgentId, V, FxBuildHasher>;

/// A set of agent ids, hashed as [`AgentMap`] is.
pub(crate) type AgentSet = HashSet<AgentId, FxBuildHasher>;

/// One inbox: pending messages and those taken but not yet acknowledged, of any entry type.
///
/// An empty inbox holds no queue at all (a few bytes per idle agent); the first message gives
/// it its queue and it is dropped again once it is empty.
pub(crate) struct Inbox<T> {
    /// Whether the agent is registered; an unregistered agent keeps its messages.
    pub(crate) registered: bool,
    queue: Option<Box<Queue<T>>>,
}

/// The queue of an inbox that has messages: one deque, the in-flight entries first, then the
/// pending ones.
///
/// Taken entries stay where they are, so taking moves nothing (the in-flight count grows) and
/// releasing moves nothing either (it drops to zero): in-flight entries come before every
/// pending one and are in send order, which is exactly where a release puts them back.
struct Queue<T> {
    /// The first `in_flight` entries are taken and not yet acknowledged, in the order they were
    /// taken (which is the send order); the rest are pending, oldest first.
    entries: VecDeque<T>,
    /// How many entries at the front are in flight.
    in_flight: usize,
}

impl<T> Default for Inbox<T> {
    fn default() -> Self {
        Self { registered: false, queue: None }
    }
}

impl<T> Inbox<T> {
    /// An empty inbox of a registered agent.
    #[cfg(any(test, feature = "sled"))]
    pub(crate) fn registered() -> Self {
        Self { registered: true, queue: None }
    }

    /// Messages not yet taken.
    pub(crate) fn pending_len(&self) -> usize {
        self.queue.as_ref().map_or(0, |q| q.entries.len() - q.in_flight)
    }

    /// Messages held, pending and in flight.
    pub(crate) fn len(&self) -> usize {
        self.queue.as_ref().map_or(0, |q| q.entries.len())
    }

    /// Adds `entry` after the pending ones.
    #[inline]
    pub(crate) fn push(&mut self, entry: T) {
        self.queue
            .get_or_insert_with(|| Box::new(Queue { entries: VecDeque::new(), in_flight: 0 }))
            .entries
            .push_back(entry);
    }

    /// Takes up to `max` pending entries, oldest first (they become in flight), and returns
    /// them.
    pub(crate) fn take(&mut self, max: usize) -> impl ExactSizeIterator<Item = &T> {
        let taken = self.queue.as_deref_mut().map(|queue| {
            let start = queue.in_flight;
            queue.in_flight = start + max.min(queue.entries.len() - start);
            queue.entries.range(start..queue.in_flight)
        });
        taken.unwrap_or_default()
    }

    /// The in-flight entries, in the order they were taken.
    #[cfg(any(test, feature = "sled"))]
    pub(crate) fn in_flight(&self) -> impl Iterator<Item = &T> {
        self.queue.as_deref().map(|q| q.entries.range(..q.in_flight)).into_iter().flatten()
    }

    /// Every entry, the in-flight ones first (in the order taken), then the pending ones.
    #[cfg(feature = "sled")]
    pub(crate) fn entries(&self) -> impl Iterator<Item = &T> {
        self.queue.as_deref().into_iter().flat_map(|q| q.entries.iter())
    }

    /// [`entries`](Self::entries), to change them in place.
    #[cfg(feature = "sled")]
    pub(crate) fn entries_mut(&mut self) -> impl Iterator<Item = &mut T> {
        self.queue.as_deref_mut().into_iter().flat_map(|q| q.entries.iter_mut())
    }

    /// Acknowledges `ids`: removes every in-flight entry whose id (`id_of`) is listed; the
    /// others keep their order. Returns how many were removed.
    pub(crate) fn ack(&mut self, ids: &[MessageId], id_of: impl Fn(&T) -> MessageId) -> usize {
        let mut acked = Acked::new(ids);
        self.remove_in_flight(|i, entry| acked.contains(i, id_of(entry)))
    }

    /// Removes the in-flight entries `remove` picks (given each entry and its position among
    /// the in-flight ones); the others keep their order. Returns how many were removed.
    pub(crate) fn remove_in_flight(&mut self, mut remove: impl FnMut(usize, &T) -> bool) -> usize {
        let Some(queue) = self.queue.as_deref_mut() else { return 0 };
        let in_flight = queue.in_flight;
        // The common case, acknowledging the oldest in-flight entries, drops them from the
        // front without moving the others.
        let prefix = (0..in_flight).take_while(|&i| remove(i, &queue.entries[i])).count();
        queue.entries.drain(..prefix);
        let mut kept = 0;
        for i in 0..in_flight - prefix {
            if !remove(prefix + i, &queue.entries[i]) {
                queue.entries.swap(kept, i);
                kept += 1;
            }
        }
        queue.entries.drain(kept..in_flight - prefix);
        queue.in_flight = kept;
        let removed = in_flight - kept;
        if queue.entries.is_empty() {
            self.queue = None;
        }
        removed
    }

    /// Puts every in-flight entry back to pending, ahead and in order; returns how many.
    pub(crate) fn release(&mut self) -> usize {
        self.queue.as_deref_mut().map_or(0, |queue| std::mem::take(&mut queue.in_flight))
    }
}

/// Which in-flight messages an acknowledgement names: asked for each in-flight message, in
/// order, with its position among them.
///
/// The common case, acknowledging the oldest messages in the order they were taken, costs one
/// comparison per message; anything else falls back to a lookup of the ids (sorted once, when
/// there are many).
pub(crate) struct Acked<'a> {
    ids: &'a [MessageId],
    sorted: Option<Vec<MessageId>>,
}

impl<'a> Acked<'a> {
    /// The acknowledgement of `ids`.
    pub(crate) fn new(ids: &'a [MessageId]) -> Self {
        Self { ids, sorted: None }
    }

    /// Whether the in-flight message at `position` (among the in-flight ones), whose id is
    /// `id`, is acknowledged. The bus does not deduplicate, so every message whose id is listed
    /// is, wherever it is.
    #[inline]
    pub(crate) fn contains(&mut self, position: usize, id: MessageId) -> bool {
        if self.ids.get(position) == Some(&id) {
            return true;
        }
        if self.ids.len() <= 8 {
            return self.ids.contains(&id);
        }
        let ids = self.ids;
        let sorted = self.sorted.get_or_insert_with(|| {
            let mut sorted = ids.to_vec();
            sorted.sort_unstable();
            sorted
        });
        sorted.binary_search(&id).is_ok()
    }
}

/// The inbox `address` names, for reading: `system` or a registered agent.
pub(crate) fn inbox_mut<'a, T>(
    agents: &'a mut AgentMap<Inbox<T>>,
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
    agents: &AgentMap<Inbox<T>>,
    system: &Inbox<T>,
    capacity: usize,
    messages: &[Message],
) -> Result<Vec<Target>, SendError> {
    let mut added: HashMap<&AgentId, usize, FxBuildHasher> = HashMap::default();
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
