//! The mid layer: a lead takes work packages from the top layer only, places and sends the
//! steps, reassigns the work of failed executors, dismisses repeat offenders, escalates what it
//! cannot place or finish (after a vote of the top layer on retrying it, when the team
//! arbitrates escalations), disputes results short of their acceptance check, acts on the
//! rulings, and reports the results upward in plan order.

use std::sync::Arc;

use agent_core::protocol::{
    ArbitrationResult, ConflictReport, ConflictSubject, ErrorReport, Escalation, PeerCoordination,
};
use agent_core::{HeartbeatOutcome, Judgement, ReasoningRequest, ScriptedAnswer, ScriptedReasoner};
use agent_state::{
    AgentMetrics, ArbitrationSettings, Assignment, BallotChoice, DecisionId, ProgressReport,
    ProgressStatus, SubtaskResult, TaskFailure, WorkPackage,
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
    lead_with(w, ArbitrationSettings::default(), RuleBasedReasoner::new()).await
}

/// [`lead`] with arbitration settings and a reasoner of the test's choosing.
async fn lead_with(w: &World, arbitration: ArbitrationSettings, reasoner: impl Reasoner) -> Agent {
    w.parties(&["top-a", "top-b", "top-x", "bottom-1", "bottom-2", "mid-2"]).await;
    let tools: std::sync::Arc<[String]> = ["write_file".to_owned()].into();
    let behavior = MidAgent::new(
        MidSpec { domain: "docs".into(), max_subordinates: 4 },
        vec![(id("bottom-1"), tools.clone()), (id("bottom-2"), tools)],
        vec![id("top-a"), id("top-b")],
        vec![id("mid-2")],
    )
    .with_arbitration(arbitration);
    w.spawn_with(config(ME, AgentLayer::Mid, Some("top-a")), behavior, reasoner).await
}

/// Arbitration off: escalations go straight to the top layer.
const NO_ARBITRATION: ArbitrationSettings =
    ArbitrationSettings { escalations: false, acceptance: false, vetoed_plans: false };

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
    placed(w, lead(w).await, package("t1", steps)).await
}

/// `agent` after placing `work` (from `top-a`), its parties' inboxes empty again.
async fn placed(w: &World, mut agent: Agent, work: WorkPackage) -> Agent {
    send_work(w, "top-a", work).await;
    agent.heartbeat(1).await.unwrap();
    for party in ["top-a", "bottom-1", "bottom-2", "mid-2"] {
        w.drain(&addr(party)).await;
    }
    agent
}

