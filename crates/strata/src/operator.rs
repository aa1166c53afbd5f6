//! The operator inbox: requests from outside a run (`strata approve`, `strata veto`,
//! `strata rollback`, `strata adopt`, the dashboard's buttons) and the running process that
//! applies them. The `strata` command parses the arguments and prints; everything else is
//! here: the request files, their checks, their delivery and the serving loop of a run.
//!
//! A live run's database is locked by the process that runs it, so another `strata` cannot
//! write it. Requests go through a drop directory instead, `<run dir>/requests/`:
//!
//! 1. `strata approve RUN DECISION --as NAME` (or `strata veto ... --reason TEXT`) checks what
//!    it can at once on a private copy of the store: the decision exists, `NAME` is one of the
//!    run's `[approvals] humans` (from the team file stored in the run), and the rules of
//!    [`Decision::sign`](agent_state::Decision::sign) and
//!    [`Decision::veto`](agent_state::Decision::veto) accept `human:NAME` (pending, a human
//!    may sign, a veto has a reason). It writes one request file, `<id>.json` (an [`Envelope`]: the
//!    [`OperatorRequest`] and, when a check refused it, `refused` with the error), through a
//!    temporary file and a rename.
//! 2. The process running the run (`strata run` or `strata resume`) takes the pending request
//!    files every [`serve`] pass (at most [`MAX_PER_PASS`] a pass, oldest name first), applies
//!    each through the governance trait as `human:NAME` (a refused one is not applied), audits
//!    it ([`AuditEvent::Operator`] under the human's id, with the typed error when refused),
//!    writes `<id>.done.json` ([`Done`]) and removes the request. A backend failure leaves
//!    the request for the next pass.
//! 3. The command waits (up to [`WAIT`], unless `--no-wait`) for the result file ([`submit`]
//!    returns it, and the command prints it). When the run is not live, an accepted request stays queued for `strata resume`, and
//!    a refused one is audited at once by the command itself (it can open the store then).
//!
//! A run on NATS (`strata run --nats`) goes through the same drop directory; the checks read
//! its decisions on its server, and a refusal of a run that is not live is audited there.
//!
//! A rollback (`strata rollback RUN AGENT VERSION --as NAME`) is checked the same way (`NAME`
//! one of the run's `[approvals] humans`, `AGENT` an OODA agent of the run's team, `VERSION`
//! 1 or more) and delivered to the agent as a command from `system`
//! ([`agent_ooda::OodaCommand::Rollback`]); the agent refuses, audited, a version it never had.
//!
//! A hot-swap (`strata adopt RUN AGENT GENOME --as NAME`, `GENOME` a genome file such as an
//! evolution's `best-genome.json`, or the evolution's id) is checked like a rollback and the
//! genome's id against its content, and delivered as [`agent_ooda::OodaCommand::Adopt`]; the
//! agent refuses, audited, a tool its lead does not hold.
//!
//! Bad input (exit 2, and audited): a decision that does not exist or is decided already, a
//! name not in `[approvals] humans`, a decision that needs no human, a veto without a reason,
//! a rollback of an agent that is not an OODA agent of the run.
//! A name that cannot name a human, a malformed decision id, or no name at all is refused
//! before anything is written (exit 2, not audited: it names nobody who could sign).

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use agent_core::{AuditEvent, AuditLog, Clock};
use agent_state::{
    Address, AgentId, DecisionId, HUMAN_PREFIX, Message, MessageKind, RunId, SignOutcome, Timestamp,
};
use governance::{DecideError, Governance};
use message_bus::MessageBus;
use run_store::{Durability, RunStore};
use serde::{Deserialize, Serialize};

use crate::error::{Context as _, Error, Result};
use crate::run_dir::{RunInfo, TEAM_FILE, now_ms, resolve_run, write_atomic};
use crate::stores::Stores;

/// The drop directory of a run's operator requests.
pub const REQUESTS_DIR: &str = "requests";
/// At most this many requests are applied in one pass.
pub const MAX_PER_PASS: usize = 16;
/// A request file larger than this is refused unread (a hot-swapped genome carries up to
/// 1 MiB of code, escaped).
const MAX_REQUEST_BYTES: u64 = 4 * 1024 * 1024;
/// How long `strata approve` / `veto` waits for a live run to take its request.
pub const WAIT: Duration = Duration::from_secs(10);
/// How often it looks for the result meanwhile.
const POLL: Duration = Duration::from_millis(50);

