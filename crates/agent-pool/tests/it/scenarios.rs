//! The paths besides the happy one: veto, arbitration, failure and reassignment, slow agents,
//! permission violations and bad input.

use std::sync::Arc;
use std::time::Duration;

use agent_core::protocol::ConflictReport;
use agent_core::testing::FakeTool;
use agent_core::tools::ToolRegistry;
use agent_core::{
    AgentError, AuditEvent, Conflict, RuleBasedReasoner, check_transition_chain, new_message_id,
};
use agent_pool::{AgentPool, PoolError, SubmitError, Team, TeamError};
use agent_state::{
    Actor, AgentId, AgentLayer, AgentStatus, BoardId, DecisionStatus, Message, MessageKind,
    StepTarget, TaskFailure, TaskOutcome,
};
use whiteboard::BoardError;

use crate::support::*;

#[tokio::test(start_paused = true)]
async fn a_veto_fails_the_task_with_the_vetoes_reason_and_runs_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let mut services = services(dir.path());
    services
        .reasoners
        .insert(AgentId::new("top-b"), Arc::new(RuleBasedReasoner::new().forbid_tools(["shell"])));
    let team = Team::start(standard_team(), services.clone()).await.unwrap();

    team.submit(hello_task("task-veto")).await.unwrap();
    let outcome = team.wait("task-veto").await;
    let TaskOutcome::Failed { reason: TaskFailure::Vetoed { by, reason }, .. } = outcome else {
        panic!("expected a veto, got {outcome:?}")
    };
    assert_eq!(by, AgentId::new("top-b"));
    assert!(reason.contains("forbidden tool `shell`"), "{reason}");
    assert!(!dir.path().join("hello.txt").exists(), "a vetoed plan must not run");
    let decisions = services.governance.list().await.unwrap();
    assert_eq!(decisions[0].status, DecisionStatus::Vetoed);

    // The team keeps running: a plan without shell goes through.
    let mut task = hello_task("task-after-veto");
    task.steps.truncate(2);
    team.submit(task).await.unwrap();
    assert!(team.wait("task-after-veto").await.is_success());
    team.shutdown().await.unwrap();
}

async fn arbitrate(weights: [f64; 3]) -> (String, String) {
    let dir = tempfile::tempdir().unwrap();
    let mut services = services(dir.path());
    let mut spec = standard_team();
    for (agent, weight) in spec.agents.iter_mut().zip(weights) {
        if let agent_pool::RoleSpec::Top(t) = &mut agent.role {
            t.vote_weight = weight;
        }
    }
    services
        .reasoners
        .insert(AgentId::new("top-a"), Arc::new(RuleBasedReasoner::new().prefer(["merge"])));
    services
        .reasoners
        .insert(AgentId::new("top-b"), Arc::new(RuleBasedReasoner::new().prefer(["split"])));
    services
        .reasoners
        .insert(AgentId::new("top-c"), Arc::new(RuleBasedReasoner::new().prefer(["split"])));
    let team = Team::start(spec, services.clone()).await.unwrap();
    let conflict = Conflict {
        id: "c-1".into(),
        issue: "who owns the API docs".into(),
        parties: vec![AgentId::new("mid-docs"), AgentId::new("mid-build")],
        options: vec!["merge".into(), "split".into()],
    };
    let report = Message::new(
        new_message_id(),
        AgentId::new("mid-docs"),
        AgentId::new("top-a"),
        MessageKind::ConflictReport,
        serde_json::to_value(ConflictReport { conflict, subject: None }).unwrap(),
        services.clock.now(),
    );
    services.bus.send(report).await.unwrap();
    tokio::time::sleep(Duration::from_secs(30)).await;
    let global = services.boards.read(&Actor::System, &BoardId::Global).await.unwrap().content;
    let top_a = team.pool().get(&AgentId::new("top-a")).unwrap().metrics().await;
    assert_eq!(top_a.conflicts_arbitrated, 1);
    let resolution = global
        .lines()
        .find_map(|l| l.strip_prefix("Resolution: "))
        .expect("the arbitration result is on the global board")
        .to_owned();
    team.shutdown().await.unwrap();
    (resolution, global)
}

