//! Starting MCP servers and keeping their connections: [`McpServer`] (one) and
//! [`McpServers`] (a team's, registered in a tool registry together).

use std::collections::{BTreeMap, BTreeSet};
use std::process::Stdio;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use agent_core::tools::{ToolError, ToolRegistry};
use rmcp::model::{
    CallToolRequest, CallToolRequestParams, CallToolResult, CancelledNotification,
    CancelledNotificationParam, ClientRequest, RequestId, ServerResult,
};
use rmcp::service::{PeerRequestOptions, RunningService};
use rmcp::transport::StreamableHttpClientTransport;
use rmcp::{RoleClient, ServiceError, ServiceExt as _};
use tokio::io::AsyncBufReadExt as _;

use crate::McpError;
use crate::bounded::{ChildTransport, MAX_MESSAGE_BYTES, Spilled, Spills};
use crate::launch::McpLaunch;
use crate::schema::check_input_schema;
use crate::spec::{McpServerSpec, McpTransport, tool_name};
use crate::tool::McpTool;

/// How long a server may take to start (handshake and tool list) unless told otherwise.
pub const DEFAULT_START_TIMEOUT: Duration = Duration::from_secs(30);

/// How much of a server's standard error is kept for error messages, in bytes.
const STDERR_TAIL_BYTES: usize = 2048;

/// A running (or reached) MCP server: its connection and the tools it offered at start.
///
/// Dropping it (and every [`McpTool`] of it) closes the connection and stops a stdio
/// server's process; [`shutdown`](Self::shutdown) does so gracefully and waits.
#[derive(Debug)]
pub struct McpServer {
    connection: Arc<Connection>,
    tools: Vec<Arc<McpTool>>,
    refused: Vec<McpError>,
    sandboxed: Option<bool>,
}

/// The connection to one server, shared by its tools.
pub(crate) struct Connection {
    pub(crate) name: String,
    service: Mutex<Option<RunningService<RoleClient, ()>>>,
    peer: rmcp::Peer<RoleClient>,
    stderr: Arc<Mutex<String>>,
    /// Answers of a stdio server too large to read whole, by request id.
    spills: Spills,
    /// Where answers too large to hand on are kept as blobs.
    pub(crate) results: Option<std::path::PathBuf>,
}

/// Why a `tools/call` gave no result.
#[derive(Debug)]
pub(crate) enum CallFailure {
    /// The server is gone or refused the call.
    Failed(McpError),
    /// No answer within the limit; the request was cancelled (`notifications/cancelled`
    /// sent: `cancelled`), and the server may still be working on it.
    TimedOut {
        /// Whether the cancellation went out.
        cancelled: bool,
    },
}

impl std::fmt::Debug for Connection {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Connection").field("name", &self.name).finish_non_exhaustive()
    }
}

impl McpServer {
    /// Starts the server (`spec`), does the MCP handshake and lists its tools, within
    /// `timeout`.
    ///
    /// A tool whose input schema is not valid JSON Schema, or whose registered name would be
    /// too long or taken, is not offered: it is in [`refused`](Self::refused) with its typed
    /// error. A server that cannot be started, fails the handshake or the listing, or takes
    /// longer than `timeout` is an [`McpError`] naming it; its process is stopped then.
    ///
    /// A stdio server starts as `launch` says: in its workspace, inside its sandbox unless the
    /// server opts out, with the minimal environment ([`McpLaunch`]).
    pub async fn connect(
        spec: &McpServerSpec,
        launch: &McpLaunch,
        timeout: Duration,
    ) -> Result<Self, McpError> {
        spec.check()?;
        let stderr = Arc::new(Mutex::new(String::new()));
        let spills = Spills::default();
        let started = tokio::time::timeout(timeout, start(spec, launch, &stderr, &spills)).await;
        let (service, listed) = match started {
            Ok(result) => result?,
            Err(_) => {
                return Err(McpError::StartTimeout {
                    server: spec.name.clone(),
                    after_ms: u64::try_from(timeout.as_millis()).unwrap_or(u64::MAX),
                    stderr: tail(&stderr),
                });
            }
        };
        let sandboxed = match &spec.transport {
            McpTransport::Stdio { sandboxed, .. } => Some(launch.sandboxes(*sandboxed)),
            McpTransport::Http { .. } => None,
        };
        let connection = Arc::new(Connection {
            name: spec.name.clone(),
            peer: service.peer().clone(),
            service: Mutex::new(Some(service)),
            stderr,
            spills,
            results: launch.results.clone(),
        });
        let mut tools = Vec::new();
        let mut refused = Vec::new();
        let mut names = BTreeSet::new();
        for tool in listed {
            match McpTool::new(&connection, tool, &mut names) {
                Ok(tool) => tools.push(Arc::new(tool)),
                Err(error) => {
                    tracing::warn!(server = %spec.name, %error, "MCP tool not offered");
                    refused.push(error);
                }
            }
        }
        tracing::info!(server = %spec.name, tools = tools.len(), ?sandboxed, "MCP server started");
        Ok(Self { connection, tools, refused, sandboxed })
    }

