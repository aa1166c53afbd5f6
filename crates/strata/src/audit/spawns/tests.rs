//! The agents' tree and results of hand-built audit logs, as JSON: spawned agents under
//! their spawners, statuses, results, dismissals and costs rolled up.
#![allow(clippy::unwrap_used, clippy::expect_used, reason = "tests")]

use std::collections::HashMap;

use agent_state::{AgentId, Artifact, ChangeType, ResultStatus};

use super::fixtures::*;
use super::{SpawnTree, results, results_json};

#[test]
fn spawned_agents_are_under_their_spawners_with_task_status_results_and_costs() {
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
    assert!(tree.costs);
    let json = tree.json();
    assert_eq!(json.len(), 7, "configured agents first, then spawned ones");
    let ids: Vec<&str> = json.iter().map(|a| a["id"].as_str().unwrap()).collect();
    assert_eq!(ids, ["top-a", "top-b", "mid-docs", "bottom-d1", "w1", "w2", "w3"]);
    let w2 = &json[5];
    assert_eq!(w2["supervisor"], "w1");
    assert_eq!(w2["role"], "tester");
    assert_eq!(w2["status"], "terminated");
    assert_eq!(w2["spawned"], true);
    assert_eq!(w2["depth"], 2);
    assert_eq!(w2["results"], 1);
    assert_eq!(w2["untrusted_results"], 1);
    assert_eq!(w2["despawned"], true);
    assert_eq!(w2["despawn_summary"], "done\nfor now");
    assert_eq!(w2["cost_usd"], serde_json::Value::Null);
    let top = &json[0];
    assert_eq!(top["spawned"], false);
    assert_eq!(top["task_prompt"], serde_json::Value::Null);
    assert!((top["subtree_cost_usd"].as_f64().unwrap() - 0.013).abs() < 1e-12, "{top}");
    assert_eq!(top["subtree_cost_complete"], false, "w2's cost is not known");
    assert_eq!(json[2]["subtree_cost_complete"], true, "{}", json[2]);
    assert_eq!(json[4]["task_prompt"], "Write the parser\nwith tests and docs");
    assert_eq!(json[6]["supervisor"], "mid-docs");
    assert_eq!(json[6]["results"], 0);
}

#[test]
fn without_known_costs_none_are_given() {
    let log = spawning_run();
    for tree in [
        SpawnTree::build(team(), &log.0, None),
        SpawnTree::build(team(), &log.0, Some(&costs(&[]))),
    ] {
        assert!(!tree.costs);
        assert_eq!(tree.json()[0]["cost_usd"], serde_json::Value::Null);
        assert_eq!(tree.json()[0]["subtree_cost_complete"], serde_json::Value::Null);
    }
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
    let json = results_json(&found);
    assert_eq!(json.as_array().unwrap().len(), 3);
    assert_eq!(json[0]["agent"], "w2");
    assert_eq!(json[0]["role"], "tester");
    assert_eq!(json[0]["trusted"], false);
    assert_eq!(json[0]["seq"], 9);
    assert_eq!(json[1]["agent"], "w1");
    assert_eq!(json[2]["role"], "reviewer");
    assert_eq!(json[2]["result"]["status"], "partial");
    assert_eq!(json[2]["result"]["artifacts"][1]["change_type"], "referenced");
    assert_eq!(json[2]["result"]["known_issues"][1], "slow");
    assert_eq!(results_json(&results(&Log::default().0, &roles)), serde_json::json!([]));
}

#[test]
fn a_result_recorded_twice_for_one_task_is_given_once_the_last() {
    let mut log = spawning_run();
    let before = results(&log.0, &HashMap::new()).len();
    // w1's turn ran again after a crash and recorded its result once more.
    log.result("w1", done("parser written again"), true);
    let found = results(&log.0, &HashMap::new());
    assert_eq!(found.len(), before);
    let json = results_json(&found);
    let w1: Vec<&serde_json::Value> =
        json.as_array().unwrap().iter().filter(|r| r["agent"] == "w1").collect();
    assert_eq!(w1.len(), 1);
    assert_eq!(w1[0]["result"]["summary"], "parser written again");
    let tree = SpawnTree::build(team(), &log.0, None);
    let w1 = tree.json().into_iter().find(|n| n["id"] == "w1").unwrap();
    assert_eq!(w1["results"], 1, "{w1}");
}
