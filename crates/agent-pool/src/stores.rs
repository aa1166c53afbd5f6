//! The five stores a team keeps its data in (message bus, whiteboards, governance, audit log,
//! state store), assembled in one place: in memory ([`TeamStores::in_memory`]) or, with the
//! feature `nats`, on one NATS JetStream namespace ([`NatsStores::open`]). [`TeamServices`]
//! is built on them ([`TeamServices::on_stores`]), and so are the engine's stores
//! (`strata::Stores`, which adds those of a run's sled database).
//!
//! [`TeamServices`]: crate::TeamServices
//! [`TeamServices::on_stores`]: crate::TeamServices::on_stores

use std::sync::Arc;

use agent_core::{AuditLog, StateStore};
use governance::Governance;
use message_bus::MessageBus;
use whiteboard::Whiteboard;

/// The five stores of a team, behind their traits.
#[derive(Clone)]
pub struct TeamStores {
    /// The message bus.
    pub bus: Arc<dyn MessageBus>,
    /// The whiteboards.
    pub boards: Arc<dyn Whiteboard>,
    /// Governance.
    pub governance: Arc<dyn Governance>,
    /// The audit log.
    pub audit: Arc<dyn AuditLog>,
    /// The state store, with the tool journal's records.
    pub state: Arc<dyn StateStore>,
}

impl TeamStores {
    /// The in-memory backends: a team for a test, an example or an evaluation, whose data goes
    /// with the process.
    pub fn in_memory() -> Self {
        Self {
            bus: Arc::new(message_bus::InMemoryBus::new()),
            boards: Arc::new(whiteboard::InMemoryWhiteboard::new()),
            governance: Arc::new(governance::InMemoryGovernance::new()),
            audit: Arc::new(agent_core::InMemoryAuditLog::new()),
            state: Arc::new(agent_core::InMemoryStateStore::new()),
        }
    }
}

#[cfg(feature = "nats")]
pub use on_nats::{NatsStores, NatsStoresError};

#[cfg(feature = "nats")]
mod on_nats {
    use std::sync::Arc;

    use agent_core::{NatsAuditLog, NatsStateStore};
    use governance::NatsGovernance;
    use message_bus::NatsBus;
    use nats_store::NatsStore;
    use thiserror::Error;
    use whiteboard::NatsWhiteboard;

    use super::TeamStores;

    /// The five stores on one NATS JetStream namespace, each as its own type (the engine keeps
    /// the audit log's: its last record is what the seal of a run anchors).
    #[derive(Clone)]
    pub struct NatsStores {
        /// The message bus.
        pub bus: Arc<NatsBus>,
        /// The whiteboards.
        pub boards: Arc<NatsWhiteboard>,
        /// Governance.
        pub governance: Arc<NatsGovernance>,
        /// The audit log.
        pub audit: Arc<NatsAuditLog>,
        /// The state store, with the tool journal's records.
        pub state: Arc<NatsStateStore>,
    }

    /// A store that could not be opened on a NATS server: which one, the server's URL, and
    /// the backend's error (kept as it is, so a caller can tell a store of another schema from
    /// a server that did not answer).
    #[derive(Debug, Error)]
    #[error("cannot open {store} on the NATS server at {url}")]
    pub struct NatsStoresError {
        /// The store: `the message bus`, `the whiteboards`, `governance`, `the audit log` or
        /// `the state store`.
        pub store: &'static str,
        /// The server's URL.
        pub url: String,
        /// The backend's error.
        #[source]
        pub source: Box<dyn std::error::Error + Send + Sync + 'static>,
    }

    impl NatsStores {
        /// The stores under `store`'s namespace, created there if they are not; the first that
        /// cannot be opened is named in the error, with the server's URL.
        pub async fn open(store: &NatsStore) -> Result<Self, NatsStoresError> {
            let audit = NatsAuditLog::open(store).await.map_err(failed(store, "the audit log"))?;
            let bus = NatsBus::open(store).await.map_err(failed(store, "the message bus"))?;
            let boards =
                NatsWhiteboard::open(store).await.map_err(failed(store, "the whiteboards"))?;
            let governance =
                NatsGovernance::open(store).await.map_err(failed(store, "governance"))?;
            let state =
                NatsStateStore::open(store).await.map_err(failed(store, "the state store"))?;
            Ok(Self {
                bus: Arc::new(bus),
                boards: Arc::new(boards),
                governance: Arc::new(governance),
                audit: Arc::new(audit),
                state: Arc::new(state),
            })
        }
    }

    /// The error of `store` (`the message bus`, ...) failing to open on `on`'s server.
    fn failed<E: std::error::Error + Send + Sync + 'static>(
        on: &NatsStore,
        store: &'static str,
    ) -> impl FnOnce(E) -> NatsStoresError {
        let url = on.url().to_owned();
        move |e| NatsStoresError { store, url, source: Box::new(e) }
    }

    impl From<NatsStores> for TeamStores {
        fn from(stores: NatsStores) -> Self {
            Self {
                bus: stores.bus,
                boards: stores.boards,
                governance: stores.governance,
                audit: stores.audit,
                state: stores.state,
            }
        }
    }
}
