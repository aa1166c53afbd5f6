//! Runs stopped part-way, by SIGKILL and by Ctrl-C (SIGINT), then resumed to the end.
//!
//! The plan holds a gate: a shell step that waits for a file the test creates, so the test
//! knows the run is in the middle of a side effect when it stops it.

use std::path::PathBuf;
use std::process::Command;

use crate::support::{FAST, Out, Running, Scratch, listed_run, snapshot, wait_for};

const GATED_PLAN: &str = r#"
id = "gated"
goal = "write, wait at a gate, then finish"

[[steps]]
id = "write-hello"
domain = "docs"
tool = "write_file"
args = { path = "hello.txt", content = "hello\n" }

[[steps]]
id = "gate"
domain = "build"
tool = "shell"
args = { command = "touch waiting; while [ ! -e go ]; do sleep 0.01; done; echo ran >> count.txt; cat hello.txt", timeout_ms = 120000 }
after = ["write-hello"]

[[steps]]
id = "finish"
domain = "docs"
tool = "write_file"
args = { path = "done.txt", content = "done\n" }
after = ["gate"]
"#;

/// The gate's file; opened when dropped, so a failing test leaves no shell waiting.
struct Gate(PathBuf);

impl Gate {
    fn open(&self) {
        std::fs::write(&self.0, "").unwrap();
    }
}

impl Drop for Gate {
    fn drop(&mut self) {
        let _ = std::fs::write(&self.0, "");
    }
}

/// Starts the gated plan as run `id` and waits until its shell step is at the gate.
fn start_at_gate(s: &Scratch, id: &str) -> (Running, Gate) {
    s.write("gated.toml", GATED_PLAN);
    std::fs::create_dir_all(s.path("W")).unwrap();
    let gate = Gate(s.path("W/go"));
    let mut run = s.spawn(&[
        "run",
        "gated.toml",
        "--data",
        "D",
        "--workspace",
        "W",
        "--run-id",
        id,
        FAST[0],
        FAST[1],
        "--no-sync",
        "--quiet",
    ]);
    let waiting = s.path("W/waiting");
    wait_for("the gate step to start", || {
        assert!(!run.exited(), "strata exited before the gate");
        waiting.exists()
    });
    (run, gate)
}

/// What a finished gated run must show: every step's effect once, a clean audit, no messages.
fn check_finished(s: &Scratch, id: &str) {
    assert_eq!(s.read("W/hello.txt"), "hello\n");
    assert_eq!(s.read("W/count.txt"), "ran\n", "the gate's side effect ran exactly once");
    assert_eq!(s.read("W/done.txt"), "done\n");
    assert_eq!(listed_run(s, "D", id)["status"], "succeeded");
    let verify = s.strata(&["verify", id, "--data", "D", "--json"]).code(0).json();
    assert_eq!(verify["ok"], true, "{verify}");
    let messages = s.strata(&["inspect", id, "messages", "--data", "D", "--json"]).code(0).json();
    assert_eq!(messages, serde_json::json!([]));
    let tree = s.strata(&["inspect", id, "--data", "D", "--json"]).code(0).json();
    assert_eq!(tree["status"], "succeeded");
    for agent in tree["agents"].as_array().unwrap() {
        assert_eq!(agent["status"], "terminated", "{agent}");
    }
    let audit = s.strata(&["inspect", id, "audit", "--data", "D", "--json"]).code(0).json();
    let shell_calls = audit
        .as_array()
        .unwrap()
        .iter()
        .filter(|r| r["event"]["event"] == "tool_call" && r["event"]["tool"] == "shell")
        .count();
    assert_eq!(shell_calls, 1, "the gate is audited once");
}

