//! `cargo xtask bench --models`: teams driven by a real model, measured as a user meets them.
//!
//! Each run is the `strata` binary started with the README's settings and nothing else (no
//! private team file, no raised limits), on one of two backends:
//!
//! - **embedded**: `--reasoner local`, Gemma 3 270M on llama.cpp in the strata process;
//! - **server**: `--reasoner openai --base-url URL --model NAME --small-model` (the README's
//!   flag for a small model behind a server) against llama-cpp-python's OpenAI-compatible
//!   server (the one `cargo xtask setup` installs) serving the same GGUF file on loopback.
//!
//! and one of three tasks:
//!
//! - **hello**: `examples/hello/plan.toml` on `examples/hello/team.toml`; checked by the files
//!   the plan writes;
//! - **todo**: the one-file goal [`TODO_GOAL`] on `examples/goal/team.toml`; checked by
//!   [`check_todo`]: `notes/todo.md` lists at least three tasks;
//! - **wordcount**: the goal shipped in `examples/goal/goal.txt`; checked by running its tests
//!   (`python3 test_wordcount.py` in the workspace).
//!
//! Every run gets a fresh data directory and workspace. Decoding is greedy (temperature 0) on
//! both backends, so repeated runs differ by timing only (which agent's call comes first, and
//! hence what each model sees); the issue's "varying seed" has nothing to vary at temperature
//! 0. The figures per backend and task: successes, median and p90 wall time, model calls and
//! tokens (from `strata inspect RUN usage --json`), plan repairs (audit records of the plan
//! repair event) and each failure's reason, printed as a table and written to `BENCHMARKS.md`
//! between the markers [`BEGIN`] and [`END`]. A run that has not ended after [`RUN_LIMIT`] is
//! killed and counted as failed with that reason.

use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use serde_json::Value;

use crate::{cargo, run as run_command};

/// The one-file goal of issue #32.
pub(crate) const TODO_GOAL: &str =
    "create notes/todo.md listing three tasks for setting up a Rust project";

/// How long one run may take before the bench kills it.
const RUN_LIMIT: Duration = Duration::from_secs(30 * 60);

/// The model name the server is started with (and `--model` names).
const SERVER_MODEL: &str = "gemma-3-270m";

/// Where the section starts and ends in `BENCHMARKS.md`.
const BEGIN: &str =
    "<!-- models:begin (written by `cargo xtask bench --models`; edits inside are overwritten) -->";
const END: &str = "<!-- models:end -->";

/// Where the model runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Backend {
    Embedded,
    Server,
}

impl Backend {
    fn name(self) -> &'static str {
        match self {
            Backend::Embedded => "embedded",
            Backend::Server => "server",
        }
    }
}

/// What the team is asked to do.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Task {
    Hello,
    Todo,
    WordCount,
}

impl Task {
    fn name(self) -> &'static str {
        match self {
            Task::Hello => "hello",
            Task::Todo => "todo",
            Task::WordCount => "wordcount",
        }
    }
}

/// What `cargo xtask bench --models` was asked.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Options {
    pub(crate) runs: u32,
    pub(crate) backends: Vec<Backend>,
    pub(crate) tasks: Vec<Task>,
    /// Write `BENCHMARKS.md` (only when every backend and task was run).
    pub(crate) write: bool,
}

/// Parses `[--runs N] [--backend embedded|server] [--task hello|todo|wordcount]` (each of the
/// last two may be given more than once; default: all).
pub(crate) fn args(args: &[&str]) -> anyhow::Result<Options> {
    let mut runs = 10;
    let (mut backends, mut tasks) = (Vec::new(), Vec::new());
    let mut it = args.iter();
    while let Some(arg) = it.next() {
        let value = it.next().with_context(|| format!("{arg} needs a value"))?;
        match *arg {
            "--runs" => {
                runs =
                    value.parse().ok().filter(|n| *n > 0).with_context(|| {
                        format!("--runs takes a positive number, not `{value}`")
                    })?;
            }
            "--backend" => backends.push(match *value {
                "embedded" => Backend::Embedded,
                "server" => Backend::Server,
                other => bail!("--backend is `embedded` or `server`, not `{other}`"),
            }),
            "--task" => tasks.push(match *value {
                "hello" => Task::Hello,
                "todo" => Task::Todo,
                "wordcount" => Task::WordCount,
                other => bail!("--task is `hello`, `todo` or `wordcount`, not `{other}`"),
            }),
            other => bail!("unknown option `{other}` of `bench --models`"),
        }
    }
    let write = backends.is_empty() && tasks.is_empty() && runs == 10;
    if backends.is_empty() {
        backends = vec![Backend::Embedded, Backend::Server];
    }
    if tasks.is_empty() {
        tasks = vec![Task::Hello, Task::Todo, Task::WordCount];
    }
    Ok(Options { runs, backends, tasks, write })
}

