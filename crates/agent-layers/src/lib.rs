//! The three layers of a Strata team: top powers, mid leads and bottom executors
//! (docs/concepts.md#layers).
//!
//! The package is `strata-agent-layers` (`strata-agent-layers = "0.1"` in `Cargo.toml`); code
//! names it `agent_layers`.
//!
//! Each layer is an [`agent_core::AgentBehavior`] driven by the `agent-core` runtime:
//! - [`TopAgent`]: proposes a task's plan as a decision the other powers must
//!   sign, reviews signature requests through the reasoner, dispatches the signed plan to the
//!   leads by domain, arbitrates conflicts by a weighted vote over the bus, judges the results
//!   and closes the task, and writes a final report at shutdown;
//! - [`MidAgent`]: takes work only from the top layer, places steps on its
//!   executors, writes the allocation plan, aggregates their reports, reassigns the work of a
//!   failed executor, escalates what it cannot place, and reports upward;
//! - [`BottomAgent`]: takes subtasks only from its lead, runs them through the
//!   tool registry, records results on its board, reports, answers status queries, and helps
//!   the other executors of its lead ([`BottomAgent::with_peers`]): a subtask it cannot finish
//!   (its tool is missing, or its retries would run out) it first offers to them, one at a
//!   time, before failing to its lead (which follows a step handed over to its new assignee); a
//!   retried goal step asks one of them for its knowledge; it takes a peer's subtask when idle
//!   and able, and refuses anyone else's request, audited.
//!
//! Conflicts (docs/concepts.md#governance,
//! [`ArbitrationSettings`](agent_state::ArbitrationSettings)): a lead whose step every able
//! executor failed reports a conflict with its power instead of failing the task (`retry` or
//! `abandon`); a lead whose reasoner finds an executor's result short of the step's `acceptance`
//! check disputes it (`redo` or `accept`); a proposer whose plan is vetoed puts it to the vote when
//! the team arbitrates vetoes (`proceed` or `abandon`). The power arbitrates by a weighted vote of
//! the powers holding `arbitrate`, publishes the result on the global board, sends it to the
//! parties, and each party acts on it (the lead places the step again or takes the result, the
//! power fails the task or runs the plan). A report from an agent not party to the conflict, a vote
//! nobody asked for and a ruling from anyone but a power are refused and audited.
//!
//! Goal-driven teams (docs/concepts.md#roles-and-spawning): given a goal without steps, the
//! proposing power asks its reasoner to plan it (steps and the leads to create) and, once the plan
//! is signed, creates the leads through the team's [`Spawner`](agent_core::Spawner). A lead made
//! [`MidAgent::supervising`] (its role enables roles) works each step in a tool loop with the
//! supervisor tools, and an executor [`BottomAgent::spawned`] by a supervisor concludes with
//! `return_results`; the loop (`work.rs`) is part of the agent's saved state, so a pending
//! `speak_to_agent` reply or a wait for workers' results survives a restart.
//!
//! Executor kinds (docs/concepts.md#executor-kinds): an executor whose [`BottomSpec`] has a `kind`
//! and that was given the team's executor ([`BottomAgent::with_runner`], a [`KindRunner`]) runs a
//! goal step (its description as the objective) or a step whose `tool` is the kind as one run of
//! the kind on [`agent_executor::Executor`], at most once across crashes; a blocked run is
//! escalated ([`TaskFailure::Blocked`](agent_state::TaskFailure)), neither retried nor reassigned.
//!
//! Smaller team shapes (docs/concepts.md#layers): a crew's lead ([`MidAgent::leading`]) and a
//! single agent ([`BottomAgent::solo`]) have no powers above them; each takes the team's tasks
//! from `system` itself and keeps them at a desk (`desk.rs`), as a proposing power does without
//! the governance: a goal is planned by its own reasoner, the plan runs unsigned, its steps go
//! out in waves (to the lead's executors, or the agent's own tool loop), the results are judged
//! and the task is closed to `system`. Where the powers would vote, it decides alone: a step no
//! executor can finish fails the task, a result short of its acceptance check goes to another
//! executor. Their reports go to themselves over the bus, so a crash loses none.
//!
//! This crate holds no scheduling and no team assembly: that is `agent-pool`.
//!
//! ```
//! use agent_layers::{route, LeadInfo};
//! use agent_state::{AgentId, PlanStep, StepTarget};
//!
//! let leads = vec![LeadInfo {
//!     id: AgentId::new("mid-docs"),
//!     domain: "docs".into(),
//!     executors: vec![(AgentId::new("bottom-1"), ["write_file".to_owned()].into())],
//! }];
//! let step = PlanStep::scripted("readme", "write README", StepTarget::Domain("docs".into()),
//!     "write_file", serde_json::json!({}));
//! assert_eq!(route(&leads, &step), Some(AgentId::new("mid-docs")));
//! ```

mod bottom;
mod desk;
mod kind;
mod mid;
mod top;
mod work;

#[cfg(test)]
mod tests;

use std::sync::Arc;

use agent_state::AgentId;
use serde::{Deserialize, Serialize};

pub use bottom::{BottomAgent, BottomSpec, PEER_HELP_TIMEOUT_MS, Peers};
pub use kind::KindRunner;
pub use mid::{MAX_FAILURES_BEFORE_DISMISSAL, MidAgent, MidSpec};
pub use top::{PLAN_AUTHORITY, TaskProgress, TopAgent, TopSpec, route, task_progress};
pub use work::{
    MAX_TOOL_CALLS_PER_GOAL_STEP, MAX_TOOL_CALLS_PER_SUBTASK, MESSAGE_RECORD, SPEAK_TIMEOUT_MS,
};

/// What a top power knows about a mid lead: its domain and its executors with their tools.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct LeadInfo {
    /// The lead.
    pub id: AgentId,
    /// Its domain.
    pub domain: String,
    /// Its executors and their tools.
    pub executors: Vec<(AgentId, Arc<[String]>)>,
}

/// Notes a ruling on a conflict the agent is a party to on its own board.
async fn note_ruling(
    ctx: &agent_core::AgentContext,
    ruling: &agent_core::protocol::ArbitrationResult,
) -> Result<(), agent_core::AgentError> {
    ctx.append_own(&format!(
        "- arbitration `{}` by {}: {}",
        ruling.conflict_id, ruling.arbitrator, ruling.resolution
    ))
    .await
    .map(|_| ())
}

/// The agent's answer to what `from` said to it: its reasoner's, or where its work stands if
/// the reasoner fails (a failed answer must not fail the agent).
async fn answer(
    ctx: &agent_core::AgentContext,
    from: &AgentId,
    said: &str,
    context: &str,
) -> String {
    match ctx.reasoner().answer(ctx.persona(), from, said, context).await {
        Ok(reply) => reply,
        Err(error) => {
            tracing::warn!(agent = %ctx.id(), %error, "could not answer; replying with the status");
            if context.is_empty() { "idle".into() } else { context.to_owned() }
        }
    }
}
