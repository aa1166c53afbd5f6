//! Peer help between the executors of one lead, one executor driven directly with its peers
//! played by the test: a subtask it cannot finish is offered to its able peers one at a time and
//! given up to its lead when none takes it, a pending offer survives a restart, a subtask taken
//! over is never offered again, a retried goal step hears a peer's knowledge, and requests from
//! an executor of another lead, or that it cannot serve, are refused and audited.

use std::time::Duration;

use agent_core::protocol::{ErrorReport, HelpRequest, HelpResponse, StatusReport};
use agent_core::testing::FakeTool;
use agent_core::{
    Clock, HeartbeatOutcome, NextAction, PeerHelpOutcome, PeerHelpRequest, ReasoningRequest,
    ScriptedAnswer, ScriptedReasoner,
};
use agent_state::{Assignment, ProgressReport};
use serde_json::json;

use super::*;
use crate::{BottomAgent, BottomSpec, PEER_HELP_TIMEOUT_MS, Peers};

const ME: &str = "bottom-1";
const LEAD: &str = "mid-1";

fn tools_of(tools: &[&str]) -> Arc<[String]> {
    tools.iter().map(|t| (*t).to_owned()).collect()
}

/// The executors of [`LEAD`]: this one with `mine`, then `others` (id and tools).
fn peers(mine: &[&str], others: &[(&str, &[&str])]) -> Peers {
    std::iter::once((id(ME), tools_of(mine)))
        .chain(others.iter().map(|(p, tools)| (id(p), tools_of(tools))))
        .collect::<Vec<_>>()
        .into()
}

/// An executor holding `mine` under [`LEAD`], with `others` as its peers; every party,
/// `bottom-9` of `mid-2` among them, is a bare inbox.
async fn executor(w: &World, mine: &[&str], others: &[(&str, &[&str])]) -> (Agent, Peers) {
    w.parties(&[LEAD, "mid-2", "bottom-9"]).await;
    for (peer, _) in others {
        w.parties(&[peer]).await;
    }
    let peers = peers(mine, others);
    let behavior =
        BottomAgent::new(BottomSpec::new(mine.iter().copied())).with_peers(peers.clone());
    (w.spawn(config(ME, AgentLayer::Bottom, Some(LEAD)), behavior).await, peers)
}

fn write(step_id: &str, path: &str) -> Subtask {
    subtask("t1", step(step_id, "docs", "write_file", json!({"path": path, "content": "x"})), ME)
}

async fn assign(w: &World, subtask: Subtask) {
    w.send(addr(LEAD), ME, MessageKind::TaskAssign, &Assignment::Subtask { subtask }).await;
}

/// The peer-help requests waiting in `peer`'s inbox (taken).
async fn requests(w: &World, peer: &str) -> Vec<Message> {
    w.drain(&addr(peer))
        .await
        .into_iter()
        .filter(|m| m.kind == MessageKind::PeerHelpRequest)
        .collect()
}

/// `peer` answers `request` with `response`.
async fn answer(w: &World, peer: &str, request: &Message, response: HelpResponse) {
    let mut message = Message::new(
        new_message_id(),
        addr(peer),
        addr(ME),
        MessageKind::PeerHelpResponse,
        serde_json::to_value(response).unwrap(),
        w.clock.now(),
    );
    message.correlation_id = Some(request.id);
    w.bus.send(message).await.unwrap();
}

type HelpEvent = (String, Option<String>, PeerHelpRequest, PeerHelpOutcome);

async fn help_events(w: &World, agent: &str) -> Vec<HelpEvent> {
    w.events(agent)
        .await
        .into_iter()
        .filter_map(|e| match e {
            AuditEvent::PeerHelp { peer, step, request, outcome } => {
                Some((peer.to_string(), step, request, outcome))
            }
            _ => None,
        })
        .collect()
}

fn offer(peer: &str, outcome: PeerHelpOutcome) -> HelpEvent {
    (peer.into(), Some("t1/s1".into()), PeerHelpRequest::TakeOver, outcome)
}

