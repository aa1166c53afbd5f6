//! Strata's task runner: `cargo xtask ci | coverage | bench [--peers | --capacity | --models | --eval] [--quick] | fuzz | torture |
//! simulate | chaos | publish-check | long-fns | help`.
//!
//! `cargo xtask ci` is the single entry point that does exactly what CI does: its setup step
//! installs and starts what the checks need (`.ci/run` only calls it). Every subcommand runs from the workspace root, whatever the
//! current directory.

#![allow(clippy::print_stdout, clippy::print_stderr, reason = "xtask is a command-line tool")]

mod bench;
mod capacity;
mod chaos;
mod ci;
mod coverage;
mod eval;
mod fuzz;
mod long_fns;
mod models;
mod peers;
mod publish;
mod pyenv;
mod setup;
mod simulate;
mod tidy;
mod todo_list;
mod torture;

#[cfg(test)]
mod tests;

use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode};

use anyhow::{Context, bail};

const USAGE: &str = "\
usage: cargo xtask <command>

commands:
  ci              run every CI check, in CI's order, stopping at the first failure:
                  setup, fmt, clippy, doc, tests (nextest or cargo test, then doctests),
                  examples (the engine's start and resume examples run),
                  simulate (300 seeds), chaos (10 seeds),
                  layering (strata-agent-state stays free of async and I/O crates), tidy,
                  publish-check
  tidy            only ci's tidy step: every file opens with `//!` (Rust), no printing in
                  libraries, no machine paths, ARCHITECTURE.md under 30 KiB with every
                  path of its Where-is-it index existing, every link to a section of
                  docs/concepts.md naming one that exists
  setup           only ci's first step: install what the checks need (system packages
                  with apt-get as root, rustfmt, clippy, cargo-nextest, cargo-fuzz, the
                  Python peers, the embedded model's server) and start NATS if none
                  answers (left running; `ci` stops the one it started)
  coverage        line coverage of the workspace tests with cargo-llvm-cov
  bench [--quick] run the criterion benches and print one table of the results
                  (--quick is passed to criterion: fewer samples, rougher numbers)
  bench --models [--runs N] [--backend embedded|server] [--task hello|todo|wordcount]
                  teams driven by the embedded model and by llama-cpp-python's server on
                  the README's settings: hello, a one-file goal and examples/goal, 10 runs
                  each; successes, median and p90 wall time, model calls, tokens, plan
                  repairs and each failure's reason, written to BENCHMARKS.md (full run only)
  bench --eval [--repeat N] [--task NAME]... [--shape layered|crew|single]... [--record]
                  `strata eval examples/eval` with its three team shapes on the embedded
                  model (`--reasoner local`; `strata model fetch` first), each task N
                  times (default 1); prints a line per attempt, then the table and why
                  each failed attempt failed; --task and --shape run a part only;
                  --record writes the table into BENCHMARKS.md (whole suite only)
  bench --peers [--quick]
                  compare Strata with ractor and AutoGen (autogen-core, installed from
                  PyPI into target/peers/venv) on the same workloads, print the table
                  with ratios, write the plots in docs/bench/ and BENCHMARKS.md
                  (--quick: the smaller sizes only, printed, nothing written)
  bench --capacity [--quick]
                  team capacity: 1, 10, 100 and 1 000 concurrent tasks of the hello
                  example in one durable run (tasks/s, p50/p99 latency, peak RSS, store
                  per task), against autogen-core agents exchanging the same messages
                  (from PyPI into target/peers/venv); prints the table with the ratio,
                  writes docs/bench/capacity-throughput.svg and BENCHMARKS.md
                  (--quick: 1 and 10 tasks, printed, nothing written)
  fuzz [--seconds N]
                  build the fuzz targets (fuzz/, needs cargo-fuzz) and run each for N
                  seconds from its seeds (default 60; CI runs 10)
  torture [--kills N] [--seed S]
                  crash torture: run strata on a plan, SIGKILL it at random moments,
                  resume, repeat (default 500 kills; CI runs 50), then verify the result
  simulate [--seeds N] [--start S]
                  deterministic simulation of whole teams (agent-pool feature `sim`):
                  play the scenarios of seeds S..S+N (default 1000 from 0; CI runs 300)
                  on simulated time with crashes, message delays and failing tools,
                  check the invariants after every step, print each failing seed and
                  how to replay it
  chaos [--seeds N] [--start S]
                  seeded runs of generated teams on the real strata binary with injected
                  faults (tool errors, model timeouts, 429 and 500 answers, garbage and
                  truncated streams, kill -9 and resume, NATS server restarts, disk full;
                  agent panics are reported as not injectable), seeds S..S+N (default 50
                  from 0, every kind 5 times; CI runs seeds 0..10 less the kinds that
                  fail today on a bug being fixed, each named): each run ends in success or a
                  typed reason within a bound of heartbeats, no side effect twice, no
                  message unacknowledged, `strata verify` passes; prints each failing seed
                  with `cargo xtask chaos --seeds 1 --start S` and the counts
  publish-check [--verify]
                  package every publishable workspace member (from cargo metadata) as
                  `cargo publish` would, in dependency order, uploading nothing: path
                  dependencies need versions, no crate needs a file outside its directory
                  (--verify also builds each package on its own, as `cargo publish` does:
                  many minutes per crate, so CI does not)
  long-fns        list every function over 80 lines or with more than 6 parameters,
                  longest first (tidy fails on any)
  help            print this text";

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let root = project_root();
    let result = match args.as_slice() {
        [] | ["help" | "--help" | "-h"] => {
            println!("{USAGE}");
            Ok(())
        }
        ["ci"] => ci::run(&root),
        ["setup"] => setup::run(&root),
        ["tidy"] => tidy::run(&root),
        ["coverage"] => coverage::run(&root),
        ["bench"] => bench::run(&root, false),
        ["bench", "--quick"] => bench::run(&root, true),
        ["bench", "--models", rest @ ..] => {
            models::args(rest).and_then(|options| models::run(&root, &options))
        }
        ["bench", "--eval", rest @ ..] => {
            eval::args(rest).and_then(|options| eval::run(&root, &options))
        }
        ["bench", "--peers"] => peers::run(&root, false),
        ["bench", "--peers", "--quick"] | ["bench", "--quick", "--peers"] => {
            peers::run(&root, true)
        }
        ["bench", "--capacity"] => capacity::run(&root, false),
        ["bench", "--capacity", "--quick"] | ["bench", "--quick", "--capacity"] => {
            capacity::run(&root, true)
        }
        ["long-fns"] => long_fns::run(&root),
        ["fuzz"] => fuzz::run(&root, 60, None),
        ["fuzz", "--seconds", n] => match n.parse() {
            Ok(seconds) => fuzz::run(&root, seconds, None),
            Err(_) => Err(anyhow::anyhow!("--seconds takes a number, not `{n}`")),
        },
        ["torture", rest @ ..] => {
            torture_args(rest).and_then(|(kills, seed)| torture::run(&root, kills, seed, None))
        }
        ["chaos", rest @ ..] => chaos::args(rest).and_then(|seeds| chaos::run(&root, &seeds, None)),
        ["simulate", rest @ ..] => {
            simulate::args(rest).and_then(|(seeds, start)| simulate::run(&root, seeds, start, None))
        }
        ["publish-check"] => publish::run(&root, false),
        ["publish-check", "--verify"] => publish::run(&root, true),
        _ => Err(anyhow::anyhow!("unknown arguments `{}`\n\n{USAGE}", args.join(" "))),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            eprintln!("error: {error:#}");
            ExitCode::FAILURE
        }
    }
}

