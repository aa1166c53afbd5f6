//! `cargo xtask ci`: every CI check, in CI's order, stopping at the first failure.

use std::collections::BTreeSet;
use std::path::Path;
use std::process::Stdio;
use std::time::{Duration, Instant};

use anyhow::bail;

use crate::{capture, cargo, run as run_command, succeeds, tidy};

/// One CI step: a short name for the log and the summary, and what it runs.
struct Step {
    name: &'static str,
    run: fn(&Path) -> anyhow::Result<()>,
}

/// The steps, in the order CI runs them.
const STEPS: [Step; 13] = [
    Step { name: "setup", run: crate::setup::run },
    Step { name: "fmt", run: fmt },
    Step { name: "clippy", run: clippy },
    Step { name: "doc", run: doc },
    Step { name: "tests", run: tests },
    Step { name: "examples", run: examples },
    Step { name: "torture", run: torture },
    Step { name: "simulate", run: simulate },
    Step { name: "chaos", run: chaos },
    Step { name: "fuzz", run: fuzz },
    Step { name: "layering", run: layering },
    Step { name: "tidy", run: tidy::run },
    Step { name: "publish-check", run: publish_check },
];

/// The crate whose dependency tree must stay free of async runtimes and I/O crates.
const PURE_CRATE: &str = "strata-agent-state";

/// Crates the pure core must not depend on, by exact name.
const BANNED_CRATES: [&str; 6] = ["tokio", "sled", "async-trait", "futures", "mio", "async-nats"];

/// Crates the pure core must not depend on, by name prefix (`tokio-util`, `futures-core`, ...).
const BANNED_PREFIXES: [&str; 2] = ["tokio", "futures"];

/// Runs every step and prints a summary; fails naming the first step that failed.
pub(crate) fn run(root: &Path) -> anyhow::Result<()> {
    if !root.join("Cargo.lock").is_file() {
        bail!(
            "Cargo.lock is missing, and every step runs with --locked: run `cargo generate-lockfile` and commit it"
        );
    }
    let started = Instant::now();
    // Servers setup starts are stopped when this returns, passed or failed.
    let _servers = crate::setup::started();
    let mut passed: Vec<(&str, Duration)> = Vec::new();
    for (index, step) in STEPS.iter().enumerate() {
        println!("\n==> [{}/{}] {}", index + 1, STEPS.len(), step.name);
        let step_started = Instant::now();
        let result = (step.run)(root);
        let took = step_started.elapsed();
        if let Err(error) = result {
            println!("==> {} FAILED after {}", step.name, secs(took));
            println!("\nci: FAILED at step `{}` ({})", step.name, summary(&passed, started));
            bail!("ci step `{}` failed: {error:#}", step.name);
        }
        println!("==> {} ok in {}", step.name, secs(took));
        passed.push((step.name, took));
    }
    println!("\nci: all {} steps passed ({})", STEPS.len(), summary(&passed, started));
    Ok(())
}

/// The crash torture harness in its short form.
fn torture(root: &Path) -> anyhow::Result<()> {
    crate::torture::run(root, crate::torture::CI_KILLS, None, Some(&built_strata(root)?))
}

/// The `strata` the clippy step built (every feature), which the harnesses run instead of
/// building their own.
pub(crate) fn built_strata(root: &Path) -> anyhow::Result<std::path::PathBuf> {
    let strata = crate::bench::target_dir(root)?.join("debug").join("strata");
    if !strata.is_file() {
        bail!("the clippy step did not leave a strata binary at {}", strata.display());
    }
    Ok(strata)
}

/// The deterministic simulation over CI's seeds, on the `simulate` example the clippy step
/// built (every feature, so `sim` too): `cargo run` of it alone would build the workspace
/// again with other features.
fn simulate(root: &Path) -> anyhow::Result<()> {
    let simulate = crate::bench::target_dir(root)?.join("debug").join("examples").join("simulate");
    crate::simulate::run(root, crate::simulate::CI_SEEDS, 0, Some(&simulate))
}

