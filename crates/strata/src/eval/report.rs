//! An eval's figures ([`Report`]): per task and team, per team, and in total, over the
//! attempts that have a result; as a text table ([`Report::table`]), JSON (serde) or SVG
//! ([`Report::svg`]).

use std::collections::BTreeMap;
use std::path::PathBuf;

use serde::Serialize;

use super::{AttemptResult, EvalInfo, EvalStatus, StopReason};

/// Wall times of attempts, in milliseconds: the median and the 90th percentile (nearest rank),
/// the shortest and the longest.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub struct WallTime {
    /// The median.
    pub p50_ms: u64,
    /// The 90th percentile.
    pub p90_ms: u64,
    /// The shortest.
    pub min_ms: u64,
    /// The longest.
    pub max_ms: u64,
}

impl WallTime {
    /// Of `walls` (`None` when there are none).
    pub fn of(walls: &[u64]) -> Option<Self> {
        if walls.is_empty() {
            return None;
        }
        let mut sorted = walls.to_vec();
        sorted.sort_unstable();
        let rank = |p: f64| -> u64 {
            let n = sorted.len();
            let at = ((p * n as f64).ceil() as usize).clamp(1, n) - 1;
            sorted[at]
        };
        Some(Self {
            p50_ms: rank(0.5),
            p90_ms: rank(0.9),
            min_ms: *sorted.first()?,
            max_ms: *sorted.last()?,
        })
    }
}

/// The figures of a set of attempts: a task by a team, a team over its tasks, or everything.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Row {
    /// The task (`*`: every task).
    pub task: String,
    /// The team's label (`*`: every team).
    pub team: String,
    /// Attempts planned.
    pub planned: usize,
    /// Attempts with a result.
    pub attempts: usize,
    /// Attempts that passed (the run succeeded and the check passed).
    pub passed: usize,
    /// Attempts whose run succeeded and whose check failed.
    pub check_failed: usize,
    /// Wall times (`None`: no attempt has a result).
    pub wall: Option<WallTime>,
    /// Model calls, summed.
    pub model_calls: u64,
    /// Tokens, summed.
    pub tokens: u64,
    /// Cost in US dollars, summed (`None`: some attempt called a model without a price).
    pub cost_usd: Option<f64>,
    /// Answer repairs, summed.
    pub repairs: u64,
    /// Attempts stopped without success, by typed reason.
    pub stops: BTreeMap<StopReason, usize>,
    /// Runaway attempts (stopped by the eval past the suite's task time limit).
    pub runaway: usize,
    /// The attempts' runs, in order.
    pub run_ids: Vec<String>,
}

impl Row {
    fn of<'a>(
        task: &str,
        team: &str,
        attempts: impl Iterator<Item = (Option<&'a str>, Option<&'a AttemptResult>)>,
    ) -> Self {
        let mut row = Row {
            task: task.to_owned(),
            team: team.to_owned(),
            planned: 0,
            attempts: 0,
            passed: 0,
            check_failed: 0,
            wall: None,
            model_calls: 0,
            tokens: 0,
            cost_usd: Some(0.0),
            repairs: 0,
            stops: BTreeMap::new(),
            runaway: 0,
            run_ids: Vec::new(),
        };
        let mut walls = Vec::new();
        for (run_id, result) in attempts {
            row.planned += 1;
            row.run_ids.extend(run_id.map(str::to_owned));
            let Some(r) = result else { continue };
            row.attempts += 1;
            row.passed += usize::from(r.passed);
            row.check_failed += usize::from(r.check.as_ref().is_some_and(|c| !c.passed));
            walls.push(r.wall_ms);
            row.model_calls += r.model_calls;
            row.tokens += r.tokens;
            row.cost_usd = row.cost_usd.zip(r.cost_usd).map(|(a, b)| a + b);
            row.repairs += r.repairs;
            if let Some(stop) = r.stop {
                *row.stops.entry(stop).or_default() += 1;
            }
            row.runaway += usize::from(r.runaway);
        }
        row.wall = WallTime::of(&walls);
        row
    }
}

