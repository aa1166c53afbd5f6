//! A team's event stream: a subscriber sees every stored audit record (transitions, the
//! decision, tool calls) as it happens and in order; a subscriber that never reads slows no
//! agent, is told what it lost, and the audit log still has every record.

use std::time::Duration;

use agent_core::{
    AuditEvent, AuditRecord, EventHub, EventStream, Received, TeamEvent, check_transition_chain,
    verify_chain,
};
use agent_pool::Team;
use agent_state::{AgentStatus, TaskOutcome};

use crate::support::*;

/// Everything waiting on `stream`, without waiting.
fn drain(stream: &mut EventStream) -> Vec<Received> {
    std::iter::from_fn(|| stream.try_next()).collect()
}

/// The audit records among `received`; panics on a lag or a closed hub.
fn audit_records(received: &[Received]) -> Vec<AuditRecord> {
    received
        .iter()
        .filter_map(|r| match r {
            Received::Event(event) => match &**event {
                TeamEvent::Audit(record) => Some(record.clone()),
                TeamEvent::Run { .. } | TeamEvent::Tokens(_) => None,
            },
            other => panic!("the stream lost events or closed: {other:?}"),
        })
        .collect()
}

/// Position of the first record in `records` matching `what`.
fn position(records: &[AuditRecord], what: impl Fn(&AuditRecord) -> bool) -> usize {
    records.iter().position(what).expect("no such record")
}

fn tool_call(r: &AuditRecord, name: &str, path_or_command: &str) -> bool {
    matches!(&r.event, AuditEvent::ToolCall { tool, args, success: true, .. }
        if tool == name && args.to_string().contains(path_or_command))
}

#[tokio::test(start_paused = true)]
async fn a_subscriber_sees_the_transitions_the_decision_and_the_tool_calls_in_order() {
    let dir = tempfile::tempdir().unwrap();
    let services = services(dir.path());
    // Subscribed before the start: the agents' creation is on the stream too.
    let mut from_start = services.events.subscribe();
    let team = Team::start(standard_team(), services.clone()).await.unwrap();
    let mut from_submit = team.events();
    assert!(
        audit_records(&drain(&mut from_start)).iter().all(|r| r.transition().is_some()),
        "only the agents' creation so far"
    );

    team.submit(hello_task("task-1")).await.unwrap();
    let outcome = team.wait("task-1").await;
    assert!(matches!(outcome, TaskOutcome::Succeeded { .. }), "{outcome:?}");
    team.shutdown().await.unwrap();

    let stored = services.audit.records(None).await.unwrap();
    let seen = audit_records(&drain(&mut from_submit));
    // Each record once, as stored (the tests run on one thread: appends do not overlap, so
    // the stream is in sequence order), from the first record after the subscription on.
    let first = usize::try_from(seen[0].seq).unwrap();
    assert!(first > 0, "the creation records came before `Team::events`");
    assert_eq!(seen, stored[first..]);
    assert_eq!(verify_chain(&stored), Ok(stored.len() as u64));

    // The decision: proposed, then signed until approved, before any step runs.
    let actions: Vec<&str> = seen
        .iter()
        .filter_map(|r| match &r.event {
            AuditEvent::Decision { action, .. } => Some(action.as_str()),
            _ => None,
        })
        .collect();
    assert_eq!(actions.first(), Some(&"proposed"), "{actions:?}");
    assert_eq!(actions.last(), Some(&"approved"), "{actions:?}");
    let approved = position(
        &seen,
        |r| matches!(&r.event, AuditEvent::Decision { action, .. } if action == "approved"),
    );

    // The tool calls: the writes after the approval, the count after its `after` step.
    let hello = position(&seen, |r| tool_call(r, "write_file", "hello.txt"));
    let notes = position(&seen, |r| tool_call(r, "write_file", "docs/notes.md"));
    let count = position(&seen, |r| tool_call(r, "shell", "wc -c"));
    assert!(approved < hello && approved < notes, "a step ran before the plan was approved");
    assert!(hello < count, "`count` runs after `write-hello`");
    let calls = seen.iter().filter(|r| matches!(r.event, AuditEvent::ToolCall { .. })).count();
    assert_eq!(calls, 3);

    // The executor of `write-hello`: to work before its tool call, back to idle after it.
    let executor = seen[hello].agent.clone();
    let moves: Vec<(usize, AgentStatus)> = seen
        .iter()
        .enumerate()
        .filter(|(_, r)| r.agent == executor)
        .filter_map(|(i, r)| r.transition().map(|t| (i, t.to)))
        .collect();
    assert!(moves.iter().any(|&(i, to)| i < hello && to == AgentStatus::Working), "{moves:?}");
    assert!(moves.iter().any(|&(i, to)| i > hello && to == AgentStatus::Idle), "{moves:?}");
    assert_eq!(moves.last().map(|m| m.1), Some(AgentStatus::Terminated));

    // The subscriber from before the start saw the whole log.
    assert_eq!(audit_records(&drain(&mut from_start)), stored[first..]);
}

