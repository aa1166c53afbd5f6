//! Retry policy and the pure backoff functions: executor kinds' runs back off in
//! milliseconds ([`RetryPolicy::backoff`]); agents retry a failed heartbeat turn at
//! a later heartbeat, backing off in heartbeats ([`plan_retry`]: 1, 2, 4 beats, capped at
//! [`MAX_RETRY_WAIT_BEATS`]).

use std::time::Duration;

use serde::{Deserialize, Serialize};

/// Whether a failure is worth retrying.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ErrorClass {
    /// Network errors, rate limits, timeouts, 5xx: retry.
    Transient,
    /// Invalid input, permission errors, 4xx: do not retry.
    Permanent,
}

/// How often and how fast to retry.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct RetryPolicy {
    /// Retries after the first attempt.
    pub max_retries: u32,
    /// Delay before the first retry, in milliseconds.
    pub initial_delay_ms: u64,
    /// Largest delay, in milliseconds.
    pub max_delay_ms: u64,
    /// Factor between consecutive delays; values below 1 are treated as 1.
    pub backoff_multiplier: f64,
    /// Hard limit for one run, in milliseconds.
    pub hard_timeout_ms: u64,
    /// Soft limit after which a warning is due, in milliseconds.
    pub soft_timeout_ms: u64,
}

impl RetryPolicy {
    /// The executor's policy: 1 retry, 1 s initial delay, 5 s cap, ×2, 5 min hard and
    /// 2 min soft timeout.
    pub const fn executor_default() -> Self {
        Self {
            max_retries: 1,
            initial_delay_ms: 1_000,
            max_delay_ms: 5_000,
            backoff_multiplier: 2.0,
            hard_timeout_ms: 300_000,
            soft_timeout_ms: 120_000,
        }
    }

    /// The agents' policy: 3 retries, the executor's delays, a 30 s task timeout.
    pub const fn agent_default() -> Self {
        Self {
            max_retries: crate::DEFAULT_MAX_RETRIES,
            initial_delay_ms: 1_000,
            max_delay_ms: 5_000,
            backoff_multiplier: 2.0,
            hard_timeout_ms: crate::DEFAULT_TIMEOUT_MS,
            soft_timeout_ms: crate::DEFAULT_TIMEOUT_MS,
        }
    }

    /// The delay before retry number `retry` (1 for the first retry): `initial × multiplier^(retry-1)`,
    /// capped at `max_delay_ms`. Retry 0 waits nothing. Never decreases as `retry` grows.
    pub fn backoff(&self, retry: u32) -> Duration {
        if retry == 0 {
            return Duration::ZERO;
        }
        let multiplier = if self.backoff_multiplier.is_finite() {
            self.backoff_multiplier.max(1.0)
        } else {
            1.0
        };
        let cap = self.max_delay_ms as f64;
        let exp = i32::try_from(retry - 1).unwrap_or(i32::MAX);
        let raw = self.initial_delay_ms as f64 * multiplier.powi(exp);
        let ms = if raw.is_finite() { raw.min(cap) } else { cap };
        // `cap` is rounded to f64 and may exceed `max_delay_ms` above 2^53: cap again in u64.
        Duration::from_millis((ms as u64).min(self.max_delay_ms))
    }

    /// Whether a failure of `class` after `retries_so_far` retries should be retried.
    pub fn should_retry(&self, class: ErrorClass, retries_so_far: u32) -> bool {
        class == ErrorClass::Transient && retries_so_far < self.max_retries
    }
}

impl Default for RetryPolicy {
    fn default() -> Self {
        Self::agent_default()
    }
}

/// The most heartbeats an agent waits between two attempts of a failed turn.
pub const MAX_RETRY_WAIT_BEATS: u64 = 8;

/// How many heartbeats retry number `retry` (1 for the first) of a failed turn waits: the next
/// heartbeat for the first (a failed turn is tried again on a later heartbeat), then
/// twice as many each time — 1, 2, 4 — capped at [`MAX_RETRY_WAIT_BEATS`]. Retry 0 waits
/// nothing. Never decreases as `retry` grows.
pub fn retry_wait_beats(retry: u32) -> u64 {
    match retry {
        0 => 0,
        n => 1u64.checked_shl(n - 1).unwrap_or(u64::MAX).min(MAX_RETRY_WAIT_BEATS),
    }
}

/// What an agent does after a failed attempt of a turn ([`plan_retry`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "plan", rename_all = "snake_case")]
pub enum RetryPlan {
    /// Try again, not before heartbeat `due`.
    Retry {
        /// The retry this is (1 for the first; the attempt that failed was `retry`).
        retry: u32,
        /// Heartbeats to wait ([`retry_wait_beats`]).
        wait_beats: u64,
        /// The heartbeat the next attempt is due at: the failing one plus `wait_beats`.
        due: u64,
    },
    /// Do not try again: the error is permanent (retrying cannot help).
    Permanent,
    /// Do not try again: the retries are spent.
    Exhausted,
}

/// Whether and when an agent tries a failed turn again (docs/concepts.md#retries-and-timeouts,
/// pure): a failure of `class` at heartbeat `heartbeat`, after `retries_so_far` retries, with the
/// agent's `max_retries`. A transient failure with retries left is retried after
/// [`retry_wait_beats`] heartbeats; a permanent one never; a transient one with none left is
/// [`RetryPlan::Exhausted`].
pub fn plan_retry(
    class: ErrorClass,
    retries_so_far: u32,
    max_retries: u32,
    heartbeat: u64,
) -> RetryPlan {
    if class == ErrorClass::Permanent {
        return RetryPlan::Permanent;
    }
    if retries_so_far >= max_retries {
        return RetryPlan::Exhausted;
    }
    let retry = retries_so_far + 1;
    let wait_beats = retry_wait_beats(retry);
    RetryPlan::Retry { retry, wait_beats, due: heartbeat.saturating_add(wait_beats) }
}
