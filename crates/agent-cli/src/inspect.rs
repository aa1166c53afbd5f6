//! `strata inspect` and `strata verify`: read a stored run without running it.
//!
//! Both read a private copy of the run's database ([`RunStore::open_read_only`]): nothing in the
//! run directory is opened for writing, locked, recovered or unsealed, so they work on a
//! read-only directory and on a run that a live process is writing (they then show the run as
//! it was while it was copied).
//!
//! A run on NATS (`strata run --nats`) has its bus, whiteboards, decisions, audit log and
//! agent state on the server its `run.json` names: they are read there, live (only the usage
//! ledger comes from the copy). The server keeps no acknowledged message, so `messages`
//! says so and counts what still waits in the inboxes; and a run on NATS has no seal, so
//! `verify` checks the agents' anchors and that the log read reaches the audit stream's last
//! record, not an anchor kept apart from the server.
//!
//! `tree` and `results` are drawn from the audit log by the pure functions of [`spawns`].

use std::collections::{BTreeMap, HashMap};
use std::path::Path;

use agent_core::{
    AnchorBreak, AnchorHolder, AuditAnchor, AuditRecord, CostMeter, NATS_AUDIT_ANCHOR,
    NatsAuditLog, SledAuditLog, check_anchor_list, check_anchors, check_transition_chain,
    verify_chain,
};
use agent_state::{Actor, Address, AgentId};
use anyhow::Context;
use message_bus::{NatsBus, SledBus};
use run_store::RunStore;
use team_file::escape_controls as esc;

use crate::cli::{InspectArgs, VerifyArgs, View};
use crate::view::event_line;
use crate::{Failure, bad_input};
use strata::Stores;
use strata::run_dir::{RunInfo, TEAM_FILE, resolve_run};

pub(crate) mod calls;
pub(crate) mod spawns;
#[cfg(test)]
mod tests;
pub(crate) mod timeline;

/// Opens a private copy of the run: nothing in `dir` changes (see the module docs).
fn open(dir: &Path) -> Result<RunStore, Failure> {
    RunStore::open_read_only(dir).map_err(bad_input)
}

