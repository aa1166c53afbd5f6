//! The OpenAI-compatible chat completions provider, `POST {base_url}/chat/completions`
//! (OpenAI, vLLM, Ollama, LM Studio, llama.cpp server); [`OpenAiProvider`] documents the mapping.

use std::fmt;
use std::time::Duration;

use async_trait::async_trait;
use reqwest::header::{AUTHORIZATION, HeaderMap};
use serde::Deserialize;
use serde_json::{Value, json};

use crate::emulated_tools;
use crate::http::{self, ConfigError, HttpClient};
use crate::provider::{
    ChatMessage, ChatRequest, ChatResponse, Provider, ProviderError, ProviderErrorKind,
    ProviderToolCall, ResponseFormat, Role, Usage,
};
use crate::stream::{SharedSink, TokenSink};
use crate::structured::{self, ModeChoice, ModeSelector, StructuredMode, StructuredOutput};

mod completions;
mod stream;

/// How to reach an OpenAI-compatible server.
#[derive(Clone, PartialEq, Eq)]
pub struct OpenAiConfig {
    /// The API root, ending before `/chat/completions`: `https://api.openai.com/v1`,
    /// `http://localhost:11434/v1` (Ollama), `http://localhost:8000/v1` (vLLM).
    pub base_url: String,
    /// The model, as the server names it.
    pub model: String,
    /// The API key, sent as `Authorization: Bearer`; `None` (or empty) for local servers that
    /// need none. The caller reads it from the environment; it is trimmed, never logged, and
    /// shown as `<redacted>` by `Debug`.
    pub api_key: Option<String>,
    /// For a streamed call, the longest wait for its answer to begin and for each next piece (a
    /// slow model that keeps writing is not cut: the team's reasoning limit bounds the whole
    /// call). A call answered whole may take this plus twice the time its `max_tokens` take at
    /// the slowest generation rate measured on this provider's whole answers (8 tokens a
    /// second before one is measured), connecting and reading the answer included.
    pub timeout: Duration,
    /// How to ask for structured answers ([`StructuredOutput::Auto`]: the best mode the server
    /// takes, found as it answers).
    pub structured_output: StructuredOutput,
    /// Asks as the embedded model is asked, for a small base model with no chat template of its
    /// own (`--small-model`): each request rendered as a plain transcript on `POST
    /// {base_url}/completions`, a JSON answer or tool call constrained by a GBNF `grammar`
    /// (llama.cpp's server, llama-cpp-python take one), answers not streamed. The pre-run check
    /// ([`Provider::preflight`]) tries it; a server without the endpoint, or one that refuses or
    /// ignores the grammar, is asked through chat completions instead (and
    /// `structured_output` applies there).
    pub completions: bool,
}

impl OpenAiConfig {
    /// The timeout [`OpenAiConfig::new`] sets.
    pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(120);

    /// `model` at `base_url`, without a key, with [`Self::DEFAULT_TIMEOUT`].
    pub fn new(base_url: impl Into<String>, model: impl Into<String>) -> Self {
        Self {
            base_url: base_url.into(),
            model: model.into(),
            api_key: None,
            timeout: Self::DEFAULT_TIMEOUT,
            structured_output: StructuredOutput::Auto,
            completions: false,
        }
    }
}

impl fmt::Debug for OpenAiConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("OpenAiConfig")
            .field("base_url", &self.base_url)
            .field("model", &self.model)
            .field("api_key", &http::redacted(self.api_key.as_ref()))
            .field("timeout", &self.timeout)
            .field("structured_output", &self.structured_output)
            .field("completions", &self.completions)
            .finish()
    }
}

