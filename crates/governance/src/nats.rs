//! The NATS JetStream governance backend: every decision an encoded [`Decision`] under its own
//! key of one key-value bucket, every change a revision-checked write.

use std::fmt;

use agent_state::{
    AgentId, BackendError, Decision, DecisionId, DecisionStatus, SignError, SignOutcome, Timestamp,
    decode, encode,
};
use async_nats::jetstream::kv;
use async_trait::async_trait;
use nats_store::{Found, NatsError, NatsStore, backend_error};

use crate::{DecideError, Governance, SubmitError, check_fresh};

/// The part of the namespace the decisions bucket is named after: the bucket is
/// `strata_<namespace>_decisions` ([`NatsStore::name`]).
pub const DECISIONS_BUCKET: &str = "decisions";

/// How many times one call re-reads and retries after another writer changed the decision
/// between its read and its write. Every lost race is another writer's success, and a decision
/// changes at most once per required signer (and once more for a veto), so this is never reached
/// in practice; it only bounds a call against a store that something else rewrites forever.
const MAX_ATTEMPTS: usize = 1000;

/// A [`Governance`] backend on a NATS JetStream key-value bucket, shared by every process of a
/// team that opens the same namespace.
///
/// It behaves exactly like [`InMemoryGovernance`](crate::InMemoryGovernance): the same checks in
/// the same order, the same errors, the same results.
///
/// **Layout.** One bucket, `strata_<namespace>_decisions` (its stream is
/// `KV_strata_<namespace>_decisions`, file storage, history 1). Each decision is one key, its id
/// in hyphenated form (`DecisionId`'s `Display`), holding an [`agent_state::encode`]d
/// [`Decision`]. Decisions are never deleted.
///
/// **Concurrency.** Every change is a revision-checked write: `submit` writes only if the key
/// has no value yet (expected revision 0), `sign` and `veto` write only if the key is still at
/// the revision they read. A write that loses the race to another process is not applied; the
/// call reads the decision again, applies the rules again to what is now stored, and retries.
/// So two processes can never both submit the same id, both sign a decision into approval, or
/// both decide it (one approves, the other vetoes): exactly one of them wins, and the other gets
/// the answer the rules give on the winner's result. Any number of `NatsGovernance` values, in
/// any number of processes, may share a namespace.
///
/// **Durability.** `submit`, `sign` and `veto` return `Ok` only after JetStream acknowledged the
/// write, so the change survives a restart of this process and of the server; whether it also
/// survives a loss of power depends on the server's `sync_interval` (see the
/// [`nats_store`] crate's documentation on durability). A sign that changes nothing
/// ([`SignOutcome::AlreadySigned`]) reports what the server already acknowledged. If a write
/// fails without an answer (a timeout), the call returns a backend error and the change may or
/// may not have been stored.
///
/// **Records that cannot be decoded** (written by something else, or another schema version)
/// are never overwritten. `get`, `sign` and `veto` of such a decision fail with a backend error
/// naming the bucket and the key; `submit` of its id is [`SubmitError::DuplicateId`]; `list` and
/// `list_pending` **skip** it with a `tracing` warning naming it.
///
/// A decision must fit in one NATS message (the server's `max_payload`, 1 MiB by default, with
/// the record's envelope); a larger one is refused with a backend error and not stored.
///
/// ```no_run
/// use agent_state::{AgentId, Decision, DecisionId, DecisionStatus, Timestamp};
/// use governance::{Governance, NatsGovernance};
/// use nats_store::NatsStore;
///
/// # async fn example() -> Result<(), Box<dyn std::error::Error>> {
/// let store = NatsStore::connect("nats://127.0.0.1:4222", "run-1").await?;
/// let gov = NatsGovernance::open(&store).await?;
/// let a = AgentId::new("top-a");
/// let id = DecisionId::from_u128(7);
/// gov.submit(Decision::propose(id, a.clone(), serde_json::json!("ship it"), vec![a.clone()],
///     Timestamp(0))?).await?;
/// // When this returns, JetStream has the signature, and no other process signed in between
/// // without this call seeing it.
/// gov.sign(id, &a, Timestamp(1)).await?;
/// assert_eq!(gov.get(id).await?.map(|d| d.status), Some(DecisionStatus::Approved));
/// # Ok(())
/// # }
/// ```
#[derive(Clone)]
pub struct NatsGovernance {
    bucket: kv::Store,
    /// The bucket's name, for errors.
    name: String,
    /// The namespace, for `Debug`.
    namespace: String,
}

