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
