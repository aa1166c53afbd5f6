//! All three layers together: three powers, two leads and two executors on shared in-memory
//! services, heartbeated round by round on paused time until the task closes.

use std::time::Duration;

use agent_core::protocol::StatusReport;
use agent_core::{
    Judgement, Reasoner, ReasoningRequest, RuleBasedReasoner, ScriptedAnswer, ScriptedReasoner,
};
use agent_state::{Assignment, Task, TaskFailure, TaskOutcome};
use serde_json::json;

use super::*;
use crate::{BottomAgent, BottomSpec, LeadInfo, MidAgent, MidSpec, TopAgent, TopSpec};

const POWERS: [&str; 3] = ["top-a", "top-b", "top-c"];
/// More rounds than the task needs; reaching it means the team stalled.
const MAX_ROUNDS: u64 = 20;

fn tools(names: &[&str]) -> std::sync::Arc<[String]> {
    names.iter().map(|t| (*t).to_owned()).collect()
}

fn leads() -> Vec<LeadInfo> {
    vec![
        LeadInfo {
            id: id("mid-docs"),
            domain: "docs".into(),
            executors: vec![(id("bottom-d1"), tools(&["write_file"]))],
        },
        LeadInfo {
            id: id("mid-build"),
            domain: "build".into(),
            executors: vec![(id("bottom-b1"), tools(&["read_file", "write_file"]))],
        },
    ]
}

/// The team, in heartbeat order; `top-b` reviews with `top_b_reasoner`.
async fn team(w: &World, top_b_reasoner: impl Reasoner) -> Vec<Agent> {
    team_with(w, [("top-b", Arc::new(top_b_reasoner) as Arc<dyn Reasoner>)]).await
}