#[tokio::test(start_paused = true)]
async fn arbitration_is_a_weighted_vote_over_the_bus() {
    // top-a (merge, 1) against top-b and top-c (split, 1 each): split wins 2 to 1.
    let (resolution, global) = arbitrate([1.0, 1.0, 1.0]).await;
    assert_eq!(resolution, "split");
    assert!(global.contains("top-b=split (weight 1)"), "{global}");
    // top-a weighs 3: merge wins 3 to 2.
    assert_eq!(arbitrate([3.0, 1.0, 1.0]).await.0, "merge");
    // 2 against 2: the tie goes to the arbitrator's own vote, which is first.
    assert_eq!(arbitrate([2.0, 1.0, 1.0]).await.0, "merge");
}

/// The registry without the real `write_file`, a [`BrokenWrite`] in its place.
pub(crate) fn broken_registry() -> ToolRegistry {
    let builtins = ToolRegistry::with_builtins();
    let mut r = ToolRegistry::new();
    for name in builtins.names() {
        if name != "write_file" {
            r.register(builtins.get(name).unwrap()).unwrap();
        }
    }
    r.register(Arc::new(FakeTool::failing("write_file", "disk on fire").with_side_effects(true)))
        .unwrap();
    r
}

/// Until peer help, the executor failed and its lead reassigned the subtask; now, with its
/// retries spent, it offers the subtask to the idle peer of its lead first, which completes it,
/// and the executor itself does not fail (the lead's reassignment when no peer takes it is
/// `peers::when_every_peer_is_busy_the_lead_reassigns_the_subtask_as_before`).
#[tokio::test(start_paused = true)]
async fn a_failing_executor_retries_then_hands_its_subtask_to_an_idle_peer_that_completes_it() {
    let dir = tempfile::tempdir().unwrap();
    let mut services = services(dir.path());
    services.agent_tools.insert(AgentId::new("bottom-d1"), Arc::new(broken_registry()));
    let team = Team::start(standard_team(), services.clone()).await.unwrap();

    let mut task = hello_task("task-fail");
    task.steps.truncate(1);
    task.steps[0].target = StepTarget::Agent(AgentId::new("bottom-d1"));
    team.submit(task).await.unwrap();
    let outcome = team.wait("task-fail").await;
    let TaskOutcome::Succeeded { results, .. } = &outcome else { panic!("{outcome:?}") };
    assert_eq!(results[0].agent, AgentId::new("bottom-d2"), "the peer ran the subtask");
    assert_eq!(std::fs::read_to_string(dir.path().join("hello.txt")).unwrap(), "hello, strata\n");

    let d1 = AgentId::new("bottom-d1");
    let records = services.audit.records(Some(&d1)).await.unwrap();
    let retries: Vec<u32> = records
        .iter()
        .filter_map(|r| match r.event {
            AuditEvent::Error { retry, .. } => Some(retry),
            _ => None,
        })
        .collect();
    assert_eq!(retries, [1, 2, 3], "three retries; the failure that would end them goes to a peer");
    let help: Vec<(String, String)> = records
        .iter()
        .filter_map(|r| match &r.event {
            AuditEvent::PeerHelp { peer, step, outcome, .. } => {
                Some((peer.to_string(), format!("{step:?} {outcome}")))
            }
            _ => None,
        })
        .collect();
    let step = r#"Some("task-fail/write-hello")"#;
    assert_eq!(
        help,
        [
            ("bottom-d2".to_owned(), format!("{step} asked")),
            ("bottom-d2".to_owned(), format!("{step} handed over")),
        ]
    );
    let statuses: Vec<AgentStatus> =
        records.iter().filter_map(|r| r.transition()).map(|t| t.to).collect();
    assert!(!statuses.contains(&AgentStatus::Failed), "{statuses:?}");
    let d1_metrics = team.pool().get(&d1).unwrap().metrics().await;
    assert_eq!((d1_metrics.tasks_failed, d1_metrics.retries), (0, 3));
    let d2 = services.audit.records(Some(&AgentId::new("bottom-d2"))).await.unwrap();
    assert!(
        d2.iter().any(|r| matches!(&r.event, AuditEvent::PeerHelp { peer, outcome: agent_core::PeerHelpOutcome::Accepted, .. } if *peer == d1)),
        "the peer audited its acceptance"
    );
    // The lead's bookkeeping names the peer: the step's assignee, and among those that tried it.
    let lead = AgentId::new("mid-docs");
    let saved = services.state.agents().await.unwrap().into_iter().find(|r| r.id == lead).unwrap();
    let work = saved.behavior["work"].as_object().unwrap().values().next().unwrap().clone();
    assert_eq!(work["subtasks"]["write-hello"]["assignee"], "bottom-d2");
    assert_eq!(work["tried"]["write-hello"], serde_json::json!(["bottom-d1", "bottom-d2"]));
    let board = services.boards.read(&Actor::System, &BoardId::Agent(lead)).await.unwrap().content;
    assert!(board.contains("- [bottom-d2] took over write-hello from [bottom-d1]"), "{board}");
    let mid = services.audit.records(Some(&AgentId::new("mid-docs"))).await.unwrap();
    assert!(check_transition_chain(&mid).is_ok());
    team.shutdown().await.unwrap();
    let finals = check_transition_chain(&services.audit.records(None).await.unwrap()).unwrap();
    assert!(finals.iter().all(|(_, s)| *s == AgentStatus::Terminated), "{finals:?}");
}

