//! The smaller team shapes on the same runtime: a crew (one lead and its executors, no
//! powers) and a single agent (one executor, no supervisor) take a plan or a goal, write their
//! files, close the task with its outcome; a step that fails for good fails the task without a
//! vote; a crew or a single agent killed at any cycle resumes and runs every side effect once.

use std::sync::Arc;
use std::time::Duration;

use agent_core::{
    AuditEvent, NextAction, Plan, ReasoningRequest, ScriptedAnswer, ScriptedReasoner, ToolCall,
    check_transition_chain,
};
use agent_pool::{AgentSpec, RoleSpec, Team, TeamError, TeamShape, TeamSpec};
use agent_state::{
    AgentConfig, AgentLayer, AgentStatus, PlanStep, StepTarget, Task, TaskFailure, TaskOutcome,
};
use message_bus::{InMemoryBus, MessageBus};
use serde_json::json;

use crate::support::*;

const ALL: [&str; 4] = ["read_file", "write_file", "list_dir", "shell"];

/// One lead without a supervisor and two executors.
fn crew() -> TeamSpec {
    let mut lead = mid("lead", "work", "nobody");
    lead.config.supervisor = None;
    let mut spec =
        TeamSpec::new(vec![lead, bottom("e1", "lead", &ALL), bottom("e2", "lead", &ALL)]);
    spec.heartbeat = Duration::from_secs(4);
    spec
}

/// One executor without a supervisor.
fn single() -> TeamSpec {
    let agent = AgentSpec {
        config: AgentConfig::new("solo", "Solo", AgentLayer::Bottom),
        role: RoleSpec::Bottom(agent_layers::BottomSpec::new(ALL)),
    };
    let mut spec = TeamSpec::new(vec![agent]);
    spec.heartbeat = Duration::from_secs(4);
    spec
}

#[tokio::test(start_paused = true)]
async fn a_crew_and_a_single_agent_complete_the_hello_plan_without_signatures() {
    for (spec, shape, entry) in
        [(crew(), TeamShape::Crew, "lead"), (single(), TeamShape::Single, "solo")]
    {
        assert_eq!(spec.shape(), shape);
        let dir = tempfile::tempdir().unwrap();
        let services = services(dir.path());
        let agents = spec.agents.len();
        let team = Team::start(spec, services.clone()).await.unwrap();
        assert_eq!(team.entry().as_str(), entry);

        // The plan names the domains `docs` and `build`: the crew's lead (the single agent)
        // takes every domain.
        team.submit(hello_task("task-1")).await.unwrap();
        let outcome = team.wait("task-1").await;
        let TaskOutcome::Succeeded { results, .. } = &outcome else {
            panic!("{shape}: {outcome:?}")
        };
        assert_eq!(
            results.iter().map(|r| r.step_id.as_str()).collect::<Vec<_>>(),
            ["write-hello", "write-notes", "count"],
            "{shape}"
        );
        let read = |p: &str| std::fs::read_to_string(dir.path().join(p)).unwrap();
        assert_eq!(read("hello.txt"), "hello, strata\n");
        assert_eq!(read("docs/notes.md"), "# Notes\n");
        assert_eq!(read("size.txt").trim(), "14");
        // Nothing is proposed, signed or voted on.
        assert!(services.governance.list().await.unwrap().is_empty(), "{shape}");

        team.shutdown().await.unwrap();
        let records = services.audit.records(None).await.unwrap();
        agent_core::verify_chain(&records).unwrap();
        let finals = check_transition_chain(&records).unwrap();
        assert_eq!(finals.len(), agents);
        assert!(finals.iter().all(|(_, s)| *s == AgentStatus::Terminated), "{finals:?}");
        let calls = records.iter().filter(|r| matches!(r.event, AuditEvent::ToolCall { .. }));
        assert_eq!(calls.count(), 3, "{shape}: one call per step");
    }
}

#[tokio::test(start_paused = true)]
async fn a_step_that_fails_for_good_fails_the_task_without_a_vote() {
    let failing = Task {
        id: "fail".into(),
        goal: "run a command that fails".into(),
        steps: vec![step("broken", "work", "shell", json!({"command": "exit 3"}))],
    };
    for (spec, shape) in [(crew(), TeamShape::Crew), (single(), TeamShape::Single)] {
        let dir = tempfile::tempdir().unwrap();
        let services = services(dir.path());
        let team = Team::start(spec, services.clone()).await.unwrap();
        team.submit(failing.clone()).await.unwrap();
        let outcome =
            tokio::time::timeout(Duration::from_secs(3600), team.wait("fail")).await.unwrap();
        let TaskOutcome::Failed { reason: TaskFailure::StepFailed { step, .. }, .. } = &outcome
        else {
            panic!("{shape}: {outcome:?}")
        };
        assert_eq!(step, "broken");
        assert!(services.governance.list().await.unwrap().is_empty(), "{shape}: no vote");
        // The agent that took the task is alive and takes the next one.
        team.submit(hello_task("next")).await.unwrap();
        let next = tokio::time::timeout(Duration::from_secs(3600), team.wait("next")).await;
        assert!(next.is_ok_and(|o| o.is_success()), "{shape}");
        team.shutdown().await.unwrap();
    }
}

