//! The audit log: every status change and every notable act of an agent, in order.
//!
//! **Anchors.** The hash chain shows a record changed or removed in the middle of the log, but
//! not records cut from its end: the newest hash must be kept somewhere else. Three places keep
//! it. Each agent's saved record ([`AgentRecord::audit_head`](crate::AgentRecord::audit_head))
//! holds the last record that agent had appended when the record was saved: a lower bound, as
//! the agent may append more before a crash. The seal a run gets when it closes cleanly holds
//! the log's exact final record (the `sled` backend keeps it there with `RunStore::set_anchor`).
//! And while the run goes, the run's anchor files (`strata-run.anchor` and a copy in the data
//! directory, written by `run-store` after each group commit) hold a record the store held
//! durably: a lower bound that, unlike the agents' records, is not in the store itself, so a
//! run whose seal is gone (crashed, killed, or the seal deleted) still cannot pass truncated or
//! altered. [`check_anchors`] compares a log with the seal and the agents' records,
//! [`check_anchor_list`] with any list of anchors.

use std::borrow::Cow;
use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use agent_state::{
    AgentId, AgentStatus, BackendError, DecisionId, Timestamp, TransitionRecord, Versioned,
};
use async_trait::async_trait;
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};
use thiserror::Error;

/// What happened.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "event", rename_all = "snake_case")]
pub enum AuditEvent {
    /// A status change, applied through [`agent_state::Lifecycle::apply`].
    Transition {
        /// Before.
        from: AgentStatus,
        /// After.
        to: AgentStatus,
        /// Why.
        reason: Cow<'static, str>,
    },
    /// An act the backends or the runtime refused (a permission or rule violation).
    Denied {
        /// What was attempted, such as `write board mid-1`.
        action: String,
        /// The refusal.
        error: String,
    },
    /// A tool call and its outcome.
    ToolCall {
        /// The tool.
        tool: String,
        /// Its arguments.
        args: serde_json::Value,
        /// Whether it succeeded.
        success: bool,
        /// Output or error, shortened.
        summary: String,
    },
    /// A failed heartbeat or task, and the retry it leads to.
    Error {
        /// The error.
        error: String,
        /// Retries spent so far, this one included.
        retry: u32,
        /// The agent's limit.
        max_retries: u32,
    },
    /// After a failed turn ([`Error`](AuditEvent::Error)), whether and when the agent tries it
    /// again (docs/concepts.md#retries-and-timeouts): a transient failure with retries left waits
    /// for a later heartbeat (1, 2, 4 heartbeats, capped: [`agent_state::retry_wait_beats`]); a
    /// permanent one, or one past the agent's retries, is not tried again and the agent fails.
    Retry {
        /// The attempt that failed: 1 for the first, `max_retries + 1` for the last.
        attempt: u32,
        /// The agent's limit of retries.
        max_retries: u32,
        /// The failure's class: transient (retried) or permanent (never retried).
        class: agent_state::ErrorClass,
        /// The heartbeat cycle the attempt failed in.
        heartbeat: u64,
        /// Heartbeats until the next attempt; `None`: no next attempt.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        wait_beats: Option<u64>,
        /// The heartbeat the next attempt is due at (`heartbeat + wait_beats`): the agent takes
        /// no turn before it, whatever mail arrives.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        due_heartbeat: Option<u64>,
    },
    /// A governance act.
    Decision {
        /// The decision.
        decision: DecisionId,
        /// `proposed`, `signed`, `approved` or `vetoed`.
        action: String,
        /// Detail, such as a veto reason.
        detail: String,
    },
    /// A heartbeat the agent did not answer within its cycle.
    MissedHeartbeat {
        /// The heartbeat number.
        heartbeat: u64,
    },
    /// The agent (a top power or a supervisor) spawned another; written before the new agent
    /// exists, so a resumed run can create it.
    Spawned {
        /// The new agent, its role, task and place in the tree.
        spawn: crate::spawn::SpawnRecord,
    },
    /// The agent dismissed one of its subordinates (`despawn_agent`).
    Despawned {
        /// The subordinate.
        agent: AgentId,
        /// Its final summary.
        summary: String,
    },
    /// The agent returned its structured result (`return_results`) to its supervisor.
    Result {
        /// The task it was given.
        task: String,
        /// The result.
        result: agent_state::AgentResult,
        /// `false` when an artifact it claimed to have created or modified is not a file its
        /// own tool calls (or its workers' trusted results) touched, after one chance to fix it.
        trusted: bool,
    },
    /// A time limit of the team (its `[timeouts]`) ran out: a reasoning call, a heartbeat
    /// turn, a subtask or a task was stopped. (A tool call that runs out of time is audited
    /// as a failed [`ToolCall`](AuditEvent::ToolCall) instead.)
    TimedOut {
        /// Which limit.
        limit: agent_state::Limit,
        /// What was stopped, in words (`reasoning call next_action`, `step `s1``).
        what: String,
        /// The limit, in milliseconds.
        limit_ms: u64,
    },
    /// A tool call, a heartbeat turn or a task passed its soft limit (`[timeouts]
    /// tool_soft_ms`, `turn_soft_ms`, `task_soft_ms`): it goes on to its hard limit, and the
    /// supervisor was warned. Audited once per call, turn or task.
    SoftTimeout {
        /// Which limit.
        limit: agent_state::Limit,
        /// What is slow, in words (`tool call `shell``, `heartbeat turn`, `task `t1``).
        what: String,
        /// The soft limit passed, in milliseconds.
        soft_ms: u64,
        /// The hard limit it still runs under, in milliseconds.
        hard_ms: u64,
    },
    /// A call of a tool that is neither read-only nor idempotent whose outcome cannot be known:
    /// it ran past the tool limit while it may still be running where it is served (its
    /// request was cancelled, for an MCP tool through the protocol), or a crash interrupted it
    /// and a resumed run cannot tell whether it had its effect. It is recorded under its call
    /// so that it is never sent again automatically; its step goes to the lead, and from there
    /// to a human, to decide.
    ToolOutcomeUnknown {
        /// The tool.
        tool: String,
        /// Its arguments (large strings as references, as in [`ToolCall`](AuditEvent::ToolCall)).
        args: serde_json::Value,
        /// Why the outcome is unknown, in words.
        reason: String,
        /// Whether a cancellation was sent to where the tool is served.
        cancelled: bool,
    },
    /// A guard found the run stuck (a loop, a ping-pong, no progress, a wait cycle: the
    /// [`TaskFailure`](agent_state::TaskFailure) says which, who and what) and stopped the task
    /// or escalated it to a supervisor.
    Stuck {
        /// The task, if known.
        task: Option<String>,
        /// What was found, as the task's stop reason.
        reason: agent_state::TaskFailure,
        /// `None`: the task was stopped; else the supervisor it was escalated to.
        escalated_to: Option<AgentId>,
    },
    /// Executors of the same lead helping each other: one asked a peer to take over a subtask
    /// it could not finish or to share what it knows, or answered such a request. The asker
    /// writes `asked` and how it ended (`handed_over`, `refused`, `no_answer`, `shared`), the
    /// peer what it answered (`accepted`, `refused`, `shared`).
    PeerHelp {
        /// The other executor: the peer asked, or the one asking.
        peer: AgentId,
        /// The step it is about (`task/step`); `None` for the peer sharing its board (it is not
        /// told the asker's step).
        step: Option<String>,
        /// What was asked.
        request: PeerHelpRequest,
        /// How it went.
        outcome: PeerHelpOutcome,
    },
    /// One event of an OODA agent's loop (docs/concepts.md#ooda-agents): a phase began, a phase
    /// failed, or a self-modification was applied, refused, rolled back or waits for a human.
    Ooda {
        /// The event.
        ooda: agent_state::ooda::OodaEvent,
    },
    /// A request of an operator from outside the run (`strata approve`, `strata veto`),
    /// written under the human's id (`human:<name>`) by the process that took it, and what came
    /// of it: applied, or refused with the typed error (the run is then unchanged).
    Operator {
        /// The request as the operator wrote it (JSON: `{"request": "approve", ...}`).
        request: serde_json::Value,
        /// What it did: `signed`, `approved`, `already_signed`, `vetoed`, or `refused`.
        outcome: String,
        /// Why it was refused.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        error: Option<String>,
    },
    /// The SHA-256 of each input a run stored (its team file, plan and the fixed part of its
    /// `run.json`), written by the runtime when the run starts and after each resume: `strata
    /// resume` compares the stored files with the last such record before it starts anything.
    RunInputs {
        /// File name → lowercase hex SHA-256.
        sha256: std::collections::BTreeMap<String, String>,
    },
    /// A program the run starts outside the sandbox, by the team file's or the operator's
    /// explicit choice (an MCP server with `sandbox = false`, or every one of an
    /// `--unsandboxed` run): written at start and at each resume under the program's id
    /// (`mcp:<server>`). A recorded choice, not a failure.
    Unsandboxed {
        /// The program as the team file names it (`command`).
        command: String,
        /// Why it is not sandboxed, in words (`` `sandbox = false` in the team file ``).
        reason: String,
    },
    /// A run placed on workers: a worker stopped holding agents it hosted (it was killed, cut
    /// off from the server, or stopped), and which worker took each over. Written by the run's
    /// coordinator (as `system`) once every agent was taken, or when none was taken after a
    /// while.
    WorkerLost {
        /// The worker's id.
        worker: String,
        /// The agents it held.
        agents: Vec<AgentId>,
        /// The worker that took each agent over; an agent missing was not taken (yet).
        taken_by: BTreeMap<AgentId, String>,
    },
    /// A heartbeat turn of this agent panicked. The turn's work is dropped and the agent
    /// reloaded from its stored state, as a resumed run does (the messages it had taken come
    /// again; its journaled tool calls are not repeated); after
    /// [`MAX_PANICS`](crate::MAX_PANICS) panics in a row it fails with reason
    /// `panicked: <message>` and reports to its supervisor.
    AgentPanicked {
        /// The panic's message.
        message: String,
        /// How many turns in a row have panicked, this one included.
        count: u32,
        /// Whether the agent failed over it (else it was reloaded to try again).
        failed: bool,
    },
    /// A model reasoner's answer to a decision (a plan, a review, a vote, ...) failed its
    /// checks and was sent back to the model with its problems, for repair `repair` of at most
    /// `max_repairs` (the LLM reasoner: a plan gets up to `[reasoner] plan_repairs`, another
    /// decision one). Written through [`audit_reasoning`] under the agent whose call it is.
    AnswerRepair {
        /// The decision asked (`plan`, `review`, `vote`, `decompose`, `judge`, `answer`).
        decision: String,
        /// Which repair this is, from 1.
        repair: u32,
        /// Most repairs the decision gets.
        max_repairs: u32,
        /// The invalid answer's problems, as the repair request quotes them.
        problems: String,
    },
}

