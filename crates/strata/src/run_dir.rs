//! A run's directory in the data directory, `<data>/<run id>/`, and `run.json`, what describes
//! the run for listing and resuming it ([`RunInfo`]).
//!
//! A run directory holds the run's sled database (with its marker file,
//! [`run_store::RUN_MARKER`]), `run.json`, the team and plan files as the run used them
//! ([`TEAM_FILE`], [`PLAN_FILE`]), the `shell` commands' crash journals ([`JOURNAL_DIR`]), the
//! run's own workspace unless another was chosen ([`RUN_WORKSPACE`]), and the operator inbox
//! (`requests/`). The data directory also keeps a copy of every run's anchor file
//! ([`ANCHOR_INDEX`]).

use std::path::{Path, PathBuf};
use std::time::{SystemTime, UNIX_EPOCH};

use agent_state::RunId;
use serde::{Deserialize, Serialize};

use crate::error::{Context as _, Error, Result};

/// The file in a run directory that describes the run for `strata runs` and `resume`.
pub const RUN_FILE: &str = "run.json";
/// The team file as the run used it.
pub const TEAM_FILE: &str = "team.toml";
/// The plan file as the run used it.
pub const PLAN_FILE: &str = "plan.toml";
/// Where side-effecting tool calls keep their crash journals.
pub const JOURNAL_DIR: &str = "journal";
/// The run's own workspace, in its directory, when no other was chosen.
pub const RUN_WORKSPACE: &str = "workspace";
/// The file that makes a directory of the data directory an evolution (not a team run).
pub const EVOLUTION_FILE: &str = "evolution.json";
/// The file that makes a directory of the data directory an eval (`strata eval`; its attempts
/// are team runs of their own).
pub const EVAL_FILE: &str = "eval.json";
/// The directory, in the data directory, that keeps a copy of every run's anchor file
/// (`<run id>.anchor`): a second place, outside the run directory, so that deleting one file
/// never removes every anchor of a run whose seal is gone.
pub const ANCHOR_INDEX: &str = "strata-anchors";

/// Where a run stands.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RunStatus {
    /// Running, or killed while running.
    Running,
    /// Stopped by Ctrl-C; resumable.
    Interrupted,
    /// The task succeeded.
    Succeeded,
    /// The task failed.
    Failed,
}

impl RunStatus {
    /// The name `runs` and `inspect` print.
    pub fn as_str(self) -> &'static str {
        match self {
            RunStatus::Running => "running",
            RunStatus::Interrupted => "interrupted",
            RunStatus::Succeeded => "succeeded",
            RunStatus::Failed => "failed",
        }
    }
}

/// `run.json`.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct RunInfo {
    /// The run id.
    pub run_id: RunId,
    /// The task id.
    pub task_id: String,
    /// The task's goal.
    pub goal: String,
    /// The workspace the tools work in (absolute).
    pub workspace: PathBuf,
    /// Heartbeat in milliseconds.
    pub heartbeat_ms: u64,
    /// The reasoner override given on the command line, if any.
    #[serde(default)]
    pub reasoner: Option<String>,
    /// `--base-url` and `--model`, and `$OPENAI_BASE_URL`, as the run started with them.
    #[serde(flatten)]
    pub flags: ModelFlags,
    /// When the run started (ms since the epoch).
    pub started_at: u64,
    /// When it ended, if it did.
    #[serde(default)]
    pub finished_at: Option<u64>,
    /// Where it stands.
    pub status: RunStatus,
    /// Why it failed, if it did.
    #[serde(default)]
    pub failure: Option<String>,
    /// Whether `shell` commands ran without the sandbox (`--unsandboxed`) in any session of
    /// the run.
    #[serde(default)]
    pub unsandboxed: bool,
    /// The NATS server the run's bus, whiteboards, governance, audit log and state store are
    /// on (`--nats URL`; the namespace is the run id); `None`: they are in the run's database.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub nats: Option<String>,
    /// On NATS, every agent runs in the run's own process even when workers are live
    /// (`--local`); `resume` keeps it so.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub local: bool,
    /// What its model calls used, as the usage ledger had it when the run last stopped
    /// (`None` for a run without a model, or one that has not stopped yet): `strata runs` and
    /// the dashboard's runs list show it without opening the run's database.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub usage: Option<RunUsage>,
}

