//! `cargo xtask bench`: run the criterion benches and print one table of their results.
//!
//! Criterion leaves one directory per benchmark under `target/criterion`, with the latest run in
//! `new/`: `estimates.json` holds the statistics (in nanoseconds per iteration) and
//! `benchmark.json` the id and the declared throughput. Every such directory becomes a row, so a
//! new bench shows up without touching this file.
//!
//! What criterion does not measure (memory, latency percentiles), a bench measures itself and
//! writes as one JSON object per file under `target/strata-bench/`: an `id` and numbers, such as
//! `{"id": "pool/memory_per_idle_agent", "bytes_per_agent": 812.3, "agents": 100000}`. Each file
//! becomes a row of the same table with its numbers in a `figures` column, shown by the unit
//! their name ends in: `bytes_per_agent` as `812.3 B/agent`, `p99_us` as `p99 23.25 ms`,
//! `spawns_per_s` as `26251 spawns/s`. Among them: `pool/spawn_agent` (agents spawned per second
//! through `spawn_agent`) and `pool/speak_to_agent_round_trip` (p50 and p99), from agent-pool's
//! `spawn` bench; `placement/agents_per_worker` (the CPU one NATS worker and its server spend per
//! second on a run's idle agents, the leases it lost and the heartbeats missed, and the time to
//! place them), from agent-pool's `placement` bench; `dashboard/page_10000` (the dashboard's page
//! holding a run of 10 000 agents in headless Chromium: the snapshot's fetch, the tree's full
//! render, a burst of 10 000 status updates, and a search for one agent), from agent-cli's
//! `dashboard_page` bench, which writes nothing where Chromium is not installed. Numbers that are not at the top level of a
//! file (such as `placement/agents_per_worker`'s `runs`, one object per size) are left out of
//! the table.

use std::path::{Path, PathBuf};

use anyhow::Context;
use serde_json::Value;

use crate::{capture, cargo, run as run_command};

/// One benchmark's latest result.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Row {
    /// `group/function/parameter`, as criterion names it.
    pub(crate) id: String,
    /// Median time per iteration, in nanoseconds.
    pub(crate) median_ns: f64,
    /// What one iteration processes, when the bench declared it.
    pub(crate) throughput: Option<Throughput>,
}

/// Figures a bench wrote itself under `target/strata-bench/`.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Figure {
    /// Named like a criterion id, such as `pool/memory_per_idle_agent`.
    pub(crate) id: String,
    /// The numbers, by name, such as `("bytes_per_agent", 812.3)`; other values are left out.
    pub(crate) values: Vec<(String, f64)>,
}

/// Criterion's declared throughput per iteration.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) enum Throughput {
    Elements(f64),
    Bytes(f64),
    BytesDecimal(f64),
}

/// Runs `cargo bench` (criterion gets `--quick` when asked), then prints the table.
pub(crate) fn run(root: &Path, quick: bool) -> anyhow::Result<()> {
    let target = target_dir(root)?;
    let mut bench = cargo(root);
    // Benches that write figures find the target directory through this variable; naming it
    // changes nothing for cargo, which resolved the same directory.
    bench.env("CARGO_TARGET_DIR", &target);
    // `--bench '*'`, not `--benches`: that also runs every lib's unit tests as libtest benches,
    // and libtest rejects criterion's flags such as `--quick`.
    bench.args(["bench", "--workspace", "--all-features", "--bench", "*"]);
    if quick {
        bench.args(["--", "--quick"]);
    }
    run_command(&mut bench)?;

    let criterion_dir = target.join("criterion");
    let rows = read_results(&criterion_dir)?;
    let figures = read_figures(&target.join("strata-bench"))?;
    if rows.is_empty() && figures.is_empty() {
        println!("no benchmark results in {}: no benches have run", criterion_dir.display());
    } else {
        println!("\n{}", table(&rows, &figures));
    }
    Ok(())
}

/// Every result under `criterion_dir`, sorted by id; empty when the directory does not exist.
pub(crate) fn read_results(criterion_dir: &Path) -> anyhow::Result<Vec<Row>> {
    let mut rows = Vec::new();
    let mut pending = vec![criterion_dir.to_path_buf()];
    while let Some(dir) = pending.pop() {
        let Ok(entries) = std::fs::read_dir(&dir) else { continue };
        for entry in entries {
            let path = entry?.path();
            if !path.is_dir() {
                continue;
            }
            if path.file_name().is_some_and(|name| name == "new") {
                if let Some(row) = read_result(criterion_dir, &path)? {
                    rows.push(row);
                }
            } else {
                pending.push(path);
            }
        }
    }
    rows.sort_by(|a, b| a.id.cmp(&b.id));
    Ok(rows)
}

