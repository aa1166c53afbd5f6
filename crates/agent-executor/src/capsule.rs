//! The capsule: one run's own context (docs/concepts.md#executor-kinds).
//!
//! A handler reaches the world only through its [`Capsule`]: its progress sink, the agent's
//! reasoner (with the run's own conversation and its share of the budget), the workspace tools
//! (called through the agent's tool path, as every tool call of the agent is:
//! [`Capsule::call_tool`]),
//! the HTTP access the executor allows, and a scratch directory of its own at
//! `<workspace>/.strata/capsules/<run-id>/`. Capsules share nothing: a scratch path that leaves
//! the run's directory is refused, so one run cannot read another's scratch, and the
//! conversation and budget are the run's alone. Processes a handler starts through
//! [`Capsule::command`] and [`Capsule::spawn`] run in the workspace's sandbox (as `shell`
//! commands do) and in their own process group, which is killed when the capsule is dropped:
//! when the run ends, and when its hard timeout cancels it. Without a workspace there is no
//! sandbox, and a capsule refuses to start a process.

use std::path::{Component, Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};

use agent_core::tools::{ToolContext, ToolOutput};
use agent_core::{AgentDeps, AgentError, Persona, ReasonError, ToolCall, ToolPath};
use agent_state::{AgentConfig, FailureKind};
use serde::{Deserialize, Serialize};

use crate::env::ExecEnv;
use crate::kind::KindError;
use crate::run::RunContext;
use agent_state::RunEvent;

/// Where capsules keep their scratch directories, relative to the workspace.
pub const CAPSULES_DIR: &str = ".strata/capsules";

/// One exchange with the reasoner, kept in the run's own conversation.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Turn {
    /// What the run asked for.
    pub instruction: String,
    /// What the reasoner wrote.
    pub reply: String,
}

/// One run's context. Made by the executor; a handler gets `&mut` to it for one attempt, and
/// the same capsule (conversation, budget, scratch) for every attempt of the run.
pub struct Capsule {
    run_id: agent_state::RunId,
    kind: String,
    attempt: u32,
    cx: RunContext,
    env: Arc<ExecEnv>,
    conversation: Vec<Turn>,
    reasoner_calls_left: Option<u32>,
    last_percent: u8,
    groups: Vec<u32>,
    /// The agent's tool path; `None` without one and without a workspace.
    tools: Option<ToolPath>,
    /// Tool calls made in this attempt: the next one's number in its key.
    calls: AtomicU32,
}

impl std::fmt::Debug for Capsule {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Capsule")
            .field("run_id", &self.run_id)
            .field("kind", &self.kind)
            .field("attempt", &self.attempt)
            .field("turns", &self.conversation.len())
            .finish_non_exhaustive()
    }
}

impl Capsule {
    pub(crate) fn new(
        run_id: &agent_state::RunId,
        kind: &str,
        cx: RunContext,
        env: Arc<ExecEnv>,
    ) -> Self {
        let reasoner_calls_left = cx.reasoner_calls;
        let tools = cx.tools.clone().or_else(|| {
            let workspace = env.workspace.clone()?;
            let deps = AgentDeps::standalone(env.tools.clone(), workspace);
            Some(ToolPath::new((*cx.agent).clone(), Arc::new(deps)))
        });
        Self {
            run_id: run_id.clone(),
            kind: kind.to_owned(),
            attempt: 0,
            cx,
            env,
            conversation: Vec::new(),
            reasoner_calls_left,
            last_percent: 0,
            groups: Vec::new(),
            tools,
            calls: AtomicU32::new(0),
        }
    }

    pub(crate) fn begin_attempt(&mut self, attempt: u32) {
        self.attempt = attempt;
        self.calls = AtomicU32::new(0);
    }

    /// The run's id.
    pub fn run_id(&self) -> &agent_state::RunId {
        &self.run_id
    }

    /// The run's kind.
    pub fn kind(&self) -> &str {
        &self.kind
    }

    /// The attempt under way, 1 for the first.
    pub fn attempt(&self) -> u32 {
        self.attempt
    }

    /// The agent the run works for (in a team, the executor; alone, a configuration made for
    /// the kind).
    pub fn agent(&self) -> &AgentConfig {
        &self.cx.agent
    }

    /// Reports progress: `percent` (capped at 100, and never below what was reported before,
    /// so a caller sees it rise) and what the run is doing.
    pub fn progress(&mut self, percent: u8, message: impl Into<String>) {
        let percent = percent.min(100).max(self.last_percent);
        self.last_percent = percent;
        self.cx.observer.observe(&RunEvent::Progress {
            run_id: self.run_id.clone(),
            kind: self.kind.clone(),
            percent,
            message: message.into(),
        });
    }

