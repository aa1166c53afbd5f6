//! A team given only a goal in words: the top layer plans it (naming the leads to create), the
//! powers sign, the pool creates the leads, each lead spawns its workers with `spawn_agent`,
//! they write files and run tests, return structured results, and the task succeeds. Then each
//! refusal, a claim of a file nobody wrote, a despawn mid-task, and a resume after a kill.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use agent_core::spawn::{DESPAWN_AGENT, GET_AGENTS, RETURN_RESULTS, SPAWN_AGENT, SPEAK_TO_AGENT};
use agent_core::{
    AuditEvent, AuditRecord, NextAction, Plan, ReasoningRequest, ScriptedAnswer, ScriptedReasoner,
    ToolCall, ToolCallRecord,
};
use agent_pool::{SubmitError, Team, TeamSpec};
use agent_state::{
    AgentLayer, LeadRequest, PlanStep, Role, RoleBook, StepTarget, Task, TaskOutcome,
};
use serde_json::{Value, json};

use crate::support::*;

fn role(name: &str, layer: AgentLayer, tools: &[&str], enabled: &[&str]) -> Role {
    Role {
        description: format!("the {name}"),
        tools: tools.iter().map(|t| (*t).to_owned()).collect(),
        enabled_agents: enabled.iter().map(|t| (*t).to_owned()).collect(),
        ..Role::new(name, layer)
    }
}

pub(crate) fn roles() -> RoleBook {
    RoleBook::new([
        role("code_lead", AgentLayer::Mid, &[], &["coder", "tester"]),
        role("docs_lead", AgentLayer::Mid, &[], &["writer"]),
        role("coder", AgentLayer::Bottom, &["write_file", "read_file", "edit_file"], &[]),
        role("tester", AgentLayer::Bottom, &["shell", "read_file"], &[]),
        role("writer", AgentLayer::Bottom, &["write_file"], &[]),
    ])
    .unwrap()
}

/// Three powers and nothing else: the leads and workers are created as the work unfolds.
pub(crate) fn goal_team(roles: RoleBook) -> TeamSpec {
    let mut spec = TeamSpec::new(vec![
        top("top-a", "power_a", 2.0),
        top("top-b", "power_b", 1.0),
        top("top-c", "power_c", 1.0),
    ]);
    spec.heartbeat = Duration::from_secs(4);
    spec.roles = roles;
    spec
}

fn goal_step(id: &str, domain: &str, role: &str, description: &str) -> PlanStep {
    PlanStep::goal(id, description, StepTarget::Domain(domain.into())).with_role(role)
}

fn the_plan() -> Plan {
    Plan {
        leads: vec![
            LeadRequest { role: "code_lead".into(), domain: "code".into() },
            LeadRequest { role: "docs_lead".into(), domain: "docs".into() },
        ],
        steps: vec![
            goal_step("program", "code", "coder", "write add.sh and its test, and run the test"),
            goal_step("readme", "docs", "writer", "write README.md"),
        ],
    }
}

/// Only a docs lead, for one README step.
fn docs_plan() -> Plan {
    Plan {
        leads: vec![LeadRequest { role: "docs_lead".into(), domain: "docs".into() }],
        steps: vec![goal_step("readme", "docs", "writer", "write README.md")],
    }
}

fn call(tool: &str, args: Value) -> ScriptedAnswer {
    ScriptedAnswer::Action(NextAction::Call(ToolCall { tool: tool.into(), args }))
}

fn finish(summary: &str) -> ScriptedAnswer {
    ScriptedAnswer::Action(NextAction::Finish { success: true, summary: summary.into() })
}

fn results(status: &str, summary: &str, artifacts: &[(&str, &str)]) -> ScriptedAnswer {
    let artifacts: Vec<Value> = artifacts
        .iter()
        .map(
            |(path, change)| json!({"file_path": path, "description": path, "change_type": change}),
        )
        .collect();
    call(
        RETURN_RESULTS,
        json!({"result": {"status": status, "summary": summary, "artifacts": artifacts, "known_issues": []}}),
    )
}

fn count(history: &[ToolCallRecord], tool: &str) -> usize {
    history.iter().filter(|r| r.call.tool == tool).count()
}

/// Results from subordinates enter a lead's history as `return_results` records.
fn results_in(history: &[ToolCallRecord]) -> usize {
    count(history, RETURN_RESULTS)
}

/// The workers' part of the script, by what they were spawned for.
fn worker(description: &str, history: &[ToolCallRecord]) -> ScriptedAnswer {
    let first = history.is_empty();
    match description {
        d if d.starts_with("write add.sh") => {
            if first {
                call("write_file", json!({"path": "add.sh", "content": "echo $(($1 + $2))\n"}))
            } else {
                results("success", "wrote add.sh", &[("add.sh", "created")])
            }
        }
        d if d.starts_with("write test_add.sh") => {
            if first {
                call(
                    "write_file",
                    json!({"path": "test_add.sh", "content": "[ \"$(sh add.sh 2 3)\" = 5 ] && echo PASS\n"}),
                )
            } else {
                results("success", "wrote test_add.sh", &[("test_add.sh", "created")])
            }
        }
        d if d.starts_with("run the tests") => {
            if first {
                call("shell", json!({"command": "sh test_add.sh"}))
            } else {
                let passed = history[0].success && history[0].output.contains("PASS");
                results(
                    if passed { "success" } else { "failure" },
                    &format!("tests: {}", history[0].output.trim()),
                    &[("test_add.sh", "referenced")],
                )
            }
        }
        d if d.starts_with("write README.md") => {
            if first {
                call(
                    "write_file",
                    json!({"path": "README.md", "content": "# add\n\nsh add.sh 2 3\n"}),
                )
            } else {
                results("success", "wrote README.md", &[("README.md", "created")])
            }
        }
        other => panic!("unexpected worker task {other:?}"),
    }
}

