//! Runs stopped part-way, by SIGKILL and by Ctrl-C (SIGINT), then resumed to the end.
//!
//! The plan holds a gate: a shell step that waits for a file the test creates, so the test
//! knows the run is in the middle of a side effect when it stops it.

use std::process::Command;

use crate::fake_llm::{FakeLlm, Mode};
use crate::llm;
use crate::support::{
    FAST, Gate, Out, Running, Scratch, audited_calls, listed_run, snapshot, wait_for,
};

/// Starts the gated plan as run `id` and waits until its shell step is at the gate.
fn start_at_gate(s: &Scratch, id: &str) -> (Running, Gate) {
    start_gated(s, id, "--quiet")
}

/// [`start_at_gate`] with the output flag `output` (`--quiet`, `--json`).
fn start_gated(s: &Scratch, id: &str, output: &str) -> (Running, Gate) {
    start_gated_with(s, id, &[output], |_| {})
}

/// [`start_at_gate`] with the arguments `more` added and the command's environment set by
/// `env`.
fn start_gated_with(
    s: &Scratch,
    id: &str,
    more: &[&str],
    env: impl FnOnce(&mut Command),
) -> (Running, Gate) {
    crate::support::start_gated(s, id, FAST[1], &[&["--no-sync"], more].concat(), env)
}

/// What a finished gated run must show: every step's effect once, a clean audit, every
/// message acknowledged.
fn check_finished(s: &Scratch, id: &str) {
    assert_eq!(s.read("W/hello.txt"), "hello\n");
    assert_eq!(s.read("W/count.txt"), "ran\n", "the gate's side effect ran exactly once");
    assert_eq!(s.read("W/done.txt"), "done\n");
    assert_eq!(listed_run(s, "D", id)["status"], "succeeded");
    let verify = s.strata(&["verify", id, "--data", "D", "--json"]).code(0).json();
    assert_eq!(verify["ok"], true, "{verify}");
    let messages = s.strata(&["inspect", id, "messages", "--data", "D", "--json"]).code(0).json();
    let messages = messages.as_array().unwrap();
    assert!(!messages.is_empty());
    let assignments: Vec<_> =
        messages.iter().filter(|m| m["message"]["kind"] == "task_assign").collect();
    assert!(!assignments.is_empty(), "{messages:?}");
    assert!(messages.iter().all(|m| m["acknowledged"] == true), "{messages:?}");
    let tree = s.strata(&["inspect", id, "--data", "D", "--json"]).code(0).json();
    assert_eq!(tree["status"], "succeeded");
    for agent in tree["agents"].as_array().unwrap() {
        assert_eq!(agent["status"], "terminated", "{agent}");
    }
    assert_eq!(audited_calls(s, id, "shell"), 1, "the gate is audited once");
}

