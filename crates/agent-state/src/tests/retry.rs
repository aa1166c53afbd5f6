//! Retry policy presets (executor runs, agents) and the backoff function.

use std::time::Duration;

use proptest::prelude::*;

use crate::{
    ErrorClass, MAX_RETRY_WAIT_BEATS, RetryPlan, RetryPolicy, plan_retry, retry_wait_beats,
};

#[test]
fn executor_default_is_seed_002() {
    // The executor's default policy (docs/concepts.md#executor-kinds).
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

#[test]
fn a_failed_turn_waits_1_2_4_heartbeats_then_the_cap() {
    let waits: Vec<u64> = (0..=7).map(retry_wait_beats).collect();
    assert_eq!(waits, [0, 1, 2, 4, 8, 8, 8, 8]);
    assert_eq!(retry_wait_beats(u32::MAX), MAX_RETRY_WAIT_BEATS);
    assert_eq!(retry_wait_beats(64), MAX_RETRY_WAIT_BEATS);
}

#[test]
fn the_seed_000_agent_retries_three_times_at_later_heartbeats() {
    // An agent with 3 retries failing at heartbeat 10, then at each attempt's due heartbeat.
    let mut heartbeat = 10;
    let mut plans = Vec::new();
    for retries in 0..4 {
        let plan = plan_retry(ErrorClass::Transient, retries, 3, heartbeat);
        if let RetryPlan::Retry { due, .. } = plan {
            heartbeat = due;
        }
        plans.push(plan);
    }
    assert_eq!(
        plans,
        [
            RetryPlan::Retry { retry: 1, wait_beats: 1, due: 11 },
            RetryPlan::Retry { retry: 2, wait_beats: 2, due: 13 },
            RetryPlan::Retry { retry: 3, wait_beats: 4, due: 17 },
            RetryPlan::Exhausted,
        ]
    );
}

#[test]
fn a_permanent_failure_is_never_retried() {
    assert_eq!(plan_retry(ErrorClass::Permanent, 0, 3, 5), RetryPlan::Permanent);
    assert_eq!(plan_retry(ErrorClass::Transient, 0, 0, 5), RetryPlan::Exhausted);
    // Near the end of the heartbeat numbers the due heartbeat saturates, it does not wrap.
    assert_eq!(
        plan_retry(ErrorClass::Transient, 2, 3, u64::MAX - 1),
        RetryPlan::Retry { retry: 3, wait_beats: 4, due: u64::MAX }
    );
}

proptest! {
    #[test]
    fn retry_waits_grow_from_one_heartbeat_to_the_cap(a in 0u32..200, b in 0u32..200) {
        let (lo, hi) = (a.min(b), a.max(b));
        prop_assert!(retry_wait_beats(lo) <= retry_wait_beats(hi));
        prop_assert!(retry_wait_beats(hi) <= MAX_RETRY_WAIT_BEATS);
        if hi >= 1 {
            // Every retry waits for a later heartbeat: never the one that failed.
            prop_assert!(retry_wait_beats(hi) >= 1);
            // Doubling until the cap.
            let next = retry_wait_beats(hi + 1);
            prop_assert_eq!(next, (retry_wait_beats(hi) * 2).min(MAX_RETRY_WAIT_BEATS));
        }
    }

    #[test]
    fn a_retry_plan_follows_the_class_the_limit_and_the_heartbeat(
        transient in any::<bool>(),
        retries in 0u32..20,
        max in 0u32..20,
        heartbeat in any::<u64>(),
    ) {
        let class = if transient { ErrorClass::Transient } else { ErrorClass::Permanent };
        let plan = plan_retry(class, retries, max, heartbeat);
        // The same answer as the policy's rule, which the executor uses.
        let policy = RetryPolicy { max_retries: max, ..RetryPolicy::agent_default() };
        prop_assert_eq!(matches!(plan, RetryPlan::Retry { .. }), policy.should_retry(class, retries));
        match plan {
            RetryPlan::Retry { retry, wait_beats, due } => {
                prop_assert!(transient && retries < max);
                prop_assert_eq!(retry, retries + 1);
                prop_assert_eq!(wait_beats, retry_wait_beats(retry));
                prop_assert!(due > heartbeat || heartbeat == u64::MAX);
                prop_assert_eq!(due, heartbeat.saturating_add(wait_beats));
            }
            RetryPlan::Permanent => prop_assert!(!transient),
            RetryPlan::Exhausted => prop_assert!(transient && retries >= max),
        }
    }
}
