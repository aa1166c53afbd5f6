//! Budget extensions with `OnExceed::AskTop`: calls wait while an extension is pending, go on
//! when it is approved and fail when it is refused; the top layer's review of the extension
//! passes; and the `ApprovalDesk` puts the extension to the top powers as a governance decision.

use std::sync::Arc;
use std::time::Duration;

use agent_core::protocol::SignatureRequest;
use agent_core::{ReasonError, Reasoner, TokioClock, Verdict};
use agent_llm::{
    ApprovalDesk, BUDGET_DECISION_KIND, Budget, BudgetLimit, ChatRequest, LlmReasoner, OnExceed,
    PriceTable, UsageLedger,
};
use agent_state::{
    Address, AgentId, AgentLayer, BallotChoice, Decision, DecisionId, DecisionStatus, MessageKind,
    SignOutcome, Timestamp,
};
use governance::{Governance, InMemoryGovernance};
use message_bus::{InMemoryBus, MessageBus};
use serde_json::json;
use tokio::task::JoinHandle;

use crate::mock::{MockProvider, decision, json, last_message, schema};
use crate::reasoner::{Agent, Rig, conflict, plan_decision, rig_with};

/// Answers votes with the first option, and reviews with a signature unless the reviewer's
/// system prompt names `vetoer`, who vetoes with "no more money".
fn answers(vetoer: Option<&'static str>) -> MockProvider {
    MockProvider::from_fn(move |request: &ChatRequest| match decision(request) {
        Some("vote") => {
            let first = schema(request)["properties"]["choice"]["enum"][0].clone();
            json(json!({"choice": first, "reason": "first"}))
        }
        Some("review") => match vetoer {
            Some(v) if request.system.starts_with(&format!("You are {v},")) => {
                json(json!({"verdict": "veto", "reason": "no more money"}))
            }
            _ => json(json!({"verdict": "sign", "reason": "worth it"})),
        },
        other => panic!("unexpected question {other:?}"),
    })
}

fn ask_top(max_calls: u64) -> UsageLedger {
    UsageLedger::new(
        PriceTable::new(),
        Budget { max_calls: Some(max_calls), on_exceed: OnExceed::AskTop, ..Budget::default() },
    )
}

/// `agent` votes on a fresh conflict, in a task of its own.
fn vote(rig: &Rig, agent: &'static str) -> JoinHandle<Result<BallotChoice, ReasonError>> {
    let reasoner = rig.reasoner.clone();
    tokio::spawn(async move {
        let who = Agent::new(agent, AgentLayer::Mid);
        reasoner.vote(who.persona(), &conflict(&["a", "b"])).await
    })
}

/// Lets every other task run as far as it can, an hour of paused time.
async fn settle() {
    tokio::time::sleep(Duration::from_secs(3_600)).await;
}

fn budget_decision(n: u128) -> Decision {
    Decision::propose(
        DecisionId::from_u128(n),
        AgentId::new("top-a"),
        json!({"kind": BUDGET_DECISION_KIND, "limit": "calls", "setting": "max_calls", "cap": 1.0}),
        vec![AgentId::new("top-a"), AgentId::new("top-b")],
        Timestamp(0),
    )
    .unwrap()
}

#[tokio::test(start_paused = true)]
async fn a_call_past_the_budget_waits_for_the_extension_and_goes_on_when_approved() {
    let rig = rig_with(answers(None), ask_top(1));
    vote(&rig, "mid-a").await.unwrap().unwrap();
    let waiting = vote(&rig, "mid-a");
    let request = rig.ledger.next_approval().await;
    assert_eq!(
        (request.limit, request.used, request.requested, request.cap, request.proposed_cap),
        (BudgetLimit::Calls, 1.0, 1.0, 1.0, 2.0)
    );
    settle().await;
    assert!(!waiting.is_finished(), "the call waits, it does not fail");
    assert_eq!(rig.provider.calls(), 1, "and has not reached the provider");
    assert_eq!(rig.ledger.stopped(), None);
    assert_eq!(rig.ledger.pending_approval(), Some(request.clone()));

    assert!(!rig.ledger.approve(request.id + 1), "not the pending request");
    assert!(rig.ledger.approve(request.id));
    assert!(!rig.ledger.approve(request.id), "approved once only");
    assert_eq!(waiting.await.unwrap().unwrap(), "a");
    assert_eq!(rig.provider.calls(), 2);
    let report = rig.ledger.report();
    assert_eq!(report.budget.max_calls, Some(2));
    assert_eq!(report.extensions.iter().map(|e| e.limit).collect::<Vec<_>>(), [BudgetLimit::Calls]);
    assert_eq!(rig.ledger.pending_approval(), None);
}

