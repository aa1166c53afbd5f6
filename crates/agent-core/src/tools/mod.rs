//! Tools for bottom agents: the [`Tool`] trait, the [`ToolRegistry`] and the built-in tools.
//!
//! A tool takes a JSON arguments object and returns a [`ToolOutput`]. The [`ToolRegistry`]
//! validates the arguments against the tool's JSON Schema (a small subset, see
//! [`validate`]) before it calls the tool, so a reasoning backend gets every problem with its
//! JSON path in one [`ToolError::InvalidArguments`].
//!
//! The seven built-in tools ([`ToolRegistry::with_builtins`]) work inside one workspace directory
//! ([`ToolContext`]) and refuse any path that leaves it, lexically (`..`, absolute paths) or
//! through a symlink:
//!
//! | tool | arguments | side effects |
//! |---|---|---|
//! | [`read_file`](ReadFile) | `path` | no |
//! | [`write_file`](WriteFile) | `path`, `content` | yes (idempotent) |
//! | [`edit_file`](EditFile) | `path`, `old_text`, `new_text`, `replace_all` (optional) | yes |
//! | [`list_dir`](ListDir) | `path` (optional, default `.`) | no |
//! | [`search`](Search) | `pattern` (a regex), `path`, `glob`, `max_results`, `case_insensitive` (optional) | no |
//! | [`glob`](Glob) | `pattern`, `path`, `max_results` (optional) | no |
//! | [`shell`](Shell) | `command`, `timeout_ms` (optional) | yes (in the [`Sandbox`]) |
//!
//! `search` and `glob` walk the workspace with ripgrep's crates (`ignore`, `grep-searcher`),
//! honouring the `.gitignore` and `.ignore` files inside it, and never follow a symlink.
//!
//! The built-in tools do their blocking work (file I/O, waiting for a process) on tokio's
//! blocking pool and measure the shell timeout in real time, so they behave the same on a
//! runtime with paused time. They are Unix-only (`sh`, process groups, symlinks).
//!
//! Every call through the registry has a hard limit, [`ToolContext::tool_timeout`] (a team's
//! `[timeouts] tool_ms`, default 10 minutes): a call still running then fails with
//! [`ToolError::Timeout`]. `shell` caps its `timeout_ms` at it and stops its command itself;
//! `search` and `glob` stop their walk at it (in real time), so a walk over a huge tree does
//! not outlive its call.
//!
//! The file tools open what they read, list and write beneath the workspace root with
//! `openat2(RESOLVE_BENEATH | RESOLVE_NO_MAGICLINKS)`, so a symlink created or swapped in by a
//! command while they run (between the path check and the open) cannot lead them out either.
//! `search` opens what it walked through no symlink at all. A directory masked with
//! [`ToolContext::with_masked`] (the run's data directory inside the workspace) is refused
//! ([`ToolError::Masked`]) on the opened handle's real location, and walks leave it out.
//! [`WorkspaceFiles`] opens files the same way for the runtime's own reads and writes on an
//! agent's behalf (OODA's level-3 copy, evolution's workspaces).
//!
//! `shell` commands run in a [`Sandbox`] (built in, no external program: the system read-only,
//! the workspace read-write, home, `/run`, secrets and the run's data hidden, a private capped
//! `/tmp` and `/dev/shm`, no network unless allowed, a minimal environment, limits on memory,
//! processes, file size and open files, control groups for the whole command tree as root, and
//! a PID namespace so that nothing a call started outlives it). A program using it calls
//! [`run_sandbox_launcher_if_requested`] first in `main`, or ships the `strata-sandbox`
//! binary next to its executable (see [`Sandbox`]). It is on by default;
//! [`Sandbox::unsandboxed`] turns it off explicitly, and a call whose sandbox cannot work here is refused ([`ToolError::Sandbox`]).
//!
//! ```
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! use agent_core::tools::{ToolContext, ToolRegistry};
//! use serde_json::json;
//!
//! let dir = tempfile::tempdir()?;
//! let ctx = ToolContext::new(dir.path())?;
//! let tools = ToolRegistry::with_builtins();
//!
//! tools.call(&ctx, "write_file", json!({ "path": "notes/a.txt", "content": "hello" })).await?;
//! let read = tools.call(&ctx, "read_file", json!({ "path": "notes/a.txt" })).await?;
//! assert_eq!(read.output, "hello");
//!
//! let err = tools.call(&ctx, "read_file", json!({ "path": "../outside" })).await.unwrap_err();
//! assert!(!err.is_transient());
//! # Ok(())
//! # }
//! ```