#[tokio::test(start_paused = true)]
async fn a_step_that_fails_everywhere_is_escalated_and_the_team_keeps_running() {
    let dir = tempfile::tempdir().unwrap();
    let services = services(dir.path());
    let team = Team::start(standard_team(), services.clone()).await.unwrap();
    let mut task = hello_task("task-escape");
    task.steps = vec![step(
        "escape",
        "docs",
        "write_file",
        serde_json::json!({"path": "../outside.txt", "content": "x"}),
    )];
    team.submit(task).await.unwrap();
    let outcome = team.wait("task-escape").await;
    let TaskOutcome::Failed {
        reason: TaskFailure::StepFailed { step: failed, attempts, error },
        ..
    } = &outcome
    else {
        panic!("{outcome:?}")
    };
    assert_eq!((failed.as_str(), *attempts), ("escape", 2));
    assert!(error.contains("outside"), "{error}");
    assert!(!dir.path().parent().unwrap().join("outside.txt").exists());

    // Bad arguments fail the same way, with the schema's words.
    let mut task = hello_task("task-bad-args");
    task.steps = vec![step("bad", "build", "shell", serde_json::json!({"cmd": "true"}))];
    team.submit(task).await.unwrap();
    let outcome = team.wait("task-bad-args").await;
    assert!(format!("{outcome:?}").contains("required property is missing"), "{outcome:?}");

    // The team is still alive for a good task.
    team.submit(hello_task("task-good")).await.unwrap();
    assert!(team.wait("task-good").await.is_success());
    team.shutdown().await.unwrap();
}

