//! The top layer: a task becomes a decision the other powers sign, signature requests are
//! reviewed through the reasoner, an approved plan goes to the leads by domain in waves that
//! respect `after`, a veto or an escalation closes the task, and shutdown writes the report.

use agent_core::protocol::{Escalation, SignatureRequest, StatusReport};
use agent_core::{
    HeartbeatOutcome, Judgement, ReasoningRequest, RuleBasedReasoner, ScriptedAnswer,
    ScriptedReasoner,
};
use agent_state::{
    AgentStatus::*, Assignment, Decision, DecisionId, DecisionStatus, ProgressReport,
    ProgressStatus, SubtaskResult, Task, TaskFailure, TaskOutcome, WorkPackage,
};
use governance::Governance;
use serde_json::json;

use super::*;
use crate::{LeadInfo, TopAgent, TopSpec, route};

const ME: &str = "top-a";

fn spec(power: &str) -> TopSpec {
    TopSpec { power_type: power.into(), vote_weight: 1.0, signature_authority: vec!["plan".into()] }
}

fn leads() -> Vec<LeadInfo> {
    vec![
        LeadInfo {
            id: id("mid-docs"),
            domain: "docs".into(),
            executors: vec![(id("bottom-d1"), ["write_file".to_owned()].into())],
        },
        LeadInfo {
            id: id("mid-build"),
            domain: "build".into(),
            executors: vec![(id("bottom-b1"), ["shell".to_owned(), "read_file".to_owned()].into())],
        },
    ]
}

/// `a` (docs) and `b` (build) at once, then `c` (build) once `a` succeeded.
fn task(task_id: &str) -> Task {
    Task {
        id: task_id.into(),
        goal: "write and check".into(),
        steps: vec![
            step("a", "docs", "write_file", json!({"path": "a.txt", "content": "a"})),
            step("b", "build", "shell", json!({"command": "true"})),
            step("c", "build", "read_file", json!({"path": "a.txt"})).with_after(["a"]),
        ],
    }
}

/// A power `me` with `peers` (id, signature authority) and the two leads; the other powers and
/// the leads are bare inboxes.
async fn power(
    w: &World,
    me: &str,
    peers: &[(&str, &[&str])],
    reasoner: RuleBasedReasoner,
) -> Agent {
    let parties = ["top-a", "top-b", "top-c", "mid-docs", "mid-build"];
    w.parties(&parties.into_iter().filter(|p| *p != me).collect::<Vec<_>>()).await;
    let peers = peers
        .iter()
        .map(|(p, auth)| (id(p), auth.iter().map(|a| (*a).to_owned()).collect()))
        .collect();
    let behavior = TopAgent::new(spec(me), peers, leads());
    w.spawn_with(config(me, AgentLayer::Top, None), behavior, reasoner).await
}

/// A power `me` with no peers (it signs its own plans), the two leads and `reasoner`.
async fn alone_with(w: &World, reasoner: impl agent_core::Reasoner) -> Agent {
    w.parties(&["mid-docs", "mid-build"]).await;
    let behavior = TopAgent::new(spec(ME), Vec::new(), leads());
    w.spawn_with(config(ME, AgentLayer::Top, None), behavior, reasoner).await
}

/// `top-a` with `top-b` and `top-c` as signing peers.
async fn first_of_three(w: &World) -> Agent {
    power(w, ME, &[("top-b", &["plan"]), ("top-c", &["plan"])], RuleBasedReasoner::new()).await
}

async fn submit(w: &World, from: Address, to: &str, task: Task) {
    w.send(from, to, MessageKind::TaskAssign, &Assignment::Task { task }).await;
}

async fn decisions(w: &World) -> Vec<Decision> {
    w.governance.list().await.unwrap()
}

/// The work packages in `lead`'s inbox; takes everything there.
async fn packages(w: &World, lead: &str) -> Vec<WorkPackage> {
    w.received::<Assignment>(&addr(lead), MessageKind::TaskAssign)
        .await
        .into_iter()
        .map(|a| match a {
            Assignment::Work { work } => work,
            other => panic!("expected a work package, got {other:?}"),
        })
        .collect()
}

