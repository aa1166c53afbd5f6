//! Capabilities are checked where an agent acts: an act its configuration lacks the capability
//! for is refused with a typed error, audited as `Denied`, and changes nothing.

use agent_state::{Action, Capability, ErrorClass};
use serde_json::json;

use super::*;
use crate::ToolCall;

/// Asserts `result` is the refusal of `action` for lacking its capability, and returns its text.
fn assert_missing<T: std::fmt::Debug>(
    result: Result<T, AgentError>,
    agent: &str,
    action: Action,
) -> String {
    let error = result.expect_err("the act must be refused");
    let text = error.to_string();
    assert_eq!(error.class(), ErrorClass::Permanent);
    match error {
        AgentError::MissingCapability { agent: who, action: did, capability } => {
            assert_eq!(
                (who.as_str(), did, capability),
                (agent, action, action.required_capability())
            );
        }
        other => panic!("expected a missing-capability refusal, got {other:?}"),
    }
    text
}

fn tool_events(events: Vec<AuditEvent>) -> usize {
    events.iter().filter(|e| matches!(e, AuditEvent::ToolCall { .. })).count()
}

#[tokio::test(start_paused = true)]
async fn a_tool_call_without_tool_call_is_refused_audited_and_runs_nothing() {
    let s = Services::new().await;
    let config = bottom_config().with_capabilities([Capability::Execute, Capability::Coordinate]);
    let mut agent = s.agent(config, &Probe::default());
    agent.initialize().await.unwrap();
    let write =
        ToolCall { tool: "write_file".into(), args: json!({"path": "a.txt", "content": "a"}) };
    let ran = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let effect_ran = ran.clone();
    let effect = async move {
        effect_ran.store(true, std::sync::atomic::Ordering::SeqCst);
        Err(AgentError::NotAllowed("must not run".into()))
    };

    let direct = assert_missing(agent.ctx_mut().call_tool(&write).await, ME, Action::CallTool);
    let once =
        assert_missing(agent.ctx_mut().call_tool_once("k", &write).await, ME, Action::CallTool);
    let effect = assert_missing(
        agent.ctx_mut().call_effect_once("e", &write, true, effect).await,
        ME,
        Action::CallTool,
    );

    let denied = |error: String| ("call_tool write_file".to_owned(), error);
    assert_eq!(s.denied(ME).await, [denied(direct), denied(once), denied(effect)]);
    assert!(!s.deps.workspace.workspace().join("a.txt").exists());
    assert!(!ran.load(std::sync::atomic::Ordering::SeqCst));
    assert_eq!(tool_events(s.events(ME).await), 0);
    assert_eq!(s.deps.state.tool(&format!("{ME}/k")).await.unwrap(), None);
}

#[tokio::test(start_paused = true)]
async fn with_tool_call_the_same_call_runs() {
    let s = Services::new().await;
    let mut agent = s.ready(&Probe::default()).await;
    let write =
        ToolCall { tool: "write_file".into(), args: json!({"path": "a.txt", "content": "a"}) };

    assert!(agent.ctx_mut().call_tool(&write).await.unwrap().success);

    assert_eq!(s.denied(ME).await, []);
    assert!(s.deps.workspace.workspace().join("a.txt").exists());
}

#[tokio::test(start_paused = true)]
async fn assigning_work_without_delegate_is_refused_audited_and_sends_nothing() {
    let s = Services::new().await;
    let lead = AgentConfig::new(SUPERVISOR, "Lead", AgentLayer::Mid)
        .with_role("lead")
        .with_supervisor("top-1");
    let executor = "bottom-2";
    s.bus.register(&id(executor)).await.unwrap();
    // The lead's own inbox is registered by the harness; only its executor's matters here.
    let mut refused = s.agent(
        lead.clone().with_capabilities([Capability::Plan, Capability::Review]),
        &Probe::default(),
    );
    let work = json!({"assign": "dismiss", "reason": "no longer needed"});

    let error = assert_missing(
        refused.ctx_mut().send(&id(executor), MessageKind::TaskAssign, &work).await,
        SUPERVISOR,
        Action::AssignWork,
    );

    assert_eq!(
        s.denied(SUPERVISOR).await,
        [("assign_work (task_assign to bottom-2)".to_owned(), error)]
    );
    assert!(s.drain(&inbox(executor)).await.is_empty());
    assert_eq!(refused.ctx().metrics().messages_processed, 0);

    // A lead with `delegate` (every lead by default) sends the same assignment.
    let mut allowed = s.agent(lead, &Probe::default());
    allowed.ctx_mut().send(&id(executor), MessageKind::TaskAssign, &work).await.unwrap();
    assert_eq!(s.drain(&inbox(executor)).await.len(), 1);
    assert_eq!(s.denied(SUPERVISOR).await.len(), 1);
}

