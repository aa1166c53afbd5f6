//! Tests of the event lines: every event is one line, whatever the names in it.
#![allow(clippy::unwrap_used, reason = "tests")]

use agent_core::AuditEvent;
use agent_state::{AgentId, RunEvent, Timestamp};
use serde_json::json;

use super::*;
use crate::tests::record;

#[test]
fn event_lines_escape_newlines_in_file_names() {
    let write = record(AuditEvent::ToolCall {
        tool: "write_file".into(),
        args: json!({ "path": "a\nb.txt", "content": "x" }),
        success: true,
        summary: "wrote 1 bytes to a\nb.txt".into(),
    });
    let line = event_line(&write, 1_000);
    assert_eq!(line, "[   0.50s] bottom-d1    tool write_file ok: wrote 1 bytes to a\\nb.txt");

    // Tabs, carriage returns, terminal escapes and C1 controls: escaped, never printed raw.
    let hostile = record(AuditEvent::ToolCall {
        tool: "read_file".into(),
        args: json!({ "path": "x" }),
        success: false,
        summary: "`x\r\t\u{1b}[2J\u{9b}` is bad".into(),
    });
    let line = event_line(&hostile, 1_000);
    assert_eq!(
        line,
        "[   0.50s] bottom-d1    tool read_file FAILED: `x\\r\\t\\u{1b}[2J\\u{9b}` is bad"
    );
    assert!(!line.chars().any(agent_state::is_control), "{line:?}");

    let error = record(AuditEvent::Error { error: "one\ntwo".into(), retry: 1, max_retries: 3 });
    assert!(!event_line(&error, 0).contains('\n'));
}

#[test]
fn run_events_are_one_line_each_like_audit_records() {
    let agent = AgentId::from("exec-1");
    let progress = RunEvent::Progress {
        run_id: "3f2a0c1d-77".parse().unwrap(),
        kind: "research_agent".into(),
        percent: 40,
        message: "reading docs/a.md\nand more".into(),
    };
    let line = run_line(&agent, &progress, now_ms());
    assert!(line.starts_with("[   0.0"), "{line}");
    assert!(
        line.ends_with(
            "] exec-1       research_agent run 3f2a0c1d-77: 40% reading docs/a.md\\nand more"
        ),
        "{line}"
    );

    let transition = RunEvent::Transition {
        run_id: "3f2a0c1d".parse().unwrap(),
        kind: "research_agent".into(),
        transition: agent_state::RunTransition {
            from: agent_state::RunState::Pending,
            to: agent_state::RunState::Running,
            at: Timestamp(3_200),
            reason: "started".into(),
        },
    };
    assert_eq!(
        run_line(&agent, &transition, 1_000),
        "[   2.20s] exec-1       research_agent run 3f2a0c1d: pending -> running (started)"
    );

    let retrying = RunEvent::Retrying {
        run_id: "r".parse().unwrap(),
        kind: "fetch".into(),
        retry: 1,
        delay_ms: 1_000,
        failure: agent_state::RunFailure::new(agent_state::FailureKind::Network, "reset"),
    };
    let line = run_line(&agent, &retrying, 0);
    assert!(line.contains("fetch run r: retry 1 in 1000 ms after "), "{line}");
    assert!(line.ends_with("reset"), "{line}");

    let note = RunEvent::Note {
        run_id: "r".parse().unwrap(),
        kind: "fetch".into(),
        name: "fetched".into(),
        data: json!({"url": "https://example.com/\u{1b}[2J"}),
    };
    let line = run_line(&agent, &note, 0);
    assert!(line.contains("fetch run r: fetched {\"url\":"), "{line}");
    assert!(!line.chars().any(agent_state::is_control), "{line:?}");
}

#[test]
fn a_stuck_run_is_one_line_with_its_reason_and_what_was_done() {
    let stopped = record(AuditEvent::Stuck {
        task: Some("t1".into()),
        reason: agent_state::TaskFailure::Loop {
            agent: AgentId::from("bottom-d1"),
            item: "read_file {\"path\":\"a\\nb\"}".into(),
            repeats: 3,
        },
        escalated_to: None,
    });
    let line = event_line(&stopped, 1_000);
    assert!(
        line.starts_with("[   0.50s] bottom-d1    STUCK t1: stopped a loop: `bottom-d1` repeated")
    );
    assert!(line.ends_with("; task stopped"), "{line}");
    assert!(!line.contains('\n'), "{line}");
    let escalated = record(AuditEvent::Stuck {
        task: None,
        reason: agent_state::TaskFailure::NoProgress { heartbeats: 15, agents: vec![] },
        escalated_to: Some(AgentId::from("mid-docs")),
    });
    assert!(event_line(&escalated, 1_000).ends_with("; escalated to mid-docs"));
}

#[test]
fn peer_help_is_one_line_naming_the_peer_the_step_and_how_it_went() {
    let refused = record(AuditEvent::PeerHelp {
        peer: AgentId::from("bottom-d2"),
        step: Some("t1/write".into()),
        request: agent_core::PeerHelpRequest::TakeOver,
        outcome: agent_core::PeerHelpOutcome::Refused { reason: "busy\nnow".into() },
    });
    assert_eq!(
        event_line(&refused, 1_000),
        "[   0.50s] bottom-d1    peer help (take over) t1/write with bottom-d2: refused (busy\\nnow)"
    );
    let shared = record(AuditEvent::PeerHelp {
        peer: AgentId::from("bottom-d3"),
        step: None,
        request: agent_core::PeerHelpRequest::ShareKnowledge,
        outcome: agent_core::PeerHelpOutcome::Shared,
    });
    assert!(
        event_line(&shared, 1_000).ends_with("peer help (share knowledge) with bottom-d3: shared")
    );
}
