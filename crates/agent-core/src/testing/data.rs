//! What the suite stores: agents, events, tool outputs, outcomes and blobs, including ids,
//! keys and texts a backend must store verbatim though its own names cannot hold them.

use agent_state::{AgentId, AgentMetrics, AgentStatus, TaskFailure, TaskOutcome, Timestamp};
use serde_json::json;

use crate::audit::{AuditEvent, PeerHelpOutcome, PeerHelpRequest};
use crate::state::AgentRecord;
use crate::tools::ToolOutput;

/// Agents that append records and save state. Beyond plain ids: an operator's id (`:`), and
/// characters that subjects and keys of a server cannot hold as they are.
pub(super) const AGENTS: [&str; 4] = ["top-1", "bottom_2", "human:ops", "a.b *>é"];

/// An agent that never appends or saves anything.
pub(super) const GHOST: &str = "ghost";

/// Tool journal keys: realistic ones, and the empty key, dots, spaces, wildcards, an escape
/// character, non-ASCII, and a long key.
pub(super) fn tool_keys() -> Vec<String> {
    vec![
        "bottom-1/task-1:s1#1#0".to_owned(),
        "bottom-1/task-1:s1#1#1".to_owned(),
        String::new(),
        "a.b..c. *>".to_owned(),
        "=41=2E%2e\\".to_owned(),
        "é/ü\u{1F600}\t\n".to_owned(),
        format!("bottom-9/{}", "k".repeat(300)),
    ]
}

/// Task ids of outcomes.
pub(super) const TASKS: [&str; 3] = ["task-1", "task.2 *", "é"];

/// The agent `name`.
pub(super) fn agent(name: &str) -> AgentId {
    AgentId::new(name)
}

/// Event number `n` of a few kinds, carrying `n` so that records differ.
pub(super) fn event(kind: usize, n: u64) -> AuditEvent {
    match kind % 5 {
        0 => AuditEvent::Transition {
            from: AgentStatus::Initializing,
            to: AgentStatus::Idle,
            reason: format!("ready {n}").into(),
        },
        1 => AuditEvent::ToolCall {
            tool: "shell".into(),
            args: json!({"command": format!("echo {n}"), "nested": [1, null, {"é": "ü"}]}),
            success: n.is_multiple_of(2),
            summary: format!("line {n}\nwith \"quotes\" and \u{1F600}"),
        },
        2 => AuditEvent::MissedHeartbeat { heartbeat: n },
        3 => AuditEvent::Denied { action: format!("write board mid-{n}"), error: "no".into() },
        _ => AuditEvent::Error { error: format!("failure {n}"), retry: 1, max_retries: 3 },
    }
}

/// One of each event kind the suite checks round-trips, with awkward contents.
pub(super) fn every_kind() -> Vec<AuditEvent> {
    let mut events: Vec<AuditEvent> = (0..5).map(|k| event(k, 7)).collect();
    events.push(AuditEvent::PeerHelp {
        peer: agent("bottom-3"),
        step: Some("task-1/s2".into()),
        request: PeerHelpRequest::TakeOver,
        outcome: PeerHelpOutcome::Refused { reason: "busy".into() },
    });
    events.push(AuditEvent::Despawned { agent: agent("bottom-4"), summary: "x".repeat(20_000) });
    events.push(AuditEvent::Operator {
        request: json!({"request": "approve", "decision": "d-1"}),
        outcome: "refused".into(),
        error: Some("unknown decision".into()),
    });
    events
}

/// Version `v` of `name`'s saved state.
pub(super) fn agent_record(name: &str, v: u64) -> AgentRecord {
    AgentRecord {
        id: agent(name),
        metrics: AgentMetrics {
            tasks_completed: v,
            average_task_duration_ms: 12.5,
            last_active: Timestamp(1_700_000_000_000 + v),
            ..AgentMetrics::default()
        },
        retries: u32::try_from(v % 4).unwrap_or(0),
        heartbeat: v,
        processed: Vec::new(),
        behavior: json!({"version": v, "notes": ["a", "é"], "deep": {"x": null}}),
        audit_head: None,
        parts: None,
    }
}

/// Output `v` of a tool call.
pub(super) fn tool_output(v: u64) -> ToolOutput {
    ToolOutput {
        success: !v.is_multiple_of(3),
        output: format!("output {v}\n{}", "o".repeat(usize::try_from(v % 4).unwrap_or(0) * 1000)),
        data: json!({"exit_code": v % 3, "stdout_truncated": false}),
    }
}

/// Outcome `v` of `task`.
pub(super) fn outcome(task: &str, v: u64) -> TaskOutcome {
    if v.is_multiple_of(2) {
        TaskOutcome::Succeeded { task_id: task.to_owned(), results: Vec::new() }
    } else {
        TaskOutcome::Failed {
            task_id: task.to_owned(),
            reason: TaskFailure::InvalidPlan { reason: format!("attempt {v}") },
        }
    }
}

/// Blob contents: empty, small, above the blob threshold, and one never stored.
pub(super) fn blob_contents() -> Vec<Vec<u8>> {
    vec![
        Vec::new(),
        b"small content".to_vec(),
        (0..70_000u32).map(|i| (i % 251) as u8).collect(),
        b"never stored".to_vec(),
    ]
}
