//! The harness: a scratch directory to run `strata` in, its captured output, a child process
//! that is killed if a test fails, and helpers to compare directories and find positions.

use std::collections::BTreeMap;
use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use serde_json::Value;
use tempfile::TempDir;

/// The binary under test.
pub(crate) const STRATA: &str = env!("CARGO_BIN_EXE_strata");

/// A heartbeat fast enough for the example plan to finish in well under a second.
pub(crate) const FAST: [&str; 2] = ["--heartbeat", "20ms"];

/// A scratch directory that `strata` runs in (as its current directory).
pub(crate) struct Scratch {
    dir: TempDir,
}

impl Scratch {
    pub(crate) fn new() -> Self {
        Self { dir: tempfile::tempdir().expect("cannot create a scratch directory") }
    }

    /// A scratch directory holding the example `team.toml` and `plan.toml` from `strata init`.
    pub(crate) fn with_example() -> Self {
        let scratch = Self::new();
        scratch.strata(&["init", "."]).code(0);
        scratch
    }

    pub(crate) fn root(&self) -> &Path {
        self.dir.path()
    }

    pub(crate) fn path(&self, rel: &str) -> PathBuf {
        self.dir.path().join(rel)
    }

    pub(crate) fn write(&self, rel: &str, text: &str) {
        let path = self.path(rel);
        if let Some(parent) = path.parent() {
            std::fs::create_dir_all(parent).unwrap();
        }
        std::fs::write(path, text).unwrap();
    }

    pub(crate) fn read(&self, rel: &str) -> String {
        let path = self.path(rel);
        std::fs::read_to_string(&path)
            .unwrap_or_else(|e| panic!("cannot read {}: {e}", path.display()))
    }

    /// `strata ARGS` in this directory, stdin closed.
    pub(crate) fn command(&self, args: &[&str]) -> Command {
        let mut command = Command::new(STRATA);
        command.args(args).current_dir(self.root()).stdin(Stdio::null());
        command
    }

    /// Runs `strata ARGS` to its end.
    pub(crate) fn strata(&self, args: &[&str]) -> Out {
        Out::of(args, &mut self.command(args))
    }

    /// Starts `strata ARGS` in the background.
    pub(crate) fn spawn(&self, args: &[&str]) -> Running {
        Self::spawn_command(args, &mut self.command(args))
    }

    /// Starts `command` (`strata ARGS` from [`Scratch::command`], perhaps with its environment
    /// changed) in the background.
    pub(crate) fn spawn_command(args: &[&str], command: &mut Command) -> Running {
        let mut child = command
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("cannot start strata");
        let stdout = Arc::new(Mutex::new(String::new()));
        let stderr = Arc::new(Mutex::new(String::new()));
        let readers = vec![
            drain(child.stdout.take().expect("piped"), stdout.clone()),
            drain(child.stderr.take().expect("piped"), stderr.clone()),
        ];
        Running { args: args.join(" "), child, stdout, stderr, readers }
    }
}

/// What one `strata` command did.
#[derive(Debug)]
pub(crate) struct Out {
    pub(crate) args: String,
    pub(crate) status: ExitStatus,
    pub(crate) stdout: String,
    pub(crate) stderr: String,
}

impl Out {
    /// Runs `command` (`strata ARGS`, perhaps with its environment changed) to its end.
    pub(crate) fn of(args: &[&str], command: &mut Command) -> Out {
        let output = command.output().expect("cannot start strata");
        Out {
            args: args.join(" "),
            status: output.status,
            stdout: String::from_utf8_lossy(&output.stdout).into_owned(),
            stderr: String::from_utf8_lossy(&output.stderr).into_owned(),
        }
    }

    /// Asserts the exit code, showing everything the command printed if it is wrong.
    #[track_caller]
    pub(crate) fn code(&self, expected: i32) -> &Self {
        assert_eq!(
            self.status.code(),
            Some(expected),
            "`strata {}` exited with {:?}, expected {expected}\n--- stdout:\n{}\n--- stderr:\n{}",
            self.args,
            self.status,
            self.stdout,
            self.stderr
        );
        self
    }