fn refused(reason: &str) -> PeerHelpOutcome {
    PeerHelpOutcome::Refused { reason: reason.into() }
}

#[tokio::test(start_paused = true)]
async fn a_step_whose_tool_the_executor_lacks_goes_to_the_peer_holding_it() {
    let w = World::new();
    let unable: &[&str] = &["read_file"];
    let able: &[&str] = &["write_file"];
    let (mut agent, _) =
        executor(&w, &["read_file"], &[("bottom-2", unable), ("bottom-3", able)]).await;
    let work = write("s1", "a.txt");
    assign(&w, work.clone()).await;

    assert_eq!(agent.heartbeat(1).await.unwrap(), HeartbeatOutcome::Processed { messages: 1 });

    assert!(requests(&w, "bottom-2").await.is_empty(), "a peer without the tool is not asked");
    let asked = requests(&w, "bottom-3").await;
    assert_eq!(asked.len(), 1);
    assert_eq!(
        payload::<HelpRequest>(&asked[0]).unwrap(),
        HelpRequest::TakeOverTask { subtask: Box::new(work) }
    );
    assert!(agent.wants_tick(), "it waits for the answer");
    answer(&w, "bottom-3", &asked[0], HelpResponse::Accepted).await;
    assert_eq!(agent.heartbeat(2).await.unwrap(), HeartbeatOutcome::Processed { messages: 1 });

    assert_eq!(
        help_events(&w, ME).await,
        [offer("bottom-3", PeerHelpOutcome::Asked), offer("bottom-3", PeerHelpOutcome::HandedOver)]
    );
    assert!(!agent.wants_tick(), "the subtask left its queue");
    assert!(agent.record().behavior.is_null(), "nothing left to save");
    assert_eq!(agent.status(), AgentStatus::Idle);
    assert_eq!((w.file("a.txt"), w.tool_calls(ME).await), (None, 0));
    assert!(w.kinds(&addr(LEAD)).await.is_empty(), "no failure reaches the lead");
    let board = w.board(BoardId::Agent(id(ME))).await;
    assert!(board.contains("t1/s1 with [bottom-3]: handed over"), "{board}");
}

#[tokio::test(start_paused = true)]
async fn when_no_peer_takes_it_the_executor_fails_to_its_lead_as_before() {
    let w = World::new();
    let able: &[&str] = &["write_file"];
    let (mut agent, _) =
        executor(&w, &["read_file"], &[("bottom-2", able), ("bottom-3", able)]).await;
    let work = write("s1", "a.txt");
    assign(&w, work.clone()).await;

    agent.heartbeat(1).await.unwrap();
    let first = requests(&w, "bottom-2").await;
    assert_eq!(first.len(), 1);
    assert!(requests(&w, "bottom-3").await.is_empty(), "one peer at a time");
    answer(&w, "bottom-2", &first[0], HelpResponse::Refused { reason: "busy".into() }).await;
    agent.heartbeat(2).await.unwrap();
    assert_eq!(requests(&w, "bottom-3").await.len(), 1, "then the next one");
    // bottom-3 never answers: before the wait is over nothing happens, after it the executor
    // gives the subtask up.
    tokio::time::advance(Duration::from_millis(PEER_HELP_TIMEOUT_MS - 1_000)).await;
    assert_eq!(agent.heartbeat(3).await.unwrap(), HeartbeatOutcome::Processed { messages: 0 });
    tokio::time::advance(Duration::from_millis(1_000)).await;
    let outcome = agent.heartbeat(4).await.unwrap();

    let HeartbeatOutcome::Failed { error } = outcome else { panic!("{outcome:?}") };
    assert!(error.contains("does not have the tool `write_file`"), "{error}");
    assert!(
        error.ends_with("no peer took it over (bottom-2: busy; bottom-3: no answer)"),
        "{error}"
    );
    let reports: Vec<ErrorReport> = w.received(&addr(LEAD), MessageKind::ErrorReport).await;
    assert_eq!(reports.len(), 1);
    assert_eq!(reports[0].work, Some(work), "the lead gets the subtask back to reassign");
    assert_eq!(
        help_events(&w, ME).await,
        [
            offer("bottom-2", PeerHelpOutcome::Asked),
            offer("bottom-2", refused("busy")),
            offer("bottom-3", PeerHelpOutcome::Asked),
            offer("bottom-3", PeerHelpOutcome::NoAnswer),
        ]
    );
    assert!(requests(&w, "bottom-2").await.is_empty(), "each peer is asked once");
    assert_eq!(agent.status(), AgentStatus::Failed);
}

