//! The agent context: refused board and governance acts are audited and change nothing, tool
//! calls are audited, and the system prompt says who the agent is.

use agent_state::{Actor, AgentStatus::*, Decision, DecisionId, DecisionStatus, SignError};
use governance::{DecideError, Governance};
use serde_json::json;
use whiteboard::{BoardError, Whiteboard};

use super::*;
use crate::tools::ToolError;
use crate::{ToolCall, system_prompt};

async fn board(s: &Services, board: &BoardId) -> BoardSnapshot {
    s.boards.read(&Actor::System, board).await.unwrap()
}

fn assert_permission_denied(result: Result<u64, AgentError>) -> String {
    match result {
        Err(e @ AgentError::Board(BoardError::PermissionDenied { .. })) => e.to_string(),
        other => panic!("expected a permission refusal, got {other:?}"),
    }
}

#[tokio::test(start_paused = true)]
async fn a_refused_board_write_is_audited_and_changes_nothing() {
    let s = Services::new().await;
    let agent = s.ready(&Probe::default()).await;
    let peer = BoardId::Agent(id("bottom-2"));
    s.boards.create(&id("bottom-2"), AgentLayer::Bottom).await.unwrap();

    let write = assert_permission_denied(agent.ctx().write_to(&peer, "mine now".into()).await);
    let append = assert_permission_denied(agent.ctx().append_to(&peer, "and this").await);
    let global =
        assert_permission_denied(agent.ctx().write_to(&BoardId::Global, "erase".into()).await);

    assert_eq!(
        s.denied(ME).await,
        [
            ("write board bottom-2".to_owned(), write),
            ("append to board bottom-2".to_owned(), append),
            ("write board global".to_owned(), global),
        ]
    );
    let peer_board = board(&s, &peer).await;
    assert_eq!((peer_board.content.as_str(), peer_board.version), ("", 0));
    assert_eq!(board(&s, &BoardId::Global).await.version, 0);
    assert_eq!(agent.status(), Idle);
    assert_eq!(s.edges(ME).await, [(Initializing, Idle)]);
}

#[tokio::test(start_paused = true)]
async fn a_refused_board_read_is_audited_and_allowed_reads_are_not() {
    let s = Services::new().await;
    let agent = s.ready(&Probe::default()).await;
    s.boards.create(&id(SUPERVISOR), AgentLayer::Mid).await.unwrap();
    s.boards.create(&id("bottom-2"), AgentLayer::Bottom).await.unwrap();

    let err = agent.ctx().read_board(&BoardId::Agent(id(SUPERVISOR))).await.unwrap_err();

    assert!(matches!(err, AgentError::Board(BoardError::PermissionDenied { .. })), "{err:?}");
    agent.ctx().read_board(&BoardId::Agent(id("bottom-2"))).await.unwrap();
    agent.ctx().read_board(&BoardId::Global).await.unwrap();
    assert_eq!(s.denied(ME).await, [("read board mid-1".to_owned(), err.to_string())]);
    assert_eq!(agent.status(), Idle);
}

#[tokio::test(start_paused = true)]
async fn a_strangers_signature_and_veto_are_audited_and_leave_the_decision_unchanged() {
    let s = Services::new().await;
    let mut agent = s.agent(top_config("top-c"), &Probe::default());
    agent.initialize().await.unwrap();
    let decision_id = DecisionId::from_u128(42);
    let decision =
        Decision::propose(decision_id, id("top-a"), json!({"steps": []}), vec![id("top-b")], START)
            .unwrap();
    s.governance.submit(decision.clone()).await.unwrap();

    let sign = agent.ctx_mut().sign(decision_id).await.unwrap_err();
    let veto = agent.ctx_mut().veto(decision_id, "I object").await.unwrap_err();

    for err in [&sign, &veto] {
        assert!(
            matches!(
                err,
                AgentError::Decide(DecideError::Rule(SignError::NotARequiredSigner { .. }))
            ),
            "{err:?}"
        );
    }
    assert_eq!(
        s.denied("top-c").await,
        [
            (format!("sign decision {decision_id}"), sign.to_string()),
            (format!("veto decision {decision_id}"), veto.to_string()),
        ]
    );
    assert_eq!(s.governance.get(decision_id).await.unwrap(), Some(decision));
    let metrics = agent.ctx().metrics();
    assert_eq!((metrics.decisions_signed, metrics.decisions_vetoed), (0, 0));
    assert_eq!(agent.status(), Idle);
}

#[tokio::test(start_paused = true)]
async fn proposing_and_signing_are_audited_and_counted() {
    let s = Services::new().await;
    let mut agent = s.agent(top_config("top-a"), &Probe::default());
    agent.initialize().await.unwrap();

    let decision_id =
        agent.ctx_mut().propose(json!({"steps": [{"id": "s1"}]}), vec![id("top-a")]).await.unwrap();
    let outcome = agent.ctx_mut().sign(decision_id).await.unwrap();

    assert_eq!(outcome, agent_state::SignOutcome::Approved);
    let stored = s.governance.get(decision_id).await.unwrap().unwrap();
    assert_eq!((stored.status, stored.proposer.clone()), (DecisionStatus::Approved, id("top-a")));
    let actions: Vec<String> = s
        .events("top-a")
        .await
        .into_iter()
        .filter_map(|e| match e {
            AuditEvent::Decision { decision, action, .. } if decision == decision_id => {
                Some(action)
            }
            _ => None,
        })
        .collect();
    assert_eq!(actions, ["proposed", "approved"]);
    assert_eq!(agent.ctx().metrics().decisions_signed, 1);

    // Signing a decided decision is refused, audited and not counted.
    let again = agent.ctx_mut().sign(decision_id).await.unwrap_err();
    assert!(
        matches!(again, AgentError::Decide(DecideError::Rule(SignError::AlreadyDecided { .. }))),
        "{again:?}"
    );
    assert_eq!(s.denied("top-a").await.len(), 1);
    assert_eq!(agent.ctx().metrics().decisions_signed, 1);
}

