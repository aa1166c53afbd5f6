//! OODA agents (docs/concepts.md#ooda-agents): an agent that runs its own loop — observe, decide,
//! act, reflect — on the Strata runtime, emits an event for every phase, talks through an inbox and
//! an outbox routed by the message bus, acts inside the run's sandbox, and may modify its own
//! configuration, prompt, tools, behaviour settings or code at one of four safety levels.
//!
//! The package is `strata-agent-ooda` (`strata-agent-ooda = "0.1"` in `Cargo.toml`); code
//! names it `agent_ooda`.
//!
//! An OODA agent is a Strata agent: [`OodaBehavior`] is an [`AgentBehavior`] the runtime
//! drives like any layer's, with the same lifecycle states, heartbeat, retries, budget and
//! audit. Each turn it runs one full loop ([`Ooda::step`]); a phase that fails fails the turn,
//! which the runtime retries up to the agent's `max_retries`. [`Ooda::run`] runs up to
//! `max_iterations` loops in one call, for a caller driving it directly.
//!
//! - **The loop** ([`OodaAgent`]): the default phases observe the inbox (messages received
//!   since the last step), decide through the agent's [`Reasoner`](agent_core::Reasoner)
//!   (`next_action` over the goal and what its actions returned), act through its tools
//!   (journaled: a call is never repeated across a crash, and `shell` runs in the workspace
//!   sandbox), and reflect (the outcome joins memory and knowledge). Implement [`OodaAgent`]
//!   to replace any phase.
//! - **Guards**: the loop runs inside the guards of every working agent's tool loop
//!   ([`agent_core::work_guard`]): a call that would repeat itself `repeat_limit` times in a
//!   row (the team's `[guards]`, [`Ooda::with_guards`]) is not made, and a lead's subtask
//!   worked on past `[timeouts] subtask_ms` goes no further; either stops the loop with
//!   [`StopReason::Stuck`](agent_state::ooda::StopReason) and its typed reason, audited, and
//!   a lead's subtask is reported failed with it, as an executor's stuck step is.
//! - **Events**: every phase emits an [`OodaEvent`](agent_state::ooda::OodaEvent) (observe, decide, act, reflect, error,
//!   modify_self), stored in the run's audit ([`AuditEvent::Ooda`](agent_core::AuditEvent)) and
//!   streamed to [`Ooda::subscribe`] as it happens.
//! - **Messages**: decide's `send_message` call puts a message in the outbox; the bus routes it
//!   at the end of the step (as a `speak_to_agent`-style request that layer agents answer);
//!   whatever reaches the agent waits in its inbox until the next observe.
//!   Placed under a lead, it takes the lead's subtasks (the step's description as its goal) and
//!   reports the result like any executor.
//! - **Self-modification** ([`agent_state::ooda::Modification`]): decide's
//!   `modify_self` call asks for a change; it applies only if self-modification is enabled and
//!   its level is within the agent's. Level 1 applies as is; level 2 checks the result (the
//!   config against its schema and rules, a `.json` or `.toml` file's syntax); level 3 runs the
//!   agent's `test_command` before and after on a copy of the workspace (read beneath its root,
//!   never through a symlink nor from a masked directory) and drops the change if they fail; level 4 waits, in `waiting_approval`, for a governance decision a human signs.
//!   A change never gives the agent a tool its supervisor does not hold, nor touches the fields
//!   that bound its permissions. Every applied change bumps `state_version` and is recorded with
//!   before and after hashes; [`Ooda::rollback`] goes back to any earlier version (as a new
//!   version). A change is applied in a turn of its own from a recorded intent, so a kill leaves
//!   the old version or completes the new one on resume, never a mix.
//!
//! ```
//! use agent_ooda::{Ooda, ReasonerLoop};
//! use agent_state::{AgentId, Timestamp, ooda::OodaConfig};
//!
//! let mut config = OodaConfig::new("Editor", "make notes.md clearer");
//! config.tools = vec!["read_file".into(), "write_file".into()];
//! let ceiling = ["read_file".to_owned(), "write_file".to_owned()];
//! let ooda = Ooda::new(AgentId::new("ooda-1"), config, ReasonerLoop, &ceiling, Timestamp(0))
//!     .expect("a valid configuration");
//! assert_eq!(ooda.state().state_version, 1);
//! assert_eq!(ooda.state().goal, "make notes.md clearer");
//! ```

mod behavior;
mod copy;
mod modify;
mod ooda;

pub use agent_core::AgentBehavior;
pub use behavior::{OodaBehavior, OodaCommand};
pub use copy::{MAX_COPY_BYTES, MAX_COPY_FILES};
pub use modify::{
    Applied, Change, FileChange, MAX_CODE_BYTES, Pending, SUPERVISED_FIELDS, VersionRecord,
    level_of,
};
pub use ooda::{
    AgentStep, Choice, MAX_HISTORY, MODIFY_SELF, Ooda, OodaAgent, OodaError, Outcome, ReasonerLoop,
    SEND_MESSAGE, StepEnd, View, check_config,
};
