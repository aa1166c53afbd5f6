//! Reading a key-value bucket the way every NATS backend does on Debian's 2.9 server: its keys
//! from the per-subject counts of its stream (`keys()` hangs there), and an entry with its
//! delete marker told apart; and the error of a write that kept losing its race.

use agent_state::BackendError;
use async_nats::jetstream::kv;
use futures_util::StreamExt as _;

use crate::{BACKEND, backend_error};

/// What a bucket holds under a key.
#[derive(Debug)]
pub enum Found {
    /// A value, with its revision.
    Value(kv::Entry),
    /// A delete marker (written by something other than the backend) at this revision.
    Deleted(u64),
}

/// Every key of `bucket` (named `name` in errors), deleted ones included (their latest entry
/// is a delete marker: [`entry`] says so), in no particular order.
pub async fn keys(bucket: &kv::Store, name: &str) -> Result<Vec<String>, BackendError> {
    let prefix = format!("$KV.{name}.");
    let cannot = |e| backend_error(format!("cannot list the keys of bucket `{name}`"), e);
    let mut subjects =
        bucket.stream.info_with_subjects(format!("{prefix}>")).await.map_err(cannot)?;
    let mut keys = Vec::new();
    while let Some(subject) = subjects.next().await {
        let (subject, _count) = subject.map_err(cannot)?;
        if let Some(key) = subject.strip_prefix(&prefix) {
            keys.push(key.to_owned());
        }
    }
    Ok(keys)
}

/// The latest entry of `key` in `bucket` (named `name` in errors).
pub async fn entry(
    bucket: &kv::Store,
    name: &str,
    key: &str,
) -> Result<Option<Found>, BackendError> {
    let entry = bucket
        .entry(key)
        .await
        .map_err(|e| backend_error(format!("cannot read key `{key}` of bucket `{name}`"), e))?;
    Ok(entry.map(|entry| match entry.operation {
        kv::Operation::Put => Found::Value(entry),
        kv::Operation::Delete | kv::Operation::Purge => Found::Deleted(entry.revision),
    }))
}

/// The error of a revision-checked write to `key` of bucket `name` that lost its race
/// `attempts` times in a row (nothing was written).
pub fn too_many_races(name: &str, key: &str, attempts: usize) -> BackendError {
    BackendError::new(
        BACKEND,
        format!(
            "key `{key}` of bucket `{name}` changed under {attempts} writes in a row; nothing was written"
        ),
    )
}

/// `text` as one subject token or key: ASCII letters, digits, `-` and `_` as they are, any
/// other byte as `=XX` (uppercase hex), so two texts never share a token.
pub fn escape_token(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for b in text.bytes() {
        if b.is_ascii_alphanumeric() || b == b'-' || b == b'_' {
            out.push(char::from(b));
        } else {
            out.push_str(&format!("={b:02X}"));
        }
    }
    out
}