fn step_ids(work: &WorkPackage) -> Vec<&str> {
    work.steps.iter().map(|s| s.id.as_str()).collect()
}

/// The task outcomes reported to `system`; takes everything there.
async fn closed(w: &World) -> Vec<TaskOutcome> {
    w.received::<StatusReport>(&Address::System, MessageKind::StatusReport)
        .await
        .into_iter()
        .map(|r| match r {
            StatusReport::TaskClosed { outcome } => outcome,
            other => panic!("expected a closed task, got {other:?}"),
        })
        .collect()
}

async fn edges(w: &World, agent: &str) -> Vec<(AgentStatus, AgentStatus)> {
    w.events(agent)
        .await
        .into_iter()
        .filter_map(|e| match e {
            AuditEvent::Transition { from, to, .. } => Some((from, to)),
            _ => None,
        })
        .collect()
}

fn done(lead: &str, steps: &[&str]) -> ProgressReport {
    ProgressReport {
        task_id: "t1".into(),
        status: ProgressStatus::Completed,
        percentage: 100,
        description: format!("{} step(s) done", steps.len()),
        results: steps
            .iter()
            .map(|s| SubtaskResult {
                task_id: "t1".into(),
                step_id: (*s).into(),
                agent: id(lead),
                success: true,
                output: format!("did {s}"),
                result: None,
            })
            .collect(),
        failure: None,
    }
}

#[tokio::test(start_paused = true)]
async fn a_task_from_system_becomes_a_decision_the_other_powers_are_asked_to_sign() {
    let w = World::new();
    let mut agent = first_of_three(&w).await;
    submit(&w, Address::System, ME, task("t1")).await;

    assert_eq!(agent.heartbeat(1).await.unwrap(), HeartbeatOutcome::Processed { messages: 1 });

    let proposed = decisions(&w).await;
    assert_eq!(proposed.len(), 1);
    let decision = &proposed[0];
    assert_eq!(decision.proposer, id(ME));
    assert_eq!(decision.required_signers, [id("top-b"), id("top-c")]);
    assert_eq!(decision.status, DecisionStatus::Pending);
    assert_eq!(decision.content["task_id"], "t1");
    assert_eq!(decision.content["steps"].as_array().unwrap().len(), 3);
    for peer in ["top-b", "top-c"] {
        let requests: Vec<SignatureRequest> =
            w.received(&addr(peer), MessageKind::SignatureRequest).await;
        assert_eq!(requests, [SignatureRequest { decision: decision.id }], "{peer}");
    }
    assert_eq!(agent.status(), WaitingApproval);
    assert_eq!(edges(&w, ME).await[1..], [(Idle, Working), (Working, WaitingApproval)]);
    assert_eq!(agent.current_work().as_deref(), Some("t1: awaiting signatures"));
    let global = w.board(BoardId::Global).await;
    assert!(
        global.contains(&format!(
            "## Task t1\nGoal: write and check\nPlan proposed as decision {}",
            decision.id
        )),
        "{global}"
    );
    assert!(packages(&w, "mid-docs").await.is_empty(), "nothing runs before approval");

    // Waiting, and a redelivered task, change nothing.
    submit(&w, Address::System, ME, task("t1")).await;
    agent.heartbeat(2).await.unwrap();
    assert_eq!(decisions(&w).await.len(), 1);
    assert_eq!(agent.status(), WaitingApproval);
}

