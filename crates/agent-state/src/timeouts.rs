//! The six time limits of a team (its `[timeouts]`): how long one tool call, one reasoning
//! call, one heartbeat turn, one subtask and one task may take, and how long a reasoning call
//! may go without producing anything (its silence), with their defaults and the check that
//! refuses a zero or absurd value. Pure data: the runtime measures them on its clock and
//! reports a limit hit as [`TaskFailure::TimedOut`](crate::TaskFailure) (a subtask or a task)
//! or an error of the call (a tool call, a reasoning call, a turn).
//!
//! **Silence and totals.** A model call on a slow machine is not a 30 s affair. Measured on a
//! 2-core machine under load (a debug build, as `cargo run` and the tests have it), the
//! embedded Gemma 3 270M read a 763-token planning prompt at 77 tokens a second and wrote at
//! 7.8 tokens a second: 20 s for an 80-token plan, and about 5 minutes for a planning answer of
//! the full 2 048 tokens after a 4 096-token prompt; a llama.cpp server there reads about 100
//! tokens a second (10 s per 1 000). What tells a working call from a wedged one is whether it
//! still produces anything: a reasoning call with no token (for the embedded model: no token
//! and no 512-token prompt batch read, 7 s apart at most at those rates) for `silence_ms` is
//! cut, while one still producing runs on to its total, `reasoning_ms`, and its turn to
//! `turn_ms`. The totals are backstops sized from those rates (see [`DEFAULT_SILENCE_MS`],
//! [`DEFAULT_REASONING_MS`], [`DEFAULT_TURN_MS`]); what a run may spend is the budget's to
//! bound (`[budget]`).
//!
//! **Soft limits.** A tool call, a heartbeat turn and a task also have a soft limit
//! (`tool_soft_ms`, `turn_soft_ms`, `task_soft_ms`), as the executor's runs have:
//! past it the work goes on, but the runtime audits it (`SoftTimeout`) and tells the
//! supervisor; the hard limit is unchanged. Left out, a soft limit is half its hard limit
//! ([`SOFT_LIMIT_PERCENT`]); one that is not below its hard limit is refused
//! ([`SoftLimitError`]). [`soft_limit`] and [`limit_phase`] are the pure decisions.

use std::fmt;

use serde::{Deserialize, Serialize};
use thiserror::Error;

/// Default longest tool call: 10 minutes (a build or a test run through `shell`; a `shell`
/// call asking for more is cut at this limit).
pub const DEFAULT_TOOL_MS: u64 = 600_000;
/// Default longest reasoning call (one decision of the reasoner, its provider's retries
/// included) while it keeps producing tokens: 20 minutes. A backstop, not a guess at a call's
/// length: a call that stops producing is cut by [`DEFAULT_SILENCE_MS`] long before. Sized from
/// the rates measured for the embedded model on 2 cores (see the module docs): a planning
/// answer of the full 2 048 tokens after a 4 096-token prompt takes
/// 4 096 / 77 + 2 048 / 7.8 ≈ 315 s, so 20 minutes hold nearly four such attempts.
pub const DEFAULT_REASONING_MS: u64 = 1_200_000;
/// Default longest silence of a reasoning call: 2 minutes without a token (for the embedded
/// model: without a token or a batch of the prompt read) and the call is cut, as a transient
/// timeout. The longest silence of a working call is before its first token, while its server
/// reads the prompt: at 100 tokens a second (a llama.cpp server on 2 cores) 2 minutes cover a
/// 12 000-token prompt, at the 77 measured for the embedded model 9 000; the embedded model
/// reports each 512-token batch of its prompt, so it is silent 7 s at most while it works.
pub const DEFAULT_SILENCE_MS: u64 = 120_000;
/// Default longest heartbeat turn: 30 minutes (an agent's own `timeout_ms` overrides it). A
/// backstop for a turn that keeps working: one turn may hold a planning call and its repair,
/// each cut when silent for [`DEFAULT_SILENCE_MS`] and bounded by [`DEFAULT_REASONING_MS`].
/// The agents' 30 s ([`DEFAULT_TIMEOUT_MS`](crate::DEFAULT_TIMEOUT_MS)) stays the default of
/// an agent configured outside a team file.
pub const DEFAULT_TURN_MS: u64 = 1_800_000;
/// Default longest subtask (an executor's whole tool loop, across heartbeats): 30 minutes.
pub const DEFAULT_SUBTASK_MS: u64 = 1_800_000;
/// Default longest task, from its submission: 2 hours.
pub const DEFAULT_TASK_MS: u64 = 7_200_000;
/// The longest any limit may be: 7 days. A larger value is refused as a mistake (a limit
/// nobody would wait for is no limit).
pub const MAX_LIMIT_MS: u64 = 7 * 24 * 3_600_000;

/// A soft limit left out is this share of its hard limit, in percent: half.
pub const SOFT_LIMIT_PERCENT: u64 = 50;

