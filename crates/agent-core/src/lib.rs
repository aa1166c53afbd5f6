//! The agent runtime: drives one Strata agent through its lifecycle.
//!
//! The package is `strata-agent-core` (`strata-agent-core = "0.1"` in `Cargo.toml`); code
//! names it `agent_core`.
//!
//! An [`Agent`] pairs an [`AgentContext`] (configuration, status, metrics, and the shared services
//! in [`AgentDeps`]) with a layer's [`AgentBehavior`]. The runtime implements the lifecycle of
//! docs/concepts.md#lifecycle: [`Agent::initialize`] registers on the bus, creates the whiteboard
//! and goes initializing → idle; [`Agent::heartbeat`] takes messages, works, acknowledges, acks the
//! heartbeat to `system`, and retries failures up to `max_retries` before going failed and
//! reporting to the supervisor; [`Agent::shutdown`] ends in terminated. Every status change goes
//! through `agent-state` and into the [`AuditLog`].
//!
//! Reasoning and tools are pluggable: [`Reasoner`] (with the deterministic
//! [`RuleBasedReasoner`]) and the [`tools::ToolRegistry`] with workspace-confined file and shell
//! tools. [`spawn`] defines how a layer creates and dismisses agents while a team works (the
//! [`Spawner`] trait, implemented by `agent-pool`) and the agent-management tools
//! (`spawn_agent`, `speak_to_agent`, `get_agents`, `despawn_agent`, `return_results`) with their
//! JSON schemas. This crate does not schedule heartbeats or hold many agents: that is
//! `agent-pool`.
//!
//! **Backends** of the [`AuditLog`] and the [`StateStore`] (agents' saved state, the tool
//! journal, task outcomes and blobs), one per cargo feature:
//!
//! | feature   | audit log / state store                   | keeps                              |
//! |-----------|-------------------------------------------|------------------------------------|
//! | (none)    | [`InMemoryAuditLog`], [`InMemoryStateStore`] | nothing across a restart        |
//! | `sled`    | `SledAuditLog`, `SledStateStore`          | a run directory (`run-store`)      |
//! | `nats`    | `NatsAuditLog`, `NatsStateStore`          | streams and buckets on a NATS JetStream server (`nats-store`), shared by the processes and machines of a team |
//! | `testing` | `testing::run_conformance`, `testing::FakeTool` | the conformance suite every backend passes; a fake tool for tests |
//!
//! ```
//! use agent_core::{AuditEvent, AuditLog, InMemoryAuditLog};
//! use agent_state::{AgentId, AgentStatus, Timestamp};
//!
//! # tokio_test_block_on(async {
//! let audit = InMemoryAuditLog::new();
//! let event = AuditEvent::Transition { from: AgentStatus::Initializing, to: AgentStatus::Idle, reason: "ready".into() };
//! audit.append(&AgentId::new("top-1"), Timestamp(0), event).await?;
//! let records = audit.records(None).await?;
//! assert_eq!(agent_core::check_transition_chain(&records)?, vec![(AgentId::new("top-1"), AgentStatus::Idle)]);
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! # }).unwrap();
//! # fn tokio_test_block_on<F: std::future::Future>(f: F) -> F::Output {
//! #     tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(f)
//! # }
//! ```

mod agent;
mod audit;
pub mod blob;
mod clock;
#[cfg(feature = "sled")]
mod durable;
mod error;
pub mod events;
pub mod fault;
#[cfg(feature = "nats")]
pub mod nats;
mod offclock;
pub mod otel;
pub mod parts;
pub mod progress;
pub mod protocol;
mod reasoner;
mod scripted;
pub mod secrets;
pub mod spawn;
mod state;
#[cfg(feature = "testing")]
pub mod testing;
mod timed;
mod toolpath;
pub mod tools;
pub mod work_guard;

#[cfg(test)]
mod tests;

pub use agent::{
    Agent, AgentBehavior, AgentContext, AgentDeps, HeartbeatOutcome, MAX_MESSAGES_PER_HEARTBEAT,
    MAX_PANICS, Tuning, payload, system_prompt,
};
pub use audit::{
    AnchorBreak, AnchorHolder, AuditAnchor, AuditEntry, AuditEvent, AuditHash, AuditLog,
    AuditRecord, ChainBreak, ChainError, GENESIS_HASH, InMemoryAuditLog, PeerHelpOutcome,
    PeerHelpRequest, audit_reasoning, check_anchor_list, check_anchors, check_transition_chain,
    verify_chain, with_reasoning_audit,
};
pub use clock::{Clock, TokioClock, new_decision_id, new_message_id};
#[cfg(feature = "sled")]
pub use durable::{
    AUDIT_ANCHOR, AnchoredAuditLog, NATS_AUDIT_ANCHOR, SledAuditLog, SledStateStore,
};
pub use error::AgentError;
pub use events::{
    EventHub, EventStream, MAX_TOKEN_EVENT_CHARS, ModelTokens, PublishingAuditLog, Received,
    TeamEvent,
};
#[cfg(feature = "nats")]
pub use nats::{NatsAuditLog, NatsStateStore};
pub use offclock::untimed;
pub use progress::{Activity, BusyAnswer, Progress};
pub use reasoner::{
    BUDGET_EXTENSION_KIND, Candidate, Conflict, FINISH_TOOL, Judgement, NextAction, Persona,
    Placement, Plan, ReasonError, Reasoner, RuleBasedReasoner, ToolCall, ToolCallRecord, Verdict,
};
pub use scripted::{ReasoningRequest, ScriptedAnswer, ScriptedReasoner};
pub use spawn::{
    CostMeter, SpawnError, SpawnRecord, SpawnRequest, Spawner, Subordinate, is_agent_tool,
    supervisor_tool_spec, supervisor_tool_specs,
};
pub use state::{
    AgentCounts, AgentRecord, InMemoryStateStore, LivenessRecord, OutcomeRecord, StateStore,
    ToolRecord,
};
pub use toolpath::ToolPath;
