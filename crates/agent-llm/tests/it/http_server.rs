//! A scripted HTTP/1.1 server on loopback: it answers requests with a list of replies, in order,
//! and records every request so that tests can check what went over the wire. (The fake model
//! that answers from what each request says is `agent_llm::testing::FakeModel`.)

use std::collections::VecDeque;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::{TcpListener, TcpStream};
use tokio::task::JoinHandle;

/// A running server; stops when dropped.
pub(crate) struct TestServer {
    addr: SocketAddr,
    state: Arc<State>,
    task: JoinHandle<()>,
}

/// One scripted reply.
#[derive(Clone, Debug)]
pub(crate) struct Reply {
    status: u16,
    headers: Vec<(String, String)>,
    body: Vec<u8>,
    delay: Duration,
    close: bool,
    /// Send only this many bytes of the body, then nothing more (a server that hangs).
    stall_after: Option<usize>,
}

/// A request as received.
#[derive(Clone, Debug)]
pub(crate) struct Recorded {
    pub(crate) method: String,
    pub(crate) path: String,
    headers: Vec<(String, String)>,
    body: Vec<u8>,
}

#[derive(Default)]
struct State {
    replies: Mutex<VecDeque<Reply>>,
    requests: Mutex<Vec<Recorded>>,
}

impl TestServer {
    /// A server on `127.0.0.1` answering with `replies` in order (then 500s).
    pub(crate) async fn start(replies: impl IntoIterator<Item = Reply>) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let state = Arc::new(State {
            replies: Mutex::new(replies.into_iter().collect()),
            ..State::default()
        });
        Self::listen(listener, state)
    }

    fn listen(listener: TcpListener, state: Arc<State>) -> Self {
        let addr = listener.local_addr().unwrap();
        let task = tokio::spawn(accept(listener, Arc::clone(&state)));
        Self { addr, state, task }
    }

    /// `http://127.0.0.1:port`.
    pub(crate) fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// The requests received so far.
    pub(crate) fn requests(&self) -> Vec<Recorded> {
        self.state.requests.lock().unwrap().clone()
    }

    /// The only request received.
    #[track_caller]
    pub(crate) fn single_request(&self) -> Recorded {
        let mut requests = self.requests();
        assert_eq!(requests.len(), 1, "expected exactly one request");
        requests.remove(0)
    }
}

impl Drop for TestServer {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl Reply {
    /// `status` with a JSON body.
    pub(crate) fn json(status: u16, body: serde_json::Value) -> Self {
        Self::raw(status, "application/json", body.to_string())
    }

    /// `status` with a body of `content_type`.
    pub(crate) fn raw(status: u16, content_type: &str, body: impl Into<Vec<u8>>) -> Self {
        Self {
            status,
            headers: vec![("content-type".to_owned(), content_type.to_owned())],
            body: body.into(),
            delay: Duration::ZERO,
            close: false,
            stall_after: None,
        }
    }

    /// Read the request, then close the connection without answering.
    pub(crate) fn close() -> Self {
        Self { close: true, ..Self::raw(500, "text/plain", "") }
    }

    /// With one more header.
    pub(crate) fn header(mut self, name: &str, value: &str) -> Self {
        self.headers.push((name.to_owned(), value.to_owned()));
        self
    }

    /// Sends the head and the first `bytes` bytes of the body, then hangs, the connection open.
    pub(crate) fn stalling_after(mut self, bytes: usize) -> Self {
        self.stall_after = Some(bytes);
        self
    }

    /// Answered `delay` after the request arrived.
    pub(crate) fn after(mut self, delay: Duration) -> Self {
        self.delay = delay;
        self
    }
}

impl Recorded {
    /// The value of header `name` (case-insensitive), if sent once or more.
    pub(crate) fn header(&self, name: &str) -> Option<&str> {
        self.headers.iter().find(|(n, _)| n.eq_ignore_ascii_case(name)).map(|(_, v)| v.as_str())
    }

    /// The body as JSON.
    pub(crate) fn json(&self) -> serde_json::Value {
        serde_json::from_slice(&self.body).unwrap()
    }
}

async fn accept(listener: TcpListener, state: Arc<State>) {
    while let Ok((stream, _)) = listener.accept().await {
        tokio::spawn(serve(stream, Arc::clone(&state)));
    }
}

/// Answers the requests of one keep-alive connection until the client closes it or a reply
/// says to close.
async fn serve(stream: TcpStream, state: Arc<State>) {
    let mut stream = BufReader::new(stream);
    while let Some(request) = read_request(&mut stream).await {
        state.requests.lock().unwrap().push(request);
        let reply = state.replies.lock().unwrap().pop_front().unwrap_or_else(|| {
            Reply::raw(500, "text/plain", "test server: no scripted reply left")
        });
        tokio::time::sleep(reply.delay).await;
        if reply.close {
            return;
        }
        let mut head = format!("HTTP/1.1 {} {}\r\n", reply.status, reason(reply.status));
        for (name, value) in &reply.headers {
            head.push_str(&format!("{name}: {value}\r\n"));
        }
        head.push_str(&format!("content-length: {}\r\n\r\n", reply.body.len()));
        let stream = stream.get_mut();
        if let Some(bytes) = reply.stall_after {
            let sent = &reply.body[..bytes.min(reply.body.len())];
            let _ = stream.write_all(head.as_bytes()).await;
            let _ = stream.write_all(sent).await;
            let _ = stream.flush().await;
            std::future::pending::<()>().await;
        }
        if stream.write_all(head.as_bytes()).await.is_err()
            || stream.write_all(&reply.body).await.is_err()
            || stream.flush().await.is_err()
        {
            return;
        }
    }
}

/// The next request on the connection; `None` at its end.
async fn read_request(stream: &mut BufReader<TcpStream>) -> Option<Recorded> {
    let mut line = String::new();
    if stream.read_line(&mut line).await.ok()? == 0 {
        return None;
    }
    let mut parts = line.split_whitespace();
    let method = parts.next()?.to_owned();
    let path = parts.next()?.to_owned();
    let mut headers = Vec::new();
    loop {
        line.clear();
        if stream.read_line(&mut line).await.ok()? == 0 {
            return None;
        }
        let header = line.trim_end();
        if header.is_empty() {
            break;
        }
        let (name, value) = header.split_once(':')?;
        headers.push((name.trim().to_ascii_lowercase(), value.trim().to_owned()));
    }
    let length = headers
        .iter()
        .find(|(name, _)| name == "content-length")
        .and_then(|(_, value)| value.parse().ok())
        .unwrap_or(0);
    let mut body = vec![0; length];
    stream.read_exact(&mut body).await.ok()?;
    Some(Recorded { method, path, headers, body })
}

fn reason(status: u16) -> &'static str {
    match status {
        200 => "OK",
        400 => "Bad Request",
        401 => "Unauthorized",
        403 => "Forbidden",
        404 => "Not Found",
        429 => "Too Many Requests",
        500 => "Internal Server Error",
        529 => "Overloaded",
        _ => "Whatever",
    }
}

/// `http://127.0.0.1:port` for a port nobody listens on: connecting is refused.
pub(crate) async fn refused_url() -> String {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    drop(listener);
    format!("http://{addr}")
}
