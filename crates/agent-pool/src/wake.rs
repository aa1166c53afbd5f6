//! Wake on work: a bus that tells the team's driver when mail arrives, so an agent with new
//! mail runs as soon as it arrives instead of at the next heartbeat.

use std::sync::Arc;

use agent_state::{Address, AgentId, BackendError, Message, MessageId};
use async_trait::async_trait;
use message_bus::{InboxError, MessageBus, RegisterError, SendError};
use tokio::sync::Notify;

/// A [`MessageBus`] that delegates everything to another and signals a [`Notify`] after every
/// delivery (a send or a broadcast). Every backend gets wake-on-work this way without knowing
/// about it. Messages released back to pending (a failed turn) do not signal, and the
/// scheduler takes no turn of an agent whose failed turn's next attempt is not due yet
/// ([`Agent::waits_for_retry`](agent_core::Agent::waits_for_retry)), whatever mail arrives: a
/// retry waits for its heartbeat (1, 2, 4 heartbeats, capped). A failed
/// agent holds the mail it does not refuse (taken, not released), so it does not spin either.
pub struct WakingBus {
    inner: Arc<dyn MessageBus>,
    mail: Arc<Notify>,
    /// The team's guards, shown every delivered message.
    observer: Option<Arc<crate::guard::Observer>>,
}

impl WakingBus {
    /// Wraps `inner`; `mail` is signalled after each delivery.
    pub fn new(inner: Arc<dyn MessageBus>, mail: Arc<Notify>) -> Self {
        Self { inner, mail, observer: None }
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
        let delivered = self.inner.send(message).await?;
        if delivered > 0 {
            self.mail.notify_one();
        }
        Ok(delivered)
    }

    async fn take(&self, inbox: &Address, max: usize) -> Result<Vec<Message>, InboxError> {
        self.inner.take(inbox, max).await
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
