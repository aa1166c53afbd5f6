//! Integration tests of the team and plan files with the crates that produce them.
#![allow(clippy::unwrap_used, clippy::expect_used, reason = "tests")]

mod planner_output;
