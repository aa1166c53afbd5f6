//! Strata's engine as a library: what turns a team file and a plan into a durable run, and
//! reads it back. The `strata` command is built on it; a Rust program can use it the same way.
//!
//! The package is `strata-engine` (`strata-engine = "0.1"` in `Cargo.toml`); code
//! names it `strata`.
//!
//! - [`run_dir`]: a run's directory in the data directory and its `run.json` ([`RunInfo`]):
//!   the layout, reading, writing, finding a run by id, new run ids.
//! - [`inputs`]: the hashes of a run's stored inputs (team file, plan, `run.json`), recorded in
//!   its audit log, and the check `resume` makes before it starts anything.
//! - [`stores`]: the five stores of a run (bus, whiteboards, governance, audit log, state
//!   store) in its sled database or on a NATS JetStream server (there, as
//!   [`agent_pool::NatsStores`] opens them): one type for both.
//! - [`services`]: the [`TeamServices`](agent_pool::TeamServices) a team file becomes: the
//!   sandbox of its commands, the per-agent network rule, the reasoners and their usage
//!   ledger, the workspace and its crash journals.
//! - [`reasoners`] builds and checks every agent's reasoner from the team file; [`mcp`] starts
//!   the team file's MCP servers.
//! - [`summary`]: a run's end in numbers (outcome, duration, files written, decisions, every
//!   agent's metrics), which `strata run` prints.
//! - [`evolve`]: a durable evolution (`strata evolve`): started or resumed, run, its
//!   `evolution.json`, best genome and family tree; [`evaluation`]: the services its suite's
//!   task teams run on, built from the team file as a run's are (sandbox, per-agent network,
//!   reasoners).
//! - [`eval`]: a durable eval (`strata eval`): every task of a suite run by each team,
//!   repeatedly, each attempt an ordinary durable run checked on its final workspace; its
//!   `eval.json`, resume, and the report (table, JSON, SVG).
//! - [`dashboard`]: the dashboard (`strata serve`) without its HTTP: each watched run's model,
//!   folded from its audit records into small deltas, kept live from its stores, its event
//!   stream or its NATS server; what its API answers (the runs, a run's snapshot, calls and
//!   timeline, approve, veto, cancel, resume) and its access rules (token, host, cookie); the
//!   step counter a live view shows.
//! - [`lines`]: an audit record or an executor run's event as one line of text, as `strata`
//!   prints a run and the dashboard lists its events; [`model_output`]: what the models are
//!   writing as their answers stream, each agent's latest output; [`json_lines`]: the JSON
//!   lines of `strata run --json` (the run's start and end, its records and events).
//! - [`exec`]: the executor kinds `strata exec` runs, described: each kind's inputs read
//!   from its schema, and the list as JSON.
//! - [`worker`]: the host of a worker (`strata worker`): builds the team of each run placed on
//!   NATS, as `strata run` would, for `agent_pool`'s [`Worker`](agent_pool::placement::Worker).
//! - [`audit`]: a stored run read back: its audit log checked against its anchors, the
//!   checks of `strata verify`, and the data of `strata inspect`'s views (the agents' tree,
//!   results, timeline, usage and model calls, messages), each with its `--json` document.
//! - [`operator`]: the operator inbox of a run (approve, veto, rollback, hot-swap, cancel):
//!   the request files, their checks and delivery, and the loop a running process serves
//!   them with.
//! - [`runs`]: the runs and evolutions of a data directory, each with how it stands and
//!   what `verify` finds broken (`strata runs`, and its `--json`).
//! - [`Error`]: every failure says what went wrong and whether the user's input is to blame
//!   ([`ErrorKind::BadInput`]: nothing was written).
//!
//! ```no_run
//! # async fn read() -> strata::Result<()> {
//! use std::path::Path;
//!
//! // A run of `strata run`, found by id in the data directory.
//! let dir = strata::run_dir::resolve_run(Path::new(".strata/runs"), "hello-20261206-101500-ab12")?;
//! let info = strata::RunInfo::read(&dir)?;
//! // Its stored team file, plan and run.json are the ones it recorded.
//! let store = run_store::RunStore::open_read_only(&dir)?;
//! strata::inputs::check(&store, &dir, &info).await?;
//! assert_eq!(info.status.as_str(), "succeeded");
//! # Ok(()) }
//! ```

pub mod audit;
pub mod dashboard;
pub mod error;
pub mod eval;
pub mod evaluation;
pub mod evolve;
pub mod exec;
pub mod inputs;
pub mod json_lines;
pub mod lines;
pub mod mcp;
pub mod model_output;
pub mod operator;
pub mod placement;
pub mod reasoners;
pub mod run;
pub mod run_dir;
pub mod runs;
pub mod services;
pub mod stores;
pub mod summary;
#[cfg(test)]
mod tests;
pub mod url;
pub mod worker;

pub use agent_core::tools::run_sandbox_launcher_if_requested;
pub use error::{Error, ErrorKind, Result};
pub use run_dir::{ModelFlags, RunInfo, RunStatus, RunUsage};
pub use stores::Stores;
