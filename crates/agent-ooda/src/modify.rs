//! Self-modification (`modify_self`, docs/concepts.md#self-modification): a request is checked
//! (enabled, level within the agent's, a known type and an existing target, no wider permissions),
//! validated by its level (schema; tests before and after on a copy; a human's signature), recorded
//! as the intent of the next version, and applied in a turn of its own: the intent is saved before
//! any effect, so a kill leaves the old version, or the resumed agent completes the new one.

use agent_core::{AgentContext, AuditEvent, ToolCall};
use agent_state::ooda::{
    Modification, ModificationError, ModificationType, OodaConfig, OodaEventKind, SafetyLevel,
    apply_code_change,
};
use agent_state::{
    Action, AgentStatus, CommandOutcome, Decision, DecisionId, DecisionStatus, HumanApproval,
    Timestamp,
};
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

use crate::ooda::{AgentStep, Ooda, OodaError, StepEnd};

/// The configuration fields only the team file or the agent's supervisor sets, beside
/// [`agent_state::ooda::PROTECTED_FIELDS`]: the command whose success validates a change, and
/// the level changes are validated at.
pub const SUPERVISED_FIELDS: [&str; 2] = ["test_command", "safety_level"];

/// The level a self-modification is validated at: the highest of what the request claims, the
/// agent's configured `safety_level` (from its team file or its supervisor, never from the
/// agent), and [`SafetyLevel::LOW`] for a code change (it writes a file: never unchecked).
pub fn level_of(modification: &Modification, config: &OodaConfig) -> SafetyLevel {
    let floor = match modification.modification_type {
        ModificationType::Code => SafetyLevel::LOW,
        _ => SafetyLevel::READ_ONLY,
    };
    modification.safety_level.max(config.safety_level).max(floor)
}

/// Checks that the agent holds the capability `action` needs (audited when it does not); a
/// refusal refuses the change, it does not fail the agent.
async fn require(ctx: &AgentContext, action: Action, target: &str) -> Result<(), OodaError> {
    match ctx.require(action, target).await {
        Err(e @ agent_core::AgentError::MissingCapability { .. }) => {
            Err(OodaError::Config(e.to_string()))
        }
        other => Ok(other?),
    }
}

/// The largest file a code change may write or replace (its old content is kept for rollback).
pub const MAX_CODE_BYTES: usize = 256 * 1024;

/// A change a file goes through.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct FileChange {
    /// The path, relative to the workspace.
    pub path: String,
    /// Its content before (`None`: the file did not exist).
    pub before: Option<String>,
    /// Its content after (`None`: the file is removed, by a rollback).
    pub after: Option<String>,
}

/// What a version changes: the configuration and the files.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Applied {
    /// The configuration after it.
    pub config: OodaConfig,
    /// The files it writes.
    pub files: Vec<FileChange>,
}

/// A change in progress: validated and recorded, not applied yet; or waiting for a human.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Pending {
    /// The version it becomes.
    pub version: u64,
    /// What was asked: a modification, or a rollback to a version.
    pub what: Change,
    /// Its effect.
    pub applied: Applied,
    /// The decision a human signs, for a level-4 change.
    pub decision: Option<DecisionId>,
    /// The operator command that asked for it, answered once it applies (or is vetoed).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub origin: Option<agent_state::CommandOrigin>,
}

/// What a version is.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "change", rename_all = "snake_case")]
pub enum Change {
    /// A self-modification.
    Modification {
        /// It.
        modification: Modification,
    },
    /// A rollback to an earlier version.
    Rollback {
        /// The version whose configuration and files come back.
        to: u64,
    },
    /// A hot-swap to a genome: its configuration and code replace the
    /// agent's.
    Adopt {
        /// The genome's id.
        genome_id: String,
        /// The genome the agent was before, if it was one.
        from: Option<String>,
        /// The genome's generation in its evolution.
        generation: u32,
    },
}

/// One applied version, kept for inspection and rollback.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct VersionRecord {
    /// The version it made (`state_version` after it).
    pub version: u64,
    /// What it was.
    pub what: Change,
    /// SHA-256 of the configuration and files before it.
    pub before_hash: String,
    /// SHA-256 of the configuration and files after it.
    pub after_hash: String,
    /// The configuration before it.
    pub config_before: OodaConfig,
    /// The files it changed.
    pub files: Vec<FileChange>,
    /// When it was applied.
    pub at: Timestamp,
}

