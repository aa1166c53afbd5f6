//! The Anthropic Messages API provider, `POST {base_url}/v1/messages`;
//! [`AnthropicProvider`] documents the mapping.

use std::fmt;
use std::time::Duration;

use async_trait::async_trait;
use reqwest::header::{HeaderMap, HeaderName, HeaderValue};
use serde::Deserialize;
use serde_json::{Value, json};

use crate::http::{self, ConfigError, HttpClient};
use crate::provider::{
    ChatRequest, ChatResponse, Provider, ProviderError, ProviderToolCall, ResponseFormat, Role,
    Usage,
};
use crate::stream::{SharedSink, TokenSink};
use crate::structured::{self, ModeChoice, ModeSelector, StructuredMode, StructuredOutput};

mod stream;

/// How to reach the Anthropic API.
#[derive(Clone, PartialEq, Eq)]
pub struct AnthropicConfig {
    /// The API root, ending before `/v1/messages`: [`AnthropicConfig::DEFAULT_BASE_URL`].
    pub base_url: String,
    /// The model, such as `claude-sonnet-4-5`.
    pub model: String,
    /// The API key, sent as `x-api-key`. Optional so that proxies holding the key can be used,
    /// but Anthropic's own API answers 401 without it. The caller reads it from the environment;
    /// it is trimmed, never logged, and shown as `<redacted>` by `Debug`.
    pub api_key: Option<String>,
    /// For a streamed call, the longest wait for its answer to begin and for each next piece (a
    /// slow model that keeps writing is not cut: the team's reasoning limit bounds the whole
    /// call). A call answered whole may take this plus twice the time its `max_tokens` take at
    /// the slowest generation rate measured on this provider's whole answers (8 tokens a
    /// second before one is measured), connecting and reading the answer included.
    pub timeout: Duration,
    /// How to ask for structured answers: [`StructuredMode::ToolCall`] (the API's own way,
    /// tried first by [`StructuredOutput::Auto`]) or [`StructuredMode::Prompt`]; the API has no
    /// `response_format`, so the JSON modes are refused when the provider is built.
    pub structured_output: StructuredOutput,
}

impl AnthropicConfig {
    /// Anthropic's API.
    pub const DEFAULT_BASE_URL: &'static str = "https://api.anthropic.com";
    /// The timeout [`AnthropicConfig::new`] sets.
    pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(120);
    /// The `max_tokens` sent for a request that sets none (0), as the API requires one.
    pub const DEFAULT_MAX_TOKENS: u32 = 4_096;

    /// `model` at [`Self::DEFAULT_BASE_URL`], without a key, with [`Self::DEFAULT_TIMEOUT`].
    pub fn new(model: impl Into<String>) -> Self {
        Self {
            base_url: Self::DEFAULT_BASE_URL.to_owned(),
            model: model.into(),
            api_key: None,
            timeout: Self::DEFAULT_TIMEOUT,
            structured_output: StructuredOutput::Auto,
        }
    }
}

impl fmt::Debug for AnthropicConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("AnthropicConfig")
            .field("base_url", &self.base_url)
            .field("model", &self.model)
            .field("api_key", &http::redacted(self.api_key.as_ref()))
            .field("timeout", &self.timeout)
            .field("structured_output", &self.structured_output)
            .finish()
    }
}

/// A Claude model behind the Anthropic Messages API. One HTTP call per
/// [`complete`](Provider::complete).
///
/// How a [`ChatRequest`] maps onto the wire:
/// - the system prompt (if not empty) is the top-level `system`;
/// - messages become content blocks: text as `{type: "text"}` (empty text is left out, the API
///   refuses it), an assistant's tool calls as `{type: "tool_use", id, name, input}` with `input`
///   the parsed arguments object (`{}` if the stored arguments are not a JSON object), and a
///   [`Role::Tool`] result as `{type: "tool_result", tool_use_id, content}` in a `user` message;
/// - consecutive messages of the same wire role are merged into one message (so consecutive tool
///   results form one `user` message), because the API requires user and assistant to alternate;
/// - tools are `[{name, description, input_schema}]`; `require_tool` sends
///   `tool_choice: {type: "any"}`;
/// - the API has no JSON mode: [`ResponseFormat::Json`] adds a tool named after the schema with
///   the schema as its `input_schema` and forces it with `tool_choice: {type: "tool", name}`
///   (other tools are still offered, but the model must answer through this one);
/// - `max_tokens` is required by the API: 0 sends [`AnthropicConfig::DEFAULT_MAX_TOKENS`].
///
/// The answer's text blocks are concatenated into [`ChatResponse::text`], its `tool_use` blocks
/// become tool calls with `input` serialized as the arguments, except the forced JSON tool's,
/// whose `input` is serialized as the text; `usage.input_tokens` / `output_tokens`, 0 if absent.
#[derive(Debug)]
pub struct AnthropicProvider {
    http: HttpClient,
    /// The server's model list, for [`Provider::preflight`].
    models: reqwest::Url,
    /// The structured output mode in use and the ones the server refused.
    modes: ModeSelector,
}

