//! Serde wire names and JSON round-trips for every stored type.

use std::fmt::Debug;

use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::{Value, json};

use super::id;
use crate::{
    Address, AgentConfig, AgentLayer, AgentMetrics, AgentStatus, BoardAccess, BoardId,
    BoardSnapshot, Capability, Decision, DecisionId, DecisionStatus, ErrorClass, Message,
    MessageId, MessageKind, RetryPolicy, SignOutcome, Timestamp, TransitionRecord,
};

/// Serializes `value`, checks it is the JSON `expected`, and that it reads back equal.
#[track_caller]
fn check_wire<T>(value: &T, expected: Value)
where
    T: Serialize + DeserializeOwned + PartialEq + Debug,
{
    let json = serde_json::to_value(value).unwrap();
    assert_eq!(json, expected, "wire form of {value:?}");
    let back: T = serde_json::from_value(json).unwrap();
    assert_eq!(&back, value);
}

/// Serializes `value` to JSON text and back; the result must equal `value`.
#[track_caller]
fn round_trip<T>(value: &T) -> String
where
    T: Serialize + DeserializeOwned + PartialEq + Debug,
{
    let text = serde_json::to_string(value).unwrap();
    let back: T = serde_json::from_str(&text).unwrap();
    assert_eq!(&back, value, "round-trip through {text}");
    text
}

#[test]
fn layers_are_snake_case() {
    for (layer, name) in
        [(AgentLayer::Top, "top"), (AgentLayer::Mid, "mid"), (AgentLayer::Bottom, "bottom")]
    {
        check_wire(&layer, json!(name));
        assert_eq!(layer.as_str(), name);
        assert_eq!(layer.to_string(), name);
    }
}

#[test]
fn capabilities_use_the_seed_names() {
    let names = [
        (Capability::Plan, "plan"),
        (Capability::Execute, "execute"),
        (Capability::Reflect, "reflect"),
        (Capability::ToolCall, "tool_call"),
        (Capability::CodeGen, "code_gen"),
        (Capability::TestExec, "test_exec"),
        (Capability::Review, "review"),
        (Capability::Coordinate, "coordinate"),
        (Capability::Delegate, "delegate"),
        (Capability::Arbitrate, "arbitrate"),
    ];
    assert_eq!(names.len(), Capability::ALL.len());
    for (capability, name) in names {
        check_wire(&capability, json!(name));
        assert_eq!(capability.as_str(), name);
        assert!(!capability.description().is_empty());
    }
}

#[test]
fn statuses_use_the_seed_names() {
    let names = [
        (AgentStatus::Initializing, "initializing"),
        (AgentStatus::Idle, "idle"),
        (AgentStatus::Working, "working"),
        (AgentStatus::WaitingApproval, "waiting_approval"),
        (AgentStatus::Blocked, "blocked"),
        (AgentStatus::Failed, "failed"),
        (AgentStatus::ShuttingDown, "shutting_down"),
        (AgentStatus::Terminated, "terminated"),
    ];
    for (status, name) in names {
        check_wire(&status, json!(name));
        assert_eq!(status.as_str(), name);
        assert_eq!(status.to_string(), name);
    }
}

#[test]
fn all_19_message_kinds_are_snake_case() {
    let names = [
        (MessageKind::HeartbeatAck, "heartbeat_ack"),
        (MessageKind::ErrorReport, "error_report"),
        (MessageKind::SignatureRequest, "signature_request"),
        (MessageKind::ProgressReport, "progress_report"),
        (MessageKind::ConflictReport, "conflict_report"),
        (MessageKind::ArbitrationResult, "arbitration_result"),
        (MessageKind::TaskAssign, "task_assign"),
        (MessageKind::PeerCoordination, "peer_coordination"),
        (MessageKind::PeerCoordinationResponse, "peer_coordination_response"),
        (MessageKind::IssueEscalation, "issue_escalation"),
        (MessageKind::PeerHelpRequest, "peer_help_request"),
        (MessageKind::PeerHelpResponse, "peer_help_response"),
        (MessageKind::StatusQuery, "status_query"),
        (MessageKind::StatusReport, "status_report"),
        (MessageKind::VoteRequest, "vote_request"),
        (MessageKind::VoteResponse, "vote_response"),
        (MessageKind::Warning, "warning"),
        (MessageKind::OperatorCommand, "operator_command"),
        (MessageKind::CommandOutcome, "command_outcome"),
    ];
    assert_eq!(MessageKind::ALL.to_vec(), names.iter().map(|(k, _)| *k).collect::<Vec<_>>());
    for (kind, name) in names {
        check_wire(&kind, json!(name));
        assert_eq!(kind.as_str(), name);
        assert_eq!(kind.to_string(), name);
    }
}

