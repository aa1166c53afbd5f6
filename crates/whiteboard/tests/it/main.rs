//! Integration tests: the conformance suite on the in-memory, sled and (feature `nats`) NATS
//! backends, and proof that the suite catches a backend that breaks the contract.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, reason = "tests")]

#[cfg(feature = "nats")]
mod nats;
mod sled_backend;

use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::Arc;

use agent_state::{Actor, AgentId, AgentLayer, BoardId, BoardSnapshot, Timestamp};
use async_trait::async_trait;
use whiteboard::testing::{WhiteboardFactory, run_conformance};
use whiteboard::{BoardError, CreateError, InMemoryWhiteboard, Whiteboard};

/// In-memory backends with a given size limit.
struct Memory {
    max_bytes: usize,
}

#[async_trait]
impl WhiteboardFactory for Memory {
    async fn fresh(&self) -> Arc<dyn Whiteboard> {
        Arc::new(InMemoryWhiteboard::with_max_bytes(self.max_bytes))
    }

    async fn reopen(&self, _boards: Arc<dyn Whiteboard>) -> Option<Arc<dyn Whiteboard>> {
        None
    }

    fn max_board_bytes(&self) -> usize {
        self.max_bytes
    }
}

#[test]
fn in_memory_backend_passes_the_conformance_suite() {
    run_conformance(Memory { max_bytes: whiteboard::MAX_BOARD_BYTES });
}

#[test]
fn in_memory_backend_passes_the_conformance_suite_with_a_small_limit() {
    // A 64-byte limit makes the generated appends run into it often.
    run_conformance(Memory { max_bytes: 64 });
}

/// In-memory backends that "survive" a restart by handing back the same store, or, when
/// `forget` is set, that claim to and lose everything.
struct Reopening {
    forget: bool,
}

#[async_trait]
impl WhiteboardFactory for Reopening {
    async fn fresh(&self) -> Arc<dyn Whiteboard> {
        Arc::new(InMemoryWhiteboard::new())
    }

    async fn reopen(&self, boards: Arc<dyn Whiteboard>) -> Option<Arc<dyn Whiteboard>> {
        if self.forget { Some(self.fresh().await) } else { Some(boards) }
    }
}

#[test]
fn the_restart_checks_pass_on_a_store_that_survives_restarts() {
    run_conformance(Reopening { forget: false });
}

#[test]
fn the_restart_checks_reject_a_store_that_forgets_on_restart() {
    let outcome = catch_unwind(AssertUnwindSafe(|| run_conformance(Reopening { forget: true })));
    let payload = outcome.expect_err("the suite accepted a store that forgets on restart");
    let message = payload.downcast_ref::<String>().cloned().unwrap_or_default();
    assert!(
        message
            .starts_with("whiteboard conformance check `acknowledged_changes_survive_a_restart`"),
        "unexpected failure: {message}"
    );
}

#[test]
fn whiteboard_is_object_safe_and_shareable() {
    fn assert_send_sync<T: Send + Sync + 'static>(_: &T) {}
    let boards: Arc<dyn Whiteboard> = Arc::new(InMemoryWhiteboard::new());
    assert_send_sync(&boards);
    let me = AgentId::new("top-1");
    let runtime = tokio::runtime::Builder::new_current_thread().build().unwrap();
    let seen = runtime.block_on(async {
        let shared = Arc::clone(&boards);
        shared.create(&me, AgentLayer::Top).await.unwrap();
        shared.append(&me, &BoardId::Global, "hello", Timestamp(1)).await.unwrap();
        boards.read(&Actor::System, &BoardId::Global).await.unwrap()
    });
    assert_eq!((seen.content.as_str(), seen.version), ("hello", 1));
}

/// A fault a broken backend can have.
#[derive(Clone, Copy, Debug)]
enum Fault {
    /// Lets an agent read boards the policy hides from it.
    LeaksReads,
    /// Accepts a create under another layer as if it were the same.
    IgnoresLayerMismatch,
    /// Lists the agent boards in reverse owner order.
    ListsOutOfOrder,
    /// Reports a version one too high after an append.
    MiscountsAppends,
}

/// The in-memory backend with one fault.
struct Faulty {
    inner: InMemoryWhiteboard,
    fault: Fault,
}

#[async_trait]
impl Whiteboard for Faulty {
    async fn create(
        &self,
        owner: &AgentId,
        layer: AgentLayer,
    ) -> Result<BoardSnapshot, CreateError> {
        match (self.fault, self.inner.create(owner, layer).await) {
            (Fault::IgnoresLayerMismatch, Err(CreateError::LayerMismatch { .. })) => {
                Ok(self.inner.read(&Actor::System, &BoardId::from(owner)).await.unwrap())
            }
            (_, result) => result,
        }
    }

    async fn read(&self, reader: &Actor, board: &BoardId) -> Result<BoardSnapshot, BoardError> {
        match (self.fault, self.inner.read(reader, board).await) {
            (Fault::LeaksReads, Err(BoardError::PermissionDenied { .. })) => {
                self.inner.read(&Actor::System, board).await
            }
            (_, result) => result,
        }
    }

    async fn write(
        &self,
        writer: &AgentId,
        board: &BoardId,
        content: String,
        at: Timestamp,
    ) -> Result<u64, BoardError> {
        self.inner.write(writer, board, content, at).await
    }

    async fn append(
        &self,
        writer: &AgentId,
        board: &BoardId,
        content: &str,
        at: Timestamp,
    ) -> Result<u64, BoardError> {
        let version = self.inner.append(writer, board, content, at).await?;
        Ok(match self.fault {
            Fault::MiscountsAppends => version + 1,
            _ => version,
        })
    }

    async fn list(&self, reader: &Actor) -> Result<Vec<BoardSnapshot>, BoardError> {
        let mut boards = self.inner.list(reader).await?;
        if let Fault::ListsOutOfOrder = self.fault {
            boards[1..].reverse();
        }
        Ok(boards)
    }
}

struct FaultyFactory(Fault);

#[async_trait]
impl WhiteboardFactory for FaultyFactory {
    async fn fresh(&self) -> Arc<dyn Whiteboard> {
        Arc::new(Faulty { inner: InMemoryWhiteboard::new(), fault: self.0 })
    }

    async fn reopen(&self, _boards: Arc<dyn Whiteboard>) -> Option<Arc<dyn Whiteboard>> {
        None
    }
}

#[test]
fn the_suite_rejects_a_backend_that_breaks_the_contract() {
    for fault in [
        Fault::LeaksReads,
        Fault::IgnoresLayerMismatch,
        Fault::ListsOutOfOrder,
        Fault::MiscountsAppends,
    ] {
        let outcome = catch_unwind(AssertUnwindSafe(|| run_conformance(FaultyFactory(fault))));
        let message = match outcome {
            Ok(()) => panic!("the suite accepted a backend that {fault:?}"),
            Err(payload) => payload
                .downcast_ref::<String>()
                .cloned()
                .unwrap_or_else(|| format!("non-string panic for {fault:?}")),
        };
        assert!(
            message.starts_with("whiteboard conformance check `"),
            "{fault:?}: the failure does not name its check: {message}"
        );
    }
}
