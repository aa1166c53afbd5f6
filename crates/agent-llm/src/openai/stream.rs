//! Streamed chat completions (`"stream": true`): the request's additions, and the answer put
//! together from its `chat.completion.chunk` events exactly as a whole answer reads.
//!
//! Each event's data is a chunk, `{"choices": [{"index", "delta": {"content", "tool_calls":
//! [{"index", "id", "function": {"name", "arguments"}}]}, "finish_reason"}], "usage"}`, or
//! `[DONE]`, the last. Only choice 0 is read. Content deltas are appended to the text; tool
//! call deltas are fragments keyed by their `index` (the id and name come once, the arguments
//! in pieces, appended as they come). With `stream_options: {include_usage: true}` the last
//! chunk before `[DONE]` has no choices and the call's `usage`. A chunk `{"error": {...}}`
//! (some servers report a failure mid-stream so) ends the call with that error, a chunk that is
//! not JSON or not this shape with [`ProviderErrorKind::BadResponse`]. A stream that ends
//! without `[DONE]` is complete if a choice said its `finish_reason`, else cut short
//! ([`ProviderErrorKind::Connection`], transient).

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};

use serde::Deserialize;
use serde_json::{Value, json};

use super::OpenAiProvider;
use crate::http::{HttpClient, Streamed};
use crate::provider::{
    ChatRequest, ChatResponse, ProviderError, ProviderErrorKind, ProviderToolCall, ResponseFormat,
    Usage,
};
use crate::sse::SseEvent;
use crate::stream::{Piece, SharedSink, TokenSink};
use crate::structured::StructuredMode;

/// What a provider remembers about streaming from its server.
#[derive(Debug, Default)]
pub(super) struct StreamState {
    /// A stream of this server ended without `usage`: the server ignores `stream_options`,
    /// so later calls are not streamed (a whole answer carries its usage).
    usage_missing: AtomicBool,
}

impl StreamState {
    /// Whether calls may be streamed: until a stream came without its usage.
    pub(super) fn streams(&self) -> bool {
        !self.usage_missing.load(Ordering::Relaxed)
    }

    /// Stops streaming: what an earlier provider for the same server learned.
    pub(super) fn stop(&self) {
        self.usage_missing.store(true, Ordering::Relaxed);
    }
}

/// The answer to `body`, `request` sent in `mode`, as [`super::from_wire`] reads it: streamed
/// to `sink` when there is one and the server streams with usage, else one whole answer
/// (delivered to `sink` whole, if there is one). In the tool call mode, the forced call's
/// arguments are the answer: they are delivered as its text.
pub(super) async fn answer(
    provider: &OpenAiProvider,
    request: &ChatRequest,
    mode: Option<StructuredMode>,
    body: Value,
    sink: Option<&SharedSink<'_>>,
) -> Result<ChatResponse, ProviderError> {
    let http = &provider.http;
    let json_tool = match (mode, &request.response) {
        (Some(StructuredMode::ToolCall), ResponseFormat::Json { name, .. }) => Some(name.as_str()),
        _ => None,
    };
    match sink {
        Some(shared) if provider.streaming.streams() => {
            let mut sink = AnswerSink { shared, json_tool };
            exchange(http, &provider.streaming, body, &mut sink).await
        }
        sink => {
            let completion: super::Completion = http
                .post(&body, |c: &super::Completion| {
                    c.usage.as_ref().map_or(0, |u| u.completion_tokens)
                })
                .await?;
            let response = super::from_wire(completion)
                .map_err(|e| http.error(ProviderErrorKind::BadResponse, e))?;
            if let Some(shared) = sink {
                crate::stream::deliver_whole(&response, &mut AnswerSink { shared, json_tool });
            }
            Ok(response)
        }
    }
}

/// The call's sink, the forced JSON tool's arguments delivered as text.
struct AnswerSink<'s, 'a> {
    shared: &'s SharedSink<'a>,
    json_tool: Option<&'s str>,
}

impl TokenSink for AnswerSink<'_, '_> {
    fn piece(&mut self, piece: Piece<'_>) {
        let piece = match piece {
            Piece::ToolArguments { tool, text, .. } if Some(tool) == self.json_tool => {
                Piece::Text(text)
            }
            piece => piece,
        };
        (&mut self.shared).piece(piece);
    }
}

/// Asks for `body` (a chat completions request) as a stream and returns the answer as
/// [`super::from_wire`] reads a whole one, its pieces delivered to `sink` as they arrive.
///
/// A stream without usage is recorded in `state` (later calls are not streamed) and its usage is
/// 0, as for a whole answer without `usage`: the server did not say, and no number is made up.
async fn exchange(
    http: &HttpClient,
    state: &StreamState,
    mut body: Value,
    sink: &mut dyn TokenSink,
) -> Result<ChatResponse, ProviderError> {
    body["stream"] = json!(true);
    body["stream_options"] = json!({"include_usage": true});
    let mut answer = Answer::default();
    let mut on_event = |event: SseEvent| answer.event(http, &event.data, &mut *sink);
    match http.post_stream(&body, &mut on_event).await? {
        Streamed::Whole(bytes) => {
            // A server that ignores `stream: true`: a whole answer.
            let completion: super::Completion = serde_json::from_slice(&bytes)
                .map_err(|e| http.bad_event(e, &String::from_utf8_lossy(&bytes)))?;
            let response = super::from_wire(completion)
                .map_err(|e| http.error(ProviderErrorKind::BadResponse, e))?;
            crate::stream::deliver_whole(&response, sink);
            return Ok(response);
        }
        Streamed::Complete => {}
        Streamed::Ended if answer.finished => {}
        Streamed::Ended => {
            return Err(http.error(
                ProviderErrorKind::Connection,
                "the stream ended before the answer was complete (no `[DONE]`, no `finish_reason`)",
            ));
        }
    }
    if answer.usage.is_none() && !state.usage_missing.swap(true, Ordering::Relaxed) {
        tracing::warn!(
            provider = http.provider(),
            model = %http.model(),
            "the server streamed an answer without its usage (it ignores `stream_options`): \
             that call counts 0 tokens, and this provider's later calls are not streamed"
        );
    }
    Ok(answer.into_response())
}

