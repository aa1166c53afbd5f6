//! Reading a stored run back: its audit log checked against its anchors (`strata verify`,
//! `strata inspect`, `strata runs`, the dashboard), the checks of `strata verify`, and the
//! data of `strata inspect`'s views (the agents' tree and results, the timeline, the usage
//! ledger and the model calls, the message history, what waits in a NATS run's inboxes), as
//! typed values, and each as the JSON document `strata inspect RUN VIEW --json` and `strata
//! verify --json` print: the `strata` command renders them as text.
//!
//! Everything reads a private copy of the run's database ([`RunStore::open_read_only`],
//! [`open`]): nothing in the run directory is opened for writing, locked, recovered or
//! unsealed, so a read-only directory and a run that a live process is writing can be read
//! (as the run was while it was copied).
//!
//! A run on NATS (`strata run --nats`) has its bus, whiteboards, decisions, audit log and
//! agent state on the server its `run.json` names: they are read there, live (only the usage
//! ledger comes from the copy). The server keeps no acknowledged message, so there is no
//! message history ([`waiting`] counts what still waits in the inboxes); and a run on NATS
//! has no seal, so its agents' anchors are checked, and that the log read reaches the audit
//! stream's last record ([`nats_anchors`]), not an anchor kept apart from the server.
//!
//! - [`spawns`]: the agents' tree and their results, from the audit log.
//! - [`timeline`]: each piece of work of a run, from its bus history and audit log.

use std::collections::{BTreeMap, HashMap};
use std::path::Path;

use agent_core::{
    AnchorBreak, AnchorHolder, AuditAnchor, AuditRecord, CostMeter, NATS_AUDIT_ANCHOR,
    NatsAuditLog, SledAuditLog, check_anchor_list, check_anchors, check_transition_chain,
    verify_chain,
};
use agent_llm::CallRecord;
use agent_state::{Actor, Address, AgentId};
use message_bus::{NatsBus, SledBus, StoredMessage};
use run_store::RunStore;

use crate::error::{Context as _, Error, Result};
use crate::run_dir::{RunInfo, TEAM_FILE};
use crate::stores::Stores;

pub mod spawns;
#[cfg(test)]
mod tests;
pub mod timeline;

/// Opens a private copy of the run in `dir`: nothing in `dir` changes (see the module docs).
/// A run that cannot be opened is bad input.
pub fn open(dir: &Path) -> Result<RunStore> {
    RunStore::open_read_only(dir).map_err(Error::bad_input_from)
}

