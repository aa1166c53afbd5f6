//! `strata eval` through the library: a suite whose executors reason with the scripted test
//! model (an OpenAI-compatible fake on loopback) has a task that passes, one that fails its
//! check, one that loops (stopped by the loop guard) and one that blows its budget, each
//! attempt a durable run with its figures; a task that runs away is stopped by the eval;
//! an eval interrupted and resumed keeps its finished attempts; bad suites are refused with
//! the path and the reason before anything is written.

use std::os::unix::fs::PermissionsExt as _;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use agent_llm::testing::{FakeModel, decision_of, text_completion, tool_call_completion};
use serde_json::{Value, json};
use strata::eval::{
    EvalInfo, EvalObserver, EvalOptions, EvalStatus, Evaluated, Evaluating, StopReason,
};
use strata::run_dir::{RunInfo, RunStatus};

const MODEL: &str = "fake-model";

/// The tokens the `spend` step's answers report: more than the suite's budget at once.
const SPEND_TOKENS: u64 = 5000;

fn write(dir: &Path, path: &str, text: &str) {
    let file = dir.join(path);
    std::fs::create_dir_all(file.parent().unwrap()).unwrap();
    std::fs::write(file, text).unwrap();
}

/// A one-step plan: step `step` calls `tool` with `args` (a TOML inline table).
fn plan(step: &str, tool: &str, args: &str) -> String {
    format!(
        "id = \"{step}\"\ngoal = \"{step}\"\n[[steps]]\nid = \"{step}\"\ndescription = \"{step}\"\ndomain = \"ops\"\ntool = \"{tool}\"\nargs = {args}\n"
    )
}

/// The shipped evolution team (three powers, a lead of `ops`, one executor), its executor
/// reasoning with `executor` (a TOML inline table, or none), and `extra` tables.
fn team(executor: Option<&str>, extra: &str) -> String {
    let team = std::fs::read_to_string(
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples/evolve/suite/team.toml"),
    )
    .unwrap();
    let team = match executor {
        Some(reasoner) => team
            .replace("id = \"bottom-1\"\n", &format!("id = \"bottom-1\"\nreasoner = {reasoner}\n")),
        None => team,
    };
    format!("{team}\n{extra}")
}

/// The scripted test model of the executor's tool loop, by the step it is asked to carry out:
/// `write` and `wrong` make the plan's call then finish; `loop` makes the plan's call (which
/// fails) again and again; `spend` does too, each answer reporting [`SPEND_TOKENS`] tokens.
fn scripted(body: &Value) -> Result<Value, String> {
    if let Some(decision) = decision_of(body) {
        return match decision {
            "probe" => Ok(text_completion(MODEL, &json!({"ok": true}))),
            other => Err(format!("unexpected decision {other}")),
        };
    }
    let messages = body["messages"].as_array().ok_or("no messages")?;
    let at = messages
        .iter()
        .rposition(|m| {
            m["role"] == "user"
                && m["content"].as_str().is_some_and(|c| c.starts_with("Carry out step "))
        })
        .ok_or("not a step's question")?;
    let question = messages[at]["content"].as_str().unwrap_or_default();
    let step = question["Carry out step ".len()..].split(' ').next().unwrap_or_default();
    let planned: Value = question
        .lines()
        .find_map(|l| l.strip_prefix("The plan's call for it: "))
        .and_then(|l| serde_json::from_str(l).ok())
        .ok_or("no planned call")?;
    let made = messages[at..].iter().filter(|m| m["tool_calls"].is_array()).count();
    let id = format!("call_{}", made + 1);
    let tool = planned["tool"].as_str().unwrap_or_default();
    let call = tool_call_completion(MODEL, &id, tool, &planned["arguments"]);
    Ok(match (step, made) {
        ("write" | "wrong", 0) | ("loop", _) => call,
        ("write" | "wrong", _) => tool_call_completion(
            MODEL,
            &id,
            "finish_subtask",
            &json!({"success": true, "summary": "done"}),
        ),
        ("spend", _) => {
            let mut call = call;
            call["usage"]["prompt_tokens"] = json!(SPEND_TOKENS);
            call["usage"]["total_tokens"] = json!(SPEND_TOKENS + 20);
            call
        }
        (other, _) => return Err(format!("unexpected step {other}")),
    })
}

