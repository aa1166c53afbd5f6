//! The operator inbox: request files applied through governance, audited, answered.

#![allow(clippy::unwrap_used, clippy::expect_used, reason = "tests")]

use agent_core::{AuditEvent, AuditLog, InMemoryAuditLog, TokioClock};
use agent_state::{AgentId, Decision, DecisionId, DecisionStatus, Timestamp};
use governance::{Governance, InMemoryGovernance};

use super::*;

fn plan(n: u128) -> Decision {
    Decision::propose(
        DecisionId::from_u128(n),
        AgentId::new("top-a"),
        serde_json::json!({"plan": n}),
        vec![AgentId::new("top-b")],
        Timestamp(0),
    )
    .unwrap()
    .with_human_approval(vec!["alice".into()])
    .unwrap()
}

fn drop_request(dir: &Path, id: &str, request: OperatorRequest, refused: Option<&str>) {
    let envelope = Envelope { id: id.into(), at: 1, request, refused: refused.map(str::to_owned) };
    deliver(dir, &envelope).map_err(|_| "deliver").unwrap();
}

fn done(dir: &Path, id: &str) -> Done {
    let bytes = std::fs::read(dir.join(REQUESTS_DIR).join(format!("{id}.done.json"))).unwrap();
    serde_json::from_slice(&bytes).unwrap()
}

#[tokio::test]
async fn requests_are_applied_as_the_human_audited_answered_and_removed() {
    let tmp = tempfile::tempdir().unwrap();
    let gov = InMemoryGovernance::new();
    let audit = InMemoryAuditLog::new();
    let clock = TokioClock::new();
    for n in 1..=3 {
        gov.submit(plan(n)).await.unwrap();
    }
    let (one, two, three) =
        (DecisionId::from_u128(1), DecisionId::from_u128(2), DecisionId::from_u128(3));
    drop_request(
        tmp.path(),
        "1-a",
        OperatorRequest::Approve { decision: one, human: "alice".into() },
        None,
    );
    drop_request(
        tmp.path(),
        "2-a",
        OperatorRequest::Veto { decision: two, human: "alice".into(), reason: "not now".into() },
        None,
    );
    drop_request(
        tmp.path(),
        "3-a",
        OperatorRequest::Approve { decision: three, human: "mallory".into() },
        None,
    );
    drop_request(
        tmp.path(),
        "4-a",
        OperatorRequest::Approve { decision: three, human: "alice".into() },
        Some("refused by the command"),
    );
    std::fs::write(tmp.path().join(REQUESTS_DIR).join("5-a.json"), b"{not json").unwrap();
    assert_eq!(
        pass(tmp.path(), &gov, &message_bus::InMemoryBus::new(), &audit, &clock).await.unwrap(),
        5
    );

    let d1 = gov.get(one).await.unwrap().unwrap();
    assert_eq!(d1.status, DecisionStatus::Pending, "top-b has not signed yet");
    assert!(d1.has_signed(&AgentId::human("alice").unwrap()) && !d1.needs_human());
    assert_eq!(done(tmp.path(), "1-a").outcome, "signed");
    assert_eq!(gov.get(two).await.unwrap().unwrap().status, DecisionStatus::Vetoed);
    assert_eq!(done(tmp.path(), "2-a").outcome, "vetoed");
    let refused = done(tmp.path(), "3-a");
    assert_eq!(refused.outcome, "refused");
    assert!(refused.error.unwrap().contains("not a required signer"));
    assert_eq!(gov.get(three).await.unwrap().unwrap(), plan(3), "refusals change nothing");
    assert_eq!(done(tmp.path(), "4-a").error.as_deref(), Some("refused by the command"));
    assert!(done(tmp.path(), "5-a").error.unwrap().contains("not a request"));

    let records = audit.records(None).await.unwrap();
    let outcomes: Vec<(String, String)> = records
        .iter()
        .filter_map(|r| match &r.event {
            AuditEvent::Operator { outcome, .. } => Some((r.agent.to_string(), outcome.clone())),
            _ => None,
        })
        .collect();
    assert_eq!(
        outcomes,
        [
            ("human:alice".to_owned(), "signed".to_owned()),
            ("human:alice".into(), "vetoed".into()),
            ("human:mallory".into(), "refused".into()),
            ("human:alice".into(), "refused".into()),
            ("human:?".into(), "refused".into()),
        ]
    );
    // Every request was taken: a second pass finds nothing.
    assert_eq!(
        pass(tmp.path(), &gov, &message_bus::InMemoryBus::new(), &audit, &clock).await.unwrap(),
        0
    );
}

#[tokio::test]
async fn a_pass_takes_a_bounded_number_of_requests_oldest_first() {
    let tmp = tempfile::tempdir().unwrap();
    let gov = InMemoryGovernance::new();
    let audit = InMemoryAuditLog::new();
    let clock = TokioClock::new();
    for i in 0..(MAX_PER_PASS + 3) {
        let request =
            OperatorRequest::Approve { decision: DecisionId::from_u128(9), human: "alice".into() };
        drop_request(tmp.path(), &format!("{i:04}"), request, None);
    }
    assert_eq!(
        pass(tmp.path(), &gov, &message_bus::InMemoryBus::new(), &audit, &clock).await.unwrap(),
        MAX_PER_PASS
    );
    assert!(done(tmp.path(), "0000").error.unwrap().contains("no decision"));
    assert!(tmp.path().join(REQUESTS_DIR).join(format!("{:04}.json", MAX_PER_PASS)).is_file());
    assert_eq!(
        pass(tmp.path(), &gov, &message_bus::InMemoryBus::new(), &audit, &clock).await.unwrap(),
        3
    );
}

#[test]
fn the_request_format_is_tagged_and_stable() {
    let request = OperatorRequest::Veto {
        decision: DecisionId::from_u128(1),
        human: "alice".into(),
        reason: "no".into(),
    };
    let json = serde_json::to_value(&request).unwrap();
    assert_eq!(json["request"], "veto");
    assert_eq!(json["human"], "alice");
    assert_eq!(describe(&json), format!("veto decision {} (\"no\")", DecisionId::from_u128(1)));
    let back: OperatorRequest = serde_json::from_value(json).unwrap();
    assert_eq!(back, request);
}