/// SIGKILL in the middle of a side effect; `resume` adopts the effect's result instead of
/// running it again and finishes the task.
#[test]
fn a_run_killed_mid_step_resumes_to_success_and_runs_the_step_once() {
    let s = Scratch::new();
    let (run, gate) = start_at_gate(&s, "k");

    // While it runs, the run is listed as running, `resume` is refused, and `inspect` and
    // `verify` read a copy of it.
    assert_eq!(listed_run(&s, "D", "k")["status"], "running");
    let before = snapshot(&s.path("D/k/run.json"));
    s.strata(&["resume", "k", "--data", "D"]).bad_input(&["D/k is in use", "wait for it"]);
    s.strata(&["inspect", "k", "--data", "D"]).code(0).stdout_has(&["run k · task `gated`"]);
    s.strata(&["verify", "k", "--data", "D"])
        .code(0)
        .stdout_has(&["not sealed: a live process is writing the run", "the run verifies"]);
    assert!(snapshot(&s.path("D/k/run.json")) == before, "a command wrote run.json");

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

/// Ctrl-C in the middle of a long tool call (the gate, which waits until the test opens it):
/// strata stops within a heartbeat, without waiting for the call, says so, stores the state
/// and exits 130; the run is listed as interrupted, and `resume` takes the call's result (the
/// command went on by itself) instead of running it again, and finishes the task.
#[test]
fn ctrl_c_exits_130_and_the_run_resumes_to_success() {
    let s = Scratch::new();
    let (mut run, gate) = start_at_gate(&s, "c");
    let sent = Command::new("kill").args(["-INT", &run.pid().to_string()]).status().unwrap();
    assert!(sent.success(), "kill -INT failed");
    wait_for("strata to say it is interrupting", || {
        if run.stderr_so_far().contains("interrupted: stopping the heartbeats") {
            return true;
        }
        assert!(!run.exited(), "strata exited on SIGINT without saying it is interrupting");
        false
    });
    // It ends while the gate is still closed: the call is not waited for (before the fix it
    // was, for as long as the gate stayed closed). The bound only keeps that from hanging.
    let started = std::time::Instant::now();
    while !run.exited() {
        assert!(
            started.elapsed() < std::time::Duration::from_secs(120),
            "strata waited for the tool call after Ctrl-C: {}",
            run.stderr_so_far()
        );
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    assert!(!s.path("W/count.txt").exists(), "the gate was passed");
    gate.open();
    let out = run.finish();
    assert!(out.stderr.contains("a tool call was still running"), "{}", out.stderr);
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

/// The reasoner's check fails on resume (the model's key variable is not set where it
/// resumes; the stored inputs are untouched, so the inputs check passes): exit 2 naming the
/// variable, the run is left as it was (not marked running, no step ran, no model call), and
/// it resumes to the end once the key is back.
#[test]
fn a_resume_whose_reasoner_settings_fail_their_check_leaves_the_run_as_it_was() {
    let server = FakeLlm::start(Mode::Sensible);
    let s = Scratch::new();
    s.write("team.toml", &llm::team(&llm::openai(&server), ""));
    let (run, gate) = start_gated_with(&s, "k", &["--team", "team.toml", "--quiet"], |c| {
        c.env(llm::KEY_VAR, llm::KEY);
    });
    let sent = Command::new("kill").args(["-INT", &run.pid().to_string()]).status().unwrap();
    assert!(sent.success(), "kill -INT failed");
    gate.open();
    run.finish().code(130);
    assert_eq!(listed_run(&s, "D", "k")["status"], "interrupted");

    let inputs = s.read("D/k/team.toml");
    let before = snapshot(&s.path("W"));
    let calls = server.calls().len();
    let args = ["resume", "k", "--data", "D", "--no-sync", "--quiet"];
    let out = Out::of(&args, s.command(&args).env_remove(llm::KEY_VAR));
    out.bad_input(&[llm::KEY_VAR, "not set"]);
    assert!(!out.stderr.contains("changed after the run recorded it"), "{}", out.stderr);
    assert_eq!(listed_run(&s, "D", "k")["status"], "interrupted", "not marked running");
    assert_eq!(snapshot(&s.path("W")), before, "no step ran");
    assert_eq!(server.calls().len(), calls, "the model was not called");
    assert_eq!(s.read("D/k/team.toml"), inputs, "the stored team file was not touched");

    // With the key back, it resumes to the end.
    Out::of(&args, s.command(&args).env(llm::KEY_VAR, llm::KEY)).code(0);
    check_finished(&s, "k");
}

/// The processes whose working directory is `dir` (or below it): what a run's commands leave.
fn processes_in(dir: &std::path::Path) -> Vec<String> {
    let dir = std::fs::canonicalize(dir).unwrap();
    let mut found = Vec::new();
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        let name = entry.file_name().to_string_lossy().into_owned();
        if !name.bytes().all(|b| b.is_ascii_digit()) {
            continue;
        }
        if let Ok(cwd) = std::fs::read_link(entry.path().join("cwd"))
            && cwd.starts_with(&dir)
        {
            let cmdline = std::fs::read(entry.path().join("cmdline")).unwrap_or_default();
            found.push(format!("{name}: {}", String::from_utf8_lossy(&cmdline).replace('\0', " ")));
        }
    }
    found
}

/// Starts `plan` as run `id` and kills it (SIGKILL) once its command has appended to
/// `W/count.txt`, that is in the middle of the command.
fn kill_mid_command(s: &Scratch, plan: &str, id: &str) {
    s.write("p.toml", plan);
    std::fs::create_dir_all(s.path("W")).unwrap();
    let mut run = s.spawn(&[
        "run",
        "p.toml",
        "--data",
        "D",
        "--workspace",
        "W",
        "--run-id",
        id,
        "--heartbeat",
        "100ms",
        "--quiet",
    ]);
    wait_for("the command to start", || {
        assert!(!run.exited(), "strata exited before the command ran");
        s.path("W/count.txt").exists()
    });
    assert_eq!(run.kill().status.code(), None, "killed by a signal");
}

/// Regression (the hostile run of issue #10): a command killed mid-way with the run was
/// adopted as "interrupted", then reassigned by its lead and run four more times; its
/// `sleep 30` outlived its 3 s timeout. Now the killed command's processes end at their
/// timeout even with nobody to resume the run, and resume does not run it again: the task
/// stops with a typed reason that asks for a decision.
#[test]
fn a_command_interrupted_by_a_kill_is_not_run_again_and_asks_for_a_decision() {
    let s = Scratch::new();
    let plan = r#"
id = "o"
goal = "g"
[[steps]]
id = "s"
agent = "bottom-d1"
tool = "shell"
args = { command = "echo ran >> count.txt; sleep 30", timeout_ms = 3000 }
"#;
    kill_mid_command(&s, plan, "o3");

    // Nobody resumes yet: the command's own watchdog ends it shortly after its timeout.
    wait_for("the killed run's command to end at its timeout", || {
        processes_in(&s.path("W")).is_empty()
    });
    let resume = s.strata(&["resume", "o3", "--data", "D", "--quiet"]);
    resume.code(1);
    let printed = format!("{}{}", resume.stdout, resume.stderr);
    assert!(printed.contains("was interrupted while `bottom-d1` ran `shell`"), "{printed}");
    assert!(printed.contains("needs a decision"), "{printed}");
    assert_eq!(s.read("W/count.txt"), "ran\n", "the side effect ran exactly once");
    assert_eq!(processes_in(&s.path("W")), Vec::<String>::new(), "a process of the run survived");
    assert_eq!(listed_run(&s, "D", "o3")["status"], "failed");
    let verify = s.strata(&["verify", "o3", "--data", "D", "--json"]).code(0).json();
    assert_eq!(verify["ok"], true, "{verify}");
}

/// A step declared `idempotent = true` may run again after the kill interrupted it: resume
/// waits for the interrupted command until its timeout, stops it, and runs it once more.
#[test]
fn an_interrupted_idempotent_step_runs_again_on_resume() {
    let s = Scratch::new();
    let plan = r#"
id = "o"
goal = "g"
[[steps]]
id = "s"
agent = "bottom-d1"
tool = "shell"
args = { command = "if [ -e second ]; then echo again >> count.txt; else touch second; echo first >> count.txt; sleep 30; fi", timeout_ms = 3000 }
idempotent = true
"#;
    kill_mid_command(&s, plan, "i");

    let resume = s.strata(&["resume", "i", "--data", "D", "--quiet"]);

    resume.code(0);
    assert_eq!(s.read("W/count.txt"), "first\nagain\n");
    assert_eq!(processes_in(&s.path("W")), Vec::<String>::new(), "a process of the run survived");
}

/// The complete JSON lines of `stdout` (a last line still being written is left out).
fn json_lines(stdout: &str) -> Vec<serde_json::Value> {
    let complete = stdout.rsplit_once('\n').map_or("", |(done, _)| done);
    complete
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("not JSON ({e}): {l}")))
        .collect()
}