#[tokio::test(start_paused = true)]
async fn every_call_waits_while_an_extension_is_pending_and_all_go_on_when_approved() {
    let rig = rig_with(answers(None), ask_top(2));
    vote(&rig, "mid-a").await.unwrap().unwrap();
    vote(&rig, "mid-a").await.unwrap().unwrap();
    let first = vote(&rig, "mid-a");
    let request = rig.ledger.next_approval().await;
    let second = vote(&rig, "mid-b");
    settle().await;
    assert!(!first.is_finished() && !second.is_finished());
    assert_eq!(rig.ledger.next_approval().await, request, "one request for all of them");
    assert!(rig.ledger.approve(request.id));
    first.await.unwrap().unwrap();
    second.await.unwrap().unwrap();
    assert_eq!(rig.ledger.report().total.calls, 4);
    assert_eq!(rig.ledger.report().budget.max_calls, Some(4));
}

#[tokio::test(start_paused = true)]
async fn a_refused_extension_fails_the_waiting_call_and_stops_the_run() {
    let rig = rig_with(answers(None), ask_top(1));
    vote(&rig, "mid-a").await.unwrap().unwrap();
    let waiting = vote(&rig, "mid-a");
    let request = rig.ledger.next_approval().await;
    let ledger = rig.ledger.clone();
    let direct = tokio::spawn(async move { ledger.reserve(1, 0.0, false).await });
    assert!(!rig.ledger.refuse(request.id + 1, "wrong one"));
    assert!(rig.ledger.refuse(request.id, "the quarter's budget is spent"));
    let typed = direct.await.unwrap().unwrap_err();
    assert_eq!(
        (typed.limit, typed.refused.as_deref()),
        (BudgetLimit::Calls, Some("the quarter's budget is spent"))
    );
    let err = waiting.await.unwrap().unwrap_err();
    let ReasonError::Backend { message, .. } = &err else { panic!("{err:?}") };
    assert!(message.contains("extension refused: the quarter's budget is spent"), "{message}");
    let stop = rig.ledger.stopped().expect("stopped");
    assert_eq!(stop.refused.as_deref(), Some("the quarter's budget is spent"));
    assert_eq!((stop.limit, stop.on_exceed), (BudgetLimit::Calls, OnExceed::AskTop));
    assert!(!stop.to_string().contains("on_exceed = \"ask\""), "already asking: {stop}");

    // Every later call fails at once, without asking again.
    vote(&rig, "mid-b").await.unwrap().unwrap_err();
    assert_eq!(rig.ledger.pending_approval(), None);
    assert_eq!(rig.provider.calls(), 1);
    assert!(!rig.ledger.approve(request.id), "nothing left to approve");
}

#[tokio::test(start_paused = true)]
async fn the_powers_calls_pass_while_an_extension_is_pending_and_the_others_wait() {
    let rig = rig_with(answers(None), ask_top(1));
    vote(&rig, "mid-a").await.unwrap().unwrap();
    let waiting = vote(&rig, "mid-a");
    let request = rig.ledger.next_approval().await;

    // The review of the extension itself is exempt.
    let power = Agent::new("top-a", AgentLayer::Top);
    let verdict = rig.reasoner.review_decision(power.persona(), &budget_decision(6)).await.unwrap();
    assert_eq!(verdict, Verdict::Sign);
    assert_eq!(rig.provider.calls(), 2, "the extension's review reached the provider");
    let last = rig.provider.last();
    let question = &last_message(&last).content;
    assert!(question.contains("reasoning budget"), "{question}");

    // A power's other calls do not wait either: a power handles one message at a time, and a
    // call that waited would keep it from ever reading the signature request.
    let other = Agent::new("top-b", AgentLayer::Top);
    let verdict = rig.reasoner.review_decision(other.persona(), &plan_decision(5)).await.unwrap();
    assert_eq!(verdict, Verdict::Sign);
    assert_eq!(rig.provider.calls(), 3);

    // Everyone else waits.
    let mid = vote(&rig, "mid-b");
    settle().await;
    assert!(!waiting.is_finished() && !mid.is_finished(), "the other layers wait");
    assert_eq!(rig.provider.calls(), 3);
    assert_eq!(rig.ledger.pending_approval(), Some(request.clone()));

    // Both reviews were counted.
    assert_eq!(rig.ledger.report().total.calls, 3);
    assert_eq!(rig.ledger.report().by_layer["top"].calls, 2);
    assert!(rig.ledger.refuse(request.id, "enough"));
    waiting.await.unwrap().unwrap_err();
    mid.await.unwrap().unwrap_err();
    // After a refusal only the extension's review still passes.
    rig.reasoner.review_decision(other.persona(), &plan_decision(8)).await.unwrap_err();
    rig.reasoner.review_decision(power.persona(), &budget_decision(9)).await.unwrap();
}

