//! The executor's run lifecycle and failure classes (docs/concepts.md#executor-kinds), as
//! pure rules.
//!
//! A run of one agent kind on one objective goes
//!
//! ```text
//! pending → running → completed
//!                  → blocked              (missing input: escalated, never retried)
//!                  → failed → running     (a transient failure with a retry left)
//!                  → failed               (permanent, or no retry left)
//! ```
//!
//! [`RunLifecycle`] applies that table and the [`RetryPolicy`]: [`RunLifecycle::fail`] decides
//! from the failure's [`FailureKind`] whether a retry is due and after what delay, and
//! [`RunLifecycle::retry`] is refused unless it was. Every change returns a [`RunTransition`]
//! for the caller to record; a refused change leaves the run as it was.
//!
//! [`FailureKind`] is the one classification of failures Strata has: the executor's kinds and
//! the LLM providers' errors both map to it, and [`FailureKind::class`] says which retry.

use std::fmt;

use serde::{Deserialize, Serialize};
use thiserror::Error;

use crate::{ErrorClass, RetryPolicy, RunId, Timestamp};

/// Where a run is.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RunState {
    /// Waiting to start.
    Pending,
    /// Executing.
    Running,
    /// Finished with a result.
    Completed,
    /// Cannot proceed without something it was not given (missing input).
    Blocked,
    /// An error occurred; retried only if the failure was transient and a retry is left.
    Failed,
}

impl RunState {
    /// Every state.
    pub const ALL: [RunState; 5] = [
        RunState::Pending,
        RunState::Running,
        RunState::Completed,
        RunState::Blocked,
        RunState::Failed,
    ];

    /// The states this one may move to: the only place the table is written.
    pub const fn successors(self) -> &'static [RunState] {
        match self {
            RunState::Pending => &[RunState::Running],
            RunState::Running => &[RunState::Completed, RunState::Blocked, RunState::Failed],
            RunState::Failed => &[RunState::Running],
            RunState::Completed | RunState::Blocked => &[],
        }
    }

    /// Whether `self → to` is an edge of the table.
    pub fn can_move_to(self, to: RunState) -> bool {
        self.successors().contains(&to)
    }

    /// The name used on the wire and in the CLI (`pending`, `running`, ...).
    pub const fn as_str(self) -> &'static str {
        match self {
            RunState::Pending => "pending",
            RunState::Running => "running",
            RunState::Completed => "completed",
            RunState::Blocked => "blocked",
            RunState::Failed => "failed",
        }
    }
}

impl fmt::Display for RunState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// What kind of failure ended an attempt. [`class`](FailureKind::class) says whether it is
/// worth retrying (network errors, rate limits, timeouts and 5xx are transient;
/// invalid input, permission errors and other 4xx are permanent).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum FailureKind {
    /// Could not connect, or the connection broke. Transient.
    Network,
    /// Rate limited (HTTP 429). Transient.
    RateLimited,
    /// An operation timed out (a request, a call). Transient.
    Timeout,
    /// The other side failed (HTTP 5xx, overloaded). Transient.
    Server,
    /// The request or its input is wrong (empty objective, malformed definition). Permanent.
    InvalidInput,
    /// Not allowed: a credential missing or refused (401, 403), a host outside the allow-list.
    /// Permanent.
    Permission,
    /// Refused by the other side for another reason (404 and the other 4xx). Permanent.
    Client,
    /// The answer could not be read. Permanent.
    Malformed,
    /// Something the run needs was not given: the run is blocked and escalated, not retried.
    MissingInput,
    /// The handler itself failed (it panicked, or an engine broke). Permanent.
    Internal,
    /// The run's hard timeout passed: it was cancelled. Permanent.
    HardTimeout,
    /// The run was cancelled by its caller. Permanent.
    Cancelled,
}

impl FailureKind {
    /// Whether retrying may help.
    pub const fn class(self) -> ErrorClass {
        match self {
            FailureKind::Network
            | FailureKind::RateLimited
            | FailureKind::Timeout
            | FailureKind::Server => ErrorClass::Transient,
            FailureKind::InvalidInput
            | FailureKind::Permission
            | FailureKind::Client
            | FailureKind::Malformed
            | FailureKind::MissingInput
            | FailureKind::Internal
            | FailureKind::HardTimeout
            | FailureKind::Cancelled => ErrorClass::Permanent,
        }
    }

    /// The class of an HTTP status that is an error (`None` for 1xx–3xx): 408 a timeout, 429 a
    /// rate limit, 401 and 403 permission, other 4xx the client's fault, 5xx the server's.
    pub const fn from_http_status(status: u16) -> Option<FailureKind> {
        match status {
            408 => Some(FailureKind::Timeout),
            429 => Some(FailureKind::RateLimited),
            401 | 403 => Some(FailureKind::Permission),
            400..=499 => Some(FailureKind::Client),
            500..=599 => Some(FailureKind::Server),
            _ => None,
        }
    }

