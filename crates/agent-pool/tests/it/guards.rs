//! The run's guards on real team runs (scripted reasoners playing the model, paused time): a
//! worker repeating the same call, a run that makes no progress, and a lead and a power waiting
//! on each other each end the task with a typed reason, audited, and the run shuts down
//! cleanly; with `on_stuck = escalate` a looping executor's step goes back to its lead, which
//! hands it to another executor.

use std::sync::Arc;
use std::time::Duration;

use agent_core::spawn::SPEAK_TO_AGENT;
use agent_core::{
    AuditEvent, AuditRecord, NextAction, Plan, ReasonError, ReasoningRequest, ScriptedAnswer,
    ScriptedReasoner, ToolCall, check_transition_chain,
};
use agent_pool::{Team, TeamServices, TeamSpec};
use agent_state::{
    AgentId, AgentLayer, LeadRequest, OnStuck, PlanStep, Role, RoleBook, StepTarget, Task,
    TaskFailure, TaskOutcome,
};
use serde_json::{Value, json};

use crate::support::*;

fn call(tool: &str, args: Value) -> ScriptedAnswer {
    ScriptedAnswer::Action(NextAction::Call(ToolCall { tool: tool.into(), args }))
}

/// One scripted step: read `notes.md` (the docs lead places it on one of its executors).
fn read_task(id: &str) -> Task {
    Task {
        id: id.into(),
        goal: "read the notes".into(),
        steps: vec![step("read-notes", "docs", "read_file", json!({"path": "notes.md"}))],
    }
}

/// Executors that read the same file again and again, whatever they get back.
fn rereads(request: &ReasoningRequest) -> ScriptedAnswer {
    match request {
        ReasoningRequest::NextAction { .. } => call("read_file", json!({"path": "notes.md"})),
        _ => ScriptedAnswer::Fallback,
    }
}

async fn records(services: &TeamServices) -> Vec<AuditRecord> {
    services.audit.records(None).await.unwrap()
}

fn stuck(records: &[AuditRecord]) -> Vec<(AgentId, Option<String>, TaskFailure, Option<AgentId>)> {
    records
        .iter()
        .filter_map(|r| match &r.event {
            AuditEvent::Stuck { task, reason, escalated_to } => {
                Some((r.agent.clone(), task.clone(), reason.clone(), escalated_to.clone()))
            }
            _ => None,
        })
        .collect()
}

/// The run's stored state is whole: the outcome is stored, the audit chain verifies, its
/// transitions form a chain, and the team shuts down cleanly (every agent terminated).
async fn consistent(team: Team, services: &TeamServices, task: &str) {
    let stored = services.state.outcomes().await.unwrap();
    assert!(stored.iter().any(|o| o.task_id() == task), "the outcome is stored: {stored:?}");
    team.shutdown().await.unwrap();
    let records = records(services).await;
    agent_core::verify_chain(&records).unwrap();
    let statuses = check_transition_chain(&records).unwrap();
    assert!(
        statuses.iter().all(|(_, s)| *s == agent_state::AgentStatus::Terminated),
        "{statuses:?}"
    );
}

async fn wait(team: &Team, task: &str) -> TaskOutcome {
    tokio::time::timeout(Duration::from_secs(3600), team.wait(task))
        .await
        .expect("the task ends instead of hanging")
}

#[tokio::test(start_paused = true)]
async fn an_executor_repeating_the_same_call_stops_the_task_with_a_loop_naming_it_and_the_call() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("notes.md"), "# Notes\n").unwrap();
    let mut services = services(dir.path());
    let reasoner = Arc::new(ScriptedReasoner::from_fn(rereads));
    services.reasoner = reasoner.clone();
    let team = Team::start(standard_team(), services.clone()).await.unwrap();
    team.submit(read_task("loop")).await.unwrap();
    let outcome = wait(&team, "loop").await;
    let TaskOutcome::Failed { reason: TaskFailure::Loop { agent, item, repeats }, .. } = &outcome
    else {
        panic!("expected a loop, got {outcome:?}")
    };
    assert!(agent.as_str().starts_with("bottom-d"), "{agent}");
    assert_eq!(item, r#"read_file {"path":"notes.md"}"#);
    assert_eq!(*repeats, 3);
    assert!(outcome_text(&outcome).contains("guards.repeat_limit"));
    // The third call was not made: two reads ran.
    let records = records(&services).await;
    let reads = records
        .iter()
        .filter(|r| matches!(&r.event, AuditEvent::ToolCall { tool, .. } if tool == "read_file"))
        .count();
    assert_eq!(reads, 2);
    let found = stuck(&records);
    assert_eq!(found.len(), 1, "{found:?}");
    assert_eq!(&found[0].0, agent);
    assert_eq!(found[0].1.as_deref(), Some("loop"));
    assert_eq!(found[0].3, None, "stopped, not escalated");
    consistent(team, &services, "loop").await;
}

