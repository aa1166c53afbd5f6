//! MCP servers as the team file that declares them (team-file) and the client that starts
//! them (agent-mcp) both see them: how one is reached ([`McpTransport`]), and the names of
//! servers and of their tools, one set of rules: a server's tools are registered as
//! `mcp__<server>__<tool>`, within the 64 characters model providers accept.

use std::collections::BTreeMap;

/// How an MCP server is reached.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum McpTransport {
    /// A child process speaking MCP on its standard input and output: `command` (found on
    /// `PATH` like a shell would, or relative to the workspace) and its `args`, started in the
    /// workspace, inside the sandbox unless `sandboxed` is `false`. Its environment is minimal:
    /// `PATH`, `LANG`, `TERM` and `HOME` from Strata's, the variables named in `pass_env` (when
    /// Strata has them), then `env`; nothing else of Strata's (no API keys or tokens). Its
    /// standard error is kept (the last few kilobytes) for error messages.
    Stdio {
        /// The program (a team file's `command`).
        command: String,
        /// Its arguments (`args`).
        args: Vec<String>,
        /// Variables set in its environment (`env`).
        env: BTreeMap<String, String>,
        /// Variables of Strata's environment passed on by name (`pass_env`; absent ones are
        /// skipped); never Strata's own API keys, tokens or OTLP headers.
        pass_env: Vec<String>,
        /// Whether it runs inside the sandbox (a team file's `sandbox`, default `true`);
        /// `false` only on an explicit opt-out, which a run audits and prints.
        sandboxed: bool,
        /// Whether it may use the network inside the sandbox (`network`, default `false`).
        network: bool,
    },
    /// A server already running, at a streamable-HTTP endpoint (`http://host:port/mcp`; plain
    /// HTTP only).
    Http {
        /// The endpoint (`url`).
        url: String,
    },
}

/// The prefix of every MCP tool's registered name: `mcp__<server>__<tool>`.
pub const TOOL_PREFIX: &str = "mcp__";

/// The longest registered tool name: what model providers accept (`[a-zA-Z0-9_-]{1,64}`).
pub const MAX_TOOL_NAME: usize = 64;

/// The longest server name.
pub const MAX_SERVER_NAME: usize = 32;

/// Why `name` cannot name an MCP server, if it cannot: it must be 1 to [`MAX_SERVER_NAME`]
/// ASCII letters, digits, `-` and `_`, without `__` (the separator of `mcp__<server>__<tool>`)
/// and not ending in `_`.
pub fn check_server_name(name: &str) -> Result<(), String> {
    if name.is_empty() || name.len() > MAX_SERVER_NAME {
        return Err(format!("an MCP server's name must be 1 to {MAX_SERVER_NAME} characters"));
    }
    if let Some(bad) = name.chars().find(|c| !(c.is_ascii_alphanumeric() || *c == '-' || *c == '_'))
    {
        return Err(format!(
            "an MCP server's name may hold only ASCII letters, digits, `-` and `_`, not {bad:?}"
        ));
    }
    if name.contains("__") || name.ends_with('_') {
        return Err(
            "an MCP server's name may not hold `__` or end with `_` (its tools are `mcp__<server>__<tool>`)"
                .into(),
        );
    }
    Ok(())
}

/// Why `url` cannot be a streamable-HTTP endpoint, if it cannot: plain `http://` with a host,
/// no whitespace (no TLS: an HTTPS server is reached through a local proxy).
pub fn check_server_url(url: &str) -> Result<(), String> {
    if url.starts_with("https://") {
        return Err(
            "only plain `http://` endpoints are supported (no TLS); reach an HTTPS server through a local proxy"
                .into(),
        );
    }
    let host = url.strip_prefix("http://").and_then(|rest| rest.split(['/', '?', '#']).next());
    if !matches!(host, Some(h) if !h.is_empty()) || url.chars().any(char::is_whitespace) {
        return Err(format!("`{url}` is not an `http://host:port/path` URL"));
    }
    Ok(())
}

/// The registered name of the MCP tool `tool` of server `server`: `mcp__<server>__<tool>`,
/// each character of `tool` outside `[A-Za-z0-9_-]` (MCP allows `.` and `/`) written `_`.
/// `Err` says why there is none: the name would be over [`MAX_TOOL_NAME`] characters, or
/// `tool` is empty.
pub fn tool_name(server: &str, tool: &str) -> Result<String, String> {
    if tool.is_empty() {
        return Err("the tool has an empty name".into());
    }
    let cleaned: String = tool
        .chars()
        .map(|c| if c.is_ascii_alphanumeric() || c == '-' || c == '_' { c } else { '_' })
        .collect();
    let name = format!("{TOOL_PREFIX}{server}__{cleaned}");
    if name.chars().count() > MAX_TOOL_NAME {
        return Err(format!(
            "its registered name `{name}` would be over {MAX_TOOL_NAME} characters, the limit of model providers; give the server a shorter name"
        ));
    }
    Ok(name)
}

/// The server and tool parts of a registered MCP tool name (`mcp__fs__read_file` →
/// `("fs", "read_file")`), or `None` for a name that is not one.
pub fn split_tool_name(name: &str) -> Option<(&str, &str)> {
    let rest = name.strip_prefix(TOOL_PREFIX)?;
    let (server, tool) = rest.split_once("__")?;
    (!server.is_empty() && !tool.is_empty()).then_some((server, tool))
}
