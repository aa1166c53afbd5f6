//! `strata inspect RUN timeline [AGENT]`: each piece of work of a run in the order it started,
//! with who did it, for whom, when and how long, what it was given and what came of it, and
//! on the way its tool calls, errors, retries and time limits, and the decisions taken
//! meanwhile.
//!
//! Two kinds of work are read:
//! - a plan step handed to an executor: the lead's `task_assign` message (a
//!   [`Assignment::Subtask`]: the step's tool, arguments and description, the attempt) until
//!   the executor's `progress_report` holding the step's result, from the run's bus history (a
//!   run on NATS keeps none: its timeline holds only the spawned agents' work);
//! - a spawned agent's task: its `Spawned` audit record until its `Result`, its dismissal, or
//!   its end (a lead returns no result: its work is the agents it spawned, listed on the way).
//!
//! An audit record of the agent doing the work falls in the piece of work it was doing then;
//! when it had several at once, in the one whose step's tool the record names, else the one
//! started last (a spawned agent handed a step: the step, not its whole task).

use std::fmt::Write as _;

use agent_core::{AuditEvent, AuditRecord};
use agent_llm::CallRecord;
use agent_state::{AgentId, Assignment, Message, MessageKind, ProgressReport};
use serde_json::{Value, json};
use team_file::escape_controls as esc;

use super::calls::shown;
use crate::view::event_line;

/// The run's bus history in send order, where the steps' assignments and results are; none
/// for a run on NATS (its server deletes a message once it is acknowledged).
pub(crate) fn bus_history(
    store: &run_store::RunStore,
    info: &strata::run_dir::RunInfo,
) -> anyhow::Result<Vec<Message>> {
    if info.nats.is_some() {
        return Ok(Vec::new());
    }
    let history = message_bus::SledBus::open(store)?.history()?;
    Ok(history.into_iter().map(|m| m.message).collect())
}

/// One piece of work.
#[derive(Debug)]
pub(crate) struct Entry<'a> {
    /// `step` or `spawned`.
    kind: &'static str,
    /// `task/step` for a step, the task in words' first line for a spawned agent.
    key: String,
    /// Who did it.
    who: AgentId,
    /// Who asked for it (the lead, the spawner).
    by: AgentId,
    /// 1 for a first assignment, more after reassignments (steps).
    attempt: u32,
    /// When it was handed over, in the run's clock (ms).
    start: u64,
    /// When its result came, if it did.
    end: Option<u64>,
    /// The step's tool, if a step.
    tool: Option<String>,
    /// What it was given: the step's call and description, or the spawned agent's task.
    input: String,
    /// Whether it succeeded and its output or summary, once it ended.
    outcome: Option<(bool, String)>,
    /// The records on the way: the worker's tool calls, the agents it spawned, its errors,
    /// retries and time limits, and the decisions taken meanwhile.
    records: Vec<&'a AuditRecord>,
}

