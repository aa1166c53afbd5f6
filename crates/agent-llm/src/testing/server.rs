//! [`FakeModel`]: a minimal HTTP/1.1 server on loopback that speaks the OpenAI chat completions
//! wire format through a handler.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use serde_json::{Value, json};
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::{TcpListener, TcpStream};
use tokio::task::{JoinHandle, JoinSet};

use super::StreamStyle;

/// What a [`FakeModel`] asks for every chat completion: the OpenAI response body for a request
/// body, or a problem (in words), which the server records and answers with a 400.
pub type Handler = dyn Fn(&Value) -> Result<Value, String> + Send + Sync;

/// The largest request body the server reads (a bigger one is a problem).
const MAX_BODY: usize = 64 * 1024 * 1024;

/// A fake OpenAI-compatible model on `127.0.0.1`, on a port of its own; it stops (and closes
/// its connections) when dropped.
///
/// It answers
/// - `GET /v1/models` with `{"object": "list", "data": [{"id": MODEL, ...}]}`, the model it was
///   started with, which is what the provider's preflight checks;
/// - `POST /v1/chat/completions` (and `POST /v1/completions`, whose body has a `prompt` instead
///   of `messages`) with `200` and what the handler returns for the request body,
///   or, when the handler returns a problem, `400` with an OpenAI error body; a request with
///   `"stream": true` gets that answer as an event stream ([`FakeModel::set_stream_style`]);
/// - anything else with `404`.
///
/// A request the server cannot use (a body that is not JSON, an unknown route, a missing or
/// wrong key when [`FakeModel::start_with_key`] set one, a handler that panicked) is a
/// problem too: every problem is recorded with the request it came from ([`problems`]), so a
/// test can assert that the model was asked only what it expected. Each connection is served
/// in its own task, requests one after another (keep-alive); many clients may ask at once.
/// The handler runs on tokio's blocking pool, so it may block (to hold an answer back while
/// a test does something) without holding up the answers to other requests.
///
/// It runs on the tokio runtime it was started on, which must outlive it and keep running
/// (a multi-thread runtime, or the test's own) while clients talk to it.
///
/// [`problems`]: FakeModel::problems
pub struct FakeModel {
    addr: SocketAddr,
    shared: Arc<Shared>,
    task: JoinHandle<()>,
}

/// What the connection tasks share with the handle.
struct Shared {
    model: String,
    key: Option<String>,
    handler: Box<Handler>,
    bodies: Mutex<Vec<Value>>,
    problems: Mutex<Vec<String>>,
    chat_requests: AtomicUsize,
    stream_style: Mutex<StreamStyle>,
}

impl Shared {
    fn problem(&self, problem: String) {
        lock(&self.problems).push(problem);
    }
}

/// A lock that survives a panic elsewhere (the data is a log; a half-pushed entry is fine).
fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}

impl FakeModel {
    /// Starts a server that serves `model` and answers every chat completion with
    /// `handler`; it accepts any key, or none.
    pub async fn start(
        model: impl Into<String>,
        handler: impl Fn(&Value) -> Result<Value, String> + Send + Sync + 'static,
    ) -> std::io::Result<Self> {
        Self::listen(model.into(), None, Box::new(handler)).await
    }

    /// Like [`FakeModel::start`], but every request must carry `Authorization: Bearer KEY`; one
    /// that does not is answered with `401` and recorded as a problem.
    pub async fn start_with_key(
        model: impl Into<String>,
        key: impl Into<String>,
        handler: impl Fn(&Value) -> Result<Value, String> + Send + Sync + 'static,
    ) -> std::io::Result<Self> {
        Self::listen(model.into(), Some(key.into()), Box::new(handler)).await
    }

    async fn listen(
        model: String,
        key: Option<String>,
        handler: Box<Handler>,
    ) -> std::io::Result<Self> {
        let listener = TcpListener::bind("127.0.0.1:0").await?;
        let addr = listener.local_addr()?;
        let shared = Arc::new(Shared {
            model,
            key,
            handler,
            bodies: Mutex::new(Vec::new()),
            problems: Mutex::new(Vec::new()),
            chat_requests: AtomicUsize::new(0),
            stream_style: Mutex::new(StreamStyle::default()),
        });
        let task = tokio::spawn(accept(listener, Arc::clone(&shared)));
        Ok(Self { addr, shared, task })
    }

    /// The API root to give an OpenAI-compatible client: `http://127.0.0.1:PORT/v1`.
    pub fn url(&self) -> String {
        format!("http://{}/v1", self.addr)
    }

    /// The model it serves.
    pub fn model(&self) -> &str {
        &self.shared.model
    }

