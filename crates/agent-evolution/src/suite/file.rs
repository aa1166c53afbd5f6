//! A suite folder read and checked on its own, before any team: `suite.toml`'s settings and
//! each task's check, goal or plan and files ([`SuiteFile`]); how a check runs ([`Check`],
//! [`run_check`]). [`TaskSuite::load`](super::TaskSuite::load) completes it with the suite's
//! team (evolution); `strata eval` runs it with the teams it is given.
//!
//! Everything a run would trip on later is refused here, naming the path and the reason: a
//! task without a check or with both kinds of check, a check script that is not an executable
//! file, a check command the shell cannot parse, an empty goal, a task without goal or plan,
//! and a task folder (or its plan, files or check script) that leads outside the suite folder
//! through a symbolic link.

use std::path::{Path, PathBuf};
use std::time::Duration;

use agent_core::tools::Sandbox;
use serde::Deserialize;

use super::SuiteError;

/// The largest `suite.toml` or `task.toml`.
const MAX_SETTINGS_BYTES: usize = 1024 * 1024;

/// The most files a task's `files/` folder may hold (copied into every run of it).
pub const MAX_TASK_FILES: usize = 1000;

/// How much of a check's standard error is kept.
const CHECK_STDERR_CHARS: usize = 500;

/// The settings in `suite.toml`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawSuite {
    #[serde(default)]
    team: Option<String>,
    #[serde(default)]
    task_timeout_ms: Option<u64>,
    #[serde(default)]
    check_timeout_ms: Option<u64>,
    #[serde(default)]
    heartbeat: Option<String>,
    #[serde(default)]
    time_budget_ms: Option<u64>,
    #[serde(default)]
    token_budget: Option<u64>,
}

/// The settings in a task's `task.toml`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawTask {
    #[serde(default)]
    check: Option<String>,
    #[serde(default)]
    check_script: Option<String>,
    #[serde(default)]
    goal: Option<String>,
    #[serde(default)]
    description: Option<String>,
}

/// How a task's result is checked, in the task's final workspace: exit 0 means right.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Check {
    /// A shell command (`check = "..."`), run with `sh -c`.
    Command(String),
    /// An executable file in the task's folder (`check_script = "check.sh"`), absolute.
    Script(PathBuf),
}

impl std::fmt::Display for Check {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Check::Command(command) => f.write_str(command),
            Check::Script(path) => write!(f, "{}", path.display()),
        }
    }
}

/// What a task's team works on.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Work {
    /// Its `plan.toml`.
    Plan(PathBuf),
    /// A goal in words (`goal` in `task.toml`), planned by the team.
    Goal(String),
}

/// One task of a suite folder, checked but not yet tied to a team.
#[derive(Clone, Debug)]
pub struct TaskFile {
    /// Its folder's name.
    pub name: String,
    /// Its folder (resolved).
    pub dir: PathBuf,
    /// How its result is checked.
    pub check: Check,
    /// Its plan or goal.
    pub work: Work,
    /// Files copied into its workspace first (`files/`), when it has some.
    pub files: Option<PathBuf>,
    /// What it tests, in words.
    pub description: String,
}

/// A suite folder as read and checked on its own (see the module docs).
#[derive(Clone, Debug)]
pub struct SuiteFile {
    /// The suite folder (resolved).
    pub dir: PathBuf,
    /// The team file `suite.toml` names, resolved against the folder; `None` when it names
    /// none (then the teams come from elsewhere: `strata eval --team`).
    pub team: Option<PathBuf>,
    /// The heartbeat `suite.toml` sets, if it does.
    pub heartbeat: Option<Duration>,
    /// A task still open after this fails (default 60 s).
    pub task_timeout: Duration,
    /// The most a check may take (default 10 s).
    pub check_timeout: Duration,
    /// Wall time that counts in efficiency, when set.
    pub time_budget_ms: Option<u64>,
    /// Model tokens that count in efficiency, when set.
    pub token_budget: Option<u64>,
    /// The tasks, by folder name.
    pub tasks: Vec<TaskFile>,
}

