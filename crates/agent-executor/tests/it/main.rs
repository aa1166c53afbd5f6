//! Integration tests of agent-executor: the four built-in kinds run by an [`Executor`] on the
//! rule-based reasoner and on a scripted one, in a temporary workspace, with HTTP against a
//! loopback server (real sockets and real time: retries wait a few milliseconds).
//!
//! [`Executor`]: agent_executor::Executor
#![allow(clippy::unwrap_used, clippy::expect_used, reason = "tests")]

#[cfg(feature = "http")]
mod integrations;
mod planner;
mod registry;
mod research;
#[cfg(feature = "http")]
mod research_http;
#[cfg(feature = "http")]
mod server;
mod support;
#[cfg(not(feature = "http"))]
mod without_http;
mod writer;
