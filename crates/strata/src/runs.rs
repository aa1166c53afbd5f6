//! The runs of a data directory, as `strata runs` lists them: every team run, evolution and
//! eval (`strata eval`, whose attempts are team runs listed too), oldest first, each with how
//! it stands. A run that no live process holds is checked as
//! `strata verify` checks it (the store against its seal, the audit log's chain and its
//! anchors), and a broken one says why; a run on NATS is listed as recorded (its audit log is
//! on the server); and the list as `strata runs --json` prints it ([`json`]). And the team
//! file and plan a first run starts from ([`write_example`], `strata init`).

use std::path::{Path, PathBuf};

use crate::error::{Context as _, Result};
use crate::evolve::EvolutionInfo;
use crate::run_dir::{RunInfo, effective_status, format_time, now_ms};

/// One line of `strata runs`: a team run or an evolution.
#[derive(Debug, Clone)]
pub struct Row {
    /// Its id (for a run that cannot be read, its directory's name).
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

/// The rows as `strata runs --json` prints them: each run's id, status (`damaged` when
/// `verify` finds it broken, with the `damage` and the `recorded_status`), task, goal, start
/// (UTC, as text), duration in seconds, failure, and usage when recorded.
pub fn json(rows: &[Row]) -> serde_json::Value {
    let json: Vec<_> = rows
        .iter()
        .map(|row| {
            let status = if row.damage.is_some() { "damaged" } else { row.status };
            let mut json = serde_json::json!({"run_id": row.id, "status": status, "task": row.task, "goal": row.goal,
                "started_at": format_time(row.started), "duration_s": row.end.saturating_sub(row.started) as f64 / 1000.0,
                "failure": row.failure});
            if let Some(usage) = &row.usage {
                json["usage"] = serde_json::json!(usage);
            }
            if let Some(damage) = &row.damage {
                json["damage"] = damage.as_str().into();
                json["recorded_status"] = row.status.into();
            }
            json
        })
        .collect();
    serde_json::Value::Array(json)
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
                id: info.run_id.to_string(),
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
                id: info.eval_id.to_string(),
                started: info.started_at,
                failure: info.failure,
                damage: None,
                usage: None,
            });
        } else if let Ok(info) = EvolutionInfo::read(&dir) {
            rows.push(Row {
                status: info.effective_status(&dir),
                end: info.finished_at.unwrap_or_else(now_ms),
                id: info.run_id.to_string(),
                task: "(evolution)".into(),
                goal: format!("evolve on {}", info.suite.display()),
                started: info.started_at,
                failure: info.failure,
                damage: None,
                usage: None,
            });
        } else if dir.join(crate::run_dir::RUN_FILE).is_file() {
            // A run this version cannot read (an older Strata's, or a damaged run.json) is
            // listed with why, not left out.
            rows.push(Row {
                status: "unreadable",
                end: 0,
                id: entry.file_name().to_string_lossy().into_owned(),
                task: "?".into(),
                goal: String::new(),
                started: 0,
                failure: RunInfo::read(&dir).err().map(|e| e.chain_text()),
                damage: None,
                usage: None,
            });
        }
    }
    rows.sort_by_key(|row| row.started);
    Ok(rows)
}