/// The chaos harness over CI's share of the seeds (every fault kind once, less those that fail
/// today on a bug being fixed, each printed).
fn chaos(root: &Path) -> anyhow::Result<()> {
    crate::chaos::run(root, &crate::chaos::ci_seeds(), Some(&built_strata(root)?))
}

/// Every fuzz target for a short, bounded time, on a build optimised less (it builds a
/// quarter faster).
fn fuzz(root: &Path) -> anyhow::Result<()> {
    crate::fuzz::run(root, crate::fuzz::CI_SECONDS, Some(crate::fuzz::CI_OPT_LEVEL))
}

/// The engine's examples run as a library user runs them: `start` drives the hello example to
/// its end as a durable run in a fresh data directory, and `resume` finds that run finished.
/// Built as the clippy step built them (its compiler wrapper, the workspace's features), so
/// this only checks that they are fresh: without the wrapper cargo would compile every
/// workspace crate again.
fn examples(root: &Path) -> anyhow::Result<()> {
    run_command(linted_cargo(root)?.args([
        "build",
        "--locked",
        "--workspace",
        "--all-features",
        "--example",
        "start",
        "--example",
        "resume",
    ]))?;
    let bin = crate::bench::target_dir(root)?.join("debug").join("examples");
    let data = std::env::temp_dir().join(format!("strata-ci-examples-{}", std::process::id()));
    let result = (|| {
        let hello = root.join("examples/hello");
        let started = capture(
            std::process::Command::new(bin.join("start"))
                .arg(&data)
                .arg(hello.join("team.toml"))
                .arg(hello.join("plan.toml")),
        )?;
        let last = started.lines().last().unwrap_or_default();
        let Some((run_id, "succeeded")) = last.split_once(' ') else {
            bail!("the start example did not end with `RUN_ID succeeded`: {started}");
        };
        let resumed =
            capture(std::process::Command::new(bin.join("resume")).arg(&data).arg(run_id))?;
        if resumed.trim() != format!("{run_id} succeeded") {
            bail!("the resume example did not find run {run_id} succeeded: {resumed}");
        }
        println!("examples: start ran {run_id} to success; resume found it finished");
        Ok(())
    })();
    let _ = std::fs::remove_dir_all(&data);
    result
}

/// Every publishable crate packaged, not built (see [`crate::publish::CI_VERIFY`]).
fn publish_check(root: &Path) -> anyhow::Result<()> {
    crate::publish::run(root, crate::publish::CI_VERIFY)
}

fn fmt(root: &Path) -> anyhow::Result<()> {
    run_command(cargo(root).args(["fmt", "--all", "--", "--check"]))
}

/// Clippy over every target, with `-D warnings`, and at the same time the build the later steps
/// use: see [`linted_cargo`].
fn clippy(root: &Path) -> anyhow::Result<()> {
    run_command(linted_cargo(root)?.args([
        "build",
        "--workspace",
        "--all-targets",
        "--all-features",
        "--locked",
    ]))
}

/// `cargo` with clippy's driver as the workspace's compiler wrapper (`RUSTC_WORKSPACE_WRAPPER`,
/// as `cargo clippy` sets it, with `-D warnings` in `CLIPPY_ARGS`): the driver lints each
/// workspace crate and then compiles it as rustc would. So one build of every target both
/// checks the lints and gives the binaries the tests run, where `cargo clippy` followed by the
/// tests' build compiled the whole workspace twice (clippy took 580 s of a 37-minute CI run).
/// Every CI step that builds workspace code goes through this, so none rebuilds it.
fn linted_cargo(root: &Path) -> anyhow::Result<std::process::Command> {
    const DRIVER: &str = "clippy-driver";
    if !succeeds(std::process::Command::new(DRIVER).arg("--version")) {
        bail!("{DRIVER} does not run: install clippy with `rustup component add clippy`");
    }
    let mut command = cargo(root);
    command
        .env("RUSTC_WORKSPACE_WRAPPER", DRIVER)
        .env("CLIPPY_ARGS", "-D__CLIPPY_HACKERY__warnings__CLIPPY_HACKERY__");
    Ok(command)
}

