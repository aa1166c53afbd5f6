//! `strata inspect` and `strata verify`: read a stored run without running it, and print it.
//!
//! What is read, and how, is the engine's ([`strata::audit`]): a private copy of the run's
//! database, and for a run on NATS its server; so are the `--json` documents. This module
//! parses the view asked for and renders it as text, or prints the engine's JSON.
//!
//! `tree` and `results` are drawn by [`spawns`] from what [`strata::audit::spawns`] reads.

use std::path::Path;

use agent_state::Actor;
use run_store::RunStore;
use strata::Stores;
use strata::audit::Check;
use strata::run_dir::{RunInfo, resolve_run};
use team_file::escape_controls as esc;

use crate::cli::{InspectArgs, VerifyArgs, View};
use crate::{Failure, bad_input};
use strata::lines::event_line;

pub(crate) mod calls;
pub(crate) mod spawns;
#[cfg(test)]
mod tests;
pub(crate) mod timeline;

use spawns::TreeView as _;

/// What a view is shown from: the run's directory, its `run.json`, the copy of its database
/// and whether `--json` was asked for.
struct Shown<'a> {
    dir: &'a Path,
    info: &'a RunInfo,
    store: &'a RunStore,
    json: bool,
}

impl Shown<'_> {
    /// The run's bus, boards, decisions, audit log and agents: in the copy, or on the run's
    /// NATS server (connected only for the views that read them).
    async fn stores(&self) -> Result<Stores, Failure> {
        Ok(Stores::of_run(self.store, self.dir, self.info).await?)
    }
}

/// `strata inspect RUN [VIEW]`.
pub(crate) async fn inspect(args: &InspectArgs) -> Result<(), Failure> {
    if args.view == View::Lineage {
        return crate::evolve::inspect(&args.data, &args.run, args.json).await;
    }
    if !matches!(args.view, View::Calls | View::Timeline) && (args.agent.is_some() || args.full) {
        return Err(bad_input(anyhow::anyhow!(
            "an agent and --full go with the `calls` and `timeline` views only (strata inspect RUN calls [AGENT] [--full])"
        )));
    }
    let dir = resolve_run(&args.data, &args.run)?;
    let info = RunInfo::read(&dir).map_err(bad_input)?;
    let store = strata::audit::open(&dir)?;
    let shown = Shown { dir: &dir, info: &info, store: &store, json: args.json };
    match args.view {
        // An evolution, not a team run (taken above, before its directory is read as a run's).
        View::Lineage => crate::evolve::inspect(&args.data, &args.run, args.json).await,
        View::Tree => tree(&shown).await,
        View::Audit => audit(&shown).await,
        View::Messages if info.nats.is_some() => nats_messages(&dir, &info, args.json).await,
        View::Messages => messages(&store, args.json),
        View::Whiteboards => whiteboards(&shown).await,
        View::Decisions => decisions(&shown).await,
        View::Metrics => metrics(&shown).await,
        View::Usage => usage(&dir, &store, &info, args.json),
        View::Calls => model_calls(&dir, &store, &info, args),
        View::Timeline => timeline(&shown, args).await,
        View::Results => results(&dir, &shown.stores().await?, args.json).await,
    }
}

/// `inspect audit`: every record of the audit log, one line each.
async fn audit(shown: &Shown<'_>) -> Result<(), Failure> {
    let records = shown.stores().await?.audit.records(None).await?;
    if shown.json {
        outln!("{}", serde_json::to_string_pretty(&records)?);
    } else {
        for r in &records {
            outln!("{:>5} {}", r.seq, event_line(r, shown.info.started_at));
        }
    }
    Ok(())
}