impl AuditEvent {
    /// The event's name, as a stored record's `event` field holds it (`transition`,
    /// `tool_call`, `result`, ...): what [`AuditLog::records_of`] selects by.
    pub fn name(&self) -> &'static str {
        match self {
            Self::Transition { .. } => "transition",
            Self::Denied { .. } => "denied",
            Self::ToolCall { .. } => "tool_call",
            Self::Error { .. } => "error",
            Self::Retry { .. } => "retry",
            Self::Decision { .. } => "decision",
            Self::MissedHeartbeat { .. } => "missed_heartbeat",
            Self::Spawned { .. } => "spawned",
            Self::Despawned { .. } => "despawned",
            Self::Result { .. } => "result",
            Self::TimedOut { .. } => "timed_out",
            Self::SoftTimeout { .. } => "soft_timeout",
            Self::ToolOutcomeUnknown { .. } => "tool_outcome_unknown",
            Self::Stuck { .. } => "stuck",
            Self::PeerHelp { .. } => "peer_help",
            Self::Ooda { .. } => "ooda",
            Self::Operator { .. } => "operator",
            Self::RunInputs { .. } => "run_inputs",
            Self::Unsandboxed { .. } => "unsandboxed",
            Self::WorkerLost { .. } => "worker_lost",
            Self::AgentPanicked { .. } => "agent_panicked",
            Self::AnswerRepair { .. } => "answer_repair",
        }
    }
}

