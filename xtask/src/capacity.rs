//! `cargo xtask bench --capacity`: how many tasks one running team carries, against AutoGen's
//! runtime with agents that exchange the same messages.
//!
//! It runs `crates/strata/benches/capacity.rs` (the hello example as a durable run, 1, 10, 100
//! and 1 000 concurrent tasks, each size in a fresh process; figures under
//! `<target>/capacity/figures/`), then `xtask/peers/autogen_capacity.py` with the Python of the
//! virtual environment `cargo xtask bench --peers` uses (`<target>/peers/venv`, made and given
//! autogen-core when needed, [`peers::install_autogen`]). It prints one table with the ratios
//! and, unless `--quick`, writes the plot `docs/bench/capacity-throughput.svg` and the section
//! of `BENCHMARKS.md` between the capacity markers. When AutoGen cannot be installed or its
//! bench fails, every table and report says AutoGen is missing. `--quick` measures 1 and 10
//! tasks and writes nothing (seconds, after the build).

use std::fmt::Write as _;
use std::path::Path;
use std::process::Command;
use std::time::Duration;

use anyhow::{Context, bail};
use serde_json::Value;

use crate::bench::{self, Figure};
use crate::peers::{self, AUTOGEN_VERSION, Axes, Runtime};
use crate::{cargo, run as run_command};

/// Where the section starts and ends in `BENCHMARKS.md`.
const BEGIN: &str = "<!-- capacity:begin (written by `cargo xtask bench --capacity`; edits inside are overwritten) -->";
const END: &str = "<!-- capacity:end -->";

/// The plot, under the workspace root.
const PLOT: &str = "docs/bench/capacity-throughput.svg";

/// How long AutoGen's side may run.
const AUTOGEN_TIMEOUT: Duration = Duration::from_secs(20 * 60);

/// One runtime's figures at one number of concurrent tasks.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct Point {
    pub(crate) runtime: Runtime,
    pub(crate) tasks: u64,
    pub(crate) tasks_per_s: f64,
    pub(crate) p50_ms: f64,
    pub(crate) p99_ms: f64,
    pub(crate) peak_rss_bytes: f64,
    /// Strata only: the run directory's growth per task.
    pub(crate) store_bytes_per_task: Option<f64>,
}

/// A figure (`{"id": "strata/capacity/10", "tasks_per_s": ..., ...}`) as a point.
pub(crate) fn point(figure: &Figure) -> anyhow::Result<Point> {
    let mut parts = figure.id.split('/');
    let (Some(runtime), Some("capacity"), Some(tasks), None) =
        (parts.next(), parts.next(), parts.next(), parts.next())
    else {
        bail!("figure `{}`: expected an id `runtime/capacity/tasks`", figure.id);
    };
    let runtime = match runtime {
        "strata" => Runtime::Strata,
        "autogen" => Runtime::AutoGen,
        other => bail!("figure `{}`: unknown runtime `{other}`", figure.id),
    };
    let value = |name: &str| figure.values.iter().find(|(n, _)| n == name).map(|(_, v)| *v);
    let need = |name: &str| {
        value(name).with_context(|| format!("figure `{}` has no number `{name}`", figure.id))
    };
    Ok(Point {
        runtime,
        tasks: tasks
            .parse()
            .with_context(|| format!("figure `{}`: `{tasks}` is not a task count", figure.id))?,
        tasks_per_s: need("tasks_per_s")?,
        p50_ms: need("p50_ms")?,
        p99_ms: need("p99_ms")?,
        peak_rss_bytes: need("peak_rss_bytes")?,
        store_bytes_per_task: value("store_bytes_per_task"),
    })
}

/// What a run measured.
pub(crate) struct Report {
    pub(crate) points: Vec<Point>,
    /// `Ok((autogen-core version, Python version))`, or why AutoGen is missing.
    pub(crate) autogen: Result<(String, String), String>,
    pub(crate) machine: Vec<(String, String)>,
    /// The messages of one task on each side, as the benches count them.
    pub(crate) messages: Option<u64>,
}