fn io(path: &Path) -> impl FnOnce(std::io::Error) -> SuiteError + '_ {
    move |source| SuiteError::Io { path: path.to_path_buf(), source }
}

/// Reads a settings, team or plan file of the suite.
pub(super) fn read_text(path: &Path) -> Result<String, SuiteError> {
    team_file::read(path, MAX_SETTINGS_BYTES).map_err(|e| match e {
        team_file::ReadError::Io { path, source } => SuiteError::Io { path, source },
        team_file::ReadError::File(e) => SuiteError::File(e),
    })
}

fn toml_error(path: &Path, e: &toml::de::Error) -> SuiteError {
    SuiteError::Field {
        path: path.to_path_buf(),
        field: "file".into(),
        reason: format!("is not a valid settings file: {}", e.message()),
    }
}

impl SuiteFile {
    /// Reads and checks the suite folder `dir` (blocking: small files, and the shell parsing
    /// each check command).
    pub fn read(dir: &Path) -> Result<Self, SuiteError> {
        let dir = std::fs::canonicalize(dir).map_err(io(dir))?;
        let settings_path = dir.join("suite.toml");
        let raw: RawSuite = toml::from_str(&read_text(&settings_path)?)
            .map_err(|e| toml_error(&settings_path, &e))?;
        let field = |field: &str, reason: String| SuiteError::Field {
            path: settings_path.clone(),
            field: field.into(),
            reason,
        };
        let heartbeat = match &raw.heartbeat {
            None => None,
            Some(text) => Some(
                parse_duration(text)
                    .filter(|d| (team_file::MIN_HEARTBEAT..=team_file::MAX_HEARTBEAT).contains(d))
                    .ok_or_else(|| {
                        field(
                            "heartbeat",
                            format!("is `{text}`; give 10ms to 1h, such as \"50ms\""),
                        )
                    })?,
            ),
        };
        let positive = |name: &str, value: Option<u64>, default: u64| -> Result<u64, SuiteError> {
            match value {
                None => Ok(default),
                Some(0) => Err(field(name, "is 0; it must be above 0".into())),
                Some(v) => Ok(v),
            }
        };
        let task_timeout = positive("task_timeout_ms", raw.task_timeout_ms, 60_000)?;
        let check_timeout = positive("check_timeout_ms", raw.check_timeout_ms, 10_000)?;
        for (name, value) in
            [("time_budget_ms", raw.time_budget_ms), ("token_budget", raw.token_budget)]
        {
            if value == Some(0) {
                return Err(field(name, "is 0; it must be above 0 (or left out)".into()));
            }
        }
        let tasks = read_tasks(&dir)?;
        Ok(Self {
            team: raw.team.map(|team| dir.join(team)),
            dir,
            heartbeat,
            task_timeout: Duration::from_millis(task_timeout),
            check_timeout: Duration::from_millis(check_timeout),
            time_budget_ms: raw.time_budget_ms,
            token_budget: raw.token_budget,
            tasks,
        })
    }
}

/// The tasks under `dir/tasks`, by folder name, each checked.
fn read_tasks(dir: &Path) -> Result<Vec<TaskFile>, SuiteError> {
    let tasks_dir = dir.join("tasks");
    inside(dir, &tasks_dir, "tasks")?;
    let mut names: Vec<String> = std::fs::read_dir(&tasks_dir)
        .map_err(io(&tasks_dir))?
        .filter_map(Result::ok)
        .filter(|e| e.path().is_dir())
        .filter_map(|e| e.file_name().into_string().ok())
        .collect();
    names.sort();
    let tasks = names
        .iter()
        .map(|name| read_task(dir, &tasks_dir.join(name), name))
        .collect::<Result<Vec<_>, _>>()?;
    if tasks.is_empty() {
        return Err(SuiteError::NoTasks { dir: dir.to_path_buf() });
    }
    Ok(tasks)
}

