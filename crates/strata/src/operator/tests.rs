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

/// A team whose only human is alice and whose only OODA agent is `ooda-1`.
fn alice() -> Authority {
    Authority { humans: vec!["alice".into()], oodas: vec![AgentId::new("ooda-1")] }
}

/// The inbox of `dir` with these services.
fn inbox_of<'a>(
    dir: &'a Path,
    authority: &'a Authority,
    governance: &'a dyn Governance,
    bus: &'a dyn MessageBus,
    audit: &'a dyn AuditLog,
    clock: &'a dyn Clock,
) -> Inbox<'a> {
    Inbox { dir, authority, governance, bus, audit, clock }
}

fn drop_request(dir: &Path, id: &str, request: OperatorRequest, refused: Option<&str>) {
    let envelope = Envelope { id: id.into(), at: 1, request, refused: refused.map(str::to_owned) };
    deliver(dir, &envelope).map_err(|_| "deliver").unwrap();
}

/// One pass over `dir`'s requests as alice's team, on a bus of its own, no cancel awaited:
/// how many requests it took.
async fn pass_once(
    dir: &Path,
    gov: &InMemoryGovernance,
    audit: &InMemoryAuditLog,
    clock: &TokioClock,
) -> usize {
    let bus = message_bus::InMemoryBus::new();
    pass(&inbox_of(dir, &alice(), gov, &bus, audit, clock), &Cancel::default()).await.unwrap()
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
    assert_eq!(pass_once(tmp.path(), &gov, &audit, &clock).await, 5);

    let d1 = gov.get(one).await.unwrap().unwrap();
    assert_eq!(d1.status, DecisionStatus::Pending, "top-b has not signed yet");
    assert!(d1.has_signed(&AgentId::human("alice").unwrap()) && !d1.needs_human());
    assert_eq!(done(tmp.path(), "1-a").outcome, "signed");
    assert_eq!(gov.get(two).await.unwrap().unwrap().status, DecisionStatus::Vetoed);
    assert_eq!(done(tmp.path(), "2-a").outcome, "vetoed");
    let refused = done(tmp.path(), "3-a");
    assert_eq!(refused.outcome, "refused");
    assert!(refused.error.unwrap().contains("`mallory` may not operate run"));
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
    assert_eq!(pass_once(tmp.path(), &gov, &audit, &clock).await, 0);
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
    assert_eq!(pass_once(tmp.path(), &gov, &audit, &clock).await, MAX_PER_PASS);
    assert!(done(tmp.path(), "0000").error.unwrap().contains("no decision"));
    assert!(tmp.path().join(REQUESTS_DIR).join(format!("{:04}.json", MAX_PER_PASS)).is_file());
    assert_eq!(pass_once(tmp.path(), &gov, &audit, &clock).await, 3);
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

/// A request file written by hand (no `strata` command checked it), signed by a name that is
/// not one of the run's `[approvals] humans`, of each kind: the running process refuses and
/// audits every one, and applies none.
#[tokio::test]
async fn forged_requests_of_every_kind_are_refused_by_the_running_process() {
    let tmp = tempfile::tempdir().unwrap();
    let gov = InMemoryGovernance::new();
    let audit = InMemoryAuditLog::new();
    let bus = message_bus::InMemoryBus::new();
    let clock = TokioClock::new();
    let ooda = AgentId::new("ooda-1");
    bus.register(&ooda).await.unwrap();
    // A decision that (wrongly) names mallory as a required human: only the team file says
    // who may sign for humans.
    let decision = Decision::propose(
        DecisionId::from_u128(1),
        AgentId::new("top-a"),
        serde_json::json!({"plan": 1}),
        vec![AgentId::new("top-b")],
        Timestamp(0),
    )
    .unwrap()
    .with_human_approval(vec!["mallory".into()])
    .unwrap();
    gov.submit(decision.clone()).await.unwrap();
    let one = DecisionId::from_u128(1);
    let genome = agent_state::evolution::Genome::genesis(
        agent_state::evolution::GenomeConfig::new("evil"),
        Vec::new(),
    )
    .unwrap();
    let forged = [
        serde_json::json!({"id": "1-a", "at": 1,
            "request": {"request": "approve", "decision": one, "human": "mallory"}}),
        serde_json::json!({"id": "2-a", "at": 1,
            "request": {"request": "veto", "decision": one, "human": "mallory", "reason": "x"}}),
        serde_json::json!({"id": "3-a", "at": 1,
            "request": {"request": "rollback", "agent": "ooda-1", "version": 1, "human": "mallory"}}),
        serde_json::json!({"id": "4-a", "at": 1,
            "request": {"request": "adopt", "agent": "ooda-1", "genome": genome, "human": "mallory"}}),
        // Not a name a human can have.
        serde_json::json!({"id": "5-a", "at": 1,
            "request": {"request": "rollback", "agent": "ooda-1", "version": 1, "human": "../x"}}),
        // One of the humans, but the rules the command applies still hold.
        serde_json::json!({"id": "6-a", "at": 1,
            "request": {"request": "rollback", "agent": "ooda-1", "version": 0, "human": "alice"}}),
        serde_json::json!({"id": "7-a", "at": 1,
            "request": {"request": "rollback", "agent": "top-a", "version": 1, "human": "alice"}}),
    ];
    let inbox = tmp.path().join(REQUESTS_DIR);
    std::fs::create_dir_all(&inbox).unwrap();
    for request in &forged {
        let id = request["id"].as_str().unwrap();
        std::fs::write(inbox.join(format!("{id}.json")), request.to_string()).unwrap();
    }
    assert_eq!(
        pass(&inbox_of(tmp.path(), &alice(), &gov, &bus, &audit, &clock), &Cancel::default())
            .await
            .unwrap(),
        7
    );

    for (id, why) in [
        ("1-a", "`mallory` may not operate run"),
        ("2-a", "`mallory` may not operate run"),
        ("3-a", "`mallory` may not operate run"),
        ("4-a", "`mallory` may not operate run"),
        ("5-a", "names no human"),
        ("6-a", "versions start at 1"),
        ("7-a", "`top-a` is not an OODA agent"),
    ] {
        let done = done(tmp.path(), id);
        assert_eq!(done.outcome, "refused", "{id}");
        assert!(done.error.as_deref().unwrap_or("").contains(why), "{id}: {done:?}");
    }
    assert_eq!(gov.get(one).await.unwrap().unwrap(), decision, "nothing signed or vetoed");
    assert_eq!(
        bus.pending(&Address::Agent(ooda)).await.unwrap(),
        0,
        "no command reached the agent"
    );
    let refused = audit
        .records(None)
        .await
        .unwrap()
        .iter()
        .filter(
            |r| matches!(&r.event, AuditEvent::Operator { outcome, .. } if outcome == "refused"),
        )
        .count();
    assert_eq!(refused, 7, "every refusal is audited");
}

/// A FIFO, a symlink (to a request elsewhere) and a directory in `requests/` are skipped, not
/// waited on nor followed; the regular request beside them is applied.
#[tokio::test]
async fn entries_that_are_not_regular_files_are_skipped_without_blocking() {
    let tmp = tempfile::tempdir().unwrap();
    let gov = InMemoryGovernance::new();
    let audit = InMemoryAuditLog::new();
    let bus = message_bus::InMemoryBus::new();
    let clock = TokioClock::new();
    gov.submit(plan(1)).await.unwrap();
    let inbox = tmp.path().join(REQUESTS_DIR);
    std::fs::create_dir_all(&inbox).unwrap();
    let fifo = inbox.join("0-fifo.json");
    let made = std::process::Command::new("mkfifo").arg(&fifo).status().unwrap();
    assert!(made.success());
    let elsewhere = tmp.path().join("elsewhere.json");
    let request =
        OperatorRequest::Approve { decision: DecisionId::from_u128(1), human: "alice".into() };
    let envelope = Envelope { id: "0-link".into(), at: 1, request: request.clone(), refused: None };
    std::fs::write(&elsewhere, serde_json::to_vec(&envelope).unwrap()).unwrap();
    std::os::unix::fs::symlink(&elsewhere, inbox.join("0-link.json")).unwrap();
    std::fs::create_dir(inbox.join("0-dir.json")).unwrap();
    drop_request(tmp.path(), "1-a", request, None);

    let taken = tokio::time::timeout(
        std::time::Duration::from_secs(5),
        pass(&inbox_of(tmp.path(), &alice(), &gov, &bus, &audit, &clock), &Cancel::default()),
    )
    .await
    .expect("a pass does not block on a FIFO")
    .unwrap();
    assert_eq!(taken, 1, "only the regular file is a request");
    assert_eq!(done(tmp.path(), "1-a").outcome, "signed");
    assert!(!inbox.join("0-link.done.json").exists(), "the link was not followed");
    assert!(fifo.exists() && inbox.join("0-dir.json").is_dir(), "skipped, left alone");
    // A file swapped for a FIFO after it was listed is not waited on either.
    assert_eq!(
        read_request(&fifo).unwrap_err(),
        "it is not a regular file",
        "opened without blocking"
    );
    assert!(read_request(&inbox.join("0-link.json")).unwrap_err().contains("cannot open"));
}

#[test]
fn a_decision_is_named_by_a_unique_prefix_and_an_ambiguous_one_names_the_candidates() {
    let id = |s: &str| DecisionId::from_uuid(uuid::Uuid::parse_str(s).unwrap());
    let ids = [
        id("1fca0433-0000-4000-8000-000000000001"),
        id("1fca0433-0000-4000-8000-000000000002"),
        id("2b000000-0000-4000-8000-000000000003"),
    ];
    assert_eq!(by_prefix("2b000000", ids.into_iter()), Ok(ids[2]));
    assert_eq!(by_prefix("1fca0433-0000-4000-8000-000000000002", ids.into_iter()), Ok(ids[1]));
    let ambiguous = by_prefix("1fca0433", ids.into_iter()).unwrap_err();
    assert!(ambiguous.starts_with("`1fca0433` starts 2 decisions"), "{ambiguous}");
    assert!(ambiguous.contains(&ids[0].to_string()), "{ambiguous}");
    assert!(ambiguous.contains(&ids[1].to_string()), "{ambiguous}");
    let none = by_prefix("deadbeef", ids.into_iter()).unwrap_err();
    assert_eq!(none, "no decision starts with `deadbeef`");
}

/// A cancel written while this process runs the run is applied: audited under the name
/// (who need not be one of the humans), answered, and the run told; one written before the
/// process took the run was meant for a run that has ended since, and is refused, the run
/// not told. A name that names no human is refused.
#[tokio::test]
async fn a_cancel_stops_the_run_that_was_running_when_it_was_written_only() {
    let tmp = tempfile::tempdir().unwrap();
    let gov = InMemoryGovernance::new();
    let audit = InMemoryAuditLog::new();
    let clock = TokioClock::new();
    let bus = message_bus::InMemoryBus::new();
    let cancel = Cancel { since_ms: 10, ..Cancel::default() };
    let stale = Envelope {
        id: "0001".into(),
        at: 9,
        request: OperatorRequest::Cancel { human: "dashboard".into() },
        refused: None,
    };
    deliver(tmp.path(), &stale).map_err(|_| "deliver").unwrap();
    assert_eq!(
        pass(&inbox_of(tmp.path(), &alice(), &gov, &bus, &audit, &clock), &cancel).await.unwrap(),
        1
    );
    assert!(done(tmp.path(), "0001").error.unwrap().contains("no longer running"));
    let told = tokio::time::timeout(std::time::Duration::from_millis(50), cancel.asked.notified());
    assert!(told.await.is_err(), "a stale cancel told the run to stop");

    for (id, human) in [("0002", "bad name!"), ("0003", "dashboard")] {
        let envelope = Envelope {
            id: id.into(),
            at: 11,
            request: OperatorRequest::Cancel { human: human.into() },
            refused: None,
        };
        deliver(tmp.path(), &envelope).map_err(|_| "deliver").unwrap();
    }
    assert_eq!(
        pass(&inbox_of(tmp.path(), &alice(), &gov, &bus, &audit, &clock), &cancel).await.unwrap(),
        2
    );
    assert!(done(tmp.path(), "0002").error.unwrap().contains("names no human"));
    assert_eq!(
        done(tmp.path(), "0003"),
        Done { id: "0003".into(), outcome: "cancelled".into(), error: None }
    );
    let told = tokio::time::timeout(std::time::Duration::from_secs(5), cancel.asked.notified());
    assert!(told.await.is_ok(), "the run was not told to stop");
    let records = audit.records(None).await.unwrap();
    let last = records.last().unwrap();
    assert_eq!(last.agent, AgentId::new("human:dashboard"));
    assert!(
        matches!(&last.event, AuditEvent::Operator { outcome, error: None, .. } if outcome == "cancelled"),
        "{last:?}"
    );
}