/// Runs both sides, prints the table and, unless `quick`, writes the plot and `BENCHMARKS.md`.
pub(crate) fn run(root: &Path, quick: bool) -> anyhow::Result<()> {
    let load = std::fs::read_to_string("/proc/loadavg").ok().and_then(|t| peers::load_average(&t));
    let target = bench::target_dir(root)?;
    let figures_dir = target.join("capacity").join("figures");
    if figures_dir.exists() {
        std::fs::remove_dir_all(&figures_dir)
            .with_context(|| format!("could not clear {}", figures_dir.display()))?;
    }
    let mut strata = cargo(root);
    strata
        .env("CARGO_TARGET_DIR", &target)
        .env("STRATA_CAPACITY", if quick { "quick" } else { "full" })
        .args(["bench", "-p", "strata-engine", "--bench", "capacity"]);
    run_command(&mut strata)?;
    let mut points = bench::read_figures(&figures_dir)?
        .iter()
        .map(point)
        .collect::<anyhow::Result<Vec<_>>>()
        .with_context(|| format!("in {}", figures_dir.display()))?;
    if points.is_empty() {
        bail!("the capacity bench wrote no figures in {}", figures_dir.display());
    }
    let (autogen, messages) = match autogen(root, &target, quick) {
        Ok((versions, theirs, messages)) => {
            points.extend(theirs);
            (Ok(versions), messages)
        }
        Err(why) => (Err(why), None),
    };
    points.sort_by_key(|p| (p.tasks, p.runtime));
    let report = Report { points, autogen, machine: peers::machine(root, load), messages };
    println!("\n{}", table(&report));
    if quick {
        println!("\n--quick: 1 and 10 tasks only; BENCHMARKS.md and the plot are left as they are");
        return Ok(());
    }
    let plot = root.join(PLOT);
    if let Some(dir) = plot.parent() {
        std::fs::create_dir_all(dir)
            .with_context(|| format!("could not create {}", dir.display()))?;
    }
    std::fs::write(&plot, svg(&report)?)
        .with_context(|| format!("could not write {}", plot.display()))?;
    println!("wrote {}", plot.display());
    let path = root.join("BENCHMARKS.md");
    let existing = peers::read(&path).ok();
    let document = peers::update_section(
        existing.as_deref(),
        (BEGIN, END),
        &markdown(&report),
        "cargo xtask bench --capacity",
    );
    std::fs::write(&path, document)
        .with_context(|| format!("could not write {}", path.display()))?;
    println!("wrote {}", path.display());
    Ok(())
}

/// What AutoGen's side gives: its versions, its points, the messages of one of its tasks.
type AutoGenSide = ((String, String), Vec<Point>, Option<u64>);

/// AutoGen's side, installed when needed; on failure, why, in one line.
fn autogen(root: &Path, target: &Path, quick: bool) -> Result<AutoGenSide, String> {
    let venv = target.join("peers").join("venv");
    let python =
        peers::install_autogen(&venv).map_err(|e| format!("could not be installed: {e:#}"))?;
    let script = root.join("xtask").join("peers").join("autogen_capacity.py");
    let mut bench = Command::new(&python);
    bench.current_dir(root).arg(&script);
    if quick {
        bench.arg("--quick");
    }
    peers::run_with_timeout(&mut bench, AUTOGEN_TIMEOUT)
        .and_then(|stdout| parse_autogen(&stdout))
        .map_err(|e| format!("bench failed: {e:#}"))
}

/// AutoGen's report: its last line, one JSON object with `version`, `python`, `messages`
/// (per task) and `figures`.
pub(crate) fn parse_autogen(stdout: &str) -> anyhow::Result<AutoGenSide> {
    let line = stdout
        .lines()
        .rev()
        .find(|line| !line.trim().is_empty())
        .context("AutoGen's capacity bench printed nothing")?;
    let report: Value = serde_json::from_str(line).context("its last line is not JSON")?;
    let text = |name: &str| {
        report
            .get(name)
            .and_then(Value::as_str)
            .map(str::to_owned)
            .with_context(|| format!("its report has no string `{name}`"))
    };
    let versions = (text("version")?, text("python")?);
    let figures = report
        .get("figures")
        .and_then(Value::as_array)
        .context("its report has no `figures` list")?;
    let points = figures
        .iter()
        .map(|figure| {
            let figure = bench::parse_figure(figure).context("a figure without a string `id`")?;
            let point = point(&figure)?;
            if point.runtime != Runtime::AutoGen {
                bail!("AutoGen's report has a figure of another runtime: `{}`", figure.id);
            }
            Ok(point)
        })
        .collect::<anyhow::Result<Vec<_>>>()?;
    if points.is_empty() {
        bail!("its report has no figures");
    }
    Ok((versions, points, report.get("messages").and_then(Value::as_u64)))
}

const HEADER: [&str; 8] = [
    "tasks",
    "Strata tasks/s",
    "AutoGen tasks/s",
    "Strata/AutoGen",
    "Strata p50 / p99",
    "AutoGen p50 / p99",
    "peak RSS Strata / AutoGen",
    "Strata store/task",
];