/// `inspect messages`: every message of the run, acknowledged or not, in send order.
fn messages(store: &RunStore, json: bool) -> Result<(), Failure> {
    let all = strata::audit::messages(store)?;
    if json {
        outln!("{}", serde_json::to_string_pretty(&strata::audit::messages_json(&all))?);
        return Ok(());
    }
    if all.is_empty() {
        outln!("no messages");
        return Ok(());
    }
    let waiting = all.iter().filter(|m| !m.acknowledged).count();
    outln!(
        "{} messages, {} acknowledged, {waiting} not acknowledged",
        all.len(),
        all.len() - waiting
    );
    outln!("{:>6} {:<14} {:<14} {:<26} {:<5} content", "seq", "inbox", "from", "kind", "acked");
    for m in &all {
        outln!(
            "{:>6} {:<14} {:<14} {:<26} {:<5} {}",
            m.seq,
            m.inbox.as_str(),
            m.message.from.as_str(),
            m.message.kind.as_str(),
            if m.acknowledged { "yes" } else { "NO" },
            esc(&m.message.content.to_string())
        );
    }
    Ok(())
}

/// `inspect whiteboards`: every board with its content.
async fn whiteboards(shown: &Shown<'_>) -> Result<(), Failure> {
    let boards = shown.stores().await?.boards.list(&Actor::System).await?;
    if shown.json {
        outln!("{}", serde_json::to_string_pretty(&boards)?);
    } else {
        for b in boards {
            let layer = b.layer.map(|l| l.to_string()).unwrap_or_else(|| "global".into());
            outln!("=== {} ({layer}, version {}) ===", b.board, b.version);
            outln!("{}\n", if b.content.is_empty() { "(empty)" } else { &b.content });
        }
    }
    Ok(())
}

/// `inspect decisions`: every decision with its signatures, human approval and vetoes.
async fn decisions(shown: &Shown<'_>) -> Result<(), Failure> {
    let decisions = shown.stores().await?.governance.list().await?;
    if shown.json {
        outln!("{}", serde_json::to_string_pretty(&decisions)?);
        return Ok(());
    }
    if decisions.is_empty() {
        outln!("no decisions");
    }
    for d in decisions {
        outln!("decision {} by {}: {}", d.id, d.proposer, d.status);
        outln!(
            "  required: {}",
            d.required_signers.iter().map(|s| s.as_str()).collect::<Vec<_>>().join(", ")
        );
        for s in &d.signatures {
            outln!("  signed by {} at {}", s.signer, s.at);
        }
        if let Some(h) = &d.human_approval {
            let state = if d.needs_human() { "waiting" } else { "given" };
            outln!("  needs one human ({state}): {}", h.allowed.join(", "));
        }
        for v in &d.vetoes {
            outln!("  vetoed by {}: {}", v.vetoer, v.reason);
        }
        outln!("  content: {}", d.content);
    }
    Ok(())
}

/// `inspect metrics`: each agent's counters and score.
async fn metrics(shown: &Shown<'_>) -> Result<(), Failure> {
    // The one source of these numbers, as the run summary and the dashboard show them.
    let agents = agent_pool::stored_metrics(shown.stores().await?.state.as_ref()).await?;
    if shown.json {
        outln!("{}", serde_json::to_string_pretty(&agents)?);
        return Ok(());
    }
    outln!(
        "{:<14} {:>5} {:>5} {:>6} {:>6} {:>7} {:>7} {:>6}",
        "agent",
        "done",
        "fail",
        "msgs",
        "beats",
        "missed",
        "retries",
        "score"
    );
    for a in agents {
        let m = &a.metrics;
        outln!(
            "{:<14} {:>5} {:>5} {:>6} {:>6} {:>7} {:>7} {:>6.1}",
            a.agent.as_str(),
            m.tasks_completed,
            m.tasks_failed,
            m.messages_processed,
            m.heartbeats_responded,
            m.heartbeats_missed,
            m.retries,
            a.score
        );
    }
    Ok(())
}

/// `inspect timeline [AGENT]`: each piece of work of the run ([`mod@timeline`]).
async fn timeline(shown: &Shown<'_>, args: &InspectArgs) -> Result<(), Failure> {
    let info = shown.info;
    let sources = strata::audit::timeline::Sources::read(shown.dir, shown.store, info).await?;
    let entries = sources.entries(args.agent.as_deref());
    if args.json {
        let json = strata::audit::timeline::json(&entries, info.started_at, &sources.calls);
        outln!("{}", serde_json::to_string_pretty(&json)?);
        return Ok(());
    }
    if info.nats.is_some() {
        outln!(
            "(a run on NATS keeps no message history: its plan steps are not listed, only spawned agents' work)"
        );
    }
    if entries.is_empty() {
        outln!("no step was handed out in this run");
    } else {
        let text = timeline::plain(&entries, info.started_at, args.full, &sources.calls);
        outln!("{}", text.trim_end());
    }
    Ok(())
}

