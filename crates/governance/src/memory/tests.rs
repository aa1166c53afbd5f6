//! Unit tests of the in-memory backend: what the conformance suite does not reach.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use agent_state::{
    AgentId, Decision, DecisionId, DecisionStatus, ProposeError, SignError, Timestamp,
};

use super::InMemoryGovernance;
use crate::{DecideError, Governance, SubmitError};

fn block_on<F: std::future::Future>(f: F) -> F::Output {
    tokio::runtime::Builder::new_current_thread().build().unwrap().block_on(f)
}

fn proposal(n: u128, signers: &[&str], created_at: u64) -> Decision {
    Decision::propose(
        DecisionId::from_u128(n),
        AgentId::new("proposer"),
        serde_json::json!({ "n": n }),
        signers.iter().map(|s| AgentId::new(*s)).collect(),
        Timestamp(created_at),
    )
    .unwrap()
}

#[test]
fn new_and_default_are_empty() {
    block_on(async {
        for gov in [InMemoryGovernance::new(), InMemoryGovernance::default()] {
            assert!(gov.list().await.unwrap().is_empty());
            assert!(gov.list_pending().await.unwrap().is_empty());
            assert!(gov.get(DecisionId::from_u128(1)).await.unwrap().is_none());
        }
    });
}

#[test]
fn submit_reports_the_first_broken_rule_in_the_documented_order() {
    block_on(async {
        let gov = InMemoryGovernance::new();
        gov.submit(proposal(1, &["a"], 0)).await.unwrap();

        // Empty signers, not fresh and a used id: signers are checked first.
        let mut all_wrong = proposal(1, &["a"], 0);
        all_wrong.required_signers.clear();
        all_wrong.status = DecisionStatus::Approved;
        let err = gov.submit(all_wrong.clone()).await.unwrap_err();
        assert!(matches!(err, SubmitError::Invalid(ProposeError::NoSigners { .. })), "{err:?}");

        // Not fresh and a used id: freshness comes next.
        all_wrong.required_signers.push(AgentId::new("a"));
        let err = gov.submit(all_wrong).await.unwrap_err();
        assert!(
            matches!(err, SubmitError::NotFresh { status: DecisionStatus::Approved, .. }),
            "{err:?}"
        );
        assert_eq!(gov.list().await.unwrap(), [proposal(1, &["a"], 0)]);
    });
}

#[test]
fn error_messages_name_the_decision_and_stay_lowercase() {
    block_on(async {
        let gov = InMemoryGovernance::new();
        let id = DecisionId::from_u128(3);
        let err = gov.sign(id, &AgentId::new("a"), Timestamp(0)).await.unwrap_err();
        assert_eq!(err.to_string(), format!("no decision {id}"));
        gov.submit(proposal(3, &["a"], 0)).await.unwrap();
        let err = gov.submit(proposal(3, &["a"], 0)).await.unwrap_err();
        assert_eq!(
            err.to_string(),
            format!("decision {id} already exists; submit a new decision with a fresh id")
        );
    });
}

#[test]
fn a_refused_veto_keeps_the_exact_stored_value() {
    block_on(async {
        let gov = InMemoryGovernance::new();
        let d = proposal(1, &["a", "b"], 5);
        gov.submit(d.clone()).await.unwrap();
        let err = gov.veto(d.id, &AgentId::new("a"), " ", Timestamp(6)).await.unwrap_err();
        assert!(matches!(err, DecideError::Rule(SignError::EmptyVetoReason { .. })), "{err:?}");
        assert_eq!(gov.get(d.id).await.unwrap(), Some(d));
    });
}

#[test]
fn shared_between_tasks_through_an_arc() {
    block_on(async {
        let gov: std::sync::Arc<dyn Governance> = std::sync::Arc::new(InMemoryGovernance::new());
        let d = proposal(1, &["a", "b"], 0);
        gov.submit(d.clone()).await.unwrap();
        let (a, b) = (gov.clone(), gov.clone());
        let (ra, rb) = tokio::join!(
            async move { a.sign(d.id, &AgentId::new("a"), Timestamp(1)).await },
            async move { b.sign(d.id, &AgentId::new("b"), Timestamp(2)).await },
        );
        let outcomes = [ra.unwrap(), rb.unwrap()];
        assert!(outcomes.contains(&agent_state::SignOutcome::Approved), "{outcomes:?}");
        assert_eq!(gov.get(d.id).await.unwrap().unwrap().status, DecisionStatus::Approved);
    });
}