/// The whole team's script: plans, signs (rule-based), leads and workers.
pub(crate) fn script(request: &ReasoningRequest) -> ScriptedAnswer {
    match request {
        ReasoningRequest::Plan { .. } => ScriptedAnswer::Plan(the_plan()),
        ReasoningRequest::NextAction { agent, subtask, history } => {
            let spawned = count(history, SPAWN_AGENT);
            let returned = results_in(history);
            match agent.as_str() {
                a if a.starts_with("code_lead") => match (spawned, returned) {
                    (0, _) => call(
                        SPAWN_AGENT,
                        json!({"role_name": "coder", "task_prompt": "write add.sh: print the sum of two numbers"}),
                    ),
                    (1, _) => call(
                        SPAWN_AGENT,
                        json!({"role_name": "coder", "task_prompt": "write test_add.sh: check add.sh 2 3 prints 5"}),
                    ),
                    (2, r) if r < 2 => finish("waiting for the coders"),
                    (2, _) => call(
                        SPAWN_AGENT,
                        json!({"role_name": "tester", "task_prompt": "run the tests with shell"}),
                    ),
                    (3, r) if r < 3 => finish("waiting for the tester"),
                    _ if count(history, GET_AGENTS) == 0 => call(GET_AGENTS, json!({})),
                    _ if count(history, SPEAK_TO_AGENT) == 0 => call(
                        SPEAK_TO_AGENT,
                        json!({"agent_id": "coder-1", "message": "what did you write?"}),
                    ),
                    _ => finish("add.sh written and its test passes"),
                },
                a if a.starts_with("docs_lead") => match (spawned, returned) {
                    (0, _) => call(
                        SPAWN_AGENT,
                        json!({"role_name": "writer", "task_prompt": "write README.md for add.sh"}),
                    ),
                    (_, 0) => finish("waiting for the writer"),
                    _ => finish("README written"),
                },
                _ => worker(&subtask.step.description, history),
            }
        }
        _ => ScriptedAnswer::Fallback,
    }
}

pub(crate) fn scripted_services(
    dir: &std::path::Path,
    script: fn(&ReasoningRequest) -> ScriptedAnswer,
) -> (agent_pool::TeamServices, Arc<ScriptedReasoner>) {
    let reasoner = Arc::new(ScriptedReasoner::from_fn(script));
    let mut services = services(dir);
    services.reasoner = reasoner.clone();
    (services, reasoner)
}

pub(crate) async fn audit(services: &agent_pool::TeamServices) -> Vec<AuditRecord> {
    services.audit.records(None).await.unwrap()
}

pub(crate) fn spawned(records: &[AuditRecord]) -> Vec<(String, String, String)> {
    records
        .iter()
        .filter_map(|r| match &r.event {
            AuditEvent::Spawned { spawn } => {
                Some((r.agent.to_string(), spawn.agent.to_string(), spawn.role.clone()))
            }
            _ => None,
        })
        .collect()
}

pub(crate) async fn run_goal(team: &Team) -> TaskOutcome {
    team.submit(Task::goal("add", "a shell program that adds two numbers, tested, with a README"))
        .await
        .unwrap();
    tokio::time::timeout(Duration::from_secs(600), team.wait("add")).await.expect("the task closes")
}

#[tokio::test(start_paused = true)]
async fn a_goal_is_planned_the_team_forms_itself_and_the_work_is_done() {
    let dir = tempfile::tempdir().unwrap();
    let (services, reasoner) = scripted_services(dir.path(), script);
    let team = Team::start(goal_team(roles()), services.clone()).await.unwrap();
    let outcome = run_goal(&team).await;
    let TaskOutcome::Succeeded { results, .. } = &outcome else { panic!("{outcome:?}") };
    assert_eq!(results.len(), 2);
    assert!(results.iter().all(|r| r.success));

    // The files are on disk, and the test the tester ran passes.
    for file in ["add.sh", "test_add.sh", "README.md"] {
        assert!(dir.path().join(file).is_file(), "{file} written");
    }
    let run = std::process::Command::new("sh")
        .arg("test_add.sh")
        .current_dir(dir.path())
        .output()
        .unwrap();
    assert_eq!(String::from_utf8_lossy(&run.stdout).trim(), "PASS");

    // Planned by the proposer, signed by the other powers, two leads created by top-a, four
    // workers by the leads.
    assert!(
        reasoner.requests().iter().any(
            |r| matches!(r, ReasoningRequest::Plan { agent, .. } if agent.as_str() == "top-a")
        )
    );
    let records = audit(&services).await;
    let spawns = spawned(&records);
    let mut sorted = spawns.clone();
    sorted.sort();
    let mut expected: Vec<(String, String, String)> = vec![
        ("top-a".into(), "code_lead-1".into(), "code_lead".into()),
        ("top-a".into(), "docs_lead-1".into(), "docs_lead".into()),
        ("code_lead-1".into(), "coder-1".into(), "coder".into()),
        ("docs_lead-1".into(), "writer-1".into(), "writer".into()),
        ("code_lead-1".into(), "coder-2".into(), "coder".into()),
        ("code_lead-1".into(), "tester-1".into(), "tester".into()),
    ];
    expected.sort();
    assert_eq!(sorted, expected, "every spawn is audited by its spawner");
    assert_eq!(spawns.len(), 6);
    let structured: Vec<(String, bool)> = records
        .iter()
        .filter_map(|r| match &r.event {
            AuditEvent::Result { trusted, .. } => Some((r.agent.to_string(), *trusted)),
            _ => None,
        })
        .collect();
    assert_eq!(structured.len(), 4, "{structured:?}");
    assert!(structured.iter().all(|(_, trusted)| *trusted));

    // The lead's get_agents saw its three workers, with their roles and results.
    let listing = reasoner
        .requests()
        .into_iter()
        .filter_map(|r| match r {
            ReasoningRequest::NextAction { agent, history, .. }
                if agent.as_str() == "code_lead-1" =>
            {
                history.into_iter().find(|h| h.call.tool == GET_AGENTS)
            }
            _ => None,
        })
        .next()
        .expect("get_agents was called");
    let listed: Value = serde_json::from_str(&listing.output).unwrap();
    assert_eq!(listed["total_count"], 3);
    assert!(listed["agents"].as_array().unwrap().iter().all(|a| a["has_result"] == true));

    // speak_to_agent went over the bus to coder-1 and came back with its answer.
    let spoke = reasoner
        .requests()
        .into_iter()
        .filter_map(|r| match r {
            ReasoningRequest::NextAction { agent, history, .. }
                if agent.as_str() == "code_lead-1" =>
            {
                history.into_iter().find(|h| h.call.tool == SPEAK_TO_AGENT)
            }
            _ => None,
        })
        .next()
        .expect("speak_to_agent was called");
    assert!(spoke.success, "{}", spoke.output);
    let spoke: Value = serde_json::from_str(&spoke.output).unwrap();
    assert_eq!(spoke["agent_id"], "coder-1");
    assert!(reasoner.requests().iter().any(|r| matches!(r,
        ReasoningRequest::Answer { agent, from, message, .. }
            if agent.as_str() == "coder-1" && from.as_str() == "code_lead-1" && message == "what did you write?")));
    team.shutdown().await.unwrap();
}

