//! The model's folding of audit records: agents added by spawns, statuses and steps from
//! transitions and tool calls, progress, duplicates ignored, decisions, cost and the audit
//! check as deltas.
#![allow(clippy::unwrap_used, clippy::expect_used, reason = "tests")]

use agent_core::{AuditEvent, AuditRecord, GENESIS_HASH, SpawnRecord};
use agent_state::{
    AgentId, AgentLayer, AgentStatus, Decision, DecisionId, HumanApproval, Timestamp,
};

use super::model::*;

fn line(r: &AuditRecord, start: u64) -> String {
    format!(
        "[{:>7.2}s] {:<12} {:?}",
        r.at.0.saturating_sub(start) as f64 / 1000.0,
        r.agent.as_str(),
        r.event
    )
}

fn model() -> RunModel {
    let seed = |id: &str, layer, parent: Option<&str>| Seed {
        id: AgentId::new(id),
        layer,
        parent: parent.map(AgentId::new),
        role: None,
    };
    let outline = Outline {
        run_id: agent_state::RunId::parse("r").unwrap(),
        title: "a goal".to_owned(),
        started_at: 1000,
        agents: vec![
            seed("top-a", AgentLayer::Top, None),
            seed("mid-1", AgentLayer::Mid, Some("top-a")),
            seed("bottom-1", AgentLayer::Bottom, Some("mid-1")),
        ],
        humans: vec!["alice".to_owned()],
    };
    RunModel::new(outline, &two_steps(), line)
}

/// A task of two scripted steps: `shell {}` and `write_file {"path": "a"}`.
fn two_steps() -> agent_state::Task {
    let step = |id: &str, tool: &str, args: serde_json::Value| {
        agent_state::PlanStep::scripted(
            id,
            id,
            agent_state::StepTarget::Domain("build".to_owned()),
            tool,
            args,
        )
    };
    agent_state::Task {
        id: "t".to_owned(),
        goal: "a goal".to_owned(),
        steps: vec![
            step("s1", "shell", serde_json::json!({})),
            step("s2", "write_file", serde_json::json!({"path": "a"})),
        ],
    }
}

fn record(seq: u64, agent: &str, event: AuditEvent) -> AuditRecord {
    AuditRecord::new(seq, Timestamp(1000 + seq * 10), AgentId::new(agent), event, GENESIS_HASH)
}

fn transition(from: AgentStatus, to: AgentStatus) -> AuditEvent {
    AuditEvent::Transition { from, to, reason: "test".into() }
}

#[test]
fn transitions_set_status_and_step_and_duplicates_are_ignored() {
    let mut m = model();
    let r = record(0, "mid-1", transition(AgentStatus::Initializing, AgentStatus::Idle));
    let Some(Delta::Record { seq, agent: Some(agent), progress: None, line, lead: None }) =
        m.fold(&r)
    else {
        panic!("a record delta with the agent")
    };
    assert_eq!((seq, agent.id.as_str(), agent.status), (0, "mid-1", "idle"));
    assert!(line.contains("mid-1"), "{line}");
    assert_eq!(agent.step, "test", "the transition's reason");
    assert_eq!(m.fold(&r), None, "a record folded twice changes nothing");
    assert_eq!(m.last_seq(), Some(0));
    assert_eq!(m.next_seq(), 1);
    // An actor outside the tree (a human): a line, no agent.
    let r = record(
        1,
        "human:alice",
        AuditEvent::Decision {
            decision: DecisionId::from_uuid(uuid::Uuid::new_v4()),
            action: "signed".into(),
            detail: String::new(),
        },
    );
    assert!(matches!(m.fold(&r), Some(Delta::Record { agent: None, .. })));
}

