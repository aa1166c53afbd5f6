//! Streamed messages (`"stream": true`): the answer put together from the Messages API's
//! events exactly as a whole answer reads.
//!
//! The events: `message_start` (the message, its `usage.input_tokens`), per content block
//! `content_block_start` (a `text` or `tool_use` block with its id and name),
//! `content_block_delta` (`text_delta` text, or `input_json_delta` pieces of the tool's input
//! as JSON text), `content_block_stop`, then `message_delta` (`usage.output_tokens`, the total
//! so far) and `message_stop`, the last; `ping` is ignored, `error` ends the call with the
//! error it carries (`overloaded_error`, `api_error`: transient). An event that is not JSON or
//! not this shape is [`ProviderErrorKind::BadResponse`]; a stream that ends before
//! `message_stop` was cut short ([`ProviderErrorKind::Connection`], transient).
//!
//! The forced JSON tool's input (`json_tool`) is the answer's text, streamed as
//! [`Piece::Text`]; other tool calls' inputs stream as [`Piece::ToolArguments`].

use serde::Deserialize;
use serde_json::{Value, json};

use crate::http::{HttpClient, Streamed};
use crate::provider::{ChatResponse, ProviderError, ProviderErrorKind, ProviderToolCall, Usage};
use crate::sse::SseEvent;
use crate::stream::{Piece, SharedSink, TokenSink};

/// The answer to `body` as [`super::from_wire`] reads it, `json_tool` naming the forced tool
/// of a JSON request: streamed to `sink` when there is one, else one whole answer.
pub(super) async fn answer(
    http: &HttpClient,
    body: Value,
    json_tool: Option<&str>,
    sink: Option<&SharedSink<'_>>,
) -> Result<ChatResponse, ProviderError> {
    match sink {
        Some(mut shared) => exchange(http, body, json_tool, &mut shared).await,
        None => {
            let message: super::WireResponse = http
                .post(&body, |m: &super::WireResponse| {
                    m.usage.as_ref().map_or(0, |u| u.output_tokens)
                })
                .await?;
            super::from_wire(message, json_tool)
                .map_err(|e| http.error(ProviderErrorKind::BadResponse, e))
        }
    }
}

/// Asks for `body` (a Messages request) as a stream and returns the answer as
/// [`super::from_wire`] reads a whole one, its pieces delivered to `sink` as they arrive.
async fn exchange(
    http: &HttpClient,
    mut body: Value,
    json_tool: Option<&str>,
    sink: &mut dyn TokenSink,
) -> Result<ChatResponse, ProviderError> {
    body["stream"] = json!(true);
    let mut answer = Answer { json_tool, ..Answer::default() };
    let mut on_event = |event: SseEvent| answer.event(http, &event, &mut *sink);
    match http.post_stream(&body, &mut on_event).await? {
        Streamed::Whole(bytes) => {
            // A server (a proxy) that ignores `stream: true`: a whole answer.
            let message: super::WireResponse = serde_json::from_slice(&bytes)
                .map_err(|e| http.bad_event(e, &String::from_utf8_lossy(&bytes)))?;
            let response = super::from_wire(message, json_tool)
                .map_err(|e| http.error(ProviderErrorKind::BadResponse, e))?;
            crate::stream::deliver_whole(&response, sink);
            Ok(response)
        }
        Streamed::Complete => answer.into_response(http),
        Streamed::Ended => Err(http.error(
            ProviderErrorKind::Connection,
            "the stream ended before the answer was complete (no `message_stop`)",
        )),
    }
}

/// One content block so far.
#[derive(Debug)]
enum Block {
    Text,
    /// A `tool_use` block: id, name, input as JSON text so far, and, for a tool call other
    /// than the JSON answer's, its index among the answer's tool calls.
    Tool {
        id: String,
        name: String,
        start: Value,
        input: String,
        call: Option<usize>,
    },
    Other,
}

/// The answer so far.
#[derive(Debug, Default)]
struct Answer<'a> {
    json_tool: Option<&'a str>,
    /// The text blocks' text, in order.
    text: String,
    blocks: Vec<(usize, Block)>,
    /// Tool calls other than the JSON answer so far.
    calls: usize,
    /// The JSON answer's block has begun.
    json_started: bool,
    input_tokens: Option<u64>,
    output_tokens: Option<u64>,
}