impl AnthropicProvider {
    /// The provider's [`name`](Provider::name).
    pub const NAME: &'static str = "anthropic";
    /// The `anthropic-version` header sent.
    pub const API_VERSION: &'static str = "2023-06-01";

    /// A provider for `config`, checked: `base_url` must be an absolute http(s) URL, `model`
    /// not empty, `timeout` not zero, and the key usable in a header.
    pub fn new(config: AnthropicConfig) -> Result<Self, ConfigError> {
        let endpoint =
            http::endpoint(&config.base_url, "v1/messages", AnthropicConfig::DEFAULT_BASE_URL)?;
        let mut models =
            http::endpoint(&config.base_url, "v1/models", AnthropicConfig::DEFAULT_BASE_URL)?;
        // The list is paged (20 by default); 1000 is the largest page.
        models.set_query(Some("limit=1000"));
        http::check_model(&config.model, "claude-sonnet-4-5")?;
        structured::check_supported(config.structured_output, Self::NAME, &Self::MODES)
            .map_err(ConfigError::StructuredOutput)?;
        let key = http::api_key(config.api_key.as_deref());
        let mut headers = HeaderMap::new();
        headers.insert(
            HeaderName::from_static("anthropic-version"),
            HeaderValue::from_static(Self::API_VERSION),
        );
        if let Some(key) = &key {
            headers.insert(HeaderName::from_static("x-api-key"), http::secret_header(key)?);
        }
        let http =
            HttpClient::new(Self::NAME, config.model, endpoint, headers, key, config.timeout)?;
        let modes = ModeSelector::new(config.structured_output, &Self::MODES);
        Ok(Self { http, models, modes })
    }

    /// The structured output modes the API takes, best first.
    pub const MODES: [StructuredMode; 2] = [StructuredMode::ToolCall, StructuredMode::Prompt];

    /// Sends `request`, a JSON request in `mode` when it asks for JSON.
    async fn complete_in(
        &self,
        request: &ChatRequest,
        mode: Option<StructuredMode>,
        sink: Option<&SharedSink<'_>>,
    ) -> Result<ChatResponse, ProviderError> {
        if let (Some(StructuredMode::Prompt), ResponseFormat::Json { schema, .. }) =
            (mode, &request.response)
        {
            // The schema in the system prompt, the answer's text checked by the reasoner.
            let mut plain = request.clone();
            plain.response = ResponseFormat::Text;
            plain.system = structured::with_schema_instruction(&plain.system, schema);
            let body = wire_request(self.http.model(), &plain);
            let mut response = stream::answer(&self.http, body, None, sink).await?;
            response.text = structured::unfenced(&response.text);
            return Ok(response);
        }
        let body = wire_request(self.http.model(), request);
        let json_tool = match &request.response {
            ResponseFormat::Json { name, .. } => Some(name.as_str()),
            ResponseFormat::Text => None,
        };
        stream::answer(&self.http, body, json_tool, sink).await
    }

    /// Sends `request` in the structured output mode in use, adapting to the server's
    /// refusals; streamed to `sink` if there is one.
    async fn send(
        &self,
        request: &ChatRequest,
        sink: Option<&SharedSink<'_>>,
    ) -> Result<ChatResponse, ProviderError> {
        if !matches!(request.response, ResponseFormat::Json { .. }) {
            return self.complete_in(request, None, sink).await;
        }
        structured::complete_adapting(&self.modes, Self::NAME, self.http.model(), |mode| {
            self.complete_in(request, Some(mode), sink)
        })
        .await
    }
}

#[async_trait]
impl Provider for AnthropicProvider {
    fn name(&self) -> &str {
        self.http.provider()
    }

    fn model(&self) -> &str {
        self.http.model()
    }

    async fn preflight(&self) -> Result<(), ProviderError> {
        self.http.check_model_listed(self.models.clone()).await
    }

    async fn complete(&self, request: &ChatRequest) -> Result<ChatResponse, ProviderError> {
        self.send(request, None).await
    }

    /// Streamed (`"stream": true`, see the `stream` module).
    async fn complete_streaming(
        &self,
        request: &ChatRequest,
        sink: &mut dyn TokenSink,
    ) -> Result<ChatResponse, ProviderError> {
        self.send(request, Some(&SharedSink::new(sink))).await
    }

    fn structured_choice(&self) -> Option<ModeChoice> {
        Some(self.modes.choice())
    }
}

