//! How the dashboard reads a run ([`strata::dashboard::RunReader`]): its event lines as the
//! live view prints them, its database and its anchored audit log as `strata inspect` and
//! `strata verify` read them.

use std::path::Path;
use std::sync::Arc;

use async_trait::async_trait;
use run_store::RunStore;
use strata::Stores;
use strata::dashboard::watch::AnchoredLog;
use strata::dashboard::{LineFn, RunReader};

use crate::Failure;

/// The `strata` command's reader of runs.
pub(crate) struct CliReader;

/// The reader the dashboard's watches are given.
pub(crate) fn reader() -> Arc<dyn RunReader> {
    Arc::new(CliReader)
}

#[async_trait]
impl RunReader for CliReader {
    fn event_line(&self) -> LineFn {
        crate::view::event_line
    }

    async fn read_copy(&self, dir: &Path) -> strata::Result<RunStore> {
        crate::operator::read_copy(dir).await.map_err(to_strata)
    }

    async fn anchored_log(
        &self,
        dir: &Path,
        store: Option<&RunStore>,
        stores: &Stores,
        live: bool,
    ) -> strata::Result<AnchoredLog> {
        let (records, anchored) = crate::inspect::anchored_log(dir, store, stores, live)
            .await
            .map_err(strata::Error::failed_from)?;
        Ok((records, anchored.map_err(strata::Error::failed_from)))
    }
}

/// A failure of the command as an engine error of the same kind.
fn to_strata(failure: Failure) -> strata::Error {
    match failure {
        Failure::BadInput(e) => strata::Error::bad_input_from(e),
        Failure::Other(e) => strata::Error::failed_from(e),
    }
}
