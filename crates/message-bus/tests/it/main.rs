//! Integration tests: the conformance suite against `InMemoryBus`, `SledBus` and (feature `nats`,
//! with a NATS server) `NatsBus`, and the trait's object safety.
#![allow(clippy::unwrap_used, clippy::expect_used)]

#[cfg(feature = "nats")]
mod nats;
#[cfg(feature = "sled")]
mod sled;

use std::sync::{Arc, Mutex};

use agent_state::{Address, AgentId, Message, MessageId, MessageKind, Timestamp};
use message_bus::testing::{BusFactory, run_conformance};
use message_bus::{InMemoryBus, MessageBus};

/// Makes in-memory buses; they keep nothing across a restart.
struct Memory;

#[async_trait::async_trait]
impl BusFactory for Memory {
    async fn fresh(&self) -> Arc<dyn MessageBus> {
        Arc::new(InMemoryBus::new())
    }

    async fn reopen(&self, _bus: Arc<dyn MessageBus>) -> Option<Arc<dyn MessageBus>> {
        None
    }

    async fn fresh_with_capacity(&self, per_inbox: usize) -> Option<Arc<dyn MessageBus>> {
        Some(Arc::new(InMemoryBus::with_capacity(per_inbox)))
    }
}

/// Makes in-memory buses but cannot set their capacity: the suite must still pass, skipping
/// only its full-inbox checks (with the default capacity no generated sequence fills an inbox).
struct MemoryDefaultCapacity;

#[async_trait::async_trait]
impl BusFactory for MemoryDefaultCapacity {
    async fn fresh(&self) -> Arc<dyn MessageBus> {
        Arc::new(InMemoryBus::default())
    }

    async fn reopen(&self, _bus: Arc<dyn MessageBus>) -> Option<Arc<dyn MessageBus>> {
        None
    }
}

/// Pretends in-memory buses are durable: `reopen` hands back the same store after
/// [`InMemoryBus::restart`], so the suite's restart checks run against the in-memory backend.
#[derive(Default)]
struct SimulatedDurable {
    stores: Mutex<Vec<Arc<InMemoryBus>>>,
}

impl SimulatedDurable {
    fn keep(&self, bus: InMemoryBus) -> Arc<dyn MessageBus> {
        let bus = Arc::new(bus);
        self.stores.lock().unwrap().push(Arc::clone(&bus));
        bus
    }
}

#[async_trait::async_trait]
impl BusFactory for SimulatedDurable {
    async fn fresh(&self) -> Arc<dyn MessageBus> {
        self.keep(InMemoryBus::new())
    }

    async fn reopen(&self, bus: Arc<dyn MessageBus>) -> Option<Arc<dyn MessageBus>> {
        let handle = Arc::as_ptr(&bus).cast::<()>();
        drop(bus);
        let stores = self.stores.lock().unwrap();
        let store = stores.iter().find(|s| Arc::as_ptr(s).cast::<()>() == handle)?;
        store.restart();
        Some(Arc::clone(store) as Arc<dyn MessageBus>)
    }

    async fn fresh_with_capacity(&self, per_inbox: usize) -> Option<Arc<dyn MessageBus>> {
        Some(self.keep(InMemoryBus::with_capacity(per_inbox)))
    }
}

#[test]
fn in_memory_bus_passes_the_conformance_suite() {
    run_conformance(Memory);
}

#[test]
fn in_memory_bus_passes_the_conformance_suite_without_a_set_capacity() {
    run_conformance(MemoryDefaultCapacity);
}

#[test]
fn in_memory_bus_with_simulated_restarts_passes_the_conformance_suite() {
    run_conformance(SimulatedDurable::default());
}

#[test]
fn message_bus_is_object_safe_and_shareable() {
    fn assert_send_sync<T: Send + Sync + 'static>(_: &T) {}

    let bus: Arc<dyn MessageBus> = Arc::new(InMemoryBus::new());
    assert_send_sync(&bus);
    let runtime = tokio::runtime::Builder::new_current_thread().build().unwrap();
    runtime.block_on(async {
        let worker = AgentId::new("bottom-1");
        let handle = Arc::clone(&bus);
        handle.register(&worker).await.unwrap();
        let message = Message::new(
            MessageId::from_u128(1),
            Address::System,
            &worker,
            MessageKind::StatusQuery,
            serde_json::Value::Null,
            Timestamp(5),
        );
        assert_eq!(handle.send(message.clone()).await.unwrap(), 1);
        assert_eq!(bus.take(&Address::from(&worker), 8).await.unwrap(), vec![message]);
    });
}

/// An in-memory bus that keeps the trait's default `send_many`, a loop of `send` that stops at
/// the first refusal and keeps what it sent before it.
struct LoopingBatches(InMemoryBus);

#[async_trait::async_trait]
impl MessageBus for LoopingBatches {
    async fn register(&self, agent: &AgentId) -> Result<(), message_bus::RegisterError> {
        self.0.register(agent).await
    }
    async fn unregister(&self, agent: &AgentId) -> Result<(), message_bus::RegisterError> {
        self.0.unregister(agent).await
    }
    async fn is_registered(&self, agent: &AgentId) -> Result<bool, agent_state::BackendError> {
        self.0.is_registered(agent).await
    }
    async fn registered(&self) -> Result<Vec<AgentId>, agent_state::BackendError> {
        self.0.registered().await
    }
    async fn send(&self, message: Message) -> Result<usize, message_bus::SendError> {
        self.0.send(message).await
    }
    async fn take(
        &self,
        inbox: &Address,
        max: usize,
    ) -> Result<Vec<Message>, message_bus::InboxError> {
        self.0.take(inbox, max).await
    }
    async fn ack(
        &self,
        inbox: &Address,
        ids: &[MessageId],
    ) -> Result<usize, message_bus::InboxError> {
        self.0.ack(inbox, ids).await
    }
    async fn release(&self, inbox: &Address) -> Result<usize, message_bus::InboxError> {
        self.0.release(inbox).await
    }
    async fn pending(&self, inbox: &Address) -> Result<usize, message_bus::InboxError> {
        self.0.pending(inbox).await
    }
}

struct Looping;

#[async_trait::async_trait]
impl BusFactory for Looping {
    async fn fresh(&self) -> Arc<dyn MessageBus> {
        Arc::new(LoopingBatches(InMemoryBus::new()))
    }

    async fn reopen(&self, _bus: Arc<dyn MessageBus>) -> Option<Arc<dyn MessageBus>> {
        None
    }
}

#[test]
fn the_suite_fails_a_send_many_that_is_not_all_or_nothing() {
    let failure = std::panic::catch_unwind(|| run_conformance(Looping))
        .expect_err("the default send_many keeps part of a refused batch: the suite must fail");
    let message = failure
        .downcast_ref::<String>()
        .cloned()
        .or_else(|| failure.downcast_ref::<&str>().map(|s| (*s).to_owned()))
        .unwrap_or_default();
    assert!(
        message.contains("a refused send_many delivers nothing of its batch"),
        "failed elsewhere: {message}"
    );
}
