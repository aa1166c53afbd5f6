//! What a run shows while it goes and when it ends: a live view on a terminal, plain (or JSON)
//! event lines otherwise, and the final summary.
//!
//! While the run goes, the lines come from the team's event stream ([`Team::events`]) as
//! things happen (the JSON lines are the engine's, [`strata::json_lines`]): every audit
//! record once it is stored (`audit` in JSON; [`event_line`] in text), every state change,
//! progress report and note of an executor kind's run (`executor_run`; [`run_line`]), the pieces of the models' answers as they stream (`tokens`
//! in JSON; the live view's "model output", a line per agent; not in plain lines), and, when
//! the view fell behind and the stream dropped events for it, how many (`lagged` with
//! `skipped`; [`lagged_line`]). The audit log keeps every record (`strata inspect RUN
//! audit`); the final summary is read from the store.
//!
//! Text that can come from outside (file paths a tool wrote, tool output, goals, reasons) is
//! printed with its control characters escaped ([`esc`]: a newline shows as `\n`), so one
//! event is always one line and nothing printed can drive the terminal.

use std::collections::VecDeque;
use std::io::{IsTerminal, Write};
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use agent_core::{AuditRecord, EventStream, Received, TeamEvent};
use agent_pool::{Team, TeamServices};
use agent_state::{AgentId, AgentLayer, RunEvent, Task, TaskOutcome};
use team_file::escape_controls as esc;
use tokio::sync::watch;
use tokio::task::JoinHandle;

use crate::cli::OutputArgs;
use strata::json_lines;
use strata::lines::{event_line, run_line, short_id};
use strata::run::{Ended, How};
use strata::run_dir::{RunInfo, now_ms};
use strata::summary::Summary;

/// How often the view refreshes.
const REFRESH: Duration = Duration::from_millis(250);

mod output;
use strata::dashboard::Steps;
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
    outln!("{value}");
}

pub(crate) fn started(output: &OutputArgs, info: &RunInfo, dir: &Path) {
    if mode(output) == Mode::Json {
        json_line(&json_lines::started(info, dir, How::Started));
    } else {
        outln!("run {} started: task `{}` ({})", info.run_id, esc(&info.task_id), esc(&info.goal));
        outln!("  data:      {}", esc(&dir.display().to_string()));
        outln!("  workspace: {}", esc(&info.workspace.display().to_string()));
    }
}

pub(crate) fn resumed(output: &OutputArgs, info: &RunInfo, dir: &Path) {
    if mode(output) == Mode::Json {
        json_line(&json_lines::started(info, dir, How::Resumed));
    } else {
        outln!("run {} resumed: task `{}` ({})", info.run_id, esc(&info.task_id), esc(&info.goal));
        outln!("  data:      {}", esc(&dir.display().to_string()));
        outln!("  workspace: {}", esc(&info.workspace.display().to_string()));
    }
}

pub(crate) fn already_finished(output: &OutputArgs, info: &RunInfo, dir: &Path) {
    if mode(output) == Mode::Json {
        json_line(&json_lines::finished_already(info, dir));
    } else {
        outln!(
            "run {} already finished ({}); nothing to resume. `strata inspect {}` shows it.",
            info.run_id,
            info.status.as_str(),
            info.run_id
        );
    }
}

pub(crate) fn interrupting(output: &OutputArgs) {
    if mode(output) != Mode::Json {
        errln!(
            "\ninterrupted: stopping the heartbeats and storing state, within a heartbeat (Ctrl-C again to stop at once)"
        );
    }
}

/// After [`interrupting`]: some turns were still in a tool call when the heartbeats stopped.
pub(crate) fn left_running(output: &OutputArgs) {
    if mode(output) != Mode::Json {
        errln!(
            "a tool call was still running: it was left to end on its own (a shell command at its timeout); `strata resume` takes its result instead of running it again"
        );
    }
}

pub(crate) fn interrupted(output: &OutputArgs, info: &RunInfo, dir: &Path) {
    if mode(output) == Mode::Json {
        json_line(&json_lines::interrupted(info, dir));
    } else {
        outln!(
            "run {} stopped; everything is stored. Continue it with: strata resume {}",
            info.run_id,
            info.run_id
        );
    }
}

