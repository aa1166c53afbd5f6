//! [`McpError`]: what can go wrong with an MCP server, always naming it.

/// Why an MCP server could not be used, or a call to one of its tools could not be made.
/// Every variant names the server (and the tool, where there is one).
#[derive(Debug, thiserror::Error)]
pub enum McpError {
    /// The server's declaration cannot work: a bad name, an empty command, a URL that is not
    /// `http://...`.
    #[error("MCP server `{server}`: {reason}")]
    InvalidSpec {
        /// The server.
        server: String,
        /// What is wrong with it.
        reason: String,
    },
    /// Two servers have the same name.
    #[error("two MCP servers are named `{server}`; give each a unique name")]
    DuplicateServer {
        /// The name.
        server: String,
    },
    /// The server runs inside the sandbox, and the sandbox cannot work on this machine (the
    /// error says what is missing); it is never started without it unless it opts out.
    #[error("MCP server `{server}` cannot start in the sandbox: {error}")]
    Sandbox {
        /// The server.
        server: String,
        /// Why the sandbox cannot work.
        error: agent_core::tools::SandboxError,
    },
    /// The server's process could not be started (no such program, not executable).
    #[error("MCP server `{server}` failed to start: cannot run `{command}`: {error}")]
    Spawn {
        /// The server.
        server: String,
        /// The program.
        command: String,
        /// What the operating system reported (in the message, so not a `source`).
        error: std::io::Error,
    },
    /// The server started but the MCP handshake (`initialize`) or the listing of its tools
    /// (`tools/list`) failed: it exited, answered something else, or is not an MCP server.
    #[error("MCP server `{server}` failed to start: {stage} failed: {message}{}", stderr_suffix(.stderr))]
    Start {
        /// The server.
        server: String,
        /// `initialize` or `tools/list`.
        stage: &'static str,
        /// What went wrong.
        message: String,
        /// The end of what the server wrote on its standard error, if anything.
        stderr: String,
    },
    /// The server did not finish starting (handshake and tool list) in time.
    #[error("MCP server `{server}` did not start within {after_ms} ms{}", stderr_suffix(.stderr))]
    StartTimeout {
        /// The server.
        server: String,
        /// The limit, in milliseconds.
        after_ms: u64,
        /// The end of what the server wrote on its standard error, if anything.
        stderr: String,
    },
    /// A tool's input schema is not valid JSON Schema; the tool is not offered.
    #[error(
        "MCP server `{server}` offers tool `{tool}` with an input schema that is not valid JSON Schema: {}",
        .problems.join("; ")
    )]
    InvalidSchema {
        /// The server.
        server: String,
        /// The tool, as the server names it.
        tool: String,
        /// Each problem, prefixed with its place in the schema.
        problems: Vec<String>,
    },
    /// A tool cannot be given a registered name (too long, or two tools would share one); the
    /// tool is not offered.
    #[error("MCP server `{server}` offers tool `{tool}`, which cannot be offered: {reason}")]
    ToolName {
        /// The server.
        server: String,
        /// The tool, as the server names it.
        tool: String,
        /// Why.
        reason: String,
    },
    /// The server is gone: it exited or crashed (before or during this call), or its
    /// connection closed. The call's effect, if it has one, may or may not have happened.
    #[error("MCP server `{server}` is gone (it exited or its connection closed) during the call of `{tool}`{}", stderr_suffix(.stderr))]
    ServerGone {
        /// The server.
        server: String,
        /// The tool being called.
        tool: String,
        /// The end of what the server wrote on its standard error, if anything.
        stderr: String,
    },
    /// The server answered the call with a protocol error (an unknown tool, arguments it
    /// refuses, an internal error), or something that is not a result.
    #[error("MCP server `{server}` refused the call of `{tool}`: {message}")]
    Call {
        /// The server.
        server: String,
        /// The tool.
        tool: String,
        /// What the server said.
        message: String,
    },
}

impl McpError {
    /// The name of the server the error is about.
    pub fn server(&self) -> &str {
        match self {
            Self::InvalidSpec { server, .. }
            | Self::DuplicateServer { server }
            | Self::Spawn { server, .. }
            | Self::Sandbox { server, .. }
            | Self::Start { server, .. }
            | Self::StartTimeout { server, .. }
            | Self::InvalidSchema { server, .. }
            | Self::ToolName { server, .. }
            | Self::ServerGone { server, .. }
            | Self::Call { server, .. } => server,
        }
    }
}

/// `; its standard error ends with: ...` when there is some.
fn stderr_suffix(stderr: &str) -> String {
    let stderr = stderr.trim();
    if stderr.is_empty() {
        String::new()
    } else {
        format!("; its standard error ends with: {stderr}")
    }
}
