//! `cargo xtask bench --eval`: the example suite (`examples/eval`) run by `strata eval` on the
//! embedded model, with the three team shapes, as a user runs it.
//!
//! The bench builds `strata` with the embedded model (`--features local`), checks that the
//! model file is there (`strata model fetch` fetches it; the bench downloads nothing), then
//! runs, from the workspace root:
//!
//! ```text
//! strata eval examples/eval --team examples/eval/layered.toml --team examples/eval/crew.toml \
//!     --team examples/eval/single.toml --reasoner local --repeat N --data DATA --eval-id bench
//! ```
//!
//! which prints a line per attempt as it ends, then `strata eval --resume bench --json` (a
//! finished eval resumed runs nothing and reports again) for the figures, which the bench
//! prints as a Markdown table per task and shape, per shape and in total, with why each
//! failed attempt failed (from the eval's `eval.json`). `--record` writes that into
//! `BENCHMARKS.md` between [`BEGIN`] and [`END`] (under an "Evaluation" heading), replacing
//! what a previous run wrote there; it needs the whole suite on the three shapes.
//!
//! `--task NAME` and `--shape NAME` (each may be repeated) run a part only: the tasks chosen
//! are copied, with the suite's settings, into a suite of their own under the target
//! directory, so the eval sees exactly those tasks. The data directory is
//! `target/bench-eval/data` (cleared at the start), where `strata runs` and `inspect` show
//! every attempt's run afterwards.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Instant;

use anyhow::{Context, bail};
use serde_json::Value;

use crate::{capture, cargo, run as run_command};

/// The example suite, from the workspace root.
const SUITE: &str = "examples/eval";
/// The team shapes, each a team file beside the suite's `suite.toml`.
pub(crate) const SHAPES: [&str; 3] = ["layered", "crew", "single"];
/// The eval's id in its data directory.
const EVAL_ID: &str = "bench";

/// Where the section starts and ends in `BENCHMARKS.md`.
const BEGIN: &str = "<!-- eval:begin (written by `cargo xtask bench --eval --record`; edits inside are overwritten) -->";
const END: &str = "<!-- eval:end -->";

/// What `cargo xtask bench --eval` was asked.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Options {
    /// Attempts of each task by each shape.
    pub(crate) repeat: u32,
    /// The tasks to run (empty: every task of the suite).
    pub(crate) tasks: Vec<String>,
    /// The shapes to run (empty: the three).
    pub(crate) shapes: Vec<String>,
    /// Write the table into `BENCHMARKS.md`.
    pub(crate) record: bool,
}

/// Parses `[--repeat N] [--task NAME]... [--shape layered|crew|single]... [--record]`.
pub(crate) fn args(args: &[&str]) -> anyhow::Result<Options> {
    let mut options = Options { repeat: 1, tasks: Vec::new(), shapes: Vec::new(), record: false };
    let mut it = args.iter();
    while let Some(arg) = it.next() {
        if *arg == "--record" {
            options.record = true;
            continue;
        }
        let value = it.next().with_context(|| format!("{arg} needs a value"))?;
        match *arg {
            "--repeat" => {
                options.repeat =
                    value.parse().ok().filter(|n| *n > 0).with_context(|| {
                        format!("--repeat takes a positive number, not `{value}`")
                    })?;
            }
            "--task" => options.tasks.push((*value).to_owned()),
            "--shape" if SHAPES.contains(value) => options.shapes.push((*value).to_owned()),
            "--shape" => bail!("--shape is `layered`, `crew` or `single`, not `{value}`"),
            other => bail!("unknown option `{other}` of `bench --eval`"),
        }
    }
    if options.record && !(options.tasks.is_empty() && options.shapes.is_empty()) {
        bail!("--record records the whole suite on the three shapes: leave out --task and --shape");
    }
    if options.shapes.is_empty() {
        options.shapes = SHAPES.iter().map(|s| (*s).to_owned()).collect();
    }
    Ok(options)
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
    let target = crate::bench::target_dir(root)?;
    let strata = target.join("debug").join("strata");
    crate::models::model_file(&strata)?;
    let scratch = target.join("bench-eval");
    if scratch.exists() {
        std::fs::remove_dir_all(&scratch)
            .with_context(|| format!("cannot clear {}", scratch.display()))?;
    }
    let suite = suite(root, &scratch, &options.tasks)?;
    let data = scratch.join("data");

    let mut eval = Command::new(&strata);
    eval.current_dir(root).arg("eval").arg(&suite);
    for shape in &options.shapes {
        eval.args(["--team", &format!("{SUITE}/{shape}.toml")]);
    }
    eval.args(["--reasoner", "local", "--repeat", &options.repeat.to_string()])
        .arg("--data")
        .arg(&data)
        .args(["--eval-id", EVAL_ID]);
    let started = Instant::now();
    run_command(&mut eval)?;
    let wall = started.elapsed();

    let mut report = Command::new(&strata);
    report.current_dir(root).args(["eval", "--resume", EVAL_ID, "--json", "--data"]).arg(&data);
    let report: Value =
        serde_json::from_str(&capture(&mut report)?).context("strata eval --json printed")?;
    let info: Value = serde_json::from_slice(
        &std::fs::read(data.join(EVAL_ID).join("eval.json")).context("cannot read eval.json")?,
    )
    .context("eval.json is not JSON")?;
    let table = table(&report);
    let failures = failures(&info);
    println!("\n{table}\n{}", failures_text(&failures));
    println!("the eval took {:.0} s; its runs are in {}", wall.as_secs_f64(), data.display());
    if options.record {
        let path = root.join("BENCHMARKS.md");
        let existing = std::fs::read_to_string(&path).ok();
        let section = section(options.repeat, &table, &failures);
        std::fs::write(&path, update_document(existing.as_deref(), &section))
            .with_context(|| format!("cannot write {}", path.display()))?;
        println!("written to {}", path.display());
    }
    Ok(())
}