fn outcome_text(outcome: &TaskOutcome) -> String {
    match outcome {
        TaskOutcome::Failed { reason, .. } => reason.to_string(),
        TaskOutcome::Succeeded { .. } => String::new(),
    }
}

#[tokio::test(start_paused = true)]
async fn with_escalate_a_looping_executors_step_goes_back_to_its_lead_which_reassigns_it() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("notes.md"), "# Notes\n").unwrap();
    let mut services = services(dir.path());
    services.reasoner = Arc::new(ScriptedReasoner::from_fn(rereads));
    let mut spec = standard_team();
    spec.guards.on_stuck = OnStuck::Escalate;
    let team = Team::start(spec, services.clone()).await.unwrap();
    team.submit(read_task("escalated")).await.unwrap();
    let outcome = wait(&team, "escalated").await;
    // Both executors of the lead looped: the lead reassigned the step once, then gave up.
    let TaskOutcome::Failed { reason: TaskFailure::StepFailed { step, attempts, error }, .. } =
        &outcome
    else {
        panic!("expected the step to fail on both executors, got {outcome:?}")
    };
    assert_eq!((step.as_str(), *attempts), ("read-notes", 2));
    assert!(error.contains("stopped a loop"), "{error}");
    let found = stuck(&records(&services).await);
    let agents: Vec<&str> = found.iter().map(|(a, ..)| a.as_str()).collect();
    assert_eq!(found.len(), 2, "{found:?}");
    assert!(agents.contains(&"bottom-d1") && agents.contains(&"bottom-d2"), "{agents:?}");
    assert!(found.iter().all(|(.., to)| to.as_ref().map(AgentId::as_str) == Some("mid-docs")));
    consistent(team, &services, "escalated").await;
}

#[tokio::test(start_paused = true)]
async fn a_run_whose_signer_is_gone_stops_after_fifteen_heartbeats_without_progress() {
    let dir = tempfile::tempdir().unwrap();
    // top-b cannot review: it fails, and top-a waits for its signature with nothing moving.
    let services = unsigned(dir.path());
    let team = Team::start(standard_team(), services.clone()).await.unwrap();
    let started = tokio::time::Instant::now();
    team.submit(hello_task("idle")).await.unwrap();
    let outcome = wait(&team, "idle").await;
    let TaskOutcome::Failed { reason: TaskFailure::NoProgress { heartbeats, agents }, .. } =
        &outcome
    else {
        panic!("expected no progress, got {outcome:?}")
    };
    assert_eq!(*heartbeats, 15);
    assert_eq!(agents, &[AgentId::new("top-a")]);
    // Stopped on the guard, not on some other limit: about 15 heartbeats of 4 s after the
    // failure, well before the 120 s of anything else.
    let elapsed = started.elapsed();
    assert!(
        elapsed >= Duration::from_secs(60) && elapsed < Duration::from_secs(100),
        "{elapsed:?}"
    );
    let found = stuck(&records(&services).await);
    assert_eq!(found.len(), 1, "{found:?}");
    assert_eq!(found[0].1.as_deref(), Some("idle"));
    assert!(matches!(found[0].2, TaskFailure::NoProgress { .. }));
    consistent(team, &services, "idle").await;
}

