//! `strata inspect` and `strata verify`: read a stored run without running it.
//!
//! Both read a private copy of the run's database ([`RunStore::open_read_only`]): nothing in the
//! run directory is opened for writing, locked, recovered or unsealed, so they work on a
//! read-only directory and on a run that a live process is writing (they then show the run as
//! it was while it was copied).
//!
//! `tree` and `results` are drawn from the audit log by the pure functions of [`spawns`].

use std::collections::HashMap;
use std::path::Path;

use agent_core::{
    AnchorBreak, AuditAnchor, AuditLog, AuditRecord, CostMeter, SledAuditLog, SledStateStore,
    StateStore, check_anchors, check_transition_chain, verify_chain,
};
use agent_state::{Actor, AgentId};
use anyhow::Context;
use governance::{Governance, SledGovernance};
use message_bus::{MessageBus, SledBus};
use run_store::RunStore;
use team_file::escape_controls as esc;
use whiteboard::{SledWhiteboard, Whiteboard};

use crate::cli::{InspectArgs, VerifyArgs, View};
use crate::run::{RunInfo, TEAM_FILE, resolve_run};
use crate::view::event_line;
use crate::{Failure, bad_input};

mod spawns;
#[cfg(test)]
mod tests;

/// Opens a private copy of the run: nothing in `dir` changes (see the module docs).
fn open(dir: &Path) -> Result<RunStore, Failure> {
    RunStore::open_read_only(dir).map_err(bad_input)
}

/// The audit log's anchors (the seal's and each agent's) compared with `records`, and what
/// protects the log, in words.
async fn anchors(
    store: &RunStore,
    records: &[AuditRecord],
) -> anyhow::Result<(Vec<AnchorBreak>, String)> {
    let sealed = SledAuditLog::sealed_anchor(store)?;
    let agents: Vec<(agent_state::AgentId, AuditAnchor)> = SledStateStore::open(store)?
        .agents()
        .await?
        .into_iter()
        .filter_map(|a| a.audit_head.map(|head| (a.id, head)))
        .collect();
    let breaks = check_anchors(records, sealed, &agents);
    let protection = match (sealed, agents.len()) {
        (Some(seal), n) => format!(
            "hash chain anchored in seal + agent records (the seal anchors the final {seal}; {n} agent records anchor their last records)"
        ),
        (None, 0) if store.was_sealed() => "hash chain only: the seal has no audit anchor and no agent record has one (written by an older strata); records cut from the end cannot be detected".to_owned(),
        (None, 0) => "hash chain only: the run is not sealed and no agent record anchors the log; records cut from the end cannot be detected".to_owned(),
        (None, n) if store.was_sealed() => format!(
            "hash chain anchored in agent records ({n}; the seal, written by an older strata, has no audit anchor)"
        ),
        (None, n) => format!(
            "hash chain anchored in agent records ({n}, lower bounds; the run is not sealed: running, or it did not close cleanly)"
        ),
    };
    Ok((breaks, protection))
}

