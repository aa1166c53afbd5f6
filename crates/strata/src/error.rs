//! The engine's error: what went wrong, said for the user, with its causes, and whether the
//! user's input is to blame ([`ErrorKind::BadInput`]: fix the input and try again; nothing was
//! written) or something else failed ([`ErrorKind::Failed`]: storage, a server, the runtime).
//!
//! Errors are built where the failure is seen, with what the user needs in the message, and
//! carry their cause ([`std::error::Error::source`]), so that `{:#}` through an error reporter
//! prints the whole chain: `cannot open the run: the database is locked`.

use std::error::Error as StdError;
use std::fmt;

/// A boxed cause.
pub type BoxError = Box<dyn StdError + Send + Sync + 'static>;

/// What the engine's functions return.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Whose fault an [`Error`] is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum ErrorKind {
    /// The user's input is wrong (a team or plan file, a flag, a run that does not exist):
    /// the message says what to fix; nothing was written.
    BadInput,
    /// Anything else: storage, a server, the runtime.
    Failed,
}

/// An engine error: a message for the user, its kind, and its cause.
#[derive(Debug)]
pub struct Error {
    kind: ErrorKind,
    /// What failed; `None`: the cause says it (a cause marked with a kind).
    message: Option<String>,
    source: Option<BoxError>,
}

impl Error {
    /// A failure with `message` and no cause.
    pub fn failed(message: impl Into<String>) -> Self {
        Self { kind: ErrorKind::Failed, message: Some(message.into()), source: None }
    }

    /// Bad input, with `message` (what to fix) and no cause.
    pub fn bad_input(message: impl Into<String>) -> Self {
        Self { kind: ErrorKind::BadInput, message: Some(message.into()), source: None }
    }

    /// `cause`, marked as bad input (an engine error keeps its message and causes).
    pub fn bad_input_from(cause: impl Into<BoxError>) -> Self {
        Self::of_kind(ErrorKind::BadInput, cause.into())
    }

    /// `cause`, marked as a failure (an engine error keeps its message and causes).
    pub fn failed_from(cause: impl Into<BoxError>) -> Self {
        Self::of_kind(ErrorKind::Failed, cause.into())
    }

    fn of_kind(kind: ErrorKind, cause: BoxError) -> Self {
        match cause.downcast::<Error>() {
            Ok(error) => Self { kind, ..*error },
            Err(cause) => Self { kind, message: None, source: Some(cause) },
        }
    }

    /// Whose fault it is.
    pub fn kind(&self) -> ErrorKind {
        self.kind
    }

    /// Whether the user's input is to blame.
    pub fn is_bad_input(&self) -> bool {
        self.kind == ErrorKind::BadInput
    }

    /// This error as the cause of a new one saying `message`, of the same kind.
    #[must_use]
    pub fn context(self, message: impl Into<String>) -> Self {
        Self { kind: self.kind, message: Some(message.into()), source: Some(Box::new(self)) }
    }

    /// Whether any error in the chain is an I/O error of a full disk (`ENOSPC`), or says so.
    pub fn is_disk_full(&self) -> bool {
        let mut cause: Option<&(dyn StdError + 'static)> = Some(self);
        while let Some(error) = cause {
            let full = error.downcast_ref::<std::io::Error>().is_some_and(|e| {
                e.kind() == std::io::ErrorKind::StorageFull || e.raw_os_error() == Some(28)
            }) || error.to_string().contains("No space left on device");
            if full {
                return true;
            }
            cause = error.source();
        }
        false
    }

    /// The message and every cause, joined by `: ` (as an error reporter's `{:#}` prints it).
    pub fn chain_text(&self) -> String {
        let mut text = self.to_string();
        let mut cause = StdError::source(self);
        while let Some(error) = cause {
            text.push_str(": ");
            text.push_str(&error.to_string());
            cause = error.source();
        }
        text
    }
}

impl fmt::Display for Error {
    /// The message; `{:#}`, the message and every cause, as [`Error::chain_text`].
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if f.alternate() {
            return f.write_str(&self.chain_text());
        }
        match (&self.message, &self.source) {
            (Some(message), _) => f.write_str(message),
            (None, Some(source)) => fmt::Display::fmt(source, f),
            (None, None) => f.write_str("unknown error"),
        }
    }
}

