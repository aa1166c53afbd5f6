//! What a run tells its caller while it happens: its progress and events.
//!
//! An observer is called in the run's own task and must not block: [`ChannelObserver`] hands
//! events to a bounded channel and drops a progress update when the consumer is behind (the
//! next one supersedes it), so a slow consumer never holds a run up. Nothing is lost for good:
//! the run's transitions, warnings and retries are also in its
//! [`RunResponse`](crate::RunResponse), and in a team they are in the audit log.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use agent_state::RunEvent;
use tokio::sync::mpsc;

/// Receives a run's events as they happen. Called in the run's task: it must return at once.
pub trait RunObserver: Send + Sync {
    /// One event.
    fn observe(&self, event: &RunEvent);
}

/// Ignores every event.
#[derive(Clone, Copy, Debug, Default)]
pub struct NoObserver;

impl RunObserver for NoObserver {
    fn observe(&self, _event: &RunEvent) {}
}

impl<F: Fn(&RunEvent) + Send + Sync> RunObserver for F {
    fn observe(&self, event: &RunEvent) {
        self(event);
    }
}

/// Sends events to a bounded channel without ever waiting: when the channel is full, an event
/// is dropped and counted ([`dropped`](Self::dropped)). Progress updates are what a full channel
/// usually drops; the rest of what a run did is in its response.
#[derive(Clone, Debug)]
pub struct ChannelObserver {
    sender: mpsc::Sender<RunEvent>,
    dropped: Arc<AtomicU64>,
}

impl ChannelObserver {
    /// An observer and the receiving end of a channel of `capacity` events (at least 1).
    pub fn new(capacity: usize) -> (Self, mpsc::Receiver<RunEvent>) {
        let (sender, receiver) = mpsc::channel(capacity.max(1));
        (Self { sender, dropped: Arc::new(AtomicU64::new(0)) }, receiver)
    }

    /// Events dropped because the consumer was behind.
    pub fn dropped(&self) -> u64 {
        self.dropped.load(Ordering::Relaxed)
    }
}

impl RunObserver for ChannelObserver {
    fn observe(&self, event: &RunEvent) {
        if self.sender.try_send(event.clone()).is_err() {
            self.dropped.fetch_add(1, Ordering::Relaxed);
        }
    }
}
