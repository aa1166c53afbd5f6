//! The `shell` tool: runs `sh -c` in the workspace with a real-time timeout.

use std::io::Read;
use std::os::unix::process::{CommandExt as _, ExitStatusExt as _};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::mpsc::{self, RecvTimeoutError};
use std::sync::{Arc, Mutex, PoisonError};
use std::thread;
use std::time::{Duration, Instant, SystemTime};

use async_trait::async_trait;
use serde::Deserialize;
use serde_json::{Value, json};
use sha2::Digest as _;

use super::fs::{blocking, parse};
use super::sandbox::{self, Sandbox};
use super::{Recovery, Tool, ToolContext, ToolError, ToolOutput};

/// The most of each of stdout and stderr that `shell` keeps: 64 KiB; the rest is counted and
/// replaced by a `[truncated: N more bytes]` line.
pub const MAX_STREAM_BYTES: usize = 64 * 1024;

/// The largest `timeout_ms` a `shell` call may ask for: one hour.
pub const MAX_SHELL_TIMEOUT_MS: u64 = 60 * 60 * 1000;

/// How long after its timeout a command is killed by its own watchdog (coreutils `timeout`)
/// when nobody is left to kill it: the caller normally kills it at the timeout itself.
pub const BACKSTOP_GRACE: Duration = Duration::from_secs(1);

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
/// - The command runs in the context's [`Sandbox`] (see its docs: read-only system, the
///   workspace read-write, home and the run's data hidden, no network unless allowed, limits);
///   where that sandbox cannot work the call is refused with [`ToolError::Sandbox`].
/// - When the command exits, every process it left behind is killed, so a call leaves nothing
///   running: the sandbox's PID namespace ends with the command, taking along processes that
///   left its process group or session (`setsid`, a double fork). Unsandboxed, only its
///   process group is killed.
/// - Dropping the call's future does not stop the command early; it still ends at its timeout.
/// - The timeout holds even if the caller dies: the command runs under coreutils' `timeout`,
///   which kills its process group [`BACKSTOP_GRACE`] after the call's own timeout, so no
///   process of a call outlives its timeout by more than that, across a crash too.
#[derive(Debug)]
pub struct Shell {
    schema: Value,
    /// Overrides the context sandbox's network setting, for agents a team lets use it.
    network: Option<bool>,
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
            network: None,
        }
    }

    /// The tool with the network allowed (`true`) or cut off (`false`) in its sandbox,
    /// whatever the context's [`Sandbox`] says: what a team gives the agents (or roles) its
    /// team file lets use the network.
    #[must_use]
    pub fn with_network(mut self, allowed: bool) -> Self {
        self.network = Some(allowed);
        self
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

    fn check_args(&self, args: &Value) -> Vec<String> {
        let command = args.get("command").and_then(Value::as_str).unwrap_or_default();
        nul_problem(command).into_iter().collect()
    }

    /// It stops its command itself at its timeout (at most the tool limit), and a journaled
    /// call's outcome must be recorded: the registry does not cut it short.
    fn stops_itself(&self) -> bool {
        true
    }

    async fn call(&self, ctx: &ToolContext, args: Value) -> Result<ToolOutput, ToolError> {
        let (command, timeout) = self.parse_args(ctx, args)?;
        let (ctx, network) = (ctx.clone(), self.network);
        blocking(Self::NAME, move || {
            // Building the sandbox's command line reads the file system: on the blocking pool.
            let call = Call::new(&ctx, None, network);
            call.check()?;
            run(&call, &command, timeout)
        })
        .await
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
        let (ctx, network) = (ctx.clone(), self.network);
        let journal = journal.to_path_buf();
        blocking(Self::NAME, move || {
            let call = Call::new(&ctx, Some(&journal), network);
            call.check()?;
            run_journaled(&call, &command, timeout, &journal)
        })
        .await
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

/// Where one call runs: the workspace, the sandbox and the sandbox's command line prefix.
struct Call {
    root: PathBuf,
    sandbox: Sandbox,
    /// The launcher's command line, or why there is none.
    prefix: Result<Vec<std::ffi::OsString>, sandbox::SandboxError>,
    /// The call's control groups (root only), created by the launcher and removed after the
    /// call.
    cgroups: Vec<PathBuf>,
    /// The command's `$0`, which names the call in the sandbox's command lines.
    tag: String,
}

impl Call {
    fn new(ctx: &ToolContext, journal: Option<&Path>, network: Option<bool>) -> Self {
        let tag = match journal {
            Some(journal) => call_tag(journal),
            None => format!("strata-shell-{}", uuid::Uuid::new_v4().simple()),
        };
        let mut sandbox = ctx.sandbox().clone();
        if let Some(allowed) = network {
            sandbox = sandbox.with_network(allowed);
        }
        let cgroups = sandbox::cgroups_for(&sandbox, &tag);
        let prefix = sandbox.command_prefix(ctx.workspace(), ctx.journal(), &cgroups, &tag);
        Self { root: ctx.workspace().to_path_buf(), sandbox, prefix, cgroups, tag }
    }

    /// Refuses the call when its sandbox cannot work here.
    fn check(&self) -> Result<(), ToolError> {
        let refuse = |source| ToolError::Sandbox { tool: Shell::NAME.to_owned(), source };
        self.sandbox.check().map_err(refuse)?;
        self.prefix.as_ref().map(|_| ()).map_err(|err| refuse(err.clone()))
    }

    /// The launcher's command line (empty without a sandbox).
    fn prefix(&self) -> &[std::ffi::OsString] {
        self.prefix.as_deref().unwrap_or_default()
    }

    /// Waits until the sandbox of a killed call is gone, then removes what it left: the
    /// call's control groups and the launcher's skeleton directory.
    fn clean_up(&self) {
        if self.sandbox.is_enabled() {
            wait_for_sandbox_end(&self.tag);
            remove_skeletons(&self.tag);
        }
        for cgroup in &self.cgroups {
            sandbox::remove_cgroup(cgroup, SANDBOX_GRACE);
        }
    }
}

/// Removes the skeleton directories a killed launcher of call `tag` left in the temporary
/// directory (empty directories and files, links: nothing is followed).
fn remove_skeletons(tag: &str) {
    let Ok(entries) = std::fs::read_dir(std::env::temp_dir()) else { return };
    let prefix = format!("{tag}-");
    for entry in entries.flatten() {
        let named = entry.file_name().to_str().is_some_and(|name| name.starts_with(&prefix));
        if named && entry.file_type().is_ok_and(|kind| kind.is_dir()) {
            let _ = std::fs::remove_dir_all(entry.path());
        }
    }
}

/// How long a killed sandbox may take to end: killing its launcher makes the kernel kill its
/// PID namespace, which happens right after, not at once.
const SANDBOX_GRACE: Duration = Duration::from_secs(2);

/// Waits (at most [`SANDBOX_GRACE`]) until no process carrying `tag` in its command line is
/// alive. The launcher and the command carry it, and the command is PID 1 of its namespace,
/// so when none is left, nothing of the call runs any more.
fn wait_for_sandbox_end(tag: &str) {
    let until = Instant::now() + SANDBOX_GRACE;
    while tagged_process_alive(tag) {
        if Instant::now() >= until {
            tracing::warn!(tag, "a killed command's sandbox is still ending");
            return;
        }
        thread::sleep(MAX_POLL);
    }
}

/// Whether a process that has `tag` as one of its arguments is alive (not a zombie).
fn tagged_process_alive(tag: &str) -> bool {
    let Ok(entries) = std::fs::read_dir("/proc") else { return false };
    entries.flatten().any(|entry| {
        let name = entry.file_name();
        let Some(pid) = name.to_str().filter(|n| n.bytes().all(|b| b.is_ascii_digit())) else {
            return false;
        };
        let carries = std::fs::read(format!("/proc/{pid}/cmdline"))
            .is_ok_and(|cmdline| cmdline.split(|b| *b == 0).any(|arg| arg == tag.as_bytes()));
        carries
            && std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|stat| {
                // The state follows the command name's closing parenthesis.
                let state =
                    stat.rsplit_once(')').and_then(|(_, rest)| rest.trim_start().chars().next());
                !matches!(state, Some('Z' | 'X') | None)
            })
    })
}

impl Shell {
    fn parse_args(&self, ctx: &ToolContext, args: Value) -> Result<(String, Duration), ToolError> {
        let ShellArgs { command, timeout_ms } = parse(Self::NAME, args)?;
        if command.is_empty() {
            return Err(ToolError::invalid(Self::NAME, "`command`: must not be empty"));
        }
        if let Some(problem) = nul_problem(&command) {
            return Err(ToolError::invalid(Self::NAME, problem));
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
        // No call runs past the hard limit of every tool call.
        Ok((command, timeout.min(ctx.tool_timeout())))
    }
}

/// What is wrong with a command holding a NUL byte, which no command line can carry (the
/// process would be started with the command cut at it): where the first one is.
fn nul_problem(command: &str) -> Option<String> {
    let at = command.find('\0')?;
    let character = command[..at].chars().count() + 1;
    let line = command[..at].matches('\n').count() + 1;
    Some(format!(
        "`command`: holds a NUL byte (\\0) at character {character} (line {line} of the command); a command line cannot carry one: remove it"
    ))
}

/// The journal runner, `sh -c RUNNER strata-shell COMMAND JOURNAL TIMEOUT_S CAP TAG CGROUPS
/// SANDBOX...`, run with the command's minimal environment ([`Sandbox::command_env`]):
///
/// 1. marks that it started (`started` holds its pid, which is its process group);
/// 2. runs the command under `timeout -s KILL` (its own process group, whose id goes to
///    `group`), inside the sandbox (the `SANDBOX...` command line, empty without one), stdout and stderr each through `head -c CAP` (unbuffered, so what the command
///    printed is on disk even if the runner is killed) into `out` / `err`, the bytes past
///    the cap counted by `wc -c` into `out.more` / `err.more`, so a flood of output costs at most
///    CAP bytes on disk and a fixed buffer in memory whatever the command prints;
/// 3. writes the exit code to `code`, kills what the command left in its process group,
///    removes the call's control groups (`CGROUPS`, space-separated, empty without any), and once both streams
///    are closed publishes the code as `done` (a rename: `done` appears only when everything
///    else is complete).
///
/// The command sees a tag naming its call as `$0` (`strata-shell-` and a hash of the journal
/// directory, not the directory itself), so its processes can be recognised after a crash
/// before they are killed (see [`kill_journal_groups`]).
const RUNNER: &str = r#"j=$2; echo $$ > "$j/started"
c=$1; t=$3; cap=$4; tag=$5; cg=$6; shift 6
{ { timeout -s KILL "$t" "$@" sh -c "$c" "$tag" </dev/null 2>&1 >&3 3>&- &
    g=$!; echo $g > "$j/group"; wait $g; echo $? > "$j/code"; kill -s KILL -- -$g 2>/dev/null
  } | { stdbuf -o0 head -c "$cap" > "$j/err"; wc -c > "$j/err.more"; } 3>&-
} 3>&1 | { stdbuf -o0 head -c "$cap" > "$j/out"; wc -c > "$j/out.more"; }
for c in $cg; do rmdir "$c" 2>/dev/null; done
mv "$j/code" "$j/done""#;

/// The files a runner writes into its journal directory.
const JOURNAL_FILES: [&str; 10] = [
    "started", "group", "out", "out.more", "err", "err.more", "code", "done.tmp", "done", "cgroup",
];

/// How long recovery waits for a runner that may have been spawned just before a crash to
/// show that it started.
const START_GRACE: Duration = Duration::from_secs(2);

/// The timeout handed to coreutils `timeout` for a call with `timeout`: the backstop.
fn backstop_arg(timeout: Duration) -> String {
    let backstop = timeout + BACKSTOP_GRACE;
    format!("{}.{:03}", backstop.as_secs(), backstop.subsec_millis())
}

fn run_journaled(
    call: &Call,
    command: &str,
    timeout: Duration,
    journal: &Path,
) -> Result<ToolOutput, ToolError> {
    let result = run_journaled_in(call, command, timeout, journal);
    call.clean_up();
    // The control groups are gone: recovery has nothing to remove.
    if !call.cgroups.is_empty() && call.cgroups.iter().all(|cgroup| !cgroup.exists()) {
        let _ = std::fs::remove_file(journal.join("cgroup"));
    }
    result
}

fn run_journaled_in(
    call: &Call,
    command: &str,
    timeout: Duration,
    journal: &Path,
) -> Result<ToolOutput, ToolError> {
    const TOOL: &str = Shell::NAME;
    let root = call.root.as_path();
    std::fs::create_dir_all(journal).map_err(|err| ToolError::io(TOOL, journal, err))?;
    // A retry under the same key must not find an earlier attempt's markers.
    clear_journal(journal)?;
    let cgroups: Vec<String> =
        call.cgroups.iter().map(|cgroup| cgroup.display().to_string()).collect();
    if !cgroups.is_empty() {
        // So that recovery can remove them after a crash.
        std::fs::write(journal.join("cgroup"), cgroups.join("\n"))
            .map_err(|err| ToolError::io(TOOL, journal, err))?;
    }
    let mut child = spawn_runner(call, command, timeout, journal, &cgroups)?;
    let deadline = Instant::now() + timeout;
    let mut pause = Duration::from_millis(1);
    let mut exited_at: Option<Instant> = None;
    loop {
        match child.try_wait() {
            Ok(Some(_)) => break,
            Ok(None) => {}
            Err(err) => {
                kill_journal_groups(journal, Some(child.id()));
                let _ = child.wait();
                return Err(ToolError::io(TOOL, root, err));
            }
        }
        let now = Instant::now();
        if now >= deadline {
            kill_journal_groups(journal, Some(child.id()));
            let _ = child.wait();
            return Err(timeout_error(timeout));
        }
        // The command has exited but something outside its group still holds its output
        // open: once the grace period is over, the runner is stopped (the output so far is
        // in the journal's files).
        if journal.join("code").exists() {
            let since = *exited_at.get_or_insert(now);
            if now.duration_since(since) >= PIPE_GRACE {
                let code = read_small(&journal.join("code")).unwrap_or_default();
                kill_group(&mut child);
                let _ = child.wait();
                if !journal.join("done").exists() {
                    publish(journal, &code).map_err(|err| ToolError::io(TOOL, journal, err))?;
                }
                break;
            }
        }
        thread::sleep(pause.min(deadline - now));
        pause = (pause * 2).min(MAX_POLL);
    }
    journal_outcome(journal, deadline, timeout)
}

/// Starts the runner of `command` in a process group of its own, writing to `journal`, with
/// the call's sandbox prefix and environment, in the call's root.
fn spawn_runner(
    call: &Call,
    command: &str,
    timeout: Duration,
    journal: &Path,
    cgroups: &[String],
) -> Result<std::process::Child, ToolError> {
    let root = call.root.as_path();
    Command::new("sh")
        .arg("-c")
        .arg(RUNNER)
        .arg("strata-shell")
        .arg(command)
        .arg(journal)
        .arg(backstop_arg(timeout))
        .arg(MAX_STREAM_BYTES.to_string())
        .arg(call_tag(journal))
        .arg(cgroups.join(" "))
        .args(call.prefix())
        .env_clear()
        .envs(call.sandbox.command_env())
        .current_dir(root)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .process_group(0)
        .spawn()
        .map_err(|err| ToolError::io(Shell::NAME, root, err))
}

/// What the journal says of a finished runner: its output, a timeout (killed at the
/// `deadline`), or an end nobody recorded.
fn journal_outcome(
    journal: &Path,
    deadline: Instant,
    timeout: Duration,
) -> Result<ToolOutput, ToolError> {
    const TOOL: &str = Shell::NAME;
    match journal_report(journal) {
        Some(Finished { status, .. })
            if status.signal() == Some(9) && Instant::now() >= deadline =>
        {
            Err(timeout_error(timeout))
        }
        Some(finished) => Ok(finished.output),
        // The command ran, and may have had its effect, but its end was not recorded (a full
        // disk refused the runner's files, or the runner was killed): not a failure to try
        // again, which could repeat the effect, but an outcome nobody knows.
        None => {
            let stdout = read_stream(journal, "out");
            let stderr = read_stream(journal, "err");
            let so_far = report(ExitStatus::from_raw(9), &stdout, &stderr).output;
            let so_far =
                so_far.rsplit_once("[killed by signal 9]").map_or(so_far.as_str(), |(b, _)| b);
            Err(ToolError::Interrupted {
                tool: TOOL.to_owned(),
                partial: format!(
                    "[the command's runner ended without recording an exit code (a full disk, or \
                     the runner was killed): how far the command got is unknown]\n{}",
                    so_far.trim()
                ),
            })
        }
    }
}

/// Removes every file a runner writes, so that what is found later belongs to one run.
fn clear_journal(journal: &Path) -> Result<(), ToolError> {
    for name in JOURNAL_FILES {
        match std::fs::remove_file(journal.join(name)) {
            Ok(()) => {}
            Err(err) if err.kind() == std::io::ErrorKind::NotFound => {}
            Err(err) => return Err(ToolError::io(Shell::NAME, journal, err)),
        }
    }
    Ok(())
}

/// Publishes `code` as the journal's `done`, atomically.
fn publish(journal: &Path, code: &str) -> std::io::Result<()> {
    let code = code.trim();
    let code = if code.is_empty() { "137" } else { code };
    std::fs::write(journal.join("done.tmp"), format!("{code}\n"))?;
    std::fs::rename(journal.join("done.tmp"), journal.join("done"))
}

fn timeout_error(timeout: Duration) -> ToolError {
    ToolError::Timeout {
        tool: Shell::NAME.to_owned(),
        after_ms: u64::try_from(timeout.as_millis()).unwrap_or(u64::MAX),
    }
}

/// A finished journal: the call's output and how its command ended.
struct Finished {
    output: ToolOutput,
    status: ExitStatus,
}

/// Reads a finished journal: `None` if `done` is not there (yet). Reads at most
/// [`MAX_STREAM_BYTES`] of each stream, whatever the files hold.
fn journal_report(journal: &Path) -> Option<Finished> {
    let done = read_small(&journal.join("done"))?;
    let code: i32 = done.trim().parse().ok()?;
    // sh reports a command killed by signal N as 128 + N; report it as a plain call would.
    let status = match code {
        129..=159 => ExitStatus::from_raw(code - 128),
        _ => ExitStatus::from_raw((code & 0xff) << 8),
    };
    let output = report(status, &read_stream(journal, "out"), &read_stream(journal, "err"));
    Some(Finished { output, status })
}

/// The kept head of one stream of a journal, and how many bytes were dropped: those past the
/// cap in the file (a journal written by hand, or an older runner) plus those the runner
/// counted in `NAME.more`.
fn read_stream(journal: &Path, name: &str) -> Captured {
    let path = journal.join(name);
    let mut head = Vec::new();
    let mut on_disk = 0;
    if let Ok(file) = open_regular(&path) {
        on_disk = file.metadata().map_or(0, |m| m.len());
        let _ = file.take(MAX_STREAM_BYTES as u64).read_to_end(&mut head);
    }
    let counted: u64 = read_small(&journal.join(format!("{name}.more")))
        .and_then(|more| more.trim().parse().ok())
        .unwrap_or(0);
    let dropped = on_disk.saturating_sub(head.len() as u64) + counted;
    captured(&head, dropped)
}

/// What became of a journaled call after a crash:
///
/// - `done` is there: the command finished by itself; its result is adopted
///   ([`Recovery::Completed`]), unless its watchdog killed it at the end of its time, which
///   makes it [`Recovery::Interrupted`];
/// - no runner ever marked its start: [`Recovery::NotStarted`] (run it);
/// - it is still running: waited for until its original timeout (counted from its start, not
///   from now) and adopted if it finishes; otherwise its process groups are killed and it is
///   [`Recovery::Interrupted`] with the output it had produced;
/// - its runner is gone without having published an outcome (killed with the caller, or the
///   machine restarted): nothing can finish it, so it is [`Recovery::Interrupted`] at once,
///   not at its timeout (see [`runner_alive`]).
fn recover(journal: &Path, timeout: Duration) -> Recovery {
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
    let began = modified(&journal.join("started"));
    if let Some(finished) = journal_report(journal) {
        remove_journal_cgroup(journal);
        return adopt(journal, finished, began, timeout);
    }
    // Wait for the runner until the call's deadline, counted from when it started.
    let remaining = began
        .and_then(|at| (at + timeout).duration_since(SystemTime::now()).ok())
        .unwrap_or(Duration::ZERO);
    let until = Instant::now() + remaining;
    let mut why = Stopped::AtTimeout;
    loop {
        if let Some(finished) = journal_report(journal) {
            remove_journal_cgroup(journal);
            return adopt(journal, finished, began, timeout);
        }
        if Instant::now() >= until {
            break;
        }
        if !runner_alive(journal) {
            // It may have published its outcome just before it exited.
            if let Some(finished) = journal_report(journal) {
                remove_journal_cgroup(journal);
                return adopt(journal, finished, began, timeout);
            }
            why = Stopped::RunnerGone;
            break;
        }
        thread::sleep(MAX_POLL);
    }
    kill_journal_groups(journal, None);
    wait_for_sandbox_end(&call_tag(journal));
    // The runner, if it is still there, publishes what it has once its command is gone.
    let until = Instant::now() + PIPE_GRACE;
    while Instant::now() < until && !journal.join("done").exists() {
        thread::sleep(MAX_POLL);
    }
    remove_journal_cgroup(journal);
    Recovery::Interrupted(partial(journal, timeout, why))
}

/// Why recovery stopped waiting for an interrupted call.
#[derive(Clone, Copy)]
enum Stopped {
    /// Its time ran out.
    AtTimeout,
    /// Its runner was gone, with no outcome published.
    RunnerGone,
}

/// Whether the runner of the call journaled in `journal` is still running: the process whose
/// pid it wrote to `started` exists, is not a zombie, and was started no later than that file
/// was written. The last condition tells the runner from a process that reused its pid after
/// it died (a later process, after a restart or a long time): such a process started after the
/// runner wrote `started`. Unknown (no pid, no `/proc`) counts as alive: recovery then waits
/// for the timeout, as it would without this check.
fn runner_alive(journal: &Path) -> bool {
    // Without its pid (a full disk left `started` empty) the runner and its command are
    // known by the call's tag among their arguments.
    let by_tag = || tagged_process_alive(&call_tag(journal));
    let Some(pid) = read_small(&journal.join("started")).and_then(|t| t.trim().parse::<u32>().ok())
    else {
        return by_tag();
    };
    let Some(written) = modified(&journal.join("started")) else { return by_tag() };
    let stat = match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Ok(stat) => stat,
        Err(err) if err.kind() == std::io::ErrorKind::NotFound => return false,
        Err(_) => return true,
    };
    // `pid (comm) state ppid ... starttime` (field 22); `comm` may hold spaces and parentheses.
    let Some((_, fields)) = stat.rsplit_once(')') else { return true };
    let fields: Vec<&str> = fields.split_whitespace().collect();
    if fields.first() == Some(&"Z") || fields.first() == Some(&"X") {
        return false;
    }
    let Some(ticks) = fields.get(19).and_then(|t| t.parse::<u64>().ok()) else { return true };
    let Some(started) = process_start(ticks) else { return true };
    // The boot time is known to the second only: two seconds of slack. A pid reused that soon
    // after the runner started is not worth waiting out a timeout for.
    started <= written + Duration::from_secs(2)
}

/// The wall-clock time of `ticks` clock ticks after boot (a process's start time in
/// `/proc/PID/stat`).
fn process_start(ticks: u64) -> Option<SystemTime> {
    let stat = std::fs::read_to_string("/proc/stat").ok()?;
    let boot: u64 = stat.lines().find_map(|l| l.strip_prefix("btime "))?.trim().parse().ok()?;
    // USER_HZ, the unit of `/proc`'s times: 100 on every architecture strata builds for.
    const USER_HZ: u64 = 100;
    let since_boot = Duration::from_millis(ticks.saturating_mul(1000) / USER_HZ);
    Some(SystemTime::UNIX_EPOCH + Duration::from_secs(boot) + since_boot)
}

/// Removes the control groups a journaled call recorded, if any (only directories named for
/// a call right under a control group hierarchy, whatever the file says).
fn remove_journal_cgroup(journal: &Path) {
    let Ok(file) = open_regular(&journal.join("cgroup")) else { return };
    let mut text = String::new();
    if file.take(4096).read_to_string(&mut text).is_err() {
        return;
    }
    for line in text.lines() {
        let path = PathBuf::from(line.trim());
        if sandbox::is_call_cgroup(&path) {
            sandbox::remove_cgroup(&path, SANDBOX_GRACE);
        }
    }
}

/// A finished journal found after a crash: completed, or killed at its deadline.
fn adopt(
    journal: &Path,
    finished: Finished,
    began: Option<SystemTime>,
    timeout: Duration,
) -> Recovery {
    let ended = modified(&journal.join("done"));
    let ran_out = match (began, ended) {
        (Some(began), Some(ended)) => ended.duration_since(began).is_ok_and(|took| took >= timeout),
        _ => false,
    };
    if finished.status.signal() == Some(9) && ran_out {
        Recovery::Interrupted(partial(journal, timeout, Stopped::AtTimeout))
    } else {
        Recovery::Completed(finished.output)
    }
}

/// What an interrupted call had printed, as a failed output that says it was stopped.
fn partial(journal: &Path, timeout: Duration, why: Stopped) -> ToolOutput {
    let stdout = read_stream(journal, "out");
    let stderr = read_stream(journal, "err");
    let mut output = report(ExitStatus::from_raw(9), &stdout, &stderr);
    let note = match why {
        Stopped::AtTimeout => format!(
            "[interrupted: the run stopped while this command ran; it was stopped at its timeout of {} ms]",
            timeout.as_millis()
        ),
        Stopped::RunnerGone => "[interrupted: the run stopped while this command ran, and its \
             process was gone when the run resumed: how far it got is unknown]"
            .to_owned(),
    };
    output.output = match output.output.rsplit_once("[killed by signal 9]") {
        Some((before, _)) => format!("{before}{note}"),
        None => note,
    };
    output.data["interrupted"] = Value::Bool(true);
    output
}

/// Opens a journal file for reading without ever blocking: the command can reach its
/// journal directory, so a FIFO or a device put there must not hang the caller.
fn open_regular(path: &Path) -> std::io::Result<std::fs::File> {
    use std::os::unix::fs::OpenOptionsExt as _;
    let file = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK | libc::O_NOCTTY)
        .open(path)?;
    if !file.metadata()?.is_file() {
        return Err(std::io::Error::other("not a regular file"));
    }
    Ok(file)
}