/// An eval's figures.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Report {
    /// The eval.
    pub eval_id: agent_state::RunId,
    /// Its suite.
    pub suite: PathBuf,
    /// How it stands.
    pub status: EvalStatus,
    /// Attempts of each task by each team.
    pub repeat: u32,
    /// Each task by each team, by team then in the suite's order.
    pub rows: Vec<Row>,
    /// Each team over every task.
    pub teams: Vec<Row>,
    /// Everything.
    pub total: Row,
}

impl Report {
    /// The figures of `info`'s attempts that have a result.
    pub fn of(info: &EvalInfo) -> Self {
        let mut tasks: Vec<&str> = Vec::new();
        for a in &info.attempts {
            if !tasks.contains(&a.task.as_str()) {
                tasks.push(&a.task);
            }
        }
        let label = |team: usize| info.teams.get(team).map_or("?", |t| t.label.as_str());
        let pick = |team, task| pick(info, team, task);
        let mut rows = Vec::new();
        let mut teams = Vec::new();
        for team in 0..info.teams.len() {
            for task in &tasks {
                rows.push(Row::of(task, label(team), pick(Some(team), Some(task))));
            }
            teams.push(Row::of("*", label(team), pick(Some(team), None)));
        }
        Self {
            eval_id: info.eval_id.clone(),
            suite: info.suite.clone(),
            status: info.status,
            repeat: info.repeat,
            rows,
            teams,
            total: Row::of("*", "*", pick(None, None)),
        }
    }

    /// The report as a text table: a line per task and team, per team, and the total.
    pub fn table(&self) -> String {
        let header = [
            "task", "team", "passed", "wall p50", "wall p90", "calls", "tokens", "cost", "repairs",
            "runaway", "stops",
        ];
        let mut lines: Vec<Vec<String>> = vec![header.iter().map(|h| (*h).to_owned()).collect()];
        for row in self.rows.iter().chain(&self.teams).chain(std::iter::once(&self.total)) {
            lines.push(cells(row));
        }
        let widths: Vec<usize> = (0..header.len())
            .map(|i| lines.iter().map(|l| l[i].chars().count()).max().unwrap_or(0))
            .collect();
        let mut text = String::new();
        for line in &lines {
            let mut out = String::new();
            for (i, cell) in line.iter().enumerate() {
                if i + 1 == line.len() {
                    out.push_str(cell);
                } else {
                    out.push_str(&format!("{cell:<width$}  ", width = widths[i]));
                }
            }
            text.push_str(out.trim_end());
            text.push('\n');
        }
        text
    }
}

/// The run ids and results of `info`'s attempts by `team` of `task` (`None`: any).
fn pick<'a>(
    info: &'a EvalInfo,
    team: Option<usize>,
    task: Option<&'a str>,
) -> impl Iterator<Item = (Option<&'a str>, Option<&'a AttemptResult>)> + 'a {
    info.attempts
        .iter()
        .filter(move |a| team.is_none_or(|t| a.team == t))
        .filter(move |a| task.is_none_or(|t| a.task == t))
        .map(|a| (a.run_id.as_deref(), a.result.as_ref()))
}

/// A row's cells in the table.
fn cells(row: &Row) -> Vec<String> {
    let wall =
        |ms: fn(&WallTime) -> u64| row.wall.as_ref().map_or("-".to_owned(), |w| seconds(ms(w)));
    let stops = if row.stops.is_empty() {
        "-".to_owned()
    } else {
        row.stops.iter().map(|(k, n)| format!("{} {n}", k.as_str())).collect::<Vec<_>>().join(", ")
    };
    vec![
        row.task.clone(),
        row.team.clone(),
        format!("{}/{}", row.passed, row.attempts),
        wall(|w| w.p50_ms),
        wall(|w| w.p90_ms),
        row.model_calls.to_string(),
        row.tokens.to_string(),
        row.cost_usd.map_or("?".to_owned(), |c| format!("${c:.4}")),
        row.repairs.to_string(),
        row.runaway.to_string(),
        stops,
    ]
}

/// Milliseconds as seconds, such as `1.25s`.
pub(super) fn seconds(ms: u64) -> String {
    format!("{:.2}s", ms as f64 / 1000.0)
}
