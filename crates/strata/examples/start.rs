//! Starts a durable run of a team file and a plan, and drives it to its end:
//! `cargo run -p strata-engine --example start -- DATA_DIR TEAM_FILE PLAN_FILE`.
#![allow(clippy::print_stdout, reason = "an example prints its result")]
use std::path::Path;

use strata::run::{Prepared, Run, StartOptions};

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    // This program is also the sandbox launcher of the run's commands.
    strata::run_sandbox_launcher_if_requested();
    let args: Vec<String> = std::env::args().skip(1).collect();
    let [data, team, plan] = args.as_slice() else {
        return Err("usage: start DATA_DIR TEAM_FILE PLAN_FILE".into());
    };
    let options = StartOptions::new(data);
    let prepared = Prepared::from_files(Some(Path::new(team)), Path::new(plan), &options).await?;
    let run = Run::start(prepared, &options).await?;
    // Driven to its end; a stop future that resolves (Ctrl-C, say) interrupts it, resumable.
    let ended = run.drive(std::future::pending()).await?;
    println!("{} {}", ended.info.run_id, ended.info.status.as_str());
    Ok(())
}