#[tokio::test(start_paused = true)]
async fn a_power_past_the_budget_asks_for_the_extension_and_goes_on() {
    let rig = rig_with(answers(None), ask_top(1));
    let power = Agent::new("top-a", AgentLayer::Top);
    rig.reasoner.vote(power.persona(), &conflict(&["a", "b"])).await.unwrap();
    rig.reasoner.vote(power.persona(), &conflict(&["a", "b"])).await.unwrap();
    let request = rig.ledger.pending_approval().expect("the power's call asked for more");
    assert_eq!((request.limit, request.cap), (BudgetLimit::Calls, 1.0));
    let waiting = vote(&rig, "mid-a");
    settle().await;
    assert!(!waiting.is_finished());
    assert!(rig.ledger.approve(request.id));
    // Two calls used: the limit grows to what is used plus its original size, 3, so the
    // mid's call goes on without asking again.
    waiting.await.unwrap().unwrap();
    assert_eq!(rig.ledger.report().budget.max_calls, Some(3));
    assert_eq!(rig.ledger.pending_approval(), None);
    assert_eq!(rig.ledger.report().extensions[0].raised_by, 2.0);
}

// ---------------------------------------------------------------------------------------------
// The approval desk, end to end on the in-memory governance and bus
// ---------------------------------------------------------------------------------------------

/// A top power: takes signature requests from its inbox, reviews the decision with `reasoner`
/// and signs or vetoes it.
fn power(
    id: &'static str,
    bus: Arc<dyn MessageBus>,
    governance: Arc<dyn Governance>,
    reasoner: Arc<LlmReasoner>,
) -> JoinHandle<()> {
    tokio::spawn(async move {
        let me = Agent::new(id, AgentLayer::Top);
        let inbox = Address::Agent(AgentId::new(id));
        loop {
            let messages = bus.take(&inbox, 10).await.unwrap();
            for message in &messages {
                assert_eq!(message.kind, MessageKind::SignatureRequest);
                assert_eq!(message.from, Address::Agent(AgentId::new("top-a")));
                let request: SignatureRequest =
                    serde_json::from_value(message.content.clone()).unwrap();
                let decision = governance.get(request.decision).await.unwrap().unwrap();
                let now = Timestamp(1_700_000_000_000);
                match reasoner.review_decision(me.persona(), &decision).await.unwrap() {
                    // The other power may have vetoed already.
                    Verdict::Sign => drop(governance.sign(decision.id, &me.config.id, now).await),
                    Verdict::Veto { reason } => {
                        governance.veto(decision.id, &me.config.id, &reason, now).await.unwrap();
                    }
                }
            }
            let ids: Vec<_> = messages.iter().map(|m| m.id).collect();
            bus.ack(&inbox, &ids).await.unwrap();
            tokio::time::sleep(Duration::from_millis(500)).await;
        }
    })
}

struct Desk {
    governance: Arc<dyn Governance>,
    tasks: Vec<JoinHandle<()>>,
}

impl Drop for Desk {
    fn drop(&mut self) {
        for task in &self.tasks {
            task.abort();
        }
    }
}

