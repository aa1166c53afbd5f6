//! Integration tests of OODA agents on the Strata runtime (in-memory services, a real
//! workspace and sandbox, the scripted reasoner).

#![allow(clippy::unwrap_used, clippy::expect_used, reason = "tests")]

mod modify;
mod run;
mod support;
