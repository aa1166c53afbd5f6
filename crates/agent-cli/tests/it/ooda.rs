//! An OODA agent in a `strata run`: its plan step asks for a level-4 change to itself, the run
//! waits for a human, `strata approve` from another terminal lets it apply (a new version in
//! the audit); `strata rollback` takes it back to an earlier version; bad rollbacks are
//! refused with exit 2 and audited.

use crate::support::*;

/// Two steps for the OODA executor: a level-1 change (applies at once: version 2), then a
/// level-4 one (waits for a human).
const PLAN: &str = r#"
id = "improve"
goal = "the OODA agent tightens its own prompt"

[[steps]]
id = "brief"
agent = "ooda-1"
tool = "modify_self"
args = { modification_type = "prompt", target = "prompt", change = { text = "Be brief." }, safety_level = 1 }

[[steps]]
id = "careful"
agent = "ooda-1"
tool = "modify_self"
args = { modification_type = "prompt", target = "prompt", change = { append = "Ask before deleting." }, safety_level = 4 }
after = ["brief"]
"#;

/// The example team with an OODA executor under the docs lead, and alice allowed to sign.
pub(crate) fn scratch() -> Scratch {
    let s = Scratch::with_example();
    let team = s.read("team.toml");
    s.write(
        "team.toml",
        &format!(
            "{team}\n[approvals]\nhumans = [\"alice\"]\n\n[[bottom]]\nid = \"ooda-1\"\nsupervisor = \"mid-docs\"\ntools = [\"read_file\", \"write_file\"]\n[bottom.ooda]\nrole = \"Editor\"\ngoal = \"keep its prompt right\"\nself_modification_enabled = true\nself_modification_level = 4\n"
        ),
    );
    s.write("plan.toml", PLAN);
    s
}

fn start(s: &Scratch, id: &str) -> Running {
    start_run(s, id)
}

fn pending(s: &Scratch, run: &mut Running, id: &str) -> String {
    pending_decision(s, run, id, "the change to wait for a human", |d| {
        d["status"] == "pending" && d["content"]["kind"] == "self_modification"
    })
}

/// The OODA agent's `modify_self` events: (outcome, version).
fn changes(s: &Scratch, id: &str) -> Vec<(String, u64)> {
    let audit = s.strata(&["inspect", id, "audit", "--data", "D", "--json"]).code(0).json();
    audit
        .as_array()
        .unwrap()
        .iter()
        .filter(|r| r["event"]["event"] == "ooda" && r["event"]["ooda"]["kind"] == "modify_self")
        .map(|r| {
            let data = &r["event"]["ooda"]["data"];
            (data["outcome"].as_str().unwrap().to_owned(), data["version"].as_u64().unwrap_or(0))
        })
        .collect()
}

#[test]
fn a_level_four_change_waits_for_strata_approve_and_then_applies() {
    let s = scratch();
    let mut run = start(&s, "o1");
    let decision = pending(&s, &mut run, "o1");
    assert_eq!(
        changes(&s, "o1"),
        [("validated".into(), 2), ("applied".into(), 2), ("waiting_approval".into(), 3)]
    );

    s.strata(&["approve", "o1", &decision, "--as", "alice", "--data", "D"])
        .code(0)
        .stdout_has(&[&decision, "by human:alice"]);
    run.finish().code(0);

    assert_eq!(changes(&s, "o1").last().unwrap(), &("applied".to_owned(), 3));
    let lines = s.strata(&["inspect", "o1", "audit", "--data", "D"]).code(0).stdout.clone();
    assert!(lines.contains("ooda modify_self"), "{lines}");
    s.strata(&["verify", "o1", "--data", "D"]).code(0);
}

#[test]
fn strata_rollback_takes_an_ooda_agent_back_and_bad_rollbacks_are_refused() {
    let s = scratch();
    let mut run = start(&s, "o2");
    pending(&s, &mut run, "o2");

    s.strata(&["rollback", "o2", "mid-docs", "1", "--as", "alice", "--data", "D"])
        .bad_input(&["`mid-docs` is not an OODA agent", "ooda-1"]);
    s.strata(&["rollback", "o2", "ooda-1", "1", "--as", "mallory", "--data", "D"])
        .bad_input(&["`mallory` may not operate run o2", "alice"]);
    s.strata(&["rollback", "o2", "ooda-1", "1", "--as", "alice", "--data", "D"])
        .code(0)
        .stdout_has(&["ooda-1 told to roll back to version 1"]);
    run.finish().code(0);

    // The change that waited was dropped; version 3 is version 1 again.
    let all = changes(&s, "o2");
    assert!(all.contains(&("rollback_scheduled".to_owned(), 3)), "{all:?}");
    assert_eq!(all.last().unwrap(), &("rolled_back_to".to_owned(), 3), "{all:?}");
    let audit = s.strata(&["inspect", "o2", "audit", "--data", "D", "--json"]).code(0).json();
    let operators: Vec<&str> = audit
        .as_array()
        .unwrap()
        .iter()
        .filter(|r| r["event"]["event"] == "operator")
        .map(|r| r["event"]["outcome"].as_str().unwrap())
        .collect();
    assert_eq!(operators, ["refused", "refused", "delivered"]);
    s.strata(&["verify", "o2", "--data", "D"]).code(0);
}
