//! An OODA agent in a team: an executor under a lead that takes the lead's step as
//! its objective, speaks to its lead through the bus and hears the answer at its next observe,
//! acts in the workspace and reports back; the task succeeds.

use std::sync::Arc;

use agent_core::{
    AuditEvent, NextAction, ReasoningRequest, ScriptedAnswer, ScriptedReasoner, ToolCall,
};
use agent_layers::BottomSpec;
use agent_pool::{AgentSpec, RoleSpec, Team, TeamError};
use agent_state::ooda::{OodaConfig, OodaEventKind};
use agent_state::{AgentConfig, AgentId, AgentLayer, PlanStep, StepTarget, Task, TaskOutcome};
use serde_json::json;

use crate::support::*;

fn ooda_executor(config: OodaConfig) -> AgentSpec {
    AgentSpec {
        config: AgentConfig::new("ooda-1", "OODA improver", AgentLayer::Bottom)
            .with_supervisor("mid-docs"),
        role: RoleSpec::Bottom(BottomSpec::new(["read_file", "write_file"]).with_ooda(config)),
    }
}

fn team_with(config: OodaConfig) -> agent_pool::TeamSpec {
    let mut spec = standard_team();
    spec.agents.push(ooda_executor(config));
    spec
}

fn improver() -> OodaConfig {
    let mut c = OodaConfig::new("Improver", "what the lead asks");
    c.tools = vec!["read_file".into(), "write_file".into()];
    c
}

/// Its reasoner: ask the lead, then write the greeting once the answer is in its history,
/// then finish.
fn script() -> ScriptedReasoner {
    ScriptedReasoner::from_fn(|request| {
        let ReasoningRequest::NextAction { history, .. } = request else {
            return ScriptedAnswer::Fallback;
        };
        let heard = history.iter().any(|r| r.event);
        let wrote = history.iter().any(|r| !r.event && r.call.tool == "write_file");
        let asked = history.iter().any(|r| r.call.tool == agent_ooda::SEND_MESSAGE);
        let call = |tool: &str, args| {
            ScriptedAnswer::Action(NextAction::Call(ToolCall { tool: tool.into(), args }))
        };
        match (asked, heard, wrote) {
            (false, _, _) => call(
                agent_ooda::SEND_MESSAGE,
                json!({"to": "mid-docs", "content": "where should the greeting go?"}),
            ),
            // While it waits for the answer it looks for a README (a harmless action).
            (true, false, _) => call("read_file", json!({"path": "README.md"})),
            (true, true, false) => {
                call("write_file", json!({"path": "hello.txt", "content": "hello from ooda\n"}))
            }
            (true, true, true) => ScriptedAnswer::Action(NextAction::Finish {
                success: true,
                summary: "wrote hello.txt".into(),
            }),
        }
    })
}

fn goal_step() -> Task {
    Task {
        id: "t-ooda".into(),
        goal: "greet".into(),
        steps: vec![PlanStep::goal(
            "greet",
            "write a greeting into hello.txt",
            StepTarget::Agent(AgentId::new("ooda-1")),
        )],
    }
}

#[tokio::test(start_paused = true)]
async fn an_ooda_executor_takes_its_leads_step_talks_over_the_bus_and_reports_back() {
    let dir = tempfile::tempdir().unwrap();
    let mut services = services(dir.path());
    services.reasoners.insert(AgentId::new("ooda-1"), Arc::new(script()));
    let team = Team::start(team_with(improver()), services.clone()).await.unwrap();

    team.submit(goal_step()).await.unwrap();
    let outcome = team.wait("t-ooda").await;

    let TaskOutcome::Succeeded { results, .. } = &outcome else { panic!("{outcome:?}") };
    assert_eq!(results[0].agent, AgentId::new("ooda-1"));
    assert_eq!(results[0].output, "wrote hello.txt");
    assert_eq!(std::fs::read_to_string(dir.path().join("hello.txt")).unwrap(), "hello from ooda\n");
    // Its events are in the run's audit, in loop order, with the lead's answer heard.
    let records = services.audit.records(Some(&AgentId::new("ooda-1"))).await.unwrap();
    let kinds: Vec<OodaEventKind> = records
        .iter()
        .filter_map(|r| match &r.event {
            AuditEvent::Ooda { ooda } => Some(ooda.kind),
            _ => None,
        })
        .collect();
    assert_eq!(
        &kinds[..4],
        [OodaEventKind::Observe, OodaEventKind::Decide, OodaEventKind::Act, OodaEventKind::Reflect]
    );
    assert_eq!(kinds.last(), Some(&OodaEventKind::Decide), "it ends deciding to stop");
    // The lead received its question and answered it through the bus.
    let lead = services.audit.records(Some(&AgentId::new("mid-docs"))).await.unwrap();
    assert!(!lead.iter().any(|r| matches!(&r.event, AuditEvent::Denied { .. })), "{lead:?}");
    // The same lifecycle as any agent: it went back to idle.
    let slot = team.pool().get(&AgentId::new("ooda-1")).unwrap();
    assert_eq!(slot.status().await, agent_state::AgentStatus::Idle);
    assert_eq!(slot.metrics().await.tasks_completed, 1);
    team.shutdown().await.unwrap();
}

#[tokio::test(start_paused = true)]
async fn a_team_refuses_an_ooda_executor_with_a_tool_its_lead_did_not_grant() {
    let dir = tempfile::tempdir().unwrap();
    let mut config = improver();
    config.tools.push("shell".into());
    let err = Team::start(team_with(config), services(dir.path())).await.err().expect("refused");
    assert!(matches!(err, TeamError::Ooda { .. }), "{err}");
    assert!(err.to_string().contains("`shell` is not one its supervisor holds"), "{err}");
}
