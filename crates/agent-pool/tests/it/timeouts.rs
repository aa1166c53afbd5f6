//! The team's time limits on real team runs (a scripted reasoner playing the model, a tool
//! that never returns, paused time): a step whose tool loop runs past `subtask_ms` and a task
//! open past `task_ms` each end the task with a typed `TimedOut` reason, audited, with the
//! outcome stored, the transition chain intact and a clean shutdown; a zero limit is refused
//! before anything starts. A task past its soft limit (`task_soft_ms`) is audited once as
//! `SoftTimeout` and goes on (to success, or to its hard limit as before); a soft limit not
//! below its hard one is refused before anything starts.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use agent_core::testing::FakeTool;
use agent_core::tools::ToolRegistry;
use agent_core::{
    AuditEvent, AuditRecord, NextAction, ReasoningRequest, ScriptedAnswer, ScriptedReasoner,
    ToolCall, check_transition_chain,
};
use agent_pool::{Team, TeamError, TeamServices, TeamSpec};
use agent_state::{
    AgentId, AgentStatus, Limit, LimitError, Task, TaskFailure, TaskOutcome, Timeouts,
};
use serde_json::json;

use crate::support::*;

/// One power, one lead (`build`) and one executor holding `hang`.
fn hang_team(timeouts: Timeouts) -> TeamSpec {
    let mut spec = TeamSpec::new(vec![
        top("top-a", "power_a", 1.0),
        mid("mid-build", "build", "top-a"),
        bottom("bottom-b1", "mid-build", &["hang"]),
    ]);
    spec.timeouts = timeouts;
    spec
}

/// Services whose tools include `hang`, and whose executors call it again and again (with a
/// new argument each time, so no guard takes it for a loop).
fn hang_services(dir: &std::path::Path) -> TeamServices {
    let mut services = services(dir);
    let mut tools = ToolRegistry::with_builtins();
    tools.register(Arc::new(FakeTool::hanging("hang"))).unwrap();
    services.tools = Arc::new(tools);
    let calls = AtomicU64::new(0);
    services.reasoner = Arc::new(ScriptedReasoner::from_fn(move |request| match request {
        ReasoningRequest::NextAction { .. } => {
            let n = calls.fetch_add(1, Ordering::SeqCst);
            ScriptedAnswer::Action(NextAction::Call(ToolCall {
                tool: "hang".into(),
                args: json!({ "n": n }),
            }))
        }
        _ => ScriptedAnswer::Fallback,
    }));
    services
}

fn hang_task(id: &str) -> Task {
    Task {
        id: id.into(),
        goal: "wait for something that never comes".into(),
        steps: vec![step("wait", "build", "hang", json!({}))],
    }
}

async fn records(services: &TeamServices) -> Vec<AuditRecord> {
    services.audit.records(None).await.unwrap()
}

/// Every audited time-out as (agent, limit, what, limit_ms).
fn timed_out(records: &[AuditRecord]) -> Vec<(AgentId, Limit, String, u64)> {
    records
        .iter()
        .filter_map(|r| match &r.event {
            AuditEvent::TimedOut { limit, what, limit_ms } => {
                Some((r.agent.clone(), *limit, what.clone(), *limit_ms))
            }
            _ => None,
        })
        .collect()
}

/// The run's stored state after a clean shutdown: the transition chain holds, every agent
/// ended terminated, and the outcome `wait` gave is the one stored.
async fn assert_consistent(services: &TeamServices, outcome: &TaskOutcome) {
    let all = records(services).await;
    let statuses = check_transition_chain(&all).unwrap();
    assert!(
        statuses.iter().all(|(_, s)| *s == AgentStatus::Terminated),
        "every agent ends terminated: {statuses:?}"
    );
    let stored = services.state.outcomes().await.unwrap();
    assert_eq!(stored.iter().filter(|o| o.task_id() == outcome.task_id()).count(), 1);
    assert!(stored.contains(outcome), "stored {stored:?}");
}