/// The power's turn on a task is cut short after it proposed the plan (its state never saved,
/// the message never acknowledged), and a new power in its place takes the same message again:
/// it finds the decision it proposed, with the signatures given since, instead of proposing a
/// second one that nobody was asked about; once the last peer signs, the plan runs.
#[tokio::test(start_paused = true)]
async fn a_turn_redone_after_a_crash_takes_up_the_plan_it_proposed_before() {
    let w = World::new();
    let mut first = first_of_three(&w).await;
    let content = serde_json::to_value(Assignment::Task { task: task("t1") }).unwrap();
    let assign = Message::new(
        new_message_id(),
        Address::System,
        addr(ME),
        MessageKind::TaskAssign,
        content,
        Timestamp(START.0),
    );
    w.bus.send(assign.clone()).await.unwrap();
    first.heartbeat(1).await.unwrap();
    let proposed = decisions(&w).await;
    assert_eq!(proposed.len(), 1);
    let decision = proposed[0].id;
    w.governance.sign(decision, &id("top-b"), Timestamp(START.0)).await.unwrap();
    drop(first);
    w.drain(&addr("top-c")).await;

    // The same message again, to a power that never saw it.
    let mut redone = first_of_three(&w).await;
    w.bus.send(assign).await.unwrap();
    redone.heartbeat(2).await.unwrap();
    assert_eq!(decisions(&w).await.len(), 1, "no second decision for the same task");
    assert_eq!(redone.current_work().as_deref(), Some("t1: awaiting signatures"));
    let asked: Vec<SignatureRequest> =
        w.received(&addr("top-c"), MessageKind::SignatureRequest).await;
    assert_eq!(asked, [SignatureRequest { decision }], "the missing signer is asked again");

    assert_eq!(
        w.governance.sign(decision, &id("top-c"), Timestamp(START.0)).await.unwrap(),
        agent_state::SignOutcome::Approved
    );
    redone.heartbeat(3).await.unwrap();
    let docs = packages(&w, "mid-docs").await;
    assert_eq!(docs.iter().map(step_ids).collect::<Vec<_>>(), [vec!["a"]], "the signed plan runs");
}

#[tokio::test(start_paused = true)]
async fn only_powers_with_plan_authority_are_asked_to_sign() {
    let w = World::new();
    let peers: &[(&str, &[&str])] = &[("top-b", &["plan"]), ("top-c", &["arbitrate"])];
    let mut agent = power(&w, ME, peers, RuleBasedReasoner::new()).await;
    submit(&w, Address::System, ME, task("t1")).await;

    agent.heartbeat(1).await.unwrap();

    assert_eq!(decisions(&w).await[0].required_signers, [id("top-b")]);
    assert!(w.kinds(&addr("top-c")).await.is_empty());
}

#[tokio::test(start_paused = true)]
async fn a_power_takes_tasks_from_system_and_its_peers_only() {
    let w = World::new();
    let mut agent = first_of_three(&w).await;
    submit(&w, addr("mid-docs"), ME, task("t1")).await;
    let work = WorkPackage {
        task_id: "t2".into(),
        goal: "g".into(),
        decision: DecisionId::from_u128(1),
        wave: 1,
        steps: vec![],
    };
    w.send(Address::System, ME, MessageKind::TaskAssign, &Assignment::Work { work }).await;

    agent.heartbeat(1).await.unwrap();

    assert_eq!(w.denied(ME).await, ["task_assign from mid-docs", "task_assign from system"]);
    assert!(decisions(&w).await.is_empty());

    submit(&w, addr("top-b"), ME, task("t3")).await;
    agent.heartbeat(2).await.unwrap();
    assert_eq!(decisions(&w).await[0].content["task_id"], "t3");
}

#[tokio::test(start_paused = true)]
async fn an_invalid_plan_is_closed_as_failed_without_a_decision() {
    let w = World::new();
    let mut agent = first_of_three(&w).await;
    submit(&w, Address::System, ME, Task { id: "t1".into(), goal: "g".into(), steps: vec![] })
        .await;

    agent.heartbeat(1).await.unwrap();

    assert!(decisions(&w).await.is_empty());
    let outcomes = closed(&w).await;
    assert!(
        matches!(&outcomes[..], [TaskOutcome::Failed { task_id, reason: TaskFailure::InvalidPlan { .. } }] if task_id == "t1"),
        "{outcomes:?}"
    );
    assert_eq!(agent.status(), Idle);
}

/// Submits `content` as `top-a`'s decision for `signers` and asks `reviewer` to sign it.
async fn request_signature(
    w: &World,
    reviewer: &str,
    signers: &[&str],
    content: serde_json::Value,
) -> DecisionId {
    let decision_id = DecisionId::from_u128(99);
    let signers = signers.iter().map(|s| id(s)).collect();
    let decision = Decision::propose(decision_id, id("top-a"), content, signers, START).unwrap();
    w.governance.submit(decision).await.unwrap();
    let request = SignatureRequest { decision: decision_id };
    w.send(addr("top-a"), reviewer, MessageKind::SignatureRequest, &request).await;
    decision_id
}

