//! Retry policy presets (seed 002, seed 000) and the backoff function.

use std::time::Duration;

use crate::{ErrorClass, RetryPolicy};

#[test]
fn executor_default_is_seed_002() {
    // DEFAULT_RETRY_POLICY in seed 002.
    assert_eq!(
        RetryPolicy::executor_default(),
        RetryPolicy {
            max_retries: 1,
            initial_delay_ms: 1000,
            max_delay_ms: 5000,
            backoff_multiplier: 2.0,
            hard_timeout_ms: 300_000,
            soft_timeout_ms: 120_000,
        }
    );
}

#[test]
fn agent_default_is_seed_000() {
    let p = RetryPolicy::agent_default();
    assert_eq!((p.max_retries, p.hard_timeout_ms), (3, 30_000));
    assert_eq!((p.initial_delay_ms, p.max_delay_ms, p.backoff_multiplier), (1000, 5000, 2.0));
    assert_eq!(RetryPolicy::default(), p);
}

#[test]
fn backoff_sequence_doubles_then_caps() {
    let p = RetryPolicy::executor_default();
    let delays: Vec<u128> = (0..=6).map(|n| p.backoff(n).as_millis()).collect();
    assert_eq!(delays, [0, 1000, 2000, 4000, 5000, 5000, 5000]);
    assert_eq!(p.backoff(u32::MAX), Duration::from_millis(5000));
}

#[test]
fn backoff_treats_small_or_broken_multipliers_as_one() {
    for m in [0.5, 0.0, -3.0, f64::NAN, f64::INFINITY, f64::NEG_INFINITY] {
        let p = RetryPolicy { backoff_multiplier: m, ..RetryPolicy::executor_default() };
        let delays: Vec<u128> = (0..4).map(|n| p.backoff(n).as_millis()).collect();
        assert_eq!(delays, [0, 1000, 1000, 1000], "multiplier {m}");
    }
}

#[test]
fn backoff_caps_an_initial_delay_above_the_maximum() {
    let p = RetryPolicy { initial_delay_ms: 9_000, ..RetryPolicy::executor_default() };
    assert_eq!(p.backoff(1), Duration::from_millis(5000));
    let p = RetryPolicy { max_delay_ms: 0, ..RetryPolicy::executor_default() };
    assert_eq!(p.backoff(3), Duration::ZERO);
}

/// Regression: `max_delay_ms` values that `f64` cannot hold exactly (above 2^53) were rounded
/// up when capping, so the delay could exceed `max_delay_ms`.
#[test]
fn backoff_never_exceeds_a_huge_max_delay() {
    for max in [u64::MAX - 1, (1 << 53) + 1, u64::MAX - 1024] {
        let p = RetryPolicy {
            initial_delay_ms: u64::MAX,
            max_delay_ms: max,
            ..RetryPolicy::executor_default()
        };
        for n in [1, 2, 64, u32::MAX] {
            assert!(p.backoff(n) <= Duration::from_millis(max), "retry {n}, max {max}");
        }
    }
}

#[test]
fn transient_errors_retry_until_the_limit_permanent_never() {
    let p = RetryPolicy::executor_default();
    assert!(p.should_retry(ErrorClass::Transient, 0));
    assert!(!p.should_retry(ErrorClass::Transient, 1));
    assert!(!p.should_retry(ErrorClass::Permanent, 0));

    let agent = RetryPolicy::agent_default();
    let transient: Vec<bool> =
        (0..5).map(|n| agent.should_retry(ErrorClass::Transient, n)).collect();
    assert_eq!(transient, [true, true, true, false, false]);
    assert!((0..5).all(|n| !agent.should_retry(ErrorClass::Permanent, n)));

    let none = RetryPolicy { max_retries: 0, ..agent };
    assert!(!none.should_retry(ErrorClass::Transient, 0));
}
