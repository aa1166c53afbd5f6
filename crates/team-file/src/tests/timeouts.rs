//! `[timeouts]`: the team's time limits are read into `TeamSpec::timeouts`, the defaults fill
//! what is left out, an agent without its own `timeout_ms` gets `turn_ms`, and a zero, absurd,
//! mistyped or unknown value is refused at the value (`silence_ms` as the others). The soft limits (`tool_soft_ms`,
//! `turn_soft_ms`, `task_soft_ms`) default to half their hard ones and are refused at the
//! value when not below them.

use agent_state::{DEFAULT_TURN_MS, Limit, MAX_LIMIT_MS, Timeouts};

use super::*;

const TEAM: &str = "[[top]]\nid = \"top-a\"\npower_type = \"power_a\"\n\n\
[[mid]]\nid = \"mid-a\"\ndomain = \"build\"\nsupervisor = \"top-a\"\ntimeout_ms = 45000\n";

fn config_timeout(t: &TeamFile, agent: &str) -> u64 {
    t.spec.agents.iter().find(|a| a.config.id.as_str() == agent).unwrap().config.timeout_ms
}

#[test]
fn the_table_sets_the_team_limits_and_the_default_turn() {
    let t = team(&format!(
        "[timeouts]\ntool_ms = 5000\nreasoning_ms = 60000\nsilence_ms = 45000\nturn_ms = 20000\n\
         subtask_ms = 300000\ntask_ms = 3600000\n\n{TEAM}"
    ));
    assert_eq!(
        t.spec.timeouts,
        Timeouts {
            tool_ms: 5_000,
            reasoning_ms: 60_000,
            silence_ms: 45_000,
            turn_ms: 20_000,
            subtask_ms: 300_000,
            task_ms: 3_600_000,
            ..Timeouts::default()
        }
    );
    assert_eq!(config_timeout(&t, "top-a"), 20_000, "no own timeout_ms: the team's turn_ms");
    assert_eq!(config_timeout(&t, "mid-a"), 45_000, "its own timeout_ms wins");
}

#[test]
fn left_out_limits_keep_their_defaults() {
    let t = team(TEAM);
    assert_eq!(t.spec.timeouts, Timeouts::default());
    assert_eq!(config_timeout(&t, "top-a"), DEFAULT_TURN_MS);
    let t = team(&format!("[timeouts]\ntask_ms = 60000\n{TEAM}"));
    assert_eq!(t.spec.timeouts, Timeouts { task_ms: 60_000, ..Timeouts::default() });
}

#[test]
fn zero_absurd_mistyped_and_unknown_limits_are_refused_at_the_value() {
    let huge = MAX_LIMIT_MS + 1;
    let cases: Vec<(String, usize, usize, Vec<&str>)> = vec![
        (
            "[timeouts]\ntool_ms = 0\n".into(),
            2,
            11,
            vec!["[timeouts] `tool_ms` = 0 is not a usable time limit", "from 1 to 604800000"],
        ),
        (
            format!("[timeouts]\nturn_ms = 1000\nsubtask_ms = {huge}\n"),
            3,
            14,
            vec!["`subtask_ms` = 604800001", "7 days", "such as 1800000"],
        ),
        ("[timeouts]\ntask_ms = \"2h\"\n".into(), 2, 11, vec!["invalid type", "expected u64"]),
        ("[timeouts]\nreasoning_ms = -5\n".into(), 2, 16, vec!["invalid value: integer `-5`"]),
        ("[timeouts]\nstep_ms = 5\n".into(), 2, 1, vec!["unknown field `step_ms`", "tool_ms"]),
        (
            "[timeouts]\nsilence_ms = 0\n".into(),
            2,
            14,
            vec!["[timeouts] `silence_ms` = 0 is not a usable time limit", "such as 120000"],
        ),
    ];
    for (table, line, column, fragments) in cases {
        let err = team_err(&format!("{table}{TEAM}"));
        assert_at(&err, line, column, &fragments);
    }
}

#[test]
fn an_agents_own_absurd_timeout_is_refused_at_the_value() {
    let err = team_err(&format!(
        "[[top]]\nid = \"top-a\"\npower_type = \"power_a\"\ntimeout_ms = {}\n",
        MAX_LIMIT_MS + 1
    ));
    assert_at(&err, 4, 14, &["`timeout_ms` is 604800001", "7 days"]);
}

#[test]
fn soft_limits_are_read_and_default_to_half_the_hard_ones() {
    let t = team(&format!(
        "[timeouts]\ntool_ms = 5000\ntool_soft_ms = 1000\nturn_soft_ms = 20000\n\
         task_soft_ms = 60000\n\n{TEAM}"
    ));
    let limits = t.spec.timeouts;
    assert_eq!(limits.tool_soft_ms, Some(1_000));
    assert_eq!(limits.soft(Limit::Tool), Some(1_000));
    assert_eq!(limits.soft(Limit::Turn), Some(20_000));
    assert_eq!(limits.soft(Limit::Task), Some(60_000));
    let t = team(&format!("[timeouts]\ntool_ms = 5000\n{TEAM}"));
    assert_eq!(t.spec.timeouts.tool_soft_ms, None);
    assert_eq!(t.spec.timeouts.soft(Limit::Tool), Some(2_500), "half of tool_ms");
    assert_eq!(t.spec.timeouts.soft(Limit::Task), Some(agent_state::DEFAULT_TASK_MS / 2));
}

#[test]
fn a_soft_limit_not_below_its_hard_one_is_refused_at_the_value() {
    let cases: Vec<(&str, usize, usize, Vec<&str>)> = vec![
        (
            "[timeouts]\ntool_ms = 5000\ntool_soft_ms = 5000\n",
            3,
            16,
            vec![
                "[timeouts] `tool_soft_ms` = 5000 must be below `tool_ms` (5000 ms)",
                "half the hard limit, 2500",
            ],
        ),
        // Checked against the default hard limit when that is left out.
        (
            "[timeouts]\nturn_soft_ms = 2000000\n",
            2,
            16,
            vec!["`turn_soft_ms` = 2000000 must be below `turn_ms` (1800000 ms)"],
        ),
        // The order in the table does not matter: the hard limit given later counts.
        (
            "[timeouts]\ntask_soft_ms = 9000\ntask_ms = 8000\n",
            2,
            16,
            vec!["`task_soft_ms` = 9000 must be below `task_ms` (8000 ms)"],
        ),
        ("[timeouts]\ntool_soft_ms = 0\n", 2, 16, vec!["`tool_soft_ms` = 0"]),
        ("[timeouts]\nreasoning_soft_ms = 5\n", 2, 1, vec!["unknown field `reasoning_soft_ms`"]),
    ];
    for (table, line, column, fragments) in cases {
        let err = team_err(&format!("{table}{TEAM}"));
        assert_at(&err, line, column, &fragments);
    }
}