    /// The server's name.
    pub fn name(&self) -> &str {
        &self.connection.name
    }

    /// For a stdio server, whether its process runs inside the sandbox; `None` for an HTTP
    /// server (not a process Strata starts, so not sandboxed by it).
    pub fn sandboxed(&self) -> Option<bool> {
        self.sandboxed
    }

    /// The tools it offered at start, as Strata tools (`mcp__<server>__<tool>`).
    pub fn tools(&self) -> &[Arc<McpTool>] {
        &self.tools
    }

    /// The tools it offered that cannot be used, each with why.
    pub fn refused(&self) -> &[McpError] {
        &self.refused
    }

    /// Closes the connection and, for a stdio server, ends its process (closing its input,
    /// then `SIGKILL` if it does not exit within 3 seconds). A call of one
    /// of its tools after this fails with [`McpError::ServerGone`].
    pub async fn shutdown(&self) {
        self.connection.shutdown().await;
    }
}

impl Connection {
    /// `tools/call` of `tool` (the server's name for it) with `arguments`, waiting at most
    /// `limit` for the answer. Past it, the request is cancelled through the protocol
    /// (`notifications/cancelled` with its id, sent before this returns): the server may
    /// still be working on it, or have done it. Dropped before the answer (the caller gave
    /// up), the request is cancelled too (best effort, as the future cannot wait). With the
    /// result comes what was kept of an answer too large to read whole ([`Spilled`]).
    pub(crate) async fn call(
        &self,
        tool: &str,
        arguments: serde_json::Map<String, serde_json::Value>,
        limit: Duration,
    ) -> Result<(CallToolResult, Option<Spilled>), CallFailure> {
        let mut params = CallToolRequestParams::new(tool.to_owned());
        params.arguments = Some(arguments);
        let request = ClientRequest::CallToolRequest(CallToolRequest::new(params));
        let handle = self
            .peer
            .send_cancellable_request(request, PeerRequestOptions::no_options())
            .await
            .map_err(|error| CallFailure::Failed(self.call_error(tool, error)))?;
        let id = handle.id.clone();
        let mut guard = CancelOnDrop { peer: &self.peer, id: Some(id.clone()) };
        let answer = tokio::time::timeout(limit, handle.await_response()).await;
        guard.id = None;
        match answer {
            Ok(Ok(ServerResult::CallToolResult(result))) => Ok((result, self.spills.take(&id))),
            Ok(Ok(other)) => {
                self.spills.take(&id);
                Err(CallFailure::Failed(McpError::Call {
                    server: self.name.clone(),
                    tool: tool.to_owned(),
                    message: format!("the answer is not a tool result: {other:?}")
                        .chars()
                        .take(300)
                        .collect(),
                }))
            }
            Ok(Err(error)) => {
                self.spills.take(&id);
                Err(CallFailure::Failed(self.call_error(tool, error)))
            }
            Err(_) => {
                let cancelled = self.cancel(tool, id, limit).await;
                Err(CallFailure::TimedOut { cancelled })
            }
        }
    }

    /// Sends `notifications/cancelled` for the request `id`; whether it went out.
    async fn cancel(&self, tool: &str, id: RequestId, limit: Duration) -> bool {
        let reason = format!("no answer within the tool limit ({} ms)", limit.as_millis());
        let notification = CancelledNotification::new(CancelledNotificationParam::new(
            Some(id.clone()),
            Some(reason),
        ));
        match self.peer.send_notification(notification.into()).await {
            Ok(()) => {
                tracing::warn!(server = %self.name, tool, ?id, "MCP call timed out; cancelled");
                true
            }
            Err(error) => {
                tracing::warn!(server = %self.name, tool, ?id, %error, "MCP call timed out; cannot send its cancellation");
                false
            }
        }
    }