/// SHA-256 of a value's JSON, in hex.
pub(crate) fn hash_json(value: &impl Serialize) -> String {
    let bytes = serde_json::to_vec(value).unwrap_or_default();
    agent_state::sha256_hex(&bytes)
}

/// The hash of a configuration with file contents: what a version is.
fn version_hash(config: &OodaConfig, files: &[(String, Option<String>)]) -> String {
    hash_json(&json!({ "config": config, "files": files }))
}

/// A workspace path a change may touch: relative, no `..`, not under `.strata`.
fn check_path(path: &str) -> Result<(), ModificationError> {
    let p = std::path::Path::new(path);
    let plain = !path.is_empty()
        && p.components().all(|c| matches!(c, std::path::Component::Normal(_)))
        && !path.starts_with(".strata");
    if plain {
        Ok(())
    } else {
        Err(ModificationError::Malformed(format!(
            "`{path}` is not a path inside the workspace (relative, without `..`, outside .strata)"
        )))
    }
}

/// The text of a workspace file, `None` if it does not exist.
async fn read(ctx: &AgentContext, path: &str) -> Result<Option<String>, ModificationError> {
    let deps = ctx.deps();
    let full = deps.workspace.workspace().join(path);
    if tokio::fs::symlink_metadata(&full).await.is_err() {
        return Ok(None);
    }
    match deps.tools.call(&deps.workspace, "read_file", json!({ "path": path })).await {
        Ok(out) if out.success => Ok(Some(out.output)),
        Ok(out) => Err(ModificationError::Malformed(out.output)),
        Err(e) => Err(ModificationError::Malformed(e.to_string())),
    }
}

/// Level 2 of a file: a `.json` or `.toml` file must parse; any file must be text within
/// [`MAX_CODE_BYTES`].
fn check_syntax(path: &str, text: &str) -> Result<(), ModificationError> {
    let invalid = |reason: String| {
        ModificationError::Invalid(agent_state::ooda::OodaSchemaError::Invalid {
            what: "config",
            reason,
        })
    };
    if text.len() > MAX_CODE_BYTES {
        return Err(invalid(format!(
            "`{path}` would be {} bytes; at most {MAX_CODE_BYTES}",
            text.len()
        )));
    }
    if path.ends_with(".json") {
        serde_json::from_str::<Value>(text)
            .map_err(|e| invalid(format!("`{path}` is not valid JSON: {e}")))?;
    } else if path.ends_with(".toml") {
        text.parse::<toml::Table>()
            .map_err(|e| invalid(format!("`{path}` is not valid TOML: {e}")))?;
    }
    Ok(())
}

impl Ooda {
    /// A `modify_self` request from decide: checked, validated by its level, and recorded as
    /// the next version's intent (applied at the next turn), or sent to a human. A refusal is
    /// audited as a `modify_self` event and returned as a failed outcome: the agent's state and
    /// configuration are unchanged. Returns `(success, output, step)`.
    pub(crate) async fn request_change(
        &mut self,
        ctx: &mut AgentContext,
        request: Value,
    ) -> Result<(bool, String, AgentStep), OodaError> {
        match self.prepare(ctx, &request).await {
            Ok(pending) => {
                let version = pending.version;
                let level = match &pending.what {
                    Change::Modification { modification } => modification.safety_level,
                    Change::Rollback { .. } | Change::Adopt { .. } => SafetyLevel::READ_ONLY,
                };
                let waiting = pending.decision.is_some();
                let data = json!({
                    "outcome": if waiting { "waiting_approval" } else { "validated" },
                    "version": version,
                    "level": level,
                    "decision": pending.decision,
                    "request": request,
                });
                self.pending = Some(pending);
                if waiting && ctx.status() == AgentStatus::Working {
                    ctx.transition(
                        AgentStatus::WaitingApproval,
                        "a change waits for a human's signature",
                    )
                    .await?;
                }
                self.emit(ctx, OodaEventKind::ModifySelf, data.clone()).await?;
                let output = if waiting {
                    format!(
                        "the change waits for a human's signature; it becomes version {version}"
                    )
                } else {
                    format!("the change passed validation; it becomes version {version} next step")
                };
                let step = self.step_record(OodaEventKind::ModifySelf, data, true, None);
                Ok((true, output, step))
            }
            Err(OodaError::Agent(e)) => Err(OodaError::Agent(e)),
            Err(e) => {
                let error = e.to_string();
                ctx.audit(AuditEvent::Denied {
                    action: "modify_self".into(),
                    error: error.clone(),
                })
                .await?;
                let outcome = match e {
                    OodaError::TestsFailed { after: true, .. } => "rolled_back",
                    _ => "refused",
                };
                let data = json!({ "outcome": outcome, "error": error, "request": request });
                self.emit(ctx, OodaEventKind::ModifySelf, data.clone()).await?;
                let step =
                    self.step_record(OodaEventKind::ModifySelf, data, false, Some(error.clone()));
                Ok((false, format!("modification refused: {error}"), step))
            }
        }
    }

