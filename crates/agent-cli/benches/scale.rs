//! Teams of 1 000, 10 000 and 100 000 agents through `strata`, with durable storage: for each
//! size, `strata init --scale N` writes the team and its plan, `strata run` runs it, and this
//! bench reports the wall time, the peak resident set (VmHWM of the process, sampled every
//! 10 ms), the size of the run directory, and the messages the agents handled (sent and
//! processed, from `strata inspect RUN metrics`) per second of wall time, so the cost's growth
//! with the team's size is visible.
//!
//! Under `cargo bench` each size is written to `<target>/strata-bench/scale_N.json`, where
//! `cargo xtask bench` picks it up. `--quick` (as `cargo xtask bench --quick` passes it) stops
//! at 10 000 agents.
#![allow(missing_docs)]
#![allow(clippy::unwrap_used, clippy::expect_used, reason = "benchmarks")]
#![allow(clippy::print_stdout, reason = "the figures are printed")]

mod support;

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};
use support::target_dir;

const STRATA: &str = env!("CARGO_BIN_EXE_strata");

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let bench_mode = args.iter().any(|a| a == "--bench");
    let quick = args.iter().any(|a| a == "--quick");
    let sizes: &[usize] = if quick { &[1_000, 10_000] } else { &[1_000, 10_000, 100_000] };
    for &agents in sizes {
        let scratch = tempfile::tempdir().unwrap();
        let figure = measure(scratch.path(), agents);
        println!("cli/scale/{agents}: {figure}");
        if bench_mode {
            let dir = target_dir().join("strata-bench");
            std::fs::create_dir_all(&dir).unwrap();
            std::fs::write(dir.join(format!("scale_{agents}.json")), format!("{figure}\n"))
                .unwrap();
        }
    }
}

fn measure(scratch: &Path, agents: usize) -> serde_json::Value {
    let team = scratch.join("team");
    let init = strata(scratch).args(["init", "team", "--scale", &agents.to_string()]).status();
    assert!(init.unwrap().success(), "strata init --scale {agents} failed");
    let started = Instant::now();
    let mut child = strata(scratch)
        .arg("run")
        .arg(team.join("plan.toml"))
        .arg("--team")
        .arg(team.join("team.toml"))
        .args(["--data", "data", "--workspace", "workspace", "--run-id", "scale", "--quiet"])
        .stdout(Stdio::null())
        .spawn()
        .unwrap();
    let mut peak_kib = 0;
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        peak_kib = peak_kib.max(high_water_kib(child.id()).unwrap_or(0));
        std::thread::sleep(Duration::from_millis(10));
    };
    let wall = started.elapsed().as_secs_f64();
    assert!(status.success(), "strata run of {agents} agents failed: {status}");
    let metrics = strata(scratch)
        .args(["inspect", "scale", "metrics", "--json", "--data", "data"])
        .stderr(Stdio::null())
        .output()
        .unwrap();
    let metrics: serde_json::Value = serde_json::from_slice(&metrics.stdout).unwrap();
    let messages: u64 = metrics
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|a| a["metrics"]["messages_processed"].as_u64())
        .sum();
    serde_json::json!({
        "id": format!("cli/scale/{agents}"),
        "wall_s": (wall * 100.0).round() / 100.0,
        "peak_rss_bytes": peak_kib * 1024,
        "store_bytes": size_of(&scratch.join("data").join("scale")),
        "messages": messages,
        "messages_per_second": (messages as f64 / wall).round(),
        "agents": agents,
    })
}

fn strata(dir: &Path) -> Command {
    let mut command = Command::new(STRATA);
    command.current_dir(dir).stdin(Stdio::null());
    command
}

/// The peak resident set of process `pid` so far (`VmHWM`), in KiB.
fn high_water_kib(pid: u32) -> Option<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    status
        .lines()
        .find_map(|line| line.strip_prefix("VmHWM:"))
        .and_then(|rest| rest.trim().strip_suffix("kB"))
        .and_then(|kib| kib.trim().parse().ok())
}

/// The total size of the files under `dir`.
fn size_of(dir: &Path) -> u64 {
    let mut total = 0;
    let mut todo = vec![dir.to_path_buf()];
    while let Some(path) = todo.pop() {
        let Ok(meta) = std::fs::symlink_metadata(&path) else { continue };
        if meta.is_dir() {
            if let Ok(entries) = std::fs::read_dir(&path) {
                todo.extend(entries.flatten().map(|e| e.path()));
            }
        } else {
            total += meta.len();
        }
    }
    total
}
