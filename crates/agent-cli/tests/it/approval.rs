//! A human as a signer: `strata approve` / `strata veto` from another terminal while a run
//! waits for a human's signature on its plan (`[approvals] plans = true`), bad requests
//! refused with exit 2 and audited, and a request queued for a killed run that `resume` takes.

use crate::support::*;

/// A one-step plan: nothing to run in a sandbox.
const PLAN: &str = r#"
id = "signed"
goal = "write a note once a human signs"

[[steps]]
id = "note"
domain = "docs"
tool = "write_file"
args = { path = "note.txt", content = "signed\n" }
"#;

/// The example team, with alice allowed to sign and every plan needing a human.
fn scratch() -> Scratch {
    let s = Scratch::with_example();
    let team = s.read("team.toml");
    s.write("team.toml", &format!("{team}\n[approvals]\nhumans = [\"alice\"]\nplans = true\n"));
    s.write("plan.toml", PLAN);
    s
}

fn start(s: &Scratch, id: &str) -> Running {
    start_run(s, id)
}

fn pending(s: &Scratch, run: &mut Running, id: &str) -> String {
    pending_decision(s, run, id, "the plan to wait for a human", |d| {
        d["status"] == "pending" && d["human_approval"]["allowed"][0] == "alice"
    })
}

/// The `operator` records of the run's audit log: (who, outcome, error).
fn operator_records(s: &Scratch, id: &str) -> Vec<(String, String, String)> {
    let audit = s.strata(&["inspect", id, "audit", "--data", "D", "--json"]).code(0).json();
    audit
        .as_array()
        .unwrap()
        .iter()
        .filter(|r| r["event"]["event"] == "operator")
        .map(|r| {
            (
                r["agent"].as_str().unwrap().to_owned(),
                r["event"]["outcome"].as_str().unwrap().to_owned(),
                r["event"]["error"].as_str().unwrap_or("").to_owned(),
            )
        })
        .collect()
}

#[test]
fn a_human_approves_from_another_terminal_and_bad_requests_are_refused_and_audited() {
    let s = scratch();
    let mut run = start(&s, "h1");
    let decision = pending(&s, &mut run, "h1");

    let unknown = "00000000-0000-4000-8000-000000000001";
    s.strata(&["approve", "h1", unknown, "--as", "alice", "--data", "D"])
        .bad_input(&["no decision", unknown]);
    s.strata(&["approve", "h1", &decision, "--as", "mallory", "--data", "D"])
        .bad_input(&["`mallory` may not sign", "alice"]);
    s.strata(&["veto", "h1", &decision, "--as", "alice", "--reason", " ", "--data", "D"])
        .bad_input(&["a veto needs a reason"]);
    s.strata(&["approve", "h1", "not-a-decision", "--as", "alice", "--data", "D"])
        .bad_input(&["not a decision id"]);
    // A prefix too short to be told apart, and one no decision has.
    s.strata(&["approve", "h1", &decision[..7], "--as", "alice", "--data", "D"])
        .bad_input(&["8 characters or more"]);
    let other = if decision.starts_with('0') { "ffffffff" } else { "00000000" };
    s.strata(&["approve", "h1", other, "--as", "alice", "--data", "D"])
        .bad_input(&["no decision starts with", "inspect h1 decisions"]);
    let mut no_user = s.command(&["approve", "h1", &decision, "--data", "D"]);
    no_user.env_remove("USER");
    Out::of(&["approve", "h1", &decision], &mut no_user).bad_input(&["--as NAME"]);
    assert!(!s.path("D/h1/workspace/note.txt").exists(), "nothing runs before a human signs");

    // Signed by the id as `strata` prints it short: its first 8 characters.
    s.strata(&["approve", "h1", &decision[..8], "--as", "alice", "--data", "D"])
        .code(0)
        .stdout_has(&[&decision, "by human:alice"]);
    run.finish().code(0);
    assert_eq!(s.read("D/h1/workspace/note.txt"), "signed\n");

    // Decided already: refused, and audited by the command itself (the run has ended).
    s.strata(&["approve", "h1", &decision, "--as", "alice", "--data", "D"])
        .bad_input(&["already approved"]);

    let records = operator_records(&s, "h1");
    let outcomes: Vec<(&str, &str)> =
        records.iter().map(|(who, outcome, _)| (who.as_str(), outcome.as_str())).collect();
    assert_eq!(
        outcomes,
        [
            ("human:alice", "refused"),
            ("human:mallory", "refused"),
            ("human:alice", "refused"),
            ("human:alice", "approved"),
            ("human:alice", "refused"),
        ],
        "{records:?}"
    );
    assert!(records[0].2.contains("no decision"), "{records:?}");
    assert!(records[1].2.contains("may not sign"), "{records:?}");
    assert!(records[4].2.contains("already approved"), "{records:?}");
    let lines = s.strata(&["inspect", "h1", "audit", "--data", "D"]).code(0).stdout.clone();
    assert!(lines.contains("OPERATOR approve decision") && lines.contains("REFUSED"), "{lines}");
    s.strata(&["verify", "h1", "--data", "D"]).code(0);
}

#[test]
fn a_human_veto_fails_the_run_with_the_reason() {
    let s = scratch();
    let mut run = start(&s, "h2");
    let decision = pending(&s, &mut run, "h2");
    s.strata(&[
        "veto",
        "h2",
        &decision,
        "--as",
        "alice",
        "--reason",
        "not on a Friday",
        "--data",
        "D",
    ])
    .code(0)
    .stdout_has(&["vetoed by human:alice"]);
    let out = run.finish();
    out.code(1);
    assert!(out.stdout.contains("not on a Friday"), "{}\n{}", out.stdout, out.stderr);
    assert!(!s.path("D/h2/workspace/note.txt").exists(), "a vetoed plan must not run");
}

#[test]
fn an_approval_for_a_killed_run_is_queued_and_resume_takes_it() {
    let s = scratch();
    let mut run = start(&s, "h3");
    let decision = pending(&s, &mut run, "h3");
    assert_eq!(run.kill().status.code(), None, "killed by a signal");
    s.strata(&["approve", "h3", &decision, "--as", "alice", "--data", "D"]).code(0).stdout_has(&[
        "not running",
        "queued",
        "strata resume h3",
    ]);
    s.strata(&["resume", "h3", "--data", "D", "--no-sync", "--quiet"])
        .code(0)
        .stdout_has(&["succeeded"]);
    assert_eq!(s.read("D/h3/workspace/note.txt"), "signed\n");
    let records = operator_records(&s, "h3");
    assert_eq!(records.len(), 1, "{records:?}");
    assert_eq!((records[0].0.as_str(), records[0].1.as_str()), ("human:alice", "approved"));
}