#[tokio::test(start_paused = true)]
async fn call_tool_runs_in_the_workspace_and_audits_every_call() {
    let s = Services::new().await;
    let mut agent = s.ready(&Probe::default()).await;
    let write = ToolCall {
        tool: "write_file".into(),
        args: json!({"path": "notes/a.txt", "content": "hello"}),
    };
    let unknown = ToolCall { tool: "deploy".into(), args: json!({}) };

    let output = agent.ctx_mut().call_tool(&write).await.unwrap();
    let err = agent.ctx_mut().call_tool(&unknown).await.unwrap_err();

    assert!(output.success);
    let written = s.deps.workspace.workspace().join("notes/a.txt");
    assert_eq!(std::fs::read_to_string(written).unwrap(), "hello");
    assert!(matches!(err, AgentError::Tool(ToolError::UnknownTool { .. })), "{err:?}");
    assert_eq!(err.class(), agent_state::ErrorClass::Permanent);
    let calls: Vec<AuditEvent> = s
        .events(ME)
        .await
        .into_iter()
        .filter(|e| matches!(e, AuditEvent::ToolCall { .. }))
        .collect();
    assert_eq!(
        calls,
        [
            AuditEvent::ToolCall {
                tool: "write_file".into(),
                args: write.args.clone(),
                success: true,
                summary: output.output.clone(),
            },
            AuditEvent::ToolCall {
                tool: "deploy".into(),
                args: json!({}),
                success: false,
                summary: err.to_string(),
            },
        ]
    );
}

#[tokio::test(start_paused = true)]
async fn the_system_prompt_says_name_layer_role_capabilities_and_responsibilities() {
    let s = Services::new().await;
    let agent = s.agent(bottom_config(), &Probe::default());
    let config = agent.ctx().config().clone();
    let capabilities: Vec<&str> = config.capabilities.iter().map(|c| c.as_str()).collect();
    assert!(capabilities.len() > 1, "the test needs several capabilities");

    let prompt = agent.ctx().system_prompt();

    assert!(prompt.starts_with("You are Executor One, a bottom-layer agent.\n"), "{prompt}");
    assert!(prompt.contains("\nRole: executor\n"), "{prompt}");
    assert!(prompt.contains(&format!("\nCapabilities: {}\n", capabilities.join(", "))), "{prompt}");
    assert!(prompt.contains(&format!("Responsibilities:\n{RESPONSIBILITIES}\n")), "{prompt}");
    assert_eq!(prompt, system_prompt(&config, RESPONSIBILITIES));
    assert_eq!(agent.ctx().persona().system_prompt, prompt);
}

#[tokio::test(start_paused = true)]
async fn send_all_sends_a_batch_in_order_or_nothing_of_it() {
    let s = Services::new().await;
    let mut agent = s.ready(&Probe::default()).await;
    let (lead, peer) = (id(SUPERVISOR), id("bottom-2"));
    s.bus.register(&lead).await.unwrap();
    s.bus.register(&peer).await.unwrap();
    let before = agent.ctx().metrics().messages_processed;

    let sends = [
        (Address::from(&lead), MessageKind::ProgressReport, json!({"n": 1})),
        (Address::from(&peer), MessageKind::StatusReport, json!({"n": 2})),
        (Address::from(&lead), MessageKind::StatusReport, json!({"n": 3})),
    ];
    let ids = agent.ctx_mut().send_all(sends).await.unwrap();

    let to_lead = s.bus.take(&Address::from(&lead), 10).await.unwrap();
    let got: Vec<_> = to_lead.iter().map(|m| (m.id, m.kind, m.content.clone())).collect();
    assert_eq!(
        got,
        [
            (ids[0], MessageKind::ProgressReport, json!({"n": 1})),
            (ids[2], MessageKind::StatusReport, json!({"n": 3})),
        ]
    );
    assert!(to_lead.iter().all(|m| m.from == Address::from(&id(ME))));
    let to_peer = s.bus.take(&Address::from(&peer), 10).await.unwrap();
    assert_eq!(to_peer.iter().map(|m| m.id).collect::<Vec<_>>(), [ids[1]]);
    assert_eq!(agent.ctx().metrics().messages_processed, before + 3);

    // One unknown recipient: nothing of the batch is delivered.
    let sends = [
        (Address::from(&lead), MessageKind::ProgressReport, json!({"n": 4})),
        (Address::from(&id("ghost")), MessageKind::StatusReport, json!({"n": 5})),
    ];
    let err = agent.ctx_mut().send_all(sends).await.unwrap_err();
    assert!(
        matches!(&err, AgentError::Send(message_bus::SendError::UnknownRecipient { recipient, .. }) if *recipient == id("ghost")),
        "{err:?}"
    );
    assert_eq!(s.bus.pending(&Address::from(&lead)).await.unwrap(), 0);
    assert_eq!(agent.ctx().metrics().messages_processed, before + 3);

    let none: [(AgentId, MessageKind, serde_json::Value); 0] = [];
    assert_eq!(agent.ctx_mut().send_all(none).await.unwrap(), []);
}
