//! `cargo xtask bench --peers`: Strata against two peer runtimes, ractor (Rust) and AutoGen's
//! `autogen-core` (Python), on the same workloads in one run, printed as one table with ratios
//! and published in `BENCHMARKS.md` with SVG plots under `docs/bench/`.
//!
//! It runs `crates/agent-pool/benches/peers.rs` (Strata and ractor; figures under
//! `<target>/peers/figures/`, one JSON object per file, read by [`crate::bench::read_figures`]),
//! then `xtask/peers/autogen_bench.py` with the Python of a virtual environment it makes in
//! `<target>/peers/venv` and installs [`AUTOGEN_VERSION`] into (only when it is not there). When
//! AutoGen cannot be installed or its bench fails, the run says so, goes on with Strata and
//! ractor, and every table, plot and report it writes names AutoGen as missing: a partial table
//! is never presented as complete. `--quick` measures the smaller sizes only and publishes
//! nothing.

use std::fmt::Write as _;
use std::io::Read as _;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use serde_json::Value;

use crate::bench::{self, Figure};
use crate::{cargo, run as run_command, show};

#[cfg(test)]
mod tests;

/// The autogen-core release compared against, installed from PyPI.
pub(crate) const AUTOGEN_VERSION: &str = "0.7.5";

/// How long AutoGen's bench may run (it takes about two and a half minutes here).
const AUTOGEN_TIMEOUT: Duration = Duration::from_secs(30 * 60);

/// The Python that makes the virtual environment, unless `STRATA_PEERS_PYTHON` names another.
const PYTHON: &str = "python3";

/// Where the report's figures section starts and ends in `BENCHMARKS.md`.
const BEGIN: &str =
    "<!-- peers:begin (written by `cargo xtask bench --peers`; edits inside are overwritten) -->";
const END: &str = "<!-- peers:end -->";

/// The plots, under the workspace root.
const PLOT_DIR: &str = "docs/bench";

/// A runtime in the comparison, in the order of the table's columns.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) enum Runtime {
    Strata,
    Ractor,
    AutoGen,
}

/// A workload, in the order of the table's rows.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) enum Workload {
    Throughput,
    Idle,
    Create,
    Memory,
}

/// One figure: a runtime's result on a workload at one agent count.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct Measurement {
    pub(crate) runtime: Runtime,
    pub(crate) workload: Workload,
    pub(crate) agents: u64,
    /// In the workload's unit ([`Workload::key`]).
    pub(crate) value: f64,
}

/// What became of AutoGen in this run.
#[derive(Clone, Debug, PartialEq)]
pub(crate) enum AutoGen {
    /// Installed and measured.
    Measured {
        /// The autogen-core version its bench reported.
        version: String,
        /// The Python version it ran on.
        python: String,
    },
    /// Not measured, and why.
    Missing {
        /// The whole reason, one line: "could not be installed: ..." or "bench failed: ...".
        why: String,
    },
}

/// Everything the table, the plots and `BENCHMARKS.md` are made from.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct Report {
    pub(crate) measurements: Vec<Measurement>,
    pub(crate) autogen: AutoGen,
    pub(crate) ractor_version: String,
    /// `("CPU", "AMD EPYC, 2 cores")` and so on, in order.
    pub(crate) machine: Vec<(String, String)>,
    /// Only the smaller sizes were measured.
    pub(crate) quick: bool,
}

impl Runtime {
    const ALL: [Runtime; 3] = [Runtime::Strata, Runtime::Ractor, Runtime::AutoGen];

    pub(crate) fn name(self) -> &'static str {
        match self {
            Runtime::Strata => "Strata",
            Runtime::Ractor => "ractor",
            Runtime::AutoGen => "AutoGen",
        }
    }

    fn parse(id: &str) -> Option<Self> {
        match id {
            "strata" => Some(Runtime::Strata),
            "ractor" => Some(Runtime::Ractor),
            "autogen" => Some(Runtime::AutoGen),
            _ => None,
        }
    }

    /// The plots' colour of the runtime's series.
    pub(crate) fn color(self) -> plotters::style::RGBColor {
        match self {
            Runtime::Strata => plotters::style::RGBColor(31, 119, 180),
            Runtime::Ractor => plotters::style::RGBColor(214, 39, 40),
            Runtime::AutoGen => plotters::style::RGBColor(44, 160, 44),
        }
    }
}

impl Workload {
    const ALL: [Workload; 4] =
        [Workload::Throughput, Workload::Idle, Workload::Create, Workload::Memory];

    fn parse(id: &str) -> Option<Self> {
        match id {
            "throughput" => Some(Workload::Throughput),
            "idle" => Some(Workload::Idle),
            "create" => Some(Workload::Create),
            "memory" => Some(Workload::Memory),
            _ => None,
        }
    }