/// What an operator asks of a run. Tagged by `request`, so more kinds can be added.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "request", rename_all = "snake_case")]
pub enum OperatorRequest {
    /// Sign `decision` as `human:<human>`.
    Approve {
        /// The decision.
        decision: DecisionId,
        /// Who signs (the name, without `human:`).
        human: String,
    },
    /// Veto `decision` as `human:<human>`, with `reason`.
    Veto {
        /// The decision.
        decision: DecisionId,
        /// Who vetoes.
        human: String,
        /// Why.
        reason: String,
    },
    /// Tell the OODA agent `agent` to roll back to `version` (as a new version).
    Rollback {
        /// The agent.
        agent: AgentId,
        /// The version.
        version: u64,
        /// Who asks.
        human: String,
    },
    /// Hot-swap `genome` into the OODA agent `agent` (as a new version).
    Adopt {
        /// The agent.
        agent: AgentId,
        /// The genome, such as an evolution's best.
        genome: Box<agent_state::evolution::Genome>,
        /// Who asks.
        human: String,
    },
    /// Stop the live run as Ctrl-C does (interrupted, to be resumed). Anyone who can write
    /// the run's requests may: like Ctrl-C, it needs no place in `[approvals] humans`. Only
    /// the process that was running when it was written applies it (see [`pass`]).
    Cancel {
        /// Who asks.
        human: String,
    },
}

impl OperatorRequest {
    /// The operator's id as the audit log names it: `human:<name>`.
    pub fn actor(&self) -> AgentId {
        let (Self::Approve { human, .. }
        | Self::Veto { human, .. }
        | Self::Rollback { human, .. }
        | Self::Adopt { human, .. }
        | Self::Cancel { human }) = self;
        AgentId::new(format!("{HUMAN_PREFIX}{human}"))
    }
}

/// One request file, `<id>.json`.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Envelope {
    /// The request's id (also its file name).
    pub id: String,
    /// When it was written (ms since the epoch).
    pub at: u64,
    /// What is asked.
    pub request: OperatorRequest,
    /// Set when the command's checks refused it: the run only audits it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub refused: Option<String>,
}

/// The result of one request, `<id>.done.json`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Done {
    /// The request's id.
    pub id: String,
    /// `signed`, `approved`, `already_signed`, `vetoed` or `refused`.
    pub outcome: String,
    /// Why it was refused.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

/// A request as the audit line shows it: `approve decision X` or `veto decision X ("why")`.
pub fn describe(request: &serde_json::Value) -> String {
    let decision = request["decision"].as_str().unwrap_or("?");
    match request["request"].as_str() {
        Some("rollback") => format!(
            "rollback {} to version {}",
            request["agent"].as_str().unwrap_or("?"),
            request["version"]
        ),
        Some("adopt") => format!(
            "hot-swap {} to genome {}",
            request["agent"].as_str().unwrap_or("?"),
            request["genome"]["id"].as_str().map_or("?", |id| &id[..id.len().min(12)])
        ),
        Some("veto") => {
            format!("veto decision {decision} ({:?})", request["reason"].as_str().unwrap_or(""))
        }
        Some("cancel") => "cancel the run".to_owned(),
        Some(kind) => format!("{kind} decision {decision}"),
        None => "request".to_owned(),
    }
}

/// Who may operate a run, from its team file: the running process checks every request
/// file against it before acting (a request file is only a claim: anything able to write the
/// run's `requests/` could have written it, so the command's checks are not trusted).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Authority {
    /// The team's `[approvals] humans`.
    humans: Vec<String>,
    /// The team's OODA agents (the only ones a rollback or a hot-swap may name).
    oodas: Vec<AgentId>,
}

impl Authority {
    /// The authority the team `spec` grants.
    pub fn of(spec: &agent_pool::TeamSpec) -> Self {
        let oodas = spec
            .agents
            .iter()
            .filter(|a| matches!(&a.role, agent_pool::RoleSpec::Bottom(b) if b.ooda.is_some()))
            .map(|a| a.config.id.clone())
            .collect();
        Self { humans: spec.approvals.humans.clone(), oodas }
    }

