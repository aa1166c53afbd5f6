//! [`McpTool`]: one tool of an MCP server as an [`agent_core::Tool`](Tool).

use std::collections::BTreeSet;
use std::sync::Arc;

use agent_core::tools::{Tool, ToolContext, ToolError, ToolOutput};
use async_trait::async_trait;
use rmcp::model::{CallToolResult, ContentBlock, ResourceContents};
use serde_json::{Value, json};

use crate::McpError;
use crate::bounded::{MAX_RESULT_BYTES, Spilled};
use crate::client::{CallFailure, Connection, admit};

/// One tool of an MCP server, registered as `mcp__<server>__<tool>`.
///
/// - Its schema is the server's input schema, checked to be JSON Schema at start; the
///   registry checks the keywords it knows and the server the rest
///   ([`Tool::foreign_schema`]).
/// - Its side effects come from the server's annotations: `readOnlyHint: true` means none
///   (it simply runs, never journaled); otherwise it has side effects and the runtime records
///   each call once (a call interrupted by a crash is not run again), unless
///   `idempotentHint: true` says running it twice is safe.
/// - A call maps the result's content to text (text parts joined; other parts described),
///   `isError: true` to a failed [`ToolOutput`] and `structuredContent` to its `data`; a server
///   that is gone or refuses the call is [`ToolError::Remote`] with the typed [`McpError`].
#[derive(Debug)]
pub struct McpTool {
    connection: Arc<Connection>,
    name: String,
    mcp_name: String,
    description: String,
    schema: Value,
    read_only: bool,
    idempotent: bool,
}

impl McpTool {
    /// The tool `listed` of the server behind `connection`, or why it cannot be offered.
    pub(crate) fn new(
        connection: &Arc<Connection>,
        listed: rmcp::model::Tool,
        taken: &mut BTreeSet<String>,
    ) -> Result<Self, McpError> {
        let name = admit(&connection.name, &listed, taken)?;
        let annotations = listed.annotations.as_ref();
        let read_only = annotations.and_then(|a| a.read_only_hint).unwrap_or(false);
        let idempotent = annotations.and_then(|a| a.idempotent_hint).unwrap_or(false);
        let description = listed
            .description
            .as_deref()
            .or(listed.title.as_deref())
            .unwrap_or("")
            .trim()
            .to_owned();
        let description = if description.is_empty() {
            format!("The tool `{}` of the MCP server `{}`.", listed.name, connection.name)
        } else {
            description
        };
        Ok(Self {
            connection: connection.clone(),
            name,
            mcp_name: listed.name.to_string(),
            description,
            schema: Value::Object((*listed.input_schema).clone()),
            read_only,
            idempotent,
        })
    }

    /// The name it is registered under: `mcp__<server>__<tool>`.
    pub fn registered_name(&self) -> &str {
        &self.name
    }

    /// The name the server gives it.
    pub fn mcp_name(&self) -> &str {
        &self.mcp_name
    }

    /// The server's name.
    pub fn server(&self) -> &str {
        &self.connection.name
    }

    /// Whether the server says it only reads (`readOnlyHint`).
    pub fn read_only(&self) -> bool {
        self.read_only
    }
}

#[async_trait]
impl Tool for McpTool {
    fn name(&self) -> &str {
        &self.name
    }

    fn description(&self) -> &str {
        &self.description
    }

    fn schema(&self) -> &Value {
        &self.schema
    }

    fn has_side_effects(&self) -> bool {
        !self.read_only
    }

    fn idempotent(&self) -> bool {
        self.read_only || self.idempotent
    }

    fn foreign_schema(&self) -> bool {
        true
    }

    /// It stops waiting at the tool limit itself, and cancels its request through the
    /// protocol before it returns.
    fn stops_itself(&self) -> bool {
        true
    }

    async fn call(&self, ctx: &ToolContext, args: Value) -> Result<ToolOutput, ToolError> {
        let arguments = match args {
            Value::Object(map) => map,
            Value::Null => serde_json::Map::new(),
            other => {
                return Err(ToolError::InvalidArguments {
                    tool: self.name.clone(),
                    problems: vec![format!("arguments: expected object, found {other}")],
                });
            }
        };
        tracing::debug!(server = %self.connection.name, tool = %self.mcp_name, "calling MCP tool");
        let limit = ctx.tool_timeout();
        match self.connection.call(&self.mcp_name, arguments, limit).await {
            Ok((result, spilled)) => {
                let mut out = output(&self.connection.name, &self.mcp_name, result);
                cap(&mut out, spilled, self.connection.results.as_deref()).await;
                Ok(out)
            }
            Err(CallFailure::Failed(error)) => {
                tracing::warn!(server = %self.connection.name, tool = %self.mcp_name, %error, "MCP tool call failed");
                Err(self.connection.tool_error(&self.name, error))
            }
            // Cancelled; an idempotent tool may be sent again, any other may still be at work
            // on the server: its outcome is unknown.
            Err(CallFailure::TimedOut { cancelled }) => {
                let after_ms = u64::try_from(limit.as_millis()).unwrap_or(u64::MAX);
                let tool = self.name.clone();
                if self.idempotent() {
                    Err(ToolError::Timeout { tool, after_ms })
                } else {
                    Err(ToolError::OutcomeUnknown { tool, after_ms, cancelled })
                }
            }
        }
    }
}