    /// The name of the figure's number that holds the result.
    pub(crate) fn key(self) -> &'static str {
        match self {
            Workload::Throughput => "messages_per_s",
            Workload::Idle => "tick_us",
            Workload::Create => "agents_per_s",
            Workload::Memory => "bytes_per_agent",
        }
    }

    pub(crate) fn higher_is_better(self) -> bool {
        matches!(self, Workload::Throughput | Workload::Create)
    }

    /// The first column of the table: the workload and which way is better.
    fn label(self) -> &'static str {
        match self {
            Workload::Throughput => "messages/s ↑",
            Workload::Idle => "idle cycle ↓",
            Workload::Create => "creations/s ↑",
            Workload::Memory => "memory/agent ↓",
        }
    }

    /// What it measures, one line.
    fn describe(self) -> &'static str {
        match self {
            Workload::Throughput => {
                "messages processed per second, N agents × 100 messages sent round-robin, until the last is processed (higher is better)"
            }
            Workload::Idle => "one heartbeat cycle over N idle agents (lower is better)",
            Workload::Create => "agents created per second, one after the other (higher is better)",
            Workload::Memory => {
                "resident memory per agent, N agents in a fresh process (lower is better)"
            }
        }
    }

    /// The result in its unit, for a table cell.
    pub(crate) fn format(self, value: f64) -> String {
        match self {
            Workload::Throughput => format!("{} msg/s", si(value)),
            Workload::Idle => format!("{value:.2} µs"),
            Workload::Create => format!("{} agents/s", si(value)),
            Workload::Memory => format!("{value:.0} B"),
        }
    }
}

impl AutoGen {
    /// The one-line message printed when AutoGen is missing.
    pub(crate) fn missing_message(why: &str) -> String {
        format!("AutoGen {why}; the table shows Strata and ractor only")
    }
}

/// Runs the comparison, prints the table and, unless `quick`, writes the plots and
/// `BENCHMARKS.md`.
pub(crate) fn run(root: &Path, quick: bool) -> anyhow::Result<()> {
    // Other work on the machine moves the figures: the report says how busy it was.
    let load = std::fs::read_to_string("/proc/loadavg").ok().and_then(|text| load_average(&text));
    let target = bench::target_dir(root)?;
    let figures_dir = target.join("peers").join("figures");
    if figures_dir.exists() {
        std::fs::remove_dir_all(&figures_dir)
            .with_context(|| format!("could not clear {}", figures_dir.display()))?;
    }
    let mut peers = cargo(root);
    peers
        .env("CARGO_TARGET_DIR", &target)
        .env("STRATA_PEERS", if quick { "quick" } else { "full" })
        .args(["bench", "-p", "strata-agent-pool", "--bench", "peers"]);
    run_command(&mut peers)?;
    let mut measurements = bench::read_figures(&figures_dir)?
        .iter()
        .map(measurement)
        .collect::<anyhow::Result<Vec<_>>>()
        .with_context(|| format!("in {}", figures_dir.display()))?;
    if !measurements.iter().any(|m| m.runtime == Runtime::Strata) {
        bail!("the peers bench wrote no Strata figures in {}", figures_dir.display());
    }

    let autogen = match autogen(root, &target, quick) {
        Ok((status, figures)) => {
            measurements.extend(figures);
            status
        }
        Err(why) => {
            println!("\n{}\n", AutoGen::missing_message(&why));
            AutoGen::Missing { why }
        }
    };
    measurements.sort_by_key(|m| (m.workload, m.agents, m.runtime));
    let report = Report {
        measurements,
        autogen,
        ractor_version: lock_version(&read(&root.join("Cargo.lock"))?, "ractor")
            .unwrap_or_else(|| "unknown".to_owned()),
        machine: machine(root, load),
        quick,
    };

    println!("\n{}", table(&report));
    if let AutoGen::Missing { why } = &report.autogen {
        println!("\n{}", AutoGen::missing_message(why));
    }
    if quick {
        println!(
            "\n--quick: the smaller sizes only; BENCHMARKS.md and the plots are left as they are"
        );
        return Ok(());
    }
    let plot_dir = root.join(PLOT_DIR);
    std::fs::create_dir_all(&plot_dir)
        .with_context(|| format!("could not create {}", plot_dir.display()))?;
    for (name, svg) in plots(&report)? {
        let path = plot_dir.join(name);
        std::fs::write(&path, svg)
            .with_context(|| format!("could not write {}", path.display()))?;
        println!("wrote {}", path.display());
    }
    let path = root.join("BENCHMARKS.md");
    let existing = match std::fs::read_to_string(&path) {
        Ok(text) => Some(text),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => None,
        Err(e) => return Err(e).with_context(|| format!("could not read {}", path.display())),
    };
    let document = update_document(existing.as_deref(), &markdown(&report));
    std::fs::write(&path, document)
        .with_context(|| format!("could not write {}", path.display()))?;
    println!("wrote {}", path.display());
    Ok(())
}

/// Reads a figure written by a bench (`{"id": "strata/throughput/1000", "messages_per_s": ...}`)
/// as a measurement.
pub(crate) fn measurement(figure: &Figure) -> anyhow::Result<Measurement> {
    let mut parts = figure.id.split('/');
    let (Some(runtime), Some(workload), Some(agents), None) =
        (parts.next(), parts.next(), parts.next(), parts.next())
    else {
        bail!("figure `{}`: expected an id `runtime/workload/agents`", figure.id);
    };
    let runtime = Runtime::parse(runtime)
        .with_context(|| format!("figure `{}`: unknown runtime `{runtime}`", figure.id))?;
    let workload = Workload::parse(workload)
        .with_context(|| format!("figure `{}`: unknown workload `{workload}`", figure.id))?;
    let agents = agents
        .parse()
        .with_context(|| format!("figure `{}`: `{agents}` is not an agent count", figure.id))?;
    let value = figure
        .values
        .iter()
        .find(|(name, _)| name == workload.key())
        .map(|(_, value)| *value)
        .with_context(|| format!("figure `{}` has no number `{}`", figure.id, workload.key()))?;
    Ok(Measurement { runtime, workload, agents, value })
}