/// A lead whose script tries each refused act once, then finishes.
fn refusals(request: &ReasoningRequest) -> ScriptedAnswer {
    match request {
        ReasoningRequest::Plan { .. } => ScriptedAnswer::Plan(docs_plan()),
        ReasoningRequest::NextAction { agent, subtask, history }
            if agent.as_str().starts_with("docs_lead") =>
        {
            match history.len() {
                0 => call(SPAWN_AGENT, json!({"role_name": "wizard", "task_prompt": "magic"})),
                1 => call(SPAWN_AGENT, json!({"role_name": "coder", "task_prompt": "code"})),
                2 => call(
                    SPAWN_AGENT,
                    json!({"role_name": "writer", "task_prompt": "write README.md first"}),
                ),
                3 => call(
                    SPAWN_AGENT,
                    json!({"role_name": "writer", "task_prompt": "write README.md again"}),
                ),
                4 => call(SPEAK_TO_AGENT, json!({"agent_id": "top-b", "message": "hello"})),
                5 => call(SPEAK_TO_AGENT, json!({"agent_id": "nobody-9", "message": "hello"})),
                6 => call(DESPAWN_AGENT, json!({"agent_id": 42})),
                7 => call("write_file", json!({"path": "x", "content": "y"})),
                8 => call(DESPAWN_AGENT, json!({"agent_id": "docs_lead-1"})),
                9 => call("spawn_agent", json!({"role_name": 7, "task_prompt": "x"})),
                _ => {
                    let _ = subtask;
                    finish("done")
                }
            }
        }
        ReasoningRequest::NextAction { subtask, history, .. } => {
            worker(&subtask.step.description, history)
        }
        _ => ScriptedAnswer::Fallback,
    }
}

#[tokio::test(start_paused = true)]
async fn every_spawn_is_a_delegation_span_from_spawner_to_spawned() {
    let collector = agent_telemetry::testing::Collector::default();
    // The runtime is on this thread (tokio's test runtime): every agent's span reaches it.
    let _default = tracing::subscriber::set_default(collector.subscriber());
    let dir = tempfile::tempdir().unwrap();
    let (services, _) = scripted_services(dir.path(), script);
    let team = Team::start(goal_team(roles()), services.clone()).await.unwrap();
    let outcome = run_goal(&team).await;
    assert!(matches!(outcome, TaskOutcome::Succeeded { .. }), "{outcome:?}");
    let spans = collector.spans();
    let attr = |a: &BTreeMap<String, String>, k: &str| a.get(k).cloned().unwrap_or_default();
    let mut spawns: Vec<(String, String, String)> = spans
        .iter()
        .filter(|(name, a)| name == "strata.delegation" && attr(a, "delegation.kind") == "spawn")
        .map(|(_, a)| (attr(a, "delegation.from"), attr(a, "delegation.to"), attr(a, "agent.role")))
        .collect();
    spawns.sort();
    let records = audit(&services).await;
    let mut audited = spawned(&records);
    audited.sort();
    assert_eq!(spawns, audited, "one span per audited spawn");
    assert_eq!(spawns.len(), 6);
    // The spawned agents' work is traced too: their heartbeats and tool calls.
    for agent in ["coder-1", "tester-1", "writer-1"] {
        assert!(
            spans.iter().any(|(n, a)| n == "strata.heartbeat" && attr(a, "agent.id") == agent),
            "no heartbeat span of {agent}"
        );
    }
    assert!(spans.iter().any(|(n, _)| n.starts_with("execute_tool ")));
}

#[tokio::test(start_paused = true)]
async fn refused_spawns_and_calls_reach_the_model_as_tool_errors_and_the_team_keeps_running() {
    let dir = tempfile::tempdir().unwrap();
    let (services, reasoner) = scripted_services(dir.path(), refusals);
    let mut book: Vec<Role> = roles().roles().cloned().collect();
    for r in &mut book {
        if r.name == "writer" {
            r.max_instances = Some(1);
        }
    }
    let team =
        Team::start(goal_team(RoleBook::new(book).unwrap()), services.clone()).await.unwrap();
    let outcome = run_goal(&team).await;
    assert!(outcome.is_success(), "{outcome:?}");

    let history = reasoner
        .requests()
        .into_iter()
        .filter_map(|r| match r {
            ReasoningRequest::NextAction { agent, history, .. }
                if agent.as_str() == "docs_lead-1" =>
            {
                Some(history)
            }
            _ => None,
        })
        .max_by_key(Vec::len)
        .unwrap();
    let outputs: Vec<&str> = history.iter().map(|h| h.output.as_str()).collect();
    let expect = |i: usize, text: &str| {
        assert!(!history[i].success && outputs[i].contains(text), "call {i}: {:?}", outputs[i]);
    };
    expect(0, "unknown role `wizard`");
    expect(1, "may not spawn `coder`");
    assert!(history[2].success, "{}", outputs[2]);
    expect(3, "maximum of 1 agent(s) alive");
    expect(4, "not one of your subordinates");
    expect(5, "there is no agent `nobody-9`");
    expect(6, "despawn_agent needs `agent_id`");
    expect(7, "does not have the tool `write_file`");
    expect(8, "`docs_lead-1` is not one of your subordinates");
    expect(9, "spawn_agent needs `role_name` and `task_prompt`");

    // Every refusal is audited, and nothing was spawned by them.
    let records = audit(&services).await;
    let denied = records
        .iter()
        .filter(|r| {
            r.agent.as_str() == "docs_lead-1" && matches!(r.event, AuditEvent::Denied { .. })
        })
        .count();
    assert_eq!(denied, 9);
    assert_eq!(spawned(&records).len(), 2, "the docs lead and one writer");
    team.shutdown().await.unwrap();
}

