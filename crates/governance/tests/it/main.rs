//! The one integration-test binary of `governance`: conformance of the in-memory, sled and (feature `nats`) NATS backends, object safety, arbitration.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, reason = "tests")]

mod arbitration;
mod conformance;
#[cfg(feature = "nats")]
mod nats;
mod sled_backend;
