//! Peer help in real runs: an executor that cannot finish a subtask (its tool is missing, or its
//! retries run out) offers it to the other executors of its lead, one at a time; a busy one
//! refuses and the next is asked, and when none takes it the lead reassigns it as before; a run
//! killed around a hand-over resumes and runs the step once; a retried goal step hears what a
//! peer knows. Nothing here sends a peer-help message by hand.

use std::sync::Arc;
use std::time::Duration;

use agent_core::testing::FakeTool;
use agent_core::tools::ToolRegistry;
use agent_core::{AuditEvent, AuditRecord, PeerHelpOutcome, PeerHelpRequest};
use agent_pool::{Team, TeamServices, TeamSpec};
use agent_state::{AgentId, AgentStatus, PlanStep, StepTarget, Task, TaskOutcome};
use serde_json::json;

use crate::scenarios::broken_registry;
use crate::support::*;

/// One power, the lead `mid-docs` and its executors `bottom-d1` (whose `write_file` always
/// fails, and who gives up at its first failure), `bottom-d2` (also holding `flaky`) and, if
/// `third`, `bottom-d3`. `flaky` fails its first two calls.
fn team(workspace: &std::path::Path, third: bool) -> (TeamSpec, TeamServices) {
    let mut services = services(workspace);
    let mut tools = ToolRegistry::with_builtins();
    tools.register(Arc::new(FakeTool::flaky("flaky", 2))).unwrap();
    services.tools = Arc::new(tools);
    services.agent_tools.insert(AgentId::new("bottom-d1"), Arc::new(broken_registry()));
    let mut d1 = bottom("bottom-d1", "mid-docs", &["write_file"]);
    d1.config = d1.config.with_max_retries(0);
    let mut agents = vec![
        top("top-a", "power_a", 1.0),
        mid("mid-docs", "docs", "top-a"),
        d1,
        bottom("bottom-d2", "mid-docs", &["write_file", "flaky", "shell"]),
    ];
    if third {
        agents.push(bottom("bottom-d3", "mid-docs", &["write_file"]));
    }
    let mut spec = TeamSpec::new(agents);
    spec.heartbeat = Duration::from_secs(4);
    (spec, services)
}

fn on(agent: &str, step: PlanStep) -> PlanStep {
    PlanStep { target: StepTarget::Agent(AgentId::new(agent)), ..step }
}

/// `bottom-d2` busy retrying `a-flaky` (placed first) while `bottom-d1` fails `b-write`.
fn busy_task(id: &str) -> Task {
    Task {
        id: id.into(),
        goal: "two steps".into(),
        steps: vec![
            on("bottom-d2", step("a-flaky", "docs", "flaky", json!({}))),
            on(
                "bottom-d1",
                step("b-write", "docs", "write_file", json!({"path": "b.txt", "content": "b\n"})),
            ),
        ],
    }
}

async fn records(services: &TeamServices, agent: &str) -> Vec<AuditRecord> {
    services.audit.records(Some(&AgentId::new(agent))).await.unwrap()
}

/// `agent`'s peer-help records: (peer, step, request, outcome).
async fn help(
    services: &TeamServices,
    agent: &str,
) -> Vec<(String, Option<String>, PeerHelpRequest, PeerHelpOutcome)> {
    records(services, agent)
        .await
        .into_iter()
        .filter_map(|r| match r.event {
            AuditEvent::PeerHelp { peer, step, request, outcome } => {
                Some((peer.to_string(), step, request, outcome))
            }
            _ => None,
        })
        .collect()
}

fn take_over(
    peer: &str,
    step: &str,
    outcome: PeerHelpOutcome,
) -> (String, Option<String>, PeerHelpRequest, PeerHelpOutcome) {
    (peer.into(), Some(step.into()), PeerHelpRequest::TakeOver, outcome)
}

fn busy() -> PeerHelpOutcome {
    PeerHelpOutcome::Refused { reason: "busy".into() }
}

