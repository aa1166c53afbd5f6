//! The message bus: how Strata agents talk, behind one object-safe trait.
//!
//! The package is `strata-message-bus` (`strata-message-bus = "0.1"` in `Cargo.toml`); code
//! names it `message_bus`.
//!
//! Every agent has an inbox; the runtime has the `system` inbox. A sender puts a [`Message`]
//! into one inbox, into `system`, or into every registered agent's inbox (`broadcast`). The
//! receiver [`take`](MessageBus::take)s pending messages, processes them, and
//! [`ack`](MessageBus::ack)s them. A message taken and never acknowledged is not lost: it can be
//! [`release`](MessageBus::release)d back to pending, and a durable backend delivers it again
//! after a restart. Delivery is therefore at-least-once; receivers make processing idempotent by
//! [`MessageId`].
//!
//! This crate holds the trait, its errors, the [`InMemoryBus`] backend, (feature `sled`) the
//! durable `SledBus` backend in a run's database, (feature `nats`) the distributed `NatsBus`
//! backend on a NATS JetStream server, shared by the processes of a team across machines, and
//! (feature `testing`) the conformance suite every backend must pass.
//!
//! # Feature flags
//!
//! | feature   | what it adds |
//! |-----------|--------------|
//! | `sled`    | `SledBus`: the durable backend, in the sled database of a `run_store::RunStore` |
//! | `nats`    | `NatsBus`: the distributed backend, on NATS JetStream through a `nats_store::NatsStore` |
//! | `testing` | the `testing` module: the conformance suite, for backend authors |
//!
//! ```
//! use agent_state::{Address, AgentId, Message, MessageId, MessageKind, Timestamp};
//! use message_bus::{InMemoryBus, MessageBus};
//!
//! # tokio_test_block_on(async {
//! let bus = InMemoryBus::new();
//! let (lead, worker) = (AgentId::new("mid-1"), AgentId::new("bottom-1"));
//! bus.register(&lead).await?;
//! bus.register(&worker).await?;
//!
//! let msg = Message::new(MessageId::from_u128(1), &lead, &worker, MessageKind::TaskAssign,
//!                        serde_json::json!({"task": "write hello.txt"}), Timestamp(0));
//! bus.send(msg).await?;
//!
//! let inbox = Address::from(&worker);
//! let taken = bus.take(&inbox, 16).await?;
//! assert_eq!(taken.len(), 1);
//! bus.ack(&inbox, &[taken[0].id]).await?;
//! assert_eq!(bus.pending(&inbox).await?, 0);
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! # }).unwrap();
//! # fn tokio_test_block_on<F: std::future::Future>(f: F) -> F::Output {
//! #     tokio::runtime::Builder::new_current_thread().build().unwrap().block_on(f)
//! # }
//! ```

use agent_state::{Address, AgentId, BackendError, Message, MessageId};
use async_trait::async_trait;
use thiserror::Error;

mod inbox;
mod memory;
#[cfg(feature = "nats")]
mod nats;
#[cfg(feature = "sled")]
mod sled;
#[cfg(any(test, feature = "testing"))]
pub mod testing;

#[cfg(feature = "nats")]
pub use self::nats::{NatsBus, NatsBusError};
#[cfg(feature = "sled")]
pub use self::sled::{SledBus, StoredMessage};
pub use memory::{DEFAULT_INBOX_CAPACITY, InMemoryBus};