#[test]
fn spawns_add_agents_under_their_parent_and_tool_calls_count_steps() {
    let mut m = model();
    let spawn = SpawnRecord {
        agent: AgentId::new("bottom-1.s1"),
        parent: AgentId::new("bottom-1"),
        role: "helper".into(),
        layer: AgentLayer::Bottom,
        task_prompt: "help".into(),
        key: "k".into(),
        domain: None,
        depth: 1,
    };
    let d = m.fold(&record(0, "bottom-1", AuditEvent::Spawned { spawn })).unwrap();
    let Delta::Record { agent: Some(a), .. } = d else { panic!("the new agent") };
    assert_eq!(
        (a.id.as_str(), a.parent.as_deref(), a.status, a.spawned),
        ("bottom-1.s1", Some("bottom-1"), "initializing", true)
    );
    assert_eq!(m.agent_count(), 4);
    let call = AuditEvent::ToolCall {
        tool: "shell".into(),
        args: serde_json::json!({}),
        success: true,
        summary: "ok".into(),
    };
    let Some(Delta::Record { progress: Some(p), .. }) = m.fold(&record(1, "bottom-1", call)) else {
        panic!("progress")
    };
    assert_eq!((p.done, p.total), (1, 2));
    // The same call again, or a call of no step, counts nothing more: the counter counts steps.
    let again = AuditEvent::ToolCall {
        tool: "shell".into(),
        args: serde_json::json!({}),
        success: true,
        summary: "ok".into(),
    };
    assert!(matches!(
        m.fold(&record(2, "bottom-1", again)),
        Some(Delta::Record { progress: None, .. })
    ));
    let snap: serde_json::Value = serde_json::from_str(&m.snapshot_json(10)).unwrap();
    assert_eq!(snap["agents"].as_array().unwrap().len(), 4);
    assert_eq!(snap["events"].as_array().unwrap().len(), 3);
    assert_eq!(snap["last_seq"], 2);
    assert_eq!(snap["progress"]["done"], 1);
}

#[test]
fn a_goal_counts_planning_then_the_steps_of_its_plan() {
    // The issue's "1/0 steps": a goal run counted every successful tool call against 0 steps.
    let seed = Seed { id: AgentId::new("top-a"), layer: AgentLayer::Top, parent: None, role: None };
    let goal = agent_state::Task { id: "g".into(), goal: "write notes".into(), steps: Vec::new() };
    let outline = Outline {
        run_id: agent_state::RunId::parse("r").unwrap(),
        title: "write notes".to_owned(),
        started_at: 1000,
        agents: vec![seed],
        humans: Vec::new(),
    };
    let mut m = RunModel::new(outline, &goal, line);
    let snap: serde_json::Value = serde_json::from_str(&m.snapshot_json(10)).unwrap();
    assert_eq!(snap["progress"]["planning"], true);
    let call = AuditEvent::ToolCall {
        tool: "write_file".into(),
        args: serde_json::json!({"path": "notes.md"}),
        success: true,
        summary: "ok".into(),
    };
    assert!(matches!(
        m.fold(&record(0, "top-a", call)),
        Some(Delta::Record { progress: None, .. })
    ));

    // The power proposes its plan: three steps, none done.
    let plan = Decision::propose(
        DecisionId::from_uuid(uuid::Uuid::new_v4()),
        AgentId::new("top-a"),
        serde_json::json!({"task_id": "g", "steps": [{"id": "a"}, {"id": "b"}, {"id": "c"}]}),
        vec![AgentId::new("top-a")],
        Timestamp(1),
    )
    .unwrap();
    let deltas = m.set_decisions(std::slice::from_ref(&plan));
    let Some(Delta::Progress { progress }) =
        deltas.iter().find(|d| matches!(d, Delta::Progress { .. }))
    else {
        panic!("{deltas:?}")
    };
    assert_eq!((progress.planning, progress.done, progress.total), (false, 0, 3));

    // The power holds two successful results.
    let power = agent_layers::TaskProgress {
        steps: vec!["a".into(), "b".into(), "c".into()],
        succeeded: vec!["a".into(), "c".into()],
    };
    let Some(Delta::Progress { progress }) = m.set_power(Some(power)) else { panic!("progress") };
    assert_eq!((progress.done, progress.total), (2, 3));
    assert!(m.set_power(None).is_none(), "an unreadable power keeps the last reading");
}