/// The task that shows progress; [`Watcher::stop`] ends it after a last refresh.
pub(crate) struct Watcher {
    stop: watch::Sender<bool>,
    handle: JoinHandle<()>,
}

impl Watcher {
    /// Shows what the stream still holds, refreshes the live view a last time, and ends.
    pub(crate) async fn stop(self) {
        let _ = self.stop.send(true);
        let _ = self.handle.await;
    }
}

/// How many lines the live view's "recent" list shows.
const RECENT: usize = 6;

/// What the watcher has shown so far.
struct Shown {
    mode: Mode,
    /// When the run started (ms since the epoch): event times are relative to it.
    started_at: u64,
    /// The run id, for the hint after a lag.
    run_id: agent_state::RunId,
    /// The steps of the plan done in the records shown (the live view's counter).
    steps: Steps,
    /// The live view's last lines.
    recent: VecDeque<String>,
    /// The sequence numbers of the records shown: one that comes again (read from the log
    /// before the stream and received on it, or brought from a run's workers by the
    /// coordinator's bridge as well) is shown once.
    seen: std::collections::BTreeSet<u64>,
    /// What the models are writing (the live view's "model output").
    outputs: output::Outputs,
}

impl Shown {
    /// A text line: the line to print, or (live view) kept among the recent ones.
    fn line(&mut self, line: String) -> Option<String> {
        if self.mode == Mode::Lines {
            return Some(line);
        }
        if self.recent.len() == RECENT {
            self.recent.pop_front();
        }
        self.recent.push_back(line);
        None
    }

    fn audit(&mut self, record: &AuditRecord) -> Option<String> {
        if !self.seen.insert(record.seq) {
            return None;
        }
        let _ = self.steps.saw(record);
        match self.mode {
            Mode::Json => Some(json_lines::audit(record).to_string()),
            Mode::Lines | Mode::Live => self.line(event_line(record, self.started_at)),
        }
    }

    fn run(&mut self, agent: &AgentId, event: &RunEvent) -> Option<String> {
        match self.mode {
            Mode::Json => Some(json_lines::executor_run(agent, event).to_string()),
            Mode::Lines | Mode::Live => self.line(run_line(agent, event, self.started_at)),
        }
    }

    /// A piece of a model's answer: a `tokens` line in JSON, the agent's "model output" line
    /// in the live view; the plain lines leave them out (one event per piece would bury the
    /// records; what the answer led to is in them).
    fn tokens(&mut self, tokens: &agent_core::ModelTokens) -> Option<String> {
        match self.mode {
            Mode::Json => Some(json_lines::tokens(tokens).to_string()),
            Mode::Live => {
                self.outputs.record(tokens);
                None
            }
            Mode::Lines => None,
        }
    }

    fn lagged(&mut self, skipped: u64) -> Option<String> {
        match self.mode {
            Mode::Json => Some(json_lines::lagged(skipped).to_string()),
            Mode::Lines | Mode::Live => {
                self.line(lagged_line(skipped, &self.run_id, now_ms(), self.started_at))
            }
        }
    }

    /// What `received` shows: the line to print on stdout, if any (the live view keeps its
    /// lines and draws them on its next refresh).
    fn received(&mut self, received: &Received) -> Option<String> {
        match received {
            Received::Event(event) => match &**event {
                TeamEvent::Audit(record) => self.audit(record),
                TeamEvent::Run { agent, event } => self.run(agent, event),
                TeamEvent::Tokens(tokens) => self.tokens(tokens),
            },
            Received::Lagged(skipped) => self.lagged(*skipped),
            Received::Closed => None,
        }
    }
}

/// The most lines the view prints with one write, and the most events it takes from its
/// stream without waiting before it prints their lines.
const BURST: usize = 1024;

/// Prints the lines there are, [`BURST`] at a time with one write each: a team that moves many
/// agents at once (a large team starting or shutting down) publishes thousands of events
/// together, and a write each would cost a system call each.
fn print_lines(lines: impl IntoIterator<Item = Option<String>>) {
    let mut text = String::new();
    let mut count = 0;
    for line in lines.into_iter().flatten() {
        text.push_str(&line);
        text.push('\n');
        count += 1;
        if count == BURST {
            out!("{text}");
            text.clear();
            count = 0;
        }
    }
    if !text.is_empty() {
        out!("{text}");
    }
}