/// Reads what AutoGen's bench prints: one JSON object (its last line of output) with the
/// `version`, the `python` version and the `figures`.
pub(crate) fn parse_autogen(stdout: &str) -> anyhow::Result<(AutoGen, Vec<Measurement>)> {
    let line = stdout
        .lines()
        .rev()
        .find(|line| !line.trim().is_empty())
        .context("AutoGen's bench printed nothing")?;
    let report: Value =
        serde_json::from_str(line).context("AutoGen's bench printed a line that is not JSON")?;
    let text = |name: &str| {
        report
            .get(name)
            .and_then(Value::as_str)
            .map(str::to_owned)
            .with_context(|| format!("AutoGen's report has no string `{name}`"))
    };
    let status = AutoGen::Measured { version: text("version")?, python: text("python")? };
    let figures = report
        .get("figures")
        .and_then(Value::as_array)
        .context("AutoGen's report has no `figures` list")?;
    let measurements = figures
        .iter()
        .map(|figure| {
            let object = figure.as_object().context("a figure that is not an object")?;
            let id = object
                .get("id")
                .and_then(Value::as_str)
                .context("a figure without a string `id`")?
                .to_owned();
            let values = object
                .iter()
                .filter_map(|(name, value)| Some((name.clone(), value.as_f64()?)))
                .collect();
            let measurement = measurement(&Figure { id, values })?;
            if measurement.runtime != Runtime::AutoGen {
                bail!("AutoGen's report has a figure of another runtime: `{figure}`");
            }
            Ok(measurement)
        })
        .collect::<anyhow::Result<Vec<_>>>()?;
    if measurements.is_empty() {
        bail!("AutoGen's report has no figures");
    }
    Ok((status, measurements))
}

/// Installs AutoGen when needed and runs its bench; on failure, the reason as one line
/// ("could not be installed: ..." or "bench failed: ...").
fn autogen(root: &Path, target: &Path, quick: bool) -> Result<(AutoGen, Vec<Measurement>), String> {
    let venv = target.join("peers").join("venv");
    let python = install_autogen(&venv).map_err(|e| format!("could not be installed: {e:#}"))?;
    let script = root.join("xtask").join("peers").join("autogen_bench.py");
    let mut bench = Command::new(&python);
    bench.current_dir(root).arg(&script);
    if quick {
        bench.arg("--quick");
    }
    let stdout = run_with_timeout(&mut bench, AUTOGEN_TIMEOUT)
        .and_then(|stdout| parse_autogen(&stdout))
        .map_err(|e| format!("bench failed: {e:#}"))?;
    Ok(stdout)
}

/// The virtual environment's Python, with autogen-core [`AUTOGEN_VERSION`] installed: makes
/// the environment if it does not exist and runs pip if the version is not there.
pub(crate) fn install_autogen(venv: &Path) -> anyhow::Result<PathBuf> {
    let python = venv.join("bin").join("python");
    if !python.is_file() {
        let base = std::env::var("STRATA_PEERS_PYTHON").unwrap_or_else(|_| PYTHON.to_owned());
        println!("making a Python virtual environment in {} with {base}", venv.display());
        if let Err(error) = quiet(Command::new(&base).arg("-m").arg("venv").arg(venv)) {
            // A half-made environment (Debian's python3 without python3-venv makes one without
            // pip) would fail the next run too: start over then.
            let _ = std::fs::remove_dir_all(venv);
            return Err(error.context(format!(
                "{base} could not make a virtual environment (is it installed, with venv?)"
            )));
        }
    }
    let installed = quiet(
        Command::new(&python)
            .args(["-c", "import importlib.metadata as m; print(m.version('autogen-core'))"]),
    );
    if installed.is_ok_and(|version| version.trim() == AUTOGEN_VERSION) {
        println!("autogen-core {AUTOGEN_VERSION} is installed in {}", venv.display());
        return Ok(python);
    }
    let requirement = format!("autogen-core=={AUTOGEN_VERSION}");
    println!("installing {requirement} from PyPI into {}", venv.display());
    quiet(Command::new(&python).args([
        "-m",
        "pip",
        "install",
        "--disable-pip-version-check",
        "--quiet",
        &requirement,
    ]))
    .with_context(|| format!("pip could not install {requirement}"))?;
    Ok(python)
}

/// Runs a command with its output captured; its stdout, or an error with the last lines of
/// its stderr (what went wrong, usually).
fn quiet(command: &mut Command) -> anyhow::Result<String> {
    let shown = show(command);
    let output = command
        .stdin(Stdio::null())
        .output()
        .with_context(|| format!("could not start `{shown}`"))?;
    if !output.status.success() {
        let stderr = String::from_utf8_lossy(&output.stderr);
        bail!("`{shown}` failed ({}): {}", output.status, tail(&stderr, 3));
    }
    String::from_utf8(output.stdout).with_context(|| format!("`{shown}` printed non-UTF-8 output"))
}

