//! The `shell` tool: runs `sh -c` in the workspace with a real-time timeout.

use std::io::Read;
use std::os::unix::process::{CommandExt as _, ExitStatusExt as _};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::mpsc::{self, RecvTimeoutError};
use std::sync::{Arc, Mutex, PoisonError};
use std::thread;
use std::time::{Duration, Instant};

use async_trait::async_trait;
use serde::Deserialize;
use serde_json::{Value, json};

use super::fs::{blocking, parse};
use super::{Recovery, Tool, ToolContext, ToolError, ToolOutput};

/// The most of each of stdout and stderr that `shell` keeps: 64 KiB; the rest is counted and
/// replaced by a `[truncated: N more bytes]` line.
pub const MAX_STREAM_BYTES: usize = 64 * 1024;

/// The largest `timeout_ms` a `shell` call may ask for: one hour.
pub const MAX_SHELL_TIMEOUT_MS: u64 = 60 * 60 * 1000;

/// `shell { command, timeout_ms? }`: runs `sh -c command` in the workspace root with stdin
/// closed and returns its output. Has side effects.
///
/// - `success` is whether the exit code was 0; `output` is stdout, then stderr after a
///   `[stderr]` line, then `[exit code N]` (or `[killed by signal N]`) when it failed. `data` is
///   `{"exit_code", "signal", "stdout", "stderr", "stdout_truncated", "stderr_truncated"}`.
/// - Each stream keeps its first [`MAX_STREAM_BYTES`] bytes; the rest is drained and counted.
/// - The command runs in its own process group. When `timeout_ms` (default
///   [`ToolContext::shell_timeout`]) of real time passes, the whole group is killed and the call
///   returns [`ToolError::Timeout`]. The timeout is wall-clock time on purpose: the process is
///   real, so paused or mocked tokio time must not decide when it is stopped.
/// - When the command exits while a background process it started still holds its output
///   open, that process group is killed after a short grace period so the call never hangs on
///   it. Background processes that redirect their output are left running.
/// - Dropping the call's future does not stop the command early; it still ends at its timeout.
#[derive(Debug)]
pub struct Shell {
    schema: Value,
}

impl Shell {
    /// The tool's name.
    pub const NAME: &'static str = "shell";

    /// The tool, with its argument schema.
    pub fn new() -> Self {
        Self {
            schema: json!({
                "type": "object",
                "properties": {
                    "command": {
                        "type": "string",
                        "minLength": 1,
                        "description": "a POSIX sh command line, run in the workspace root",
                    },
                    "timeout_ms": {
                        "type": "integer",
                        "minimum": 1,
                        "maximum": MAX_SHELL_TIMEOUT_MS,
                        "description": "time limit in milliseconds; the command is killed after it",
                    },
                },
                "required": ["command"],
                "additionalProperties": false,
            }),
        }
    }
}

impl Default for Shell {
    fn default() -> Self {
        Self::new()
    }
}

#[async_trait]
impl Tool for Shell {
    fn name(&self) -> &str {
        Self::NAME
    }

    fn description(&self) -> &str {
        "Run a POSIX sh command in the workspace root with a time limit; returns stdout, stderr \
         and the exit code (success means exit code 0)."
    }

    fn schema(&self) -> &Value {
        &self.schema
    }

    fn has_side_effects(&self) -> bool {
        true
    }

    async fn call(&self, ctx: &ToolContext, args: Value) -> Result<ToolOutput, ToolError> {
        let (command, timeout) = self.parse_args(ctx, args)?;
        let root = ctx.workspace().to_path_buf();
        blocking(Self::NAME, move || run(&root, &command, timeout)).await
    }

    /// Runs the command under a small `sh` runner in its own process group that writes the
    /// command's output and exit code into `journal`. If the caller dies, the runner still
    /// finishes and records the outcome, so [`recover`](Tool::recover) can adopt it.
    async fn call_journaled(
        &self,
        ctx: &ToolContext,
        args: Value,
        journal: &Path,
    ) -> Result<ToolOutput, ToolError> {
        let (command, timeout) = self.parse_args(ctx, args)?;
        let root = ctx.workspace().to_path_buf();
        let journal = journal.to_path_buf();
        blocking(Self::NAME, move || run_journaled(&root, &command, timeout, &journal)).await
    }