#[tokio::test(start_paused = true)]
async fn the_spawn_depth_limit_stops_a_role_that_enables_itself() {
    fn nested(request: &ReasoningRequest) -> ScriptedAnswer {
        match request {
            ReasoningRequest::Plan { .. } => ScriptedAnswer::Plan(Plan {
                leads: vec![LeadRequest { role: "manager".into(), domain: "all".into() }],
                steps: vec![goal_step("s", "all", "manager", "manage")],
            }),
            ReasoningRequest::NextAction { history, .. } if history.is_empty() => {
                call(SPAWN_AGENT, json!({"role_name": "manager", "task_prompt": "manage"}))
            }
            ReasoningRequest::NextAction { .. } => finish("done"),
            _ => ScriptedAnswer::Fallback,
        }
    }
    let dir = tempfile::tempdir().unwrap();
    let (services, reasoner) = scripted_services(dir.path(), nested);
    let book = RoleBook::new([role("manager", AgentLayer::Mid, &[], &["manager"])]).unwrap();
    let mut spec = goal_team(book);
    spec.max_spawn_depth = 2;
    let team = Team::start(spec, services.clone()).await.unwrap();
    // manager-1 (depth 1) spawns manager-2 (depth 2), whose own spawn (depth 3) is refused.
    team.submit(Task::goal("deep", "nest")).await.unwrap();
    tokio::time::sleep(Duration::from_secs(60)).await;
    let records = audit(&services).await;
    assert_eq!(spawned(&records).len(), 2);
    let refused = reasoner.requests().into_iter().any(|r| matches!(r,
        ReasoningRequest::NextAction { agent, history, .. }
            if agent.as_str() == "manager-2" && history.first().is_some_and(|h| h.output.contains("past its limit of 2"))));
    assert!(refused, "manager-2 was told the depth limit");
    drop(team);
}

#[tokio::test(start_paused = true)]
async fn a_result_claiming_a_file_nobody_wrote_is_sent_back_once_then_kept_untrusted() {
    fn liar(request: &ReasoningRequest) -> ScriptedAnswer {
        match request {
            ReasoningRequest::Plan { .. } => ScriptedAnswer::Plan(docs_plan()),
            ReasoningRequest::NextAction { agent, history, .. }
                if agent.as_str().starts_with("docs_lead") =>
            {
                if history.is_empty() {
                    call(
                        SPAWN_AGENT,
                        json!({"role_name": "writer", "task_prompt": "write README.md"}),
                    )
                } else {
                    finish("done")
                }
            }
            ReasoningRequest::NextAction { history, .. } => match history.len() {
                0 => call("write_file", json!({"path": "README.md", "content": "# hi\n"})),
                // Claims a file it never wrote, twice.
                _ => results(
                    "success",
                    "wrote the docs",
                    &[("README.md", "created"), ("ghost.md", "created")],
                ),
            },
            _ => ScriptedAnswer::Fallback,
        }
    }
    let dir = tempfile::tempdir().unwrap();
    let (services, reasoner) = scripted_services(dir.path(), liar);
    let team = Team::start(goal_team(roles()), services.clone()).await.unwrap();
    team.submit(Task::goal("docs", "docs")).await.unwrap();
    let outcome = tokio::time::timeout(Duration::from_secs(600), team.wait("docs")).await.unwrap();
    assert!(outcome.is_success(), "{outcome:?}");
    let rejected = reasoner.requests().into_iter().any(|r| matches!(r,
        ReasoningRequest::NextAction { agent, history, .. }
            if agent.as_str() == "writer-1" && history.iter().any(|h| h.output.contains("result rejected: ghost.md"))));
    assert!(rejected, "the first claim went back to the model");
    let records = audit(&services).await;
    let results: Vec<bool> = records
        .iter()
        .filter_map(|r| match &r.event {
            AuditEvent::Result { trusted, .. } => Some(*trusted),
            _ => None,
        })
        .collect();
    assert_eq!(results, vec![false], "kept, marked untrusted");
    assert!(!dir.path().join("ghost.md").exists());
    team.shutdown().await.unwrap();
}

#[tokio::test(start_paused = true)]
async fn a_lead_despawns_a_worker_mid_task_and_finishes_without_it() {
    fn despawner(request: &ReasoningRequest) -> ScriptedAnswer {
        match request {
            ReasoningRequest::Plan { .. } => ScriptedAnswer::Plan(Plan {
                leads: vec![LeadRequest { role: "code_lead".into(), domain: "code".into() }],
                steps: vec![goal_step("p", "code", "coder", "write add.sh")],
            }),
            ReasoningRequest::NextAction { agent, history, .. }
                if agent.as_str().starts_with("code_lead") =>
            {
                match history.len() {
                    0 => call(
                        SPAWN_AGENT,
                        json!({"role_name": "coder", "task_prompt": "write add.sh slowly"}),
                    ),
                    1 => call(DESPAWN_AGENT, json!({"agent_id": "coder-1"})),
                    2 => call(
                        SPEAK_TO_AGENT,
                        json!({"agent_id": "coder-1", "message": "still there?"}),
                    ),
                    _ => finish("did it myself in the end"),
                }
            }
            // The coder never gets to finish: it keeps reading.
            ReasoningRequest::NextAction { .. } => {
                call("read_file", json!({"path": "nothing.txt"}))
            }
            _ => ScriptedAnswer::Fallback,
        }
    }
    let dir = tempfile::tempdir().unwrap();
    let (services, reasoner) = scripted_services(dir.path(), despawner);
    let team = Team::start(goal_team(roles()), services.clone()).await.unwrap();
    team.submit(Task::goal("p", "add")).await.unwrap();
    let outcome = tokio::time::timeout(Duration::from_secs(600), team.wait("p")).await.unwrap();
    assert!(outcome.is_success(), "{outcome:?}");
    let records = audit(&services).await;
    assert!(records.iter().any(|r| r.agent.as_str() == "code_lead-1"
        && matches!(&r.event, AuditEvent::Despawned { agent, .. } if agent.as_str() == "coder-1")));
    assert!(records.iter().any(|r| r.agent.as_str() == "coder-1"
        && matches!(
            &r.event,
            AuditEvent::Transition { to: agent_state::AgentStatus::Terminated, .. }
        )));
    assert!(team.pool().get(&agent_state::AgentId::new("coder-1")).is_none());
    let told = reasoner.requests().into_iter().any(|r| matches!(r,
        ReasoningRequest::NextAction { agent, history, .. }
            if agent.as_str() == "code_lead-1" && history.get(2).is_some_and(|h| !h.success && h.output.contains("was despawned"))));
    assert!(told);
    team.shutdown().await.unwrap();
}

