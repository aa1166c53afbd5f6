//! The example plan end to end through `strata run`, at the default 4 s heartbeat, with durable
//! storage (synced): the wall time from launch to exit of the real binary. With wake on work a
//! task moves at the speed of its work; before, every hop waited for the next heartbeat (about
//! 44 s for this plan).
//!
//! `main` runs the example [`RUNS`] times, prints the median and the slowest and, under `cargo
//! bench`, writes them to `<target>/strata-bench/hello_run.json`, where `cargo xtask bench`
//! picks them up.
#![allow(missing_docs)]
#![allow(clippy::unwrap_used, clippy::expect_used, reason = "benchmarks")]
#![allow(clippy::print_stdout, reason = "the figures are printed")]

mod support;

use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::Instant;
use support::target_dir;

/// Runs measured.
const RUNS: usize = 7;
/// The figure's id in the `cargo xtask bench` table.
const ID: &str = "cli/hello_plan_default_heartbeat";

fn main() {
    let bench_mode = std::env::args().any(|a| a == "--bench");
    let examples = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../examples/hello");
    let scratch = tempfile::tempdir().unwrap();
    let mut millis = Vec::with_capacity(RUNS);
    for run in 0..RUNS {
        let started = Instant::now();
        let status = Command::new(env!("CARGO_BIN_EXE_strata"))
            .arg("run")
            .arg(examples.join("plan.toml"))
            .arg("--team")
            .arg(examples.join("team.toml"))
            .arg("--data")
            .arg(scratch.path().join("data"))
            .arg("--workspace")
            .arg(scratch.path().join(format!("workspace-{run}")))
            .arg("--quiet")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .unwrap();
        assert!(status.success(), "strata run failed: {status}");
        millis.push(started.elapsed().as_secs_f64() * 1000.0);
    }
    millis.sort_by(f64::total_cmp);
    let median = millis[RUNS / 2];
    let slowest = millis[RUNS - 1];
    println!("{ID}: median {median:.0} ms, slowest {slowest:.0} ms over {RUNS} runs");
    if bench_mode {
        let figure = serde_json::json!({
            "id": ID,
            "median_ms": median.round(),
            "max_ms": slowest.round(),
            "runs": RUNS,
        });
        let dir = target_dir().join("strata-bench");
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join("hello_run.json"), format!("{figure}\n")).unwrap();
    }
}
