//! The sled governance backend: every decision an encoded [`Decision`] in one tree of a run's
//! database, each change made durable before the call returns.

use std::fmt;
use std::sync::{Mutex, MutexGuard, PoisonError};

use agent_state::{
    AgentId, BackendError, Decision, DecisionId, DecisionStatus, SignError, SignOutcome, Timestamp,
    decode, encode,
};
use async_trait::async_trait;
use run_store::RunStore;

use crate::{DecideError, Governance, SubmitError, check_fresh};

/// The tree of the run database that holds the decisions: one record per decision, keyed by its
/// id in hyphenated form (`DecisionId`'s `Display`), each an [`agent_state::encode`]d
/// [`Decision`].
pub const DECISIONS_TREE: &str = "decisions";

/// A [`Governance`] backend that keeps its decisions in a run's sled database ([`RunStore`]).
///
/// It behaves exactly like [`InMemoryGovernance`](crate::InMemoryGovernance): the same checks in
/// the same order, the same errors, the same results. What differs:
///
/// - **Durability.** `submit`, `sign` and `veto` store the decision and then wait for
///   [`RunStore::commit`] (a sled flush and an `fdatasync`, shared with concurrent writers) before
///   they return `Ok`: the change survives a crash of the process and a loss of power (with
///   [`Durability::Synced`](run_store::Durability::Synced); with `NoSync`, a crash of the process
///   only). A sign that changes nothing ([`SignOutcome::AlreadySigned`]) commits too, so what it
///   reports is durable. If the commit fails, the call returns a backend error; the change may
///   then be visible to later reads and may or may not survive a crash.
/// - **Concurrency.** Each call reads, checks and writes under a mutex of this value, never held
///   across an `.await`, so calls through one `SledGovernance` never lose each other's changes.
///   Open one `SledGovernance` per run store: two values on the same store do not serialize with
///   each other.
/// - **Records that cannot be decoded** (damaged bytes, another kind of record, another schema
///   version, a decision whose id does not match its key) are never overwritten and never cause a
///   panic. `get`, `sign` and `veto` of such a decision fail with a backend error naming the tree
///   and the key; `submit` of its id is [`SubmitError::DuplicateId`], since the id is taken.
///   `list` and `list_pending` **skip** such a record with a `tracing` warning naming it, so the
///   rest of the store stays listable.
///
/// ```
/// use agent_state::{AgentId, Decision, DecisionId, DecisionStatus, Timestamp};
/// use governance::{Governance, SledGovernance};
/// use run_store::{Durability, RunStore};
///
/// # tokio_test_block_on(async {
/// let dir = tempfile::tempdir()?;
/// let run = dir.path().join("run-1");
/// let store = RunStore::create(&run, "run-1", Timestamp(0), Durability::Synced)?;
/// let gov = SledGovernance::open(&store)?;
/// let a = AgentId::new("top-a");
/// let id = DecisionId::from_u128(7);
/// gov.submit(Decision::propose(id, a.clone(), serde_json::json!("ship it"), vec![a.clone()],
///     Timestamp(0))?).await?;
/// // When this returns, the signature survives a crash and a loss of power.
/// gov.sign(id, &a, Timestamp(1)).await?;
/// assert_eq!(gov.get(id).await?.map(|d| d.status), Some(DecisionStatus::Approved));
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// # }).unwrap();
/// # fn tokio_test_block_on<F: std::future::Future>(f: F) -> F::Output {
/// #     tokio::runtime::Builder::new_current_thread().build().unwrap().block_on(f)
/// # }
/// ```
pub struct SledGovernance {
    /// Declared before `store`, so it drops first: the store seals the run when it closes only
    /// if no tree is left.
    decisions: ::sled::Tree,
    store: RunStore,
    /// Serializes every read-check-write; never held across an `.await`.
    lock: Mutex<()>,
}

impl SledGovernance {
    /// The decisions of `store`.
    pub fn open(store: &RunStore) -> Result<Self, BackendError> {
        let decisions = store.tree(DECISIONS_TREE)?;
        Ok(Self { decisions, store: store.clone(), lock: Mutex::new(()) })
    }

    fn submit_now(&self, decision: &Decision) -> Result<(), SubmitError> {
        check_fresh(decision)?;
        let key = decision.id.to_string();
        let _guard = self.lock();
        // The key, not the record: an id whose record cannot be decoded is still taken.
        let taken = self.decisions.contains_key(key.as_bytes()).map_err(|e| read_error(&key, e))?;
        if taken {
            return Err(SubmitError::DuplicateId { id: decision.id });
        }
        self.store_decision(decision)?;
        tracing::debug!(id = %decision.id, signers = decision.required_signers.len(), "decision submitted");
        Ok(())
    }