/// The answer so far.
#[derive(Debug, Default)]
struct Answer {
    text: String,
    /// Tool calls by their `index`: id, name, arguments so far.
    calls: BTreeMap<usize, (Option<String>, String, String)>,
    usage: Option<Usage>,
    /// A choice said its `finish_reason`.
    finished: bool,
}

impl Answer {
    /// Reads one event: `Ok(true)` for `[DONE]`.
    fn event(
        &mut self,
        http: &HttpClient,
        data: &str,
        sink: &mut dyn TokenSink,
    ) -> Result<bool, ProviderError> {
        let data = data.trim();
        if data == "[DONE]" {
            return Ok(true);
        }
        let chunk: Chunk = serde_json::from_str(data).map_err(|e| http.bad_event(e, data))?;
        if let Some(error) = chunk.error {
            return Err(mid_stream_error(http, &error));
        }
        if let Some(usage) = chunk.usage {
            self.usage = Some(Usage {
                input_tokens: usage.prompt_tokens,
                output_tokens: usage.completion_tokens,
            });
        }
        let Some(choice) = chunk.choices.into_iter().find(|c| c.index == 0) else {
            return Ok(false);
        };
        self.finished |= choice.finish_reason.is_some();
        let Some(delta) = choice.delta else {
            return Ok(false);
        };
        if let Some(content) = delta.content.filter(|c| !c.is_empty()) {
            self.text.push_str(&content);
            sink.piece(Piece::Text(&content));
        }
        for (position, call) in delta.tool_calls.unwrap_or_default().into_iter().enumerate() {
            let index = call.index.unwrap_or(position);
            let entry = self.calls.entry(index).or_default();
            if let Some(id) = call.id.filter(|id| !id.is_empty()) {
                entry.0 = Some(id);
            }
            let Some(function) = call.function else { continue };
            if let Some(name) = function.name {
                entry.1.push_str(&name);
            }
            let fragment = match function.arguments {
                Value::Null => continue,
                Value::String(text) => text,
                other => other.to_string(),
            };
            if !fragment.is_empty() {
                entry.2.push_str(&fragment);
                sink.piece(Piece::ToolArguments { index, tool: &entry.1, text: &fragment });
            }
        }
        Ok(false)
    }

    /// The answer, as [`super::from_wire`] reads a whole one.
    fn into_response(self) -> ChatResponse {
        let tool_calls = self
            .calls
            .into_values()
            .enumerate()
            .map(|(i, (id, name, arguments))| ProviderToolCall {
                id: id.unwrap_or_else(|| format!("call_{i}")),
                name,
                arguments: if arguments.is_empty() { "{}".to_owned() } else { arguments },
            })
            .collect();
        ChatResponse {
            text: self.text,
            tool_calls,
            usage: self.usage.unwrap_or_default(),
            timing: None,
        }
    }
}

/// An error the server reported in the stream, classified like an HTTP error body: a rate
/// limit, an overload or a server error is transient, anything else a refusal.
fn mid_stream_error(http: &HttpClient, error: &Value) -> ProviderError {
    let text = |key: &str| error.get(key).and_then(Value::as_str).unwrap_or_default().to_owned();
    let message = match error {
        Value::String(message) => message.clone(),
        _ => text("message"),
    };
    let code = format!("{} {}", text("type"), text("code")).to_lowercase();
    let kind = if code.contains("rate_limit") {
        ProviderErrorKind::RateLimited
    } else if code.contains("server") || code.contains("overload") || code.trim().is_empty() {
        ProviderErrorKind::Server
    } else {
        ProviderErrorKind::BadRequest
    };
    http.error(kind, format!("the server reported an error mid-stream: {message}"))
}

/// One `chat.completion.chunk` (the fields read).
#[derive(Deserialize)]
struct Chunk {
    #[serde(default)]
    choices: Vec<ChunkChoice>,
    #[serde(default)]
    usage: Option<ChunkUsage>,
    #[serde(default)]
    error: Option<Value>,
}

#[derive(Deserialize)]
struct ChunkChoice {
    #[serde(default)]
    index: u32,
    #[serde(default)]
    delta: Option<Delta>,
    #[serde(default)]
    finish_reason: Option<String>,
}

#[derive(Deserialize)]
struct Delta {
    #[serde(default)]
    content: Option<String>,
    #[serde(default)]
    tool_calls: Option<Vec<ToolDelta>>,
}

#[derive(Deserialize)]
struct ToolDelta {
    #[serde(default)]
    index: Option<usize>,
    #[serde(default)]
    id: Option<String>,
    #[serde(default)]
    function: Option<FunctionDelta>,
}

#[derive(Deserialize)]
struct FunctionDelta {
    #[serde(default)]
    name: Option<String>,
    #[serde(default)]
    arguments: Value,
}

#[derive(Deserialize)]
struct ChunkUsage {
    #[serde(default)]
    prompt_tokens: u64,
    #[serde(default)]
    completion_tokens: u64,
}