    fn call_error(&self, tool: &str, error: ServiceError) -> McpError {
        match error {
            ServiceError::McpError(data) => McpError::Call {
                server: self.name.clone(),
                tool: tool.to_owned(),
                message: data.message.to_string(),
            },
            ServiceError::TransportClosed
            | ServiceError::TransportSend(_)
            | ServiceError::Cancelled { .. } => McpError::ServerGone {
                server: self.name.clone(),
                tool: tool.to_owned(),
                stderr: tail(&self.stderr),
            },
            other => McpError::Call {
                server: self.name.clone(),
                tool: tool.to_owned(),
                message: other.to_string(),
            },
        }
    }

    /// `error` as the [`ToolError`] of the tool `registered` (its registered name).
    pub(crate) fn tool_error(&self, registered: &str, error: McpError) -> ToolError {
        ToolError::Remote {
            tool: registered.to_owned(),
            server: self.name.clone(),
            source: Box::new(error),
        }
    }

    async fn shutdown(&self) {
        let service = self.service.lock().unwrap_or_else(PoisonError::into_inner).take();
        if let Some(service) = service
            && let Err(error) = service.cancel().await
        {
            tracing::warn!(server = %self.name, %error, "MCP server did not stop cleanly");
        }
    }
}

/// Cancels a request whose caller stopped waiting (its future was dropped): the
/// notification is sent from a task of its own, as a drop cannot wait.
struct CancelOnDrop<'a> {
    peer: &'a rmcp::Peer<RoleClient>,
    id: Option<RequestId>,
}

impl Drop for CancelOnDrop<'_> {
    fn drop(&mut self) {
        let Some(id) = self.id.take() else { return };
        let peer = self.peer.clone();
        let notification = CancelledNotification::new(CancelledNotificationParam::new(
            Some(id),
            Some("the call was stopped".into()),
        ));
        if let Ok(runtime) = tokio::runtime::Handle::try_current() {
            runtime.spawn(async move {
                let _ = peer.send_notification(notification.into()).await;
            });
        }
    }
}

/// A team's MCP servers, started together.
#[derive(Debug, Default)]
pub struct McpServers {
    servers: Vec<McpServer>,
}

impl McpServers {
    /// Starts every server of `specs` as `launch` says, one after the other, each within
    /// `timeout`. The first that fails is the error (the ones started before it are stopped);
    /// a name used twice is [`McpError::DuplicateServer`], before anything starts.
    pub async fn start(
        specs: &[McpServerSpec],
        launch: &McpLaunch,
        timeout: Duration,
    ) -> Result<Self, McpError> {
        let mut seen = BTreeSet::new();
        for spec in specs {
            if !seen.insert(spec.name.as_str()) {
                return Err(McpError::DuplicateServer { server: spec.name.clone() });
            }
            spec.check()?;
        }
        let mut servers = Self::default();
        for spec in specs {
            match McpServer::connect(spec, launch, timeout).await {
                Ok(server) => servers.servers.push(server),
                Err(error) => {
                    servers.shutdown().await;
                    return Err(error);
                }
            }
        }
        Ok(servers)
    }

    /// The servers, in the order they were given.
    pub fn servers(&self) -> &[McpServer] {
        &self.servers
    }

    /// Adds every offered tool of every server to `registry`.
    pub fn register(&self, registry: &mut ToolRegistry) -> Result<(), ToolError> {
        for server in &self.servers {
            for tool in server.tools() {
                registry.register(tool.clone())?;
            }
        }
        Ok(())
    }

    /// Why the tool registered as `name` (`mcp__<server>__<tool>`) was not offered, if one of
    /// the servers refused it (an invalid schema, a name too long).
    pub fn refusal(&self, name: &str) -> Option<&McpError> {
        self.servers.iter().flat_map(McpServer::refused).find(|error| match error {
            McpError::InvalidSchema { server, tool, .. }
            | McpError::ToolName { server, tool, .. } => {
                tool_name(server, tool).is_ok_and(|registered| registered == name)
                    || format!("{}{server}__{tool}", crate::TOOL_PREFIX) == name
            }
            _ => false,
        })
    }

    /// The registered names of the tools each server offered, by server.
    pub fn offered(&self) -> BTreeMap<&str, Vec<&str>> {
        self.servers
            .iter()
            .map(|s| (s.name(), s.tools().iter().map(|t| t.registered_name()).collect()))
            .collect()
    }

    /// Stops every server ([`McpServer::shutdown`]).
    pub async fn shutdown(&self) {
        for server in &self.servers {
            server.shutdown().await;
        }
    }
}