    /// Reports an event of the handler's own.
    pub fn note(&self, name: impl Into<String>, data: serde_json::Value) {
        self.cx.observer.observe(&RunEvent::Note {
            run_id: self.run_id.clone(),
            kind: self.kind.clone(),
            name: name.into(),
            data,
        });
    }

    /// The agent's reasoner.
    pub fn reasoner(&self) -> &Arc<dyn agent_core::Reasoner> {
        &self.cx.reasoner
    }

    /// Who the run is, for the reasoner.
    pub fn persona(&self) -> Persona<'_> {
        Persona {
            config: &self.cx.agent,
            system_prompt: &self.cx.system_prompt,
            tools: &[],
            roles: &[],
            domains: &[],
        }
    }

    /// The run's conversation with the reasoner so far.
    pub fn conversation(&self) -> &[Turn] {
        &self.conversation
    }

    /// Asks the reasoner to write text ([`Reasoner::compose`](agent_core::Reasoner::compose)),
    /// counting the call against the run's budget share. `Ok(None)`: the reasoner cannot write
    /// (the rule-based one); the kind then does the deterministic part and says what needs a
    /// model. The run's earlier turns are given as material before `material`.
    pub async fn compose(
        &mut self,
        instruction: &str,
        material: &str,
    ) -> Result<Option<String>, KindError> {
        self.spend_reasoner_call()?;
        let mut context = String::new();
        for turn in &self.conversation {
            context.push_str(&format!("Earlier: {}\n{}\n\n", turn.instruction, turn.reply));
        }
        context.push_str(material);
        let reasoner = self.cx.reasoner.clone();
        match reasoner.compose(self.persona(), instruction, &context).await {
            Ok(reply) => {
                self.conversation
                    .push(Turn { instruction: instruction.to_owned(), reply: reply.clone() });
                Ok(Some(reply))
            }
            Err(ReasonError::NeedsModel { .. }) => Ok(None),
            Err(error) => Err(reason_failure(error)),
        }
    }

    /// Counts one reasoner call against the run's share of the budget, or refuses it.
    pub fn spend_reasoner_call(&mut self) -> Result<(), KindError> {
        match &mut self.reasoner_calls_left {
            None => Ok(()),
            Some(0) => Err(KindError::new(
                FailureKind::Permission,
                "the run's share of the reasoning budget is spent (its `reasoner_calls`)",
            )),
            Some(left) => {
                *left -= 1;
                Ok(())
            }
        }
    }

    /// The workspace the run works in, if the executor has one.
    pub fn workspace(&self) -> Option<&ToolContext> {
        self.env.workspace.as_deref()
    }

    /// Calls a workspace tool (`read_file`, `write_file`, `search`, ...) through the agent's
    /// tool path ([`ToolPath`]), as the agent's own calls go: its capabilities are checked (a
    /// refusal is audited and fails the run with [`FailureKind::Permission`]), the call is
    /// audited, and one with side effects is recorded under the run, the attempt and the call's
    /// number in it, so that a resumed run that repeats the attempt reuses its result instead of
    /// running it again. In a team the path is the agent's own ([`RunContext::tools`]); alone,
    /// one of the run's agent on the executor's workspace, with an audit log and a state store
    /// in memory. Without either: [`FailureKind::InvalidInput`].
    pub async fn call_tool(
        &self,
        tool: &str,
        args: serde_json::Value,
    ) -> Result<ToolOutput, KindError> {
        let Some(path) = &self.tools else {
            return Err(KindError::invalid(format!(
                "the `{}` run needs a workspace for `{tool}`, and the executor has none",
                self.kind
            )));
        };
        let n = self.calls.fetch_add(1, Ordering::SeqCst);
        let key = format!("{}/{}/{n}", self.run_id, self.attempt);
        let call = ToolCall { tool: tool.to_owned(), args };
        path.call_once(&key, &call, false).await.map_err(|e| tool_failure(tool, e))
    }

    /// The executor's environment (HTTP policy, endpoints).
    pub fn env(&self) -> &ExecEnv {
        &self.env
    }

    /// The run's scratch directory (created on first use), inside the workspace.
    pub async fn scratch_dir(&self) -> Result<PathBuf, KindError> {
        let Some(workspace) = self.env.workspace.as_deref() else {
            return Err(KindError::invalid("a scratch directory needs a workspace"));
        };
        let dir = workspace.workspace().join(CAPSULES_DIR).join(&self.run_id);
        tokio::fs::create_dir_all(&dir).await.map_err(|e| {
            KindError::new(FailureKind::Internal, format!("cannot create {}: {e}", dir.display()))
        })?;
        Ok(dir)
    }

    /// Writes `content` to `name` in the scratch directory. `name` must stay inside it.
    pub async fn write_scratch(&self, name: &str, content: &str) -> Result<PathBuf, KindError> {
        let path = self.scratch_dir().await?.join(confined(name)?);
        if let Some(parent) = path.parent() {
            tokio::fs::create_dir_all(parent).await.map_err(io_failure)?;
        }
        tokio::fs::write(&path, content).await.map_err(io_failure)?;
        Ok(path)
    }

    /// Reads `name` from the scratch directory. A path leaving it (another run's capsule, the
    /// workspace) is refused.
    pub async fn read_scratch(&self, name: &str) -> Result<String, KindError> {
        let path = self.scratch_dir().await?.join(confined(name)?);
        tokio::fs::read_to_string(&path).await.map_err(io_failure)
    }

    /// A command for a process that belongs to the run: it starts in its own process group,
    /// inside the workspace's sandbox (as a `shell` call does: the workspace read-write, the
    /// home and other runs hidden, the network as the sandbox says, limits;
    /// [`Sandbox::command`](agent_core::tools::Sandbox::command)), in the workspace. Without a
    /// workspace there is no sandbox to run it in, and it is refused
    /// ([`FailureKind::InvalidInput`]).
    pub fn command(&self, program: &str) -> Result<tokio::process::Command, KindError> {
        let Some(ws) = self.env.workspace.as_deref() else {
            return Err(KindError::invalid(format!(
                "the `{}` run cannot start `{program}`: a capsule runs processes only in its \
                 workspace's sandbox, and the executor has no workspace; give it one \
                 (`ExecEnv::with_workspace`)",
                self.kind
            )));
        };
        let mut command = ws.sandbox().command(ws.workspace(), program);
        command.current_dir(ws.workspace());
        command.process_group(0).kill_on_drop(true).stdin(std::process::Stdio::null());
        Ok(command)
    }

    /// Starts `command` (made by [`command`](Self::command)) and remembers its process group:
    /// the group is killed when the capsule is dropped (the run ended or was cancelled).
    pub fn spawn(
        &mut self,
        command: &mut tokio::process::Command,
    ) -> Result<tokio::process::Child, KindError> {
        let child = command.spawn().map_err(|e| {
            KindError::new(FailureKind::Internal, format!("cannot start a process: {e}"))
        })?;
        if let Some(pid) = child.id() {
            self.groups.push(pid);
        }
        Ok(child)
    }
}

