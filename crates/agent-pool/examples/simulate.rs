//! Runs deterministic simulations (feature `sim`): `simulate --seeds N [--start S]` plays the
//! scenarios of seeds S..S+N, prints one line per failed seed with the command that replays
//! it, and a summary; exits 1 if any seed failed. `cargo xtask simulate` runs this.

#![allow(
    clippy::print_stdout,
    clippy::print_stderr,
    reason = "a command-line program prints its results"
)]

use std::process::ExitCode;
use std::time::Instant;

use agent_pool::sim::{Scenario, run};

fn main() -> ExitCode {
    let mut seeds: u64 = 100;
    let mut start: u64 = 0;
    let mut verbose = false;
    let mut args = std::env::args().skip(1);
    while let Some(arg) = args.next() {
        let value = |args: &mut dyn Iterator<Item = String>| -> Option<u64> {
            args.next().and_then(|v| v.parse().ok())
        };
        match arg.as_str() {
            "--seeds" => match value(&mut args) {
                Some(n) => seeds = n,
                None => return usage("--seeds needs a number"),
            },
            "--start" => match value(&mut args) {
                Some(s) => start = s,
                None => return usage("--start needs a number"),
            },
            "--verbose" => verbose = true,
            other => return usage(&format!("unknown argument `{other}`")),
        }
    }
    let began = Instant::now();
    let (mut agents, mut steps, mut crashes, mut failed) = (0usize, 0u64, 0usize, 0u64);
    for seed in start..start.saturating_add(seeds) {
        let report = run(&Scenario::from_seed(seed));
        agents += report.agents;
        steps += report.steps;
        crashes += report.crashes;
        if verbose {
            println!(
                "seed {seed}: {} agents, {} steps, {} crashes, {} records, {} effects, outcomes {:?}, digest {:016x}",
                report.agents,
                report.steps,
                report.crashes,
                report.records,
                report.effects,
                report.outcomes,
                report.digest
            );
        }
        if let Some(failure) = &report.failure {
            failed += 1;
            println!(
                "FAILED seed {seed}: {failure}\n  replay: cargo xtask simulate --seeds 1 --start {seed}"
            );
        }
    }
    println!(
        "simulate: {seeds} seeds ({start}..{}), {failed} failed; {agents} agents, {steps} steps, {crashes} crashes injected; {:.2} s",
        start.saturating_add(seeds),
        began.elapsed().as_secs_f64()
    );
    if failed > 0 { ExitCode::FAILURE } else { ExitCode::SUCCESS }
}

fn usage(problem: &str) -> ExitCode {
    eprintln!("simulate: {problem}\nusage: simulate --seeds N [--start S] [--verbose]");
    ExitCode::from(2)
}
