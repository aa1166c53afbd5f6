//! MCP tools for Strata: the tools of Model Context Protocol servers, offered to agents beside
//! the built-in tools, called through the official Rust SDK (`rmcp`).
//!
//! The package is `strata-agent-mcp` (`strata-agent-mcp = "0.1"` in `Cargo.toml`); code
//! names it `agent_mcp`.
//!
//! A server is declared by an [`McpServerSpec`]: a program speaking MCP over its standard input
//! and output ([`McpTransport::Stdio`]: command, arguments, environment), or a streamable-HTTP
//! endpoint ([`McpTransport::Http`], plain `http://`). [`McpServers::start`] starts a team's
//! servers, does the handshake and lists their tools (`tools/list`) once; each tool becomes an
//! [`McpTool`], an [`agent_core::tools::Tool`] registered as `mcp__<server>__<tool>` (a name
//! model providers accept: `[a-zA-Z0-9_-]`, at most 64 characters).
//!
//! - **Containment.** A stdio server is a process Strata starts ([`McpLaunch`]): inside the
//!   sandbox by default ([`Sandbox::command`](agent_core::tools::Sandbox::command): the
//!   workspace read-write and its working directory, the rest read-only, the home and the
//!   run's data hidden, no network unless the server's `network` allows it), with a minimal
//!   environment ([`McpLaunch::server_env`]: `PATH`, `LANG`, `TERM`, `HOME` (`/tmp` inside the sandbox), the
//!   variables it (or the sandbox: a team's `[sandbox] env`) passes by name, its own `env`; never Strata's API keys, tokens or OTLP headers,
//!   [`STRATA_SECRET_VARS`]). The program's prefix ([`program_prefix`]: a virtual environment
//!   in `~/.cache`, say) is shown read-only so that it runs; anything else it needs under a
//!   hidden directory goes in the sandbox's read-only list. Where the sandbox cannot work the
//!   server is refused ([`McpError::Sandbox`]), never started without it, unless it opts out
//!   explicitly ([`McpServerSpec::sandboxed`]`(false)`: minimal environment still). Every
//!   server is killed when its [`McpServer`] is dropped or shut down, and the sandbox's
//!   launcher dies with Strata (a `kill -9` of the run leaves no server behind). An HTTP
//!   server is not a process Strata starts: it is not sandboxed by Strata.
//! - **Schemas.** A tool's input schema is the server's: any JSON Schema
//!   ([`Tool::foreign_schema`](agent_core::tools::Tool::foreign_schema)); the registry checks the
//!   keywords it knows, the server the rest. A schema that is not JSON Schema at all
//!   ([`check_input_schema`]: not an object schema, an unknown `type`, a keyword of the wrong
//!   shape) is refused at start with [`McpError::InvalidSchema`] naming the server and the tool;
//!   the tool is not offered ([`McpServer::refused`]), the others are.
//! - **Side effects.** A tool annotated `readOnlyHint: true` has none. Any other has side
//!   effects, so the runtime journals its calls like `write_file` or `shell`
//!   (`AgentContext::call_tool_once`): recorded as started, its result recorded, and a call
//!   interrupted by a crash never run again, unless `idempotentHint: true`.
//! - **Time limits.** A call waits at most the tool limit
//!   ([`ToolContext::tool_timeout`](agent_core::tools::ToolContext::tool_timeout), a team's
//!   `tool_ms`). Past it the request is cancelled through the protocol
//!   (`notifications/cancelled` with its id). A read-only or idempotent tool then fails with
//!   `ToolError::Timeout` (a retry may send it again); any other with
//!   `ToolError::OutcomeUnknown`: the server may still be at work on it, so the runtime
//!   records its outcome as unknown and never sends it again on its own.
//! - **Bounded answers.** A stdio server's message over [`MAX_MESSAGE_BYTES`] is never held
//!   whole: it is streamed into a blob file ([`McpLaunch::with_results`], named by its SHA-256)
//!   as it is read, and its head handed on. Every result's text is capped at
//!   [`MAX_RESULT_BYTES`] (as `shell` caps a stream), the whole kept as a blob; the output's
//!   last line and its `data` (`truncated`, `bytes`, `blob`, `blob_path`) say where.
//! - **Failures.** A server that cannot start, fails the handshake or the listing, or takes
//!   too long is an [`McpError`] naming it. A call whose server is gone (it crashed or exited,
//!   even mid-call) or refuses it fails with `ToolError::Remote` carrying the typed
//!   [`McpError`] ([`McpError::ServerGone`], [`McpError::Call`]): a failed tool call like any
//!   other, the agent goes on. A result with `isError: true` is a [`ToolOutput`] with
//!   `success: false`.
//!
//! What it does not do: it is an MCP *client* of tools only (no resources, prompts, sampling
//! or elicitation; a server asking for them is answered that the client cannot), it does not
//! restart a server that died (its tools fail from then on), it does not speak TLS (reach an
//! HTTPS server through a local proxy), and it never decides which agent may call which tool:
//! the team file's tool lists do that, as for the built-in tools.
//!
//! [`ToolOutput`]: agent_core::tools::ToolOutput
//!
//! ```no_run
//! # async fn run() -> Result<(), Box<dyn std::error::Error>> {
//! use agent_core::tools::{Sandbox, ToolContext, ToolRegistry};
//! use agent_mcp::{DEFAULT_START_TIMEOUT, McpLaunch, McpServerSpec, McpServers};
//! use serde_json::json;
//!
//! let spec = McpServerSpec::stdio(
//!     "fs",
//!     "npx",
//!     ["-y", "@modelcontextprotocol/server-filesystem", "/tmp/work"],
//! );
//! // In the sandbox, working in /tmp/work (its only writable directory), no network.
//! let launch = McpLaunch::new("/tmp/work", Sandbox::new());
//! let servers = McpServers::start(&[spec], &launch, DEFAULT_START_TIMEOUT).await?;
//! let mut tools = ToolRegistry::with_builtins();
//! servers.register(&mut tools)?;
//! let ctx = ToolContext::new("/tmp/work")?;
//! let listing = tools
//!     .call(&ctx, "mcp__fs__list_directory", json!({ "path": "/tmp/work" }))
//!     .await?;
//! assert!(listing.success);
//! servers.shutdown().await;
//! # Ok(())
//! # }
//! ```

mod bounded;
mod client;
mod error;
mod launch;
mod schema;
mod spec;
mod tool;

#[cfg(test)]
mod tests;

pub use bounded::{MAX_MESSAGE_BYTES, MAX_RESULT_BYTES, Spilled};
pub use client::{DEFAULT_START_TIMEOUT, McpServer, McpServers};
pub use error::McpError;
pub use launch::{McpLaunch, STRATA_SECRET_VARS, program_prefix};
pub use schema::check_input_schema;
pub use spec::{
    MAX_SERVER_NAME, MAX_TOOL_NAME, McpServerSpec, McpTransport, TOOL_PREFIX, check_server_name,
    split_tool_name, tool_name,
};
pub use tool::McpTool;