mod beneath;
mod edit;
mod error;
mod fs;
mod path;
mod registry;
mod sandbox;
mod schema;
mod search;
mod shell;
mod walk;

#[cfg(test)]
mod tests;

use std::path::{Path, PathBuf};
use std::time::Duration;

use async_trait::async_trait;
use serde::{Deserialize, Serialize};

pub use beneath::{EntryKind, WorkspaceFiles};
pub use edit::EditFile;
pub use error::{ToolError, WorkspaceError};
pub use fs::{ListDir, MAX_READ_BYTES, ReadFile, WriteFile};
pub use registry::ToolRegistry;
pub use sandbox::launch::{run_sandbox_launcher_if_requested, sandbox_launcher_main};
pub use sandbox::{
    DEFAULT_FILE_BYTES, DEFAULT_MEMORY_BYTES, DEFAULT_OPEN_FILES, DEFAULT_PROCESSES,
    DEFAULT_TMP_BYTES, Sandbox, SandboxError, SandboxLimits,
};
pub use schema::{check_schema, validate};
pub use search::{Glob, Search};
pub use shell::{BACKSTOP_GRACE, MAX_SHELL_TIMEOUT_MS, MAX_STREAM_BYTES, Shell};

/// Something an agent can do: a name, a description and an argument schema for the reasoning
/// backend, and [`call`](Tool::call) to do it.
///
/// Implementations must be cheap to share (`Arc<dyn Tool>`) and safe to call concurrently.
#[async_trait]
pub trait Tool: Send + Sync {
    /// The unique name the reasoning backend uses to pick the tool, such as `read_file`.
    fn name(&self) -> &str;

    /// One or two sentences for the reasoning backend: what the tool does and returns.
    fn description(&self) -> &str;

    /// The JSON Schema of the arguments object, in the subset [`check_schema`] accepts.
    /// [`ToolRegistry::call`] validates arguments against it before calling the tool.
    fn schema(&self) -> &serde_json::Value;

    /// Whether a call can change the world (files, processes). A runtime records the results
    /// of such calls so that a resumed run does not repeat them.
    fn has_side_effects(&self) -> bool;

    /// Runs the tool with `args`. Tools also check their own arguments, so a call that
    /// bypasses the registry still gets [`ToolError::InvalidArguments`] rather than a panic.
    ///
    /// A tool that ran but did not succeed (a command exiting non-zero) returns `Ok` with
    /// [`ToolOutput::success`] `false`; `Err` means the tool could not do its job.
    async fn call(
        &self,
        ctx: &ToolContext,
        args: serde_json::Value,
    ) -> Result<ToolOutput, ToolError>;

    /// Checks what the schema cannot say about `args` (already valid against
    /// [`schema`](Tool::schema)): each problem as `` `field`: what is wrong ``. Called by
    /// [`ToolRegistry`] before every call and by a plan's parser, so a plan step that can never
    /// run is refused when the plan is read. `shell` refuses a NUL byte in its command. Empty by
    /// default.
    fn check_args(&self, _args: &serde_json::Value) -> Vec<String> {
        Vec::new()
    }

    /// Whether [`schema`](Tool::schema) is any JSON Schema rather than the subset
    /// [`check_schema`] accepts: the schema of a tool served by another program (an MCP
    /// server), which checks the arguments itself. Then [`ToolRegistry::register`] refuses only
    /// a schema whose root is not an object schema, and arguments are checked against the
    /// keywords [`validate`] knows (the others are left to the tool). `false` by default.
    fn foreign_schema(&self) -> bool {
        false
    }

    /// Whether the tool stops its own work at its time limit (at most
    /// [`ToolContext::tool_timeout`]), as `shell` stops its command: then
    /// [`ToolRegistry`] does not cut a call short at the limit, and gives up on it only
    /// [`BACKSTOP_GRACE`] later. `false` by default: the registry cuts the call at the limit.
    fn stops_itself(&self) -> bool {
        false
    }

    /// Whether running the tool twice with the same arguments has the same effect as once
    /// (`write_file` writes the same bytes), so a call interrupted by a crash may simply run
    /// again. Defaults to "no side effects".
    fn idempotent(&self) -> bool {
        !self.has_side_effects()
    }