/// The suite to run: the example suite itself, or a copy of it under `scratch` holding only
/// `tasks` (each of which must be one of its tasks).
fn suite(root: &Path, scratch: &Path, tasks: &[String]) -> anyhow::Result<PathBuf> {
    let example = root.join(SUITE);
    if tasks.is_empty() {
        return Ok(example);
    }
    let copy = scratch.join("suite");
    std::fs::create_dir_all(copy.join("tasks"))
        .with_context(|| format!("cannot create {}", copy.display()))?;
    std::fs::copy(example.join("suite.toml"), copy.join("suite.toml"))
        .context("cannot copy the suite's suite.toml")?;
    for task in tasks {
        let from = example.join("tasks").join(task);
        if task.contains('/') || !from.join("task.toml").is_file() {
            bail!("the suite {SUITE} has no task `{task}` (see {SUITE}/tasks/)");
        }
        copy_dir(&from, &copy.join("tasks").join(task))?;
    }
    Ok(copy)
}

/// Copies the folder `from` into `to`, files with their permissions (a check script stays
/// executable).
fn copy_dir(from: &Path, to: &Path) -> anyhow::Result<()> {
    std::fs::create_dir_all(to).with_context(|| format!("cannot create {}", to.display()))?;
    for entry in
        std::fs::read_dir(from).with_context(|| format!("cannot read {}", from.display()))?
    {
        let entry = entry?;
        let target = to.join(entry.file_name());
        if entry.file_type()?.is_dir() {
            copy_dir(&entry.path(), &target)?;
        } else {
            std::fs::copy(entry.path(), &target)
                .with_context(|| format!("cannot copy {}", entry.path().display()))?;
        }
    }
    Ok(())
}

/// The report's figures as a Markdown table: a row per task and shape, per shape (task `all`)
/// and in total.
pub(crate) fn table(report: &Value) -> String {
    let mut out = String::from(
        "| task | team | passed | wall p50 | wall p90 | model calls | tokens | repairs | stops | runaway |\n|---|---|---|---|---|---|---|---|---|---|\n",
    );
    let rows = report["rows"].as_array().into_iter().flatten();
    let teams = report["teams"].as_array().into_iter().flatten();
    for row in rows.chain(teams).chain(std::iter::once(&report["total"])) {
        let name = |key: &str| match row[key].as_str() {
            Some("*") | None => "all".to_owned(),
            Some(name) => name.to_owned(),
        };
        let n = |key: &str| row[key].as_u64().unwrap_or(0);
        let wall = |key: &str| {
            row["wall"][key]
                .as_u64()
                .map_or("-".to_owned(), |ms| format!("{:.1} s", ms as f64 / 1e3))
        };
        let stops = row["stops"].as_object().filter(|stops| !stops.is_empty()).map_or(
            "-".to_owned(),
            |stops| {
                stops
                    .iter()
                    .map(|(kind, count)| {
                        format!("{} {}", kind.replace('_', " "), count.as_u64().unwrap_or(0))
                    })
                    .collect::<Vec<_>>()
                    .join(", ")
            },
        );
        out.push_str(&format!(
            "| {} | {} | {}/{} | {} | {} | {} | {} | {} | {stops} | {} |\n",
            name("task"),
            name("team"),
            n("passed"),
            n("attempts"),
            wall("p50_ms"),
            wall("p90_ms"),
            n("model_calls"),
            n("tokens"),
            n("repairs"),
            n("runaway"),
        ));
    }
    out
}

