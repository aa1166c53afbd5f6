//! The dashboard (`strata serve`, `strata run --serve`): what a front end serves of the runs
//! of a data directory, live, without any HTTP of its own.
//!
//! - [`model`]: the model of one run ([`RunModel`]), folded from its audit records one at a
//!   time, each change a small [`Delta`]; [`RunModel::snapshot_json`] is the whole picture.
//! - [`watch`]: the runs watched ([`Watches`], [`RunWatch`]): each loaded from its stores and
//!   kept up to date by polling them, by following the event stream of the run this process
//!   drives ([`Live`]), or by reading a run placed on a NATS server ([`Server`]); every delta
//!   is kept as a [`Frame`] for whoever follows the run ([`RunWatch::follow`]).
//! - [`api`]: what the dashboard's API answers ([`Dashboard`]): the runs as rows, a run's
//!   snapshot, model calls and timeline, and the requests that act on a run (approve, veto,
//!   cancel, resume), each an [`Answer`] or an [`ApiError`] a front end maps to its protocol.
//! - [`access`]: who may use it ([`Access`]): the token, the `Host` check, the cookie of a
//!   first load, as pure functions of what a request says.
//! - [`Steps`]: the step counter of a run (`planning`, then `N/M steps`), which the `strata`
//!   command's live view shares.
//!
//! ```no_run
//! # async fn serve() -> strata::Result<()> {
//! use std::sync::Arc;
//! use strata::dashboard::{Dashboard, EventLines, Watches};
//!
//! let dashboard =
//!     Arc::new(Dashboard::new(".strata/runs".into(), None, Watches::new(Arc::new(EventLines))));
//! // `GET /api/runs`: a JSON row per run.
//! let rows = dashboard.runs().await.map_err(|e| strata::Error::failed(e.message))?;
//! for row in rows {
//!     // `GET /api/runs/{id}`: the run's snapshot, then its deltas as they come.
//!     let id = row["id"].as_str().unwrap_or_default();
//!     let _snapshot = dashboard.snapshot(id).await;
//!     let mut deltas = dashboard.watched(id).await.map(|w| w.follow(None));
//!     if let Ok(follower) = &mut deltas {
//!         let _next = follower.next().await;
//!     }
//! }
//! # Ok(()) }
//! ```

pub mod access;
pub mod api;
mod follow;
pub mod model;
mod steps;
pub mod watch;

pub use access::Access;
pub use api::{Answer, ApiError, ApiErrorKind, Dashboard};
pub use follow::{Follower, RESET, Sent};
pub use model::{Delta, LineFn, Outline, RunModel, Seed};
pub use steps::{Steps, team_power};
pub use watch::{EventLines, Frame, Live, RunReader, RunWatch, Server, Watches, lock};

#[cfg(test)]
mod model_tests;
#[cfg(test)]
mod tests;