#[test]
fn decisions_usage_status_and_audit_change_once() {
    let mut m = model();
    let mut d = Decision::propose(
        DecisionId::from_uuid(uuid::Uuid::new_v4()),
        AgentId::new("top-a"),
        serde_json::json!({"goal": "ship it"}),
        vec![AgentId::new("top-a")],
        Timestamp(1),
    )
    .unwrap();
    d.human_approval = Some(HumanApproval { allowed: vec!["alice".into()] });
    let deltas = m.set_decisions(std::slice::from_ref(&d));
    let [Delta::Decision { decision }] = deltas.as_slice() else { panic!("{deltas:?}") };
    assert_eq!((decision.what.as_str(), decision.status), ("ship it", "pending"));
    assert!(decision.human_may_sign);
    assert!(m.set_decisions(std::slice::from_ref(&d)).is_empty(), "unchanged");

    let usage = [AgentCost { id: "mid-1".into(), tokens: 120, cost: Some(0.5) }];
    let Some(Delta::Cost { point, agents }) = m.set_usage(3000, &usage) else { panic!("cost") };
    assert_eq!((point.t, point.tokens, point.cost, agents.len()), (2000, 120, 0.5, 1));
    assert_eq!(m.set_usage(4000, &usage), None, "unchanged");

    assert!(m.set_status("succeeded", None).is_some());
    assert_eq!(m.set_status("succeeded", None), None);
    let ok = AuditCheck { ok: true, records: 3, problems: vec![], protection: "seal".into() };
    assert!(m.set_audit(ok.clone()).is_some());
    assert_eq!(m.set_audit(ok), None);
}

#[test]
fn event_lines_and_series_are_bounded() {
    let mut m = model();
    for seq in 0..(EVENT_LINES as u64 + 10) {
        m.fold(&record(seq, "top-a", AuditEvent::MissedHeartbeat { heartbeat: seq }));
    }
    let snap: serde_json::Value = serde_json::from_str(&m.snapshot_json(usize::MAX)).unwrap();
    assert_eq!(snap["events"].as_array().unwrap().len(), EVENT_LINES);
    for i in 0..(SERIES_POINTS as u64 * 2) {
        m.set_usage(i, &[AgentCost { id: "top-a".into(), tokens: i + 1, cost: None }]);
    }
    let snap: serde_json::Value = serde_json::from_str(&m.snapshot_json(0)).unwrap();
    assert!(snap["series"].as_array().unwrap().len() <= SERIES_POINTS);
}

fn step_of(m: &RunModel, id: &str) -> String {
    let snap: serde_json::Value = serde_json::from_str(&m.snapshot_json(0)).unwrap();
    let agents = snap["agents"].as_array().unwrap();
    let agent = agents.iter().find(|a| a["id"] == id).unwrap();
    agent["step"].as_str().unwrap().to_owned()
}