/// The last `lines` non-empty lines of `text`, joined with ` / `.
pub(crate) fn tail(text: &str, lines: usize) -> String {
    let mut last: Vec<&str> =
        text.lines().map(str::trim).filter(|line| !line.is_empty()).rev().take(lines).collect();
    last.reverse();
    if last.is_empty() { "no error output".to_owned() } else { last.join(" / ") }
}

/// Prints the command, runs it with stderr on the terminal, and returns its stdout; stops it
/// past `timeout`.
pub(crate) fn run_with_timeout(command: &mut Command, timeout: Duration) -> anyhow::Result<String> {
    let shown = show(command);
    println!("$ {shown}");
    let mut child = command
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .with_context(|| format!("could not start `{shown}`"))?;
    let mut stdout = child.stdout.take().context("the child's stdout is not captured")?;
    let reader = std::thread::spawn(move || {
        let mut text = String::new();
        stdout.read_to_string(&mut text).map(|_| text)
    });
    let deadline = Instant::now() + timeout;
    let status = loop {
        if let Some(status) = child.try_wait().with_context(|| format!("waiting for `{shown}`"))? {
            break status;
        }
        if Instant::now() >= deadline {
            // Best effort: the timeout is the error reported either way.
            let _ = child.kill();
            let _ = child.wait();
            bail!("`{shown}` did not finish within {} s and was stopped", timeout.as_secs());
        }
        std::thread::sleep(Duration::from_millis(100));
    };
    if !status.success() {
        bail!("`{shown}` failed ({status})");
    }
    reader
        .join()
        .map_err(|_| anyhow::anyhow!("reading the output of `{shown}` panicked"))?
        .with_context(|| format!("could not read the output of `{shown}`"))
}

/// A package's version in `Cargo.lock`.
pub(crate) fn lock_version(lock: &str, package: &str) -> Option<String> {
    let name = format!("name = \"{package}\"");
    let mut lines = lock.lines();
    lines.find(|line| line.trim() == name)?;
    let version = lines.next()?.trim().strip_prefix("version = \"")?.strip_suffix('"')?;
    Some(version.to_owned())
}

/// The machine and toolchain, for the report: what is unknown says so. `load` is the load
/// average when the run started.
pub(crate) fn machine(root: &Path, load: Option<f64>) -> Vec<(String, String)> {
    let file = |path: &str| std::fs::read_to_string(path).unwrap_or_default();
    let cores = std::thread::available_parallelism().map_or(0, std::num::NonZero::get);
    let cpu = cpu_model(&file("/proc/cpuinfo")).unwrap_or_else(|| "unknown CPU".to_owned());
    let memory = mem_total(&file("/proc/meminfo"))
        .map_or_else(|| "unknown".to_owned(), |kib| format!("{:.1} GiB", kib as f64 / 1048576.0));
    let os = os_name(&file("/etc/os-release")).unwrap_or_else(|| "unknown".to_owned());
    let kernel = file("/proc/sys/kernel/osrelease");
    let rustc = capture_quietly(Command::new("rustc").arg("--version"));
    let commit = capture_quietly(Command::new("git").current_dir(root).args([
        "rev-parse",
        "--short",
        "HEAD",
    ]));
    let dirty =
        capture_quietly(Command::new("git").current_dir(root).args(["status", "--porcelain"]))
            .is_some_and(|status| !status.trim().is_empty());
    let date = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or_else(|_| "unknown".to_owned(), |since| civil_date(since.as_secs() / 86_400));
    vec![
        ("Date".to_owned(), date),
        ("CPU".to_owned(), format!("{cpu}, {cores} cores (`nproc`)")),
        ("Memory".to_owned(), memory),
        ("OS".to_owned(), format!("{os}, Linux {}", kernel.trim())),
        (
            "Load".to_owned(),
            load.map_or_else(
                || "unknown".to_owned(),
                |load| format!("{load:.2} (1-minute load average when the run started)"),
            ),
        ),
        ("Rust".to_owned(), rustc.unwrap_or_else(|| "unknown".to_owned())),
        (
            "Strata".to_owned(),
            match commit {
                Some(commit) if dirty => format!("commit {commit}, with uncommitted changes"),
                Some(commit) => format!("commit {commit}"),
                None => "unknown commit".to_owned(),
            },
        ),
    ]
}

/// The command's stdout, trimmed, or `None` when it cannot run or fails.
fn capture_quietly(command: &mut Command) -> Option<String> {
    let output = command.stdin(Stdio::null()).stderr(Stdio::null()).output().ok()?;
    let text = String::from_utf8(output.stdout).ok()?;
    output.status.success().then(|| text.trim().to_owned())
}

/// The first `model name` in `/proc/cpuinfo`.
pub(crate) fn cpu_model(cpuinfo: &str) -> Option<String> {
    cpuinfo.lines().find_map(|line| {
        let (key, value) = line.split_once(':')?;
        (key.trim() == "model name").then(|| value.trim().to_owned())
    })
}