/// The result in one `.../new` directory, or `None` when it holds no estimates.
fn read_result(criterion_dir: &Path, new_dir: &Path) -> anyhow::Result<Option<Row>> {
    let estimates_path = new_dir.join("estimates.json");
    if !estimates_path.is_file() {
        return Ok(None);
    }
    let estimates = read_json(&estimates_path)?;
    let median_ns = estimates
        .pointer("/median/point_estimate")
        .and_then(Value::as_f64)
        .with_context(|| format!("no median in {}", estimates_path.display()))?;

    let benchmark_path = new_dir.join("benchmark.json");
    let benchmark = if benchmark_path.is_file() { Some(read_json(&benchmark_path)?) } else { None };
    let id = benchmark
        .as_ref()
        .and_then(|benchmark| benchmark.get("full_id"))
        .and_then(Value::as_str)
        .map(str::to_owned)
        .unwrap_or_else(|| {
            // No benchmark.json: the id is the directory path, minus `new`.
            let bench_dir = new_dir.parent().unwrap_or(new_dir);
            bench_dir.strip_prefix(criterion_dir).unwrap_or(bench_dir).display().to_string()
        });
    let throughput = benchmark
        .as_ref()
        .and_then(|benchmark| benchmark.get("throughput"))
        .and_then(parse_throughput);
    Ok(Some(Row { id, median_ns, throughput }))
}

/// Every figure in `dir` (its `*.json` files), sorted by id; empty when the directory does not
/// exist.
pub(crate) fn read_figures(dir: &Path) -> anyhow::Result<Vec<Figure>> {
    let Ok(entries) = std::fs::read_dir(dir) else { return Ok(Vec::new()) };
    let mut figures = Vec::new();
    for entry in entries {
        let path = entry?.path();
        if path.is_file() && path.extension().is_some_and(|extension| extension == "json") {
            let figure = parse_figure(&read_json(&path)?).with_context(|| {
                format!("{}: expected an object with a string `id`", path.display())
            })?;
            figures.push(figure);
        }
    }
    figures.sort_by(|a, b| a.id.cmp(&b.id));
    Ok(figures)
}

pub(crate) fn parse_figure(figure: &Value) -> Option<Figure> {
    let object = figure.as_object()?;
    let id = object.get("id")?.as_str()?.to_owned();
    let values =
        object.iter().filter_map(|(name, value)| Some((name.clone(), value.as_f64()?))).collect();
    Some(Figure { id, values })
}

/// Criterion's serialized throughput: `{"Elements": 100}`, `{"Bytes": 4096}`, ...; an iteration
/// that declares both elements and bytes is shown in elements.
fn parse_throughput(throughput: &Value) -> Option<Throughput> {
    let amount = |pointer: &str| throughput.pointer(pointer).and_then(Value::as_f64);
    amount("/Elements")
        .or_else(|| amount("/ElementsAndBytes/elements"))
        .map(Throughput::Elements)
        .or_else(|| amount("/Bytes").map(Throughput::Bytes))
        .or_else(|| amount("/BytesDecimal").map(Throughput::BytesDecimal))
}

/// The results as one aligned text table sorted by id: benchmark, median time, throughput, and
/// a figures column when there are figures.
pub(crate) fn table(rows: &[Row], figures: &[Figure]) -> String {
    let mut cells: Vec<[String; 4]> =
        rows.iter()
            .map(|row| {
                let throughput = row
                    .throughput
                    .map(|throughput| format_throughput(throughput, row.median_ns))
                    .unwrap_or_default();
                [row.id.clone(), format_time(row.median_ns), throughput, String::new()]
            })
            .chain(figures.iter().map(|figure| {
                [figure.id.clone(), String::new(), String::new(), format_figure(figure)]
            }))
            .collect();
    cells.sort_by(|a, b| a[0].cmp(&b[0]));
    let mut header = ["benchmark", "median", "throughput", "figures"].map(str::to_owned);
    if figures.is_empty() {
        header[3].clear();
    }
    let width = |column: usize| {
        std::iter::once(&header).chain(&cells).map(|row| row[column].chars().count()).max()
    };
    let widths = [width(0), width(1), width(2)].map(|width| width.unwrap_or(0));
    std::iter::once(&header)
        .chain(&cells)
        .map(|[id, time, throughput, memory]| {
            let [id_width, time_width, throughput_width] = widths;
            format!(
                "{id:<id_width$}  {time:>time_width$}  {throughput:<throughput_width$}  {memory}"
            )
            .trim_end()
            .to_owned()
        })
        .collect::<Vec<_>>()
        .join("\n")
}

