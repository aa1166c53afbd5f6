//! How the dashboard shows a run's records ([`strata::dashboard::RunReader`]): as the live
//! view prints them.

use std::sync::Arc;

use strata::dashboard::{LineFn, RunReader};

/// The `strata` command's reader of runs.
pub(crate) struct CliReader;

/// The reader the dashboard's watches are given.
pub(crate) fn reader() -> Arc<dyn RunReader> {
    Arc::new(CliReader)
}

impl RunReader for CliReader {
    fn event_line(&self) -> LineFn {
        crate::view::event_line
    }
}