/// The text of a small journal file (a pid, an exit code, a count): at most 64 bytes.
fn read_small(path: &Path) -> Option<String> {
    let mut text = String::new();
    open_regular(path).ok()?.take(64).read_to_string(&mut text).ok()?;
    Some(text)
}

/// When `path` was last modified, if it can be told.
pub(super) fn modified(path: &Path) -> Option<SystemTime> {
    std::fs::metadata(path).and_then(|m| m.modified()).ok()
}

/// Kills the process groups of a journaled call: the runner's (its pid, from `started`, or
/// `runner` when the caller still holds it) and the command's (from `group`). After a crash
/// the ids come from files, and a pid may have been reused since: a group whose leader is
/// alive is killed only if the leader is one of this call's processes (its command line carries
/// the call's tag, see [`call_tag`]). A group whose leader is gone cannot have had its id reused while
/// members remain, so it is killed as it is.
fn kill_journal_groups(journal: &Path, runner: Option<u32>) {
    let read_pid =
        |name: &str| -> Option<u32> { read_small(&journal.join(name))?.trim().parse().ok() };
    let groups = [runner.or_else(|| read_pid("started")), read_pid("group")];
    for group in groups.into_iter().flatten().filter(|g| *g > 1) {
        if runner == Some(group) || leader_is_ours(group, journal) {
            kill_pgid(group);
        }
    }
}