#[tokio::test(start_paused = true)]
async fn a_slow_tool_call_answers_its_heartbeats_busy_not_missed_without_delaying_others() {
    let dir = tempfile::tempdir().unwrap();
    let mut services = services(dir.path());
    let mut tools = ToolRegistry::with_builtins();
    tools.register(Arc::new(FakeTool::slow("slow", Duration::from_secs(10)))).unwrap();
    services.tools = Arc::new(tools);
    let mut spec = standard_team();
    for agent in &mut spec.agents {
        if let agent_pool::RoleSpec::Bottom(b) = &mut agent.role {
            b.tools = b.tools.iter().cloned().chain(["slow".to_owned()]).collect();
        }
    }
    let team = Team::start(spec, services.clone()).await.unwrap();
    let mut task = hello_task("task-slow");
    task.steps = vec![
        step("nap", "build", "slow", serde_json::json!({})),
        step(
            "write",
            "docs",
            "write_file",
            serde_json::json!({"path": "fast.txt", "content": "fast"}),
        ),
    ];
    task.steps[0].target = StepTarget::Agent(AgentId::new("bottom-b1"));
    team.submit(task).await.unwrap();
    assert!(team.wait("task-slow").await.is_success());

    // Busy is not missed (issue #32): the tool running is its turn's progress.
    let slot = team.pool().get(&AgentId::new("bottom-b1")).unwrap();
    assert!(slot.busy() >= 2, "a 10 s call spans two 4 s cycles: {}", slot.busy());
    let answer = slot.last_busy().unwrap();
    assert_eq!(answer.activity, agent_core::Activity::Tool("slow".into()), "{answer:?}");
    let slow = slot.metrics().await;
    assert_eq!(slow.heartbeats_missed, 0, "{slow:?}");
    let lead = team.pool().get(&AgentId::new("mid-build")).unwrap().metrics().await;
    assert_eq!(lead.warnings_received, 0, "nothing to warn its lead about: {lead:?}");
    let fast = team.pool().get(&AgentId::new("bottom-d1")).unwrap().metrics().await;
    assert_eq!(fast.heartbeats_missed, 0);
    let records = services.audit.records(Some(&AgentId::new("bottom-b1"))).await.unwrap();
    assert!(!records.iter().any(|r| matches!(r.event, AuditEvent::MissedHeartbeat { .. })));
    team.shutdown().await.unwrap();
}

#[tokio::test(start_paused = true)]
async fn permission_violations_are_refused_and_audited() {
    let dir = tempfile::tempdir().unwrap();
    let services = services(dir.path());
    let team = Team::start(standard_team(), services.clone()).await.unwrap();
    let slot = team.pool().get(&AgentId::new("bottom-d1")).unwrap();
    let mut agent = slot.agent().lock().await;
    let ctx = agent.ctx_mut();

    let err = ctx
        .write_to(&BoardId::Agent(AgentId::new("mid-docs")), "mine now".into())
        .await
        .unwrap_err();
    assert!(matches!(err, AgentError::Board(BoardError::PermissionDenied { .. })), "{err}");
    let err = ctx.read_board(&BoardId::Agent(AgentId::new("top-a"))).await.unwrap_err();
    assert!(matches!(err, AgentError::Board(BoardError::PermissionDenied { .. })), "{err}");

    let decision = agent_state::Decision::propose(
        agent_state::DecisionId::from_u128(9),
        AgentId::new("top-a"),
        serde_json::json!({"steps": []}),
        vec![AgentId::new("top-b")],
        services.clock.now(),
    )
    .unwrap();
    services.governance.submit(decision).await.unwrap();
    // An executor holds no `review`: it is refused before governance is asked.
    let err = ctx.sign(agent_state::DecisionId::from_u128(9)).await.unwrap_err();
    assert!(matches!(err, AgentError::MissingCapability { .. }), "{err}");
    drop(agent);

    let mid_board = services
        .boards
        .read(&Actor::System, &BoardId::Agent(AgentId::new("mid-docs")))
        .await
        .unwrap();
    assert!(!mid_board.content.contains("mine now"));
    let d = services.governance.get(agent_state::DecisionId::from_u128(9)).await.unwrap().unwrap();
    assert!(d.signatures.is_empty());
    let denied: Vec<String> = services
        .audit
        .records(Some(&AgentId::new("bottom-d1")))
        .await
        .unwrap()
        .into_iter()
        .filter_map(|r| match r.event {
            AuditEvent::Denied { action, .. } => Some(action),
            _ => None,
        })
        .collect();
    assert_eq!(denied.len(), 3, "{denied:?}");
    assert!(denied[0].starts_with("write board mid-docs"));
    team.shutdown().await.unwrap();
}