#[tokio::test(start_paused = true)]
async fn a_pending_offer_survives_a_restart_and_is_made_once() {
    let w = World::new();
    let able: &[&str] = &["write_file"];
    let (mut agent, peers) = executor(&w, &["read_file"], &[("bottom-3", able)]).await;
    assign(&w, write("s1", "a.txt")).await;
    agent.heartbeat(1).await.unwrap();
    let asked = requests(&w, "bottom-3").await;
    assert_eq!(asked.len(), 1);

    // A crash: the executor comes back from its saved record.
    let (status, record) = (agent.status(), agent.record());
    drop(agent);
    let behavior = BottomAgent::new(BottomSpec::new(["read_file"])).with_peers(peers);
    let mut agent = Agent::restore(
        config(ME, AgentLayer::Bottom, Some(LEAD)),
        Box::new(behavior),
        w.deps(Arc::new(RuleBasedReasoner::new())),
        status,
        Some(record),
    )
    .await
    .unwrap();
    assert!(agent.wants_tick(), "the offer is still pending");
    agent.heartbeat(2).await.unwrap();
    assert!(requests(&w, "bottom-3").await.is_empty(), "the offer is not made twice");
    answer(&w, "bottom-3", &asked[0], HelpResponse::Accepted).await;
    agent.heartbeat(3).await.unwrap();

    assert_eq!(
        help_events(&w, ME).await,
        [offer("bottom-3", PeerHelpOutcome::Asked), offer("bottom-3", PeerHelpOutcome::HandedOver)]
    );
    assert!(!agent.wants_tick());
    assert_eq!(agent.status(), AgentStatus::Idle);
}

#[tokio::test(start_paused = true)]
async fn a_subtask_taken_over_from_a_peer_is_not_offered_again_and_its_failure_goes_to_the_lead() {
    let mut tools = ToolRegistry::with_builtins();
    tools.register(Arc::new(FakeTool::failing("broken", "no"))).unwrap();
    let w = World::with_tools(tools);
    let able: &[&str] = &["broken"];
    let (mut agent, _) = executor(&w, &["broken"], &[("bottom-2", able)]).await;
    let mut theirs = subtask("t1", step("s1", "docs", "broken", json!({})), "bottom-2");
    let help = HelpRequest::TakeOverTask { subtask: Box::new(theirs.clone()) };
    w.send(addr("bottom-2"), ME, MessageKind::PeerHelpRequest, &help).await;

    let outcomes: Vec<HeartbeatOutcome> = {
        let mut outcomes = Vec::new();
        // Its retries are due 1, 2 and 4 heartbeats after each failure.
        for n in [1, 2, 4, 8] {
            outcomes.push(agent.heartbeat(n).await.unwrap());
        }
        outcomes
    };

    assert!(matches!(outcomes[0], HeartbeatOutcome::Retrying { retry: 1, .. }), "{outcomes:?}");
    assert!(matches!(outcomes[3], HeartbeatOutcome::Failed { .. }), "{outcomes:?}");
    // Its lead heard of the hand-over first, then got the failure with the subtask, now this
    // executor's second attempt.
    let to_lead = w.drain(&addr(LEAD)).await;
    let handed: Vec<StatusReport> = to_lead
        .iter()
        .filter(|m| m.kind == MessageKind::StatusReport)
        .map(|m| payload(m).unwrap())
        .collect();
    assert_eq!(
        handed,
        [StatusReport::HandedOver {
            task_id: "t1".into(),
            step_id: "s1".into(),
            from: id("bottom-2"),
            to: id(ME),
        }]
    );
    let failures: Vec<ErrorReport> = to_lead
        .iter()
        .filter(|m| m.kind == MessageKind::ErrorReport)
        .map(|m| payload(m).unwrap())
        .collect();
    theirs.assignee = id(ME);
    theirs.attempt = 2;
    assert_eq!(failures.len(), 1);
    assert_eq!(failures[0].work, Some(theirs));
    // bottom-2 got one answer (the failed turns that took its request again did not answer it
    // again), and never its subtask back.
    let back = w.drain(&addr("bottom-2")).await;
    let kinds: Vec<MessageKind> = back.iter().map(|m| m.kind).collect();
    assert_eq!(kinds, [MessageKind::PeerHelpResponse]);
    assert_eq!(payload::<HelpResponse>(&back[0]).unwrap(), HelpResponse::Accepted);
    assert_eq!(
        help_events(&w, ME).await,
        [(
            "bottom-2".into(),
            Some("t1/s1".into()),
            PeerHelpRequest::TakeOver,
            PeerHelpOutcome::Accepted
        )]
    );
}

