//! The team's time limits: defaults, keys and the range check.

use crate::DEFAULT_TIMEOUT_MS;
use crate::timeouts::*;

#[test]
fn defaults_pass_and_zero_or_huge_values_are_refused() {
    let mut t = Timeouts::default();
    assert_eq!(t.check(), Ok(()));
    assert_eq!(t.get(Limit::Turn), DEFAULT_TIMEOUT_MS);
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
    assert_eq!(keys, ["tool_ms", "reasoning_ms", "turn_ms", "subtask_ms", "task_ms"]);
    let json = serde_json::to_value(Timeouts::default()).unwrap();
    for key in keys {
        assert!(json.get(key).is_some(), "{key}");
    }
}
