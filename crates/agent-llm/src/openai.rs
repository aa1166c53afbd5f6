//! The OpenAI-compatible chat completions provider, `POST {base_url}/chat/completions`
//! (OpenAI, vLLM, Ollama, LM Studio, llama.cpp server); [`OpenAiProvider`] documents the mapping.

use std::fmt;
use std::time::Duration;

use async_trait::async_trait;
use reqwest::header::{AUTHORIZATION, HeaderMap};
use serde::Deserialize;
use serde_json::{Value, json};

use crate::http::{self, ConfigError, HttpClient};
use crate::provider::{
    ChatRequest, ChatResponse, Provider, ProviderError, ProviderErrorKind, ProviderToolCall,
    ResponseFormat, Role, Usage,
};

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
    /// The longest one call may take, connecting and reading the whole answer included.
    pub timeout: Duration,
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
/// - [`ResponseFormat::Json`] is `response_format: {type: "json_schema", json_schema: {name,
///   schema, strict: false}}`;
/// - `max_tokens` (omitted when 0: the server's default) and `temperature` (if set).
///
/// The answer is `choices[0].message`: `content` (may be `null`) and `tool_calls`, whose
/// `arguments` JSON string is kept exactly as written, malformed or not (a server sending an
/// object instead gets it serialized); `usage.prompt_tokens` / `completion_tokens`, 0 if absent.
#[derive(Debug)]
pub struct OpenAiProvider {
    http: HttpClient,
    /// The server's model list, for [`Provider::preflight`].
    models: reqwest::Url,
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
        http::check_model(&config.model, "gpt-4o-mini")?;
        let key = http::api_key(config.api_key.as_deref());
        let mut headers = HeaderMap::new();
        if let Some(key) = &key {
            headers.insert(AUTHORIZATION, http::secret_header(&format!("Bearer {key}"))?);
        }
        let http =
            HttpClient::new(Self::NAME, config.model, endpoint, headers, key, config.timeout)?;
        Ok(Self { http, models })
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

    async fn preflight(&self) -> Result<(), ProviderError> {
        self.http.check_model_listed(self.models.clone()).await
    }

    async fn complete(&self, request: &ChatRequest) -> Result<ChatResponse, ProviderError> {
        let body = wire_request(self.http.model(), request);
        let completion: Completion = self.http.post(&body).await?;
        from_wire(completion).map_err(|e| self.http.error(ProviderErrorKind::BadResponse, e))
    }
}

/// The request body.
fn wire_request(model: &str, request: &ChatRequest) -> Value {
    let mut messages = Vec::with_capacity(request.messages.len() + 1);
    if !request.system.is_empty() {
        messages.push(json!({"role": "system", "content": request.system}));
    }
    for message in &request.messages {
        messages.push(match message.role {
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
        });
    }
    let mut body = json!({"model": model, "messages": messages});
    if !request.tools.is_empty() {
        let tools: Vec<Value> = request
            .tools
            .iter()
            .map(|tool| {
                json!({
                    "type": "function",
                    "function": {
                        "name": tool.name,
                        "description": tool.description,
                        "parameters": tool.parameters,
                    },
                })
            })
            .collect();
        body["tools"] = Value::Array(tools);
        if request.require_tool {
            body["tool_choice"] = json!("required");
        }
    }
    if let ResponseFormat::Json { name, schema } = &request.response {
        body["response_format"] = json!({
            "type": "json_schema",
            "json_schema": {"name": name, "schema": schema, "strict": false},
        });
    }
    if request.max_tokens > 0 {
        body["max_tokens"] = json!(request.max_tokens);
    }
    if let Some(temperature) = request.temperature {
        body["temperature"] = json!(temperature);
    }
    body
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
struct WireUsage {
    #[serde(default)]
    prompt_tokens: u64,
    #[serde(default)]
    completion_tokens: u64,
}
