//! The one integration-test binary of `governance`: conformance of the in-memory and sled backends, object safety, arbitration.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod arbitration;
mod conformance;
mod sled_backend;