/// The request body.
fn wire_request(model: &str, request: &ChatRequest) -> Value {
    let mut messages: Vec<(&'static str, Vec<Value>)> = Vec::new();
    for message in &request.messages {
        let (role, blocks) = match message.role {
            Role::User => ("user", text_block(&message.content).into_iter().collect()),
            Role::Assistant => {
                let mut blocks: Vec<Value> = text_block(&message.content).into_iter().collect();
                blocks.extend(message.tool_calls.iter().map(|call| {
                    json!({
                        "type": "tool_use",
                        "id": call.id,
                        "name": call.name,
                        "input": tool_input(&call.arguments),
                    })
                }));
                ("assistant", blocks)
            }
            Role::Tool => (
                "user",
                vec![json!({
                    "type": "tool_result",
                    "tool_use_id": message.tool_call_id.as_deref().unwrap_or_default(),
                    "content": message.content,
                })],
            ),
        };
        if blocks.is_empty() {
            continue;
        }
        match messages.last_mut() {
            Some((last_role, last_blocks)) if *last_role == role => last_blocks.extend(blocks),
            _ => messages.push((role, blocks)),
        }
    }
    let messages: Vec<Value> = messages
        .into_iter()
        .map(|(role, content)| json!({"role": role, "content": content}))
        .collect();
    let max_tokens = if request.max_tokens == 0 {
        AnthropicConfig::DEFAULT_MAX_TOKENS
    } else {
        request.max_tokens
    };
    let mut body = json!({"model": model, "max_tokens": max_tokens, "messages": messages});
    if !request.system.is_empty() {
        body["system"] = json!(request.system);
    }
    let mut tools: Vec<Value> = request
        .tools
        .iter()
        .map(|tool| {
            json!({
                "name": tool.name,
                "description": tool.description,
                "input_schema": tool.parameters,
            })
        })
        .collect();
    let mut tool_choice =
        (request.require_tool && !tools.is_empty()).then(|| json!({"type": "any"}));
    if let ResponseFormat::Json { name, schema } = &request.response {
        tools.push(json!({
            "name": name,
            "description": "Give your answer as this tool's input, a JSON value matching its schema.",
            "input_schema": schema,
        }));
        tool_choice = Some(json!({"type": "tool", "name": name}));
    }
    if !tools.is_empty() {
        body["tools"] = Value::Array(tools);
    }
    if let Some(choice) = tool_choice {
        body["tool_choice"] = choice;
    }
    if let Some(temperature) = request.temperature {
        body["temperature"] = json!(temperature);
    }
    body
}

/// A text block, unless `text` is empty (the API refuses empty text blocks).
fn text_block(text: &str) -> Option<Value> {
    (!text.is_empty()).then(|| json!({"type": "text", "text": text}))
}

/// A tool call's stored arguments as a `tool_use` input: the parsed object, or `{}` if they are
/// not a JSON object (the API requires one).
fn tool_input(arguments: &str) -> Value {
    match serde_json::from_str::<Value>(arguments) {
        Ok(value @ Value::Object(_)) => value,
        _ => json!({}),
    }
}

/// The answer, read from the wire; `json_tool` names the forced tool of a JSON request.
fn from_wire(message: WireResponse, json_tool: Option<&str>) -> Result<ChatResponse, String> {
    let mut text = String::new();
    let mut json_answer = None;
    let mut tool_calls = Vec::new();
    for block in message.content {
        match block {
            Block::Text { text: part } => text.push_str(&part),
            Block::ToolUse { id, name, input } => {
                let arguments = serde_json::to_string(&input)
                    .map_err(|e| format!("tool_use `{name}`: cannot serialize its input ({e})"))?;
                if json_tool == Some(name.as_str()) && json_answer.is_none() {
                    json_answer = Some(arguments);
                } else {
                    tool_calls.push(ProviderToolCall { id, name, arguments });
                }
            }
            Block::Other => {}
        }
    }
    let usage = message.usage.unwrap_or_default();
    Ok(ChatResponse {
        text: json_answer.unwrap_or(text),
        tool_calls,
        usage: Usage { input_tokens: usage.input_tokens, output_tokens: usage.output_tokens },
        timing: None,
    })
}

/// `POST /v1/messages` answer (the fields read).
#[derive(Deserialize)]
struct WireResponse {
    content: Vec<Block>,
    #[serde(default)]
    usage: Option<WireUsage>,
}

#[derive(Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
enum Block {
    Text {
        text: String,
    },
    ToolUse {
        id: String,
        name: String,
        #[serde(default)]
        input: Value,
    },
    /// Thinking and other blocks: not part of the answer.
    #[serde(other)]
    Other,
}

#[derive(Default, Deserialize)]
struct WireUsage {
    #[serde(default)]
    input_tokens: u64,
    #[serde(default)]
    output_tokens: u64,
}