fn doc(root: &Path) -> anyhow::Result<()> {
    run_command(cargo(root).env("RUSTDOCFLAGS", "-Dwarnings").args([
        "doc",
        "--workspace",
        "--all-features",
        "--no-deps",
        "--locked",
    ]))
}

/// The tests with nextest when it is installed, else with `cargo test`; then the doctests, which
/// nextest does not run.
fn tests(root: &Path) -> anyhow::Result<()> {
    let llama_server = crate::pyenv::llama_server_python()?;
    let linted = linted_cargo(root)?;
    let cargo = |root: &Path| {
        let mut command = cargo(root);
        command.envs(linted.get_envs().filter_map(|(k, v)| Some((k, v?))));
        command.env(crate::pyenv::LLAMA_SERVER_PYTHON_VAR, &llama_server);
        command
    };
    let nextest = succeeds(cargo(root).args(["nextest", "--version"]));
    if !nextest {
        println!("cargo-nextest is not installed; running the tests with `cargo test`");
    }
    let runner: &[&str] = if nextest { &["nextest", "run"] } else { &["test"] };
    let all = ["--workspace", "--all-features", "--locked"];
    // Built by the clippy step already (this only checks that it is fresh); then fetch the
    // embedded model (once; later runs only verify it) with that `strata`.
    run_command(cargo(root).args(runner).args(all).arg("--no-run"))?;
    let strata = crate::bench::target_dir(root)?.join("debug").join("strata");
    run_command(std::process::Command::new(&strata).args(["model", "fetch"]).stdin(Stdio::null()))?;
    let mut tests = cargo(root);
    tests.args(runner).args(all);
    if nextest {
        tests.arg("--no-tests=warn").arg(format!("--test-threads={}", test_threads()));
    }
    run_command(&mut tests)?;
    run_command(cargo(root).args(["test", "--workspace", "--all-features", "--doc", "--locked"]))
}

/// How many tests nextest runs at once in CI: two per core. Most tests wait more than they
/// compute (heartbeats, NATS round trips, child processes), so one per core left the cores
/// about 40 % idle; measured on 2 cores, 4 at once ran every test in 364 s against 428 s. The
/// tests that run a real model still run alone (`.config/nextest.toml`).
fn test_threads() -> usize {
    std::thread::available_parallelism().map_or(1, std::num::NonZeroUsize::get) * 2
}

/// Architecture invariant: the pure core depends on no async runtime and no I/O crate.
fn layering(root: &Path) -> anyhow::Result<()> {
    let tree = capture(cargo(root).args([
        "tree",
        "--package",
        PURE_CRATE,
        "--edges",
        "normal,build",
        "--prefix",
        "none",
        "--all-features",
        "--locked",
    ]))?;
    let crates: BTreeSet<&str> =
        tree.lines().filter_map(|line| line.split_whitespace().next()).collect();
    let offending: Vec<&str> = crates.iter().copied().filter(|name| is_banned(name)).collect();
    if !offending.is_empty() {
        bail!(
            "{PURE_CRATE} must do no I/O and have no async code, but depends on {} (see `cargo tree -p {PURE_CRATE} -i {}`)",
            offending.join(", "),
            offending[0],
        );
    }
    println!(
        "{PURE_CRATE} depends on {} crates, none of them async or I/O",
        crates.len().saturating_sub(1)
    );
    Ok(())
}

/// Whether the pure core may not depend on the crate called `name`.
pub(crate) fn is_banned(name: &str) -> bool {
    BANNED_CRATES.contains(&name) || BANNED_PREFIXES.iter().any(|prefix| name.starts_with(prefix))
}

/// `fmt 0.4s, clippy 20.1s, total 20.5s`.
fn summary(passed: &[(&str, Duration)], started: Instant) -> String {
    let mut parts: Vec<String> =
        passed.iter().map(|(name, took)| format!("{name} {}", secs(*took))).collect();
    parts.push(format!("total {}", secs(started.elapsed())));
    parts.join(", ")
}

fn secs(duration: Duration) -> String {
    format!("{:.1}s", duration.as_secs_f64())
}