    /// Why `request` may not be applied to the run `run`, if so: the rules `strata approve`,
    /// `veto`, `rollback` and `adopt` check (a name that names a human, one of the run's
    /// `[approvals] humans`; a rollback or hot-swap of an OODA agent of the team, a version
    /// from 1, a genome whose id matches its content). The decision's own rules (pending, a
    /// required signer, a veto with a reason) are checked by governance as it applies it.
    pub fn refusal(&self, run: &str, request: &OperatorRequest) -> Option<String> {
        let (OperatorRequest::Approve { human, .. }
        | OperatorRequest::Veto { human, .. }
        | OperatorRequest::Rollback { human, .. }
        | OperatorRequest::Adopt { human, .. }
        | OperatorRequest::Cancel { human }) = request;
        if let Err(e) = agent_state::check_human_name(human) {
            return Some(format!("`{}` names no human: {e}", human.escape_debug()));
        }
        if matches!(request, OperatorRequest::Cancel { .. }) {
            return None;
        }
        if !self.humans.iter().any(|a| a == human) {
            let who = if self.humans.is_empty() {
                "nobody: its team file has no `[approvals] humans`".to_owned()
            } else {
                self.humans.join(", ")
            };
            return Some(format!("`{human}` may not operate run {run} (who may: {who})"));
        }
        let agent = match request {
            OperatorRequest::Approve { .. }
            | OperatorRequest::Veto { .. }
            | OperatorRequest::Cancel { .. } => return None,
            OperatorRequest::Rollback { version: 0, .. } => {
                return Some("versions start at 1".to_owned());
            }
            OperatorRequest::Adopt { genome, .. } if genome.verify().is_err() => {
                return Some("the genome's id does not match its content".to_owned());
            }
            OperatorRequest::Rollback { agent, .. } | OperatorRequest::Adopt { agent, .. } => agent,
        };
        (!self.oodas.contains(agent)).then(|| {
            let names: Vec<&str> = self.oodas.iter().map(|a| a.as_str()).collect();
            format!(
                "`{}` is not an OODA agent of run {run} (its OODA agents: {})",
                agent.as_str().escape_debug(),
                if names.is_empty() { "none".to_owned() } else { names.join(", ") }
            )
        })
    }
}

/// Applies one request (a refused one is only audited) and audits it; `Err` on a backend
/// failure, when the request should be tried again.
pub async fn apply(
    envelope: &Envelope,
    governance: &dyn Governance,
    bus: &dyn MessageBus,
    audit: &dyn AuditLog,
    now: Timestamp,
) -> Result<Done> {
    let actor = envelope.request.actor();
    let result: Result<&str, String> = match (&envelope.refused, &envelope.request) {
        (Some(error), _) => Err(error.clone()),
        (None, OperatorRequest::Approve { decision, .. }) => {
            match governance.sign(*decision, &actor, now).await {
                Ok(SignOutcome::Signed) => Ok("signed"),
                Ok(SignOutcome::Approved) => Ok("approved"),
                Ok(SignOutcome::AlreadySigned) => Ok("already_signed"),
                Err(DecideError::Backend(e)) => return Err(Error::from(e)),
                Err(e) => Err(e.to_string()),
            }
        }
        (None, OperatorRequest::Veto { decision, reason, .. }) => {
            match governance.veto(*decision, &actor, reason, now).await {
                Ok(()) => Ok("vetoed"),
                Err(DecideError::Backend(e)) => return Err(Error::from(e)),
                Err(e) => Err(e.to_string()),
            }
        }
        (None, OperatorRequest::Rollback { agent, version, .. }) => {
            command(bus, agent, agent_ooda::OodaCommand::Rollback { version: *version }, now)
                .await?
        }
        (None, OperatorRequest::Adopt { agent, genome, .. }) => {
            command(bus, agent, agent_ooda::OodaCommand::Adopt { genome: genome.clone() }, now)
                .await?
        }
        // The serving loop stops the run once this is audited and answered.
        (None, OperatorRequest::Cancel { .. }) => Ok("cancelled"),
    };
    let done = match result {
        Ok(outcome) => Done { id: envelope.id.clone(), outcome: outcome.into(), error: None },
        Err(error) => {
            Done { id: envelope.id.clone(), outcome: "refused".into(), error: Some(error) }
        }
    };
    let event = AuditEvent::Operator {
        request: serde_json::to_value(&envelope.request)?,
        outcome: done.outcome.clone(),
        error: done.error.clone(),
    };
    audit.append(&actor, now, event).await?;
    Ok(done)
}

