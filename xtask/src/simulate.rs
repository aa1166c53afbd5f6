//! `cargo xtask simulate --seeds N [--start S]`: the deterministic simulation of whole teams
//! (agent-pool's feature `sim`) over the seeds S..S+N. Each seed is a scenario (team size,
//! plan, crashes, message delays and reorderings, slow and failing tools) played on simulated
//! time in one thread, with the invariants checked after every step. It runs agent-pool's
//! `simulate` example, which prints one line per failed seed with the command that replays
//! it (`cargo xtask simulate --seeds 1 --start <seed>`) and a summary: seeds, agents, steps,
//! crashes injected, time taken.

use std::path::Path;

use anyhow::{Context, bail};

use crate::{USAGE, cargo, run as run_command};

/// How many seeds `cargo xtask simulate` runs without `--seeds`.
pub(crate) const DEFAULT_SEEDS: u64 = 1000;

/// How many seeds CI runs (a few seconds per hundred on a debug build).
pub(crate) const CI_SEEDS: u64 = 300;

/// Runs the seeds `start..start + seeds`, on `built` (the `simulate` example, built with the
/// `sim` feature) or, without one, on the example `cargo run` builds; fails if any seed broke
/// an invariant.
pub(crate) fn run(root: &Path, seeds: u64, start: u64, built: Option<&Path>) -> anyhow::Result<()> {
    let range = ["--seeds".to_owned(), seeds.to_string(), "--start".to_owned(), start.to_string()];
    let mut command = match built {
        Some(simulate) => {
            if !simulate.is_file() {
                bail!("the simulate example is not at {}", simulate.display());
            }
            let mut command = std::process::Command::new(simulate);
            command.current_dir(root);
            command
        }
        None => {
            let mut command = cargo(root);
            command.args([
                "run",
                "--quiet",
                "--locked",
                "-p",
                "strata-agent-pool",
                "--features",
                "sim",
                "--example",
                "simulate",
                "--",
            ]);
            command
        }
    };
    run_command(command.args(range)).with_context(|| {
        format!("the simulation found failing seeds in {start}..{}", start.saturating_add(seeds))
    })
}

/// Parses `[--seeds N] [--start S]`.
pub(crate) fn args(args: &[&str]) -> anyhow::Result<(u64, u64)> {
    let (mut seeds, mut start) = (DEFAULT_SEEDS, 0);
    let mut it = args.iter();
    while let Some(arg) = it.next() {
        let value = it.next().with_context(|| format!("{arg} needs a value"))?;
        let number = || -> anyhow::Result<u64> {
            value.parse().with_context(|| format!("{arg} takes a number, not `{value}`"))
        };
        match *arg {
            "--seeds" => seeds = number()?,
            "--start" => start = number()?,
            other => bail!("unknown option `{other}`\n\n{USAGE}"),
        }
    }
    Ok((seeds, start))
}