/// Starts the server and lists its tools.
async fn start(
    spec: &McpServerSpec,
    launch: &McpLaunch,
    stderr: &Arc<Mutex<String>>,
    spills: &Spills,
) -> Result<(RunningService<RoleClient, ()>, Vec<rmcp::model::Tool>), McpError> {
    let server = spec.name.clone();
    let service = match &spec.transport {
        McpTransport::Stdio { command, args, env, pass_env, sandboxed, network } => {
            let stdio = crate::launch::StdioServer {
                command,
                args,
                env,
                pass_env,
                sandboxed: *sandboxed,
                network: *network,
            };
            let mut cmd = launch.command(&server, stdio)?;
            cmd.stdin(Stdio::piped()).stdout(Stdio::piped()).stderr(Stdio::piped());
            let spawn_error =
                |error| McpError::Spawn { server: server.clone(), command: command.clone(), error };
            let mut child = cmd.spawn().map_err(spawn_error)?;
            let (Some(stdin), Some(stdout)) = (child.stdin.take(), child.stdout.take()) else {
                return Err(spawn_error(std::io::Error::other("its standard streams are missing")));
            };
            if let Some(err) = child.stderr.take() {
                keep_stderr(&server, err, stderr.clone());
            }
            // Its answers are read with bounded memory: one too large is kept as a blob.
            let read = crate::bounded::reader(
                &server,
                stdout,
                MAX_MESSAGE_BYTES,
                launch.results.clone(),
                spills.clone(),
            );
            let transport = ChildTransport::new(child, read, stdin);
            ().serve(transport).await.map_err(|e| McpError::Start {
                server: server.clone(),
                stage: "initialize",
                message: e.to_string(),
                stderr: String::new(),
            })
        }
        McpTransport::Http { url } => {
            let transport = StreamableHttpClientTransport::from_uri(url.as_str());
            ().serve(transport).await.map_err(|e| McpError::Start {
                server: server.clone(),
                stage: "initialize",
                message: e.to_string(),
                stderr: String::new(),
            })
        }
    };
    let service = match service {
        Ok(service) => service,
        Err(McpError::Start { server, stage, message, .. }) => {
            // Let the reader catch up with what a dying server wrote.
            tokio::time::sleep(Duration::from_millis(100)).await;
            return Err(McpError::Start { server, stage, message, stderr: tail(stderr) });
        }
        Err(other) => return Err(other),
    };
    match service.peer().list_all_tools().await {
        Ok(tools) => Ok((service, tools)),
        Err(error) => {
            let _ = service.cancel().await;
            Err(McpError::Start {
                server,
                stage: "tools/list",
                message: error.to_string(),
                stderr: tail(stderr),
            })
        }
    }
}

/// Reads the server's standard error in a task of its own: each line is logged, the last
/// [`STDERR_TAIL_BYTES`] kept for error messages.
fn keep_stderr(server: &str, err: tokio::process::ChildStderr, kept: Arc<Mutex<String>>) {
    let server = server.to_owned();
    tokio::spawn(async move {
        let mut lines = tokio::io::BufReader::new(err).lines();
        while let Ok(Some(line)) = lines.next_line().await {
            tracing::debug!(server = %server, "MCP server: {line}");
            let mut kept = kept.lock().unwrap_or_else(PoisonError::into_inner);
            kept.push_str(&line);
            kept.push('\n');
            if kept.len() > STDERR_TAIL_BYTES {
                let mut cut = kept.len() - STDERR_TAIL_BYTES;
                while !kept.is_char_boundary(cut) {
                    cut += 1;
                }
                kept.drain(..cut);
            }
        }
    });
}

/// What is kept of a server's standard error, on one line.
fn tail(kept: &Mutex<String>) -> String {
    let kept = kept.lock().unwrap_or_else(PoisonError::into_inner);
    kept.lines().map(str::trim).filter(|l| !l.is_empty()).collect::<Vec<_>>().join(" | ")
}

/// Checks a listed tool's schema and name: `Ok` with its registered name.
pub(crate) fn admit(
    server: &str,
    tool: &rmcp::model::Tool,
    taken: &mut BTreeSet<String>,
) -> Result<String, McpError> {
    let schema = serde_json::Value::Object((*tool.input_schema).clone());
    let problems = check_input_schema(&schema);
    if !problems.is_empty() {
        return Err(McpError::InvalidSchema {
            server: server.to_owned(),
            tool: tool.name.to_string(),
            problems,
        });
    }
    let name = tool_name(server, &tool.name).map_err(|reason| McpError::ToolName {
        server: server.to_owned(),
        tool: tool.name.to_string(),
        reason,
    })?;
    if !taken.insert(name.clone()) {
        return Err(McpError::ToolName {
            server: server.to_owned(),
            tool: tool.name.to_string(),
            reason: format!("another of its tools is registered as `{name}` already"),
        });
    }
    Ok(name)
}
