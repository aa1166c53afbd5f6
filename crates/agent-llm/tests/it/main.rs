//! Integration tests of agent-llm.
#![allow(clippy::unwrap_used, clippy::expect_used, reason = "tests")]

mod anthropic;
mod approval;
mod completions;
mod goal_wire;
mod http_server;
mod ledger;
mod mock;
mod openai;
mod reasoner;
mod retry;
mod streaming;
mod structured;
mod team;