#[tokio::test(start_paused = true)]
async fn a_goal_run_killed_while_agents_spawn_resumes_without_spawning_twice() {
    let mut kills = 0;
    for kill_at in 1..=12usize {
        let dir = tempfile::tempdir().unwrap();
        let bus = Arc::new(message_bus::InMemoryBus::new());
        let (mut services, _) = scripted_services(dir.path(), script);
        services.bus = bus.clone();
        let team = Team::start(goal_team(roles()), services.clone()).await.unwrap();
        team.submit(Task::goal("add", "add, tested, with a README")).await.unwrap();
        // Stop abruptly once `kill_at` audit records of spawning and tool calls exist.
        let mut waited = 0;
        loop {
            let n = audit(&services)
                .await
                .iter()
                .filter(|r| {
                    matches!(r.event, AuditEvent::Spawned { .. } | AuditEvent::ToolCall { .. })
                })
                .count();
            if n >= kill_at || team.outcome("add").is_some() || waited > 10_000 {
                break;
            }
            tokio::task::yield_now().await;
            waited += 1;
        }
        if team.outcome("add").is_none() {
            kills += 1;
        }
        drop(team);
        bus.restart();
        let team = Team::resume(goal_team(roles()), services.clone()).await.unwrap();
        let outcome =
            tokio::time::timeout(Duration::from_secs(3600), team.wait("add")).await.unwrap();
        assert!(outcome.is_success(), "kill at {kill_at}: {outcome:?}");
        let records = audit(&services).await;
        let spawns = spawned(&records);
        assert_eq!(spawns.len(), 6, "kill at {kill_at}: no agent spawned twice: {spawns:?}");
        let writes = records
            .iter()
            .filter(|r| matches!(&r.event, AuditEvent::ToolCall { tool, success: true, summary, .. } if tool == "write_file" && summary.starts_with("wrote")))
            .count();
        assert_eq!(writes, 3, "kill at {kill_at}: every file written once");
        assert!(dir.path().join("README.md").is_file());
        team.shutdown().await.unwrap();
    }
    assert!(kills > 3, "the runs were killed mid-way ({kills} times)");
}

#[tokio::test(start_paused = true)]
async fn a_goal_only_task_on_the_rule_based_reasoner_is_refused_before_anything_starts() {
    let dir = tempfile::tempdir().unwrap();
    let team = Team::start(standard_team(), services(dir.path())).await.unwrap();
    let error = team.submit(Task::goal("g", "build me a compiler")).await.unwrap_err();
    assert!(matches!(error, SubmitError::CannotPlan { .. }), "{error}");
    assert!(error.to_string().contains("cannot plan from words"), "{error}");
    // Not submitted: the same id can be submitted again as a scripted plan.
    team.submit(hello_task("g")).await.unwrap();
    team.shutdown().await.unwrap();
}

/// A reasoner whose agents never manage to answer what is said to them.
struct Mute(Arc<ScriptedReasoner>);

#[async_trait::async_trait]
impl agent_core::Reasoner for Mute {
    fn name(&self) -> &str {
        "mute"
    }
    async fn review_decision(
        &self,
        who: agent_core::Persona<'_>,
        d: &agent_state::Decision,
    ) -> Result<agent_core::Verdict, agent_core::ReasonError> {
        self.0.review_decision(who, d).await
    }
    async fn vote(
        &self,
        who: agent_core::Persona<'_>,
        c: &agent_core::Conflict,
    ) -> Result<agent_state::BallotChoice, agent_core::ReasonError> {
        self.0.vote(who, c).await
    }
    async fn decompose(
        &self,
        who: agent_core::Persona<'_>,
        w: &agent_state::WorkPackage,
        t: &[agent_core::Candidate],
    ) -> Result<Vec<agent_core::Placement>, agent_core::ReasonError> {
        self.0.decompose(who, w, t).await
    }
    async fn next_action(
        &self,
        who: agent_core::Persona<'_>,
        s: &agent_state::Subtask,
        h: &[ToolCallRecord],
    ) -> Result<NextAction, agent_core::ReasonError> {
        self.0.next_action(who, s, h).await
    }
    async fn judge_progress(
        &self,
        who: agent_core::Persona<'_>,
        t: &Task,
        r: &[agent_state::SubtaskResult],
        g: &str,
    ) -> Result<agent_core::Judgement, agent_core::ReasonError> {
        self.0.judge_progress(who, t, r, g).await
    }
    fn plans(&self) -> bool {
        true
    }
    async fn plan(
        &self,
        who: agent_core::Persona<'_>,
        t: &Task,
        r: &RoleBook,
    ) -> Result<Plan, agent_core::ReasonError> {
        self.0.plan(who, t, r).await
    }
    async fn answer(
        &self,
        _: agent_core::Persona<'_>,
        _: &agent_state::AgentId,
        _: &str,
        _: &str,
    ) -> Result<String, agent_core::ReasonError> {
        std::future::pending().await
    }
}

