//! What a run shows while it goes and when it ends: a live view on a terminal, plain (or JSON)
//! event lines otherwise, and the final summary.
//!
//! Text that can come from outside (file paths a tool wrote, tool output, goals, reasons) is
//! printed with its control characters escaped ([`esc`]: a newline shows as `\n`), so one
//! event is always one line and nothing printed can drive the terminal.

use std::collections::BTreeSet;
use std::io::{IsTerminal, Write};
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use agent_core::{AuditEvent, AuditRecord};
use agent_pool::{Team, TeamServices};
use agent_state::{AgentLayer, Task, TaskOutcome};
use team_file::escape_controls as esc;
use tokio::sync::watch;
use tokio::task::JoinHandle;

use crate::cli::OutputArgs;
use crate::run::{RunInfo, now_ms};

/// How often the view refreshes.
const REFRESH: Duration = Duration::from_millis(250);

#[cfg(test)]
mod tests;

#[derive(Clone, Copy, PartialEq, Eq)]
enum Mode {
    Live,
    Lines,
    Json,
}

fn mode(output: &OutputArgs) -> Mode {
    if output.json {
        Mode::Json
    } else if output.quiet || !std::io::stdout().is_terminal() {
        Mode::Lines
    } else {
        Mode::Live
    }
}

fn json_line(value: &serde_json::Value) {
    println!("{value}");
}

pub(crate) fn started(output: &OutputArgs, info: &RunInfo, dir: &Path) {
    if mode(output) == Mode::Json {
        json_line(
            &serde_json::json!({"event": "run_started", "run_id": info.run_id, "task": info.task_id,
            "data": dir, "workspace": info.workspace}),
        );
    } else {
        println!(
            "run {} started: task `{}` ({})",
            info.run_id,
            esc(&info.task_id),
            esc(&info.goal)
        );
        println!("  data:      {}", esc(&dir.display().to_string()));
        println!("  workspace: {}", esc(&info.workspace.display().to_string()));
    }
}

pub(crate) fn resumed(output: &OutputArgs, info: &RunInfo, dir: &Path) {
    if mode(output) == Mode::Json {
        json_line(
            &serde_json::json!({"event": "run_resumed", "run_id": info.run_id, "task": info.task_id,
            "data": dir, "workspace": info.workspace}),
        );
    } else {
        println!(
            "run {} resumed: task `{}` ({})",
            info.run_id,
            esc(&info.task_id),
            esc(&info.goal)
        );
        println!("  data:      {}", esc(&dir.display().to_string()));
        println!("  workspace: {}", esc(&info.workspace.display().to_string()));
    }
}

pub(crate) fn already_finished(output: &OutputArgs, info: &RunInfo, dir: &Path) {
    if mode(output) == Mode::Json {
        json_line(&serde_json::json!({"event": "run_finished_already", "run_id": info.run_id,
            "status": info.status, "data": dir}));
    } else {
        println!(
            "run {} already finished ({}); nothing to resume. `strata inspect {}` shows it.",
            info.run_id,
            info.status.as_str(),
            info.run_id
        );
    }
}

pub(crate) fn interrupting(output: &OutputArgs) {
    if mode(output) != Mode::Json {
        eprintln!(
            "\ninterrupted: finishing the running heartbeats and storing state (Ctrl-C again to stop at once)"
        );
    }
}

pub(crate) fn interrupted(output: &OutputArgs, info: &RunInfo, dir: &Path) {
    if mode(output) == Mode::Json {
        json_line(
            &serde_json::json!({"event": "run_interrupted", "run_id": info.run_id, "data": dir}),
        );
    } else {
        println!(
            "run {} stopped; everything is stored. Continue it with: strata resume {}",
            info.run_id, info.run_id
        );
    }
}

/// The task that shows progress; [`Watcher::stop`] ends it after a last refresh.
pub(crate) struct Watcher {
    stop: watch::Sender<bool>,
    handle: JoinHandle<()>,
}

impl Watcher {
    pub(crate) async fn stop(self) {
        let _ = self.stop.send(true);
        let _ = self.handle.await;
    }
}

pub(crate) fn watch(
    team: Arc<Team>,
    services: TeamServices,
    task: Task,
    info: RunInfo,
    output: OutputArgs,
) -> Watcher {
    let (stop, mut stopped) = watch::channel(false);
    let mode = mode(&output);
    let handle = tokio::spawn(async move {
        // Every record read so far; each refresh reads only the new ones.
        let mut records: Vec<AuditRecord> = Vec::new();
        let mut tick = tokio::time::interval(REFRESH);
        loop {
            let done = tokio::select! {
                _ = tick.tick() => false,
                _ = stopped.changed() => true,
            };
            let from = records.last().map_or(0, |r| r.seq + 1);
            let seen = records.len();
            records.extend(services.audit.records_from(from).await.unwrap_or_default());
            let new = records.get(seen..).unwrap_or_default();
            match mode {
                Mode::Json => new
                    .iter()
                    .for_each(|r| json_line(&serde_json::json!({"event": "audit", "record": r}))),
                Mode::Lines => {
                    new.iter().for_each(|r| println!("{}", event_line(r, info.started_at)))
                }
                Mode::Live => live(&team, &services, &task, &info, &records).await,
            }
            if done {
                break;
            }
        }
    });
    Watcher { stop, handle }
}