#[tokio::test(start_paused = true)]
async fn a_step_past_its_subtask_limit_ends_the_task_timed_out_and_is_audited() {
    let dir = tempfile::tempdir().unwrap();
    let services = hang_services(dir.path());
    // Each call is cut after 1 s, so the step's loop passes 5 s after a few calls, all in
    // one turn (well within the executor's 30 s turn and its tool-call limit).
    let timeouts = Timeouts { tool_ms: 1_000, subtask_ms: 5_000, ..Timeouts::default() };
    let team = Team::start(hang_team(timeouts), services.clone()).await.unwrap();
    team.submit(hang_task("slow")).await.unwrap();

    let outcome = team.wait("slow").await;

    let TaskOutcome::Failed { reason: TaskFailure::TimedOut { limit, what, limit_ms }, .. } =
        &outcome
    else {
        panic!("expected a subtask time-out, got {outcome:?}")
    };
    assert_eq!((*limit, *limit_ms), (Limit::Subtask, 5_000));
    assert_eq!(what, "step `wait` of task `slow` on `bottom-b1`");
    assert!(outcome_reason(&outcome).contains("raise `subtask_ms`"), "{outcome:?}");
    let all = records(&services).await;
    assert_eq!(
        timed_out(&all),
        [(AgentId::new("bottom-b1"), Limit::Subtask, what.clone(), 5_000)],
        "audited once, by the executor"
    );
    // The calls before it were cut at the tool limit, each audited as a failed call.
    let cut: Vec<&str> = all
        .iter()
        .filter_map(|r| match &r.event {
            AuditEvent::ToolCall { tool, success: false, summary, .. } if tool == "hang" => {
                Some(summary.as_str())
            }
            _ => None,
        })
        .collect();
    assert!(cut.len() >= 5, "{cut:?}");
    assert!(cut.iter().all(|s| s.contains("timed out after 1000 ms")), "{cut:?}");

    team.shutdown().await.unwrap();
    assert_consistent(&services, &outcome).await;
}

#[tokio::test(start_paused = true)]
async fn a_task_past_its_limit_is_closed_timed_out_by_the_proposing_power_and_audited() {
    let dir = tempfile::tempdir().unwrap();
    let services = hang_services(dir.path());
    // The executor's one call would run a minute (and its turn is cut at 30 s); the task
    // may take 10 s.
    let timeouts = Timeouts { tool_ms: 60_000, task_ms: 10_000, ..Timeouts::default() };
    let team = Team::start(hang_team(timeouts), services.clone()).await.unwrap();
    let submitted = services.clock.now();
    team.submit(hang_task("late")).await.unwrap();

    let outcome = team.wait("late").await;

    let TaskOutcome::Failed { reason: TaskFailure::TimedOut { limit, what, limit_ms }, .. } =
        &outcome
    else {
        panic!("expected a task time-out, got {outcome:?}")
    };
    assert_eq!((*limit, what.as_str(), *limit_ms), (Limit::Task, "task `late`", 10_000));
    assert!(outcome_reason(&outcome).contains("raise `task_ms`"), "{outcome:?}");
    let elapsed = services.clock.now().millis_since(submitted);
    assert!(elapsed >= 10_000, "closed only once the limit passed: {elapsed} ms");
    let all = records(&services).await;
    assert_eq!(
        timed_out(&all),
        [(AgentId::new("top-a"), Limit::Task, "task `late`".into(), 10_000)],
        "audited once, by the power that closed it"
    );

    team.shutdown().await.unwrap();
    assert_consistent(&services, &outcome).await;
}

#[tokio::test(start_paused = true)]
async fn a_zero_or_absurd_limit_is_refused_before_anything_starts() {
    let dir = tempfile::tempdir().unwrap();
    let services = services(dir.path());
    for (timeouts, limit, value) in [
        (Timeouts { reasoning_ms: 0, ..Timeouts::default() }, Limit::Reasoning, 0),
        (Timeouts { task_ms: u64::MAX, ..Timeouts::default() }, Limit::Task, u64::MAX),
    ] {
        let mut spec = standard_team();
        spec.timeouts = timeouts;
        let Err(error) = Team::start(spec, services.clone()).await else {
            panic!("{limit:?} = {value} was accepted")
        };
        assert!(
            matches!(&error, TeamError::Timeouts(LimitError { limit: l, value: v }) if *l == limit && *v == value),
            "{error:?}"
        );
        assert!(error.to_string().contains(limit.key()), "{error}");
    }
    assert!(records(&services).await.is_empty(), "no agent was created");
}

