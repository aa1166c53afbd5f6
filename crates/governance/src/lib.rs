//! Governance: decisions that named agents must sign, with vetoes, behind one trait.
//!
//! The package is `strata-governance` (`strata-governance = "0.1"` in `Cargo.toml`); code
//! names it `governance`.
//!
//! A proposer submits a [`Decision`] naming its required signers. Each required signer signs or
//! vetoes. The backend enforces the rules of [`agent_state::Decision`]: only a required signer may
//! sign or veto; nothing changes once a decision is approved or vetoed; signing twice changes
//! nothing; a decision is approved exactly when every required signer has signed; a veto is
//! final. Arbitration votes are tallied by [`agent_state::tally`].
//!
//! A human signs as `human:<name>` ([`AgentId::human`]): as a required signer, or as one of
//! the humans a decision's [`HumanApproval`](agent_state::HumanApproval) allows (one of them
//! must sign). The backends apply the same rules to humans as to agents.
//!
//! This crate holds the trait, its errors, the [`InMemoryGovernance`] backend, and (feature
//! `testing`) the conformance suite every backend must pass; the durable `SledGovernance` sits
//! behind feature `sled`, and `NatsGovernance`, which the processes of a team on several
//! machines share through NATS JetStream, behind feature `nats`.
//!
//! # Feature flags
//!
//! | feature   | what it adds |
//! |-----------|--------------|
//! | `testing` | the `testing` module: the conformance suite, for backend authors |
//! | `sled`    | `SledGovernance` and `DECISIONS_TREE`: decisions in a run's sled database (crate `run-store`); a change is durable (sled flush + `fdatasync`) when the call returns `Ok` |
//! | `nats`    | `NatsGovernance` and `DECISIONS_BUCKET`: decisions in a NATS JetStream key-value bucket (crate `nats-store`), one key per decision, every change a revision-checked write, so two processes never both sign or decide the same decision; a change is acknowledged by JetStream when the call returns `Ok` |
//!
//! ```
//! use agent_state::{AgentId, Decision, DecisionId, DecisionStatus, SignOutcome, Timestamp};
//! use governance::{Governance, InMemoryGovernance};
//!
//! # tokio_test_block_on(async {
//! let gov = InMemoryGovernance::new();
//! let (a, b) = (AgentId::new("top-a"), AgentId::new("top-b"));
//! let plan = Decision::propose(DecisionId::from_u128(7), a.clone(),
//!     serde_json::json!({"plan": "ship it"}), vec![a.clone(), b.clone()], Timestamp(0))?;
//! gov.submit(plan).await?;
//! assert_eq!(gov.sign(DecisionId::from_u128(7), &a, Timestamp(1)).await?, SignOutcome::Signed);
//! assert_eq!(gov.sign(DecisionId::from_u128(7), &b, Timestamp(2)).await?, SignOutcome::Approved);
//! let stored = gov.get(DecisionId::from_u128(7)).await?.expect("submitted");
//! assert_eq!(stored.status, DecisionStatus::Approved);
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! # }).unwrap();
//! # fn tokio_test_block_on<F: std::future::Future>(f: F) -> F::Output {
//! #     tokio::runtime::Builder::new_current_thread().build().unwrap().block_on(f)
//! # }
//! ```

use agent_state::{
    AgentId, BackendError, Decision, DecisionId, DecisionStatus, ProposeError, SignError,
    SignOutcome, Timestamp,
};
use async_trait::async_trait;
use thiserror::Error;

mod memory;
#[cfg(feature = "nats")]
mod nats;
#[cfg(feature = "sled")]
mod sled;
#[cfg(any(test, feature = "testing"))]
pub mod testing;

#[cfg(feature = "nats")]
pub use self::nats::{DECISIONS_BUCKET, NatsGovernance};
#[cfg(feature = "sled")]
pub use self::sled::{DECISIONS_TREE, SledGovernance};
pub use memory::InMemoryGovernance;

/// The governance engine. Object-safe: hold it as `Arc<dyn Governance>`.
///
/// Guarantees every backend keeps (the conformance suite checks each):
/// - the rules of [`Decision::sign`] and [`Decision::veto`] hold for every call;
/// - a refused call leaves the stored decision exactly as it was;
/// - `list_pending` returns exactly the decisions whose status is pending, oldest first.
///
/// Durability: if `submit`, `sign` or `veto` returns `Ok` on a durable backend, the change
/// survives a crash of the process and a loss of power. The in-memory backend keeps nothing
/// across a restart.
#[async_trait]
pub trait Governance: Send + Sync + 'static {
    /// Stores a new decision. It must be pending, with no signatures or vetoes yet, signers
    /// present and unique, and an id not used before.
    ///
    /// A decision that breaks several of these gets the first error in this order:
    /// [`SubmitError::Invalid`] (signers), [`SubmitError::NotFresh`], [`SubmitError::DuplicateId`].
    async fn submit(&self, decision: Decision) -> Result<(), SubmitError>;

    /// Records `signer`'s signature and says what it did.
    async fn sign(
        &self,
        id: DecisionId,
        signer: &AgentId,
        at: Timestamp,
    ) -> Result<SignOutcome, DecideError>;

    /// Records `vetoer`'s veto with its reason; the decision is vetoed for good.
    async fn veto(
        &self,
        id: DecisionId,
        vetoer: &AgentId,
        reason: &str,
        at: Timestamp,
    ) -> Result<(), DecideError>;

    /// One decision, or `None` if no decision has this id.
    async fn get(&self, id: DecisionId) -> Result<Option<Decision>, BackendError>;

    /// The pending decisions, oldest first (by `created_at`, then id).
    async fn list_pending(&self) -> Result<Vec<Decision>, BackendError>;

    /// Every decision, oldest first (by `created_at`, then id).
    async fn list(&self) -> Result<Vec<Decision>, BackendError>;
}

/// Submitting failed; nothing was stored.
#[derive(Debug, Error)]
pub enum SubmitError {
    /// A decision with this id exists.
    #[error("decision {id} already exists; submit a new decision with a fresh id")]
    DuplicateId {
        /// The id.
        id: DecisionId,
    },
    /// The decision is not a fresh pending one.
    #[error(
        "decision {id} must be submitted pending with no signatures or vetoes (it is {status})"
    )]
    NotFresh {
        /// The id.
        id: DecisionId,
        /// Its status.
        status: DecisionStatus,
    },
    /// Signers missing or repeated.
    #[error(transparent)]
    Invalid(#[from] ProposeError),
    /// The backend failed.
    #[error(transparent)]
    Backend(#[from] BackendError),
}

/// Signing or vetoing failed; the decision is unchanged.
#[derive(Debug, Error)]
pub enum DecideError {
    /// No decision has this id.
    #[error("no decision {id}")]
    UnknownDecision {
        /// The id.
        id: DecisionId,
    },
    /// A rule refused it.
    #[error(transparent)]
    Rule(#[from] SignError),
    /// The backend failed.
    #[error(transparent)]
    Backend(#[from] BackendError),
}

/// What every backend checks before it stores a submitted decision: signers present and unique,
/// then pending with no signatures or vetoes. The id check needs the store and is the backend's.
pub(crate) fn check_fresh(decision: &Decision) -> Result<(), SubmitError> {
    decision.check()?;
    if decision.status != DecisionStatus::Pending
        || !decision.signatures.is_empty()
        || !decision.vetoes.is_empty()
    {
        return Err(SubmitError::NotFresh { id: decision.id, status: decision.status });
    }
    Ok(())
}
