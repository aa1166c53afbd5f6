//! The mid layer: a lead takes work packages from the top layer only, places and sends the
//! steps, reassigns the work of failed executors, dismisses repeat offenders, escalates what it
//! cannot place or finish, and reports the results upward in plan order.

use agent_core::HeartbeatOutcome;
use agent_core::protocol::{ErrorReport, Escalation, PeerCoordination};
use agent_state::{
    AgentMetrics, Assignment, DecisionId, ProgressReport, ProgressStatus, SubtaskResult,
    TaskFailure, WorkPackage,
};
use serde_json::json;

use super::*;
use crate::{MAX_FAILURES_BEFORE_DISMISSAL, MidAgent, MidSpec};

const ME: &str = "mid-1";

fn package(task: &str, steps: &[&str]) -> WorkPackage {
    WorkPackage {
        task_id: task.into(),
        goal: "write the docs".into(),
        decision: DecisionId::from_u128(7),
        wave: 1,
        steps: steps.iter().map(|s| write_step(s)).collect(),
    }
}

fn write_step(id: &str) -> PlanStep {
    step(id, "docs", "write_file", json!({"path": format!("{id}.txt"), "content": id}))
}

/// The lead `mid-1` under `top-a`, taking work from `top-a` and `top-b`, with two executors that
/// write files and a peer lead `mid-2`; every other party is a bare inbox.
async fn lead(w: &World) -> Agent {
    w.parties(&["top-a", "top-b", "top-x", "bottom-1", "bottom-2", "mid-2"]).await;
    let tools: std::sync::Arc<[String]> = ["write_file".to_owned()].into();
    let behavior = MidAgent::new(
        MidSpec { domain: "docs".into(), max_subordinates: 4 },
        vec![(id("bottom-1"), tools.clone()), (id("bottom-2"), tools)],
        vec![id("top-a"), id("top-b")],
        vec![id("mid-2")],
    );
    w.spawn(config(ME, AgentLayer::Mid, Some("top-a")), behavior).await
}

async fn send_work(w: &World, from: &str, work: WorkPackage) {
    w.send(addr(from), ME, MessageKind::TaskAssign, &Assignment::Work { work }).await;
}

/// The subtasks in `executor`'s inbox; takes everything there.
async fn subtasks(w: &World, executor: &str) -> Vec<Subtask> {
    w.received::<Assignment>(&addr(executor), MessageKind::TaskAssign)
        .await
        .into_iter()
        .map(|a| match a {
            Assignment::Subtask { subtask } => subtask,
            other => panic!("expected a subtask, got {other:?}"),
        })
        .collect()
}

/// A lead that placed the package `t1` of `steps` and whose parties' inboxes are empty again.
async fn lead_with_work(w: &World, steps: &[&str]) -> Agent {
    let mut agent = lead(w).await;
    send_work(w, "top-a", package("t1", steps)).await;
    agent.heartbeat(1).await.unwrap();
    for party in ["top-a", "bottom-1", "bottom-2", "mid-2"] {
        w.drain(&addr(party)).await;
    }
    agent
}

async fn report_failure(w: &World, executor: &str, error: &str, work: Option<Subtask>) {
    let report = ErrorReport { error: error.into(), work, metrics: AgentMetrics::default() };
    w.send(addr(executor), ME, MessageKind::ErrorReport, &report).await;
}

fn result(step: &str, agent: &str) -> SubtaskResult {
    SubtaskResult {
        task_id: "t1".into(),
        step_id: step.into(),
        agent: id(agent),
        success: true,
        output: format!("wrote {step}"),
        result: None,
    }
}

async fn report_done(w: &World, executor: &str, step: &str) {
    let report = ProgressReport {
        task_id: "t1".into(),
        status: ProgressStatus::Completed,
        percentage: 100,
        description: format!("{step} with write_file"),
        results: vec![result(step, executor)],
        failure: None,
    };
    w.send(addr(executor), ME, MessageKind::ProgressReport, &report).await;
}