#[tokio::test(start_paused = true)]
async fn the_pool_refuses_to_grow_past_its_limit() {
    let dir = tempfile::tempdir().unwrap();
    let services = services(dir.path());
    let mut spec = standard_team();
    spec.max_agents = 5;
    let err = Team::start(spec, services.clone()).await.err().unwrap();
    assert!(matches!(err, TeamError::TooManyAgents { count: 9, max: 5 }), "{err}");

    let pool = AgentPool::new(1);
    let deps = |_: ()| agent_deps(&services);
    let one = bottom("bottom-1", "mid-x", &[]);
    let two = bottom("bottom-2", "mid-x", &[]);
    let behavior = |s: &agent_pool::AgentSpec| -> Box<dyn agent_core::AgentBehavior> {
        let agent_pool::RoleSpec::Bottom(b) = &s.role else { unreachable!() };
        Box::new(agent_layers::BottomAgent::new(b.clone()))
    };
    pool.create(one.config.clone(), behavior(&one), deps(())).await.unwrap();
    let err = pool.create(two.config.clone(), behavior(&two), deps(())).await.err().unwrap();
    assert!(matches!(err, PoolError::Full { max: 1 }), "{err}");
    assert!(err.to_string().contains("agent pool full (max 1)"));
    assert_eq!(pool.len(), 1);
    assert!(!services.bus.is_registered(&AgentId::new("bottom-2")).await.unwrap());
    pool.destroy(&AgentId::new("bottom-1")).await.unwrap();
    assert!(pool.get(&AgentId::new("bottom-1")).is_none());
}

/// A batch of agents created together: each one refused for its own reason (a bad
/// configuration, an id already in the pool or earlier in the batch, the pool's limit) gets
/// that error and leaves nothing behind (no inbox); the others are created, idle, in the pool.
#[tokio::test(start_paused = true)]
async fn agents_created_together_get_each_their_own_result() {
    let dir = tempfile::tempdir().unwrap();
    let services = services(dir.path());
    let pool = AgentPool::new(4);
    let deps = agent_deps(&services);
    let agent = |id: &str| {
        let spec = bottom(id, "mid-x", &[]);
        let agent_pool::RoleSpec::Bottom(b) = &spec.role else { unreachable!() };
        let behavior: Box<dyn agent_core::AgentBehavior> =
            Box::new(agent_layers::BottomAgent::new(b.clone()));
        (spec.config, behavior, deps.clone())
    };
    let first = pool.create_many([agent("bottom-1")]).await;
    assert!(first[0].is_ok(), "{:?}", first[0].as_ref().err());
    let mut bad = agent("bottom-bad");
    bad.0.name = " ".into();

    let results = pool
        .create_many([
            agent("bottom-2"),
            agent("bottom-1"),
            bad,
            agent("bottom-3"),
            agent("bottom-3"),
            agent("bottom-4"),
            agent("bottom-5"),
        ])
        .await;

    let outcome: Vec<String> = results
        .iter()
        .map(|r| match r {
            Ok(slot) => format!("ok {}", slot.id()),
            Err(PoolError::Duplicate { id }) => format!("duplicate {id}"),
            Err(PoolError::Full { max }) => format!("full {max}"),
            Err(PoolError::Config(e)) => format!("config {e}"),
            Err(e) => format!("other {e}"),
        })
        .collect();
    assert_eq!(outcome[0], "ok bottom-2");
    assert_eq!(outcome[1], "duplicate bottom-1");
    assert!(outcome[2].starts_with("config "), "{}", outcome[2]);
    assert_eq!(outcome[3..], ["ok bottom-3", "duplicate bottom-3", "ok bottom-4", "full 4"]);
    assert_eq!(pool.len(), 4);
    for id in ["bottom-1", "bottom-2", "bottom-3", "bottom-4"] {
        let slot = pool.get(&AgentId::new(id)).expect("in the pool");
        assert_eq!(slot.status().await, agent_state::AgentStatus::Idle, "{id}");
        assert!(services.bus.is_registered(&AgentId::new(id)).await.unwrap(), "{id}");
    }
    for id in ["bottom-bad", "bottom-5"] {
        assert!(!services.bus.is_registered(&AgentId::new(id)).await.unwrap(), "{id}");
        assert!(services.audit.records(Some(&AgentId::new(id))).await.unwrap().is_empty(), "{id}");
    }
    assert!(pool.create_many(Vec::new()).await.is_empty());
}

