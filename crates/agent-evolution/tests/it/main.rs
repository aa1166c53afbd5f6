//! agent-evolution's integration tests: the evolution loop and its flight recorder, the
//! shipped task suite on real teams, and hot-swaps into live OODA agents.

#![allow(clippy::unwrap_used, clippy::expect_used, reason = "tests")]

mod evolve;
mod suite;
mod support;
mod swap;