    /// Checks and validates a request; the intent of the next version, or why not.
    async fn prepare(
        &mut self,
        ctx: &mut AgentContext,
        request: &Value,
    ) -> Result<Pending, OodaError> {
        let mut modification = Modification::parse(request)?;
        // The level a change is validated at is not the agent's to choose: its request may
        // only raise it above what its team file (or supervisor) set.
        modification.safety_level = level_of(&modification, &self.config);
        modification.allowed_by(&self.config)?;
        if modification.modification_type == ModificationType::Config
            && SUPERVISED_FIELDS.contains(&modification.target.as_str())
        {
            return Err(ModificationError::WidensPermissions {
                what: format!(
                    "`{}` is set by the team file or the agent's supervisor, never by the agent",
                    modification.target
                ),
            }
            .into());
        }
        let validation = modification.safety_level.validation();
        let mut files = Vec::new();
        let config = match modification.apply_to(&self.config, &self.ceiling)? {
            Some(config) => config,
            None => {
                check_path(&modification.target)?;
                require(ctx, Action::WriteCode, &modification.target).await?;
                let before = read(ctx, &modification.target).await?;
                if before.as_ref().is_some_and(|b| b.len() > MAX_CODE_BYTES) {
                    return Err(ModificationError::Malformed(format!(
                        "`{}` is larger than {MAX_CODE_BYTES} bytes; a code change keeps its old content",
                        modification.target
                    ))
                    .into());
                }
                let after =
                    apply_code_change(before.as_deref().unwrap_or(""), &modification.change)?;
                if validation.schema {
                    check_syntax(&modification.target, &after)?;
                }
                files.push(FileChange {
                    path: modification.target.clone(),
                    before,
                    after: Some(after),
                });
                self.config.clone()
            }
        };
        // Level 4 runs the tests when the agent has a test command; level 3 needs one.
        if validation.tests && (self.config.test_command.is_some() || !validation.human) {
            let Some(command) = self.config.test_command.clone() else {
                return Err(OodaError::Config(format!(
                    "a level-{} change runs the agent's tests before and after; give it a `test_command`",
                    modification.safety_level
                )));
            };
            require(ctx, Action::RunTests, &format!("({command})")).await?;
            crate::copy::tests_before_and_after(ctx, &command, &files, self.config.timeout_ms)
                .await?;
        }
        let version = self.state.state_version + 1;
        let applied = Applied { config, files };
        let what = Change::Modification { modification };
        let decision = if validation.human {
            Some(self.ask_human(ctx, version, &what, &applied).await?)
        } else {
            None
        };
        Ok(Pending { version, what, applied, decision, origin: None })
    }

    /// Proposes the governance decision one of the team's humans signs for a level-4 change.
    async fn ask_human(
        &self,
        ctx: &mut AgentContext,
        version: u64,
        what: &Change,
        applied: &Applied,
    ) -> Result<DecisionId, OodaError> {
        if self.approvers.is_empty() {
            return Err(OodaError::Config(
                "a level-4 change needs a human's signature, and the team names no human who may \
                 sign (the team file's `[approvals] humans`)"
                    .into(),
            ));
        }
        let id = ctx.deps().clock.decision_id();
        let files: Vec<&str> = applied.files.iter().map(|f| f.path.as_str()).collect();
        let content = json!({
            "kind": "self_modification",
            "agent": ctx.id(),
            "version": version,
            "change": what,
            "files": files,
        });
        let decision = Decision {
            id,
            proposer: ctx.id().clone(),
            content,
            required_signers: Vec::new(),
            signatures: Vec::new(),
            vetoes: Vec::new(),
            status: DecisionStatus::Pending,
            created_at: ctx.now(),
            human_approval: Some(HumanApproval { allowed: self.approvers.clone() }),
        };
        ctx.deps().governance.submit(decision).await.map_err(agent_core::AgentError::from)?;
        ctx.audit(AuditEvent::Decision {
            decision: id,
            action: "proposed".into(),
            detail: format!("self-modification to version {version}; a human signs"),
        })
        .await?;
        Ok(id)
    }

