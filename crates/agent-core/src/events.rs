//! A team's live event stream: what happens, as it happens, for whoever watches (the CLI's
//! live view and `--json`, a dashboard, a test).
//!
//! [`EventHub::publish`] never waits: the hub is a bounded broadcast channel, and a subscriber
//! that falls behind loses the oldest events and is told how many ([`EventStream::next`]
//! returns [`Received::Lagged`]). Nothing is lost for good: every event that is an audit record
//! was written to the audit log before it was published, so a watcher that lags can read the
//! log for what it missed. The store is lossless, the stream best-effort.
//!
//! [`PublishingAuditLog`] is how audit records reach the hub: a decorator over any
//! [`AuditLog`] that publishes each record as [`TeamEvent::Audit`] once its append has
//! returned `Ok` (durably stored, on a durable backend), and nothing when it fails. A team
//! (`agent_pool::Team`) wraps its audit log in one, so every agent's transitions, tool calls,
//! decisions and spawns are published.
//!
//! **Model output.** A model reasoner given the hub (agent-llm's `LlmReasoner::with_events`)
//! publishes each answer as it streams from the model, in pieces ([`TeamEvent::Tokens`],
//! [`ModelTokens`]), so that a watcher sees an agent's model writing. They are for watching
//! only, never stored: the answer the agent acts on is the reasoner's, checked once the call
//! ended, and what it led to is in the audit log.
//!
//! **Order.** A subscriber sees events in the order they were published. The records one
//! agent appends one after another therefore arrive in sequence order; the records of
//! different agents whose appends overlap (a durable backend syncs them together) may arrive
//! in either order: each carries its `seq`.

use std::sync::Arc;

use agent_state::{AgentId, BackendError, RunEvent, Timestamp};
use async_trait::async_trait;
use tokio::sync::broadcast;

use crate::audit::{AuditAnchor, AuditEntry, AuditEvent, AuditLog, AuditRecord};

/// Events kept for subscribers that are behind, by default.
pub const DEFAULT_EVENT_CAPACITY: usize = 4096;

/// One event of a team.
#[derive(Clone, Debug, PartialEq)]
pub enum TeamEvent {
    /// A record was appended to the audit log: a transition, a tool call, a decision, a spawn,
    /// a refusal, ...
    Audit(AuditRecord),
    /// An executor kind's run changed state, reported progress or an event.
    Run {
        /// The executor agent running it.
        agent: AgentId,
        /// What happened.
        event: RunEvent,
    },
    /// More of a model's answer, as it streams (published by a model reasoner that has the
    /// hub; the answer is what the reasoner returns once the call ended, checked: these
    /// pieces are never recorded).
    Tokens(ModelTokens),
}

/// Most characters of text one [`TeamEvent::Tokens`] carries: a longer piece is published
/// as several events.
pub const MAX_TOKEN_EVENT_CHARS: usize = 512;

/// A piece of the answer a model is writing for an agent ([`TeamEvent::Tokens`]). The pieces
/// of one attempt of one call, in order, are its answer as it arrived; an attempt that fails
/// mid-stream stops, and the next one (a retry, `attempt` one more) starts over.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
pub struct ModelTokens {
    /// The agent the call is for.
    pub agent: AgentId,
    /// The call, numbered by the reasoner from 1: with `agent`, it tells the calls apart.
    pub call: u64,
    /// The attempt of the call, 1 for the first.
    pub attempt: u32,
    /// `None`: the answer's text (a structured answer's JSON); `Some(tool)`: the arguments of a
    /// call of `tool` the model is making.
    pub tool: Option<String>,
    /// The next characters, at most [`MAX_TOKEN_EVENT_CHARS`].
    pub text: String,
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

    /// Whether some subscriber is listening: when none is, what would be published can be
    /// left unbuilt.
    pub fn is_watched(&self) -> bool {
        self.sender.receiver_count() > 0
    }
}

/// An [`AuditLog`] that publishes every record it appends on an [`EventHub`], as
/// [`TeamEvent::Audit`], after the append succeeded: a record is on the stream only once it is
/// in the log, and a failed append publishes nothing. Reads go to the log unchanged.
///
/// Publishing never waits (see [`EventHub::publish`]); with no subscriber, an append costs what
/// the inner log's does.
pub struct PublishingAuditLog {
    inner: Arc<dyn AuditLog>,
    hub: EventHub,
}

impl std::fmt::Debug for PublishingAuditLog {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PublishingAuditLog").field("hub", &self.hub).finish_non_exhaustive()
    }
}

impl PublishingAuditLog {
    /// Publishes what `inner` appends on `hub`.
    pub fn new(inner: Arc<dyn AuditLog>, hub: EventHub) -> Self {
        Self { inner, hub }
    }

    /// The log it writes to.
    pub fn inner(&self) -> &Arc<dyn AuditLog> {
        &self.inner
    }

    /// The hub it publishes on.
    pub fn hub(&self) -> &EventHub {
        &self.hub
    }
}

#[async_trait]
impl AuditLog for PublishingAuditLog {
    async fn append(
        &self,
        agent: &AgentId,
        at: Timestamp,
        event: AuditEvent,
    ) -> Result<u64, BackendError> {
        if !self.hub.is_watched() {
            // Nobody listens: the record need not be built whole (nor cloned) for them.
            let seq = self.inner.append(agent, at, event).await?;
            if self.hub.is_watched() {
                // Someone subscribed while it was being stored, and may have read the log
                // before it was there (a watcher subscribes, then reads what is stored): it is
                // read back and published, so that it is read, received, or both.
                let records = self.inner.records_from(seq).await?;
                if let Some(record) = records.into_iter().find(|r| r.seq == seq) {
                    self.hub.publish(TeamEvent::Audit(record));
                }
            }
            return Ok(seq);
        }
        let record = self.inner.append_record(agent, at, event).await?;
        let seq = record.seq;
        self.hub.publish(TeamEvent::Audit(record));
        Ok(seq)
    }

    async fn append_record(
        &self,
        agent: &AgentId,
        at: Timestamp,
        event: AuditEvent,
    ) -> Result<AuditRecord, BackendError> {
        let record = self.inner.append_record(agent, at, event).await?;
        if self.hub.is_watched() {
            self.hub.publish(TeamEvent::Audit(record.clone()));
        }
        Ok(record)
    }

    /// The batch appended by the inner log, then each record published, in order.
    async fn append_many(
        &self,
        entries: Vec<AuditEntry>,
    ) -> Result<Vec<AuditRecord>, BackendError> {
        let records = self.inner.append_many(entries).await?;
        if self.hub.is_watched() {
            for record in &records {
                self.hub.publish(TeamEvent::Audit(record.clone()));
            }
        }
        Ok(records)
    }

    async fn records(&self, agent: Option<&AgentId>) -> Result<Vec<AuditRecord>, BackendError> {
        self.inner.records(agent).await
    }

    async fn records_from(&self, from: u64) -> Result<Vec<AuditRecord>, BackendError> {
        self.inner.records_from(from).await
    }

    async fn records_of(&self, events: &[&str]) -> Result<Vec<AuditRecord>, BackendError> {
        self.inner.records_of(events).await
    }

    async fn head_of(&self, agent: &AgentId) -> Result<Option<AuditAnchor>, BackendError> {
        self.inner.head_of(agent).await
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
