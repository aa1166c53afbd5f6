//! Large contents stored once: strings in tool arguments above [`BLOB_THRESHOLD`] are kept in
//! the [`StateStore`] under their SHA-256 and replaced by a small reference, so a 50 MB
//! `write_file` content travels through messages, decisions, agents' saved state and the
//! audit log as a few dozen bytes, and is written to the store once.
//!
//! A reference is the JSON object `{"$blob": "sha256:<64 hex digits>", "bytes": N}`.
//! [`externalize`] replaces large strings by references (storing their content);
//! [`resolve`] puts the contents back, right before a tool runs. A reference whose content is
//! not in the store is a typed error, never an empty string.
//!
//! ```
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! use agent_core::{InMemoryStateStore, blob};
//! use serde_json::json;
//!
//! let store = InMemoryStateStore::new();
//! let big = "x".repeat(blob::BLOB_THRESHOLD + 1);
//! let mut args = json!({ "path": "big.txt", "content": big });
//! blob::externalize(&mut args, &store, blob::BLOB_THRESHOLD).await?;
//! assert!(args["content"]["$blob"].as_str().unwrap().starts_with("sha256:"));
//! let back = blob::resolve(&args, &store).await?;
//! assert_eq!(back["content"].as_str().unwrap().len(), blob::BLOB_THRESHOLD + 1);
//! # Ok(())
//! # }
//! ```

use agent_state::BackendError;
use serde_json::{Map, Value};

use crate::state::StateStore;

/// Strings longer than this (64 KiB) in tool arguments are stored once and referenced.
pub const BLOB_THRESHOLD: usize = 64 * 1024;

/// The key of a reference object.
pub const BLOB_KEY: &str = "$blob";

/// Why a reference could not be resolved or a content not stored.
#[derive(Debug, thiserror::Error)]
pub enum BlobError {
    /// The store failed.
    #[error(transparent)]
    Store(#[from] BackendError),
    /// A reference names a content the store does not hold.
    #[error(
        "content `{hash}` ({bytes} bytes) referenced by the tool arguments is not in the run's store; \
         the run directory is incomplete: re-run the plan"
    )]
    Missing {
        /// The reference's hash.
        hash: String,
        /// Its announced size.
        bytes: u64,
    },
    /// A stored content is not what its reference says.
    #[error("content `{hash}` in the run's store is damaged (its bytes do not match the hash)")]
    Damaged {
        /// The reference's hash.
        hash: String,
    },
}

/// The reference of `content`: `sha256:<hex>`.
pub fn hash_of(content: &[u8]) -> String {
    format!("sha256:{}", agent_state::sha256_hex(content))
}

/// Whether `value` is a reference object.
pub fn is_ref(value: &Value) -> bool {
    reference(value).is_some()
}

fn reference(value: &Value) -> Option<(&str, u64)> {
    let object = value.as_object()?;
    if object.len() != 2 {
        return None;
    }
    let hash = object.get(BLOB_KEY)?.as_str()?;
    let bytes = object.get("bytes")?.as_u64()?;
    hash.starts_with("sha256:").then_some((hash, bytes))
}

/// Replaces every string longer than `threshold` in `value` (at any depth) by a reference,
/// storing its content in `store` first. Storing a content that is already there stores
/// nothing new.
pub async fn externalize(
    value: &mut Value,
    store: &dyn StateStore,
    threshold: usize,
) -> Result<(), BlobError> {
    let mut large: Vec<&mut Value> = Vec::new();
    collect_large(value, threshold, &mut large);
    for slot in large {
        let Value::String(text) = slot else { continue };
        let hash = hash_of(text.as_bytes());
        store.put_blob(&hash, text.as_bytes()).await?;
        let mut object = Map::new();
        object.insert(BLOB_KEY.to_owned(), Value::String(hash));
        object.insert("bytes".to_owned(), Value::from(text.len() as u64));
        *slot = Value::Object(object);
    }
    Ok(())
}

fn collect_large<'a>(value: &'a mut Value, threshold: usize, out: &mut Vec<&'a mut Value>) {
    match value {
        Value::String(text) if text.len() > threshold => out.push(value),
        Value::Array(items) => items.iter_mut().for_each(|v| collect_large(v, threshold, out)),
        Value::Object(map) => map.values_mut().for_each(|v| collect_large(v, threshold, out)),
        _ => {}
    }
}

/// `value` with every reference replaced by its content from `store`. A value without
/// references is returned as it is (one clone).
pub async fn resolve(value: &Value, store: &dyn StateStore) -> Result<Value, BlobError> {
    let mut resolved = value.clone();
    let mut refs: Vec<&mut Value> = Vec::new();
    collect_refs(&mut resolved, &mut refs);
    for slot in refs {
        let Some((hash, bytes)) = reference(slot).map(|(h, b)| (h.to_owned(), b)) else {
            continue;
        };
        let content = store
            .blob(&hash)
            .await?
            .ok_or_else(|| BlobError::Missing { hash: hash.clone(), bytes })?;
        if hash_of(&content) != hash {
            return Err(BlobError::Damaged { hash });
        }
        let text = String::from_utf8(content).map_err(|_| BlobError::Damaged { hash })?;
        *slot = Value::String(text);
    }
    Ok(resolved)
}

fn collect_refs<'a>(value: &'a mut Value, out: &mut Vec<&'a mut Value>) {
    if is_ref(value) {
        out.push(value);
        return;
    }
    match value {
        Value::Array(items) => items.iter_mut().for_each(|v| collect_refs(v, out)),
        Value::Object(map) => map.values_mut().for_each(|v| collect_refs(v, out)),
        _ => {}
    }
}