/// The rows, one per number of tasks.
fn rows(report: &Report) -> Vec<[String; 8]> {
    let mut sizes: Vec<u64> = report.points.iter().map(|p| p.tasks).collect();
    sizes.dedup();
    let missing = if report.autogen.is_err() { "missing" } else { "not measured" };
    sizes
        .into_iter()
        .map(|tasks| {
            let of =
                |runtime| report.points.iter().find(|p| p.tasks == tasks && p.runtime == runtime);
            let (strata, autogen) = (of(Runtime::Strata), of(Runtime::AutoGen));
            let rate = |p: Option<&Point>| {
                p.map_or(missing.to_owned(), |p| format!("{:.1}", p.tasks_per_s))
            };
            let latency = |p: Option<&Point>| {
                p.map_or(missing.to_owned(), |p| format!("{} / {}", ms(p.p50_ms), ms(p.p99_ms)))
            };
            let rss = |p: Option<&Point>| p.map_or(missing.to_owned(), |p| mib(p.peak_rss_bytes));
            let ratio = match (strata, autogen) {
                (Some(s), Some(a)) => {
                    peers::format_ratio(s.tasks_per_s, a.tasks_per_s, true, "AutoGen")
                }
                _ => "—".to_owned(),
            };
            let store = strata
                .and_then(|p| p.store_bytes_per_task)
                .map_or("—".to_owned(), |bytes| format!("{:.1} KiB", bytes / 1024.0));
            [
                tasks.to_string(),
                rate(strata),
                rate(autogen),
                ratio,
                latency(strata),
                latency(autogen),
                format!("{} / {}", rss(strata), rss(autogen)),
                store,
            ]
        })
        .collect()
}

fn ms(value: f64) -> String {
    if value >= 1000.0 { format!("{:.2} s", value / 1000.0) } else { format!("{value:.1} ms") }
}

fn mib(bytes: f64) -> String {
    format!("{:.0} MiB", bytes / 1_048_576.0)
}

/// The table as aligned text.
pub(crate) fn table(report: &Report) -> String {
    let rows = rows(report);
    let header = HEADER.map(str::to_owned);
    let widths: Vec<usize> = (0..HEADER.len())
        .map(|c| {
            std::iter::once(&header).chain(&rows).map(|r| r[c].chars().count()).max().unwrap_or(0)
        })
        .collect();
    let mut out = String::new();
    if let Err(why) = &report.autogen {
        let _ = writeln!(out, "INCOMPLETE: AutoGen is missing ({why})");
    }
    for row in std::iter::once(&header).chain(&rows) {
        let mut line = String::new();
        for (column, cell) in row.iter().enumerate() {
            let pad = widths[column].saturating_sub(cell.chars().count());
            let _ = write!(line, "{cell}{}  ", " ".repeat(pad));
        }
        let _ = writeln!(out, "{}", line.trim_end());
    }
    let _ = write!(
        out,
        "tasks: concurrent copies of the hello example's task in one running team; Strata/AutoGen: \
         tasks per second, Strata's over AutoGen's (above 1: Strata finishes more per second)."
    );
    out
}

/// The section of `BENCHMARKS.md`.
pub(crate) fn markdown(report: &Report) -> String {
    let mut out = String::new();
    let _ = writeln!(out, "## Team capacity: concurrent tasks in one team\n");
    if let Err(why) = &report.autogen {
        let _ = writeln!(
            out,
            "> **Incomplete run: AutoGen is missing.** AutoGen {why}. Strata's figures only.\n"
        );
    }
    let _ = writeln!(out, "### Machine\n");
    for (name, value) in &report.machine {
        let _ = writeln!(out, "- {name}: {value}");
    }
    match &report.autogen {
        Ok((version, python)) => {
            let _ = writeln!(out, "- autogen-core {version} on Python {python} (from PyPI)");
        }
        Err(_) => {
            let _ = writeln!(out, "- autogen-core {AUTOGEN_VERSION}: missing in this run");
        }
    }
    let _ = writeln!(
        out,
        "\n### Commands\n\n```sh\ncargo xtask bench --capacity\n```\n\nwhich runs, from the \
         workspace root:\n\n```sh\nSTRATA_CAPACITY=full cargo bench -p strata-engine --bench \
         capacity\ntarget/peers/venv/bin/python xtask/peers/autogen_capacity.py\n```\n"
    );
    let _ = writeln!(out, "### Figures\n");
    let _ = writeln!(out, "| {} |", HEADER.join(" | "));
    let _ = writeln!(out, "|---:|---|---|---|---|---|---|---|");
    for row in rows(report) {
        let _ = writeln!(out, "| {} |", row.join(" | "));
    }
    if let Some(messages) = report.messages {
        let _ = writeln!(
            out,
            "\nAutoGen's agents send {messages} messages per task (the flow below, read from the \
             layers' code; Strata's own count per task, from a run's audit, is not checked here)."
        );
    }
    let _ = writeln!(out, "\n![Tasks per second against concurrent tasks]({PLOT})\n");
    out.push_str(NOTES);
    out
}