/// The audit log's anchors (the seal's and each agent's) compared with `records`, and what
/// protects the log, in words. A run on NATS has no seal: its agents' anchors are checked, and
/// that `records` reach the audit stream's last record on the server (unless a live process
/// may be appending to it).
pub async fn anchors(
    dir: &Path,
    store: &RunStore,
    stores: &Stores,
    records: &[AuditRecord],
) -> Result<(Vec<String>, String)> {
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
pub const NO_ANCHOR: &str = "cannot be verified: no anchor";

/// The run's anchor files (see `run_store::AnchorFile`), as read.
#[derive(Default)]
pub struct AnchorFiles {
    /// Where they are looked for (the run's copy, the data directory's copy).
    pub paths: Vec<String>,
    /// How many exist.
    pub found: usize,
    /// The audit anchor of each that holds one.
    pub anchors: Vec<(AnchorHolder, AuditAnchor)>,
    /// Those that exist but cannot be read, in words.
    pub unreadable: Vec<String>,
}

/// Reads the anchor files of run `run_id` in `dir` (its own and the data directory's copy),
/// taking the audit anchor named `name` from each.
pub fn anchor_files(dir: &Path, run_id: &str, name: &str) -> AnchorFiles {
    let paths = [
        run_store::AnchorFile::in_run(dir),
        run_store::AnchorFile::in_index(&crate::run_dir::anchor_index(dir), run_id),
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
async fn agent_anchors(stores: &Stores) -> Result<Vec<(AgentId, AuditAnchor)>> {
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
pub async fn nats_anchors(
    dir: &Path,
    log: &NatsAuditLog,
    stores: &Stores,
    records: &[AuditRecord],
    live: bool,
) -> Result<(Vec<String>, String)> {
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
pub async fn anchored_log(
    dir: &Path,
    store: Option<&RunStore>,
    stores: &Stores,
    live: bool,
) -> Result<(Vec<AuditRecord>, Result<(Vec<String>, String)>)> {
    let check = |records: Vec<AuditRecord>| async move {
        let found = match (store, &stores.nats_audit) {
            (Some(store), _) => anchors(dir, store, stores, &records).await,
            (None, Some(log)) => nats_anchors(dir, log, stores, &records, live).await,
            (None, None) => Err(Error::failed("the run has no audit log here")),
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
pub async fn damage(dir: &Path) -> Option<String> {
    let store = match RunStore::open_read_only(dir) {
        Ok(store) => store,
        Err(e @ run_store::StoreError::Corrupted { .. }) => return Some(e.to_string()),
        // Not readable now (a copy caught mid-write, a permission): not found damaged.
        Err(_) => return None,
    };
    let stores = match Stores::sled(&store) {
        Ok(stores) => stores,
        Err(e) => return Some(e.to_string()),
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

/// One check of `strata verify`: its name, and what it found (`Ok`) or what is broken (`Err`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Check {
    /// Its name, such as `audit chain`.
    pub name: &'static str,
    /// What it found, or what is broken.
    pub result: Result<String, String>,
}

impl Check {
    fn new(name: &'static str, result: Result<String, String>) -> Self {
        Self { name, result }
    }
}

/// What `strata verify` finds in a run: every check, in order, and what protects its audit
/// log, in words (when its anchors could be read).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Verification {
    /// The checks, in order.
    pub checks: Vec<Check>,
    /// What protects the audit log, in words.
    pub protection: Option<String>,
}

impl Verification {
    /// Whether a check is broken.
    pub fn broken(&self) -> bool {
        self.checks.iter().any(|c| c.result.is_err())
    }

    /// The verdict, in words: the run verifies, is damaged, or cannot be verified for want
    /// of any anchor (nothing else found broken).
    pub fn verdict(&self) -> String {
        let broken = self.broken();
        // Nothing found broken, but nothing kept outside the store to compare the log's end
        // with.
        let unanchored = broken
            && self.checks.iter().all(|c| match &c.result {
                Ok(_) => true,
                Err(e) => c.name == "audit anchors" && e.starts_with(NO_ANCHOR),
            });
        if !broken {
            "the run verifies".to_owned()
        } else if unanchored {
            format!("the run {NO_ANCHOR}")
        } else {
            "the run is damaged".to_owned()
        }
    }

    /// As `strata verify --json` prints it: the run's directory `dir`, whether it verifies,
    /// the verdict, what protects its audit log, and every check (`detail` when it passed,
    /// `error` when it is broken).
    pub fn json(&self, dir: &Path) -> serde_json::Value {
        let checks: Vec<_> = self
            .checks
            .iter()
            .map(|Check { name, result }| match result {
                Ok(detail) => serde_json::json!({"check": name, "ok": true, "detail": detail}),
                Err(error) => serde_json::json!({"check": name, "ok": false, "error": error}),
            })
            .collect();
        serde_json::json!({"run": dir, "ok": !self.broken(), "verdict": self.verdict(), "protection": self.protection, "checks": checks})
    }
}

/// Verifies the run in `dir` (`strata verify`): its store, its audit log's hash chain,
/// anchors and transitions, and that its messages, whiteboards, decisions and agent state
/// can be read. A store that disagrees with its seal, or that sled cannot read, is a broken
/// check, not an error; a run that cannot be opened otherwise is bad input.
pub async fn verify(dir: &Path) -> Result<Verification> {
    let store = match RunStore::open_read_only(dir) {
        Ok(store) => store,
        Err(e @ run_store::StoreError::Corrupted { .. }) => {
            let check = Check::new("store", Err(e.to_string()));
            return Ok(Verification { checks: vec![check], protection: None });
        }
        Err(e) => return Err(Error::bad_input_from(e)),
    };
    // A run on NATS (`nats` in run.json) keeps the stores checked below on its server; a
    // run.json that cannot be read is taken for a run in its own database, as before.
    let nats = RunInfo::read(dir).ok().filter(|info| info.nats.is_some());
    let mut found = Verification {
        checks: vec![store_check(dir, &store, nats.is_some())],
        ..Default::default()
    };
    let stores = match &nats {
        Some(info) => {
            let stores = Stores::of_run(&store, dir, info).await?;
            found.checks.push(Check::new(
                "nats",
                Ok(format!(
                    "the bus, whiteboards, decisions, audit log and agent state are on {} (run id `{}`)",
                    info.nats.as_deref().unwrap_or_default(),
                    info.run_id
                )),
            ));
            Ok(stores)
        }
        None => Stores::sled(&store).map_err(|e| e.to_string()),
    };
    match &stores {
        Ok(stores) => {
            audit_checks(dir, &store, stores, &mut found).await;
            found.checks.extend(store_checks(stores).await);
        }
        Err(e) => {
            found.checks.push(Check::new("audit chain", Err(e.clone())));
            for name in ["messages", "whiteboards", "decisions", "agent state"] {
                found.checks.push(Check::new(name, Err(e.clone())));
            }
        }
    }
    Ok(found)
}

/// The check of the run's database: sealed, being written, or not closed cleanly.
fn store_check(dir: &Path, store: &RunStore, nats: bool) -> Check {
    let name = if nats { "local store (usage ledger, conversations)" } else { "store" };
    Check::new(
        name,
        Ok(if store.was_sealed() {
            "closed cleanly; the database matches its seal".to_owned()
        } else if RunStore::is_in_use(dir).unwrap_or(false) {
            "not sealed: a live process is writing the run; checked a copy taken while it runs"
                .to_owned()
        } else {
            "not sealed: the run did not close cleanly (killed or crashed); `strata resume` recovers it"
                .to_owned()
        }),
    )
}

/// The checks of the audit log: its hash chain, its anchors (setting `found`'s protection)
/// and its transitions.
async fn audit_checks(dir: &Path, store: &RunStore, stores: &Stores, found: &mut Verification) {
    let (records, anchored) = match anchored_log(dir, Some(store), stores, false).await {
        Ok(read) => read,
        Err(e) => {
            found.checks.push(Check::new("audit chain", Err(e.to_string())));
            return;
        }
    };
    found.checks.push(Check::new(
        "audit chain",
        verify_chain(&records)
            .map(|n| format!("{n} records, every hash links"))
            .map_err(|e| e.to_string()),
    ));
    let anchors = match anchored {
        Ok((breaks, words)) if breaks.is_empty() => {
            let ok = format!("the log holds every anchored record; {words}");
            found.protection = Some(words);
            Ok(ok)
        }
        Ok((breaks, words)) => {
            found.protection = Some(words);
            Err(breaks.join("; "))
        }
        Err(e) => Err(format!("the anchors cannot be read: {e:#}")),
    };
    found.checks.push(Check::new("audit anchors", anchors));
    found.checks.push(Check::new(
        "transitions",
        check_transition_chain(&records)
            .map(|agents| format!("{} agents, every transition allowed and chained", agents.len()))
            .map_err(|e| e.to_string()),
    ));
}

/// The checks that the run's messages, whiteboards, decisions and agent state can be read.
async fn store_checks(stores: &Stores) -> Vec<Check> {
    let messages = stores.bus.registered().await.map(|r| format!("{} inboxes readable", r.len()));
    let boards = stores.boards.list(&Actor::System).await;
    let decisions = stores.governance.list().await;
    let state = match (stores.state.agents().await, stores.state.outcomes().await) {
        (Ok(a), Ok(o)) => Ok(format!("{} agents, {} task outcomes readable", a.len(), o.len())),
        (Err(e), _) | (_, Err(e)) => Err(e.to_string()),
    };
    vec![
        Check::new("messages", messages.map_err(|e| e.to_string())),
        Check::new(
            "whiteboards",
            boards.map(|b| format!("{} boards readable", b.len())).map_err(|e| e.to_string()),
        ),
        Check::new(
            "decisions",
            decisions.map(|d| format!("{} decisions readable", d.len())).map_err(|e| e.to_string()),
        ),
        Check::new("agent state", state),
    ]
}

/// Each agent's own cost from a stored usage ledger, priced with the run's price table.
pub struct StoredCosts {
    /// The usage ledger.
    pub report: agent_llm::UsageReport,
    /// The run's prices.
    pub prices: agent_llm::PriceTable,
}

impl CostMeter for StoredCosts {
    fn cost_usd(&self, agent: &AgentId) -> Option<f64> {
        self.report.agent_cost_usd(agent.as_str(), &self.prices)
    }
}

/// The agents of a run's team file, with their layer, supervisor and role (`inspect tree`,
/// the dashboard).
pub fn configured(team: &team_file::TeamFile) -> Vec<spawns::Configured> {
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

/// The team file stored in the run in `dir`, if it can be read.
fn stored_team(dir: &Path) -> Option<team_file::TeamFile> {
    let tools = agent_core::tools::ToolRegistry::with_builtins();
    let path = dir.join(TEAM_FILE);
    let text = std::fs::read_to_string(&path).ok()?;
    team_file::parse_stored_team(&path, &text, &tools).ok()
}

/// The agents of a run and its audit log's damage (`inspect tree`): the configured agents
/// and those spawned under them, with status, task, results, dismissal and cost (when the
/// run has a usage ledger).
pub struct Tree {
    /// The agents.
    pub tree: spawns::SpawnTree,
    /// What is broken in the audit log the tree is drawn from, in words.
    pub damage: Vec<String>,
}

impl Tree {
    /// As `strata inspect RUN tree --json` prints it: the run `info` (id, status, task,
    /// whether its commands ran sandboxed), its agents ([`spawns::SpawnTree::json`]), how many
    /// were spawned, and the audit log's damage.
    pub fn json(&self, info: &RunInfo) -> serde_json::Value {
        serde_json::json!({"run_id": info.run_id, "status": info.status, "task": info.task_id, "sandbox": if info.unsandboxed { "off" } else { "on" }, "agents": self.tree.json(), "spawned": self.tree.spawned(), "audit_damage": self.damage})
    }
}

/// The [`Tree`] of the run in `dir` (its database `store`, its stores `stores`). A team file
/// that cannot be parsed is bad input.
pub async fn tree(dir: &Path, store: &RunStore, stores: &Stores) -> Result<Tree> {
    let tools = agent_core::tools::ToolRegistry::with_builtins();
    let team_path = dir.join(TEAM_FILE);
    let text = std::fs::read_to_string(&team_path)
        .with_context(|| format!("cannot read {}", team_path.display()))?;
    let team =
        team_file::parse_stored_team(&team_path, &text, &tools).map_err(Error::bad_input_from)?;
    let (records, anchored) = anchored_log(dir, Some(store), stores, false).await?;
    let (mut damage, _) = anchored?;
    if let Err(e) = verify_chain(&records) {
        damage.push(e.to_string());
    }
    let usage = agent_llm::LlmStore::load_usage(&agent_llm::SledLlmStore::open(store)?)?;
    let costs = usage.map(|report| StoredCosts { report, prices: team.prices.clone() });
    let tree = spawns::SpawnTree::build(
        configured(&team),
        &records,
        costs.as_ref().map(|c| c as &dyn CostMeter),
    );
    Ok(Tree { tree, damage })
}

/// The configured agents' roles, from the team file stored in the run in `dir` (none if it
/// cannot be read); spawned agents' roles are in the audit log.
pub fn configured_roles(dir: &Path) -> HashMap<AgentId, String> {
    stored_team(dir).map(|team| team.spec.agent_roles.into_iter().collect()).unwrap_or_default()
}

/// The reasoners a run's agents used, such as `rule-based` or `openai, rule-based`: the
/// `--reasoner` override, else the kinds in the run's team file (its default, for the agents
/// without their own, and the agents' own).
pub fn reasoner_kinds(dir: &Path, info: &RunInfo) -> String {
    if let Some(kind) = &info.reasoner {
        return kind.clone();
    }
    let Some(team) = stored_team(dir) else {
        return format!("unknown ({} cannot be read)", dir.join(TEAM_FILE).display());
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

/// A run's usage ledger (`inspect usage`): the reasoners its agents used, and the ledger,
/// per agent, layer and model, with the budget (`None`: no model usage is recorded).
pub struct Usage {
    /// The reasoners ([`reasoner_kinds`]).
    pub reasoner: String,
    /// The ledger.
    pub report: Option<agent_llm::UsageReport>,
}

impl Usage {
    /// As `strata inspect RUN usage --json` prints it: `{"reasoner", "usage"}`, the ledger as
    /// stored (`null` when none is recorded).
    pub fn json(&self) -> serde_json::Value {
        serde_json::json!({"reasoner": self.reasoner, "usage": self.report})
    }
}

/// The [`Usage`] of the run in `dir` (its database `store`).
pub fn usage(dir: &Path, store: &RunStore, info: &RunInfo) -> Result<Usage> {
    let report = agent_llm::LlmStore::load_usage(&agent_llm::SledLlmStore::open(store)?)?;
    Ok(Usage { reasoner: reasoner_kinds(dir, info), report })
}

/// The model calls of a run (`inspect calls [AGENT]`): every one, and those of the agent
/// asked for.
pub struct ModelCalls {
    /// Every call of the run, in order.
    pub all: Vec<CallRecord>,
    /// Those of the agent asked for (every call when none was).
    pub shown: Vec<CallRecord>,
}

/// The [`ModelCalls`] of the run `info` (its database `store`), those of `agent` shown; an
/// agent that made no model call is bad input.
pub fn model_calls(store: &RunStore, info: &RunInfo, agent: Option<&str>) -> Result<ModelCalls> {
    let all = call_records(store)?;
    if let Some(id) = agent
        && !all.iter().any(|r| r.agent.as_str() == id)
    {
        let mut agents: Vec<&str> = all.iter().map(|r| r.agent.as_str()).collect();
        agents.sort_unstable();
        agents.dedup();
        let known = if agents.is_empty() { "none".to_owned() } else { agents.join(", ") };
        return Err(Error::bad_input(format!(
            "agent `{}` made no model call in run {} (agents with calls: {known})",
            team_file::escape_controls(id),
            info.run_id
        )));
    }
    let shown = calls_of_agent(all.clone(), agent);
    Ok(ModelCalls { all, shown })
}

/// Every model call record of the run whose database is `store`, in order (blocking: it
/// reads the database).
pub fn call_records(store: &RunStore) -> Result<Vec<CallRecord>> {
    Ok(agent_llm::LlmStore::load_calls(&agent_llm::SledLlmStore::open(store)?)?)
}

/// The call records `records` as JSON (`strata inspect RUN calls --json`, the dashboard's
/// calls): `{"calls": [...]}`, each record as stored, each of its tool calls with its
/// `result` when a later call holds it. `all` holds every record of the run (a tool call's
/// result is in a later record of the same agent).
pub fn calls_json(records: &[CallRecord], all: &[CallRecord]) -> serde_json::Value {
    let results = CallRecord::tool_results(all);
    let calls: Vec<serde_json::Value> = records
        .iter()
        .map(|record| {
            let mut value = serde_json::to_value(record).unwrap_or_default();
            if let Some(calls) = value.get_mut("tool_calls").and_then(|c| c.as_array_mut()) {
                for call in calls {
                    let id = call.get("id").and_then(|i| i.as_str()).unwrap_or_default();
                    if let Some(result) = results.get(&(record.seq, id.to_owned())) {
                        call["result"] = serde_json::Value::from(result.as_str());
                    }
                }
            }
            value
        })
        .collect();
    serde_json::json!({ "calls": calls })
}

/// The call records of `agent` (every agent's when `None`), in order.
pub fn calls_of_agent(records: Vec<CallRecord>, agent: Option<&str>) -> Vec<CallRecord> {
    match agent {
        Some(id) => records.into_iter().filter(|r| r.agent.as_str() == id).collect(),
        None => records,
    }
}

/// What waits in one inbox of a run on NATS.
pub struct Waiting {
    /// The inbox: an agent's id, or `system`.
    pub inbox: String,
    /// How many messages are not acknowledged.
    pub held: usize,
    /// How many of each kind, or why the kinds cannot be read.
    pub kinds: Result<BTreeMap<&'static str, usize>, String>,
}

/// What waits in the inboxes of the run on NATS `info` in `dir` (`inspect messages`): the
/// server deletes a message once it is acknowledged, so there is no history; every inbox
/// left holding messages, the agents' too once they are unregistered (a run that ended
/// unregistered them), with the kinds of what waits there (kinds that cannot be read leave
/// the count). A server that cannot be reached is bad input.
pub async fn waiting(dir: &Path, info: &RunInfo) -> Result<Vec<Waiting>> {
    let url = info.nats.as_deref().unwrap_or_default();
    let server = crate::stores::connect_existing(url, dir, info).await?;
    let bus = NatsBus::open(&server).await.map_err(|e| {
        Error::bad_input(format!("cannot open the message bus on the NATS server at {url}: {e}"))
    })?;
    let mut waiting = Vec::new();
    for (inbox, held) in bus.held().await? {
        let kinds = bus.peek(&inbox, held).await.map_err(|e| e.to_string()).map(|messages| {
            let mut kinds: BTreeMap<&'static str, usize> = BTreeMap::new();
            for message in messages {
                *kinds.entry(message.kind.as_str()).or_default() += 1;
            }
            kinds
        });
        let inbox = match &inbox {
            Address::Agent(agent) => agent.as_str().to_owned(),
            _ => "system".to_owned(),
        };
        waiting.push(Waiting { inbox, held, kinds });
    }
    Ok(waiting)
}

/// What waits in the inboxes of the run on the NATS server `url` ([`waiting`]) as `strata
/// inspect RUN messages --json` prints it: `{"nats", "history": false, "waiting"}`, each inbox
/// with how many messages are not acknowledged and how many of each kind (`null`, and
/// `kinds_error`, when they cannot be read).
pub fn waiting_json(url: &str, waiting: &[Waiting]) -> serde_json::Value {
    let inboxes: Vec<_> = waiting
        .iter()
        .map(|w| match &w.kinds {
            Ok(kinds) => {
                serde_json::json!({"inbox": w.inbox, "not_acknowledged": w.held, "kinds": kinds})
            }
            Err(e) => serde_json::json!({
                "inbox": w.inbox, "not_acknowledged": w.held, "kinds": null, "kinds_error": e
            }),
        })
        .collect();
    serde_json::json!({"nats": url, "history": false, "waiting": inboxes})
}

/// Every message of the run whose database is `store`, acknowledged or not, in send order
/// (`inspect messages`; a run on NATS keeps no history: [`waiting`]).
pub fn messages(store: &RunStore) -> Result<Vec<StoredMessage>> {
    Ok(SledBus::open(store)?.history()?)
}

/// The [`messages`] as `strata inspect RUN messages --json` prints them: each with its `seq`,
/// inbox, whether it was acknowledged, and the message.
pub fn messages_json(messages: &[StoredMessage]) -> serde_json::Value {
    messages
        .iter()
        .map(|m| {
            serde_json::json!({
                "seq": m.seq,
                "inbox": m.inbox,
                "acknowledged": m.acknowledged,
                "message": m.message,
            })
        })
        .collect()
}
