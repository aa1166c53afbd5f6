//! Soft time limits in a real run (`[timeouts] tool_soft_ms`, `task_soft_ms`): a shell step
//! that runs past its soft limit but under its hard one goes on and succeeds; the run's
//! output and `inspect … audit` show the `soft_timeout` records (the tool call's for its
//! executor, the task's for the proposing power), and the executor's lead got the warning
//! (on its whiteboard). A soft limit not below its hard one is refused at the value.

use crate::support::*;

const SLOW_PLAN: &str = r#"
id = "slow"
goal = "take longer than the soft limits"

[[steps]]
id = "wait"
domain = "build"
tool = "shell"
args = { command = "sleep 2; echo waited" }
"#;

/// The example team with tight soft limits: a tool call is slow after 1 s (stopped at 30 s),
/// a task after 500 ms (stopped at 10 min).
const LIMITS: &str = "\n[timeouts]\ntool_ms = 30000\ntool_soft_ms = 1000\ntask_ms = 600000\n\
                      task_soft_ms = 500\n";

#[test]
fn a_shell_step_past_its_soft_limit_succeeds_and_its_lead_is_warned() {
    let s = Scratch::with_example();
    let team = s.read("team.toml");
    s.write("team.toml", &format!("{team}{LIMITS}"));
    s.write("slow.toml", SLOW_PLAN);

    let run = s.strata(&[
        "run",
        "slow.toml",
        "--team",
        "team.toml",
        "--data",
        "D",
        "--workspace",
        "W",
        FAST[0],
        FAST[1],
        "--no-sync",
    ]);

    // Not stopped: the step ran to its end.
    run.code(0).stdout_has(&[
        "task `slow` succeeded",
        "SOFT TIMEOUT: tool call `shell` still running after 1000 ms (hard limit 30000 ms)",
        "SOFT TIMEOUT: task `slow` still running after 500 ms (hard limit 600000 ms)",
    ]);
    let id = run_id_of(&run);

    let audit = s.strata(&["inspect", &id, "audit", "--data", "D", "--json"]).code(0).json();
    let soft: Vec<&serde_json::Value> = audit
        .as_array()
        .unwrap()
        .iter()
        .filter(|r| r["event"]["event"] == "soft_timeout")
        .collect();
    let tool: Vec<_> = soft.iter().filter(|r| r["event"]["limit"] == "tool").collect();
    assert_eq!(tool.len(), 1, "one record for the one slow call: {soft:?}");
    let executor = tool[0]["agent"].as_str().unwrap().to_owned();
    assert!(executor.starts_with("bottom-b"), "the build executor's record: {executor}");
    assert_eq!(tool[0]["event"]["what"], "tool call `shell`");
    assert_eq!(tool[0]["event"]["soft_ms"], 1000);
    assert_eq!(tool[0]["event"]["hard_ms"], 30000);
    let task: Vec<_> = soft.iter().filter(|r| r["event"]["limit"] == "task").collect();
    assert_eq!(task.len(), 1, "told once about the task: {soft:?}");
    assert_eq!(task[0]["agent"], "top-a", "as the proposing power's record");
    assert_eq!(task[0]["event"]["what"], "task `slow`");
    assert!(
        !audit.as_array().unwrap().iter().any(|r| r["event"]["event"] == "timed_out"),
        "no hard limit was hit"
    );
    // The call itself succeeded, once.
    assert_eq!(audited_calls(&s, &id, "shell"), 1);
    s.strata(&["inspect", &id, "audit", "--data", "D"])
        .code(0)
        .stdout_has(&["SOFT TIMEOUT: tool call `shell`"]);

    // The executor's lead was warned: the warning is on its whiteboard.
    s.strata(&["inspect", &id, "whiteboards", "--data", "D"]).code(0).stdout_has(&[
        &format!("warning about [{executor}]: tool call `shell` has run 1000 ms"),
        "`[timeouts] tool_soft_ms`",
    ]);
    assert_eq!(s.strata(&["verify", &id, "--data", "D", "--json"]).code(0).json()["ok"], true);
}

#[test]
fn a_soft_limit_not_below_its_hard_one_is_refused_at_the_value() {
    let s = Scratch::with_example();
    let team = s.read("team.toml");
    let text = format!("{team}\n[timeouts]\ntool_ms = 5000\ntool_soft_ms = 5000\n");
    s.write("team.toml", &text);

    let run = s.strata(&["run", "plan.toml", "--team", "team.toml", "--data", "D"]);

    run.bad_input(&[
        &pos(&text, "\ntool_soft_ms = ", "5000"),
        "`tool_soft_ms` = 5000 must be below `tool_ms` (5000 ms)",
    ]);
}
