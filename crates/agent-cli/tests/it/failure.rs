//! A task that fails: exit code 1 with the typed reason, recorded as failed, and not resumed.

use crate::support::{FAST, Scratch, listed_run, run_id_of};

const FAILING_PLAN: &str = r#"
id = "boom"
goal = "fail on purpose"

[[steps]]
id = "explode"
domain = "build"
tool = "shell"
args = { command = "echo trying; exit 3" }
"#;

#[test]
fn a_failing_step_exits_1_with_the_reason_and_resume_reports_the_finished_run() {
    let s = Scratch::new();
    s.write("boom.toml", FAILING_PLAN);
    let run = s.strata(&[
        "run",
        "boom.toml",
        "--data",
        "D",
        "--workspace",
        "W",
        FAST[0],
        FAST[1],
        "--no-sync",
        "--quiet",
    ]);
    run.code(1).stdout_has(&[
        "task `boom` FAILED",
        "step `explode` failed after",
        "tool `shell` failed",
        "[exit code 3]",
        "files written: none",
        // Both build executors failed it: the powers voted (abandon, the default).
        "1 arbitrations",
    ]);
    let id = run_id_of(&run);
    let boards = s.strata(&["inspect", &id, "whiteboards", "--data", "D"]);
    boards.code(0).stdout_has(&[
        "## Arbitration Result",
        "Resolution: abandon",
        "Parties: mid-build, top-a",
    ]);

    let listed = listed_run(&s, "D", &id);
    assert_eq!(listed["status"], "failed");
    let failure = listed["failure"].as_str().unwrap();
    assert!(
        failure.contains("step `explode` failed") && failure.contains("exit code 3"),
        "{failure}"
    );
    s.strata(&["runs", "--data", "D"]).code(0).stdout_has(&[&id, "failed"]);

    let tree = s.strata(&["inspect", &id, "--data", "D", "--json"]).code(0).json();
    assert_eq!(tree["status"], "failed");
    let audit = s.strata(&["inspect", &id, "audit", "--data", "D", "--json"]).code(0).json();
    assert!(
        audit.as_array().unwrap().iter().any(|r| r["event"]["event"] == "tool_call"
            && r["event"]["tool"] == "shell"
            && r["event"]["success"] == false),
        "the failed shell call is audited"
    );
    // A failed task is still an intact run.
    assert_eq!(s.strata(&["verify", &id, "--data", "D", "--json"]).code(0).json()["ok"], true);

    // Resuming a finished run runs nothing and exits with the run's code.
    let audit_len = audit.as_array().unwrap().len();
    let resume = s.strata(&["resume", &id, "--data", "D", "--no-sync"]);
    resume.code(1).stdout_has(&[&id, "already finished", "nothing to resume"]);
    let resume = s.strata(&["resume", &id, "--data", "D", "--no-sync", "--json"]).code(1).json();
    assert_eq!(resume["event"], "run_finished_already");
    assert_eq!(resume["status"], "failed");
    let after = s.strata(&["inspect", &id, "audit", "--data", "D", "--json"]).code(0).json();
    assert_eq!(after.as_array().unwrap().len(), audit_len, "resume added nothing to the audit");
}

#[test]
fn a_failing_run_with_json_ends_in_run_finished_with_the_failure() {
    let s = Scratch::new();
    s.write("boom.toml", FAILING_PLAN);
    let run = s.strata(&[
        "run",
        "boom.toml",
        "--data",
        "D",
        "--workspace",
        "W",
        FAST[0],
        FAST[1],
        "--no-sync",
        "--json",
    ]);
    run.code(1);
    let last: serde_json::Value = serde_json::from_str(run.stdout.lines().last().unwrap()).unwrap();
    assert_eq!(last["event"], "run_finished");
    assert_eq!(last["outcome"]["outcome"], "failed", "{last}");
    let id = last["run_id"].as_str().unwrap();
    let resume = s.strata(&["resume", id, "--data", "D", "--json"]).code(1).json();
    assert_eq!(resume["status"], "failed");
}