/// Shows `first` and the events that already wait behind it, at most [`BURST`] in all, with
/// one write ([`print_lines`]). Answers whether the stream is still open.
fn print_burst(shown: &mut Shown, events: &mut EventStream, first: Received) -> bool {
    let mut next = Some(first);
    let mut open = true;
    let mut taken = 0;
    print_lines(std::iter::from_fn(|| {
        let received = next.take()?;
        open = !matches!(received, Received::Closed);
        taken += 1;
        if open && taken < BURST {
            next = events.try_next();
        }
        Some(shown.received(&received))
    }));
    open
}

/// Shows the run as it goes: the team's event stream ([`Team::events`]), subscribed to before
/// this returns, after what the audit log already holds (the agents' creation, or a resumed
/// run's history). The view only reads the stream, on a thread of the blocking pool (a
/// terminal or pipe that is slow to take its lines holds up no runtime worker): a view that
/// falls behind skips events, and says so, but never slows an agent. The summary is read from
/// the store.
pub(crate) fn watch(
    team: Arc<Team>,
    services: TeamServices,
    task: Task,
    info: RunInfo,
    output: OutputArgs,
) -> Watcher {
    let (stop, stopped) = watch::channel(false);
    // Subscribed before the log is read: a record appended in between is read, received, or
    // both (then shown once).
    let events = team.events();
    let view = View { team, services, task, info, mode: mode(&output) };
    let runtime = tokio::runtime::Handle::current();
    let handle = tokio::task::spawn_blocking(move || runtime.block_on(view.show(events, stopped)));
    Watcher { stop, handle }
}

/// What the watcher shows.
struct View {
    team: Arc<Team>,
    services: TeamServices,
    task: Task,
    info: RunInfo,
    mode: Mode,
}

impl View {
    /// The log's records so far, then the events of `events` until `stopped` changes, then
    /// what the stream still holds.
    async fn show(self, mut events: EventStream, mut stopped: watch::Receiver<bool>) {
        let mut shown = Shown {
            mode: self.mode,
            started_at: self.info.started_at,
            run_id: self.info.run_id.clone(),
            steps: Steps::new(&self.task),
            recent: VecDeque::with_capacity(RECENT),
            seen: std::collections::BTreeSet::new(),
            outputs: output::Outputs::default(),
        };
        match self.services.audit.records(None).await {
            Ok(history) => {
                print_lines(history.iter().map(|r| shown.audit(r)));
            }
            Err(e) => {
                tracing::warn!(error = %e, "cannot read the audit log; showing new events only")
            }
        }
        let mut tick = tokio::time::interval(REFRESH);
        let mut open = true;
        loop {
            tokio::select! {
                biased;
                _ = stopped.changed() => break,
                received = events.next(), if open => {
                    open = print_burst(&mut shown, &mut events, received);
                }
                _ = tick.tick(), if self.mode == Mode::Live => self.live(&mut shown).await,
            }
        }
        // What was published before the stop is waiting: show it.
        print_lines(
            std::iter::from_fn(|| events.try_next().filter(|r| !matches!(r, Received::Closed)))
                .map(|received| shown.received(&received)),
        );
        if self.mode == Mode::Live {
            self.live(&mut shown).await;
        }
    }

    /// The live screen: where the task stands, the agents, the decisions, the model's
    /// output and the recent events, drawn again from the top.
    async fn live(&self, shown: &mut Shown) {
        let (task, info) = (&self.task, &self.info);
        let mut out = String::from("\x1b[H\x1b[2J");
        let elapsed = now_ms().saturating_sub(info.started_at) as f64 / 1000.0;
        let decisions = self.services.governance.list().await.ok();
        // Where the task stands at the agent that took it, its proposing power (a crew's lead,
        // a single agent), in this process; none when agents run on workers.
        shown.steps.power(strata::dashboard::team_power(&self.team, &task.id));
        let steps = shown.steps.line(&task.id, decisions.as_deref().unwrap_or_default());
        out.push_str(&format!(
            "strata · run {} · task `{}` · {elapsed:.1}s · {steps}\n\n",
            info.run_id,
            esc(&task.id)
        ));
        self.agent_lines(&mut out);
        if let Some(decisions) = decisions {
            decision_lines(&mut out, &decisions, &info.run_id);
        }
        let outputs = output::lines(&shown.outputs);
        if !outputs.is_empty() {
            out.push_str("\nmodel output:\n");
            for line in outputs {
                out.push_str(&format!("  {line}\n"));
            }
        }
        out.push_str("\nrecent:\n");
        for line in &shown.recent {
            out.push_str(&format!("  {line}\n"));
        }
        let mut stdout = std::io::stdout().lock();
        if let Err(e) = stdout.write_all(out.as_bytes()).and_then(|()| stdout.flush()) {
            crate::stdout_failed(&e);
        }
    }