/// One run's outcome.
#[derive(Clone, Debug, Default, PartialEq)]
pub(crate) struct Outcome {
    pub(crate) ok: bool,
    pub(crate) wall: Duration,
    pub(crate) calls: u64,
    pub(crate) tokens: u64,
    pub(crate) repairs: u64,
    /// Why it failed (empty when it succeeded).
    pub(crate) reason: String,
}

/// Runs the bench.
pub(crate) fn run(root: &Path, options: &Options) -> anyhow::Result<()> {
    run_command(cargo(root).args([
        "build",
        "--quiet",
        "--locked",
        "-p",
        "agent-cli",
        "--features",
        "local",
        "--bin",
        "strata",
    ]))?;
    let strata = crate::bench::target_dir(root)?.join("debug").join("strata");
    let model = model_file(&strata)?;
    let scratch = crate::bench::target_dir(root)?.join("bench-models");
    if scratch.exists() {
        std::fs::remove_dir_all(&scratch)
            .with_context(|| format!("cannot clear {}", scratch.display()))?;
    }
    let mut rows: Vec<(Backend, Task, Vec<Outcome>)> = Vec::new();
    for &backend in &options.backends {
        let server = match backend {
            Backend::Server => Some(Server::start(&model)?),
            Backend::Embedded => None,
        };
        for &task in &options.tasks {
            let mut outcomes = Vec::new();
            for i in 0..options.runs {
                let dir = scratch.join(format!("{}-{}-{i}", backend.name(), task.name()));
                let outcome = run_one(root, &strata, &dir, backend, task, server.as_ref())?;
                println!(
                    "models: {} {} run {}/{}: {} in {:.0} s, {} calls, {} tokens, {} repairs{}",
                    backend.name(),
                    task.name(),
                    i + 1,
                    options.runs,
                    if outcome.ok { "ok" } else { "FAILED" },
                    outcome.wall.as_secs_f64(),
                    outcome.calls,
                    outcome.tokens,
                    outcome.repairs,
                    if outcome.ok { String::new() } else { format!(": {}", outcome.reason) }
                );
                outcomes.push(outcome);
            }
            rows.push((backend, task, outcomes));
        }
    }
    let table = table(&rows);
    println!("\n{table}");
    if options.write {
        let path = root.join("BENCHMARKS.md");
        let existing = std::fs::read_to_string(&path).ok();
        let section = section(&table, &rows);
        std::fs::write(&path, update_document(existing.as_deref(), &section))
            .with_context(|| format!("cannot write {}", path.display()))?;
        println!("written to {}", path.display());
    } else {
        println!("(a partial run: BENCHMARKS.md is left as it is; it is written by the full run)");
    }
    Ok(())
}

/// The embedded model's file, fetched by `strata model fetch` (which the bench does not run:
/// it is the one command that downloads).
pub(crate) fn model_file(strata: &Path) -> anyhow::Result<PathBuf> {
    let out = Command::new(strata)
        .args(["model", "path"])
        .output()
        .with_context(|| format!("cannot run {}", strata.display()))?;
    let text = String::from_utf8_lossy(&out.stdout);
    let path = PathBuf::from(text.trim());
    if !out.status.success() || !path.is_file() {
        bail!(
            "the embedded model is not there ({}): run `{} model fetch` first",
            text.trim(),
            strata.display()
        );
    }
    Ok(path)
}