fn role(name: &str, layer: AgentLayer, tools: &[&str], enabled: &[&str]) -> Role {
    Role {
        description: format!("the {name}"),
        tools: tools.iter().map(|t| (*t).to_owned()).collect(),
        enabled_agents: enabled.iter().map(|t| (*t).to_owned()).collect(),
        ..Role::new(name, layer)
    }
}

fn goal_team() -> TeamSpec {
    let mut spec = TeamSpec::new(vec![
        top("top-a", "power_a", 2.0),
        top("top-b", "power_b", 1.0),
        top("top-c", "power_c", 1.0),
    ]);
    spec.roles = RoleBook::new([
        role("docs_lead", AgentLayer::Mid, &[], &["writer"]),
        role("writer", AgentLayer::Bottom, &["write_file"], &[]),
    ])
    .unwrap();
    spec
}

/// The README plan, with a docs lead to create.
fn readme_plan() -> Plan {
    Plan {
        leads: vec![LeadRequest { role: "docs_lead".into(), domain: "docs".into() }],
        steps: vec![
            PlanStep::goal("readme", "write README.md", StepTarget::Domain("docs".into()))
                .with_role("writer"),
        ],
    }
}

/// A docs lead that asks its power a question before it starts, waits for the answer, then
/// finishes; the power, for its part, waits for the lead's results.
fn asks_the_power(request: &ReasoningRequest) -> ScriptedAnswer {
    match request {
        ReasoningRequest::Plan { .. } => ScriptedAnswer::Plan(readme_plan()),
        ReasoningRequest::NextAction { history, .. } if history.is_empty() => call(
            SPEAK_TO_AGENT,
            json!({"agent_id": "top-a", "message": "which README do you want?"}),
        ),
        ReasoningRequest::NextAction { .. } => ScriptedAnswer::Action(NextAction::Finish {
            success: true,
            summary: "asked, and was told".into(),
        }),
        _ => ScriptedAnswer::Fallback,
    }
}

/// The power answers its lead: the two wait on each other only until the answer arrives, so
/// no cycle is seen and the work goes on (a wait cycle that does form is broken by the
/// driver's guard: agent-pool's `guard` unit tests, on agents that report one).
#[tokio::test(start_paused = true)]
async fn a_lead_asking_its_power_gets_an_answer_and_no_cycle_is_reported() {
    let dir = tempfile::tempdir().unwrap();
    let mut services = services(dir.path());
    let reasoner = Arc::new(ScriptedReasoner::from_fn(asks_the_power));
    services.reasoner = reasoner.clone();
    let team = Team::start(goal_team(), services.clone()).await.unwrap();
    team.submit(Task::goal("ask", "a README")).await.unwrap();
    let outcome = wait(&team, "ask").await;
    assert!(outcome.is_success(), "{outcome:?}");
    let answered = reasoner.requests().into_iter().any(|r| {
        matches!(r, ReasoningRequest::NextAction { agent, history, .. }
            if agent.as_str() == "docs_lead-1"
                && history.iter().any(|h| h.call.tool == SPEAK_TO_AGENT
                    && h.success
                    && h.output.contains("agent_response")))
    });
    assert!(answered, "the power's answer reached the lead's loop");
    assert!(stuck(&records(&services).await).is_empty());
    consistent(team, &services, "ask").await;
}

/// A docs lead spawns a sub-lead for the README; then each tells the other the README is
/// theirs, again and again.
fn bounce_the_readme(request: &ReasoningRequest) -> ScriptedAnswer {
    let said = "the README is yours";
    match request {
        ReasoningRequest::Plan { .. } => ScriptedAnswer::Plan(readme_plan()),
        ReasoningRequest::NextAction { agent, history, .. } if agent.as_str() == "docs_lead-1" => {
            if history.iter().any(|h| h.call.tool == agent_core::spawn::SPAWN_AGENT) {
                call(SPEAK_TO_AGENT, json!({"agent_id": "sub_lead-1", "message": said}))
            } else {
                call(
                    agent_core::spawn::SPAWN_AGENT,
                    json!({"role_name": "sub_lead", "task_prompt": "write README.md"}),
                )
            }
        }
        ReasoningRequest::NextAction { .. } => {
            call(SPEAK_TO_AGENT, json!({"agent_id": "docs_lead-1", "message": said}))
        }
        _ => ScriptedAnswer::Fallback,
    }
}