impl RunInfo {
    /// Reads `run.json` of the run in `dir`.
    ///
    /// A `run.json` whose run id breaks today's rule was written by a Strata from before run
    /// ids had one rule: bad input that says so.
    pub fn read(dir: &Path) -> Result<Self> {
        let path = dir.join(RUN_FILE);
        let value: serde_json::Value = read_json(&path)?;
        if let Some(Err(e)) = value.get("run_id").and_then(|id| id.as_str()).map(RunId::parse) {
            return Err(Error::bad_input(format!(
                "{} was started by an older Strata, whose run ids could hold `.` and `_`, and \
                 cannot be opened by this version: {e}",
                dir.display()
            )));
        }
        serde_json::from_value(value).with_context(|| format!("{} is damaged", path.display()))
    }

    /// Writes `run.json` of the run in `dir` (through a temporary file and a rename).
    pub fn write(&self, dir: &Path) -> Result<()> {
        write_atomic(&dir.join(RUN_FILE), &serde_json::to_vec_pretty(self)?)
    }
}

/// A run's model usage in `run.json`: the totals of its usage ledger.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct RunUsage {
    /// Model calls answered.
    pub calls: u64,
    /// Prompt and generated tokens.
    pub tokens: u64,
    /// Cost in US dollars; `None` while a model without a price was called (the cost is not
    /// known).
    pub cost_usd: Option<f64>,
}

impl RunUsage {
    /// The totals of `ledger`, if the run has one.
    pub fn of(ledger: Option<&agent_llm::UsageLedger>) -> Option<Self> {
        let total = ledger?.report().total;
        Some(Self {
            calls: total.calls,
            tokens: total.input_tokens + total.output_tokens,
            cost_usd: (total.unpriced_calls == 0).then_some(total.cost_usd),
        })
    }
}

/// What a run's agents reason with beside the reasoner override, kept in `run.json` so that
/// `resume` and the workers of a placed run use the same: `--base-url`, `--model`,
/// `--small-model` and `$OPENAI_BASE_URL` as it was when the run started (a resume in another
/// shell, or a worker on another machine, reaches the same server).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ModelFlags {
    /// `--base-url`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub base_url: Option<String>,
    /// `--model`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model: Option<String>,
    /// `$OPENAI_BASE_URL` (not blank) when the run started.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub openai_base_url: Option<String>,
    /// `--small-model`.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub small_model: bool,
}

impl ModelFlags {
    /// The flags of a new run with `base_url`, `model` and `small_model`, and
    /// `$OPENAI_BASE_URL` read now.
    pub fn with_env(base_url: Option<String>, model: Option<String>, small_model: bool) -> Self {
        let env = std::env::var(crate::reasoners::OPENAI_BASE_URL_VAR).ok();
        Self {
            base_url,
            model,
            openai_base_url: env.map(|v| v.trim().to_owned()).filter(|v| !v.is_empty()),
            small_model,
        }
    }
}

/// A JSON file the engine wrote (`run.json`, `evolution.json`, a genome), read back.
pub fn read_json<T: serde::de::DeserializeOwned>(path: &Path) -> Result<T> {
    let bytes = std::fs::read(path).with_context(|| format!("cannot read {}", path.display()))?;
    serde_json::from_slice(&bytes).with_context(|| format!("{} is damaged", path.display()))
}

