//! End-to-end tests of the `strata` binary: each test runs the real executable in a scratch
//! directory and checks its exit code, what it prints (text and `--json`), and what it leaves on
//! disk.
//!
//! Exit codes under test: 0 success, 1 the task failed, 2 bad input (nothing written to the data
//! directory), 130 interrupted (the run can be resumed).
#![allow(clippy::unwrap_used, clippy::expect_used, reason = "tests")]

mod anchor;
mod approval;
mod bad_input;
mod browser;
mod cycle;
mod eval;
mod evolve;
mod exec;
mod failure;
mod fake_llm;
mod goal;
mod happy;
mod help;
mod injection;
mod inputs;
mod inspection;
mod interrupt;
mod knobs;
mod llama_server;
mod llm;
#[cfg(feature = "local")]
mod local;
mod mcp;
mod metrics;
mod nats;
mod ooda;
mod otel;
mod panic;
mod papercuts;
mod partition;
mod placed;
mod sandbox;
mod secrets;
mod serve;
mod shapes;
mod softtimeout;
mod spawn_views;
mod storage;
mod support;
mod workers;