impl Drop for Capsule {
    fn drop(&mut self) {
        for group in self.groups.drain(..) {
            kill_group(group);
        }
    }
}

/// SIGKILL to process group `group`, best effort (it may be gone).
fn kill_group(group: u32) {
    let _ = std::process::Command::new("kill")
        .arg("-s")
        .arg("KILL")
        .arg("--")
        .arg(format!("-{group}"))
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .status();
}

/// `name` as a relative path that stays where it is joined: no root, no `..`.
fn confined(name: &str) -> Result<&Path, KindError> {
    let path = Path::new(name);
    let ok = !name.is_empty()
        && path.components().all(|c| matches!(c, Component::Normal(_) | Component::CurDir));
    if ok {
        Ok(path)
    } else {
        Err(KindError::new(
            FailureKind::Permission,
            format!(
                "scratch path `{name}` leaves the run's capsule; use a relative path inside it"
            ),
        ))
    }
}

/// A refused or failed tool call as a run failure: a missing capability is a permission
/// failure; a tool's own failure passes if it is transient; the rest (the audit log or state
/// store failing) by its class.
fn tool_failure(tool: &str, error: AgentError) -> KindError {
    let transient = error.class() == agent_state::ErrorClass::Transient;
    let kind = match &error {
        AgentError::MissingCapability { .. } => FailureKind::Permission,
        AgentError::Tool(_) if transient => FailureKind::Network,
        AgentError::Tool(_) => FailureKind::InvalidInput,
        _ if transient => FailureKind::Server,
        _ => FailureKind::Internal,
    };
    KindError::new(kind, format!("`{tool}`: {error}"))
}

fn io_failure(e: std::io::Error) -> KindError {
    let kind = if e.kind() == std::io::ErrorKind::NotFound {
        FailureKind::InvalidInput
    } else {
        FailureKind::Internal
    };
    KindError::new(kind, e.to_string())
}

/// A reasoner's failure as a run failure: a backend failure may pass (transient), a refusal
/// of the question does not.
pub(crate) fn reason_failure(error: ReasonError) -> KindError {
    let kind = match &error {
        ReasonError::Backend { .. } => FailureKind::Server,
        ReasonError::TimedOut { .. } | ReasonError::Silent { .. } => FailureKind::Timeout,
        ReasonError::NeedsModel { .. } | ReasonError::CannotPlan { .. } => {
            FailureKind::MissingInput
        }
        ReasonError::BadQuestion(_) | ReasonError::Unplaceable { .. } => FailureKind::InvalidInput,
    };
    KindError::new(kind, error.to_string())
}