#[tokio::test(start_paused = true)]
async fn a_signature_request_is_reviewed_and_signed_through_governance() {
    let w = World::new();
    let peers: &[(&str, &[&str])] = &[("top-a", &["plan"]), ("top-c", &["plan"])];
    let mut agent = power(&w, "top-b", peers, RuleBasedReasoner::new()).await;
    let content = json!({"task_id": "t1", "steps": [{"id": "a", "tool": "write_file"}]});
    let decision_id = request_signature(&w, "top-b", &["top-b", "top-c"], content).await;

    agent.heartbeat(1).await.unwrap();
    // A redelivered request is not signed again.
    w.send(
        addr("top-a"),
        "top-b",
        MessageKind::SignatureRequest,
        &SignatureRequest { decision: decision_id },
    )
    .await;
    agent.heartbeat(2).await.unwrap();

    let decision = w.governance.get(decision_id).await.unwrap().unwrap();
    assert_eq!(decision.status, DecisionStatus::Pending, "top-c has not signed yet");
    let signers: Vec<&AgentId> = decision.signatures.iter().map(|s| &s.signer).collect();
    assert_eq!(signers, [&id("top-b")]);
    assert_eq!(agent.ctx().metrics().decisions_signed, 1);
    assert!(w.denied("top-b").await.is_empty());
    assert_eq!(agent.status(), Idle);
    // Regression (wake on work): the proposer polled the decision at its heartbeats only, so a
    // signed plan waited for the next one; the signer now answers the proposer.
    let answers: Vec<StatusReport> = w.received(&addr("top-a"), MessageKind::StatusReport).await;
    assert_eq!(
        answers,
        [StatusReport::Decided { decision: decision_id, status: DecisionStatus::Pending }]
    );
}

#[tokio::test(start_paused = true)]
async fn a_signature_request_for_a_risky_plan_is_vetoed_through_governance() {
    let w = World::new();
    let peers: &[(&str, &[&str])] = &[("top-a", &["plan"]), ("top-b", &["plan"])];
    let reasoner = RuleBasedReasoner::new().forbid_tools(["shell"]);
    let mut agent = power(&w, "top-c", peers, reasoner).await;
    let content = json!({"task_id": "t1", "steps": [
        {"id": "a", "tool": "write_file"}, {"id": "b", "tool": "shell"}
    ]});
    let decision_id = request_signature(&w, "top-c", &["top-b", "top-c"], content).await;

    agent.heartbeat(1).await.unwrap();

    let decision = w.governance.get(decision_id).await.unwrap().unwrap();
    assert_eq!(decision.status, DecisionStatus::Vetoed);
    assert_eq!(decision.vetoes.len(), 1);
    assert_eq!(decision.vetoes[0].vetoer, id("top-c"));
    assert_eq!(
        decision.vetoes[0].reason,
        "risk assessment failed: step `b` uses forbidden tool `shell`"
    );
    assert_eq!(agent.ctx().metrics().decisions_vetoed, 1);
    let answers: Vec<StatusReport> = w.received(&addr("top-a"), MessageKind::StatusReport).await;
    assert_eq!(
        answers,
        [StatusReport::Decided { decision: decision_id, status: DecisionStatus::Vetoed }]
    );
}

