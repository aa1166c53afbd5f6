//! The agent pool: many agents in one process (placeholder until the runtime issue).
//!
//! This crate will hold agent creation and destruction with the pool limit (50 by default), the
//! capability registry built from the layer–capability matrix, the metrics calculator, and the
//! heartbeat scheduler. Today it exposes the default limit.
//!
//! ```
//! assert_eq!(agent_pool::DEFAULT_MAX_AGENTS, 50);
//! ```

/// At most this many agents in a pool by default (seed 000 §7).
pub const DEFAULT_MAX_AGENTS: usize = 50;
