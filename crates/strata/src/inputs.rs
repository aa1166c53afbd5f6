//! A run's stored inputs: the team file, the plan and the fixed part of `run.json` that the
//! run directory keeps and `strata resume` reads back.
//!
//! When a run starts (and after each resume) the runtime appends their SHA-256 to the run's
//! audit log ([`AuditEvent::RunInputs`], under the id [`RECORDER`]): a record in the hash
//! chain, which an agent cannot reach (the data directory is hidden from commands and masked
//! from the file tools). `strata resume` compares the files with the last such record before
//! it starts anything (no MCP server, no agent): a changed file is bad input (exit 2) naming
//! it. A run recorded before this record existed has none and is refused too: nothing shows
//! that its stored team file (which names the programs `resume` starts) is the one it ran
//! with; start it again with `strata run`.
//!
//! `run.json`'s `status`, `finished_at`, `failure` and `usage` change as the run goes and are
//! not inputs; every other field is (the workspace, the reasoner, the NATS server, `unsandboxed`).
//! A resume that changes `run.json` records the new hashes before it writes the file, with a
//! marker ([`RUN_FILE_CHANGING`]) around the two: a resume killed in between leaves the marker,
//! and only then does `check` take the `run.json` of the record before.

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;

use crate::error::Context as _;
use agent_core::{AuditEvent, AuditLog};
use agent_state::{AgentId, Timestamp, sha256_hex};
use run_store::RunStore;

use crate::error::Error;
use crate::run_dir::{PLAN_FILE, RUN_FILE, RunInfo, TEAM_FILE, now_ms};

/// The id the runtime's own audit records are written under.
pub const RECORDER: &str = "strata";

/// The fields of `run.json` that change as the run goes (not inputs).
const CHANGING: [&str; 4] = ["status", "finished_at", "failure", "usage"];

/// The SHA-256 (lowercase hex) of each stored input of the run directory `dir`.
pub fn digest(dir: &Path) -> crate::Result<BTreeMap<String, String>> {
    let path = dir.join(RUN_FILE);
    let bytes = std::fs::read(&path).with_context(|| format!("cannot read {}", path.display()))?;
    let info: serde_json::Value =
        serde_json::from_slice(&bytes).with_context(|| format!("{} is damaged", path.display()))?;
    digest_with(dir, info)
}

/// The digest of `dir`'s team file and plan, with `info` as its `run.json`.
fn digest_with(dir: &Path, mut info: serde_json::Value) -> crate::Result<BTreeMap<String, String>> {
    let mut sha256 = BTreeMap::new();
    for name in [TEAM_FILE, PLAN_FILE] {
        let path = dir.join(name);
        let bytes =
            std::fs::read(&path).with_context(|| format!("cannot read {}", path.display()))?;
        sha256.insert(name.to_owned(), sha256_hex(&bytes));
    }
    if let Some(fields) = info.as_object_mut() {
        for field in CHANGING {
            fields.remove(field);
        }
    }
    // Keys are sorted (serde_json's map is ordered by key): the same fields, the same bytes.
    sha256.insert(RUN_FILE.to_owned(), sha256_hex(&serde_json::to_vec(&info)?));
    Ok(sha256)
}

/// The file that marks a change of `run.json` under way: written before the new inputs are
/// recorded, removed once `run.json` is written. Only while it is there may `run.json` be the
/// one the record before the last describes (see [`record_and_write`]).
pub const RUN_FILE_CHANGING: &str = "run.json.changing";

/// Appends to `audit` the hashes of `dir`'s stored inputs with `info` as its `run.json`, then
/// writes `info` there: in that order, so that a process killed in between leaves either no
/// `run.json` (a run not started: nothing to resume) or, on resume, the one recorded before.
/// [`RUN_FILE_CHANGING`] marks that window: [`check`] takes the record before the last only
/// while the marker is there.
pub async fn record_and_write(
    audit: &dyn AuditLog,
    dir: &Path,
    info: &RunInfo,
) -> crate::Result<()> {
    let sha256 = digest_with(dir, serde_json::to_value(info)?)?;
    let marker = dir.join(RUN_FILE_CHANGING);
    crate::run_dir::write_atomic(&marker, b"run.json is being changed\n")?;
    audit
        .append(&AgentId::new(RECORDER), Timestamp(now_ms()), AuditEvent::RunInputs { sha256 })
        .await
        .context("cannot record the run's inputs in its audit log")?;
    info.write(dir)?;
    std::fs::remove_file(&marker).with_context(|| format!("cannot remove {}", marker.display()))
}

