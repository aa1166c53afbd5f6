//! The embedded model end to end (feature `local`): the hello plan run by a team whose every
//! agent reasons with Gemma 3 270M on llama.cpp. The model file must have been fetched (`strata
//! model fetch`; `cargo xtask ci` does it in its setup step): without it this test fails, saying
//! so.

use serde_json::Value;

use crate::support::{Out, Scratch};

/// The bench's rule for the todo list, the same file.
#[path = "../../../../xtask/src/todo_list.rs"]
mod todo_list;

#[test]
fn a_team_on_the_embedded_model_completes_the_hello_plan_with_valid_decisions() {
    let s = Scratch::with_example();
    // The README's settings: the default time limits (a call is cut only when it falls
    // silent), the heartbeat the README's command uses.
    let out = s.strata(&[
        "run",
        "plan.toml",
        "--team",
        "team.toml",
        "--reasoner",
        "local",
        "--heartbeat",
        "250ms",
        "--data",
        "D",
        "--workspace",
        "W",
        "--run-id",
        "r1",
        "--quiet",
    ]);
    assert!(
        !out.stderr.contains("is missing; run `strata model fetch`"),
        "the embedded model is not fetched; run `cargo run -p agent-cli -- model fetch` first:\n{}",
        out.stderr
    );
    out.code(0).stdout_has(&["task `hello` succeeded"]);
    assert_eq!(s.read("W/hello.txt"), "hello, strata\n");
    assert_eq!(s.read("W/notes/plan.md"), "# Plan\n- greet\n- measure\n");

    // Every decision went through the model: the plan was signed by the powers' reviews, and
    // the ledger counts the calls of every layer on the one local model.
    let usage = s.strata(&["inspect", "r1", "usage", "--data", "D", "--json"]).code(0).json();
    let report = &usage["usage"];
    let model = &report["by_model"]["local/gemma-3-270m-q4_k_m"];
    assert!(model["calls"].as_u64().unwrap() >= 6, "{report}");
    assert!(model["output_tokens"].as_u64().unwrap() > 0, "{report}");
    for layer in ["top", "mid", "bottom"] {
        assert!(report["by_layer"][layer]["calls"].as_u64().unwrap() > 0, "{layer}: {report}");
    }
    assert_eq!(report["total"]["failed_calls"], 0, "every answer was valid: {report}");
    let decisions =
        s.strata(&["inspect", "r1", "decisions", "--data", "D", "--json"]).code(0).json();
    let plan: Vec<&Value> = decisions.as_array().unwrap().iter().collect();
    assert!(plan.iter().any(|d| d["status"] == "approved"), "{decisions}");
    s.strata(&["verify", "r1", "--data", "D"]).code(0);
}

/// `strata eval` on the embedded model: a one-task suite (the hello plan, checked on the
/// files it writes) by the example team, every decision the model's; the attempt passes and
/// the report counts the model's calls.
#[test]
fn strata_eval_runs_a_suite_on_the_embedded_model() {
    let s = Scratch::with_example();
    // Ten minutes before an attempt is a runaway (the default is one), for a loaded machine.
    s.write("suite/suite.toml", "heartbeat = \"250ms\"\ntask_timeout_ms = 600000\n");
    s.write("suite/tasks/hello/plan.toml", &s.read("plan.toml"));
    s.write(
        "suite/tasks/hello/task.toml",
        "check = 'test \"$(cat hello.txt)\" = \"hello, strata\" && test -s notes/plan.md'\n",
    );
    let args = [
        "eval",
        "suite",
        "--team",
        "team.toml",
        "--reasoner",
        "local",
        "--data",
        "D",
        "--eval-id",
        "l",
        "--no-sync",
    ];
    s.strata(&args).code(0).stdout_has(&["hello by team.toml #1: passed"]);
    let report = s.strata(&["eval", "--resume", "l", "--data", "D", "--json"]).code(0).json();
    assert_eq!(report["total"]["passed"], 1, "{report}");
    assert!(report["total"]["model_calls"].as_u64().unwrap() >= 6, "{report}");
}

#[test]
fn a_missing_model_file_is_refused_before_the_run_naming_the_fix() {
    let s = Scratch::with_example();
    s.write("models/.keep", "");
    let args = [
        "run",
        "plan.toml",
        "--team",
        "team.toml",
        "--reasoner",
        "local",
        "--data",
        "D",
        "--workspace",
        "W",
        "--quiet",
    ];
    let run_with_models =
        || Out::of(&args, s.command(&args).env("STRATA_MODEL_DIR", s.path("models")));
    run_with_models().bad_input(&["gemma-3-270m-q4_k_m.gguf", "missing", "strata model fetch"]);
    assert!(!s.path("D").exists(), "nothing is written");
    assert!(!s.path("W").exists(), "nothing is written");

    // A file of the wrong size is refused the same way.
    s.write("models/gemma-3-270m-q4_k_m.gguf", "not a model");
    run_with_models().bad_input(&["gemma-3-270m-q4_k_m.gguf", "strata model fetch"]);
    assert!(!s.path("D").exists(), "nothing is written");
}

/// The one-file goal of `cargo xtask bench --models`, with exactly the README's settings: the
/// example goal team, `--reasoner local`, nothing raised. The model decodes greedily, so the
/// run is the same each time but for timing.
#[test]
fn a_goal_team_on_the_embedded_model_writes_the_todo_file_with_the_readme_settings() {
    let s = Scratch::new();
    let team = concat!(env!("CARGO_MANIFEST_DIR"), "/../../examples/goal/team.toml");
    let out = s.strata(&[
        "run",
        "--goal",
        "create notes/todo.md listing three tasks for setting up a Rust project",
        "--team",
        team,
        "--reasoner",
        "local",
        "--data",
        "D",
        "--workspace",
        "W",
        "--run-id",
        "todo",
        "--quiet",
    ]);
    assert!(
        !out.stderr.contains("is missing; run `strata model fetch`"),
        "the embedded model is not fetched; run `cargo run -p agent-cli -- model fetch` first:\n{}",
        out.stderr
    );
    out.code(0);
    // The file the goal names, written by a worker the lead spawned, as a list of at least
    // three tasks (the rule `cargo xtask bench --models` checks, the same code; greedy decoding writes the
    // same list each time). How good the tasks are is the model's judgement: the 270M model
    // repeats itself (see BENCHMARKS.md).
    let todo = s.read("W/notes/todo.md");
    let items = todo_list::list_items(&todo);
    assert!(items >= 3, "notes/todo.md lists {items} task(s), not three:\n{todo}");
    let files: Vec<String> = walk(&s.path("W"));
    assert_eq!(files, ["notes/todo.md"], "only the file the goal names is written");
    s.strata(&["verify", "todo", "--data", "D"]).code(0);
}

/// The files under `dir`, relative and `/`-separated, sorted.
fn walk(dir: &std::path::Path) -> Vec<String> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(at) = stack.pop() {
        for entry in std::fs::read_dir(&at).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                stack.push(path);
            } else {
                out.push(path.strip_prefix(dir).unwrap().to_string_lossy().replace('\\', "/"));
            }
        }
    }
    out.sort();
    out
}