#[tokio::test(start_paused = true)]
async fn speak_to_agent_times_out_when_the_agent_does_not_answer() {
    fn talker(request: &ReasoningRequest) -> ScriptedAnswer {
        match request {
            ReasoningRequest::Plan { .. } => ScriptedAnswer::Plan(docs_plan()),
            ReasoningRequest::NextAction { agent, history, .. }
                if agent.as_str().starts_with("docs_lead") =>
            {
                match history.len() {
                    0 => call(
                        SPAWN_AGENT,
                        json!({"role_name": "writer", "task_prompt": "write README.md"}),
                    ),
                    1 => {
                        call(SPEAK_TO_AGENT, json!({"agent_id": "writer-1", "message": "status?"}))
                    }
                    _ => finish("done"),
                }
            }
            ReasoningRequest::NextAction { subtask, history, .. } => {
                worker(&subtask.step.description, history)
            }
            _ => ScriptedAnswer::Fallback,
        }
    }
    let dir = tempfile::tempdir().unwrap();
    let scripted = Arc::new(ScriptedReasoner::from_fn(talker));
    let mut services = services(dir.path());
    services.reasoner = Arc::new(Mute(scripted.clone()));
    // The writer's turns are cut at 30 s, before its silent model's call is (at the silence
    // limit, 2 minutes, after which it would answer with its status): it never answers.
    let mut spec = goal_team(roles());
    spec.timeouts.turn_ms = 30_000;
    let team = Team::start(spec, services.clone()).await.unwrap();
    team.submit(Task::goal("t", "docs")).await.unwrap();
    let outcome = tokio::time::timeout(Duration::from_secs(3600), team.wait("t")).await.unwrap();
    assert!(outcome.is_success(), "{outcome:?}");
    // The lead's loop was told, as a failed call, that nobody answered in time.
    let told = scripted.requests().into_iter().any(|r| matches!(r,
        ReasoningRequest::NextAction { agent, history, .. }
            if agent.as_str() == "docs_lead-1"
                && history.iter().any(|h| h.call.tool == SPEAK_TO_AGENT && !h.success && h.output.contains("did not answer within 120 s"))));
    assert!(told, "the lead saw the timeout");
    let records = audit(&services).await;
    assert!(records.iter().any(|r| r.agent.as_str() == "writer-1"
        && matches!(&r.event, AuditEvent::Error { error, .. } if error.contains("timed out") || error.contains("timeout"))),
        "the writer's turns hung in `answer` and timed out");
    team.shutdown().await.unwrap();
}

#[tokio::test(start_paused = true)]
async fn permissions_only_narrow_down_the_tree() {
    // `lead` may spawn `sublead`, but `sublead` enables `writer`, which `lead` does not: it
    // would give its subordinate a role it does not hold itself.
    fn widen(request: &ReasoningRequest) -> ScriptedAnswer {
        match request {
            ReasoningRequest::Plan { .. } => ScriptedAnswer::Plan(Plan {
                leads: vec![LeadRequest { role: "lead".into(), domain: "all".into() }],
                steps: vec![goal_step("s", "all", "coder", "lead")],
            }),
            ReasoningRequest::NextAction { history, .. } if history.is_empty() => {
                call(SPAWN_AGENT, json!({"role_name": "sublead", "task_prompt": "lead more"}))
            }
            ReasoningRequest::NextAction { .. } => finish("done"),
            _ => ScriptedAnswer::Fallback,
        }
    }
    let dir = tempfile::tempdir().unwrap();
    let (services, reasoner) = scripted_services(dir.path(), widen);
    let book = RoleBook::new([
        role("lead", AgentLayer::Mid, &[], &["sublead", "coder"]),
        role("sublead", AgentLayer::Mid, &[], &["coder", "writer"]),
        role("coder", AgentLayer::Bottom, &["write_file"], &[]),
        role("writer", AgentLayer::Bottom, &["write_file"], &[]),
    ])
    .unwrap();
    let team = Team::start(goal_team(book), services.clone()).await.unwrap();
    team.submit(Task::goal("n", "narrow")).await.unwrap();
    let outcome = tokio::time::timeout(Duration::from_secs(600), team.wait("n")).await.unwrap();
    assert!(outcome.is_success(), "{outcome:?}");
    let refused = reasoner.requests().into_iter().any(|r| {
        matches!(r,
        ReasoningRequest::NextAction { agent, history, .. }
            if agent.as_str() == "lead-1" && history.first().is_some_and(|h| !h.success
                && h.output.contains("holds the enabled role `writer`, which you do not hold")))
    });
    assert!(refused, "the spawn that would widen permissions was refused");
    assert_eq!(spawned(&audit(&services).await).len(), 1, "only the lead");
    team.shutdown().await.unwrap();
}

#[tokio::test(start_paused = true)]
async fn goal_steps_of_a_plan_run_on_a_configured_team_whose_executors_choose_their_calls() {
    fn executor(request: &ReasoningRequest) -> ScriptedAnswer {
        match request {
            ReasoningRequest::NextAction { history, subtask, .. } => {
                assert!(subtask.step.tool.is_empty(), "a goal step names no tool");
                if history.is_empty() {
                    call("write_file", json!({"path": "hello.txt", "content": "hello\n"}))
                } else {
                    finish("wrote hello.txt")
                }
            }
            _ => ScriptedAnswer::Fallback,
        }
    }
    let dir = tempfile::tempdir().unwrap();
    let (services, _) = scripted_services(dir.path(), executor);
    let team = Team::start(standard_team(), services).await.unwrap();
    let task = Task {
        id: "hello".into(),
        goal: "greet".into(),
        steps: vec![goal_step("greet", "docs", "writer", "write hello.txt saying hello")],
    };
    assert!(!task.is_scripted());
    team.submit(task).await.unwrap();
    let outcome = tokio::time::timeout(Duration::from_secs(600), team.wait("hello")).await.unwrap();
    let TaskOutcome::Succeeded { results, .. } = &outcome else { panic!("{outcome:?}") };
    assert_eq!(results[0].output, "wrote hello.txt");
    assert!(results[0].agent.as_str().starts_with("bottom-d"), "a docs executor did it");
    assert_eq!(std::fs::read_to_string(dir.path().join("hello.txt")).unwrap(), "hello\n");
    team.shutdown().await.unwrap();
}

