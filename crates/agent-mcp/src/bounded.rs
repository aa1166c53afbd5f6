//! A stdio server's answers read with bounded memory, whatever their size.
//!
//! The server's standard output is read by a task of its own ([`reader`]), one JSON-RPC
//! message (line) at a time, and handed to `rmcp` through a bounded pipe. A line up to
//! [`MAX_MESSAGE_BYTES`] passes unchanged. A longer one is never held whole: it is streamed,
//! as it comes, into a blob file of the results directory (named by its SHA-256, when there is
//! a directory; else only counted), while a small scanner keeps its `id`, whether it is an
//! error, and the first [`MAX_RESULT_BYTES`] of its first `text`. `rmcp` then gets a short
//! answer in its place: a `tools/call` result holding that head (or an error saying the answer
//! was too large), and the call finds what was kept ([`Spilled`]) under its request id. So
//! reading a 500 MB answer costs a few MiB, not 500 MB.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::ExitStatus;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use rmcp::RoleClient;
use rmcp::service::{RxJsonRpcMessage, TxJsonRpcMessage};
use rmcp::transport::Transport;
use rmcp::transport::async_rw::AsyncRwTransport;
use sha2::{Digest as _, Sha256};
use tokio::io::{AsyncBufReadExt as _, AsyncRead, AsyncWriteExt as _, BufReader, DuplexStream};
use tokio::process::{Child, ChildStdin};

/// The longest message a stdio server's answer may be and still be read whole: 4 MiB. A
/// longer one is kept as a blob and replaced by its head.
pub const MAX_MESSAGE_BYTES: usize = 4 * 1024 * 1024;

/// The most of an MCP tool's result text a call returns: 64 KiB, as for each of `shell`'s
/// streams ([`agent_core::tools::MAX_STREAM_BYTES`]); the rest is kept as a blob.
pub const MAX_RESULT_BYTES: usize = agent_core::tools::MAX_STREAM_BYTES;

/// How long a stdio server may take to exit once its input is closed before it is killed.
const EXIT_GRACE: Duration = Duration::from_secs(3);

/// How deep the scanner follows a message's nesting (deeper parts are skipped over).
const MAX_TRACKED_DEPTH: usize = 64;

/// The most of an `id` the scanner keeps.
const MAX_ID_BYTES: usize = 256;

/// An answer larger than [`MAX_MESSAGE_BYTES`] that was replaced by its head.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Spilled {
    /// Its size in bytes (the whole JSON-RPC message).
    pub bytes: u64,
    /// The SHA-256 of the whole message, `sha256:<hex>`.
    pub hash: String,
    /// The blob file holding the whole message, when the server has a results directory.
    pub path: Option<PathBuf>,
}

/// The answers replaced so far, by their request id (as JSON text: `5`, `"a"`), until the
/// call that asked takes its own.
#[derive(Clone, Debug, Default)]
pub(crate) struct Spills(Arc<Mutex<HashMap<String, Spilled>>>);

impl Spills {
    fn put(&self, id: String, spilled: Spilled) {
        let mut map = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        // Answers of calls that gave up waiting are never taken: keep the map small.
        if map.len() > 1024 {
            map.clear();
        }
        map.insert(id, spilled);
    }

    /// What was kept of the answer to the request `id`, if it was replaced.
    pub(crate) fn take(&self, id: &rmcp::model::RequestId) -> Option<Spilled> {
        let key = serde_json::to_string(id).ok()?;
        self.0.lock().unwrap_or_else(PoisonError::into_inner).remove(&key)
    }
}