#[tokio::test(start_paused = true)]
async fn a_retried_goal_step_asks_a_peer_for_its_knowledge_and_its_reasoner_sees_it() {
    let w = World::new();
    w.parties(&[LEAD, "bottom-2"]).await;
    let reasoner = Arc::new(ScriptedReasoner::from_answers([
        ScriptedAnswer::Action(NextAction::Finish { success: false, summary: "no idea".into() }),
        ScriptedAnswer::Action(NextAction::Finish { success: true, summary: "built".into() }),
    ]));
    let peers = peers(&["shell"], &[("bottom-2", &["shell"])]);
    let behavior = BottomAgent::new(BottomSpec::new(["shell"])).with_peers(peers);
    let config = config(ME, AgentLayer::Bottom, Some(LEAD));
    let mut agent = w.spawn_sharing(config, behavior, reasoner.clone()).await;
    let mut goal = step("s1", "build", "", serde_json::Value::Null);
    goal.description = "build the project".into();
    assign(&w, subtask("t1", goal, ME)).await;

    let first = agent.heartbeat(1).await.unwrap();
    assert!(matches!(first, HeartbeatOutcome::Retrying { retry: 1, .. }), "{first:?}");
    let asked = requests(&w, "bottom-2").await;
    assert_eq!(asked.len(), 1);
    assert_eq!(payload::<HelpRequest>(&asked[0]).unwrap(), HelpRequest::ShareKnowledge);
    let knowledge = "## Notes\nthe build needs `make`";
    answer(&w, "bottom-2", &asked[0], HelpResponse::Knowledge { knowledge: knowledge.into() })
        .await;
    let second = agent.heartbeat(2).await.unwrap();

    assert!(matches!(second, HeartbeatOutcome::Processed { .. }), "{second:?}");
    let histories: Vec<Vec<agent_core::ToolCallRecord>> = reasoner
        .requests()
        .into_iter()
        .filter_map(|r| match r {
            ReasoningRequest::NextAction { history, .. } => Some(history),
            _ => None,
        })
        .collect();
    assert_eq!(histories.len(), 2);
    assert!(histories[0].is_empty());
    assert_eq!(histories[1].len(), 1, "{:?}", histories[1]);
    assert!(histories[1][0].output.starts_with("bottom-2 says: shared what it knows"));
    assert!(histories[1][0].output.contains("the build needs `make`"));
    let reports: Vec<ProgressReport> = w.received(&addr(LEAD), MessageKind::ProgressReport).await;
    assert_eq!(reports.len(), 1);
    assert!(reports[0].results[0].success);
    let step = Some("t1/s1".to_owned());
    assert_eq!(
        help_events(&w, ME).await,
        [
            (
                "bottom-2".into(),
                step.clone(),
                PeerHelpRequest::ShareKnowledge,
                PeerHelpOutcome::Asked
            ),
            ("bottom-2".into(), step, PeerHelpRequest::ShareKnowledge, PeerHelpOutcome::Shared),
        ]
    );
}

