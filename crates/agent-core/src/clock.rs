//! Time and ids for the runtime: a clock that follows tokio's (pausable) time, and fresh ids.
//!
//! The runtime takes every new message and decision id from its [`Clock`] (random UUIDs v4 by
//! default), so a deterministic simulation can give a clock whose ids come from a seed.

use std::time::{SystemTime, UNIX_EPOCH};

use agent_state::{DecisionId, MessageId, Timestamp};
use uuid::Uuid;

/// Where the runtime reads the time. Tests use [`TokioClock`] on paused tokio time, or their own.
pub trait Clock: Send + Sync + 'static {
    /// Now, in milliseconds since the Unix epoch.
    fn now(&self) -> Timestamp;

    /// A fresh message id. By default a random UUID v4 ([`new_message_id`]); a simulation's
    /// clock gives ids from its seed, so that a run reproduces exactly.
    fn message_id(&self) -> MessageId {
        new_message_id()
    }

    /// A fresh decision id. By default a random UUID v4 ([`new_decision_id`]).
    fn decision_id(&self) -> DecisionId {
        new_decision_id()
    }
}

/// Wall-clock time at creation plus tokio's monotonic time since, so that tests on paused tokio
/// time see time advance exactly as `tokio::time::advance` moves it.
#[derive(Debug, Clone)]
pub struct TokioClock {
    origin_ms: u64,
    origin: tokio::time::Instant,
}

impl TokioClock {
    /// A clock starting at the current wall-clock time.
    pub fn new() -> Self {
        let origin_ms = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
            .unwrap_or(0);
        Self::starting_at(Timestamp(origin_ms))
    }

    /// A clock starting at `start`: deterministic timestamps for tests and simulations.
    pub fn starting_at(start: Timestamp) -> Self {
        Self { origin_ms: start.0, origin: tokio::time::Instant::now() }
    }
}

impl Default for TokioClock {
    fn default() -> Self {
        Self::new()
    }
}

impl Clock for TokioClock {
    fn now(&self) -> Timestamp {
        let elapsed = u64::try_from(self.origin.elapsed().as_millis()).unwrap_or(u64::MAX);
        Timestamp(self.origin_ms.saturating_add(elapsed))
    }
}

/// A fresh random message id: a version 4 UUID from a thread-local generator seeded by the
/// operating system (uuid's `fast-rng`), not a system call per id.
pub fn new_message_id() -> MessageId {
    MessageId::from_uuid(Uuid::new_v4())
}

/// A fresh random decision id.
pub fn new_decision_id() -> DecisionId {
    DecisionId::from_uuid(Uuid::new_v4())
}
