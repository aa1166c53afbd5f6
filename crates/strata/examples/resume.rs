//! Resumes a durable run where it stopped and drives it to its end:
//! `cargo run -p strata-engine --example resume -- DATA_DIR RUN_ID`.
#![allow(clippy::print_stdout, reason = "an example prints its result")]
use strata::run::{ResumeOptions, Resumed, Run};

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    // This program is also the sandbox launcher of the run's commands.
    strata::run_sandbox_launcher_if_requested();
    let args: Vec<String> = std::env::args().skip(1).collect();
    let [data, run_id] = args.as_slice() else {
        return Err("usage: resume DATA_DIR RUN_ID".into());
    };
    let info = match Run::resume(run_id, &ResumeOptions::new(data)).await? {
        // It had ended already: nothing is started again.
        Resumed::Finished { info, .. } => *info,
        Resumed::Running(run) => run.drive(std::future::pending()).await?.info,
    };
    println!("{} {}", info.run_id, info.status.as_str());
    Ok(())
}
