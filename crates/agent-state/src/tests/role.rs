//! Roles, goal steps and structured results.

use proptest::prelude::*;

use crate::{
    AgentLayer, AgentResult, Capability, ChangeType, PlanStep, Role, RoleBook, RoleError,
    StepTarget, Task, TaskFailure,
};

fn role(name: &str, layer: AgentLayer, enabled: &[&str]) -> Role {
    Role {
        enabled_agents: enabled.iter().map(|e| (*e).to_owned()).collect(),
        tools: if layer == AgentLayer::Bottom { vec!["write_file".into()] } else { vec![] },
        ..Role::new(name, layer)
    }
}

#[test]
fn a_book_knows_who_may_spawn_whom() {
    let book = RoleBook::new([
        role("lead", AgentLayer::Mid, &["coder", "lead"]),
        role("coder", AgentLayer::Bottom, &[]),
    ])
    .unwrap();
    assert!(book.may_spawn("lead", "coder"));
    assert!(book.may_spawn("lead", "lead"));
    assert!(!book.may_spawn("coder", "lead"));
    assert!(!book.may_spawn("nobody", "coder"));
    assert_eq!(book.names(), "coder, lead");
    assert_eq!(book.of_layer(AgentLayer::Mid).count(), 1);
    assert!(book.get("lead").unwrap().supervises());
    assert_eq!(
        book.get("coder").unwrap().capabilities(),
        AgentLayer::Bottom.capabilities().collect::<Vec<_>>()
    );
    assert!(RoleBook::default().is_empty());
}

#[test]
fn a_book_refuses_what_the_matrix_and_the_tree_forbid() {
    let err = |roles: Vec<Role>| RoleBook::new(roles).unwrap_err();
    assert!(matches!(err(vec![role("a b", AgentLayer::Mid, &[])]), RoleError::BadName { .. }));
    assert!(matches!(
        err(vec![role("x", AgentLayer::Mid, &[]), role("x", AgentLayer::Mid, &[])]),
        RoleError::Duplicate { .. }
    ));
    assert!(matches!(err(vec![role("boss", AgentLayer::Top, &[])]), RoleError::TopRole { .. }));
    let unknown = err(vec![role("lead", AgentLayer::Mid, &["ghost"])]);
    assert!(unknown.to_string().contains("enables `ghost`, which is not a role"), "{unknown}");
    // A worker may not enable a lead (a higher layer) nor anything at all (no `delegate`).
    let bottom_enables =
        err(vec![role("lead", AgentLayer::Mid, &[]), role("coder", AgentLayer::Bottom, &["lead"])]);
    assert!(matches!(bottom_enables, RoleError::CannotDelegate { .. }), "{bottom_enables}");
    // A lead enabling a top-layer role (itself refused, but the enabling is reported first).
    let higher =
        err(vec![role("boss", AgentLayer::Mid, &["power"]), role("power", AgentLayer::Top, &[])]);
    assert!(matches!(higher, RoleError::EnablesHigherLayer { .. }), "{higher}");
    let tools_on_mid =
        err(vec![Role { tools: vec!["shell".into()], ..role("m", AgentLayer::Mid, &[]) }]);
    assert!(matches!(tools_on_mid, RoleError::ToolsNotAllowed { .. }));
    let arbitrate = err(vec![Role {
        capabilities: Some(vec![Capability::Arbitrate]),
        ..role("m", AgentLayer::Mid, &[])
    }]);
    assert!(matches!(arbitrate, RoleError::CapabilityNotAllowed { .. }));
    let zero = err(vec![Role { max_instances: Some(0), ..role("m", AgentLayer::Mid, &[]) }]);
    assert!(matches!(zero, RoleError::ZeroInstances { .. }));
}