/// Parses `[--kills N] [--seed S]`.
fn torture_args(args: &[&str]) -> anyhow::Result<(u32, Option<u64>)> {
    let (mut kills, mut seed) = (torture::FULL_KILLS, None);
    let mut it = args.iter();
    while let Some(arg) = it.next() {
        let value = it.next().with_context(|| format!("{arg} needs a value"))?;
        match *arg {
            "--kills" => {
                kills = value
                    .parse()
                    .with_context(|| format!("--kills takes a number, not `{value}`"))?
            }
            "--seed" => {
                seed = Some(
                    value
                        .parse()
                        .with_context(|| format!("--seed takes a number, not `{value}`"))?,
                )
            }
            other => bail!("unknown option `{other}`\n\n{USAGE}"),
        }
    }
    Ok((kills, seed))
}

/// The workspace root: the parent of this crate's manifest directory.
///
/// `cargo run` tells the running binary where the manifest is; that wins over the directory
/// compiled in, which is stale when a checkout moves (cargo does not rebuild for a moved
/// workspace).
fn project_root() -> PathBuf {
    let manifest_dir = std::env::var_os("CARGO_MANIFEST_DIR")
        .map_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")), PathBuf::from);
    manifest_dir.parent().map_or_else(|| manifest_dir.clone(), Path::to_path_buf)
}