/// The suite of the four behaviours, its executor on the model at `url`.
fn model_suite(url: &str) -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    write(d, "suite.toml", "team = \"team.toml\"\nheartbeat = \"20ms\"\n");
    let reasoner = format!("{{ kind = \"openai\", base_url = \"{url}\", model = \"{MODEL}\" }}");
    let extra = "[prices]\n\"fake-model\" = { input_per_mtok = 1.0, output_per_mtok = 2.0 }\n\n[budget]\nmax_tokens = 2000\n";
    write(d, "team.toml", &team(Some(&reasoner), extra));
    let ok = "check = \"grep -qx ok out.txt\"\n";
    // The files to start from are in the workspace when the check runs.
    write(d, "tasks/pass/task.toml", "check = \"grep -qx ok out.txt && test -f seed.txt\"\n");
    write(d, "tasks/pass/files/seed.txt", "seed\n");
    write(
        d,
        "tasks/pass/plan.toml",
        &plan("write", "write_file", r#"{ path = "out.txt", content = "ok\n" }"#),
    );
    write(d, "tasks/check-fails/task.toml", ok);
    write(
        d,
        "tasks/check-fails/plan.toml",
        &plan("wrong", "write_file", r#"{ path = "out.txt", content = "no\n" }"#),
    );
    // A failing call made again and again is a loop (a successful one repeated finishes).
    write(d, "tasks/loops/task.toml", "check = \"true\"\n");
    write(d, "tasks/loops/plan.toml", &plan("loop", "read_file", r#"{ path = "missing.md" }"#));
    write(d, "tasks/over-budget/task.toml", "check = \"true\"\n");
    write(
        d,
        "tasks/over-budget/plan.toml",
        &plan("spend", "read_file", r#"{ path = "notes.md" }"#),
    );
    write(d, "tasks/over-budget/files/notes.md", "# notes\n");
    dir
}

/// Options in `data`, commands unsandboxed (this test process is not a sandbox launcher).
fn options(data: &Path) -> EvalOptions {
    EvalOptions { unsandboxed: true, no_sync: true, ..EvalOptions::new(data) }
}

fn result_of<'a>(info: &'a EvalInfo, task: &str) -> &'a strata::eval::AttemptResult {
    let attempt = info.attempts.iter().find(|a| a.task == task).unwrap();
    attempt.result.as_ref().unwrap_or_else(|| panic!("{task} has no result: {info:#?}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_suite_on_the_scripted_model_passes_fails_its_check_loops_and_blows_its_budget() {
    let model = FakeModel::start(MODEL, scripted).await.unwrap();
    let suite = model_suite(&model.url());
    let data = tempfile::tempdir().unwrap();
    let evaluating = Evaluating::start(suite.path(), &[], 1, &options(data.path())).await.unwrap();
    let evaluated = evaluating.run(std::future::pending()).await.unwrap();
    assert!(model.problems().is_empty(), "{:?}", model.problems());
    let info = &evaluated.info;
    assert_eq!(info.status, EvalStatus::Finished);
    assert_eq!(info.attempts.len(), 4);

    let pass = result_of(info, "pass");
    assert!(pass.passed, "{pass:#?}");
    assert_eq!(pass.stop, None);
    assert_eq!(pass.model_calls, 2, "the call, then finish");
    assert_eq!(pass.tokens, 240);
    assert!(pass.cost_usd.unwrap() > 0.0, "{pass:#?}");

    let wrong = result_of(info, "check-fails");
    assert_eq!(wrong.status, RunStatus::Succeeded);
    assert!(!wrong.passed && !wrong.check.as_ref().unwrap().passed, "{wrong:#?}");

    let looped = result_of(info, "loops");
    assert_eq!(looped.stop, Some(StopReason::Loop), "{looped:#?}");
    assert!(looped.failure.as_deref().unwrap().contains("stopped a loop"), "{looped:#?}");
    assert!(looped.check.is_none(), "a failed run is not checked");

    let spent = result_of(info, "over-budget");
    assert_eq!(spent.stop, Some(StopReason::Budget), "{spent:#?}");
    assert!(spent.tokens >= SPEND_TOKENS, "{spent:#?}");

    // Every attempt is an ordinary run of the data directory, listed with the eval.
    let rows = strata::runs::list(data.path()).await.unwrap();
    for attempt in &info.attempts {
        let id = attempt.run_id.as_deref().unwrap();
        assert!(rows.iter().any(|r| r.id == id), "{id} is not listed");
        let run = RunInfo::read(&data.path().join(id)).unwrap();
        assert_eq!(run.status, attempt.result.as_ref().unwrap().status);
    }
    let row = rows.iter().find(|r| *r.id == *info.eval_id).unwrap();
    assert_eq!((row.status, row.task.as_str()), ("finished", "(eval)"));
    // And the dashboard lists them as the runs they are.
    let watches = strata::dashboard::Watches::new(Arc::new(strata::dashboard::EventLines));
    let dashboard = Arc::new(strata::dashboard::Dashboard::new(data.path().into(), None, watches));
    let listed = dashboard.runs().await.unwrap();
    for attempt in &info.attempts {
        let id = attempt.run_id.as_deref().unwrap();
        assert!(listed.iter().any(|r| r["id"] == id), "{id} is not on the dashboard: {listed:?}");
    }

    let report = &evaluated.report;
    assert_eq!((report.total.attempts, report.total.passed), (4, 1));
    assert_eq!(report.total.stops[&StopReason::Loop], 1);
    assert_eq!(report.total.stops[&StopReason::Budget], 1);
    assert_eq!(
        report.total.model_calls,
        info.attempts.iter().map(|a| a.result.as_ref().unwrap().model_calls).sum::<u64>()
    );
    let table = report.table();
    assert!(table.contains("loop 1") && table.contains("budget 1"), "{table}");
}

/// A suite of rule-based tasks: `quick` writes a file its check reads, `slow` runs for long.
fn rule_based_suite(tasks: &[(&str, &str)], settings: &str) -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    write(d, "suite.toml", &format!("team = \"team.toml\"\nheartbeat = \"20ms\"\n{settings}"));
    write(d, "team.toml", &team(None, ""));
    for (name, command) in tasks {
        write(d, &format!("tasks/{name}/task.toml"), "check = \"test -f done\"\n");
        let args = format!("{{ command = \"{command}\" }}");
        write(d, &format!("tasks/{name}/plan.toml"), &plan(name, "shell", &args));
    }
    dir
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_past_the_suite_s_time_limit_is_a_runaway_the_eval_stops() {
    // The command outlasts the limit tenfold; the test's runtime waits for it at its end.
    let suite = rule_based_suite(&[("slow", "sleep 5; touch done")], "task_timeout_ms = 500\n");
    let data = tempfile::tempdir().unwrap();
    let evaluating = Evaluating::start(suite.path(), &[], 1, &options(data.path())).await.unwrap();
    let evaluated = evaluating.run(std::future::pending()).await.unwrap();
    let slow = result_of(&evaluated.info, "slow");
    assert!(slow.runaway && !slow.passed, "{slow:#?}");
    assert_eq!(slow.status, RunStatus::Interrupted, "stopped, resumable");
    assert!(slow.failure.as_deref().unwrap().contains("task_timeout_ms"), "{slow:#?}");
    assert_eq!(evaluated.report.total.runaway, 1);
}

/// Stops the eval once `after` attempts have their result.
struct StopAfter {
    after: usize,
    stop: Arc<tokio::sync::Notify>,
}

impl EvalObserver for StopAfter {
    fn finished(&self, info: &EvalInfo, _: usize) {
        if info.done() == self.after {
            self.stop.notify_one();
        }
    }
}

/// The eval of `suite` with `repeat` attempts a task, in `data`, stopped once one attempt has
/// its result: interrupted, resumable.
async fn interrupted_after_one(suite: &Path, data: &Path, repeat: u32) -> Evaluated {
    let stop = Arc::new(tokio::sync::Notify::new());
    let first = EvalOptions {
        observer: Arc::new(StopAfter { after: 1, stop: stop.clone() }),
        ..options(data)
    };
    let evaluating = Evaluating::start(suite, &[], repeat, &first).await.unwrap();
    let evaluated = evaluating.run(async move { stop.notified().await }).await.unwrap();
    assert_eq!(evaluated.info.status, EvalStatus::Interrupted);
    evaluated
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_eval_interrupted_and_resumed_keeps_its_finished_attempts_and_finishes_the_rest() {
    let suite = rule_based_suite(&[("a", "touch done"), ("b", "touch done")], "");
    let data = tempfile::tempdir().unwrap();
    let evaluated = interrupted_after_one(suite.path(), data.path(), 2).await;
    let eval_id = evaluated.info.eval_id.clone();
    let before = evaluated.info.attempts.clone();
    assert!(before[0].result.as_ref().unwrap().passed, "{before:#?}");
    assert!(before[2..].iter().all(|a| a.result.is_none()), "{before:#?}");
    let done_run = before[0].run_id.clone().unwrap();
    let done_at = RunInfo::read(&data.path().join(&done_run)).unwrap().finished_at;
    drop(evaluated);

    let evaluating = Evaluating::resume(&eval_id, &options(data.path())).await.unwrap();
    let evaluated = evaluating.run(std::future::pending()).await.unwrap();
    let after = &evaluated.info.attempts;
    assert_eq!(evaluated.info.status, EvalStatus::Finished);
    assert_eq!(after.len(), 4);
    assert!(after.iter().all(|a| a.result.as_ref().is_some_and(|r| r.passed)), "{after:#?}");
    // The same attempts: the finished one kept as it was, not run again; a run that had
    // started goes on under its id.
    assert_eq!(after[0].result, before[0].result);
    for (b, a) in before.iter().zip(after) {
        if let Some(id) = &b.run_id {
            assert_eq!(a.run_id.as_ref(), Some(id));
        }
    }
    let again = RunInfo::read(&data.path().join(&done_run)).unwrap().finished_at;
    assert_eq!(again, done_at, "the finished run was not run again");
    let runs = std::fs::read_dir(data.path())
        .unwrap()
        .filter_map(Result::ok)
        .filter(|e| e.path().join("run.json").is_file())
        .count();
    assert_eq!(runs, 4, "one run per attempt");
    // A finished eval resumed runs nothing: its report again.
    let evaluating = Evaluating::resume(&eval_id, &options(data.path())).await.unwrap();
    let again = evaluating.run(std::future::pending()).await.unwrap();
    assert_eq!(again.report.total.passed, 4);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_eval_whose_task_files_changed_since_it_started_is_not_resumed() {
    let suite = rule_based_suite(&[("a", "touch done")], "");
    write(suite.path(), "tasks/a/files/data/input.txt", "one\n");
    let data = tempfile::tempdir().unwrap();
    let evaluated = interrupted_after_one(suite.path(), data.path(), 2).await;
    let eval_id = evaluated.info.eval_id.clone();
    let eval_json = data.path().join(&eval_id).join("eval.json");
    let before = std::fs::read(&eval_json).unwrap();
    // A file to start from, deep in the task's files, changed: the attempts left would start
    // from other files than the finished one did.
    write(suite.path(), "tasks/a/files/data/input.txt", "two\n");
    let error = Evaluating::resume(&eval_id, &options(data.path())).await.err().unwrap();
    assert!(error.is_bad_input(), "{error}");
    assert!(error.to_string().contains("changed since eval"), "{error}");
    assert_eq!(std::fs::read(&eval_json).unwrap(), before, "eval.json is untouched");
    // Put back as it was, it resumes.
    write(suite.path(), "tasks/a/files/data/input.txt", "one\n");
    let evaluating = Evaluating::resume(&eval_id, &options(data.path())).await.unwrap();
    let evaluated = evaluating.run(std::future::pending()).await.unwrap();
    assert_eq!(evaluated.info.status, EvalStatus::Finished);
}

/// A suite of one good task; `spoil` breaks it.
fn spoiled(spoil: impl FnOnce(&Path)) -> tempfile::TempDir {
    let dir = rule_based_suite(&[("one", "touch done")], "");
    spoil(dir.path());
    dir
}

async fn refused(suite: &Path, needles: &[&str]) {
    let root = tempfile::tempdir().unwrap();
    let data: PathBuf = root.path().join("data");
    let error = Evaluating::start(suite, &[], 1, &options(&data)).await.err().unwrap();
    assert!(error.is_bad_input(), "{error:#}");
    let text = format!("{error:#}");
    for needle in needles {
        assert!(text.contains(needle), "`{needle}` is not in: {text}");
    }
    assert!(!data.exists(), "nothing is written for a bad suite");
}

#[tokio::test]
async fn bad_suites_are_refused_with_the_path_and_the_reason_and_nothing_runs() {
    let task = |d: &Path| d.join("tasks/one/task.toml");
    let missing = spoiled(|d| std::fs::write(task(d), "description = \"x\"\n").unwrap());
    refused(missing.path(), &["task `one` has no check", "tasks/one/task.toml"]).await;

    let script = spoiled(|d| {
        std::fs::write(task(d), "check_script = \"check.sh\"\n").unwrap();
        std::fs::write(d.join("tasks/one/check.sh"), "#!/bin/sh\ntest -f done\n").unwrap();
    });
    refused(script.path(), &["check.sh", "not executable", "chmod +x"]).await;
    // Made executable, it is accepted.
    let check = script.path().join("tasks/one/check.sh");
    std::fs::set_permissions(&check, std::fs::Permissions::from_mode(0o755)).unwrap();
    let data = tempfile::tempdir().unwrap();
    Evaluating::start(script.path(), &[], 1, &options(data.path())).await.unwrap();

    let unparsable = spoiled(|d| std::fs::write(task(d), "check = \"test -f (\"\n").unwrap());
    refused(unparsable.path(), &["tasks/one/task.toml", "cannot parse the check command"]).await;

    let empty = spoiled(|d| {
        std::fs::remove_file(d.join("tasks/one/plan.toml")).unwrap();
        std::fs::write(task(d), "check = \"true\"\ngoal = \"  \"\n").unwrap();
    });
    refused(empty.path(), &["`goal`", "is empty", "tasks/one/task.toml"]).await;

    let outside = tempfile::tempdir().unwrap();
    write(outside.path(), "task.toml", "check = \"true\"\ngoal = \"g\"\n");
    let escaping = spoiled(|d| {
        std::os::unix::fs::symlink(outside.path(), d.join("tasks/two")).unwrap();
    });
    refused(escaping.path(), &["task `two`", "tasks/two", "leads outside the suite folder"]).await;
}
