//! The agent runtime: drives one agent through its lifecycle (placeholder until the runtime issue).
//!
//! This crate will hold the agent contract the three layers implement (initialize, process a
//! heartbeat, shut down, describe responsibilities), the heartbeat step, retries and timeouts,
//! the audit-log trait, and the reasoning and tool hooks. Today it re-exports the vocabulary it
//! will drive.
//!
//! ```
//! use agent_core::AgentStatus;
//! assert!(AgentStatus::Idle.can_transition_to(AgentStatus::Working));
//! ```

pub use agent_state::{AgentConfig, AgentLayer, AgentStatus, Lifecycle};
