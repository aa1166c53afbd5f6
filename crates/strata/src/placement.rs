//! Runs placed on workers (`strata worker --nats URL`, `agent_pool::placement`): what a
//! placed run carries for the workers to build its team from ([`PlacedSpec`]), and whether
//! live workers of this version are there to take a new run ([`live_registry`]).

use std::path::PathBuf;

use agent_pool::placement::{Registry, VERSION};
use nats_store::NatsStore;
use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};
use crate::stores::FLAG;

/// What a placed run carries for the workers to build its team from.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct PlacedSpec {
    /// The team file's text.
    pub team: String,
    /// `--reasoner`, if given.
    pub reasoner: Option<String>,
    /// `--base-url`, `--model` and `$OPENAI_BASE_URL` as the run started with them.
    #[serde(flatten)]
    pub flags: crate::run_dir::ModelFlags,
    /// `--unsandboxed`: the workers run `shell` commands without the sandbox too.
    pub unsandboxed: bool,
    /// The run's workspace where it was started: a worker without `--workspace` works there
    /// (made if missing), so on one machine every agent shares it.
    #[serde(default)]
    pub workspace: Option<PathBuf>,
    /// The run's goal, for a dashboard that lists the placed runs (`strata serve --nats`).
    #[serde(default)]
    pub goal: String,
    /// The run's task id, for that dashboard.
    #[serde(default)]
    pub task_id: String,
    /// When the run started, in milliseconds since the epoch, for that dashboard.
    #[serde(default)]
    pub started_at: u64,
    /// The plan file's text, for that dashboard (the run's steps).
    #[serde(default)]
    pub plan: Option<String>,
}

/// The registry on the server of `server`, if workers of this version are live there; `None`
/// if no worker is. Live workers of other versions only: bad input naming `--nats`, nothing
/// written (the run could not be placed, and would wait forever).
pub async fn live_registry(server: &NatsStore) -> Result<Option<Registry>> {
    let url = server.url();
    let registry = Registry::open(server)
        .await
        .map_err(|e| Error::bad_input(format!("{FLAG} {url}: the registry of workers: {e}")))?;
    let workers = registry.workers().await.map_err(|e| {
        Error::bad_input(format!("{FLAG} {url}: cannot list the live workers: {e}"))
    })?;
    if workers.is_empty() {
        return Ok(None);
    }
    if workers.iter().any(|w| w.version == VERSION) {
        return Ok(Some(registry));
    }
    let others: Vec<String> =
        workers.iter().map(|w| format!("`{}` (Strata {})", w.id, w.version)).collect();
    Err(Error::bad_input(format!(
        "{FLAG} {url}: the live workers there run another Strata version: {}; this is Strata {VERSION}. Start workers of this version (`strata worker {FLAG} {url}`), or stop those to run here",
        others.join(", ")
    )))
}