#[tokio::test(start_paused = true)]
async fn a_subscriber_that_never_reads_slows_nothing_and_the_log_keeps_every_record() {
    let dir = tempfile::tempdir().unwrap();
    let mut services = services(dir.path());
    services.events = EventHub::new(1);
    let mut never_reads = services.events.subscribe();
    let team = Team::start(standard_team(), services.clone()).await.unwrap();

    team.submit(hello_task("task-1")).await.unwrap();
    let outcome = tokio::time::timeout(Duration::from_secs(3600), team.wait("task-1"))
        .await
        .expect("the team stalled behind a subscriber that does not read");
    assert!(matches!(outcome, TaskOutcome::Succeeded { .. }), "{outcome:?}");
    team.shutdown().await.unwrap();

    // The store is lossless: a whole chain, every agent terminated, every tool call there.
    let stored = services.audit.records(None).await.unwrap();
    assert_eq!(verify_chain(&stored), Ok(stored.len() as u64));
    let finals = check_transition_chain(&stored).unwrap();
    assert_eq!(finals.len(), 9);
    assert!(finals.iter().all(|(_, s)| *s == AgentStatus::Terminated));
    let calls = stored.iter().filter(|r| matches!(r.event, AuditEvent::ToolCall { .. })).count();
    assert_eq!(calls, 3);

    // The stream is not: it kept the last record and says how many it dropped before it.
    let n = u64::try_from(stored.len()).unwrap();
    assert_eq!(never_reads.next().await, Received::Lagged(n - 1));
    let last = never_reads.next().await;
    assert_eq!(last, Received::Event(TeamEvent::Audit(stored.last().unwrap().clone()).into()));
    assert_eq!(never_reads.try_next(), None);
}

#[tokio::test(start_paused = true)]
async fn a_resumed_team_publishes_each_new_record_once() {
    let dir = tempfile::tempdir().unwrap();
    let bus = std::sync::Arc::new(message_bus::InMemoryBus::new());
    let mut services = services(dir.path());
    services.bus = bus.clone();
    let team = Team::start(standard_team(), services.clone()).await.unwrap();
    // The dropped team's turns may still be running when the resumed one starts (a test cannot
    // kill them as a crash would): every step is declared idempotent, so a call they cut is run
    // again instead of ending the task as interrupted, which is not what this test is about.
    let mut task = hello_task("task-1");
    for step in &mut task.steps {
        step.idempotent = true;
    }
    team.submit(task).await.unwrap();
    // Stop it abruptly once the plan is proposed.
    let proposed = |records: &[AuditRecord]| {
        records.iter().any(|r| matches!(r.event, AuditEvent::Decision { .. }))
    };
    while !proposed(&services.audit.records(None).await.unwrap()) {
        tokio::task::yield_now().await;
    }
    assert!(team.outcome("task-1").is_none(), "the task finished before the stop");
    drop(team);
    bus.restart();
    let before = services.audit.records(None).await.unwrap().len();

    let mut stream = services.events.subscribe();
    let team = Team::resume(standard_team(), services.clone()).await.unwrap();
    let outcome = team.wait("task-1").await;
    assert!(matches!(outcome, TaskOutcome::Succeeded { .. }), "{outcome:?}");
    team.shutdown().await.unwrap();

    let stored = services.audit.records(None).await.unwrap();
    assert!(stored.len() > before);
    assert_eq!(audit_records(&drain(&mut stream)), stored[before..]);
}
