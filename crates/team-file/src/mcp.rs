//! `[[mcp_servers]]`: the MCP servers a team file declares ([`McpServerDecl`], read alone by
//! [`mcp_servers`] so that a program can start them before [`parse_team`](crate::parse_team)
//! checks the tools the executors list), the names their tools take, and
//! [`parse_stored_team`] for reading a stored run's team file without starting them.

use std::path::Path;
use std::sync::Arc;

use agent_core::tools::{Tool, ToolContext, ToolError, ToolOutput, ToolRegistry};
use async_trait::async_trait;
use serde_json::Value;

use crate::error::{FileError, Source};
use crate::limits::MAX_TEAM_FILE_BYTES;
use crate::raw::{RawMcpServer, RawTeam};
use crate::team::TeamFile;
use toml::Spanned;

pub use agent_state::mcp::{
    MAX_SERVER_NAME as MAX_MCP_SERVER_NAME, McpTransport, TOOL_PREFIX as MCP_TOOL_PREFIX,
    split_tool_name as split_mcp_tool,
};
use agent_state::mcp::{check_server_name, check_server_url};

/// An MCP server a team file declares in `[[mcp_servers]]`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct McpServerDecl {
    /// Its name: its tools are `mcp__<name>__<tool>`.
    pub name: String,
    /// How it is reached.
    pub transport: McpTransport,
}

/// Reads and checks only the `[[mcp_servers]]` of a team file's `text` (a file that is not
/// TOML, or has unknown fields, is refused as by [`parse_team`](crate::parse_team)): a name
/// (1 to [`MAX_MCP_SERVER_NAME`] ASCII letters, digits, `-` and `_`, no `__`, not ending in
/// `_`) used once, and either `command` (with `args`, `env`, `pass_env`, `sandbox`,
/// `network`) or `url` (`http://...`).
pub fn mcp_servers(path: &Path, text: &str) -> Result<Vec<McpServerDecl>, FileError> {
    let src = Source { path, text };
    src.check_size(MAX_TEAM_FILE_BYTES, "team file")?;
    let raw: RawTeam = toml::from_str(text).map_err(|e| src.toml_error(&e))?;
    declared(&src, &raw.mcp_servers)
}

/// Like [`parse_team`](crate::parse_team) for the team file a run stored, read without
/// starting its MCP servers (`strata inspect`, `approve`): every `mcp__<server>__<tool>` the
/// file names, for a server it declares, is taken as a tool of that server (one that cannot
/// run). Use [`parse_team`](crate::parse_team), with the servers' tools registered, for a run.
pub fn parse_stored_team(
    path: &Path,
    text: &str,
    tools: &ToolRegistry,
) -> Result<TeamFile, FileError> {
    let servers = mcp_servers(path, text)?;
    crate::team::parse_team(path, text, &with_unstarted_tools(&servers, text, tools))
}

/// `tools` and, for every `mcp__<server>__<tool>` written in `text` (a team or plan file,
/// read as TOML) for one of `servers`, a tool of that name that cannot run (its schema any
/// object): what [`parse_stored_team`] reads with, and what a new run checks its team and
/// plan files with before its servers start (it checks them again with the servers' real
/// tools then).
pub fn with_unstarted_tools(
    servers: &[McpServerDecl],
    text: &str,
    tools: &ToolRegistry,
) -> ToolRegistry {
    let mut tools = tools.clone();
    if !servers.is_empty()
        && let Ok(value) = toml::from_str::<toml::Value>(text)
    {
        let mut names = Vec::new();
        toml_strings(&value, &mut names);
        for name in names {
            let declared = split_mcp_tool(name)
                .is_some_and(|(server, _)| servers.iter().any(|s| s.name == server));
            if declared && tools.get(name).is_none() {
                // Unique (just checked) and with an object schema: cannot fail.
                let _ = tools.register(Arc::new(Unstarted::new(name)));
            }
        }
    }
    tools
}

/// What to say about a tool name that `tools` does not have, when it names an MCP tool:
/// the tools its server offers, or that no such server runs.
pub(crate) fn unknown_mcp_tool(name: &str, tools: &ToolRegistry) -> Option<String> {
    let (server, tool) = split_mcp_tool(name)?;
    let prefix = format!("{MCP_TOOL_PREFIX}{server}__");
    let offered: Vec<&str> = tools.names().into_iter().filter(|n| n.starts_with(&prefix)).collect();
    Some(if offered.is_empty() {
        format!(
            "unknown tool `{name}`: no MCP server `{server}` is declared in [[mcp_servers]], or it offers no tools"
        )
    } else {
        format!(
            "MCP server `{server}` does not offer a tool `{tool}` (it offers: {})",
            offered.join(", ")
        )
    })
}

