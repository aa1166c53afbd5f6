//! A team takes a task from proposal to closed outcome.

use agent_core::{AuditEvent, check_transition_chain};
use agent_pool::Team;
use agent_state::{AgentStatus, DecisionStatus, TaskOutcome};

use crate::support::*;

#[tokio::test(start_paused = true)]
async fn a_full_team_completes_a_plan_that_writes_files_and_runs_a_shell_command() {
    let dir = tempfile::tempdir().unwrap();
    let services = services(dir.path());
    let team = Team::start(standard_team(), services.clone()).await.unwrap();

    team.submit(hello_task("task-1")).await.unwrap();
    let outcome = team.wait("task-1").await;
    let TaskOutcome::Succeeded { results, .. } = &outcome else {
        panic!("task failed: {outcome:?}")
    };
    assert_eq!(
        results.iter().map(|r| r.step_id.as_str()).collect::<Vec<_>>(),
        ["write-hello", "write-notes", "count"]
    );

    assert_eq!(std::fs::read_to_string(dir.path().join("hello.txt")).unwrap(), "hello, strata\n");
    assert_eq!(std::fs::read_to_string(dir.path().join("docs/notes.md")).unwrap(), "# Notes\n");
    assert_eq!(std::fs::read_to_string(dir.path().join("size.txt")).unwrap().trim(), "14");

    let decisions = services.governance.list().await.unwrap();
    assert_eq!(decisions.len(), 1);
    assert_eq!(decisions[0].status, DecisionStatus::Approved);
    assert_eq!(decisions[0].signatures.len(), 2, "the two other powers signed");

    team.shutdown().await.unwrap();
    for line in team.summary().await {
        assert_eq!(line.status, AgentStatus::Terminated, "{} is not terminated", line.id);
    }
    let records = services.audit.records(None).await.unwrap();
    let finals = check_transition_chain(&records).unwrap();
    assert_eq!(finals.len(), 9);
    assert!(finals.iter().all(|(_, s)| *s == AgentStatus::Terminated));
    let tool_calls: Vec<_> =
        records.iter().filter(|r| matches!(r.event, AuditEvent::ToolCall { .. })).collect();
    assert_eq!(tool_calls.len(), 3, "{tool_calls:#?}");
}
