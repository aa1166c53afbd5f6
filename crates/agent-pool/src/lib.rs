//! The agent pool and the team: many Strata agents in one process.
//!
//! The package is `strata-agent-pool` (`strata-agent-pool = "0.1"` in `Cargo.toml`); code
//! names it `agent_pool`.
//!
//! - [`AgentPool`]: creates agents from validated configurations (the concrete layer type is
//!   chosen by [`Team`] from the [`RoleSpec`]), one at a time or as a batch
//!   ([`AgentPool::create_many`], each agent with its own result), destroys them cleanly, looks them up by id and by
//!   layer, and refuses to grow past its limit (50 by default) with [`PoolError::Full`];
//! - [`CapabilityRegistry`]: capabilities by name with the layers that may use them (the ten
//!   built-ins of docs/concepts.md#capabilities, plus any a user registers); [`MetricsCalculator`]:
//!   scores;
//! - [`HeartbeatScheduler`]: each cycle (4 s by default) starts a heartbeat, in its own task, for
//!   every agent that has mail or pending work; every other agent acknowledges the cycle through
//!   its bookkeeping, one sweep over the pool's slots that records each idle agent's answer in
//!   its slot ([`AgentSlot::last_ack`]): an idle agent costs no task, no allocation, no message
//!   and no reasoning call. An agent whose turn is still running answers **busy**, with its
//!   turn's progress (what it is doing, tokens so far, how long it has run: see
//!   [`AgentSlot::progress`]), and is not missed; one that did not answer at all (its turn
//!   silent past `[timeouts] silence_ms`, held by someone else through the cycle, or its
//!   heartbeat task died) counts a missed heartbeat, audited, and its supervisor gets a
//!   warning; one not expected to answer (initializing, failed, shutting down, terminated) is
//!   neither. Every answer, idle or busy, and every miss is stored in the liveness ledger.
//!   Between heartbeats, **wake on work**: the team's [`WakingBus`] puts the recipient of
//!   every delivery in a [`ReadyQueue`] and the agents made ready take a turn at once (each
//!   agent's turns bounded by a token bucket: [`WAKE_BURST`] at once, [`WAKE_RATE`] per
//!   second), so a task moves at the speed of its work, not of the heartbeat, and a delivery
//!   costs the same in a team of ten agents as in one of ten thousand;
//! - [`Driver`]: the team's heartbeat loop, owning its scheduler, wake-up signal, guards and
//!   (for the run's coordinator) the `system` inbox and the tasks' deadlines; [`Team`] runs one;
//! - [`Team`]: builds a team from one [`TeamSpec`], of any [`TeamShape`] (three layers; a crew,
//!   one lead and its executors; a single agent), takes tasks (scripted plans, or a goal in
//!   words for a team whose entry agent's reasoner plans: [`SubmitError::CannotPlan`]
//!   otherwise), reports outcomes, shuts down with every agent terminated;
//! - the team's spawner (docs/concepts.md#roles-and-spawning): with [`TeamSpec::roles`], a top
//!   power creates the leads a signed plan names, and leads spawn, speak to, list and despawn
//!   workers through the `spawn_agent` family of tools, within `enabled_agents`, `max_instances`,
//!   the pool's limit and [`TeamSpec::max_spawn_depth`], each spawned agent holding at most its
//!   spawner's capabilities and network ([`TeamSpec::network`]) in every layer combination; every
//!   spawn is audited first, and [`Team::resume`] rebuilds spawned agents from the audit log;
//! - the run's guards ([`TeamSpec::guards`]): the team's driver watches every delivery and every
//!   heartbeat, and a run that goes nowhere (a step or message bounced between two agents, no
//!   progress for `idle_heartbeats`, agents waiting on each other in a cycle) ends its task with
//!   the typed reason (`TaskFailure::PingPong`, `NoProgress`, `WaitCycle`), audited, or warns
//!   the stuck agent's supervisor first (`OnStuck::Escalate`); the layers' tool loops stop an
//!   agent repeating itself (`TaskFailure::Loop`);
//! - [`TeamStores`]: the five stores a team keeps its data in, in memory or (feature `nats`,
//!   [`NatsStores`]) on a NATS JetStream namespace: the one place they are assembled, for
//!   [`TeamServices`] and the engine;
//! - with the feature `nats`, [`TeamServices::on_nats`]: a team whose bus, whiteboards,
//!   governance, audit log and state store are on a NATS JetStream server (`nats-store`), so
//!   another process can resume it; and the module `placement`: workers that each host a
//!   share of a run's agents ([`Team::join`] with a [`Share`]), placed by leases renewed every
//!   heartbeat, taken over by another worker when one dies or is cut off;
//! - with the feature `sim`, the module `sim`: the deterministic simulation of a whole team from a seed
//!   (hundreds of agents, crashes, message delays and reorderings, slow and failing simulated
//!   tools) on paused tokio time in one thread, invariants checked after every step, and a
//!   digest of the run that is the same for the same seed (`cargo xtask simulate`).
//!
//! ```
//! use agent_pool::CapabilityRegistry;
//! use agent_state::AgentLayer;
//!
//! let registry = CapabilityRegistry::with_builtins();
//! assert!(registry.can_execute(AgentLayer::Top, "arbitrate"));
//! assert!(!registry.can_execute(AgentLayer::Bottom, "delegate"));
//! ```

mod capability;
mod deadline;
mod driver;
mod guard;
mod metrics;
#[cfg(feature = "nats")]
pub mod placement;
mod pool;
mod scheduler;
mod shape;
#[cfg(feature = "sim")]
pub mod sim;
mod spawner;
mod stores;
mod team;
mod wake;

#[cfg(test)]
mod tests;

pub use capability::{CapabilityInfo, CapabilityRegistry};
pub use driver::{Driver, DriverHandle, Outcomes};
pub use guard::{AgentView, RemoteAgents, agent_views, moves_work};
pub use metrics::{AgentSummary, MetricsCalculator, StoredMetrics, stored_metrics};
pub use pool::{
    AgentLock, AgentPeek, AgentPool, AgentSlot, DEFAULT_MAX_AGENTS, MAX_POOL_SIZE, PoolError,
};
pub use scheduler::{CycleReport, DEFAULT_HEARTBEAT, HeartbeatScheduler, WAKE_BURST, WAKE_RATE};
pub use shape::{TeamShape, UnknownShape};
pub use stores::TeamStores;
#[cfg(feature = "nats")]
pub use stores::{NatsStores, NatsStoresError};
pub use team::{
    AgentSpec, Approvals, QUIESCE_HEARTBEATS, RoleSpec, Share, SubmitError, Team, TeamError,
    TeamServices, TeamSpec, validate,
};
pub use wake::{ReadyQueue, WakingBus};
