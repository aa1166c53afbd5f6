//! The one integration-test binary of `governance`: conformance of the in-memory backend, object safety, arbitration.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod arbitration;
mod conformance;