impl Answer<'_> {
    /// Reads one event: `Ok(true)` for `message_stop`.
    fn event(
        &mut self,
        http: &HttpClient,
        event: &SseEvent,
        sink: &mut dyn TokenSink,
    ) -> Result<bool, ProviderError> {
        let data = event.data.trim();
        let wire: Event = serde_json::from_str(data).map_err(|e| http.bad_event(e, data))?;
        match wire {
            Event::MessageStart { message } => {
                if let Some(usage) = message.usage {
                    self.input_tokens = usage.input_tokens.or(self.input_tokens);
                    self.output_tokens = usage.output_tokens.or(self.output_tokens);
                }
            }
            Event::ContentBlockStart { index, content_block } => {
                let block = match content_block {
                    StartBlock::Text { text } => {
                        self.push_text(&text, sink);
                        Block::Text
                    }
                    StartBlock::ToolUse { id, name, input: start } => {
                        let answer = self.json_tool == Some(name.as_str()) && !self.json_started;
                        self.json_started |= answer;
                        let call = (!answer).then(|| {
                            self.calls += 1;
                            self.calls - 1
                        });
                        Block::Tool { id, name, start, input: String::new(), call }
                    }
                    StartBlock::Other => Block::Other,
                };
                self.blocks.push((index, block));
            }
            Event::ContentBlockDelta { index, delta } => {
                let block = self.blocks.iter_mut().rev().find(|(i, _)| *i == index);
                match (delta, block) {
                    (BlockDelta::TextDelta { text }, Some((_, Block::Text))) => {
                        self.text.push_str(&text);
                        sink.piece(Piece::Text(&text));
                    }
                    (
                        BlockDelta::InputJsonDelta { partial_json },
                        Some((_, Block::Tool { name, input, call, .. })),
                    ) => {
                        input.push_str(&partial_json);
                        match call {
                            _ if partial_json.is_empty() => {}
                            Some(index) => sink.piece(Piece::ToolArguments {
                                index: *index,
                                tool: name,
                                text: &partial_json,
                            }),
                            None => sink.piece(Piece::Text(&partial_json)),
                        }
                    }
                    (BlockDelta::Other, _) | (_, Some((_, Block::Other))) => {}
                    (_, _) => {
                        return Err(http.bad_event(
                            format!("a delta that does not fit content block {index}"),
                            data,
                        ));
                    }
                }
            }
            Event::MessageDelta { usage } => {
                if let Some(usage) = usage {
                    self.input_tokens = usage.input_tokens.or(self.input_tokens);
                    self.output_tokens = usage.output_tokens.or(self.output_tokens);
                }
            }
            Event::MessageStop => return Ok(true),
            Event::Error { error } => return Err(mid_stream_error(http, &error)),
            Event::ContentBlockStop | Event::Ping | Event::Other => {}
        }
        Ok(false)
    }

    fn push_text(&mut self, text: &str, sink: &mut dyn TokenSink) {
        if !text.is_empty() {
            self.text.push_str(text);
            sink.piece(Piece::Text(text));
        }
    }

    /// The answer, as [`super::from_wire`] reads a whole one: each tool's input parsed and
    /// written out again (so the arguments are the same text as a whole answer's).
    fn into_response(self, http: &HttpClient) -> Result<ChatResponse, ProviderError> {
        let mut json_answer = None;
        let mut tool_calls = Vec::new();
        for (_, block) in self.blocks {
            let Block::Tool { id, name, start, input, call } = block else { continue };
            let value: Value = if input.trim().is_empty() {
                // No delta: the input the block started with (`{}` as the API sends it).
                if start.is_null() { json!({}) } else { start }
            } else {
                serde_json::from_str(&input).map_err(|e| {
                    http.bad_event(
                        format!("tool_use `{name}`: its input is not JSON ({e})"),
                        &input,
                    )
                })?
            };
            let arguments = value.to_string();
            match call {
                None => json_answer = Some(arguments),
                Some(_) => tool_calls.push(ProviderToolCall { id, name, arguments }),
            }
        }
        Ok(ChatResponse {
            text: json_answer.unwrap_or(self.text),
            tool_calls,
            usage: Usage {
                input_tokens: self.input_tokens.unwrap_or_default(),
                output_tokens: self.output_tokens.unwrap_or_default(),
            },
            timing: None,
        })
    }
}

/// An `error` event, classified like an HTTP error body.
fn mid_stream_error(http: &HttpClient, error: &ErrorBody) -> ProviderError {
    let kind = match error.kind.as_str() {
        "overloaded_error" | "api_error" => ProviderErrorKind::Server,
        "rate_limit_error" => ProviderErrorKind::RateLimited,
        "authentication_error" => ProviderErrorKind::Unauthorized,
        "permission_error" => ProviderErrorKind::Forbidden,
        "not_found_error" => ProviderErrorKind::UnknownModel,
        _ => ProviderErrorKind::BadRequest,
    };
    http.error(
        kind,
        format!("the server reported an error mid-stream: {}: {}", error.kind, error.message),
    )
}

/// One event's data (the fields read).
#[derive(Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
enum Event {
    MessageStart {
        message: StartMessage,
    },
    ContentBlockStart {
        index: usize,
        content_block: StartBlock,
    },
    ContentBlockDelta {
        index: usize,
        delta: BlockDelta,
    },
    ContentBlockStop,
    MessageDelta {
        #[serde(default)]
        usage: Option<WireUsage>,
    },
    MessageStop,
    Ping,
    Error {
        error: ErrorBody,
    },
    /// Events added to the API later.
    #[serde(other)]
    Other,
}

#[derive(Deserialize)]
struct StartMessage {
    #[serde(default)]
    usage: Option<WireUsage>,
}

#[derive(Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
enum StartBlock {
    Text {
        #[serde(default)]
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

#[derive(Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
enum BlockDelta {
    TextDelta {
        text: String,
    },
    InputJsonDelta {
        #[serde(default)]
        partial_json: String,
    },
    /// Thinking, signatures and other deltas.
    #[serde(other)]
    Other,
}

#[derive(Deserialize)]
struct WireUsage {
    #[serde(default)]
    input_tokens: Option<u64>,
    #[serde(default)]
    output_tokens: Option<u64>,
}

#[derive(Deserialize)]
struct ErrorBody {
    #[serde(rename = "type", default)]
    kind: String,
    #[serde(default)]
    message: String,
}
