//! A fake LLM server on loopback for the end-to-end tests: hand-written HTTP/1.1 on
//! `std::net`, one thread per connection, speaking the OpenAI chat completions wire format
//! (`POST /v1/chat/completions`) and Anthropic's Messages API (`POST /v1/messages`).
//!
//! In [`Mode::Sensible`] it answers like a cooperative model that reads the prompts the
//! reasoner writes:
//! - a structured decision (`response_format.json_schema` for OpenAI, a forced tool for
//!   Anthropic) named `review` signs, `vote` picks the first option, `judge` says complete,
//!   `decompose` places every step (from the schema's step enum) on the executor the plan names
//!   or else the first one (from the assignee enum) whose tools, read from the prompt's
//!   `Executors:` lines, hold the step's tool, read from its `Steps:` lines;
//! - a request with tools (an executor's next action) calls the tool the prompt suggests with
//!   the suggested arguments when no tool result follows the last user message, and
//!   `finish_subtask` otherwise, with `success` = whether the last tool result starts with `ok`.
//!
//! Usage: prompt tokens = body length / 4, completion tokens = 20. It also lists its models
//! (`GET /v1/models`, both vendors' shape `{"data": [{"id": ...}]}`), which `strata run` asks
//! before it starts. Every request is recorded (method, path, headers, body) so tests can check
//! what the client sent. Other modes answer with a 401 (echoing the key it was sent, as real APIs
//! half do, to test that the client redacts it), a 500, or a well-formed answer that is not what
//! was asked.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use serde_json::{Value, json};

/// How the server answers.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Mode {
    /// Like a cooperative model.
    Sensible,
    /// Every request: 401, with the key it was sent echoed in the error message.
    Unauthorized,
    /// The model list as usual, but every model call: 401 (a key allowed to list models but
    /// not to use them, or one revoked after the run started).
    UnauthorizedCalls,
    /// The model list as usual, but every model call: 500.
    ServerError,
    /// Every model call: 200 with an answer that does not fit the question (text that is not
    /// JSON, no tool call).
    Invalid,
    /// Like llama-cpp-python 0.3: `response_format: json_schema` is refused with HTTP 500 and
    /// pydantic's validation error; `json_object` with a `schema` is answered.
    JsonObjectOnly,
    /// Like [`Mode::Sensible`], but an executor obeys what its first tool result tells it: after
    /// the call the plan suggests, it makes, one by one, every call written in that result as a
    /// line `DO <tool> <JSON arguments>`, then finishes. A model falling for a prompt injection.
    Obedient,
}

/// One request as the server read it.
#[derive(Clone, Debug)]
pub(crate) struct Recorded {
    pub(crate) method: String,
    pub(crate) path: String,
    /// Header names lowercased, in the order sent.
    pub(crate) headers: Vec<(String, String)>,
    /// The body as sent.
    pub(crate) body: String,
    /// When it was read, since the server started.
    pub(crate) at: Duration,
}

impl Recorded {
    /// The first header called `name` (any case).
    pub(crate) fn header(&self, name: &str) -> Option<&str> {
        let name = name.to_ascii_lowercase();
        self.headers.iter().find(|(n, _)| *n == name).map(|(_, v)| v.as_str())
    }

    /// The body as JSON (`Null` if it is not JSON).
    pub(crate) fn json(&self) -> Value {
        serde_json::from_str(&self.body).unwrap_or(Value::Null)
    }

    /// The decision a structured request asks for (`review`, `vote`, `decompose`, `judge`),
    /// or `next_action` for a tool call request.
    pub(crate) fn decision(&self) -> String {
        let body = self.json();
        match Question::of(&body) {
            Question::Json { name, .. } => name,
            Question::Tools => "next_action".into(),
            Question::Other => "other".into(),
        }
    }
}

/// The models the server lists.
pub(crate) const SERVED_MODELS: [&str; 2] = ["fake-model", "fake-claude"];

struct Shared {
    mode: Mode,
    requests: Mutex<Vec<Recorded>>,
    stop: AtomicBool,
    started: Instant,
}