impl StdError for Error {
    fn source(&self) -> Option<&(dyn StdError + 'static)> {
        match (&self.message, &self.source) {
            (Some(_), Some(source)) => Some(source.as_ref()),
            // The cause is this error's own text: its causes come next.
            (None, Some(source)) => source.source(),
            (_, None) => None,
        }
    }
}

macro_rules! failed_from {
    ($($ty:ty),* $(,)?) => {$(
        impl From<$ty> for Error {
            fn from(e: $ty) -> Self {
                Self::failed_from(e)
            }
        }
    )*};
}

failed_from!(
    std::io::Error,
    serde_json::Error,
    run_store::StoreError,
    agent_state::BackendError,
    agent_pool::NatsStoresError,
);

/// Adds a message to the error of a `Result` (or to a `None`): the error becomes its cause, and
/// keeps its kind if it is an engine [`Error`] ([`ErrorKind::Failed`] otherwise).
pub trait Context<T> {
    /// With `message`.
    fn context(self, message: impl Into<String>) -> Result<T>;
    /// With the message `message()` makes, made only on error.
    fn with_context<M: Into<String>>(self, message: impl FnOnce() -> M) -> Result<T>;
}

impl<T, E: Into<BoxError>> Context<T> for std::result::Result<T, E> {
    fn context(self, message: impl Into<String>) -> Result<T> {
        self.map_err(|e| wrap(e.into(), message.into()))
    }

    fn with_context<M: Into<String>>(self, message: impl FnOnce() -> M) -> Result<T> {
        self.map_err(|e| wrap(e.into(), message().into()))
    }
}

impl<T> Context<T> for Option<T> {
    fn context(self, message: impl Into<String>) -> Result<T> {
        self.ok_or_else(|| Error::failed(message))
    }

    fn with_context<M: Into<String>>(self, message: impl FnOnce() -> M) -> Result<T> {
        self.ok_or_else(|| Error::failed(message()))
    }
}

fn wrap(cause: BoxError, message: String) -> Error {
    let kind = cause.downcast_ref::<Error>().map_or(ErrorKind::Failed, Error::kind);
    Error { kind, message: Some(message), source: Some(cause) }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, reason = "tests")]

    use super::*;

    #[test]
    fn context_keeps_the_kind_and_the_chain() {
        let inner: Result<()> = Err(Error::bad_input("the team file has no agents"));
        let outer = inner.context("cannot read team.toml").unwrap_err();
        assert!(outer.is_bad_input());
        assert_eq!(outer.chain_text(), "cannot read team.toml: the team file has no agents");
        assert_eq!(format!("{outer:#}"), outer.chain_text());
        assert_eq!(outer.to_string(), "cannot read team.toml");
    }

    #[test]
    fn a_foreign_cause_is_a_failure_until_marked() {
        let io = std::io::Error::new(std::io::ErrorKind::NotFound, "gone");
        let error = Err::<(), _>(io).context("cannot open run.json").unwrap_err();
        assert_eq!(error.kind(), ErrorKind::Failed);
        let marked = Error::bad_input_from(error);
        assert!(marked.is_bad_input());
        assert_eq!(marked.chain_text(), "cannot open run.json: gone");
    }

    #[test]
    fn a_marked_foreign_error_reads_as_itself() {
        let io = std::io::Error::other("the port is in use");
        let error = Error::bad_input_from(io);
        assert_eq!(error.to_string(), "the port is in use");
        assert!(StdError::source(&error).is_none());
    }

    #[test]
    fn a_full_disk_is_found_anywhere_in_the_chain() {
        let io = std::io::Error::from_raw_os_error(28);
        let error = Err::<(), _>(io).context("cannot write run.json").unwrap_err();
        assert!(error.context("cannot stop the run").is_disk_full());
        assert!(!Error::failed("the server went away").is_disk_full());
    }
}
