//! Whole-team scenarios on the in-memory backends and paused tokio time.
#![allow(clippy::unwrap_used, clippy::expect_used, reason = "tests")]

mod approvals;
mod arbitration;
mod busy;
mod events;
mod goal;
mod guards;
mod heartbeats;
mod kinds;
mod liveness;
#[cfg(feature = "nats")]
mod nats;
mod ooda;
mod peers;
mod resume;
mod scenarios;
mod scripted;
mod shapes;
mod shares;
#[cfg(feature = "sim")]
mod sim;
mod spawn_grants;
mod support;
mod team;
mod timeouts;
mod wake;