/// The entry agent plans the goal into one goal step; the executor writes the file.
fn goal_script(request: &ReasoningRequest) -> ScriptedAnswer {
    match request {
        ReasoningRequest::Plan { .. } => ScriptedAnswer::Plan(Plan {
            steps: vec![PlanStep::goal("readme", "write README.md", StepTarget::Any)],
            leads: Vec::new(),
        }),
        ReasoningRequest::NextAction { history, .. } if history.is_empty() => {
            ScriptedAnswer::Action(NextAction::Call(ToolCall {
                tool: "write_file".into(),
                args: json!({"path": "README.md", "content": "# hello\n"}),
            }))
        }
        ReasoningRequest::NextAction { .. } => ScriptedAnswer::Action(NextAction::Finish {
            success: true,
            summary: "wrote README.md".into(),
        }),
        _ => ScriptedAnswer::Fallback,
    }
}

#[tokio::test(start_paused = true)]
async fn a_crew_and_a_single_agent_plan_a_goal_themselves() {
    for (spec, shape, entry) in [(crew(), "crew", "lead"), (single(), "single", "solo")] {
        let dir = tempfile::tempdir().unwrap();
        let reasoner = Arc::new(ScriptedReasoner::from_fn(goal_script));
        let mut services = services(dir.path());
        services.reasoner = reasoner.clone();
        let team = Team::start(spec, services.clone()).await.unwrap();
        let goal = Task { id: "goal".into(), goal: "write a README".into(), steps: Vec::new() };
        team.submit(goal).await.unwrap();
        let outcome =
            tokio::time::timeout(Duration::from_secs(3600), team.wait("goal")).await.unwrap();
        assert!(outcome.is_success(), "{shape}: {outcome:?}");
        assert_eq!(std::fs::read_to_string(dir.path().join("README.md")).unwrap(), "# hello\n");
        let planners: Vec<String> = reasoner
            .requests()
            .iter()
            .filter(|r| matches!(r, ReasoningRequest::Plan { .. }))
            .map(|r| r.agent().to_string())
            .collect();
        assert_eq!(planners, [entry], "{shape}: the entry agent plans the goal, once");
        team.shutdown().await.unwrap();
    }
}

#[tokio::test(start_paused = true)]
async fn a_crew_or_a_single_agent_killed_at_any_cycle_resumes_and_runs_every_side_effect_once() {
    let append = |id: &str, line: &str, after: &[&str]| {
        let command = format!("echo {line} >> log.txt");
        step(id, "work", "shell", json!({ "command": command })).with_after(after.iter().copied())
    };
    let task = Task {
        id: "append".into(),
        goal: "append three lines in order".into(),
        steps: vec![
            append("one", "one", &[]),
            append("two", "two", &["one"]),
            append("three", "three", &["two"]),
        ],
    };
    for (make, shape) in [(crew as fn() -> TeamSpec, "crew"), (single, "single")] {
        for kill_after_cycles in 0..8u32 {
            let dir = tempfile::tempdir().unwrap();
            let bus = Arc::new(InMemoryBus::new());
            let mut services = services(dir.path());
            services.bus = bus.clone();
            let team = Team::start(make(), services.clone()).await.unwrap();
            team.submit(task.clone()).await.unwrap();
            tokio::time::sleep(
                Duration::from_secs(4) * kill_after_cycles + Duration::from_millis(1),
            )
            .await;
            drop(team); // abrupt: nothing is shut down
            bus.restart();

            let team = Team::resume(make(), services.clone()).await.unwrap();
            let outcome =
                tokio::time::timeout(Duration::from_secs(3600), team.wait("append")).await;
            let context = format!("{shape}, killed after {kill_after_cycles} cycles");
            assert!(outcome.as_ref().is_ok_and(TaskOutcome::is_success), "{context}: {outcome:?}");
            let log = std::fs::read_to_string(dir.path().join("log.txt")).unwrap();
            assert_eq!(log, "one\ntwo\nthree\n", "{context}");
            team.shutdown().await.unwrap();
            let records = services.audit.records(None).await.unwrap();
            agent_core::verify_chain(&records).unwrap();
            let runs = records
                .iter()
                .filter(|r| matches!(&r.event, AuditEvent::ToolCall { summary, .. } if !summary.starts_with("recorded result reused")))
                .count();
            assert_eq!(runs, 3, "{context}: each step ran once");
            assert_eq!(bus.pending(&agent_state::Address::System).await.unwrap_or(0), 0);
        }
    }
}

#[tokio::test(start_paused = true)]
async fn a_team_that_makes_no_shape_is_refused_with_the_reason() {
    let dir = tempfile::tempdir().unwrap();
    let refused = |spec: TeamSpec| {
        let services = services(dir.path());
        async move {
            match Team::start(spec, services).await {
                Ok(_) => panic!("the team should be refused"),
                Err(e) => e,
            }
        }
    };
    // Two executors without a lead.
    let mut two = single();
    let mut other = two.agents[0].clone();
    other.config.id = "other".into();
    two.agents.push(other);
    let err = refused(two).await;
    assert!(matches!(err, TeamError::Shape { shape: TeamShape::Single, .. }), "{err}");
    assert!(err.to_string().contains("one executor"), "{err}");
    // A team with powers whose executor has no lead.
    let mut layered = standard_team();
    layered.agents[5].config.supervisor = None;
    let err = refused(layered).await;
    assert!(matches!(err, TeamError::MissingSupervisor { .. }), "{err}");
    assert!(err.to_string().contains("bottom-d1"), "{err}");
    // A crew with two leads.
    let mut two_leads = crew();
    let mut lead = two_leads.agents[0].clone();
    lead.config.id = "lead2".into();
    two_leads.agents.push(lead);
    let err = refused(two_leads).await;
    assert!(err.to_string().contains("a crew has one lead"), "{err}");
}
