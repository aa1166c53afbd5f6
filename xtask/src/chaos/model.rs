//! The chaos harness's model: an OpenAI-compatible server on loopback (hand-written HTTP/1.1 on
//! `std::net`, a thread per connection) that answers like a cooperative model and, on the calls
//! its seed picks, misbehaves: 429 with `retry-after-ms`, 500, no answer at all (the client's
//! `request_timeout` runs out), a garbage body or event, a stream cut short or one that stalls.
//!
//! The cooperative answers follow what `strata`'s reasoner asks (as the CLI tests' fake does):
//! `review` signs, `vote` picks the first option, `judge` says complete, `decompose` places each
//! step on the first executor its schema offers, the pre-run `probe` says ok; an executor's next
//! action calls the tool the prompt suggests (`The plan's call for it: {...}`) and, once a tool
//! result follows, `finish_subtask` with `success` = whether the result starts with `ok`.
//! Streamed requests (`"stream": true`) are answered as `chat.completion.chunk` events with the
//! usage chunk and `[DONE]`.

use std::collections::BTreeSet;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;

use serde_json::{Value, json};

/// How a faulted call misbehaves.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum ModelFault {
    /// 429 with `retry-after-ms`.
    RateLimited,
    /// 500.
    ServerError,
    /// No answer: the connection is held open past the client's timeout (half of the time the
    /// head and a first event are sent, then nothing: a stream that stalls).
    Timeout,
    /// 200 with a body (or an event) that is not JSON.
    Garbage,
    /// A stream (or a body) cut short: the connection closes mid-answer.
    Truncated,
}

impl ModelFault {
    pub(crate) fn name(self) -> &'static str {
        match self {
            ModelFault::RateLimited => "429",
            ModelFault::ServerError => "500",
            ModelFault::Timeout => "model_timeout",
            ModelFault::Garbage => "garbage",
            ModelFault::Truncated => "truncated_stream",
        }
    }
}

struct Shared {
    fault: Option<ModelFault>,
    /// The model calls (pre-run probe left out, counted from 0) that misbehave.
    faulted: BTreeSet<u64>,
    /// How long a `Timeout` holds the connection.
    hold: Duration,
    calls: AtomicU64,
    injected: AtomicU64,
    stop: AtomicBool,
    /// Connections held open by `Timeout`, closed when the server stops.
    held: Mutex<Vec<TcpStream>>,
}

/// The running server; stops when dropped.
pub(crate) struct FakeModel {
    addr: SocketAddr,
    shared: Arc<Shared>,
    acceptor: Option<JoinHandle<()>>,
}

impl FakeModel {
    /// A server on a free port of 127.0.0.1 that misbehaves as `fault` on the calls `faulted`.
    pub(crate) fn start(
        fault: Option<ModelFault>,
        faulted: BTreeSet<u64>,
        hold: Duration,
    ) -> anyhow::Result<Self> {
        let listener = TcpListener::bind("127.0.0.1:0")?;
        let addr = listener.local_addr()?;
        let shared = Arc::new(Shared {
            fault,
            faulted,
            hold,
            calls: AtomicU64::new(0),
            injected: AtomicU64::new(0),
            stop: AtomicBool::new(false),
            held: Mutex::new(Vec::new()),
        });
        let acceptor = {
            let shared = shared.clone();
            std::thread::spawn(move || {
                for stream in listener.incoming() {
                    if shared.stop.load(Ordering::SeqCst) {
                        break;
                    }
                    let Ok(stream) = stream else { continue };
                    let shared = shared.clone();
                    std::thread::spawn(move || serve(stream, &shared));
                }
            })
        };
        Ok(Self { addr, shared, acceptor: Some(acceptor) })
    }

    /// The `base_url` of the OpenAI-compatible provider.
    pub(crate) fn url(&self) -> String {
        format!("http://{}/v1", self.addr)
    }

    /// Model calls answered or faulted so far (the probe left out).
    pub(crate) fn calls(&self) -> u64 {
        self.shared.calls.load(Ordering::SeqCst)
    }

    /// Faults injected so far.
    pub(crate) fn injected(&self) -> u64 {
        self.shared.injected.load(Ordering::SeqCst)
    }
}

impl Drop for FakeModel {
    fn drop(&mut self) {
        self.shared.stop.store(true, Ordering::SeqCst);
        if let Ok(mut held) = self.shared.held.lock() {
            for stream in held.drain(..) {
                let _ = stream.shutdown(std::net::Shutdown::Both);
            }
        }
        let _ = TcpStream::connect(self.addr);
        if let Some(acceptor) = self.acceptor.take() {
            let _ = acceptor.join();
        }
    }
}

