//! One line of text per event, as the `strata` command prints a run and the dashboard lists
//! its events: an audit record ([`event_line`]) or an event of an executor kind's run
//! ([`run_line`]), each `[  T.TTs] AGENT  WHAT`, `T` the seconds since the run started.
//!
//! Text that can come from outside (file paths a tool wrote, tool output, goals, reasons) is
//! escaped ([`team_file::escape_controls`]: a newline shows as `\n`), so one event is always
//! one line and nothing in it can drive a terminal.

use agent_core::{AuditEvent, AuditRecord};
use agent_state::{AgentId, RunEvent};
use team_file::escape_controls as esc;

use crate::run_dir::now_ms;

#[cfg(test)]
mod tests;

/// One event of an executor kind's run as one line of text, like an audit record's, such as
/// `[   3.20s] exec-1       research_agent run 3f2a0c1d: 40% reading docs/a.md`.
pub fn run_line(agent: &AgentId, event: &RunEvent, start: u64) -> String {
    let (run_id, kind, at, what) = match event {
        RunEvent::Transition { run_id, kind, transition } => (
            run_id,
            kind,
            transition.at.0,
            format!("{} -> {} ({})", transition.from, transition.to, transition.reason),
        ),
        RunEvent::Progress { run_id, kind, percent, message } => {
            (run_id, kind, now_ms(), format!("{percent}% {message}"))
        }
        RunEvent::Note { run_id, kind, name, data } => {
            (run_id, kind, now_ms(), format!("{name} {data}"))
        }
        RunEvent::SoftTimeout { run_id, kind, after_ms } => {
            (run_id, kind, now_ms(), format!("past its soft timeout of {after_ms} ms, going on"))
        }
        RunEvent::Retrying { run_id, kind, retry, delay_ms, failure } => {
            (run_id, kind, now_ms(), format!("retry {retry} in {delay_ms} ms after {failure}"))
        }
    };
    let t = at.saturating_sub(start) as f64 / 1000.0;
    esc(&format!("[{t:>7.2}s] {:<12} {kind} run {}: {what}", agent.as_str(), run_id)).into_owned()
}

/// One audit record as one line of text: control characters in it are escaped.
pub fn event_line(r: &AuditRecord, start: u64) -> String {
    let t = r.at.0.saturating_sub(start) as f64 / 1000.0;
    let what = match &r.event {
        AuditEvent::Transition { from, to, reason } => format!("{from} -> {to} ({reason})"),
        AuditEvent::Denied { action, error } => format!("DENIED {action}: {error}"),
        AuditEvent::ToolCall { tool, success, summary, .. } => {
            // Whole (it is short), so a file name with a newline is shown, escaped, not cut.
            format!("tool {tool} {}: {}", if *success { "ok" } else { "FAILED" }, summary.trim())
        }
        AuditEvent::Error { error, retry, max_retries } => {
            format!("error (retry {retry}/{max_retries}): {error}")
        }
        AuditEvent::Retry { attempt, max_retries, class, heartbeat, due_heartbeat, wait_beats } => {
            retry_text(*attempt, *max_retries, *class, *heartbeat, due_heartbeat.zip(*wait_beats))
        }
        AuditEvent::Decision { decision, action, detail } => {
            let detail = if detail.is_empty() { String::new() } else { format!(": {detail}") };
            format!("decision {} {action}{detail}", short_id(&decision.to_string()))
        }
        AuditEvent::MissedHeartbeat { heartbeat } => format!("missed heartbeat {heartbeat}"),
        AuditEvent::Spawned { spawn } => spawned_text(spawn),
        AuditEvent::Despawned { agent, summary } => {
            format!("despawned {agent}: {}", first_line(summary))
        }
        AuditEvent::Result { result, trusted, .. } => result_text(result, *trusted),
        AuditEvent::Stuck { task, reason, escalated_to } => {
            let task = task.as_ref().map(|t| format!(" {t}")).unwrap_or_default();
            let then = escalated_to.as_ref().map(|to| format!("escalated to {to}"));
            format!("STUCK{task}: {reason}; {}", then.as_deref().unwrap_or("task stopped"))
        }
        AuditEvent::TimedOut { what, limit_ms, .. } => {
            format!("TIMED OUT: {what} (limit {limit_ms} ms)")
        }
        AuditEvent::SoftTimeout { what, soft_ms, hard_ms, .. } => {
            format!(
                "SOFT TIMEOUT: {what} still running after {soft_ms} ms (hard limit {hard_ms} ms)"
            )
        }
        AuditEvent::ToolOutcomeUnknown { tool, reason, cancelled, .. } => format!(
            "OUTCOME UNKNOWN: {tool}: {reason}{}; not sent again, needs a decision",
            if *cancelled { "; cancelled" } else { "" }
        ),
        AuditEvent::PeerHelp { peer, step, request, outcome } => {
            let step = step.as_ref().map(|s| format!(" {s}")).unwrap_or_default();
            format!("peer help ({request}){step} with {peer}: {outcome}")
        }
        AuditEvent::Ooda { ooda } => ooda_text(ooda),
        AuditEvent::RunInputs { sha256 } => {
            format!(
                "run inputs recorded ({})",
                sha256.keys().cloned().collect::<Vec<_>>().join(", ")
            )
        }
        AuditEvent::Unsandboxed { command, reason } => {
            format!("runs outside the sandbox: `{command}` ({reason})")
        }
        AuditEvent::WorkerLost { worker, agents, taken_by } => {
            worker_lost_text(worker, agents, taken_by)
        }
        AuditEvent::AgentPanicked { message, count, failed } => format!(
            "PANICKED ({count} in a row): {}; {}",
            first_line(message),
            if *failed { "agent failed" } else { "reloaded from its stored state" }
        ),
        AuditEvent::AnswerRepair { decision, repair, max_repairs, problems } => {
            format!(
                "INVALID {decision} answer, sent back for repair {repair} of {max_repairs}: {problems}"
            )
        }
        AuditEvent::Operator { request, outcome, error } => {
            let error = error.as_ref().map(|e| format!(": {e}")).unwrap_or_default();
            let request = crate::operator::describe(request);
            format!("OPERATOR {request} {}{error}", outcome.to_uppercase())
        }
    };
    esc(&format!("[{t:>7.2}s] {:<12} {what}", r.agent.as_str())).into_owned()
}