/// Which of the six limits.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Limit {
    /// One tool call.
    Tool,
    /// One reasoning call.
    Reasoning,
    /// The longest a reasoning call may go without producing anything (a token, a prompt batch).
    Silence,
    /// One heartbeat turn of an agent.
    Turn,
    /// One subtask: an executor's tool loop from its start, across heartbeats.
    Subtask,
    /// One task, from its submission.
    Task,
}

impl Limit {
    /// All six, in the order of the `[timeouts]` table.
    pub const ALL: [Limit; 6] =
        [Limit::Tool, Limit::Reasoning, Limit::Silence, Limit::Turn, Limit::Subtask, Limit::Task];

    /// Its key in a team file's `[timeouts]` table, such as `tool_ms`.
    pub fn key(self) -> &'static str {
        match self {
            Limit::Tool => "tool_ms",
            Limit::Reasoning => "reasoning_ms",
            Limit::Silence => "silence_ms",
            Limit::Turn => "turn_ms",
            Limit::Subtask => "subtask_ms",
            Limit::Task => "task_ms",
        }
    }

    /// Whether it has a soft limit: a tool call, a heartbeat turn and a task do.
    pub fn has_soft(self) -> bool {
        matches!(self, Limit::Tool | Limit::Turn | Limit::Task)
    }

    /// The key of its soft limit in a team file's `[timeouts]` table, such as `tool_soft_ms`;
    /// `None` for a limit without one.
    pub fn soft_key(self) -> Option<&'static str> {
        match self {
            Limit::Tool => Some("tool_soft_ms"),
            Limit::Turn => Some("turn_soft_ms"),
            Limit::Task => Some("task_soft_ms"),
            Limit::Reasoning | Limit::Silence | Limit::Subtask => None,
        }
    }

    /// Its default, in milliseconds.
    pub fn default_ms(self) -> u64 {
        match self {
            Limit::Tool => DEFAULT_TOOL_MS,
            Limit::Reasoning => DEFAULT_REASONING_MS,
            Limit::Silence => DEFAULT_SILENCE_MS,
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
            Limit::Silence => "reasoning call's silence",
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

/// A soft limit that cannot work: zero, not below its hard limit, or given for a limit
/// without one.
#[derive(Clone, Debug, PartialEq, Eq, Error)]
pub enum SoftLimitError {
    /// Not from 1 ms to below the hard limit.
    #[error(
        "`{soft_key}` = {value} must be below `{hard_key}` ({hard} ms) and at least 1; a soft \
         limit is when the supervisor is told that the work is slow (leave it out for half \
         the hard limit, {half})",
        soft_key = .limit.soft_key().unwrap_or("soft limit"),
        hard_key = .limit.key(),
        half = default_soft_ms(*.hard).unwrap_or(0)
    )]
    NotBelowHard {
        /// Which limit.
        limit: Limit,
        /// The soft value refused.
        value: u64,
        /// Its hard limit.
        hard: u64,
    },
    /// The limit has no soft limit.
    #[error("the {limit} limit has no soft limit")]
    NoSoftLimit {
        /// Which limit.
        limit: Limit,
    },
}

/// The soft limit of `hard_ms` when none is given: [`SOFT_LIMIT_PERCENT`] of it, `None` when
/// that is under 1 ms.
pub fn default_soft_ms(hard_ms: u64) -> Option<u64> {
    let soft = u64::try_from(u128::from(hard_ms) * u128::from(SOFT_LIMIT_PERCENT) / 100)
        .unwrap_or(u64::MAX);
    (soft >= 1 && soft < hard_ms).then_some(soft)
}

/// The soft limit in force for a hard limit of `hard_ms` and the soft value given, if any: the
/// given one when it is from 1 ms to below the hard limit, else (none given, or one that
/// does not fit this hard limit, such as the team's `turn_soft_ms` for an agent with a
/// shorter own `timeout_ms`) the default, [`default_soft_ms`].
pub fn soft_limit(hard_ms: u64, given: Option<u64>) -> Option<u64> {
    match given {
        Some(soft) if soft >= 1 && soft < hard_ms => Some(soft),
        _ => default_soft_ms(hard_ms),
    }
}

/// Where a piece of work stands against its limits after `elapsed_ms`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum LimitPhase {
    /// Under the soft limit (or no soft limit, under the hard one).
    Within,
    /// At or past the soft limit, under the hard one: tell the supervisor, go on.
    Soft,
    /// At or past the hard limit: stop.
    Hard,
}

/// Which limits `elapsed_ms` has reached: the hard one (`hard_ms`) wins over the soft one.
pub fn limit_phase(elapsed_ms: u64, soft_ms: Option<u64>, hard_ms: u64) -> LimitPhase {
    if elapsed_ms >= hard_ms {
        LimitPhase::Hard
    } else if soft_ms.is_some_and(|soft| elapsed_ms >= soft) {
        LimitPhase::Soft
    } else {
        LimitPhase::Within
    }
}