    /// A rollback to `to`: the configuration and files of that version come back, as a new
    /// version (recorded, then applied at the next turn). A change still waiting for a human's
    /// signature is dropped (its decision is returned: signing it later changes nothing); a
    /// change validated and about to apply is not, and the rollback is refused until it has.
    /// Returns the new version and the dropped change's decision.
    pub fn rollback(&mut self, to: u64) -> Result<(u64, Option<DecisionId>), OodaError> {
        let current = self.state.state_version;
        if to == 0 || to >= current {
            return Err(OodaError::NoSuchVersion { asked: to, current });
        }
        let dropped = match &self.pending {
            None => None,
            Some(Pending { decision: Some(id), .. }) => Some(*id),
            Some(_) => {
                return Err(OodaError::Config(
                    "a change is being applied; roll back once it is (at the agent's next turn)"
                        .into(),
                ));
            }
        };
        // The records after `to`, oldest first: the first one's `config_before` is the
        // configuration at `to`, and for each file the first record touching it has its
        // content at `to`.
        let newer: Vec<&VersionRecord> = self.versions.iter().filter(|r| r.version > to).collect();
        let config = newer.first().map_or_else(|| self.config.clone(), |r| r.config_before.clone());
        let mut files: Vec<FileChange> = Vec::new();
        for record in &newer {
            for change in &record.files {
                if !files.iter().any(|f| f.path == change.path) {
                    files.push(FileChange {
                        path: change.path.clone(),
                        before: None, // filled in when applied
                        after: change.before.clone(),
                    });
                }
            }
        }
        let version = current + 1;
        self.pending = Some(Pending {
            version,
            what: Change::Rollback { to },
            applied: Applied { config, files },
            decision: None,
            origin: None,
        });
        Ok((version, dropped))
    }

    /// The genome the agent is now: the last one it adopted, unless a change since made it
    /// something else (a rollback goes back to the genome of the version it returns to).
    pub fn genome(&self) -> Option<String> {
        self.genome_at(self.state.state_version)
    }

    /// The genome the agent was at `version`.
    pub fn genome_at(&self, version: u64) -> Option<String> {
        let record = self.versions.iter().rev().find(|r| r.version <= version)?;
        match &record.what {
            Change::Adopt { genome_id, .. } => Some(genome_id.clone()),
            Change::Modification { .. } => None,
            Change::Rollback { to } if *to < record.version => self.genome_at(*to),
            Change::Rollback { .. } => None,
        }
    }

    /// A hot-swap to `genome` (docs/concepts.md#evolution): its role, prompt, model, temperature,
    /// tools, retries, turn time limit and strategy parameters (as behaviour settings) replace
    /// the agent's, and its code files are written into the workspace, as a new version
    /// (recorded, then applied at the agent's next turn, so that a kill leaves the old version
    /// or completes the new one; [`rollback`](Self::rollback) goes back). Refused: a genome
    /// whose id does not match its content, the genome the agent is already, a tool its
    /// supervisor does not hold, a code path outside the workspace, or a change being applied.
    /// Returns the new version and a change waiting for a human that it drops.
    pub fn adopt(
        &mut self,
        genome: &agent_state::evolution::Genome,
    ) -> Result<(u64, Option<DecisionId>), OodaError> {
        genome.verify().map_err(|e| OodaError::Config(format!("the genome is not valid: {e}")))?;
        let from = self.genome();
        if from.as_deref() == Some(genome.id.as_str()) {
            return Err(OodaError::Config(format!(
                "the agent is genome {} already",
                genome.id.short()
            )));
        }
        let dropped = match &self.pending {
            None => None,
            Some(Pending { decision: Some(id), .. }) => Some(*id),
            Some(_) => {
                return Err(OodaError::Config(
                    "a change is being applied; hot-swap once it is (at the agent's next turn)"
                        .into(),
                ));
            }
        };
        let g = &genome.config;
        let mut config = self.config.clone();
        config.role = g.role.clone();
        config.prompt = g.prompt.clone();
        config.model = g.model.clone();
        config.tools = g.tools.clone();
        config.max_retries = Some(g.max_retries);
        config.turn_timeout_ms = Some(g.timeout_ms);
        config.temperature = g.temperature.map(|t| t as f32);
        for (key, value) in &g.strategy {
            config.behaviour.insert(key.clone(), value.clone());
        }
        crate::ooda::check_config(&config, &self.ceiling)?;
        let mut files = Vec::new();
        for (path, content) in &genome.code {
            check_path(path)?;
            check_syntax(path, content)?;
            files.push(FileChange {
                path: path.clone(),
                before: None,
                after: Some(content.clone()),
            });
        }
        let version = self.state.state_version + 1;
        self.pending = Some(Pending {
            version,
            what: Change::Adopt {
                genome_id: genome.id.to_string(),
                from,
                generation: genome.generation,
            },
            applied: Applied { config, files },
            decision: None,
            origin: None,
        });
        Ok((version, dropped))
    }

