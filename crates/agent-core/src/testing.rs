//! The conformance suite every [`AuditLog`] and [`StateStore`] backend runs: named scenarios,
//! then a model-based test (feature `testing`); and the fakes tests share: [`FakeTool`], a tool
//! that fails, fails for a while, never returns or takes its time, and [`StuckReasoner`], a
//! model that never answers or trickles its tokens.
//!
//! A backend calls [`run_conformance`] from one of its tests with a [`StoreFactory`] that makes
//! fresh stores of that backend: an audit log and a state store of one run, as a run opens
//! them. The suite panics, naming the failed check, at the first difference from the contract
//! written on the two traits.
//!
//! ```no_run
//! use std::sync::Arc;
//!
//! use agent_core::testing::{StoreFactory, Stores, run_conformance};
//! use agent_core::{InMemoryAuditLog, InMemoryStateStore};
//!
//! struct Memory;
//!
//! #[async_trait::async_trait]
//! impl StoreFactory for Memory {
//!     async fn fresh(&self) -> Stores {
//!         Stores {
//!             audit: Arc::new(InMemoryAuditLog::new()),
//!             state: Arc::new(InMemoryStateStore::new()),
//!         }
//!     }
//!     async fn reopen(&self, _stores: Stores) -> Option<Stores> {
//!         None
//!     }
//! }
//!
//! run_conformance(Memory);
//! ```

use std::sync::Arc;

use async_trait::async_trait;

use crate::{AuditLog, StateStore};

mod data;
mod model;
mod reasoner;
mod scenarios;
mod tool;

pub use reasoner::StuckReasoner;
pub use tool::{FakeAct, FakeTool};

/// The audit log and the state store of one run, as a run opens them.
#[derive(Clone)]
pub struct Stores {
    /// The audit log.
    pub audit: Arc<dyn AuditLog>,
    /// The state store (agents, tool journal, outcomes, blobs).
    pub state: Arc<dyn StateStore>,
}

/// Makes backends for the conformance suite.
#[async_trait]
pub trait StoreFactory: Send + Sync {
    /// A fresh, empty audit log and state store of a new run (new stores each call).
    async fn fresh(&self) -> Stores;

    /// Drops `stores` and opens the same run again, as after a restart of the process; `None`
    /// for backends that keep nothing across a restart (in-memory).
    ///
    /// The suite passes the only handles it holds, so a backend that locks its store can open
    /// it again. It must answer the same way on every call: the suite asks once, on a
    /// throwaway run, whether the backend is durable. A reopened run keeps every record the
    /// contract says survives a restart.
    async fn reopen(&self, stores: Stores) -> Option<Stores>;

    /// A second, independent handle on the same run while the first stays open, as another
    /// process (or machine) opens it; `None` (the default) for a backend one process holds at
    /// a time (sled locks its run directory). The suite then checks that appends from both
    /// keep one chain and that each sees what the other wrote.
    async fn share(&self, stores: &Stores) -> Option<Stores> {
        let _ = stores;
        None
    }

    /// Called with a run the suite is done with (including a shared handle on it), so that a
    /// backend on a server can delete it. The default drops it.
    async fn discard(&self, stores: Stores) {
        drop(stores);
    }
}

#[async_trait]
impl<F: StoreFactory + ?Sized> StoreFactory for &F {
    async fn fresh(&self) -> Stores {
        (**self).fresh().await
    }

    async fn reopen(&self, stores: Stores) -> Option<Stores> {
        (**self).reopen(stores).await
    }

    async fn share(&self, stores: &Stores) -> Option<Stores> {
        (**self).share(stores).await
    }

    async fn discard(&self, stores: Stores) {
        (**self).discard(stores).await;
    }
}

/// Runs the whole suite against the backend `factory` makes; panics at the first failed check.
///
/// Builds its own current-thread tokio runtime, so call it from a plain `#[test]`, not from
/// inside a runtime. First come the named scenarios, one per guarantee in the [`AuditLog`] and
/// [`StateStore`] docs, then a model-based property test that compares the backend, step by
/// step, with a reference model over generated sequences of operations on both traits,
/// including restarts for a durable backend. The number of generated sequences is
/// `PROPTEST_CASES` from the environment, 64 if unset.
pub fn run_conformance<F: StoreFactory>(factory: F) {
    let runtime = match tokio::runtime::Builder::new_current_thread().enable_all().build() {
        Ok(runtime) => runtime,
        Err(err) => panic!("agent-core conformance: cannot build a tokio runtime: {err}"),
    };
    let durable = runtime.block_on(async {
        let probe = factory.fresh().await;
        match factory.reopen(probe).await {
            Some(reopened) => {
                factory.discard(reopened).await;
                true
            }
            None => false,
        }
    });
    runtime.block_on(scenarios::run_all(&factory, durable));
    model::run(&runtime, &factory, durable);
}
