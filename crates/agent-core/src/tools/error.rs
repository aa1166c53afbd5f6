//! The errors of tool registration and tool calls, and which of them are worth a retry.

use std::io::ErrorKind;
use std::path::PathBuf;

use agent_state::ErrorClass;

/// Why a tool could not be registered or could not do its job.
///
/// [`is_transient`](Self::is_transient) tells a runtime whether retrying the same call can help.
#[derive(Debug, thiserror::Error)]
pub enum ToolError {
    /// No tool has this name.
    #[error("unknown tool `{name}`; use one of: {}", .available.join(", "))]
    UnknownTool {
        /// The name that was asked for.
        name: String,
        /// The registered names, sorted.
        available: Vec<String>,
    },
    /// A tool with this name is already registered.
    #[error("a tool named `{name}` is already registered; give each tool a unique name")]
    DuplicateTool {
        /// The clashing name.
        name: String,
    },
    /// The tool's argument schema uses something the validator does not support.
    #[error(
        "tool `{tool}` has an unsupported argument schema: {}; use only the supported JSON Schema subset",
        .problems.join("; ")
    )]
    InvalidSchema {
        /// The tool's name.
        tool: String,
        /// Each problem, prefixed with its place in the schema.
        problems: Vec<String>,
    },
    /// The arguments do not match the tool's schema.
    #[error("invalid arguments for tool `{tool}`: {}", .problems.join("; "))]
    InvalidArguments {
        /// The tool's name.
        tool: String,
        /// Each problem, prefixed with the JSON path of the offending value.
        problems: Vec<String>,
    },
    /// A path argument leads outside the workspace.
    #[error(
        "path `{path}` is outside the workspace {}; paths must stay inside the workspace \
         (use a relative path that does not climb out with `..` or through a symlink)",
        .workspace.display()
    )]
    PathOutsideWorkspace {
        /// The path as it was requested.
        path: String,
        /// The canonical workspace root.
        workspace: PathBuf,
    },
    /// The path lies in a masked directory (the run's data directory inside the workspace,
    /// see [`ToolContext::with_masked`](super::ToolContext::with_masked)), directly or through
    /// a symlink: no tool reads, lists or writes it. Permanent.
    #[error(
        "tool `{tool}`: `{path}` is inside the run's data directory, which agents can neither \
         read nor write; work on other files of the workspace"
    )]
    Masked {
        /// The tool's name.
        tool: String,
        /// The path as the workspace shows it.
        path: String,
    },
    /// An I/O operation failed.
    #[error("tool `{tool}` failed on {}: {source}", .path.display())]
    Io {
        /// The tool's name.
        tool: String,
        /// The file, directory or working directory involved.
        path: PathBuf,
        /// What the operating system reported.
        #[source]
        source: std::io::Error,
    },
    /// The tool ran out of time and was stopped.
    #[error(
        "tool `{tool}` timed out after {after_ms} ms; do less per call, or raise the call's \
         `timeout_ms` (`shell`) or the team's `[timeouts] tool_ms`"
    )]
    Timeout {
        /// The tool's name.
        tool: String,
        /// The time limit that expired, in milliseconds.
        after_ms: u64,
    },
    /// The input is over the tool's size limit.
    #[error(
        "{} is {size} bytes, over the {limit}-byte limit of tool `{tool}`; use a smaller file",
        .path.display()
    )]
    TooLarge {
        /// The tool's name.
        tool: String,
        /// The file that is too large.
        path: PathBuf,
        /// Its size in bytes (at least `limit + 1` when the file grew while being read).
        size: u64,
        /// The limit in bytes.
        limit: u64,
    },
    /// The path is not a regular file: a FIFO, a socket or a device (whose opening or reading
    /// could block forever) or, for `list_dir`, not a directory. Permanent.
    #[error("tool `{tool}`: `{path}` is {kind}; only {expected} can be {action}")]
    NotAFile {
        /// The tool's name.
        tool: String,
        /// The path as the workspace shows it.
        path: String,
        /// What it is, with its article: "a FIFO (named pipe)", "a socket", "a character device".
        kind: &'static str,
        /// What the tool works on: "regular files" or "directories".
        expected: &'static str,
        /// What the tool does: "read", "written", "listed".
        action: &'static str,
    },
    /// A `search` regular expression or a `glob` pattern that does not parse. Permanent.
    #[error(
        "tool `{tool}`: `{argument}` {pattern:?} is not a valid {kind}: {reason}; {}",
        pattern_hint(.kind)
    )]
    InvalidPattern {
        // Boxed strings keep `ToolError` (and every error that carries it) small.
        /// The tool's name.
        tool: Box<str>,
        /// The argument that holds the pattern: `pattern` or `glob`.
        argument: &'static str,
        /// The pattern as it was given.
        pattern: Box<str>,
        /// What it should be: "regular expression" or "glob".
        kind: &'static str,
        /// What the parser reported.
        reason: Box<str>,
    },
    /// `edit_file`'s `old_text` was not found exactly once (or, with `replace_all`, not at
    /// all), so the edit was not made and the file is unchanged. Permanent.
    #[error("tool `{tool}`: `old_text` was found {found} times in `{path}`{}", edit_hint(*.found))]
    EditMatchCount {
        /// The tool's name.
        tool: String,
        /// The file as the workspace shows it.
        path: String,
        /// How many times `old_text` occurs (overlapping occurrences count too).
        found: usize,
    },
    /// A side-effecting call was interrupted (by a crash, or its end could not be recorded:
    /// a shell command whose runner left no exit code) and it cannot be known whether it had
    /// its effect (or had all of it); it is not run again (at most once) unless its step is
    /// declared idempotent.
    #[error(
        "tool `{tool}` was interrupted while running and may or may not have had its effect; \
         it is not run again: check the workspace, then re-plan the step (or mark it \
         `idempotent = true` if running it twice is safe){}",
        partial_suffix(.partial)
    )]
    Interrupted {
        /// The tool's name.
        tool: String,
        /// What the call had printed before it was stopped (may be empty).
        partial: String,
    },
    /// A call of a tool that is neither read-only nor declared idempotent ran past the hard
    /// limit of a tool call ([`ToolContext::tool_timeout`](super::ToolContext::tool_timeout))
    /// while it may still be running on the side that serves it (an MCP server): the caller
    /// stopped waiting and asked that side to cancel it (`cancelled`: the request to cancel
    /// went out), but whether it had its effect, or still will, cannot be known. It is never
    /// sent again automatically (sending it again could run the effect twice): a supervisor or
    /// a human decides. Permanent.
    #[error(
        "tool `{tool}` did not answer within {after_ms} ms and may or may not have had its effect \
         (it is neither read-only nor idempotent{}); it is not sent again: check what it does, \
         then re-plan the step (or raise the team's `[timeouts] tool_ms`)",
        if *.cancelled { ", and its call was cancelled" } else { "" }
    )]
    OutcomeUnknown {
        /// The tool's name.
        tool: String,
        /// The time limit that expired, in milliseconds.
        after_ms: u64,
        /// Whether a cancellation was sent to the side that serves the tool.
        cancelled: bool,
    },
    /// The command sandbox cannot work here: the call was refused, nothing ran.
    #[error("tool `{tool}` refused to run the command: {source}")]
    Sandbox {
        /// The tool's name.
        tool: String,
        /// Why the sandbox cannot work, and how to fix it.
        #[source]
        source: super::SandboxError,
    },
    /// The program that serves the tool (an MCP server) could not do the call: it is gone
    /// (exited or crashed, perhaps mid-call), refused the call, or answered with something
    /// that is not a result. `source` is that program's typed error, naming it. Permanent:
    /// the same call to the same server fails the same way.
    #[error("tool `{tool}`: {source}")]
    Remote {
        /// The tool's name.
        tool: String,
        /// The name of the program (server) that serves the tool.
        server: String,
        /// What went wrong, as the serving side's typed error.
        #[source]
        source: Box<dyn std::error::Error + Send + Sync>,
    },
    /// The tool failed for another reason, described in `message`.
    #[error("tool `{tool}` failed: {message}")]
    Failed {
        /// The tool's name.
        tool: String,
        /// What went wrong and, where possible, what to do about it.
        message: String,
    },
}