    /// The change in progress: still waiting for its human (nothing runs), refused by a veto,
    /// or applied now.
    pub(crate) async fn settle_pending(
        &mut self,
        ctx: &mut AgentContext,
    ) -> Result<StepEnd, OodaError> {
        let Some(pending) = self.pending.clone() else {
            return Ok(StepEnd { steps: Vec::new(), stop: None, waiting: false });
        };
        if let Some(id) = pending.decision {
            let decision = ctx.decision(id).await?;
            match decision.as_ref().map(|d| d.status) {
                Some(DecisionStatus::Pending) => {
                    return Ok(StepEnd { steps: Vec::new(), stop: None, waiting: true });
                }
                Some(DecisionStatus::Approved) => {}
                status => {
                    let reason = decision
                        .as_ref()
                        .and_then(|d| d.vetoes.first())
                        .map(|v| format!("vetoed by {}: {}", v.vetoer, v.reason))
                        .unwrap_or_else(|| format!("decision {id} is gone ({status:?})"));
                    self.pending = None;
                    if ctx.status() == AgentStatus::WaitingApproval {
                        ctx.transition(AgentStatus::Working, "the change was vetoed").await?;
                    }
                    let data = json!({ "outcome": "vetoed", "version": pending.version, "decision": id, "reason": reason });
                    self.emit(ctx, OodaEventKind::ModifySelf, data.clone()).await?;
                    if let Some(origin) = &pending.origin {
                        let outcome = CommandOutcome::Refused { reason: reason.clone() };
                        ctx.answer_command(origin, &outcome).await?;
                    }
                    let step =
                        self.step_record(OodaEventKind::ModifySelf, data, false, Some(reason));
                    return Ok(StepEnd { steps: vec![step], stop: None, waiting: false });
                }
            }
            if ctx.status() == AgentStatus::WaitingApproval {
                ctx.transition(AgentStatus::Working, "a human signed the change").await?;
            }
        }
        let step = self.apply(ctx, pending).await?;
        Ok(StepEnd { steps: vec![step], stop: None, waiting: false })
    }

    /// Applies a recorded change: its files through the runtime's journal (each write at most
    /// once, keyed by the version and its content), then the configuration and the version.
    async fn apply(
        &mut self,
        ctx: &mut AgentContext,
        mut pending: Pending,
    ) -> Result<AgentStep, OodaError> {
        let before_files = files_before(ctx, &mut pending).await?;
        let before_hash = version_hash(&self.config, &before_files);
        for f in &pending.applied.files {
            write_change(ctx, pending.version, f).await?;
        }
        let after_files: Vec<(String, Option<String>)> =
            pending.applied.files.iter().map(|f| (f.path.clone(), f.after.clone())).collect();
        let after_hash = version_hash(&pending.applied.config, &after_files);
        let record = VersionRecord {
            version: pending.version,
            what: pending.what.clone(),
            before_hash: before_hash.clone(),
            after_hash: after_hash.clone(),
            config_before: self.config.clone(),
            files: pending.applied.files.clone(),
            at: ctx.now(),
        };
        self.config = self.supervise(pending.applied.config.clone());
        self.state = self.state.modified(&self.config, ctx.now());
        self.state.state_version = pending.version;
        self.versions.push(record);
        self.pending = None;
        let outcome = match pending.what {
            Change::Modification { .. } => "applied",
            Change::Rollback { .. } => "rolled_back_to",
            Change::Adopt { .. } => "adopted",
        };
        let data = json!({
            "outcome": outcome,
            "version": pending.version,
            "change": pending.what,
            "before": before_hash,
            "after": after_hash,
        });
        self.emit(ctx, OodaEventKind::ModifySelf, data.clone()).await?;
        if let Some(origin) = &pending.origin {
            let from = match &pending.what {
                Change::Adopt { from, .. } => from.clone(),
                _ => None,
            };
            let outcome = CommandOutcome::Applied { version: pending.version, from };
            ctx.answer_command(origin, &outcome).await?;
        }
        Ok(self.step_record(OodaEventKind::ModifySelf, data, true, None))
    }
}