/// Sends `command` to the OODA agent `agent` as an `operator_command` from `system`: `Ok`
/// with `delivered`, or the bus's refusal (no such inbox) as the request's error.
async fn command(
    bus: &dyn MessageBus,
    agent: &AgentId,
    command: agent_ooda::OodaCommand,
    now: Timestamp,
) -> Result<Result<&'static str, String>> {
    let message = Message::new(
        agent_core::new_message_id(),
        Address::System,
        agent.clone(),
        MessageKind::OperatorCommand,
        serde_json::to_value(command)?,
        now,
    );
    Ok(match bus.send(message).await {
        Ok(_) => Ok("delivered"),
        Err(message_bus::SendError::Backend(e)) => return Err(Error::from(e)),
        Err(e) => Err(e.to_string()),
    })
}

/// One pending request file: its path, its id, and its contents or why they cannot be read.
type Pending = (PathBuf, String, Result<Envelope, String>);

/// The pending request files of `inbox`, oldest name first, at most `max`; blocking.
fn pending(inbox: &Path, max: usize) -> std::io::Result<Vec<Pending>> {
    let entries = match std::fs::read_dir(inbox) {
        Ok(entries) => entries,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(e),
    };
    let mut names: Vec<String> = Vec::new();
    for entry in entries {
        let entry = entry?;
        let name = entry.file_name().to_string_lossy().into_owned();
        if !name.ends_with(".json") || name.ends_with(".done.json") {
            continue;
        }
        // Only regular files are requests: a symlink, FIFO, socket or directory is skipped
        // (the file type of the entry itself, links not followed).
        match entry.file_type() {
            Ok(kind) if kind.is_file() => names.push(name),
            Ok(_) => tracing::debug!(%name, "operator requests: not a regular file, skipped"),
            Err(e) => tracing::debug!(%name, error = %e, "operator requests: skipped"),
        }
    }
    names.sort();
    names.truncate(max);
    Ok(names
        .into_iter()
        .map(|name| {
            let path = inbox.join(&name);
            let id = name.trim_end_matches(".json").to_owned();
            let read = read_request(&path);
            (path, id, read)
        })
        .collect())
}

fn read_request(path: &Path) -> Result<Envelope, String> {
    use std::io::Read as _;
    use std::os::unix::fs::OpenOptionsExt as _;
    // Swapped for a link or a FIFO since it was listed: not followed, not waited on.
    let file = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK)
        .open(path)
        .map_err(|e| format!("cannot open it: {e}"))?;
    match file.metadata() {
        Ok(meta) if meta.is_file() => {}
        Ok(_) => return Err("it is not a regular file".to_owned()),
        Err(e) => return Err(format!("cannot read it: {e}")),
    }
    let mut bytes = Vec::new();
    file.take(MAX_REQUEST_BYTES + 1)
        .read_to_end(&mut bytes)
        .map_err(|e| format!("cannot read it: {e}"))?;
    if bytes.len() as u64 > MAX_REQUEST_BYTES {
        return Err(format!("it is larger than {MAX_REQUEST_BYTES} bytes"));
    }
    serde_json::from_slice(&bytes).map_err(|e| format!("it is not a request: {e}"))
}

/// A run's inbox and what applies its requests: the run's directory, who may operate it (from
/// its team file), and its services.
#[derive(Clone, Copy)]
pub struct Inbox<'a> {
    /// The run's directory (its inbox is [`REQUESTS_DIR`] in it).
    pub dir: &'a Path,
    /// Who may operate the run.
    pub authority: &'a Authority,
    /// The run's decisions.
    pub governance: &'a dyn Governance,
    /// The run's bus (rollbacks and hot-swaps are sent on it).
    pub bus: &'a dyn MessageBus,
    /// The run's audit log.
    pub audit: &'a dyn AuditLog,
    /// The run's clock.
    pub clock: &'a dyn Clock,
}

/// One pass over the run's inbox: applies the pending requests (at most [`MAX_PER_PASS`]);
/// returns how many were taken.
pub async fn pass(inbox: &Inbox<'_>, cancel: &Cancel) -> Result<usize> {
    let requests = inbox.dir.join(REQUESTS_DIR);
    let found = {
        let requests = requests.clone();
        tokio::task::spawn_blocking(move || pending(&requests, MAX_PER_PASS))
            .await
            .map_err(Error::failed_from)??
    };
    let taken = found.len();
    for (path, id, read) in found {
        let done = match read {
            Ok(envelope) => take(inbox, envelope, cancel).await?,
            Err(why) => unreadable(inbox, &id, &why).await?,
        };
        let bytes = serde_json::to_vec_pretty(&done)?;
        let done_path = requests.join(format!("{id}.done.json"));
        tokio::task::spawn_blocking(move || -> Result<()> {
            write_atomic(&done_path, &bytes)?;
            std::fs::remove_file(&path).with_context(|| format!("cannot remove {}", path.display()))
        })
        .await
        .map_err(Error::failed_from)??;
    }
    Ok(taken)
}