/// A figure's numbers, those with a unit first: `bytes_per_agent` 812.3 as `812.3 B/agent`, a
/// name ending in `_per_s` as a rate (`spawns_per_s` 26251.4 as `26251 spawns/s`), a name
/// ending in `_ns`, `_us`, `_ms` or `_s` as a time (`p99_us` 23247 as `p99 23.25 ms`), a name
/// ending in `_bytes` in bytes, anything else as a plain count (`agents 100000`).
pub(crate) fn format_figure(figure: &Figure) -> String {
    let mut with_unit = Vec::new();
    let mut counts = Vec::new();
    for (name, value) in &figure.values {
        let time = [("_ns", 1.0), ("_us", 1e3), ("_ms", 1e6), ("_s", 1e9)]
            .into_iter()
            .find_map(|(suffix, ns)| Some((name.strip_suffix(suffix)?, ns)));
        if let Some(per) = name.strip_prefix("bytes_per_") {
            with_unit.push(format!("{value:.1} B/{per}"));
        } else if let Some(quantity) = name.strip_suffix("_per_s") {
            with_unit.push(format!("{value:.0} {quantity}/s"));
        } else if let Some((quantity, ns)) = time {
            with_unit.push(format!("{quantity} {}", format_time(value * ns)));
        } else if let Some(quantity) = name.strip_suffix("_bytes") {
            with_unit.push(format!("{quantity} {value:.0} B"));
        } else if value.fract() == 0.0 {
            counts.push(format!("{name} {value:.0}"));
        } else {
            counts.push(format!("{name} {value:.2}"));
        }
    }
    with_unit.extend(counts);
    with_unit.join(", ")
}

/// `812.40 ns`, `3.21 µs`, `1.50 ms`, `2.00 s`.
pub(crate) fn format_time(ns: f64) -> String {
    if ns < 1e3 {
        format!("{ns:.2} ns")
    } else if ns < 1e6 {
        format!("{:.2} µs", ns / 1e3)
    } else if ns < 1e9 {
        format!("{:.2} ms", ns / 1e6)
    } else {
        format!("{:.2} s", ns / 1e9)
    }
}

/// The throughput per second at `median_ns` per iteration, as criterion prints it.
pub(crate) fn format_throughput(throughput: Throughput, median_ns: f64) -> String {
    let per_second = |per_iteration: f64| per_iteration * 1e9 / median_ns;
    let scaled = |value: f64, base: f64, units: [&str; 4]| {
        let mut value = value;
        let mut unit = units[0];
        for next in &units[1..] {
            if value < base {
                break;
            }
            value /= base;
            unit = next;
        }
        format!("{value:.2} {unit}")
    };
    match throughput {
        Throughput::Elements(n) => {
            scaled(per_second(n), 1e3, ["elem/s", "Kelem/s", "Melem/s", "Gelem/s"])
        }
        Throughput::Bytes(n) => scaled(per_second(n), 1024.0, ["B/s", "KiB/s", "MiB/s", "GiB/s"]),
        Throughput::BytesDecimal(n) => scaled(per_second(n), 1e3, ["B/s", "KB/s", "MB/s", "GB/s"]),
    }
}

/// Cargo's target directory, which honours `CARGO_TARGET_DIR` and `build.target-dir`.
pub(crate) fn target_dir(root: &Path) -> anyhow::Result<PathBuf> {
    let metadata =
        capture(cargo(root).args(["metadata", "--format-version", "1", "--no-deps", "--offline"]))?;
    let metadata: Value =
        serde_json::from_str(&metadata).context("cargo metadata printed invalid JSON")?;
    let target = metadata
        .get("target_directory")
        .and_then(Value::as_str)
        .context("cargo metadata names no target_directory")?;
    Ok(PathBuf::from(target))
}

fn read_json(path: &Path) -> anyhow::Result<Value> {
    let text = std::fs::read_to_string(path)
        .with_context(|| format!("could not read {}", path.display()))?;
    serde_json::from_str(&text).with_context(|| format!("invalid JSON in {}", path.display()))
}
