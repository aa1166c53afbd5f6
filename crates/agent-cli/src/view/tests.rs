//! Tests of what a run prints: every event is one line, whatever the names in it.
#![allow(clippy::unwrap_used, clippy::expect_used, reason = "tests")]

use agent_core::{AuditEvent, AuditRecord, GENESIS_HASH, Received, TeamEvent};
use agent_state::{AgentId, RunEvent, Timestamp};
use serde_json::json;

use super::*;

#[test]
fn a_lag_says_how_many_events_were_skipped_and_where_they_all_are() {
    let line = lagged_line(12, "hello-1", 4_500, 1_000);
    assert_eq!(
        line,
        "[   3.50s] (view)       skipped 12 event(s): the view fell behind; \
         `strata inspect hello-1 audit` lists every record"
    );
}

/// Task `t`, a step per tool of `tools`, each calling it with `{}` (as [`numbered`] does).
fn calls_task(tools: &[&str]) -> Task {
    let step = |tool: &&str| {
        agent_state::PlanStep::scripted(
            format!("{tool}-step"),
            *tool,
            agent_state::StepTarget::Any,
            *tool,
            json!({}),
        )
    };
    Task { id: "t".into(), goal: "g".into(), steps: tools.iter().map(step).collect() }
}

fn shown(mode: Mode) -> Shown {
    Shown {
        mode,
        started_at: 1_000,
        run_id: agent_state::RunId::parse("r").unwrap(),
        steps: Steps::new(&calls_task(&["read_file", "write_file", "shell", "edit_file"])),
        recent: VecDeque::new(),
        seen: std::collections::BTreeSet::new(),
        outputs: output::Outputs::default(),
    }
}

/// A view's state after `events`, the log having held `history` when it was read, and the
/// lines it printed.
fn shown_after(mode: Mode, history: &[AuditRecord], events: &[Received]) -> (Shown, Vec<String>) {
    let mut shown = shown(mode);
    let mut printed: Vec<String> = history.iter().filter_map(|r| shown.audit(r)).collect();
    printed.extend(events.iter().filter_map(|e| shown.received(e)));
    (shown, printed)
}

fn numbered(seq: u64, tool: &str) -> AuditRecord {
    let event = AuditEvent::ToolCall {
        tool: tool.into(),
        args: json!({}),
        success: true,
        summary: format!("call {seq}"),
    };
    AuditRecord::new(seq, Timestamp(1_500), AgentId::from("bottom-d1"), event, GENESIS_HASH)
}

#[test]
fn a_record_both_read_and_received_is_shown_once_in_every_mode() {
    let history: Vec<AuditRecord> = (0..3).map(|i| numbered(i, "read_file")).collect();
    let audit = |r: AuditRecord| Received::Event(Arc::new(TeamEvent::Audit(r)));
    let progress = RunEvent::Progress {
        run_id: "run-1".parse().unwrap(),
        kind: "k".into(),
        percent: 50,
        message: "half".into(),
    };
    let events = [
        // Appended between the subscription and the read: on the stream too.
        audit(numbered(2, "read_file")),
        audit(numbered(3, "write_file")),
        Received::Event(Arc::new(TeamEvent::Run {
            agent: AgentId::from("exec-1"),
            event: progress,
        })),
        Received::Lagged(7),
        audit(numbered(11, "shell")),
        Received::Closed,
    ];
    let (shown, printed) = shown_after(Mode::Live, &history, &events);
    assert_eq!(printed, Vec::<String>::new(), "the live view draws, it prints no lines");
    // Every record counted: the steps of read_file, write_file and shell done, not edit_file.
    assert_eq!(shown.steps.line("t", &[]), "3/4 steps");
    let recent: Vec<&str> = shown.recent.iter().map(String::as_str).collect();
    assert_eq!(recent.len(), 6, "{recent:#?}");
    assert!(recent[0].ends_with("tool read_file ok: call 1"), "{recent:#?}");
    assert!(recent[1].ends_with("tool read_file ok: call 2"), "{recent:#?}");
    assert!(recent[2].ends_with("tool write_file ok: call 3"), "{recent:#?}");
    assert!(recent[3].ends_with("exec-1       k run run-1: 50% half"), "{recent:#?}");
    assert!(recent[4].contains("skipped 7 event(s)"), "{recent:#?}");
    assert!(recent[5].ends_with("tool shell ok: call 11"), "{recent:#?}");

    // Plain lines: the same, printed, one per event.
    let (_, printed) = shown_after(Mode::Lines, &history, &events);
    assert_eq!(printed.len(), 3 + 4, "{printed:#?}");
    assert_eq!(printed[3], event_line(&numbered(3, "write_file"), 1_000));
    assert!(printed[5].contains("skipped 7 event(s)"), "{printed:#?}");

    // JSON: an `audit` line per record, `executor_run`, and `lagged` with the count.
    let (_, printed) = shown_after(Mode::Json, &history, &events);
    let lines: Vec<serde_json::Value> =
        printed.iter().map(|l| serde_json::from_str(l).unwrap()).collect();
    let events: Vec<&str> = lines.iter().map(|l| l["event"].as_str().unwrap()).collect();
    assert_eq!(
        events,
        ["audit", "audit", "audit", "audit", "executor_run", "lagged", "audit"],
        "{lines:#?}"
    );
    let seqs: Vec<u64> = lines.iter().filter_map(|l| l["record"]["seq"].as_u64()).collect();
    assert_eq!(seqs, [0, 1, 2, 3, 11]);
    assert_eq!(lines[4]["agent"], "exec-1");
    assert_eq!(lines[4]["run"]["event"], "progress");
    assert_eq!(lines[4]["run"]["percent"], 50);
    assert_eq!(lines[5], json!({"event": "lagged", "skipped": 7}));
}