    async fn recover(
        &self,
        ctx: &ToolContext,
        args: Value,
        journal: &Path,
    ) -> Result<Recovery, ToolError> {
        let (_, timeout) = self.parse_args(ctx, args)?;
        let journal = journal.to_path_buf();
        blocking(Self::NAME, move || Ok(recover(&journal, timeout))).await
    }
}

impl Shell {
    fn parse_args(&self, ctx: &ToolContext, args: Value) -> Result<(String, Duration), ToolError> {
        let ShellArgs { command, timeout_ms } = parse(Self::NAME, args)?;
        if command.is_empty() {
            return Err(ToolError::invalid(Self::NAME, "`command`: must not be empty"));
        }
        let timeout = match timeout_ms {
            Some(0) => {
                return Err(ToolError::invalid(
                    Self::NAME,
                    "`timeout_ms`: 0 is less than the minimum 1",
                ));
            }
            Some(ms) => Duration::from_millis(ms.min(MAX_SHELL_TIMEOUT_MS)),
            None => ctx.shell_timeout(),
        };
        Ok((command, timeout))
    }
}

/// The journal runner: marks that it started, runs the command with its output in files, then
/// publishes the exit code atomically (`done` appears only once it is complete).
const RUNNER: &str = r#"echo $$ > "$2/started"; sh -c "$1" > "$2/out" 2> "$2/err" < /dev/null; echo $? > "$2/done.tmp"; mv "$2/done.tmp" "$2/done""#;

/// How long recovery waits for a runner that may have been spawned just before a crash to
/// show that it started.
const START_GRACE: Duration = Duration::from_millis(500);

fn run_journaled(
    root: &Path,
    command: &str,
    timeout: Duration,
    journal: &Path,
) -> Result<ToolOutput, ToolError> {
    const TOOL: &str = Shell::NAME;
    std::fs::create_dir_all(journal).map_err(|err| ToolError::io(TOOL, journal, err))?;
    // A retry under the same key must not find an earlier attempt's markers.
    for name in ["started", "out", "err", "done.tmp", "done"] {
        match std::fs::remove_file(journal.join(name)) {
            Ok(()) => {}
            Err(err) if err.kind() == std::io::ErrorKind::NotFound => {}
            Err(err) => return Err(ToolError::io(TOOL, journal, err)),
        }
    }
    let mut child = Command::new("sh")
        .arg("-c")
        .arg(RUNNER)
        .arg("strata-shell")
        .arg(command)
        .arg(journal)
        .current_dir(root)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .process_group(0)
        .spawn()
        .map_err(|err| ToolError::io(TOOL, root, err))?;
    wait_or_kill(&mut child, root, timeout)?;
    journal_report(journal).ok_or_else(|| {
        ToolError::failed(TOOL, "the command's runner ended without recording an exit code")
    })
}

/// Reads a finished journal: `None` if `done` is not there (yet).
fn journal_report(journal: &Path) -> Option<ToolOutput> {
    let done = std::fs::read_to_string(journal.join("done")).ok()?;
    let code: i32 = done.trim().parse().ok()?;
    let read = |name: &str| -> Captured {
        let bytes = std::fs::read(journal.join(name)).unwrap_or_default();
        let keep = bytes.len().min(MAX_STREAM_BYTES);
        let mut text = String::from_utf8_lossy(&bytes[..keep]).into_owned();
        let dropped = bytes.len() - keep;
        if dropped > 0 {
            if !text.ends_with('\n') {
                text.push('\n');
            }
            text.push_str(&format!("[truncated: {dropped} more bytes]\n"));
        }
        Captured { text, truncated: dropped > 0 }
    };
    // sh reports a command killed by signal N as 128 + N; report it as a plain call would.
    let status = match code {
        129..=159 => ExitStatus::from_raw(code - 128),
        _ => ExitStatus::from_raw((code & 0xff) << 8),
    };
    Some(report(status, &read("out"), &read("err")))
}

