//! A loopback HTTP server for the tests (on `127.0.0.1:0`, real sockets) that answers
//! scripted statuses and bodies and records every request it gets, and HTTP policies that
//! allow it.

use std::sync::{Arc, Mutex};

use agent_executor::HttpPolicy;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

/// An HTTP policy allowing `hosts`.
pub(crate) fn allowing(hosts: &[&str]) -> HttpPolicy {
    HttpPolicy {
        allow_hosts: hosts.iter().map(|h| (*h).to_owned()).collect(),
        ..HttpPolicy::default()
    }
}

/// One scripted answer.
#[derive(Clone, Debug)]
pub(crate) struct Reply {
    status: u16,
    body: String,
    headers: Vec<(String, String)>,
    /// Appends the value of this request header to the body (a server that echoes it).
    echo: Option<String>,
}

impl Reply {
    pub(crate) fn new(status: u16, body: &str) -> Self {
        Self { status, body: body.to_owned(), headers: Vec::new(), echo: None }
    }

    pub(crate) fn json(status: u16, body: serde_json::Value) -> Self {
        Self::new(status, &body.to_string()).header("Content-Type", "application/json")
    }

    pub(crate) fn header(mut self, name: &str, value: &str) -> Self {
        self.headers.push((name.to_owned(), value.to_owned()));
        self
    }

    pub(crate) fn echoing(mut self, header: &str) -> Self {
        self.echo = Some(header.to_ascii_lowercase());
        self
    }
}

/// One request the server got.
#[derive(Clone, Debug)]
pub(crate) struct Hit {
    pub(crate) method: String,
    /// The path with its query.
    pub(crate) target: String,
    /// Lower-cased names.
    pub(crate) headers: Vec<(String, String)>,
    pub(crate) body: String,
}

impl Hit {
    pub(crate) fn header(&self, name: &str) -> Option<&str> {
        self.headers.iter().find(|(n, _)| n == name).map(|(_, v)| v.as_str())
    }
}

/// A server on `127.0.0.1:0` answering its replies in order (the last one again once they are
/// used up), one request per connection.
pub(crate) struct Server {
    addr: std::net::SocketAddr,
    hits: Arc<Mutex<Vec<Hit>>>,
    task: tokio::task::JoinHandle<()>,
}

impl Server {
    pub(crate) async fn start(replies: Vec<Reply>) -> Self {
        assert!(!replies.is_empty());
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let hits: Arc<Mutex<Vec<Hit>>> = Arc::default();
        let seen = hits.clone();
        let task = tokio::spawn(async move {
            while let Ok((stream, _)) = listener.accept().await {
                let seen = seen.clone();
                let replies = replies.clone();
                tokio::spawn(async move { serve(stream, &seen, &replies).await });
            }
        });
        Self { addr, hits, task }
    }

    /// `127.0.0.1:<port>`, as an allow-list names it.
    pub(crate) fn host(&self) -> String {
        self.addr.to_string()
    }

    pub(crate) fn port(&self) -> u16 {
        self.addr.port()
    }

    pub(crate) fn url(&self, path: &str) -> String {
        format!("http://{}{path}", self.addr)
    }

    pub(crate) fn hits(&self) -> Vec<Hit> {
        self.hits.lock().unwrap().clone()
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        self.task.abort();
    }
}

async fn serve(mut stream: TcpStream, hits: &Mutex<Vec<Hit>>, replies: &[Reply]) {
    let mut buf = Vec::new();
    let mut chunk = [0_u8; 4096];
    let head_end = loop {
        if let Some(end) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            break end;
        }
        match stream.read(&mut chunk).await {
            Ok(0) | Err(_) => return,
            Ok(n) => buf.extend_from_slice(&chunk[..n]),
        }
    };
    let head = String::from_utf8_lossy(&buf[..head_end]).into_owned();
    let mut lines = head.split("\r\n");
    let request_line = lines.next().unwrap_or_default().to_owned();
    let mut parts = request_line.split(' ');
    let method = parts.next().unwrap_or_default().to_owned();
    let target = parts.next().unwrap_or_default().to_owned();
    let headers: Vec<(String, String)> = lines
        .filter_map(|l| l.split_once(':'))
        .map(|(n, v)| (n.trim().to_ascii_lowercase(), v.trim().to_owned()))
        .collect();
    let length: usize = headers
        .iter()
        .find(|(n, _)| n == "content-length")
        .and_then(|(_, v)| v.parse().ok())
        .unwrap_or(0);
    let mut body = buf[head_end + 4..].to_vec();
    while body.len() < length {
        match stream.read(&mut chunk).await {
            Ok(0) | Err(_) => break,
            Ok(n) => body.extend_from_slice(&chunk[..n]),
        }
    }
    let hit = Hit { method, target, headers, body: String::from_utf8_lossy(&body).into_owned() };
    let reply = {
        let mut hits = hits.lock().unwrap();
        let reply = replies[hits.len().min(replies.len() - 1)].clone();
        hits.push(hit.clone());
        reply
    };
    let mut body = reply.body.clone();
    if let Some(echoed) = reply.echo.as_deref().and_then(|h| hit.header(h)) {
        body.push_str(echoed);
    }
    let mut answer = format!(
        "HTTP/1.1 {} {}\r\nContent-Length: {}\r\nConnection: close\r\n",
        reply.status,
        reason(reply.status),
        body.len()
    );
    for (name, value) in &reply.headers {
        answer.push_str(&format!("{name}: {value}\r\n"));
    }
    answer.push_str("\r\n");
    answer.push_str(&body);
    let _ = stream.write_all(answer.as_bytes()).await;
    let _ = stream.shutdown().await;
}

fn reason(status: u16) -> &'static str {
    match status {
        200 => "OK",
        302 => "Found",
        404 => "Not Found",
        500 => "Internal Server Error",
        503 => "Service Unavailable",
        _ => "Status",
    }
}