/// Reads `stdout` (a server's standard output) in a task of its own, passing each message of
/// at most `max` bytes on unchanged and replacing a longer one by its head (see the module's
/// docs); returns the reading end the transport reads. The blob of a replaced message goes to
/// `results` (created when needed), if given.
pub(crate) fn reader<R>(
    server: &str,
    stdout: R,
    max: usize,
    results: Option<PathBuf>,
    spills: Spills,
) -> DuplexStream
where
    R: AsyncRead + Unpin + Send + 'static,
{
    let (mut to_rmcp, from_server) = tokio::io::duplex(64 * 1024);
    let server = server.to_owned();
    tokio::spawn(async move {
        let mut input = BufReader::with_capacity(64 * 1024, stdout);
        let mut line: Vec<u8> = Vec::new();
        let mut spill: Option<Spill> = None;
        loop {
            let chunk = match input.fill_buf().await {
                Ok([]) => break,
                Ok(chunk) => chunk,
                Err(error) => {
                    tracing::warn!(server = %server, %error, "cannot read the MCP server's output");
                    break;
                }
            };
            let newline = chunk.iter().position(|b| *b == b'\n');
            let take = newline.map_or(chunk.len(), |i| i + 1);
            let part = chunk[..take].to_vec();
            input.consume(take);
            let ended = newline.is_some();
            if spill.is_none() && line.len() + part.len() > max {
                let mut started = Spill::start(results.as_deref()).await;
                started.feed(&line).await;
                line = Vec::new();
                spill = Some(started);
            }
            let out = match spill.as_mut() {
                Some(spilling) => {
                    spilling.feed(&part).await;
                    if !ended {
                        continue;
                    }
                    let Some(done) = spill.take() else { continue };
                    match done.finish(&server, max, &spills).await {
                        Some(substitute) => substitute,
                        None => continue,
                    }
                }
                None => {
                    line.extend_from_slice(&part);
                    if !ended {
                        continue;
                    }
                    std::mem::take(&mut line)
                }
            };
            if to_rmcp.write_all(&out).await.is_err() {
                // The connection is closed: nobody reads any more.
                break;
            }
        }
        let _ = to_rmcp.shutdown().await;
    });
    from_server
}

/// A message being kept as a blob while it is read.
struct Spill {
    hasher: Sha256,
    bytes: u64,
    scan: Scan,
    /// The blob file being written and its temporary path, when there is a directory.
    file: Option<(tokio::fs::File, PathBuf)>,
    dir: Option<PathBuf>,
}

impl Spill {
    async fn start(dir: Option<&Path>) -> Self {
        let mut file = None;
        if let Some(dir) = dir {
            let temp = dir.join(format!(".partial-{}-{}", std::process::id(), next_serial()));
            let made = async {
                tokio::fs::create_dir_all(dir).await?;
                tokio::fs::File::create(&temp).await
            };
            match made.await {
                Ok(f) => file = Some((f, temp)),
                Err(error) => {
                    tracing::warn!(dir = %dir.display(), %error, "cannot keep an MCP answer as a blob; only its head is kept");
                }
            }
        }
        Self {
            hasher: Sha256::new(),
            bytes: 0,
            scan: Scan::new(MAX_RESULT_BYTES),
            file,
            dir: dir.map(Path::to_path_buf),
        }
    }

    async fn feed(&mut self, part: &[u8]) {
        self.hasher.update(part);
        self.bytes += part.len() as u64;
        self.scan.feed(part);
        if let Some((file, temp)) = self.file.as_mut()
            && let Err(error) = file.write_all(part).await
        {
            tracing::warn!(path = %temp.display(), %error, "cannot write an MCP answer's blob");
            let _ = tokio::fs::remove_file(&*temp).await;
            self.file = None;
        }
    }

    /// The message's short stand-in (a line), recording what was kept under its id; `None`
    /// when it is not an answer (no `id`, or a request of the server's): dropped then.
    async fn finish(self, server: &str, max: usize, spills: &Spills) -> Option<Vec<u8>> {
        let hash = format!("sha256:{}", agent_state::hex(&self.hasher.finalize()));
        let mut path = None;
        if let (Some((mut file, temp)), Some(dir)) = (self.file, self.dir) {
            let kept = dir.join(hash.trim_start_matches("sha256:"));
            let done = async {
                file.flush().await?;
                drop(file);
                tokio::fs::rename(&temp, &kept).await
            };
            match done.await {
                Ok(()) => path = Some(kept),
                Err(error) => {
                    tracing::warn!(path = %temp.display(), %error, "cannot keep an MCP answer's blob");
                    let _ = tokio::fs::remove_file(&temp).await;
                }
            }
        }
        let scan = self.scan;
        let id = std::str::from_utf8(&scan.id).ok().map(str::trim).unwrap_or_default();
        let id_ok = !id.is_empty()
            && serde_json::from_str::<serde_json::Value>(id)
                .is_ok_and(|v| v.is_number() || v.is_string());
        tracing::warn!(
            server,
            bytes = self.bytes,
            limit = max,
            blob = %hash,
            "an MCP server's message is over the size limit; kept as a blob, its head passed on"
        );
        if !id_ok || scan.has_method {
            return None;
        }
        let spilled = Spilled { bytes: self.bytes, hash, path };
        let body = if scan.has_error {
            let message = format!(
                "the server's error answer was {} bytes, over the {max}-byte limit of a message",
                self.bytes
            );
            format!("\"error\":{}", serde_json::json!({ "code": -32603, "message": message }))
        } else {
            let text = String::from_utf8_lossy(&scan.text);
            let text = if serde_json::from_str::<String>(&format!("\"{text}\"")).is_ok() {
                text
            } else {
                std::borrow::Cow::Borrowed("")
            };
            format!("\"result\":{{\"content\":[{{\"type\":\"text\",\"text\":\"{text}\"}}]}}")
        };
        let line = format!("{{\"jsonrpc\":\"2.0\",\"id\":{id},{body}}}\n");
        spills.put(id.to_owned(), spilled);
        Some(line.into_bytes())
    }
}