/// The running server; stops (and joins its accept thread) when dropped.
pub(crate) struct FakeLlm {
    addr: SocketAddr,
    shared: Arc<Shared>,
    acceptor: Option<JoinHandle<()>>,
}

impl FakeLlm {
    /// A server on `127.0.0.1` on a free port.
    pub(crate) fn start(mode: Mode) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").expect("cannot bind the fake LLM server");
        let addr = listener.local_addr().unwrap();
        let shared = Arc::new(Shared {
            mode,
            requests: Mutex::new(Vec::new()),
            stop: AtomicBool::new(false),
            started: Instant::now(),
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
        Self { addr, shared, acceptor: Some(acceptor) }
    }

    /// The `base_url` of an OpenAI-compatible provider: `http://127.0.0.1:PORT/v1`.
    pub(crate) fn openai_url(&self) -> String {
        format!("http://{}/v1", self.addr)
    }

    /// The `base_url` of an Anthropic provider: `http://127.0.0.1:PORT`.
    pub(crate) fn anthropic_url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// Every request so far, in the order they arrived.
    pub(crate) fn requests(&self) -> Vec<Recorded> {
        self.shared.requests.lock().unwrap().clone()
    }

    /// The model calls of the run so far (`POST`s; the model list and the pre-run check's
    /// probe are left out).
    pub(crate) fn calls(&self) -> Vec<Recorded> {
        self.requests()
            .into_iter()
            .filter(|r| r.method == "POST" && r.decision() != "probe")
            .collect()
    }

    /// The pre-run check's structured probes (`strata` sends one per server and model).
    pub(crate) fn probes(&self) -> Vec<Recorded> {
        self.requests()
            .into_iter()
            .filter(|r| r.method == "POST" && r.decision() == "probe")
            .collect()
    }
}

impl Drop for FakeLlm {
    fn drop(&mut self) {
        self.shared.stop.store(true, Ordering::SeqCst);
        // Wake the accept loop so it sees the flag.
        let _ = TcpStream::connect(self.addr);
        if let Some(acceptor) = self.acceptor.take() {
            let _ = acceptor.join();
        }
    }
}

/// Serves one connection: requests one after another (keep-alive) until the client closes it.
fn serve(stream: TcpStream, shared: &Shared) {
    let Ok(mut writer) = stream.try_clone() else { return };
    let mut reader = BufReader::new(stream);
    while let Some(mut request) = read_request(&mut reader) {
        request.at = shared.started.elapsed();
        if shared.stop.load(Ordering::SeqCst) {
            return;
        }
        shared.requests.lock().unwrap().push(request.clone());
        let (status, body) = answer(shared.mode, &request);
        let reason = match status {
            200 => "OK",
            401 => "Unauthorized",
            404 => "Not Found",
            500 => "Internal Server Error",
            _ => "Other",
        };
        let head = format!(
            "HTTP/1.1 {status} {reason}\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: keep-alive\r\n\r\n",
            body.len()
        );
        if writer
            .write_all(head.as_bytes())
            .and_then(|()| writer.write_all(body.as_bytes()))
            .is_err()
        {
            return;
        }
        let _ = writer.flush();
    }
}

/// Reads one request; `None` at the end of the connection or on anything malformed.
fn read_request(reader: &mut BufReader<TcpStream>) -> Option<Recorded> {
    let mut line = String::new();
    if reader.read_line(&mut line).ok()? == 0 {
        return None;
    }
    let mut parts = line.split_whitespace();
    let method = parts.next()?.to_owned();
    let path = parts.next()?.to_owned();
    let mut headers = Vec::new();
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
        headers.push((name.trim().to_ascii_lowercase(), value.trim().to_owned()));
    }
    let header = |name: &str| headers.iter().find(|(n, _)| n == name).map(|(_, v)| v.as_str());
    let body = if header("transfer-encoding").is_some_and(|v| v.eq_ignore_ascii_case("chunked")) {
        read_chunked(reader)?
    } else {
        let length: usize = header("content-length").map_or(Some(0), |v| v.parse().ok())?;
        let mut body = vec![0u8; length];
        reader.read_exact(&mut body).ok()?;
        body
    };
    Some(Recorded {
        method,
        path,
        headers,
        body: String::from_utf8_lossy(&body).into_owned(),
        at: Duration::ZERO,
    })
}

