//! Leases in a key-value bucket whose entries expire: who holds what (an agent, on a worker),
//! for how long, taken and renewed only by revision-checked writes.
//!
//! A lease is one key whose value names its holder. The bucket's `max_age` is the lease's time
//! to live: the server removes an entry that long after its last write, so a holder that stops
//! renewing (killed, cut off by a partition) loses the lease without anyone deleting it, and
//! another can then [`acquire`](Leases::acquire) it. Every change is checked against the
//! revision the writer read, so two holders racing for one lease never both get it, and a
//! holder whose lease was taken over cannot renew it.
//!
//! The holder's own view is conservative: [`Lease::is_valid`] counts the time to live from the
//! moment *before* the last successful renewal was sent, so a holder that can no longer reach
//! the server stops acting on the lease no later than the server lets it expire.

use std::time::Duration;

use agent_state::BackendError;
use async_nats::jetstream::kv;
use tokio::time::Instant;

use crate::{Found, NatsError, NatsStore, backend_error, entry};

/// The leases of one kind (one bucket) in a namespace, all with the same time to live.
#[derive(Debug, Clone)]
pub struct Leases {
    bucket: kv::Store,
    name: String,
    ttl: Duration,
}

/// A lease held by this process: renew it within its time to live, or stop acting on it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Lease {
    key: String,
    holder: String,
    revision: u64,
    renewed_at: Instant,
    ttl: Duration,
}

impl Lease {
    /// The key leased.
    pub fn key(&self) -> &str {
        &self.key
    }

    /// Who holds it.
    pub fn holder(&self) -> &str {
        &self.holder
    }

    /// Whether the holder may still act on it: less than the time to live has passed since the
    /// last successful renewal was sent.
    pub fn is_valid(&self) -> bool {
        self.renewed_at.elapsed() < self.ttl
    }

    /// When [`is_valid`](Self::is_valid) turns false unless the lease is renewed before.
    pub fn valid_until(&self) -> Instant {
        self.renewed_at + self.ttl
    }
}

impl Leases {
    /// The bucket of leases for `part` in `store`'s namespace, whose entries live `ttl` after
    /// their last write; created if it does not exist. A bucket made with another time to live
    /// is refused (changing it would shorten or lengthen leases others hold).
    pub async fn open(store: &NatsStore, part: &str, ttl: Duration) -> Result<Self, NatsError> {
        let name = store.name(part);
        if ttl < Duration::from_millis(100) {
            return Err(BackendError::new(
                crate::BACKEND,
                format!(
                    "leases `{name}`: a time to live of {ttl:?} is too short; use 100 ms or more"
                ),
            )
            .into());
        }
        let config = kv::Config {
            history: 1,
            max_age: ttl,
            storage: async_nats::jetstream::stream::StorageType::File,
            ..Default::default()
        };
        let bucket = store.bucket(part, config).await?;
        let stored = bucket.stream.cached_info().config.max_age;
        if stored != ttl {
            return Err(BackendError::new(
                crate::BACKEND,
                format!(
                    "leases `{name}` exist with a time to live of {stored:?}, not {ttl:?}: open them with the same, or use another namespace"
                ),
            )
            .into());
        }
        Ok(Self { bucket, name, ttl })
    }

    /// The time to live of every lease here.
    pub fn ttl(&self) -> Duration {
        self.ttl
    }

    /// Takes the lease on `key` for `holder` if no one holds it (or its holder let it expire):
    /// `None` when someone else holds it, or won the race for it.
    pub async fn acquire(&self, key: &str, holder: &str) -> Result<Option<Lease>, BackendError> {
        let expected = match entry(&self.bucket, &self.name, key).await? {
            Some(Found::Value(_)) => return Ok(None),
            Some(Found::Deleted(revision)) => revision,
            None => 0,
        };
        let sent = Instant::now();
        match self.bucket.update(key, holder.to_owned().into(), expected).await {
            Ok(revision) => Ok(Some(Lease {
                key: key.to_owned(),
                holder: holder.to_owned(),
                revision,
                renewed_at: sent,
                ttl: self.ttl,
            })),
            Err(e) if e.kind() == kv::UpdateErrorKind::WrongLastRevision => Ok(None),
            Err(e) => Err(self.write_error(key, e)),
        }
    }

    /// Renews `lease` for another time to live. `false` when it is lost: it expired and someone
    /// else took it, or it expired and is free (take it again with [`acquire`](Self::acquire)).
    /// A lost lease must not be acted on.
    pub async fn renew(&self, lease: &mut Lease) -> Result<bool, BackendError> {
        let sent = Instant::now();
        match self.bucket.update(&lease.key, lease.holder.clone().into(), lease.revision).await {
            Ok(revision) => {
                lease.revision = revision;
                lease.renewed_at = sent;
                Ok(true)
            }
            Err(e) if e.kind() == kv::UpdateErrorKind::WrongLastRevision => {
                // Seen as lost at once, whatever the clock says.
                lease.renewed_at = sent.checked_sub(lease.ttl).unwrap_or(sent);
                Ok(false)
            }
            Err(e) => Err(self.write_error(&lease.key, e)),
        }
    }

    /// Gives `lease` up, so another can take it at once. A lease that was already lost is left
    /// to its new holder.
    pub async fn release(&self, lease: Lease) -> Result<(), BackendError> {
        match self.bucket.delete_expect_revision(&lease.key, Some(lease.revision)).await {
            Ok(()) => Ok(()),
            Err(e) if e.kind() == kv::DeleteErrorKind::WrongLastRevision => Ok(()),
            Err(e) => Err(backend_error(
                format!("cannot release the lease `{}` of `{}`", lease.key, self.name),
                e,
            )),
        }
    }

    /// The keys with an entry now: every lease held, and those released less than a time to
    /// live ago (their delete markers). One request, whatever the number of leases.
    pub async fn keys(&self) -> Result<std::collections::BTreeSet<String>, BackendError> {
        Ok(crate::keys(&self.bucket, &self.name).await?.into_iter().collect())
    }

    /// Who holds the lease on `key` now, as the server says.
    pub async fn holder(&self, key: &str) -> Result<Option<String>, BackendError> {
        Ok(match entry(&self.bucket, &self.name, key).await? {
            Some(Found::Value(entry)) => Some(String::from_utf8_lossy(&entry.value).into_owned()),
            Some(Found::Deleted(_)) | None => None,
        })
    }

    fn write_error(&self, key: &str, e: kv::UpdateError) -> BackendError {
        backend_error(
            format!(
                "cannot write the lease `{key}` of `{}` (if the server did not answer, it may or may not be held)",
                self.name
            ),
            e,
        )
    }
}
