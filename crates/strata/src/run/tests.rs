//! Tests of `strata run`'s own helpers: the task id of a goal in words, the goal example it
//! builds the goal team from.

use super::{GOAL_EXAMPLE, goal_task_id};

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

/// The built-in goal team is made from the crate's copy of `examples/goal/team.toml` (a packaged
/// crate holds no file outside its directory): the copy must be that example, byte for byte.
#[test]
fn the_goal_team_is_made_from_the_goal_example() -> std::io::Result<()> {
    let example =
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples/goal/team.toml");
    let text = std::fs::read_to_string(&example)?;
    assert!(
        text == GOAL_EXAMPLE,
        "src/run/goal_team.toml differs from examples/goal/team.toml: copy the example over it"
    );
    Ok(())
}
