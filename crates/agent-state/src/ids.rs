//! Identifiers and time: agent ids, message and decision ids, millisecond timestamps.
//!
//! Nothing here generates an id or reads a clock: callers pass them in.
//!
//! A human who signs governance decisions is named `human:<name>` ([`AgentId::human`]): agent
//! ids hold only ASCII letters, digits, `-` and `_`, so such an id can never be an agent's.

use std::cmp::Ordering;
use std::fmt;
use std::hash::{Hash, Hasher};
use std::sync::Arc;

use serde::{Deserialize, Serialize};
use thiserror::Error;
use uuid::Uuid;

/// What a human signer's id starts with: `human:alice`.
pub const HUMAN_PREFIX: &str = "human:";

/// The longest name of a human signer, in bytes (ASCII).
pub const MAX_HUMAN_NAME_LEN: usize = 64;

/// A name that cannot name a human signer.
#[derive(Clone, Debug, PartialEq, Eq, Error)]
pub enum HumanNameError {
    /// The name is empty.
    #[error("a human's name must not be empty")]
    Empty,
    /// The name is longer than [`MAX_HUMAN_NAME_LEN`].
    #[error("the human's name `{name}` is longer than {max} characters", max = MAX_HUMAN_NAME_LEN)]
    TooLong {
        /// The name, cut to the limit.
        name: String,
    },
    /// The name holds something other than ASCII letters, digits, `-` and `_`.
    #[error(
        "`{name}` cannot name a human: use ASCII letters, digits, `-` and `_` (like an agent id)"
    )]
    InvalidCharacter {
        /// The name, with control characters escaped.
        name: String,
    },
}

/// Checks that `name` can name a human signer: 1 to [`MAX_HUMAN_NAME_LEN`] ASCII letters,
/// digits, `-` and `_` (the characters of an agent id).
pub fn check_human_name(name: &str) -> Result<(), HumanNameError> {
    if name.is_empty() {
        return Err(HumanNameError::Empty);
    }
    if name.len() > MAX_HUMAN_NAME_LEN {
        let cut: String = name.chars().take(MAX_HUMAN_NAME_LEN).collect();
        return Err(HumanNameError::TooLong { name: cut.escape_debug().to_string() });
    }
    if !name.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_') {
        return Err(HumanNameError::InvalidCharacter { name: name.escape_debug().to_string() });
    }
    Ok(())
}

/// The id of one agent, such as `top-1` or `bottom-backend-2`.
///
/// Cheap to clone (a shared string). The names `system` and `broadcast` are reserved for
/// [`Address`](crate::Address) and are rejected by [`AgentConfig::validate`](crate::AgentConfig::validate).
///
/// Compared, ordered and hashed as its string is. Two clones of one id compare equal without
/// reading their bytes, and ordering reads eight bytes at a time: the maps of a team keyed by
/// id (its pool, its boards, its inboxes) compare ids on every look-up.
#[derive(Clone, Eq, Serialize, Deserialize)]
#[serde(transparent)]
pub struct AgentId(Arc<str>);

impl AgentId {
    /// Wraps a string as an agent id. Validation happens in [`AgentConfig::validate`](crate::AgentConfig::validate).
    pub fn new(id: impl Into<Arc<str>>) -> Self {
        Self(id.into())
    }

    /// The id as a string slice.
    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// The id of the human signer `name`: `human:<name>`. The name is checked with
    /// [`check_human_name`].
    pub fn human(name: &str) -> Result<Self, HumanNameError> {
        check_human_name(name)?;
        Ok(Self::new(format!("{HUMAN_PREFIX}{name}")))
    }

    /// Whether this id names a human signer (`human:<name>` with a valid name).
    pub fn is_human(&self) -> bool {
        self.human_name().is_some()
    }

    /// The human's name, when this id names a human signer.
    pub fn human_name(&self) -> Option<&str> {
        self.0.strip_prefix(HUMAN_PREFIX).filter(|name| check_human_name(name).is_ok())
    }
}

impl PartialEq for AgentId {
    #[inline]
    fn eq(&self, other: &Self) -> bool {
        Arc::ptr_eq(&self.0, &other.0) || self.0 == other.0
    }
}

impl Hash for AgentId {
    #[inline]
    fn hash<H: Hasher>(&self, state: &mut H) {
        // As the string hashes, so that it agrees with `eq`.
        self.0.hash(state);
    }
}

