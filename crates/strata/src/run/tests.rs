//! Tests of `strata run`'s own helpers: the task id of a goal in words.

use super::goal_task_id;

/// `goal-` and the goal's first words, lower case, at most 24 characters of them; the same
/// for the same goal; `goal` when there are no ASCII words.
#[test]
fn a_goals_task_id_is_its_first_words() {
    assert_eq!(goal_task_id("Write a README for the project"), "goal-write-a-readme-for-the");
    assert_eq!(goal_task_id("  fix: the *tests*!  "), "goal-fix-the-tests");
    assert_eq!(goal_task_id("x".repeat(40).as_str()), format!("goal-{}", "x".repeat(24)));
    assert_eq!(goal_task_id("écrire un README"), "goal-crire-un-readme");
    assert_eq!(goal_task_id("日本語"), "goal");
    assert_eq!(goal_task_id("ship it"), goal_task_id("ship it"));
    for goal in ["Write a README for the project", "a b", "日本語"] {
        let id = goal_task_id(goal);
        assert!(id.len() <= 29, "{id}");
        assert!(id.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-'), "{id}");
    }
}
