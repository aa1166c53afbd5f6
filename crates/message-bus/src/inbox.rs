//! One inbox's queues, and finding an inbox by address: shared by the in-memory and sled buses.

use std::collections::{HashMap, VecDeque};

use agent_state::{Address, AgentId};

use crate::InboxError;

/// One inbox: pending messages and those taken but not yet acknowledged, of any entry type.
pub(crate) struct Inbox<T> {
    /// Whether the agent is registered; an unregistered agent keeps its messages.
    pub(crate) registered: bool,
    /// Not yet taken, oldest first.
    pub(crate) pending: VecDeque<T>,
    /// Taken and not yet acknowledged, in the order they were taken (which is the send order).
    pub(crate) in_flight: VecDeque<T>,
}

impl<T> Default for Inbox<T> {
    fn default() -> Self {
        Self { registered: false, pending: VecDeque::new(), in_flight: VecDeque::new() }
    }
}

impl<T> Inbox<T> {
    /// Puts every in-flight entry back to pending, ahead and in order; returns how many.
    pub(crate) fn release(&mut self) -> usize {
        let released = self.in_flight.len();
        if self.pending.is_empty() {
            std::mem::swap(&mut self.pending, &mut self.in_flight);
        } else {
            for entry in self.in_flight.drain(..).rev() {
                self.pending.push_front(entry);
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
