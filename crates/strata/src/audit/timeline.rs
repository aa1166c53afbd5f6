//! A run's timeline (`strata inspect RUN timeline [AGENT]`, the dashboard's): each piece of
//! work of a run in the order it started,
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

use std::path::Path;

use agent_core::{AuditEvent, AuditRecord};
use agent_llm::CallRecord;
use agent_state::{AgentId, Assignment, Message, MessageKind, ProgressReport};
use serde_json::{Value, json};

use crate::error::Error;
use crate::lines::event_line;
use crate::run_dir::RunInfo;

#[cfg(test)]
mod tests;

/// The run's bus history in send order, where the steps' assignments and results are; none
/// for a run on NATS (its server deletes a message once it is acknowledged).
pub fn bus_history(store: &run_store::RunStore, info: &RunInfo) -> crate::Result<Vec<Message>> {
    if info.nats.is_some() {
        return Ok(Vec::new());
    }
    let history = message_bus::SledBus::open(store)?.history()?;
    Ok(history.into_iter().map(|m| m.message).collect())
}

/// One piece of work.
#[derive(Debug)]
pub struct Entry<'a> {
    /// `step` or `spawned`.
    pub kind: &'static str,
    /// `task/step` for a step, the task in words' first line for a spawned agent.
    pub key: String,
    /// Who did it.
    pub who: AgentId,
    /// Who asked for it (the lead, the spawner).
    pub by: AgentId,
    /// 1 for a first assignment, more after reassignments (steps).
    pub attempt: u32,
    /// When it was handed over, in the run's clock (ms).
    pub start: u64,
    /// When its result came, if it did.
    pub end: Option<u64>,
    /// The step's tool, if a step.
    pub tool: Option<String>,
    /// What it was given: the step's call and description, or the spawned agent's task.
    pub input: String,
    /// Whether it succeeded and its output or summary, once it ended.
    pub outcome: Option<(bool, String)>,
    /// The records on the way: the worker's tool calls, the agents it spawned, its errors,
    /// retries and time limits, and the decisions taken meanwhile.
    pub records: Vec<&'a AuditRecord>,
}

/// The pieces of work of a run, in the order they started: from `messages` (the bus
/// history in send order; empty for a run on NATS) and the audit log.
pub fn build<'a>(messages: &[Message], records: &'a [AuditRecord]) -> Vec<Entry<'a>> {
    let mut entries = steps(messages);
    spawned_work(&mut entries, records);
    entries.sort_by_key(|e| e.start);
    place_records(&mut entries, records);
    entries
}

/// The plan steps handed out in `messages`, each ended by the progress report holding its
/// result.
fn steps<'a>(messages: &[Message]) -> Vec<Entry<'a>> {
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
    entries
}

/// Adds the spawned agents' tasks of `records` to `entries`, each ended by its result, its
/// dismissal or its agent's end.
fn spawned_work<'a>(entries: &mut Vec<Entry<'a>>, records: &'a [AuditRecord]) {
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
                if let Some(entry) = open_spawn(entries, &r.agent) {
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
                if let Some(entry) = open_spawn(entries, &r.agent) {
                    entry.end = Some(r.at.0);
                    if *to == agent_state::AgentStatus::Failed {
                        entry.outcome = Some((false, reason.to_string()));
                    }
                }
            }
            AuditEvent::Despawned { agent, summary } => {
                if let Some(entry) = open_spawn(entries, agent) {
                    entry.end = Some(r.at.0);
                    entry.outcome = Some((false, format!("dismissed: {summary}")));
                }
            }
            _ => {}
        }
    }
}

/// Puts each record of `records` that belongs to a piece of work in it: the worker's tool
/// calls, spawns, errors, retries and time limits, and the decisions taken meanwhile.
fn place_records<'a>(entries: &mut [Entry<'a>], records: &'a [AuditRecord]) {
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
pub fn of_agent<'a>(entries: Vec<Entry<'a>>, agent: Option<&str>) -> Vec<Entry<'a>> {
    match agent {
        Some(id) => {
            entries.into_iter().filter(|e| e.who.as_str() == id || e.by.as_str() == id).collect()
        }
        None => entries,
    }
}

/// The model calls (their `seq`) that the worker of `entry` started while it had the work:
/// from its handing over to its result (to now, while it goes on). Calls carry no step of
/// their own, so the window tells them, as it does for records; a spawned agent's call made
/// for a step it was handed counts for that step and for its whole task.
pub fn calls_of(entry: &Entry<'_>, calls: &[CallRecord]) -> Vec<u64> {
    calls
        .iter()
        .filter(|c| c.agent == entry.who && during(entry, c.started_ms))
        .map(|c| c.seq)
        .collect()
}

/// Seconds from `start` to `at` (both in ms), for display.
pub fn secs(at: u64, start: u64) -> f64 {
    at.saturating_sub(start) as f64 / 1000.0
}

/// The entries as JSON (`strata inspect RUN timeline --json`, the dashboard's timeline),
/// texts whole, times in seconds since `run_start`: `{"steps": [...]}`, each with its records
/// (their event lines) and the `seq` of the model calls its worker made for it (`calls`: the
/// run's; see [`calls_of`]).
pub fn json(entries: &[Entry<'_>], run_start: u64, calls: &[CallRecord]) -> Value {
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

/// What a run's timeline is built from, read from its stores.
pub struct Sources {
    /// When the run started (ms since the epoch): times are given from it.
    pub started_at: u64,
    /// Its audit log.
    pub records: Vec<AuditRecord>,
    /// Its bus history ([`bus_history`]).
    pub messages: Vec<Message>,
    /// Its model call records.
    pub calls: Vec<CallRecord>,
}

impl Sources {
    /// Reads them for the run `info` in `dir`, whose database is `store` (a private copy): its
    /// audit log where it is kept (the copy, or the run's NATS server), its bus history and
    /// call records from the copy.
    pub async fn read(
        dir: &Path,
        store: &run_store::RunStore,
        info: &RunInfo,
    ) -> crate::Result<Self> {
        let stores = crate::Stores::of_run(store, dir, info).await?;
        let records = stores.audit.records(None).await?;
        let (store, run) = (store.clone(), info.clone());
        let (messages, calls) = tokio::task::spawn_blocking(move || {
            Ok::<_, Error>((bus_history(&store, &run)?, super::call_records(&store)?))
        })
        .await
        .map_err(Error::failed_from)??;
        Ok(Self { started_at: info.started_at, records, messages, calls })
    }

    /// The pieces of work ([`build`]) of `agent` ([`of_agent`]), or all of them.
    pub fn entries(&self, agent: Option<&str>) -> Vec<Entry<'_>> {
        of_agent(build(&self.messages, &self.records), agent)
    }

    /// The timeline of `agent` (or the whole run's) as [`json()`].
    pub fn json(&self, agent: Option<&str>) -> Value {
        json(&self.entries(agent), self.started_at, &self.calls)
    }
}