#[tokio::test(start_paused = true)]
async fn a_lead_takes_work_packages_only_from_the_top_layer() {
    let w = World::new();
    let mut agent = lead(&w).await;
    for stranger in ["bottom-1", "mid-2", "top-x"] {
        send_work(&w, stranger, package("t1", &["s1"])).await;
    }
    let not_a_package =
        Assignment::Subtask { subtask: subtask("t1", write_step("s1"), "bottom-1") };
    w.send(addr("top-a"), ME, MessageKind::TaskAssign, &not_a_package).await;

    assert_eq!(agent.heartbeat(1).await.unwrap(), HeartbeatOutcome::Processed { messages: 4 });

    assert_eq!(
        w.denied(ME).await,
        [
            "task_assign from bottom-1",
            "task_assign from mid-2",
            "task_assign from top-x",
            "task_assign from top-a"
        ]
    );
    assert!(subtasks(&w, "bottom-1").await.is_empty());
    assert!(subtasks(&w, "bottom-2").await.is_empty());
    assert_eq!(w.board(BoardId::Agent(id(ME))).await, "");
}

#[tokio::test(start_paused = true)]
async fn a_lead_places_the_steps_writes_the_plan_and_sends_the_subtasks() {
    let w = World::new();
    let mut agent = lead(&w).await;
    send_work(&w, "top-a", package("t1", &["s1", "s2"])).await;

    agent.heartbeat(1).await.unwrap();

    assert_eq!(
        w.board(BoardId::Agent(id(ME))).await,
        "## Task Allocation Plan (t1)\n\n- [bottom-1] s1 with write_file\n- [bottom-2] s2 with write_file\n"
    );
    assert_eq!(subtasks(&w, "bottom-1").await, [subtask("t1", write_step("s1"), "bottom-1")]);
    assert_eq!(subtasks(&w, "bottom-2").await, [subtask("t1", write_step("s2"), "bottom-2")]);
    let notes: Vec<PeerCoordination> =
        w.received(&addr("mid-2"), MessageKind::PeerCoordination).await;
    assert_eq!(
        notes,
        [PeerCoordination { task_id: "t1".into(), note: "mid-1 takes 2 step(s) of t1".into() }]
    );
    let reports: Vec<ProgressReport> =
        w.received(&addr("top-a"), MessageKind::ProgressReport).await;
    assert_eq!(reports.len(), 1);
    assert_eq!((reports[0].status, reports[0].percentage), (ProgressStatus::InProgress, 0));

    // A redelivered package is not placed again.
    send_work(&w, "top-a", package("t1", &["s1", "s2"])).await;
    agent.heartbeat(2).await.unwrap();
    assert!(subtasks(&w, "bottom-1").await.is_empty());
    assert!(subtasks(&w, "bottom-2").await.is_empty());
}

#[tokio::test(start_paused = true)]
async fn an_executors_failure_moves_its_subtask_to_another_executor() {
    let w = World::new();
    let mut agent = lead_with_work(&w, &["s1"]).await;
    let first = subtask("t1", write_step("s1"), "bottom-1");
    report_failure(&w, "bottom-1", "disk on fire", Some(first.clone())).await;

    agent.heartbeat(2).await.unwrap();

    let second = Subtask { assignee: id("bottom-2"), attempt: 2, ..first };
    assert_eq!(subtasks(&w, "bottom-2").await, [second]);
    assert!(subtasks(&w, "bottom-1").await.is_empty());
    let board = w.board(BoardId::Agent(id(ME))).await;
    assert!(board.ends_with("- reassigned s1 to [bottom-2] (attempt 2)"), "{board}");
    assert!(w.kinds(&addr("top-a")).await.is_empty(), "nothing to escalate yet");

    report_done(&w, "bottom-2", "s1").await;
    agent.heartbeat(3).await.unwrap();

    let reports: Vec<ProgressReport> =
        w.received(&addr("top-a"), MessageKind::ProgressReport).await;
    assert_eq!(reports.len(), 1);
    assert_eq!((reports[0].status, reports[0].percentage), (ProgressStatus::Completed, 100));
    assert_eq!(reports[0].results, [result("s1", "bottom-2")]);
}