/// Why each failed attempt of `eval.json` failed, grouped: (task, team, attempts, reason), in
/// the order each first failed.
pub(crate) fn failures(info: &Value) -> Vec<(String, String, Vec<u64>, String)> {
    let teams: Vec<&str> = info["teams"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|t| t["label"].as_str().unwrap_or("?"))
        .collect();
    let mut groups: Vec<(String, String, Vec<u64>, String)> = Vec::new();
    for attempt in info["attempts"].as_array().into_iter().flatten() {
        let result = &attempt["result"];
        if result.is_null() || result["passed"].as_bool() == Some(true) {
            continue;
        }
        let task = attempt["task"].as_str().unwrap_or("?").to_owned();
        let team = attempt["team"]
            .as_u64()
            .and_then(|i| teams.get(usize::try_from(i).ok()?))
            .map_or("?".to_owned(), |t| (*t).to_owned());
        let reason = reason(result);
        let repeat = attempt["repeat"].as_u64().unwrap_or(0);
        match groups.iter_mut().find(|g| g.0 == task && g.1 == team && g.3 == reason) {
            Some(group) => group.2.push(repeat),
            None => groups.push((task, team, vec![repeat], reason)),
        }
    }
    groups
}

/// Why an attempt failed, in one line: its run's failure, or its check's.
fn reason(result: &Value) -> String {
    let cut = |text: &str| {
        let line = text.split_whitespace().collect::<Vec<_>>().join(" ");
        match line.char_indices().nth(300) {
            Some((at, _)) => format!("{}…", &line[..at]),
            None => line,
        }
    };
    if let Some(failure) = result["failure"].as_str() {
        return format!("the run failed: {}", cut(failure));
    }
    let check = &result["check"];
    match (check["code"].as_i64(), check["error"].as_str()) {
        (code, Some(error)) => {
            let code = code.map_or("no exit code".to_owned(), |c| format!("exit {c}"));
            format!("the run succeeded; its check failed ({code}): {}", cut(error))
        }
        (Some(code), None) => format!("the run succeeded; its check failed (exit {code})"),
        (None, None) => "the run did not succeed".to_owned(),
    }
}

fn failures_text(failures: &[(String, String, Vec<u64>, String)]) -> String {
    if failures.is_empty() {
        return "Every attempt passed.\n".to_owned();
    }
    let mut out = String::from("Why each failed attempt failed:\n\n");
    for (task, team, repeats, reason) in failures {
        let numbers: Vec<String> = repeats.iter().map(ToString::to_string).collect();
        let label = if repeats.len() == 1 { "attempt" } else { "attempts" };
        out.push_str(&format!("- {task} by {team}, {label} {}: {reason}\n", numbers.join(", ")));
    }
    out
}

/// The section of `BENCHMARKS.md`: how it was measured, the table and every failure's reason.
fn section(repeat: u32, table: &str, failures: &[(String, String, Vec<u64>, String)]) -> String {
    let cores = std::thread::available_parallelism().map_or(0, |n| n.get());
    let teams: Vec<String> = SHAPES.iter().map(|s| format!("--team {SUITE}/{s}.toml")).collect();
    format!(
        "## Evaluation\n\nMeasured by `cargo xtask bench --eval --record` on {cores} cores: \
         `strata eval {SUITE} {} --reasoner local --repeat {repeat}` (a debug build), every \
         task of the example suite by each team shape, on the embedded model (Gemma 3 270M \
         Q4_K_M on llama.cpp, greedy decoding). An attempt passes when its run succeeds and \
         its task's check passes on the final workspace; wall time is the attempt's run, \
         model calls and tokens are summed over the attempts. The embedded model has no \
         price, so no cost is shown.\n\n{table}\n{}",
        teams.join(" "),
        failures_text(failures)
    )
}

