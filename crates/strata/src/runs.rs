//! The runs of a data directory, as `strata runs` lists them: every team run, evolution and
//! eval (`strata eval`, whose attempts are team runs listed too), oldest first, each with how
//! it stands. A run that no live process holds is checked as
//! `strata verify` checks it (the store against its seal, the audit log's chain and its
//! anchors), and a broken one says why; a run on NATS is listed as recorded (its audit log is
//! on the server).

use std::path::Path;

use crate::error::{Context as _, Result};
use crate::evolve::EvolutionInfo;
use crate::run_dir::{RunInfo, effective_status, now_ms};

/// One line of `strata runs`: a team run or an evolution.
#[derive(Debug, Clone)]
pub struct Row {
    /// Its id.
    pub id: String,
    /// How it stands ([`crate::run_dir::effective_status`]).
    pub status: &'static str,
    /// Its task's id (`(evolution)` for an evolution).
    pub task: String,
    /// Its goal.
    pub goal: String,
    /// When it started (Unix ms).
    pub started: u64,
    /// When it ended (Unix ms; now, for a run that has not).
    pub end: u64,
    /// Why it failed, if it did.
    pub failure: Option<String>,
    /// What `verify` finds broken, if anything (the status is then `damaged`).
    pub damage: Option<String>,
    /// What its model calls used, when it last stopped.
    pub usage: Option<crate::run_dir::RunUsage>,
}

/// A row for every run and evolution in `data`, oldest first.
pub async fn list(data: &Path) -> Result<Vec<Row>> {
    let mut rows = Vec::new();
    let entries =
        std::fs::read_dir(data).with_context(|| format!("cannot read {}", data.display()))?;
    for entry in entries.flatten() {
        let dir = entry.path();
        if let Ok(info) = RunInfo::read(&dir) {
            let status = effective_status(&dir, &info);
            let damage = if status == "running" || info.nats.is_some() {
                None
            } else {
                crate::audit::damage(&dir).await
            };
            rows.push(Row {
                status,
                damage,
                end: info.finished_at.unwrap_or_else(now_ms),
                id: info.run_id,
                task: info.task_id,
                goal: info.goal,
                started: info.started_at,
                failure: info.failure,
                usage: info.usage,
            });
        } else if let Ok(info) = crate::eval::EvalInfo::read(&dir) {
            rows.push(Row {
                status: info.effective_status(&dir),
                end: info.finished_at.unwrap_or_else(now_ms),
                task: "(eval)".into(),
                goal: format!(
                    "eval of {}: {} of {} attempts done",
                    info.suite.display(),
                    info.done(),
                    info.attempts.len()
                ),
                id: info.eval_id,
                started: info.started_at,
                failure: info.failure,
                damage: None,
                usage: None,
            });
        } else if let Ok(info) = EvolutionInfo::read(&dir) {
            rows.push(Row {
                status: info.effective_status(&dir),
                end: info.finished_at.unwrap_or_else(now_ms),
                id: info.run_id,
                task: "(evolution)".into(),
                goal: format!("evolve on {}", info.suite.display()),
                started: info.started_at,
                failure: info.failure,
                damage: None,
                usage: None,
            });
        }
    }
    rows.sort_by_key(|row| row.started);
    Ok(rows)
}