/// One request: method, path, body.
struct Request {
    method: String,
    path: String,
    body: Value,
}

fn serve(stream: TcpStream, shared: &Shared) {
    let _ = stream.set_read_timeout(Some(Duration::from_secs(120)));
    let Ok(mut writer) = stream.try_clone() else { return };
    let mut reader = BufReader::new(stream);
    while let Some(request) = read_request(&mut reader) {
        if shared.stop.load(Ordering::SeqCst) {
            return;
        }
        let keep_going = respond(&mut writer, shared, &request);
        let _ = writer.flush();
        if !keep_going {
            return;
        }
    }
}

fn read_request(reader: &mut BufReader<TcpStream>) -> Option<Request> {
    let mut line = String::new();
    if reader.read_line(&mut line).ok()? == 0 {
        return None;
    }
    let mut parts = line.split_whitespace();
    let method = parts.next()?.to_owned();
    let path = parts.next()?.to_owned();
    let (mut length, mut chunked) = (0usize, false);
    loop {
        let mut line = String::new();
        if reader.read_line(&mut line).ok()? == 0 {
            return None;
        }
        let line = line.trim_end_matches(['\r', '\n']);
        if line.is_empty() {
            break;
        }
        let (name, value) = line.split_once(':')?;
        match name.trim().to_ascii_lowercase().as_str() {
            "content-length" => length = value.trim().parse().ok()?,
            "transfer-encoding" => chunked = value.trim().eq_ignore_ascii_case("chunked"),
            _ => {}
        }
    }
    let body = if chunked {
        let mut body = Vec::new();
        loop {
            let mut size = String::new();
            reader.read_line(&mut size).ok()?;
            let size = usize::from_str_radix(size.trim().split(';').next()?, 16).ok()?;
            let mut chunk = vec![0u8; size + 2];
            reader.read_exact(&mut chunk).ok()?;
            if size == 0 {
                break body;
            }
            body.extend_from_slice(&chunk[..size]);
        }
    } else {
        let mut body = vec![0u8; length];
        reader.read_exact(&mut body).ok()?;
        body
    };
    Some(Request { method, path, body: serde_json::from_slice(&body).unwrap_or(Value::Null) })
}

/// Writes a whole answer; `false` when the connection is to be closed.
fn whole(writer: &mut TcpStream, status: u16, extra: &str, body: &str) -> bool {
    let reason = match status {
        200 => "OK",
        404 => "Not Found",
        429 => "Too Many Requests",
        _ => "Internal Server Error",
    };
    let head = format!(
        "HTTP/1.1 {status} {reason}\r\ncontent-type: application/json\r\n{extra}content-length: {}\r\nconnection: keep-alive\r\n\r\n",
        body.len()
    );
    writer.write_all(head.as_bytes()).and_then(|()| writer.write_all(body.as_bytes())).is_ok()
}