/// Writes an example team file and plan into `dir` (`strata init`): `team.toml` and
/// `plan.toml`: the example of `shape` (layered, crew or single), or with `scale` (layered
/// only), a generated team of that many agents ([`team_file::scaled_team_toml`]) and a plan
/// with work for a share of them. Never overwrites a file: one that exists is bad input, as
/// are a scale out of range and a scale with another shape. Returns the
/// two paths.
pub fn write_example(
    dir: &Path,
    shape: agent_pool::TeamShape,
    scale: Option<usize>,
) -> Result<(PathBuf, PathBuf)> {
    if let (Some(agents), agent_pool::TeamShape::Crew | agent_pool::TeamShape::Single) =
        (scale, shape)
    {
        return Err(crate::Error::bad_input(format!(
            "--scale {agents} writes a layered team (powers, leads, executors); it cannot be used with --shape {shape}"
        )));
    }
    let (team_text, plan_text) = match scale {
        None => (
            team_file::shape_team_toml(shape).to_owned(),
            team_file::shape_plan_toml(shape).to_owned(),
        ),
        Some(agents) if !(team_file::MIN_SCALE..=agent_pool::MAX_POOL_SIZE).contains(&agents) => {
            return Err(crate::Error::bad_input(format!(
                "--scale {agents}: a generated team has from {} agents (three powers, a lead and an executor) to {}, the largest pool",
                team_file::MIN_SCALE,
                agent_pool::MAX_POOL_SIZE
            )));
        }
        Some(agents) => (team_file::scaled_team_toml(agents), team_file::scaled_plan_toml(agents)),
    };
    let team = dir.join("team.toml");
    let plan = dir.join("plan.toml");
    for path in [&team, &plan] {
        if path.exists() {
            return Err(crate::Error::bad_input(format!(
                "{} already exists; remove it or choose another directory",
                path.display()
            )));
        }
    }
    std::fs::create_dir_all(dir).with_context(|| format!("cannot create {}", dir.display()))?;
    std::fs::write(&team, team_text).with_context(|| format!("cannot write {}", team.display()))?;
    std::fs::write(&plan, plan_text).with_context(|| format!("cannot write {}", plan.display()))?;
    Ok((team, plan))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, reason = "tests")]

    use super::*;

    fn row(id: &str, damage: Option<&str>, usage: Option<crate::run_dir::RunUsage>) -> Row {
        Row {
            id: id.into(),
            status: "succeeded",
            task: "hello".into(),
            goal: "say hello".into(),
            started: 1_767_225_600_000,
            end: 1_767_225_601_500,
            failure: None,
            damage: damage.map(str::to_owned),
            usage,
        }
    }

    /// A damaged run is `damaged` with what is broken and the status it recorded; usage is
    /// there only when recorded.
    #[test]
    fn the_json_says_damaged_with_why_and_keeps_the_recorded_status() {
        let usage = crate::run_dir::RunUsage { calls: 2, tokens: 40, cost_usd: None };
        let json = json(&[row("a", None, Some(usage)), row("b", Some("the chain breaks"), None)]);
        assert_eq!(json[0]["run_id"], "a");
        assert_eq!(json[0]["status"], "succeeded");
        assert_eq!(json[0]["started_at"], "2026-01-01 00:00:00");
        assert_eq!(json[0]["duration_s"], 1.5);
        assert_eq!(json[0]["usage"]["calls"], 2);
        assert!(json[0].get("damage").is_none() && json[0].get("recorded_status").is_none());
        assert_eq!(json[1]["status"], "damaged");
        assert_eq!(json[1]["damage"], "the chain breaks");
        assert_eq!(json[1]["recorded_status"], "succeeded");
        assert!(json[1].get("usage").is_none());
    }

    #[test]
    fn a_scale_is_refused_with_a_shape_other_than_layered() {
        let tmp = tempfile::tempdir().unwrap();
        for shape in [agent_pool::TeamShape::Crew, agent_pool::TeamShape::Single] {
            let err = write_example(tmp.path(), shape, Some(100)).unwrap_err();
            assert!(err.is_bad_input());
            assert!(err.to_string().contains("--scale 100"), "{err}");
        }
        assert!(!tmp.path().join("team.toml").exists(), "nothing written");
    }

    #[test]
    fn the_example_is_written_once_and_never_over_a_file() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().join("new");
        let (team, plan) = write_example(&dir, agent_pool::TeamShape::default(), None).unwrap();
        assert_eq!(std::fs::read_to_string(&team).unwrap(), team_file::example_team_toml());
        assert_eq!(std::fs::read_to_string(&plan).unwrap(), team_file::example_plan_toml());
        let again = write_example(&dir, agent_pool::TeamShape::default(), None).unwrap_err();
        assert!(again.is_bad_input());
        assert!(
            again
                .to_string()
                .ends_with("team.toml already exists; remove it or choose another directory"),
            "{again}"
        );
        let small = write_example(
            tmp.path(),
            agent_pool::TeamShape::default(),
            Some(team_file::MIN_SCALE - 1),
        )
        .unwrap_err();
        assert!(small.is_bad_input());
        assert!(small.to_string().starts_with("--scale "), "{small}");
        assert!(!tmp.path().join("team.toml").exists());
    }
}