tokio::task_local! {
    static REASONING: ReasoningAudit;
}

/// Where a reasoner's own records go during a call: the calling agent's audit log.
#[derive(Clone)]
struct ReasoningAudit {
    log: Arc<dyn AuditLog>,
    agent: AgentId,
    clock: Arc<dyn crate::Clock>,
}

/// Runs `f`, a reasoning call of `agent`, so that what the reasoner records with
/// [`audit_reasoning`] goes to `log` under `agent`. The runtime runs every call an agent makes
/// through [`AgentContext::reasoner`](crate::AgentContext::reasoner) so.
pub async fn with_reasoning_audit<F: std::future::Future>(
    log: Arc<dyn AuditLog>,
    agent: AgentId,
    clock: Arc<dyn crate::Clock>,
    f: F,
) -> F::Output {
    REASONING.scope(ReasoningAudit { log, agent, clock }, f).await
}

/// Appends `event` to the audit log of the agent whose reasoning call this is (see
/// [`with_reasoning_audit`]); outside such a call it records nothing and returns `Ok(false)`.
pub async fn audit_reasoning(event: AuditEvent) -> Result<bool, BackendError> {
    let Ok(scope) = REASONING.try_with(Clone::clone) else {
        return Ok(false);
    };
    scope.log.append(&scope.agent, scope.clock.now(), event).await.map(|_| true)
}

/// What an executor asks a peer of the same lead ([`AuditEvent::PeerHelp`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum PeerHelpRequest {
    /// Take over a subtask the asker cannot finish.
    TakeOver,
    /// Share what is on its board.
    ShareKnowledge,
}

/// How a peer-help request went ([`AuditEvent::PeerHelp`]).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "outcome", rename_all = "snake_case")]
pub enum PeerHelpOutcome {
    /// The asker sent the request.
    Asked,
    /// The peer took the subtask over.
    Accepted,
    /// The peer refused (busy, unable, too late), with its reason.
    Refused {
        /// Why.
        reason: String,
    },
    /// The asker waited for an answer in vain and moved on.
    NoAnswer,
    /// The asker let the subtask go to the peer that accepted it.
    HandedOver,
    /// The peer's board was shared (written by both sides).
    Shared,
}

impl std::fmt::Display for PeerHelpRequest {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            PeerHelpRequest::TakeOver => "take over",
            PeerHelpRequest::ShareKnowledge => "share knowledge",
        })
    }
}

impl std::fmt::Display for PeerHelpOutcome {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            PeerHelpOutcome::Asked => f.write_str("asked"),
            PeerHelpOutcome::Accepted => f.write_str("accepted"),
            PeerHelpOutcome::Refused { reason } => write!(f, "refused ({reason})"),
            PeerHelpOutcome::NoAnswer => f.write_str("no answer"),
            PeerHelpOutcome::HandedOver => f.write_str("handed over"),
            PeerHelpOutcome::Shared => f.write_str("shared"),
        }
    }
}

/// One record of the audit log, chained to the one before it by hash.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct AuditRecord {
    /// Position in the log, from 0, without gaps.
    pub seq: u64,
    /// When.
    pub at: Timestamp,
    /// Which agent.
    pub agent: AgentId,
    /// What happened.
    pub event: AuditEvent,
    /// The previous record's `hash` ([`GENESIS_HASH`] for record 0).
    pub prev_hash: AuditHash,
    /// SHA-256 of `prev_hash` and this record's other fields (see [`AuditRecord::compute_hash`]).
    pub hash: AuditHash,
}

/// A SHA-256 digest; written as 64 lowercase hex digits.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct AuditHash(pub [u8; 32]);

/// The `prev_hash` of the first record: all zeros.
pub const GENESIS_HASH: AuditHash = AuditHash([0; 32]);

impl std::fmt::Display for AuditHash {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&agent_state::hex(&self.0))
    }
}

impl std::fmt::Debug for AuditHash {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        std::fmt::Display::fmt(self, f)
    }
}

impl Serialize for AuditHash {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(&agent_state::hex(&self.0))
    }
}

impl<'de> Deserialize<'de> for AuditHash {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let text = String::deserialize(deserializer)?;
        let bytes = text.as_bytes();
        let digit = |c: u8| match c {
            b'0'..=b'9' => Some(c - b'0'),
            b'a'..=b'f' => Some(c - b'a' + 10),
            _ => None,
        };
        let mut out = [0u8; 32];
        if bytes.len() != 64 {
            return Err(serde::de::Error::custom("an audit hash is 64 lowercase hex digits"));
        }
        for (i, pair) in bytes.chunks(2).enumerate() {
            match (digit(pair[0]), digit(pair[1])) {
                (Some(hi), Some(lo)) => out[i] = hi << 4 | lo,
                _ => {
                    return Err(serde::de::Error::custom(
                        "an audit hash is 64 lowercase hex digits",
                    ));
                }
            }
        }
        Ok(AuditHash(out))
    }
}

impl Versioned for AuditRecord {
    const KIND: &'static str = "audit_record";
    const VERSION: u32 = 1;
}

impl AuditRecord {
    /// Builds record `seq` after the record whose hash is `prev_hash`, computing its hash.
    /// Every secret this process knows is redacted from `event` first
    /// ([`crate::secrets`]), so the stored record, and its hash, never hold one.
    pub fn new(
        seq: u64,
        at: Timestamp,
        agent: AgentId,
        event: AuditEvent,
        prev_hash: AuditHash,
    ) -> Self {
        let event = redacted(event);
        let mut record = Self { seq, at, agent, event, prev_hash, hash: GENESIS_HASH };
        record.hash = record.compute_hash();
        record
    }