/// The message bus. Object-safe: hold it as `Arc<dyn MessageBus>`.
///
/// Guarantees every backend keeps (the conformance suite checks each):
/// - messages in one inbox come out in the order they were sent (so order is kept per sender);
/// - a message sent to an unknown or unregistered agent is refused with
///   [`SendError::UnknownRecipient`], never dropped;
/// - `broadcast` reaches every registered agent except the sender, or none if any inbox is full;
/// - a taken message is not taken again until it is released (or the backend restarts);
///   an acknowledged message is gone for good;
/// - a refused call changes nothing; a refused [`send_many`](MessageBus::send_many) delivers no
///   message of its batch.
///
/// Durability: if `send` returns `Ok` on a durable backend, the message survives a crash of the
/// process and a loss of power; if `ack` returns `Ok`, it will not be delivered again. The same
/// holds for `register` and `unregister`. `take` and `release` are not stored: a durable
/// backend that restarts keeps its registrations and its messages, and puts every in-flight
/// message back to pending, ahead of newer messages and in original order, so a message taken
/// and not acknowledged before a crash is delivered again (at-least-once). The in-memory
/// backend keeps nothing across a restart.
#[async_trait]
pub trait MessageBus: Send + Sync + 'static {
    /// Opens `agent`'s inbox. Registering an already registered agent changes nothing. An agent
    /// registered again after [`unregister`](MessageBus::unregister) finds the messages it left.
    async fn register(&self, agent: &AgentId) -> Result<(), RegisterError>;

    /// Closes `agent`'s inbox to new messages. Messages already in it are kept. Unregistering an
    /// agent that is not registered is [`RegisterError::NotRegistered`].
    async fn unregister(&self, agent: &AgentId) -> Result<(), RegisterError>;

    /// Unregisters several agents as one call, each as [`unregister`](MessageBus::unregister)
    /// would, in the order given, and answers, for each, whether this call unregistered it: an
    /// agent that is not registered (or was already unregistered earlier in the batch) is
    /// `false`, not an error. An empty batch does nothing.
    ///
    /// On a durable backend, `Ok` means every unregistration is stored as for `unregister`. On
    /// `Err`, any of them may be stored: unregistering again is harmless.
    ///
    /// The default unregisters one agent at a time, stopping at the first backend error; the
    /// sled backend writes them all under one lock and waits for one commit.
    async fn unregister_many(&self, agents: &[AgentId]) -> Result<Vec<bool>, BackendError> {
        let mut unregistered = Vec::with_capacity(agents.len());
        for agent in agents {
            unregistered.push(match self.unregister(agent).await {
                Ok(()) => true,
                Err(RegisterError::NotRegistered { .. } | RegisterError::InvalidAgent { .. }) => {
                    false
                }
                Err(RegisterError::Backend(e)) => return Err(e),
            });
        }
        Ok(unregistered)
    }

    /// Whether `agent` is registered.
    async fn is_registered(&self, agent: &AgentId) -> Result<bool, BackendError>;

    /// Every registered agent, sorted by id.
    async fn registered(&self) -> Result<Vec<AgentId>, BackendError>;

    /// Delivers `message` to `message.to`: one agent, `system`, or every registered agent but the
    /// sender. Returns how many inboxes it went into. The bus does not deduplicate by id. Each
    /// inbox receives the message as sent (a broadcast copy keeps `to: broadcast`). An inbox
    /// holds at most its capacity in messages, pending and in flight together; when a broadcast
    /// finds several full, [`SendError::InboxFull`] names one of them.
    async fn send(&self, message: Message) -> Result<usize, SendError>;

    /// Sends several messages as one call: each is delivered as [`send`](MessageBus::send)
    /// would deliver it, in the order given, and the answer holds, for each message, how many
    /// inboxes it went into. An empty batch does nothing and returns an empty list.
    ///
    /// **All or nothing.** Every message is checked (sender, recipient, room in its inboxes,
    /// counting the messages of the batch before it) before anything is stored: if one is
    /// refused, the call returns that message's error (the first refused, in batch order) and
    /// no message of the batch is delivered. Messages of the batch that go to one inbox keep
    /// their order there, and no other sender's message comes between them. On a durable
    /// backend, `Ok` means every message of the batch is stored as for `send`; a backend error
    /// may leave some stored, as a failed `send` may: send the batch again, the receivers
    /// deduplicate by [`MessageId`].
    ///
    /// The default sends one message at a time, stopping at the first refusal (the messages
    /// before it stay delivered): backends override it with a real batch, which is what makes
    /// it cheaper than that loop (one commit for the whole batch on a durable store).
    async fn send_many(&self, messages: Vec<Message>) -> Result<Vec<usize>, SendError> {
        let mut delivered = Vec::with_capacity(messages.len());
        for message in messages {
            delivered.push(self.send(message).await?);
        }
        Ok(delivered)
    }

    /// Takes up to `max` pending messages from `inbox` (an agent or `system`), oldest first.
    /// They stay in flight until acknowledged or released.
    async fn take(&self, inbox: &Address, max: usize) -> Result<Vec<Message>, InboxError>;

    /// Acknowledges in-flight messages of `inbox`: every in-flight message whose id is listed is
    /// removed for good. Ids that are not in flight (pending, unknown, or in flight in another
    /// inbox) are ignored, so acknowledging twice is harmless. Returns how many were removed.
    async fn ack(&self, inbox: &Address, ids: &[MessageId]) -> Result<usize, InboxError>;

    /// Puts every in-flight message of `inbox` back to pending, ahead of newer messages and in
    /// their original order. Returns how many were released.
    async fn release(&self, inbox: &Address) -> Result<usize, InboxError>;

    /// How many messages of `inbox` are pending (not taken).
    async fn pending(&self, inbox: &Address) -> Result<usize, InboxError>;

    /// The registered agents with at least one pending message, sorted by id. A scheduler calls
    /// this once per cycle instead of asking every inbox, so a backend should answer in time
    /// proportional to the answer, not to the number of agents (the default asks every inbox).
    async fn inboxes_with_mail(&self) -> Result<Vec<AgentId>, BackendError> {
        let mut with_mail = Vec::new();
        for agent in self.registered().await? {
            match self.pending(&Address::Agent(agent.clone())).await {
                Ok(n) if n > 0 => with_mail.push(agent),
                Ok(_) | Err(InboxError::NotRegistered { .. }) => {}
                Err(InboxError::Backend(e)) => return Err(e),
                Err(InboxError::NotAnInbox) => {}
            }
        }
        Ok(with_mail)
    }
}

