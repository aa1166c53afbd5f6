//! Team capacity: N concurrent tasks in one running team, durable, in one process.
//!
//! The hello example (`examples/hello/plan.toml` with `examples/hello/team.toml`: three powers,
//! two leads, four executors; the plan's four steps are scripted, so the rule-based reasoners
//! only review and sign) is started as a durable run ([`strata::Run::start`]: a run directory
//! with its sled database, commits synced, commands sandboxed as `strata run` runs them), and
//! N - 1 more copies of its task (ids `hello-2` to `hello-N`) are submitted into the same
//! running team at once ([`agent_pool::Team::submit`]). Figures, for N in 1, 10, 100 and 1 000:
//!
//! - `tasks_per_s`: N over the time from the run's start (its first task submitted) to the
//!   last outcome;
//! - `p50_ms`, `p99_ms`: each task's latency, from its submission (the run's start for the
//!   first) to its outcome as `Team::wait` sees it;
//! - `peak_rss_bytes`: the process's peak resident set (`VmHWM`), each N in a fresh process
//!   (this binary again, `--tasks N`);
//! - `store_bytes_per_task`: the growth of the run directory (its database, logs and
//!   workspace) between the run's start and the end of the N tasks, divided by N.
//!
//! Every task must succeed: a failed one fails the bench. Written as one JSON object per size
//! to `<target>/capacity/figures/strata-N.json` (id `strata/capacity/N`), which `cargo xtask
//! bench --capacity` reads, with AutoGen's side of the same workload
//! (`xtask/peers/autogen_capacity.py`).
//!
//! It runs in full only when asked: `STRATA_CAPACITY=full` (or `quick`: 1 and 10 tasks) with
//! `cargo bench -p strata-engine --bench capacity`; a plain `cargo bench` (which `cargo xtask
//! bench` runs) prints a note and measures nothing. Run without `--bench` (`cargo test
//! --benches`), it runs one task as a smoke test and writes nothing.
#![allow(missing_docs)]
#![allow(clippy::unwrap_used, clippy::expect_used, reason = "benchmarks")]
#![allow(clippy::print_stdout, clippy::print_stderr, reason = "the figures are printed")]

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use agent_state::{Task, TaskOutcome};
use serde_json::{Value, json};
use strata::run::{Prepared, Run, StartOptions};

/// The sizes measured (`STRATA_CAPACITY=full`); `quick` keeps the first two.
const SIZES: [usize; 4] = [1, 10, 100, 1_000];

/// The longest one size may take.
const PATIENCE: Duration = Duration::from_secs(20 * 60);

fn main() {
    // The sandbox's launcher is this executable, as it is `strata` for `strata run`.
    strata::run_sandbox_launcher_if_requested();
    let args: Vec<String> = std::env::args().skip(1).collect();
    if let Some(at) = args.iter().position(|arg| arg == "--tasks") {
        // A child: one size, its figure on stdout.
        let tasks = args.get(at + 1).and_then(|n| n.parse().ok()).expect("--tasks N");
        println!("{}", measure(tasks));
        return;
    }
    if !args.iter().any(|arg| arg == "--bench") {
        let figure = measure(1);
        println!("capacity (smoke, nothing written): {figure}");
        return;
    }
    let sizes = match std::env::var("STRATA_CAPACITY").as_deref() {
        Ok("full" | "1") => &SIZES[..],
        Ok("quick") => &SIZES[..2],
        Ok(other) => {
            eprintln!("capacity: STRATA_CAPACITY is `{other}`; expected `full` or `quick`");
            std::process::exit(2);
        }
        Err(_) => {
            println!(
                "capacity: the team capacity bench runs only when asked: `cargo xtask bench \
                 --capacity` (or STRATA_CAPACITY=full cargo bench -p strata-engine --bench \
                 capacity)"
            );
            return;
        }
    };
    let dir = target_dir().join("capacity").join("figures");
    std::fs::create_dir_all(&dir).unwrap();
    for &tasks in sizes {
        let figure = child(tasks);
        println!("strata/capacity/{tasks}: {figure}");
        std::fs::write(dir.join(format!("strata-{tasks}.json")), format!("{figure}\n")).unwrap();
    }
    println!("capacity: written to {}", dir.display());
}

/// One size in a fresh process (this binary, `--tasks N`): its peak memory is its own.
fn child(tasks: usize) -> Value {
    let output = std::process::Command::new(std::env::current_exe().unwrap())
        .args(["--tasks", &tasks.to_string()])
        .stderr(std::process::Stdio::inherit())
        .output()
        .unwrap();
    assert!(output.status.success(), "capacity --tasks {tasks} failed: {}", output.status);
    let stdout = String::from_utf8(output.stdout).unwrap();
    serde_json::from_str(stdout.lines().last().expect("a figure")).unwrap()
}