    /// SHA-256 over the 32 bytes of `prev_hash`, then the JSON of `[seq, at, agent, event]`.
    pub fn compute_hash(&self) -> AuditHash {
        let mut hasher = Sha256::new();
        hasher.update(self.prev_hash.0);
        if !self.hash_plain_transition(&mut hasher) {
            // The JSON goes straight into the hash, without a buffer. Plain data with string
            // keys (JSON values cannot hold NaN): serialising cannot fail.
            let body = (&self.seq, &self.at, &self.agent, &self.event);
            let _ = serde_json::to_writer(HashWriter(&mut hasher), &body);
        }
        AuditHash(hasher.finalize().into())
    }

    /// For a transition whose agent id and reason need no escaping in JSON (every agent's
    /// first record, and most others), feeds `hasher` the JSON [`compute_hash`](Self::compute_hash)
    /// hashes, byte for byte as `serde_json` writes it, without serde; returns whether it did
    /// (otherwise `hasher` is untouched).
    fn hash_plain_transition(&self, hasher: &mut Sha256) -> bool {
        let AuditEvent::Transition { from, to, reason } = &self.event else { return false };
        if !plain_json(self.agent.as_str()) || !plain_json(reason) {
            return false;
        }
        let mut digits = [0u8; 20];
        hasher.update(b"[");
        hasher.update(decimal(self.seq, &mut digits));
        hasher.update(b",");
        hasher.update(decimal(self.at.0, &mut digits));
        hasher.update(b",\"");
        hasher.update(self.agent.as_str());
        hasher.update(br#"",{"event":"transition","from":""#);
        hasher.update(from.as_str());
        hasher.update(br#"","to":""#);
        hasher.update(to.as_str());
        hasher.update(br#"","reason":""#);
        hasher.update(reason.as_bytes());
        hasher.update(br#""}]"#);
        true
    }

    /// The record as it is stored: exactly the bytes of [`agent_state::encode`] (which reads
    /// them back before it answers). A transition whose agent id and reason need no escaping
    /// (most records of a large team: every agent's creation and shutdown) is written here,
    /// without serde and without the read-back, its bytes known good by construction; any
    /// other record goes through `encode`.
    pub fn encoded(&self) -> Result<Vec<u8>, agent_state::EncodeError> {
        let AuditEvent::Transition { from, to, reason } = &self.event else {
            return agent_state::encode(self);
        };
        if !plain_json(self.agent.as_str()) || !plain_json(reason) {
            return agent_state::encode(self);
        }
        let mut digits = [0u8; 20];
        let mut out = Vec::with_capacity(320 + self.agent.as_str().len() + reason.len());
        out.extend_from_slice(br#"{"kind":""#);
        out.extend_from_slice(Self::KIND.as_bytes());
        out.extend_from_slice(br#"","schema_version":"#);
        out.extend_from_slice(decimal(u64::from(Self::VERSION), &mut digits));
        out.extend_from_slice(br#","value":{"seq":"#);
        out.extend_from_slice(decimal(self.seq, &mut digits));
        out.extend_from_slice(br#","at":"#);
        out.extend_from_slice(decimal(self.at.0, &mut digits));
        out.extend_from_slice(br#","agent":""#);
        out.extend_from_slice(self.agent.as_str().as_bytes());
        out.extend_from_slice(br#"","event":{"event":"transition","from":""#);
        out.extend_from_slice(from.as_str().as_bytes());
        out.extend_from_slice(br#"","to":""#);
        out.extend_from_slice(to.as_str().as_bytes());
        out.extend_from_slice(br#"","reason":""#);
        out.extend_from_slice(reason.as_bytes());
        out.extend_from_slice(br#""},"prev_hash":""#);
        push_hex(&mut out, &self.prev_hash.0);
        out.extend_from_slice(br#"","hash":""#);
        push_hex(&mut out, &self.hash.0);
        out.extend_from_slice(br#""}}"#);
        Ok(out)
    }

    /// The transition this record holds, if it is one.
    pub fn transition(&self) -> Option<TransitionRecord> {
        match &self.event {
            AuditEvent::Transition { from, to, reason } => Some(TransitionRecord {
                agent: self.agent.clone(),
                from: *from,
                to: *to,
                reason: reason.clone(),
                at: self.at,
            }),
            _ => None,
        }
    }
}

/// Whether `text` is written into JSON as it is: serde_json escapes `"`, `\` and the control
/// characters below 0x20, nothing else.
fn plain_json(text: &str) -> bool {
    text.bytes().all(|b| b >= 0x20 && b != b'"' && b != b'\\')
}

/// Appends `bytes` to `out` as lowercase hex digits, as [`agent_state::hex`] writes them.
fn push_hex(out: &mut Vec<u8>, bytes: &[u8]) {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    for byte in bytes {
        out.push(DIGITS[usize::from(byte >> 4)]);
        out.push(DIGITS[usize::from(byte & 0x0f)]);
    }
}

/// `n` in decimal, written at the end of `buf`.
fn decimal(mut n: u64, buf: &mut [u8; 20]) -> &[u8] {
    let mut at = buf.len();
    loop {
        at -= 1;
        // A digit: below 10.
        buf[at] = b'0' + (n % 10) as u8;
        n /= 10;
        if n == 0 {
            return &buf[at..];
        }
    }
}

/// Writes what it is given into a SHA-256.
struct HashWriter<'a>(&'a mut Sha256);

impl std::io::Write for HashWriter<'_> {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.update(buf);
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// `event` with the secrets this process knows redacted. One that does not read back once
/// redacted (a secret in a field of fixed form) is replaced by an error record saying so.
fn redacted(event: AuditEvent) -> AuditEvent {
    crate::secrets::redact_serde(event).unwrap_or_else(|_| {
        tracing::warn!("an audit record held a secret where it could not be redacted; replaced");
        AuditEvent::Error {
            error: format!(
                "{}: this record held a secret and was replaced",
                crate::secrets::REDACTED
            ),
            retry: 0,
            max_retries: 0,
        }
    })
}

/// Where an audit log stood: one record's sequence number and hash.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct AuditAnchor {
    /// The record's sequence number.
    pub seq: u64,
    /// Its hash.
    pub hash: AuditHash,
}

impl AuditAnchor {
    /// The anchor of `record`.
    pub fn of(record: &AuditRecord) -> Self {
        Self { seq: record.seq, hash: record.hash }
    }
}

impl std::fmt::Display for AuditAnchor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "record {} (hash {})", self.seq, self.hash)
    }
}

/// One record to append with [`AuditLog::append_many`]: what [`AuditLog::append`] takes.
#[derive(Clone, Debug, PartialEq)]
pub struct AuditEntry {
    /// The agent the record is about.
    pub agent: AgentId,
    /// When it happened.
    pub at: Timestamp,
    /// What happened.
    pub event: AuditEvent,
}

/// The audit log. Object-safe: hold it as `Arc<dyn AuditLog>`.
///
/// Guarantees: records come back in the order they were appended, numbered from 0 without gaps,
/// each carrying the hash of the one before ([`verify_chain`] checks the whole log).
/// Durability: if `append` returns `Ok` on a durable backend, the record survives a crash of the
/// process and a loss of power; the in-memory backend keeps nothing across a restart.
#[async_trait]
pub trait AuditLog: Send + Sync + 'static {
    /// Appends one record and returns its sequence number.
    async fn append(
        &self,
        agent: &AgentId,
        at: Timestamp,
        event: AuditEvent,
    ) -> Result<u64, BackendError>;

    /// Appends one record like [`append`](Self::append) and returns it whole, sequence number
    /// and hashes included: what a watcher of the team is shown
    /// ([`PublishingAuditLog`](crate::events::PublishingAuditLog)). The default appends, then
    /// reads the record back; backends, which build the record anyway, return it.
    async fn append_record(
        &self,
        agent: &AgentId,
        at: Timestamp,
        event: AuditEvent,
    ) -> Result<AuditRecord, BackendError> {
        let seq = self.append(agent, at, event).await?;
        self.records_from(seq).await?.into_iter().find(|r| r.seq == seq).ok_or_else(|| {
            BackendError::new(
                "audit",
                format!("audit record {seq} was appended but cannot be read back"),
            )
        })
    }

    /// Appends several records as one call, in the order given, and returns them whole (as
    /// [`append_record`](Self::append_record) does), in that order. An empty batch appends
    /// nothing and returns an empty list.
    ///
    /// If this returns `Ok`, every record of the batch is appended, with increasing sequence
    /// numbers and each chained to the one before it in the log, and on a durable backend
    /// survives a crash as an appended record does. On `Err`, the records appended are a
    /// prefix of the batch, possibly empty, possibly all of it (as a failed `append` may have
    /// stored its record): read the log to know.
    ///
    /// The default appends one record at a time with `append_record`, stopping at the first
    /// error; records other writers append meanwhile may come between them. Backends override
    /// it with one write: the in-memory and sled logs append the batch under one lock, so its
    /// records are consecutive, and the sled log waits for one commit for all of them.
    async fn append_many(
        &self,
        entries: Vec<AuditEntry>,
    ) -> Result<Vec<AuditRecord>, BackendError> {
        let mut records = Vec::with_capacity(entries.len());
        for AuditEntry { agent, at, event } in entries {
            records.push(self.append_record(&agent, at, event).await?);
        }
        Ok(records)
    }

    /// Every record, or only `agent`'s, in order.
    async fn records(&self, agent: Option<&AgentId>) -> Result<Vec<AuditRecord>, BackendError>;

    /// The records from sequence number `from` on, in order: what a reader that has seen the
    /// records before `from` has not seen yet. The default reads every record; backends answer
    /// in time proportional to the answer.
    async fn records_from(&self, from: u64) -> Result<Vec<AuditRecord>, BackendError> {
        let mut records = self.records(None).await?;
        records.retain(|r| r.seq >= from);
        Ok(records)
    }

    /// The records whose event is one of `events`, by [`AuditEvent::name`] (`"tool_call"`,
    /// `"result"`, ...), in order: what a reader that wants a few kinds of record out of a
    /// long log reads, such as a run's summary its files written. The default reads every
    /// record and keeps those; the sled log decodes only the stored values that may hold one
    /// (a large team's log is mostly transitions).
    async fn records_of(&self, events: &[&str]) -> Result<Vec<AuditRecord>, BackendError> {
        let mut records = self.records(None).await?;
        records.retain(|r| events.contains(&r.event.name()));
        Ok(records)
    }

    /// The last record `agent` appended, if any: what the agent's saved record anchors. The
    /// default reads the agent's records; backends keep it at hand.
    async fn head_of(&self, agent: &AgentId) -> Result<Option<AuditAnchor>, BackendError> {
        Ok(self.records(Some(agent)).await?.last().map(AuditAnchor::of))
    }
}

/// An audit log in memory.
///
/// Records are kept in fixed-size chunks, so the log grows without copying and wastes at most
/// one chunk's spare room (a 100 000-agent team keeps one record per idle agent), and without
/// what their position already says: the sequence number and the previous record's hash are
/// put back when a record is read.
#[derive(Debug, Default)]
pub struct InMemoryAuditLog {
    log: Mutex<Chunks>,
}

/// Records per chunk of [`InMemoryAuditLog`].
const CHUNK: usize = 1024;

#[derive(Debug, Default)]
struct Chunks {
    chunks: Vec<Vec<Kept>>,
    len: usize,
    /// Each agent's last record, by sequence number. Hashed with Fx, not SipHash (about 4 % of
    /// creating an agent): the ids are the run's own, not chosen to make them collide.
    heads: std::collections::HashMap<AgentId, u64, rustc_hash::FxBuildHasher>,
}

/// A record as [`InMemoryAuditLog`] keeps it.
#[derive(Debug)]
struct Kept {
    at: Timestamp,
    agent: AgentId,
    event: KeptEvent,
    hash: AuditHash,
}

/// An event as [`InMemoryAuditLog`] keeps it: a transition (every agent has at least one) in
/// place, anything larger behind a pointer, so a record is 88 bytes instead of 144.
#[derive(Debug)]
enum KeptEvent {
    Transition { from: AgentStatus, to: AgentStatus, reason: Cow<'static, str> },
    Other(Box<AuditEvent>),
}

impl From<AuditEvent> for KeptEvent {
    fn from(event: AuditEvent) -> Self {
        match event {
            AuditEvent::Transition { from, to, reason } => Self::Transition { from, to, reason },
            other => Self::Other(Box::new(other)),
        }
    }
}

impl KeptEvent {
    fn to_event(&self) -> AuditEvent {
        match self {
            Self::Transition { from, to, reason } => {
                AuditEvent::Transition { from: *from, to: *to, reason: reason.clone() }
            }
            Self::Other(event) => (**event).clone(),
        }
    }
}

impl Chunks {
    fn kept(&self, seq: usize) -> Option<&Kept> {
        self.chunks.get(seq / CHUNK)?.get(seq % CHUNK)
    }

    fn last_hash(&self) -> AuditHash {
        self.chunks.last().and_then(|c| c.last()).map_or(GENESIS_HASH, |k| k.hash)
    }

    /// Appends `event` of `agent` at `at`, chained to the last record, and answers the record.
    fn append(&mut self, agent: AgentId, at: Timestamp, event: AuditEvent) -> AuditRecord {
        let seq = self.len as u64;
        let record = AuditRecord::new(seq, at, agent, event, self.last_hash());
        self.heads.insert(record.agent.clone(), seq);
        let kept = Kept {
            at: record.at,
            agent: record.agent.clone(),
            event: record.event.clone().into(),
            hash: record.hash,
        };
        self.push(kept);
        record
    }

    fn push(&mut self, kept: Kept) {
        if self.chunks.last().is_none_or(|c| c.len() == CHUNK) {
            self.chunks.push(Vec::with_capacity(CHUNK));
        }
        if let Some(chunk) = self.chunks.last_mut() {
            chunk.push(kept);
            self.len += 1;
        }
    }

    /// The records from `from` on, in order, those `keep` accepts.
    fn records(&self, from: usize, keep: impl Fn(&Kept) -> bool) -> Vec<AuditRecord> {
        let mut out = Vec::new();
        let mut prev_hash = match from.checked_sub(1) {
            Some(prev) => self.kept(prev).map_or(GENESIS_HASH, |k| k.hash),
            None => GENESIS_HASH,
        };
        let kept = self.chunks.iter().skip(from / CHUNK).flatten().skip(from % CHUNK);
        for (seq, kept) in (from..).zip(kept) {
            if keep(kept) {
                out.push(AuditRecord {
                    seq: seq as u64,
                    at: kept.at,
                    agent: kept.agent.clone(),
                    event: kept.event.to_event(),
                    prev_hash,
                    hash: kept.hash,
                });
            }
            prev_hash = kept.hash;
        }
        out
    }
}

impl InMemoryAuditLog {
    /// An empty log.
    pub fn new() -> Self {
        Self::default()
    }
}

fn poisoned() -> BackendError {
    BackendError::new("memory", "audit log lock poisoned by a panic in another thread")
}

#[async_trait]
impl AuditLog for InMemoryAuditLog {
    async fn append(
        &self,
        agent: &AgentId,
        at: Timestamp,
        event: AuditEvent,
    ) -> Result<u64, BackendError> {
        let mut log = self.log.lock().map_err(|_| poisoned())?;
        let seq = log.len as u64;
        let record = AuditRecord::new(seq, at, agent.clone(), event, log.last_hash());
        log.heads.insert(agent.clone(), seq);
        let AuditRecord { at, agent, event, hash, .. } = record;
        log.push(Kept { at, agent, event: event.into(), hash });
        Ok(seq)
    }

    async fn append_record(
        &self,
        agent: &AgentId,
        at: Timestamp,
        event: AuditEvent,
    ) -> Result<AuditRecord, BackendError> {
        let mut log = self.log.lock().map_err(|_| poisoned())?;
        Ok(log.append(agent.clone(), at, event))
    }

    async fn append_many(
        &self,
        entries: Vec<AuditEntry>,
    ) -> Result<Vec<AuditRecord>, BackendError> {
        let mut log = self.log.lock().map_err(|_| poisoned())?;
        Ok(entries
            .into_iter()
            .map(|AuditEntry { agent, at, event }| log.append(agent, at, event))
            .collect())
    }

    async fn head_of(&self, agent: &AgentId) -> Result<Option<AuditAnchor>, BackendError> {
        let log = self.log.lock().map_err(|_| poisoned())?;
        Ok(log.heads.get(agent).and_then(|&seq| {
            let kept = log.kept(usize::try_from(seq).ok()?)?;
            Some(AuditAnchor { seq, hash: kept.hash })
        }))
    }

    async fn records_from(&self, from: u64) -> Result<Vec<AuditRecord>, BackendError> {
        let log = self.log.lock().map_err(|_| poisoned())?;
        let start = usize::try_from(from).unwrap_or(usize::MAX).min(log.len);
        Ok(log.records(start, |_| true))
    }

    async fn records(&self, agent: Option<&AgentId>) -> Result<Vec<AuditRecord>, BackendError> {
        let log = self.log.lock().map_err(|_| poisoned())?;
        Ok(log.records(0, |k| agent.is_none_or(|a| &k.agent == a)))
    }
}

/// A break in an agent's chain of transitions.
#[derive(Clone, Debug, PartialEq, Eq, Error)]
pub enum ChainError {
    /// The first transition does not start at `initializing`.
    #[error("agent `{agent}`: first transition (record {seq}) starts at {from}, not initializing")]
    BadStart {
        /// The agent.
        agent: AgentId,
        /// The record.
        seq: u64,
        /// Where it starts.
        from: AgentStatus,
    },
    /// A transition does not start where the previous one ended.
    #[error(
        "agent `{agent}`: record {seq} starts at {from} but the previous transition ended at {previous}"
    )]
    Gap {
        /// The agent.
        agent: AgentId,
        /// The record.
        seq: u64,
        /// Where it starts.
        from: AgentStatus,
        /// Where the previous one ended.
        previous: AgentStatus,
    },
    /// A transition that the table does not allow.
    #[error("agent `{agent}`: record {seq} is the forbidden transition {from} -> {to}")]
    Forbidden {
        /// The agent.
        agent: AgentId,
        /// The record.
        seq: u64,
        /// From.
        from: AgentStatus,
        /// To.
        to: AgentStatus,
    },
}

/// Checks that, per agent, the transitions form a chain of allowed edges starting at
/// `initializing`. Returns each agent's final status, sorted by agent id.
pub fn check_transition_chain(
    records: &[AuditRecord],
) -> Result<Vec<(AgentId, AgentStatus)>, ChainError> {
    let mut last: std::collections::BTreeMap<AgentId, AgentStatus> = Default::default();
    for record in records {
        let AuditEvent::Transition { from, to, .. } = &record.event else { continue };
        let agent = record.agent.clone();
        match last.get(&agent) {
            None if *from != AgentStatus::Initializing => {
                return Err(ChainError::BadStart { agent, seq: record.seq, from: *from });
            }
            Some(previous) if previous != from => {
                return Err(ChainError::Gap {
                    agent,
                    seq: record.seq,
                    from: *from,
                    previous: *previous,
                });
            }
            _ => {}
        }
        if !from.can_transition_to(*to) {
            return Err(ChainError::Forbidden { agent, seq: record.seq, from: *from, to: *to });
        }
        last.insert(agent, *to);
    }
    Ok(last.into_iter().collect())
}

/// The first place where an audit log's hash chain is broken.
#[derive(Clone, Debug, PartialEq, Eq, Error)]
pub enum ChainBreak {
    /// A record is missing: the sequence jumps.
    #[error("audit record {expected} is missing (the next record present is {found})")]
    Missing {
        /// The sequence number expected.
        expected: u64,
        /// The one found instead.
        found: u64,
    },
    /// A record does not point at the previous record's hash.
    #[error("audit record {seq} does not follow record {}: its prev_hash does not match", seq.saturating_sub(1))]
    Unlinked {
        /// The record.
        seq: u64,
    },
    /// A record's content does not match its own hash: it was changed after it was written.
    #[error("audit record {seq} was altered: its content does not match its hash")]
    Altered {
        /// The record.
        seq: u64,
    },
}

/// Verifies a whole audit log, in order from record 0: no gaps, every record linked to the one
/// before by hash, every hash matching its record. Returns the number of records.
pub fn verify_chain(records: &[AuditRecord]) -> Result<u64, ChainBreak> {
    let mut prev = GENESIS_HASH;
    for (expected, record) in (0u64..).zip(records) {
        if record.seq != expected {
            return Err(ChainBreak::Missing { expected, found: record.seq });
        }
        if record.prev_hash != prev {
            return Err(ChainBreak::Unlinked { seq: record.seq });
        }
        if record.compute_hash() != record.hash {
            return Err(ChainBreak::Altered { seq: record.seq });
        }
        prev = record.hash;
    }
    Ok(records.len() as u64)
}

/// Who keeps an anchor of the audit log.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum AnchorHolder {
    /// The run's seal: the exact final record of a cleanly closed run.
    Seal,
    /// An agent's saved record: the last record that agent had appended when it was saved.
    Agent(AgentId),
    /// An anchor file kept outside the store while the run went (named by where it is): a
    /// record the store held, durably, when the file was written; a lower bound.
    File(String),
}

impl std::fmt::Display for AnchorHolder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Seal => f.write_str("the run's seal"),
            Self::Agent(agent) => write!(f, "agent `{agent}`'s saved record"),
            Self::File(path) => write!(f, "the anchor file {path}"),
        }
    }
}

/// An audit log that disagrees with an anchor kept outside it.
#[derive(Clone, Debug, PartialEq, Eq, Error)]
pub enum AnchorBreak {
    /// The log ends before the anchored record: records were cut from its end.
    #[error(
        "{holder} anchors audit {anchor}, but {}: the audit log was truncated",
        match last { Some(last) => format!("the log ends at {last}"), None => "the log is empty".to_owned() }
    )]
    Truncated {
        /// Who keeps the anchor.
        holder: AnchorHolder,
        /// What it anchors.
        anchor: AuditAnchor,
        /// The log's last record.
        last: Option<AuditAnchor>,
    },
    /// The log goes on past the anchored position, but has no record there.
    #[error("{holder} anchors audit {anchor}, but the log has no record {}", anchor.seq)]
    Missing {
        /// Who keeps the anchor.
        holder: AnchorHolder,
        /// What it anchors.
        anchor: AuditAnchor,
    },
    /// The anchored record is there but is another record: the log was rewritten.
    #[error(
        "{holder} anchors audit {anchor}, but record {} in the log has hash {found} (by agent `{found_agent}`): the audit log was rewritten",
        anchor.seq
    )]
    Rewritten {
        /// Who keeps the anchor.
        holder: AnchorHolder,
        /// What it anchors.
        anchor: AuditAnchor,
        /// The hash of the record found at the anchored position.
        found: AuditHash,
        /// Whose record that is.
        found_agent: AgentId,
    },
    /// The log goes on past the final record the seal anchors: records were added after the
    /// run was closed.
    #[error(
        "{holder} anchors the final audit {anchor}, but the log goes on to {last}: records were added after the run was closed"
    )]
    Extended {
        /// Who keeps the anchor.
        holder: AnchorHolder,
        /// What it anchors.
        anchor: AuditAnchor,
        /// The log's last record.
        last: AuditAnchor,
    },
}