    /// How many `POST /v1/chat/completions` requests have arrived so far, answered or not (a
    /// request counts as soon as its body has been read, before the handler runs).
    pub fn chat_requests(&self) -> usize {
        self.shared.chat_requests.load(Ordering::SeqCst)
    }

    /// The chat completion request bodies received so far that were JSON, in the order they
    /// arrived.
    pub fn requests(&self) -> Vec<Value> {
        lock(&self.shared.bodies).clone()
    }

    /// Every problem so far, each with the request it came from: empty when the model was
    /// asked only what it understood.
    pub fn problems(&self) -> Vec<String> {
        lock(&self.shared.problems).clone()
    }

    /// How the chat completions asked with `"stream": true` are answered from now on (at
    /// first [`StreamStyle::Chunks`]).
    pub fn set_stream_style(&self, style: StreamStyle) {
        *lock(&self.shared.stream_style) = style;
    }
}

impl std::fmt::Debug for FakeModel {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FakeModel")
            .field("url", &self.url())
            .field("model", &self.shared.model)
            .field("chat_requests", &self.chat_requests())
            .finish_non_exhaustive()
    }
}

impl Drop for FakeModel {
    fn drop(&mut self) {
        // The accept task owns the connection tasks: aborting it drops (and aborts) them.
        self.task.abort();
    }
}

async fn accept(listener: TcpListener, shared: Arc<Shared>) {
    let mut connections = JoinSet::new();
    while let Ok((stream, _)) = listener.accept().await {
        while connections.try_join_next().is_some() {}
        connections.spawn(serve(stream, Arc::clone(&shared)));
    }
}

/// One request as read off the wire.
struct Request {
    method: String,
    path: String,
    headers: Vec<(String, String)>,
    body: Vec<u8>,
}

impl Request {
    fn header(&self, name: &str) -> Option<&str> {
        self.headers.iter().find(|(n, _)| n.eq_ignore_ascii_case(name)).map(|(_, v)| v.as_str())
    }
}

/// Answers the requests of one keep-alive connection until the client closes it.
async fn serve(stream: TcpStream, shared: Arc<Shared>) {
    let mut stream = BufReader::new(stream);
    loop {
        let request = match read_request(&mut stream).await {
            Ok(Some(request)) => request,
            Ok(None) => return,
            Err(problem) => {
                shared.problem(format!("an unreadable request: {problem}"));
                let _ = reply(stream.get_mut(), 400, &error_body(&problem)).await;
                return;
            }
        };
        let (status, body) = answer(&shared, &request).await;
        let style = *lock(&shared.stream_style);
        let asked: Option<Value> = serde_json::from_slice(&request.body).ok();
        let streamed = asked.as_ref().is_some_and(|b| b["stream"] == json!(true));
        let sent = if status == 200 && streamed && style != StreamStyle::Whole {
            let usage =
                asked.as_ref().is_some_and(|b| b["stream_options"]["include_usage"] == json!(true));
            let events = super::stream::events(&body, style, usage);
            super::stream::reply(stream.get_mut(), &events, style == StreamStyle::Stall).await
        } else {
            reply(stream.get_mut(), status, &body).await
        };
        if sent.is_err() {
            return;
        }
    }
}

/// The status and body for one request.
async fn answer(shared: &Arc<Shared>, request: &Request) -> (u16, Value) {
    let path = request.path.split_once('?').map_or(request.path.as_str(), |(path, _)| path);
    let chat = match (request.method.as_str(), path) {
        ("POST", "/v1/chat/completions" | "/v1/completions") => true,
        ("GET", "/v1/models") => false,
        (method, _) => {
            let problem = format!("no route {method} {}", request.path);
            shared.problem(problem.clone());
            return (404, error_body(&problem));
        }
    };
    if chat {
        shared.chat_requests.fetch_add(1, Ordering::SeqCst);
    }
    if let Some(key) = &shared.key {
        let expected = format!("Bearer {key}");
        if request.header("authorization") != Some(expected.as_str()) {
            let problem = format!(
                "{} {}: no `Authorization: Bearer` header with the expected key",
                request.method, request.path
            );
            shared.problem(problem.clone());
            return (401, error_body(&problem));
        }
    }
    if !chat {
        let models = json!({
            "object": "list",
            "data": [{"id": shared.model, "object": "model", "created": 0, "owned_by": "strata-testing"}],
        });
        return (200, models);
    }
    let body: Value = match serde_json::from_slice(&request.body) {
        Ok(body) => body,
        Err(e) => {
            let problem = format!(
                "a chat completion whose body is not JSON ({e}): {}",
                String::from_utf8_lossy(&request.body)
            );
            shared.problem(problem.clone());
            return (400, error_body(&problem));
        }
    };
    lock(&shared.bodies).push(body.clone());
    // On the blocking pool: a handler may block (to hold an answer back) without stopping the
    // server from answering other requests meanwhile.
    let handler = Arc::clone(shared);
    let asked = body.clone();
    let handled =
        tokio::task::spawn_blocking(move || (handler.handler)(&asked)).await.unwrap_or_else(|e| {
            let panic = e.try_into_panic().ok();
            let what = panic
                .as_ref()
                .and_then(|p| {
                    p.downcast_ref::<String>()
                        .map(String::as_str)
                        .or_else(|| p.downcast_ref::<&str>().copied())
                })
                .unwrap_or("it panicked or was cancelled");
            Err(format!("the handler failed: {what}"))
        });
    match handled {
        Ok(answer) => (200, answer),
        Err(problem) => {
            shared.problem(format!("{problem}\nrequest: {body}"));
            (400, error_body(&problem))
        }
    }
}