/// A model behind an OpenAI-compatible chat completions API. One HTTP call per
/// [`complete`](Provider::complete).
///
/// How a [`ChatRequest`] maps onto the wire:
/// - the system prompt (if not empty) is the first message, `{"role": "system"}`;
/// - user and assistant messages keep their role; an assistant's tool calls become
///   `tool_calls: [{id, type: "function", function: {name, arguments}}]` (content `null` when
///   it said nothing else);
/// - a [`Role::Tool`] message is `{"role": "tool", "tool_call_id", "content"}`;
/// - tools are `[{type: "function", function: {name, description, parameters}}]`, and
///   `require_tool` sends `tool_choice: "required"` (otherwise the server's default, `auto`);
/// - [`ResponseFormat::Json`] is sent in the [`StructuredMode`] in use: `json_schema` is
///   `response_format: {type: "json_schema", json_schema: {name, schema, strict: false}}`,
///   `json_object` is `response_format: {type: "json_object", schema}` with the schema also in
///   the system prompt, `tool_call` is a function named after the schema with the schema as its
///   parameters, forced with `tool_choice: {type: "function", function: {name}}` (its arguments
///   are the answer), `prompt` is the schema in the system prompt only. With
///   [`StructuredOutput::Auto`] the provider starts with `json_schema` and, when the server
///   refuses a request because of its format (see [`crate::StructuredOutput`]), sends the same
///   request in the next mode at once; the refusal is remembered for every later call
///   ([`Provider::structured_choice`]);
/// - `max_tokens` (omitted when 0: the server's default) and `temperature` (if set).
///
/// With [`OpenAiConfig::completions`], requests go to `/completions` instead, as the
/// `completions` module describes.
///
/// The answer is `choices[0].message`: `content` (may be `null`) and `tool_calls`, whose
/// `arguments` JSON string is kept exactly as written, malformed or not (a server sending an
/// object instead gets it serialized); `usage.prompt_tokens` / `completion_tokens`, 0 if absent.
#[derive(Debug)]
pub struct OpenAiProvider {
    http: HttpClient,
    /// The server's model list, for [`Provider::preflight`].
    models: reqwest::Url,
    /// The structured output mode in use and the ones the server refused.
    modes: ModeSelector,
    /// Whether answers are streamed (see [`stream`]).
    streaming: stream::StreamState,
    /// The server's `/completions`, and whether requests go there (see [`completions`]).
    completions_url: reqwest::Url,
    completions: completions::State,
}

impl OpenAiProvider {
    /// The provider's [`name`](Provider::name).
    pub const NAME: &'static str = "openai";

    /// A provider for `config`, checked: `base_url` must be an absolute http(s) URL, `model`
    /// not empty, `timeout` not zero, and the key usable in a header.
    pub fn new(config: OpenAiConfig) -> Result<Self, ConfigError> {
        const EXAMPLE_URL: &str = "https://api.openai.com/v1";
        let endpoint = http::endpoint(&config.base_url, "chat/completions", EXAMPLE_URL)?;
        let models = http::endpoint(&config.base_url, "models", EXAMPLE_URL)?;
        let completions_url = http::endpoint(&config.base_url, "completions", EXAMPLE_URL)?;
        let completions = completions::State::new(config.completions);
        http::check_model(&config.model, "gpt-4o-mini")?;
        let key = http::api_key(config.api_key.as_deref());
        let mut headers = HeaderMap::new();
        if let Some(key) = &key {
            headers.insert(AUTHORIZATION, http::secret_header(&format!("Bearer {key}"))?);
        }
        let http =
            HttpClient::new(Self::NAME, config.model, endpoint, headers, key, config.timeout)?;
        let modes = ModeSelector::new(config.structured_output, &StructuredMode::ALL);
        Ok(Self {
            http,
            models,
            modes,
            streaming: stream::StreamState::default(),
            completions_url,
            completions,
        })
    }

    /// Takes over the structured output modes that an earlier provider for the same server
    /// found refused (the pre-run check's, or the run's stored usage report), so that they are
    /// not tried again. Ignored when its setting differs from this provider's.
    pub fn remember(&self, choice: &ModeChoice) {
        self.modes.remember(choice);
        if choice.stream_without_usage {
            self.streaming.stop();
        }
        if choice.completions == Some(false) {
            self.completions.refuse();
        }
    }

    /// Sends `request` in `mode`: the server's answer, or its refusal.
    async fn complete_in(
        &self,
        request: &ChatRequest,
        mode: Option<StructuredMode>,
        sink: Option<&SharedSink<'_>>,
    ) -> Result<ChatResponse, ProviderError> {
        let body = wire_request(self.http.model(), request, mode);
        let mut response = stream::answer(self, request, mode, body, sink).await?;
        match (mode, &request.response) {
            (Some(StructuredMode::ToolCall), ResponseFormat::Json { name, .. }) => {
                // The forced call's arguments are the answer; a server that ignored the
                // `tool_choice` and answered in text gives its text, checked like any answer.
                if let Some(i) = response.tool_calls.iter().position(|c| &c.name == name) {
                    let call = response.tool_calls.remove(i);
                    response.text = call.arguments;
                } else {
                    response.text = structured::unfenced(&response.text);
                }
            }
            (Some(StructuredMode::JsonObject | StructuredMode::Prompt), _) => {
                response.text = structured::unfenced(&response.text);
            }
            _ => {}
        }
        Ok(response)
    }

    /// Sends `request` in the structured output mode in use, adapting to the server's
    /// refusals; streamed to `sink` if there is one.
    async fn send(
        &self,
        request: &ChatRequest,
        sink: Option<&SharedSink<'_>>,
    ) -> Result<ChatResponse, ProviderError> {
        if self.completions.in_use() {
            return completions::answer(self, request, sink).await;
        }
        if request.require_tool && !request.tools.is_empty() {
            return self.call_a_tool(request, sink).await;
        }
        if !matches!(request.response, ResponseFormat::Json { .. }) {
            return self.complete_in(request, None, sink).await;
        }
        structured::complete_adapting(&self.modes, Self::NAME, self.http.model(), |mode| {
            self.complete_in(request, Some(mode), sink)
        })
        .await
    }