/// Authorises and applies one request read from the inbox; an applied cancel notifies
/// `cancel`.
async fn take(inbox: &Inbox<'_>, mut envelope: Envelope, cancel: &Cancel) -> Result<Done> {
    // The running process decides who may: the file's own claims are not trusted.
    if envelope.refused.is_none() {
        envelope.refused = inbox.authority.refusal(&run_name(inbox.dir), &envelope.request);
    }
    let cancels = matches!(envelope.request, OperatorRequest::Cancel { .. });
    if cancels && envelope.refused.is_none() && envelope.at < cancel.since_ms {
        envelope.refused = Some(
            "the cancel was asked of a run no longer running (it was written before this process took the run); not applied"
                .to_owned(),
        );
    }
    let now = inbox.clock.now();
    let done = apply(&envelope, inbox.governance, inbox.bus, inbox.audit, now).await?;
    if cancels && done.error.is_none() {
        cancel.asked.notify_one();
    }
    Ok(done)
}

/// Audits and answers a request file that cannot be read (`why`).
async fn unreadable(inbox: &Inbox<'_>, id: &str, why: &str) -> Result<Done> {
    let error = format!("request file {id}.json cannot be taken: {why}");
    inbox
        .audit
        .append(
            &AgentId::new(format!("{HUMAN_PREFIX}?")),
            inbox.clock.now(),
            AuditEvent::Operator {
                request: serde_json::json!({ "id": id }),
                outcome: "refused".into(),
                error: Some(error.clone()),
            },
        )
        .await?;
    Ok(Done { id: id.to_owned(), outcome: "refused".into(), error: Some(error) })
}

/// The run's name as a refusal names it: its directory's name.
fn run_name(dir: &Path) -> String {
    dir.file_name().map_or_else(|| dir.display().to_string(), |n| n.to_string_lossy().into_owned())
}

/// How a run hears of a [`OperatorRequest::Cancel`] it applied.
#[derive(Debug, Default)]
pub struct Cancel {
    /// Notified once a cancel is applied: the run stops as on Ctrl-C.
    pub asked: tokio::sync::Notify,
    /// When this process took the run (ms since the epoch): a cancel written before was meant
    /// for a run that has ended since, and is refused rather than stop this one.
    pub since_ms: u64,
}

/// What [`serve`] serves: a run's inbox, who may operate the run, its services, how often it
/// looks, and how the run hears of a cancel.
pub struct Server {
    /// The run's directory.
    pub dir: PathBuf,
    /// Who may operate the run (from its team file).
    pub authority: Authority,
    /// The run's decisions.
    pub governance: Arc<dyn Governance>,
    /// The run's bus.
    pub bus: Arc<dyn MessageBus>,
    /// The run's audit log.
    pub audit: Arc<dyn AuditLog>,
    /// The run's clock.
    pub clock: Arc<dyn Clock>,
    /// How long between two passes.
    pub every: Duration,
    /// Notified when a cancel is applied.
    pub cancel: Arc<Cancel>,
}

/// Serves the run's inbox until the task is aborted: a [`pass`] every `every`, each request
/// authorised against the run's authority; an applied cancel notifies `cancel`.
pub async fn serve(server: Server) {
    let inbox = Inbox {
        dir: &server.dir,
        authority: &server.authority,
        governance: server.governance.as_ref(),
        bus: server.bus.as_ref(),
        audit: server.audit.as_ref(),
        clock: server.clock.as_ref(),
    };
    loop {
        if let Err(e) = pass(&inbox, &server.cancel).await {
            tracing::warn!(error = %e.chain_text(), "operator requests: will try again");
        }
        tokio::time::sleep(server.every).await;
    }
}

/// Who signs: `given` (`--as NAME`), else `$USER`; a name that cannot name a human is bad
/// input.
pub fn operator_name(given: Option<&str>) -> Result<String> {
    let name = match given {
        Some(name) => name.to_owned(),
        None => match std::env::var("USER") {
            Ok(user) if !user.is_empty() => user,
            _ => {
                return Err(Error::bad_input(
                    "who signs? $USER is not set: give --as NAME (one of the run's [approvals] humans)",
                ));
            }
        },
    };
    agent_state::check_human_name(&name)
        .map_err(|e| Error::bad_input(format!("--as {}: {e}", name.escape_debug())))?;
    Ok(name)
}

