//! Unit and property tests for the pure core, checked against the seeds.
//!
//! Each submodule covers one source module; `props` holds the model-based property tests.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod board;
mod command;
mod config;
mod decision;
mod encoding;
mod evolution;
mod guard;
mod lifecycle;
mod metrics;
mod ooda;
mod props;
mod retry;
mod role;
mod run;
mod run_id;
mod storage;
mod timeouts;
mod wire;

use crate::AgentId;

/// Shorthand for an agent id.
fn id(s: &str) -> AgentId {
    AgentId::new(s)
}
