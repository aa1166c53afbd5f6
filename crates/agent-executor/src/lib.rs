//! The agent executor (docs/concepts.md#executor-kinds): runs one agent *kind* on one objective,
//! with a lifecycle, a retry policy that tells transient failures from permanent ones, soft and
//! hard timeouts, progress streamed to the caller, a capsule of its own, and batches.
//!
//! The package is `strata-agent-executor` (`strata-agent-executor = "0.1"` in `Cargo.toml`); code
//! names it `agent_executor`.
//!
//! In a team, an executor agent with a `kind` runs its subtasks through an [`Executor`]; alone,
//! `strata exec KIND "objective"` (or [`Executor::execute`]) runs one kind without a team.
//!
//! - [`Registry`] and [`Kind`]: kinds registered by name (twice is an error); [`FnKind`] makes
//!   one from a closure. [`builtins()`] registers the four built-in kinds (module
//!   [`builtins`](mod@builtins)): [`RESEARCH_AGENT`] (sources from the workspace and from URLs
//!   on allowed hosts, and notes), [`WRITER_AGENT`] (a report, email or document written to a
//!   workspace file), [`PLANNER_AGENT`] (a Strata plan file) and [`INTEGRATIONS_AGENT`] (a call
//!   of a configured endpoint). On the rule-based reasoner each does its deterministic part and
//!   says what needs a model ([`KindOutput::needs_model`]).
//! - HTTP (feature `http`, on by default; the workspace declares the crate without it and the
//!   `strata` command turns it on): every request's host checked against the
//!   [`HttpPolicy`] before it is sent, redirects followed only to allowed hosts (never for
//!   endpoints), a timeout, bodies cut at `max_body_bytes`. Without the feature, what needs
//!   HTTP fails with [`FailureKind::InvalidInput`](agent_state::FailureKind) saying so.
//! - [`Executor::execute`]: pending → running → completed | blocked | failed, failed → running
//!   on a retry the [`RetryPolicy`](agent_state::RetryPolicy) grants (the table and the retry
//!   maths are in `agent-state`, [`RunLifecycle`](agent_state::RunLifecycle)); a
//!   [`RunResponse`] envelope at the end.
//! - [`Capsule`]: the run's context: progress sink, reasoner and conversation, budget share,
//!   scratch directory, workspace tools, HTTP access; processes it starts die with it.
//! - [`RunEvent`] and [`RunObserver`]: what the caller hears as it happens; [`ChannelObserver`]
//!   never blocks the run.
//! - [`Executor::execute_parallel`] and [`Executor::execute_sequential`]: batches.
//!
//! ```
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! use std::sync::Arc;
//! use agent_core::RuleBasedReasoner;
//! use agent_executor::{
//!     ChannelObserver, Executor, FnKind, KindOutput, Registry, RunContext, RunEvent, RunRequest,
//! };
//! use agent_state::RunState;
//!
//! let mut registry = Registry::new();
//! registry.register(FnKind::new("shout", "upper-cases the objective", |req, capsule| {
//!     Box::pin(async move {
//!         capsule.progress(50, "shouting");
//!         Ok(KindOutput::new(req.objective.to_uppercase(), 1.0))
//!     })
//! }))?;
//! let executor = Executor::new(registry);
//!
//! let (observer, mut events) = ChannelObserver::new(64);
//! let cx = RunContext::standalone("shout", Arc::new(RuleBasedReasoner::new()))
//!     .with_observer(Arc::new(observer));
//! let response = executor.execute(RunRequest::new("shout", "hello"), cx).await?;
//! assert_eq!((response.status, response.primary_output.as_str()), (RunState::Completed, "HELLO"));
//!
//! let mut seen = Vec::new();
//! while let Ok(event) = events.try_recv() {
//!     if let RunEvent::Progress { percent, .. } = event { seen.push(percent) }
//! }
//! assert_eq!(seen, [50]);
//!
//! // An unknown kind is refused before anything runs.
//! let cx = RunContext::standalone("x", Arc::new(RuleBasedReasoner::new()));
//! assert!(executor.execute(RunRequest::new("nope", "x"), cx).await.is_err());
//! # Ok(())
//! # }
//! ```

pub mod builtins;
mod capsule;
mod env;
mod events;
mod http;
mod kind;
mod request;
mod run;

pub use agent_state::RunEvent;
pub use builtins::{
    INTEGRATIONS_AGENT, PLANNER_AGENT, RESEARCH_AGENT, WRITER_AGENT, builtins, register_builtins,
};
pub use capsule::{CAPSULES_DIR, Capsule, Turn};
pub use env::{Endpoint, EndpointError, ExecEnv, HeaderValue, HttpPolicy, Method};
pub use events::{ChannelObserver, NoObserver, RunObserver};
pub use kind::{
    FnKind, Kind, KindError, KindFuture, KindOutput, Registry, RegistryError, valid_kind_name,
};
pub use request::{ExecError, MAX_INPUTS_BYTES, MAX_OBJECTIVE_BYTES, RunRequest};
pub use run::{BatchItem, Executor, RunContext, RunResponse, Timings};

#[cfg(test)]
mod tests;