/// Who ran each step of a succeeded task.
fn runners(outcome: &TaskOutcome) -> Vec<(String, String)> {
    let TaskOutcome::Succeeded { results, .. } = outcome else { panic!("{outcome:?}") };
    results.iter().map(|r| (r.step_id.clone(), r.agent.to_string())).collect()
}

#[tokio::test(start_paused = true)]
async fn a_busy_peer_refuses_and_the_next_one_takes_the_subtask() {
    let dir = tempfile::tempdir().unwrap();
    let (spec, services) = team(dir.path(), true);
    let team = Team::start(spec, services.clone()).await.unwrap();

    team.submit(busy_task("task-busy")).await.unwrap();
    let outcome = team.wait("task-busy").await;

    assert_eq!(
        runners(&outcome),
        [("a-flaky".into(), "bottom-d2".into()), ("b-write".into(), "bottom-d3".into())]
    );
    assert_eq!(std::fs::read_to_string(dir.path().join("b.txt")).unwrap(), "b\n");
    let step = "task-busy/b-write";
    assert_eq!(
        help(&services, "bottom-d1").await,
        [
            take_over("bottom-d2", step, PeerHelpOutcome::Asked),
            take_over("bottom-d2", step, busy()),
            take_over("bottom-d3", step, PeerHelpOutcome::Asked),
            take_over("bottom-d3", step, PeerHelpOutcome::HandedOver),
        ]
    );
    assert_eq!(help(&services, "bottom-d2").await, [take_over("bottom-d1", step, busy())]);
    assert_eq!(
        help(&services, "bottom-d3").await,
        [take_over("bottom-d1", step, PeerHelpOutcome::Accepted)]
    );
    let d1 = records(&services, "bottom-d1").await;
    assert!(
        !d1.iter().any(|r| r.transition().is_some_and(|t| t.to == AgentStatus::Failed)),
        "bottom-d1 did not fail: its subtask found a peer"
    );
    team.shutdown().await.unwrap();
}

#[tokio::test(start_paused = true)]
async fn when_every_peer_is_busy_the_lead_reassigns_the_subtask_as_before() {
    let dir = tempfile::tempdir().unwrap();
    let (spec, services) = team(dir.path(), false);
    let team = Team::start(spec, services.clone()).await.unwrap();

    team.submit(busy_task("task-all-busy")).await.unwrap();
    let outcome = team.wait("task-all-busy").await;

    // bottom-d2 refused while busy; bottom-d1 then failed to the lead, which gave the step to
    // bottom-d2 once it had finished its own.
    assert_eq!(
        runners(&outcome),
        [("a-flaky".into(), "bottom-d2".into()), ("b-write".into(), "bottom-d2".into())]
    );
    let step = "task-all-busy/b-write";
    assert_eq!(
        help(&services, "bottom-d1").await,
        [
            take_over("bottom-d2", step, PeerHelpOutcome::Asked),
            take_over("bottom-d2", step, busy())
        ]
    );
    let d1 = records(&services, "bottom-d1").await;
    let errors: Vec<&str> = d1
        .iter()
        .filter_map(|r| match &r.event {
            AuditEvent::Error { error, .. } => Some(error.as_str()),
            _ => None,
        })
        .collect();
    assert_eq!(errors.len(), 1, "{errors:?}");
    assert!(errors[0].ends_with("no peer took it over (bottom-d2: busy)"), "{}", errors[0]);
    assert!(d1.iter().any(|r| r.transition().is_some_and(|t| t.to == AgentStatus::Failed)));
    let lead = records(&services, "mid-docs").await;
    assert!(!lead.iter().any(|r| matches!(r.event, AuditEvent::PeerHelp { .. })));
    let board = services
        .boards
        .read(&agent_state::Actor::System, &agent_state::BoardId::Agent(AgentId::new("mid-docs")))
        .await
        .unwrap()
        .content;
    assert!(board.contains("- reassigned b-write to [bottom-d2] (attempt 2)"), "{board}");
    team.shutdown().await.unwrap();
}