/// Caps `out`'s text at [`MAX_RESULT_BYTES`], as `shell` caps a stream: the head is kept,
/// then a line saying how much more there was and where it is kept. An answer replaced by its
/// head while it was read (`spilled`, over the message limit) is kept whole as the blob the
/// reader wrote; a text over the cap otherwise is written as a blob into `results` (a file
/// named by its SHA-256). `data` gets `truncated`, `bytes` (the whole size), `blob`
/// (`sha256:<hex>`) and `blob_path` (when kept).
pub(crate) async fn cap(
    out: &mut ToolOutput,
    spilled: Option<Spilled>,
    results: Option<&std::path::Path>,
) {
    let whole = match spilled {
        Some(spilled) => Some(spilled),
        None if out.output.len() > MAX_RESULT_BYTES => {
            let hex = agent_state::sha256_hex(out.output.as_bytes());
            let mut path = None;
            if let Some(dir) = results {
                let file = dir.join(&hex);
                let written = async {
                    tokio::fs::create_dir_all(dir).await?;
                    tokio::fs::write(&file, out.output.as_bytes()).await
                };
                match written.await {
                    Ok(()) => path = Some(file),
                    Err(error) => {
                        tracing::warn!(path = %file.display(), %error, "cannot keep an MCP result as a blob")
                    }
                }
            }
            Some(Spilled { bytes: out.output.len() as u64, hash: format!("sha256:{hex}"), path })
        }
        None => None,
    };
    let Some(whole) = whole else { return };
    let mut end = out.output.len().min(MAX_RESULT_BYTES);
    while !out.output.is_char_boundary(end) {
        end -= 1;
    }
    out.output.truncate(end);
    let kept = match &whole.path {
        Some(path) => format!("kept whole as blob {} ({})", whole.hash, path.display()),
        None => format!("not kept (blob {})", whole.hash),
    };
    out.output.push_str(&format!(
        "\n[truncated: the answer was {} bytes, over the {MAX_RESULT_BYTES}-byte limit; {kept}]\n",
        whole.bytes
    ));
    if !out.data.is_object() {
        out.data = json!({});
    }
    out.data["truncated"] = Value::Bool(true);
    out.data["bytes"] = json!(whole.bytes);
    out.data["blob"] = json!(whole.hash);
    if let Some(path) = &whole.path {
        out.data["blob_path"] = json!(path.display().to_string());
    }
    // Structured content is as large as the text it comes with: not carried.
    if let Some(structured) = out.data.get_mut("structured")
        && structured.to_string().len() > MAX_RESULT_BYTES
    {
        *structured = Value::Null;
    }
}

/// A `tools/call` result as a [`ToolOutput`].
pub(crate) fn output(server: &str, tool: &str, result: CallToolResult) -> ToolOutput {
    let parts: Vec<String> = result.content.iter().map(describe).collect();
    let mut text = parts.join("\n");
    if text.is_empty()
        && let Some(structured) = &result.structured_content
    {
        text = structured.to_string();
    }
    let success = !result.is_error.unwrap_or(false);
    let mut data = json!({ "server": server, "tool": tool });
    if let Some(structured) = result.structured_content {
        data["structured"] = structured;
    }
    if !success {
        data["is_error"] = Value::Bool(true);
    }
    ToolOutput { success, output: text, data }
}

/// One content part as text.
fn describe(part: &ContentBlock) -> String {
    match part {
        ContentBlock::Text(text) => text.text.clone(),
        ContentBlock::Image(image) => {
            format!("[image, {}, {} bytes of base64]", image.mime_type, image.data.len())
        }
        ContentBlock::Audio(audio) => {
            format!("[audio, {}, {} bytes of base64]", audio.mime_type, audio.data.len())
        }
        ContentBlock::Resource(embedded) => match &embedded.resource {
            ResourceContents::TextResourceContents { text, .. } => text.clone(),
            ResourceContents::BlobResourceContents { uri, blob, .. } => {
                format!("[resource {uri}, {} bytes of base64]", blob.len())
            }
            // A kind of resource newer than this client: described by its JSON.
            other => serde_json::to_string(other).unwrap_or_default(),
        },
        ContentBlock::ResourceLink(link) => format!("[resource link {}]", link.uri),
        // A kind of content newer than this client: described by its JSON.
        other => serde_json::to_string(other).unwrap_or_default(),
    }
}