/// Which run a request is for, who asks, and whether to wait for the live run's answer.
#[derive(Clone, Copy, Debug)]
pub struct Target<'a> {
    /// The data directory.
    pub data: &'a Path,
    /// The run's id (or what [`resolve_run`] takes for it).
    pub run: &'a str,
    /// Who asks (`--as NAME`), else `$USER` ([`operator_name`]).
    pub as_name: Option<&'a str>,
    /// Do not wait for the live run to take the request (`--no-wait`).
    pub no_wait: bool,
}

/// What became of a decision request [`send_decision`] delivered.
#[derive(Debug)]
pub struct Sent {
    /// The decision, by its whole id.
    pub decision: DecisionId,
    /// Who signed or vetoed (the name, without `human:`).
    pub human: String,
    /// The request's delivery.
    pub delivery: Delivery,
}

/// Checks and delivers a decision request (`strata approve` / `veto`, and the dashboard's
/// buttons): the decision `decision` (its id or a prefix of it) of the run `target` names,
/// the request `request` makes of the decision's id and who asks.
pub async fn send_decision(
    target: &Target<'_>,
    decision: &str,
    request: impl FnOnce(DecisionId, String) -> OperatorRequest,
) -> Result<Sent> {
    let dir = resolve_run(target.data, target.run)?;
    let info = RunInfo::read(&dir).map_err(Error::bad_input_from)?;
    let human = operator_name(target.as_name)?;
    let named = named_decision(decision.trim(), &info.run_id)?;
    // One copy of the store for finding the decision and checking the request.
    let store = read_copy(&dir).await?;
    // A run on NATS has its decisions on its server.
    let governance = Stores::of_run(&store, &dir, &info).await?.governance;
    let id = match named {
        Named::Id(id) => id,
        Named::Prefix(prefix) => {
            let decisions = governance.list().await.context("cannot read the run's decisions")?;
            by_prefix(&prefix, decisions.iter().map(|d| d.id)).map_err(|why| {
                Error::bad_input(format!(
                    "{why}; `strata inspect {run} decisions` lists them",
                    run = info.run_id
                ))
            })?
        }
    };
    let request = request(id, human.clone());
    let allowed = allowed_humans(&dir)?;
    let refused = check(governance.as_ref(), &info, &request, id, &human, &allowed).await?;
    let envelope = Envelope { id: new_request_id(), at: now_ms(), request, refused };
    let delivery = submit(&dir, &info, envelope, target.no_wait).await?;
    Ok(Sent { decision: id, human, delivery })
}

/// Checks and delivers a command to an OODA agent (`strata rollback`, `strata adopt`): the
/// request `request` makes of who asks, checked against the run's team file
/// ([`Authority::refusal`]).
pub async fn send_command(
    target: &Target<'_>,
    request: impl FnOnce(String) -> Result<OperatorRequest>,
) -> Result<Delivery> {
    let dir = resolve_run(target.data, target.run)?;
    let info = RunInfo::read(&dir).map_err(Error::bad_input_from)?;
    let human = operator_name(target.as_name)?;
    let request = request(human)?;
    let refused = Authority::of(&stored_team(&dir)?.spec).refusal(&info.run_id, &request);
    let envelope = Envelope { id: new_request_id(), at: now_ms(), request, refused };
    submit(&dir, &info, envelope, target.no_wait).await
}

/// The shortest prefix of a decision id taken for the whole id (as `strata` prints them).
const DECISION_PREFIX_MIN: usize = 8;

/// How a command names a decision.
enum Named {
    /// By its whole id.
    Id(DecisionId),
    /// By a prefix of its id (lowercase), at least [`DECISION_PREFIX_MIN`] characters.
    Prefix(String),
}

/// The decision `text` names: its whole id, or a prefix of it of at least
/// [`DECISION_PREFIX_MIN`] characters (found among the decisions of run `run` by
/// [`by_prefix`]); anything else is bad input.
fn named_decision(text: &str, run: &str) -> Result<Named> {
    if let Ok(id) = uuid::Uuid::parse_str(text) {
        return Ok(Named::Id(DecisionId::from_uuid(id)));
    }
    let prefix = text.to_ascii_lowercase();
    let plausible = (DECISION_PREFIX_MIN..36).contains(&prefix.len())
        && prefix.chars().all(|c| c.is_ascii_hexdigit() || c == '-');
    if !plausible {
        return Err(Error::bad_input(format!(
            "`{}` is not a decision id nor a prefix of one ({DECISION_PREFIX_MIN} characters or more); `strata inspect {run} decisions` lists them",
            text.escape_debug()
        )));
    }
    Ok(Named::Prefix(prefix))
}

