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
    let mut sha256 = BTreeMap::new();
    for name in [TEAM_FILE, PLAN_FILE] {
        let path = dir.join(name);
        let bytes =
            std::fs::read(&path).with_context(|| format!("cannot read {}", path.display()))?;
        sha256.insert(name.to_owned(), sha256_hex(&bytes));
    }
    let path = dir.join(RUN_FILE);
    let bytes = std::fs::read(&path).with_context(|| format!("cannot read {}", path.display()))?;
    let mut info: serde_json::Value =
        serde_json::from_slice(&bytes).with_context(|| format!("{} is damaged", path.display()))?;
    if let Some(fields) = info.as_object_mut() {
        for field in CHANGING {
            fields.remove(field);
        }
    }
    // Keys are sorted (serde_json's map is ordered by key): the same fields, the same bytes.
    sha256.insert(RUN_FILE.to_owned(), sha256_hex(&serde_json::to_vec(&info)?));
    Ok(sha256)
}

/// Appends the hashes of `dir`'s stored inputs to `audit`.
pub async fn record(audit: &dyn AuditLog, dir: &Path) -> crate::Result<()> {
    let sha256 = digest(dir)?;
    audit
        .append(&AgentId::new(RECORDER), Timestamp(now_ms()), AuditEvent::RunInputs { sha256 })
        .await
        .context("cannot record the run's inputs in its audit log")?;
    Ok(())
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
    let recorded = records.into_iter().rev().find_map(|r| match r.event {
        AuditEvent::RunInputs { sha256 } => Some(sha256),
        _ => None,
    });
    let Some(recorded) = recorded else {
        return Err(Error::bad_input(format!(
            "{}: the run's audit log holds no record of its stored inputs (a run started by an \
             older Strata), so nothing shows that its {TEAM_FILE}, {PLAN_FILE} and {RUN_FILE} \
             are the ones it started with; nothing was started. Start it again with `strata run`",
            dir.display()
        )));
    };
    let now = digest(dir).map_err(Error::bad_input_from)?;
    let changed: Vec<String> = [TEAM_FILE, PLAN_FILE, RUN_FILE]
        .into_iter()
        .filter(|name| recorded.get(*name) != now.get(*name))
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