/// The command line of one run: the README's, with a data directory, a workspace and a run id.
fn command(
    root: &Path,
    strata: &Path,
    backend: Backend,
    task: Task,
    server: Option<&Server>,
) -> Command {
    let mut command = Command::new(strata);
    command.arg("run");
    match task {
        Task::Hello => {
            command
                .arg(root.join("examples/hello/plan.toml"))
                .arg("--team")
                .arg(root.join("examples/hello/team.toml"));
        }
        Task::Todo => {
            command.args(["--goal", TODO_GOAL, "--team"]).arg(root.join("examples/goal/team.toml"));
        }
        Task::WordCount => {
            let goal =
                std::fs::read_to_string(root.join("examples/goal/goal.txt")).unwrap_or_default();
            command
                .args(["--goal", goal.trim(), "--team"])
                .arg(root.join("examples/goal/team.toml"));
        }
    }
    match (backend, server) {
        (Backend::Server, Some(server)) => {
            command.args(["--reasoner", "openai", "--base-url", &server.base_url(), "--model"]);
            // A 270M model: the README's flag for a small model behind a server.
            command.args([SERVER_MODEL, "--small-model"]);
        }
        _ => {
            command.args(["--reasoner", "local"]);
        }
    }
    command
}

fn run_one(
    root: &Path,
    strata: &Path,
    dir: &Path,
    backend: Backend,
    task: Task,
    server: Option<&Server>,
) -> anyhow::Result<Outcome> {
    let data = dir.join("data");
    let workspace = dir.join("workspace");
    std::fs::create_dir_all(&workspace)
        .with_context(|| format!("cannot create {}", workspace.display()))?;
    let mut command = command(root, strata, backend, task, server);
    command
        .arg("--data")
        .arg(&data)
        .arg("--workspace")
        .arg(&workspace)
        .args(["--run-id", "bench", "--quiet"])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(
            std::fs::File::create(dir.join("stderr.txt"))
                .context("cannot create the run's stderr file")?,
        );
    let started = Instant::now();
    let mut child = command.spawn().context("cannot start strata")?;
    let status = loop {
        if let Some(status) = child.try_wait()? {
            break Some(status);
        }
        if started.elapsed() > RUN_LIMIT {
            let _ = child.kill();
            let _ = child.wait();
            break None;
        }
        std::thread::sleep(Duration::from_millis(200));
    };
    let wall = started.elapsed();
    let stderr = std::fs::read_to_string(dir.join("stderr.txt")).unwrap_or_default();
    let (calls, tokens) = usage(strata, &data);
    let repairs = repairs(strata, &data);
    let mut outcome = Outcome { ok: false, wall, calls, tokens, repairs, reason: String::new() };
    outcome.reason = match status {
        None => {
            format!("still running after {} min: killed by the bench", RUN_LIMIT.as_secs() / 60)
        }
        Some(status) if !status.success() => {
            // The run's own reason (`--quiet` prints it on stdout, which the bench drops), else
            // what strata said on stderr (a refusal before the run).
            let why = std::fs::read(data.join("bench").join("run.json"))
                .ok()
                .and_then(|bytes| serde_json::from_slice::<Value>(&bytes).ok())
                .and_then(|info| info["failure"].as_str().map(|f| cut(f, 300)))
                .unwrap_or_else(|| last_line(&stderr));
            format!("exit {}: {why}", status.code().unwrap_or(-1))
        }
        Some(_) => match check(task, &workspace) {
            Ok(()) => {
                outcome.ok = true;
                String::new()
            }
            Err(why) => format!("exit 0, but {why}"),
        },
    };
    Ok(outcome)
}

/// The run's model calls and tokens (in and out), from `inspect usage --json`; 0 when none
/// are recorded.
fn usage(strata: &Path, data: &Path) -> (u64, u64) {
    let Some(v) = inspect(strata, data, "usage") else { return (0, 0) };
    let total = &v["usage"]["total"];
    let n = |key: &str| total[key].as_u64().unwrap_or(0);
    (n("calls"), n("input_tokens") + n("output_tokens"))
}

/// How many plan repairs the run's audit log records.
fn repairs(strata: &Path, data: &Path) -> u64 {
    let Some(Value::Array(records)) = inspect(strata, data, "audit") else { return 0 };
    records
        .iter()
        .filter(|r| r["event"]["event"] == "answer_repair" && r["event"]["decision"] == "plan")
        .count() as u64
}