/// The audit records among JSON output lines.
fn audit_lines(lines: &[serde_json::Value]) -> Vec<&serde_json::Value> {
    lines.iter().filter(|l| l["event"] == "audit").map(|l| &l["record"]).collect()
}

/// The sequence numbers of `records`, checking that none is shown twice.
fn seqs(records: &[&serde_json::Value]) -> std::collections::BTreeSet<u64> {
    let all: Vec<u64> = records.iter().map(|r| r["seq"].as_u64().unwrap()).collect();
    let set: std::collections::BTreeSet<u64> = all.iter().copied().collect();
    assert_eq!(set.len(), all.len(), "a record was shown twice: {all:?}");
    set
}

/// `run --json` prints the team's events as they happen: while the run waits at the gate,
/// its transitions, the decision and the first tool call are out already, in order. Every
/// stored record is printed once, by the run and again (history, then new events) by `resume`.
#[test]
fn run_json_streams_events_while_the_run_goes_and_resume_does_too() {
    let s = Scratch::new();
    let (mut run, gate) = start_gated(&s, "j", "--json");
    let wrote = |r: &&serde_json::Value| {
        r["event"]["event"] == "tool_call" && r["event"]["tool"] == "write_file"
    };
    wait_for("the first tool call on stdout", || {
        assert!(!run.exited(), "strata exited before the gate was opened");
        audit_lines(&json_lines(&run.stdout_so_far())).iter().any(wrote)
    });
    let lines = json_lines(&run.stdout_so_far());
    assert!(!run.exited(), "the lines came while the run was going");
    assert_eq!(lines[0]["event"], "run_started");
    assert!(lines.iter().all(|l| l["event"] != "run_finished"), "{lines:#?}");
    let records = audit_lines(&lines);
    seqs(&records);
    let kind = |r: &serde_json::Value| r["event"]["event"].as_str().unwrap().to_owned();
    let at = |what: &dyn Fn(&serde_json::Value) -> bool| {
        records.iter().position(|r| what(r)).unwrap_or_else(|| panic!("missing: {records:#?}"))
    };
    let write = at(&|r| wrote(&r));
    let proposed = at(&|r| kind(r) == "decision" && r["event"]["action"] == "proposed");
    let approved = at(&|r| kind(r) == "decision" && r["event"]["action"] == "approved");
    let writer = records[write]["agent"].as_str().unwrap();
    let working =
        at(&|r| r["agent"] == writer && kind(r) == "transition" && r["event"]["to"] == "working");
    assert!(proposed < approved && approved < write, "{records:#?}");
    assert!(working < write, "{records:#?}");
    assert!(
        records.iter().any(|r| kind(r) == "transition" && r["event"]["from"] == "initializing")
    );

    // Killed at the gate, then resumed: the history, then the new events; every stored
    // record once, and the run's end last.
    run.kill();
    gate.open();
    let resume = s.strata(&["resume", "j", "--data", "D", "--no-sync", "--json"]);
    resume.code(0);
    let lines = json_lines(&resume.stdout);
    assert_eq!(lines[0]["event"], "run_resumed");
    assert_eq!(lines.last().unwrap()["event"], "run_finished");
    let records = audit_lines(&lines);
    let audit = s.strata(&["inspect", "j", "audit", "--data", "D", "--json"]).code(0).json();
    let stored = audit.as_array().unwrap().iter().map(|r| r["seq"].as_u64().unwrap()).collect();
    assert_eq!(seqs(&records), stored);
    let at = |what: &dyn Fn(&serde_json::Value) -> bool| {
        records.iter().position(|r| what(r)).unwrap_or_else(|| panic!("missing: {records:#?}"))
    };
    let gated = at(&|r| kind(r) == "tool_call" && r["event"]["tool"] == "shell");
    let done = at(&|r| wrote(&r) && r["event"]["args"]["path"] == "done.txt");
    assert!(gated < done, "{records:#?}");
    check_finished(&s, "j");
}

