//! Tests of what a run prints: every event is one line, whatever the names in it.
#![allow(clippy::unwrap_used, clippy::expect_used, reason = "tests")]

use agent_core::{AuditEvent, AuditRecord, GENESIS_HASH};
use agent_state::{AgentId, Timestamp};
use serde_json::json;

use super::*;

fn record(event: AuditEvent) -> AuditRecord {
    AuditRecord {
        seq: 0,
        at: Timestamp(1_500),
        agent: AgentId::from("bottom-d1"),
        event,
        prev_hash: GENESIS_HASH,
        hash: GENESIS_HASH,
    }
}

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
fn files_written_keep_their_names_for_the_summary() {
    let write = record(AuditEvent::ToolCall {
        tool: "write_file".into(),
        args: json!({ "path": "a\nb.txt", "content": "x" }),
        success: true,
        summary: "wrote 1 bytes".into(),
    });
    let files = files_written(&[write]);
    assert_eq!(files, ["a\nb.txt"]);
    assert_eq!(esc(&files.join(", ")), "a\\nb.txt");
}