/// An OpenAI error body.
fn error_body(message: &str) -> Value {
    json!({"error": {"message": message, "type": "invalid_request_error"}})
}

async fn reply(stream: &mut TcpStream, status: u16, body: &Value) -> std::io::Result<()> {
    let body = body.to_string();
    let reason = match status {
        200 => "OK",
        400 => "Bad Request",
        401 => "Unauthorized",
        404 => "Not Found",
        _ => "Other",
    };
    let head = format!(
        "HTTP/1.1 {status} {reason}\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: keep-alive\r\n\r\n",
        body.len()
    );
    stream.write_all(head.as_bytes()).await?;
    stream.write_all(body.as_bytes()).await?;
    stream.flush().await
}

/// The next request on the connection; `Ok(None)` at its end (or when the connection breaks),
/// `Err` for a request that is not HTTP/1.1 as this server reads it.
async fn read_request(stream: &mut BufReader<TcpStream>) -> Result<Option<Request>, String> {
    let mut line = String::new();
    match stream.read_line(&mut line).await {
        Ok(0) | Err(_) => return Ok(None),
        Ok(_) => {}
    }
    let mut parts = line.split_whitespace();
    let (Some(method), Some(path)) = (parts.next(), parts.next()) else {
        return Err(format!("not a request line: {line:?}"));
    };
    let (method, path) = (method.to_owned(), path.to_owned());
    let mut headers = Vec::new();
    loop {
        line.clear();
        match stream.read_line(&mut line).await {
            Ok(0) | Err(_) => return Ok(None),
            Ok(_) => {}
        }
        let header = line.trim_end();
        if header.is_empty() {
            break;
        }
        let Some((name, value)) = header.split_once(':') else {
            return Err(format!("not a header: {header:?}"));
        };
        headers.push((name.trim().to_ascii_lowercase(), value.trim().to_owned()));
    }
    let mut request = Request { method, path, headers, body: Vec::new() };
    if request.header("transfer-encoding").is_some_and(|v| v.eq_ignore_ascii_case("chunked")) {
        request.body = match read_chunked(stream).await? {
            Some(body) => body,
            None => return Ok(None),
        };
        return Ok(Some(request));
    }
    let length = match request.header("content-length") {
        None => 0,
        Some(value) => {
            value.parse::<usize>().map_err(|_| format!("a content-length of {value:?}"))?
        }
    };
    if length > MAX_BODY {
        return Err(format!("a body of {length} bytes (at most {MAX_BODY})"));
    }
    request.body = vec![0; length];
    if stream.read_exact(&mut request.body).await.is_err() {
        return Ok(None);
    }
    Ok(Some(request))
}

/// A chunked body; `Ok(None)` when the connection ends in the middle.
async fn read_chunked(stream: &mut BufReader<TcpStream>) -> Result<Option<Vec<u8>>, String> {
    let mut body = Vec::new();
    loop {
        let mut size = String::new();
        match stream.read_line(&mut size).await {
            Ok(0) | Err(_) => return Ok(None),
            Ok(_) => {}
        }
        let digits = size.trim().split(';').next().unwrap_or_default();
        let size =
            usize::from_str_radix(digits, 16).map_err(|_| format!("a chunk size of {digits:?}"))?;
        if body.len().saturating_add(size) > MAX_BODY {
            return Err(format!("a body of more than {MAX_BODY} bytes"));
        }
        // The chunk and its CRLF.
        let mut chunk = vec![0; size + 2];
        if stream.read_exact(&mut chunk).await.is_err() {
            return Ok(None);
        }
        if size == 0 {
            return Ok(Some(body));
        }
        chunk.truncate(size);
        body.extend_from_slice(&chunk);
    }
}