impl NatsGovernance {
    /// The decisions of `store`'s namespace; the bucket is created if it does not exist.
    ///
    /// Fails with [`NatsError::SchemaMismatch`] if a bucket of that name was made by another
    /// schema version (it is left as it is), or with a backend error if the server does not
    /// answer.
    pub async fn open(store: &NatsStore) -> Result<Self, NatsError> {
        let config = kv::Config {
            history: 1,
            storage: async_nats::jetstream::stream::StorageType::File,
            ..Default::default()
        };
        let bucket = store.bucket(DECISIONS_BUCKET, config).await?;
        Ok(Self {
            bucket,
            name: store.name(DECISIONS_BUCKET),
            namespace: store.namespace().to_owned(),
        })
    }

    /// Stores `decision` under its id if no decision has that id.
    async fn submit_now(&self, decision: &Decision) -> Result<(), SubmitError> {
        check_fresh(decision)?;
        let key = decision.id.to_string();
        let bytes = encode(decision).map_err(|e| {
            backend_error(format!("cannot encode decision {key} for bucket `{}`", self.name), e)
        })?;
        // Revision 0: only if the key has never had a value.
        let mut expected = 0;
        for _ in 0..MAX_ATTEMPTS {
            match self.bucket.update(&key, bytes.clone().into(), expected).await {
                Ok(_) => return Ok(()),
                Err(e) if e.kind() == kv::UpdateErrorKind::WrongLastRevision => {
                    // The key has a value, or a delete marker that something else wrote: only
                    // the marker may be written over, at its revision.
                    match self.entry(&key).await? {
                        Some(Found::Value(_)) => {
                            return Err(SubmitError::DuplicateId { id: decision.id });
                        }
                        Some(Found::Deleted(revision)) => expected = revision,
                        None => expected = 0,
                    }
                }
                Err(e) => return Err(self.write_error(&key, e).into()),
            }
        }
        Err(self.too_many_races(&key).into())
    }

    /// Applies `change` to what is stored of decision `id` and writes the result at the revision
    /// read, only if `change` succeeds and changed it; on a lost race, again from a new read.
    async fn decide<T>(
        &self,
        id: DecisionId,
        change: impl Fn(&mut Decision) -> Result<T, SignError>,
    ) -> Result<T, DecideError> {
        let key = id.to_string();
        for _ in 0..MAX_ATTEMPTS {
            let (stored, revision) = match self.entry(&key).await? {
                Some(Found::Value(entry)) => (self.decode(&key, &entry.value)?, entry.revision),
                Some(Found::Deleted(_)) | None => return Err(DecideError::UnknownDecision { id }),
            };
            let mut next = stored.clone();
            let out = change(&mut next)?;
            if next == stored {
                return Ok(out);
            }
            let bytes = encode(&next).map_err(|e| {
                backend_error(format!("cannot encode decision {key} for bucket `{}`", self.name), e)
            })?;
            match self.bucket.update(&key, bytes.into(), revision).await {
                Ok(_) => return Ok(out),
                Err(e) if e.kind() == kv::UpdateErrorKind::WrongLastRevision => {
                    tracing::debug!(%id, bucket = %self.name, "decision changed by another writer; retrying");
                }
                Err(e) => return Err(self.write_error(&key, e).into()),
            }
        }
        Err(self.too_many_races(&key).into())
    }

