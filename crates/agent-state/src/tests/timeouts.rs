//! The team's time limits: defaults, keys and the range check.

use crate::timeouts::*;

#[test]
fn defaults_pass_and_zero_or_huge_values_are_refused() {
    let mut t = Timeouts::default();
    assert_eq!(t.check(), Ok(()));
    assert_eq!(t.get(Limit::Turn), DEFAULT_TURN_MS);
    assert_eq!(t.get(Limit::Silence), DEFAULT_SILENCE_MS);
    let err = t.set(Limit::Subtask, 0).unwrap_err();
    assert_eq!(err, LimitError { limit: Limit::Subtask, value: 0 });
    assert!(err.to_string().contains("`subtask_ms` = 0"), "{err}");
    assert_eq!(t.subtask_ms, DEFAULT_SUBTASK_MS, "unchanged on error");
    assert!(t.set(Limit::Task, MAX_LIMIT_MS + 1).is_err());
    t.set(Limit::Task, MAX_LIMIT_MS).unwrap();
    t.reasoning_ms = 0;
    assert_eq!(t.check().unwrap_err().limit, Limit::Reasoning);
}

#[test]
fn keys_are_distinct_and_name_the_table_fields() {
    let keys: Vec<&str> = Limit::ALL.iter().map(|l| l.key()).collect();
    assert_eq!(keys, ["tool_ms", "reasoning_ms", "silence_ms", "turn_ms", "subtask_ms", "task_ms"]);
    let json = serde_json::to_value(Timeouts::default()).unwrap();
    for key in keys {
        assert!(json.get(key).is_some(), "{key}");
    }
}

#[test]
fn soft_limits_default_to_half_and_must_be_below_the_hard_one() {
    let mut t = Timeouts::default();
    assert_eq!(t.check_soft(), Ok(()));
    assert_eq!(t.soft(Limit::Tool), Some(DEFAULT_TOOL_MS / 2));
    assert_eq!(t.soft(Limit::Turn), Some(DEFAULT_TURN_MS / 2));
    assert_eq!(t.soft(Limit::Task), Some(DEFAULT_TASK_MS / 2));
    assert_eq!(t.soft(Limit::Reasoning), None, "no soft reasoning limit");
    assert_eq!(t.soft(Limit::Subtask), None, "no soft subtask limit");
    assert_eq!(t.soft(Limit::Silence), None, "no soft silence limit");

    t.set_soft(Limit::Tool, 1_000).unwrap();
    assert_eq!(t.soft(Limit::Tool), Some(1_000));
    t.turn_ms = 30_000;
    let err = t.set_soft(Limit::Turn, 30_000).unwrap_err();
    assert_eq!(
        err,
        SoftLimitError::NotBelowHard { limit: Limit::Turn, value: 30_000, hard: 30_000 }
    );
    let text = err.to_string();
    assert!(text.contains("`turn_soft_ms` = 30000 must be below `turn_ms` (30000 ms)"), "{text}");
    assert!(text.contains("half the hard limit, 15000"), "{text}");
    assert_eq!(t.turn_soft_ms, None, "unchanged on error");
    assert!(t.set_soft(Limit::Task, 0).is_err());
    assert_eq!(
        t.set_soft(Limit::Reasoning, 5),
        Err(SoftLimitError::NoSoftLimit { limit: Limit::Reasoning })
    );

    // A hard limit lowered under a soft one given: check_soft finds it.
    t.tool_ms = 500;
    assert!(matches!(
        t.check_soft(),
        Err(SoftLimitError::NotBelowHard { limit: Limit::Tool, value: 1_000, hard: 500 })
    ));
    // At run time such a soft value falls back to half the hard limit.
    assert_eq!(t.soft(Limit::Tool), Some(250));
}

#[test]
fn soft_keys_name_the_table_fields_and_old_values_still_read() {
    let keys: Vec<&str> = Limit::ALL.iter().filter_map(|l| l.soft_key()).collect();
    assert_eq!(keys, ["tool_soft_ms", "turn_soft_ms", "task_soft_ms"]);
    let old = serde_json::json!({"tool_ms": 5, "reasoning_ms": 6, "turn_ms": 7, "subtask_ms": 8, "task_ms": 9});
    let t: Timeouts = serde_json::from_value(old).unwrap();
    assert_eq!(t.tool_soft_ms, None);
    assert_eq!(
        t.silence_ms, DEFAULT_SILENCE_MS,
        "a team stored before silence_ms gets the default"
    );
    let t = Timeouts { task_soft_ms: Some(4), ..t };
    let back: Timeouts = serde_json::from_value(serde_json::to_value(t).unwrap()).unwrap();
    assert_eq!(back, t);
}

#[test]
fn a_hard_limit_of_one_ms_has_no_soft_one() {
    assert_eq!(default_soft_ms(1), None);
    assert_eq!(soft_limit(1, Some(1)), None);
    assert_eq!(default_soft_ms(2), Some(1));
    assert_eq!(limit_phase(0, None, 1), LimitPhase::Within);
    assert_eq!(limit_phase(1, None, 1), LimitPhase::Hard);
}

mod props {
    use proptest::prelude::*;

    use crate::timeouts::*;

    proptest! {
        /// The soft limit in force is always at least 1 ms and below the hard one, and a
        /// valid given value is kept as it is.
        #[test]
        fn the_soft_limit_in_force_is_below_the_hard_one(
            hard in 1..=MAX_LIMIT_MS,
            given in proptest::option::of(0..=MAX_LIMIT_MS + 1),
        ) {
            if let Some(soft) = soft_limit(hard, given) {
                prop_assert!(soft >= 1 && soft < hard);
            } else {
                prop_assert!(hard < 2, "only a 1 ms hard limit has none");
            }
            if let Some(g) = given.filter(|g| *g >= 1 && *g < hard) {
                prop_assert_eq!(soft_limit(hard, given), Some(g));
                prop_assert_eq!(check_soft(Limit::Tool, g, hard), Ok(()));
            } else if let Some(g) = given {
                prop_assert!(check_soft(Limit::Task, g, hard).is_err());
            }
        }

        /// The phase only moves forward with time: within, then soft, then hard; hard exactly
        /// from the hard limit on, soft exactly between the two.
        #[test]
        fn the_phase_is_monotonic_in_time(
            hard in 1..=10_000u64,
            given in proptest::option::of(0..=10_001u64),
            a in 0..=20_000u64,
            b in 0..=20_000u64,
        ) {
            let soft = soft_limit(hard, given);
            let (early, late) = (a.min(b), a.max(b));
            prop_assert!(limit_phase(early, soft, hard) <= limit_phase(late, soft, hard));
            let phase = limit_phase(a, soft, hard);
            prop_assert_eq!(phase == LimitPhase::Hard, a >= hard);
            prop_assert_eq!(phase == LimitPhase::Soft, soft.is_some_and(|s| a >= s) && a < hard);
        }
    }
}
