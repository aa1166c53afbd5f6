//! The error every backend uses when its storage or transport fails.

use thiserror::Error;

/// A backend could not store or load something (disk, database, network).
///
/// Distinct from the rule errors: a rule error means the request was wrong; this means the
/// backend failed and the caller may retry or report it.
#[derive(Debug, Error)]
#[error("{backend} backend: {message}")]
pub struct BackendError {
    /// Which backend, such as `sled` or `nats`.
    pub backend: &'static str,
    /// What failed and, where known, what to do.
    pub message: String,
    /// The underlying error, if any.
    #[source]
    pub source: Option<Box<dyn std::error::Error + Send + Sync>>,
}

impl BackendError {
    /// A backend error with a message and no source.
    pub fn new(backend: &'static str, message: impl Into<String>) -> Self {
        Self { backend, message: message.into(), source: None }
    }

    /// A backend error wrapping `source`.
    pub fn with_source(
        backend: &'static str,
        message: impl Into<String>,
        source: impl std::error::Error + Send + Sync + 'static,
    ) -> Self {
        Self { backend, message: message.into(), source: Some(Box::new(source)) }
    }
}
