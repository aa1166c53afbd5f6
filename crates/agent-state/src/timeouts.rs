//! The five time limits of a team (its `[timeouts]`): how long one tool call, one reasoning
//! call, one heartbeat turn, one subtask and one task may take, with their defaults and the
//! check that refuses a zero or absurd value. Pure data: the runtime measures them on its
//! clock and reports a limit hit as [`TaskFailure::TimedOut`](crate::TaskFailure) (a subtask or
//! a task) or an error of the call (a tool call, a reasoning call, a turn).

use std::fmt;

use serde::{Deserialize, Serialize};
use thiserror::Error;

use crate::DEFAULT_TIMEOUT_MS;

/// Default longest tool call: 10 minutes (a build or a test run through `shell`; a `shell`
/// call asking for more is cut at this limit).
pub const DEFAULT_TOOL_MS: u64 = 600_000;
/// Default longest reasoning call (one decision of the reasoner, its provider's retries
/// included): 2 minutes.
pub const DEFAULT_REASONING_MS: u64 = 120_000;
/// Default longest heartbeat turn: seed 000's task timeout, 30 s (an agent's own
/// `timeout_ms` overrides it).
pub const DEFAULT_TURN_MS: u64 = DEFAULT_TIMEOUT_MS;
/// Default longest subtask (an executor's whole tool loop, across heartbeats): 30 minutes.
pub const DEFAULT_SUBTASK_MS: u64 = 1_800_000;
/// Default longest task, from its submission: 2 hours.
pub const DEFAULT_TASK_MS: u64 = 7_200_000;
/// The longest any limit may be: 7 days. A larger value is refused as a mistake (a limit
/// nobody would wait for is no limit).
pub const MAX_LIMIT_MS: u64 = 7 * 24 * 3_600_000;

/// Which of the five limits.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Limit {
    /// One tool call.
    Tool,
    /// One reasoning call.
    Reasoning,
    /// One heartbeat turn of an agent.
    Turn,
    /// One subtask: an executor's tool loop from its start, across heartbeats.
    Subtask,
    /// One task, from its submission.
    Task,
}

impl Limit {
    /// All five, in the order of the `[timeouts]` table.
    pub const ALL: [Limit; 5] =
        [Limit::Tool, Limit::Reasoning, Limit::Turn, Limit::Subtask, Limit::Task];

    /// Its key in a team file's `[timeouts]` table, such as `tool_ms`.
    pub fn key(self) -> &'static str {
        match self {
            Limit::Tool => "tool_ms",
            Limit::Reasoning => "reasoning_ms",
            Limit::Turn => "turn_ms",
            Limit::Subtask => "subtask_ms",
            Limit::Task => "task_ms",
        }
    }

    /// Its default, in milliseconds.
    pub fn default_ms(self) -> u64 {
        match self {
            Limit::Tool => DEFAULT_TOOL_MS,
            Limit::Reasoning => DEFAULT_REASONING_MS,
            Limit::Turn => DEFAULT_TURN_MS,
            Limit::Subtask => DEFAULT_SUBTASK_MS,
            Limit::Task => DEFAULT_TASK_MS,
        }
    }
}

impl fmt::Display for Limit {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Limit::Tool => "tool call",
            Limit::Reasoning => "reasoning call",
            Limit::Turn => "heartbeat turn",
            Limit::Subtask => "subtask",
            Limit::Task => "task",
        })
    }
}

/// A limit that is zero or over [`MAX_LIMIT_MS`].
#[derive(Clone, Debug, PartialEq, Eq, Error)]
#[error(
    "`{key}` = {value} is not a usable time limit; give a number of milliseconds from 1 to {max} \
     (7 days), such as {default}",
    key = .limit.key(),
    max = MAX_LIMIT_MS,
    default = .limit.default_ms()
)]
pub struct LimitError {
    /// Which limit.
    pub limit: Limit,
    /// The value refused.
    pub value: u64,
}

/// A team's time limits, in milliseconds (see [`Limit`] for what each bounds).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct Timeouts {
    /// Longest tool call ([`DEFAULT_TOOL_MS`]).
    pub tool_ms: u64,
    /// Longest reasoning call ([`DEFAULT_REASONING_MS`]).
    pub reasoning_ms: u64,
    /// Longest heartbeat turn of an agent without its own `timeout_ms` ([`DEFAULT_TURN_MS`]).
    pub turn_ms: u64,
    /// Longest subtask, from its start ([`DEFAULT_SUBTASK_MS`]).
    pub subtask_ms: u64,
    /// Longest task, from its submission ([`DEFAULT_TASK_MS`]).
    pub task_ms: u64,
}

impl Default for Timeouts {
    fn default() -> Self {
        Self {
            tool_ms: DEFAULT_TOOL_MS,
            reasoning_ms: DEFAULT_REASONING_MS,
            turn_ms: DEFAULT_TURN_MS,
            subtask_ms: DEFAULT_SUBTASK_MS,
            task_ms: DEFAULT_TASK_MS,
        }
    }
}

impl Timeouts {
    /// The value of `limit`.
    pub fn get(&self, limit: Limit) -> u64 {
        match limit {
            Limit::Tool => self.tool_ms,
            Limit::Reasoning => self.reasoning_ms,
            Limit::Turn => self.turn_ms,
            Limit::Subtask => self.subtask_ms,
            Limit::Task => self.task_ms,
        }
    }

    /// Sets `limit` to `ms` after [`check_limit`]; unchanged on error.
    pub fn set(&mut self, limit: Limit, ms: u64) -> Result<(), LimitError> {
        check_limit(limit, ms)?;
        let slot = match limit {
            Limit::Tool => &mut self.tool_ms,
            Limit::Reasoning => &mut self.reasoning_ms,
            Limit::Turn => &mut self.turn_ms,
            Limit::Subtask => &mut self.subtask_ms,
            Limit::Task => &mut self.task_ms,
        };
        *slot = ms;
        Ok(())
    }

    /// Checks every limit: each from 1 ms to [`MAX_LIMIT_MS`]; the first one out of range is
    /// the error.
    pub fn check(&self) -> Result<(), LimitError> {
        Limit::ALL.into_iter().try_for_each(|limit| check_limit(limit, self.get(limit)))
    }
}

/// Checks one limit's value: from 1 ms to [`MAX_LIMIT_MS`].
pub fn check_limit(limit: Limit, ms: u64) -> Result<(), LimitError> {
    if ms == 0 || ms > MAX_LIMIT_MS { Err(LimitError { limit, value: ms }) } else { Ok(()) }
}