/// Runs `tasks` concurrent tasks of the hello example in one durable run; the figure.
fn measure(tasks: usize) -> Value {
    let runtime = tokio::runtime::Builder::new_multi_thread().enable_all().build().unwrap();
    let data = tempfile::tempdir().unwrap();
    let (elapsed, mut latencies, store) = runtime.block_on(async {
        tokio::time::timeout(PATIENCE, run(data.path(), tasks)).await.expect("every task ends")
    });
    latencies.sort_by(f64::total_cmp);
    let round = |value: f64| (value * 100.0).round() / 100.0;
    json!({
        "id": format!("strata/capacity/{tasks}"),
        "tasks": tasks,
        "tasks_per_s": round(tasks as f64 / elapsed.as_secs_f64()),
        "p50_ms": round(percentile(&latencies, 0.50)),
        "p99_ms": round(percentile(&latencies, 0.99)),
        "peak_rss_bytes": peak_resident_bytes(),
        "store_bytes_per_task": round(store as f64 / tasks as f64),
    })
}

/// The run: the time to the last outcome, each task's latency in ms, the store's growth.
async fn run(data: &Path, tasks: usize) -> (Duration, Vec<f64>, u64) {
    let hello = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples/hello");
    let options = StartOptions {
        run_id: Some("capacity".parse().expect("a valid run id")),
        ..StartOptions::new(data)
    };
    let prepared =
        Prepared::from_files(Some(&hello.join("team.toml")), &hello.join("plan.toml"), &options)
            .await
            .expect("the hello example reads");
    let task = prepared.task.clone();
    let started = Instant::now();
    let run = Run::start(prepared, &options).await.expect("the run starts");
    let dir = run.dir().to_path_buf();
    let store_before = tree_bytes(&dir);
    let team = run.team().clone();
    let mut waits = tokio::task::JoinSet::new();
    for n in 1..=tasks {
        let id = if n == 1 { task.id.clone() } else { format!("{}-{n}", task.id) };
        let submitted = if n == 1 {
            started
        } else {
            let copy = Task { id: id.clone(), ..task.clone() };
            let at = Instant::now();
            team.submit(copy).await.expect("the task is taken");
            at
        };
        let team = team.clone();
        waits.spawn(async move {
            let outcome = team.wait(&id).await;
            (outcome, submitted.elapsed())
        });
    }
    let mut latencies = Vec::with_capacity(tasks);
    while let Some(joined) = waits.join_next().await {
        let (outcome, latency) = joined.unwrap();
        assert!(matches!(outcome, TaskOutcome::Succeeded { .. }), "{outcome:?}");
        latencies.push(latency.as_secs_f64() * 1e3);
    }
    let elapsed = started.elapsed();
    let store = tree_bytes(&dir).saturating_sub(store_before);
    let ended = run.drive(std::future::pending()).await.expect("the run ends");
    assert!(ended.succeeded(), "{:?}", ended.end);
    (elapsed, latencies, store)
}

/// The bytes of every file under `dir`.
fn tree_bytes(dir: &Path) -> u64 {
    let Ok(entries) = std::fs::read_dir(dir) else { return 0 };
    entries
        .flatten()
        .map(|entry| match entry.metadata() {
            Ok(meta) if meta.is_dir() => tree_bytes(&entry.path()),
            Ok(meta) => meta.len(),
            Err(_) => 0,
        })
        .sum()
}

/// The process's peak resident set, from `VmHWM` in `/proc/self/status` (Linux).
fn peak_resident_bytes() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").expect("/proc/self/status");
    let kib: u64 = status
        .lines()
        .find_map(|line| line.strip_prefix("VmHWM:"))
        .and_then(|rest| rest.trim().strip_suffix("kB"))
        .and_then(|kib| kib.trim().parse().ok())
        .expect("a VmHWM line in kB");
    kib * 1024
}

fn percentile(sorted: &[f64], p: f64) -> f64 {
    let index = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[index.min(sorted.len() - 1)]
}

/// Cargo's target directory: `CARGO_TARGET_DIR` when set (relative to the workspace root when
/// relative), else `target/` in the workspace root.
fn target_dir() -> PathBuf {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    match std::env::var_os("CARGO_TARGET_DIR") {
        Some(dir) => root.join(dir),
        None => root.join("target"),
    }
}
