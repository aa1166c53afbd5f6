//! A task that fails: exit code 1 with the typed reason, recorded as failed, and not resumed.

use crate::support::{FAST, Scratch, listed_run, replace_once, run_id_of};

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

/// The audit records of `agent` whose event is `kind`.
fn events<'a>(
    audit: &'a [serde_json::Value],
    agent: &str,
    kind: &str,
) -> Vec<&'a serde_json::Value> {
    audit
        .iter()
        .filter(|r| r["agent"] == agent && r["event"]["event"] == kind)
        .map(|r| &r["event"])
        .collect()
}

/// Issue 31, items 1 and 2, as a user meets them: a step that always fails, on a team whose
/// powers vote to retry it. Each executor's attempts wait for later heartbeats (1, 2, 4), each
/// audited with its class and due heartbeat; a failed executor asked to take the step over
/// refuses at once ("agent X has failed and cannot process messages") instead of leaving its
/// peer to wait; the lead gives the failed executor the step again (failed → working,
/// "reassigned by supervisor") and, when every executor has failed it, escalates: the task
/// ends with the step's failure, not with a guard's "no progress".
#[test]
fn retries_wait_for_later_heartbeats_and_a_failed_executor_refuses_at_once() {
    let s = Scratch::with_example();
    let team = s.read("team.toml");
    s.write("team.toml", &replace_once(&team, "prefer = []", r#"prefer = ["retry"]"#));
    s.write("boom.toml", FAILING_PLAN);
    let run = s.strata(&[
        "run",
        "boom.toml",
        "--team",
        "team.toml",
        "--data",
        "D",
        "--workspace",
        "W",
        FAST[0],
        FAST[1],
        "--no-sync",
        "--quiet",
    ]);
    run.code(1).stdout_has(&["task `boom` FAILED", "step `explode` failed after", "[exit code 3]"]);
    assert!(!run.stdout.contains("no progress"), "{}", run.stdout);
    let id = run_id_of(&run);
    let audit = s.strata(&["inspect", &id, "audit", "--data", "D", "--json"]).code(0).json();
    let audit = audit.as_array().unwrap();

    for executor in ["bottom-b1", "bottom-b2"] {
        let retries = events(audit, executor, "retry");
        let waits: Vec<&serde_json::Value> = retries.iter().map(|r| &r["wait_beats"]).collect();
        assert!(
            waits.len() >= 3 && waits[..3] == [1, 2, 4],
            "{executor} backs off 1, 2, 4 heartbeats: {retries:?}"
        );
        for r in &retries {
            // A failed command may pass next time: retried. Given up with no peer to take it,
            // the step is not retried by this executor: permanent, no next attempt.
            let retried = r["due_heartbeat"].is_u64();
            assert!(!retried || r["class"] == "transient", "only a transient failure: {r}");
            assert_eq!(r["wait_beats"].is_u64(), retried, "{r}");
        }
        let last = retries.last().unwrap();
        assert!(last["due_heartbeat"].is_null(), "{executor} ends without a next attempt: {last}");
        // Each attempt ran no earlier than the heartbeat the one before it said it was due.
        for pair in retries.windows(2) {
            if let Some(due) = pair[0]["due_heartbeat"].as_u64() {
                let next = pair[1]["heartbeat"].as_u64().unwrap();
                assert!(next >= due, "{executor}: an attempt before its heartbeat: {pair:?}");
            }
        }
    }

    // A failed executor asked to take the step over refused at once, in so many words.
    let refusals: Vec<(String, String)> = audit
        .iter()
        .filter(|r| r["event"]["event"] == "denied")
        .map(|r| {
            let error = r["event"]["error"].as_str().unwrap_or_default().to_owned();
            (r["agent"].as_str().unwrap().to_owned(), error)
        })
        .filter(|(_, error)| error.contains("has failed and cannot process messages"))
        .collect();
    assert!(!refusals.is_empty(), "no failed agent refused a request");
    for (agent, error) in &refusals {
        assert_eq!(error, &format!("agent {agent} has failed and cannot process messages"));
    }
    let heard = audit.iter().any(|r| {
        r["event"]["event"] == "peer_help"
            && r["event"]["outcome"]["outcome"] == "refused"
            && r["event"]["outcome"]["reason"]
                .as_str()
                .is_some_and(|reason| reason.ends_with("has failed and cannot process messages"))
    });
    assert!(heard, "the asker heard the refusal");

    // Its lead gave a failed executor the step again.
    let reassigned = audit.iter().any(|r| {
        r["event"]["event"] == "transition"
            && r["event"]["from"] == "failed"
            && r["event"]["to"] == "working"
            && r["event"]["reason"] == "reassigned by supervisor"
    });
    assert!(reassigned, "no failed executor was reassigned by its supervisor");
    assert_eq!(s.strata(&["verify", &id, "--data", "D", "--json"]).code(0).json()["ok"], true);
}