/// A `cargo` command that runs in the workspace root.
///
/// When ccache is installed, llama.cpp's C and C++ compiles (CMake, in `llama-cpp-sys-2`'s
/// build script) go through it ([`CMAKE_LAUNCHERS`]), so a fresh checkout on a machine that
/// built llama.cpp before takes its objects from the cache instead of compiling them again
/// (most of the workspace's build time on two cores). That build script does not rerun for a
/// change of these variables, so a `cargo` run without them reuses what one with them built.
fn cargo(root: &Path) -> Command {
    let mut command = Command::new("cargo");
    command.current_dir(root);
    if succeeds(Command::new("ccache").arg("--version")) {
        for var in CMAKE_LAUNCHERS {
            if std::env::var_os(var).is_none() {
                command.env(var, "ccache");
            }
        }
    }
    command
}

/// The variables that tell CMake to start each C and C++ compiler through a launcher.
const CMAKE_LAUNCHERS: [&str; 2] = ["CMAKE_C_COMPILER_LAUNCHER", "CMAKE_CXX_COMPILER_LAUNCHER"];

/// Prints the command, runs it with inherited stdio and fails unless it exits successfully.
fn run(command: &mut Command) -> anyhow::Result<()> {
    let shown = show(command);
    println!("$ {shown}");
    let status = command.status().with_context(|| format!("could not start `{shown}`"))?;
    if !status.success() {
        bail!("`{shown}` failed ({status})");
    }
    Ok(())
}

/// Prints the command, runs it and returns its stdout; stderr goes to the terminal.
fn capture(command: &mut Command) -> anyhow::Result<String> {
    let shown = show(command);
    println!("$ {shown}");
    let output = command
        .stderr(std::process::Stdio::inherit())
        .output()
        .with_context(|| format!("could not start `{shown}`"))?;
    if !output.status.success() {
        bail!("`{shown}` failed ({})", output.status);
    }
    String::from_utf8(output.stdout).with_context(|| format!("`{shown}` printed non-UTF-8 output"))
}

/// Whether the command runs and exits successfully; its output is discarded.
fn succeeds(command: &mut Command) -> bool {
    command
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .status()
        .is_ok_and(|status| status.success())
}

/// The command as a shell would read it, with the environment variables it sets in front.
fn show(command: &Command) -> String {
    let envs = command.get_envs().filter_map(|(key, value)| {
        value.map(|value| format!("{}={}", key.to_string_lossy(), value.to_string_lossy()))
    });
    let program = std::iter::once(command.get_program().to_string_lossy().into_owned());
    let args = command.get_args().map(|arg| quote(&arg.to_string_lossy()));
    envs.chain(program).chain(args).collect::<Vec<_>>().join(" ")
}

/// `arg` as a shell word: single-quoted when a shell would otherwise expand or split it.
fn quote(arg: &str) -> String {
    let plain = |c: char| c.is_ascii_alphanumeric() || "-_=./:,+@%".contains(c);
    if !arg.is_empty() && arg.chars().all(plain) {
        arg.to_owned()
    } else {
        format!("'{}'", arg.replace('\'', r"'\''"))
    }
}
