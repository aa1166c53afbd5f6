//! `strata`: run a team of agents on a task, watch it, resume it, inspect it.
//!
//! Exit codes: 0 the task succeeded (or the command did its job), 1 the task failed, 2 bad input
//! (nothing is written to the data directory), 130 interrupted (the run can be resumed), 141
//! the output was closed early (`strata inspect RUN audit | head`): like a Unix tool killed by
//! `SIGPIPE`, `strata` stops at once and quietly, without a message; a run stopped that way can
//! be resumed as after any other interruption.
//!
//! Everything goes to standard output through `outln!` and `out!` (and to standard error
//! through `errln!`), never `println!`, which panics when the reader has gone.

#![allow(clippy::print_stdout, clippy::print_stderr, reason = "a command-line tool prints")]

/// Prints a line to standard output; see [`write_stdout`].
macro_rules! outln {
    () => { $crate::write_stdout(format_args!("\n")) };
    ($($arg:tt)*) => { $crate::write_stdout(format_args!("{}\n", format_args!($($arg)*))) };
}

/// Prints to standard output; see [`write_stdout`].
macro_rules! out {
    ($($arg:tt)*) => { $crate::write_stdout(format_args!($($arg)*)) };
}

/// Prints a line to standard error; a failure to write it is ignored (there is nowhere left to
/// report it).
macro_rules! errln {
    ($($arg:tt)*) => {{
        use std::io::Write as _;
        let _ = writeln!(std::io::stderr().lock(), $($arg)*);
    }};
}

mod cli;
mod eval;
mod evolve;
mod exec;
mod inspect;
mod model;
mod operator;
mod run;
mod runs;
mod serve;
mod view;
mod worker;

use std::process::ExitCode;

use clap::Parser;

use crate::cli::{Cli, Command};

/// Exit code for bad input.
const BAD_INPUT: u8 = 2;
/// Exit code for a failed task.
const TASK_FAILED: u8 = 1;
/// Exit code after Ctrl-C.
const INTERRUPTED: u8 = 130;

/// Exit code when standard output is closed before everything was written: 128 + `SIGPIPE`,
/// what a shell reports for a tool the signal stopped.
const BROKEN_PIPE: u8 = 141;

/// Writes `args` to standard output. When the reader has gone (`EPIPE`), the process exits at
/// once with [`BROKEN_PIPE`] and no message, as a Unix tool stopped by `SIGPIPE` does (a run's
/// data is durable: `strata resume` carries on). Any other write error is reported on standard
/// error and ends the process with exit 1: output that cannot be written is not silently cut.
///
/// The secrets this process knows are redacted ([`agent_core::secrets`]); see
/// [`write_stdout_unredacted`] for the one line that must show one.
fn write_stdout(args: std::fmt::Arguments<'_>) {
    if agent_core::secrets::active() {
        let text = args.to_string();
        let text = agent_core::secrets::redact(&text);
        return write_stdout_unredacted(format_args!("{text}"));
    }
    write_stdout_unredacted(args);
}

/// [`write_stdout`] without redaction: for the dashboard's own URL, whose token is a secret
/// of this process that the user must be shown.
fn write_stdout_unredacted(args: std::fmt::Arguments<'_>) {
    use std::io::Write as _;
    let mut stdout = std::io::stdout().lock();
    if let Err(e) = stdout.write_fmt(args) {
        stdout_failed(&e);
    }
}

/// Registers the secrets this process reads from its environment, so that they are redacted
/// from everything stored or served ([`agent_core::secrets`]): the providers' API keys, the
/// dashboard's token and the OpenTelemetry export's headers. (The keys a team file names with
/// `api_key_env`, the token `strata serve` generates and an MCP server's secret-looking
/// environment are registered where they are read.)
fn register_secrets() {
    debug_assert!(agent_core::secrets::ENV_VARS.contains(&strata::dashboard::access::TOKEN_VAR));
    agent_core::secrets::register_strata_env();
}

/// Ends the process after standard output failed with `e` (see [`write_stdout`]).
fn stdout_failed(e: &std::io::Error) -> ! {
    // Exiting skips the stores' drops: remove the private copies of runs being read here.
    run_store::remove_read_copies();
    if e.kind() == std::io::ErrorKind::BrokenPipe {
        std::process::exit(i32::from(BROKEN_PIPE));
    }
    errln!("error: cannot write to standard output: {e}");
    std::process::exit(i32::from(TASK_FAILED));
}

/// An error that decides the exit code.
#[derive(Debug)]
enum Failure {
    /// The user's input is wrong: exit 2.
    BadInput(anyhow::Error),
    /// Anything else (storage, runtime): exit 1.
    Other(anyhow::Error),
}