fn read_chunked(reader: &mut BufReader<TcpStream>) -> Option<Vec<u8>> {
    let mut body = Vec::new();
    loop {
        let mut size = String::new();
        reader.read_line(&mut size).ok()?;
        let size = usize::from_str_radix(size.trim().split(';').next()?, 16).ok()?;
        let mut chunk = vec![0u8; size + 2];
        reader.read_exact(&mut chunk).ok()?;
        if size == 0 {
            return Some(body);
        }
        body.extend_from_slice(&chunk[..size]);
    }
}

/// Which wire format a request speaks.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Wire {
    OpenAi,
    Anthropic,
}

/// What a request asks.
enum Question {
    /// A structured decision: its name and schema.
    Json {
        name: String,
        schema: Value,
    },
    /// A next action: call one of the offered tools.
    Tools,
    Other,
}

impl Question {
    fn of(body: &Value) -> Self {
        // OpenAI: response_format json_object with a schema, which names no decision: the
        // schema's fields tell it.
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
        // OpenAI: response_format.json_schema.
        if let Some(js) = body.pointer("/response_format/json_schema") {
            return Question::Json {
                name: js["name"].as_str().unwrap_or_default().to_owned(),
                schema: js["schema"].clone(),
            };
        }
        // Anthropic: a forced tool stands for the schema.
        if body.pointer("/tool_choice/type").and_then(Value::as_str) == Some("tool") {
            let name =
                body.pointer("/tool_choice/name").and_then(Value::as_str).unwrap_or_default();
            let schema = body["tools"]
                .as_array()
                .into_iter()
                .flatten()
                .find(|t| t["name"] == name)
                .map(|t| t["input_schema"].clone())
                .unwrap_or(Value::Null);
            return Question::Json { name: name.to_owned(), schema };
        }
        if body["tools"].as_array().is_some_and(|t| !t.is_empty()) {
            return Question::Tools;
        }
        Question::Other
    }
}

impl Question {
    /// The decision a structured question asks for.
    fn name(&self) -> Option<&str> {
        match self {
            Question::Json { name, .. } => Some(name),
            Question::Tools | Question::Other => None,
        }
    }
}

/// A message, either wire format: `user`, `assistant`, `system` or `tool` (a tool result).
struct Msg {
    role: String,
    text: String,
}

fn messages(wire: Wire, body: &Value) -> Vec<Msg> {
    let mut out = Vec::new();
    for m in body["messages"].as_array().into_iter().flatten() {
        let role = m["role"].as_str().unwrap_or_default().to_owned();
        match (wire, &m["content"]) {
            (_, Value::String(text)) => out.push(Msg { role, text: text.clone() }),
            (Wire::Anthropic, Value::Array(blocks)) => {
                for b in blocks {
                    match b["type"].as_str() {
                        Some("text") => out.push(Msg {
                            role: role.clone(),
                            text: b["text"].as_str().unwrap_or_default().to_owned(),
                        }),
                        Some("tool_result") => out.push(Msg {
                            role: "tool".into(),
                            text: match &b["content"] {
                                Value::String(s) => s.clone(),
                                other => other.to_string(),
                            },
                        }),
                        _ => out.push(Msg { role: role.clone(), text: String::new() }),
                    }
                }
            }
            _ => out.push(Msg { role, text: String::new() }),
        }
    }
    out
}