/// The `$0` of a journaled command: names its call without revealing the journal's path.
pub(super) fn call_tag(journal: &Path) -> String {
    let digest = sha2::Sha256::digest(journal.as_os_str().as_encoded_bytes());
    format!("strata-shell-{}", agent_state::hex(&digest[..8]))
}

/// Whether process group `group` may be killed for the call journaled in `journal`: its
/// leader (the runner, or the command's `timeout`) carries the call's tag in its arguments.
fn leader_is_ours(group: u32, journal: &Path) -> bool {
    match std::fs::read(format!("/proc/{group}/cmdline")) {
        Ok(cmdline) => {
            let tag = call_tag(journal);
            cmdline.split(|b| *b == 0).any(|arg| arg == tag.as_bytes())
        }
        // No such process: the leader is gone (members, if any, still carry the id).
        Err(err) => err.kind() == std::io::ErrorKind::NotFound,
    }
}

/// Sends SIGKILL to process group `group`. Best effort: it may be gone already.
fn kill_pgid(group: u32) {
    let _ = Command::new("sh")
        .arg("-c")
        .arg(format!("kill -s KILL -- -{group}"))
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status();
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

fn run(call: &Call, command: &str, timeout: Duration) -> Result<ToolOutput, ToolError> {
    let result = run_in(call, command, timeout);
    call.clean_up();
    result
}

fn run_in(call: &Call, command: &str, timeout: Duration) -> Result<ToolOutput, ToolError> {
    const TOOL: &str = Shell::NAME;
    let root = call.root.as_path();
    // `timeout` is the watchdog that stops the command even if this process dies.
    let mut child = Command::new("timeout")
        .args(["-s", "KILL", &backstop_arg(timeout)])
        .args(call.prefix())
        .args(["sh", "-c", command, &call.tag])
        .env_clear()
        .envs(call.sandbox.command_env())
        .current_dir(root)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .process_group(0)
        .spawn()
        .map_err(|err| ToolError::io(TOOL, root, err))?;
    let stdout = Capture::start(child.stdout.take());
    let stderr = Capture::start(child.stderr.take());

    let mut status = wait_or_kill(&mut child, root, timeout)?;
    // The sandbox reports a command killed by signal N as 128 + N; report it as a plain call
    // would.
    if call.sandbox.is_enabled()
        && let Some(code @ 129..=159) = status.code()
    {
        status = ExitStatus::from_raw(code - 128);
    }

    // The command has exited: what it left in its process group goes too, which closes the
    // output pipes unless a process that left the group holds them.
    kill_group(&mut child);
    let closed_by = Instant::now() + PIPE_GRACE;
    stdout.wait_closed(closed_by);
    stderr.wait_closed(closed_by);
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
    kill_pgid(child.id());
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
        let dropped = buffer.total.saturating_sub(buffer.head.len() as u64);
        captured(&buffer.head, dropped)
    }
}

/// A stream's kept head, lossily decoded, with a truncation line when `dropped` bytes were not
/// kept.
fn captured(head: &[u8], dropped: u64) -> Captured {
    let mut text = String::from_utf8_lossy(head).into_owned();
    if dropped > 0 {
        if !text.ends_with('\n') {
            text.push('\n');
        }
        text.push_str(&format!("[truncated: {dropped} more bytes]\n"));
    }
    Captured { text, truncated: dropped > 0 }
}