/// Starts the desk for `rig`'s ledger and the two powers `top-a` and `top-b`.
async fn desk(rig: &Rig) -> Desk {
    let bus: Arc<dyn MessageBus> = Arc::new(InMemoryBus::new());
    let governance: Arc<dyn Governance> = Arc::new(InMemoryGovernance::new());
    let powers = [AgentId::new("top-a"), AgentId::new("top-b")];
    for p in &powers {
        bus.register(p).await.unwrap();
    }
    let desk = ApprovalDesk {
        ledger: rig.ledger.clone(),
        governance: governance.clone(),
        bus: bus.clone(),
        clock: Arc::new(TokioClock::starting_at(Timestamp(1_700_000_000_000))),
        proposer: powers[0].clone(),
        signers: powers.to_vec(),
        humans: Vec::new(),
        poll: Duration::from_secs(1),
    };
    let tasks = vec![
        tokio::spawn(desk.run()),
        power("top-a", bus.clone(), governance.clone(), rig.reasoner.clone()),
        power("top-b", bus, governance.clone(), rig.reasoner.clone()),
    ];
    Desk { governance, tasks }
}

#[tokio::test(start_paused = true)]
async fn the_desk_puts_the_extension_to_the_powers_and_their_signatures_approve_it() {
    let rig = rig_with(answers(None), ask_top(3));
    let desk = desk(&rig).await;
    for _ in 0..3 {
        vote(&rig, "mid-a").await.unwrap().unwrap();
    }
    assert!(desk.governance.list().await.unwrap().is_empty(), "within the budget: no decision");

    assert_eq!(vote(&rig, "mid-a").await.unwrap().unwrap(), "a", "the fourth call went on");

    let decisions = desk.governance.list().await.unwrap();
    assert_eq!(decisions.len(), 1);
    let d = &decisions[0];
    assert_eq!(d.status, DecisionStatus::Approved);
    assert_eq!(d.proposer.as_str(), "top-a");
    assert_eq!(d.signatures.len(), 2, "both powers signed");
    assert_eq!(d.content["kind"], BUDGET_DECISION_KIND);
    assert_eq!(d.content["setting"], "max_calls");
    assert_eq!(
        (d.content["cap"].as_f64(), d.content["proposed_cap"].as_f64()),
        (Some(3.0), Some(6.0))
    );

    let report = rig.ledger.report();
    assert_eq!(report.extensions.iter().map(|e| e.limit).collect::<Vec<_>>(), [BudgetLimit::Calls]);
    // Used at the approval: three votes and the two reviews; plus the original 3.
    assert_eq!(report.budget.max_calls, Some(8));
    // Three votes, two reviews of the extension, the fourth vote.
    assert_eq!(report.total.calls, 6);
    assert_eq!(report.by_agent["top-a"].calls, 1);
    assert_eq!(report.by_agent["top-b"].calls, 1);
    assert_eq!(rig.ledger.stopped(), None);
}

#[tokio::test(start_paused = true)]
async fn a_powers_veto_of_the_extension_stops_the_run_with_its_reason() {
    let rig = rig_with(answers(Some("top-b")), ask_top(1));
    let desk = desk(&rig).await;
    vote(&rig, "mid-a").await.unwrap().unwrap();

    let err = vote(&rig, "mid-a").await.unwrap().unwrap_err();
    let ReasonError::Backend { message, .. } = &err else { panic!("{err:?}") };
    assert!(message.contains("vetoed by top-b: no more money"), "{message}");
    let stop = rig.ledger.stopped().expect("the run stopped");
    assert_eq!(stop.refused.as_deref(), Some("vetoed by top-b: no more money"));
    assert_eq!(stop.limit, BudgetLimit::Calls);

    let decisions = desk.governance.list().await.unwrap();
    assert_eq!(decisions.len(), 1);
    assert_eq!(decisions[0].status, DecisionStatus::Vetoed);
    assert!(rig.ledger.report().extensions.is_empty());
    vote(&rig, "mid-b").await.unwrap().unwrap_err();
}