/// `BENCHMARKS.md` with `section` between the markers: replaced when they are there, appended
/// otherwise.
pub(crate) fn update_document(existing: Option<&str>, section: &str) -> String {
    crate::models::between_markers(existing, BEGIN, END, section)
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn options_default_to_the_whole_suite_on_three_shapes_and_refuse_bad_values() {
        let Ok(all) = args(&[]) else { panic!("the defaults are refused") };
        assert_eq!((all.repeat, all.record), (1, false));
        assert!(all.tasks.is_empty());
        assert_eq!(all.shapes, ["layered", "crew", "single"]);
        let Ok(some) = args(&["--task", "slugify", "--shape", "single", "--repeat", "3"]) else {
            panic!("a task, a shape and a count are refused")
        };
        assert_eq!(
            (some.repeat, some.tasks, some.shapes),
            (3, vec!["slugify".to_owned()], vec!["single".to_owned()])
        );
        let Ok(recorded) = args(&["--record", "--repeat", "2"]) else { panic!("--record") };
        assert!(recorded.record);
        assert!(args(&["--repeat", "0"]).is_err());
        assert!(args(&["--shape", "pyramid"]).is_err());
        assert!(args(&["--task"]).is_err());
        assert!(args(&["--record", "--task", "slugify"]).is_err(), "a part is not recorded");
    }

    #[test]
    fn the_table_has_a_row_per_task_and_team_per_team_and_the_total() {
        let row = |task: &str, team: &str, passed: u64| {
            json!({"task": task, "team": team, "attempts": 2, "passed": passed,
                   "wall": {"p50_ms": 1500, "p90_ms": 61000}, "model_calls": 7, "tokens": 900,
                   "repairs": 1, "stops": {"no_progress": 1}, "runaway": 0})
        };
        let report = json!({
            "rows": [row("slugify", "single.toml", 1)],
            "teams": [row("*", "single.toml", 1)],
            "total": row("*", "*", 1),
        });
        let table = table(&report);
        let lines: Vec<&str> = table.lines().collect();
        assert_eq!(lines.len(), 5, "{table}");
        assert_eq!(
            lines[2],
            "| slugify | single.toml | 1/2 | 1.5 s | 61.0 s | 7 | 900 | 1 | no progress 1 | 0 |"
        );
        assert!(lines[3].starts_with("| all | single.toml | 1/2 |"), "{table}");
        assert!(lines[4].starts_with("| all | all | 1/2 |"), "{table}");
        let empty = json!({"rows": [], "teams": [], "total": {"attempts": 0, "passed": 0,
                           "wall": null, "stops": {}}});
        let empty = super::table(&empty);
        assert_eq!(empty.lines().nth(2), Some("| all | all | 0/0 | - | - | 0 | 0 | 0 | - | 0 |"));
    }

    #[test]
    fn failed_attempts_are_grouped_by_task_team_and_reason() {
        let info = json!({
            "teams": [{"label": "crew.toml"}, {"label": "single.toml"}],
            "attempts": [
                {"task": "a", "team": 0, "repeat": 1, "result": {"passed": false,
                  "failure": "no progress for 40 heartbeats"}},
                {"task": "a", "team": 0, "repeat": 2, "result": {"passed": true}},
                {"task": "a", "team": 0, "repeat": 3, "result": {"passed": false,
                  "failure": "no progress for 40 heartbeats"}},
                {"task": "a", "team": 1, "repeat": 1, "result": {"passed": false,
                  "check": {"passed": false, "code": 1, "error": "FAIL: only 2 tests ran"}}},
                {"task": "b", "team": 1, "repeat": 1, "result": null},
            ],
        });
        let groups = failures(&info);
        assert_eq!(groups.len(), 2, "{groups:?}");
        assert_eq!((groups[0].0.as_str(), groups[0].1.as_str()), ("a", "crew.toml"));
        assert_eq!(groups[0].2, [1, 3]);
        assert_eq!(groups[0].3, "the run failed: no progress for 40 heartbeats");
        assert_eq!(groups[1].1, "single.toml");
        assert_eq!(
            groups[1].3,
            "the run succeeded; its check failed (exit 1): FAIL: only 2 tests ran"
        );
        let text = failures_text(&groups);
        assert!(text.contains("- a by crew.toml, attempts 1, 3: the run failed"), "{text}");
        assert_eq!(failures_text(&[]), "Every attempt passed.\n");
    }

    #[test]
    fn the_section_replaces_its_markers_and_keeps_the_rest() {
        let first = update_document(Some("# Benchmarks\n\nby hand\n"), "## Evaluation\n\none");
        assert!(first.starts_with("# Benchmarks\n\nby hand\n"));
        assert!(first.contains(BEGIN) && first.contains(END));
        let second = update_document(Some(&first), "## Evaluation\n\ntwo");
        assert!(second.contains("two") && !second.contains("\none\n"));
        assert_eq!(second.matches("## Evaluation").count(), 1);
        assert!(second.contains("by hand"));
    }
}
