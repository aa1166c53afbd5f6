//! Schema versions for everything that is stored, and the envelope that carries them.

use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use thiserror::Error;

/// A type that is written to storage. Each has a kind name and a schema version; a backend
/// stores values inside a [`Stored`] envelope and refuses to read a version it does not know.
pub trait Versioned: Serialize + DeserializeOwned {
    /// A stable name for the kind of record, such as `message`.
    const KIND: &'static str;
    /// The schema version this build writes and reads.
    const VERSION: u32;
}

/// The envelope a stored value travels in: kind, schema version, value.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Stored<T> {
    /// The record kind ([`Versioned::KIND`]).
    pub kind: String,
    /// The schema version it was written with.
    pub schema_version: u32,
    /// The value.
    pub value: T,
}

impl<T: Versioned> Stored<T> {
    /// Wraps `value` with this build's kind and version.
    pub fn new(value: T) -> Self {
        Self { kind: T::KIND.to_owned(), schema_version: T::VERSION, value }
    }
}

/// A stored record that cannot be read back.
#[derive(Debug, Error)]
pub enum DecodeError {
    /// The bytes are not a valid envelope or value.
    #[error("stored {expected_kind} record is not valid JSON for this schema: {source}")]
    Malformed {
        /// The kind the caller expected.
        expected_kind: &'static str,
        /// What the JSON parser said.
        #[source]
        source: serde_json::Error,
    },
    /// The envelope holds another kind of record.
    #[error("stored record is a {found}, expected a {expected}")]
    WrongKind {
        /// What the envelope says.
        found: String,
        /// What the caller expected.
        expected: &'static str,
    },
    /// Written by a schema version this build does not read.
    #[error(
        "stored {kind} record has schema version {found}, this build reads version {supported}: \
         open it with a matching version of Strata"
    )]
    IncompatibleVersion {
        /// The record kind.
        kind: &'static str,
        /// The version in the envelope.
        found: u32,
        /// The version this build reads.
        supported: u32,
    },
}

/// A value that could not be encoded (a map with non-string keys, a float that is not finite).
#[derive(Debug, Error)]
#[error("cannot encode {kind} record: {source}")]
pub struct EncodeError {
    /// The record kind.
    pub kind: &'static str,
    /// What the JSON writer said.
    #[source]
    pub source: serde_json::Error,
}

/// Encodes `value` in its [`Stored`] envelope as JSON bytes.
///
/// If this returns `Ok`, [`decode`] reads the bytes back; a value that could not be read back,
/// such as a required float that is NaN or infinite, is an [`EncodeError`].
pub fn encode<T: Versioned>(value: &T) -> Result<Vec<u8>, EncodeError> {
    #[derive(Serialize)]
    struct Ref<'a, T> {
        kind: &'static str,
        schema_version: u32,
        value: &'a T,
    }
    let bytes = serde_json::to_vec(&Ref { kind: T::KIND, schema_version: T::VERSION, value })
        .map_err(|source| EncodeError { kind: T::KIND, source })?;
    // serde_json writes a non-finite float as `null`, which `decode` then refuses. Read the
    // bytes back now, so a record that could not be decoded is refused instead of stored.
    serde_json::from_slice::<Stored<T>>(&bytes)
        .map_err(|source| EncodeError { kind: T::KIND, source })?;
    Ok(bytes)
}

/// Decodes bytes written by [`encode`], checking kind and schema version.
pub fn decode<T: Versioned>(bytes: &[u8]) -> Result<T, DecodeError> {
    #[derive(Deserialize)]
    struct Header {
        kind: String,
        schema_version: u32,
    }
    let header: Header = serde_json::from_slice(bytes)
        .map_err(|source| DecodeError::Malformed { expected_kind: T::KIND, source })?;
    if header.kind != T::KIND {
        return Err(DecodeError::WrongKind { found: header.kind, expected: T::KIND });
    }
    if header.schema_version != T::VERSION {
        return Err(DecodeError::IncompatibleVersion {
            kind: T::KIND,
            found: header.schema_version,
            supported: T::VERSION,
        });
    }
    let stored: Stored<T> = serde_json::from_slice(bytes)
        .map_err(|source| DecodeError::Malformed { expected_kind: T::KIND, source })?;
    Ok(stored.value)
}