/// Regression (issue #31): after a crash that took the command's processes along (the
/// machine restarted, or its processes were killed with strata), `resume` waited for the dead
/// command until its whole timeout (ten minutes here) before it saw it was gone. Now it sees
/// at once that nothing is left to finish it: the outcome is unknown (interrupted), the side
/// effect is not repeated, and the task asks for a decision.
#[test]
fn resume_sees_at_once_that_a_killed_command_is_gone() {
    let s = Scratch::new();
    let plan = r#"
id = "o"
goal = "g"
[[steps]]
id = "s"
agent = "bottom-d1"
tool = "shell"
args = { command = "echo ran >> count.txt; sleep 600", timeout_ms = 600000 }
"#;
    kill_mid_command(&s, plan, "gone");
    // Everything the run had started dies too, as in a restart of the machine.
    for process in processes_in(&s.path("W")) {
        let pid = process.split(':').next().unwrap();
        let _ = Command::new("kill").args(["-KILL", pid]).status();
    }
    wait_for("the command's processes to be gone", || processes_in(&s.path("W")).is_empty());

    let mut resume = s.spawn(&["resume", "gone", "--data", "D", "--quiet"]);
    // Without the fix it waits ten minutes; the bound only keeps that from hanging the test.
    let started = std::time::Instant::now();
    while !resume.exited() {
        assert!(
            started.elapsed() < std::time::Duration::from_secs(120),
            "resume waited for a command that is gone: {}",
            resume.stderr_so_far()
        );
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    let out = resume.finish();
    out.code(1);
    let printed = format!("{}{}", out.stdout, out.stderr);
    assert!(printed.contains("was interrupted while `bottom-d1` ran `shell`"), "{printed}");
    assert!(printed.contains("needs a decision"), "{printed}");
    assert_eq!(s.read("W/count.txt"), "ran\n", "the side effect ran exactly once");
    assert_eq!(listed_run(&s, "D", "gone")["status"], "failed");
}