#[tokio::test(start_paused = true)]
async fn a_spawned_worker_of_a_role_with_a_kind_runs_its_task_as_a_run_of_the_kind() {
    fn script(request: &ReasoningRequest) -> ScriptedAnswer {
        match request {
            ReasoningRequest::Plan { .. } => ScriptedAnswer::Plan(docs_plan()),
            ReasoningRequest::NextAction { agent, history, .. }
                if agent.as_str().starts_with("docs_lead") =>
            {
                match (count(history, SPAWN_AGENT), results_in(history)) {
                    (0, _) => call(
                        SPAWN_AGENT,
                        json!({"role_name": "writer", "task_prompt": "write a README for add.sh"}),
                    ),
                    (_, 0) => finish("waiting for the writer"),
                    _ => finish("README drafted"),
                }
            }
            // The writer kind drafts through the reasoner: its only question.
            ReasoningRequest::Compose { .. } => ScriptedAnswer::Compose("# add\n\nAdds.".into()),
            ReasoningRequest::NextAction { agent, .. } => {
                panic!("{agent} chose a tool call: a worker with a kind runs the kind")
            }
            _ => ScriptedAnswer::Fallback,
        }
    }
    let mut writer = role("writer", AgentLayer::Bottom, &["write_file"], &[]);
    writer.kind = Some("writer_agent".into());
    let roles =
        RoleBook::new([role("docs_lead", AgentLayer::Mid, &[], &["writer"]), writer]).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let (services, reasoner) = scripted_services(dir.path(), script);
    let team = Team::start(goal_team(roles), services.clone()).await.unwrap();
    team.submit(Task::goal("docs", "a README")).await.unwrap();
    let outcome = tokio::time::timeout(Duration::from_secs(600), team.wait("docs")).await.unwrap();
    assert!(outcome.is_success(), "{outcome:?}");
    let composed: Vec<String> = reasoner
        .requests()
        .into_iter()
        .filter_map(|r| match r {
            ReasoningRequest::Compose { agent, instruction, .. } => {
                Some(format!("{agent}: {instruction}"))
            }
            _ => None,
        })
        .collect();
    assert_eq!(composed.len(), 1, "{composed:?}");
    assert!(
        composed[0].starts_with("writer-1: ") && composed[0].contains("write a README for add.sh")
    );
    let records = audit(&services).await;
    let artifacts: Vec<String> = records
        .iter()
        .filter_map(|r| match &r.event {
            AuditEvent::Result { result, trusted: true, .. } if r.agent.as_str() == "writer-1" => {
                Some(result.artifacts.iter().map(|a| a.file_path.clone()).collect::<Vec<_>>())
            }
            _ => None,
        })
        .flatten()
        .collect();
    assert_eq!(artifacts.len(), 1, "{artifacts:?}");
    assert!(artifacts[0].starts_with("drafts/"), "{artifacts:?}");
    assert_eq!(
        std::fs::read_to_string(dir.path().join(&artifacts[0])).unwrap(),
        "# add\n\nAdds.\n"
    );
    team.shutdown().await.unwrap();
}

/// Issue 31, item 2 on the goal-driven path: a worker whose model keeps failing retries at
/// later heartbeats (1, 2, 4), then fails and reports to its lead; the lead's `speak_to_agent`
/// to it fails at once with "agent writer-1 has failed and cannot process messages" (not after
/// the 120 s reply limit), and the lead spawns a replacement that does the work.
#[tokio::test(start_paused = true)]
async fn a_failed_worker_refuses_speak_at_once_and_its_lead_spawns_a_replacement() {
    fn script(request: &ReasoningRequest) -> ScriptedAnswer {
        match request {
            ReasoningRequest::Plan { .. } => ScriptedAnswer::Plan(docs_plan()),
            ReasoningRequest::NextAction { agent, history, .. }
                if agent.as_str().starts_with("docs_lead") =>
            {
                let spawn = || {
                    call(
                        SPAWN_AGENT,
                        json!({"role_name": "writer", "task_prompt": "write README.md for add.sh"}),
                    )
                };
                match (
                    count(history, SPAWN_AGENT),
                    results_in(history),
                    count(history, SPEAK_TO_AGENT),
                ) {
                    (0, _, _) => spawn(),
                    (1, 0, _) => finish("waiting for the writer"),
                    (1, _, 0) => {
                        call(SPEAK_TO_AGENT, json!({"agent_id": "writer-1", "message": "status?"}))
                    }
                    (1, _, _) => spawn(),
                    (2, r, _) if r < 2 => finish("waiting for the replacement"),
                    _ => finish("README written"),
                }
            }
            ReasoningRequest::NextAction { agent, .. } if agent.as_str() == "writer-1" => {
                ScriptedAnswer::Fail(agent_core::ReasonError::BadQuestion(
                    "the model is down".into(),
                ))
            }
            ReasoningRequest::NextAction { subtask, history, .. } => {
                worker(&subtask.step.description, history)
            }
            _ => ScriptedAnswer::Fallback,
        }
    }
    let dir = tempfile::tempdir().unwrap();
    let (services, scripted) = scripted_services(dir.path(), script);
    let team = Team::start(goal_team(roles()), services.clone()).await.unwrap();
    team.submit(Task::goal("t", "docs")).await.unwrap();
    let outcome = tokio::time::timeout(Duration::from_secs(3600), team.wait("t")).await.unwrap();
    assert!(outcome.is_success(), "{outcome:?}");

    let refusal = "agent writer-1 has failed and cannot process messages";
    let told = scripted.requests().into_iter().any(|r| matches!(r,
        ReasoningRequest::NextAction { agent, history, .. }
            if agent.as_str() == "docs_lead-1"
                && history.iter().any(|h| h.call.tool == SPEAK_TO_AGENT && !h.success && h.output.contains(refusal))
                && !history.iter().any(|h| h.output.contains("did not answer within"))));
    assert!(told, "the lead's speak_to_agent failed with the refusal, not the reply limit");
    let records = audit(&services).await;
    let waits: Vec<Option<u64>> = records
        .iter()
        .filter(|r| r.agent.as_str() == "writer-1")
        .filter_map(|r| match &r.event {
            AuditEvent::Retry { wait_beats, .. } => Some(*wait_beats),
            _ => None,
        })
        .collect();
    assert_eq!(waits, [Some(1), Some(2), Some(4), None], "writer-1's attempts");
    assert!(records.iter().any(|r| r.agent.as_str() == "writer-1"
        && matches!(&r.event, AuditEvent::Denied { error, .. } if error == refusal)));
    let spawns = spawned(&records);
    assert!(
        spawns.iter().any(|(by, agent, _)| by == "docs_lead-1" && agent == "writer-2"),
        "{spawns:?}"
    );
    team.shutdown().await.unwrap();
}