    /// The agents of this process as a tree, each with its status and current work.
    fn agent_lines(&self, out: &mut String) {
        let slots = self.team.pool().all();
        if slots.is_empty() {
            out.push_str(&format!(
                "the agents run on workers (`strata worker`); `strata inspect {} tree` shows them\n",
                self.info.run_id
            ));
        }
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
        // A single agent has no lead above it.
        for alone in
            slots.iter().filter(|s| s.layer() == AgentLayer::Bottom && s.supervisor().is_none())
        {
            out.push_str(&line(alone, ""));
        }
        for mid in slots.iter().filter(|s| s.layer() == AgentLayer::Mid) {
            out.push_str(&line(mid, "  "));
            for bottom in slots.iter().filter(|s| s.supervisor() == Some(mid.id())) {
                out.push_str(&line(bottom, "    "));
            }
        }
    }
}

/// The decisions on the live screen, with how a human approves one that waits for them.
fn decision_lines(out: &mut String, decisions: &[agent_state::Decision], run_id: &str) {
    out.push_str("\ndecisions:\n");
    for d in decisions {
        let signed: Vec<&str> = d.signatures.iter().map(|s| s.signer.as_str()).collect();
        out.push_str(&format!(
            "  {} {:<9} signed by [{}]\n",
            short_id(&d.id.to_string()),
            d.status.as_str(),
            signed.join(", ")
        ));
        if d.status == agent_state::DecisionStatus::Pending
            && let Some(humans) = d.human_approval.as_ref().filter(|_| d.needs_human())
        {
            out.push_str(&format!(
                "    waiting for a human ({}): strata approve {} {} --as NAME\n",
                humans.allowed.join(", "),
                run_id,
                d.id
            ));
        }
    }
}

/// What the view says when it fell behind the team and the stream dropped `skipped` events.
pub(crate) fn lagged_line(skipped: u64, run_id: &str, now: u64, start: u64) -> String {
    let t = now.saturating_sub(start) as f64 / 1000.0;
    esc(&format!(
        "[{t:>7.2}s] {:<12} skipped {skipped} event(s): the view fell behind; \
         `strata inspect {run_id} audit` lists every record",
        "(view)"
    ))
    .into_owned()
}

/// How many lines of a step's output the summary shows.
pub(crate) const SUMMARY_OUTPUT_LINES: usize = 6;

/// A tool's `output` as the summary shows it: its lines (surrounding blank space trimmed), each
/// escaped, at most `max`; when there are more, the last shown is `… N more lines` in their
/// place.
pub(crate) fn output_lines(output: &str, max: usize) -> Vec<String> {
    let all: Vec<&str> = output.trim().lines().map(str::trim_end).collect();
    if all.len() <= max {
        return all.iter().map(|l| esc(l).into_owned()).collect();
    }
    let kept = max.saturating_sub(1);
    let mut lines: Vec<String> = all[..kept].iter().map(|l| esc(l).into_owned()).collect();
    let left = all.len() - kept;
    lines.push(format!("… {left} more line{}", if left == 1 { "" } else { "s" }));
    lines
}

/// The summary of a run that ended with an outcome (`--json`: one `run_finished` line).
pub(crate) fn summary(output: &OutputArgs, summary: &Summary, ended: &Ended) {
    let Ended { info, dir, task, .. } = ended;
    if mode(output) == Mode::Json {
        json_line(&json_lines::finished(summary, ended));
        return;
    }
    outln!();
    outcome_lines(summary, task);
    layer_lines(summary);
    agent_table(&summary.agents);
    outln!(
        "\nrun {}: data in {}, workspace {}",
        info.run_id,
        esc(&dir.display().to_string()),
        esc(&info.workspace.display().to_string())
    );
    outln!(
        "inspect it with: strata inspect {} [tree|audit|messages|whiteboards|decisions|metrics|usage|calls|timeline|results]",
        info.run_id
    );
}