#[tokio::test(start_paused = true)]
async fn a_subtask_every_executor_failed_is_escalated_to_the_top() {
    let w = World::new();
    let mut agent = lead_with_work(&w, &["s1"]).await;
    let first = subtask("t1", write_step("s1"), "bottom-1");
    report_failure(&w, "bottom-1", "disk on fire", Some(first.clone())).await;
    agent.heartbeat(2).await.unwrap();
    let second = subtasks(&w, "bottom-2").await.pop().unwrap();
    report_failure(&w, "bottom-2", "disk still on fire", Some(second)).await;

    agent.heartbeat(3).await.unwrap();

    let escalations: Vec<Escalation> =
        w.received(&addr("top-a"), MessageKind::IssueEscalation).await;
    assert_eq!(
        escalations,
        [Escalation {
            task_id: "t1".into(),
            failure: TaskFailure::StepFailed {
                step: "s1".into(),
                attempts: 2,
                error: "disk still on fire".into()
            },
        }]
    );
    assert!(subtasks(&w, "bottom-1").await.is_empty(), "an executor is not tried twice");
}

#[tokio::test(start_paused = true)]
async fn an_executor_that_keeps_failing_is_dismissed_once_and_gets_no_more_work() {
    let w = World::new();
    let mut agent = lead(&w).await;
    for n in 1..=MAX_FAILURES_BEFORE_DISMISSAL {
        report_failure(&w, "bottom-1", &format!("failure {n}"), None).await;
        agent.heartbeat(u64::from(n)).await.unwrap();
        let orders: Vec<Assignment> = w.received(&addr("bottom-1"), MessageKind::TaskAssign).await;
        if n < MAX_FAILURES_BEFORE_DISMISSAL {
            assert!(orders.is_empty(), "dismissed after {n} failure(s)");
        } else {
            let reason = format!("failed {n} times; last error: failure {n}");
            assert_eq!(orders, [Assignment::Dismiss { reason }]);
        }
    }
    report_failure(&w, "bottom-1", "one more", None).await;
    agent.heartbeat(10).await.unwrap();
    assert!(w.kinds(&addr("bottom-1")).await.is_empty(), "dismissed only once");

    // With both executors failed, the lower id would win a step: unless it is dismissed.
    report_failure(&w, "bottom-2", "a failure of bottom-2", None).await;
    send_work(&w, "top-a", package("t2", &["s1", "s2"])).await;
    agent.heartbeat(11).await.unwrap();

    assert!(subtasks(&w, "bottom-1").await.is_empty());
    let placed: Vec<String> =
        subtasks(&w, "bottom-2").await.into_iter().map(|s| s.step.id).collect();
    assert_eq!(placed, ["s1", "s2"]);
}

#[tokio::test(start_paused = true)]
async fn a_step_no_executor_can_take_is_escalated_to_the_power_that_sent_it() {
    let w = World::new();
    let mut agent = lead(&w).await;
    let mut work = package("t1", &["s1"]);
    work.steps.push(step("s2", "docs", "deploy", json!({})));
    send_work(&w, "top-b", work).await;

    agent.heartbeat(1).await.unwrap();

    let escalations: Vec<Escalation> =
        w.received(&addr("top-b"), MessageKind::IssueEscalation).await;
    assert_eq!(
        escalations,
        [Escalation {
            task_id: "t1".into(),
            failure: TaskFailure::Unplaceable {
                step: "s2".into(),
                reason: "no available executor has the tool `deploy`".into()
            },
        }]
    );
    assert!(w.kinds(&addr("top-a")).await.is_empty());
    assert!(subtasks(&w, "bottom-1").await.is_empty(), "nothing of the package is placed");
    assert!(subtasks(&w, "bottom-2").await.is_empty());
}

#[tokio::test(start_paused = true)]
async fn a_lead_reports_completed_with_the_results_in_plan_order() {
    let w = World::new();
    let mut agent = lead_with_work(&w, &["s1", "s2"]).await;

    report_done(&w, "bottom-2", "s2").await;
    agent.heartbeat(2).await.unwrap();
    let halfway: Vec<ProgressReport> =
        w.received(&addr("top-a"), MessageKind::ProgressReport).await;
    report_done(&w, "bottom-1", "s1").await;
    agent.heartbeat(3).await.unwrap();
    let done: Vec<ProgressReport> = w.received(&addr("top-a"), MessageKind::ProgressReport).await;

    assert_eq!(halfway.len(), 1);
    assert_eq!((halfway[0].status, halfway[0].percentage), (ProgressStatus::InProgress, 50));
    assert!(halfway[0].results.is_empty());
    assert_eq!(
        done,
        [ProgressReport {
            task_id: "t1".into(),
            status: ProgressStatus::Completed,
            percentage: 100,
            description: "2 of 2 step(s) done".into(),
            results: vec![result("s1", "bottom-1"), result("s2", "bottom-2")],
            failure: None,
        }]
    );
    let board = w.board(BoardId::Agent(id(ME))).await;
    assert!(board.contains("- [bottom-2] Completed: s2 with write_file (100%)"), "{board}");
}

