//! The provider contract: one chat completion against a model, in a wire-neutral shape that
//! every backend (OpenAI-compatible, Anthropic, the embedded model, test doubles) maps onto its
//! own format.

use std::fmt;
use std::time::Duration;

use async_trait::async_trait;
use serde::{Deserialize, Serialize};
use thiserror::Error;

/// A chat model behind some API. Object-safe: hold it as `Arc<dyn Provider>`.
///
/// A provider makes exactly one attempt per [`complete`](Provider::complete) call (one per
/// structured output mode, when the server refuses a mode and the provider adapts): retries,
/// budgets and validation belong to the caller ([`crate::complete_with_retry`], [`crate::LlmReasoner`]).
#[async_trait]
pub trait Provider: Send + Sync + 'static {
    /// The provider's kind, for messages and the usage ledger: `openai`, `anthropic`, `local`.
    fn name(&self) -> &str;

    /// The model it talks to, as the user named it.
    fn model(&self) -> &str;

    /// One completion. The answer to a [`ResponseFormat::Json`] request is the JSON text in
    /// [`ChatResponse::text`] (a provider without a native JSON mode, such as Anthropic's, maps
    /// it onto forced tool use and returns that tool call's input as the text).
    async fn complete(&self, request: &ChatRequest) -> Result<ChatResponse, ProviderError>;

    /// One completion, its answer delivered to `sink` piece by piece as the model writes it
    /// (see [`crate::TokenSink`]), then returned whole exactly as [`complete`](Self::complete)
    /// returns it, usage included. Pieces delivered before an error are not an answer.
    ///
    /// The HTTP providers stream from the server; the default calls `complete` and delivers
    /// the whole answer as one piece of text and one per tool call, so every provider and test
    /// double can be asked this way.
    async fn complete_streaming(
        &self,
        request: &ChatRequest,
        sink: &mut dyn crate::TokenSink,
    ) -> Result<ChatResponse, ProviderError> {
        let response = self.complete(request).await?;
        crate::stream::deliver_whole(&response, sink);
        Ok(response)
    }

    /// Checks, before a run starts, that the provider can serve: the model exists and the key
    /// is accepted. The HTTP providers ask the server's model list (a server without one passes);
    /// the default checks nothing.
    async fn preflight(&self) -> Result<(), ProviderError> {
        Ok(())
    }

    /// The structured output mode this provider uses for [`ResponseFormat::Json`] requests
    /// and the modes the server refused ([`crate::StructuredOutput`]); `None` for a provider
    /// with a single way (the embedded model's grammar, test doubles). The reasoner keeps it
    /// in the usage report.
    fn structured_choice(&self) -> Option<crate::ModeChoice> {
        None
    }

    /// Whether a text request whose last message is the assistant's own text is answered by
    /// continuing that text (a prefill), as the embedded model does. Default `false`: a chat
    /// server closes the assistant's turn and answers anew (llama-cpp-python, formatting the
    /// 270M base model's chat with a Llama-2 template, answered a `Here is PATH:` prefill
    /// with nothing).
    fn continues_assistant(&self) -> bool {
        false
    }
}

/// One request: system prompt, conversation, optional tools, and the expected answer shape.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct ChatRequest {
    /// The system prompt.
    pub system: String,
    /// The conversation so far, oldest first; the last message is the one to answer.
    pub messages: Vec<ChatMessage>,
    /// Function tools the model may call. Empty: no tools.
    pub tools: Vec<ToolSpec>,
    /// With tools: whether the model must call one (OpenAI `tool_choice: "required"`,
    /// Anthropic `tool_choice: {"type": "any"}`) rather than answer in text.
    pub require_tool: bool,
    /// The shape of a text answer.
    pub response: ResponseFormat,
    /// Most tokens to generate.
    pub max_tokens: u32,
    /// Sampling temperature, if the agent sets one.
    pub temperature: Option<f32>,
}

/// The shape of a text answer.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum ResponseFormat {
    /// Free text.
    #[default]
    Text,
    /// A JSON value valid against `schema` (OpenAI `response_format: json_schema`; Anthropic
    /// forced tool use; the embedded model a grammar built from the schema).
    Json {
        /// A short name for the schema (`[a-zA-Z0-9_-]`), such as `verdict`.
        name: String,
        /// The JSON Schema.
        schema: serde_json::Value,
    },
}

/// A function tool offered to the model.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ToolSpec {
    /// Its name.
    pub name: String,
    /// What it does.
    pub description: String,
    /// The JSON Schema of its arguments object.
    pub parameters: serde_json::Value,
}

/// Who said a message.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Role {
    /// The runtime, speaking for the agent's inputs.
    User,
    /// The model.
    Assistant,
    /// A tool's result, answering the assistant's tool call `tool_call_id`.
    Tool,
}

/// One message of a conversation.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ChatMessage {
    /// Who said it.
    pub role: Role,
    /// The text (for [`Role::Tool`]: the tool's output).
    pub content: String,
    /// For [`Role::Assistant`]: the tool calls it made.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tool_calls: Vec<ProviderToolCall>,
    /// For [`Role::Tool`]: the id of the call this answers.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool_call_id: Option<String>,
}

impl ChatMessage {
    /// A user message.
    pub fn user(content: impl Into<String>) -> Self {
        Self {
            role: Role::User,
            content: content.into(),
            tool_calls: Vec::new(),
            tool_call_id: None,
        }
    }