    /// The name used on the wire (`network`, `rate_limited`, ...).
    pub const fn as_str(self) -> &'static str {
        match self {
            FailureKind::Network => "network",
            FailureKind::RateLimited => "rate_limited",
            FailureKind::Timeout => "timeout",
            FailureKind::Server => "server",
            FailureKind::InvalidInput => "invalid_input",
            FailureKind::Permission => "permission",
            FailureKind::Client => "client",
            FailureKind::Malformed => "malformed",
            FailureKind::MissingInput => "missing_input",
            FailureKind::Internal => "internal",
            FailureKind::HardTimeout => "hard_timeout",
            FailureKind::Cancelled => "cancelled",
        }
    }
}

impl fmt::Display for FailureKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Why an attempt failed: its class and the reason in words.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, Error)]
#[error("{kind}: {reason}")]
pub struct RunFailure {
    /// The class of failure.
    pub kind: FailureKind,
    /// What went wrong, for the user.
    pub reason: String,
}

impl RunFailure {
    /// A failure of `kind`.
    pub fn new(kind: FailureKind, reason: impl Into<String>) -> Self {
        Self { kind, reason: reason.into() }
    }
}

/// One change of a run's state, for the caller to record.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct RunTransition {
    /// The state before.
    pub from: RunState,
    /// The state after.
    pub to: RunState,
    /// When.
    pub at: Timestamp,
    /// Why, in words.
    pub reason: String,
}

/// A refused change; the run is unchanged.
#[derive(Clone, Debug, PartialEq, Eq, Error)]
pub enum RunTransitionError {
    /// Not an edge of the table.
    #[error("a run cannot go from {from} to {to} (from {from} it may go to: {allowed})")]
    Illegal {
        /// The state.
        from: RunState,
        /// The state asked for.
        to: RunState,
        /// The states it may go to, in words.
        allowed: String,
    },
    /// `failed → running` without a retry granted by [`RunLifecycle::fail`].
    #[error("the run failed for good ({reason}); it has no retry left to start again")]
    NoRetry {
        /// Why it failed.
        reason: String,
    },
}

/// What a failure leads to.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum AfterFailure {
    /// Retry after `delay_ms` (the policy's backoff for this retry).
    Retry {
        /// The retry's number, 1 for the first.
        retry: u32,
        /// The wait before it, in milliseconds.
        delay_ms: u64,
    },
    /// Failed for good.
    Final,
}

/// One run's lifecycle: its state, its attempts and the retry it was granted.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct RunLifecycle {
    state: RunState,
    attempts: u32,
    retries: u32,
    retry_granted: bool,
    last_failure: Option<RunFailure>,
}

impl Default for RunLifecycle {
    fn default() -> Self {
        Self::new()
    }
}

impl RunLifecycle {
    /// A pending run.
    pub const fn new() -> Self {
        Self {
            state: RunState::Pending,
            attempts: 0,
            retries: 0,
            retry_granted: false,
            last_failure: None,
        }
    }

    /// The state.
    pub const fn state(&self) -> RunState {
        self.state
    }

    /// Attempts started (the first one and every retry).
    pub const fn attempts(&self) -> u32 {
        self.attempts
    }

    /// Retries started.
    pub const fn retries(&self) -> u32 {
        self.retries
    }

    /// The last failure, if an attempt failed.
    pub fn last_failure(&self) -> Option<&RunFailure> {
        self.last_failure.as_ref()
    }

    /// Whether the run is over: completed, blocked, or failed with no retry granted.
    pub const fn is_finished(&self) -> bool {
        match self.state {
            RunState::Completed | RunState::Blocked => true,
            RunState::Failed => !self.retry_granted,
            RunState::Pending | RunState::Running => false,
        }
    }

    fn check(&self, to: RunState) -> Result<(), RunTransitionError> {
        if self.state.can_move_to(to) {
            return Ok(());
        }
        let allowed = self.state.successors();
        let allowed = if allowed.is_empty() {
            "nothing, it is final".to_owned()
        } else {
            allowed.iter().map(|s| s.as_str()).collect::<Vec<_>>().join(", ")
        };
        Err(RunTransitionError::Illegal { from: self.state, to, allowed })
    }

    fn moved(&mut self, to: RunState, at: Timestamp, reason: String) -> RunTransition {
        let from = self.state;
        self.state = to;
        RunTransition { from, to, at, reason }
    }

    /// `pending → running`: the first attempt starts.
    pub fn start(&mut self, at: Timestamp) -> Result<RunTransition, RunTransitionError> {
        self.check(RunState::Running)?;
        if self.state == RunState::Failed {
            return Err(RunTransitionError::Illegal {
                from: RunState::Failed,
                to: RunState::Running,
                allowed: "running, through a retry only".into(),
            });
        }
        self.attempts += 1;
        Ok(self.moved(RunState::Running, at, "started".into()))
    }