/// A plan may send a step to an executor by name; one without the step's tool offers it to the
/// peer that holds it instead of failing.
#[tokio::test(start_paused = true)]
async fn a_step_sent_to_an_executor_without_its_tool_is_taken_over_by_a_peer_that_has_it() {
    let dir = tempfile::tempdir().unwrap();
    let (spec, services) = team(dir.path(), true);
    let team = Team::start(spec, services.clone()).await.unwrap();
    let task = Task {
        id: "task-tool".into(),
        goal: "count".into(),
        steps: vec![on(
            "bottom-d1",
            step("count", "docs", "shell", json!({"command": "echo counted > count.txt"})),
        )],
    };

    team.submit(task).await.unwrap();
    let outcome = team.wait("task-tool").await;

    assert_eq!(runners(&outcome), [("count".into(), "bottom-d2".into())]);
    let step = "task-tool/count";
    // bottom-d3 lacks `shell` too: it is not asked.
    assert_eq!(
        help(&services, "bottom-d1").await,
        [
            take_over("bottom-d2", step, PeerHelpOutcome::Asked),
            take_over("bottom-d2", step, PeerHelpOutcome::HandedOver),
        ]
    );
    assert!(help(&services, "bottom-d3").await.is_empty());
    let d1 = records(&services, "bottom-d1").await;
    assert!(
        !d1.iter()
            .any(|r| matches!(r.event, AuditEvent::ToolCall { .. } | AuditEvent::Error { .. }))
    );
    team.shutdown().await.unwrap();
}

/// Killed at any cycle while `bottom-d1` retries a step whose `shell` always fails, offers it
/// and `bottom-d2` takes it over, the team resumes and the step's effect happens once.
#[tokio::test(start_paused = true)]
async fn a_team_killed_around_a_hand_over_resumes_and_runs_the_step_once() {
    for kill_after_cycles in 0..6u32 {
        let dir = tempfile::tempdir().unwrap();
        let bus = Arc::new(message_bus::InMemoryBus::new());
        let mut services = services(dir.path());
        services.bus = bus.clone();
        let builtins = ToolRegistry::with_builtins();
        let mut broken = ToolRegistry::new();
        for name in builtins.names().into_iter().filter(|n| *n != "shell") {
            broken.register(builtins.get(name).unwrap()).unwrap();
        }
        broken
            .register(Arc::new(FakeTool::failing("shell", "broken").with_side_effects(true)))
            .unwrap();
        services.agent_tools.insert(AgentId::new("bottom-d1"), Arc::new(broken));
        let task = Task {
            id: "append".into(),
            goal: "append a line".into(),
            steps: vec![on(
                "bottom-d1",
                step("append", "docs", "shell", json!({"command": "echo x >> log.txt"})),
            )],
        };

        let team = Team::start(standard_team(), services.clone()).await.unwrap();
        team.submit(task).await.unwrap();
        tokio::time::sleep(Duration::from_secs(4) * kill_after_cycles + Duration::from_millis(1))
            .await;
        drop(team); // abrupt: nothing is shut down
        bus.restart();
        let team = Team::resume(standard_team(), services.clone()).await.unwrap();
        let outcome = tokio::time::timeout(Duration::from_secs(3600), team.wait("append"))
            .await
            .unwrap_or_else(|_| panic!("killed after {kill_after_cycles} cycles: no outcome"));

        let context = format!("killed after {kill_after_cycles} cycles: {outcome:?}");
        assert_eq!(runners(&outcome), [("append".into(), "bottom-d2".into())], "{context}");
        let log = std::fs::read_to_string(dir.path().join("log.txt")).unwrap();
        assert_eq!(log, "x\n", "{context}");
        let step = "append/append";
        assert_eq!(
            help(&services, "bottom-d2").await,
            [take_over("bottom-d1", step, PeerHelpOutcome::Accepted)],
            "{context}"
        );
        let handed = help(&services, "bottom-d1")
            .await
            .into_iter()
            .filter(|h| h.3 == PeerHelpOutcome::HandedOver)
            .count();
        assert_eq!(handed, 1, "{context}");
        team.shutdown().await.unwrap();
        let records = services.audit.records(None).await.unwrap();
        agent_core::verify_chain(&records).unwrap();
    }
}

