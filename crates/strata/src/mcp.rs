//! The team file's MCP servers (`[[mcp_servers]]`): started in the run's workspace (a new
//! run's once its directory is made, after every other check: its team and plan files are
//! checked again with the servers' tools then), their tools registered beside the built-in
//! ones, stopped when the run ends.
//!
//! A stdio server starts inside the run's sandbox (the team file's `[sandbox]`, with the
//! server's own `network`), in the workspace, with the minimal environment; one that opts out
//! (`sandbox = false`) is printed on standard error at start and audited
//! ([`audit_opt_outs`]). Every server is stopped when the run ends, killed when `strata` is.
//!
//! A tool's answer is capped like a `shell` stream (64 KiB of text); the whole answer is kept
//! as a blob in the run's `mcp-results/` directory, named by its SHA-256, and the call's
//! output says where. A stdio server's answer over 4 MiB is never read whole: it is streamed
//! into that blob as it comes.

use std::path::{Path, PathBuf};

use agent_core::tools::{Sandbox, ToolRegistry};
use agent_mcp::{DEFAULT_START_TIMEOUT, McpLaunch, McpServerSpec, McpServers, McpTransport};
use team_file::{McpServerDecl, TeamFile};

use crate::error::Error;

/// Where a run's servers start: its workspace (which must exist), whether the run is
/// `--unsandboxed`, and the paths its sandbox hides (the data directory).
pub struct Place<'a> {
    /// The run's workspace.
    pub workspace: &'a Path,
    /// `--unsandboxed`: no server is sandboxed.
    pub unsandboxed: bool,
    /// Hidden from sandboxed servers, as from commands. The last is the run's own directory
    /// (a worker's data directory): an answer too large to hand on whole is kept there, in
    /// `mcp-results/<sha256>` ([`RESULTS_DIR`]).
    pub hide: Vec<PathBuf>,
    /// Where warnings for the user go (the CLI prints them on standard error).
    pub warn: &'a (dyn Fn(&str) + Send + Sync),
}

/// The directory of a run where MCP answers too large to hand on whole are kept as blobs.
pub const RESULTS_DIR: &str = "mcp-results";

/// Starts the MCP servers the team file `text` (at `path`) declares, as `place` says, and
/// registers their tools in `tools`. A server that fails to start (or cannot be sandboxed
/// here), or a tool the file names that its server offers with a schema that is not JSON
/// Schema, is bad input (exit 2), before anything is written: the servers started are stopped
/// then. A server that opts out of the sandbox is named in a warning ([`Place::warn`]).
pub async fn start_servers(
    path: &Path,
    text: &str,
    tools: &mut ToolRegistry,
    place: &Place<'_>,
) -> crate::Result<McpServers> {
    let declared = team_file::mcp_servers(path, text).map_err(Error::bad_input_from)?;
    if declared.is_empty() {
        return Ok(McpServers::default());
    }
    let sandbox = if place.unsandboxed {
        Sandbox::unsandboxed()
    } else {
        // The team's `[sandbox]` (its limits, read-only paths and passed variables), read
        // without the servers' tools.
        let team = team_file::parse_stored_team(path, text, &ToolRegistry::with_builtins())
            .map_err(Error::bad_input_from)?;
        place.hide.iter().fold(team.sandbox.sandbox(), |s, p| s.hide(p))
    };
    let mut launch = McpLaunch::new(place.workspace, sandbox);
    if let Some(run_dir) = place.hide.last() {
        launch = launch.with_results(run_dir.join(RESULTS_DIR));
    }
    let specs: Vec<McpServerSpec> = declared.into_iter().map(spec).collect();
    for spec in specs.iter().filter(|s| s.opts_out()) {
        tracing::warn!(server = %spec.name, "MCP server runs outside the sandbox (sandbox = false)");
        (place.warn)(&format!(
            "warning: MCP server `{}` runs outside the sandbox (`sandbox = false` in {}), with \
             your user's files and network",
            spec.name,
            path.display()
        ));
    }
    let servers = McpServers::start(&specs, &launch, DEFAULT_START_TIMEOUT)
        .await
        .map_err(|e| Error::bad_input_from(e).context(path.display().to_string()))?;
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
) -> crate::Result<()> {
    // A tool named in the file that its server refused: say why, rather than "not offered".
    if let Ok(value) = toml::from_str::<toml::Value>(text) {
        let mut names = Vec::new();
        team_file::toml_strings(&value, &mut names);
        if let Some((name, why)) =
            names.into_iter().find_map(|name| servers.refusal(name).map(|why| (name, why)))
        {
            return Err(Error::bad_input(format!(
                "{}: the tool `{name}` cannot be used: {why}",
                path.display()
            )));
        }
    }
    servers.register(tools).map_err(Error::bad_input_from)
}

/// A team file's declaration as what `agent-mcp` starts.
fn spec(decl: McpServerDecl) -> McpServerSpec {
    if let McpTransport::Stdio { env, pass_env, .. } = &decl.transport {
        // Values the server is given as secrets are redacted from what is stored.
        for (name, value) in env {
            if agent_core::secrets::looks_secret(name) {
                agent_core::secrets::register(value);
            }
        }
        for name in pass_env {
            if agent_core::secrets::looks_secret(name)
                && let Ok(value) = std::env::var(name)
            {
                agent_core::secrets::register(&value);
            }
        }
    }
    McpServerSpec { name: decl.name, transport: decl.transport }
}

/// Appends to the run's audit log, at start (and at each resume), a record for each stdio
/// server of `team` that runs outside the sandbox: one that opted out (`sandbox = false`), or
/// every one of a run given `--unsandboxed`. Written under the id `mcp:<server>`, as
/// [`AuditEvent::Unsandboxed`](agent_core::AuditEvent::Unsandboxed): a choice, not an error.
pub async fn audit_opt_outs(
    team: &TeamFile,
    unsandboxed: bool,
    audit: &dyn agent_core::AuditLog,
) -> crate::Result<()> {
    for server in &team.mcp_servers {
        let McpTransport::Stdio { command, sandboxed, .. } = &server.transport else {
            continue;
        };
        let why = match (sandboxed, unsandboxed) {
            (false, _) => "`sandbox = false` in the team file",
            (true, true) => "the run is `--unsandboxed`",
            (true, false) => continue,
        };
        let event = agent_core::AuditEvent::Unsandboxed {
            command: command.clone(),
            reason: why.to_owned(),
        };
        let agent = agent_state::AgentId::new(format!("mcp:{}", server.name));
        audit
            .append(&agent, agent_state::Timestamp(crate::run_dir::now_ms()), event)
            .await
            .map_err(|e| Error::failed(format!("cannot write the audit log: {e}")))?;
    }
    Ok(())
}
