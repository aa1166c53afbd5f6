//! A spawned agent gets at most its spawner's tools, network and capabilities, checked by the
//! spawner at run time in every layer combination: a `spawn_agent` call that asks for tools,
//! the network or capabilities, a role holding the network its spawner lacks, and a role
//! holding a capability its spawner (a lead, or a top power) lacks are refused, audited as
//! `Denied`, and nothing is spawned; a spawn within the grant still works.

use std::time::Duration;

use agent_core::spawn::{NetworkGrants, RETURN_RESULTS, SPAWN_AGENT};
use agent_core::{AuditEvent, NextAction, Plan, ReasoningRequest, ScriptedAnswer, ToolCall};
use agent_pool::{Team, TeamSpec};
use agent_state::{
    AgentLayer, Capability, LeadRequest, PlanStep, Role, RoleBook, StepTarget, Task, TaskOutcome,
};
use serde_json::{Value, json};

use crate::goal::{audit, goal_team, scripted_services, spawned};

fn role(name: &str, layer: AgentLayer, tools: &[&str], enabled: &[&str]) -> Role {
    Role {
        description: format!("the {name}"),
        tools: tools.iter().map(|t| (*t).to_owned()).collect(),
        enabled_agents: enabled.iter().map(|t| (*t).to_owned()).collect(),
        ..Role::new(name, layer)
    }
}

/// A lead (`lead`) that may spawn `worker`, an executor with `shell`.
fn book(lead_capabilities: Option<Vec<Capability>>) -> RoleBook {
    RoleBook::new([
        Role { capabilities: lead_capabilities, ..role("lead", AgentLayer::Mid, &[], &["worker"]) },
        role("worker", AgentLayer::Bottom, &["shell"], &[]),
    ])
    .unwrap()
}

fn call(tool: &str, args: Value) -> ScriptedAnswer {
    ScriptedAnswer::Action(NextAction::Call(ToolCall { tool: tool.into(), args }))
}

fn finish(summary: &str) -> ScriptedAnswer {
    ScriptedAnswer::Action(NextAction::Finish { success: true, summary: summary.into() })
}

fn plan() -> Plan {
    Plan {
        leads: vec![LeadRequest { role: "lead".into(), domain: "all".into() }],
        steps: vec![
            PlanStep::goal("s", "do it", StepTarget::Domain("all".into())).with_role("worker"),
        ],
    }
}

/// The worker returns at once; the lead spawns one worker, then finishes.
fn spawn_once(request: &ReasoningRequest) -> ScriptedAnswer {
    match request {
        ReasoningRequest::Plan { .. } => ScriptedAnswer::Plan(plan()),
        ReasoningRequest::NextAction { agent, .. } if agent.as_str().starts_with("worker") => call(
            RETURN_RESULTS,
            json!({"result": {"status": "success", "summary": "done", "artifacts": [], "known_issues": []}}),
        ),
        ReasoningRequest::NextAction { history, .. } if history.is_empty() => {
            call(SPAWN_AGENT, json!({"role_name": "worker", "task_prompt": "work"}))
        }
        ReasoningRequest::NextAction { .. } => finish("done"),
        _ => ScriptedAnswer::Fallback,
    }
}

/// The lead asks, three times, for more than the role holds; then finishes.
fn ask_for_more(request: &ReasoningRequest) -> ScriptedAnswer {
    match request {
        ReasoningRequest::Plan { .. } => ScriptedAnswer::Plan(plan()),
        ReasoningRequest::NextAction { history, .. } => {
            let base = json!({"role_name": "worker", "task_prompt": "work"});
            let with = |key: &str, value: Value| {
                let mut args = base.clone();
                args[key] = value;
                call(SPAWN_AGENT, args)
            };
            match history.len() {
                0 => with("tools", json!(["shell", "write_file", "mcp_secret"])),
                1 => with("network", json!(true)),
                2 => with("capabilities", json!(["arbitrate"])),
                _ => finish("done"),
            }
        }
        _ => ScriptedAnswer::Fallback,
    }
}

/// Runs `spec` on `script` to the end of task `g`; returns the team's services and the lead's
/// longest tool history, and the task's outcome.
async fn run(
    spec: TeamSpec,
    script: fn(&ReasoningRequest) -> ScriptedAnswer,
) -> (agent_pool::TeamServices, Vec<agent_core::ToolCallRecord>, TaskOutcome) {
    let dir = tempfile::tempdir().unwrap();
    let (services, reasoner) = scripted_services(dir.path(), script);
    let team = Team::start(spec, services.clone()).await.unwrap();
    team.submit(Task::goal("g", "a goal")).await.unwrap();
    let outcome = tokio::time::timeout(Duration::from_secs(600), team.wait("g")).await.unwrap();
    team.shutdown().await.unwrap();
    let history = reasoner
        .requests()
        .into_iter()
        .filter_map(|r| match r {
            ReasoningRequest::NextAction { agent, history, .. } if agent.as_str() == "lead-1" => {
                Some(history)
            }
            _ => None,
        })
        .max_by_key(Vec::len)
        .unwrap_or_default();
    (services, history, outcome)
}

