//! `strata inspect RUN timeline [AGENT]` as text and JSON: each piece of work of a run
//! ([`strata::audit::timeline`] builds them) with who did it, for whom, when and how long,
//! what it was given and what came of it, its records and its model calls.

use std::fmt::Write as _;

use agent_llm::CallRecord;
use serde_json::{Value, json};
use team_file::escape_controls as esc;

use super::calls::shown;
use crate::view::event_line;
use strata::audit::timeline::{Entry, calls_of};
#[cfg(test)]
use strata::audit::timeline::{build, of_agent};

/// Seconds since `start`, for display.
fn secs(at: u64, start: u64) -> f64 {
    at.saturating_sub(start) as f64 / 1000.0
}

/// The entries as text: a line per piece of work, its input, its records, its model calls
/// (`calls`: the run's), its output; texts cut to one line unless `full`.
pub(crate) fn plain(
    entries: &[Entry<'_>],
    run_start: u64,
    full: bool,
    calls: &[CallRecord],
) -> String {
    let text = |s: &str| if full { esc(s.trim()).into_owned() } else { shown(s) };
    let mut out = String::new();
    for e in entries {
        let attempt =
            if e.attempt > 1 { format!(" (attempt {})", e.attempt) } else { String::new() };
        let _ = write!(
            out,
            "{} {}{attempt} · {} for {} · from {:.2} s",
            e.kind,
            esc(&e.key),
            esc(e.who.as_str()),
            esc(e.by.as_str()),
            secs(e.start, run_start)
        );
        match (e.end, &e.outcome) {
            (Some(end), outcome) => {
                let how = match outcome {
                    Some((true, _)) => "succeeded",
                    Some((false, _)) => "FAILED",
                    None => "ended, no result returned",
                };
                let _ = write!(
                    out,
                    " to {:.2} s ({:.2} s) · {how}",
                    secs(end, run_start),
                    secs(end, e.start),
                );
            }
            (None, _) => out.push_str(" · not finished"),
        }
        out.push('\n');
        let _ = writeln!(out, "  input: {}", text(&e.input));
        for r in &e.records {
            let _ = writeln!(out, "  {}", esc(&event_line(r, run_start)));
        }
        let seqs = calls_of(e, calls);
        if !seqs.is_empty() {
            let each: Vec<String> = seqs.iter().map(|s| format!("#{s}")).collect();
            let _ = writeln!(
                out,
                "  model calls: {} (`inspect RUN calls {}` shows them)",
                each.join(" "),
                esc(e.who.as_str())
            );
        }
        if let Some((_, output)) = &e.outcome {
            let _ = writeln!(out, "  output: {}", text(output));
        }
    }
    out
}

/// The entries as JSON, texts whole: `{"steps": [...]}`, each with the `seq` of the model
/// calls its worker made for it (`calls`: the run's; see [`calls_of`]).
pub(crate) fn json(entries: &[Entry<'_>], run_start: u64, calls: &[CallRecord]) -> Value {
    let steps: Vec<Value> = entries
        .iter()
        .map(|e| {
            json!({
                "kind": e.kind,
                "key": e.key,
                "agent": e.who,
                "for": e.by,
                "attempt": e.attempt,
                "start_s": secs(e.start, run_start),
                "end_s": e.end.map(|end| secs(end, run_start)),
                "duration_s": e.end.map(|end| secs(end, e.start)),
                "input": e.input,
                "success": e.outcome.as_ref().map(|(ok, _)| *ok),
                "output": e.outcome.as_ref().map(|(_, output)| output),
                "calls": calls_of(e, calls),
                "records": e.records.iter().map(|r| json!({
                    "seq": r.seq,
                    "agent": r.agent,
                    "at_s": secs(r.at.0, run_start),
                    "line": event_line(r, run_start),
                })).collect::<Vec<_>>(),
            })
        })
        .collect();
    json!({ "steps": steps })
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, reason = "tests")]

    use agent_core::{AuditEvent, AuditRecord, GENESIS_HASH};
    use agent_state::{AgentId, Assignment, Message, MessageKind, ProgressReport};
    use agent_state::{
        MessageId, PlanStep, ProgressStatus, StepTarget, Subtask, SubtaskResult, Timestamp,
    };

    use super::*;

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
        AuditRecord {
            seq,
            at: Timestamp(at),
            agent: AgentId::new(agent),
            event: AuditEvent::ToolCall {
                tool: tool.into(),
                args: json!({}),
                success: true,
                summary: "ok".into(),
            },
            prev_hash: GENESIS_HASH,
            hash: GENESIS_HASH,
        }
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
        let text = plain(&entries, 0, false, &[]);
        assert!(
            text.contains("step t/measure (attempt 2) · e2 for lead · from 0.45 s · not finished"),
            "{text}"
        );
        assert!(
            text.contains("step t/measure · e1 for lead · from 0.10 s to 0.40 s (0.30 s) · FAILED"),
            "{text}"
        );
        assert_eq!(of_agent(build(&messages, &records), Some("e2")).len(), 1);
        assert_eq!(of_agent(build(&messages, &records), Some("lead")).len(), 3);
    }

    /// A model call of `agent` started at `started_ms`, numbered `seq`.
    fn call(seq: u64, agent: &str, started_ms: u64) -> CallRecord {
        CallRecord {
            seq,
            call: seq,
            agent: AgentId::new(agent),
            layer: agent_state::AgentLayer::Bottom,
            provider: "fake".into(),
            model: "m".into(),
            started_ms,
            latency_ms: 1,
            system: String::new(),
            messages: Vec::new(),
            tools: Vec::new(),
            answer: String::new(),
            tool_calls: Vec::new(),
            usage: agent_llm::Usage::default(),
            cost_usd: None,
            outcome: agent_llm::CallOutcome::Answered,
            retries: 0,
            cut_chars: 0,
        }
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
        let text = plain(&entries, 0, false, &calls);
        assert!(
            text.contains("  model calls: #2 #4 (`inspect RUN calls e1` shows them)"),
            "{text}"
        );
        assert_eq!(json(&entries, 0, &calls)["steps"][1]["calls"], serde_json::json!([6]));
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
        assert!(plain(&entries, 0, false, &[]).contains("ended, no result returned"));
    }
}