    /// The decisions that pass `keep`, by `created_at` then id; records that cannot be decoded
    /// are skipped with a warning.
    async fn sorted(
        &self,
        keep: impl Fn(&Decision) -> bool,
    ) -> Result<Vec<Decision>, BackendError> {
        let mut out = Vec::new();
        for key in self.keys().await? {
            let entry = match self.entry(&key).await? {
                Some(Found::Value(entry)) => entry,
                Some(Found::Deleted(_)) | None => continue,
            };
            match self.decode(&key, &entry.value) {
                Ok(decision) if keep(&decision) => out.push(decision),
                Ok(_) => {}
                Err(error) => tracing::warn!(
                    bucket = %self.name,
                    key = %key,
                    %error,
                    "skipping a decision record that cannot be decoded; getting that decision reports the error"
                ),
            }
        }
        out.sort_by_key(|d| (d.created_at, d.id));
        Ok(out)
    }

    /// Every key of the bucket (see [`nats_store::keys`]).
    async fn keys(&self) -> Result<Vec<String>, BackendError> {
        nats_store::keys(&self.bucket, &self.name).await
    }

    /// The latest entry of `key`.
    async fn entry(&self, key: &str) -> Result<Option<Found>, BackendError> {
        nats_store::entry(&self.bucket, &self.name, key).await
    }

    /// Decodes the record under `key` and checks that it is the decision `key` names.
    fn decode(&self, key: &str, bytes: &[u8]) -> Result<Decision, BackendError> {
        let cannot = |why: String| {
            BackendError::new(
                nats_store::BACKEND,
                format!("cannot decode key `{key}` of bucket `{}`: {why}", self.name),
            )
        };
        let decision: Decision = decode(bytes).map_err(|e| cannot(e.to_string()))?;
        if decision.id.to_string() != key {
            return Err(cannot(format!("it holds decision {}", decision.id)));
        }
        Ok(decision)
    }

    fn write_error(&self, key: &str, e: kv::UpdateError) -> BackendError {
        backend_error(
            format!(
                "cannot write key `{key}` of bucket `{}` (if the server did not answer, the change may or may not be stored)",
                self.name
            ),
            e,
        )
    }

    fn too_many_races(&self, key: &str) -> BackendError {
        nats_store::too_many_races(&self.name, key, MAX_ATTEMPTS)
    }
}

impl fmt::Debug for NatsGovernance {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("NatsGovernance")
            .field("namespace", &self.namespace)
            .field("bucket", &self.name)
            .finish_non_exhaustive()
    }
}

#[async_trait]
impl Governance for NatsGovernance {
    async fn submit(&self, decision: Decision) -> Result<(), SubmitError> {
        self.submit_now(&decision).await?;
        tracing::debug!(id = %decision.id, signers = decision.required_signers.len(), "decision submitted");
        Ok(())
    }

    async fn sign(
        &self,
        id: DecisionId,
        signer: &AgentId,
        at: Timestamp,
    ) -> Result<SignOutcome, DecideError> {
        let outcome = self.decide(id, |d| d.sign(signer, at)).await?;
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
        self.decide(id, |d| d.veto(vetoer, reason, at)).await?;
        tracing::debug!(%id, %vetoer, reason, "decision vetoed");
        Ok(())
    }

    async fn get(&self, id: DecisionId) -> Result<Option<Decision>, BackendError> {
        let key = id.to_string();
        match self.entry(&key).await? {
            Some(Found::Value(entry)) => self.decode(&key, &entry.value).map(Some),
            Some(Found::Deleted(_)) | None => Ok(None),
        }
    }

    async fn list_pending(&self) -> Result<Vec<Decision>, BackendError> {
        self.sorted(|d| d.status == DecisionStatus::Pending).await
    }

    async fn list(&self) -> Result<Vec<Decision>, BackendError> {
        self.sorted(|_| true).await
    }
}
