//! `strata init` and `strata runs`.
//!
//! `strata runs` checks every run that no live process holds as `strata verify` does (the
//! store against its seal, the audit log's chain and its anchors: the seal, the anchor files,
//! the agents' records) and lists a run found broken as `damaged`, with why; the status it
//! recorded is kept beside it. A run on NATS is listed as recorded (its audit log is on the
//! server; `strata verify` checks it there).

use crate::cli::{InitArgs, RunsArgs};
use crate::{Failure, bad_input};
use team_file::escape_controls as esc;

/// `strata init [DIR]`: writes an example team file (of `--shape`, layered by default) and
/// plan, never overwriting a file.
pub(crate) fn init(args: &InitArgs) -> Result<(), Failure> {
    let (team, plan) =
        strata::runs::write_example(&args.dir, args.shape.unwrap_or_default(), args.scale)?;
    outln!("wrote {} and {}", team.display(), plan.display());
    outln!("run it with: strata run {} --team {}", plan.display(), team.display());
    Ok(())
}

use strata::run_dir::format_time;

/// `strata runs`: the team runs and the evolutions.
pub(crate) async fn list(args: &RunsArgs) -> Result<(), Failure> {
    if !args.data.exists() {
        if args.json {
            outln!("[]");
        } else {
            outln!("no runs yet in {}", args.data.display());
        }
        return Ok(());
    }
    if !args.data.is_dir() {
        return Err(bad_input(anyhow::anyhow!(
            "the data directory {} is not a directory; give --data a directory",
            args.data.display()
        )));
    }
    let rows = strata::runs::list(&args.data).await?;
    if args.json {
        outln!("{}", strata::runs::json(&rows));
        return Ok(());
    }
    if rows.is_empty() {
        outln!("no runs yet in {}", args.data.display());
        return Ok(());
    }
    outln!(
        "{:<44} {:<19} {:<16} {:<20} {:>9}",
        "run",
        "status",
        "task",
        "started (UTC)",
        "duration"
    );
    for row in rows {
        let status = match &row.damage {
            Some(_) => format!("damaged ({})", row.status),
            None => row.status.to_owned(),
        };
        outln!(
            "{:<44} {:<19} {:<16} {:<20} {:>8.1}s",
            row.id,
            status,
            row.task,
            format_time(row.started),
            row.end.saturating_sub(row.started) as f64 / 1000.0
        );
        if let Some(damage) = &row.damage {
            outln!("    damaged: {}; `strata verify {}` shows every check", esc(damage), row.id);
        }
    }
    Ok(())
}