/// Checks `dir`'s stored inputs against the last [`AuditEvent::RunInputs`] of its audit log
/// (on `store`, or on the NATS server `info` names): bad input naming each changed file, or
/// the lack of a record.
pub async fn check(store: &RunStore, dir: &Path, info: &RunInfo) -> crate::Result<()> {
    let audit: Arc<dyn AuditLog> = match &info.nats {
        Some(url) => {
            let server = crate::stores::connect_existing(url, dir, info).await?;
            Arc::new(
                agent_core::NatsAuditLog::open(&server)
                    .await
                    .context("cannot open the run's audit log on its NATS server")?,
            )
        }
        None => Arc::new(
            agent_core::SledAuditLog::open(store).context("cannot open the run's audit log")?,
        ),
    };
    let records = audit
        .records(Some(&AgentId::new(RECORDER)))
        .await
        .context("cannot read the run's audit log")?;
    let mut recorded = records.into_iter().rev().filter_map(|r| match r.event {
        AuditEvent::RunInputs { sha256 } => Some(sha256),
        _ => None,
    });
    let (last, before) = (recorded.next(), recorded.next());
    let Some(last) = last else {
        return Err(Error::bad_input(format!(
            "{}: the run's audit log holds no record of its stored inputs (a run started by an \
             older Strata), so nothing shows that its {TEAM_FILE}, {PLAN_FILE} and {RUN_FILE} \
             are the ones it started with; nothing was started. Start it again with `strata run`",
            dir.display()
        )));
    };
    let now = digest(dir).map_err(Error::bad_input_from)?;
    // A resume killed after it recorded a changed run.json and before it wrote it leaves the
    // run.json the record before describes, and the marker of that window.
    if before.as_ref() == Some(&now) && dir.join(RUN_FILE_CHANGING).exists() {
        return Ok(());
    }
    let changed: Vec<String> = [TEAM_FILE, PLAN_FILE, RUN_FILE]
        .into_iter()
        .filter(|name| last.get(*name) != now.get(*name))
        .map(|name| dir.join(name).display().to_string())
        .collect();
    if !changed.is_empty() {
        return Err(Error::bad_input(format!(
            "{} changed after the run recorded it (its SHA-256 differs from the one in the \
             run's audit log); nothing was started. Restore it, or start a new run with \
             `strata run`",
            changed.join(", ")
        )));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, reason = "tests")]

    use super::*;

    fn run_dir() -> tempfile::TempDir {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join(TEAM_FILE), "team").unwrap();
        std::fs::write(dir.path().join(PLAN_FILE), "plan").unwrap();
        std::fs::write(
            dir.path().join(RUN_FILE),
            r#"{"run_id": "r", "workspace": "/w", "status": "running", "finished_at": null}"#,
        )
        .unwrap();
        dir
    }

    /// The inputs are recorded before run.json is written: a start killed in between leaves
    /// no run.json (nothing to resume); a resume killed in between (its run.json changed, the
    /// record made, the file not written) leaves the run.json the record before describes,
    /// which `check` takes while the marker of that window is there, and only then. A run.json
    /// the records never described is refused, named.
    #[tokio::test]
    async fn a_run_killed_between_recording_its_inputs_and_writing_run_json_still_resumes() {
        let dir = tempfile::tempdir().unwrap();
        let run = dir.path().join("r");
        let store =
            RunStore::create(&run, "r", Timestamp(1), run_store::Durability::NoSync).unwrap();
        std::fs::write(run.join(TEAM_FILE), "team").unwrap();
        std::fs::write(run.join(PLAN_FILE), "plan").unwrap();
        let audit = agent_core::SledAuditLog::open(&store).unwrap();
        let mut info: RunInfo = serde_json::from_value(serde_json::json!({
            "run_id": "r", "task_id": "t", "goal": "g", "workspace": "/w", "heartbeat_ms": 250,
            "started_at": 1, "status": "running"
        }))
        .unwrap();
        record_and_write(&audit, &run, &info).await.unwrap();
        check(&store, &run, &info).await.unwrap();

        assert!(!run.join(RUN_FILE_CHANGING).exists(), "the marker is gone once written");
        let first = std::fs::read(run.join(RUN_FILE)).unwrap();

        // A resume with a changed run.json, cut short after the record (its marker left).
        info.unsandboxed = true;
        std::fs::write(run.join(RUN_FILE_CHANGING), "").unwrap();
        let sha256 = digest_with(&run, serde_json::to_value(&info).unwrap()).unwrap();
        let recorder = AgentId::new(RECORDER);
        audit.append(&recorder, Timestamp(2), AuditEvent::RunInputs { sha256 }).await.unwrap();
        check(&store, &run, &info).await.unwrap();
        // Without the marker, the run.json of the record before is a change like any other.
        std::fs::remove_file(run.join(RUN_FILE_CHANGING)).unwrap();
        let error = check(&store, &run, &info).await.unwrap_err().to_string();
        assert!(error.contains("run.json changed after the run recorded it"), "{error}");

        // Written, it is the last record's; a run.json no record describes is refused.
        info.write(&run).unwrap();
        check(&store, &run, &info).await.unwrap();
        // Put back as it was before the resume, with no change under way: refused.
        std::fs::write(run.join(RUN_FILE), &first).unwrap();
        let error = check(&store, &run, &info).await.unwrap_err().to_string();
        assert!(error.contains("run.json changed after the run recorded it"), "{error}");
        info.write(&run).unwrap();
        info.workspace = "/elsewhere".into();
        info.write(&run).unwrap();
        let error = check(&store, &run, &info).await.unwrap_err().to_string();
        assert!(error.contains("run.json changed after the run recorded it"), "{error}");
    }

    #[test]
    fn the_digest_changes_with_each_input_but_not_with_the_run_status() {
        let dir = run_dir();
        let first = digest(dir.path()).unwrap();
        assert_eq!(first.len(), 3);
        std::fs::write(
            dir.path().join(RUN_FILE),
            r#"{"status": "failed", "finished_at": 5, "failure": "x", "workspace": "/w", "run_id": "r"}"#,
        )
        .unwrap();
        assert_eq!(digest(dir.path()).unwrap(), first, "status fields are not inputs");
        std::fs::write(dir.path().join(RUN_FILE), r#"{"run_id": "r", "workspace": "/"}"#).unwrap();
        assert_ne!(digest(dir.path()).unwrap()[RUN_FILE], first[RUN_FILE]);
        std::fs::write(dir.path().join(TEAM_FILE), "team\n[[mcp_servers]]").unwrap();
        assert_ne!(digest(dir.path()).unwrap()[TEAM_FILE], first[TEAM_FILE]);
        assert_eq!(digest(dir.path()).unwrap()[PLAN_FILE], first[PLAN_FILE]);
    }
}
