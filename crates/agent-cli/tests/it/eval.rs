//! `strata eval`: a suite of two rule-based tasks (one passes, one fails its check) run twice
//! by a team given on the command line: a line per attempt, the table, `--svg`, `--json`;
//! every attempt a run that `strata runs` lists beside the eval; `--resume` of a finished eval
//! shows its report again; an eval killed with SIGKILL resumes without running its finished
//! attempts again; a bad suite (or no team) refused with exit 2, nothing written.

use crate::support::*;

/// A one-step shell plan for the shipped evolution team.
fn plan(id: &str, command: &str) -> String {
    format!(
        "id = \"{id}\"\ngoal = \"{id}\"\n[[steps]]\nid = \"s\"\ndomain = \"ops\"\ntool = \"shell\"\nargs = {{ command = \"{command}\" }}\n"
    )
}

/// A suite naming no team, with a task that passes (`good`) and one that fails its check
/// (`bad`), and the team in `team.toml`.
fn scratch() -> Scratch {
    let s = Scratch::new();
    s.write("suite/suite.toml", "heartbeat = \"20ms\"\n");
    let team = std::fs::read_to_string(
        std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../../examples/evolve/suite/team.toml"),
    )
    .unwrap();
    s.write("team.toml", &team);
    s.write("suite/tasks/good/task.toml", "check = \"test -f done\"\n");
    s.write("suite/tasks/good/plan.toml", &plan("good", "touch done"));
    s.write("suite/tasks/bad/task.toml", "check = \"test -f done\"\n");
    s.write("suite/tasks/bad/plan.toml", &plan("bad", "touch other"));
    s
}

#[test]
fn strata_eval_runs_every_task_by_the_team_and_reports_as_a_table_json_and_svg() {
    let s = scratch();
    let args = [
        "eval",
        "suite",
        "--team",
        "team.toml",
        "--repeat",
        "2",
        "--data",
        "D",
        "--eval-id",
        "e1",
        "--no-sync",
        "--svg",
        "plot.svg",
    ];
    let out = s.strata(&args);
    out.code(0).stdout_has(&[
        "eval e1: 4 attempts (0 done)",
        "[4/4]",
        "good by team.toml #2: passed",
        "bad by team.toml #1: failed its check",
        "passed",
        "wall p50",
        "2/2",
        "0/2",
    ]);
    let svg = s.read("plot.svg");
    assert!(svg.starts_with("<svg") && svg.contains("good / team.toml"), "{svg}");

    let report = s.strata(&["eval", "--resume", "e1", "--data", "D", "--json"]).code(0).json();
    assert_eq!(report["eval_id"], "e1");
    assert_eq!(report["total"]["attempts"], 4);
    assert_eq!(report["total"]["passed"], 2);
    let bad = report["rows"].as_array().unwrap().iter().find(|r| r["task"] == "bad").unwrap();
    assert_eq!(bad["check_failed"], 2, "{bad}");

    // The eval and its four runs are listed.
    let eval = listed_run(&s, "D", "e1");
    assert_eq!((&eval["status"], &eval["task"]), (&"finished".into(), &"(eval)".into()));
    for run in bad["run_ids"].as_array().unwrap() {
        let listed = listed_run(&s, "D", run.as_str().unwrap());
        assert_eq!(listed["status"], "succeeded", "the run succeeded; its check failed");
    }
    // An eval is not a run: `inspect` says what it is.
    s.strata(&["inspect", "e1", "tree", "--data", "D"]).bad_input(&["is an eval", "--resume e1"]);
}

#[test]
fn a_bad_suite_or_a_missing_team_is_refused_and_nothing_is_written() {
    let s = scratch();
    s.strata(&["eval", "suite", "--data", "D"]).bad_input(&["no team", "--team"]);
    assert!(!s.path("D").exists());
    s.write("suite/tasks/bad/task.toml", "description = \"no check\"\n");
    s.strata(&["eval", "suite", "--team", "team.toml", "--data", "D"])
        .bad_input(&["task `bad` has no check", "tasks/bad/task.toml"]);
    assert!(!s.path("D").exists());
}

#[test]
fn a_killed_eval_resumes_without_running_its_finished_attempts_again() {
    let s = scratch();
    s.write("suite/tasks/good/plan.toml", &plan("good", "sleep 0.3; touch done"));
    let args = [
        "eval",
        "suite",
        "--team",
        "team.toml",
        "--repeat",
        "2",
        "--data",
        "D",
        "--eval-id",
        "e2",
        "--no-sync",
    ];
    let running = s.spawn(&args);
    wait_for("the first attempt", || running.stdout_so_far().contains("[1/4]"));
    running.kill();
    assert_eq!(listed_run(&s, "D", "e2")["status"], "killed (resumable)");
    let before: serde_json::Value = serde_json::from_str(&s.read("D/e2/eval.json")).unwrap();
    let first = before["attempts"][0].clone();
    assert!(first["result"].is_object(), "{before}");

    let out = s.strata(&["eval", "--resume", "e2", "--data", "D", "--no-sync"]);
    out.code(0).stdout_has(&["[4/4]"]);
    assert!(!out.stdout.contains("[1/4]"), "the finished attempt ran again:\n{}", out.stdout);
    let after: serde_json::Value = serde_json::from_str(&s.read("D/e2/eval.json")).unwrap();
    assert_eq!(after["status"], "finished");
    assert_eq!(after["attempts"][0], first, "the finished attempt is kept as it was");
    let attempts = after["attempts"].as_array().unwrap();
    assert!(attempts.iter().all(|a| a["result"].is_object()), "{after}");
    // One run per attempt: a run the kill interrupted went on under its id.
    let runs = s.strata(&["runs", "--data", "D", "--json"]).code(0).json();
    let team_runs = runs.as_array().unwrap().iter().filter(|r| r["task"] != "(eval)").count();
    assert_eq!(team_runs, 4, "{runs}");
}

/// The suite with a model reasoner given on the command line, OpenAI-compatible and then
/// Anthropic (a fake server on loopback, so no key): every attempt's run reasons through it,
/// the checks decide as with any reasoner, and the report counts the model's calls.
#[test]
fn strata_eval_runs_the_suite_with_an_openai_or_an_anthropic_reasoner() {
    use crate::fake_llm::{FakeLlm, Mode};
    for (kind, model, path) in [
        ("openai", "fake-model", "/v1/chat/completions"),
        ("anthropic", "fake-claude", "/v1/messages"),
    ] {
        let server = FakeLlm::start(Mode::Sensible);
        let url = if kind == "openai" { server.openai_url() } else { server.anthropic_url() };
        let s = scratch();
        let args = [
            "eval",
            "suite",
            "--team",
            "team.toml",
            "--reasoner",
            kind,
            "--base-url",
            &url,
            "--model",
            model,
            "--data",
            "D",
            "--eval-id",
            "m",
            "--no-sync",
        ];
        s.strata(&args)
            .code(0)
            .stdout_has(&["good by team.toml #1: passed", "bad by team.toml #1: failed its check"]);
        let report = s.strata(&["eval", "--resume", "m", "--data", "D", "--json"]).code(0).json();
        assert_eq!(report["total"]["attempts"], 2, "{kind}: {report}");
        assert_eq!(report["total"]["passed"], 1, "{kind}: {report}");
        let calls = server.calls();
        assert!(!calls.is_empty(), "{kind}: the model was never asked");
        assert!(calls.iter().all(|c| c.path == path), "{kind}: {:?}", calls[0].path);
        assert_eq!(
            report["total"]["model_calls"],
            calls.len() as u64,
            "{kind}: the report counts every call the server answered: {report}"
        );
    }
}
