//! What `planner_agent` (agent-executor) writes is a plan file this crate reads: its primary
//! output parsed with [`team_file::parse_plan`] gives back the steps it planned, on the
//! rule-based reasoner and on a reasoner that plans.

use std::path::Path;
use std::sync::Arc;

use agent_core::tools::ToolRegistry;
use agent_core::{Plan, Reasoner, RuleBasedReasoner, ScriptedAnswer, ScriptedReasoner};
use agent_executor::{Executor, PLANNER_AGENT, RunContext, RunRequest, RunResponse, builtins};
use agent_state::{AgentId, PlanStep, RunState, StepTarget, Task};
use serde_json::{Value, json};

const TEAM: &str = r#"
[[top]]
id = "top-a"
power_type = "power_a"

[[mid]]
id = "mid-docs"
domain = "docs"
supervisor = "top-a"

[[bottom]]
id = "bottom-d1"
supervisor = "mid-docs"
tools = ["read_file", "write_file"]
"#;

async fn plan(objective: &str, inputs: Value, reasoner: Arc<dyn Reasoner>) -> RunResponse {
    let cx = RunContext::standalone(PLANNER_AGENT, reasoner);
    let request = RunRequest::new(PLANNER_AGENT, objective).with_inputs(inputs);
    let response = Executor::new(builtins()).execute(request, cx).await.unwrap();
    assert_eq!(response.status, RunState::Completed, "{:?}", response.failure);
    response
}

fn parse(text: &str) -> Task {
    let tools = ToolRegistry::with_builtins();
    let team = team_file::parse_team(Path::new("team.toml"), TEAM, &tools).unwrap();
    team_file::parse_plan(Path::new("plan.toml"), text, &team.spec, &tools)
        .unwrap_or_else(|e| panic!("{e}\n{text}"))
}

#[tokio::test(flavor = "current_thread")]
async fn the_rule_based_plan_reads_back_as_the_steps_in_written_order() {
    let objective =
        "Document the \"hello\" tool:\n1. Read src/hello.rs\n2. Write docs\\hello.md\n3. Review it";
    let response = plan(
        objective,
        json!({"id": "docs", "domain": "docs"}),
        Arc::new(RuleBasedReasoner::new()),
    )
    .await;
    let task = parse(&response.primary_output);
    assert_eq!((task.id.as_str(), task.goal.as_str()), ("docs", objective));
    let read: Vec<(&str, &str, Vec<&str>)> = task
        .steps
        .iter()
        .map(|s| {
            (s.id.as_str(), s.description.as_str(), s.after.iter().map(String::as_str).collect())
        })
        .collect();
    assert_eq!(
        read,
        [
            ("step-1", "Read src/hello.rs", vec![]),
            ("step-2", "Write docs\\hello.md", vec!["step-1"]),
            ("step-3", "Review it", vec!["step-2"]),
        ]
    );
    assert!(task.steps.iter().all(|s| s.target == StepTarget::Domain("docs".into())));
    assert!(task.steps.iter().all(|s| !s.is_scripted()), "goal steps");

    // Without a domain, any lead with executors takes the steps.
    let response =
        plan("Read it; then summarise it", Value::Null, Arc::new(RuleBasedReasoner::new())).await;
    let task = parse(&response.primary_output);
    assert_eq!(task.steps.len(), 2);
    assert!(task.steps.iter().all(|s| s.target == StepTarget::Any));
}

#[tokio::test(flavor = "current_thread")]
async fn a_reasoners_plan_reads_back_as_planned() {
    let steps = vec![
        PlanStep::goal("draft", "Draft the guide", StepTarget::Domain("docs".into()))
            .with_acceptance("guide.md has a section per command"),
        PlanStep::scripted(
            "stamp",
            "Write the version file",
            StepTarget::Agent(AgentId::new("bottom-d1")),
            "write_file",
            json!({"path": "VERSION", "content": "1.2.0\n"}),
        )
        .with_after(["draft"])
        .with_idempotent(true),
    ];
    let reasoner = ScriptedReasoner::from_answers([ScriptedAnswer::Plan(Plan {
        steps: steps.clone(),
        leads: Vec::new(),
    })]);
    let response = plan("Ship the guide", json!({"id": "guide"}), Arc::new(reasoner)).await;
    let task = parse(&response.primary_output);
    assert_eq!(task, Task { id: "guide".into(), goal: "Ship the guide".into(), steps });
}
