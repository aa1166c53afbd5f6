//! Integration tests: the audit log and state store conformance suite against the in-memory,
//! sled (feature `sled`) and NATS JetStream (feature `nats`) backends, and what each backend
//! adds to it.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, reason = "tests")]

#[cfg(feature = "nats")]
mod nats;
#[cfg(feature = "sled")]
mod sled;

use std::sync::Arc;

use agent_core::testing::{StoreFactory, Stores, run_conformance};
use agent_core::{InMemoryAuditLog, InMemoryStateStore};

/// Makes in-memory stores; they keep nothing across a restart, and a second handle is the
/// same store.
struct Memory;

#[async_trait::async_trait]
impl StoreFactory for Memory {
    async fn fresh(&self) -> Stores {
        Stores {
            audit: Arc::new(InMemoryAuditLog::new()),
            state: Arc::new(InMemoryStateStore::new()),
        }
    }

    async fn reopen(&self, _stores: Stores) -> Option<Stores> {
        None
    }

    async fn share(&self, stores: &Stores) -> Option<Stores> {
        Some(stores.clone())
    }
}

#[test]
fn in_memory_stores_pass_the_conformance_suite() {
    run_conformance(Memory);
}