fn next_serial() -> u64 {
    static SERIAL: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    SERIAL.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
}

/// What a key of an object is, for the scanner.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Key {
    Other,
    Id,
    Text,
}

#[derive(Clone, Copy, Debug)]
enum Frame {
    Object { expect_key: bool, key: Key },
    Array,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Capture {
    None,
    Key,
    Id,
    IdNumber,
    Text,
    Skip,
}

/// A streaming scan of one JSON-RPC message, in constant memory: its top-level `id` (raw),
/// whether it has a top-level `error` or `method`, and the first `keep` bytes (raw, still
/// escaped, cut only between characters) of the first string under a `text` key.
#[derive(Debug)]
pub(crate) struct Scan {
    stack: Vec<Frame>,
    untracked: usize,
    in_string: bool,
    escape: bool,
    unicode_left: u8,
    capture: Capture,
    key: Vec<u8>,
    pub(crate) id: Vec<u8>,
    id_done: bool,
    pub(crate) has_error: bool,
    pub(crate) has_method: bool,
    pub(crate) text: Vec<u8>,
    text_seen: bool,
    text_cut: bool,
    keep: usize,
}

impl Scan {
    pub(crate) fn new(keep: usize) -> Self {
        Self {
            stack: Vec::new(),
            untracked: 0,
            in_string: false,
            escape: false,
            unicode_left: 0,
            capture: Capture::None,
            key: Vec::new(),
            id: Vec::new(),
            id_done: false,
            has_error: false,
            has_method: false,
            text: Vec::new(),
            text_seen: false,
            text_cut: false,
            keep,
        }
    }

    pub(crate) fn feed(&mut self, bytes: &[u8]) {
        let mut i = 0;
        while i < bytes.len() {
            // Inside a string it keeps nothing of: straight to its next quote or backslash
            // (the bulk of a huge answer is one such string).
            if self.in_string && !self.escape && self.unicode_left == 0 && self.skipping() {
                match bytes[i..].iter().position(|&b| b == b'"' || b == b'\\') {
                    Some(k) => i += k,
                    None => return,
                }
            }
            let b = bytes[i];
            if self.in_string {
                self.string_byte(b);
            } else {
                self.structural(b);
            }
            i += 1;
        }
    }

    /// Whether the string being read is not kept (skipped, or a text already cut).
    fn skipping(&self) -> bool {
        match self.capture {
            Capture::Skip | Capture::None => true,
            Capture::Text => self.text_cut,
            Capture::Key | Capture::Id | Capture::IdNumber => false,
        }
    }

    fn string_byte(&mut self, b: u8) {
        let plain = !self.escape && self.unicode_left == 0;
        if plain && b == b'"' {
            self.in_string = false;
            self.end_string();
            return;
        }
        match self.capture {
            Capture::Key if self.key.len() < 8 => self.key.push(b),
            Capture::Id if self.id.len() < MAX_ID_BYTES => self.id.push(b),
            Capture::Text if !self.text_cut => {
                if self.text.len() >= self.keep && plain && (b & 0xC0) != 0x80 {
                    self.text_cut = true;
                } else {
                    self.text.push(b);
                }
            }
            _ => {}
        }
        if self.unicode_left > 0 {
            self.unicode_left -= 1;
        } else if self.escape {
            self.escape = false;
            if b == b'u' {
                self.unicode_left = 4;
            }
        } else if b == b'\\' {
            self.escape = true;
        }
    }