fn inspect(strata: &Path, data: &Path, view: &str) -> Option<Value> {
    let out = Command::new(strata)
        .args(["inspect", "bench", view, "--json", "--data"])
        .arg(data)
        .stderr(Stdio::null())
        .output()
        .ok()?;
    serde_json::from_slice(&out.stdout).ok()
}

/// Whether the task's work is there and right.
fn check(task: Task, workspace: &Path) -> Result<(), String> {
    match task {
        Task::Hello => {
            let hello = std::fs::read_to_string(workspace.join("hello.txt")).unwrap_or_default();
            let notes =
                std::fs::read_to_string(workspace.join("notes/plan.md")).unwrap_or_default();
            if hello != "hello, strata\n" {
                return Err(format!("hello.txt holds {hello:?}"));
            }
            if !notes.starts_with("# Plan") {
                return Err(format!("notes/plan.md holds {notes:?}"));
            }
            Ok(())
        }
        Task::Todo => check_todo(
            &std::fs::read_to_string(workspace.join("notes/todo.md"))
                .map_err(|e| format!("notes/todo.md cannot be read: {e}"))?,
        ),
        Task::WordCount => {
            for file in ["wordcount.py", "test_wordcount.py", "README.md"] {
                if !workspace.join(file).is_file() {
                    return Err(format!("{file} is missing"));
                }
            }
            let out = Command::new("python3")
                .arg("test_wordcount.py")
                .current_dir(workspace)
                .stdin(Stdio::null())
                .output()
                .map_err(|e| format!("cannot run python3: {e}"))?;
            if !out.status.success() {
                return Err(format!(
                    "python3 test_wordcount.py fails: {}",
                    last_line(&String::from_utf8_lossy(&out.stderr))
                ));
            }
            // Tests that check nothing pass too: the module must count words.
            let probe = Command::new("python3")
                .args([
                    "-c",
                    "import wordcount; r = wordcount.count_words('A a b'); assert r == {'a': 2, 'b': 1}, r",
                ])
                .current_dir(workspace)
                .stdin(Stdio::null())
                .output()
                .map_err(|e| format!("cannot run python3: {e}"))?;
            if !probe.status.success() {
                return Err(format!(
                    "count_words('A a b') is wrong: {}",
                    last_line(&String::from_utf8_lossy(&probe.stderr))
                ));
            }
            Ok(())
        }
    }
}

/// `notes/todo.md` lists at least three tasks ([`crate::todo_list::list_items`]).
pub(crate) fn check_todo(text: &str) -> Result<(), String> {
    let items = crate::todo_list::list_items(text);
    if items >= 3 {
        Ok(())
    } else {
        Err(format!("notes/todo.md lists {items} task(s), not three: {:?}", cut(text, 200)))
    }
}

fn cut(text: &str, max: usize) -> String {
    match text.char_indices().nth(max) {
        Some((at, _)) => format!("{}…", &text[..at]),
        None => text.to_owned(),
    }
}

fn last_line(text: &str) -> String {
    cut(text.lines().rev().find(|l| !l.trim().is_empty()).unwrap_or("(no output)").trim(), 300)
}

/// llama-cpp-python's server on a free loopback port, killed when dropped.
struct Server {
    child: Child,
    port: u16,
}