    /// Applies `change` to a copy of decision `id` and stores the copy only if `change` succeeds
    /// and changed it.
    fn decide<T>(
        &self,
        id: DecisionId,
        change: impl FnOnce(&mut Decision) -> Result<T, SignError>,
    ) -> Result<T, DecideError> {
        let _guard = self.lock();
        let stored = self.load(id)?.ok_or(DecideError::UnknownDecision { id })?;
        let mut next = stored.clone();
        let out = change(&mut next)?;
        if next != stored {
            self.store_decision(&next)?;
        }
        Ok(out)
    }

    /// The decisions that pass `keep`, by `created_at` then id; records that cannot be decoded
    /// are skipped with a warning.
    fn sorted(&self, keep: impl Fn(&Decision) -> bool) -> Result<Vec<Decision>, BackendError> {
        let _guard = self.lock();
        let mut out = Vec::new();
        for entry in self.decisions.iter() {
            let (key, bytes) = entry.map_err(|e| {
                BackendError::with_source("sled", format!("cannot list tree `{DECISIONS_TREE}`"), e)
            })?;
            let key = String::from_utf8_lossy(&key);
            match decode_decision(&key, &bytes) {
                Ok(decision) if keep(&decision) => out.push(decision),
                Ok(_) => {}
                Err(error) => tracing::warn!(
                    tree = DECISIONS_TREE,
                    key = %key,
                    %error,
                    "skipping a decision record that cannot be decoded; getting that decision reports the error"
                ),
            }
        }
        out.sort_by_key(|d| (d.created_at, d.id));
        Ok(out)
    }

    /// The record of decision `id`, decoded and checked against its key.
    fn load(&self, id: DecisionId) -> Result<Option<Decision>, BackendError> {
        let key = id.to_string();
        let bytes = self.decisions.get(key.as_bytes()).map_err(|e| read_error(&key, e))?;
        bytes.map(|bytes| decode_decision(&key, &bytes)).transpose()
    }

    /// Writes `decision` to the tree (not yet durable: the caller commits after releasing the
    /// lock).
    fn store_decision(&self, decision: &Decision) -> Result<(), BackendError> {
        let key = decision.id.to_string();
        let bytes = encode(decision).map_err(|e| {
            BackendError::with_source("sled", format!("cannot encode decision {key}"), e)
        })?;
        self.decisions.insert(key.as_bytes(), bytes).map_err(|e| {
            BackendError::with_source(
                "sled",
                format!("cannot write record `{key}` of tree `{DECISIONS_TREE}`"),
                e,
            )
        })?;
        Ok(())
    }

    /// The lock guards no data (the tree holds it), so a poisoned lock is used as is: every
    /// change is one `insert` made after all checks passed.
    fn lock(&self) -> MutexGuard<'_, ()> {
        self.lock.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

impl fmt::Debug for SledGovernance {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SledGovernance")
            .field("run", &self.store.dir())
            .field("tree", &DECISIONS_TREE)
            .finish_non_exhaustive()
    }
}

#[async_trait]
impl Governance for SledGovernance {
    async fn submit(&self, decision: Decision) -> Result<(), SubmitError> {
        self.submit_now(&decision)?;
        self.store.commit().await?;
        Ok(())
    }

    async fn sign(
        &self,
        id: DecisionId,
        signer: &AgentId,
        at: Timestamp,
    ) -> Result<SignOutcome, DecideError> {
        let outcome = self.decide(id, |d| d.sign(signer, at))?;
        self.store.commit().await?;
        tracing::debug!(%id, %signer, ?outcome, "decision signed");
        Ok(outcome)
    }

    async fn veto(
        &self,
        id: DecisionId,
        vetoer: &AgentId,
        reason: &str,
        at: Timestamp,
    ) -> Result<(), DecideError> {
        self.decide(id, |d| d.veto(vetoer, reason, at))?;
        self.store.commit().await?;
        tracing::debug!(%id, %vetoer, reason, "decision vetoed");
        Ok(())
    }

    async fn get(&self, id: DecisionId) -> Result<Option<Decision>, BackendError> {
        self.load(id)
    }

    async fn list_pending(&self) -> Result<Vec<Decision>, BackendError> {
        self.sorted(|d| d.status == DecisionStatus::Pending)
    }

    async fn list(&self) -> Result<Vec<Decision>, BackendError> {
        self.sorted(|_| true)
    }
}

/// Decodes the record under `key` and checks that it is the decision `key` names.
fn decode_decision(key: &str, bytes: &[u8]) -> Result<Decision, BackendError> {
    let decision: Decision = decode(bytes).map_err(|e| {
        BackendError::new(
            "sled",
            format!("cannot decode record `{key}` of tree `{DECISIONS_TREE}`: {e}"),
        )
    })?;
    if decision.id.to_string() != key {
        return Err(BackendError::new(
            "sled",
            format!(
                "cannot decode record `{key}` of tree `{DECISIONS_TREE}`: it holds decision {}",
                decision.id
            ),
        ));
    }
    Ok(decision)
}

fn read_error(key: &str, e: ::sled::Error) -> BackendError {
    BackendError::with_source(
        "sled",
        format!("cannot read record `{key}` of tree `{DECISIONS_TREE}`"),
        e,
    )
}
