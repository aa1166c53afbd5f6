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

/// Executors configured without `tool_call` are refused at the call: a typed, audited refusal,
/// and the file is never written; the team reports the task as failed instead of pretending.
#[tokio::test(start_paused = true)]
async fn an_executor_without_tool_call_is_refused_at_the_call_and_writes_nothing() {
    use agent_state::Capability;
    let dir = tempfile::tempdir().unwrap();
    let services = services(dir.path());
    let mut spec = standard_team();
    let limited =
        [Capability::Plan, Capability::Execute, Capability::Reflect, Capability::Coordinate];
    for agent in &mut spec.agents {
        if agent.config.id.as_str().starts_with("bottom-d") {
            agent.config = agent.config.clone().with_capabilities(limited);
        }
    }
    let team = Team::start(spec, services.clone()).await.unwrap();

    team.submit(hello_task("task-1")).await.unwrap();
    let outcome = team.wait("task-1").await;

    assert!(!matches!(outcome, TaskOutcome::Succeeded { .. }), "{outcome:?}");
    assert!(!dir.path().join("hello.txt").exists());
    assert!(!dir.path().join("docs/notes.md").exists());
    let records = services.audit.records(None).await.unwrap();
    let limited_agent = |r: &agent_core::AuditRecord| r.agent.as_str().starts_with("bottom-d");
    let denied: Vec<(&str, &str)> = records
        .iter()
        .filter(|r| limited_agent(r))
        .filter_map(|r| match &r.event {
            AuditEvent::Denied { action, error } => Some((action.as_str(), error.as_str())),
            _ => None,
        })
        .collect();
    assert!(!denied.is_empty(), "no refusal was audited");
    for (action, error) in denied {
        assert_eq!(action, "call_tool write_file");
        assert!(error.ends_with("it lacks the `tool_call` capability"), "{error}");
    }
    assert!(
        !records.iter().any(|r| limited_agent(r) && matches!(r.event, AuditEvent::ToolCall { .. })),
        "a refused executor ran a tool"
    );
    team.shutdown().await.unwrap();
}

#[tokio::test(start_paused = true)]
async fn mail_that_arrives_after_the_task_closed_is_answered_before_the_team_shuts_down() {
    use agent_state::{Address, AgentId, Message, MessageKind, Timestamp};
    let dir = tempfile::tempdir().unwrap();
    let services = services(dir.path());
    let team = Team::start(standard_team(), services.clone()).await.unwrap();
    team.submit(hello_task("late")).await.unwrap();
    assert!(team.wait("late").await.is_success());
    // A late message, as a resumed executor's second report of a step would be.
    let late = Message::new(
        services.clock.message_id(),
        Address::System,
        AgentId::new("mid-docs"),
        MessageKind::Warning,
        serde_json::json!({"about": "bottom-d1", "reason": "a late note"}),
        Timestamp(1_700_000_100_000),
    );
    services.bus.send(late).await.unwrap();
    let inbox = Address::Agent(AgentId::new("mid-docs"));
    assert_eq!(services.bus.pending(&inbox).await.unwrap(), 1);
    // What `shutdown` does first: the agents answer what waits for them.
    team.quiesce(std::time::Duration::from_secs(2)).await;
    assert_eq!(services.bus.pending(&inbox).await.unwrap(), 0, "the late message was answered");
    team.shutdown().await.unwrap();
}

/// A team larger than one shutdown batch (`Team::shutdown` shuts agents down in batches of
/// 1 024) ends with every agent terminated along its chain, unregistered, and its saved record
/// anchored at its last audit record, its `terminated`.
#[tokio::test(start_paused = true)]
async fn a_team_larger_than_a_shutdown_batch_ends_every_agent_terminated_and_anchored() {
    let dir = tempfile::tempdir().unwrap();
    let services = services(dir.path());
    let mut agents = vec![top("top-a", "power_a", 1.0)];
    for lead in ["mid-a", "mid-b"] {
        let mut spec = mid(lead, lead, "top-a");
        if let agent_pool::RoleSpec::Mid(m) = &mut spec.role {
            m.max_subordinates = 700;
        }
        agents.push(spec);
        agents.extend((0..700).map(|i| bottom(&format!("{lead}-x{i}"), lead, &["read_file"])));
    }
    let count = agents.len();
    let mut spec = agent_pool::TeamSpec::new(agents);
    spec.max_agents = count;
    let team = Team::start(spec, services.clone()).await.unwrap();

    team.shutdown().await.unwrap();

    let records = services.audit.records(None).await.unwrap();
    let finals = check_transition_chain(&records).unwrap();
    assert_eq!(finals.len(), count);
    assert!(finals.iter().all(|(_, s)| *s == AgentStatus::Terminated));
    assert_eq!(services.bus.registered().await.unwrap(), Vec::<agent_state::AgentId>::new());
    let mut last = std::collections::HashMap::new();
    for record in &records {
        last.insert(record.agent.clone(), agent_core::AuditAnchor::of(record));
    }
    let saved = services.state.agents().await.unwrap();
    assert_eq!(saved.len(), count);
    for record in saved {
        assert_eq!(record.audit_head, last.get(&record.id).copied(), "{}", record.id);
    }
}