impl Server {
    fn start(model: &Path) -> anyhow::Result<Self> {
        let python = crate::pyenv::llama_server_python()?;
        if !python.is_file() {
            bail!(
                "llama-cpp-python's server is not installed at {}: run `cargo xtask setup`",
                python.display()
            );
        }
        let port = TcpListener::bind("127.0.0.1:0")?.local_addr()?.port();
        let child = Command::new(&python)
            .args(["-m", "llama_cpp.server", "--model"])
            .arg(model)
            .args(["--model_alias", SERVER_MODEL, "--host", "127.0.0.1", "--port"])
            .arg(port.to_string())
            .args(["--n_ctx", "4096", "--n_threads", "2", "--verbose", "false"])
            .env("OMP_WAIT_POLICY", "PASSIVE")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .with_context(|| format!("cannot start {}", python.display()))?;
        let server = Self { child, port };
        let started = Instant::now();
        while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
            if started.elapsed() > Duration::from_secs(120) {
                bail!("llama-cpp-python's server did not listen on port {port} within 2 min");
            }
            std::thread::sleep(Duration::from_millis(200));
        }
        Ok(server)
    }

    fn base_url(&self) -> String {
        format!("http://127.0.0.1:{}/v1", self.port)
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The `p`-quantile (0..=1) of `values`, nearest rank; 0 when empty.
pub(crate) fn quantile(values: &[f64], p: f64) -> f64 {
    if values.is_empty() {
        return 0.0;
    }
    let mut sorted = values.to_vec();
    sorted.sort_by(f64::total_cmp);
    let rank = ((p * sorted.len() as f64).ceil() as usize).clamp(1, sorted.len());
    sorted[rank - 1]
}

/// The table of figures, one row per backend and task.
pub(crate) fn table(rows: &[(Backend, Task, Vec<Outcome>)]) -> String {
    let mut out = String::from(
        "| backend | task | successes | median wall | p90 wall | model calls (median) | tokens (median) | plan repairs (total) |\n|---|---|---|---|---|---|---|---|\n",
    );
    for (backend, task, outcomes) in rows {
        let walls: Vec<f64> = outcomes.iter().map(|o| o.wall.as_secs_f64()).collect();
        let calls: Vec<f64> = outcomes.iter().map(|o| o.calls as f64).collect();
        let tokens: Vec<f64> = outcomes.iter().map(|o| o.tokens as f64).collect();
        let ok = outcomes.iter().filter(|o| o.ok).count();
        out.push_str(&format!(
            "| {} | {} | {ok}/{} | {:.0} s | {:.0} s | {:.0} | {:.0} | {} |\n",
            backend.name(),
            task.name(),
            outcomes.len(),
            quantile(&walls, 0.5),
            quantile(&walls, 0.9),
            quantile(&calls, 0.5),
            quantile(&tokens, 0.5),
            outcomes.iter().map(|o| o.repairs).sum::<u64>(),
        ));
    }
    out
}

/// The section of `BENCHMARKS.md`: how it was measured, the table and every failure's reason.
fn section(table: &str, rows: &[(Backend, Task, Vec<Outcome>)]) -> String {
    let cores = std::thread::available_parallelism().map_or(0, |n| n.get());
    let mut out = format!(
        "## Teams driven by a model\n\nMeasured by `cargo xtask bench --models` on {cores} cores: \
         each task 10 times per backend, with the README's settings only (`--reasoner local`; \
         `--reasoner openai --base-url URL --model {SERVER_MODEL} --small-model` against \
         llama-cpp-python {}'s server on loopback), the same Gemma 3 270M Q4_K_M file, greedy \
         decoding (so the 10 runs of a task differ only by timing). Wall \
         time is the whole `strata run`, start-up and model load included.\n\n{table}\n",
        crate::pyenv::LLAMA_CPP_PYTHON
    );
    let failures: Vec<String> = rows
        .iter()
        .flat_map(|(backend, task, outcomes)| {
            failed_runs(outcomes).into_iter().map(move |(runs, reason)| {
                format!("- {} {} {runs}: {reason}", backend.name(), task.name())
            })
        })
        .collect();
    if failures.is_empty() {
        out.push_str("Every run succeeded.\n");
    } else {
        out.push_str("Why each failed run failed:\n\n");
        out.push_str(&failures.join("\n"));
        out.push('\n');
    }
    out
}

/// The failed runs of one row grouped by reason, in the order each reason first failed a run:
/// (`run 3` or `runs 1, 2, 4`, the reason).
pub(crate) fn failed_runs(outcomes: &[Outcome]) -> Vec<(String, String)> {
    let mut groups: Vec<(Vec<usize>, &str)> = Vec::new();
    for (i, o) in outcomes.iter().enumerate().filter(|(_, o)| !o.ok) {
        match groups.iter_mut().find(|(_, reason)| *reason == o.reason) {
            Some((runs, _)) => runs.push(i + 1),
            None => groups.push((vec![i + 1], &o.reason)),
        }
    }
    groups
        .into_iter()
        .map(|(runs, reason)| {
            let numbers: Vec<String> = runs.iter().map(ToString::to_string).collect();
            let label = if runs.len() == 1 { "run" } else { "runs" };
            (format!("{label} {}", numbers.join(", ")), reason.to_owned())
        })
        .collect()
}

/// `BENCHMARKS.md` with `section` between the markers: replaced when they are there, appended
/// otherwise.
pub(crate) fn update_document(existing: Option<&str>, section: &str) -> String {
    between_markers(existing, BEGIN, END, section)
}

/// `existing` (a Markdown document, `None` when there is none yet) with `section` between the
/// markers `begin` and `end`: replaced when they are there, appended otherwise.
pub(crate) fn between_markers(
    existing: Option<&str>,
    begin: &str,
    end: &str,
    section: &str,
) -> String {
    let block = format!("{begin}\n\n{}\n{end}\n", section.trim_end());
    let Some(existing) = existing else { return format!("# Benchmarks\n\n{block}") };
    match (existing.find(begin), existing.find(end)) {
        (Some(at), Some(to)) if at < to => {
            let after = &existing[to + end.len()..];
            format!("{}{block}{}", &existing[..at], after.strip_prefix('\n').unwrap_or(after))
        }
        _ => format!("{}\n\n{block}", existing.trim_end()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn failed_runs_are_grouped_by_reason() {
        let run =
            |ok: bool, reason: &str| Outcome { ok, reason: reason.into(), ..Outcome::default() };
        let outcomes =
            [run(false, "a"), run(true, ""), run(false, "b"), run(false, "a"), run(false, "b")];
        assert_eq!(
            failed_runs(&outcomes),
            [("runs 1, 4".to_owned(), "a".to_owned()), ("runs 3, 5".to_owned(), "b".to_owned())]
        );
        assert_eq!(failed_runs(&outcomes[1..3]), [("run 2".to_owned(), "b".to_owned())]);
        assert!(failed_runs(&outcomes[1..2]).is_empty());
    }

    #[test]
    fn a_todo_needs_three_listed_tasks() {
        assert!(check_todo("# Todo\n- install rustup\n- cargo new app\n- add clippy\n").is_ok());
        assert!(check_todo("1. install rustup\n2) cargo new\n* [ ] set up CI\n").is_ok());
        let two = check_todo("- install rustup\n- cargo new app\ntext\n");
        assert!(matches!(&two, Err(why) if why.contains("2 task(s)")), "{two:?}");
        assert!(check_todo("-\n- a\n- b\n- c\n").is_err(), "items without text are not tasks");
    }

    #[test]
    fn quantiles_take_the_nearest_rank() {
        let v: Vec<f64> = (1..=10).map(f64::from).collect();
        assert_eq!(quantile(&v, 0.5), 5.0);
        assert_eq!(quantile(&v, 0.9), 9.0);
        assert_eq!(quantile(&[], 0.5), 0.0);
    }

    #[test]
    fn options_default_to_everything_and_refuse_unknown_values() {
        let Ok(all) = args(&[]) else { panic!("the defaults are refused") };
        assert_eq!(all.runs, 10);
        assert_eq!(all.backends.len(), 2);
        assert_eq!(all.tasks.len(), 3);
        assert!(all.write);
        let Ok(one) = args(&["--backend", "embedded", "--task", "todo", "--runs", "2"]) else {
            panic!("a backend, a task and a count are refused")
        };
        assert_eq!((one.runs, one.write), (2, false));
        assert_eq!(one.tasks, vec![Task::Todo]);
        assert!(args(&["--runs", "0"]).is_err());
        assert!(args(&["--backend", "gpu"]).is_err());
        assert!(args(&["--task"]).is_err());
    }

    #[test]
    fn the_section_replaces_its_markers_and_keeps_the_rest() {
        let first = update_document(Some("# Benchmarks\n\nby hand\n"), "one");
        assert!(first.starts_with("# Benchmarks\n\nby hand\n"));
        let second = update_document(Some(&first), "two");
        assert!(second.contains("two") && !second.contains("\none\n"));
        assert!(second.contains("by hand"));
    }
}
