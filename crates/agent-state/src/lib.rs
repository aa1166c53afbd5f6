//! The pure core of Strata: the vocabulary and the rules every other crate shares.
//!
//! The package is `strata-agent-state` (`strata-agent-state = "0.1"` in `Cargo.toml`); code
//! names it `agent_state`.
//!
//! This crate **does no I/O**: it reads no clock, draws no random numbers, touches no file and
//! no network, and has no async code. Time ([`Timestamp`]) and ids ([`MessageId`],
//! [`DecisionId`]) come in as arguments; effects go out as values, such as the
//! [`TransitionRecord`] that [`Lifecycle::apply`] returns for the caller to audit.
//!
//! Key types:
//! - [`Lifecycle`] and [`AgentStatus`]: the state machine (docs/concepts.md#lifecycle), in one
//!   place;
//! - [`AgentConfig`]: an agent's configuration, with [`AgentConfig::validate`];
//! - [`Message`], [`Decision`], [`board_permits`]: the rules the bus, governance and
//!   whiteboard backends enforce;
//! - [`AgentMetrics::performance_score`] and [`RetryPolicy::backoff`]: the numbers.
//! - [`Task`] and [`PlanStep`]: scripted steps (a tool and its arguments) or goal steps (a
//!   description only), [`RoleBook`]: the roles a team may spawn, checked against the §7.1
//!   matrix, and [`AgentResult`]: a worker's structured result, checked against its own calls.
//! - [`RunId`]: the name of a run, with the one rule every backend (directories, NATS) accepts.
//! - [`quote`]: a model's words inside a message (a failure reason), as one short quoted line
//!   without its chat template's markup.
//! - [`canonical_json`], [`hex`], [`sha256_hex`], [`shorten`] and [`shorten_bytes`]: the one
//!   canonical JSON text that hashes cover, hex, and text cut to a bound with `…`.
//!
//! ```
//! use agent_state::{AgentConfig, AgentLayer, AgentStatus, Lifecycle, Timestamp};
//!
//! let config = AgentConfig::new("bottom-1", "Builder", AgentLayer::Bottom).with_supervisor("mid-1");
//! config.validate()?;
//!
//! let mut life = Lifecycle::new(config.id.clone());
//! let record = life.apply(AgentStatus::Idle, "initialization complete", Timestamp(1_000))?;
//! assert_eq!((record.from, record.to), (AgentStatus::Initializing, AgentStatus::Idle));
//!
//! // idle -> terminated is not an edge: refused, and the status is unchanged.
//! assert!(life.apply(AgentStatus::Terminated, "skip shutdown", Timestamp(1_001)).is_err());
//! assert_eq!(life.status(), AgentStatus::Idle);
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

mod board;
mod command;
mod config;
mod decision;
mod encoding;
pub mod evolution;
mod guard;
mod ids;
mod layer;
pub mod mcp;
mod message;
mod metrics;
pub mod ooda;
mod quote;
mod result;
mod retry;
mod role;
mod run;
mod run_id;
mod status;
mod storage;
mod task;
mod timeouts;
mod version;

#[cfg(test)]
mod tests;

pub use board::{
    Actor, BoardAccess, BoardId, BoardSnapshot, GLOBAL_BOARD, Principal, board_permits,
};
pub use command::{CommandOrigin, CommandOutcome, OperatorCommand};
pub use config::{
    AgentConfig, ConfigError, ConfigErrorKind, DEFAULT_MAX_RETRIES, DEFAULT_TIMEOUT_MS,
    MAX_AGENT_ID_LEN, check_agent_id, find_control, is_control,
};
pub use decision::{
    ArbitrationSettings, BallotChoice, Decision, DecisionStatus, HumanApproval, ProposeError,
    SignError, SignOutcome, Signature, Tally, TallyError, Veto, Vote, tally,
};
pub use encoding::{canonical_json, hex, sha256_hex, shorten, shorten_bytes};
pub use guard::{
    Bounce, DEFAULT_BOUNCE_LIMIT, DEFAULT_IDLE_HEARTBEATS, DEFAULT_REPEAT_LIMIT,
    DEFAULT_WAIT_HEARTBEATS, GuardError, GuardSettings, Hop, MAX_LOOP_PERIOD, OnStuck, PingPong,
    ProgressWatch, Repetition, WaitEdge, WaitGraph, call_fingerprint, detect_loop, repeated_tail,
};
pub use ids::{
    AgentId, DecisionId, HUMAN_PREFIX, HumanNameError, MAX_HUMAN_NAME_LEN, MessageId, Timestamp,
    check_human_name,
};
pub use layer::{Action, AgentLayer, Capability};
pub use message::{Address, BROADCAST, Message, MessageKind, SYSTEM};
pub use metrics::{
    AgentMetrics, RELIABILITY_WEIGHT, RESPONSIVENESS_CAP_MS, RESPONSIVENESS_WEIGHT, SUCCESS_WEIGHT,
};
pub use quote::{QUOTE_CHARS, TEMPLATE_TOKENS, quote, strip_template};
pub use result::{AgentResult, Artifact, ChangeType, ResultStatus, same_path};
pub use retry::{
    ErrorClass, MAX_RETRY_WAIT_BEATS, RetryPlan, RetryPolicy, plan_retry, retry_wait_beats,
};
pub use role::{DEFAULT_MAX_SPAWN_DEPTH, Role, RoleBook, RoleError, check_role_name};
pub use run::{
    AfterFailure, FailureKind, RunEvent, RunFailure, RunLifecycle, RunState, RunTransition,
    RunTransitionError,
};
pub use run_id::{MAX_RUN_ID_LEN, RUN_ID_RULE, RunId, RunIdError, check_run_id};
pub use status::{AgentStatus, Lifecycle, TransitionError, TransitionRecord, can_transition};
pub use storage::BackendError;
pub use task::{
    Assignment, LeadRequest, PlanStep, ProgressReport, ProgressStatus, StepTarget, Subtask,
    SubtaskResult, Task, TaskFailure, TaskOutcome, WorkPackage,
};
pub use timeouts::{
    DEFAULT_REASONING_MS, DEFAULT_SILENCE_MS, DEFAULT_SUBTASK_MS, DEFAULT_TASK_MS, DEFAULT_TOOL_MS,
    DEFAULT_TURN_MS, Limit, LimitError, LimitPhase, MAX_LIMIT_MS, SOFT_LIMIT_PERCENT,
    SoftLimitError, Timeouts, check_limit, check_soft, default_soft_ms, limit_phase, soft_limit,
};
pub use version::{DecodeError, EncodeError, Stored, Versioned, decode, encode};