/// A team's time limits, in milliseconds (see [`Limit`] for what each bounds).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct Timeouts {
    /// Longest tool call ([`DEFAULT_TOOL_MS`]).
    pub tool_ms: u64,
    /// Longest reasoning call ([`DEFAULT_REASONING_MS`]).
    pub reasoning_ms: u64,
    /// Longest a reasoning call may go without producing anything ([`DEFAULT_SILENCE_MS`]).
    pub silence_ms: u64,
    /// Longest heartbeat turn of an agent without its own `timeout_ms` ([`DEFAULT_TURN_MS`]).
    pub turn_ms: u64,
    /// Longest subtask, from its start ([`DEFAULT_SUBTASK_MS`]).
    pub subtask_ms: u64,
    /// Longest task, from its submission ([`DEFAULT_TASK_MS`]).
    pub task_ms: u64,
    /// Soft limit of a tool call: when its agent's supervisor is told the call is slow
    /// (`None`: half of `tool_ms`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tool_soft_ms: Option<u64>,
    /// Soft limit of a heartbeat turn (`None`, or not below an agent's own `timeout_ms`:
    /// half of the agent's turn limit).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub turn_soft_ms: Option<u64>,
    /// Soft limit of a task, from its submission: when `system` (the run's output) is told
    /// (`None`: half of `task_ms`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub task_soft_ms: Option<u64>,
}

impl Default for Timeouts {
    fn default() -> Self {
        Self {
            tool_ms: DEFAULT_TOOL_MS,
            reasoning_ms: DEFAULT_REASONING_MS,
            silence_ms: DEFAULT_SILENCE_MS,
            turn_ms: DEFAULT_TURN_MS,
            subtask_ms: DEFAULT_SUBTASK_MS,
            task_ms: DEFAULT_TASK_MS,
            tool_soft_ms: None,
            turn_soft_ms: None,
            task_soft_ms: None,
        }
    }
}

impl Timeouts {
    /// The value of `limit`.
    pub fn get(&self, limit: Limit) -> u64 {
        match limit {
            Limit::Tool => self.tool_ms,
            Limit::Reasoning => self.reasoning_ms,
            Limit::Silence => self.silence_ms,
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
            Limit::Silence => &mut self.silence_ms,
            Limit::Turn => &mut self.turn_ms,
            Limit::Subtask => &mut self.subtask_ms,
            Limit::Task => &mut self.task_ms,
        };
        *slot = ms;
        Ok(())
    }

    /// Checks every limit: each from 1 ms to [`MAX_LIMIT_MS`]; the first one out of range is
    /// the error. (The soft limits: [`check_soft`](Self::check_soft).)
    pub fn check(&self) -> Result<(), LimitError> {
        Limit::ALL.into_iter().try_for_each(|limit| check_limit(limit, self.get(limit)))
    }

    /// The soft value given for `limit`, if any (`None` too for a limit without one).
    pub fn soft_given(&self, limit: Limit) -> Option<u64> {
        match limit {
            Limit::Tool => self.tool_soft_ms,
            Limit::Turn => self.turn_soft_ms,
            Limit::Task => self.task_soft_ms,
            Limit::Reasoning | Limit::Silence | Limit::Subtask => None,
        }
    }

    /// The soft limit in force for `limit` against the team's hard value ([`soft_limit`]);
    /// `None` for a limit without one.
    pub fn soft(&self, limit: Limit) -> Option<u64> {
        limit.has_soft().then(|| soft_limit(self.get(limit), self.soft_given(limit))).flatten()
    }

    /// Sets the soft limit of `limit` to `ms` after checking it against the hard limit set
    /// now (set the hard one first); unchanged on error.
    pub fn set_soft(&mut self, limit: Limit, ms: u64) -> Result<(), SoftLimitError> {
        check_soft(limit, ms, self.get(limit))?;
        let slot = match limit {
            Limit::Tool => &mut self.tool_soft_ms,
            Limit::Turn => &mut self.turn_soft_ms,
            Limit::Task => &mut self.task_soft_ms,
            Limit::Reasoning | Limit::Silence | Limit::Subtask => {
                return Err(SoftLimitError::NoSoftLimit { limit });
            }
        };
        *slot = Some(ms);
        Ok(())
    }

    /// Checks every soft limit given: each from 1 ms to below its hard limit.
    pub fn check_soft(&self) -> Result<(), SoftLimitError> {
        Limit::ALL.into_iter().try_for_each(|limit| match self.soft_given(limit) {
            Some(ms) => check_soft(limit, ms, self.get(limit)),
            None => Ok(()),
        })
    }
}

/// Checks one limit's value: from 1 ms to [`MAX_LIMIT_MS`].
pub fn check_limit(limit: Limit, ms: u64) -> Result<(), LimitError> {
    if ms == 0 || ms > MAX_LIMIT_MS { Err(LimitError { limit, value: ms }) } else { Ok(()) }
}

/// Checks one soft limit's value: from 1 ms to below `hard_ms`, for a limit that has one.
pub fn check_soft(limit: Limit, ms: u64, hard_ms: u64) -> Result<(), SoftLimitError> {
    if !limit.has_soft() {
        return Err(SoftLimitError::NoSoftLimit { limit });
    }
    if ms == 0 || ms >= hard_ms {
        return Err(SoftLimitError::NotBelowHard { limit, value: ms, hard: hard_ms });
    }
    Ok(())
}
