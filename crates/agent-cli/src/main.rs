//! `strata`: run a team of agents on a task, watch it, resume it, inspect it.
//!
//! Exit codes: 0 the task succeeded (or the command did its job), 1 the task failed, 2 bad input
//! (nothing is written to the data directory), 130 interrupted (the run can be resumed).

#![allow(clippy::print_stdout, clippy::print_stderr, reason = "a command-line tool prints")]

mod cli;
mod exec;
mod inspect;
mod model;
mod reasoners;
mod run;
mod runs;
mod view;

use std::process::ExitCode;

use clap::Parser;

use crate::cli::{Cli, Command};

/// Exit code for bad input.
const BAD_INPUT: u8 = 2;
/// Exit code for a failed task.
const TASK_FAILED: u8 = 1;
/// Exit code after Ctrl-C.
const INTERRUPTED: u8 = 130;

/// An error that decides the exit code.
#[derive(Debug)]
enum Failure {
    /// The user's input is wrong: exit 2.
    BadInput(anyhow::Error),
    /// Anything else (storage, runtime): exit 1.
    Other(anyhow::Error),
}

impl<E: Into<anyhow::Error>> From<E> for Failure {
    fn from(e: E) -> Self {
        Failure::Other(e.into())
    }
}

/// Marks an error as bad input.
fn bad_input(e: impl Into<anyhow::Error>) -> Failure {
    Failure::BadInput(e.into())
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let runtime = match tokio::runtime::Builder::new_multi_thread().enable_all().build() {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("error: cannot start the async runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    let result = runtime.block_on(dispatch(cli));
    match result {
        Ok(code) => ExitCode::from(code),
        Err(Failure::BadInput(e)) => {
            eprintln!("error: {e:#}");
            ExitCode::from(BAD_INPUT)
        }
        Err(Failure::Other(e)) => {
            eprintln!("error: {e:#}");
            ExitCode::from(TASK_FAILED)
        }
    }
}

async fn dispatch(cli: Cli) -> Result<u8, Failure> {
    match cli.command {
        Command::Init(args) => runs::init(&args).map(|()| 0),
        Command::Run(args) => run::run(args).await,
        Command::Exec(args) => exec::exec(args).await,
        Command::Resume(args) => run::resume(args).await,
        Command::Runs(args) => runs::list(&args).map(|()| 0),
        Command::Inspect(args) => inspect::inspect(&args).await.map(|()| 0),
        Command::Verify(args) => inspect::verify(&args).await,
        Command::Model(args) => model::model(args).await,
    }
}