/// What became of a journaled call after a crash: completed (adopt its result), never started
/// (run it), or unknown (started and never finished within its timeout: not run again).
fn recover(journal: &Path, timeout: Duration) -> Recovery {
    if let Some(output) = journal_report(journal) {
        return Recovery::Completed(output);
    }
    let started = |j: &Path| j.join("started").exists() || j.join("done").exists();
    if !started(journal) {
        // A runner spawned just before the crash may not have written its marker yet.
        let until = Instant::now() + START_GRACE;
        while Instant::now() < until && !started(journal) {
            thread::sleep(MAX_POLL);
        }
        if !started(journal) {
            return Recovery::NotStarted;
        }
    }
    // The runner outlives its caller: wait for it to finish, up to the call's own timeout.
    let until = Instant::now() + timeout;
    loop {
        if let Some(output) = journal_report(journal) {
            return Recovery::Completed(output);
        }
        if Instant::now() >= until {
            return Recovery::Unknown;
        }
        thread::sleep(MAX_POLL);
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct ShellArgs {
    command: String,
    timeout_ms: Option<u64>,
}

/// How long to wait for the output pipes to close once the command has exited, before killing
/// what holds them, and again after that kill.
const PIPE_GRACE: Duration = Duration::from_millis(100);

/// The longest pause between two checks of whether the command has exited.
const MAX_POLL: Duration = Duration::from_millis(10);

fn run(root: &Path, command: &str, timeout: Duration) -> Result<ToolOutput, ToolError> {
    const TOOL: &str = Shell::NAME;
    let mut child = Command::new("sh")
        .arg("-c")
        .arg(command)
        .current_dir(root)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .process_group(0)
        .spawn()
        .map_err(|err| ToolError::io(TOOL, root, err))?;
    let stdout = Capture::start(child.stdout.take());
    let stderr = Capture::start(child.stderr.take());

    let status = wait_or_kill(&mut child, root, timeout)?;

    // The shell has exited; its output pipes close once every process holding them is gone.
    let closed_by = Instant::now() + PIPE_GRACE;
    if !(stdout.wait_closed(closed_by) && stderr.wait_closed(closed_by)) {
        kill_group(&mut child);
        let closed_by = Instant::now() + PIPE_GRACE;
        stdout.wait_closed(closed_by);
        stderr.wait_closed(closed_by);
    }
    Ok(report(status, &stdout.text(), &stderr.text()))
}

/// Waits for `child` to exit, polling with growing pauses, for at most `timeout` of real time;
/// then kills its process group and answers [`ToolError::Timeout`].
fn wait_or_kill(
    child: &mut Child,
    root: &Path,
    timeout: Duration,
) -> Result<ExitStatus, ToolError> {
    const TOOL: &str = Shell::NAME;
    let deadline = Instant::now() + timeout;
    let mut pause = Duration::from_millis(1);
    loop {
        match child.try_wait() {
            Ok(Some(status)) => return Ok(status),
            Ok(None) => {}
            Err(err) => {
                kill_group(child);
                return Err(ToolError::io(TOOL, PathBuf::from(root), err));
            }
        }
        let now = Instant::now();
        if now >= deadline {
            kill_group(child);
            // SIGKILL cannot be ignored, so this returns promptly; it reaps the shell.
            let _ = child.wait();
            return Err(ToolError::Timeout {
                tool: TOOL.to_owned(),
                after_ms: u64::try_from(timeout.as_millis()).unwrap_or(u64::MAX),
            });
        }
        thread::sleep(pause.min(deadline - now));
        pause = (pause * 2).min(MAX_POLL);
    }
}

/// Kills the command's process group (its pgid is its pid), then the shell itself in case the
/// group kill was not possible. Best effort: the processes may already be gone.
fn kill_group(child: &mut Child) {
    let group = format!("kill -s KILL -- -{}", child.id());
    let _ = Command::new("sh")
        .arg("-c")
        .arg(group)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status();
    let _ = child.kill();
}

fn report(status: ExitStatus, stdout: &Captured, stderr: &Captured) -> ToolOutput {
    let code = status.code();
    let signal = status.signal();
    let mut output = stdout.text.clone();
    if !stderr.text.is_empty() {
        if !output.is_empty() && !output.ends_with('\n') {
            output.push('\n');
        }
        output.push_str("[stderr]\n");
        output.push_str(&stderr.text);
    }
    let success = code == Some(0);
    if !success {
        if !output.is_empty() && !output.ends_with('\n') {
            output.push('\n');
        }
        match (code, signal) {
            (Some(code), _) => output.push_str(&format!("[exit code {code}]")),
            (None, Some(signal)) => output.push_str(&format!("[killed by signal {signal}]")),
            (None, None) => output.push_str("[exited without a status]"),
        }
    }
    ToolOutput {
        success,
        output,
        data: json!({
            "exit_code": code,
            "signal": signal,
            "stdout": stdout.text,
            "stderr": stderr.text,
            "stdout_truncated": stdout.truncated,
            "stderr_truncated": stderr.truncated,
        }),
    }
}

/// One output stream, drained by its own thread into a bounded buffer.
struct Capture {
    buffer: Arc<Mutex<Buffer>>,
    /// Disconnects when the reader thread ends, that is when the pipe has closed.
    done: mpsc::Receiver<()>,
}

#[derive(Default)]
struct Buffer {
    head: Vec<u8>,
    total: u64,
}

/// A stream's text: the kept head, lossily decoded, plus a truncation line if bytes were dropped.
struct Captured {
    text: String,
    truncated: bool,
}

impl Capture {
    fn start(pipe: Option<impl Read + Send + 'static>) -> Self {
        let buffer = Arc::new(Mutex::new(Buffer::default()));
        let (finished, done) = mpsc::channel();
        if let Some(mut pipe) = pipe {
            let shared = Arc::clone(&buffer);
            let reader = thread::Builder::new().name("shell-output".into());
            // If no thread can be started, the pipe is dropped and the stream reads as empty.
            let started = reader.spawn(move || {
                let _finished = finished;
                let mut chunk = [0_u8; 8192];
                loop {
                    match pipe.read(&mut chunk) {
                        Ok(0) => break,
                        Ok(n) => {
                            let mut buffer = shared.lock().unwrap_or_else(PoisonError::into_inner);
                            let room = MAX_STREAM_BYTES.saturating_sub(buffer.head.len());
                            buffer.head.extend_from_slice(&chunk[..n.min(room)]);
                            buffer.total += n as u64;
                        }
                        Err(err) if err.kind() == std::io::ErrorKind::Interrupted => {}
                        Err(_) => break,
                    }
                }
            });
            if let Err(err) = started {
                tracing::warn!(%err, "could not start a thread to read shell output");
            }
        }
        Self { buffer, done }
    }

    /// Waits until the pipe has closed or `until` passes; true if it closed.
    fn wait_closed(&self, until: Instant) -> bool {
        let left = until.saturating_duration_since(Instant::now());
        matches!(self.done.recv_timeout(left), Err(RecvTimeoutError::Disconnected))
    }

    fn text(&self) -> Captured {
        let buffer = self.buffer.lock().unwrap_or_else(PoisonError::into_inner);
        let mut text = String::from_utf8_lossy(&buffer.head).into_owned();
        let dropped = buffer.total.saturating_sub(buffer.head.len() as u64);
        if dropped > 0 {
            if !text.ends_with('\n') {
                text.push('\n');
            }
            text.push_str(&format!("[truncated: {dropped} more bytes]\n"));
        }
        Captured { text, truncated: dropped > 0 }
    }
}