#[tokio::test(start_paused = true)]
async fn an_approved_plan_is_dispatched_by_domain_in_waves_that_respect_after() {
    let w = World::new();
    let mut agent = first_of_three(&w).await;
    submit(&w, Address::System, ME, task("t1")).await;
    agent.heartbeat(1).await.unwrap();
    let decision_id = decisions(&w).await[0].id;
    for signer in ["top-b", "top-c"] {
        w.governance.sign(decision_id, &id(signer), START).await.unwrap();
    }

    // Wave 1: every step without `after`, one package per lead.
    agent.heartbeat(2).await.unwrap();
    let docs = packages(&w, "mid-docs").await;
    let build = packages(&w, "mid-build").await;
    assert_eq!(docs.len(), 1);
    assert_eq!((docs[0].task_id.as_str(), docs[0].wave, docs[0].decision), ("t1", 1, decision_id));
    assert_eq!(step_ids(&docs[0]), ["a"]);
    assert_eq!(build.len(), 1);
    assert_eq!((build[0].wave, step_ids(&build[0])), (1, vec!["b"]));
    let transitions = edges(&w, ME).await;
    assert_eq!(transitions[transitions.len() - 2..], [(WaitingApproval, Working), (Working, Idle)]);

    // `b` done: `c` still waits for `a`.
    w.send(addr("mid-build"), ME, MessageKind::ProgressReport, &done("mid-build", &["b"])).await;
    agent.heartbeat(3).await.unwrap();
    assert!(packages(&w, "mid-build").await.is_empty());
    assert!(packages(&w, "mid-docs").await.is_empty());

    // `a` done: wave 2 sends `c`.
    w.send(addr("mid-docs"), ME, MessageKind::ProgressReport, &done("mid-docs", &["a"])).await;
    agent.heartbeat(4).await.unwrap();
    let wave2 = packages(&w, "mid-build").await;
    assert_eq!(wave2.len(), 1);
    assert_eq!((wave2[0].wave, step_ids(&wave2[0])), (2, vec!["c"]));
    assert!(closed(&w).await.is_empty());

    // `c` done: the task closes with every result, in plan order.
    w.send(addr("mid-build"), ME, MessageKind::ProgressReport, &done("mid-build", &["c"])).await;
    agent.heartbeat(5).await.unwrap();
    let outcomes = closed(&w).await;
    let [TaskOutcome::Succeeded { task_id, results }] = &outcomes[..] else {
        panic!("expected one success, got {outcomes:?}")
    };
    assert_eq!(task_id, "t1");
    let order: Vec<&str> = results.iter().map(|r| r.step_id.as_str()).collect();
    assert_eq!(order, ["a", "b", "c"]);
    assert_eq!(agent.ctx().metrics().tasks_completed, 1);
    assert!(w.board(BoardId::Global).await.contains("## Task t1 closed: succeeded (3 steps)"));
}

#[tokio::test(start_paused = true)]
async fn a_veto_closes_the_task_as_failed_and_dispatches_nothing() {
    let w = World::new();
    let mut agent = first_of_three(&w).await;
    submit(&w, Address::System, ME, task("t1")).await;
    agent.heartbeat(1).await.unwrap();
    let decision_id = decisions(&w).await[0].id;
    w.governance.sign(decision_id, &id("top-c"), START).await.unwrap();
    w.governance.veto(decision_id, &id("top-b"), "too risky", START).await.unwrap();

    agent.heartbeat(2).await.unwrap();

    let vetoed = TaskFailure::Vetoed { by: id("top-b"), reason: "too risky".into() };
    assert_eq!(
        closed(&w).await,
        [TaskOutcome::Failed { task_id: "t1".into(), reason: vetoed.clone() }]
    );
    assert_eq!(agent.status(), Idle);
    assert_eq!(edges(&w, ME).await.last(), Some(&(WaitingApproval, Idle)));
    assert!(packages(&w, "mid-docs").await.is_empty());
    assert!(packages(&w, "mid-build").await.is_empty());
    let global = w.board(BoardId::Global).await;
    assert!(global.contains(&format!("## Task t1 closed: failed: {vetoed}")), "{global}");
    assert!(!agent.wants_tick(), "nothing left to wait for");
}

#[tokio::test(start_paused = true)]
async fn a_single_power_signs_its_own_plan_and_dispatches_at_once() {
    let w = World::new();
    let mut agent = power(&w, ME, &[], RuleBasedReasoner::new()).await;
    submit(&w, Address::System, ME, task("t1")).await;

    agent.heartbeat(1).await.unwrap();

    let decision = &decisions(&w).await[0];
    assert_eq!(decision.required_signers, [id(ME)]);
    assert_eq!(decision.status, DecisionStatus::Approved);
    assert_eq!(agent.ctx().metrics().decisions_signed, 1);
    assert_eq!(step_ids(&packages(&w, "mid-docs").await[0]), ["a"]);
    assert_eq!(step_ids(&packages(&w, "mid-build").await[0]), ["b"]);
    assert_eq!(
        edges(&w, ME).await[1..],
        [(Idle, Working), (Working, WaitingApproval), (WaitingApproval, Working), (Working, Idle)]
    );
    for peer in ["top-b", "top-c"] {
        assert!(w.kinds(&addr(peer)).await.is_empty(), "{peer} is not a peer");
    }
}