    /// `running → completed`.
    pub fn complete(&mut self, at: Timestamp) -> Result<RunTransition, RunTransitionError> {
        self.check(RunState::Completed)?;
        Ok(self.moved(RunState::Completed, at, "completed".into()))
    }

    /// `running → blocked`: the run cannot go on without `missing`.
    pub fn block(
        &mut self,
        at: Timestamp,
        missing: &str,
    ) -> Result<RunTransition, RunTransitionError> {
        self.check(RunState::Blocked)?;
        self.last_failure = Some(RunFailure::new(FailureKind::MissingInput, missing));
        Ok(self.moved(RunState::Blocked, at, format!("blocked: {missing}")))
    }

    /// `running → failed` with `failure`, and whether `policy` grants a retry: only a transient
    /// failure with retries left does. A [`FailureKind::MissingInput`] is not a failure: use
    /// [`block`](Self::block); here it fails for good like any permanent failure.
    pub fn fail(
        &mut self,
        at: Timestamp,
        failure: RunFailure,
        policy: &RetryPolicy,
    ) -> Result<(RunTransition, AfterFailure), RunTransitionError> {
        self.check(RunState::Failed)?;
        let retry = policy.should_retry(failure.kind.class(), self.retries);
        self.retry_granted = retry;
        let reason = format!("failed: {failure}");
        self.last_failure = Some(failure);
        let transition = self.moved(RunState::Failed, at, reason);
        let after = if retry {
            let next = self.retries + 1;
            let delay_ms = u64::try_from(policy.backoff(next).as_millis()).unwrap_or(u64::MAX);
            AfterFailure::Retry { retry: next, delay_ms }
        } else {
            AfterFailure::Final
        };
        Ok((transition, after))
    }

    /// `failed → running`: the retry [`fail`](Self::fail) granted starts.
    pub fn retry(&mut self, at: Timestamp) -> Result<RunTransition, RunTransitionError> {
        self.check(RunState::Running)?;
        if !self.retry_granted {
            let reason = self
                .last_failure
                .as_ref()
                .map_or_else(|| "no failure recorded".to_owned(), ToString::to_string);
            return Err(RunTransitionError::NoRetry { reason });
        }
        self.retry_granted = false;
        self.retries += 1;
        self.attempts += 1;
        Ok(self.moved(RunState::Running, at, format!("retry {}", self.retries)))
    }

    /// The run is abandoned with `failure` (a hard timeout or a cancel): a running run fails
    /// for good, a failed one loses the retry it was granted. A pending run has not started
    /// and a completed or blocked one is final: refused.
    pub fn abandon(
        &mut self,
        at: Timestamp,
        failure: RunFailure,
    ) -> Result<Option<RunTransition>, RunTransitionError> {
        match self.state {
            RunState::Failed => {
                self.retry_granted = false;
                self.last_failure = Some(failure);
                Ok(None)
            }
            _ => {
                self.check(RunState::Failed)?;
                let reason = format!("failed: {failure}");
                self.last_failure = Some(failure);
                Ok(Some(self.moved(RunState::Failed, at, reason)))
            }
        }
    }
}

/// Something that happened in a run.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "event", rename_all = "snake_case")]
pub enum RunEvent {
    /// The run changed state.
    Transition {
        /// The run.
        run_id: RunId,
        /// Its kind.
        kind: String,
        /// The change.
        transition: RunTransition,
    },
    /// The handler reported progress.
    Progress {
        /// The run.
        run_id: RunId,
        /// Its kind.
        kind: String,
        /// 0..=100.
        percent: u8,
        /// What it is doing.
        message: String,
    },
    /// The handler reported an event of its own (a source fetched, a file written).
    Note {
        /// The run.
        run_id: RunId,
        /// Its kind.
        kind: String,
        /// The event's name.
        name: String,
        /// Its data.
        data: serde_json::Value,
    },
    /// The run passed its soft timeout and goes on.
    SoftTimeout {
        /// The run.
        run_id: RunId,
        /// Its kind.
        kind: String,
        /// The soft timeout, in milliseconds.
        after_ms: u64,
    },
    /// An attempt failed transiently; the next starts after `delay_ms`.
    Retrying {
        /// The run.
        run_id: RunId,
        /// Its kind.
        kind: String,
        /// The retry's number, 1 for the first.
        retry: u32,
        /// The wait before it.
        delay_ms: u64,
        /// Why the attempt failed.
        failure: RunFailure,
    },
}

impl RunEvent {
    /// The run it is about.
    pub fn run_id(&self) -> &RunId {
        match self {
            RunEvent::Transition { run_id, .. }
            | RunEvent::Progress { run_id, .. }
            | RunEvent::Note { run_id, .. }
            | RunEvent::SoftTimeout { run_id, .. }
            | RunEvent::Retrying { run_id, .. } => run_id,
        }
    }

    /// Whether it is a progress update, which may be dropped for a slow consumer.
    pub fn is_progress(&self) -> bool {
        matches!(self, RunEvent::Progress { .. })
    }
}