/// The content before the change of each file `pending` writes (`None`: it did not exist),
/// filled into the change where it was not recorded yet.
async fn files_before(
    ctx: &AgentContext,
    pending: &mut Pending,
) -> Result<Vec<(String, Option<String>)>, OodaError> {
    let mut before_files = Vec::new();
    for f in &pending.applied.files {
        // A resumed agent may find the file written already: its content before is the
        // recorded one when there is one.
        let before = match &f.before {
            Some(b) => Some(b.clone()),
            None if matches!(pending.what, Change::Modification { .. }) => None,
            None => read(ctx, &f.path).await?,
        };
        before_files.push((f.path.clone(), before));
    }
    for (f, (_, before)) in pending.applied.files.iter_mut().zip(&before_files) {
        if f.before.is_none() {
            f.before = before.clone();
        }
    }
    Ok(before_files)
}

/// Makes one file change of `version`: a write through the runtime's journal (at most once,
/// keyed by the version and the change), or a removal (a file the version does not have).
async fn write_change(
    ctx: &mut AgentContext,
    version: u64,
    f: &FileChange,
) -> Result<(), OodaError> {
    let key = format!("ooda/{}/version/{}/{}", ctx.id(), version, hash_json(f));
    match &f.after {
        Some(content) => {
            let call = ToolCall {
                tool: "write_file".into(),
                args: json!({ "path": f.path, "content": content }),
            };
            let out = ctx.call_tool_once(&key, &call).await?;
            if !out.success {
                return Err(OodaError::Validation(format!(
                    "cannot write `{}`: {}",
                    f.path, out.output
                )));
            }
        }
        None => {
            check_path(&f.path)?;
            let full = ctx.deps().workspace.workspace().join(&f.path);
            match tokio::fs::remove_file(&full).await {
                Ok(()) => {}
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                Err(e) => {
                    return Err(OodaError::Validation(format!("cannot remove `{}`: {e}", f.path)));
                }
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used, reason = "tests")]

    use super::*;

    #[test]
    fn paths_stay_inside_the_workspace() {
        assert!(check_path("notes.md").is_ok() && check_path("src/lib.rs").is_ok());
        for bad in ["", "../x", "/etc/passwd", "a/../../b", ".strata/x", "./a"] {
            assert!(check_path(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn level_two_checks_json_and_toml_syntax_and_size() {
        assert!(check_syntax("a.json", "{\"a\": 1}").is_ok());
        assert!(check_syntax("a.json", "{a").is_err());
        assert!(check_syntax("a.toml", "a = 1").is_ok());
        assert!(check_syntax("a.toml", "a = ").is_err());
        assert!(check_syntax("a.md", "anything").is_ok());
        assert!(check_syntax("a.md", &"x".repeat(MAX_CODE_BYTES + 1)).is_err());
    }

    #[test]
    fn a_version_hash_changes_with_the_config_or_a_file() {
        let c = OodaConfig::new("r", "g");
        let a = version_hash(&c, &[("f".into(), Some("1".into()))]);
        assert_eq!(a, version_hash(&c, &[("f".into(), Some("1".into()))]));
        assert_ne!(a, version_hash(&c, &[("f".into(), Some("2".into()))]));
        let mut d = c.clone();
        d.prompt = "p".into();
        assert_ne!(a, version_hash(&d, &[("f".into(), Some("1".into()))]));
        assert_eq!(a.len(), 64);
    }
}