/// Checks the declared servers.
pub(crate) fn declared(
    src: &Source<'_>,
    raw: &[RawMcpServer],
) -> Result<Vec<McpServerDecl>, FileError> {
    let mut out: Vec<McpServerDecl> = Vec::with_capacity(raw.len());
    for server in raw {
        src.no_control(&server.name, "an MCP server's `name`")?;
        let name = server.name.get_ref();
        if let Err(reason) = check_server_name(name) {
            return Err(src.error(server.name.span(), format!("`name`: {reason}")));
        }
        if out.iter().any(|s| &s.name == name) {
            return Err(src.error(
                server.name.span(),
                format!("two MCP servers are named `{name}`; give each a unique name"),
            ));
        }
        let transport = match (&server.command, &server.url) {
            (Some(command), None) => stdio_server(src, server, command)?,
            (None, Some(url)) => http_server(src, server, url)?,
            (Some(_), Some(url)) => {
                return Err(src.error(
                    url.span(),
                    "an MCP server has a `command` (started by the run) or a `url` (already running), not both",
                ));
            }
            (None, None) => {
                return Err(src.error(
                    server.name.span(),
                    format!(
                        "MCP server `{name}` needs a `command` (with `args`: a program speaking MCP on stdio) or a `url` (a streamable-HTTP endpoint)"
                    ),
                ));
            }
        };
        out.push(McpServerDecl { name: name.clone(), transport });
    }
    Ok(out)
}

/// A server started with `command`: its arguments, environment, `pass_env` (variable
/// names, none of strata's own secrets) and sandbox.
fn stdio_server(
    src: &Source<'_>,
    server: &RawMcpServer,
    command: &Spanned<String>,
) -> Result<McpTransport, FileError> {
    src.no_control(command, "an MCP server's `command`")?;
    if command.get_ref().trim().is_empty() {
        return Err(src.error(command.span(), "`command` is empty"));
    }
    for arg in server.args.iter().flatten() {
        src.no_control(arg, "an MCP server's argument")?;
    }
    let mut pass_env = Vec::new();
    for name in server.pass_env.iter().flatten() {
        let text = name.get_ref();
        let valid = !text.is_empty()
            && !text.starts_with(|c: char| c.is_ascii_digit())
            && text.chars().all(|c| c.is_ascii_alphanumeric() || c == '_');
        if !valid {
            return Err(src.error(
                name.span(),
                format!("`pass_env`: `{text}` is not an environment variable name"),
            ));
        }
        if agent_core::secrets::ENV_VARS.contains(&text.as_str()) {
            return Err(src.error(
                name.span(),
                format!(
                    "`pass_env`: `{text}` is one of strata's own secrets, never given to an MCP server"
                ),
            ));
        }
        pass_env.push(text.clone());
    }
    Ok(McpTransport::Stdio {
        pass_env,
        sandboxed: server.sandbox.as_ref().is_none_or(|s| *s.get_ref()),
        network: server.network.as_ref().is_some_and(|n| *n.get_ref()),
        command: command.get_ref().clone(),
        args: server.args.iter().flatten().map(|a| a.get_ref().clone()).collect(),
        env: server.env.iter().flatten().map(|(k, v)| (k.clone(), v.get_ref().clone())).collect(),
    })
}

/// A server reached at a `url`: none of the settings of a process strata starts.
fn http_server(
    src: &Source<'_>,
    server: &RawMcpServer,
    url: &Spanned<String>,
) -> Result<McpTransport, FileError> {
    src.no_control(url, "an MCP server's `url`")?;
    if server.args.is_some() || server.env.is_some() {
        return Err(src.error(
            url.span(),
            "`args` and `env` are for a server started with `command`, not one reached at a `url`",
        ));
    }
    let process_only = [
        server.sandbox.as_ref().map(|s| ("sandbox", s.span())),
        server.network.as_ref().map(|n| ("network", n.span())),
        server.pass_env.as_ref().map(|_| ("pass_env", url.span())),
    ];
    if let Some((field, span)) = process_only.into_iter().flatten().next() {
        return Err(src.error(
            span,
            format!(
                "`{field}` is for a server started with `command`; a server reached at a `url` is not a process strata starts, so strata does not sandbox it"
            ),
        ));
    }
    let text = url.get_ref();
    if let Err(reason) = check_server_url(text) {
        return Err(src.error(url.span(), format!("`url`: {reason}")));
    }
    Ok(McpTransport::Http { url: text.clone() })
}

/// Every string in `value`, at any depth: the names a file may give tools by.
pub fn toml_strings<'v>(value: &'v toml::Value, out: &mut Vec<&'v str>) {
    match value {
        toml::Value::String(s) => out.push(s),
        toml::Value::Array(items) => items.iter().for_each(|v| toml_strings(v, out)),
        toml::Value::Table(table) => table.values().for_each(|v| toml_strings(v, out)),
        _ => {}
    }
}

/// An MCP tool a stored team file names, whose server is not running: known by name only.
struct Unstarted {
    name: String,
    schema: Value,
}

impl Unstarted {
    fn new(name: &str) -> Self {
        Self { name: name.to_owned(), schema: serde_json::json!({ "type": "object" }) }
    }
}

#[async_trait]
impl Tool for Unstarted {
    fn name(&self) -> &str {
        &self.name
    }

    fn description(&self) -> &str {
        "a tool of an MCP server that is not running"
    }

    fn schema(&self) -> &Value {
        &self.schema
    }

    fn has_side_effects(&self) -> bool {
        true
    }

    fn foreign_schema(&self) -> bool {
        true
    }

    async fn call(&self, _ctx: &ToolContext, _args: Value) -> Result<ToolOutput, ToolError> {
        Err(ToolError::Failed {
            tool: self.name.clone(),
            message: "its MCP server is not running (the team file was read without starting it)"
                .into(),
        })
    }
}