impl PartialOrd for AgentId {
    #[inline]
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for AgentId {
    #[inline]
    fn cmp(&self, other: &Self) -> Ordering {
        if Arc::ptr_eq(&self.0, &other.0) {
            return Ordering::Equal;
        }
        cmp_bytes(self.0.as_bytes(), other.0.as_bytes())
    }
}

/// The order of `a` and `b` as byte strings (the order of `str`: the first differing byte,
/// else the shorter first), read eight bytes at a time: as fast as a call of `memcmp` costs
/// for the short strings ids are.
#[inline]
fn cmp_bytes(mut a: &[u8], mut b: &[u8]) -> Ordering {
    while let (Some((x, rest_a)), Some((y, rest_b))) =
        (a.split_first_chunk::<8>(), b.split_first_chunk::<8>())
    {
        if x != y {
            // Big-endian, the first byte is the most significant: integer order is byte order.
            return u64::from_be_bytes(*x).cmp(&u64::from_be_bytes(*y));
        }
        (a, b) = (rest_a, rest_b);
    }
    for (x, y) in a.iter().zip(b) {
        if x != y {
            return x.cmp(y);
        }
    }
    a.len().cmp(&b.len())
}

impl fmt::Debug for AgentId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(&*self.0, f)
    }
}

impl fmt::Display for AgentId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl From<&str> for AgentId {
    fn from(value: &str) -> Self {
        Self::new(value)
    }
}

impl From<String> for AgentId {
    fn from(value: String) -> Self {
        Self::new(value)
    }
}

impl AsRef<str> for AgentId {
    fn as_ref(&self) -> &str {
        &self.0
    }
}

macro_rules! uuid_id {
    ($(#[$doc:meta])* $name:ident) => {
        $(#[$doc])*
        #[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
        #[serde(transparent)]
        pub struct $name(pub Uuid);

        impl $name {
            /// Wraps a UUID the caller generated.
            pub const fn from_uuid(id: Uuid) -> Self {
                Self(id)
            }

            /// Builds an id from a number; handy for deterministic tests and simulations.
            pub const fn from_u128(n: u128) -> Self {
                Self(Uuid::from_u128(n))
            }

            /// The UUID inside.
            pub const fn as_uuid(&self) -> Uuid {
                self.0
            }
        }

        impl fmt::Debug for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                fmt::Display::fmt(&self.0, f)
            }
        }

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                fmt::Display::fmt(&self.0, f)
            }
        }
    };
}

uuid_id!(
    /// The id of one message on the bus. Delivery is at-least-once; processing is idempotent by this id.
    MessageId
);
uuid_id!(
    /// The id of one governance decision.
    DecisionId
);

impl DecisionId {
    /// The id of the one decision an agent proposes in answer to message `cause`: the
    /// message's own UUID, so a turn redone after a crash finds the decision it proposed
    /// before instead of proposing it again. Message and decision ids live in separate stores,
    /// so sharing the number cannot make two decisions meet.
    pub const fn for_message(cause: MessageId) -> Self {
        Self(cause.as_uuid())
    }
}

/// A point in time in milliseconds since the Unix epoch, always supplied by the caller.
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Default, Serialize, Deserialize)]
#[serde(transparent)]
pub struct Timestamp(pub u64);

impl Timestamp {
    /// Milliseconds since the Unix epoch.
    pub const fn as_millis(self) -> u64 {
        self.0
    }

    /// Milliseconds from `earlier` to `self`, zero if `earlier` is later.
    pub const fn millis_since(self, earlier: Timestamp) -> u64 {
        self.0.saturating_sub(earlier.0)
    }
}

impl fmt::Debug for Timestamp {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}ms", self.0)
    }
}

impl fmt::Display for Timestamp {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}ms", self.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    proptest::proptest! {
        /// Ids compare, order and hash as their strings do, whether or not they share their
        /// string, and whatever their lengths around the eight bytes ordering reads at once.
        #[test]
        fn ids_compare_as_their_strings(
            a in "[a-c_é-]{0,20}",
            b in "[a-c_é-]{0,20}",
            shared_prefix in "[a-c]{0,17}",
        ) {
            let (a, b) = (format!("{shared_prefix}{a}"), format!("{shared_prefix}{b}"));
            let (x, y) = (AgentId::new(a.as_str()), AgentId::new(b.as_str()));
            proptest::prop_assert_eq!(x.cmp(&y), a.cmp(&b));
            proptest::prop_assert_eq!(x.partial_cmp(&y), a.partial_cmp(&b));
            proptest::prop_assert_eq!(x == y, a == b);
            proptest::prop_assert_eq!(x.cmp(&x.clone()), std::cmp::Ordering::Equal);
            proptest::prop_assert_eq!(x.clone(), x.clone());
            let hash = |v: &dyn Fn(&mut std::hash::DefaultHasher)| {
                let mut h = std::hash::DefaultHasher::new();
                v(&mut h);
                std::hash::Hasher::finish(&h)
            };
            proptest::prop_assert_eq!(hash(&|h| x.hash(h)), hash(&|h| a.as_str().hash(h)));
        }
    }

    #[test]
    fn a_message_names_one_decision_and_two_messages_two() {
        let (a, b) = (MessageId::from_u128(1), MessageId::from_u128(2));
        assert_eq!(DecisionId::for_message(a), DecisionId::for_message(a));
        assert_ne!(DecisionId::for_message(a), DecisionId::for_message(b));
    }
}
