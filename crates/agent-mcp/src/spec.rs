//! What an MCP server is to Strata before it runs: [`McpServerSpec`], and the names its
//! tools take in a [`ToolRegistry`](agent_core::tools::ToolRegistry).

use std::collections::BTreeMap;

use crate::McpError;

/// The prefix of every MCP tool's registered name: `mcp__<server>__<tool>`.
pub const TOOL_PREFIX: &str = "mcp__";

/// The longest registered tool name: what model providers accept (`[a-zA-Z0-9_-]{1,64}`).
pub const MAX_TOOL_NAME: usize = 64;

/// The longest server name.
pub const MAX_SERVER_NAME: usize = 32;

/// An MCP server to start (or reach) and take tools from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct McpServerSpec {
    /// The server's name in the team: its tools are registered as `mcp__<name>__<tool>`.
    /// ASCII letters, digits, `-` and `_` (not two `_` in a row), 1 to [`MAX_SERVER_NAME`].
    pub name: String,
    /// How to reach it.
    pub transport: McpTransport,
}

/// How an MCP server is reached.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum McpTransport {
    /// A child process speaking MCP on its standard input and output: `command` (found on
    /// `PATH` like a shell would), its `args` and extra `env` variables. It runs in the
    /// directory Strata runs in; its standard error is kept (the last few kilobytes) for error
    /// messages.
    Stdio {
        /// The program.
        command: String,
        /// Its arguments.
        args: Vec<String>,
        /// Variables added to the inherited environment.
        env: BTreeMap<String, String>,
    },
    /// A server already running, at a streamable-HTTP endpoint (`http://host:port/mcp`; plain
    /// HTTP only).
    Http {
        /// The endpoint.
        url: String,
    },
}

impl McpServerSpec {
    /// A server run as `command args...` over stdio.
    pub fn stdio(
        name: impl Into<String>,
        command: impl Into<String>,
        args: impl IntoIterator<Item = impl Into<String>>,
    ) -> Self {
        Self {
            name: name.into(),
            transport: McpTransport::Stdio {
                command: command.into(),
                args: args.into_iter().map(Into::into).collect(),
                env: BTreeMap::new(),
            },
        }
    }

    /// A server at the streamable-HTTP endpoint `url`.
    pub fn http(name: impl Into<String>, url: impl Into<String>) -> Self {
        Self { name: name.into(), transport: McpTransport::Http { url: url.into() } }
    }

    /// Checks the name ([`check_server_name`]) and, for HTTP, that the URL is `http://...`.
    pub fn check(&self) -> Result<(), McpError> {
        check_server_name(&self.name)
            .map_err(|reason| McpError::InvalidSpec { server: self.name.clone(), reason })?;
        match &self.transport {
            McpTransport::Stdio { command, .. } if command.trim().is_empty() => {
                Err(McpError::InvalidSpec {
                    server: self.name.clone(),
                    reason: "the command is empty".into(),
                })
            }
            McpTransport::Http { url } => check_url(url)
                .map_err(|reason| McpError::InvalidSpec { server: self.name.clone(), reason }),
            McpTransport::Stdio { .. } => Ok(()),
        }
    }
}

/// Why `name` cannot name an MCP server, if it cannot: it must be 1 to [`MAX_SERVER_NAME`]
/// ASCII letters, digits, `-` and `_`, without `__` (the separator of `mcp__<server>__<tool>`)
/// and not ending in `_`.
pub fn check_server_name(name: &str) -> Result<(), String> {
    if name.is_empty() || name.len() > MAX_SERVER_NAME {
        return Err(format!("a server name must be 1 to {MAX_SERVER_NAME} characters long"));
    }
    if let Some(bad) = name.chars().find(|c| !(c.is_ascii_alphanumeric() || *c == '-' || *c == '_'))
    {
        return Err(format!(
            "a server name may hold only ASCII letters, digits, `-` and `_`, not {bad:?}"
        ));
    }
    if name.contains("__") || name.ends_with('_') {
        return Err(
            "a server name may not hold `__` or end with `_` (its tools are named `mcp__<server>__<tool>`)"
                .into(),
        );
    }
    Ok(())
}

/// Why `url` cannot be a streamable-HTTP endpoint, if it cannot.
fn check_url(url: &str) -> Result<(), String> {
    let Some(rest) = url.strip_prefix("http://") else {
        return Err(if url.starts_with("https://") {
            format!(
                "`{url}`: only plain `http://` endpoints are supported (no TLS); reach an HTTPS server through a local proxy"
            )
        } else {
            format!("`{url}` is not an `http://` URL")
        });
    };
    let host = rest.split(['/', '?', '#']).next().unwrap_or_default();
    if host.is_empty() || url.chars().any(char::is_whitespace) {
        return Err(format!("`{url}` has no host, or holds whitespace"));
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
