//! What an MCP server is to Strata before it runs: [`McpServerSpec`], and the names its
//! tools take in a [`ToolRegistry`](agent_core::tools::ToolRegistry).

use std::collections::BTreeMap;

use crate::McpError;

pub use agent_state::mcp::{
    MAX_SERVER_NAME, MAX_TOOL_NAME, McpTransport, TOOL_PREFIX, check_server_name, split_tool_name,
    tool_name,
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
                pass_env: Vec::new(),
                sandboxed: true,
                network: false,
            },
        }
    }

    /// The same server (stdio) outside the sandbox: `false` opts out, explicitly.
    #[must_use]
    pub fn sandboxed(mut self, on: bool) -> Self {
        if let McpTransport::Stdio { sandboxed, .. } = &mut self.transport {
            *sandboxed = on;
        }
        self
    }

    /// The same server (stdio) with the network allowed inside the sandbox (`true`).
    #[must_use]
    pub fn with_network(mut self, allowed: bool) -> Self {
        if let McpTransport::Stdio { network, .. } = &mut self.transport {
            *network = allowed;
        }
        self
    }

    /// The same server (stdio) with `name` set to `value` in its environment.
    #[must_use]
    pub fn with_env(mut self, name: impl Into<String>, value: impl Into<String>) -> Self {
        if let McpTransport::Stdio { env, .. } = &mut self.transport {
            env.insert(name.into(), value.into());
        }
        self
    }

    /// The same server (stdio) also given Strata's variable `name`, when it is set.
    #[must_use]
    pub fn pass_env(mut self, name: impl Into<String>) -> Self {
        if let McpTransport::Stdio { pass_env, .. } = &mut self.transport {
            pass_env.push(name.into());
        }
        self
    }

    /// Whether the server is a process started outside the sandbox (a stdio server that
    /// opted out). An HTTP server is not a process Strata starts: `false`.
    pub fn opts_out(&self) -> bool {
        matches!(self.transport, McpTransport::Stdio { sandboxed: false, .. })
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