/// A spawn record: the new agent, its role and depth, and its task's first line.
fn spawned_text(spawn: &agent_core::spawn::SpawnRecord) -> String {
    format!(
        "spawned {} ({}, depth {}): {}",
        spawn.agent,
        spawn.role,
        spawn.depth,
        first_line(&spawn.task_prompt)
    )
}

/// A structured result: its status, whether it is trusted, its artifacts and summary.
fn result_text(result: &agent_state::AgentResult, trusted: bool) -> String {
    format!(
        "returned results ({:?}{}, {} artifact(s)): {}",
        result.status,
        if trusted { "" } else { ", UNTRUSTED" },
        result.artifacts.len(),
        first_line(&result.summary)
    )
}

/// A retry record: when the next attempt is due, or why there is none.
fn retry_text(
    attempt: u32,
    max_retries: u32,
    class: agent_state::ErrorClass,
    heartbeat: u64,
    next: Option<(u64, u64)>,
) -> String {
    let class = match class {
        agent_state::ErrorClass::Transient => "transient",
        agent_state::ErrorClass::Permanent => "permanent",
    };
    match next {
        Some((due, wait)) => format!(
            "RETRY: attempt {attempt} of {} failed ({class}) at heartbeat {heartbeat}; \
             next attempt in {wait} heartbeat(s), at heartbeat {due}",
            max_retries.saturating_add(1)
        ),
        None => format!(
            "NOT RETRIED: attempt {attempt} failed ({class}) at heartbeat {heartbeat}; {}",
            if class == "permanent" { "a permanent error" } else { "no retries left" }
        ),
    }
}

/// An OODA record: its kind, iteration, state version and the first line of its data.
fn ooda_text(event: &agent_state::ooda::OodaEvent) -> String {
    let data = match &event.data {
        serde_json::Value::Null => String::new(),
        serde_json::Value::Object(m) if m.is_empty() => String::new(),
        data => format!(": {}", first_line(&data.to_string())),
    };
    format!(
        "ooda {} (iteration {}, v{}){data}",
        serde_json::to_value(event.kind)
            .ok()
            .and_then(|v| v.as_str().map(str::to_owned))
            .unwrap_or_default(),
        event.iteration,
        event.state_version
    )
}

/// A lost worker's agents, and who took each over.
fn worker_lost_text(
    worker: &str,
    agents: &[AgentId],
    taken_by: &std::collections::BTreeMap<AgentId, String>,
) -> String {
    let each: Vec<String> = agents
        .iter()
        .map(|a| match taken_by.get(a) {
            Some(to) => format!("{a} taken over by worker {to}"),
            None => format!("{a} not taken over yet"),
        })
        .collect();
    format!("WORKER LOST: worker {worker} no longer hosts its agents: {}", each.join(", "))
}

/// The first line of `s`.
fn first_line(s: &str) -> &str {
    s.lines().next().unwrap_or_default()
}

/// The first eight characters of an id (a decision's, a genome's), as lines show it.
pub fn short_id(id: &str) -> &str {
    id.get(..8).unwrap_or(id)
}
