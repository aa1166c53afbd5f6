//! Executors with a `kind` in a team: goal steps and steps naming the kind run as
//! executor runs, their progress reaches the team's event stream, a blocked run is escalated
//! without being retried or reassigned, and a run a crash cut short is not repeated.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use agent_core::{AuditEvent, Received, TeamEvent};
use agent_executor::{Executor, FnKind, KindError, KindOutput, Registry};
use agent_layers::BottomSpec;
use agent_pool::{RoleSpec, Team, TeamServices, TeamSpec};
use agent_state::{
    PlanStep, ResultStatus, RetryPolicy, RunEvent, StepTarget, Task, TaskFailure, TaskOutcome,
};
use message_bus::InMemoryBus;

use crate::support::*;

/// The standard team with both docs executors given `kind`.
fn kind_team(kind: &str) -> TeamSpec {
    let mut spec = standard_team();
    for agent in &mut spec.agents {
        if let RoleSpec::Bottom(b) = &mut agent.role
            && agent.config.id.as_str().starts_with("bottom-d")
        {
            *b = BottomSpec::new(b.tools.iter().cloned()).with_kind(kind);
        }
    }
    spec
}

/// A goal step for the docs lead.
fn goal_step(id: &str, description: &str) -> PlanStep {
    PlanStep::goal(id, description, StepTarget::Domain("docs".into()))
}

/// `echo` (says its objective back, reporting progress) and `stuck` (blocked: missing input),
/// counting their runs; `hang` never returns (a run a crash will cut), with `side_effects` set
/// it is not idempotent.
fn executor(runs: Arc<AtomicUsize>, side_effects: bool) -> Arc<Executor> {
    let mut registry = Registry::new();
    let counted = runs.clone();
    registry
        .register(FnKind::new("echo", "says the objective back", move |req, capsule| {
            counted.fetch_add(1, Ordering::SeqCst);
            Box::pin(async move {
                capsule.progress(50, "echoing");
                Ok(KindOutput::new(format!("echo: {}", req.objective), 0.9))
            })
        }))
        .unwrap();
    let counted = runs.clone();
    registry
        .register(FnKind::new("stuck", "needs an input", move |_, _| {
            counted.fetch_add(1, Ordering::SeqCst);
            Box::pin(async { Err(KindError::missing("the customer's address")) })
        }))
        .unwrap();
    let hang = FnKind::new("hang", "never returns", move |_, _| {
        runs.fetch_add(1, Ordering::SeqCst);
        Box::pin(std::future::pending())
    });
    if side_effects {
        registry.register(hang.with_side_effects()).unwrap();
    } else {
        registry.register(hang).unwrap();
    }
    let patient = RetryPolicy {
        hard_timeout_ms: 86_400_000,
        soft_timeout_ms: 3_600_000,
        ..RetryPolicy::executor_default()
    };
    Arc::new(Executor::new(registry).with_kind_policy("hang", patient))
}

fn with_executor(services: TeamServices, executor: Arc<Executor>) -> TeamServices {
    TeamServices { executor: Some(executor), ..services }
}

#[tokio::test(start_paused = true)]
async fn a_goal_step_runs_through_the_kind_without_a_model() {
    let dir = tempfile::tempdir().unwrap();
    let runs = Arc::new(AtomicUsize::new(0));
    let services = with_executor(services(dir.path()), executor(runs.clone(), false));
    let mut events = services.events.subscribe();
    let team = Team::start(kind_team("echo"), services).await.unwrap();
    let task = Task {
        id: "t".into(),
        goal: "say hello".into(),
        steps: vec![goal_step("hello", "say hello to the team").with_acceptance("it said hello")],
    };
    team.submit(task).await.unwrap();
    let outcome = tokio::time::timeout(Duration::from_secs(600), team.wait("t")).await.unwrap();
    let TaskOutcome::Succeeded { results, .. } = &outcome else { panic!("{outcome:?}") };
    assert_eq!(runs.load(Ordering::SeqCst), 1);
    let result = &results[0];
    assert!(result.success);
    assert_eq!(result.output, "echo: say hello to the team\n\nDone when: it said hello");
    let structured = result.result.as_ref().unwrap();
    assert_eq!(structured.status, ResultStatus::Success);

    let mut progress = Vec::new();
    while let Some(received) = events.try_next() {
        if let Received::Event(event) = received
            && let TeamEvent::Run { agent, event: RunEvent::Progress { percent, message, .. } } =
                &*event
        {
            progress.push(format!("{agent} {percent} {message}"));
        }
    }
    assert_eq!(progress.len(), 1, "{progress:?}");
    assert!(progress[0].starts_with("bottom-d") && progress[0].ends_with(" 50 echoing"));
    // The run is audited as the call of the kind, and its structured result once.
    let records = team.services().audit.records(None).await.unwrap();
    let calls = records
        .iter()
        .filter(|r| matches!(&r.event, AuditEvent::ToolCall { tool, success: true, .. } if tool == "echo"))
        .count();
    let results = records
        .iter()
        .filter(|r| matches!(&r.event, AuditEvent::Result { task, trusted: true, .. } if task == "t/hello"))
        .count();
    assert_eq!((calls, results), (1, 1));
    team.shutdown().await.unwrap();
}