fn outcome_reason(outcome: &TaskOutcome) -> String {
    match outcome {
        TaskOutcome::Failed { reason, .. } => reason.to_string(),
        TaskOutcome::Succeeded { .. } => String::new(),
    }
}

/// Every audited soft time-out as (agent, limit, what, soft_ms, hard_ms).
fn soft_timed_out(records: &[AuditRecord]) -> Vec<(AgentId, Limit, String, u64, u64)> {
    records
        .iter()
        .filter_map(|r| match &r.event {
            AuditEvent::SoftTimeout { limit, what, soft_ms, hard_ms } => {
                Some((r.agent.clone(), *limit, what.clone(), *soft_ms, *hard_ms))
            }
            _ => None,
        })
        .collect()
}

#[tokio::test(start_paused = true)]
async fn a_task_past_its_soft_limit_is_audited_once_and_still_succeeds() {
    let dir = tempfile::tempdir().unwrap();
    let mut services = services(dir.path());
    let mut tools = ToolRegistry::with_builtins();
    tools.register(Arc::new(FakeTool::slow("slow", Duration::from_secs(5)))).unwrap();
    services.tools = Arc::new(tools);
    let mut spec = TeamSpec::new(vec![
        top("top-a", "power_a", 1.0),
        mid("mid-build", "build", "top-a"),
        bottom("bottom-b1", "mid-build", &["slow"]),
    ]);
    // Told at 2 s, stopped at 60 s; the step takes 5 s (well under the tool and turn limits'
    // soft halves).
    spec.timeouts = Timeouts { task_ms: 60_000, task_soft_ms: Some(2_000), ..Timeouts::default() };
    let team = Team::start(spec, services.clone()).await.unwrap();
    let task = Task {
        id: "slow-task".into(),
        goal: "take a while".into(),
        steps: vec![step("wait", "build", "slow", json!({}))],
    };
    team.submit(task).await.unwrap();

    let outcome = team.wait("slow-task").await;

    assert!(outcome.is_success(), "the soft limit does not stop it: {outcome:?}");
    let all = records(&services).await;
    assert_eq!(
        soft_timed_out(&all),
        [(AgentId::new("top-a"), Limit::Task, "task `slow-task`".into(), 2_000, 60_000)],
        "audited once, as the proposing power's record"
    );
    assert_eq!(timed_out(&all), [], "no hard limit hit");
    team.shutdown().await.unwrap();
    assert_consistent(&services, &outcome).await;
}

#[tokio::test(start_paused = true)]
async fn a_task_past_its_hard_limit_is_told_at_its_soft_one_first() {
    let dir = tempfile::tempdir().unwrap();
    let services = hang_services(dir.path());
    let timeouts = Timeouts { tool_ms: 60_000, task_ms: 10_000, ..Timeouts::default() };
    let team = Team::start(hang_team(timeouts), services.clone()).await.unwrap();
    team.submit(hang_task("late")).await.unwrap();

    let outcome = team.wait("late").await;

    assert!(
        matches!(
            &outcome,
            TaskOutcome::Failed { reason: TaskFailure::TimedOut { limit: Limit::Task, .. }, .. }
        ),
        "the hard limit as before: {outcome:?}"
    );
    let all = records(&services).await;
    let task_soft: Vec<_> =
        soft_timed_out(&all).into_iter().filter(|(_, l, ..)| *l == Limit::Task).collect();
    assert_eq!(
        task_soft,
        [(AgentId::new("top-a"), Limit::Task, "task `late`".into(), 5_000, 10_000)],
        "half of task_ms by default, told once"
    );
    team.shutdown().await.unwrap();
}

#[tokio::test(start_paused = true)]
async fn a_soft_limit_not_below_its_hard_one_is_refused_before_anything_starts() {
    let dir = tempfile::tempdir().unwrap();
    let services = services(dir.path());
    let mut spec = standard_team();
    spec.timeouts = Timeouts { tool_ms: 1_000, tool_soft_ms: Some(1_000), ..Timeouts::default() };
    let Err(error) = Team::start(spec, services.clone()).await else {
        panic!("a soft limit equal to its hard one was accepted")
    };
    assert!(matches!(error, TeamError::SoftTimeouts(_)), "{error:?}");
    assert!(error.to_string().contains("`tool_soft_ms` = 1000 must be below `tool_ms`"), "{error}");
    assert!(records(&services).await.is_empty(), "no agent was created");
}
