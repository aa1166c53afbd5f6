//! `cargo xtask fuzz [--seconds N]`: builds the fuzz targets in `fuzz/` with `cargo fuzz` and
//! runs each for N seconds (CI: [`CI_SECONDS`], on a build optimised less, [`CI_OPT_LEVEL`]),
//! starting from its committed seeds in
//! `fuzz/seeds/<target>/` (which also hold every input a fuzzer ever found, as regression
//! tests: libFuzzer runs each seed before it mutates).
//!
//! The targets are built without a sanitizer (`-s none`): the crates are safe Rust, so a crash is
//! a panic, which libFuzzer reports with the input that caused it; that also lets `cargo fuzz`
//! run on the stable toolchain. A crash fails the command and names the input and the command
//! that replays it; the input then belongs in the target's seeds once the bug is fixed.

use std::path::Path;
use std::process::Command;

use anyhow::{Context, bail};

use crate::{run as run_command, succeeds};

/// The targets, as `fuzz/Cargo.toml` names them.
pub(crate) const TARGETS: [&str; 4] = ["team_file", "plan_file", "stored_records", "model_answers"];

/// Seconds per target in CI.
pub(crate) const CI_SECONDS: u32 = 10;

/// The optimisation level of CI's fuzz build (`cargo fuzz` builds release, level 3, with one
/// codegen unit per crate, so on 2 cores each big crate compiles on one). Measured on 2 cores,
/// quiet: level 1 builds in 186 s against 244 s, and its targets run 0.69 to 0.79 times as
/// many inputs in their 10 s (234 K, 418 K, 2.0 M and 54 K against 318 K, 603 K, 2.6 M and
/// 76 K), every seed still run first. `cargo xtask fuzz`, for longer runs, keeps level 3.
pub(crate) const CI_OPT_LEVEL: &str = "1";

/// Runs every target for `seconds`, built at `opt_level` when one is given (else `cargo
/// fuzz`'s own, 3).
pub(crate) fn run(root: &Path, seconds: u32, opt_level: Option<&str>) -> anyhow::Result<()> {
    let fuzz = root.join("fuzz");
    if !succeeds(Command::new("cargo").args(["fuzz", "--version"])) {
        bail!(
            "cargo-fuzz is not installed: install it with `cargo install cargo-fuzz --locked` (`cargo xtask ci` does, in its setup step)"
        );
    }
    run_command(fuzz_command(&fuzz, opt_level).args(["build", "-s", "none"]))?;
    for target in TARGETS {
        let corpus = fuzz.join("target").join("corpus").join(target);
        std::fs::create_dir_all(&corpus)
            .with_context(|| format!("cannot create {}", corpus.display()))?;
        let seeds = fuzz.join("seeds").join(target);
        let artifacts = fuzz.join("target").join("artifacts").join(target);
        std::fs::create_dir_all(&artifacts)
            .with_context(|| format!("cannot create {}", artifacts.display()))?;
        let result = run_command(
            fuzz_command(&fuzz, opt_level)
                .args(["run", "-s", "none", target])
                .arg(&corpus)
                .arg(&seeds)
                .arg("--")
                .arg(format!("-max_total_time={seconds}"))
                .arg(format!("-artifact_prefix={}/", artifacts.display()))
                .arg("-print_final_stats=1"),
        );
        if let Err(error) = result {
            bail!(
                "fuzz target `{target}` found a crash ({error:#}); the input is in {}; replay it with \
                 `cd fuzz && cargo fuzz run -s none {target} <input>`, fix the bug, then add the \
                 input to fuzz/seeds/{target}/ as a regression test",
                artifacts.display()
            );
        }
    }
    println!("fuzz: {} targets ran {seconds} s each without a crash", TARGETS.len());
    Ok(())
}

/// `cargo fuzz` in `fuzz/`, its release profile at `opt_level` when one is given (the same
/// for the build and each run, or the run would build again).
fn fuzz_command(fuzz: &Path, opt_level: Option<&str>) -> Command {
    let mut command = Command::new("cargo");
    command.arg("fuzz").current_dir(fuzz);
    if let Some(level) = opt_level {
        command.env("CARGO_PROFILE_RELEASE_OPT_LEVEL", level);
    }
    command
}