#[test]
fn small_enums_are_snake_case() {
    check_wire(&DecisionStatus::Pending, json!("pending"));
    check_wire(&DecisionStatus::Approved, json!("approved"));
    check_wire(&DecisionStatus::Vetoed, json!("vetoed"));
    check_wire(&SignOutcome::AlreadySigned, json!("already_signed"));
    check_wire(&BoardAccess::Append, json!("append"));
    check_wire(&ErrorClass::Transient, json!("transient"));
    check_wire(&ErrorClass::Permanent, json!("permanent"));
}

#[test]
fn address_is_a_plain_string() {
    check_wire(&Address::System, json!("system"));
    check_wire(&Address::Broadcast, json!("broadcast"));
    check_wire(&Address::Agent(id("mid-1")), json!("mid-1"));
    assert_eq!(Address::parse("system"), Address::System);
    assert_eq!(Address::parse("broadcast"), Address::Broadcast);
    assert_eq!(Address::parse("top-1"), Address::Agent(id("top-1")));
    assert_eq!(Address::from(id("a")).agent(), Some(&id("a")));
    assert_eq!(Address::System.agent(), None);
    assert_eq!(Address::Broadcast.to_string(), "broadcast");
}

#[test]
fn board_id_is_global_or_the_owner_id() {
    check_wire(&BoardId::Global, json!("global"));
    check_wire(&BoardId::Agent(id("bottom-2")), json!("bottom-2"));
    assert_eq!(BoardId::from(id("x")).as_str(), "x");
}

#[test]
fn ids_and_timestamps_are_transparent() {
    check_wire(&id("top-1"), json!("top-1"));
    check_wire(&Timestamp(42), json!(42));
    check_wire(&MessageId::from_u128(1), json!("00000000-0000-0000-0000-000000000001"));
    check_wire(&DecisionId::from_u128(255), json!("00000000-0000-0000-0000-0000000000ff"));
}

pub(super) fn sample_record() -> TransitionRecord {
    TransitionRecord {
        agent: id("bottom-1"),
        from: AgentStatus::Working,
        to: AgentStatus::WaitingApproval,
        reason: "needs a signature".into(),
        at: Timestamp(1_234),
    }
}

pub(super) fn sample_config() -> AgentConfig {
    let mut c = AgentConfig::new("mid-1", "Lead", AgentLayer::Mid)
        .with_role("backend lead")
        .with_supervisor("top-1")
        .with_subordinates(["bottom-1", "bottom-2"])
        .with_max_retries(4)
        .with_timeout_ms(12_000);
    c.model = Some("gemma-3-270m".to_owned());
    c.temperature = Some(0.7);
    c
}

pub(super) fn sample_message(correlated: bool) -> Message {
    let m = Message::new(
        MessageId::from_u128(7),
        id("mid-1"),
        Address::Broadcast,
        MessageKind::TaskAssign,
        json!({"task": {"id": "t1", "description": "build", "tags": ["a", "b"], "n": 3}}),
        Timestamp(99),
    );
    if correlated { m.in_reply_to(MessageId::from_u128(6)) } else { m }
}

pub(super) fn sample_decision() -> Decision {
    let mut d = Decision::propose(
        DecisionId::from_u128(11),
        id("top-1"),
        json!({"plan": "ship it"}),
        vec![id("top-1"), id("top-2"), id("top-3")],
        Timestamp(10),
    )
    .unwrap();
    d.sign(&id("top-1"), Timestamp(11)).unwrap();
    d.sign(&id("top-2"), Timestamp(12)).unwrap();
    d.veto(&id("top-3"), "too risky", Timestamp(13)).unwrap();
    d
}

pub(super) fn sample_metrics() -> AgentMetrics {
    AgentMetrics {
        tasks_completed: 3,
        tasks_failed: 1,
        average_task_duration_ms: 30_000.5,
        messages_processed: 17,
        heartbeats_responded: 9,
        heartbeats_missed: 1,
        warnings_received: 2,
        retries: 5,
        decisions_signed: 6,
        decisions_vetoed: 7,
        conflicts_arbitrated: 8,
        last_active: Timestamp(1_000_000),
    }
}

