//! Fault injection (`STRATA_FAULT_PANIC`, README "Fault injection"): an agent whose turn
//! panics ends in a typed outcome, never a run that hangs with the agent marked busy.

use serde_json::Value;

use crate::support::{FAST, Out, Scratch, run_id_of};

/// `strata run` of the example team and plan with `STRATA_FAULT_PANIC=fault`.
fn run_with_panic(s: &Scratch, fault: &str) -> Out {
    let args = [
        "run",
        "plan.toml",
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
    ];
    let mut command = s.command(&args);
    command.env("STRATA_FAULT_PANIC", fault);
    Out::of(&args, &mut command)
}

fn audit(s: &Scratch, id: &str) -> Vec<Value> {
    let audit = s.strata(&["inspect", id, "audit", "--data", "D", "--json"]).code(0).json();
    audit.as_array().unwrap().clone()
}

fn panics_of(audit: &[Value], agent: &str) -> Vec<(u64, bool)> {
    audit
        .iter()
        .filter(|r| r["agent"] == agent && r["event"]["event"] == "agent_panicked")
        .map(|r| (r["event"]["count"].as_u64().unwrap(), r["event"]["failed"] == true))
        .collect()
}

#[test]
fn an_executor_whose_turn_panics_once_is_reloaded_and_the_run_succeeds() {
    let s = Scratch::with_example();
    let run = run_with_panic(&s, "bottom-d2");
    run.code(0);
    let id = run_id_of(&run);
    let audit = audit(&s, &id);
    assert_eq!(panics_of(&audit, "bottom-d2"), [(1, false)], "the panic is audited");
    // Its step was done once, by the agent it names.
    assert_eq!(s.read("W/notes/plan.md"), "# Plan\n- greet\n- measure\n");
    let writes = audit
        .iter()
        .filter(|r| {
            r["event"]["event"] == "tool_call"
                && r["event"]["tool"] == "write_file"
                && r["event"]["success"] == true
                && r["event"]["args"]["path"] == "notes/plan.md"
        })
        .count();
    assert_eq!(writes, 1, "the side effect happened once");
    assert_eq!(s.strata(&["verify", &id, "--data", "D", "--json"]).code(0).json()["ok"], true);
    let shown = s.strata(&["inspect", &id, "audit", "--data", "D"]);
    shown.code(0).stdout_has(&["PANICKED (1 in a row)", "reloaded from its stored state"]);
}

#[test]
fn an_executor_that_always_panics_fails_and_the_run_ends_typed() {
    let s = Scratch::with_example();
    let run = run_with_panic(&s, "bottom-d2:always");
    let code = run.status.code();
    assert!(matches!(code, Some(0 | 1)), "exit 0, or 1 with a typed reason: {run:?}");
    if code == Some(1) {
        run.stdout_has(&["FAILED"]);
    }
    let id = run_id_of(&run);
    let audit = audit(&s, &id);
    let max = u64::from(agent_core::MAX_PANICS);
    let expected: Vec<(u64, bool)> = (1..=max).map(|n| (n, n == max)).collect();
    assert_eq!(panics_of(&audit, "bottom-d2"), expected);
    assert!(
        audit.iter().any(|r| r["agent"] == "bottom-d2"
            && r["event"]["event"] == "transition"
            && r["event"]["to"] == "failed"
            && r["event"]["reason"].as_str().is_some_and(|w| w.starts_with("panicked: "))),
        "bottom-d2 failed with reason panicked: <message>"
    );
    assert_eq!(s.strata(&["verify", &id, "--data", "D", "--json"]).code(0).json()["ok"], true);
}