/// An executor whose goal step failed asks a peer of its lead for its knowledge before the
/// retry; the peer's board reaches its reasoner, which then succeeds.
#[tokio::test(start_paused = true)]
async fn a_retried_goal_step_hears_what_a_peer_knows() {
    use agent_core::{NextAction, ReasoningRequest, ScriptedAnswer, ScriptedReasoner, ToolCall};
    fn script(request: &ReasoningRequest) -> ScriptedAnswer {
        match request {
            ReasoningRequest::NextAction { history, subtask, .. }
                if subtask.step.tool.is_empty() =>
            {
                let heard = history.iter().any(|r| {
                    r.output.starts_with("bottom-d2 says: shared what it knows")
                        && r.output.contains("notes.txt")
                });
                let finish = |success: bool, summary: &str| {
                    ScriptedAnswer::Action(NextAction::Finish { success, summary: summary.into() })
                };
                match (heard, history.iter().any(|r| r.call.tool == "write_file")) {
                    (false, _) => finish(false, "I do not know where the notes are"),
                    (true, false) => ScriptedAnswer::Action(NextAction::Call(ToolCall {
                        tool: "write_file".into(),
                        args: json!({"path": "summary.txt", "content": "see notes.txt\n"}),
                    })),
                    (true, true) => finish(true, "summarized"),
                }
            }
            _ => ScriptedAnswer::Fallback,
        }
    }
    let dir = tempfile::tempdir().unwrap();
    let mut services = services(dir.path());
    let reasoner = Arc::new(ScriptedReasoner::from_fn(script));
    services.reasoner = reasoner.clone();
    let team = Team::start(standard_team(), services.clone()).await.unwrap();
    // bottom-d2 wrote the notes earlier: its board says so.
    let notes = Task {
        id: "notes".into(),
        goal: "notes".into(),
        steps: vec![on(
            "bottom-d2",
            step("notes", "docs", "write_file", json!({"path": "notes.txt", "content": "n\n"})),
        )],
    };
    team.submit(notes).await.unwrap();
    assert!(team.wait("notes").await.is_success());
    let mut summarize = step("summarize", "docs", "", serde_json::Value::Null);
    summarize.description = "summarize the notes".into();
    let task = Task {
        id: "summary".into(),
        goal: "summarize".into(),
        steps: vec![on("bottom-d1", summarize)],
    };

    team.submit(task).await.unwrap();
    let outcome = team.wait("summary").await;

    assert_eq!(runners(&outcome), [("summarize".into(), "bottom-d1".into())]);
    assert_eq!(std::fs::read_to_string(dir.path().join("summary.txt")).unwrap(), "see notes.txt\n");
    let step = Some("summary/summarize".to_owned());
    let share = PeerHelpRequest::ShareKnowledge;
    assert_eq!(
        help(&services, "bottom-d1").await,
        [
            ("bottom-d2".into(), step.clone(), share, PeerHelpOutcome::Asked),
            ("bottom-d2".into(), step, share, PeerHelpOutcome::Shared),
        ]
    );
    assert_eq!(
        help(&services, "bottom-d2").await,
        [("bottom-d1".into(), None, share, PeerHelpOutcome::Shared)]
    );
    let retries: Vec<u32> = records(&services, "bottom-d1")
        .await
        .iter()
        .filter_map(|r| match r.event {
            AuditEvent::Error { retry, .. } => Some(retry),
            _ => None,
        })
        .collect();
    // The retry that the answer reached succeeded (a retry may run before it arrives): the
    // retries were not used up.
    assert!(!retries.is_empty() && retries.len() < 3, "{retries:?}");
    let heard = reasoner.requests().into_iter().any(|r| match r {
        ReasoningRequest::NextAction { agent, history, .. } => {
            agent.as_str() == "bottom-d1"
                && history.iter().any(|h| h.output.contains("## Task Execution Result"))
        }
        _ => false,
    });
    assert!(heard, "bottom-d2's board reached bottom-d1's reasoner");
    team.shutdown().await.unwrap();
}