#[tokio::test(start_paused = true)]
async fn an_escalation_from_a_lead_closes_the_task_as_failed() {
    let w = World::new();
    let mut agent = power(&w, ME, &[], RuleBasedReasoner::new()).await;
    submit(&w, Address::System, ME, task("t1")).await;
    agent.heartbeat(1).await.unwrap();
    let failure = TaskFailure::StepFailed { step: "b".into(), attempts: 2, error: "boom".into() };
    let escalation = Escalation { task_id: "t1".into(), failure: failure.clone() };
    w.send(addr("mid-build"), ME, MessageKind::IssueEscalation, &escalation).await;

    agent.heartbeat(2).await.unwrap();
    // A late report for the closed task changes nothing.
    w.send(addr("mid-docs"), ME, MessageKind::ProgressReport, &done("mid-docs", &["a"])).await;
    agent.heartbeat(3).await.unwrap();

    assert_eq!(closed(&w).await, [TaskOutcome::Failed { task_id: "t1".into(), reason: failure }]);
    assert!(packages(&w, "mid-build").await.iter().all(|p| p.wave == 1), "no wave 2");
}

#[tokio::test(start_paused = true)]
async fn shutdown_writes_the_final_report_on_the_powers_board() {
    let w = World::new();
    let mut agent = power(&w, ME, &[], RuleBasedReasoner::new()).await;
    submit(&w, Address::System, ME, task("t1")).await;
    agent.heartbeat(1).await.unwrap();

    agent.shutdown().await.unwrap();

    assert_eq!(
        w.board(BoardId::Agent(id(ME))).await,
        "## Final Report - Agent top-a\n\n- Decisions Signed: 1\n- Decisions Vetoed: 0\n\
         - Conflicts Arbitrated: 0\n- Tasks Closed Successfully: 0"
    );
    assert_eq!(agent.status(), Terminated);
    assert_eq!(w.chain().await, [(id(ME), Terminated)]);
}

#[test]
fn route_picks_the_lead_by_domain_named_agent_or_tool() {
    let leads = leads();
    let with = |target: StepTarget, tool: &str| PlanStep {
        target,
        ..step("s", "unused", tool, json!({}))
    };
    let cases = [
        (with(StepTarget::Domain("build".into()), "write_file"), Some("mid-build")),
        (with(StepTarget::Domain("ops".into()), "write_file"), None),
        (with(StepTarget::Agent(id("mid-docs")), "shell"), Some("mid-docs")),
        (with(StepTarget::Agent(id("bottom-b1")), "write_file"), Some("mid-build")),
        (with(StepTarget::Agent(id("bottom-x")), "write_file"), None),
        (with(StepTarget::Any, "read_file"), Some("mid-build")),
        (with(StepTarget::Any, "write_file"), Some("mid-docs")),
        (with(StepTarget::Any, "deploy"), None),
    ];
    for (step, lead) in cases {
        assert_eq!(route(&leads, &step), lead.map(id), "{:?} {}", step.target, step.tool);
    }
}

/// Regression: a signature request for a decision this power need not sign used to fail the
/// power for good (a top agent has no supervisor to revive it).
#[tokio::test(start_paused = true)]
async fn a_signature_request_for_a_decision_the_power_need_not_sign_is_refused_without_failing() {
    let w = World::new();
    let peers: &[(&str, &[&str])] = &[("top-a", &["plan"]), ("top-c", &["plan"])];
    let mut agent = power(&w, "top-b", peers, RuleBasedReasoner::new()).await;
    let content = json!({"task_id": "t1", "steps": [{"id": "a", "tool": "write_file"}]});
    let decision_id = request_signature(&w, "top-b", &["top-c"], content).await;

    let outcome = agent.heartbeat(1).await.unwrap();

    assert_eq!(outcome, HeartbeatOutcome::Processed { messages: 1 });
    assert_eq!(agent.status(), Idle);
    let decision = w.governance.get(decision_id).await.unwrap().unwrap();
    assert_eq!((decision.status, decision.signatures.len()), (DecisionStatus::Pending, 0));
}