#[tokio::test(start_paused = true)]
async fn an_extension_that_cannot_reach_a_power_is_refused_rather_than_waited_for_forever() {
    let rig = rig_with(answers(None), ask_top(1));
    let bus: Arc<dyn MessageBus> = Arc::new(InMemoryBus::new());
    let governance: Arc<dyn Governance> = Arc::new(InMemoryGovernance::new());
    bus.register(&AgentId::new("top-a")).await.unwrap();
    // top-b's inbox is gone (the power was dismissed): it can never sign.
    let desk = tokio::spawn(
        ApprovalDesk {
            ledger: rig.ledger.clone(),
            governance: governance.clone(),
            bus,
            clock: Arc::new(TokioClock::starting_at(Timestamp(1_700_000_000_000))),
            proposer: AgentId::new("top-a"),
            signers: vec![AgentId::new("top-a"), AgentId::new("top-b")],
            humans: Vec::new(),
            poll: Duration::from_secs(1),
        }
        .run(),
    );
    vote(&rig, "mid-a").await.unwrap().unwrap();
    let err = vote(&rig, "mid-a").await.unwrap().unwrap_err();
    let stop = rig.ledger.stopped().expect("stopped");
    let reason = stop.refused.clone().unwrap();
    assert!(reason.contains("could not ask top-b to sign"), "{reason}");
    assert!(err.to_string().contains(&reason), "{err}");
    assert_eq!(governance.list().await.unwrap().len(), 1, "the decision was proposed");
    desk.abort();
}

#[tokio::test(start_paused = true)]
async fn a_passed_wall_time_asks_for_more_time_and_an_approval_grants_it() {
    let ledger = UsageLedger::new(
        PriceTable::new(),
        Budget {
            max_wall: Some(Duration::from_secs(60)),
            on_exceed: OnExceed::AskTop,
            ..Budget::default()
        },
    );
    let rig = rig_with(answers(None), ledger);
    tokio::time::advance(Duration::from_secs(61)).await;
    assert_eq!(rig.ledger.check_wall(), None, "with AskTop the run is not stopped between calls");
    let waiting = vote(&rig, "mid-a");
    let request = rig.ledger.next_approval().await;
    assert_eq!(
        (request.limit, request.cap, request.proposed_cap),
        (BudgetLimit::WallTime, 60.0, 120.0)
    );
    assert!(request.used >= 61.0, "{request:?}");
    assert!(rig.ledger.approve(request.id));
    waiting.await.unwrap().unwrap();
    // What was used at the approval (61 s) plus the original 60 s.
    assert_eq!(rig.ledger.report().budget.max_wall, Some(Duration::from_secs(121)));
}

// ---------------------------------------------------------------------------------------------
// `OnExceed::AskHuman`: the extension is a human's decision
// ---------------------------------------------------------------------------------------------

fn ask_human(max_calls: u64) -> UsageLedger {
    UsageLedger::new(
        PriceTable::new(),
        Budget { max_calls: Some(max_calls), on_exceed: OnExceed::AskHuman, ..Budget::default() },
    )
}

/// Starts a desk that puts extensions to the humans `alice` and `bob` (no power signs); the
/// powers' inboxes are registered so a signature request sent to them would show.
async fn human_desk(rig: &Rig) -> (Desk, Arc<dyn MessageBus>) {
    let bus: Arc<dyn MessageBus> = Arc::new(InMemoryBus::new());
    let governance: Arc<dyn Governance> = Arc::new(InMemoryGovernance::new());
    for p in ["top-a", "top-b"] {
        bus.register(&AgentId::new(p)).await.unwrap();
    }
    let desk = ApprovalDesk {
        ledger: rig.ledger.clone(),
        governance: governance.clone(),
        bus: bus.clone(),
        clock: Arc::new(TokioClock::starting_at(Timestamp(1_700_000_000_000))),
        proposer: AgentId::new("top-a"),
        signers: Vec::new(),
        humans: vec!["alice".into(), "bob".into()],
        poll: Duration::from_secs(1),
    };
    (Desk { governance, tasks: vec![tokio::spawn(desk.run())] }, bus)
}

/// The one pending budget extension, as a human finds it.
async fn pending_extension(desk: &Desk) -> Decision {
    let pending = desk.governance.list_pending().await.unwrap();
    assert_eq!(pending.len(), 1, "{pending:?}");
    assert_eq!(pending[0].content["kind"], BUDGET_DECISION_KIND);
    pending[0].clone()
}