/// `strata inspect RUN [VIEW]`.
pub(crate) async fn inspect(args: &InspectArgs) -> Result<(), Failure> {
    if args.view == View::Lineage {
        return crate::evolve::inspect(&args.data, &args.run, args.json).await;
    }
    let dir = resolve_run(&args.data, &args.run)?;
    let info = RunInfo::read(&dir).map_err(bad_input)?;
    let store = open(&dir)?;
    match args.view {
        // An evolution, not a team run (taken above, before its directory is read as a run's).
        View::Lineage => crate::evolve::inspect(&args.data, &args.run, args.json).await,
        View::Tree => tree(&dir, &store, &info, args.json).await,
        View::Audit => {
            let records = SledAuditLog::open(&store)?.records(None).await?;
            if args.json {
                outln!("{}", serde_json::to_string_pretty(&records)?);
            } else {
                for r in &records {
                    outln!("{:>5} {}", r.seq, event_line(r, info.started_at));
                }
            }
            Ok(())
        }
        View::Messages => {
            // Every message of the run, acknowledged or not, in send order.
            let all = SledBus::open(&store)?.history()?;
            if args.json {
                let json: Vec<_> = all
                    .iter()
                    .map(|m| {
                        serde_json::json!({
                            "seq": m.seq,
                            "inbox": m.inbox,
                            "acknowledged": m.acknowledged,
                            "message": m.message,
                        })
                    })
                    .collect();
                outln!("{}", serde_json::to_string_pretty(&json)?);
            } else if all.is_empty() {
                outln!("no messages");
            } else {
                let waiting = all.iter().filter(|m| !m.acknowledged).count();
                outln!(
                    "{} messages, {} acknowledged, {waiting} not acknowledged",
                    all.len(),
                    all.len() - waiting
                );
                outln!(
                    "{:>6} {:<14} {:<14} {:<26} {:<5} content",
                    "seq",
                    "inbox",
                    "from",
                    "kind",
                    "acked"
                );
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
            }
            Ok(())
        }
        View::Whiteboards => {
            let boards = SledWhiteboard::open(&store)?.list(&Actor::System).await?;
            if args.json {
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
        View::Decisions => {
            let decisions = SledGovernance::open(&store)?.list().await?;
            if args.json {
                outln!("{}", serde_json::to_string_pretty(&decisions)?);
            } else if decisions.is_empty() {
                outln!("no decisions");
            } else {
                for d in decisions {
                    outln!("decision {} by {}: {}", d.id, d.proposer, d.status);
                    outln!(
                        "  required: {}",
                        d.required_signers
                            .iter()
                            .map(|s| s.as_str())
                            .collect::<Vec<_>>()
                            .join(", ")
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
            }
            Ok(())
        }
        View::Metrics => {
            let agents = SledStateStore::open(&store)?.agents().await?;
            if args.json {
                let json: Vec<_> = agents
                    .iter()
                    .map(|a| serde_json::json!({"agent": a.id, "metrics": a.metrics, "score": a.metrics.performance_score(), "retries": a.retries}))
                    .collect();
                outln!("{}", serde_json::to_string_pretty(&json)?);
            } else {
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
                        a.id.as_str(),
                        m.tasks_completed,
                        m.tasks_failed,
                        m.messages_processed,
                        m.heartbeats_responded,
                        m.heartbeats_missed,
                        m.retries,
                        m.performance_score()
                    );
                }
            }
            Ok(())
        }
        View::Usage => usage(&dir, &store, &info, args.json),
        View::Results => results(&dir, &store, args.json).await,
    }
}

/// The reasoners a run's agents used, such as `rule-based` or `openai, rule-based`: the
/// `--reasoner` override, else the kinds in the run's team file (its default, for the agents
/// without their own, and the agents' own).
fn reasoner_kinds(dir: &Path, info: &RunInfo) -> String {
    if let Some(kind) = &info.reasoner {
        return kind.clone();
    }
    let tools = agent_core::tools::ToolRegistry::with_builtins();
    let path = dir.join(TEAM_FILE);
    let team = std::fs::read_to_string(&path)
        .ok()
        .and_then(|text| team_file::parse_stored_team(&path, &text, &tools).ok());
    let Some(team) = team else {
        return format!("unknown ({} cannot be read)", path.display());
    };
    let mut kinds: Vec<&str> = team
        .spec
        .agents
        .iter()
        .map(|a| team.agent_reasoners.get(&a.config.id).unwrap_or(&team.default_reasoner))
        .map(|s| s.kind.as_str())
        .collect();
    kinds.sort_unstable();
    kinds.dedup();
    kinds.join(", ")
}

/// `inspect usage`: the run's usage ledger, per agent, layer and model, with the budget.
fn usage(dir: &Path, store: &RunStore, info: &RunInfo, json: bool) -> Result<(), Failure> {
    let report = agent_llm::LlmStore::load_usage(&agent_llm::SledLlmStore::open(store)?)?;
    let reasoner = reasoner_kinds(dir, info);
    let Some(report) = report else {
        if json {
            outln!("{}", serde_json::json!({"reasoner": reasoner, "usage": null}));
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
        outln!(
            "{}",
            serde_json::to_string_pretty(
                &serde_json::json!({"reasoner": reasoner, "usage": report})
            )?
        );
        return Ok(());
    }
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
    outln!("reasoner: {reasoner}");
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
    Ok(())
}

/// Each agent's own cost from a stored usage ledger, priced with the run's price table.
struct StoredCosts {
    report: agent_llm::UsageReport,
    prices: agent_llm::PriceTable,
}

impl CostMeter for StoredCosts {
    fn cost_usd(&self, agent: &AgentId) -> Option<f64> {
        self.report.agent_cost_usd(agent.as_str(), &self.prices)
    }
}

/// `inspect tree`: the configured agents and those spawned under them, with status, task,
/// results, dismissal and cost (when the run has a usage ledger).
async fn tree(dir: &Path, store: &RunStore, info: &RunInfo, json: bool) -> Result<(), Failure> {
    let tools = agent_core::tools::ToolRegistry::with_builtins();
    let team_path = dir.join(TEAM_FILE);
    let text = std::fs::read_to_string(&team_path)
        .with_context(|| format!("cannot read {}", team_path.display()))?;
    let team = team_file::parse_stored_team(&team_path, &text, &tools).map_err(bad_input)?;
    let records = SledAuditLog::open(store)?.records(None).await?;
    let (breaks, _) = anchors(store, &records).await?;
    let mut damage: Vec<String> = breaks.iter().map(ToString::to_string).collect();
    if let Err(e) = verify_chain(&records) {
        damage.push(e.to_string());
    }
    let usage = agent_llm::LlmStore::load_usage(&agent_llm::SledLlmStore::open(store)?)?;
    let costs = usage.map(|report| StoredCosts { report, prices: team.prices.clone() });
    let configured = team
        .spec
        .agents
        .iter()
        .map(|a| spawns::Configured {
            id: a.config.id.clone(),
            layer: a.config.layer,
            supervisor: a.config.supervisor.clone(),
            role: team.spec.agent_roles.get(&a.config.id).cloned(),
        })
        .collect();
    let tree =
        spawns::SpawnTree::build(configured, &records, costs.as_ref().map(|c| c as &dyn CostMeter));
    if json {
        outln!(
            "{}",
            serde_json::json!({"run_id": info.run_id, "status": info.status, "task": info.task_id, "sandbox": if info.unsandboxed { "off" } else { "on" }, "agents": tree.json(), "spawned": tree.spawned(), "audit_damage": damage})
        );
        return Ok(());
    }
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
async fn results(dir: &Path, store: &RunStore, json: bool) -> Result<(), Failure> {
    let records = SledAuditLog::open(store)?.records(None).await?;
    // The configured agents' roles, if the team file can be read; spawned agents' roles come
    // from the audit log.
    let tools = agent_core::tools::ToolRegistry::with_builtins();
    let path = dir.join(TEAM_FILE);
    let roles: HashMap<AgentId, String> = std::fs::read_to_string(&path)
        .ok()
        .and_then(|text| team_file::parse_stored_team(&path, &text, &tools).ok())
        .map(|team| team.spec.agent_roles.into_iter().collect())
        .unwrap_or_default();
    let results = spawns::results(&records, &roles);
    if json {
        outln!("{}", serde_json::to_string_pretty(&spawns::results_json(&results))?);
    } else {
        out!("{}", spawns::render_results(&results));
    }
    Ok(())
}

/// `strata verify RUN`: exit 0 when everything checks, 1 when something is broken.
pub(crate) async fn verify(args: &VerifyArgs) -> Result<u8, Failure> {
    let dir = resolve_run(&args.data, &args.run)?;
    let store = open(&dir)?;
    let mut checks: Vec<(&str, Result<String, String>)> = Vec::new();
    checks.push((
        "store",
        Ok(if store.was_sealed() {
            "closed cleanly; the database matches its seal".to_owned()
        } else if RunStore::is_in_use(&dir).unwrap_or(false) {
            "not sealed: a live process is writing the run; checked a copy taken while it runs"
                .to_owned()
        } else {
            "not sealed: the run did not close cleanly (killed or crashed); `strata resume` recovers it"
                .to_owned()
        }),
    ));
    let audit = match SledAuditLog::open(&store) {
        Ok(log) => log.records(None).await.map_err(|e| e.to_string()),
        Err(e) => Err(e.to_string()),
    };
    let mut protection = None;
    match &audit {
        Ok(records) => {
            checks.push((
                "audit chain",
                verify_chain(records)
                    .map(|n| format!("{n} records, every hash links"))
                    .map_err(|e| e.to_string()),
            ));
            checks.push((
                "audit anchors",
                match anchors(&store, records).await {
                    Ok((breaks, words)) if breaks.is_empty() => {
                        let ok = format!("the log holds every anchored record; {words}");
                        protection = Some(words);
                        Ok(ok)
                    }
                    Ok((breaks, words)) => {
                        protection = Some(words);
                        Err(breaks.iter().map(ToString::to_string).collect::<Vec<_>>().join("; "))
                    }
                    Err(e) => Err(format!("the anchors cannot be read: {e:#}")),
                },
            ));
            checks.push((
                "transitions",
                check_transition_chain(records)
                    .map(|agents| {
                        format!("{} agents, every transition allowed and chained", agents.len())
                    })
                    .map_err(|e| e.to_string()),
            ));
        }
        Err(e) => checks.push(("audit chain", Err(e.clone()))),
    }
    checks.push((
        "messages",
        match SledBus::open(&store) {
            Ok(bus) => bus
                .registered()
                .await
                .map(|r| format!("{} inboxes readable", r.len()))
                .map_err(|e| e.to_string()),
            Err(e) => Err(e.to_string()),
        },
    ));
    checks.push((
        "whiteboards",
        match SledWhiteboard::open(&store) {
            Ok(b) => b
                .list(&Actor::System)
                .await
                .map(|b| format!("{} boards readable", b.len()))
                .map_err(|e| e.to_string()),
            Err(e) => Err(e.to_string()),
        },
    ));
    checks.push((
        "decisions",
        match SledGovernance::open(&store) {
            Ok(g) => g
                .list()
                .await
                .map(|d| format!("{} decisions readable", d.len()))
                .map_err(|e| e.to_string()),
            Err(e) => Err(e.to_string()),
        },
    ));
    checks.push((
        "agent state",
        match SledStateStore::open(&store) {
            Ok(s) => match (s.agents().await, s.outcomes().await) {
                (Ok(a), Ok(o)) => {
                    Ok(format!("{} agents, {} task outcomes readable", a.len(), o.len()))
                }
                (Err(e), _) | (_, Err(e)) => Err(e.to_string()),
            },
            Err(e) => Err(e.to_string()),
        },
    ));
    let broken = checks.iter().any(|(_, r)| r.is_err());
    if args.json {
        let json: Vec<_> = checks
            .iter()
            .map(|(name, r)| match r {
                Ok(detail) => serde_json::json!({"check": name, "ok": true, "detail": detail}),
                Err(error) => serde_json::json!({"check": name, "ok": false, "error": error}),
            })
            .collect();
        outln!(
            "{}",
            serde_json::json!({"run": dir, "ok": !broken, "protection": protection, "checks": json})
        );
    } else {
        for (name, r) in &checks {
            match r {
                Ok(detail) => outln!("ok      {name}: {detail}"),
                Err(error) => outln!("BROKEN  {name}: {error}"),
            }
        }
        outln!("{}", if broken { "the run is damaged" } else { "the run verifies" });
    }
    Ok(if broken { crate::TASK_FAILED } else { 0 })
}