/// `inspect messages` of a run on NATS: the server deletes a message once it is acknowledged,
/// so there is no history to show; what is still in the inboxes (every inbox, the agents'
/// whether registered or not) is counted, by kind ([`strata::audit::waiting`]).
async fn nats_messages(dir: &Path, info: &RunInfo, json: bool) -> Result<(), Failure> {
    let url = info.nats.as_deref().unwrap_or_default();
    let waiting = strata::audit::waiting(dir, info).await?;
    if json {
        let json = strata::audit::waiting_json(url, &waiting);
        outln!("{}", serde_json::to_string_pretty(&json)?);
        return Ok(());
    }
    outln!(
        "run {} keeps its messages on the NATS server {url}, which deletes each message once it is acknowledged: there is no history of them to show (`strata inspect {} audit` shows what the agents did)",
        info.run_id,
        info.run_id
    );
    if waiting.is_empty() {
        outln!("no message is waiting in an inbox");
        return Ok(());
    }
    outln!("{:<14} {:<17} kinds", "inbox", "not acknowledged");
    for w in &waiting {
        let kinds = match &w.kinds {
            Ok(kinds) => {
                kinds.iter().map(|(kind, k)| format!("{kind} {k}")).collect::<Vec<_>>().join(", ")
            }
            Err(e) => format!("(cannot be read: {})", esc(e)),
        };
        outln!("{:<14} {:<17} {kinds}", esc(&w.inbox), w.held);
    }
    Ok(())
}

/// `inspect usage`: the run's usage ledger, per agent, layer and model, with the budget.
fn usage(dir: &Path, store: &RunStore, info: &RunInfo, json: bool) -> Result<(), Failure> {
    let usage = strata::audit::usage(dir, store, info)?;
    let (reasoner, Some(report)) = (&usage.reasoner, &usage.report) else {
        let reasoner = &usage.reasoner;
        if json {
            outln!("{}", usage.json());
        } else if reasoner == "rule-based" {
            outln!(
                "reasoner: {reasoner}; no model usage is recorded for this run (the rule-based reasoner calls no model)"
            );
        } else {
            outln!(
                "reasoner: {reasoner}; no model usage is recorded for this run (no model call was made)"
            );
        }
        return Ok(());
    };
    if json {
        outln!("{}", serde_json::to_string_pretty(&usage.json())?);
        return Ok(());
    }
    outln!("reasoner: {reasoner}");
    usage_tables(report);
    usage_budget(report);
    Ok(())
}

/// The usage ledger's tables: per agent, layer and model, and the total.
fn usage_tables(report: &agent_llm::UsageReport) {
    let header = || {
        outln!(
            "  {:<28} {:>6} {:>6} {:>10} {:>10} {:>10} {:>6}",
            "",
            "calls",
            "failed",
            "tokens in",
            "tokens out",
            "cost $",
            "429s"
        );
    };
    let row = |name: &str, t: &agent_llm::Tally| {
        outln!(
            "  {:<28} {:>6} {:>6} {:>10} {:>10} {:>10.4} {:>6}",
            name,
            t.calls,
            t.failed_calls,
            t.input_tokens,
            t.output_tokens,
            t.cost_usd,
            t.rate_limit_waits
        );
    };
    for (title, group) in [
        ("per agent", &report.by_agent),
        ("per layer", &report.by_layer),
        ("per model", &report.by_model),
    ] {
        outln!("{title}");
        header();
        for (name, tally) in group {
            row(name, tally);
        }
    }
    outln!("total");
    row("all", &report.total);
}