/// One audit record as one line of text: control characters in it are escaped.
pub(crate) fn event_line(r: &AuditRecord, start: u64) -> String {
    let t = r.at.0.saturating_sub(start) as f64 / 1000.0;
    let what = match &r.event {
        AuditEvent::Transition { from, to, reason } => format!("{from} -> {to} ({reason})"),
        AuditEvent::Denied { action, error } => format!("DENIED {action}: {error}"),
        AuditEvent::ToolCall { tool, success, summary, .. } => {
            format!(
                "tool {tool} {}: {}",
                if *success { "ok" } else { "FAILED" },
                // Whole (it is short), so a file name with a newline is shown, escaped, not cut.
                summary.trim()
            )
        }
        AuditEvent::Error { error, retry, max_retries } => {
            format!("error (retry {retry}/{max_retries}): {error}")
        }
        AuditEvent::Decision { decision, action, detail } => {
            let detail = if detail.is_empty() { String::new() } else { format!(": {detail}") };
            format!("decision {} {action}{detail}", short(&decision.to_string()))
        }
        AuditEvent::MissedHeartbeat { heartbeat } => format!("missed heartbeat {heartbeat}"),
        AuditEvent::Spawned { spawn } => format!(
            "spawned {} ({}, depth {}): {}",
            spawn.agent,
            spawn.role,
            spawn.depth,
            first_line(&spawn.task_prompt)
        ),
        AuditEvent::Despawned { agent, summary } => {
            format!("despawned {agent}: {}", first_line(summary))
        }
        AuditEvent::Result { result, trusted, .. } => format!(
            "returned results ({:?}{}, {} artifact(s)): {}",
            result.status,
            if *trusted { "" } else { ", UNTRUSTED" },
            result.artifacts.len(),
            first_line(&result.summary)
        ),
    };
    esc(&format!("[{t:>7.2}s] {:<12} {what}", r.agent.as_str())).into_owned()
}

fn first_line(s: &str) -> &str {
    s.lines().next().unwrap_or_default()
}

fn short(id: &str) -> &str {
    id.get(..8).unwrap_or(id)
}

async fn live(
    team: &Team,
    services: &TeamServices,
    task: &Task,
    info: &RunInfo,
    records: &[AuditRecord],
) {
    let mut out = String::from("\x1b[H\x1b[2J");
    let elapsed = now_ms().saturating_sub(info.started_at) as f64 / 1000.0;
    let done = steps_done(records);
    out.push_str(&format!(
        "strata · run {} · task `{}` · {elapsed:.1}s · {done}/{} steps\n\n",
        info.run_id,
        esc(&task.id),
        task.steps.len()
    ));
    let slots = team.pool().all();
    let line = |slot: &agent_pool::AgentSlot, indent: &str| {
        let (status, work) = match slot.try_peek() {
            Some(p) => (p.status.to_string(), p.current_work.unwrap_or_default()),
            None => ("busy".to_owned(), "(heartbeat running)".to_owned()),
        };
        format!("{indent}{:<14} {:<17} {}\n", slot.id().as_str(), status, esc(&work))
    };
    for top in slots.iter().filter(|s| s.layer() == AgentLayer::Top) {
        out.push_str(&line(top, ""));
    }
    for mid in slots.iter().filter(|s| s.layer() == AgentLayer::Mid) {
        out.push_str(&line(mid, "  "));
        for bottom in slots.iter().filter(|s| s.supervisor() == Some(mid.id())) {
            out.push_str(&line(bottom, "    "));
        }
    }
    if let Ok(decisions) = services.governance.list().await {
        out.push_str("\ndecisions:\n");
        for d in decisions {
            let signed: Vec<&str> = d.signatures.iter().map(|s| s.signer.as_str()).collect();
            out.push_str(&format!(
                "  {} {:<9} signed by [{}]\n",
                short(&d.id.to_string()),
                d.status.as_str(),
                signed.join(", ")
            ));
        }
    }
    out.push_str("\nrecent:\n");
    for r in records.iter().rev().take(6).rev() {
        out.push_str(&format!("  {}\n", event_line(r, info.started_at)));
    }
    let mut stdout = std::io::stdout().lock();
    let _ = stdout.write_all(out.as_bytes());
    let _ = stdout.flush();
}

/// Steps done so far: successful side-effect-free or side-effecting tool calls, one per step.
fn steps_done(records: &[AuditRecord]) -> usize {
    records.iter().filter(|r| matches!(r.event, AuditEvent::ToolCall { success: true, .. })).count()
}

