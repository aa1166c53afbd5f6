//! Retrying a provider call: transient failures are retried with the policy's backoff, rate
//! limits are waited out without counting as failures, permanent failures end the call at once.
//!
//! Waits use `tokio::time::sleep` only, so they run on tokio's paused clock in tests.

use std::time::Duration;

use agent_state::{ErrorClass, RetryPolicy};

use crate::provider::{ChatRequest, ChatResponse, Provider, ProviderError, ProviderErrorKind};
use crate::stream::TokenSink;

/// Most rate-limit waits in one [`complete_with_retry`] call: rate limits do not count toward
/// [`RetryPolicy::max_retries`], so this bound keeps a server that always answers 429 from
/// holding the caller forever. The next 429 is returned as the error.
pub const MAX_RATE_LIMIT_WAITS: u32 = 10;

/// Longest single wait, whatever `Retry-After` says: a longer request is waited for this long,
/// then the call is tried again.
pub const MAX_WAIT: Duration = Duration::from_secs(60);

/// What one [`complete_with_retry`] call took.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RetryStats {
    /// Calls made to the provider, the successful one included.
    pub attempts: u32,
    /// Failed attempts other than rate limits: what counts toward the policy's `max_retries`.
    pub failures: u32,
    /// Attempts answered with a rate limit and waited out.
    pub rate_limit_waits: u32,
    /// Time spent waiting between attempts.
    pub waited: Duration,
}

/// One failed attempt, as shown to the observer of [`complete_with_retry`].
#[derive(Clone, Copy, Debug)]
pub struct RetryEvent<'a> {
    /// The attempt that failed, 1 for the first.
    pub attempt: u32,
    /// Why.
    pub error: &'a ProviderError,
    /// How long the call waits before the next attempt; `None`: it gives up and returns `error`.
    pub wait: Option<Duration>,
}

/// Asks `provider` to complete `request`, trying again as `policy` allows, and returns the answer
/// with what it took.
///
/// - A transient failure (timeout, connection, 5xx) is retried after `policy.backoff(n)` for the
///   `n`th failure (or the server's `Retry-After`, if it sent one), at most
///   `policy.max_retries` times.
/// - A rate limit waits the server's `retry_after` (the backoff if it gave none), capped at
///   [`MAX_WAIT`], and does not count as a failure; after [`MAX_RATE_LIMIT_WAITS`] waits the
///   next rate limit is returned.
/// - A permanent failure is returned at once.
///
/// `observer` sees every failed attempt, including the last one of a failed call.
pub async fn complete_with_retry(
    provider: &dyn Provider,
    request: &ChatRequest,
    policy: &RetryPolicy,
    observer: &mut (dyn FnMut(&RetryEvent<'_>) + Send),
) -> Result<(ChatResponse, RetryStats), ProviderError> {
    attempts(provider, request, policy, observer, None).await
}

/// [`complete_with_retry`] through [`Provider::complete_streaming`]: every attempt delivers
/// the pieces of its answer to `sink` as they arrive. An attempt that fails mid-stream has
/// delivered some pieces already; the next attempt's pieces start the answer over (the
/// observer has seen the failure in between).
pub async fn complete_streaming_with_retry(
    provider: &dyn Provider,
    request: &ChatRequest,
    policy: &RetryPolicy,
    observer: &mut (dyn FnMut(&RetryEvent<'_>) + Send),
    sink: &mut dyn TokenSink,
) -> Result<(ChatResponse, RetryStats), ProviderError> {
    attempts(provider, request, policy, observer, Some(sink)).await
}

/// The attempts of one call, streamed to `sink` if there is one.
async fn attempts(
    provider: &dyn Provider,
    request: &ChatRequest,
    policy: &RetryPolicy,
    observer: &mut (dyn FnMut(&RetryEvent<'_>) + Send),
    mut sink: Option<&mut dyn TokenSink>,
) -> Result<(ChatResponse, RetryStats), ProviderError> {
    let mut stats = RetryStats::default();
    loop {
        stats.attempts += 1;
        let answer = match sink.as_deref_mut() {
            Some(sink) => provider.complete_streaming(request, sink).await,
            None => provider.complete(request).await,
        };
        let error = match answer {
            Ok(response) => return Ok((response, stats)),
            Err(error) => error,
        };
        let wait = next_wait(&error, policy, &mut stats);
        observer(&RetryEvent { attempt: stats.attempts, error: &error, wait });
        let Some(wait) = wait else {
            return Err(error);
        };
        tracing::warn!(
            provider = provider.name(),
            model = provider.model(),
            attempt = stats.attempts,
            kind = ?error.kind,
            wait_ms = u64::try_from(wait.as_millis()).unwrap_or(u64::MAX),
            error = %error.message,
            "provider call failed; trying again"
        );
        tokio::time::sleep(wait).await;
        stats.waited += wait;
    }
}

/// Counts `error` in `stats` and decides the wait before the next attempt, or `None` to stop.
fn next_wait(
    error: &ProviderError,
    policy: &RetryPolicy,
    stats: &mut RetryStats,
) -> Option<Duration> {
    if error.kind == ProviderErrorKind::RateLimited {
        if stats.rate_limit_waits >= MAX_RATE_LIMIT_WAITS {
            return None;
        }
        stats.rate_limit_waits += 1;
        let wait = error.retry_after.unwrap_or_else(|| policy.backoff(stats.rate_limit_waits));
        return Some(wait.min(MAX_WAIT));
    }
    stats.failures += 1;
    let class = if error.is_transient() { ErrorClass::Transient } else { ErrorClass::Permanent };
    if !policy.should_retry(class, stats.failures - 1) {
        return None;
    }
    let wait = error.retry_after.unwrap_or_else(|| policy.backoff(stats.failures));
    Some(wait.min(MAX_WAIT))
}