#[test]
fn summary_shows_a_tools_output_as_lines_cut_with_a_count() {
    assert_eq!(output_lines("one\ntwo\n", 3), vec!["one", "two"]);
    assert_eq!(output_lines("  \n", 3), Vec::<String>::new());
    assert_eq!(output_lines("a\nb\nc", 3), vec!["a", "b", "c"]);
    assert_eq!(output_lines("a\nb\nc\nd\ne\n", 3), vec!["a", "b", "… 3 more lines"]);
    assert_eq!(output_lines("a\nb\nc\nd", 3), vec!["a", "b", "… 2 more lines"]);
    // Each line is escaped on its own: a tab or an escape never reaches the terminal.
    assert_eq!(output_lines("a\tb\n\u{1b}[2J", 3), vec!["a\\tb", "\\u{1b}[2J"]);
}

fn tokens(agent: &str, call: u64, attempt: u32, tool: Option<&str>, text: &str) -> Received {
    Received::Event(Arc::new(TeamEvent::Tokens(agent_core::ModelTokens {
        agent: AgentId::from(agent),
        call,
        attempt,
        tool: tool.map(str::to_owned),
        text: text.into(),
    })))
}

#[test]
fn model_output_is_a_line_per_agent_live_a_json_line_per_piece_and_not_in_plain_lines() {
    let events = [
        tokens("top-a", 1, 1, None, "{\"verdict\": "),
        tokens("exec-1", 4, 1, Some("write_file"), "{\"path\": \"a\nb\""),
        tokens("top-a", 1, 1, None, "\"sign\"}"),
        // A retry of exec-1's call starts its output over.
        tokens("exec-1", 4, 2, Some("write_file"), "{\"path\":"),
    ];
    let (shown, printed) = shown_after(Mode::Live, &[], &events);
    assert!(printed.is_empty());
    assert_eq!(
        output::lines(&shown.outputs),
        [
            "exec-1         write_file({\"path\": (retry 1)",
            "top-a          {\"verdict\": \"sign\"}",
        ]
    );
    assert!(shown.recent.is_empty(), "pieces are not events of the recent list");

    let (_, printed) = shown_after(Mode::Lines, &[], &events);
    assert!(printed.is_empty(), "{printed:#?}");

    let (_, printed) = shown_after(Mode::Json, &[], &events);
    let lines: Vec<serde_json::Value> =
        printed.iter().map(|l| serde_json::from_str(l).unwrap()).collect();
    assert_eq!(lines.len(), 4);
    assert_eq!(
        lines[1],
        json!({"event": "tokens", "agent": "exec-1", "call": 4, "attempt": 1,
            "tool": "write_file", "text": "{\"path\": \"a\nb\""})
    );
    assert_eq!(lines[0]["tool"], serde_json::Value::Null);
}

#[test]
fn a_long_model_output_shows_its_escaped_tail_on_one_line() {
    let long = format!("{}\u{1b}[2J\nend", "x".repeat(300));
    let (shown, _) = shown_after(Mode::Live, &[], &[tokens("top-a", 1, 1, None, &long)]);
    let lines = output::lines(&shown.outputs);
    assert_eq!(lines.len(), 1);
    let line = &lines[0];
    assert!(line.starts_with("top-a          …x"), "{line}");
    assert!(line.ends_with("\\u{1b}[2J\\nend"), "{line}");
    assert!(!line.chars().any(agent_state::is_control), "{line:?}");
    assert!(line.chars().count() <= 16 + output::OUTPUT_CHARS, "{line}");
}