/// What to do about an invalid pattern of `kind`.
fn pattern_hint(kind: &str) -> &'static str {
    if kind == "glob" {
        "fix the pattern (`*` matches within a name, `**` across directories, `?` one \
         character, `[...]` a class that needs its closing `]`)"
    } else {
        "fix the pattern (escape `(`, `[`, `{`, `*`, `+`, `?`, `.` and `\\` with `\\` to match them \
         literally)"
    }
}

/// What to do when `old_text` was found `found` times.
fn edit_hint(found: usize) -> &'static str {
    if found == 0 {
        "; it must match exactly once: read the file and copy the text to replace exactly, \
         with its whitespace and line breaks"
    } else {
        ": give more surrounding text so it matches once, or set `replace_all` to replace \
         every occurrence"
    }
}

/// `; partial output: ...` when there is some.
fn partial_suffix(partial: &str) -> String {
    const MAX: usize = 400;
    let partial = partial.trim();
    if partial.is_empty() {
        return String::new();
    }
    format!("; partial output: {}", agent_state::shorten_bytes(partial, MAX))
}

impl ToolError {
    /// Whether retrying the same call may succeed: timeouts and I/O errors of a passing kind
    /// (interrupted, would block, timed out, resource busy). A call whose outcome is unknown
    /// ([`OutcomeUnknown`](Self::OutcomeUnknown)) is not: sending it again could repeat its effect. Unknown tools, bad arguments,
    /// refused paths, oversized files, paths that are not regular files, invalid patterns and
    /// edits whose text is not found once are permanent.
    pub fn is_transient(&self) -> bool {
        match self {
            Self::Timeout { .. } => true,
            Self::Io { source, .. } => matches!(
                source.kind(),
                ErrorKind::Interrupted
                    | ErrorKind::WouldBlock
                    | ErrorKind::TimedOut
                    | ErrorKind::ResourceBusy
            ),
            Self::UnknownTool { .. }
            | Self::DuplicateTool { .. }
            | Self::InvalidSchema { .. }
            | Self::InvalidArguments { .. }
            | Self::PathOutsideWorkspace { .. }
            | Self::Masked { .. }
            | Self::TooLarge { .. }
            | Self::NotAFile { .. }
            | Self::InvalidPattern { .. }
            | Self::EditMatchCount { .. }
            | Self::Interrupted { .. }
            | Self::OutcomeUnknown { .. }
            | Self::Sandbox { .. }
            | Self::Remote { .. }
            | Self::Failed { .. } => false,
        }
    }

