//! Tests of a run's timeline: each record and model call goes to the piece of work it
//! belongs to, and the JSON gives them with their times.
#![allow(clippy::unwrap_used, reason = "tests")]

use agent_core::{AuditEvent, AuditRecord};
use agent_state::{AgentId, Assignment, Message, MessageKind, ProgressReport};
use agent_state::{
    MessageId, PlanStep, ProgressStatus, StepTarget, Subtask, SubtaskResult, Timestamp,
};

use super::*;
use crate::tests::{call, record};

fn assign(n: u128, at: u64, step: &str, tool: &str, to: &str, attempt: u32) -> Message {
    let subtask = Subtask {
        task_id: "t".into(),
        step: PlanStep::scripted(
            step,
            format!("do {step}"),
            StepTarget::Domain("d".into()),
            tool,
            json!({"n": n}),
        ),
        assignee: AgentId::new(to),
        attempt,
    };
    let content = serde_json::to_value(Assignment::Subtask { subtask }).unwrap();
    Message::new(
        MessageId::from_u128(n),
        AgentId::new("lead"),
        AgentId::new(to),
        MessageKind::TaskAssign,
        content,
        Timestamp(at),
    )
}

fn report(n: u128, at: u64, step: &str, from: &str, success: bool) -> Message {
    let report = ProgressReport {
        task_id: "t".into(),
        status: if success { ProgressStatus::Completed } else { ProgressStatus::Failed },
        percentage: 100,
        description: String::new(),
        results: vec![SubtaskResult {
            task_id: "t".into(),
            step_id: step.into(),
            agent: AgentId::new(from),
            success,
            output: format!("{step} output"),
            result: None,
        }],
        failure: None,
    };
    Message::new(
        MessageId::from_u128(n),
        AgentId::new(from),
        AgentId::new("lead"),
        MessageKind::ProgressReport,
        serde_json::to_value(report).unwrap(),
        Timestamp(at),
    )
}

fn tool(seq: u64, at: u64, agent: &str, tool: &str) -> AuditRecord {
    let event = AuditEvent::ToolCall {
        tool: tool.into(),
        args: json!({}),
        success: true,
        summary: "ok".into(),
    };
    AuditRecord { seq, at: Timestamp(at), agent: AgentId::new(agent), ..record(event) }
}

/// Two steps at once for one executor: each tool call goes to the step whose tool it
/// names; a failed step handed out again is a second piece of work with its attempt; a
/// step with no result yet is not finished; another agent's call is in none of them.
#[test]
fn records_go_to_the_step_they_belong_to() {
    let messages = vec![
        assign(1, 100, "list", "list_dir", "e1", 1),
        assign(2, 100, "measure", "shell", "e1", 1),
        report(3, 300, "list", "e1", true),
        report(4, 400, "measure", "e1", false),
        assign(5, 450, "measure", "shell", "e2", 2),
    ];
    let records = vec![
        tool(1, 150, "e1", "shell"),
        tool(2, 200, "e1", "list_dir"),
        tool(3, 220, "e9", "shell"),
        tool(4, 500, "e2", "shell"),
    ];
    let entries = build(&messages, &records);
    let seqs = |e: &Entry<'_>| e.records.iter().map(|r| r.seq).collect::<Vec<_>>();
    assert_eq!(entries.len(), 3, "{entries:#?}");
    let (list, measure, again) = (&entries[0], &entries[1], &entries[2]);
    assert_eq!((list.key.as_str(), list.end, seqs(list)), ("t/list", Some(300), vec![2]));
    assert_eq!(list.outcome, Some((true, "list output".to_owned())));
    assert_eq!((measure.key.as_str(), seqs(measure)), ("t/measure", vec![1]));
    assert_eq!(measure.outcome.as_ref().map(|o| o.0), Some(false));
    assert_eq!((again.who.as_str(), again.attempt, again.end), ("e2", 2, None));
    assert_eq!(seqs(again), vec![4]);
    assert_eq!((measure.start, measure.end, measure.attempt), (100, Some(400), 1));
    assert_eq!(of_agent(build(&messages, &records), Some("e2")).len(), 1);
    assert_eq!(of_agent(build(&messages, &records), Some("lead")).len(), 3);
}

/// A step's model calls are its worker's calls that started while it had the step: not
/// another agent's, not the worker's before it was handed the step or after its result; a
/// step still going takes the worker's calls up to now. The plain text names them.
#[test]
fn a_steps_calls_are_its_workers_while_it_had_the_step() {
    let messages = vec![
        assign(1, 100, "list", "shell", "e1", 1),
        report(2, 300, "list", "e1", true),
        assign(3, 400, "measure", "shell", "e1", 1),
    ];
    let entries = build(&messages, &[]);
    let calls = vec![
        call(1, "e1", 50),
        call(2, "e1", 100),
        call(3, "e9", 150),
        call(4, "e1", 250),
        call(5, "e1", 350),
        call(6, "e1", 900),
    ];
    assert_eq!(calls_of(&entries[0], &calls), vec![2, 4]);
    assert_eq!(calls_of(&entries[1], &calls), vec![6]);
    let json = json(&entries, 0, &calls);
    assert_eq!(json["steps"][0]["calls"], serde_json::json!([2, 4]));
    assert_eq!(json["steps"][1]["calls"], serde_json::json!([6]));
    assert_eq!(json["steps"][0]["start_s"], serde_json::json!(0.1));
    assert_eq!(json["steps"][0]["duration_s"], serde_json::json!(0.2));
    assert_eq!(json["steps"][1]["end_s"], serde_json::Value::Null);
}

/// A spawned worker handed a step by its lead (a small model's scripted supervision): its
/// tool calls go to the step, the work started last; its task ends with it.
#[test]
fn a_spawned_workers_calls_go_to_its_step() {
    let spawn = AuditRecord {
        event: AuditEvent::Spawned {
            spawn: agent_core::spawn::SpawnRecord {
                agent: AgentId::new("w"),
                parent: AgentId::new("lead"),
                role: "coder".into(),
                layer: agent_state::AgentLayer::Bottom,
                task_prompt: "write it".into(),
                key: "k".into(),
                domain: None,
                depth: 2,
            },
        },
        agent: AgentId::new("lead"),
        ..tool(1, 100, "lead", "spawn_agent")
    };
    let end = AuditRecord {
        event: AuditEvent::Transition {
            from: agent_state::AgentStatus::ShuttingDown,
            to: agent_state::AgentStatus::Terminated,
            reason: "shutdown complete".into(),
        },
        ..tool(4, 900, "w", "none")
    };
    let records =
        vec![spawn, tool(2, 300, "w", "write_file"), tool(3, 400, "w", "write_file"), end];
    let messages = vec![assign(1, 110, "w", "coder", "w", 1), report(2, 500, "w", "w", true)];
    let entries = build(&messages, &records);
    let seqs = |e: &Entry<'_>| e.records.iter().map(|r| r.seq).collect::<Vec<_>>();
    assert_eq!(entries.len(), 2, "{entries:#?}");
    let (task, step) = (&entries[0], &entries[1]);
    assert_eq!((task.kind, task.end, &task.outcome), ("spawned", Some(900), &None));
    assert_eq!((step.kind, seqs(step)), ("step", vec![2, 3]));
    assert!(seqs(task).is_empty(), "{task:#?}");
    let json = json(&entries, 0, &[]);
    assert_eq!(json["steps"][0]["success"], serde_json::Value::Null, "no result returned");
    assert_eq!(json["steps"][1]["records"][0]["line"], event_line(&records[1], 0));
}
