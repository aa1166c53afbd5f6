//! The three layers of a Strata team (placeholder until the runtime issue).
//!
//! This crate will hold the top-layer powers (sign, veto, arbitrate), the mid-layer leads
//! (decompose, delegate, aggregate, escalate) and the bottom-layer executors (run tools, report).
//! Today it names the three layers.
//!
//! ```
//! assert_eq!(agent_layers::LAYERS.len(), 3);
//! ```

/// The three layers, top first.
pub const LAYERS: [agent_state::AgentLayer; 3] = agent_state::AgentLayer::ALL;
