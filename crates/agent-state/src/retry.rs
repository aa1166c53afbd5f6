//! Retry policy and the pure backoff function (seed 002 numbers as a preset).

use std::time::Duration;

use serde::{Deserialize, Serialize};

/// Whether a failure is worth retrying (seed 002).
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
    /// Seed 002's executor policy: 1 retry, 1 s initial delay, 5 s cap, ×2, 5 min hard and
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

    /// Seed 000's agent policy: 3 retries, the executor's delays, a 30 s task timeout.
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
