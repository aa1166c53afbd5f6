//! A team's live event stream: what happens, as it happens, for whoever watches (the CLI's
//! live view and `--json`, a dashboard, a test).
//!
//! [`EventHub::publish`] never waits: the hub is a bounded broadcast channel, and a subscriber
//! that falls behind loses the oldest events and is told how many ([`EventStream::next`]
//! returns [`Received::Lagged`]). Nothing is lost for good: every event that is an audit record
//! was written to the audit log before it was published, so a watcher that lags can read the
//! log for what it missed.

use std::sync::Arc;

use agent_state::{AgentId, RunEvent};
use tokio::sync::broadcast;

use crate::audit::AuditRecord;

/// Events kept for subscribers that are behind, by default.
pub const DEFAULT_EVENT_CAPACITY: usize = 4096;

/// One event of a team.
#[derive(Clone, Debug, PartialEq)]
pub enum TeamEvent {
    /// A record was appended to the audit log: a transition, a tool call, a decision, a spawn,
    /// a refusal, ...
    Audit(AuditRecord),
    /// An executor kind's run (seed 002) changed state, reported progress or an event.
    Run {
        /// The executor agent running it.
        agent: AgentId,
        /// What happened.
        event: RunEvent,
    },
}

/// The sending side of a team's event stream. Cheap to clone; publishing with no subscriber
/// costs almost nothing.
#[derive(Clone, Debug)]
pub struct EventHub {
    sender: broadcast::Sender<Arc<TeamEvent>>,
}

impl Default for EventHub {
    fn default() -> Self {
        Self::new(DEFAULT_EVENT_CAPACITY)
    }
}

impl EventHub {
    /// A hub keeping up to `capacity` events (at least 1) for subscribers that are behind.
    pub fn new(capacity: usize) -> Self {
        let (sender, _) = broadcast::channel(capacity.max(1));
        Self { sender }
    }

    /// Sends `event` to every subscriber; never waits.
    pub fn publish(&self, event: TeamEvent) {
        if self.sender.receiver_count() > 0 {
            let _ = self.sender.send(Arc::new(event));
        }
    }

    /// A stream of every event published from now on.
    pub fn subscribe(&self) -> EventStream {
        EventStream { receiver: self.sender.subscribe() }
    }
}

/// What [`EventStream::next`] gives.
#[derive(Clone, Debug, PartialEq)]
pub enum Received {
    /// The next event.
    Event(Arc<TeamEvent>),
    /// The subscriber fell behind and this many events were dropped for it.
    Lagged(u64),
    /// The hub is gone: no more events will come.
    Closed,
}

/// The receiving side: every event published after [`EventHub::subscribe`], in order.
#[derive(Debug)]
pub struct EventStream {
    receiver: broadcast::Receiver<Arc<TeamEvent>>,
}

impl EventStream {
    /// The next event; cancellation-safe (use it in `select!`).
    pub async fn next(&mut self) -> Received {
        match self.receiver.recv().await {
            Ok(event) => Received::Event(event),
            Err(broadcast::error::RecvError::Lagged(n)) => Received::Lagged(n),
            Err(broadcast::error::RecvError::Closed) => Received::Closed,
        }
    }

    /// The next event if one is waiting, without waiting.
    pub fn try_next(&mut self) -> Option<Received> {
        match self.receiver.try_recv() {
            Ok(event) => Some(Received::Event(event)),
            Err(broadcast::error::TryRecvError::Lagged(n)) => Some(Received::Lagged(n)),
            Err(broadcast::error::TryRecvError::Closed) => Some(Received::Closed),
            Err(broadcast::error::TryRecvError::Empty) => None,
        }
    }
}