/// The 1-minute load average from `/proc/loadavg`.
pub(crate) fn load_average(loadavg: &str) -> Option<f64> {
    loadavg.split_whitespace().next()?.parse().ok()
}

/// `MemTotal` in KiB from `/proc/meminfo`.
pub(crate) fn mem_total(meminfo: &str) -> Option<u64> {
    meminfo
        .lines()
        .find_map(|line| line.strip_prefix("MemTotal:"))
        .and_then(|rest| rest.trim().strip_suffix("kB"))
        .and_then(|kib| kib.trim().parse().ok())
}

/// `PRETTY_NAME` from `/etc/os-release`.
pub(crate) fn os_name(os_release: &str) -> Option<String> {
    os_release
        .lines()
        .find_map(|line| line.strip_prefix("PRETTY_NAME="))
        .map(|name| name.trim().trim_matches('"').to_owned())
}

/// `YYYY-MM-DD` of a day counted from 1970-01-01 (Howard Hinnant's `civil_from_days`).
pub(crate) fn civil_date(days: u64) -> String {
    let z = days as i64 + 719_468;
    let era = z.div_euclid(146_097);
    let day_of_era = z.rem_euclid(146_097);
    let year_of_era =
        (day_of_era - day_of_era / 1460 + day_of_era / 36_524 - day_of_era / 146_096) / 365;
    let day_of_year = day_of_era - (365 * year_of_era + year_of_era / 4 - year_of_era / 100);
    let mp = (5 * day_of_year + 2) / 153;
    let day = day_of_year - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = year_of_era + era * 400 + i64::from(month <= 2);
    format!("{year:04}-{month:02}-{day:02}")
}

/// `684.4k`, `4.27M`, `950`: a count or rate in SI units.
pub(crate) fn si(value: f64) -> String {
    if value >= 1e9 {
        format!("{:.2}G", value / 1e9)
    } else if value >= 1e6 {
        format!("{:.2}M", value / 1e6)
    } else if value >= 1e3 {
        format!("{:.1}k", value / 1e3)
    } else {
        format!("{value:.0}")
    }
}

/// An axis label: `1k`, `10k`, `1M`, `2.5k`, without a needless `.0`.
pub(crate) fn axis_label(value: f64) -> String {
    let (scaled, suffix) = if value >= 1e9 {
        (value / 1e9, "G")
    } else if value >= 1e6 {
        (value / 1e6, "M")
    } else if value >= 1e3 {
        (value / 1e3, "k")
    } else {
        (value, "")
    };
    let text = format!("{scaled:.1}");
    format!("{}{suffix}", text.strip_suffix(".0").unwrap_or(&text))
}

/// Strata's result over a peer's, and who is ahead: `0.16× (ractor better)`,
/// `58.4× (Strata better)`; a ratio within 2 % of 1 is a tie.
pub(crate) fn format_ratio(
    strata: f64,
    peer: f64,
    higher_is_better: bool,
    peer_name: &str,
) -> String {
    if peer <= 0.0 || strata < 0.0 {
        return "n/a".to_owned();
    }
    let ratio = strata / peer;
    let number = if ratio >= 100.0 {
        format!("{ratio:.0}")
    } else if ratio >= 10.0 {
        format!("{ratio:.1}")
    } else if ratio >= 0.1 {
        format!("{ratio:.2}")
    } else {
        format!("{ratio:.3}")
    };
    let verdict = if (ratio - 1.0).abs() <= 0.02 {
        "even".to_owned()
    } else if (ratio > 1.0) == higher_is_better {
        "Strata better".to_owned()
    } else {
        format!("{peer_name} better")
    };
    format!("{number}× ({verdict})")
}

/// One row of the table: a workload at one agent count.
struct Row {
    workload: Workload,
    agents: u64,
    /// Strata, ractor, AutoGen.
    cells: [String; 3],
    /// Strata/ractor, Strata/AutoGen.
    ratios: [String; 2],
}

/// The rows: every workload and agent count measured, each runtime's figure or why there is
/// none (`n/a`: the runtime has no such thing; `missing`: AutoGen is missing in this run).
fn rows(report: &Report) -> Vec<Row> {
    let mut keys: Vec<(Workload, u64)> =
        report.measurements.iter().map(|m| (m.workload, m.agents)).collect();
    keys.sort();
    keys.dedup();
    let autogen_missing = matches!(report.autogen, AutoGen::Missing { .. });
    keys.into_iter()
        .map(|(workload, agents)| {
            let value = |runtime: Runtime| {
                report
                    .measurements
                    .iter()
                    .find(|m| m.runtime == runtime && m.workload == workload && m.agents == agents)
                    .map(|m| m.value)
            };
            let cells = Runtime::ALL.map(|runtime| match value(runtime) {
                Some(value) => workload.format(value),
                None if runtime == Runtime::AutoGen && autogen_missing => "missing".to_owned(),
                None if workload == Workload::Idle && runtime != Runtime::Strata => {
                    "n/a (no heartbeat)".to_owned()
                }
                None => "not measured".to_owned(),
            });
            let ratio = |peer: Runtime| match (value(Runtime::Strata), value(peer)) {
                (Some(strata), Some(theirs)) => {
                    format_ratio(strata, theirs, workload.higher_is_better(), peer.name())
                }
                _ => "—".to_owned(),
            };
            Row {
                workload,
                agents,
                cells,
                ratios: [ratio(Runtime::Ractor), ratio(Runtime::AutoGen)],
            }
        })
        .collect()
}