/// Writes a file through a temporary file and a rename.
pub fn write_atomic(path: &Path, bytes: &[u8]) -> Result<()> {
    let tmp = path.with_extension("tmp");
    std::fs::write(&tmp, bytes).with_context(|| format!("cannot write {}", tmp.display()))?;
    std::fs::File::open(&tmp)
        .and_then(|f| f.sync_all())
        .with_context(|| format!("cannot sync {}", tmp.display()))?;
    std::fs::rename(&tmp, path).with_context(|| format!("cannot write {}", path.display()))
}

/// How the run in `dir` (with its `run.json` `info`) stands, a run killed while running
/// included: `succeeded`, `failed`, `interrupted`, `running` (its database is held by a live
/// process) or `killed (resumable)`.
pub fn effective_status(dir: &Path, info: &RunInfo) -> &'static str {
    match info.status {
        RunStatus::Succeeded => "succeeded",
        RunStatus::Failed => "failed",
        RunStatus::Interrupted => "interrupted",
        RunStatus::Running => match run_store::RunStore::is_in_use(dir) {
            Ok(true) => "running",
            _ => "killed (resumable)",
        },
    }
}

/// Milliseconds since the epoch, now.
pub fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
        .unwrap_or(0)
}

/// Finds a run by id in `data`, or takes `run` as a directory: bad input when it is neither,
/// or is an evolution, or is not a run.
pub fn resolve_run(data: &Path, run: &str) -> Result<PathBuf> {
    let by_id = data.join(run);
    let dir = if by_id.is_dir() { by_id } else { PathBuf::from(run) };
    if !dir.is_dir() {
        return Err(Error::bad_input(format!(
            "no run `{run}`: it is neither a run id in {} nor a directory; `strata runs` lists the runs",
            data.display()
        )));
    }
    if dir.join(EVOLUTION_FILE).is_file() {
        return Err(Error::bad_input(format!(
            "`{run}` is an evolution, not a team run: `strata inspect {run} lineage` and `strata lineage {run}` show it, `strata evolve --resume {run}` goes on with it"
        )));
    }
    if dir.join(EVAL_FILE).is_file() {
        return Err(Error::bad_input(format!(
            "`{run}` is an eval, not a team run: `strata eval --resume {run}` shows its report (and goes on with it if it was stopped); its attempts are runs of their own, listed by `strata runs`"
        )));
    }
    if !dir.join(RUN_FILE).is_file() || !dir.join(run_store::RUN_MARKER).is_file() {
        return Err(Error::bad_input(format!(
            "{} is not a Strata run (no {} or {}); `strata runs` lists the runs",
            dir.display(),
            RUN_FILE,
            run_store::RUN_MARKER
        )));
    }
    Ok(dir)
}

/// Whether `text` can name a run directory that exists: what runs made before
/// [`agent_state::RunId`]'s rule may be named (1 to 100 ASCII letters, digits, `-`, `_` or
/// `.`, not starting with `.`), so that they can still be read; nothing that climbs out of the
/// data directory.
pub fn is_run_dir_name(text: &str) -> bool {
    !text.is_empty()
        && text.len() <= 100
        && !text.starts_with('.')
        && text.bytes().all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'))
}

/// The anchor index of the run in `run_dir` (runs live in the data directory:
/// `<data>/<run id>`).
pub fn anchor_index(run_dir: &Path) -> PathBuf {
    run_dir.parent().unwrap_or_else(|| Path::new(".")).join(ANCHOR_INDEX)
}

/// The data directory as the sandbox hides it (absolute; every run in it).
pub fn data_dir(data: &Path) -> PathBuf {
    std::fs::canonicalize(data).unwrap_or_else(|_| std::path::absolute(data).unwrap_or_default())
}