    /// Stdout parsed as one JSON document.
    #[track_caller]
    pub(crate) fn json(&self) -> Value {
        serde_json::from_str(&self.stdout).unwrap_or_else(|e| {
            panic!("`strata {}` printed no JSON ({e}):\n{}", self.args, self.stdout)
        })
    }

    /// Asserts stdout holds every one of `needles`.
    #[track_caller]
    pub(crate) fn stdout_has(&self, needles: &[&str]) -> &Self {
        for needle in needles {
            assert!(
                self.stdout.contains(needle),
                "`strata {}` stdout lacks {needle:?}:\n{}",
                self.args,
                self.stdout
            );
        }
        self
    }

    /// Asserts a bad-input failure: exit code 2, nothing on stdout, and exactly one line on
    /// stderr, an `error:` holding every one of `needles`.
    #[track_caller]
    pub(crate) fn bad_input(&self, needles: &[&str]) -> &Self {
        self.code(2);
        assert_eq!(self.stdout, "", "`strata {}` printed to stdout on bad input", self.args);
        let lines: Vec<&str> = self.stderr.lines().filter(|l| !l.trim().is_empty()).collect();
        assert_eq!(
            lines.len(),
            1,
            "`strata {}` should print one error line, printed:\n{}",
            self.args,
            self.stderr
        );
        assert!(lines[0].starts_with("error: "), "not an error line: {}", lines[0]);
        for needle in needles {
            assert!(
                lines[0].contains(needle),
                "`strata {}`: the error lacks {needle:?}:\n{}",
                self.args,
                lines[0]
            );
        }
        self
    }
}

/// A `strata` process running in the background; killed when dropped, so a failing test
/// leaves nothing behind.
pub(crate) struct Running {
    args: String,
    child: Child,
    stdout: Arc<Mutex<String>>,
    stderr: Arc<Mutex<String>>,
    readers: Vec<JoinHandle<()>>,
}

impl Running {
    pub(crate) fn pid(&self) -> u32 {
        self.child.id()
    }

    pub(crate) fn stderr_so_far(&self) -> String {
        self.stderr.lock().unwrap().clone()
    }

    pub(crate) fn stdout_so_far(&self) -> String {
        self.stdout.lock().unwrap().clone()
    }

    /// Whether the process has exited.
    pub(crate) fn exited(&mut self) -> bool {
        self.child.try_wait().expect("cannot poll strata").is_some()
    }

    /// SIGKILL, then waits for the process.
    pub(crate) fn kill(mut self) -> Out {
        self.child.kill().expect("cannot kill strata");
        self.finish()
    }

