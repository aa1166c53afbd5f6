//! Evolution (docs/concepts.md#evolution): agents that improve by variation and selection, on the
//! Strata runtime.
//!
//! The package is `strata-agent-evolution` (`strata-agent-evolution = "0.1"` in `Cargo.toml`); code
//! names it `agent_evolution`.
//!
//! - **Genomes** ([`agent_state::evolution::Genome`]): an agent's configuration (role,
//!   prompt, model and temperature, tools, retries and turn limit, strategy parameters), its
//!   code files and its state version; the id is the SHA-256 of their canonical form. A child
//!   is its parent with a [`Modification`](agent_state::ooda::Modification) applied, within a
//!   [`SearchSpace`](agent_state::evolution::SearchSpace)'s declared bounds and never with a
//!   tool beyond its permissions.
//! - **Fitness** ([`FitnessEvaluator`]): named scores and an overall fitness; the built-in
//!   [`SuiteEvaluator`] runs the genome as the executors of a real team on each task of a
//!   [`TaskSuite`] and checks each result with the task's command (success, efficiency from
//!   tool calls and wall time, safety from failed and refused actions; 0.4 / 0.3 / 0.3). Each
//!   task's team runs on the services a [`TaskServices`] makes: the built-in
//!   [`InMemoryServices`], or a program's own (the `strata` crate's gives the teams the
//!   sandbox, per-agent network rule and reasoners of `strata run`).
//!   A suite folder read on its own ([`SuiteFile`]: each task's check, goal or plan and files,
//!   checked before anything runs) is also what `strata eval` runs, with any team.
//! - **Evolution** ([`Evolution`]): generation 0 is the genesis; each later generation keeps
//!   the elite of the last and fills the population with mutated children of its survivors;
//!   genomes below the threshold (0.5) die. Evaluations of a generation run concurrently
//!   within a bound. Every random choice comes from the seed: the same seed and the same
//!   scores give the same evolution, byte for byte.
//! - **Flight recorder** ([`FlightRecorder`], durable [`SledRecorder`]): every spawn, mutation,
//!   evaluation, death and survival is an [`EvolutionaryEvent`](agent_state::evolution::EvolutionaryEvent)
//!   committed before the evolution goes on; a killed evolution run again on the same recorder
//!   resumes from its last finished evaluation. [`Lineage`](agent_state::evolution::Lineage)
//!   rebuilds the family tree from the events (JSON, DOT, Mermaid).
//! - **Hot-swap** ([`hot_swap`]): the winning genome becomes a live OODA agent's new version
//!   (its next turn runs with it, its audit records the swap, `rollback` goes back).
//!
//! ```
//! use std::sync::Arc;
//!
//! use agent_evolution::{EvalContext, EvalError, Evolution, FitnessEvaluator, MemoryRecorder};
//! use agent_state::evolution::{
//!     EvolutionSettings, Fitness, Gene, Genome, GenomeConfig, SearchSpace,
//! };
//!
//! /// Fitness grows with retries up to 3, then falls: a toy gym.
//! struct Toy;
//!
//! #[async_trait::async_trait]
//! impl FitnessEvaluator for Toy {
//!     fn name(&self) -> String {
//!         "toy".into()
//!     }
//!     async fn evaluate(&self, g: &Genome, _: &EvalContext) -> Result<Fitness, EvalError> {
//!         let r = f64::from(g.config.max_retries);
//!         Ok(Fitness::weighted(1.0 - (r - 3.0).abs() / 3.0, 1.0, 1.0, &Default::default()))
//!     }
//! }
//!
//! # tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(async {
//! let mut config = GenomeConfig::new("executor");
//! config.max_retries = 0;
//! let genesis = Genome::genesis(config, vec![])?;
//! let space = SearchSpace::new(vec![Gene::int("max_retries", 0, 6)]);
//! let evolution = Evolution::new(
//!     EvolutionSettings::new(4, 5, 42),
//!     space,
//!     genesis,
//!     Arc::new(Toy),
//!     Arc::new(MemoryRecorder::new()),
//!     Arc::new(agent_core::TokioClock::new()),
//! )?;
//! let report = evolution.run().await?;
//! assert!(report.best_fitness.overall > report.generations[0].best);
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! # }).unwrap();
//! ```

mod config;
mod evolve;
mod recorder;
mod services;
mod suite;
mod swap;

pub use config::{ConfigError, EvolutionFile};
pub use evolve::{
    EvalContext, EvalError, Evolution, EvolutionReport, EvolveError, FitnessEvaluator,
    GenerationReport, Progress, agent_id, needs_writer,
};
pub use recorder::{
    EVENTS_TREE, EventKey, FlightRecorder, MemoryRecorder, RecorderError, SledRecorder,
};
pub use services::{
    InMemoryServices, Reasoning, ReasoningFactory, TaskServices, TaskSetup, TaskTeam, TokenMeter,
};
pub use suite::{
    Check, CheckError, CheckRun, MAX_TASK_FILES, SuiteError, SuiteEvaluator, SuiteFile, SuiteTask,
    TOOL_TIMEOUT_PARAMETER, TaskFile, TaskRun, TaskSuite, Work, copy_files, run_check,
};
pub use swap::{SwapError, hot_swap};