/// The outcome, with the first lines of each step's result.
fn outcome_lines(summary: &Summary, task: &Task) {
    let duration = summary.duration_s;
    match &summary.outcome {
        TaskOutcome::Succeeded { results, .. } => {
            outln!(
                "task `{}` succeeded in {duration:.1}s ({} steps)",
                esc(&task.id),
                results.len()
            );
            for r in results {
                let lines = output_lines(&r.output, SUMMARY_OUTPUT_LINES);
                let mut lines = lines.iter();
                outln!(
                    "  {:<16} by {:<12} {}",
                    esc(&r.step_id),
                    r.agent.as_str(),
                    lines.next().map(String::as_str).unwrap_or_default()
                );
                for line in lines {
                    outln!("{:35}{line}", "");
                }
            }
        }
        TaskOutcome::Failed { reason, .. } => {
            outln!(
                "task `{}` FAILED after {duration:.1}s: {}",
                esc(&task.id),
                esc(&reason.to_string())
            )
        }
    }
}

/// What each layer did, the retries and failures, the files written and the decisions.
fn layer_lines(summary: &Summary) {
    let sum = |layer, metric| summary.layer_sum(layer, metric);
    // A crew has no top layer, a single agent no mid layer either: nothing to say of them.
    let has = |layer| summary.agents.iter().any(|a| a.layer == layer);
    if has(AgentLayer::Top) {
        outln!(
            "top layer:    {} signatures, {} vetoes, {} arbitrations, {} task(s) succeeded",
            sum(AgentLayer::Top, |m| m.decisions_signed),
            sum(AgentLayer::Top, |m| m.decisions_vetoed),
            sum(AgentLayer::Top, |m| m.conflicts_arbitrated),
            sum(AgentLayer::Top, |m| m.tasks_completed)
        );
    }
    if has(AgentLayer::Mid) {
        outln!("mid layer:    {} messages handled", sum(AgentLayer::Mid, |m| m.messages_processed));
    }
    outln!(
        "bottom layer: {} steps completed, {} failed",
        sum(AgentLayer::Bottom, |m| m.tasks_completed),
        sum(AgentLayer::Bottom, |m| m.tasks_failed)
    );
    outln!("retries: {}, failures: {}", summary.retries(), summary.failures());
    let files = &summary.files_written;
    outln!(
        "files written: {}",
        if files.is_empty() { "none".to_owned() } else { esc(&files.join(", ")).into_owned() }
    );
    for d in &summary.decisions {
        let signed: Vec<&str> = d.signatures.iter().map(|s| s.signer.as_str()).collect();
        let vetoed = d
            .vetoes
            .first()
            .map(|v| format!(", vetoed by {}: {}", v.vetoer, esc(&v.reason)))
            .unwrap_or_default();
        outln!(
            "decision {} {}{} (signed by {})",
            short_id(&d.id.to_string()),
            d.status.as_str(),
            vetoed,
            if signed.is_empty() { "nobody".to_owned() } else { signed.join(", ") }
        );
    }
}

/// Every agent's stored metrics (Team::summary), as `inspect RUN metrics` and the dashboard
/// show them.
fn agent_table(agents: &[agent_pool::AgentSummary]) {
    outln!(
        "\n{:<14} {:<7} {:<11} {:>5} {:>5} {:>6} {:>7} {:>7} {:>6}",
        "agent",
        "layer",
        "status",
        "done",
        "fail",
        "beats",
        "missed",
        "retries",
        "score"
    );
    // A row a line, written a burst at a time: a large team's table has a row per agent.
    print_lines(agents.iter().map(|a| {
        Some(format!(
            "{:<14} {:<7} {:<11} {:>5} {:>5} {:>6} {:>7} {:>7} {:>6.1}",
            a.id.as_str(),
            a.layer.as_str(),
            a.status.as_str(),
            a.metrics.tasks_completed,
            a.metrics.tasks_failed,
            a.metrics.heartbeats_responded,
            a.metrics.heartbeats_missed,
            a.metrics.retries,
            a.score
        ))
    }));
}