const HEADER: [&str; 7] =
    ["workload", "agents", "Strata", "ractor", "AutoGen", "Strata/ractor", "Strata/AutoGen"];

fn row_cells(row: &Row) -> [String; 7] {
    let [strata, ractor, autogen] = row.cells.clone();
    let [vs_ractor, vs_autogen] = row.ratios.clone();
    [
        row.workload.label().to_owned(),
        row.agents.to_string(),
        strata,
        ractor,
        autogen,
        vs_ractor,
        vs_autogen,
    ]
}

/// The comparison as an aligned text table, with what the columns mean under it.
pub(crate) fn table(report: &Report) -> String {
    let rows: Vec<[String; 7]> = rows(report).iter().map(row_cells).collect();
    let header = HEADER.map(str::to_owned);
    let widths: Vec<usize> = (0..7)
        .map(|column| {
            std::iter::once(&header)
                .chain(&rows)
                .map(|row| row[column].chars().count())
                .max()
                .unwrap_or(0)
        })
        .collect();
    let mut out = String::new();
    if let AutoGen::Missing { why } = &report.autogen {
        let _ = writeln!(out, "INCOMPLETE: AutoGen is missing ({why})");
    }
    if report.quick {
        let _ = writeln!(out, "QUICK: the smaller sizes only");
    }
    for row in std::iter::once(&header).chain(&rows) {
        let mut line = String::new();
        for (column, cell) in row.iter().enumerate() {
            let pad = widths[column].saturating_sub(cell.chars().count());
            // Numbers right-aligned (agents), words left-aligned.
            if column == 1 {
                let _ = write!(line, "{}{cell}  ", " ".repeat(pad));
            } else {
                let _ = write!(line, "{cell}{}  ", " ".repeat(pad));
            }
        }
        let _ = writeln!(out, "{}", line.trim_end());
    }
    let _ = writeln!(out);
    for workload in Workload::ALL {
        let _ = writeln!(out, "{}: {}", workload.label(), workload.describe());
    }
    let _ = write!(
        out,
        "Strata/peer is Strata's figure over the peer's: above 1 Strata does more per second (↑ rows) or uses more (↓ rows)."
    );
    out
}

/// The figures section of `BENCHMARKS.md`: machine, commands, table, plots and notes.
pub(crate) fn markdown(report: &Report) -> String {
    let mut out = String::new();
    let _ = writeln!(out, "## Peer comparison: Strata, ractor and AutoGen\n");
    if let AutoGen::Missing { why } = &report.autogen {
        let _ = writeln!(
            out,
            "> **Incomplete run: AutoGen is missing.** AutoGen {why}. The table and plots show \
             Strata and ractor only; this is not the full comparison.\n"
        );
    }
    let _ = writeln!(out, "### Machine\n");
    for (name, value) in &report.machine {
        let _ = writeln!(out, "- {name}: {value}");
    }
    let _ = writeln!(out, "- ractor {} (Rust, from crates.io)", report.ractor_version);
    match &report.autogen {
        AutoGen::Measured { version, python } => {
            let _ = writeln!(out, "- autogen-core {version} on Python {python} (from PyPI)");
        }
        AutoGen::Missing { .. } => {
            let _ = writeln!(out, "- autogen-core {AUTOGEN_VERSION}: missing in this run");
        }
    }
    let _ = writeln!(
        out,
        "\n### Commands\n\n```sh\ncargo xtask bench --peers\n```\n\nwhich runs, from the workspace root:\n\n```sh\n\
         STRATA_PEERS=full cargo bench -p strata-agent-pool --bench peers   # Strata and ractor\n\
         python3 -m venv target/peers/venv                            # once\n\
         target/peers/venv/bin/python -m pip install autogen-core=={AUTOGEN_VERSION}  # once\n\
         target/peers/venv/bin/python xtask/peers/autogen_bench.py   # AutoGen\n```\n"
    );
    let _ = writeln!(out, "### Figures\n");
    let _ = writeln!(out, "| {} |", HEADER.join(" | "));
    let _ = writeln!(out, "|---|---:|---|---|---|---|---|");
    for row in rows(report) {
        let _ = writeln!(out, "| {} |", row_cells(&row).join(" | "));
    }
    let _ = writeln!(out);
    for workload in Workload::ALL {
        let _ = writeln!(out, "- **{}**: {}", workload.label(), workload.describe());
    }
    let _ = writeln!(
        out,
        "- **Strata/peer** is Strata's figure over the peer's: above 1 Strata does more per second \
         (↑ rows) or uses more (↓ rows); the word in brackets says who is ahead.\n"
    );
    let _ = writeln!(out, "### Plots\n");
    for (file, title) in PLOTS {
        let _ = writeln!(out, "![{title}]({PLOT_DIR}/{file})\n");
    }
    out.push_str(NOTES);
    out
}

