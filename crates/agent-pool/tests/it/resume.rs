//! A team stopped abruptly at any cycle resumes from what its backends stored and finishes,
//! without running a side effect twice.

use std::time::Duration;

use agent_core::{AuditEvent, check_transition_chain};
use agent_pool::Team;
use agent_state::{
    Address, AgentStatus, Message, MessageId, MessageKind, ProgressReport, ProgressStatus, Task,
    Timestamp,
};
use message_bus::{InMemoryBus, MessageBus};

use crate::support::*;

/// A plan whose shell steps append to a log, so a step that ran twice shows as a repeated line.
fn appending_task() -> Task {
    let append = |id: &str, domain: &str, line: &str, after: &[&str]| {
        let command = format!("echo {line} >> log.txt");
        step(id, domain, "shell", serde_json::json!({ "command": command }))
            .with_after(after.iter().copied())
    };
    Task {
        id: "append".into(),
        goal: "append four lines in order".into(),
        steps: vec![
            append("one", "docs", "one", &[]),
            append("two", "build", "two", &["one"]),
            append("three", "docs", "three", &["two"]),
            append("four", "build", "four", &["three"]),
        ],
    }
}

#[tokio::test(start_paused = true)]
async fn a_team_killed_at_any_cycle_resumes_and_runs_every_side_effect_once() {
    for kill_after_cycles in 0..14u64 {
        let dir = tempfile::tempdir().unwrap();
        let bus = std::sync::Arc::new(InMemoryBus::new());
        let mut services = services(dir.path());
        services.bus = bus.clone();

        let team = Team::start(standard_team(), services.clone()).await.unwrap();
        team.submit(appending_task()).await.unwrap();
        tokio::time::sleep(
            Duration::from_secs(4) * u32::try_from(kill_after_cycles).unwrap()
                + Duration::from_millis(1),
        )
        .await;
        let finished_before_kill = team.outcome("append").is_some();
        drop(team); // abrupt: nothing is shut down
        bus.restart(); // what a durable bus does on reopen: in-flight messages are pending again

        let team = Team::resume(standard_team(), services.clone()).await.unwrap();
        let Ok(outcome) =
            tokio::time::timeout(Duration::from_secs(3600), team.wait("append")).await
        else {
            let mut context = String::new();
            for r in services.audit.records(None).await.unwrap().iter().rev().take(30).rev() {
                context.push_str(&format!("{} {} {:?}\n", r.seq, r.agent, r.event));
            }
            for l in team.summary().await {
                context.push_str(&format!("{} {}\n", l.id, l.status));
            }
            panic!(
                "killed after {kill_after_cycles} cycles: no outcome an hour after resuming\n{context}"
            );
        };
        assert!(outcome.is_success(), "killed after {kill_after_cycles} cycles: {outcome:?}");
        let log = std::fs::read_to_string(dir.path().join("log.txt")).unwrap();
        assert_eq!(
            log, "one\ntwo\nthree\nfour\n",
            "killed after {kill_after_cycles} cycles (finished before: {finished_before_kill})"
        );
        team.shutdown().await.unwrap();

        let records = services.audit.records(None).await.unwrap();
        let finals = check_transition_chain(&records).unwrap();
        assert!(finals.iter().all(|(_, s)| *s == AgentStatus::Terminated), "{finals:?}");
        agent_core::verify_chain(&records).unwrap();
        let runs = records
            .iter()
            .filter(|r| matches!(&r.event, AuditEvent::ToolCall { summary, .. } if !summary.starts_with("recorded result reused")))
            .count();
        assert_eq!(
            runs, 4,
            "each shell step ran exactly once (killed after {kill_after_cycles} cycles)"
        );
    }
}

/// A run killed after its task closed, but before the closing turn acknowledged the message it
/// answered, resumes with the outcome already stored. The resumed team still takes that turn
/// before a shutdown is heeded: the message is acknowledged, not left behind for ever.
#[tokio::test(start_paused = true)]
async fn a_message_left_unacknowledged_when_the_task_closed_is_answered_on_resume() {
    let dir = tempfile::tempdir().unwrap();
    let bus = std::sync::Arc::new(InMemoryBus::new());
    let mut services = services(dir.path());
    services.bus = bus.clone();
    let team = Team::start(standard_team(), services.clone()).await.unwrap();
    team.submit(appending_task()).await.unwrap();
    let outcome = tokio::time::timeout(Duration::from_secs(3600), team.wait("append")).await;
    assert!(outcome.is_ok_and(|o| o.is_success()));
    drop(team); // abrupt: nothing is shut down

    // The mid's last report as the killed process left it: stored on the bus, not yet
    // acknowledged by the top power, whose task it closed.
    let top = Address::Agent("top-a".into());
    let report = ProgressReport {
        task_id: "append".into(),
        status: ProgressStatus::Completed,
        percentage: 100,
        description: "1 of 1 step(s) done".into(),
        results: Vec::new(),
        failure: None,
    };
    bus.send(Message::new(
        MessageId::from_u128(1),
        Address::Agent("mid-build".into()),
        top.clone(),
        MessageKind::ProgressReport,
        serde_json::to_value(&report).unwrap(),
        Timestamp(1_700_000_000_000),
    ))
    .await
    .unwrap();
    bus.restart();

    let team = Team::resume(standard_team(), services.clone()).await.unwrap();
    assert!(team.outcome("append").is_some_and(|o| o.is_success()));
    // What the CLI does on finding the outcome stored: stop (waiting for running turns), then
    // shut down.
    team.stop().await;
    assert_eq!(bus.pending(&top).await.unwrap(), 0, "the top power's inbox is read");
    let again = bus.take(&top, usize::MAX).await.unwrap();
    assert!(again.is_empty(), "acknowledged, not put back: {again:?}");
    team.shutdown().await.unwrap();
}