    /// [`is_transient`](Self::is_transient) as the retry vocabulary of `agent-state`.
    pub fn class(&self) -> ErrorClass {
        if self.is_transient() { ErrorClass::Transient } else { ErrorClass::Permanent }
    }

    /// Shorthand for [`ToolError::InvalidArguments`] with one problem.
    pub(crate) fn invalid(tool: &str, problem: impl Into<String>) -> Self {
        Self::InvalidArguments { tool: tool.to_owned(), problems: vec![problem.into()] }
    }

    /// Shorthand for [`ToolError::Io`].
    pub(crate) fn io(tool: &str, path: impl Into<PathBuf>, source: std::io::Error) -> Self {
        Self::Io { tool: tool.to_owned(), path: path.into(), source }
    }

    /// Shorthand for [`ToolError::Failed`].
    pub(crate) fn failed(tool: &str, message: impl Into<String>) -> Self {
        Self::Failed { tool: tool.to_owned(), message: message.into() }
    }
}

/// The workspace directory could not be created or resolved.
#[derive(Debug, thiserror::Error)]
#[error(
    "cannot use {} as the tool workspace: {source}; pick a directory you can create and write",
    .path.display()
)]
pub struct WorkspaceError {
    /// The directory as it was given.
    pub path: PathBuf,
    /// What the operating system reported.
    #[source]
    pub source: std::io::Error,
}