/// Registering or unregistering failed.
#[derive(Debug, Error)]
pub enum RegisterError {
    /// The id cannot name an agent (empty, reserved, bad characters).
    #[error("cannot register `{agent}`: {reason}")]
    InvalidAgent {
        /// The id given.
        agent: String,
        /// Why it is refused.
        reason: String,
    },
    /// Unregistering an agent that is not registered.
    #[error("agent `{agent}` is not registered on the bus")]
    NotRegistered {
        /// The agent.
        agent: AgentId,
    },
    /// The backend failed.
    #[error(transparent)]
    Backend(#[from] BackendError),
}

/// Sending failed; nothing was delivered.
#[derive(Debug, Error)]
pub enum SendError {
    /// The recipient is not a registered agent.
    #[error(
        "cannot send {kind} message {id} to `{recipient}`: no such agent is registered on the bus"
    )]
    UnknownRecipient {
        /// The message id.
        id: MessageId,
        /// The message kind, on the wire.
        kind: &'static str,
        /// The recipient.
        recipient: AgentId,
    },
    /// A run spread over workers: the recipient, an agent of the run, was not hosted by any
    /// worker (not registered on the bus) within the time a delivery waits for it.
    #[error(
        "cannot send {kind} message {id} to `{recipient}`: no worker hosted it within {waited_ms} ms (do the live workers' --agents, --layer or --capacity leave it out?)"
    )]
    NotHosted {
        /// The message id.
        id: MessageId,
        /// The message kind, on the wire.
        kind: &'static str,
        /// The recipient.
        recipient: AgentId,
        /// How long the delivery waited, in milliseconds.
        waited_ms: u64,
    },
    /// `broadcast` used as a sender.
    #[error("message {id} has `broadcast` as its sender; send from an agent or `system`")]
    InvalidSender {
        /// The message id.
        id: MessageId,
    },
    /// An inbox is at capacity (pending and in-flight messages count); the receiver must take
    /// and acknowledge messages first.
    #[error("inbox of `{inbox}` is full ({capacity} messages); message {id} was not delivered")]
    InboxFull {
        /// The message id.
        id: MessageId,
        /// The full inbox.
        inbox: Address,
        /// Its capacity.
        capacity: usize,
    },
    /// The backend failed.
    #[error(transparent)]
    Backend(#[from] BackendError),
}

/// Reading or acknowledging an inbox failed.
#[derive(Debug, Error)]
pub enum InboxError {
    /// The inbox is `broadcast`, which is an address, not an inbox.
    #[error("`broadcast` is not an inbox; take from an agent or `system`")]
    NotAnInbox,
    /// The agent is not registered.
    #[error("agent `{agent}` is not registered on the bus; register it before reading its inbox")]
    NotRegistered {
        /// The agent.
        agent: AgentId,
    },
    /// The backend failed.
    #[error(transparent)]
    Backend(#[from] BackendError),
}
