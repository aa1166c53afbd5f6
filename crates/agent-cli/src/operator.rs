//! The operator inbox: requests from outside a run (`strata approve`, `strata veto`,
//! `strata rollback`) and the running process that applies them.
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
//! 3. The command waits (up to [`WAIT`], unless `--no-wait`) for the result file and prints
//!    it. When the run is not live, an accepted request stays queued for `strata resume`, and
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

use agent_core::tools::ToolRegistry;
use agent_core::{AuditEvent, AuditLog, Clock};
use agent_state::{
    Address, AgentId, DecisionId, HUMAN_PREFIX, Message, MessageKind, SignOutcome, Timestamp,
};
use anyhow::Context;
use governance::{DecideError, Governance};
use message_bus::MessageBus;
use run_store::{Durability, RunStore};
use serde::{Deserialize, Serialize};

use crate::cli::{AdoptArgs, ApproveArgs, DecisionTarget, RollbackArgs, VetoArgs};
use crate::run::read_input;
use crate::{Failure, TASK_FAILED, bad_input};
use strata::Stores;
use strata::run_dir::{RunInfo, TEAM_FILE, now_ms, resolve_run, write_atomic};

/// The drop directory of a run's operator requests.
pub(crate) const REQUESTS_DIR: &str = "requests";
/// At most this many requests are applied in one pass.
pub(crate) const MAX_PER_PASS: usize = 16;
/// A request file larger than this is refused unread (a hot-swapped genome carries up to
/// 1 MiB of code, escaped).
const MAX_REQUEST_BYTES: u64 = 4 * 1024 * 1024;
/// How long `strata approve` / `veto` waits for a live run to take its request.
pub(crate) const WAIT: Duration = Duration::from_secs(10);
/// How often it looks for the result meanwhile.
const POLL: Duration = Duration::from_millis(50);

