//! The four built-in kinds, which [`builtins`] registers:
//!
//! | kind | does | needs a model for |
//! |---|---|---|
//! | [`RESEARCH_AGENT`] | gathers sources from the workspace and from URLs on allowed hosts | the summary (else the notes are the excerpts) |
//! | [`WRITER_AGENT`] | writes a report, an email or a document to a workspace file | drafting without `content` (else blocked) |
//! | [`PLANNER_AGENT`] | turns the objective into a Strata plan file | roles, owners and dependencies (else the written order) |
//! | [`INTEGRATIONS_AGENT`] | calls a configured endpoint | nothing |
//!
//! Each reports rising progress and notes what it read, fetched or wrote, reaches files only
//! through the workspace tools (never `.strata/`, which holds other runs' capsules) and the
//! network only through the executor's [`HttpPolicy`](crate::HttpPolicy). On the rule-based
//! reasoner each does the deterministic part and says in
//! [`KindOutput::needs_model`](crate::KindOutput) what needs a model.

mod integrations;
mod planner;
mod research;
mod text;
mod writer;

pub use integrations::{INTEGRATIONS_AGENT, IntegrationsAgent};
pub use planner::{PLANNER_AGENT, PLANNER_NEEDS_MODEL, PlannerAgent};
pub use research::{DEFAULT_MAX_SOURCES, MAX_SOURCES, RESEARCH_AGENT, ResearchAgent};
pub use writer::{WRITER_AGENT, WRITER_FORMATS, WriterAgent};

use crate::kind::{Registry, RegistryError};

/// A registry holding the four built-in kinds.
pub fn builtins() -> Registry {
    let mut registry = Registry::new();
    if let Err(error) = register_builtins(&mut registry) {
        // The names are constants, valid and distinct; a refusal here is a bug, kept visible.
        tracing::error!(%error, "a built-in agent kind was refused");
    }
    registry
}

/// Registers the four built-in kinds in `registry` (next to kinds of its own); a name taken
/// already is refused.
pub fn register_builtins(registry: &mut Registry) -> Result<(), RegistryError> {
    registry.register(ResearchAgent)?;
    registry.register(WriterAgent)?;
    registry.register(PlannerAgent)?;
    registry.register(IntegrationsAgent)?;
    Ok(())
}
