//! `planner_agent`: the objective split as written on the rule-based reasoner, a reasoner's
//! plan rendered, and the plan file's TOML (escaping included).

use agent_core::{Plan, ReasonError, ReasoningRequest, ScriptedAnswer};
use agent_executor::{PLANNER_AGENT, RunRequest, builtins::PLANNER_NEEDS_MODEL};
use agent_state::{AgentId, FailureKind, LeadRequest, PlanStep, RunState, StepTarget};
use serde_json::{Value, json};

use crate::support::{Workspace, assert_rising_to_100, executor, rule_based, scripted};

fn descriptions(data: &Value) -> Vec<&str> {
    data["steps"].as_array().unwrap().iter().map(|s| s["description"].as_str().unwrap()).collect()
}

fn parsed(toml_text: &str) -> toml::Table {
    toml_text.parse::<toml::Table>().unwrap_or_else(|e| panic!("{e}\n{toml_text}"))
}

#[tokio::test]
async fn numbered_lines_become_steps_each_after_the_one_before() {
    let (cx, events) = rule_based(PLANNER_AGENT);
    let objective =
        "Launch the site:\n1. Write the copy\n2) Build the pages\n   with the new theme\n3. Deploy";
    let request = RunRequest::new(PLANNER_AGENT, objective)
        .with_run_id("r7".parse().unwrap())
        .with_inputs(json!({"domain": "web"}));
    let response = executor(Workspace::new().env()).execute(request, cx).await.unwrap();
    assert_eq!(response.status, RunState::Completed, "{:?}", response.failure);
    assert_eq!(
        descriptions(&response.data),
        ["Write the copy", "Build the pages with the new theme", "Deploy"]
    );
    assert_eq!(
        response.data["steps"][1],
        json!({"id": "step-2", "description": "Build the pages with the new theme",
               "after": ["step-1"], "owner": "web", "role": null})
    );
    assert_eq!(response.data["steps"][0]["after"], json!([]));
    assert_eq!(response.needs_model.as_deref(), Some(PLANNER_NEEDS_MODEL));
    assert_eq!(
        PLANNER_NEEDS_MODEL,
        "choosing roles, owners and dependencies beyond the written order"
    );

    let file = parsed(&response.primary_output);
    assert_eq!(file["id"].as_str(), Some("plan-r7"));
    assert_eq!(file["goal"].as_str(), Some(objective));
    let steps = file["steps"].as_array().unwrap();
    assert_eq!(steps.len(), 3);
    assert_eq!(steps[2]["id"].as_str(), Some("step-3"));
    assert_eq!(steps[2]["after"].as_array().unwrap()[0].as_str(), Some("step-2"));
    assert_eq!(steps[2]["domain"].as_str(), Some("web"));
    assert!(steps[0].get("after").is_none(), "no `after` on the first step");
    assert!(steps.iter().all(|s| s.get("tool").is_none()), "goal steps name no tool");
    assert_rising_to_100(&events);
}

#[tokio::test]
async fn sentences_semicolons_and_then_split_a_one_line_objective() {
    let (cx, _) = rule_based(PLANNER_AGENT);
    let request = RunRequest::new(
        PLANNER_AGENT,
        "Write the spec, then build the prototype; test it with users. Ship it!",
    );
    let response = executor(Workspace::new().env()).execute(request, cx).await.unwrap();
    assert_eq!(
        descriptions(&response.data),
        ["Write the spec", "Build the prototype", "Test it with users", "Ship it"]
    );
    // Without a domain no step has an owner.
    assert!(response.data["steps"].as_array().unwrap().iter().all(|s| s["owner"].is_null()));

    // Bullets, and an objective that is one step.
    let (cx, _) = rule_based(PLANNER_AGENT);
    let request = RunRequest::new(PLANNER_AGENT, "Tidy up:\n- the docs\n* the tests\n");
    let response = executor(Workspace::new().env()).execute(request, cx).await.unwrap();
    assert_eq!(descriptions(&response.data), ["The docs", "The tests"]);
    let (cx, _) = rule_based(PLANNER_AGENT);
    let request = RunRequest::new(PLANNER_AGENT, "organise the offsite");
    let response = executor(Workspace::new().env()).execute(request, cx).await.unwrap();
    assert_eq!(descriptions(&response.data), ["Organise the offsite"]);
}

#[tokio::test]
async fn quotes_backslashes_and_newlines_are_escaped_in_the_plan_file() {
    let (cx, _) = rule_based(PLANNER_AGENT);
    let objective = "Say \"hi\" to C:\\Users\\me;\nthen print a tab\tand a # sign";
    let request =
        RunRequest::new(PLANNER_AGENT, objective).with_inputs(json!({"id": "plan \"quoted\""}));
    let response = executor(Workspace::new().env()).execute(request, cx).await.unwrap();
    assert_eq!(response.status, RunState::Completed, "{:?}", response.failure);
    let file = parsed(&response.primary_output);
    assert_eq!(file["id"].as_str(), Some("plan \"quoted\""));
    assert_eq!(file["goal"].as_str(), Some(objective));
    let steps = file["steps"].as_array().unwrap();
    assert_eq!(steps[0]["description"].as_str(), Some("Say \"hi\" to C:\\Users\\me"));
    assert_eq!(steps[1]["description"].as_str(), Some("Print a tab and a # sign"));

    // An id with a control character cannot be a plan's id.
    let (cx, _) = rule_based(PLANNER_AGENT);
    let request = RunRequest::new(PLANNER_AGENT, "x").with_inputs(json!({"id": "a\nb"}));
    let response = executor(Workspace::new().env()).execute(request, cx).await.unwrap();
    assert_eq!(response.failure.unwrap().kind, FailureKind::InvalidInput);
}