/// The pieces of work of a run, in the order they started: from `messages` (the bus
/// history in send order; empty for a run on NATS) and the audit log.
pub(crate) fn build<'a>(messages: &[Message], records: &'a [AuditRecord]) -> Vec<Entry<'a>> {
    let mut entries: Vec<Entry<'a>> = Vec::new();
    for m in messages {
        match m.kind {
            MessageKind::TaskAssign => {
                let Ok(Assignment::Subtask { subtask }) =
                    serde_json::from_value::<Assignment>(m.content.clone())
                else {
                    continue;
                };
                let call = json!({"tool": subtask.step.tool, "args": subtask.step.args});
                entries.push(Entry {
                    kind: "step",
                    key: subtask.key(),
                    who: subtask.assignee.clone(),
                    by: AgentId::new(m.from.as_str()),
                    attempt: subtask.attempt,
                    start: m.timestamp.0,
                    end: None,
                    tool: Some(subtask.step.tool.clone()),
                    input: format!("{}: {call}", subtask.step.description),
                    outcome: None,
                    records: Vec::new(),
                });
            }
            MessageKind::ProgressReport => {
                let Ok(report) = serde_json::from_value::<ProgressReport>(m.content.clone()) else {
                    continue;
                };
                for result in &report.results {
                    let key = format!("{}/{}", result.task_id, result.step_id);
                    let open = entries.iter_mut().rev().find(|e| {
                        e.kind == "step" && e.end.is_none() && e.key == key && e.who == result.agent
                    });
                    if let Some(entry) = open {
                        entry.end = Some(m.timestamp.0);
                        entry.outcome = Some((result.success, result.output.clone()));
                    }
                }
            }
            _ => {}
        }
    }
    for r in records {
        match &r.event {
            AuditEvent::Spawned { spawn } => entries.push(Entry {
                kind: "spawned",
                key: format!("{} ({})", spawn.agent, spawn.role),
                who: spawn.agent.clone(),
                by: spawn.parent.clone(),
                attempt: 1,
                start: r.at.0,
                end: None,
                tool: None,
                input: spawn.task_prompt.clone(),
                outcome: None,
                records: Vec::new(),
            }),
            AuditEvent::Result { result, .. } => {
                if let Some(entry) = open_spawn(&mut entries, &r.agent) {
                    entry.end = Some(r.at.0);
                    let success = result.status == agent_state::ResultStatus::Success;
                    entry.outcome = Some((success, result.summary.clone()));
                }
            }
            // A lead returns no result: its work ends with it (as does a worker's that ended
            // without returning one).
            AuditEvent::Transition { to, reason, .. }
                if matches!(
                    to,
                    agent_state::AgentStatus::ShuttingDown
                        | agent_state::AgentStatus::Terminated
                        | agent_state::AgentStatus::Failed
                ) =>
            {
                if let Some(entry) = open_spawn(&mut entries, &r.agent) {
                    entry.end = Some(r.at.0);
                    if *to == agent_state::AgentStatus::Failed {
                        entry.outcome = Some((false, reason.to_string()));
                    }
                }
            }
            AuditEvent::Despawned { agent, summary } => {
                if let Some(entry) = open_spawn(&mut entries, agent) {
                    entry.end = Some(r.at.0);
                    entry.outcome = Some((false, format!("dismissed: {summary}")));
                }
            }
            _ => {}
        }
    }
    entries.sort_by_key(|e| e.start);
    for r in records {
        let tool = match &r.event {
            AuditEvent::ToolCall { tool, .. } | AuditEvent::ToolOutcomeUnknown { tool, .. } => {
                Some(tool.as_str())
            }
            AuditEvent::Error { .. }
            | AuditEvent::Spawned { .. }
            | AuditEvent::Retry { .. }
            | AuditEvent::TimedOut { .. }
            | AuditEvent::SoftTimeout { .. }
            | AuditEvent::Denied { .. } => None,
            AuditEvent::Decision { .. } => {
                // Every piece of work under way when it was taken.
                for e in entries.iter_mut().filter(|e| during(e, r.at.0)) {
                    e.records.push(r);
                }
                continue;
            }
            _ => continue,
        };
        let doing: Vec<usize> = (0..entries.len())
            .filter(|&i| entries[i].who == r.agent && during(&entries[i], r.at.0))
            .collect();
        // The step whose tool it names, else the work started last (a spawned agent's step
        // rather than its whole task).
        let chosen = doing
            .iter()
            .copied()
            .find(|&i| tool.is_some() && entries[i].tool.as_deref() == tool)
            .or_else(|| doing.last().copied());
        if let Some(i) = chosen {
            entries[i].records.push(r);
        }
    }
    entries
}

/// The spawned agent `agent`'s piece of work still open.
fn open_spawn<'e, 'a>(entries: &'e mut [Entry<'a>], agent: &AgentId) -> Option<&'e mut Entry<'a>> {
    entries.iter_mut().rev().find(|e| e.kind == "spawned" && e.end.is_none() && &e.who == agent)
}

/// Whether `at` falls while `entry` was under way.
fn during(entry: &Entry<'_>, at: u64) -> bool {
    at >= entry.start && entry.end.is_none_or(|end| at <= end)
}

/// `entries` of `agent` (as the worker or who asked), or all of them.
pub(crate) fn of_agent<'a>(entries: Vec<Entry<'a>>, agent: Option<&str>) -> Vec<Entry<'a>> {
    match agent {
        Some(id) => {
            entries.into_iter().filter(|e| e.who.as_str() == id || e.by.as_str() == id).collect()
        }
        None => entries,
    }
}

/// Seconds since `start`, for display.
fn secs(at: u64, start: u64) -> f64 {
    at.saturating_sub(start) as f64 / 1000.0
}

/// The model calls (their `seq`) that the worker of `entry` started while it had the work:
/// from its handing over to its result (to now, while it goes on). Calls carry no step of
/// their own, so the window tells them, as it does for records; a spawned agent's call made
/// for a step it was handed counts for that step and for its whole task.
pub(crate) fn calls_of(entry: &Entry<'_>, calls: &[CallRecord]) -> Vec<u64> {
    calls
        .iter()
        .filter(|c| c.agent == entry.who && during(entry, c.started_ms))
        .map(|c| c.seq)
        .collect()
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

    use agent_core::GENESIS_HASH;
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