/// The one id of `ids` that starts with `prefix` (lowercase), or why there is none.
fn by_prefix(prefix: &str, ids: impl Iterator<Item = DecisionId>) -> Result<DecisionId, String> {
    let matching: Vec<DecisionId> = ids.filter(|id| id.to_string().starts_with(prefix)).collect();
    match matching.as_slice() {
        [id] => Ok(*id),
        [] => Err(format!("no decision starts with `{prefix}`")),
        many => {
            let ids: Vec<String> = many.iter().map(ToString::to_string).collect();
            Err(format!(
                "`{prefix}` starts {} decisions: {}; give more of the id",
                many.len(),
                ids.join(", ")
            ))
        }
    }
}

/// What became of a request [`submit`] delivered.
#[derive(Debug)]
pub enum Submitted {
    /// The live run applied it.
    Applied(Done),
    /// Queued for `strata resume` (the run is not live), or not waited for (`--no-wait`).
    Queued,
    /// The live run did not take it within [`WAIT`]: it stays queued.
    TimedOut,
}

/// A request [`submit`] delivered: to which run, its id, whether the run was live, and what
/// became of it.
#[derive(Debug)]
pub struct Delivery {
    /// The run's id.
    pub run_id: RunId,
    /// The request's id.
    pub request_id: String,
    /// Whether a process was running the run when it was delivered.
    pub live: bool,
    /// What became of it.
    pub submitted: Submitted,
}

/// Delivers `envelope` to the run's inbox. A refused one is audited (by the live run, or here
/// when the run is not live) and is bad input. An accepted one is queued for `strata resume`
/// when the run is not live; else it waits for its result (unless `no_wait`); a refusal by
/// the run is bad input.
pub async fn submit(
    dir: &Path,
    info: &RunInfo,
    envelope: Envelope,
    no_wait: bool,
) -> Result<Delivery> {
    let live = RunStore::is_in_use(dir).map_err(Error::bad_input_from)?;
    if let Some(error) = &envelope.refused {
        if live {
            deliver(dir, &envelope)?;
            if !no_wait {
                // So that the refusal is in the audit log when this command ends.
                wait_for(dir, &envelope.id).await;
            }
        } else {
            audit_now(dir, info, &envelope).await?;
        }
        return Err(Error::bad_input(error.clone()));
    }
    deliver(dir, &envelope)?;
    let submitted = if !live || no_wait {
        Submitted::Queued
    } else {
        match wait_for(dir, &envelope.id).await {
            Some(Done { error: Some(error), .. }) => return Err(Error::bad_input(error)),
            Some(done) => Submitted::Applied(done),
            None => Submitted::TimedOut,
        }
    };
    Ok(Delivery { run_id: info.run_id.clone(), request_id: envelope.id, live, submitted })
}

/// The run's `[approvals] humans`, from the team file stored in the run.
fn allowed_humans(dir: &Path) -> Result<Vec<String>> {
    Ok(stored_team(dir)?.spec.approvals.humans)
}

/// The team file stored in the run.
fn stored_team(dir: &Path) -> Result<team_file::TeamFile> {
    crate::run::read_team(&dir.join(TEAM_FILE))
}

/// What the command can check at once, on `governance` (from a private copy of the run's
/// store, or its NATS server): `Some(error)` when the request is refused.
async fn check(
    governance: &dyn Governance,
    info: &RunInfo,
    request: &OperatorRequest,
    id: DecisionId,
    human: &str,
    allowed: &[String],
) -> Result<Option<String>> {
    let Some(mut decision) = governance.get(id).await.context("cannot read the decision")? else {
        return Ok(Some(format!(
            "no decision {id} in run {}; `strata inspect {} decisions` lists them",
            info.run_id, info.run_id
        )));
    };
    if !allowed.iter().any(|a| a == human) {
        let who = if allowed.is_empty() {
            "nobody: its team file has no `[approvals] humans`".to_owned()
        } else {
            allowed.join(", ")
        };
        return Ok(Some(format!(
            "`{human}` may not sign for humans in run {} (who may: {who})",
            info.run_id
        )));
    }
    let actor = request.actor();
    let now = Timestamp(now_ms());
    let rule = match request {
        OperatorRequest::Approve { .. } => decision.sign(&actor, now).map(|_| ()),
        OperatorRequest::Veto { reason, .. } => decision.veto(&actor, reason.as_str(), now),
        // Checked by `send_command` and `send_cancel`.
        OperatorRequest::Rollback { .. }
        | OperatorRequest::Adopt { .. }
        | OperatorRequest::Cancel { .. } => Ok(()),
    };
    Ok(rule.err().map(|e| e.to_string()))
}