#[tokio::test(start_paused = true)]
async fn two_leads_handing_the_same_work_back_and_forth_stop_with_a_ping_pong_naming_both() {
    let dir = tempfile::tempdir().unwrap();
    let mut services = services(dir.path());
    services.reasoner = Arc::new(ScriptedReasoner::from_fn(bounce_the_readme));
    let mut spec = goal_team();
    spec.roles = RoleBook::new([
        role("docs_lead", AgentLayer::Mid, &[], &["sub_lead", "writer"]),
        role("sub_lead", AgentLayer::Mid, &[], &["writer"]),
        role("writer", AgentLayer::Bottom, &["write_file"], &[]),
    ])
    .unwrap();
    let team = Team::start(spec, services.clone()).await.unwrap();
    team.submit(Task::goal("pong", "a README")).await.unwrap();
    let outcome = wait(&team, "pong").await;
    let TaskOutcome::Failed { reason: TaskFailure::PingPong { agents, item, hops }, .. } = &outcome
    else {
        panic!("expected a ping-pong, got {outcome:?}")
    };
    let mut pair: Vec<&str> = agents.iter().map(AgentId::as_str).collect();
    pair.sort_unstable();
    assert_eq!(pair, ["docs_lead-1", "sub_lead-1"]);
    assert_eq!(item, r#"the message "the README is yours""#);
    assert_eq!(*hops, 4);
    let found = stuck(&records(&services).await);
    assert_eq!(found.len(), 1, "{found:?}");
    assert_eq!(found[0].1.as_deref(), Some("pong"));
    consistent(team, &services, "pong").await;
}

/// A team whose second power cannot review: the plan waits for its signature forever.
fn unsigned(dir: &std::path::Path) -> TeamServices {
    let mut services = services(dir);
    let broken = Arc::new(ScriptedReasoner::from_fn(|request| match request {
        ReasoningRequest::Review { .. } => ScriptedAnswer::Fail(ReasonError::BadQuestion(
            "this power cannot review anything".into(),
        )),
        _ => ScriptedAnswer::Fallback,
    }));
    services.reasoners.insert(AgentId::new("top-b"), broken);
    services
}

#[tokio::test(start_paused = true)]
async fn with_escalate_no_progress_warns_first_and_stops_when_it_lasts_as_long_again() {
    let dir = tempfile::tempdir().unwrap();
    let services = unsigned(dir.path());
    let mut spec = standard_team();
    spec.guards.on_stuck = OnStuck::Escalate;
    spec.guards.idle_heartbeats = 5;
    let team = Team::start(spec, services.clone()).await.unwrap();
    team.submit(hello_task("slow")).await.unwrap();
    let outcome = wait(&team, "slow").await;
    assert!(
        matches!(
            &outcome,
            TaskOutcome::Failed { reason: TaskFailure::NoProgress { heartbeats: 5, .. }, .. }
        ),
        "{outcome:?}"
    );
    let found = stuck(&records(&services).await);
    assert_eq!(found.len(), 2, "escalated once, then stopped: {found:?}");
    // top-a has no supervisor: the warning goes to the proposer, itself.
    assert_eq!(found[0].3.as_ref().map(AgentId::as_str), Some("top-a"));
    assert_eq!(found[1].3, None);
    consistent(team, &services, "slow").await;
}

#[tokio::test]
async fn guard_thresholds_out_of_range_are_refused_before_anything_starts() {
    let dir = tempfile::tempdir().unwrap();
    let mut spec = standard_team();
    spec.guards.idle_heartbeats = 0;
    let Err(err) = Team::start(spec, services(dir.path())).await else {
        panic!("a team with idle_heartbeats = 0 started")
    };
    assert!(matches!(err, agent_pool::TeamError::Guards(_)), "{err}");
    assert_eq!(
        err.to_string(),
        "guard setting `idle_heartbeats` is 0, but it must be at least 1: 0 would stop every run \
         at once"
    );
}