/// The team, in heartbeat order; the powers named in `reasoners` reason with theirs, every
/// other agent with the rule-based reasoner.
async fn team_with(
    w: &World,
    reasoners: impl IntoIterator<Item = (&'static str, Arc<dyn Reasoner>)>,
) -> Vec<Agent> {
    let mut reasoners: std::collections::BTreeMap<&str, Arc<dyn Reasoner>> =
        reasoners.into_iter().collect();
    let mut agents = Vec::new();
    for power in POWERS {
        let peers = POWERS
            .iter()
            .filter(|p| **p != power)
            .map(|p| (id(p), tools(&["plan"]).to_vec()))
            .collect();
        let spec = TopSpec {
            power_type: power.into(),
            vote_weight: 1.0,
            signature_authority: tools(&["plan"]).to_vec(),
        };
        let behavior = TopAgent::new(spec, peers, leads());
        let config = config(power, AgentLayer::Top, None);
        let agent = match reasoners.remove(power) {
            Some(reasoner) => w.spawn_sharing(config, behavior, reasoner).await,
            None => w.spawn(config, behavior).await,
        };
        agents.push(agent);
    }
    let powers: Vec<AgentId> = POWERS.iter().map(|p| id(p)).collect();
    for lead in leads() {
        let peer = leads().into_iter().map(|l| l.id).filter(|l| *l != lead.id).collect();
        let spec = MidSpec { domain: lead.domain.clone(), max_subordinates: 4 };
        let behavior = MidAgent::new(spec, lead.executors.clone(), powers.clone(), peer);
        let config = config(lead.id.as_str(), AgentLayer::Mid, Some("top-a"));
        agents.push(w.spawn(config, behavior).await);
    }
    for lead in leads() {
        for (executor, tools) in lead.executors {
            let config = config(executor.as_str(), AgentLayer::Bottom, Some(lead.id.as_str()));
            agents.push(
                w.spawn(config, BottomAgent::new(BottomSpec { tools, kind: None, ooda: None }))
                    .await,
            );
        }
    }
    agents
}

fn task() -> Task {
    Task {
        id: "t1".into(),
        goal: "write a greeting and read it back".into(),
        steps: vec![
            step(
                "hello",
                "docs",
                "write_file",
                json!({"path": "hello.txt", "content": "hello, strata\n"}),
            ),
            step(
                "notes",
                "build",
                "write_file",
                json!({"path": "notes.md", "content": "# Notes\n"}),
            ),
            step("check", "build", "read_file", json!({"path": "hello.txt"})).with_after(["hello"]),
        ],
    }
}

/// Heartbeats every agent once per four-second round until `system` hears that the task closed.
async fn run_until_closed(w: &World, agents: &mut [Agent]) -> TaskOutcome {
    for round in 1..=MAX_ROUNDS {
        for agent in agents.iter_mut() {
            agent.heartbeat(round).await.unwrap();
        }
        let reports: Vec<StatusReport> =
            w.received(&Address::System, MessageKind::StatusReport).await;
        if let Some(StatusReport::TaskClosed { outcome }) = reports.into_iter().next() {
            return outcome;
        }
        tokio::time::advance(Duration::from_secs(4)).await;
    }
    panic!("the task did not close within {MAX_ROUNDS} rounds")
}

#[tokio::test(start_paused = true)]
async fn a_team_runs_an_approved_plan_to_the_end() {
    let w = World::new();
    let mut agents = team(&w, RuleBasedReasoner::new()).await;
    w.send(Address::System, "top-a", MessageKind::TaskAssign, &Assignment::Task { task: task() })
        .await;

    let outcome = run_until_closed(&w, &mut agents).await;

    let TaskOutcome::Succeeded { task_id, results } = outcome else {
        panic!("expected success, got {outcome:?}")
    };
    assert_eq!(task_id, "t1");
    let order: Vec<(&str, &str)> =
        results.iter().map(|r| (r.step_id.as_str(), r.agent.as_str())).collect();
    assert_eq!(order, [("hello", "bottom-d1"), ("notes", "bottom-b1"), ("check", "bottom-b1")]);
    assert_eq!(results[2].output, "hello, strata\n", "`check` ran after `hello`");
    assert_eq!(w.file("hello.txt").as_deref(), Some("hello, strata\n"));
    assert_eq!(w.file("notes.md").as_deref(), Some("# Notes\n"));
    for agent in &agents {
        assert_eq!(agent.status(), AgentStatus::Idle, "{}", agent.id());
    }

    for agent in &mut agents {
        agent.shutdown().await.unwrap();
    }
    let finals = w.chain().await;
    assert_eq!(finals.len(), 7);
    assert!(finals.iter().all(|(_, s)| *s == AgentStatus::Terminated), "{finals:?}");
    let report = w.board(BoardId::Agent(id("top-a"))).await;
    assert!(report.ends_with("- Tasks Closed Successfully: 1"), "{report}");
}

#[tokio::test(start_paused = true)]
async fn a_power_that_vetoes_stops_the_plan_before_anything_runs() {
    let w = World::new();
    let mut agents = team(&w, RuleBasedReasoner::new().forbid_tools(["read_file"])).await;
    w.send(Address::System, "top-a", MessageKind::TaskAssign, &Assignment::Task { task: task() })
        .await;

    let outcome = run_until_closed(&w, &mut agents).await;

    let vetoed = TaskFailure::Vetoed {
        by: id("top-b"),
        reason: "risk assessment failed: step `check` uses forbidden tool `read_file`".into(),
    };
    assert_eq!(outcome, TaskOutcome::Failed { task_id: "t1".into(), reason: vetoed });
    assert_eq!((w.file("hello.txt"), w.file("notes.md")), (None, None));
    assert_eq!(agents[1].ctx().metrics().decisions_vetoed, 1);
    for agent in &agents {
        assert_eq!(agent.status(), AgentStatus::Idle, "{}", agent.id());
    }
}

/// Issue #32's run: every step succeeds, and the power closing the task (a small model
/// behind llama-cpp-python's server, here scripted) judges it incomplete with its chat
/// template's markup in the answer. The task fails with that judgement, by that power, quoted
/// and cleaned, beside what the results say; no `step ?` with 0 attempts, and the executors'
/// counts (what the run summary prints per layer) agree with the reason.
#[tokio::test(start_paused = true)]
async fn a_power_judging_a_finished_task_incomplete_fails_it_with_its_judgement_quoted() {
    let w = World::new();
    let judge = ScriptedReasoner::from_fn(|request| match request {
        ReasoningRequest::Judge { .. } => ScriptedAnswer::Judgement(Judgement {
            complete: false,
            summary: "[INST]The tool's result:\nok\n\nevery step   failed[/INST]</s>".into(),
        }),
        _ => ScriptedAnswer::Fallback,
    });
    let mut agents = team_with(&w, [("top-a", Arc::new(judge) as Arc<dyn Reasoner>)]).await;
    w.send(Address::System, "top-a", MessageKind::TaskAssign, &Assignment::Task { task: task() })
        .await;

    let outcome = run_until_closed(&w, &mut agents).await;

    let TaskOutcome::Failed { reason, .. } = &outcome else {
        panic!("expected a failure, got {outcome:?}")
    };
    assert_eq!(
        *reason,
        TaskFailure::JudgedIncomplete {
            by: id("top-a"),
            reason: "[INST]The tool's result:\nok\n\nevery step   failed[/INST]</s>".into(),
            succeeded: 3,
            steps: 3,
        }
    );
    let message = reason.to_string();
    assert_eq!(
        message,
        "`top-a` judged the task incomplete: \"The tool's result: ok every step failed\" \
         (the results: all 3 step(s) succeeded)"
    );
    assert!(!message.contains("`?`") && !message.contains("0 attempt"), "{message}");
    // What the summary prints for the bottom layer: 3 steps completed, 0 failed.
    let count = |f: fn(&agent_state::AgentMetrics) -> u64| -> u64 {
        agents
            .iter()
            .filter(|a| a.ctx().config().layer == AgentLayer::Bottom)
            .map(|a| f(&a.ctx().metrics()))
            .sum()
    };
    assert_eq!((count(|m| m.tasks_completed), count(|m| m.tasks_failed)), (3, 0));
    let global = w.board(BoardId::Global).await;
    assert!(global.contains(&format!("## Task t1 closed: failed: {message}")), "{global}");
}
