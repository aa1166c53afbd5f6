//! The conformance suite every [`MessageBus`] backend runs: named scenarios, then a model-based test.
//!
//! A backend crate calls [`run_conformance`] from one of its tests with a [`BusFactory`] that
//! makes fresh stores of that backend. The suite panics, naming the failed check, at the first
//! difference from the contract written on [`MessageBus`].
//!
//! ```no_run
//! use std::sync::Arc;
//!
//! use message_bus::testing::{BusFactory, run_conformance};
//! use message_bus::{InMemoryBus, MessageBus};
//!
//! struct Memory;
//!
//! #[async_trait::async_trait]
//! impl BusFactory for Memory {
//!     async fn fresh(&self) -> Arc<dyn MessageBus> {
//!         Arc::new(InMemoryBus::new())
//!     }
//!     async fn reopen(&self, _bus: Arc<dyn MessageBus>) -> Option<Arc<dyn MessageBus>> {
//!         None
//!     }
//!     async fn fresh_with_capacity(&self, per_inbox: usize) -> Option<Arc<dyn MessageBus>> {
//!         Some(Arc::new(InMemoryBus::with_capacity(per_inbox)))
//!     }
//! }
//!
//! run_conformance(Memory);
//! ```

use std::sync::Arc;

use async_trait::async_trait;

use crate::MessageBus;

mod model;
mod scenarios;

/// Makes backends for the conformance suite.
#[async_trait]
pub trait BusFactory: Send + Sync {
    /// A fresh, empty backend (a new store each call).
    async fn fresh(&self) -> Arc<dyn MessageBus>;

    /// Drops `bus` and opens the same store again, as after a process restart; `None` for
    /// backends that keep nothing across a restart (in-memory).
    ///
    /// The suite passes the only handle it holds, so a backend that locks its store can open
    /// it again. It must answer the same way on every call: the suite asks once, on a
    /// throwaway store, whether the backend is durable. A reopened store keeps its
    /// registrations, its messages and its inbox capacity; every in-flight message is pending
    /// again, in its original order.
    async fn reopen(&self, bus: Arc<dyn MessageBus>) -> Option<Arc<dyn MessageBus>>;

    /// A fresh, empty backend whose inboxes hold at most `per_inbox` messages each, pending and
    /// in flight together; `None` (the default) if the backend cannot be built with a given
    /// capacity, in which case the suite skips its checks of full inboxes.
    async fn fresh_with_capacity(&self, per_inbox: usize) -> Option<Arc<dyn MessageBus>> {
        let _ = per_inbox;
        None
    }
}

/// Runs the whole suite against the backend `factory` makes; panics at the first failed check.
///
/// Builds its own current-thread tokio runtime, so call it from a plain `#[test]`, not from
/// inside a runtime. First come the named scenarios, one per guarantee and per refusal in the
/// [`MessageBus`] docs, each checking the exact error and that the refused call changed
/// nothing; then a model-based property test compares the backend, step by step, with a
/// reference model over generated sequences of operations, including restarts for a durable
/// backend. The number of generated sequences is `PROPTEST_CASES` from the environment,
/// 64 if unset.
pub fn run_conformance<F: BusFactory>(factory: F) {
    let runtime = match tokio::runtime::Builder::new_current_thread().enable_all().build() {
        Ok(runtime) => runtime,
        Err(err) => panic!("message-bus conformance: cannot build a tokio runtime: {err}"),
    };
    let durable = runtime.block_on(async {
        let probe = factory.fresh().await;
        factory.reopen(probe).await.is_some()
    });
    runtime.block_on(scenarios::run_all(&factory, durable));
    model::run(&runtime, &factory, durable);
}