#[tokio::test(start_paused = true)]
async fn a_help_request_from_an_executor_of_another_lead_is_refused_and_audited() {
    let w = World::new();
    let (mut agent, _) = executor(&w, &["write_file"], &[("bottom-2", &["write_file"])]).await;
    agent.ctx().write_board("## Notes\nprivate".into()).await.unwrap();
    // bottom-9 works for mid-2: not a peer.
    let mut theirs = write("s9", "stranger.txt");
    theirs.assignee = id("bottom-9");
    let take = HelpRequest::TakeOverTask { subtask: Box::new(theirs) };
    w.send(addr("bottom-9"), ME, MessageKind::PeerHelpRequest, &take).await;
    w.send(addr("bottom-9"), ME, MessageKind::PeerHelpRequest, &HelpRequest::ShareKnowledge).await;

    agent.heartbeat(1).await.unwrap();

    let answers: Vec<HelpResponse> =
        w.received(&addr("bottom-9"), MessageKind::PeerHelpResponse).await;
    let refusal = HelpResponse::Refused {
        reason: "only executors of my own lead may ask me for help".into(),
    };
    assert_eq!(answers, [refusal.clone(), refusal]);
    assert_eq!(
        w.denied(ME).await,
        ["peer help request from bottom-9", "peer help request from bottom-9"]
    );
    assert_eq!((w.file("stranger.txt"), w.tool_calls(ME).await), (None, 0));
    assert!(w.kinds(&addr(LEAD)).await.is_empty(), "nothing was taken over");
    assert!(help_events(&w, ME).await.is_empty());
    assert!(!agent.wants_tick());
}

#[tokio::test(start_paused = true)]
async fn a_peer_is_refused_a_step_this_executor_cannot_run_or_an_offer_that_came_too_late() {
    let w = World::new();
    let (mut agent, _) = executor(&w, &["read_file"], &[("bottom-2", &["write_file"])]).await;
    let unable = HelpRequest::TakeOverTask { subtask: Box::new(write("s1", "a.txt")) };
    w.send(addr("bottom-2"), ME, MessageKind::PeerHelpRequest, &unable).await;
    agent.heartbeat(1).await.unwrap();
    // A read_file step it can run, but offered longer ago than half the asker's wait.
    let late = subtask("t1", step("s2", "docs", "read_file", json!({"path": "a.txt"})), "bottom-2");
    let late = HelpRequest::TakeOverTask { subtask: Box::new(late) };
    tokio::time::advance(Duration::from_millis(PEER_HELP_TIMEOUT_MS / 2)).await;
    w.send(addr("bottom-2"), ME, MessageKind::PeerHelpRequest, &late).await;
    agent.heartbeat(2).await.unwrap();

    let answers: Vec<HelpResponse> =
        w.received(&addr("bottom-2"), MessageKind::PeerHelpResponse).await;
    assert_eq!(
        answers,
        [
            HelpResponse::Refused { reason: "I do not have the tool `write_file`".into() },
            HelpResponse::Refused { reason: "the request came too late".into() },
        ]
    );
    assert_eq!(w.tool_calls(ME).await, 0);
    assert!(w.kinds(&addr(LEAD)).await.is_empty());
    let events = help_events(&w, ME).await;
    assert_eq!(events.len(), 2);
    assert_eq!(events[0].3, refused("I do not have the tool `write_file`"));
    assert_eq!(events[1].3, refused("the request came too late"));
}