/// Files the run wrote, from its audited `write_file` calls.
fn files_written(records: &[AuditRecord]) -> Vec<String> {
    let files: BTreeSet<String> = records
        .iter()
        .filter_map(|r| match &r.event {
            AuditEvent::ToolCall { tool, args, success: true, .. } if tool == "write_file" => {
                args.get("path").and_then(|p| p.as_str()).map(str::to_owned)
            }
            _ => None,
        })
        .collect();
    files.into_iter().collect()
}

pub(crate) async fn summary(
    output: &OutputArgs,
    team: &Team,
    services: &TeamServices,
    task: &Task,
    outcome: &TaskOutcome,
    info: &RunInfo,
    dir: &Path,
) -> anyhow::Result<()> {
    let records = services.audit.records(None).await?;
    let decisions = services.governance.list().await?;
    let agents = team.summary().await;
    let duration =
        info.finished_at.unwrap_or_else(now_ms).saturating_sub(info.started_at) as f64 / 1000.0;
    let files = files_written(&records);
    let sum = |layer: AgentLayer, f: fn(&agent_state::AgentMetrics) -> u64| -> u64 {
        agents.iter().filter(|a| a.layer == layer).map(|a| f(&a.metrics)).sum()
    };
    let retries: u64 = agents.iter().map(|a| a.metrics.retries).sum();
    let failures: u64 = agents.iter().map(|a| a.metrics.tasks_failed).sum();
    if mode(output) == Mode::Json {
        json_line(&serde_json::json!({
            "event": "run_finished",
            "run_id": info.run_id,
            "task": task.id,
            "outcome": outcome,
            "duration_s": duration,
            "files_written": files,
            "decisions": decisions,
            "retries": retries,
            "failures": failures,
            "agents": agents,
            "data": dir,
            "workspace": info.workspace,
        }));
        return Ok(());
    }
    println!();
    match outcome {
        TaskOutcome::Succeeded { results, .. } => {
            println!(
                "task `{}` succeeded in {duration:.1}s ({} steps)",
                esc(&task.id),
                results.len()
            );
            for r in results {
                println!(
                    "  {:<16} by {:<12} {}",
                    esc(&r.step_id),
                    r.agent.as_str(),
                    esc(first_line(r.output.trim()))
                );
            }
        }
        TaskOutcome::Failed { reason, .. } => {
            println!(
                "task `{}` FAILED after {duration:.1}s: {}",
                esc(&task.id),
                esc(&reason.to_string())
            )
        }
    }
    println!(
        "top layer:    {} signatures, {} vetoes, {} arbitrations, {} task(s) closed",
        sum(AgentLayer::Top, |m| m.decisions_signed),
        sum(AgentLayer::Top, |m| m.decisions_vetoed),
        sum(AgentLayer::Top, |m| m.conflicts_arbitrated),
        sum(AgentLayer::Top, |m| m.tasks_completed)
    );
    println!("mid layer:    {} messages handled", sum(AgentLayer::Mid, |m| m.messages_processed));
    println!(
        "bottom layer: {} steps completed, {} failed",
        sum(AgentLayer::Bottom, |m| m.tasks_completed),
        sum(AgentLayer::Bottom, |m| m.tasks_failed)
    );
    println!("retries: {retries}, failures: {failures}");
    println!(
        "files written: {}",
        if files.is_empty() { "none".to_owned() } else { esc(&files.join(", ")).into_owned() }
    );
    for d in &decisions {
        let signed: Vec<&str> = d.signatures.iter().map(|s| s.signer.as_str()).collect();
        let vetoed = d
            .vetoes
            .first()
            .map(|v| format!(", vetoed by {}: {}", v.vetoer, esc(&v.reason)))
            .unwrap_or_default();
        println!(
            "decision {} {}{} (signed by {})",
            short(&d.id.to_string()),
            d.status.as_str(),
            vetoed,
            if signed.is_empty() { "nobody".to_owned() } else { signed.join(", ") }
        );
    }
    println!(
        "\n{:<14} {:<7} {:<11} {:>5} {:>5} {:>7} {:>6}",
        "agent", "layer", "status", "done", "fail", "retries", "score"
    );
    for a in &agents {
        println!(
            "{:<14} {:<7} {:<11} {:>5} {:>5} {:>7} {:>6.1}",
            a.id.as_str(),
            a.layer.as_str(),
            a.status.as_str(),
            a.metrics.tasks_completed,
            a.metrics.tasks_failed,
            a.metrics.retries,
            a.score
        );
    }
    println!(
        "\nrun {}: data in {}, workspace {}",
        info.run_id,
        esc(&dir.display().to_string()),
        esc(&info.workspace.display().to_string())
    );
    println!(
        "inspect it with: strata inspect {} [tree|audit|messages|whiteboards|decisions|metrics|usage|results]",
        info.run_id
    );
    Ok(())
}