fn goal_step(id: &str, description: &str, after: &[&str]) -> PlanStep {
    PlanStep::goal(id, description, StepTarget::Domain("docs".into()))
        .with_after(after.iter().copied())
        .with_role("writer")
        .with_acceptance(format!("{id} is done"))
}

#[tokio::test]
async fn a_reasoner_that_plans_gives_the_steps_owners_and_dependencies() {
    let mut scripted_step = goal_step("publish", "Publish the guide", &["draft", "review"]);
    scripted_step.tool = "write_file".into();
    scripted_step.args = json!({"path": "guide.md", "content": "# Guide\n"});
    scripted_step.target = StepTarget::Agent(AgentId::new("bottom-d1"));
    scripted_step.role = None;
    scripted_step.idempotent = true;
    let plan = Plan {
        steps: vec![
            goal_step("draft", "Draft the guide", &[]),
            goal_step("review", "Review the guide", &["draft"]),
            scripted_step,
        ],
        leads: vec![LeadRequest { role: "docs_lead".into(), domain: "docs".into() }],
    };
    let (cx, events, reasoner) = scripted(PLANNER_AGENT, vec![ScriptedAnswer::Plan(plan)]);
    let request = RunRequest::new(PLANNER_AGENT, "Write and publish the user guide")
        .with_inputs(json!({"id": "guide"}));
    let response = executor(Workspace::new().env()).execute(request, cx).await.unwrap();
    assert_eq!(response.status, RunState::Completed, "{:?}", response.failure);
    assert_eq!(response.needs_model, None);
    assert_eq!(
        response.data["steps"][1],
        json!({"id": "review", "description": "Review the guide", "after": ["draft"],
               "owner": "docs", "role": "writer"})
    );
    assert_eq!(response.data["steps"][2]["owner"], "bottom-d1");
    assert_eq!(response.data["leads"], json!([{"role": "docs_lead", "domain": "docs"}]));

    let requests = reasoner.requests();
    let [ReasoningRequest::Plan { task, roles, .. }] = requests.as_slice() else {
        panic!("one plan request: {requests:?}")
    };
    assert_eq!(
        (task.id.as_str(), task.goal.as_str()),
        ("guide", "Write and publish the user guide")
    );
    assert!(task.steps.is_empty() && roles.is_empty());

    let file = parsed(&response.primary_output);
    let steps = file["steps"].as_array().unwrap();
    assert_eq!(steps[1]["role"].as_str(), Some("writer"));
    assert_eq!(steps[1]["acceptance"].as_str(), Some("review is done"));
    assert_eq!(steps[1]["domain"].as_str(), Some("docs"));
    assert_eq!(steps[2]["agent"].as_str(), Some("bottom-d1"));
    assert_eq!(steps[2]["tool"].as_str(), Some("write_file"));
    assert_eq!(steps[2]["idempotent"].as_bool(), Some(true));
    assert_eq!(steps[2]["args"]["content"].as_str(), Some("# Guide\n"));
    assert!(steps[0].get("tool").is_none());
    assert_rising_to_100(&events);
}

#[tokio::test]
async fn a_plan_that_does_not_hold_together_fails_and_a_reasoner_that_cannot_plan_falls_back() {
    // `after` naming a later step.
    let plan = Plan {
        steps: vec![goal_step("a", "First", &["b"]), goal_step("b", "Second", &[])],
        leads: Vec::new(),
    };
    let (cx, _, _) = scripted(PLANNER_AGENT, vec![ScriptedAnswer::Plan(plan)]);
    let response = executor(Workspace::new().env())
        .execute(RunRequest::new(PLANNER_AGENT, "Do two things"), cx)
        .await
        .unwrap();
    assert_eq!(response.status, RunState::Failed);
    let failure = response.failure.unwrap();
    assert_eq!(failure.kind, FailureKind::Malformed, "{failure}");
    assert!(failure.reason.contains("the reasoner's plan cannot be used"), "{failure}");

    // A reasoner that says it plans but cannot (the scripted one with nothing scripted falls
    // back to the rule-based one): the objective is split as written.
    let (cx, _, reasoner) = scripted(PLANNER_AGENT, Vec::new());
    let response = executor(Workspace::new().env())
        .execute(RunRequest::new(PLANNER_AGENT, "Plan it; then do it"), cx)
        .await
        .unwrap();
    assert_eq!(response.status, RunState::Completed, "{:?}", response.failure);
    assert_eq!(descriptions(&response.data), ["Plan it", "Do it"]);
    assert_eq!(response.needs_model.as_deref(), Some(PLANNER_NEEDS_MODEL));
    assert_eq!(reasoner.requests().len(), 1, "it was asked");

    // A backend failure is the server's: transient, retried, then failed.
    let backend = || {
        ScriptedAnswer::Fail(ReasonError::Backend { reasoner: "m".into(), message: "down".into() })
    };
    let (cx, _, reasoner) = scripted(PLANNER_AGENT, vec![backend(), backend()]);
    let response = executor(Workspace::new().env())
        .execute(RunRequest::new(PLANNER_AGENT, "Plan it"), cx)
        .await
        .unwrap();
    assert_eq!(response.status, RunState::Failed);
    assert_eq!(response.failure.unwrap().kind, FailureKind::Server);
    assert_eq!((response.retries, reasoner.requests().len()), (1, 2));
}