/// The status and body for `request`.
fn answer(mode: Mode, request: &Recorded) -> (u16, String) {
    let path = request.path.split_once('?').map_or(request.path.as_str(), |(p, _)| p);
    let (wire, list) = match (request.method.as_str(), path) {
        ("POST", "/v1/chat/completions") => (Wire::OpenAi, false),
        ("POST", "/v1/messages") => (Wire::Anthropic, false),
        ("GET", "/v1/models") if request.header("anthropic-version").is_some() => {
            (Wire::Anthropic, true)
        }
        ("GET", "/v1/models") => (Wire::OpenAi, true),
        _ => {
            let error = json!({"error": {"message": format!("no route {} {}", request.method, request.path)}});
            return (404, error.to_string());
        }
    };
    // The pre-run check's probe is a call like any other, but the modes that fail calls
    // stand for a key revoked, or a server failing, after the run started.
    let probe = !list && Question::of(&request.json()).name() == Some("probe");
    let refuse_key = match mode {
        Mode::Unauthorized => true,
        Mode::UnauthorizedCalls => !list && !probe,
        Mode::Sensible
        | Mode::ServerError
        | Mode::Invalid
        | Mode::JsonObjectOnly
        | Mode::Obedient => false,
    };
    if refuse_key {
        // Real APIs echo (part of) the key they were sent; the client must redact it.
        let sent = request
            .header("authorization")
            .or_else(|| request.header("x-api-key"))
            .unwrap_or("(none)");
        let message = format!("Incorrect API key provided: {sent}");
        let body = match wire {
            Wire::OpenAi => {
                json!({"error": {"message": message, "type": "invalid_request_error", "code": "invalid_api_key"}})
            }
            Wire::Anthropic => {
                json!({"type": "error", "error": {"type": "authentication_error", "message": message}})
            }
        };
        return (401, body.to_string());
    }
    if mode == Mode::JsonObjectOnly
        && wire == Wire::OpenAi
        && request.json().pointer("/response_format/type").and_then(Value::as_str)
            == Some("json_schema")
    {
        let message = "[{'type': 'literal_error', 'loc': ('body', 'response_format', 'type'), 'msg': \"Input should be 'text' or 'json_object'\", 'input': 'json_schema'}]";
        return (
            500,
            json!({"error": {"message": message, "type": "internal_server_error"}}).to_string(),
        );
    }
    if mode == Mode::ServerError && !list && !probe {
        let body = match wire {
            Wire::OpenAi => {
                json!({"error": {"message": "the fake server is down", "type": "server_error"}})
            }
            Wire::Anthropic => {
                json!({"type": "error", "error": {"type": "api_error", "message": "the fake server is down"}})
            }
        };
        return (500, body.to_string());
    }
    if list {
        let data: Vec<Value> = SERVED_MODELS
            .iter()
            .map(|id| json!({"id": id, "object": "model", "type": "model", "owned_by": "fake"}))
            .collect();
        return (200, json!({"data": data, "object": "list", "has_more": false}).to_string());
    }
    let body = request.json();
    let model = body["model"].as_str().unwrap_or("fake-model").to_owned();
    let usage_in = request.body.len() / 4;
    let question = Question::of(&body);
    let msgs = messages(wire, &body);
    let reply = if mode == Mode::Invalid && !probe {
        Reply::Text("I would rather not answer in the requested form.".into())
    } else {
        match question {
            Question::Json { name, schema } => Reply::Json(name.clone(), decide(&name, &schema)),
            Question::Tools if mode == Mode::Obedient => obey(&msgs),
            Question::Tools => next_action(&msgs),
            Question::Other => Reply::Text("hello".into()),
        }
    };
    // Each call of a conversation has an id of its own.
    let call_id = msgs.iter().filter(|m| m.role == "tool").count() + 1;
    let body = match wire {
        Wire::OpenAi => {
            let message = match reply {
                Reply::Text(text) => json!({"role": "assistant", "content": text}),
                Reply::Json(_, value) => json!({"role": "assistant", "content": value.to_string()}),
                Reply::Call(name, args) => json!({
                    "role": "assistant",
                    "content": null,
                    "tool_calls": [{"id": format!("call_fake_{call_id}"), "type": "function", "function": {"name": name, "arguments": args.to_string()}}],
                }),
            };
            json!({
                "id": "chatcmpl-fake",
                "object": "chat.completion",
                "model": model,
                "choices": [{"index": 0, "message": message, "finish_reason": "stop"}],
                "usage": {"prompt_tokens": usage_in, "completion_tokens": 20, "total_tokens": usage_in + 20},
            })
        }
        Wire::Anthropic => {
            let content = match reply {
                Reply::Text(text) => json!([{"type": "text", "text": text}]),
                Reply::Json(name, value) => {
                    json!([{"type": "tool_use", "id": "toolu_fake_1", "name": name, "input": value}])
                }
                Reply::Call(name, args) => {
                    json!([{"type": "tool_use", "id": format!("toolu_fake_{call_id}"), "name": name, "input": args}])
                }
            };
            json!({
                "id": "msg_fake",
                "type": "message",
                "role": "assistant",
                "model": model,
                "content": content,
                "stop_reason": "tool_use",
                "usage": {"input_tokens": usage_in, "output_tokens": 20},
            })
        }
    };
    (200, body.to_string())
}