/// Compares an audit log (every record, in order) with its anchors: `sealed`, the exact final
/// record kept by the run's seal (if the run was sealed), and `agents`, each agent's saved
/// anchor, a lower bound: the log may go on past it (records appended after the agent's last
/// save, before a crash), but must hold that record, with that hash, appended by that agent.
/// Returns every disagreement, in the order of `sealed` then `agents`.
pub fn check_anchors(
    records: &[AuditRecord],
    sealed: Option<AuditAnchor>,
    agents: &[(AgentId, AuditAnchor)],
) -> Vec<AnchorBreak> {
    let anchors = sealed
        .map(|anchor| (AnchorHolder::Seal, anchor))
        .into_iter()
        .chain(agents.iter().map(|(agent, anchor)| (AnchorHolder::Agent(agent.clone()), *anchor)));
    check_anchor_list(records, anchors)
}

/// Compares an audit log (every record, in order) with `anchors`, in order: the seal's is the
/// exact final record, every other one a lower bound (the log must hold that record, with that
/// hash, appended by that agent for an agent's anchor, and may go on past it). Returns every
/// disagreement. [`check_anchors`] is this for the seal and the agents' records; a reader adds
/// the run's anchor files ([`AnchorHolder::File`]).
pub fn check_anchor_list(
    records: &[AuditRecord],
    anchors: impl IntoIterator<Item = (AnchorHolder, AuditAnchor)>,
) -> Vec<AnchorBreak> {
    let last = records.last().map(AuditAnchor::of);
    let at = |seq: u64| match records.binary_search_by_key(&seq, |r| r.seq) {
        Ok(i) => records.get(i),
        // A log with a gap is not sorted without holes; look it up the slow way.
        Err(_) => records.iter().find(|r| r.seq == seq),
    };
    let mut breaks = Vec::new();
    let mut check = |holder: AnchorHolder, anchor: AuditAnchor| {
        let exact = holder == AnchorHolder::Seal;
        let owner = match &holder {
            AnchorHolder::Seal | AnchorHolder::File(_) => None,
            AnchorHolder::Agent(agent) => Some(agent),
        };
        match at(anchor.seq) {
            None if last.is_some_and(|l| l.seq > anchor.seq) => {
                breaks.push(AnchorBreak::Missing { holder, anchor });
            }
            None => breaks.push(AnchorBreak::Truncated { holder, anchor, last }),
            Some(record)
                if record.hash != anchor.hash || owner.is_some_and(|a| *a != record.agent) =>
            {
                breaks.push(AnchorBreak::Rewritten {
                    holder,
                    anchor,
                    found: record.hash,
                    found_agent: record.agent.clone(),
                });
            }
            Some(_) => match last {
                Some(last) if exact && last.seq > anchor.seq => {
                    breaks.push(AnchorBreak::Extended { holder, anchor, last });
                }
                _ => {}
            },
        }
    };
    for (holder, anchor) in anchors {
        check(holder, anchor);
    }
    breaks
}

