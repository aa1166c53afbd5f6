//! Integration tests of the engine through its public API.

#![allow(clippy::unwrap_used, clippy::expect_used, reason = "tests")]

mod eval;
mod evolve;
mod example_suite;
mod run;
