//! [`McpTool`]: one tool of an MCP server as an [`agent_core::Tool`](Tool).

use std::collections::BTreeSet;
use std::sync::Arc;

use agent_core::tools::{Tool, ToolContext, ToolError, ToolOutput};
use async_trait::async_trait;
use rmcp::model::{CallToolResult, ContentBlock, ResourceContents};
use serde_json::{Value, json};

use crate::McpError;
use crate::client::{Connection, admit};

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

    async fn call(&self, _ctx: &ToolContext, args: Value) -> Result<ToolOutput, ToolError> {
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
        match self.connection.call(&self.mcp_name, arguments).await {
            Ok(result) => Ok(output(&self.connection.name, &self.mcp_name, result)),
            Err(error) => {
                tracing::warn!(server = %self.connection.name, tool = %self.mcp_name, %error, "MCP tool call failed");
                Err(self.connection.tool_error(&self.name, error))
            }
        }
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