impl<E: Into<anyhow::Error>> From<E> for Failure {
    /// An engine error that blames the input is bad input; anything else is a failure.
    fn from(e: E) -> Self {
        let e = e.into();
        match e.downcast_ref::<strata::Error>() {
            Some(engine) if engine.is_bad_input() => Failure::BadInput(e),
            _ => Failure::Other(e),
        }
    }
}

/// Marks an error as bad input.
fn bad_input(e: impl Into<anyhow::Error>) -> Failure {
    Failure::BadInput(e.into())
}

/// The process's OpenTelemetry export, when `--otlp` or `OTEL_EXPORTER_OTLP_ENDPOINT` is set.
static TELEMETRY: std::sync::Mutex<Option<agent_telemetry::Telemetry>> =
    std::sync::Mutex::new(None);

/// Sends the telemetry left and stops its export (before the process ends; a no-op when
/// telemetry is off or was stopped already).
fn finish_telemetry() {
    let telemetry = TELEMETRY.lock().unwrap_or_else(std::sync::PoisonError::into_inner).take();
    if let Some(telemetry) = telemetry {
        telemetry.shutdown();
    }
}

/// Starts the OpenTelemetry export if an endpoint is given; a bad endpoint is bad input.
fn start_telemetry(flag: Option<&str>) -> Result<(), String> {
    let endpoint = agent_telemetry::Endpoint::from_flag_or_env(flag).map_err(|e| e.to_string())?;
    if let Some(endpoint) = endpoint {
        let telemetry = agent_telemetry::Telemetry::install(&endpoint, "strata", |warning| {
            errln!("{warning}");
        })
        .map_err(|e| e.to_string())?;
        *TELEMETRY.lock().unwrap_or_else(std::sync::PoisonError::into_inner) = Some(telemetry);
    }
    Ok(())
}

fn main() -> ExitCode {
    // Strata's own executable is the sandbox launcher of its commands: started as one, it
    // never returns from here (and starts no thread before it forks).
    agent_core::tools::run_sandbox_launcher_if_requested();
    register_secrets();
    let cli = Cli::parse();
    if let Err(e) = start_telemetry(cli.otlp.as_deref()) {
        errln!("error: {e}");
        return ExitCode::from(BAD_INPUT);
    }
    let runtime = match tokio::runtime::Builder::new_multi_thread().enable_all().build() {
        Ok(rt) => rt,
        Err(e) => {
            errln!("error: cannot start the async runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    let result = runtime.block_on(dispatch(cli));
    finish_telemetry();
    match result {
        Ok(code) => ExitCode::from(code),
        Err(Failure::BadInput(e)) => {
            errln!("error: {e:#}");
            ExitCode::from(BAD_INPUT)
        }
        Err(Failure::Other(e)) => {
            errln!("error: {e:#}");
            ExitCode::from(TASK_FAILED)
        }
    }
}

/// Runs a command that reads runs through private copies of their databases
/// ([`run_store::RunStore::open_read_only`]): Ctrl-C removes the copies, then exits with
/// [`INTERRUPTED`], so a reader stopped early leaves nothing in the temporary directory.
async fn reading<T>(work: impl Future<Output = Result<T, Failure>>) -> Result<T, Failure> {
    let interrupted = async {
        if tokio::signal::ctrl_c().await.is_err() {
            std::future::pending::<()>().await;
        }
    };
    tokio::select! {
        result = work => result,
        () = interrupted => {
            run_store::remove_read_copies();
            std::process::exit(i32::from(INTERRUPTED));
        }
    }
}

async fn dispatch(cli: Cli) -> Result<u8, Failure> {
    match cli.command {
        Command::Init(args) => runs::init(&args).map(|()| 0),
        Command::Run(args) => run::run(args).await,
        Command::Exec(args) => exec::exec(args).await,
        Command::Resume(args) => run::resume(args).await,
        Command::Runs(args) => runs::list(&args).await.map(|()| 0),
        Command::Inspect(args) => reading(inspect::inspect(&args)).await.map(|()| 0),
        Command::Verify(args) => reading(inspect::verify(&args)).await,
        Command::Approve(args) => operator::approve(&args).await,
        Command::Veto(args) => operator::veto(&args).await,
        Command::Rollback(args) => operator::rollback(&args).await,
        Command::Adopt(args) => operator::adopt(&args).await,
        Command::Evolve(args) => evolve::evolve(args).await,
        Command::Lineage(args) => reading(evolve::lineage(&args)).await,
        Command::Eval(args) => eval::eval(args).await,
        Command::Model(args) => model::model(args).await,
        Command::Worker(args) => worker::worker(args).await,
        Command::Serve(args) => serve::serve(args).await,
    }
}