#[test]
fn the_step_is_the_work_not_the_last_warning() {
    let mut m = model();
    let working = |reason: &str| AuditEvent::Transition {
        from: AgentStatus::Idle,
        to: AgentStatus::Working,
        reason: reason.to_owned().into(),
    };
    m.fold(&record(0, "bottom-1", working("processing 1 message(s)")));
    assert_eq!(step_of(&m, "bottom-1"), "processing 1 message(s)", "before any tool call");
    // Warnings change nothing: no agent in their delta, the step stays.
    let warnings = [
        AuditEvent::MissedHeartbeat { heartbeat: 4 },
        AuditEvent::Error { error: "boom".into(), retry: 1, max_retries: 3 },
        AuditEvent::Denied { action: "write board x".into(), error: "no".into() },
    ];
    for (seq, warning) in (1..).zip(warnings) {
        let Some(Delta::Record { agent: None, lead: None, .. }) =
            m.fold(&record(seq, "bottom-1", warning))
        else {
            panic!("a warning changed the agent")
        };
    }
    assert_eq!(step_of(&m, "bottom-1"), "processing 1 message(s)");
    // The tool call it is on, and its lead coordinates it.
    let call = AuditEvent::ToolCall {
        tool: "shell".into(),
        args: serde_json::json!({"command": "make build\nmore"}),
        success: true,
        summary: "ok".into(),
    };
    let Some(Delta::Record { agent: Some(a), lead: Some(lead), .. }) =
        m.fold(&record(4, "bottom-1", call))
    else {
        panic!("the executor and its lead")
    };
    assert_eq!(a.step, "shell make build");
    assert_eq!(
        (lead.id.as_str(), lead.step.as_str()),
        ("mid-1", "coordinating bottom-1: shell make build")
    );
    m.fold(&record(5, "bottom-1", AuditEvent::MissedHeartbeat { heartbeat: 5 }));
    assert_eq!(step_of(&m, "bottom-1"), "shell make build", "not the missed heartbeat");
    // Its result names the step; back to idle, the reason.
    let result = AuditEvent::Result {
        task: "t1/s1".into(),
        result: serde_json::from_value(serde_json::json!({
            "status": "success", "summary": "built", "artifacts": [], "known_issues": []
        }))
        .unwrap(),
        trusted: true,
    };
    m.fold(&record(6, "bottom-1", result));
    assert_eq!(step_of(&m, "bottom-1"), "t1/s1 · returned results");
    assert_eq!(step_of(&m, "mid-1"), "coordinating bottom-1: t1/s1");
    let idle = AuditEvent::Transition {
        from: AgentStatus::Working,
        to: AgentStatus::Idle,
        reason: "work complete".into(),
    };
    m.fold(&record(7, "bottom-1", idle));
    assert_eq!(step_of(&m, "bottom-1"), "work complete");
    // Finished, it shows what it last did, not only "shutdown complete".
    let ended = AuditEvent::Transition {
        from: AgentStatus::ShuttingDown,
        to: AgentStatus::Terminated,
        reason: "shutdown complete".into(),
    };
    m.fold(&record(8, "bottom-1", ended));
    assert_eq!(step_of(&m, "bottom-1"), "shutdown complete · last: t1/s1 · returned results");
    // An agent that did nothing shows the reason alone.
    let ended = AuditEvent::Transition {
        from: AgentStatus::ShuttingDown,
        to: AgentStatus::Terminated,
        reason: "shutdown complete".into(),
    };
    m.fold(&record(9, "top-a", ended));
    assert_eq!(step_of(&m, "top-a"), "shutdown complete");
}

#[test]
fn a_spawned_agent_shows_its_task_and_its_spawner_the_package() {
    let mut m = model();
    let spawn = SpawnRecord {
        agent: AgentId::new("mid-1.s1"),
        parent: AgentId::new("mid-1"),
        role: "helper".into(),
        layer: AgentLayer::Bottom,
        task_prompt: "index the docs\nin detail".into(),
        key: "t1/docs".into(),
        domain: None,
        depth: 1,
    };
    let Some(Delta::Record { agent: Some(a), lead: Some(lead), .. }) =
        m.fold(&record(0, "mid-1", AuditEvent::Spawned { spawn }))
    else {
        panic!("the new agent and its spawner")
    };
    assert_eq!(a.step, "t1/docs: index the docs");
    assert_eq!((lead.id.as_str(), lead.step.as_str()), ("mid-1", "coordinating t1/docs"));
    m.fold(&record(
        1,
        "mid-1.s1",
        AuditEvent::Transition {
            from: AgentStatus::Initializing,
            to: AgentStatus::Idle,
            reason: "initialization complete".into(),
        },
    ));
    assert_eq!(step_of(&m, "mid-1.s1"), "t1/docs: index the docs", "assigned until it returns");
}
