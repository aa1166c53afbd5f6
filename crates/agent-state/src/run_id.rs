//! [`RunId`]: the one name of a run, with the one rule every backend accepts.
//!
//! A run id names the run's directory, the capsule scratch directory of an executor run, and on
//! NATS the run's streams (`strata_<run>_<part>`), buckets and subjects (`strata.<run>.<part>`).
//! The rule is what all of them accept without two runs meeting:
//!
//! - 1 to [`MAX_RUN_ID_LEN`] bytes;
//! - ASCII letters, digits and `-` only.
//!
//! No `.`: it separates the tokens of a NATS subject and is not allowed in a stream's name; and
//! on a file system `.` and `..` are not directories of their own. No `_`: the stream of run
//! `a_b`'s part `c` and of run `a`'s part `b_c` would both be `strata_a_b_c`. Letters keep their
//! case.

use std::borrow::Borrow;
use std::fmt;
use std::ops::Deref;
use std::str::FromStr;
use std::sync::Arc;

use serde::{Deserialize, Serialize};
use thiserror::Error;

/// The longest run id, in bytes.
pub const MAX_RUN_ID_LEN: usize = 64;

/// The rule, in words, as every refusal states it.
pub const RUN_ID_RULE: &str = "use 1 to 64 ASCII letters, digits or `-` (a run id names the run's directory and its NATS streams and subjects)";

/// Text that cannot be a run id; the message names the rule.
#[derive(Clone, Debug, PartialEq, Eq, Error)]
pub enum RunIdError {
    /// Empty.
    #[error("a run id cannot be empty: {RUN_ID_RULE}")]
    Empty,
    /// Longer than [`MAX_RUN_ID_LEN`] bytes.
    #[error("the run id `{start}…` is {len} bytes long, over {MAX_RUN_ID_LEN}: {RUN_ID_RULE}")]
    TooLong {
        /// Its first characters, escaped.
        start: String,
        /// Its length in bytes.
        len: usize,
    },
    /// Holds a character outside the rule.
    #[error("`{id}` cannot be a run id: it holds {found:?}; {RUN_ID_RULE}")]
    BadCharacter {
        /// The text, escaped.
        id: String,
        /// The first character outside the rule.
        found: char,
    },
}

/// The id of a run: 1 to [`MAX_RUN_ID_LEN`] ASCII letters, digits or `-` (see the module).
///
/// Only [`RunId::parse`] (and what calls it: [`FromStr`], [`TryFrom`], deserialisation) makes
/// one, so a `RunId` in hand is valid for every backend. Cheap to clone.
#[derive(Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub struct RunId(Arc<str>);

impl RunId {
    /// `text` as a run id, or why it cannot be one.
    pub fn parse(text: &str) -> Result<Self, RunIdError> {
        check_run_id(text)?;
        Ok(Self(text.into()))
    }

    /// The run id of `n`'s 32 lowercase hex digits (such as a random number's): valid by
    /// construction.
    pub fn hex(n: u128) -> Self {
        Self(format!("{n:032x}").into())
    }

    /// The id as a string slice.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

/// Checks `text` against the run id rule without making a [`RunId`].
pub fn check_run_id(text: &str) -> Result<(), RunIdError> {
    if text.is_empty() {
        return Err(RunIdError::Empty);
    }
    if text.len() > MAX_RUN_ID_LEN {
        let start: String = text.chars().take(MAX_RUN_ID_LEN).collect();
        return Err(RunIdError::TooLong {
            start: start.escape_debug().to_string(),
            len: text.len(),
        });
    }
    match text.chars().find(|c| !(c.is_ascii_alphanumeric() || *c == '-')) {
        Some(found) => Err(RunIdError::BadCharacter { id: text.escape_debug().to_string(), found }),
        None => Ok(()),
    }
}

impl FromStr for RunId {
    type Err = RunIdError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Self::parse(s)
    }
}

impl TryFrom<&str> for RunId {
    type Error = RunIdError;

    fn try_from(value: &str) -> Result<Self, Self::Error> {
        Self::parse(value)
    }
}

impl TryFrom<String> for RunId {
    type Error = RunIdError;

    fn try_from(value: String) -> Result<Self, Self::Error> {
        Self::parse(&value)
    }
}

impl From<RunId> for String {
    fn from(id: RunId) -> Self {
        id.0.to_string()
    }
}

impl Deref for RunId {
    type Target = str;

    fn deref(&self) -> &str {
        &self.0
    }
}

impl AsRef<str> for RunId {
    fn as_ref(&self) -> &str {
        &self.0
    }
}

impl AsRef<std::path::Path> for RunId {
    fn as_ref(&self) -> &std::path::Path {
        std::path::Path::new(&*self.0)
    }
}

impl Borrow<str> for RunId {
    fn borrow(&self) -> &str {
        &self.0
    }
}

impl PartialEq<str> for RunId {
    fn eq(&self, other: &str) -> bool {
        &*self.0 == other
    }
}

impl PartialEq<&str> for RunId {
    fn eq(&self, other: &&str) -> bool {
        &*self.0 == *other
    }
}

impl fmt::Debug for RunId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(&*self.0, f)
    }
}

impl fmt::Display for RunId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}