/// The docs team's lead: spawns `writer-1` and waits for its results.
fn docs_lead(history: &[ToolCallRecord]) -> ScriptedAnswer {
    let spawn = || {
        call(
            SPAWN_AGENT,
            json!({"role_name": "writer", "task_prompt": "write README.md for add.sh"}),
        )
    };
    match (count(history, SPAWN_AGENT), results_in(history)) {
        (0, _) => spawn(),
        (_, 0) => finish("waiting for the writer"),
        _ => finish("README written"),
    }
}

/// Each of `writer-1`'s panics, as audited: (count, failed).
fn panics_of(records: &[AuditRecord], agent: &str) -> Vec<(u32, bool)> {
    records
        .iter()
        .filter(|r| r.agent.as_str() == agent)
        .filter_map(|r| match &r.event {
            AuditEvent::AgentPanicked { count, failed, .. } => Some((*count, *failed)),
            _ => None,
        })
        .collect()
}

/// Issue 31: a worker whose turn panics once (its model call panics) is reloaded from its
/// stored state, its message comes again, and it does the work: the run succeeds, the panic is
/// audited, and no message is left unacknowledged.
#[tokio::test(start_paused = true)]
async fn a_worker_whose_turn_panics_once_is_reloaded_and_the_run_succeeds() {
    static PANICKED: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);
    fn script(request: &ReasoningRequest) -> ScriptedAnswer {
        match request {
            ReasoningRequest::Plan { .. } => ScriptedAnswer::Plan(docs_plan()),
            ReasoningRequest::NextAction { agent, history, .. }
                if agent.as_str().starts_with("docs_lead") =>
            {
                docs_lead(history)
            }
            ReasoningRequest::NextAction { agent, subtask, history } => {
                if agent.as_str() == "writer-1"
                    && !PANICKED.swap(true, std::sync::atomic::Ordering::SeqCst)
                {
                    panic!("the layer broke");
                }
                worker(&subtask.step.description, history)
            }
            _ => ScriptedAnswer::Fallback,
        }
    }
    let dir = tempfile::tempdir().unwrap();
    let bus = Arc::new(message_bus::InMemoryBus::new());
    let (mut services, _) = scripted_services(dir.path(), script);
    services.bus = bus.clone();
    let team = Team::start(goal_team(roles()), services.clone()).await.unwrap();
    team.submit(Task::goal("t", "docs")).await.unwrap();
    let outcome = tokio::time::timeout(Duration::from_secs(3600), team.wait("t")).await.unwrap();
    assert!(outcome.is_success(), "{outcome:?}");
    let records = audit(&services).await;
    assert_eq!(panics_of(&records, "writer-1"), [(1, false)]);
    let spawns = spawned(&records);
    assert!(!spawns.iter().any(|(_, agent, _)| agent == "writer-2"), "no replacement: {spawns:?}");
    team.stop().await;
    use message_bus::MessageBus as _;
    for agent in ["writer-1", "docs_lead-1"] {
        let inbox = agent_state::Address::Agent(agent.into());
        assert_eq!(bus.pending(&inbox).await.unwrap(), 0, "{agent}'s inbox is read");
        assert_eq!(bus.release(&inbox).await.unwrap(), 0, "{agent}'s mail is acknowledged");
    }
    team.shutdown().await.unwrap();
}

/// Issue 31: a worker whose every turn panics fails after `MAX_PANICS` panics in a row with
/// reason "panicked: ...", its lead gets the error report with the work it abandoned and
/// moves it on, and the run ends in success (never a worker marked busy for ever).
#[tokio::test(start_paused = true)]
async fn a_worker_that_always_panics_fails_and_its_lead_is_told() {
    fn script(request: &ReasoningRequest) -> ScriptedAnswer {
        match request {
            ReasoningRequest::Plan { .. } => ScriptedAnswer::Plan(docs_plan()),
            ReasoningRequest::NextAction { agent, history, .. }
                if agent.as_str().starts_with("docs_lead") =>
            {
                let spawn = || {
                    call(
                        SPAWN_AGENT,
                        json!({"role_name": "writer", "task_prompt": "write README.md for add.sh"}),
                    )
                };
                match (count(history, SPAWN_AGENT), results_in(history)) {
                    (0, _) => spawn(),
                    (_, 0) => finish("waiting for the writer"),
                    _ => finish("README written"),
                }
            }
            ReasoningRequest::NextAction { agent, .. } if agent.as_str() == "writer-1" => {
                panic!("the layer always breaks")
            }
            ReasoningRequest::NextAction { subtask, history, .. } => {
                worker(&subtask.step.description, history)
            }
            _ => ScriptedAnswer::Fallback,
        }
    }
    let dir = tempfile::tempdir().unwrap();
    let (services, _) = scripted_services(dir.path(), script);
    let team = Team::start(goal_team(roles()), services.clone()).await.unwrap();
    team.submit(Task::goal("t", "docs")).await.unwrap();
    let outcome = tokio::time::timeout(Duration::from_secs(3600), team.wait("t")).await.unwrap();
    let records = audit(&services).await;
    let max = agent_core::MAX_PANICS;
    let expected: Vec<(u32, bool)> = (1..=max).map(|n| (n, n == max)).collect();
    assert_eq!(panics_of(&records, "writer-1"), expected);
    let failed = records.iter().any(|r| {
        r.agent.as_str() == "writer-1"
            && matches!(&r.event, AuditEvent::Transition { to: agent_state::AgentStatus::Failed, reason, .. }
                if reason.starts_with("panicked: ") && reason.contains("the layer always breaks"))
    });
    assert!(failed, "writer-1 failed with reason panicked: <message>");
    assert!(outcome.is_success(), "{outcome:?}");
    let told = records.iter().any(|r| {
        r.agent.as_str() == "docs_lead-1"
            && matches!(&r.event, AuditEvent::Transition { reason, .. }
                if reason.contains("error_report t/writer-1"))
    });
    assert!(told, "the lead got writer-1's error report");
    team.shutdown().await.unwrap();
}