pub(super) fn sample_board() -> BoardSnapshot {
    BoardSnapshot {
        board: BoardId::Agent(id("bottom-1")),
        layer: Some(AgentLayer::Bottom),
        content: "## Result\nok — ✓".to_owned(),
        version: 3,
        updated_at: Some(Timestamp(77)),
    }
}

#[test]
fn transition_record_round_trips() {
    let text = round_trip(&sample_record());
    assert!(text.contains(r#""to":"waiting_approval""#), "{text}");
}

#[test]
fn agent_config_round_trips() {
    round_trip(&sample_config());
    round_trip(&AgentConfig::new("top-1", "Power", AgentLayer::Top));
}

#[test]
fn message_round_trips_with_and_without_correlation_id() {
    let plain = round_trip(&sample_message(false));
    assert!(!plain.contains("correlation_id"), "absent correlation id is omitted: {plain}");
    let replied = round_trip(&sample_message(true));
    assert!(replied.contains(r#""correlation_id":"00000000-0000-0000-0000-000000000006""#));
    assert!(replied.contains(r#""kind":"task_assign""#) && replied.contains(r#""to":"broadcast""#));
}

#[test]
fn decision_with_signatures_and_a_veto_round_trips() {
    let d = sample_decision();
    assert_eq!((d.signatures.len(), d.vetoes.len(), d.status), (2, 1, DecisionStatus::Vetoed));
    round_trip(&d);
}

#[test]
fn metrics_round_trip() {
    round_trip(&sample_metrics());
    round_trip(&AgentMetrics::default());
}

#[test]
fn board_snapshots_round_trip() {
    round_trip(&sample_board());
    round_trip(&BoardSnapshot {
        board: BoardId::Global,
        layer: None,
        content: String::new(),
        version: 0,
        updated_at: None,
    });
}

#[test]
fn retry_policies_round_trip() {
    round_trip(&RetryPolicy::executor_default());
    round_trip(&RetryPolicy::agent_default());
}

#[test]
fn each_action_needs_the_capability_of_its_matrix_row() {
    use crate::Action;
    let table: Vec<(Action, Capability)> =
        Action::ALL.into_iter().map(|a| (a, a.required_capability())).collect();
    assert_eq!(
        table,
        [
            (Action::Plan, Capability::Plan),
            (Action::Execute, Capability::Execute),
            (Action::Reflect, Capability::Reflect),
            (Action::CallTool, Capability::ToolCall),
            (Action::WriteCode, Capability::CodeGen),
            (Action::RunTests, Capability::TestExec),
            (Action::Review, Capability::Review),
            (Action::Coordinate, Capability::Coordinate),
            (Action::AssignWork, Capability::Delegate),
            (Action::Spawn, Capability::Delegate),
            (Action::Vote, Capability::Arbitrate),
            (Action::Arbitrate, Capability::Arbitrate),
        ]
    );
    // Every capability of the matrix is needed by some act, so every one is checked.
    for capability in Capability::ALL {
        assert!(table.iter().any(|(_, c)| *c == capability), "{capability} is never checked");
    }
    assert_eq!(Action::of_message(MessageKind::TaskAssign), Action::AssignWork);
    assert_eq!(Action::of_message(MessageKind::OperatorCommand), Action::AssignWork);
    assert_eq!(Action::of_message(MessageKind::CommandOutcome), Action::Coordinate);
    assert_eq!(Action::of_message(MessageKind::VoteResponse), Action::Vote);
    assert_eq!(Action::of_message(MessageKind::VoteRequest), Action::Vote);
    assert_eq!(Action::of_message(MessageKind::ArbitrationResult), Action::Arbitrate);
    assert_eq!(Action::of_message(MessageKind::ProgressReport), Action::Coordinate);
    assert_eq!(Action::of_tool("write_file"), Some(Action::WriteCode));
    assert_eq!(Action::of_tool("read_file"), None);
    // Every layer's default capabilities cover what its layer does in the default teams.
    for layer in AgentLayer::ALL {
        let can = |a: Action| layer.default_capabilities().contains(&a.required_capability());
        assert_eq!(can(Action::AssignWork), layer != AgentLayer::Bottom, "{layer}");
        assert_eq!(can(Action::CallTool), layer == AgentLayer::Bottom, "{layer}");
        assert_eq!(can(Action::Vote), layer == AgentLayer::Top, "{layer}");
    }
}
