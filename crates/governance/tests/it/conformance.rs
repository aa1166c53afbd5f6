//! The in-memory backend against the exported conformance suite, and the trait's object safety.

use std::sync::Arc;

use agent_state::{AgentId, Decision, DecisionId, SignOutcome, Timestamp};
use async_trait::async_trait;
use governance::testing::{GovernanceFactory, run_conformance};
use governance::{Governance, InMemoryGovernance};

/// In-memory backends; nothing survives a restart.
struct Memory;

#[async_trait]
impl GovernanceFactory for Memory {
    async fn fresh(&self) -> Arc<dyn Governance> {
        Arc::new(InMemoryGovernance::new())
    }

    async fn reopen(&self, _gov: Arc<dyn Governance>) -> Option<Arc<dyn Governance>> {
        None
    }
}

#[test]
fn in_memory_backend_passes_the_conformance_suite() {
    run_conformance(Memory);
}

/// Holds any backend as `Arc<dyn Governance>` and moves it into a spawned task: the trait is
/// object-safe, and the object is `Send + Sync + 'static`.
#[test]
fn governance_is_object_safe_and_shareable() {
    fn assert_send_sync_static<T: Send + Sync + 'static>(_: &T) {}

    let gov: Arc<dyn Governance> = Arc::new(InMemoryGovernance::new());
    assert_send_sync_static(&gov);
    let rt = tokio::runtime::Builder::new_current_thread().build().unwrap();
    let outcome = rt.block_on(async {
        let id = DecisionId::from_u128(1);
        let signer = AgentId::new("top-a");
        let d = Decision::propose(
            id,
            signer.clone(),
            serde_json::json!({"plan": "ship"}),
            vec![signer.clone()],
            Timestamp(0),
        )
        .unwrap();
        gov.submit(d).await.unwrap();
        let task_gov = Arc::clone(&gov);
        tokio::spawn(async move { task_gov.sign(id, &signer, Timestamp(1)).await })
            .await
            .unwrap()
            .unwrap()
    });
    assert_eq!(outcome, SignOutcome::Approved);
}
