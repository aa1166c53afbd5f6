//! `strata worker --nats URL`: a process that hosts a share of the agents of every run placed on
//! the server (`agent_pool::placement`), joined and each run's team built by the library
//! ([`strata::worker::join`]). The command keeps its arguments, the signals that stop it
//! and the lines it prints of what the worker does.

use std::sync::Arc;

use agent_pool::placement::{VERSION, WorkerConfig, WorkerEvent, WorkerFilter};
use agent_state::AgentLayer;

use crate::cli::WorkerArgs;
use crate::{Failure, bad_input};
use strata::worker::{HostOptions, Joined};

/// `strata worker`.
pub(crate) async fn worker(args: WorkerArgs) -> Result<u8, Failure> {
    let id = match &args.id {
        Some(id) => id.clone(),
        None => strata::worker::default_id(),
    };
    let filter = WorkerFilter { agents: args.agents.clone(), layers: args.layer.clone() };
    if args.data.exists() && !args.data.is_dir() {
        return Err(bad_input(anyhow::anyhow!(
            "the data directory {} is a file; give --data a directory",
            args.data.display()
        )));
    }
    let options = HostOptions {
        workspace: args.workspace.clone(),
        unsandboxed: args.unsandboxed,
        warn: Arc::new(|warning| errln!("{warning}")),
        ..HostOptions::new(&args.data, &id)
    };
    let config = WorkerConfig { id: id.clone(), filter, capacity: args.capacity };
    let Joined { worker, mut events, host } =
        strata::worker::join(&args.nats, options, config).await?;
    outln!("worker {id} (Strata {VERSION}) on {}: waiting for runs; Ctrl-C stops it", args.nats);
    let (stop, stopped) = tokio::sync::watch::channel(false);
    let working = tokio::spawn(worker.run(stopped));
    let printer = tokio::spawn(async move {
        while let Some(event) = events.recv().await {
            print_event(&event);
        }
    });
    let interrupted = shutdown_signal().await;
    outln!("worker {id}: stopping (its agents are released to the other workers)");
    let _ = stop.send(true);
    if let Err(e) = working.await {
        errln!("error: the worker stopped abnormally: {e}");
    }
    printer.abort();
    host.stop_servers().await;
    outln!("worker {id}: stopped");
    // A turn stopped mid-command leaves the thread waiting for that command in the runtime's
    // blocking pool, which a normal return would wait for (up to the command's timeout). The
    // command goes on in its own process group, journaled, for the agent's next holder to
    // adopt; nothing of this worker is left to store, so it exits now.
    crate::finish_telemetry();
    std::process::exit(if interrupted { 0 } else { i32::from(crate::TASK_FAILED) })
}

/// Waits for Ctrl-C or SIGTERM: `true`; `false` if neither can be waited for.
async fn shutdown_signal() -> bool {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{SignalKind, signal};
        match signal(SignalKind::terminate()) {
            Ok(mut term) => tokio::select! {
                r = tokio::signal::ctrl_c() => r.is_ok(),
                _ = term.recv() => true,
            },
            Err(_) => tokio::signal::ctrl_c().await.is_ok(),
        }
    }
    #[cfg(not(unix))]
    {
        tokio::signal::ctrl_c().await.is_ok()
    }
}

fn print_event(event: &WorkerEvent) {
    let names = |agents: &[agent_state::AgentId]| {
        agents.iter().map(|a| a.as_str()).collect::<Vec<_>>().join(", ")
    };
    match event {
        WorkerEvent::Joined { run } => outln!("run {run}: joined"),
        WorkerEvent::Refused { run, reason } => errln!("run {run}: refused: {reason}"),
        WorkerEvent::Hosting { run, agents } => outln!("run {run}: hosting {}", names(agents)),
        WorkerEvent::Lost { run, agents, reason } => {
            outln!("run {run}: stopped hosting {}: {reason}", names(agents))
        }
        WorkerEvent::Withdrawn { run } => {
            outln!("run {run}: stopped by its coordinator; its agents here are released")
        }
        WorkerEvent::Closed { run } => outln!("run {run}: closed; its agents here shut down"),
        WorkerEvent::Trouble { run: Some(run), error } => errln!("run {run}: warning: {error}"),
        WorkerEvent::Trouble { run: None, error } => errln!("warning: {error}"),
    }
}

/// A layer name for `--layer`.
pub(crate) fn parse_layer(text: &str) -> Result<AgentLayer, String> {
    match text {
        "top" => Ok(AgentLayer::Top),
        "mid" => Ok(AgentLayer::Mid),
        "bottom" => Ok(AgentLayer::Bottom),
        other => Err(format!("`{other}` is not a layer: use top, mid or bottom")),
    }
}
