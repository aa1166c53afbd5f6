//! A scripted [`Provider`] for tests: answers from a queue or a function, records every request,
//! and counts tokens exactly as the script gives them.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use agent_llm::{
    ChatMessage, ChatRequest, ChatResponse, Provider, ProviderError, ProviderErrorKind,
    ProviderToolCall, ResponseFormat, Role, Usage,
};
use async_trait::async_trait;

/// One scripted outcome of a call.
pub(crate) type Answer = Result<ChatResponse, ProviderError>;

type AnswerFn = dyn Fn(&ChatRequest) -> Answer + Send + Sync;

enum Script {
    Queue(VecDeque<Answer>),
    Function(Box<AnswerFn>),
}

/// A provider named `mock`, model `mock-model` unless renamed.
pub(crate) struct MockProvider {
    name: String,
    model: String,
    script: Mutex<Script>,
    requests: Mutex<Vec<ChatRequest>>,
    delay: Option<Duration>,
}

impl MockProvider {
    /// Answers these, in order; a call past the end fails with a `BadResponse` that says so.
    pub(crate) fn queue(answers: impl IntoIterator<Item = Answer>) -> Self {
        Self::with_script(Script::Queue(answers.into_iter().collect()))
    }

    /// Answers every request with `answer(request)`.
    pub(crate) fn from_fn(answer: impl Fn(&ChatRequest) -> Answer + Send + Sync + 'static) -> Self {
        Self::with_script(Script::Function(Box::new(answer)))
    }

    fn with_script(script: Script) -> Self {
        Self {
            name: "mock".into(),
            model: "mock-model".into(),
            script: Mutex::new(script),
            requests: Mutex::new(Vec::new()),
            delay: None,
        }
    }

    /// Renames the provider and its model.
    pub(crate) fn named(mut self, name: &str, model: &str) -> Self {
        self.name = name.into();
        self.model = model.into();
        self
    }

    /// Waits `delay` (tokio time) before answering each call; the request is recorded first.
    pub(crate) fn with_delay(mut self, delay: Duration) -> Self {
        self.delay = Some(delay);
        self
    }

    /// Every request so far, in order.
    pub(crate) fn requests(&self) -> Vec<ChatRequest> {
        self.requests.lock().unwrap_or_else(PoisonError::into_inner).clone()
    }

    /// How many requests were made.
    pub(crate) fn calls(&self) -> usize {
        self.requests.lock().unwrap_or_else(PoisonError::into_inner).len()
    }

    /// The last request.
    pub(crate) fn last(&self) -> ChatRequest {
        self.requests().pop().expect("the provider was never called")
    }
}

#[async_trait]
impl Provider for MockProvider {
    fn name(&self) -> &str {
        &self.name
    }

    fn model(&self) -> &str {
        &self.model
    }

    async fn complete(&self, request: &ChatRequest) -> Result<ChatResponse, ProviderError> {
        self.requests.lock().unwrap_or_else(PoisonError::into_inner).push(request.clone());
        let answer = match &mut *self.script.lock().unwrap_or_else(PoisonError::into_inner) {
            Script::Queue(queue) => queue.pop_front().unwrap_or_else(|| {
                Err(ProviderError::new(
                    self,
                    ProviderErrorKind::BadResponse,
                    "the mock's script is used up",
                ))
            }),
            Script::Function(f) => f(request),
        };
        if let Some(delay) = self.delay {
            tokio::time::sleep(delay).await;
        }
        answer
    }
}

/// A text (JSON) answer counting `input` and `output` tokens.
pub(crate) fn text(text: impl Into<String>, input: u64, output: u64) -> Answer {
    Ok(ChatResponse {
        text: text.into(),
        tool_calls: Vec::new(),
        usage: Usage { input_tokens: input, output_tokens: output },
        timing: None,
    })
}

/// A JSON answer of `value`, counting 10 tokens in and 5 out.
pub(crate) fn json(value: serde_json::Value) -> Answer {
    text(value.to_string(), 10, 5)
}

/// An answer calling `tool` with the raw `arguments`, counting 10 tokens in and 5 out.
pub(crate) fn tool_call(id: &str, tool: &str, arguments: &str) -> Answer {
    Ok(ChatResponse {
        text: String::new(),
        tool_calls: vec![ProviderToolCall {
            id: id.into(),
            name: tool.into(),
            arguments: arguments.into(),
        }],
        usage: Usage { input_tokens: 10, output_tokens: 5 },
        timing: None,
    })
}

/// A failure of `kind` from the default mock (`mock`, `mock-model`).
pub(crate) fn failure(kind: ProviderErrorKind, message: &str) -> Answer {
    Err(ProviderError {
        provider: "mock".into(),
        model: "mock-model".into(),
        kind,
        message: message.into(),
        retry_after: None,
    })
}

/// A rate limit asking to wait `after`.
pub(crate) fn rate_limited(after: Duration) -> Answer {
    Err(ProviderError {
        provider: "mock".into(),
        model: "mock-model".into(),
        kind: ProviderErrorKind::RateLimited,
        message: "429 Too Many Requests".into(),
        retry_after: Some(after),
    })
}

/// The name of the JSON answer a request asks for (`review`, `vote`, ...), or `None` for a
/// text (tool loop) request.
pub(crate) fn decision(request: &ChatRequest) -> Option<&str> {
    match &request.response {
        ResponseFormat::Json { name, .. } => Some(name),
        ResponseFormat::Text => None,
    }
}

/// The JSON Schema of a request's answer.
pub(crate) fn schema(request: &ChatRequest) -> &serde_json::Value {
    match &request.response {
        ResponseFormat::Json { schema, .. } => schema,
        ResponseFormat::Text => panic!("not a JSON request: {request:?}"),
    }
}

/// The last message of a request.
pub(crate) fn last_message(request: &ChatRequest) -> &ChatMessage {
    request.messages.last().expect("a request without messages")
}

/// The texts of a request's user messages, in order.
pub(crate) fn user_texts(request: &ChatRequest) -> Vec<&str> {
    request.messages.iter().filter(|m| m.role == Role::User).map(|m| m.content.as_str()).collect()
}

/// A provider shared as the reasoner wants it, and kept for inspection.
pub(crate) fn shared(provider: MockProvider) -> (Arc<MockProvider>, Arc<dyn Provider>) {
    let provider = Arc::new(provider);
    let dynamic: Arc<dyn Provider> = provider.clone();
    (provider, dynamic)
}