    fn end_string(&mut self) {
        match self.capture {
            Capture::Key => {
                let key = match self.key.as_slice() {
                    b"id" => Key::Id,
                    b"text" => Key::Text,
                    _ => Key::Other,
                };
                if self.stack.len() == 1 && self.untracked == 0 {
                    match self.key.as_slice() {
                        b"error" => self.has_error = true,
                        b"method" => self.has_method = true,
                        _ => {}
                    }
                }
                if let Some(Frame::Object { key: k, .. }) = self.stack.last_mut() {
                    *k = key;
                }
                self.key.clear();
            }
            Capture::Id => {
                if self.id.len() < MAX_ID_BYTES {
                    self.id.push(b'"');
                }
                self.id_done = true;
            }
            Capture::Text => self.text_seen = true,
            _ => {}
        }
        self.capture = Capture::None;
    }

    fn current_key(&self) -> Option<Key> {
        if self.untracked > 0 {
            return None;
        }
        match self.stack.last() {
            Some(Frame::Object { key, .. }) => Some(*key),
            _ => None,
        }
    }

    fn end_number_id(&mut self) {
        if self.capture == Capture::IdNumber {
            self.capture = Capture::None;
            self.id_done = true;
        }
    }

    fn structural(&mut self, b: u8) {
        match b {
            b'"' => {
                self.in_string = true;
                let is_key = self.untracked == 0
                    && matches!(self.stack.last(), Some(Frame::Object { expect_key: true, .. }));
                self.capture = if is_key {
                    Capture::Key
                } else {
                    match self.current_key() {
                        Some(Key::Id) if self.stack.len() == 1 && !self.id_done => {
                            self.id.clear();
                            self.id.push(b'"');
                            Capture::Id
                        }
                        Some(Key::Text) if !self.text_seen => Capture::Text,
                        _ => Capture::Skip,
                    }
                };
            }
            b'{' | b'[' => {
                self.end_number_id();
                if self.untracked > 0 || self.stack.len() >= MAX_TRACKED_DEPTH {
                    self.untracked += 1;
                } else if b == b'{' {
                    self.stack.push(Frame::Object { expect_key: true, key: Key::Other });
                } else {
                    self.stack.push(Frame::Array);
                }
            }
            b'}' | b']' => {
                self.end_number_id();
                if self.untracked > 0 {
                    self.untracked -= 1;
                } else {
                    self.stack.pop();
                }
            }
            b':' => {
                if self.untracked == 0
                    && let Some(Frame::Object { expect_key, .. }) = self.stack.last_mut()
                {
                    *expect_key = false;
                }
            }
            b',' => {
                self.end_number_id();
                if self.untracked == 0
                    && let Some(Frame::Object { expect_key, key }) = self.stack.last_mut()
                {
                    *expect_key = true;
                    *key = Key::Other;
                }
            }
            b' ' | b'\t' | b'\r' | b'\n' => self.end_number_id(),
            _ => {
                if self.capture == Capture::IdNumber {
                    if self.id.len() < MAX_ID_BYTES {
                        self.id.push(b);
                    }
                } else if self.stack.len() == 1
                    && self.current_key() == Some(Key::Id)
                    && !self.id_done
                {
                    self.id.clear();
                    self.id.push(b);
                    self.capture = Capture::IdNumber;
                }
            }
        }
    }
}

/// A stdio server's process and its connection, with its output read through [`reader`].
pub(crate) struct ChildTransport {
    child: Option<Child>,
    inner: AsyncRwTransport<RoleClient, DuplexStream, ChildStdin>,
}

impl ChildTransport {
    pub(crate) fn new(child: Child, read: DuplexStream, write: ChildStdin) -> Self {
        Self { child: Some(child), inner: AsyncRwTransport::new_client(read, write) }
    }
}

impl Transport<RoleClient> for ChildTransport {
    type Error = std::io::Error;

    fn send(
        &mut self,
        item: TxJsonRpcMessage<RoleClient>,
    ) -> impl Future<Output = Result<(), Self::Error>> + Send + 'static {
        self.inner.send(item)
    }

    fn receive(&mut self) -> impl Future<Output = Option<RxJsonRpcMessage<RoleClient>>> + Send {
        self.inner.receive()
    }

    /// Closes the server's input, waits [`EXIT_GRACE`] for it to exit, then kills it.
    async fn close(&mut self) -> Result<(), Self::Error> {
        self.inner.close().await?;
        if let Some(mut child) = self.child.take() {
            match tokio::time::timeout(EXIT_GRACE, child.wait()).await {
                Ok(status) => log_exit(status),
                Err(_) => {
                    child.start_kill()?;
                    log_exit(child.wait().await);
                }
            }
        }
        Ok(())
    }
}

