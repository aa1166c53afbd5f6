//! What an MCP server is to Strata before it runs: [`McpServerSpec`], and the names its
//! tools take in a [`ToolRegistry`](agent_core::tools::ToolRegistry).

use std::collections::BTreeMap;

use crate::McpError;

pub use agent_state::mcp::{
    MAX_SERVER_NAME, MAX_TOOL_NAME, TOOL_PREFIX, check_server_name, split_tool_name, tool_name,
};

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
            McpTransport::Http { url } => agent_state::mcp::check_server_url(url)
                .map_err(|reason| McpError::InvalidSpec { server: self.name.clone(), reason }),
            McpTransport::Stdio { .. } => Ok(()),
        }
    }
}