    /// An assistant message with text only.
    pub fn assistant(content: impl Into<String>) -> Self {
        Self {
            role: Role::Assistant,
            content: content.into(),
            tool_calls: Vec::new(),
            tool_call_id: None,
        }
    }

    /// A tool result answering call `id`.
    pub fn tool_result(id: impl Into<String>, content: impl Into<String>) -> Self {
        Self {
            role: Role::Tool,
            content: content.into(),
            tool_calls: Vec::new(),
            tool_call_id: Some(id.into()),
        }
    }
}

/// A tool call the model made.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ProviderToolCall {
    /// The call's id (the provider's, or one the provider made up), echoed by the tool result.
    pub id: String,
    /// The tool.
    pub name: String,
    /// The arguments exactly as the model wrote them: JSON text that may be malformed, so that
    /// the caller can ask the model to repair it.
    pub arguments: String,
}

/// The model's answer.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct ChatResponse {
    /// The text answer (for a JSON request: the JSON text).
    pub text: String,
    /// Tool calls, if the model made any.
    pub tool_calls: Vec<ProviderToolCall>,
    /// Tokens read and written, as the provider counted them.
    pub usage: Usage,
    /// The engine's own timing of this call, when the provider knows it (the embedded model).
    pub timing: Option<EngineTiming>,
}

/// Tokens of one call.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Usage {
    /// Prompt tokens.
    pub input_tokens: u64,
    /// Generated tokens.
    pub output_tokens: u64,
}

/// The inference engine's own counters for one call (llama.cpp's `llama_perf_context`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct EngineTiming {
    /// Prompt tokens evaluated.
    pub prompt_tokens: u64,
    /// Milliseconds spent evaluating them.
    pub prompt_ms: f64,
    /// Tokens generated.
    pub generated_tokens: u64,
    /// Milliseconds spent generating them.
    pub generate_ms: f64,
}

/// What went wrong with a provider call.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ProviderErrorKind {
    /// No answer within the timeout. Transient.
    Timeout,
    /// Could not connect, or the connection broke. Transient.
    Connection,
    /// HTTP 429: rate limited; `retry_after` says how long to wait, if the server said. Transient,
    /// and waiting for it is not a failure.
    RateLimited,
    /// HTTP 5xx (or an overloaded signal). Transient.
    Server,
    /// HTTP 401: the key is missing, wrong or revoked. Permanent.
    Unauthorized,
    /// HTTP 403: the key may not do this. Permanent.
    Forbidden,
    /// HTTP 404 or a provider message saying so: the model does not exist. Permanent.
    UnknownModel,
    /// HTTP 400 and other 4xx: the request was refused. Permanent.
    BadRequest,
    /// The answer could not be read (not the wire format). Permanent.
    BadResponse,
    /// The embedded engine failed (model file, context, decoding). Permanent.
    Engine,
}

impl ProviderErrorKind {
    /// The failure in Strata's one classification ([`agent_state::FailureKind`], shared with
    /// the executor's runs).
    pub fn failure(self) -> agent_state::FailureKind {
        use agent_state::FailureKind;
        match self {
            Self::Timeout => FailureKind::Timeout,
            Self::Connection => FailureKind::Network,
            Self::RateLimited => FailureKind::RateLimited,
            Self::Server => FailureKind::Server,
            Self::Unauthorized | Self::Forbidden => FailureKind::Permission,
            Self::UnknownModel | Self::BadRequest => FailureKind::Client,
            Self::BadResponse => FailureKind::Malformed,
            Self::Engine => FailureKind::Internal,
        }
    }

    /// Whether trying again may succeed: the class of [`failure`](Self::failure).
    pub fn is_transient(self) -> bool {
        self.failure().class() == agent_state::ErrorClass::Transient
    }
}

impl fmt::Display for ProviderErrorKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::Timeout => "timed out",
            Self::Connection => "connection failed",
            Self::RateLimited => "rate limited",
            Self::Server => "server error",
            Self::Unauthorized => "unauthorized (check the API key)",
            Self::Forbidden => "forbidden",
            Self::UnknownModel => "unknown model",
            Self::BadRequest => "request refused",
            Self::BadResponse => "unreadable response",
            Self::Engine => "engine failure",
        })
    }
}

/// A failed provider call. Its message names the provider, the model and the cause, and never
/// contains an API key.
#[derive(Clone, Debug, PartialEq, Eq, Error)]
#[error("{provider} model `{model}`: {kind}: {message}")]
pub struct ProviderError {
    /// The provider's [`name`](Provider::name).
    pub provider: String,
    /// The model.
    pub model: String,
    /// The class of failure.
    pub kind: ProviderErrorKind,
    /// Details (HTTP status, the provider's own error message, ...).
    pub message: String,
    /// How long the server asked us to wait before trying again (`Retry-After`).
    pub retry_after: Option<Duration>,
}

impl ProviderError {
    /// An error of `kind` from `provider`.
    pub fn new(
        provider: &dyn Provider,
        kind: ProviderErrorKind,
        message: impl Into<String>,
    ) -> Self {
        Self {
            provider: provider.name().to_owned(),
            model: provider.model().to_owned(),
            kind,
            message: message.into(),
            retry_after: None,
        }
    }

    /// Whether trying again may succeed.
    pub fn is_transient(&self) -> bool {
        self.kind.is_transient()
    }
}