/// Regression: malformed content from a stranger used to fail the power permanently.
#[tokio::test(start_paused = true)]
async fn a_malformed_task_assign_from_a_stranger_is_refused_without_failing() {
    let w = World::new();
    let mut agent = first_of_three(&w).await;
    w.send(addr("mid-docs"), ME, MessageKind::TaskAssign, &json!({"task": "do it"})).await;
    let outcome = agent.heartbeat(1).await.unwrap();
    assert_eq!(outcome, HeartbeatOutcome::Processed { messages: 1 });
    assert_eq!(agent.status(), Idle);
    assert_eq!(w.denied(ME).await, ["task_assign from mid-docs"]);
}

/// The outcomes' messages: none names a placeholder step or 0 attempts.
fn honest(outcomes: &[TaskOutcome]) {
    for outcome in outcomes {
        if let TaskOutcome::Failed { reason, .. } = outcome {
            let message = reason.to_string();
            assert!(!message.contains("`?`") && !message.contains("0 attempt"), "{message}");
            assert!(!message.contains("(team formation)"), "{message}");
        }
    }
}

#[tokio::test(start_paused = true)]
async fn a_finished_task_judged_incomplete_fails_on_that_judgement_not_on_a_step() {
    let w = World::new();
    let judge = ScriptedReasoner::from_fn(|request| match request {
        ReasoningRequest::Judge { .. } => ScriptedAnswer::Judgement(Judgement {
            complete: false,
            summary: "<start_of_turn>model\nstep `b` did not check anything<end_of_turn>".into(),
        }),
        _ => ScriptedAnswer::Fallback,
    });
    let mut agent = alone_with(&w, judge).await;
    submit(&w, Address::System, ME, task("t1")).await;
    agent.heartbeat(1).await.unwrap();
    w.send(addr("mid-docs"), ME, MessageKind::ProgressReport, &done("mid-docs", &["a"])).await;
    agent.heartbeat(2).await.unwrap();
    assert_eq!(agent.current_work().as_deref(), Some("t1: in progress, 1 of 3 step(s) done"));
    let mut failed_b = done("mid-build", &["b", "c"]);
    failed_b.results[0].success = false;
    w.send(addr("mid-build"), ME, MessageKind::ProgressReport, &failed_b).await;
    agent.heartbeat(3).await.unwrap();

    let outcomes = closed(&w).await;
    let [TaskOutcome::Failed { reason, .. }] = &outcomes[..] else {
        panic!("expected one failure, got {outcomes:?}")
    };
    assert_eq!(
        reason.to_string(),
        "`top-a` judged the task incomplete: \"step `b` did not check anything\" (the results: \
         2 of 3 step(s) succeeded)"
    );
    assert!(matches!(reason, TaskFailure::JudgedIncomplete { succeeded: 2, steps: 3, .. }));
    honest(&outcomes);
    assert_eq!(agent.current_work(), None);
    let progress = crate::task_progress(&agent.record().behavior, "t1").unwrap();
    assert_eq!(
        (progress.steps, progress.succeeded),
        (vec!["a".into(), "b".into(), "c".into()], vec!["a".into(), "c".into()])
    );
}

#[tokio::test(start_paused = true)]
async fn a_judgement_without_words_says_so() {
    let failure = TaskFailure::JudgedIncomplete {
        by: id(ME),
        reason: " [INST] </s>\n".into(),
        succeeded: 0,
        steps: 0,
    };
    assert_eq!(failure.to_string(), "`top-a` judged the task incomplete without giving a reason");
}