    /// Like [`call`](Tool::call), keeping a crash journal in `journal` (an empty directory the
    /// caller owns) from which [`recover`](Tool::recover) can learn, after the caller crashed,
    /// whether the call completed. The default keeps no journal.
    async fn call_journaled(
        &self,
        ctx: &ToolContext,
        args: serde_json::Value,
        _journal: &Path,
    ) -> Result<ToolOutput, ToolError> {
        self.call(ctx, args).await
    }

    /// After a crash, what became of a call started with [`call_journaled`](Tool::call_journaled)
    /// and this `journal`. The default knows nothing ([`Recovery::Unknown`]).
    async fn recover(
        &self,
        _ctx: &ToolContext,
        _args: serde_json::Value,
        _journal: &Path,
    ) -> Result<Recovery, ToolError> {
        Ok(Recovery::Unknown)
    }
}

/// What [`Tool::recover`] found out about a call interrupted by a crash.
#[derive(Clone, Debug, PartialEq)]
pub enum Recovery {
    /// The call completed (perhaps after the crash); this is its result.
    Completed(ToolOutput),
    /// The call never started: running it now runs it once.
    NotStarted,
    /// The call started and was stopped before it finished (it ran out of time, or its runner
    /// died with the process); nothing of it runs any more. Its effect may be partial: this is
    /// what it had printed, as a failed output with `data.interrupted = true`.
    Interrupted(ToolOutput),
    /// It cannot be known whether the call had its effect.
    Unknown,
}

/// What a tool call produced.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ToolOutput {
    /// Whether the tool did what was asked (for `shell`: the exit code was 0).
    pub success: bool,
    /// Human- and model-readable text: file content, a listing, a command's output.
    pub output: String,
    /// Structured details for programs, such as `{"exit_code": 0, ...}`.
    pub data: serde_json::Value,
}

/// Where and how tools run: the workspace root, the default shell timeout, the hard limit of
/// every tool call ([`ToolContext::tool_timeout`]), where crash
/// journals of side-effecting calls are kept, and the [`Sandbox`] `shell` commands run in.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ToolContext {
    workspace: PathBuf,
    shell_timeout: Duration,
    tool_timeout: Duration,
    journal: Option<PathBuf>,
    /// Calls may have been started by another process on another host (a run on workers).
    foreign_calls: bool,
    sandbox: Sandbox,
    /// Directories no file tool may read, list or write ([`with_masked`](Self::with_masked)).
    masked: Vec<beneath::MaskedDir>,
}

impl ToolContext {
    /// The default shell timeout: an agent's default task timeout, 30 s.
    pub const DEFAULT_SHELL_TIMEOUT: Duration =
        Duration::from_millis(agent_state::DEFAULT_TIMEOUT_MS);

    /// The default hard limit of one tool call: `[timeouts] tool_ms`'s default, 10 minutes.
    pub const DEFAULT_TOOL_TIMEOUT: Duration = Duration::from_millis(agent_state::DEFAULT_TOOL_MS);

    /// A context for `workspace`, created if missing and canonicalized (symlinks resolved), with
    /// [`DEFAULT_SHELL_TIMEOUT`](Self::DEFAULT_SHELL_TIMEOUT),
    /// [`DEFAULT_TOOL_TIMEOUT`](Self::DEFAULT_TOOL_TIMEOUT) and the default [`Sandbox`]
    /// (commands sandboxed, no network; a `shell` call fails with [`ToolError::Sandbox`] where
    /// the sandbox cannot work, see [`Sandbox::check`]).
    ///
    /// This does blocking file-system calls; call it while setting up, not in a hot loop.
    pub fn new(workspace: impl AsRef<Path>) -> Result<Self, WorkspaceError> {
        let requested = workspace.as_ref();
        let fail = |source| WorkspaceError { path: requested.to_path_buf(), source };
        std::fs::create_dir_all(requested).map_err(fail)?;
        let workspace = std::fs::canonicalize(requested).map_err(fail)?;
        Ok(Self {
            workspace,
            shell_timeout: Self::DEFAULT_SHELL_TIMEOUT,
            tool_timeout: Self::DEFAULT_TOOL_TIMEOUT,
            journal: None,
            foreign_calls: false,
            sandbox: Sandbox::new(),
            masked: Vec::new(),
        })
    }

