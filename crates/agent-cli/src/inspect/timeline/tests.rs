//! Tests of the timeline as text: a line per piece of work with who, for whom, when, how long
//! and how it ended, then its input, records and output.
#![allow(clippy::unwrap_used, reason = "tests")]

use agent_core::{AuditEvent, AuditRecord, GENESIS_HASH};
use agent_state::{AgentId, Timestamp};

use super::*;

/// Step `t/measure` of `who` for `lead`, handed over at `start` ms.
fn measure<'a>(who: &str, attempt: u32, start: u64, end: Option<u64>) -> Entry<'a> {
    Entry {
        kind: "step",
        key: "t/measure".into(),
        who: AgentId::new(who),
        by: AgentId::new("lead"),
        attempt,
        start,
        end,
        tool: Some("shell".into()),
        input: "shell {\"n\": 2}\nmeasure it".into(),
        outcome: None,
        records: Vec::new(),
    }
}

#[test]
fn each_piece_of_work_is_a_line_with_its_times_and_how_it_ended() {
    let failed =
        Entry { outcome: Some((false, "exit 1\nno".into())), ..measure("e1", 1, 100, Some(400)) };
    let again = measure("e2", 2, 450, None);
    let text = plain(&[failed, again], 0, false, &[]);
    assert!(
        text.contains("step t/measure · e1 for lead · from 0.10 s to 0.40 s (0.30 s) · FAILED\n"),
        "{text}"
    );
    assert!(text.contains("  output: exit 1\\nno\n"), "{text}");
    assert!(text.contains("  input: shell {\"n\": 2}\\nmeasure it\n"), "{text}");
    assert!(
        text.contains("step t/measure (attempt 2) · e2 for lead · from 0.45 s · not finished\n"),
        "{text}"
    );
    let ended = plain(&[measure("e1", 1, 0, Some(900))], 0, true, &[]);
    assert!(ended.contains("(0.90 s) · ended, no result returned"), "{ended}");
}

#[test]
fn a_pieces_records_are_its_event_lines() {
    let event = AuditEvent::Error { error: "one\ntwo".into(), retry: 1, max_retries: 3 };
    let record = AuditRecord::new(4, Timestamp(1_250), AgentId::new("e1"), event, GENESIS_HASH);
    let entry = Entry { records: vec![&record], ..measure("e1", 1, 1_000, None) };
    let text = plain(&[entry], 1_000, false, &[]);
    assert!(text.contains(&format!("  {}\n", event_line(&record, 1_000))), "{text}");
    assert!(text.contains("error (retry 1/3): one\\ntwo"), "{text}");
}