/// The plots: file name and title.
const PLOTS: [(&str, &str); 3] = [
    ("peers-throughput.svg", "Messages per second against agents (100 messages per agent)"),
    ("peers-memory.svg", "Resident memory per agent against agents"),
    ("peers-create.svg", "Agents created per second against agents"),
];

/// What each workload measures in each runtime, and what is not comparable.
const NOTES: &str = "\
### What is measured, and what is not comparable

Every agent's message handler does nothing; what is measured is the runtime around it. Each
figure is a median after an untimed warm-up (one message per agent): Strata and ractor repeat a
workload at least five times (creation three) and until the repetitions add up to a second;
AutoGen repeats its throughput three times, once at 10 000 agents (a million messages, about
90 s), and its creation three times.

- **Throughput.** *Strata*: a full `Message` (UUID id, sender and recipient addresses, kind,
  JSON content, timestamp) sent on the in-memory bus wrapped in the `WakingBus`; the agents'
  turns (`HeartbeatScheduler::wake`, driven as `Team` drives it) each take up to 256 messages,
  move the agent idle → working → idle through the state machine with two hash-chained audit
  records, save the agent's record in the state store and acknowledge the messages; the clock
  stops at the last acknowledgement. *ractor*: a `u64` cast into each actor's mailbox, handled
  one at a time; the clock stops when the actors' shared counter reaches the total. *AutoGen*:
  a dataclass published on a topic (a `TypeSubscription` maps the topic's source to one agent),
  each delivery routed, serialized to JSON for the event log (whether or not logging is on) and
  run in an asyncio task of its own; the clock stops when `stop_when_idle` returns. Strata's
  work per turn (at-least-once delivery, audit, saved state) has no counterpart in ractor, which
  shows the cost of a bare actor mailbox. Strata and ractor run on a tokio multi-thread runtime
  with one worker per core; AutoGen's `SingleThreadedAgentRuntime`, its only in-process
  runtime, runs on one asyncio thread, and its documentation says it is not meant for high
  throughput.
- **Idle cycle.** *Strata*: one `HeartbeatScheduler::tick` over N idle agents; the bus names
  the inboxes with mail, so no idle agent runs a heartbeat: each acks the cycle in the
  scheduler's sweep of the pool (a lock attempt and a few atomics per agent, no task, message
  or allocation), and one that cannot answer is counted missed. *ractor* and *AutoGen* have no
  heartbeat, no liveness accounting and nothing to tick: the cell says `n/a`, which is not a
  zero cost but a missing feature.
- **Creation.** *Strata*: `AgentPool::create` validates the configuration, registers the bus
  inbox, creates the agent's whiteboard, audits initializing → idle and inserts the agent.
  *ractor*: `Actor::spawn` starts a tokio task with its channels and waits for `pre_start`.
  *AutoGen*: `runtime.get(..., lazy=False)` calls the registered factory and binds the agent
  (AutoGen otherwise creates agents lazily, on their first message); no task is started.
- **Memory.** The growth of the resident set (`VmRSS`) while N agents are created, divided by
  N, each N in a fresh process. It includes allocator slack; at 1 000 agents a few pages more
  or less move the figure. Strata's figure counts the agent, its inbox, whiteboard, audit
  record and pool slot; ractor's a tokio task and the actor's four channels (signals, stop,
  supervision, messages); AutoGen's a Python object and its entry in the runtime's dictionary.
- **Not measured here.** Strata's durable backends (sled, with `fdatasync` group commits) and
  AutoGen's distributed (gRPC) runtime; both do much more per message than what is compared
  here.
";

/// `BENCHMARKS.md` with `section` between the peers markers ([`update_section`]).
pub(crate) fn update_document(existing: Option<&str>, section: &str) -> String {
    update_section(existing, (BEGIN, END), section, "cargo xtask bench --peers")
}

/// `BENCHMARKS.md` with `section` between the `markers` (begin, end): replaced when they are
/// there, appended when the file has none, and a new file with a heading (naming `command`,
/// which writes the section) when there is no file.
pub(crate) fn update_section(
    existing: Option<&str>,
    (begin_marker, end_marker): (&str, &str),
    section: &str,
    command: &str,
) -> String {
    let block = format!("{begin_marker}\n\n{}\n{end_marker}\n", section.trim_end());
    let Some(existing) = existing else {
        return format!(
            "# Benchmarks\n\nFigures measured by `{command}`; everything between the \
             markers below is written by that command.\n\n{block}"
        );
    };
    match (existing.find(begin_marker), existing.find(end_marker)) {
        (Some(begin), Some(end)) if begin < end => {
            let after = &existing[end + end_marker.len()..];
            format!("{}{block}{}", &existing[..begin], after.strip_prefix('\n').unwrap_or(after))
        }
        _ => format!("{}\n\n{block}", existing.trim_end()),
    }
}

/// The plots as SVG documents: (file name, contents).
pub(crate) fn plots(report: &Report) -> anyhow::Result<Vec<(&'static str, String)>> {
    let workloads = [Workload::Throughput, Workload::Memory, Workload::Create];
    let mut out = Vec::new();
    for ((file, title), workload) in PLOTS.into_iter().zip(workloads) {
        let svg =
            plot(report, workload, title).with_context(|| format!("could not draw {file}"))?;
        out.push((file, svg));
    }
    Ok(out)
}