fn log_exit(status: std::io::Result<ExitStatus>) {
    match status {
        Ok(status) => tracing::debug!(%status, "MCP server exited"),
        Err(error) => tracing::warn!(%error, "cannot wait for an MCP server"),
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used, reason = "tests")]
mod tests {
    use super::*;

    fn scan(message: &str, keep: usize) -> Scan {
        let mut scan = Scan::new(keep);
        // Fed in small pieces, as a pipe delivers them.
        for piece in message.as_bytes().chunks(3) {
            scan.feed(piece);
        }
        scan
    }

    #[test]
    fn the_scan_keeps_the_id_and_the_head_of_the_first_text() {
        let s = scan(
            r#"{"jsonrpc":"2.0","id":17,"result":{"content":[{"type":"text","text":"héllo \"wörld\" \u00e9 and more"},{"type":"text","text":"second"}]}}"#,
            10,
        );
        assert_eq!(s.id, b"17");
        assert!(!s.has_error && !s.has_method);
        let head = String::from_utf8(s.text.clone()).unwrap();
        assert!(head.starts_with("héllo"), "{head}");
        assert!(head.len() >= 10 && head.len() < 16, "{head}");
        // Cut between characters: it is valid inside a JSON string.
        serde_json::from_str::<String>(&format!("\"{head}\"")).unwrap();
    }

    #[test]
    fn the_scan_finds_an_id_after_the_result_and_a_string_id() {
        let s =
            scan(r#"{"result":{"content":[{"text":"x","id":9}]},"id":"a-1","jsonrpc":"2.0"}"#, 8);
        assert_eq!(s.id, b"\"a-1\"");
        assert_eq!(s.text, b"x");
        let s = scan(r#"{"jsonrpc":"2.0","id":3,"error":{"code":1,"message":"big"}}"#, 8);
        assert_eq!(s.id, b"3");
        assert!(s.has_error);
        let s = scan(r#"{"jsonrpc":"2.0","method":"notifications/message","params":{}}"#, 8);
        assert!(s.id.is_empty() && s.has_method);
    }

    #[test]
    fn a_cut_never_splits_an_escape() {
        for keep in 0..12 {
            let s = scan(r#"{"id":1,"result":{"content":[{"text":"ab\u00e9\n\\cd\"e"}]}}"#, keep);
            let head = String::from_utf8(s.text.clone()).unwrap();
            assert!(
                serde_json::from_str::<String>(&format!("\"{head}\"")).is_ok(),
                "keep {keep}: {head}"
            );
        }
    }

    #[tokio::test]
    async fn a_message_over_the_limit_is_replaced_by_its_head_and_kept_as_a_blob() {
        let dir = tempfile::tempdir().unwrap();
        let big = "x".repeat(300_000);
        let small = r#"{"jsonrpc":"2.0","id":1,"result":{"content":[]}}"#;
        let large = format!(
            r#"{{"jsonrpc":"2.0","id":2,"result":{{"content":[{{"type":"text","text":"{big}"}}]}}}}"#
        );
        let input = format!("{small}\n{large}\n{small}\n");
        let spills = Spills::default();
        let mut read = reader(
            "t",
            std::io::Cursor::new(input.clone().into_bytes()),
            100_000,
            Some(dir.path().join("results")),
            spills.clone(),
        );
        let mut out = String::new();
        tokio::io::AsyncReadExt::read_to_string(&mut read, &mut out).await.unwrap();
        let lines: Vec<&str> = out.lines().collect();
        assert_eq!(lines.len(), 3, "{out:.300}");
        assert_eq!((lines[0], lines[2]), (small, small));
        let replaced: serde_json::Value = serde_json::from_str(lines[1]).unwrap();
        assert_eq!(replaced["id"], 2);
        let text = replaced["result"]["content"][0]["text"].as_str().unwrap();
        assert_eq!(text.len(), MAX_RESULT_BYTES);
        let spilled = spills.take(&rmcp::model::RequestId::Number(2)).unwrap();
        assert_eq!(spilled.bytes, large.len() as u64 + 1);
        let kept = std::fs::read(spilled.path.unwrap()).unwrap();
        assert_eq!(kept, format!("{large}\n").into_bytes(), "the whole message is kept");
        assert_eq!(spilled.hash, format!("sha256:{}", agent_state::sha256_hex(&kept)));
    }
}