/// What is and is not comparable.
const NOTES: &str = "\
### What is measured, and what is not comparable

- **Strata**: the hello example (`examples/hello`: three powers, two leads, four executors)
  started as a durable run (`strata::run::Run::start`: the run directory's sled database,
  every commit synced with `fdatasync`, commands sandboxed as `strata run` runs them, the
  rule-based reasoners, whose plan is the file's and whose reviews sign it), and N - 1 more
  copies of its task submitted into the same running team with `Team::submit`. Each task is
  proposed, signed by the powers, dispatched to the leads in two waves, run by the executors
  (two files written, one shell command, one directory listed) and closed. Latency is from a
  task's submission to its outcome; tasks per second is N over the time to the last outcome;
  peak RSS is the process's `VmHWM`, each N in a fresh process; store per task is the run
  directory's growth divided by N.
- **AutoGen**: `SingleThreadedAgentRuntime` with nine `RoutedAgent`s of the same names,
  exchanging the messages of the hello team's flow for each task (the task, two signature
  requests and answers, a work package per lead and wave, a step to each executor and its
  result, a report per lead, the closing report: 18) and doing the same work in the
  executors (the same two files written, the same shell command run as a subprocess, the
  directory listed). Its messages are Python dataclasses in memory. The flow is read from
  the layers' code; Strata may send a few more per task (progress notes, peer
  coordination between leads, heartbeat acknowledgements), not counted here.
- **Not comparable**: AutoGen keeps nothing: no durable inbox, no audit log, no saved agent
  state, no signature records, no sandbox, so a crash loses everything, where Strata's run
  resumes from its store. Strata's figures include that storage (synced writes) and its
  heartbeat bookkeeping; AutoGen's store column is empty because it has none. AutoGen runs on
  one asyncio thread, Strata on a tokio runtime with one worker per core.
";

/// The plot: tasks per second against concurrent tasks, a line per runtime.
fn svg(report: &Report) -> anyhow::Result<String> {
    let series: Vec<peers::Line> = [Runtime::Strata, Runtime::AutoGen]
        .into_iter()
        .map(|runtime| {
            let points = report
                .points
                .iter()
                .filter(|p| p.runtime == runtime && p.tasks_per_s > 0.0)
                .map(|p| (p.tasks as f64, p.tasks_per_s))
                .collect();
            (runtime.name(), runtime.color(), points)
        })
        .collect();
    let mut caption = "Tasks per second against concurrent tasks (hello example)".to_owned();
    if report.autogen.is_err() {
        caption.push_str(" (AutoGen missing)");
    }
    let axes = Axes { x: "concurrent tasks", y: "tasks per second", log_y: true };
    peers::line_plot(&caption, &axes, &series)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, reason = "tests")]

    use super::*;

    #[test]
    fn autogen_report_reads_into_points_and_a_table_with_the_ratio() {
        let stdout = "progress\n{\"version\": \"0.7.5\", \"python\": \"3.11.7\", \"messages\": 18, \
            \"figures\": [{\"id\": \"autogen/capacity/10\", \"tasks_per_s\": 50.0, \"p50_ms\": 150.0, \
            \"p99_ms\": 160.0, \"peak_rss_bytes\": 41943040}]}\n";
        let ((version, python), points, messages) = parse_autogen(stdout).unwrap();
        assert_eq!((version.as_str(), python.as_str(), messages), ("0.7.5", "3.11.7", Some(18)));
        assert_eq!(points[0].runtime, Runtime::AutoGen);
        assert_eq!(points[0].store_bytes_per_task, None);
        let strata = Figure {
            id: "strata/capacity/10".into(),
            values: vec![
                ("tasks_per_s".into(), 10.0),
                ("p50_ms".into(), 600.0),
                ("p99_ms".into(), 1500.0),
                ("peak_rss_bytes".into(), 26_214_400.0),
                ("store_bytes_per_task".into(), 2048.0),
            ],
        };
        let mut all = vec![point(&strata).unwrap()];
        all.extend(points);
        let report =
            Report { points: all, autogen: Ok((version, python)), machine: Vec::new(), messages };
        let table = table(&report);
        assert!(table.contains("0.20× (AutoGen better)"), "{table}");
        assert!(table.contains("600.0 ms / 1.50 s"), "{table}");
        assert!(table.contains("25 MiB / 40 MiB"), "{table}");
        assert!(table.contains("2.0 KiB"), "{table}");
        assert!(markdown(&report).contains("send 18 messages per task"));
    }

    #[test]
    fn a_figure_of_another_workload_is_refused() {
        let figure = Figure { id: "strata/throughput/10".into(), values: Vec::new() };
        assert!(point(&figure).is_err());
    }
}