/// A line of a plot: its name in the legend, its colour, and its (x, y) points.
pub(crate) type Line = (&'static str, plotters::style::RGBColor, Vec<(f64, f64)>);

/// The axes of a plot: the x axis's and the y axis's descriptions, and whether the y axis is
/// logarithmic (rates) or linear from zero (sizes).
pub(crate) struct Axes<'a> {
    pub(crate) x: &'a str,
    pub(crate) y: &'a str,
    pub(crate) log_y: bool,
}

/// One workload's figures against the agent count, a line per runtime, log-log for rates and
/// log-linear for memory.
fn plot(report: &Report, workload: Workload, title: &str) -> anyhow::Result<String> {
    let series: Vec<Line> = Runtime::ALL
        .into_iter()
        .map(|runtime| {
            let points = report
                .measurements
                .iter()
                .filter(|m| m.runtime == runtime && m.workload == workload && m.value > 0.0)
                .map(|m| (m.agents as f64, m.value))
                .collect();
            (runtime.name(), runtime.color(), points)
        })
        .collect();
    let y = match workload {
        Workload::Throughput => "messages per second",
        Workload::Create => "agents created per second",
        Workload::Memory => "bytes per agent",
        Workload::Idle => "µs per cycle",
    };
    let mut caption = title.to_owned();
    if let AutoGen::Missing { .. } = report.autogen {
        caption.push_str(" (AutoGen missing)");
    }
    let axes = Axes { x: "agents", y, log_y: workload.higher_is_better() };
    line_plot(&caption, &axes, &series)
}

/// An SVG plot titled `caption` of `series` on `axes`, the x axis logarithmic.
pub(crate) fn line_plot(caption: &str, axes: &Axes<'_>, series: &[Line]) -> anyhow::Result<String> {
    use plotters::prelude::*;

    let all = || series.iter().flat_map(|(_, _, points)| points.iter());
    let (Some(x_min), Some(x_max)) =
        (all().map(|p| p.0).min_by(f64::total_cmp), all().map(|p| p.0).max_by(f64::total_cmp))
    else {
        bail!("no figures to plot");
    };
    let (y_min, y_max) =
        (all().map(|p| p.1).fold(f64::INFINITY, f64::min), all().map(|p| p.1).fold(0.0, f64::max));
    let x_range = (x_min / 1.5)..(x_max * 1.5);
    let mut svg = String::new();
    {
        let root = SVGBackend::with_string(&mut svg, (860, 520)).into_drawing_area();
        root.fill(&WHITE)?;
        let mut builder = ChartBuilder::on(&root);
        builder
            .caption(caption, ("sans-serif", 20))
            .margin(16)
            .x_label_area_size(48)
            .y_label_area_size(84);
        // The same chart on two kinds of y axis, which are different types.
        if axes.log_y {
            // Room above the highest line for the legend.
            let y_range = (y_min / 3.0)..(y_max * 10.0);
            let chart = builder.build_cartesian_2d(x_range.log_scale(), y_range.log_scale())?;
            draw_chart(chart, axes, series)?;
        } else {
            let chart = builder.build_cartesian_2d(x_range.log_scale(), 0.0..(y_max * 1.4))?;
            draw_chart(chart, axes, series)?;
        }
        root.present()?;
    }
    Ok(svg)
}

/// Draws the mesh, a line with its points per entry of `series`, and the legend on `chart`.
fn draw_chart<'a, X, Y>(
    mut chart: plotters::chart::ChartContext<
        'a,
        plotters::backend::SVGBackend<'a>,
        plotters::coord::cartesian::Cartesian2d<X, Y>,
    >,
    axes: &Axes<'_>,
    series: &[Line],
) -> anyhow::Result<()>
where
    X: plotters::coord::ranged1d::Ranged<ValueType = f64>
        + plotters::coord::ranged1d::ValueFormatter<f64>,
    Y: plotters::coord::ranged1d::Ranged<ValueType = f64>
        + plotters::coord::ranged1d::ValueFormatter<f64>,
{
    use plotters::prelude::*;

    chart
        .configure_mesh()
        .x_desc(axes.x)
        .y_desc(axes.y)
        .x_label_formatter(&|x| axis_label(*x))
        .y_label_formatter(&|y| axis_label(*y))
        .label_style(("sans-serif", 14))
        .draw()?;
    for (name, color, points) in series {
        if points.is_empty() {
            continue;
        }
        let color = *color;
        chart
            .draw_series(LineSeries::new(points.iter().copied(), color.stroke_width(2)))?
            .label(*name)
            .legend(move |(x, y)| {
                PathElement::new(vec![(x, y), (x + 20, y)], color.stroke_width(2))
            });
        chart.draw_series(points.iter().map(|&point| Circle::new(point, 4, color.filled())))?;
    }
    chart
        .configure_series_labels()
        .position(SeriesLabelPosition::UpperLeft)
        .background_style(WHITE.mix(0.9))
        .border_style(BLACK)
        .label_font(("sans-serif", 15))
        .draw()?;
    Ok(())
}

pub(crate) fn read(path: &Path) -> anyhow::Result<String> {
    std::fs::read_to_string(path).with_context(|| format!("could not read {}", path.display()))
}