/// A lead's turn that places a package sends the subtasks, the note to its peer lead and the
/// progress report to the top power as one batch (one commit on a durable bus), in that order.
#[tokio::test(start_paused = true)]
async fn a_placed_package_is_one_batch_of_subtasks_note_and_report() {
    let w = World::new();
    let mut agent = lead(&w).await;
    w.sends.lock().unwrap().clear();
    send_work(&w, "top-a", package("t1", &["s1", "s2"])).await;
    agent.wake().await.unwrap();
    assert_eq!(*w.sends.lock().unwrap(), [4], "one batch: two subtasks, the note, the report");
    assert_eq!(subtasks(&w, "bottom-1").await.len() + subtasks(&w, "bottom-2").await.len(), 2);
    let notes = w.received::<PeerCoordination>(&addr("mid-2"), MessageKind::PeerCoordination).await;
    assert_eq!(notes.len(), 1);
    let reports = w.received::<ProgressReport>(&addr("top-a"), MessageKind::ProgressReport).await;
    assert_eq!(reports.len(), 1);
    assert_eq!((reports[0].status, reports[0].percentage), (ProgressStatus::InProgress, 0));
    assert_eq!(reports[0].description, "2 step(s) assigned");
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
async fn without_arbitration_a_subtask_every_executor_failed_is_escalated_to_the_top() {
    let w = World::new();
    let lead = lead_with(&w, NO_ARBITRATION, RuleBasedReasoner::new()).await;
    let mut agent = placed(&w, lead, package("t1", &["s1"])).await;
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
    let lead = lead_with(&w, NO_ARBITRATION, RuleBasedReasoner::new()).await;
    let mut agent = placed(&w, lead, package("t1", &["s1", "s2"])).await;
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

/// A ruling from `from` on `conflict_id` about `subject`.
async fn rule(
    w: &World,
    from: &str,
    conflict_id: &str,
    resolution: BallotChoice,
    subject: ConflictSubject,
) {
    let ruling = ArbitrationResult {
        conflict_id: conflict_id.into(),
        resolution: resolution.clone(),
        tally: agent_state::Tally {
            winner: resolution.clone(),
            totals: vec![(resolution, 1.0)],
            tie_broken: false,
        },
        arbitrator: id(from),
        subject: Some(subject),
    };
    w.send(addr(from), ME, MessageKind::ArbitrationResult, &ruling).await;
}

/// `s1` of `t1` failed on both executors (the lead's reports to `top-a` are left in its inbox).
async fn failed_everywhere(w: &World, agent: &mut Agent) {
    let first = subtask("t1", write_step("s1"), "bottom-1");
    report_failure(w, "bottom-1", "disk on fire", Some(first)).await;
    agent.heartbeat(2).await.unwrap();
    let second = subtasks(w, "bottom-2").await.pop().unwrap();
    report_failure(w, "bottom-2", "disk still on fire", Some(second)).await;
    agent.heartbeat(3).await.unwrap();
}

#[tokio::test(start_paused = true)]
async fn a_step_every_executor_failed_goes_to_the_vote_and_a_retry_places_it_again_once() {
    let w = World::new();
    let mut agent = lead_with_work(&w, &["s1", "s2"]).await;
    failed_everywhere(&w, &mut agent).await;

    // Not escalated: reported as a conflict between the lead and the power that sent the work.
    let messages = w.drain(&addr("top-a")).await;
    assert!(!messages.iter().any(|m| m.kind == MessageKind::IssueEscalation));
    let reports: Vec<ConflictReport> = messages
        .iter()
        .filter(|m| m.kind == MessageKind::ConflictReport)
        .map(|m| payload(m).unwrap())
        .collect();
    assert_eq!(reports.len(), 1);
    let report = &reports[0];
    assert_eq!(report.conflict.id, "t1/s1/escalation");
    assert_eq!(report.conflict.parties, [id(ME), id("top-a")]);
    assert_eq!(report.conflict.options, [BallotChoice::Abandon, BallotChoice::Retry]);
    let failure = TaskFailure::StepFailed {
        step: "s1".into(),
        attempts: 2,
        error: "disk still on fire".into(),
    };
    let subject = ConflictSubject::Escalation {
        task_id: "t1".into(),
        step: "s1".into(),
        lead: id(ME),
        failure: failure.clone(),
    };
    assert_eq!(report.subject, Some(subject.clone()));

    // The package stays open: s2 still reports.
    report_done(&w, "bottom-2", "s2").await;
    agent.heartbeat(4).await.unwrap();
    let progress: Vec<ProgressReport> =
        w.received(&addr("top-a"), MessageKind::ProgressReport).await;
    assert_eq!(progress.iter().map(|p| p.percentage).collect::<Vec<_>>(), [50]);

    rule(&w, "top-a", "t1/s1/escalation", BallotChoice::Retry, subject.clone()).await;
    agent.heartbeat(5).await.unwrap();
    // Retry: the step is placed again, on the healthy executor (bottom-2 finished s2 since).
    assert!(subtasks(&w, "bottom-1").await.is_empty());
    let again = subtasks(&w, "bottom-2").await;
    assert_eq!(again.len(), 1);
    assert_eq!(again[0].attempt, 3);
    let board = w.board(BoardId::Agent(id(ME))).await;
    assert!(board.contains("- arbitration `t1/s1/escalation` by top-a: retry"), "{board}");

    // A ruling comes once: a repeated one changes nothing.
    rule(&w, "top-a", "t1/s1/escalation", BallotChoice::Retry, subject).await;
    agent.heartbeat(6).await.unwrap();
    assert!(subtasks(&w, "bottom-1").await.is_empty());
    assert!(subtasks(&w, "bottom-2").await.is_empty());

    // Failing again everywhere: no second vote, a plain escalation.
    report_failure(&w, "bottom-2", "still", Some(again[0].clone())).await;
    agent.heartbeat(7).await.unwrap();
    let last = subtasks(&w, "bottom-1").await.pop().unwrap();
    report_failure(&w, "bottom-1", "still on fire", Some(last)).await;
    agent.heartbeat(8).await.unwrap();
    let messages = w.drain(&addr("top-a")).await;
    assert!(!messages.iter().any(|m| m.kind == MessageKind::ConflictReport));
    let escalations: Vec<Escalation> = messages
        .iter()
        .filter(|m| m.kind == MessageKind::IssueEscalation)
        .map(|m| payload(m).unwrap())
        .collect();
    assert_eq!(escalations.len(), 1);
    assert!(matches!(escalations[0].failure, TaskFailure::StepFailed { attempts: 4, .. }));
}

#[tokio::test(start_paused = true)]
async fn a_step_voted_abandon_closes_the_package() {
    let w = World::new();
    let mut agent = lead_with_work(&w, &["s1", "s2"]).await;
    failed_everywhere(&w, &mut agent).await;
    let report: ConflictReport =
        w.received(&addr("top-a"), MessageKind::ConflictReport).await.pop().unwrap();

    rule(&w, "top-a", &report.conflict.id, BallotChoice::Abandon, report.subject.unwrap()).await;
    agent.heartbeat(4).await.unwrap();
    report_done(&w, "bottom-2", "s2").await;
    agent.heartbeat(5).await.unwrap();

    assert!(w.kinds(&addr("top-a")).await.is_empty(), "the closed package reports nothing");
    assert!(subtasks(&w, "bottom-1").await.is_empty());
    assert!(agent.open_tasks().is_empty());
}

#[tokio::test(start_paused = true)]
async fn a_ruling_from_anyone_but_a_power_is_refused() {
    let w = World::new();
    let mut agent = lead_with_work(&w, &["s1"]).await;
    failed_everywhere(&w, &mut agent).await;
    let report: ConflictReport =
        w.received(&addr("top-a"), MessageKind::ConflictReport).await.pop().unwrap();

    rule(&w, "bottom-2", &report.conflict.id, BallotChoice::Retry, report.subject.unwrap()).await;
    agent.heartbeat(4).await.unwrap();

    assert_eq!(w.denied(ME).await, ["arbitration_result from bottom-2"]);
    assert!(subtasks(&w, "bottom-1").await.is_empty(), "nothing placed again");
    assert!(subtasks(&w, "bottom-2").await.is_empty());
}

/// A lead whose reasoner judges every result against the acceptance check as falling short.
async fn strict_lead(w: &World) -> Agent {
    let judge = ScriptedReasoner::from_fn(|request| match request {
        ReasoningRequest::Judge { .. } => ScriptedAnswer::Judgement(Judgement {
            complete: false,
            summary: "the file says nothing about installation".into(),
        }),
        _ => ScriptedAnswer::Fallback,
    });
    let mut step = write_step("s1");
    step.acceptance = "s1.txt explains how to install".into();
    let work = WorkPackage { steps: vec![step], ..package("t1", &[]) };
    placed(w, lead_with(w, ArbitrationSettings::default(), judge).await, work).await
}

#[tokio::test(start_paused = true)]
async fn a_result_the_lead_finds_short_of_its_acceptance_check_is_disputed_and_the_vote_decides() {
    let w = World::new();
    let mut agent = strict_lead(&w).await;
    report_done(&w, "bottom-1", "s1").await;
    agent.heartbeat(2).await.unwrap();

    let reports: Vec<ConflictReport> =
        w.received(&addr("top-a"), MessageKind::ConflictReport).await;
    assert_eq!(reports.len(), 1, "no progress report: the result waits for the ruling");
    let report = reports[0].clone();
    assert_eq!(report.conflict.id, "t1/s1/acceptance");
    assert_eq!(report.conflict.parties, [id(ME), id("bottom-1")]);
    assert_eq!(report.conflict.options, [BallotChoice::Redo, BallotChoice::Accept]);
    assert!(matches!(
        &report.subject,
        Some(ConflictSubject::Acceptance { executor, objection, .. })
            if *executor == id("bottom-1") && objection.contains("installation")
    ));

    // Redo: another executor does it; its result is judged again and, falling short after a
    // ruling, counts as failed: with no executor left, it is escalated.
    rule(&w, "top-a", &report.conflict.id, BallotChoice::Redo, report.subject.clone().unwrap())
        .await;
    agent.heartbeat(3).await.unwrap();
    let redo = subtasks(&w, "bottom-2").await;
    assert_eq!(redo.len(), 1);
    assert_eq!(redo[0].attempt, 2);
    report_done(&w, "bottom-2", "s1").await;
    agent.heartbeat(4).await.unwrap();
    let escalations: Vec<Escalation> =
        w.received(&addr("top-a"), MessageKind::IssueEscalation).await;
    assert_eq!(escalations.len(), 1, "one vote per step");
    assert!(
        matches!(&escalations[0].failure, TaskFailure::StepFailed { error, .. } if error.contains("acceptance check")),
        "{:?}",
        escalations[0]
    );
}

#[tokio::test(start_paused = true)]
async fn a_disputed_result_voted_accept_stands() {
    let w = World::new();
    let mut agent = strict_lead(&w).await;
    report_done(&w, "bottom-1", "s1").await;
    agent.heartbeat(2).await.unwrap();
    let report: ConflictReport =
        w.received(&addr("top-a"), MessageKind::ConflictReport).await.pop().unwrap();

    rule(&w, "top-b", &report.conflict.id, BallotChoice::Accept, report.subject.unwrap()).await;
    agent.heartbeat(3).await.unwrap();

    let reports: Vec<ProgressReport> =
        w.received(&addr("top-a"), MessageKind::ProgressReport).await;
    assert_eq!(reports.len(), 1);
    assert_eq!(reports[0].status, ProgressStatus::Completed);
    assert_eq!(reports[0].results, [result("s1", "bottom-1")]);
}

#[tokio::test(start_paused = true)]
async fn without_acceptance_arbitration_the_lead_does_not_judge_results() {
    let w = World::new();
    let judge = Arc::new(ScriptedReasoner::from_fn(|_| ScriptedAnswer::Fallback));
    let mut step = write_step("s1");
    step.acceptance = "s1.txt explains how to install".into();
    let work = WorkPackage { steps: vec![step], ..package("t1", &[]) };
    w.parties(&["top-a", "top-b", "top-x", "bottom-1", "bottom-2", "mid-2"]).await;
    let tools: std::sync::Arc<[String]> = ["write_file".to_owned()].into();
    let behavior = MidAgent::new(
        MidSpec { domain: "docs".into(), max_subordinates: 4 },
        vec![(id("bottom-1"), tools.clone()), (id("bottom-2"), tools)],
        vec![id("top-a"), id("top-b")],
        vec![id("mid-2")],
    )
    .with_arbitration(NO_ARBITRATION);
    let lead =
        w.spawn_sharing(config(ME, AgentLayer::Mid, Some("top-a")), behavior, judge.clone()).await;
    let mut agent = placed(&w, lead, work).await;
    report_done(&w, "bottom-1", "s1").await;
    agent.heartbeat(2).await.unwrap();

    assert!(!judge.requests().iter().any(|r| matches!(r, ReasoningRequest::Judge { .. })));
    let reports: Vec<ProgressReport> =
        w.received(&addr("top-a"), MessageKind::ProgressReport).await;
    assert_eq!(reports[0].status, ProgressStatus::Completed);
}

/// A lead's saved state lists only the executors that are not in their first state, by id (not
/// every subordinate); a state saved before, which listed every executor, still restores.
#[test]
fn a_lead_saves_only_the_executors_whose_state_changed() {
    let tools: Arc<[String]> = ["write_file".to_owned()].into();
    let new_lead = || {
        MidAgent::new(
            MidSpec { domain: "docs".into(), max_subordinates: 4 },
            vec![(id("bottom-1"), tools.clone()), (id("bottom-2"), tools.clone())],
            vec![id("top-a")],
            vec![],
        )
    };
    let mut lead = new_lead();
    let listed = json!({ "work": {}, "executors": [
        { "id": "bottom-1", "tools": ["write_file"], "failed": true, "failures": 2, "dismissed": false },
        { "id": "bottom-2", "tools": ["write_file"], "failed": false, "failures": 0, "dismissed": false },
    ]});
    AgentBehavior::restore(&mut lead, listed).unwrap();
    let saved = AgentBehavior::snapshot(&lead);
    let bottom_1 = json!({ "failed": true, "failures": 2, "dismissed": false });
    assert_eq!(saved["executors"], json!({ "bottom-1": bottom_1 }));

    let mut again = new_lead();
    AgentBehavior::restore(&mut again, saved.clone()).unwrap();
    assert_eq!(AgentBehavior::snapshot(&again), saved);
}