    /// Waits for the process to exit on its own, and collects its output.
    pub(crate) fn finish(mut self) -> Out {
        let status = self.child.wait().expect("cannot wait for strata");
        for reader in std::mem::take(&mut self.readers) {
            reader.join().expect("an output reader panicked");
        }
        Out {
            args: self.args.clone(),
            status,
            stdout: self.stdout.lock().unwrap().clone(),
            stderr: self.stderr.lock().unwrap().clone(),
        }
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        if matches!(self.child.try_wait(), Ok(None)) {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

fn drain(mut pipe: impl Read + Send + 'static, into: Arc<Mutex<String>>) -> JoinHandle<()> {
    std::thread::spawn(move || {
        let mut buf = [0u8; 4096];
        while let Ok(n) = pipe.read(&mut buf) {
            if n == 0 {
                break;
            }
            into.lock().unwrap().push_str(&String::from_utf8_lossy(&buf[..n]));
        }
    })
}

/// Polls `ready` until it holds; panics after a minute (a hang, not a slow machine).
#[track_caller]
pub(crate) fn wait_for(what: &str, mut ready: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(60);
    while !ready() {
        assert!(Instant::now() < deadline, "gave up waiting for {what}");
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// Every file under `dir` with its bytes, every symbolic link with its target (not followed),
/// and every directory (as `None`); empty if `dir` does
/// not exist. Two equal snapshots mean nothing was written.
pub(crate) fn snapshot(dir: &Path) -> BTreeMap<PathBuf, Option<Vec<u8>>> {
    let mut all = BTreeMap::new();
    let mut todo = vec![dir.to_path_buf()];
    while let Some(path) = todo.pop() {
        let Ok(meta) = std::fs::symlink_metadata(&path) else { continue };
        let rel = path.strip_prefix(dir).unwrap().to_path_buf();
        if meta.is_dir() {
            all.insert(rel, None);
            for entry in std::fs::read_dir(&path).unwrap() {
                todo.push(entry.unwrap().path());
            }
        } else if meta.file_type().is_symlink() {
            // A link is its target, never followed.
            let target = std::fs::read_link(&path).unwrap();
            all.insert(rel, Some(target.into_os_string().into_encoded_bytes()));
        } else {
            all.insert(rel, Some(std::fs::read(&path).unwrap()));
        }
    }
    all
}

/// `line:column` (1-based) of the first `value` at or after the first `anchor` in `text`: where
/// an error about that value should point.
#[track_caller]
pub(crate) fn pos(text: &str, anchor: &str, value: &str) -> String {
    let start = text.find(anchor).unwrap_or_else(|| panic!("{anchor:?} is not in the file"));
    let at = start
        + text[start..].find(value).unwrap_or_else(|| panic!("{value:?} is not after {anchor:?}"));
    let before = &text[..at];
    let line = before.matches('\n').count() + 1;
    let column = before.rsplit('\n').next().unwrap_or_default().chars().count() + 1;
    format!("{line}:{column}")
}

/// `text` with the first line that starts with `from` changed to start with `to` (comments
/// in the example files mention field names too); panics if there is none.
#[track_caller]
pub(crate) fn replace_once(text: &str, from: &str, to: &str) -> String {
    let at = if text.starts_with(from) {
        0
    } else {
        text.find(&format!("\n{from}")).unwrap_or_else(|| panic!("no line starts with {from:?}"))
            + 1
    };
    format!("{}{to}{}", &text[..at], &text[at + from.len()..])
}

/// The run id from the first line `strata run` prints: `run ID started: ...`.
#[track_caller]
pub(crate) fn run_id_of(out: &Out) -> String {
    let first = out.stdout.lines().next().unwrap_or_default();
    let id = first
        .strip_prefix("run ")
        .and_then(|rest| rest.split_once(" started"))
        .map(|(id, _)| id.to_owned());
    id.unwrap_or_else(|| panic!("no run id in the first line: {first:?}"))
}

/// The JSON object of `strata runs --json` for `run_id`.
#[track_caller]
pub(crate) fn listed_run(scratch: &Scratch, data: &str, run_id: &str) -> Value {
    let runs = scratch.strata(&["runs", "--data", data, "--json"]).code(0).json();
    let all = runs.as_array().expect("`runs --json` prints an array");
    all.iter()
        .find(|r| r["run_id"] == run_id)
        .unwrap_or_else(|| panic!("run {run_id} is not listed: {runs}"))
        .clone()
}

/// The example run to success with id `r` in data directory `D`; its run directory.
pub(crate) fn finished_run(s: &Scratch) -> PathBuf {
    let args = [
        "run",
        "plan.toml",
        "--team",
        "team.toml",
        "--data",
        "D",
        "--workspace",
        "W",
        "--run-id",
        "r",
        FAST[0],
        FAST[1],
        "--quiet",
    ];
    let run = s.strata(&args);
    run.code(0);
    assert_eq!(run_id_of(&run), "r");
    s.path("D/r")
}

/// `strata run plan.toml --team team.toml` in the background, as run `id` in `D`, fast.
pub(crate) fn start_run(s: &Scratch, id: &str) -> Running {
    s.spawn(&[
        "run",
        "plan.toml",
        "--team",
        "team.toml",
        "--data",
        "D",
        "--run-id",
        id,
        FAST[0],
        FAST[1],
        "--no-sync",
        "--quiet",
    ])
}

/// The id of the first decision of live run `id` that `waiting` accepts, once there is one
/// (read through `inspect` on the live run; fails if the run ends first).
pub(crate) fn pending_decision(
    s: &Scratch,
    run: &mut Running,
    id: &str,
    what: &str,
    waiting: impl Fn(&serde_json::Value) -> bool,
) -> String {
    let mut found = None;
    wait_for(what, || {
        assert!(!run.exited(), "the run ended first:\n{}", run.stderr_so_far());
        let out = s.strata(&["inspect", id, "decisions", "--data", "D", "--json"]);
        if out.status.code() != Some(0) {
            return false; // the copy of a live run may be caught mid-write
        }
        let decisions: serde_json::Value = out.json();
        found = decisions
            .as_array()
            .unwrap()
            .iter()
            .find(|d| waiting(d))
            .map(|d| d["id"].as_str().unwrap().to_owned());
        found.is_some()
    });
    found.unwrap()
}

/// Three steps; the second is a `shell` command that waits at a gate (a file the test creates),
/// so a test knows the run is in the middle of a side effect when it stops it.
pub(crate) const GATED_PLAN: &str = r#"
id = "gated"
goal = "write, wait at a gate, then finish"

[[steps]]
id = "write-hello"
domain = "docs"
tool = "write_file"
args = { path = "hello.txt", content = "hello\n" }

[[steps]]
id = "gate"
domain = "build"
tool = "shell"
args = { command = "touch waiting; while [ ! -e go ]; do sleep 0.01; done; echo ran >> count.txt; cat hello.txt", timeout_ms = 120000 }
after = ["write-hello"]

[[steps]]
id = "finish"
domain = "docs"
tool = "write_file"
args = { path = "done.txt", content = "done\n" }
after = ["gate"]
"#;

/// The gate's file; opened when dropped, so a failing test leaves no shell waiting.
pub(crate) struct Gate(pub(crate) PathBuf);

impl Gate {
    pub(crate) fn open(&self) {
        std::fs::write(&self.0, "").unwrap();
    }
}

impl Drop for Gate {
    fn drop(&mut self) {
        let _ = std::fs::write(&self.0, "");
    }
}

/// `strata run` of [`GATED_PLAN`] in `s` as run `id` (data `D`, workspace `W`, heartbeat
/// `heartbeat`, then `more`), its command's environment set by `env`, once its shell step waits
/// at the gate: the process, and the gate that lets it go on.
pub(crate) fn start_gated(
    s: &Scratch,
    id: &str,
    heartbeat: &str,
    more: &[&str],
    env: impl FnOnce(&mut Command),
) -> (Running, Gate) {
    s.write("gated.toml", GATED_PLAN);
    std::fs::create_dir_all(s.path("W")).unwrap();
    let gate = Gate(s.path("W/go"));
    let mut args = vec![
        "run",
        "gated.toml",
        "--data",
        "D",
        "--workspace",
        "W",
        "--run-id",
        id,
        "--heartbeat",
        heartbeat,
    ];
    args.extend_from_slice(more);
    let mut command = s.command(&args);
    env(&mut command);
    let mut run = Scratch::spawn_command(&args, &mut command);
    wait_for("the gate step to start", || {
        assert!(!run.exited(), "the run exited before the gate:\n{}", run.stderr_so_far());
        s.path("W/waiting").exists()
    });
    (run, gate)
}

/// How many calls of `tool` run `id` in data directory `D` audited.
pub(crate) fn audited_calls(s: &Scratch, id: &str, tool: &str) -> usize {
    let audit = s.strata(&["inspect", id, "audit", "--data", "D", "--json"]).code(0).json();
    audit
        .as_array()
        .unwrap()
        .iter()
        .filter(|r| r["event"]["event"] == "tool_call" && r["event"]["tool"] == tool)
        .count()
}