fn respond(writer: &mut TcpStream, shared: &Shared, request: &Request) -> bool {
    let path = request.path.split_once('?').map_or(request.path.as_str(), |(p, _)| p);
    match (request.method.as_str(), path) {
        ("GET", "/v1/models") => {
            let body = json!({"object": "list", "data": [{"id": "fake-model", "object": "model", "owned_by": "chaos"}]});
            return whole(writer, 200, "", &body.to_string());
        }
        ("POST", "/v1/chat/completions") => {}
        _ => return whole(writer, 404, "", r#"{"error": {"message": "no such route"}}"#),
    }
    let body = &request.body;
    let question = Question::of(body);
    let probe = matches!(&question, Question::Json { name, .. } if name == "probe");
    let streamed = body["stream"] == json!(true);
    if !probe {
        let call = shared.calls.fetch_add(1, Ordering::SeqCst);
        if let Some(fault) = shared.fault
            && shared.faulted.contains(&call)
        {
            shared.injected.fetch_add(1, Ordering::SeqCst);
            return misbehave(writer, shared, fault, streamed);
        }
    }
    let reply = match question {
        Question::Json { name, schema } => Reply::Text(decide(&name, &schema).to_string()),
        Question::Tools => next_action(body),
        Question::Other => Reply::Text("hello".into()),
    };
    let usage_in = body.to_string().len() / 4;
    if streamed {
        stream(writer, &reply, usage_in, None)
    } else {
        answer_whole(writer, &reply, usage_in)
    }
}

fn misbehave(writer: &mut TcpStream, shared: &Shared, fault: ModelFault, streamed: bool) -> bool {
    match fault {
        ModelFault::RateLimited => whole(
            writer,
            429,
            "retry-after-ms: 200\r\n",
            r#"{"error": {"message": "rate limit reached, slow down", "type": "rate_limit_error"}}"#,
        ),
        ModelFault::ServerError => whole(
            writer,
            500,
            "",
            r#"{"error": {"message": "the chaos server failed", "type": "server_error"}}"#,
        ),
        ModelFault::Timeout => {
            if streamed {
                // A stream that starts, then stalls.
                let head = "HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\nconnection: close\r\n\r\n";
                let first = chunk(json!({"role": "assistant", "content": ""}), None);
                let _ = writer.write_all(head.as_bytes());
                let _ = writer.write_all(format!("data: {first}\n\n").as_bytes());
                let _ = writer.flush();
            }
            if let (Ok(clone), Ok(mut held)) = (writer.try_clone(), shared.held.lock()) {
                held.push(clone);
            }
            let step = Duration::from_millis(50);
            let mut waited = Duration::ZERO;
            while waited < shared.hold && !shared.stop.load(Ordering::SeqCst) {
                std::thread::sleep(step);
                waited += step;
            }
            false
        }
        ModelFault::Garbage => {
            if streamed {
                let head = "HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\nconnection: close\r\n\r\n";
                let _ = writer.write_all(head.as_bytes());
                let _ = writer.write_all(b"data: {\"choices\": [{\"index\": 0, \"delta\": {\"content\n\ndata: \xff\xfe garbage }}}\n\n");
                false
            } else {
                whole(writer, 200, "", "{\"id\": \"chatcmpl\", \"choices\": [{\"mess")
            }
        }
        ModelFault::Truncated => {
            let reply = Reply::Text(json!({"verdict": "sign", "reason": "cut"}).to_string());
            if streamed {
                stream(writer, &reply, 10, Some(1))
            } else {
                let head = "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: 4000\r\nconnection: close\r\n\r\n{\"id\": \"chatcmpl-chaos\", \"choices\": [";
                let _ = writer.write_all(head.as_bytes());
                false
            }
        }
    }
}

/// The answer as one body.
fn answer_whole(writer: &mut TcpStream, reply: &Reply, usage_in: usize) -> bool {
    let message = match reply {
        Reply::Text(text) => json!({"role": "assistant", "content": text}),
        Reply::Call(name, args) => json!({
            "role": "assistant", "content": null,
            "tool_calls": [{"id": "call_chaos_1", "type": "function", "function": {"name": name, "arguments": args.to_string()}}],
        }),
    };
    let body = json!({
        "id": "chatcmpl-chaos", "object": "chat.completion", "model": "fake-model",
        "choices": [{"index": 0, "message": message, "finish_reason": "stop"}],
        "usage": {"prompt_tokens": usage_in, "completion_tokens": 20, "total_tokens": usage_in + 20},
    });
    whole(writer, 200, "", &body.to_string())
}

fn chunk(delta: Value, finish: Option<&str>) -> Value {
    json!({"id": "chatcmpl-chaos", "object": "chat.completion.chunk", "model": "fake-model",
        "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]})
}

/// The answer as server-sent events; with `cut_after`, the connection closes after that many
/// events (no `finish_reason`, no `[DONE]`).
fn stream(
    writer: &mut TcpStream,
    reply: &Reply,
    usage_in: usize,
    cut_after: Option<usize>,
) -> bool {
    let mut events: Vec<Value> = Vec::new();
    match reply {
        Reply::Text(text) => {
            let cut = text.char_indices().nth(text.chars().count() / 2).map_or(0, |(i, _)| i);
            events.push(chunk(json!({"role": "assistant", "content": &text[..cut]}), None));
            events.push(chunk(json!({"content": &text[cut..]}), None));
            events.push(chunk(json!({}), Some("stop")));
        }
        Reply::Call(name, args) => {
            let args = args.to_string();
            let cut = args.len() / 2;
            let cut = (0..=cut).rev().find(|i| args.is_char_boundary(*i)).unwrap_or(0);
            events.push(chunk(
                json!({"role": "assistant", "tool_calls": [{"index": 0, "id": "call_chaos_1", "type": "function", "function": {"name": name, "arguments": &args[..cut]}}]}),
                None,
            ));
            events.push(chunk(
                json!({"tool_calls": [{"index": 0, "function": {"arguments": &args[cut..]}}]}),
                None,
            ));
            events.push(chunk(json!({}), Some("tool_calls")));
        }
    }
    events.push(json!({"id": "chatcmpl-chaos", "object": "chat.completion.chunk", "choices": [],
        "usage": {"prompt_tokens": usage_in, "completion_tokens": 20, "total_tokens": usage_in + 20}}));
    let head = "HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ncache-control: no-cache\r\nconnection: close\r\n\r\n";
    if writer.write_all(head.as_bytes()).is_err() {
        return false;
    }
    for (i, event) in events.iter().enumerate() {
        if cut_after.is_some_and(|n| i >= n) {
            return false;
        }
        if writer.write_all(format!("data: {event}\n\n").as_bytes()).is_err() {
            return false;
        }
        let _ = writer.flush();
    }
    let _ = writer.write_all(b"data: [DONE]\n\n");
    false
}

/// What a request asks.
enum Question {
    Json { name: String, schema: Value },
    Tools,
    Other,
}

impl Question {
    fn of(body: &Value) -> Self {
        if body.pointer("/response_format/type").and_then(Value::as_str) == Some("json_object") {
            let schema = body.pointer("/response_format/schema").cloned().unwrap_or(Value::Null);
            let has = |field: &str| schema.pointer(&format!("/properties/{field}")).is_some();
            let name = [
                ("verdict", "review"),
                ("choice", "vote"),
                ("complete", "judge"),
                ("placements", "decompose"),
                ("ok", "probe"),
            ]
            .into_iter()
            .find(|(field, _)| has(field))
            .map_or("unknown", |(_, name)| name);
            return Question::Json { name: name.to_owned(), schema };
        }
        if let Some(js) = body.pointer("/response_format/json_schema") {
            return Question::Json {
                name: js["name"].as_str().unwrap_or_default().to_owned(),
                schema: js["schema"].clone(),
            };
        }
        if body["tools"].as_array().is_some_and(|t| !t.is_empty()) {
            return Question::Tools;
        }
        Question::Other
    }
}

enum Reply {
    Text(String),
    Call(String, Value),
}

fn decide(name: &str, schema: &Value) -> Value {
    match name {
        "review" => json!({"verdict": "sign", "reason": "looks safe"}),
        "vote" => {
            let first = schema.pointer("/properties/choice/enum/0").cloned().unwrap_or(Value::Null);
            json!({"choice": first, "reason": "the first option is fine"})
        }
        "judge" => json!({"complete": true, "summary": "done"}),
        "probe" => json!({"ok": true}),
        "decompose" => {
            let placements = schema
                .pointer("/properties/placements/properties")
                .and_then(Value::as_object)
                .into_iter()
                .flatten()
                .map(|(step, allowed)| (step.clone(), allowed["enum"][0].clone()))
                .collect::<serde_json::Map<String, Value>>();
            json!({"placements": placements})
        }
        other => json!({"error": format!("the chaos model does not know the decision `{other}`")}),
    }
}

/// An executor's next action: the plan's suggested call, then `finish_subtask`.
fn next_action(body: &Value) -> Reply {
    let messages: Vec<(&str, String)> = body["messages"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|m| {
            let text = m["content"].as_str().map(str::to_owned).unwrap_or_default();
            (m["role"].as_str().unwrap_or_default(), text)
        })
        .collect();
    let finish = |success: bool, summary: &str| {
        Reply::Call("finish_subtask".into(), json!({"success": success, "summary": summary}))
    };
    let Some(last_user) =
        messages.iter().rposition(|(role, text)| *role == "user" && !text.is_empty())
    else {
        return finish(false, "no prompt to act on");
    };
    if let Some((_, result)) =
        messages[last_user + 1..].iter().rev().find(|(role, _)| *role == "tool")
    {
        let ok = result.starts_with("ok");
        return finish(ok, if ok { "the tool succeeded" } else { "the tool failed" });
    }
    let suggested =
        messages[last_user].1.split_once("The plan's call for it: ").and_then(|(_, rest)| {
            let (call, _) = rest.split_once('\n')?;
            let call: Value = serde_json::from_str(call).ok()?;
            Some((call["tool"].as_str()?.to_owned(), call["arguments"].clone()))
        });
    match suggested {
        Some((tool, args)) => Reply::Call(tool, args),
        None => finish(false, "the prompt suggests no tool"),
    }
}
