//! The lines of `strata run --json` (and `strata resume --json`): one JSON object per line,
//! `event` naming what happened. A program that drives a run through the library can write
//! the same stream; the `strata` command prints these values as they come.
//!
//! - `run_started` / `run_resumed` ([`started`]), `run_finished_already` ([`finished_already`]),
//!   `run_interrupted` ([`interrupted`]) and `run_finished` with the summary ([`finished`]).
//! - While the run goes, from its event stream: `audit` with each stored record ([`audit`]),
//!   `executor_run` with a state change, progress report or note of an executor kind's run
//!   ([`executor_run`]), `tokens` with a piece of a model's answer as it streams ([`tokens`]),
//!   and `lagged` with how many events the reader skipped when it fell behind ([`lagged`]).

use std::path::Path;

use agent_core::{AuditRecord, ModelTokens};
use agent_state::{AgentId, RunEvent};
use serde_json::{Value, json};

use crate::run::{Ended, How};
use crate::run_dir::RunInfo;
use crate::summary::Summary;

/// `run_started` (a new run) or `run_resumed`: its id, task, directory `dir` and workspace.
pub fn started(info: &RunInfo, dir: &Path, how: How) -> Value {
    let event = match how {
        How::Started => "run_started",
        How::Resumed => "run_resumed",
    };
    json!({"event": event, "run_id": info.run_id, "task": info.task_id, "data": dir,
        "workspace": info.workspace})
}

/// `run_finished_already`: a resumed run had ended; its id, status and directory `dir`.
pub fn finished_already(info: &RunInfo, dir: &Path) -> Value {
    json!({"event": "run_finished_already", "run_id": info.run_id, "status": info.status,
        "data": dir})
}

/// `run_interrupted`: the run stopped, resumable; its id and directory `dir`.
pub fn interrupted(info: &RunInfo, dir: &Path) -> Value {
    json!({"event": "run_interrupted", "run_id": info.run_id, "data": dir})
}

/// `run_finished`: the run `ended` with an outcome, and its `summary` (outcome, duration,
/// files written, decisions, retries, failures, every agent's metrics).
pub fn finished(summary: &Summary, ended: &Ended) -> Value {
    let Ended { info, dir, task, .. } = ended;
    json!({
        "event": "run_finished",
        "run_id": info.run_id,
        "task": task.id,
        "outcome": summary.outcome,
        "duration_s": summary.duration_s,
        "files_written": summary.files_written,
        "decisions": summary.decisions,
        "retries": summary.retries(),
        "failures": summary.failures(),
        "agents": summary.agents,
        "data": dir,
        "workspace": info.workspace,
    })
}

/// `audit`: a record of the audit log, as stored.
pub fn audit(record: &AuditRecord) -> Value {
    json!({"event": "audit", "record": record})
}

/// `executor_run`: an event of an executor kind's run by `agent`.
pub fn executor_run(agent: &AgentId, event: &RunEvent) -> Value {
    json!({"event": "executor_run", "agent": agent, "run": event})
}

/// `tokens`: a piece of a model's answer (`agent`, `call`, `attempt`, `tool`, `text`).
pub fn tokens(tokens: &ModelTokens) -> Value {
    json!({
        "event": "tokens",
        "agent": tokens.agent,
        "call": tokens.call,
        "attempt": tokens.attempt,
        "tool": tokens.tool,
        "text": tokens.text,
    })
}

/// `lagged`: the reader fell behind and the event stream dropped `skipped` events for it.
pub fn lagged(skipped: u64) -> Value {
    json!({"event": "lagged", "skipped": skipped})
}