#[tokio::test(start_paused = true)]
async fn a_human_extension_needs_an_allowed_humans_signature_and_no_power_is_asked() {
    let rig = rig_with(answers(None), ask_human(1));
    let (desk, bus) = human_desk(&rig).await;
    vote(&rig, "mid-a").await.unwrap().unwrap();
    let waiting = vote(&rig, "mid-a");
    let request = rig.ledger.next_approval().await;
    settle().await;
    let d = pending_extension(&desk).await;
    assert!(d.required_signers.is_empty(), "{d:?}");
    assert_eq!(d.human_approval.as_ref().unwrap().allowed, ["alice", "bob"]);
    assert_eq!(d.content["setting"], "max_calls");
    for power in ["top-a", "top-b"] {
        let inbox = Address::Agent(AgentId::new(power));
        assert!(bus.take(&inbox, 10).await.unwrap().is_empty(), "{power} was asked to sign");
    }

    // Neither a human not allowed nor a power may sign it.
    let now = Timestamp(1_700_000_100_000);
    let mallory = AgentId::human("mallory").unwrap();
    let refused = desk.governance.sign(d.id, &mallory, now).await.unwrap_err();
    assert!(refused.to_string().contains("not a required signer"), "{refused}");
    desk.governance.sign(d.id, &AgentId::new("top-a"), now).await.unwrap_err();
    desk.governance.veto(d.id, &mallory, "mine", now).await.unwrap_err();
    settle().await;
    assert!(!waiting.is_finished(), "still waiting for an allowed human");
    assert_eq!(rig.ledger.pending_approval(), Some(request));
    assert_eq!(rig.provider.calls(), 1);

    let bob = AgentId::human("bob").unwrap();
    assert_eq!(desk.governance.sign(d.id, &bob, now).await.unwrap(), SignOutcome::Approved);
    assert_eq!(waiting.await.unwrap().unwrap(), "a");
    let report = rig.ledger.report();
    assert_eq!(report.budget.max_calls, Some(2));
    assert_eq!(report.extensions.len(), 1);
}

#[tokio::test(start_paused = true)]
async fn a_humans_veto_of_the_extension_stops_the_run_with_its_reason() {
    let rig = rig_with(answers(None), ask_human(1));
    let (desk, _bus) = human_desk(&rig).await;
    vote(&rig, "mid-a").await.unwrap().unwrap();
    let waiting = vote(&rig, "mid-a");
    rig.ledger.next_approval().await;
    settle().await;
    let d = pending_extension(&desk).await;
    let alice = AgentId::human("alice").unwrap();
    let now = Timestamp(1_700_000_100_000);
    desk.governance.veto(d.id, &alice, "not this quarter", now).await.unwrap();

    let err = waiting.await.unwrap().unwrap_err();
    let ReasonError::Backend { message, .. } = &err else { panic!("{err:?}") };
    assert!(message.contains("vetoed by human:alice: not this quarter"), "{message}");
    let stop = rig.ledger.stopped().expect("the run stopped");
    assert_eq!(stop.refused.as_deref(), Some("vetoed by human:alice: not this quarter"));
    assert_eq!((stop.limit, stop.on_exceed), (BudgetLimit::Calls, OnExceed::AskHuman));
    assert!(rig.ledger.report().extensions.is_empty());
    vote(&rig, "mid-b").await.unwrap().unwrap_err();
    assert_eq!(rig.provider.calls(), 1);
}

#[tokio::test(start_paused = true)]
async fn while_a_human_decides_the_powers_calls_wait_too() {
    let rig = rig_with(answers(None), ask_human(1));
    vote(&rig, "mid-a").await.unwrap().unwrap();
    let waiting = vote(&rig, "mid-a");
    let request = rig.ledger.next_approval().await;
    let reasoner = rig.reasoner.clone();
    let power = tokio::spawn(async move {
        let who = Agent::new("top-a", AgentLayer::Top);
        reasoner.vote(who.persona(), &conflict(&["a", "b"])).await
    });
    settle().await;
    assert!(!power.is_finished(), "a power's call waits for the human like any other");
    assert!(!waiting.is_finished());
    assert_eq!(rig.provider.calls(), 1);
    // The limit grows to 2: one of the two calls goes on, the other asks again.
    assert!(rig.ledger.approve(request.id));
    let again = rig.ledger.next_approval().await;
    assert_eq!((again.cap, again.used), (2.0, 2.0));
    assert!(rig.ledger.approve(again.id));
    power.await.unwrap().unwrap();
    waiting.await.unwrap().unwrap();
    assert_eq!(rig.provider.calls(), 3);
}