/// The lead hears that `bottom-2` took step `s1` over from `bottom-1`: the step is `bottom-2`'s
/// now, both count as having tried it (a later failure is not reassigned to either), and a
/// claim about a step that is not the sender's to take is ignored.
#[tokio::test(start_paused = true)]
async fn the_lead_makes_the_peer_that_took_a_step_over_its_assignee() {
    use crate::{MidAgent, MidSpec};
    const LEAD_ID: &str = "mid-1";
    let w = World::new();
    w.parties(&["top-a", "bottom-1", "bottom-2", "bottom-9"]).await;
    let tools = tools_of(&["write_file"]);
    let behavior = MidAgent::new(
        MidSpec { domain: "docs".into(), max_subordinates: 4 },
        vec![(id("bottom-1"), tools.clone()), (id("bottom-2"), tools)],
        vec![id("top-a")],
        Vec::new(),
    );
    let mut lead = w.spawn(config(LEAD_ID, AgentLayer::Mid, Some("top-a")), behavior).await;
    let work = agent_state::WorkPackage {
        task_id: "t1".into(),
        goal: "write".into(),
        decision: agent_state::DecisionId::from_u128(7),
        wave: 1,
        steps: vec![write("s1", "a.txt").step],
    };
    w.send(addr("top-a"), LEAD_ID, MessageKind::TaskAssign, &Assignment::Work { work }).await;
    lead.heartbeat(1).await.unwrap();
    let placed: Vec<Assignment> = w.received(&addr("bottom-1"), MessageKind::TaskAssign).await;
    assert_eq!(placed.len(), 1, "s1 went to bottom-1");
    let handed = |from: &str, to: &str| StatusReport::HandedOver {
        task_id: "t1".into(),
        step_id: "s1".into(),
        from: id(from),
        to: id(to),
    };
    // Not the sender's to claim (it names another taker), nor a stranger's: ignored.
    w.send(addr("bottom-1"), LEAD_ID, MessageKind::StatusReport, &handed("bottom-1", "bottom-2"))
        .await;
    w.send(addr("bottom-9"), LEAD_ID, MessageKind::StatusReport, &handed("bottom-1", "bottom-9"))
        .await;
    lead.heartbeat(2).await.unwrap();
    let assignee = |lead: &Agent| {
        let saved = lead.record().behavior;
        let state = saved["work"].as_object().unwrap().values().next().unwrap().clone();
        (
            state["subtasks"]["s1"]["assignee"].clone(),
            state["subtasks"]["s1"]["attempt"].clone(),
            state["tried"]["s1"].clone(),
        )
    };
    assert_eq!(assignee(&lead), (json!("bottom-1"), json!(1), json!(["bottom-1"])));

    w.send(addr("bottom-2"), LEAD_ID, MessageKind::StatusReport, &handed("bottom-1", "bottom-2"))
        .await;
    lead.heartbeat(3).await.unwrap();

    assert_eq!(assignee(&lead), (json!("bottom-2"), json!(2), json!(["bottom-1", "bottom-2"])));
    let waits = lead.waiting_on();
    assert_eq!(waits.iter().map(|e| e.on.as_str()).collect::<Vec<_>>(), ["bottom-2"]);
    let board = w.board(BoardId::Agent(id(LEAD_ID))).await;
    assert!(board.ends_with("- [bottom-2] took over s1 from [bottom-1] (attempt 2)"), "{board}");
    // bottom-2 fails it in turn: neither executor gets it again.
    let mut theirs = write("s1", "a.txt");
    theirs.assignee = id("bottom-2");
    theirs.attempt = 2;
    let failure = ErrorReport {
        error: "disk on fire".into(),
        work: Some(theirs),
        metrics: Default::default(),
    };
    w.send(addr("bottom-2"), LEAD_ID, MessageKind::ErrorReport, &failure).await;
    lead.heartbeat(4).await.unwrap();
    for executor in ["bottom-1", "bottom-2"] {
        let again: Vec<Assignment> = w.received(&addr(executor), MessageKind::TaskAssign).await;
        assert!(again.is_empty(), "{executor} got s1 again: {again:?}");
    }
}