    /// A request that must call a tool: `tool_choice: "required"`, or, on a server that
    /// answered that without a tool call, the same request as a structured question
    /// ([`emulated_tools`]); the answer that called no tool is counted in the usage.
    async fn call_a_tool(
        &self,
        request: &ChatRequest,
        sink: Option<&SharedSink<'_>>,
    ) -> Result<ChatResponse, ProviderError> {
        let mut spent = Usage::default();
        if !self.modes.tools_emulated() {
            let response = self.complete_in(request, None, sink).await?;
            if !response.tool_calls.is_empty() {
                return Ok(response);
            }
            tracing::info!(
                provider = Self::NAME,
                model = %self.http.model(),
                text = %response.text,
                "the server answered tool_choice \"required\" without a tool call; tool calls are asked as JSON from now on"
            );
            self.modes.emulate_tools();
            spent = response.usage;
        }
        let question = emulated_tools::request(request);
        let mut response =
            structured::complete_adapting(&self.modes, Self::NAME, self.http.model(), |mode| {
                self.complete_in(&question, Some(mode), sink)
            })
            .await?;
        response.usage.input_tokens += spent.input_tokens;
        response.usage.output_tokens += spent.output_tokens;
        Ok(emulated_tools::answer(response))
    }

    /// A short structured request, to learn before a run which mode the server takes.
    fn probe() -> ChatRequest {
        ChatRequest {
            system: "You answer in JSON.".to_owned(),
            messages: vec![crate::provider::ChatMessage::user(
                "Reply with the JSON {\"ok\": true}.",
            )],
            response: ResponseFormat::Json {
                name: "probe".to_owned(),
                schema: json!({
                    "type": "object",
                    "properties": {"ok": {"type": "boolean"}},
                    "required": ["ok"],
                    "additionalProperties": false,
                }),
            },
            max_tokens: 16,
            temperature: Some(0.0),
            ..ChatRequest::default()
        }
    }
}

#[async_trait]
impl Provider for OpenAiProvider {
    fn name(&self) -> &str {
        self.http.provider()
    }

    fn model(&self) -> &str {
        self.http.model()
    }

    /// Checks that the server serves the model, then sends one short structured request (16
    /// tokens at most) to find the structured output mode it takes: a server that refuses
    /// every mode fails here, naming what was tried. With [`OpenAiConfig::completions`], it
    /// first checks that the server's `/completions` keeps a grammar (one short request), and
    /// uses chat completions if not.
    async fn preflight(&self) -> Result<(), ProviderError> {
        self.http.check_model_listed(self.models.clone()).await?;
        if self.completions.in_use() {
            match completions::probe(self).await? {
                None => return Ok(()),
                Some(reason) => {
                    tracing::info!(
                        provider = Self::NAME,
                        model = %self.http.model(),
                        %reason,
                        "the server's /completions does not take a grammar; asking through chat completions"
                    );
                    self.completions.refuse();
                }
            }
        }
        // Streamed, so that a server that streams without the usage is known before the run,
        // whose calls are then not streamed and all counted exactly.
        let mut ignore = |_: crate::stream::Piece<'_>| {};
        self.complete_streaming(&Self::probe(), &mut ignore).await.map(drop).map_err(|mut error| {
            if error.kind == ProviderErrorKind::BadRequest {
                error.message =
                    format!("the server at {}: {}", self.http.endpoint(), error.message);
            }
            error
        })
    }

    async fn complete(&self, request: &ChatRequest) -> Result<ChatResponse, ProviderError> {
        self.send(request, None).await
    }

    /// Streamed (`"stream": true`, see the `stream` module) unless the server streamed an answer without
    /// its usage before.
    async fn complete_streaming(
        &self,
        request: &ChatRequest,
        sink: &mut dyn TokenSink,
    ) -> Result<ChatResponse, ProviderError> {
        self.send(request, Some(&SharedSink::new(sink))).await
    }

    /// Asked as a transcript ([`OpenAiConfig::completions`]), the answer continues the
    /// assistant's own last words, as the embedded model's does.
    fn continues_assistant(&self) -> bool {
        self.completions.in_use()
    }

    fn structured_choice(&self) -> Option<ModeChoice> {
        let mut choice = self.modes.choice();
        choice.stream_without_usage = !self.streaming.streams();
        choice.completions = self.completions.choice();
        Some(choice)
    }
}