/// SIGKILL in the middle of a side effect; `resume` adopts the effect's result instead of
/// running it again and finishes the task.
#[test]
fn a_run_killed_mid_step_resumes_to_success_and_runs_the_step_once() {
    let s = Scratch::new();
    let (run, gate) = start_at_gate(&s, "k");

    // While it runs, the run is listed as running and other commands are refused.
    assert_eq!(listed_run(&s, "D", "k")["status"], "running");
    let before = snapshot(&s.path("D/k/run.json"));
    for command in ["resume", "inspect", "verify"] {
        s.strata(&[command, "k", "--data", "D"]).bad_input(&["D/k is in use", "wait for it"]);
    }
    assert!(snapshot(&s.path("D/k/run.json")) == before, "a refused command wrote run.json");

    let killed = run.kill();
    assert_eq!(killed.status.code(), None, "killed by a signal");
    assert_eq!(listed_run(&s, "D", "k")["status"], "killed (resumable)");
    assert!(!s.path("W/done.txt").exists(), "killed before the last step");

    // The orphaned shell finishes on its own; resume adopts its result.
    gate.open();
    let resume = s.strata(&["resume", "k", "--data", "D", "--no-sync", "--quiet"]);
    resume.code(0).stdout_has(&["run k resumed", "task `gated` succeeded", "(3 steps)"]);
    check_finished(&s, "k");
}

/// Ctrl-C: the running heartbeats finish, the state is stored, exit code 130; the run is
/// listed as interrupted and `resume` finishes it.
#[test]
fn ctrl_c_exits_130_and_the_run_resumes_to_success() {
    let s = Scratch::new();
    let (mut run, gate) = start_at_gate(&s, "c");
    let sent = Command::new("kill").args(["-INT", &run.pid().to_string()]).status().unwrap();
    assert!(sent.success(), "kill -INT failed");
    wait_for("strata to say it is interrupting", || {
        if run.stderr_so_far().contains("interrupted: finishing the running heartbeats") {
            return true;
        }
        assert!(!run.exited(), "strata exited on SIGINT without saying it is interrupting");
        false
    });
    // The heartbeat at the gate is waited for; let it finish.
    gate.open();
    let out = run.finish();
    out.code(130).stdout_has(&["run c stopped", "strata resume c"]);
    assert_eq!(listed_run(&s, "D", "c")["status"], "interrupted");
    assert!(!s.path("W/done.txt").exists(), "stopped before the last step");
    s.strata(&["verify", "c", "--data", "D"]).code(0);

    let resume = s.strata(&["resume", "c", "--data", "D", "--no-sync", "--json"]);
    resume.code(0);
    let lines: Vec<serde_json::Value> =
        resume.stdout.lines().map(|l| serde_json::from_str(l).unwrap()).collect();
    assert_eq!(lines.first().unwrap()["event"], "run_resumed");
    let last = lines.last().unwrap();
    assert_eq!(last["event"], "run_finished");
    assert_eq!(last["outcome"]["outcome"], "succeeded", "{last}");
    check_finished(&s, "c");

    // Resuming again says it is finished.
    let again = s.strata(&["resume", "c", "--data", "D"]);
    again.code(0).stdout_has(&["already finished"]);
}

#[test]
fn a_resume_whose_reasoner_settings_fail_their_check_leaves_the_run_as_it_was() {
    let s = Scratch::new();
    let (run, gate) = start_at_gate(&s, "k");
    let sent = Command::new("kill").args(["-INT", &run.pid().to_string()]).status().unwrap();
    assert!(sent.success(), "kill -INT failed");
    gate.open();
    run.finish().code(130);
    assert_eq!(listed_run(&s, "D", "k")["status"], "interrupted");

    // The run's team now reasons with a model whose key variable is not set where it resumes.
    let stored = s.read("D/k/team.toml");
    let model_team = stored.replacen(
        "kind = \"rule-based\"",
        "kind = \"openai\"\nmodel = \"m\"\napi_key_env = \"STRATA_TEST_UNSET_KEY\"",
        1,
    );
    assert_ne!(model_team, stored);
    s.write("D/k/team.toml", &model_team);
    let before = snapshot(&s.path("W"));
    let out = Out::of(
        &["resume", "k", "--data", "D"],
        s.command(&["resume", "k", "--data", "D"]).env_remove("STRATA_TEST_UNSET_KEY"),
    );
    out.bad_input(&["STRATA_TEST_UNSET_KEY", "not set"]);
    assert_eq!(listed_run(&s, "D", "k")["status"], "interrupted", "not marked running");
    assert_eq!(snapshot(&s.path("W")), before, "no step ran");

    // With the settings as they were, it resumes to the end.
    s.write("D/k/team.toml", &stored);
    s.strata(&["resume", "k", "--data", "D", "--no-sync", "--quiet"]).code(0);
    check_finished(&s, "k");
}