#[tokio::test(start_paused = true)]
async fn a_step_naming_the_kind_passes_its_objective_and_inputs() {
    let dir = tempfile::tempdir().unwrap();
    let runs = Arc::new(AtomicUsize::new(0));
    let team =
        Team::start(kind_team("echo"), with_executor(services(dir.path()), executor(runs, false)))
            .await
            .unwrap();
    let task = Task {
        id: "t".into(),
        goal: "echo".into(),
        steps: vec![step(
            "e",
            "docs",
            "echo",
            serde_json::json!({ "objective": "from args", "inputs": { "x": 1 } }),
        )],
    };
    team.submit(task).await.unwrap();
    let outcome = tokio::time::timeout(Duration::from_secs(600), team.wait("t")).await.unwrap();
    let TaskOutcome::Succeeded { results, .. } = &outcome else { panic!("{outcome:?}") };
    assert_eq!(results[0].output, "echo: from args");
    team.shutdown().await.unwrap();
}

#[tokio::test(start_paused = true)]
async fn a_goal_step_without_a_kind_executor_still_needs_a_model() {
    let dir = tempfile::tempdir().unwrap();
    let team = Team::start(standard_team(), services(dir.path())).await.unwrap();
    let task = Task { id: "t".into(), goal: "g".into(), steps: vec![goal_step("s", "do it")] };
    let err = team.submit(task).await.unwrap_err();
    assert!(err.to_string().contains("cannot plan"), "{err}");
    team.shutdown().await.unwrap();
}

#[tokio::test(start_paused = true)]
async fn a_blocked_run_is_escalated_not_retried_nor_reassigned() {
    let dir = tempfile::tempdir().unwrap();
    let runs = Arc::new(AtomicUsize::new(0));
    let team = Team::start(
        kind_team("stuck"),
        with_executor(services(dir.path()), executor(runs.clone(), false)),
    )
    .await
    .unwrap();
    let task = Task { id: "t".into(), goal: "g".into(), steps: vec![goal_step("s", "send it")] };
    team.submit(task).await.unwrap();
    let outcome = tokio::time::timeout(Duration::from_secs(600), team.wait("t")).await.unwrap();
    let TaskOutcome::Failed { reason, .. } = &outcome else { panic!("{outcome:?}") };
    let TaskFailure::Blocked { step, executor_kind, missing, .. } = reason else {
        panic!("{reason:?}")
    };
    assert_eq!((step.as_str(), executor_kind.as_str()), ("s", "stuck"));
    assert_eq!(missing, "the customer's address");
    assert!(reason.to_string().contains("supply it"), "{reason}");
    assert_eq!(runs.load(Ordering::SeqCst), 1, "once: not retried, not given to bottom-d2");
    team.shutdown().await.unwrap();
}

/// Kills a team while its `hang` run is under way and resumes it.
async fn kill_mid_run_and_resume(side_effects: bool) -> (TaskOutcome, usize) {
    let dir = tempfile::tempdir().unwrap();
    let runs = Arc::new(AtomicUsize::new(0));
    let bus = Arc::new(InMemoryBus::new());
    let mut services = with_executor(services(dir.path()), executor(runs.clone(), side_effects));
    services.bus = bus.clone();
    let team = Team::start(kind_team("hang"), services.clone()).await.unwrap();
    let task = Task { id: "t".into(), goal: "g".into(), steps: vec![goal_step("s", "hang")] };
    team.submit(task).await.unwrap();
    while runs.load(Ordering::SeqCst) == 0 {
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    drop(team); // abrupt: the run is cut short, nothing recorded its end
    bus.restart();
    // The resumed run must not start `hang` forever: give it a kind that ends.
    let team = Team::resume(kind_team("hang"), services).await.unwrap();
    let outcome = tokio::time::timeout(Duration::from_secs(3_600), team.wait("t")).await;
    let runs = runs.load(Ordering::SeqCst);
    let outcome = outcome.unwrap_or(TaskOutcome::Failed {
        task_id: "t".into(),
        reason: TaskFailure::InvalidPlan { reason: format!("no outcome; runs: {runs}") },
    });
    (outcome, runs)
}

#[tokio::test(start_paused = true)]
async fn a_run_with_side_effects_cut_by_a_crash_is_not_repeated() {
    let (outcome, runs) = kill_mid_run_and_resume(true).await;
    assert_eq!(runs, 1, "the cut run was not started again");
    let TaskOutcome::Failed { reason: TaskFailure::Interrupted { step, tool, .. }, .. } = &outcome
    else {
        panic!("{outcome:?}")
    };
    assert_eq!((step.as_str(), tool.as_str()), ("s", "hang"));
}

#[tokio::test(start_paused = true)]
async fn an_idempotent_run_cut_by_a_crash_runs_again() {
    let (outcome, runs) = kill_mid_run_and_resume(false).await;
    // It runs again (and hangs again: no outcome within the hour).
    assert_eq!(runs, 2, "{outcome:?}");
}