#[cfg(test)]
#[allow(clippy::unwrap_used, reason = "tests")]
mod hash_tests {
    use super::*;

    /// The hash as `serde_json` writes the record, the definition the fast path must match.
    fn by_serde(record: &AuditRecord) -> AuditHash {
        let body =
            serde_json::to_vec(&(&record.seq, &record.at, &record.agent, &record.event)).unwrap();
        let mut hasher = Sha256::new();
        hasher.update(record.prev_hash.0);
        hasher.update(&body);
        AuditHash(hasher.finalize().into())
    }

    #[test]
    fn transitions_hash_as_their_serde_json() {
        let reasons = [
            "initialization complete",
            "",
            "a \"quoted\" reason",
            "back\\slash",
            "line\nbreak and\ttab",
            "é ü 漢字 \u{7f}",
        ];
        let ids = ["bottom-1", "top_2", "odd\"id", "x\u{1}y"];
        let mut fast = 0;
        for (n, (from, to)) in
            AgentStatus::ALL.iter().zip(AgentStatus::ALL.iter().rev()).enumerate()
        {
            for reason in reasons {
                for id in ids {
                    for (seq, at) in [(0, 0), (n as u64, 1_700_000_000_123), (u64::MAX, u64::MAX)] {
                        let event = AuditEvent::Transition {
                            from: *from,
                            to: *to,
                            reason: Cow::Owned(reason.to_owned()),
                        };
                        let record = AuditRecord::new(
                            seq,
                            Timestamp(at),
                            AgentId::new(id),
                            event,
                            GENESIS_HASH,
                        );
                        assert_eq!(record.hash, by_serde(&record), "{id} {reason:?} {seq} {at}");
                        let mut hasher = Sha256::new();
                        fast += usize::from(record.hash_plain_transition(&mut hasher));
                    }
                }
            }
        }
        assert!(fast > 0, "the plain path is taken");
        let other = AuditEvent::Denied { action: "x".into(), error: "y".into() };
        let record = AuditRecord::new(3, Timestamp(5), AgentId::new("a"), other, GENESIS_HASH);
        assert_eq!(record.hash, by_serde(&record));
    }

