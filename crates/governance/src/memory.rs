//! The in-memory governance backend: decisions in a map behind a mutex, gone when the process ends.

use std::collections::HashMap;
use std::sync::{Mutex, MutexGuard, PoisonError};

use agent_state::{
    AgentId, BackendError, Decision, DecisionId, DecisionStatus, SignError, SignOutcome, Timestamp,
};
use async_trait::async_trait;

use crate::{DecideError, Governance, SubmitError, check_fresh};

/// A [`Governance`] backend that keeps its decisions in memory.
///
/// Every call completes before it returns and never fails with a backend error. Nothing survives
/// the process: this is the backend for tests, simulations and single-process runs that need no
/// history.
#[derive(Debug, Default)]
pub struct InMemoryGovernance {
    decisions: Mutex<HashMap<DecisionId, Decision>>,
}

impl InMemoryGovernance {
    /// An empty store.
    pub fn new() -> Self {
        Self::default()
    }

    /// The map. The lock is never held across an `.await`, and every change is one `insert`
    /// made after all checks passed, so a poisoned lock still guards consistent data.
    fn lock(&self) -> MutexGuard<'_, HashMap<DecisionId, Decision>> {
        self.decisions.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Applies `change` to a copy of decision `id` and stores the copy only if `change` succeeds.
    fn decide<T>(
        &self,
        id: DecisionId,
        change: impl FnOnce(&mut Decision) -> Result<T, SignError>,
    ) -> Result<T, DecideError> {
        let mut decisions = self.lock();
        let stored = decisions.get(&id).ok_or(DecideError::UnknownDecision { id })?;
        let mut next = stored.clone();
        let out = change(&mut next)?;
        if next != *stored {
            decisions.insert(id, next);
        }
        Ok(out)
    }

    /// The decisions that pass `keep`, by `created_at` then id.
    fn sorted(&self, keep: impl Fn(&Decision) -> bool) -> Vec<Decision> {
        let mut out: Vec<Decision> = self.lock().values().filter(|d| keep(d)).cloned().collect();
        out.sort_by_key(|d| (d.created_at, d.id));
        out
    }
}

#[async_trait]
impl Governance for InMemoryGovernance {
    async fn submit(&self, decision: Decision) -> Result<(), SubmitError> {
        check_fresh(&decision)?;
        let mut decisions = self.lock();
        if decisions.contains_key(&decision.id) {
            return Err(SubmitError::DuplicateId { id: decision.id });
        }
        tracing::debug!(id = %decision.id, signers = decision.required_signers.len(), "decision submitted");
        decisions.insert(decision.id, decision);
        Ok(())
    }

    async fn sign(
        &self,
        id: DecisionId,
        signer: &AgentId,
        at: Timestamp,
    ) -> Result<SignOutcome, DecideError> {
        let outcome = self.decide(id, |d| d.sign(signer, at))?;
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
        tracing::debug!(%id, %vetoer, reason, "decision vetoed");
        Ok(())
    }

    async fn get(&self, id: DecisionId) -> Result<Option<Decision>, BackendError> {
        Ok(self.lock().get(&id).cloned())
    }

    async fn list_pending(&self) -> Result<Vec<Decision>, BackendError> {
        Ok(self.sorted(|d| d.status == DecisionStatus::Pending))
    }

    async fn list(&self) -> Result<Vec<Decision>, BackendError> {
        Ok(self.sorted(|_| true))
    }
}

#[cfg(test)]
mod tests;