#[tokio::test(start_paused = true)]
async fn a_failure_reported_without_a_typed_reason_names_the_reporter_and_its_words() {
    // With the step it names: that step and its output, quoted.
    let w = World::new();
    let mut agent = alone_with(&w, RuleBasedReasoner::new()).await;
    submit(&w, Address::System, ME, task("t1")).await;
    agent.heartbeat(1).await.unwrap();
    let mut report = done("mid-build", &["b"]);
    report.status = ProgressStatus::Failed;
    report.results[0].success = false;
    report.results[0].output = "[INST]The tool's result:\nexit 1[/INST]".into();
    w.send(addr("mid-build"), ME, MessageKind::ProgressReport, &report).await;
    agent.heartbeat(2).await.unwrap();
    let outcomes = closed(&w).await;
    let reported = TaskFailure::ReportedFailed {
        by: id("mid-build"),
        step: Some("b".into()),
        reason: "[INST]The tool's result:\nexit 1[/INST]".into(),
    };
    assert_eq!(outcomes, [TaskOutcome::Failed { task_id: "t1".into(), reason: reported.clone() }]);
    assert_eq!(
        reported.to_string(),
        "`mid-build` reported step `b` failed: \"The tool's result: exit 1\""
    );
    honest(&outcomes);

    // Without a result: the report's description.
    let w = World::new();
    let mut agent = alone_with(&w, RuleBasedReasoner::new()).await;
    submit(&w, Address::System, ME, task("t1")).await;
    agent.heartbeat(1).await.unwrap();
    let report = ProgressReport {
        status: ProgressStatus::Failed,
        results: Vec::new(),
        description: "gave up".into(),
        ..done("mid-docs", &[])
    };
    w.send(addr("mid-docs"), ME, MessageKind::ProgressReport, &report).await;
    agent.heartbeat(2).await.unwrap();
    let outcomes = closed(&w).await;
    let [TaskOutcome::Failed { reason, .. }] = &outcomes[..] else {
        panic!("expected one failure, got {outcomes:?}")
    };
    assert_eq!(reason.to_string(), "`mid-docs` reported the task failed: \"gave up\"");
    honest(&outcomes);
}

#[tokio::test(start_paused = true)]
async fn a_plan_whose_leads_cannot_be_created_fails_as_such_not_as_a_step() {
    let w = World::new();
    let mut lead = agent_state::Role::new("docs_lead", AgentLayer::Mid);
    lead.description = "leads the docs".into();
    let roles = agent_state::RoleBook::new([lead]).unwrap();
    let plan = agent_core::Plan {
        steps: vec![PlanStep::goal("readme", "readme with ", StepTarget::Domain("docs".into()))],
        leads: vec![agent_state::LeadRequest { role: "docs_lead".into(), domain: "docs".into() }],
    };
    let planner = ScriptedReasoner::from_fn(move |request| match request {
        ReasoningRequest::Plan { .. } => ScriptedAnswer::Plan(plan.clone()),
        _ => ScriptedAnswer::Fallback,
    });
    w.parties(&["mid-docs", "mid-build"]).await;
    let behavior = TopAgent::new(spec(ME), Vec::new(), leads()).with_roles(Arc::new(roles));
    let mut agent = w.spawn_with(config(ME, AgentLayer::Top, None), behavior, planner).await;
    submit(&w, Address::System, ME, Task::goal("t1", "write the readme")).await;

    agent.heartbeat(1).await.unwrap();

    let outcomes = closed(&w).await;
    let [TaskOutcome::Failed { reason, .. }] = &outcomes[..] else {
        panic!("expected one failure, got {outcomes:?}")
    };
    assert_eq!(
        reason.to_string(),
        "the team the plan asks for could not be formed: the plan asks for new leads but this \
         team cannot spawn agents"
    );
    honest(&outcomes);
}

#[test]
fn a_powers_state_tells_where_its_tasks_stand() {
    let snapshot = json!({"tasks": {"t1": {
        "task": {"id": "t1", "goal": "g", "steps": [{"id": "a"}, {"id": "b"}, {"id": "c"}]},
        "results": [
            {"step_id": "a", "success": true},
            {"step_id": "b", "success": false},
        ],
    }}});
    assert_eq!(
        crate::task_progress(&snapshot, "t1"),
        Some(crate::TaskProgress {
            steps: vec!["a".into(), "b".into(), "c".into()],
            succeeded: vec!["a".into()],
        })
    );
    assert_eq!(crate::task_progress(&snapshot, "t2"), None);
    assert_eq!(crate::task_progress(&serde_json::Value::Null, "t1"), None);
}