proptest! {
    /// `may_spawn` is exactly the `enabled_agents` of a valid book, and a book is valid exactly
    /// when no role enables a missing role, and no worker enables anything.
    #[test]
    fn may_spawn_is_enabled_agents(
        edges in proptest::collection::vec((0usize..4, 0usize..5), 0..10),
        bottoms in proptest::collection::vec(any::<bool>(), 4),
    ) {
        let names = ["r0", "r1", "r2", "r3"];
        let layer = |i: usize| if bottoms[i] { AgentLayer::Bottom } else { AgentLayer::Mid };
        let mut roles: Vec<Role> = (0..4).map(|i| role(names[i], layer(i), &[])).collect();
        for (from, to) in &edges {
            let to = names.get(*to).copied().unwrap_or("missing");
            if !roles[*from].enabled_agents.iter().any(|e| e == to) {
                roles[*from].enabled_agents.push(to.to_owned());
            }
        }
        let valid = roles.iter().all(|r| {
            r.enabled_agents.iter().all(|e| names.contains(&e.as_str()))
                && (r.enabled_agents.is_empty() || r.layer == AgentLayer::Mid)
        });
        let built = RoleBook::new(roles.clone());
        prop_assert_eq!(built.is_ok(), valid, "{:?}", built);
        if let Ok(book) = built {
            for a in &roles {
                for b in names {
                    prop_assert_eq!(book.may_spawn(&a.name, b), a.enabled_agents.iter().any(|e| e == b));
                }
            }
        }
    }
}

fn goal_step(id: &str, description: &str) -> PlanStep {
    PlanStep::goal(id, description, StepTarget::Any)
}

#[test]
fn goal_tasks_and_goal_steps_are_checked() {
    let goal_only = Task::goal("t", "ship it");
    assert!(goal_only.check_request().is_ok());
    assert!(!goal_only.is_scripted());
    assert!(
        matches!(goal_only.check(), Err(TaskFailure::InvalidPlan { .. })),
        "a plan needs steps"
    );
    let mut planned = Task { steps: vec![goal_step("a", "write it")], ..goal_only.clone() };
    assert!(planned.check().is_ok());
    assert!(!planned.is_scripted());
    planned.steps[0].description = " ".into();
    let err = planned.check().unwrap_err().to_string();
    assert!(err.contains("names no `tool` and has no `description`"), "{err}");
    planned.steps[0] = PlanStep { tool: "shell".into(), ..goal_step("a", "") };
    assert!(planned.check().is_ok() && planned.is_scripted());
    planned.steps[0].role = Some("co\nder".into());
    assert!(planned.check().unwrap_err().to_string().contains("control character"));
    let empty_goal = Task::goal("t", " ");
    assert!(empty_goal.check_request().is_err());
}

#[test]
fn results_are_parsed_with_the_problem_named_and_claims_checked_against_the_journal() {
    let value = serde_json::json!({
        "status": "partial",
        "summary": "wrote the module",
        "artifacts": [
            {"file_path": "./src/lib.rs", "description": "the module", "change_type": "created"},
            {"file_path": "README.md", "description": "read", "change_type": "referenced"},
            {"file_path": "ghost.rs", "description": "never written", "change_type": "modified"}
        ],
        "known_issues": ["no tests"]
    });
    let result = AgentResult::parse(&value).unwrap();
    assert!(!result.succeeded());
    assert!(ChangeType::Created.writes() && !ChangeType::Referenced.writes());
    let unverified: Vec<&str> = result
        .unverified_artifacts(&["src/lib.rs".to_owned()])
        .into_iter()
        .map(|a| a.file_path.as_str())
        .collect();
    assert_eq!(unverified, ["ghost.rs"], "a referenced file needs no write; ./ is dropped");

    for (bad, problem) in [
        (
            serde_json::json!({"status": "done", "summary": "x", "artifacts": [], "known_issues": []}),
            "unknown variant `done`",
        ),
        (
            serde_json::json!({"status": "success", "artifacts": [], "known_issues": []}),
            "missing field `summary`",
        ),
        (
            serde_json::json!({"status": "success", "summary": " ", "artifacts": [], "known_issues": []}),
            "`result.summary` is empty",
        ),
        (
            serde_json::json!({"status": "success", "summary": "x", "artifacts": [{"file_path": "", "description": "d", "change_type": "created"}], "known_issues": []}),
            "empty `file_path`",
        ),
        (
            serde_json::json!({"status": "success", "summary": "x", "artifacts": [], "known_issues": [], "extra": 1}),
            "unknown field `extra`",
        ),
    ] {
        let err = AgentResult::parse(&bad).unwrap_err();
        assert!(err.contains(problem), "{err}");
    }
}