/// The audit log's anchors (the seal's and each agent's) compared with `records`, and what
/// protects the log, in words. A run on NATS has no seal: its agents' anchors are checked, and
/// that `records` reach the audit stream's last record on the server (unless a live process
/// may be appending to it).
pub(crate) async fn anchors(
    dir: &Path,
    store: &RunStore,
    stores: &Stores,
    records: &[AuditRecord],
) -> anyhow::Result<(Vec<String>, String)> {
    if let Some(log) = &stores.nats_audit {
        let live = RunStore::is_in_use(dir).unwrap_or(false);
        return nats_anchors(dir, log, stores, records, live).await;
    }
    let agents = agent_anchors(stores).await?;
    let sealed = SledAuditLog::sealed_anchor(store)?;
    let n = agents.len();
    let mut breaks: Vec<String> =
        check_anchors(records, sealed, &agents).iter().map(ToString::to_string).collect();
    let files = anchor_files(dir, &store.marker().run_id, agent_core::AUDIT_ANCHOR);
    breaks.extend(files.unreadable.iter().cloned());
    // A live run's log is read from a copy taken while it runs, and its anchor files move on
    // meanwhile: one past the copy's end is newer than the copy, not a sign of a cut.
    let live = RunStore::is_in_use(dir).unwrap_or(false);
    breaks.extend(
        check_anchor_list(records, files.anchors.iter().cloned())
            .iter()
            .filter(|b| !(live && matches!(b, AnchorBreak::Truncated { .. })))
            .map(ToString::to_string),
    );
    if !store.was_sealed() && files.found == 0 {
        // Neither the exact end nor a lower bound kept outside the store: a log cut at its end
        // (and the agents' records with it) looks whole.
        breaks.push(if store.marker().anchored {
            format!(
                "{NO_ANCHOR}: the run has no seal and none of its anchor files ({}), which every run of this strata keeps from its start: they were deleted",
                files.paths.join(", ")
            )
        } else {
            format!(
                "{NO_ANCHOR}: the run has no seal and no anchor file (it was created by a strata from before anchor files, and did not close cleanly); records cut from the end of its log cannot be detected"
            )
        });
    }
    if files.found > 0 && sealed.is_none() {
        let held = files.anchors.iter().map(|(_, a)| a.seq).max();
        let kept = match held {
            Some(seq) => format!(
                "anchor files ({} of 2; they anchor up to record {seq}, a lower bound kept outside the store while the run went)",
                files.found
            ),
            None => format!("anchor files ({} of 2; they hold no audit record yet)", files.found),
        };
        let protection = format!(
            "hash chain anchored in {kept} + agent records ({n}, lower bounds); the run is not sealed: running, or it did not close cleanly"
        );
        return Ok((breaks, protection));
    }
    let protection = match (sealed, n) {
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

/// What a `verify` check says when the run has no anchor at all.
pub(crate) const NO_ANCHOR: &str = "cannot be verified: no anchor";

/// The run's anchor files (see `run_store::AnchorFile`), as read.
#[derive(Default)]
struct AnchorFiles {
    /// Where they are looked for (the run's copy, the data directory's copy).
    paths: Vec<String>,
    /// How many exist.
    found: usize,
    /// The audit anchor of each that holds one.
    anchors: Vec<(AnchorHolder, AuditAnchor)>,
    /// Those that exist but cannot be read, in words.
    unreadable: Vec<String>,
}

/// Reads the anchor files of run `run_id` in `dir` (its own and the data directory's copy),
/// taking the audit anchor named `name` from each.
fn anchor_files(dir: &Path, run_id: &str, name: &str) -> AnchorFiles {
    let paths = [
        run_store::AnchorFile::in_run(dir),
        run_store::AnchorFile::in_index(&strata::run_dir::anchor_index(dir), run_id),
    ];
    let mut files = AnchorFiles {
        paths: paths.iter().map(|p| p.display().to_string()).collect(),
        found: 0,
        anchors: Vec::new(),
        unreadable: Vec::new(),
    };
    for path in &paths {
        let shown = path.display().to_string();
        match run_store::AnchorFile::read(path, run_id) {
            Ok(None) => {}
            Ok(Some(file)) => {
                files.found += 1;
                match file.anchors.get(name).cloned().map(SledAuditLog::anchor_of) {
                    None => {}
                    Some(Ok(anchor)) => files.anchors.push((AnchorHolder::File(shown), anchor)),
                    Some(Err(e)) => files.unreadable.push(format!("the anchor file {shown}: {e}")),
                }
            }
            Err(e) => {
                files.found += 1;
                files.unreadable.push(format!("the anchor file cannot be read: {e}"));
            }
        }
    }
    files
}

/// The agents' anchors of the audit log: each agent's last record it anchors.
async fn agent_anchors(
    stores: &Stores,
) -> anyhow::Result<Vec<(agent_state::AgentId, AuditAnchor)>> {
    Ok(stores
        .state
        .agents()
        .await?
        .into_iter()
        .filter_map(|a| a.audit_head.map(|head| (a.id, head)))
        .collect())
}

/// [`anchors`] of a run on NATS (`log`, its audit stream): the agents' anchors, and that
/// `records` reach the stream's last record unless the run is `live` (a process may be
/// appending to it).
pub(crate) async fn nats_anchors(
    dir: &Path,
    log: &NatsAuditLog,
    stores: &Stores,
    records: &[AuditRecord],
    live: bool,
) -> anyhow::Result<(Vec<String>, String)> {
    let agents = agent_anchors(stores).await?;
    let mut breaks: Vec<String> =
        check_anchors(records, None, &agents).iter().map(ToString::to_string).collect();
    // The newest record acknowledged by the server, kept in the run directory's anchor files
    // as the run went (see `agent_core::AnchoredAuditLog`).
    let files = match RunStore::peek(dir) {
        Ok(marker) => anchor_files(dir, &marker.run_id, NATS_AUDIT_ANCHOR),
        Err(_) => AnchorFiles::default(),
    };
    breaks.extend(files.unreadable.iter().cloned());
    breaks.extend(
        check_anchor_list(records, files.anchors.iter().cloned())
            .iter()
            .filter(|b| !(live && matches!(b, AnchorBreak::Truncated { .. })))
            .map(ToString::to_string),
    );
    let last = log.last_anchor().await?;
    // A record appended after `records` were read (a worker of a placed run finishing its
    // part) is found when [`anchored_log`] reads again; a log cut short is not.
    let reached = match last {
        None => records.is_empty(),
        Some(last) => records.iter().rev().any(|r| AuditAnchor::of(r) == last),
    };
    if !live && !reached {
        let show =
            |a: Option<AuditAnchor>| a.map_or_else(|| "nothing".to_owned(), |a| a.to_string());
        breaks.push(format!(
            "the audit stream on the NATS server ends at {}, but reading it gave records up to {}",
            show(last),
            show(records.last().map(AuditAnchor::of))
        ));
    }
    let n = agents.len();
    let protection = match files.anchors.iter().map(|(_, a)| a.seq).max() {
        Some(seq) => format!(
            "hash chain anchored in the run directory's anchor files ({} of 2; up to record {seq}, a lower bound kept apart from the server as the run went) + agent records ({n}, lower bounds) on the NATS server (a run on NATS has no seal for its audit log)",
            files.found
        ),
        None => format!(
            "hash chain anchored in agent records ({n}, lower bounds) on the NATS server; no anchor file of the run holds an audit record of the server (a run from before anchor files, or none acknowledged): records cut from the end of the audit stream past the agents' anchors cannot be detected"
        ),
    };
    Ok((breaks, protection))
}

/// The audit log as read from `stores`, and its anchors checked against it ([`anchors`] with
/// the run's database `store`; [`nats_anchors`] for a run with none here, `live` saying
/// whether a process may be appending to it).
///
/// A live run's stores are no snapshot: an agent may anchor a record appended after the log
/// was read, which looks like records cut from the log. While the anchors break and the log
/// has grown since, it is read and checked again (at most 3 more times); a log cut short
/// still fails. `verify`, `inspect` and the dashboard all read the log this way.
pub(crate) async fn anchored_log(
    dir: &Path,
    store: Option<&RunStore>,
    stores: &Stores,
    live: bool,
) -> anyhow::Result<(Vec<AuditRecord>, anyhow::Result<(Vec<String>, String)>)> {
    let check = |records: Vec<AuditRecord>| async move {
        let found = match (store, &stores.nats_audit) {
            (Some(store), _) => anchors(dir, store, stores, &records).await,
            (None, Some(log)) => nats_anchors(dir, log, stores, &records, live).await,
            (None, None) => Err(anyhow::anyhow!("the run has no audit log here")),
        };
        (records, found)
    };
    let (mut records, mut anchored) = check(stores.audit.records(None).await?).await;
    for _ in 0..3 {
        if anchored.as_ref().is_ok_and(|(breaks, _)| breaks.is_empty()) {
            break;
        }
        let again = stores.audit.records(None).await?;
        if again.len() <= records.len() {
            break;
        }
        (records, anchored) = check(again).await;
    }
    Ok((records, anchored))
}

/// What `strata verify` finds broken in the run in `dir` (a run in its own database), in one
/// line: the first broken check; `None` when it verifies, or when it cannot be verified for want
/// of any anchor (a run from before anchor files, which is not shown as damaged). For `strata
/// runs`, which lists such a run as damaged.
pub(crate) async fn damage(dir: &Path) -> Option<String> {
    let store = match RunStore::open_read_only(dir) {
        Ok(store) => store,
        Err(e @ run_store::StoreError::Corrupted { .. }) => return Some(e.to_string()),
        // Not readable now (a copy caught mid-write, a permission): not found damaged.
        Err(_) => return None,
    };
    let stores = match Stores::sled(&store) {
        Ok(stores) => stores,
        Err(e) => return Some(format!("{e:#}")),
    };
    let (records, anchored) = match anchored_log(dir, Some(&store), &stores, false).await {
        Ok(found) => found,
        Err(e) => return Some(format!("the audit log cannot be read: {e:#}")),
    };
    if let Err(e) = verify_chain(&records) {
        return Some(format!("audit chain: {e}"));
    }
    match anchored {
        Ok((breaks, _)) => breaks.into_iter().find(|b| !b.starts_with(NO_ANCHOR)),
        Err(e) => Some(format!("the audit anchors cannot be read: {e:#}")),
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
    let store = open(&dir)?;
    // The bus, boards, decisions, audit log and agents: in the copy, or on the run's NATS
    // server (connected only for the views that read them).
    let stores = || Stores::of_run(&store, &dir, &info);
    match args.view {
        // An evolution, not a team run (taken above, before its directory is read as a run's).
        View::Lineage => crate::evolve::inspect(&args.data, &args.run, args.json).await,
        View::Tree => tree(&dir, &store, &stores().await?, &info, args.json).await,
        View::Audit => {
            let records = stores().await?.audit.records(None).await?;
            if args.json {
                outln!("{}", serde_json::to_string_pretty(&records)?);
            } else {
                for r in &records {
                    outln!("{:>5} {}", r.seq, event_line(r, info.started_at));
                }
            }
            Ok(())
        }
        View::Messages if info.nats.is_some() => nats_messages(&dir, &info, args.json).await,
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
            let boards = stores().await?.boards.list(&Actor::System).await?;
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
            let decisions = stores().await?.governance.list().await?;
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
            // The one source of these numbers, as the run summary and the dashboard show them.
            let agents = agent_pool::stored_metrics(stores().await?.state.as_ref()).await?;
            if args.json {
                outln!("{}", serde_json::to_string_pretty(&agents)?);
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
            }
            Ok(())
        }
        View::Usage => usage(&dir, &store, &info, args.json),
        View::Calls => model_calls(&dir, &store, &info, args),
        View::Timeline => {
            let records = stores().await?.audit.records(None).await?;
            let messages = timeline::bus_history(&store, &info)?;
            let entries =
                timeline::of_agent(timeline::build(&messages, &records), args.agent.as_deref());
            let calls = agent_llm::LlmStore::load_calls(&agent_llm::SledLlmStore::open(&store)?)?;
            if args.json {
                outln!(
                    "{}",
                    serde_json::to_string_pretty(&timeline::json(
                        &entries,
                        info.started_at,
                        &calls
                    ))?
                );
            } else {
                if info.nats.is_some() {
                    outln!(
                        "(a run on NATS keeps no message history: its plan steps are not listed, only spawned agents' work)"
                    );
                }
                if entries.is_empty() {
                    outln!("no step was handed out in this run");
                } else {
                    let text = timeline::plain(&entries, info.started_at, args.full, &calls);
                    outln!("{}", text.trim_end());
                }
            }
            Ok(())
        }
        View::Results => results(&dir, &stores().await?, args.json).await,
    }
}

/// `inspect messages` of a run on NATS: the server deletes a message once it is acknowledged,
/// so there is no history to show; what is still in the inboxes (every inbox, the agents'
/// whether registered or not) is counted, by kind.
async fn nats_messages(dir: &Path, info: &RunInfo, json: bool) -> Result<(), Failure> {
    let url = info.nats.as_deref().unwrap_or_default();
    let server = strata::stores::connect_existing(url, dir, info).await?;
    let bus = NatsBus::open(&server).await.map_err(|e| {
        bad_input(anyhow::anyhow!("cannot open the message bus on the NATS server at {url}: {e}"))
    })?;
    // Every inbox left holding messages, the agents' too once they are unregistered (a run
    // that ended unregistered them), with the kinds of what waits there: kinds that cannot be
    // read (the server does not answer the look) leave the count shown.
    type Kinds = Result<BTreeMap<&'static str, usize>, String>;
    let mut waiting: Vec<(String, usize, Kinds)> = Vec::new();
    for (inbox, held) in bus.held().await? {
        let kinds = bus.peek(&inbox, held).await.map_err(|e| e.to_string()).map(|messages| {
            let mut kinds: BTreeMap<&'static str, usize> = BTreeMap::new();
            for message in messages {
                *kinds.entry(message.kind.as_str()).or_default() += 1;
            }
            kinds
        });
        let name = match &inbox {
            Address::Agent(agent) => agent.as_str().to_owned(),
            _ => "system".to_owned(),
        };
        waiting.push((name, held, kinds));
    }
    if json {
        let inboxes: Vec<_> = waiting
            .iter()
            .map(|(inbox, n, kinds)| match kinds {
                Ok(kinds) => {
                    serde_json::json!({"inbox": inbox, "not_acknowledged": n, "kinds": kinds})
                }
                Err(e) => serde_json::json!({
                    "inbox": inbox, "not_acknowledged": n, "kinds": null, "kinds_error": e
                }),
            })
            .collect();
        outln!(
            "{}",
            serde_json::to_string_pretty(&serde_json::json!({
                "nats": url,
                "history": false,
                "waiting": inboxes,
            }))?
        );
        return Ok(());
    }
    outln!(
        "run {} keeps its messages on the NATS server {url}, which deletes each message once it is acknowledged: there is no history of them to show (`strata inspect {} audit` shows what the agents did)",
        info.run_id,
        info.run_id
    );
    if waiting.is_empty() {
        outln!("no message is waiting in an inbox");
    } else {
        outln!("{:<14} {:<17} kinds", "inbox", "not acknowledged");
        for (inbox, n, kinds) in &waiting {
            let kinds = match kinds {
                Ok(kinds) => kinds
                    .iter()
                    .map(|(kind, k)| format!("{kind} {k}"))
                    .collect::<Vec<_>>()
                    .join(", "),
                Err(e) => format!("(cannot be read: {})", esc(e)),
            };
            outln!("{:<14} {:<17} {kinds}", esc(inbox), n);
        }
    }
    Ok(())
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

/// `inspect calls [AGENT]`: every model call the run recorded ([`calls`]).
fn model_calls(
    dir: &Path,
    store: &RunStore,
    info: &RunInfo,
    args: &InspectArgs,
) -> Result<(), Failure> {
    let all = agent_llm::LlmStore::load_calls(&agent_llm::SledLlmStore::open(store)?)?;
    let agent = args.agent.as_deref();
    if let Some(id) = agent
        && !all.iter().any(|r| r.agent.as_str() == id)
    {
        let mut agents: Vec<&str> = all.iter().map(|r| r.agent.as_str()).collect();
        agents.sort_unstable();
        agents.dedup();
        let known = if agents.is_empty() { "none".to_owned() } else { agents.join(", ") };
        return Err(bad_input(anyhow::anyhow!(
            "agent `{}` made no model call in run {} (agents with calls: {known})",
            esc(id),
            info.run_id
        )));
    }
    let records = calls::of_agent(all.clone(), agent);
    if args.json {
        outln!("{}", serde_json::to_string_pretty(&calls::json(&records, &all))?);
    } else if records.is_empty() {
        let reasoner = reasoner_kinds(dir, info);
        outln!("reasoner: {reasoner}; no model call is recorded for this run");
    } else {
        outln!("{}", calls::plain(&records, &all, args.full).trim_end());
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

/// The agents of a run's team file, with their layer, supervisor and role (`inspect tree`,
/// the dashboard).
pub(crate) fn configured(team: &team_file::TeamFile) -> Vec<spawns::Configured> {
    team.spec
        .agents
        .iter()
        .map(|a| spawns::Configured {
            id: a.config.id.clone(),
            layer: a.config.layer,
            supervisor: a.config.supervisor.clone(),
            role: team.spec.agent_roles.get(&a.config.id).cloned(),
        })
        .collect()
}

/// `inspect tree`: the configured agents and those spawned under them, with status, task,
/// results, dismissal and cost (when the run has a usage ledger).
async fn tree(
    dir: &Path,
    store: &RunStore,
    stores: &Stores,
    info: &RunInfo,
    json: bool,
) -> Result<(), Failure> {
    let tools = agent_core::tools::ToolRegistry::with_builtins();
    let team_path = dir.join(TEAM_FILE);
    let text = std::fs::read_to_string(&team_path)
        .with_context(|| format!("cannot read {}", team_path.display()))?;
    let team = team_file::parse_stored_team(&team_path, &text, &tools).map_err(bad_input)?;
    let (records, anchored) = anchored_log(dir, Some(store), stores, false).await?;
    let (mut damage, _) = anchored?;
    if let Err(e) = verify_chain(&records) {
        damage.push(e.to_string());
    }
    let usage = agent_llm::LlmStore::load_usage(&agent_llm::SledLlmStore::open(store)?)?;
    let costs = usage.map(|report| StoredCosts { report, prices: team.prices.clone() });
    let configured = configured(&team);
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
async fn results(dir: &Path, stores: &Stores, json: bool) -> Result<(), Failure> {
    let records = stores.audit.records(None).await?;
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
    let store = match RunStore::open_read_only(&dir) {
        Ok(store) => store,
        // A database that disagrees with its seal, or that sled cannot read: damaged, not bad
        // input.
        Err(e @ run_store::StoreError::Corrupted { .. }) => {
            if args.json {
                let check =
                    serde_json::json!({"check": "store", "ok": false, "error": e.to_string()});
                outln!(
                    "{}",
                    serde_json::json!({"run": dir, "ok": false, "verdict": "the run is damaged", "protection": null, "checks": [check]})
                );
            } else {
                outln!("BROKEN  store: {e}");
                outln!("the run is damaged");
            }
            return Ok(crate::TASK_FAILED);
        }
        Err(e) => return Err(bad_input(e)),
    };
    // A run on NATS (`nats` in run.json) keeps the stores checked below on its server; a
    // run.json that cannot be read is taken for a run in its own database, as before.
    let nats = RunInfo::read(&dir).ok().filter(|info| info.nats.is_some());
    let mut checks: Vec<(&str, Result<String, String>)> = Vec::new();
    let local = if nats.is_some() { "local store (usage ledger, conversations)" } else { "store" };
    checks.push((
        local,
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
    let stores = match &nats {
        Some(info) => {
            let stores = Stores::of_run(&store, &dir, info).await?;
            checks.push((
                "nats",
                Ok(format!(
                    "the bus, whiteboards, decisions, audit log and agent state are on {} (run id `{}`)",
                    info.nats.as_deref().unwrap_or_default(),
                    info.run_id
                )),
            ));
            Ok(stores)
        }
        None => Stores::sled(&store).map_err(|e| format!("{e:#}")),
    };
    let audit = match &stores {
        Ok(stores) => {
            anchored_log(&dir, Some(&store), stores, false).await.map_err(|e| e.to_string())
        }
        Err(e) => Err(e.clone()),
    };
    let mut protection = None;
    match (audit, &stores) {
        (Ok((records, anchored)), Ok(_)) => {
            let records = &records;
            checks.push((
                "audit chain",
                verify_chain(records)
                    .map(|n| format!("{n} records, every hash links"))
                    .map_err(|e| e.to_string()),
            ));
            checks.push((
                "audit anchors",
                match anchored {
                    Ok((breaks, words)) if breaks.is_empty() => {
                        let ok = format!("the log holds every anchored record; {words}");
                        protection = Some(words);
                        Ok(ok)
                    }
                    Ok((breaks, words)) => {
                        protection = Some(words);
                        Err(breaks.join("; "))
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
        (Err(e), _) => checks.push(("audit chain", Err(e))),
        (_, Err(e)) => checks.push(("audit chain", Err(e.clone()))),
    }
    match &stores {
        Ok(stores) => {
            checks.push((
                "messages",
                stores
                    .bus
                    .registered()
                    .await
                    .map(|r| format!("{} inboxes readable", r.len()))
                    .map_err(|e| e.to_string()),
            ));
            checks.push((
                "whiteboards",
                stores
                    .boards
                    .list(&Actor::System)
                    .await
                    .map(|b| format!("{} boards readable", b.len()))
                    .map_err(|e| e.to_string()),
            ));
            checks.push((
                "decisions",
                stores
                    .governance
                    .list()
                    .await
                    .map(|d| format!("{} decisions readable", d.len()))
                    .map_err(|e| e.to_string()),
            ));
            checks.push((
                "agent state",
                match (stores.state.agents().await, stores.state.outcomes().await) {
                    (Ok(a), Ok(o)) => {
                        Ok(format!("{} agents, {} task outcomes readable", a.len(), o.len()))
                    }
                    (Err(e), _) | (_, Err(e)) => Err(e.to_string()),
                },
            ));
        }
        Err(e) => {
            for name in ["messages", "whiteboards", "decisions", "agent state"] {
                checks.push((name, Err(e.clone())));
            }
        }
    }
    let broken = checks.iter().any(|(_, r)| r.is_err());
    // Nothing found broken, but nothing kept outside the store to compare the log's end with.
    let unanchored = broken
        && checks.iter().all(|(name, r)| match r {
            Ok(_) => true,
            Err(e) => *name == "audit anchors" && e.starts_with(NO_ANCHOR),
        });
    let verdict = if !broken {
        "the run verifies".to_owned()
    } else if unanchored {
        format!("the run {NO_ANCHOR}")
    } else {
        "the run is damaged".to_owned()
    };
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
            serde_json::json!({"run": dir, "ok": !broken, "verdict": verdict, "protection": protection, "checks": json})
        );
    } else {
        for (name, r) in &checks {
            match r {
                Ok(detail) => outln!("ok      {name}: {detail}"),
                Err(error) => outln!("BROKEN  {name}: {error}"),
            }
        }
        outln!("{verdict}");
    }
    Ok(if broken { crate::TASK_FAILED } else { 0 })
}
