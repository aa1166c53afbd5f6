//! The team file's MCP servers (`[[mcp_servers]]`): started before the team file's tool lists
//! are checked, their tools registered beside the built-in ones, stopped when the run ends.

use std::path::Path;

use agent_core::tools::ToolRegistry;
use agent_mcp::{DEFAULT_START_TIMEOUT, McpServerSpec, McpServers, McpTransport};
use team_file::{McpServerDecl, McpServerTransport};

use crate::{Failure, bad_input};

/// Starts the MCP servers the team file `text` (at `path`) declares and registers their tools
/// in `tools`. A server that fails to start, or a tool the file names that its server offers
/// with a schema that is not JSON Schema, is bad input (exit 2), before anything is written:
/// the servers started are stopped then.
pub(crate) async fn start_servers(
    path: &Path,
    text: &str,
    tools: &mut ToolRegistry,
) -> Result<McpServers, Failure> {
    let declared = team_file::mcp_servers(path, text).map_err(bad_input)?;
    if declared.is_empty() {
        return Ok(McpServers::default());
    }
    let specs: Vec<McpServerSpec> = declared.into_iter().map(spec).collect();
    let servers = McpServers::start(&specs, DEFAULT_START_TIMEOUT)
        .await
        .map_err(|e| bad_input(anyhow::Error::new(e).context(format!("{}", path.display()))))?;
    if let Err(failure) = register(path, text, &servers, tools) {
        servers.shutdown().await;
        return Err(failure);
    }
    Ok(servers)
}

fn register(
    path: &Path,
    text: &str,
    servers: &McpServers,
    tools: &mut ToolRegistry,
) -> Result<(), Failure> {
    // A tool named in the file that its server refused: say why, rather than "not offered".
    if let Ok(value) = toml::from_str::<toml::Value>(text) {
        let mut names = Vec::new();
        strings(&value, &mut names);
        if let Some((name, why)) =
            names.into_iter().find_map(|name| servers.refusal(name).map(|why| (name, why)))
        {
            return Err(bad_input(anyhow::anyhow!(
                "{}: the tool `{name}` cannot be used: {why}",
                path.display()
            )));
        }
    }
    servers.register(tools).map_err(bad_input)
}

/// A team file's declaration as what `agent-mcp` starts.
fn spec(decl: McpServerDecl) -> McpServerSpec {
    let transport = match decl.transport {
        McpServerTransport::Stdio { command, args, env } => {
            McpTransport::Stdio { command, args, env }
        }
        McpServerTransport::Http { url } => McpTransport::Http { url },
    };
    McpServerSpec { name: decl.name, transport }
}

/// Every string in `value`.
fn strings<'v>(value: &'v toml::Value, out: &mut Vec<&'v str>) {
    match value {
        toml::Value::String(s) => out.push(s),
        toml::Value::Array(items) => items.iter().for_each(|v| strings(v, out)),
        toml::Value::Table(table) => table.values().for_each(|v| strings(v, out)),
        _ => {}
    }
}