/// What an operator asks of a run. Tagged by `request`, so more kinds can be added.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "request", rename_all = "snake_case")]
pub(crate) enum OperatorRequest {
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
    fn actor(&self) -> AgentId {
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
pub(crate) struct Envelope {
    /// The request's id (also its file name).
    pub(crate) id: String,
    /// When it was written (ms since the epoch).
    pub(crate) at: u64,
    /// What is asked.
    pub(crate) request: OperatorRequest,
    /// Set when the command's checks refused it: the run only audits it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) refused: Option<String>,
}

/// The result of one request, `<id>.done.json`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct Done {
    /// The request's id.
    pub(crate) id: String,
    /// `signed`, `approved`, `already_signed`, `vetoed` or `refused`.
    pub(crate) outcome: String,
    /// Why it was refused.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) error: Option<String>,
}

/// A request as the audit line shows it: `approve decision X` or `veto decision X ("why")`.
pub(crate) fn describe(request: &serde_json::Value) -> String {
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
pub(crate) struct Authority {
    /// The team's `[approvals] humans`.
    humans: Vec<String>,
    /// The team's OODA agents (the only ones a rollback or a hot-swap may name).
    oodas: Vec<AgentId>,
}

impl Authority {
    /// The authority the team `spec` grants.
    pub(crate) fn of(spec: &agent_pool::TeamSpec) -> Self {
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
    pub(crate) fn refusal(&self, run: &str, request: &OperatorRequest) -> Option<String> {
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
pub(crate) async fn apply(
    envelope: &Envelope,
    governance: &dyn Governance,
    bus: &dyn MessageBus,
    audit: &dyn AuditLog,
    now: Timestamp,
) -> anyhow::Result<Done> {
    let actor = envelope.request.actor();
    let result: Result<&str, String> = match (&envelope.refused, &envelope.request) {
        (Some(error), _) => Err(error.clone()),
        (None, OperatorRequest::Approve { decision, .. }) => {
            match governance.sign(*decision, &actor, now).await {
                Ok(SignOutcome::Signed) => Ok("signed"),
                Ok(SignOutcome::Approved) => Ok("approved"),
                Ok(SignOutcome::AlreadySigned) => Ok("already_signed"),
                Err(DecideError::Backend(e)) => return Err(e.into()),
                Err(e) => Err(e.to_string()),
            }
        }
        (None, OperatorRequest::Veto { decision, reason, .. }) => {
            match governance.veto(*decision, &actor, reason, now).await {
                Ok(()) => Ok("vetoed"),
                Err(DecideError::Backend(e)) => return Err(e.into()),
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
) -> anyhow::Result<Result<&'static str, String>> {
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
        Err(message_bus::SendError::Backend(e)) => return Err(e.into()),
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

/// One pass over the run's inbox: applies the pending requests (at most [`MAX_PER_PASS`]);
/// returns how many were taken.
pub(crate) async fn pass(
    dir: &Path,
    authority: &Authority,
    governance: &dyn Governance,
    bus: &dyn MessageBus,
    audit: &dyn AuditLog,
    clock: &dyn Clock,
    cancel: &Cancel,
) -> anyhow::Result<usize> {
    let inbox = dir.join(REQUESTS_DIR);
    let found = {
        let inbox = inbox.clone();
        tokio::task::spawn_blocking(move || pending(&inbox, MAX_PER_PASS)).await??
    };
    let taken = found.len();
    for (path, id, read) in found {
        let done = match read {
            Ok(mut envelope) => {
                // The running process decides who may: the file's own claims are not trusted.
                if envelope.refused.is_none() {
                    envelope.refused = authority.refusal(&run_name(dir), &envelope.request);
                }
                let cancels = matches!(envelope.request, OperatorRequest::Cancel { .. });
                if cancels && envelope.refused.is_none() && envelope.at < cancel.since_ms {
                    envelope.refused = Some(
                        "the cancel was asked of a run no longer running (it was written before this process took the run); not applied"
                            .to_owned(),
                    );
                }
                let done = apply(&envelope, governance, bus, audit, clock.now()).await?;
                if cancels && done.error.is_none() {
                    cancel.asked.notify_one();
                }
                done
            }
            Err(why) => {
                let error = format!("request file {id}.json cannot be taken: {why}");
                audit
                    .append(
                        &AgentId::new(format!("{HUMAN_PREFIX}?")),
                        clock.now(),
                        AuditEvent::Operator {
                            request: serde_json::json!({ "id": id }),
                            outcome: "refused".into(),
                            error: Some(error.clone()),
                        },
                    )
                    .await?;
                Done { id: id.clone(), outcome: "refused".into(), error: Some(error) }
            }
        };
        let bytes = serde_json::to_vec_pretty(&done)?;
        let done_path = inbox.join(format!("{id}.done.json"));
        tokio::task::spawn_blocking(move || -> anyhow::Result<()> {
            write_atomic(&done_path, &bytes)?;
            std::fs::remove_file(&path).with_context(|| format!("cannot remove {}", path.display()))
        })
        .await??;
    }
    Ok(taken)
}

/// The run's name as a refusal names it: its directory's name.
fn run_name(dir: &Path) -> String {
    dir.file_name().map_or_else(|| dir.display().to_string(), |n| n.to_string_lossy().into_owned())
}

/// How a run hears of a [`OperatorRequest::Cancel`] it applied.
#[derive(Debug, Default)]
pub(crate) struct Cancel {
    /// Notified once a cancel is applied: the run stops as on Ctrl-C.
    pub(crate) asked: tokio::sync::Notify,
    /// When this process took the run (ms since the epoch): a cancel written before was meant
    /// for a run that has ended since, and is refused rather than stop this one.
    pub(crate) since_ms: u64,
}

/// Serves the run's inbox until the task is aborted: a [`pass`] every `every`, each request
/// authorised against `authority` (the run's team file); an applied cancel notifies `cancel`.
#[allow(clippy::too_many_arguments, reason = "the run's services, each its own")]
pub(crate) async fn serve(
    dir: PathBuf,
    authority: Authority,
    governance: Arc<dyn Governance>,
    bus: Arc<dyn MessageBus>,
    audit: Arc<dyn AuditLog>,
    clock: Arc<dyn Clock>,
    every: Duration,
    cancel: Arc<Cancel>,
) {
    loop {
        let pass = pass(
            &dir,
            &authority,
            governance.as_ref(),
            bus.as_ref(),
            audit.as_ref(),
            clock.as_ref(),
            &cancel,
        );
        if let Err(e) = pass.await {
            tracing::warn!(error = %format!("{e:#}"), "operator requests: will try again");
        }
        tokio::time::sleep(every).await;
    }
}

/// `strata approve RUN DECISION`.
pub(crate) async fn approve(args: &ApproveArgs) -> Result<u8, Failure> {
    let request = |decision, human| OperatorRequest::Approve { decision, human };
    decide(&args.target, request).await
}

/// `strata veto RUN DECISION --reason TEXT`.
pub(crate) async fn veto(args: &VetoArgs) -> Result<u8, Failure> {
    let reason = args.reason.clone();
    let request = move |decision, human| OperatorRequest::Veto { decision, human, reason };
    decide(&args.target, request).await
}

/// `strata rollback RUN AGENT VERSION`.
pub(crate) async fn rollback(args: &RollbackArgs) -> Result<u8, Failure> {
    let dir = resolve_run(&args.operator.data, &args.run)?;
    let info = RunInfo::read(&dir).map_err(bad_input)?;
    let human = operator_name(args.operator.as_name.as_deref())?;
    let agent = AgentId::new(args.agent.as_str());
    let request = OperatorRequest::Rollback { agent: agent.clone(), version: args.version, human };
    let refused = Authority::of(&stored_team(&dir)?.spec).refusal(&info.run_id, &request);
    let envelope = Envelope { id: new_request_id(), at: now_ms(), request, refused };
    Ok(match submit(&dir, &info, envelope, args.operator.no_wait).await? {
        Submitted::Applied(_) => {
            outln!(
                "{agent} told to roll back to version {}; it does at its next turns (`strata inspect {} audit` shows it)",
                args.version,
                info.run_id
            );
            0
        }
        Submitted::Queued => 0,
        Submitted::TimedOut => TASK_FAILED,
    })
}

/// `strata adopt RUN AGENT GENOME`: a genome file, or an evolution whose best genome it is.
pub(crate) async fn adopt(args: &AdoptArgs) -> Result<u8, Failure> {
    let dir = resolve_run(&args.operator.data, &args.run)?;
    let info = RunInfo::read(&dir).map_err(bad_input)?;
    let human = operator_name(args.operator.as_name.as_deref())?;
    let agent = AgentId::new(args.agent.as_str());
    let genome = read_genome(&args.operator.data, &args.genome)?;
    let short = genome.id.short().to_owned();
    let request = OperatorRequest::Adopt { agent: agent.clone(), genome: Box::new(genome), human };
    let refused = Authority::of(&stored_team(&dir)?.spec).refusal(&info.run_id, &request);
    let envelope = Envelope { id: new_request_id(), at: now_ms(), request, refused };
    Ok(match submit(&dir, &info, envelope, args.operator.no_wait).await? {
        Submitted::Applied(_) => {
            outln!(
                "{agent} told to become genome {short}; it does at its next turn (`strata inspect {} audit` shows it, `strata rollback` goes back)",
                info.run_id
            );
            0
        }
        Submitted::Queued => 0,
        Submitted::TimedOut => TASK_FAILED,
    })
}

/// The genome `given` names: a genome JSON file (such as an evolution's `best-genome.json`),
/// or an evolution in `data` whose best genome it is; checked (its id matches its content).
fn read_genome(data: &Path, given: &str) -> Result<agent_state::evolution::Genome, Failure> {
    let file = Path::new(given);
    let path = if file.is_file() {
        file.to_path_buf()
    } else {
        let dir = crate::evolve::resolve(data, given).map_err(|_| {
            bad_input(anyhow::anyhow!(
                "`{}` is neither a genome file nor an evolution in {}",
                given.escape_debug(),
                data.display()
            ))
        })?;
        let best = dir.join(crate::evolve::BEST_FILE);
        if !best.is_file() {
            return Err(bad_input(anyhow::anyhow!(
                "evolution `{}` has no best genome yet (it has not finished); `strata evolve --resume {}` finishes it",
                given.escape_debug(),
                given.escape_debug()
            )));
        }
        best
    };
    let genome: agent_state::evolution::Genome = strata::run_dir::read_json(&path)
        .with_context(|| format!("{} is not a genome", path.display()))
        .map_err(bad_input)?;
    genome
        .verify()
        .map_err(|e| bad_input(anyhow::anyhow!("{} is not a valid genome: {e}", path.display())))?;
    Ok(genome)
}

/// Who signs: `--as NAME`, else `$USER`.
fn operator_name(given: Option<&str>) -> Result<String, Failure> {
    let name = match given {
        Some(name) => name.to_owned(),
        None => match std::env::var("USER") {
            Ok(user) if !user.is_empty() => user,
            _ => {
                return Err(bad_input(anyhow::anyhow!(
                    "who signs? $USER is not set: give --as NAME (one of the run's [approvals] humans)"
                )));
            }
        },
    };
    agent_state::check_human_name(&name)
        .map_err(|e| bad_input(anyhow::anyhow!("--as {}: {e}", name.escape_debug())))?;
    Ok(name)
}

async fn decide(
    target: &DecisionTarget,
    request: impl FnOnce(DecisionId, String) -> OperatorRequest,
) -> Result<u8, Failure> {
    let (data, run, no_wait) = (&target.operator.data, &target.run, target.operator.no_wait);
    let as_name = target.operator.as_name.as_deref();
    let decision = &target.decision;
    let (id, human, submitted) =
        send_decision(data, run, decision, as_name, request, no_wait, true).await?;
    Ok(match submitted {
        Submitted::Applied(done) => {
            outln!("decision {id}: {} by {HUMAN_PREFIX}{human}", done.outcome.replace('_', " "));
            0
        }
        Submitted::Queued => 0,
        Submitted::TimedOut => TASK_FAILED,
    })
}

/// Checks and delivers a decision request (`strata approve` / `veto`, and the dashboard's
/// buttons): the run in `data`, the decision's id, who (`as_name`, else `$USER`). With `say`,
/// what is queued or late is printed as the commands print it; without, only returned.
pub(crate) async fn send_decision(
    data: &Path,
    run: &str,
    decision: &str,
    as_name: Option<&str>,
    request: impl FnOnce(DecisionId, String) -> OperatorRequest,
    no_wait: bool,
    say: bool,
) -> Result<(DecisionId, String, Submitted), Failure> {
    let dir = resolve_run(data, run)?;
    let info = RunInfo::read(&dir).map_err(bad_input)?;
    let human = operator_name(as_name)?;
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
                bad_input(anyhow::anyhow!(
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
    let submitted = submit_as(&dir, &info, envelope, no_wait, say).await?;
    Ok((id, human, submitted))
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
fn named_decision(text: &str, run: &str) -> Result<Named, Failure> {
    if let Ok(id) = uuid::Uuid::parse_str(text) {
        return Ok(Named::Id(DecisionId::from_uuid(id)));
    }
    let prefix = text.to_ascii_lowercase();
    let plausible = (DECISION_PREFIX_MIN..36).contains(&prefix.len())
        && prefix.chars().all(|c| c.is_ascii_hexdigit() || c == '-');
    if !plausible {
        return Err(bad_input(anyhow::anyhow!(
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
pub(crate) enum Submitted {
    /// The live run applied it.
    Applied(Done),
    /// Queued for `strata resume`, or not waited for (`--no-wait`); the command said so.
    Queued,
    /// The live run did not take it in time; the command said so.
    TimedOut,
}

/// Delivers `envelope` to the run's inbox. A refused one is audited (by the live run, or here
/// when the run is not live) and is bad input. An accepted one is queued for `strata resume`
/// when the run is not live; else the command waits for its result (unless `no_wait`); a
/// refusal by the run is bad input.
async fn submit(
    dir: &Path,
    info: &RunInfo,
    envelope: Envelope,
    no_wait: bool,
) -> Result<Submitted, Failure> {
    submit_as(dir, info, envelope, no_wait, true).await
}

/// [`submit`], printing what is queued or late only with `say`.
async fn submit_as(
    dir: &Path,
    info: &RunInfo,
    envelope: Envelope,
    no_wait: bool,
    say: bool,
) -> Result<Submitted, Failure> {
    let live = RunStore::is_in_use(dir).map_err(bad_input)?;
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
        return Err(bad_input(anyhow::anyhow!("{error}")));
    }
    deliver(dir, &envelope)?;
    if !live {
        if say {
            outln!(
                "run {} is not running: request {} is queued; `strata resume {}` applies it",
                info.run_id,
                envelope.id,
                info.run_id
            );
        }
        return Ok(Submitted::Queued);
    }
    if no_wait {
        if say {
            outln!("request {} delivered to run {}", envelope.id, info.run_id);
        }
        return Ok(Submitted::Queued);
    }
    match wait_for(dir, &envelope.id).await {
        Some(Done { error: Some(error), .. }) => Err(bad_input(anyhow::anyhow!("{error}"))),
        Some(done) => Ok(Submitted::Applied(done)),
        None => {
            if say {
                errln!(
                    "run {} has not taken request {} within {} s; it stays queued and is applied when the run reads its requests",
                    info.run_id,
                    envelope.id,
                    WAIT.as_secs()
                );
            }
            Ok(Submitted::TimedOut)
        }
    }
}

/// The run's `[approvals] humans`, from the team file stored in the run.
fn allowed_humans(dir: &Path) -> Result<Vec<String>, Failure> {
    Ok(stored_team(dir)?.spec.approvals.humans)
}

/// The team file stored in the run.
fn stored_team(dir: &Path) -> Result<team_file::TeamFile, Failure> {
    let path = dir.join(TEAM_FILE);
    let text = read_input(&path, "team file", team_file::MAX_TEAM_FILE_BYTES)?;
    team_file::parse_stored_team(&path, &text, &ToolRegistry::with_builtins()).map_err(bad_input)
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
) -> Result<Option<String>, Failure> {
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
        // Checked by `rollback`, `adopt` and `send_cancel`.
        OperatorRequest::Rollback { .. }
        | OperatorRequest::Adopt { .. }
        | OperatorRequest::Cancel { .. } => Ok(()),
    };
    Ok(rule.err().map(|e| e.to_string()))
}

/// A private copy of the run's store; a copy of a live run caught mid-write is taken again
/// (a few times).
pub(crate) async fn read_copy(dir: &Path) -> Result<RunStore, Failure> {
    const ATTEMPTS: u32 = 5;
    let mut attempt = 0;
    loop {
        attempt += 1;
        match RunStore::open_read_only(dir) {
            Err(run_store::StoreError::CopyUnreadable { .. }) if attempt < ATTEMPTS => {
                tokio::time::sleep(POLL).await;
            }
            other => return other.map_err(bad_input),
        }
    }
}

/// Writes the request into the run's inbox (a temporary file and a rename).
fn deliver(dir: &Path, envelope: &Envelope) -> Result<(), Failure> {
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
pub(crate) async fn send_cancel(data: &Path, run: &str, human: &str) -> Result<Submitted, Failure> {
    agent_state::check_human_name(human).map_err(|e| {
        bad_input(anyhow::anyhow!("`{}` names no human: {e}", human.escape_debug()))
    })?;
    let dir = resolve_run(data, run)?;
    let info = RunInfo::read(&dir).map_err(bad_input)?;
    if !RunStore::is_in_use(&dir).map_err(bad_input)? {
        return Err(bad_input(anyhow::anyhow!(
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
    submit_as(&dir, &info, envelope, false, false).await
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
async fn audit_now(dir: &Path, info: &RunInfo, envelope: &Envelope) -> Result<(), Failure> {
    let store = match RunStore::open(dir, Durability::Synced) {
        Ok(store) => store,
        // Started meanwhile: the run audits it.
        Err(run_store::StoreError::Locked { .. }) => return deliver(dir, envelope),
        Err(e) => return Err(Failure::Other(anyhow::Error::new(e).context("cannot open the run"))),
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