#[tokio::test(start_paused = true)]
async fn a_lead_answers_a_peers_coordination_note() {
    let w = World::new();
    let mut agent = lead(&w).await;
    let note = PeerCoordination { task_id: "t9".into(), note: "mid-2 takes 1 step(s)".into() };
    let request = w.send(addr("mid-2"), ME, MessageKind::PeerCoordination, &note).await;

    agent.heartbeat(1).await.unwrap();

    let answers: Vec<Message> = w
        .drain(&addr("mid-2"))
        .await
        .into_iter()
        .filter(|m| m.kind == MessageKind::PeerCoordinationResponse)
        .collect();
    assert_eq!(answers.len(), 1);
    assert_eq!(answers[0].correlation_id, Some(request));
    assert_eq!(
        payload::<PeerCoordination>(&answers[0]).unwrap(),
        PeerCoordination { task_id: "t9".into(), note: "mid-1 acknowledges".into() }
    );
}

/// Regression: malformed content from a stranger used to fail the lead.
#[tokio::test(start_paused = true)]
async fn a_malformed_task_assign_from_a_stranger_is_refused_without_failing() {
    let w = World::new();
    let mut agent = lead(&w).await;
    w.send(addr("bottom-1"), ME, MessageKind::TaskAssign, &json!({"work": "x"})).await;
    let outcome = agent.heartbeat(1).await.unwrap();
    assert_eq!(outcome, HeartbeatOutcome::Processed { messages: 1 });
    assert_eq!(w.denied(ME).await, ["task_assign from bottom-1"]);
}

/// Regression: after escalating a package the lead kept moving its other steps around.
#[tokio::test(start_paused = true)]
async fn after_an_escalation_the_lead_reassigns_nothing_of_that_package() {
    let w = World::new();
    let mut agent = lead_with_work(&w, &["s1", "s2"]).await;
    let s1 = subtask("t1", write_step("s1"), "bottom-1");
    report_failure(&w, "bottom-1", "e1", Some(s1)).await;
    agent.heartbeat(2).await.unwrap();
    let s1_again = subtasks(&w, "bottom-2").await.pop().unwrap();
    report_failure(&w, "bottom-2", "e2", Some(s1_again)).await;
    agent.heartbeat(3).await.unwrap();
    let escalations: Vec<Escalation> =
        w.received(&addr("top-a"), MessageKind::IssueEscalation).await;
    assert_eq!(escalations.len(), 1);
    report_failure(&w, "bottom-2", "e3", Some(subtask("t1", write_step("s2"), "bottom-2"))).await;
    agent.heartbeat(4).await.unwrap();
    assert!(subtasks(&w, "bottom-1").await.is_empty(), "a closed package is not reassigned");
}

/// Regression (issue: a kill mid-command repeated it): an interrupted step used to be
/// reassigned to another executor, which ran the side effect again.
#[tokio::test(start_paused = true)]
async fn an_interrupted_step_is_escalated_not_reassigned() {
    let w = World::new();
    let mut agent = lead_with_work(&w, &["s1"]).await;
    let failure = TaskFailure::Interrupted {
        step: "s1".into(),
        agent: id("bottom-1"),
        tool: "shell".into(),
        partial: "half".into(),
    };
    let report = ProgressReport {
        task_id: "t1".into(),
        status: ProgressStatus::Failed,
        percentage: 0,
        description: "s1 with write_file".into(),
        results: vec![SubtaskResult { success: false, ..result("s1", "bottom-1") }],
        failure: Some(failure.clone()),
    };
    w.send(addr("bottom-1"), ME, MessageKind::ProgressReport, &report).await;

    agent.heartbeat(2).await.unwrap();

    let escalations: Vec<Escalation> =
        w.received(&addr("top-a"), MessageKind::IssueEscalation).await;
    assert_eq!(escalations, [Escalation { task_id: "t1".into(), failure }]);
    assert!(subtasks(&w, "bottom-2").await.is_empty(), "nobody else runs it");
    assert!(subtasks(&w, "bottom-1").await.is_empty(), "nor the same executor");
}