#[tokio::test(start_paused = true)]
async fn a_vote_without_arbitrate_is_refused_audited_and_sends_nothing() {
    let s = Services::new().await;
    let peer = "top-2";
    s.bus.register(&id(peer)).await.unwrap();
    let request = Message::new(
        new_message_id(),
        id(peer),
        inbox("top-1"),
        MessageKind::VoteRequest,
        json!({"conflict": "which plan"}),
        s.now(),
    );
    let vote = json!({"vote": "a"});
    let mut refused = s.agent(
        top_config("top-1").with_capabilities([Capability::Plan, Capability::Review]),
        &Probe::default(),
    );

    let reply = assert_missing(
        refused.ctx_mut().reply(&request, MessageKind::VoteResponse, &vote).await,
        "top-1",
        Action::Vote,
    );
    let result = assert_missing(
        refused.ctx_mut().send(&id(peer), MessageKind::ArbitrationResult, &vote).await,
        "top-1",
        Action::Arbitrate,
    );

    assert_eq!(
        s.denied("top-1").await,
        [
            ("vote (vote_response to top-2)".to_owned(), reply),
            ("arbitrate (arbitration_result to top-2)".to_owned(), result),
        ]
    );
    assert!(s.drain(&inbox(peer)).await.is_empty());

    // A top power (with `arbitrate` by default) casts the same vote.
    let mut allowed = s.agent(top_config("top-1"), &Probe::default());
    allowed.ctx_mut().reply(&request, MessageKind::VoteResponse, &vote).await.unwrap();
    assert_eq!(s.drain(&inbox(peer)).await.len(), 1);
}

#[tokio::test(start_paused = true)]
async fn an_act_without_a_required_capability_is_refused_by_require() {
    let s = Services::new().await;
    let agent = s.ready(&Probe::default()).await;

    // A bottom executor may not spawn: `delegate` is not among its capabilities.
    let error =
        assert_missing(agent.ctx().require(Action::Spawn, "a worker").await, ME, Action::Spawn);
    agent.ctx().require(Action::CallTool, "write_file").await.unwrap();

    assert_eq!(s.denied(ME).await, [("spawn a worker".to_owned(), error)]);
}

/// A power configured without `review` cannot sign or veto; without `plan` it cannot propose.
/// An executor without `code_gen` cannot write the workspace; one without `coordinate` cannot
/// report or write its board. Each refusal is audited and changes nothing.
#[tokio::test(start_paused = true)]
async fn every_capability_is_checked_at_the_act_that_needs_it() {
    let s = Services::new().await;
    let decision = agent_state::Decision::propose(
        agent_state::DecisionId::from_u128(7),
        id("top-2"),
        json!({"steps": []}),
        vec![id("top-1")],
        s.now(),
    )
    .unwrap();
    s.deps.governance.submit(decision.clone()).await.unwrap();
    let d = agent_state::DecisionId::from_u128(7);
    let mut power = s.agent(
        top_config("top-1").with_capabilities([Capability::Coordinate, Capability::Arbitrate]),
        &Probe::default(),
    );
    let sign = assert_missing(power.ctx_mut().sign(d).await, "top-1", Action::Review);
    let veto = assert_missing(power.ctx_mut().veto(d, "no").await, "top-1", Action::Review);
    let propose =
        assert_missing(power.ctx_mut().propose(json!({}), vec![]).await, "top-1", Action::Plan);
    assert_eq!(
        s.denied("top-1").await,
        [
            (format!("review (sign decision {d})"), sign),
            (format!("review (veto decision {d})"), veto),
            ("plan (propose a decision)".to_owned(), propose),
        ]
    );
    assert_eq!(s.deps.governance.get(d).await.unwrap().unwrap(), decision, "nothing signed");

    let config = bottom_config().with_capabilities([
        Capability::Execute,
        Capability::ToolCall,
        Capability::Coordinate,
    ]);
    let mut writer = s.agent(config, &Probe::default());
    let write =
        ToolCall { tool: "write_file".into(), args: json!({"path": "a.txt", "content": "a"}) };
    assert_missing(writer.ctx_mut().call_tool(&write).await, ME, Action::WriteCode);
    assert!(!s._workspace.path().join("a.txt").exists(), "nothing written");
    let read = ToolCall { tool: "list_dir".into(), args: json!({}) };
    writer.ctx_mut().call_tool(&read).await.unwrap();

    let mute = bottom_config().with_capabilities([Capability::Execute, Capability::ToolCall]);
    let mut mute = s.agent(mute, &Probe::default());
    assert_missing(mute.ctx_mut().append_own("note").await, ME, Action::Coordinate);
    assert_missing(
        mute.ctx_mut().send(&id("mid-1"), MessageKind::ProgressReport, &json!({})).await,
        ME,
        Action::Coordinate,
    );
}