    /// The same context running `shell` commands in `sandbox` ([`Sandbox::unsandboxed`]: in
    /// none). Check that it can work with [`Sandbox::check`] before a run starts.
    #[must_use]
    pub fn with_sandbox(mut self, sandbox: Sandbox) -> Self {
        self.sandbox = sandbox;
        self
    }

    /// The sandbox `shell` commands run in.
    pub fn sandbox(&self) -> &Sandbox {
        &self.sandbox
    }

    /// The same context with `dirs` masked as well: no file tool reads, lists or writes
    /// anything in them (a call is refused with [`ToolError::Masked`], checked on the handle it
    /// opened, so a symlink into one or a rename of one does not get round it), and `search`,
    /// `glob` and `list_dir` leave them out. A runtime masks the run's data directory when the
    /// workspace contains it (the [`Sandbox`] hides it from commands with
    /// [`Sandbox::hide`]). A directory outside the workspace needs no mask and is harmless
    /// here; one that contains the workspace masks nothing (the workspace is never refused).
    ///
    /// Blocking (each directory is resolved and its identity taken now); call it while
    /// setting up.
    #[must_use]
    pub fn with_masked<P: AsRef<Path>>(mut self, dirs: impl IntoIterator<Item = P>) -> Self {
        for dir in dirs {
            let masked = beneath::MaskedDir::new(dir.as_ref());
            if !self.masked.contains(&masked) {
                self.masked.push(masked);
            }
        }
        self
    }

    /// The masked directories' paths ([`with_masked`](Self::with_masked)).
    pub fn masked(&self) -> impl Iterator<Item = &Path> {
        self.masked.iter().map(beneath::MaskedDir::path)
    }

    /// The masked directories, for the tools.
    pub(crate) fn masked_dirs(&self) -> &[beneath::MaskedDir] {
        &self.masked
    }

    /// The same context keeping crash journals of side-effecting calls under `dir` (a run
    /// directory's `journal/`), so that a resumed run can tell whether an interrupted call
    /// completed. Without one, an interrupted non-idempotent call is never run again.
    #[must_use]
    pub fn with_journal(mut self, dir: impl Into<PathBuf>) -> Self {
        // Tools run in the workspace, so a relative journal path must not be read from there.
        let dir = dir.into();
        self.journal = Some(std::path::absolute(&dir).unwrap_or(dir));
        self
    }

    /// Where crash journals are kept, if anywhere.
    pub fn journal(&self) -> Option<&Path> {
        self.journal.as_deref()
    }

    /// The same context for a run whose calls may have been started by another process on
    /// another host (agents that move between workers): a call recorded as started whose
    /// crash journal is not in [`journal`](Self::journal) may have run elsewhere, so its
    /// recovery is [`Recovery::Unknown`] (never run again) instead of
    /// [`Recovery::NotStarted`]. Workers that share the journal directory (one machine, one
    /// data directory) still adopt each other's finished and running commands.
    #[must_use]
    pub fn with_foreign_calls(mut self) -> Self {
        self.foreign_calls = true;
        self
    }

    /// Whether calls may have been started elsewhere ([`with_foreign_calls`](Self::with_foreign_calls)).
    pub fn foreign_calls(&self) -> bool {
        self.foreign_calls
    }

    /// The same context with `timeout` as the default for `shell` calls without `timeout_ms`.
    #[must_use]
    pub fn with_shell_timeout(mut self, timeout: Duration) -> Self {
        self.shell_timeout = timeout;
        self
    }

    /// The same context with `timeout` as the hard limit of every tool call (the team's
    /// `[timeouts] tool_ms`): a call still running then is stopped and fails with
    /// [`ToolError::Timeout`] (a tool that [stops itself](Tool::stops_itself), such as
    /// `shell`, stops at it on its own; a `shell` call asking for a longer `timeout_ms` gets
    /// this one).
    #[must_use]
    pub fn with_tool_timeout(mut self, timeout: Duration) -> Self {
        self.tool_timeout = timeout;
        self
    }

    /// The hard limit of every tool call.
    pub fn tool_timeout(&self) -> Duration {
        self.tool_timeout
    }

    /// The canonical workspace root; every path tools touch lies under it.
    pub fn workspace(&self) -> &Path {
        &self.workspace
    }

    /// The timeout of `shell` calls that do not pass `timeout_ms`.
    pub fn shell_timeout(&self) -> Duration {
        self.shell_timeout
    }
}