/// The request body, a JSON request sent in `mode`.
fn wire_request(model: &str, request: &ChatRequest, mode: Option<StructuredMode>) -> Value {
    let schema = match &request.response {
        ResponseFormat::Json { name, schema } => Some((name, schema)),
        ResponseFormat::Text => None,
    };
    let system = match (mode, schema) {
        (Some(StructuredMode::JsonObject | StructuredMode::Prompt), Some((_, schema))) => {
            structured::with_schema_instruction(&request.system, schema)
        }
        _ => request.system.clone(),
    };
    let mut messages = Vec::with_capacity(request.messages.len() + 1);
    if !system.is_empty() {
        messages.push(json!({"role": "system", "content": system}));
    }
    messages.extend(request.messages.iter().map(wire_message));
    let mut body = json!({"model": model, "messages": messages});
    let mut tools: Vec<Value> =
        request.tools.iter().map(|t| function(&t.name, &t.description, &t.parameters)).collect();
    if request.require_tool && !tools.is_empty() {
        body["tool_choice"] = json!("required");
    }
    match (mode, schema) {
        (Some(StructuredMode::JsonSchema), Some((name, schema))) => {
            body["response_format"] = json!({
                "type": "json_schema",
                "json_schema": {"name": name, "schema": schema, "strict": false},
            });
        }
        (Some(StructuredMode::JsonObject), Some((_, schema))) => {
            body["response_format"] = json!({"type": "json_object", "schema": schema});
        }
        (Some(StructuredMode::ToolCall), Some((name, schema))) => {
            tools.push(function(name, "Give your answer as this function's arguments.", schema));
            body["tool_choice"] = json!({"type": "function", "function": {"name": name}});
        }
        _ => {}
    }
    if !tools.is_empty() {
        body["tools"] = Value::Array(tools);
    }
    if request.max_tokens > 0 {
        body["max_tokens"] = json!(request.max_tokens);
    }
    if let Some(temperature) = request.temperature {
        body["temperature"] = json!(temperature);
    }
    body
}

/// One message of the conversation, as chat completions take it.
fn wire_message(message: &ChatMessage) -> Value {
    match message.role {
        Role::User => json!({"role": "user", "content": message.content}),
        Role::Assistant if message.tool_calls.is_empty() => {
            json!({"role": "assistant", "content": message.content})
        }
        Role::Assistant => {
            let calls: Vec<Value> = message
                .tool_calls
                .iter()
                .map(|call| {
                    json!({
                        "id": call.id,
                        "type": "function",
                        "function": {"name": call.name, "arguments": call.arguments},
                    })
                })
                .collect();
            let content =
                if message.content.is_empty() { Value::Null } else { json!(message.content) };
            json!({"role": "assistant", "content": content, "tool_calls": calls})
        }
        Role::Tool => json!({
            "role": "tool",
            "tool_call_id": message.tool_call_id.as_deref().unwrap_or_default(),
            "content": message.content,
        }),
    }
}

/// A function the model may call, as chat completions declare it.
fn function(name: &str, description: &str, parameters: &Value) -> Value {
    json!({
        "type": "function",
        "function": {"name": name, "description": description, "parameters": parameters},
    })
}

/// The answer, read from the wire.
fn from_wire(completion: Completion) -> Result<ChatResponse, String> {
    let Some(choice) = completion.choices.into_iter().next() else {
        return Err("the answer has no choices".to_owned());
    };
    let tool_calls = choice
        .message
        .tool_calls
        .unwrap_or_default()
        .into_iter()
        .enumerate()
        .map(|(i, call)| ProviderToolCall {
            id: call.id.unwrap_or_else(|| format!("call_{i}")),
            name: call.function.name,
            arguments: match call.function.arguments {
                Value::String(raw) => raw,
                Value::Null => "{}".to_owned(),
                other => other.to_string(),
            },
        })
        .collect();
    let usage = completion.usage.unwrap_or_default();
    Ok(ChatResponse {
        text: choice.message.content.unwrap_or_default(),
        tool_calls,
        usage: Usage { input_tokens: usage.prompt_tokens, output_tokens: usage.completion_tokens },
        timing: None,
    })
}

/// `POST /chat/completions` answer (the fields read).
#[derive(Deserialize)]
struct Completion {
    choices: Vec<Choice>,
    #[serde(default)]
    usage: Option<WireUsage>,
}

#[derive(Deserialize)]
struct Choice {
    message: WireMessage,
}

#[derive(Deserialize)]
struct WireMessage {
    #[serde(default)]
    content: Option<String>,
    #[serde(default)]
    tool_calls: Option<Vec<WireToolCall>>,
}

#[derive(Deserialize)]
struct WireToolCall {
    #[serde(default)]
    id: Option<String>,
    function: WireFunction,
}

#[derive(Deserialize)]
struct WireFunction {
    name: String,
    #[serde(default)]
    arguments: Value,
}

#[derive(Default, Deserialize)]
pub(super) struct WireUsage {
    #[serde(default)]
    prompt_tokens: u64,
    #[serde(default)]
    completion_tokens: u64,
}
