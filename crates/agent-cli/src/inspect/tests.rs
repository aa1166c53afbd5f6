//! Tests of `inspect tree` and `inspect results` as text, on hand-built audit logs: spawned
//! agents drawn under their spawners, statuses, results, dismissals, costs rolled up, and
//! escaped text (their JSON is the library's, tested there).
#![allow(clippy::unwrap_used, clippy::expect_used, reason = "tests")]

use std::collections::HashMap;

use agent_state::{AgentId, AgentStatus, Artifact, ChangeType, ResultStatus};
use strata::audit::spawns::fixtures::*;
use strata::audit::spawns::{SpawnTree, results};

use super::spawns::{TreeView as _, render_results};

#[test]
fn spawned_agents_are_drawn_under_their_spawners_with_task_status_results_and_costs() {
    let log = spawning_run();
    let meter = costs(&[
        ("top-a", 0.01),
        ("top-b", 0.0),
        ("mid-docs", 0.0),
        ("bottom-d1", 0.0),
        ("w1", 0.002),
        ("w3", 0.001),
    ]);
    let tree = SpawnTree::build(team(), &log.0, Some(&meter));
    assert_eq!(tree.spawned(), 3);
    let expected = "\
top-a · idle · $0.0100 · subtree ≥ $0.0130
├─ mid-docs · idle · $0.0000 · subtree $0.0010
│  ├─ bottom-d1 · idle · $0.0000
│  └─ w3 (writer) · idle · task: Document it · no results · $0.0010
└─ w1 (coder) · working · task: Write the parser… · returned results · $0.0020 · subtree ≥ $0.0020
   └─ w2 (tester) · terminated · task: Test every rule of the grammar Test every rule of the gramma… · returned UNTRUSTED results · despawned · $? (no price)
top-b · idle · $0.0000
3 agent(s) spawned in this run, 2 returned results, 1 despawned
costs: the agent's own model calls in USD; subtree: with every agent below it (≥: some costs are not known)
";
    assert_eq!(tree.render(), expected);
}

#[test]
fn without_known_costs_none_are_shown() {
    let log = spawning_run();
    for tree in [
        SpawnTree::build(team(), &log.0, None),
        SpawnTree::build(team(), &log.0, Some(&costs(&[]))),
    ] {
        let text = tree.render();
        assert!(!text.contains('$'), "{text}");
        assert!(!text.contains("costs:"), "{text}");
        assert!(
            text.contains("└─ w1 (coder) · working · task: Write the parser… · returned results\n")
        );
    }
}

#[test]
fn a_run_without_spawns_says_so() {
    let mut log = Log::default();
    log.to("top-a", AgentStatus::Initializing, AgentStatus::Idle);
    let tree = SpawnTree::build(team(), &log.0, None);
    assert_eq!(tree.spawned(), 0);
    assert_eq!(
        tree.render(),
        "\
top-a · idle
└─ mid-docs · not started
   └─ bottom-d1 · not started
top-b · not started
no agents were spawned in this run
"
    );
}

#[test]
fn an_agent_spawned_by_an_unknown_parent_is_a_root_and_a_repeated_spawn_is_one_agent() {
    let mut log = Log::default();
    log.spawn("ghost", "w9", "coder", "x", 1).spawn("top-b", "w9", "coder", "again", 1);
    let tree = SpawnTree::build(team(), &log.0, None);
    assert_eq!(tree.spawned(), 1);
    let text = tree.render();
    assert!(
        text.contains("\ntop-b · not started\nw9 (coder) · not started · task: x · no results\n"),
        "{text}"
    );
}

#[test]
fn text_from_agents_is_escaped_on_one_line() {
    let mut log = Log::default();
    log.spawn("top-a", "w1", "coder", "\u{1b}[2Jwipe\tthe screen", 1);
    let text = SpawnTree::build(team(), &log.0, None).render();
    assert!(text.contains("task: \\u{1b}[2Jwipe\\tthe screen · no results\n"), "{text}");
    assert!(!text.contains('\u{1b}'), "{text}");

    let mut result = done("line one\nline \u{9b}two");
    result.artifacts[0].file_path = "a\nb.rs".into();
    result.known_issues = vec!["flaky\r".into()];
    log.result("w1", result, true);
    let text = render_results(&results(&log.0, &HashMap::new()));
    assert!(text.contains("  summary: line one\n    line \\u{9b}two\n"), "{text}");
    assert!(text.contains("    created a\\nb.rs — the parser\n"), "{text}");
    assert!(text.contains("    - flaky\\r\n"), "{text}");
    assert!(!text.contains('\u{9b}') && !text.contains('\r'), "{text}");
}

#[test]
fn results_are_listed_in_order_with_role_status_trust_artifacts_and_issues() {
    let mut log = spawning_run();
    let mut partial = done("half of it");
    partial.status = ResultStatus::Partial;
    partial.artifacts.push(Artifact {
        file_path: "README.md".into(),
        description: String::new(),
        change_type: ChangeType::Referenced,
    });
    partial.known_issues = vec!["no error messages yet".into(), "slow".into()];
    log.result("top-b", partial, true);
    let roles = HashMap::from([(AgentId::from("top-b"), "reviewer".to_owned())]);
    let found = results(&log.0, &roles);
    assert_eq!(found.len(), 3);
    let expected = "\
w2 (tester) · success · UNTRUSTED · audit record 9
  task: task of w2
  summary: tested
  artifacts:
    created src/parser.rs — the parser
  known issues: none

w1 (coder) · success · trusted · audit record 12
  task: task of w1
  summary: parser written
  artifacts:
    created src/parser.rs — the parser
  known issues: none

top-b (reviewer) · partial · trusted · audit record 15
  task: task of top-b
  summary: half of it
  artifacts:
    created src/parser.rs — the parser
    referenced README.md
  known issues:
    - no error messages yet
    - slow
";
    assert_eq!(render_results(&found), expected);
}

#[test]
fn no_results_says_so() {
    let log = Log::default();
    let found = results(&log.0, &HashMap::new());
    assert_eq!(
        render_results(&found),
        "no structured results in this run (no agent returned results with return_results)\n"
    );
}

#[test]
fn a_result_recorded_twice_for_one_task_is_shown_once_the_last() {
    let mut log = spawning_run();
    let before = results(&log.0, &HashMap::new()).len();
    // w1's turn ran again after a crash and recorded its result once more.
    log.result("w1", done("parser written again"), true);
    let found = results(&log.0, &HashMap::new());
    assert_eq!(found.len(), before);
    let text = render_results(&found);
    assert_eq!(text.matches("w1 (coder)").count(), 1, "{text}");
    assert!(text.contains("summary: parser written again\n"), "{text}");
    assert!(!text.contains("summary: parser written\n"), "{text}");
    let tree = SpawnTree::build(team(), &log.0, None).render();
    assert!(
        tree.contains("w1 (coder) · working · task: Write the parser… · returned results\n"),
        "{tree}"
    );
}