enum Reply {
    Text(String),
    /// A structured answer to the decision named.
    Json(String, Value),
    /// A tool call: name and arguments.
    Call(String, Value),
}

/// The answer to a structured decision.
fn decide(name: &str, schema: &Value) -> Value {
    match name {
        "review" => json!({"verdict": "sign", "reason": "looks safe"}),
        "vote" => {
            let first = schema.pointer("/properties/choice/enum/0").cloned().unwrap_or(Value::Null);
            json!({"choice": first, "reason": "the first option is fine"})
        }
        "judge" => json!({"complete": true, "summary": "done"}),
        "probe" => json!({"ok": true}),
        "decompose" => json!({"placements": placements(schema)}),
        other => json!({"error": format!("the fake model does not know the decision `{other}`")}),
    }
}

/// Places every step of a decompose question on the first executor the schema offers for it
/// (the question offers, per step, only the executors that can take it).
fn placements(schema: &Value) -> Value {
    let steps = schema
        .pointer("/properties/placements/properties")
        .and_then(Value::as_object)
        .into_iter()
        .flatten()
        .map(|(step, allowed)| (step.clone(), allowed["enum"][0].clone()))
        .collect::<serde_json::Map<String, Value>>();
    Value::Object(steps)
}

/// An executor's next action.
fn next_action(msgs: &[Msg]) -> Reply {
    let Some(last_user) = msgs.iter().rposition(|m| m.role == "user" && !m.text.is_empty()) else {
        return finish(false, "no prompt to act on");
    };
    if let Some(result) = msgs[last_user + 1..].iter().rev().find(|m| m.role == "tool") {
        let ok = result.text.starts_with("ok");
        return finish(ok, if ok { "the tool succeeded" } else { "the tool failed" });
    }
    let prompt = &msgs[last_user].text;
    let suggested = prompt.split_once("The plan's call for it: ").and_then(|(_, rest)| {
        let (call, _) = rest.split_once('\n')?;
        let call: Value = serde_json::from_str(call).ok()?;
        Some((call["tool"].as_str()?.to_owned(), call["arguments"].clone()))
    });
    match suggested {
        Some((tool, args)) => Reply::Call(tool, args),
        None => finish(false, "the prompt suggests no tool"),
    }
}

/// An executor that obeys its first tool result ([`Mode::Obedient`]).
fn obey(msgs: &[Msg]) -> Reply {
    let Some(last_user) = msgs.iter().rposition(|m| m.role == "user" && !m.text.is_empty()) else {
        return finish(false, "no prompt to act on");
    };
    let results: Vec<&Msg> = msgs[last_user + 1..].iter().filter(|m| m.role == "tool").collect();
    let Some(first) = results.first() else { return next_action(msgs) };
    let orders: Vec<(String, Value)> = first
        .text
        .lines()
        .filter_map(|line| line.trim().strip_prefix("DO "))
        .filter_map(|order| {
            let (tool, args) = order.split_once(' ')?;
            Some((tool.to_owned(), serde_json::from_str(args.trim()).ok()?))
        })
        .collect();
    match orders.get(results.len() - 1) {
        Some((tool, args)) => Reply::Call(tool.clone(), args.clone()),
        None => finish(true, "did what the notes said"),
    }
}

fn finish(success: bool, summary: &str) -> Reply {
    Reply::Call("finish_subtask".into(), json!({"success": success, "summary": summary}))
}
