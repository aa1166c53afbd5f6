//! Operator commands and their outcomes on the wire.

use serde_json::json;

use crate::{
    Address, CommandOrigin, CommandOutcome, Message, MessageId, MessageKind, OperatorCommand,
    Timestamp,
};

#[test]
fn a_command_keeps_the_wire_form_it_had_inside_a_task_assign() {
    let rollback = OperatorCommand::Rollback { version: 2 };
    assert_eq!(
        serde_json::to_value(&rollback).unwrap(),
        json!({"command": "rollback", "version": 2})
    );
    let back: OperatorCommand =
        serde_json::from_value(json!({"command": "rollback", "version": 2})).unwrap();
    assert_eq!(back, rollback);
    assert_eq!(rollback.describe(), "rollback to version 2");
    let err = serde_json::from_value::<OperatorCommand>(json!({"command": "explode"})).unwrap_err();
    assert!(err.to_string().contains("explode"), "{err}");
}

#[test]
fn an_outcome_says_applied_with_the_version_or_refused_with_why() {
    let applied = CommandOutcome::Applied { version: 3, from: None };
    assert_eq!(
        serde_json::to_value(&applied).unwrap(),
        json!({"outcome": "applied", "version": 3})
    );
    let swapped = CommandOutcome::Applied { version: 2, from: Some("g1".into()) };
    assert_eq!(
        serde_json::to_value(&swapped).unwrap(),
        json!({"outcome": "applied", "version": 2, "from": "g1"})
    );
    let refused = CommandOutcome::Refused { reason: "no version 9".into() };
    let wire = serde_json::to_value(&refused).unwrap();
    assert_eq!(wire, json!({"outcome": "refused", "reason": "no version 9"}));
    assert_eq!(serde_json::from_value::<CommandOutcome>(wire).unwrap(), refused);
}

#[test]
fn a_commands_origin_is_its_sender_and_its_message() {
    let message = Message::new(
        MessageId::from_u128(7),
        Address::System,
        crate::AgentId::new("ooda-1"),
        MessageKind::OperatorCommand,
        json!({"command": "rollback", "version": 1}),
        Timestamp(1),
    );
    let origin = CommandOrigin::of(&message);
    assert_eq!(origin, CommandOrigin { from: Address::System, message: MessageId::from_u128(7) });
}