/// The usage ledger's structured output modes, unpriced models, budget, wall time and stop.
fn usage_budget(report: &agent_llm::UsageReport) {
    if !report.structured_output.is_empty() {
        outln!("structured output (mode in use, and the modes the server refused)");
        for (model, choice) in &report.structured_output {
            outln!("  {model}: {choice}");
        }
    }
    if !report.unpriced_models.is_empty() {
        outln!(
            "no price for: {} (counted as $0; set them in the team file's [prices] table)",
            report.unpriced_models.join(", ")
        );
    }
    let b = &report.budget;
    let limit = |v: Option<String>| v.unwrap_or_else(|| "-".into());
    outln!(
        "budget: tokens {} · cost ${} · wall {} · calls {} · on exceed: {}",
        limit(b.max_tokens.map(|v| v.to_string())),
        limit(b.max_cost_usd.map(|v| format!("{v:.4}"))),
        limit(b.max_wall.map(|w| format!("{:.0}s", w.as_secs_f64()))),
        limit(b.max_calls.map(|v| v.to_string())),
        match b.on_exceed {
            agent_llm::OnExceed::Stop => "stop",
            agent_llm::OnExceed::AskTop => "ask the top layer",
            agent_llm::OnExceed::AskHuman => "ask a human",
        }
    );
    outln!(
        "wall time {:.1}s · extensions approved: {}",
        report.wall_ms as f64 / 1000.0,
        report.extensions.len()
    );
    if let Some(stop) = &report.stopped {
        outln!("stopped: {stop}");
    }
}

/// `inspect calls [AGENT]`: every model call the run recorded ([`calls`]).
fn model_calls(
    dir: &Path,
    store: &RunStore,
    info: &RunInfo,
    args: &InspectArgs,
) -> Result<(), Failure> {
    let found = strata::audit::model_calls(store, info, args.agent.as_deref())?;
    let (records, all) = (&found.shown, &found.all);
    if args.json {
        outln!("{}", serde_json::to_string_pretty(&strata::audit::calls_json(records, all))?);
    } else if records.is_empty() {
        let reasoner = strata::audit::reasoner_kinds(dir, info);
        outln!("reasoner: {reasoner}; no model call is recorded for this run");
    } else {
        outln!("{}", calls::plain(records, all, args.full).trim_end());
    }
    Ok(())
}

/// `inspect tree`: the configured agents and those spawned under them, with status, task,
/// results, dismissal and cost (when the run has a usage ledger).
async fn tree(shown: &Shown<'_>) -> Result<(), Failure> {
    let (dir, info) = (shown.dir, shown.info);
    let found = strata::audit::tree(dir, shown.store, &shown.stores().await?).await?;
    if shown.json {
        outln!("{}", found.json(info));
        return Ok(());
    }
    let strata::audit::Tree { tree, damage } = found;
    outln!("run {} · task `{}` · {}", info.run_id, info.task_id, info.status.as_str());
    if info.unsandboxed {
        outln!("sandbox: off (--unsandboxed): shell commands ran without a sandbox");
    }
    out!("{}", tree.render());
    for line in &damage {
        outln!("warning: {line}");
    }
    if !damage.is_empty() {
        outln!(
            "warning: the statuses above come from a damaged audit log; `strata verify {}` says more",
            info.run_id
        );
    }
    Ok(())
}

/// `inspect results`: every structured result agents returned, in order.
async fn results(dir: &Path, stores: &Stores, json: bool) -> Result<(), Failure> {
    let records = stores.audit.records(None).await?;
    // The configured agents' roles, if the team file can be read; spawned agents' roles come
    // from the audit log.
    let roles = strata::audit::configured_roles(dir);
    let results = strata::audit::spawns::results(&records, &roles);
    if json {
        outln!("{}", serde_json::to_string_pretty(&strata::audit::spawns::results_json(&results))?);
    } else {
        out!("{}", spawns::render_results(&results));
    }
    Ok(())
}

/// `strata verify RUN`: exit 0 when everything checks, 1 when something is broken.
pub(crate) async fn verify(args: &VerifyArgs) -> Result<u8, Failure> {
    let dir = resolve_run(&args.data, &args.run)?;
    let found = strata::audit::verify(&dir).await?;
    if args.json {
        outln!("{}", found.json(&dir));
    } else {
        for Check { name, result } in &found.checks {
            match result {
                Ok(detail) => outln!("ok      {name}: {detail}"),
                Err(error) => outln!("BROKEN  {name}: {error}"),
            }
        }
        outln!("{}", found.verdict());
    }
    Ok(if found.broken() { crate::TASK_FAILED } else { 0 })
}