#[tokio::test(start_paused = true)]
async fn bad_team_specs_and_tasks_are_refused_with_clear_errors() {
    let dir = tempfile::tempdir().unwrap();
    let services = services(dir.path());

    let mut spec = standard_team();
    spec.agents[5].config.supervisor = Some(AgentId::new("nobody"));
    let err = Team::start(spec, services.clone()).await.err().unwrap();
    assert_eq!(err.to_string(), "agent `bottom-d1`: supervisor `nobody` is not in the team");

    let mut spec = standard_team();
    spec.agents[5].config.supervisor = Some(AgentId::new("top-a"));
    let err = Team::start(spec, services.clone()).await.err().unwrap();
    assert!(matches!(err, TeamError::WrongSupervisorLayer { .. }), "{err}");

    let mut spec = standard_team();
    if let agent_pool::RoleSpec::Bottom(b) = &mut spec.agents[5].role {
        b.tools = b.tools.iter().cloned().chain(["teleport".to_owned()]).collect();
    }
    let err = Team::start(spec, services.clone()).await.err().unwrap();
    assert!(
        err.to_string().contains("names the tool `teleport`, which is not registered"),
        "{err}"
    );

    let mut spec = standard_team();
    spec.agents[0].config.name = " ".into();
    let err = Team::start(spec, services.clone()).await.err().unwrap();
    assert!(err.to_string().contains("field `name`"), "{err}");
    assert!(services.bus.registered().await.unwrap().is_empty(), "nothing started");

    let team = Team::start(standard_team(), services.clone()).await.unwrap();
    let mut task = hello_task("t");
    task.steps.clear();
    // Only a goal: the rule-based reasoner cannot plan it.
    assert!(matches!(team.submit(task).await, Err(SubmitError::CannotPlan { .. })));
    let mut task = hello_task("t");
    task.goal = " ".into();
    assert!(matches!(
        team.submit(task).await,
        Err(SubmitError::InvalidTask(TaskFailure::InvalidPlan { .. }))
    ));
    team.submit(hello_task("t")).await.unwrap();
    assert!(matches!(team.submit(hello_task("t")).await, Err(SubmitError::Duplicate(_))));
    assert!(team.wait("t").await.is_success());
    team.shutdown().await.unwrap();
    assert!(matches!(team.submit(hello_task("t2")).await, Err(SubmitError::ShutDown)));
}

/// `by_layer` answers each layer's agents by id (the top and mid layers from the pool's own
/// index of them), and an agent destroyed is in none of them.
#[tokio::test(start_paused = true)]
async fn the_pool_lists_each_layer_by_id_and_forgets_a_destroyed_agent() {
    let dir = tempfile::tempdir().unwrap();
    let services = services(dir.path());
    let spec = standard_team();
    let ids_of = |layer: AgentLayer| {
        let mut ids: Vec<AgentId> = spec
            .agents
            .iter()
            .filter(|a| a.config.layer == layer)
            .map(|a| a.config.id.clone())
            .collect();
        ids.sort();
        ids
    };
    let expected: Vec<(AgentLayer, Vec<AgentId>)> =
        [AgentLayer::Top, AgentLayer::Mid, AgentLayer::Bottom].map(|l| (l, ids_of(l))).into();
    let team = Team::start(spec.clone(), services).await.unwrap();
    let listed = |layer: AgentLayer| -> Vec<AgentId> {
        team.pool().by_layer(layer).iter().map(|s| s.id().clone()).collect()
    };
    for (layer, ids) in &expected {
        assert!(!ids.is_empty(), "the standard team has {layer} agents");
        assert_eq!(&listed(*layer), ids, "{layer}");
    }
    let gone = expected[1].1[0].clone();
    team.pool().destroy(&gone).await.unwrap();
    assert!(!listed(AgentLayer::Mid).contains(&gone));
    assert_eq!(listed(AgentLayer::Mid).len(), expected[1].1.len() - 1);
    assert_eq!(listed(AgentLayer::Top), expected[0].1);
    assert!(team.pool().get(&gone).is_none());
    team.shutdown().await.unwrap();
}