    /// `encoded` writes exactly what `agent_state::encode` writes, plain transitions (written
    /// without serde) and the others alike, and the bytes decode to the record.
    #[test]
    fn records_encode_as_agent_state_encodes_them() {
        let reasons =
            ["shutdown requested", "", "a \"quoted\" reason", "tab\there", "é 漢字 \u{7f}"];
        let ids = ["e-99999", "odd\"id", "x\u{1}y"];
        let mut prev = GENESIS_HASH;
        let mut plain = 0;
        for (n, status) in AgentStatus::ALL.iter().enumerate() {
            for reason in reasons {
                for id in ids {
                    for (seq, at) in [(0, 0), (n as u64, 1_700_000_000_123), (u64::MAX, u64::MAX)] {
                        let event = AuditEvent::Transition {
                            from: *status,
                            to: AgentStatus::ALL[(n + 1) % AgentStatus::ALL.len()],
                            reason: Cow::Owned(reason.to_owned()),
                        };
                        let record =
                            AuditRecord::new(seq, Timestamp(at), AgentId::new(id), event, prev);
                        let bytes = record.encoded().unwrap();
                        assert_eq!(
                            String::from_utf8(bytes.clone()).unwrap(),
                            String::from_utf8(agent_state::encode(&record).unwrap()).unwrap()
                        );
                        assert_eq!(agent_state::decode::<AuditRecord>(&bytes).unwrap(), record);
                        plain += usize::from(plain_json(id) && plain_json(reason));
                        prev = record.hash;
                    }
                }
            }
        }
        assert!(plain > 0, "the plain path is taken");
        let other = AuditEvent::Denied { action: "x".into(), error: "y".into() };
        let record = AuditRecord::new(3, Timestamp(5), AgentId::new("a"), other, prev);
        assert_eq!(record.encoded().unwrap(), agent_state::encode(&record).unwrap());
    }
}