/// A readable, unique run id: the task id, the UTC time, and four random hex digits.
pub fn new_run_id(task_id: &str) -> RunId {
    let secs = now_ms() / 1000;
    let (days, rest) = (secs / 86_400, secs % 86_400);
    let (y, m, d) = civil_from_days(i64::try_from(days).unwrap_or(0));
    let slug: String = task_id
        .chars()
        .map(|c| if c.is_ascii_alphanumeric() || c == '-' { c } else { '-' })
        .take(32)
        .collect();
    let random = uuid::Uuid::new_v4();
    let suffix = &random.simple().to_string()[..4];
    let text = format!(
        "{slug}-{y:04}{m:02}{d:02}-{:02}{:02}{:02}-{suffix}",
        rest / 3600,
        rest % 3600 / 60,
        rest % 60
    );
    // Valid by construction (at most 53 letters, digits and `-`); the hex id if not.
    RunId::parse(&text).unwrap_or_else(|_| RunId::hex(random.as_u128()))
}

/// Days since 1970-01-01 to (year, month, day), proleptic Gregorian (Howard Hinnant's
/// algorithm).
pub fn civil_from_days(z: i64) -> (i64, u32, u32) {
    let z = z + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let y = yoe + era * 400;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = u32::try_from(doy - (153 * mp + 2) / 5 + 1).unwrap_or(1);
    let m = u32::try_from(if mp < 10 { mp + 3 } else { mp - 9 }).unwrap_or(1);
    (if m <= 2 { y + 1 } else { y }, m, d)
}

/// Formats milliseconds since the epoch as `YYYY-MM-DD HH:MM:SS` UTC.
pub fn format_time(ms: u64) -> String {
    let secs = ms / 1000;
    let (y, m, d) = civil_from_days(i64::try_from(secs / 86_400).unwrap_or(0));
    let rest = secs % 86_400;
    format!("{y:04}-{m:02}-{d:02} {:02}:{:02}:{:02}", rest / 3600, rest % 3600 / 60, rest % 60)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, reason = "tests")]

    use super::*;

    #[test]
    fn days_become_dates() {
        assert_eq!(civil_from_days(0), (1970, 1, 1));
        assert_eq!(civil_from_days(20_454), (2026, 1, 1));
        assert_eq!(format_time(1_767_225_600_000 + 3_723_000), "2026-01-01 01:02:03");
    }

    #[test]
    fn a_run_id_starts_with_its_task_and_is_safe_in_paths() {
        let id = new_run_id("fix the/tests");
        assert!(id.starts_with("fix-the-tests-"), "{id}");
        assert!(id.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-'), "{id}");
    }

    #[test]
    fn run_json_round_trips() {
        let dir = tempfile::tempdir().unwrap();
        let info = RunInfo {
            run_id: RunId::parse("r").unwrap(),
            task_id: "t".into(),
            goal: "g".into(),
            workspace: dir.path().to_path_buf(),
            heartbeat_ms: 250,
            reasoner: None,
            flags: ModelFlags::default(),
            started_at: 1,
            finished_at: None,
            status: RunStatus::Running,
            failure: None,
            unsandboxed: false,
            nats: None,
            local: false,
            usage: Some(RunUsage { calls: 2, tokens: 30, cost_usd: None }),
        };
        info.write(dir.path()).unwrap();
        let back = RunInfo::read(dir.path()).unwrap();
        assert_eq!(back.usage, info.usage);
        assert_eq!(back.status, RunStatus::Running);
        std::fs::write(dir.path().join(RUN_FILE), "{").unwrap();
        let error = RunInfo::read(dir.path()).unwrap_err();
        assert!(error.to_string().ends_with("run.json is damaged"), "{error}");
    }

    #[test]
    fn run_directory_names_stay_in_the_data_directory() {
        for good in ["hello-20261206-101500-ab12", "old_run.2", "a"] {
            assert!(is_run_dir_name(good), "{good}");
        }
        for bad in ["", ".", "..", ".hidden", "a/b", "../x", "a b", &"x".repeat(101)] {
            assert!(!is_run_dir_name(bad), "{bad}");
        }
    }

    #[test]
    fn a_missing_run_is_bad_input() {
        let dir = tempfile::tempdir().unwrap();
        let error = resolve_run(dir.path(), "nope").unwrap_err();
        assert!(error.is_bad_input());
        assert!(error.to_string().contains("no run `nope`"), "{error}");
    }
}
