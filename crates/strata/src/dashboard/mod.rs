//! The dashboard's data (`strata serve`, `strata run --serve`): what a front end serves of
//! the runs of a data directory, live, without any HTTP of its own.
//!
//! - [`model`]: the model of one run ([`RunModel`]), folded from its audit records one at a
//!   time, each change a small [`Delta`]; [`RunModel::snapshot_json`] is the whole picture.
//! - [`watch`]: the runs watched ([`Watches`], [`RunWatch`]): each loaded from its stores and
//!   kept up to date by polling them, by following the event stream of the run this process
//!   drives ([`Live`]), or by reading a run placed on a NATS server ([`Server`]); every delta
//!   is kept as a [`Frame`] for whoever follows the run.
//! - [`Steps`]: the step counter of a run (`planning`, then `N/M steps`), which the `strata`
//!   command's live view shares.

pub mod model;
mod steps;
pub mod watch;

pub use model::{Delta, LineFn, Outline, RunModel, Seed};
pub use steps::Steps;
pub use watch::{Frame, Live, RunReader, RunWatch, Server, Watches, lock};

#[cfg(test)]
mod model_tests;
#[cfg(test)]
mod tests;