/// A private copy of the run's store; a copy of a live run caught mid-write is taken again
/// (a few times). A store that cannot be copied is bad input.
pub async fn read_copy(dir: &Path) -> Result<RunStore> {
    const ATTEMPTS: u32 = 5;
    let mut attempt = 0;
    loop {
        attempt += 1;
        match RunStore::open_read_only(dir) {
            Err(run_store::StoreError::CopyUnreadable { .. }) if attempt < ATTEMPTS => {
                tokio::time::sleep(POLL).await;
            }
            other => return other.map_err(Error::bad_input_from),
        }
    }
}

/// Writes the request into the run's inbox (a temporary file and a rename).
pub fn deliver(dir: &Path, envelope: &Envelope) -> Result<()> {
    let inbox = dir.join(REQUESTS_DIR);
    std::fs::create_dir_all(&inbox)
        .with_context(|| format!("cannot create {}", inbox.display()))?;
    let bytes = serde_json::to_vec_pretty(envelope)?;
    write_atomic(&inbox.join(format!("{}.json", envelope.id)), &bytes)?;
    Ok(())
}

/// Asks the live run `run` of `data` to stop as Ctrl-C does (the dashboard's cancel), as
/// `human` (a name, not necessarily one of `[approvals] humans`), and waits for it to take
/// the request. A run that is not running is bad input: a cancel is never queued for a
/// later `resume`.
pub async fn send_cancel(data: &Path, run: &str, human: &str) -> Result<Submitted> {
    agent_state::check_human_name(human)
        .map_err(|e| Error::bad_input(format!("`{}` names no human: {e}", human.escape_debug())))?;
    let dir = resolve_run(data, run)?;
    let info = RunInfo::read(&dir).map_err(Error::bad_input_from)?;
    if !RunStore::is_in_use(&dir).map_err(Error::bad_input_from)? {
        return Err(Error::bad_input(format!(
            "run {} is not running ({}): there is nothing to cancel",
            info.run_id,
            info.status.as_str()
        )));
    }
    let envelope = Envelope {
        id: new_request_id(),
        at: now_ms(),
        request: OperatorRequest::Cancel { human: human.to_owned() },
        refused: None,
    };
    Ok(submit(&dir, &info, envelope, false).await?.submitted)
}

/// The result of request `id`, once the run wrote it; `None` after [`WAIT`].
async fn wait_for(dir: &Path, id: &str) -> Option<Done> {
    let path = dir.join(REQUESTS_DIR).join(format!("{id}.done.json"));
    let deadline = tokio::time::Instant::now() + WAIT;
    loop {
        if let Ok(bytes) = std::fs::read(&path)
            && let Ok(done) = serde_json::from_slice::<Done>(&bytes)
        {
            return Some(done);
        }
        if tokio::time::Instant::now() >= deadline {
            return None;
        }
        tokio::time::sleep(POLL).await;
    }
}

/// Audits a refused request of a run that is not live, in its own store (on its NATS server
/// for a run on NATS; its database stays locked meanwhile, so the run cannot start).
async fn audit_now(dir: &Path, info: &RunInfo, envelope: &Envelope) -> Result<()> {
    let store = match RunStore::open(dir, Durability::Synced) {
        Ok(store) => store,
        // Started meanwhile: the run audits it.
        Err(run_store::StoreError::Locked { .. }) => return deliver(dir, envelope),
        Err(e) => return Err(Error::failed_from(e).context("cannot open the run")),
    };
    let stores = Stores::of_run(&store, dir, info).await?;
    let now = Timestamp(now_ms());
    apply(envelope, stores.governance.as_ref(), stores.bus.as_ref(), stores.audit.as_ref(), now)
        .await?;
    Ok(())
}

/// A request id that sorts by time: milliseconds since the epoch and four random hex digits.
fn new_request_id() -> String {
    let suffix = &uuid::Uuid::new_v4().simple().to_string()[..4];
    format!("{:013}-{suffix}", now_ms())
}

#[cfg(test)]
mod tests;