/// Refuses `path` when it resolves outside the suite folder `suite` (a symbolic link out of
/// it), naming `task`.
fn inside(suite: &Path, path: &Path, task: &str) -> Result<PathBuf, SuiteError> {
    let real = std::fs::canonicalize(path).map_err(io(path))?;
    if real.starts_with(suite) {
        Ok(real)
    } else {
        Err(SuiteError::Escapes { task: task.to_owned(), path: path.to_path_buf(), target: real })
    }
}

fn read_task(suite: &Path, dir: &Path, name: &str) -> Result<TaskFile, SuiteError> {
    let dir = inside(suite, dir, name)?;
    let task_path = dir.join("task.toml");
    let raw: RawTask =
        toml::from_str(&read_text(&task_path)?).map_err(|e| toml_error(&task_path, &e))?;
    let check = match (raw.check, raw.check_script) {
        (Some(_), Some(_)) => {
            return Err(SuiteError::Field {
                path: task_path,
                field: "check_script".into(),
                reason: "is given with `check`: give one of them".into(),
            });
        }
        (Some(command), None) if !command.trim().is_empty() => {
            parses(&command).map_err(|reason| SuiteError::CheckNotExecutable {
                task: name.to_owned(),
                path: task_path.clone(),
                reason,
            })?;
            Check::Command(command)
        }
        (None, Some(script)) if !script.trim().is_empty() => {
            Check::Script(script_in(suite, &dir, &script, name)?)
        }
        _ => return Err(SuiteError::MissingCheck { task: name.to_owned(), path: task_path }),
    };
    if raw.goal.as_deref().is_some_and(|g| g.trim().is_empty()) {
        return Err(SuiteError::EmptyGoal { task: name.to_owned(), path: task_path });
    }
    let plan_path = dir.join("plan.toml");
    let work = match raw.goal {
        _ if plan_path.exists() => Work::Plan(inside(suite, &plan_path, name)?),
        Some(goal) => Work::Goal(goal),
        None => {
            return Err(SuiteError::Field {
                path: task_path,
                field: "goal".into(),
                reason: format!(
                    "is missing, and there is no plan.toml in {}: give one",
                    dir.display()
                ),
            });
        }
    };
    let files = dir.join("files");
    let files = if files.exists() { Some(inside(suite, &files, name)?) } else { None };
    if let Some(files) = files.as_ref().filter(|f| !f.is_dir()) {
        return Err(SuiteError::Field {
            path: files.clone(),
            field: "files".into(),
            reason: "is not a folder: a task's files to start from are a folder `files/`".into(),
        });
    }
    Ok(TaskFile {
        name: name.to_owned(),
        dir,
        check,
        work,
        files,
        description: raw.description.unwrap_or_default(),
    })
}

/// The check script `script` of the task in `dir`: an executable file inside the suite.
fn script_in(suite: &Path, dir: &Path, script: &str, task: &str) -> Result<PathBuf, SuiteError> {
    use std::os::unix::fs::PermissionsExt as _;
    let path = dir.join(script);
    let refuse = |reason: String| SuiteError::CheckNotExecutable {
        task: task.to_owned(),
        path: path.clone(),
        reason,
    };
    if !path.exists() {
        return Err(refuse("there is no such file in the task's folder".into()));
    }
    let real = inside(suite, &path, task)?;
    let meta = std::fs::metadata(&real).map_err(io(&real))?;
    if !meta.is_file() {
        return Err(refuse("it is not a file".into()));
    }
    if meta.permissions().mode() & 0o111 == 0 {
        return Err(refuse("it has no execute permission: `chmod +x` it".into()));
    }
    Ok(real)
}

/// Whether the shell can parse `command` (`sh -n -c`): why not, if it cannot. A shell that
/// cannot be started here lets it pass (the check then fails when it runs, naming the task).
fn parses(command: &str) -> Result<(), String> {
    let output = std::process::Command::new("sh")
        .arg("-n")
        .arg("-c")
        .arg(command)
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .output();
    match output {
        Ok(output) if output.status.success() => Ok(()),
        Ok(output) => Err(format!(
            "the shell cannot parse the check command: {}",
            String::from_utf8_lossy(&output.stderr).trim()
        )),
        Err(e) => {
            tracing::debug!(error = %e, "cannot start sh to parse a check command");
            Ok(())
        }
    }
}

