//! How [`FakeModel`](super::FakeModel) answers a chat completion asked with `"stream": true`:
//! the handler's completion body as OpenAI's `chat.completion.chunk` events
//! (`text/event-stream`, HTTP chunked), in the [`StreamStyle`] set, including the broken ones a
//! test needs (a server that hangs mid-stream, one that sends malformed JSON).

use serde_json::{Value, json};
use tokio::io::AsyncWriteExt;
use tokio::net::TcpStream;

/// How a [`FakeModel`](super::FakeModel) answers a request with `"stream": true`
/// ([`FakeModel::set_stream_style`](super::FakeModel::set_stream_style)).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub enum StreamStyle {
    /// The completion as events: the text in pieces of [`PIECE_CHARS`] characters, each tool
    /// call's id and name and then its arguments in such pieces, a chunk with the
    /// `finish_reason`, the `usage` chunk (when the request asked for it with
    /// `stream_options.include_usage`) and `[DONE]`.
    #[default]
    Chunks,
    /// As [`Chunks`](Self::Chunks), without the `usage` chunk (a server that ignores
    /// `stream_options`).
    NoUsage,
    /// The first half of the events, then nothing, the connection held open (a server that
    /// hangs mid-stream).
    Stall,
    /// The first half of the events, then an event whose data is not JSON.
    Malformed,
    /// The whole completion as one JSON body (a server that does not stream).
    Whole,
}

/// Characters of text or arguments per event.
pub const PIECE_CHARS: usize = 4;

/// The events (each one's data) of `completion`, a chat completion body.
pub(super) fn events(completion: &Value, style: StreamStyle, include_usage: bool) -> Vec<String> {
    let chunk = |delta: Value, finish: Value| {
        json!({
            "id": completion["id"],
            "object": "chat.completion.chunk",
            "created": completion["created"],
            "model": completion["model"],
            "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
        })
        .to_string()
    };
    let message = &completion["choices"][0]["message"];
    let mut events = vec![chunk(json!({"role": "assistant", "content": ""}), Value::Null)];
    let text = message["content"].as_str().unwrap_or_default();
    for piece in pieces(text) {
        events.push(chunk(json!({"content": piece}), Value::Null));
    }
    for (index, call) in message["tool_calls"].as_array().into_iter().flatten().enumerate() {
        let head = json!({"index": index, "id": call["id"], "type": "function",
            "function": {"name": call["function"]["name"], "arguments": ""}});
        events.push(chunk(json!({"tool_calls": [head]}), Value::Null));
        let arguments = call["function"]["arguments"].as_str().unwrap_or_default();
        for piece in pieces(arguments) {
            let part = json!({"index": index, "function": {"arguments": piece}});
            events.push(chunk(json!({"tool_calls": [part]}), Value::Null));
        }
    }
    let finish = completion["choices"][0]["finish_reason"].clone();
    events.push(chunk(json!({}), if finish.is_null() { json!("stop") } else { finish }));
    if include_usage && style != StreamStyle::NoUsage {
        events.push(
            json!({"id": completion["id"], "object": "chat.completion.chunk", "choices": [],
                "usage": completion["usage"]})
            .to_string(),
        );
    }
    events.push("[DONE]".to_owned());
    match style {
        StreamStyle::Stall => events.truncate(events.len() / 2),
        StreamStyle::Malformed => {
            events.truncate(events.len() / 2);
            events.push("{\"choices\": [{\"index\": 0, \"delta\": {\"content\": \"x".to_owned());
        }
        StreamStyle::Chunks | StreamStyle::NoUsage | StreamStyle::Whole => {}
    }
    events
}

/// `text` in pieces of [`PIECE_CHARS`] characters.
fn pieces(text: &str) -> Vec<String> {
    let chars: Vec<char> = text.chars().collect();
    chars.chunks(PIECE_CHARS).map(|c| c.iter().collect()).collect()
}

/// Writes `events` as a `200` event stream, one HTTP chunk per event, flushed one by one;
/// with `stall`, holds the connection open after them, forever (until the server is dropped).
pub(super) async fn reply(
    stream: &mut TcpStream,
    events: &[String],
    stall: bool,
) -> std::io::Result<()> {
    let head = "HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ncache-control: no-cache\r\n\
                transfer-encoding: chunked\r\nconnection: keep-alive\r\n\r\n";
    stream.write_all(head.as_bytes()).await?;
    for event in events {
        let data = format!("data: {event}\n\n");
        stream.write_all(format!("{:x}\r\n{data}\r\n", data.len()).as_bytes()).await?;
        stream.flush().await?;
    }
    if stall {
        std::future::pending::<()>().await;
    }
    stream.write_all(b"0\r\n\r\n").await?;
    stream.flush().await
}