async fn denied_by(services: &agent_pool::TeamServices, agent: &str) -> Vec<String> {
    audit(services)
        .await
        .into_iter()
        .filter(|r| r.agent.as_str() == agent)
        .filter_map(|r| match r.event {
            AuditEvent::Denied { error, .. } => Some(error),
            _ => None,
        })
        .collect()
}

#[tokio::test(start_paused = true)]
async fn a_spawn_call_asking_for_tools_network_or_capabilities_is_refused_audited_and_spawns_nothing()
 {
    let (services, history, outcome) = run(goal_team(book(None)), ask_for_more).await;
    assert!(outcome.is_success(), "{outcome:?}");
    assert_eq!(history.len(), 3, "{history:?}");
    for (h, what) in history.iter().zip(["`tools`", "`network`", "`capabilities`"]) {
        assert!(!h.success, "{h:?}");
        assert!(
            h.output.contains("spawn_agent takes only `role_name` and `task_prompt`, not")
                && h.output.contains(what),
            "{}",
            h.output
        );
    }
    let denied = denied_by(&services, "lead-1").await;
    assert_eq!(denied.len(), 3, "{denied:?}");
    assert_eq!(spawned(&audit(&services).await).len(), 1, "only the lead, no worker");
}

#[tokio::test(start_paused = true)]
async fn a_spawn_giving_the_network_its_spawner_lacks_is_refused() {
    // `[sandbox] network = false`; the worker role has the network, its lead does not.
    let mut spec = goal_team(book(None));
    spec.network =
        NetworkGrants { roles: [("worker".to_owned(), true)].into(), ..NetworkGrants::default() };
    let (services, history, outcome) = run(spec, spawn_once).await;
    assert!(outcome.is_success(), "{outcome:?}");
    assert!(
        !history[0].success
            && history[0].output.contains(
                "role `worker` holds the network, which you do not hold; permissions only narrow down the tree"
            ),
        "{:?}",
        history[0]
    );
    assert_eq!(denied_by(&services, "lead-1").await.len(), 1);
    assert_eq!(spawned(&audit(&services).await).len(), 1, "only the lead, no worker");

    // With the network on the lead too, the same spawn is made.
    let mut spec = goal_team(book(None));
    spec.network = NetworkGrants {
        roles: [("worker".to_owned(), true), ("lead".to_owned(), true)].into(),
        ..NetworkGrants::default()
    };
    let (services, history, outcome) = run(spec, spawn_once).await;
    assert!(outcome.is_success(), "{outcome:?}");
    assert!(history[0].success, "{:?}", history[0]);
    let roles: Vec<String> = spawned(&audit(&services).await).into_iter().map(|s| s.2).collect();
    assert_eq!(roles, ["lead", "worker"]);
}

#[tokio::test(start_paused = true)]
async fn a_lead_may_not_spawn_an_executor_holding_a_capability_it_lacks() {
    // The lead may not reflect; an executor of the default capabilities does.
    let caps =
        vec![Capability::Plan, Capability::Review, Capability::Coordinate, Capability::Delegate];
    let (services, history, outcome) = run(goal_team(book(Some(caps))), spawn_once).await;
    assert!(outcome.is_success(), "{outcome:?}");
    assert!(
        !history[0].success
            && history[0].output.contains("role `worker` holds the capability `reflect`"),
        "{:?}",
        history[0]
    );
    assert_eq!(denied_by(&services, "lead-1").await.len(), 1);
    assert_eq!(spawned(&audit(&services).await).len(), 1, "only the lead, no worker");
}

#[tokio::test(start_paused = true)]
async fn a_top_power_may_not_create_a_lead_holding_a_capability_it_lacks() {
    let mut spec = goal_team(book(None));
    // The proposer may not reflect; the lead role, by default, does.
    spec.agents[0].config.capabilities = vec![
        Capability::Plan,
        Capability::Review,
        Capability::Coordinate,
        Capability::Delegate,
        Capability::Arbitrate,
    ]
    .into();
    let (services, _, outcome) = run(spec, spawn_once).await;
    assert!(!outcome.is_success(), "{outcome:?}");
    let denied = denied_by(&services, "top-a").await;
    assert!(
        denied.iter().any(|e| e.contains("role `lead` holds the capability `reflect`")),
        "{denied:?}"
    );
    assert!(spawned(&audit(&services).await).is_empty(), "no lead was created");
}