/// Parses `50ms`, `2s`, `1m`, `1h`.
pub(super) fn parse_duration(text: &str) -> Option<Duration> {
    let text = text.trim();
    let (number, unit) = text.split_at(text.find(|c: char| !c.is_ascii_digit())?);
    let n: u64 = number.parse().ok()?;
    match unit {
        "ms" => Some(Duration::from_millis(n)),
        "s" => Some(Duration::from_secs(n)),
        "m" => Some(Duration::from_secs(n.checked_mul(60)?)),
        "h" => Some(Duration::from_secs(n.checked_mul(3600)?)),
        _ => None,
    }
}

/// How a check ran to its end.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CheckRun {
    /// Its exit code (`None`: killed by a signal).
    pub code: Option<i32>,
    /// The start of what it wrote to standard error.
    pub stderr: String,
}

impl CheckRun {
    /// It exited 0: the result is right.
    pub fn passed(&self) -> bool {
        self.code == Some(0)
    }

    /// It could not run (exit 126 or 127: not executable, not found).
    pub fn cannot_run(&self) -> bool {
        matches!(self.code, Some(126 | 127))
    }
}

/// A check that did not run to its end.
#[derive(Debug, thiserror::Error)]
pub enum CheckError {
    /// It could not be started.
    #[error("the check cannot start: {0}")]
    Start(std::io::Error),
    /// It ran past its time limit (and was killed).
    #[error("the check ran past {} ms", .0.as_millis())]
    TimedOut(Duration),
    /// Waiting for it failed.
    #[error("the check failed: {0}")]
    Wait(std::io::Error),
}

/// Runs `check` in `workspace` under `sandbox` (a script's folder shown read-only to it), at
/// most `limit`; standard input empty, its output dropped but the start of its errors.
pub async fn run_check(
    check: &Check,
    sandbox: &Sandbox,
    workspace: &Path,
    limit: Duration,
) -> Result<CheckRun, CheckError> {
    let mut command = match check {
        Check::Command(text) => {
            let mut command = sandbox.command(workspace, "sh");
            command.arg("-c").arg(text);
            command
        }
        Check::Script(path) => {
            let folder = path.parent().unwrap_or(path);
            sandbox.clone().show_read_only(folder).command(workspace, &path.to_string_lossy())
        }
    };
    command
        .current_dir(workspace)
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .kill_on_drop(true);
    let child = command.spawn().map_err(CheckError::Start)?;
    let output = tokio::time::timeout(limit, child.wait_with_output())
        .await
        .map_err(|_| CheckError::TimedOut(limit))?
        .map_err(CheckError::Wait)?;
    let stderr = String::from_utf8_lossy(&output.stderr);
    Ok(CheckRun {
        code: output.status.code(),
        stderr: stderr.trim().chars().take(CHECK_STDERR_CHARS).collect(),
    })
}

/// Copies a task's files (`from`, its `files/` folder) into the workspace `to` (made if
/// missing): plain files and folders, at most [`MAX_TASK_FILES`] entries; symbolic links and
/// special files are not copied. Blocking.
pub fn copy_files(from: &Path, to: &Path) -> std::io::Result<()> {
    let mut copied = 0;
    copy_tree(from, to, &mut copied)
}

fn copy_tree(from: &Path, to: &Path, copied: &mut usize) -> std::io::Result<()> {
    std::fs::create_dir_all(to)?;
    for entry in std::fs::read_dir(from)? {
        let entry = entry?;
        let kind = entry.file_type()?;
        let target = to.join(entry.file_name());
        *copied += 1;
        if *copied > MAX_TASK_FILES {
            return Err(std::io::Error::other(format!(
                "{} holds more than {MAX_TASK_FILES} files",
                from.display()
            )));
        }
        if kind.is_dir() {
            copy_tree(&entry.path(), &target, copied)?;
        } else if kind.is_file() {
            std::fs::copy(entry.path(), &target)?;
        }
        // Symbolic links and special files are not copied: a task's files are plain files.
    }
    Ok(())
}
