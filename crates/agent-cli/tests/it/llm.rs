//! LLM reasoners end to end: the `strata` binary with `[reasoner] kind = "openai"` (and
//! `"anthropic"`) against the fake LLM server of [`crate::fake_llm`] on loopback: a run to
//! success, budget stops and extensions, bad settings refused before anything is written, and
//! a provider that refuses the key, fails or answers out of form during the run (the run fails
//! with exit 1 instead of waiting forever). The key never shows in output or in the run.

use std::path::Path;
use std::process::Stdio;
use std::time::{Duration, Instant};

use serde_json::Value;

use crate::fake_llm::{FakeLlm, Mode, Recorded};
use crate::support::{Out, Scratch, snapshot};

/// The hello example, as shipped.
const HELLO_TEAM: &str = include_str!("../../../../examples/hello/team.toml");
const HELLO_PLAN: &str = include_str!("../../../../examples/hello/plan.toml");

/// The variable the team files name in `api_key_env`, and the key the tests put in it.
pub(crate) const KEY_VAR: &str = "STRATA_TEST_KEY";
pub(crate) const KEY: &str = "sk-fake-7c1e2f9a4b-do-not-leak";

/// A heartbeat that keeps the runs fast.
const HEARTBEAT: [&str; 2] = ["--heartbeat", "50ms"];

/// The hello team with its `[reasoner]` kind line replaced by `reasoner` (the other
/// `[reasoner]` fields stay), and `extra` (more tables) appended.
pub(crate) fn team(reasoner: &str, extra: &str) -> String {
    let mut replaced = false;
    let mut out = String::new();
    for line in HELLO_TEAM.lines() {
        if !replaced && line.starts_with("kind = \"rule-based\"") {
            out.push_str(reasoner.trim());
            replaced = true;
        } else {
            out.push_str(line);
        }
        out.push('\n');
    }
    assert!(replaced, "the hello team has no `kind = \"rule-based\"` line");
    out.push('\n');
    out.push_str(extra);
    out
}

/// `[reasoner]` lines for the OpenAI-compatible provider at `server`.
pub(crate) fn openai(server: &FakeLlm) -> String {
    format!(
        "kind = \"openai\"\nbase_url = \"{}\"\nmodel = \"fake-model\"\napi_key_env = \"{KEY_VAR}\"",
        server.openai_url()
    )
}

/// A scratch directory holding `team.toml` (`team_text`) and the hello `plan.toml`.
pub(crate) fn scratch(team_text: &str) -> Scratch {
    let s = Scratch::new();
    s.write("team.toml", team_text);
    s.write("plan.toml", HELLO_PLAN);
    s
}

/// `strata ARGS` with `KEY_VAR` set to `KEY` (or removed, for `key = false`).
fn strata_env(s: &Scratch, args: &[&str], key: bool) -> Out {
    let mut command = s.command(args);
    if key {
        command.env(KEY_VAR, KEY);
    } else {
        command.env_remove(KEY_VAR);
    }
    Out::of(args, &mut command)
}

/// `strata run` of the scratch's plan and team into `D` and `W`, quiet, fast, as run `r1`.
pub(crate) const RUN: [&str; 14] = [
    "run",
    "plan.toml",
    "--team",
    "team.toml",
    "--data",
    "D",
    "--workspace",
    "W",
    HEARTBEAT[0],
    HEARTBEAT[1],
    "--no-sync",
    "--quiet",
    "--run-id",
    "r1",
];

/// `strata run plan.toml --team team.toml` into `D` and `W`, with the key, quiet, fast.
pub(crate) fn run(s: &Scratch, more: &[&str]) -> Out {
    let mut args = RUN.to_vec();
    args.extend_from_slice(more);
    strata_env(s, &args, true)
}

/// `strata inspect r1 usage [--json]`.
fn usage(s: &Scratch, json: bool) -> Out {
    let mut args = vec!["inspect", "r1", "usage", "--data", "D"];
    if json {
        args.push("--json");
    }
    s.strata(&args)
}

/// Asserts the key appears nowhere: not in what `out` printed, not in any file under `dirs`.
#[track_caller]
fn key_nowhere(s: &Scratch, outs: &[&Out], dirs: &[&str]) {
    for out in outs {
        assert!(
            !out.stdout.contains(KEY),
            "`strata {}` printed the key:\n{}",
            out.args,
            out.stdout
        );
        assert!(
            !out.stderr.contains(KEY),
            "`strata {}` printed the key:\n{}",
            out.args,
            out.stderr
        );
    }
    for dir in dirs {
        for (path, bytes) in snapshot(&s.path(dir)) {
            if let Some(bytes) = bytes {
                assert!(
                    !contains(&bytes, KEY.as_bytes()),
                    "the key is stored in {}",
                    Path::new(dir).join(path).display()
                );
            }
        }
    }
}

fn contains(haystack: &[u8], needle: &[u8]) -> bool {
    haystack.windows(needle.len()).any(|w| w == needle)
}

/// Asserts every request went to the OpenAI endpoint with the key as a bearer token and the
/// model of the team file.
#[track_caller]
fn all_openai_with_key(requests: &[Recorded]) {
    assert!(!requests.is_empty(), "no request reached the fake server");
    for r in requests {
        assert_eq!((r.method.as_str(), r.path.as_str()), ("POST", "/v1/chat/completions"));
        assert_eq!(r.header("authorization"), Some(format!("Bearer {KEY}").as_str()));
        assert_eq!(r.json()["model"], "fake-model", "{}", r.body);
    }
}

/// `run.json` of run `r1`.
fn run_info(s: &Scratch) -> Value {
    serde_json::from_str(&s.read("D/r1/run.json")).unwrap()
}

#[test]
fn the_hello_plan_runs_to_success_with_an_openai_reasoner() {
    let server = FakeLlm::start(Mode::Sensible);
    let s = scratch(&team(&openai(&server), ""));
    let out = run(&s, &[]);
    out.code(0).stdout_has(&["task `hello` succeeded", "(4 steps)"]);
    assert_eq!(s.read("W/hello.txt"), "hello, strata\n");
    assert_eq!(s.read("W/notes/plan.md"), "# Plan\n- greet\n- measure\n");
    assert_eq!(run_info(&s)["status"], "succeeded");

    let (probes, requests) = (server.probes(), server.calls());
    all_openai_with_key(&requests);
    // Before the run, one short structured call finds the mode the server takes (json_schema,
    // the first), with the key; it is not a call of the run's.
    assert_eq!(probes.len(), 1, "{probes:?}");
    assert_eq!(probes[0].json()["response_format"]["type"], "json_schema");
    assert!(probes[0].at < requests[0].at);
    // Before the run, one look at the model list, with the key.
    let lists: Vec<Recorded> =
        server.requests().into_iter().filter(|r| r.method == "GET").collect();
    assert_eq!(lists.len(), 1, "{lists:?}");
    assert_eq!(lists[0].path, "/v1/models");
    assert_eq!(lists[0].header("authorization"), Some(format!("Bearer {KEY}").as_str()));
    let decisions: Vec<String> = requests.iter().map(Recorded::decision).collect();
    for d in ["review", "decompose", "next_action", "judge"] {
        assert!(decisions.iter().any(|x| x == d), "no `{d}` request: {decisions:?}");
    }

    let text = usage(&s, false);
    text.code(0).stdout_has(&[
        "reasoner: openai",
        "per agent",
        "top-a",
        "mid-docs",
        "bottom-",
        "per layer",
        "per model",
        "openai/fake-model",
        "no price for: openai/fake-model",
        "extensions approved: 0",
        "structured output",
        "openai/fake-model: json_schema (auto)",
    ]);
    let json = usage(&s, true);
    assert_eq!(json.code(0).json()["reasoner"], "openai");
    let report = &json.json()["usage"];
    let n = requests.len() as u64;
    assert_eq!(report["total"]["calls"], n, "{report}");
    assert_eq!(report["total"]["failed_calls"], 0);
    assert_eq!(report["total"]["output_tokens"], 20 * n);
    let input: u64 = requests.iter().map(|r| r.body.len() as u64 / 4).sum();
    assert_eq!(report["total"]["input_tokens"], input);
    let by_agent = report["by_agent"].as_object().unwrap();
    for agent in ["top-a", "top-b", "top-c", "mid-docs", "mid-build"] {
        assert!(by_agent.contains_key(agent), "no usage row for {agent}: {report}");
    }
    assert!(by_agent.keys().any(|a| a.starts_with("bottom-")), "no executor row: {report}");
    let per_agent: u64 = by_agent.values().map(|t| t["calls"].as_u64().unwrap()).sum();
    assert_eq!(per_agent, n, "the per-agent rows add up to the total");
    assert_eq!(report["by_model"]["openai/fake-model"]["calls"], n);
    assert_eq!(report["stopped"], Value::Null);

    key_nowhere(&s, &[&out, &text, &json], &["D", "W"]);
}

#[test]
fn the_hello_plan_runs_to_success_with_an_anthropic_reasoner() {
    let server = FakeLlm::start(Mode::Sensible);
    let reasoner = format!(
        "kind = \"anthropic\"\nbase_url = \"{}\"\nmodel = \"fake-claude\"\napi_key_env = \"{KEY_VAR}\"",
        server.anthropic_url()
    );
    let s = scratch(&team(&reasoner, ""));
    let out = run(&s, &[]);
    out.code(0).stdout_has(&["task `hello` succeeded"]);
    assert_eq!(s.read("W/hello.txt"), "hello, strata\n");
    let requests = server.calls();
    assert!(!requests.is_empty());
    for r in &server.requests() {
        assert!(r.path.starts_with("/v1/"), "{}", r.path);
        assert_eq!(r.header("x-api-key"), Some(KEY));
        assert_eq!(r.header("authorization"), None);
    }
    for r in &requests {
        assert_eq!((r.method.as_str(), r.path.as_str()), ("POST", "/v1/messages"));
        assert_eq!(r.header("x-api-key"), Some(KEY));
        assert!(r.header("anthropic-version").is_some());
        assert_eq!(r.header("authorization"), None);
        assert_eq!(r.json()["model"], "fake-claude");
    }
    let report = &usage(&s, true).code(0).json()["usage"];
    assert_eq!(report["total"]["calls"], requests.len() as u64);
    assert_eq!(report["by_model"]["anthropic/fake-claude"]["calls"], requests.len() as u64);
    key_nowhere(&s, &[&out], &["D", "W"]);
}

#[test]
fn a_spent_call_budget_stops_the_run() {
    let server = FakeLlm::start(Mode::Sensible);
    let s = scratch(&team(&openai(&server), "[budget]\nmax_calls = 3\n"));
    let out = run(&s, &[]);
    out.code(1).stdout_has(&["task `hello` FAILED"]);
    let info = run_info(&s);
    assert_eq!(info["status"], "failed");
    let failure = info["failure"].as_str().unwrap();
    assert!(failure.contains("max_calls"), "the failure names the setting: {failure}");
    assert!(failure.contains("budget"), "{failure}");
    assert_eq!(server.calls().len(), 3, "no call is made past the budget");

    usage(&s, false).code(0).stdout_has(&["stopped: ", "max_calls", "calls 3"]);
    let report = &usage(&s, true).code(0).json()["usage"];
    assert_eq!(report["total"]["calls"], 3);
    assert_eq!(report["stopped"]["limit"], "calls");
    assert_eq!(report["budget"]["max_calls"], 3);
    key_nowhere(&s, &[&out], &["D", "W"]);
}

#[test]
fn an_extension_signed_by_the_top_layer_lets_the_run_finish() {
    let server = FakeLlm::start(Mode::Sensible);
    let s = scratch(&team(&openai(&server), "[budget]\nmax_calls = 5\non_exceed = \"ask\"\n"));
    let out = run(&s, &[]);
    out.code(0).stdout_has(&["task `hello` succeeded"]);
    assert_eq!(s.read("W/hello.txt"), "hello, strata\n");

    let report = &usage(&s, true).code(0).json()["usage"];
    let extensions = report["extensions"].as_array().unwrap();
    assert!(!extensions.is_empty(), "no extension was approved: {report}");
    assert!(extensions.iter().all(|e| e["limit"] == "calls"), "{report}");
    assert!(
        extensions.iter().all(|e| e["raised_by"].as_f64().unwrap() >= 5.0),
        "each extension adds at least the original 5: {report}"
    );
    assert_eq!(report["stopped"], Value::Null);
    let cap = report["budget"]["max_calls"].as_u64().unwrap();
    let raised: f64 = extensions.iter().map(|e| e["raised_by"].as_f64().unwrap()).sum();
    assert_eq!(cap, 5 + raised as u64, "the cap is the original plus every extension");
    usage(&s, false).code(0).stdout_has(&[&format!("extensions approved: {}", extensions.len())]);

    // Each extension is a governance decision every power signed.
    let decisions =
        s.strata(&["inspect", "r1", "decisions", "--data", "D", "--json"]).code(0).json();
    let budget: Vec<&Value> = decisions
        .as_array()
        .unwrap()
        .iter()
        .filter(|d| d["content"]["kind"] == "budget_extension")
        .collect();
    assert_eq!(budget.len(), extensions.len(), "{decisions}");
    for d in budget {
        assert_eq!(d["status"], "approved", "{d}");
        assert_eq!(d["content"]["setting"], "max_calls");
    }
}

/// `strata run` with a bad setting: exit 2, one error line naming the setting, nothing
/// written, no request made.
#[track_caller]
fn refused(s: &Scratch, server: &FakeLlm, args: &[&str], key: bool, needles: &[&str]) {
    let mut all = vec![
        "run",
        "plan.toml",
        "--team",
        "team.toml",
        "--data",
        "D",
        "--workspace",
        "W",
        "--quiet",
    ];
    all.extend_from_slice(args);
    let out = strata_env(s, &all, key);
    out.bad_input(needles);
    assert!(!s.path("D").exists(), "`strata {}` created the data directory", out.args);
    assert!(!s.path("W").exists(), "`strata {}` created the workspace", out.args);
    assert!(server.calls().is_empty(), "`strata {}` called the model", out.args);
    key_nowhere(s, &[&out], &[]);
}

#[test]
fn bad_reasoner_settings_exit_2_naming_the_setting_and_write_nothing() {
    let server = FakeLlm::start(Mode::Sensible);
    let url = server.openai_url();

    // The key's variable is not set, for a server not on loopback (one on loopback needs none).
    let remote = openai(&server).replace(&url, "https://llm.example.invalid/v1");
    let s = scratch(&team(&remote, ""));
    refused(&s, &server, &[], false, &[KEY_VAR, "api_key_env", "not set"]);

    // A base URL that is not one.
    let text = team(
        &format!(
            "kind = \"openai\"\nbase_url = \"not a url\"\nmodel = \"m\"\napi_key_env = \"{KEY_VAR}\""
        ),
        "",
    );
    let s = scratch(&text);
    refused(&s, &server, &[], true, &["team.toml:", "`base_url`", "not a url", "http"]);

    // A negative price.
    let s = scratch(&team(
        &openai(&server),
        "[prices]\n\"fake-model\" = { input_per_mtok = -1.0, output_per_mtok = 0.6 }\n",
    ));
    refused(&s, &server, &[], true, &["team.toml:", "fake-model", "input_per_mtok", "-1"]);

    // The embedded provider runs one model only (a file that names it `local` and another
    // model; a model written for another kind is dropped by `--reasoner local` instead).
    let s = scratch(&team("kind = \"local\"\nmodel = \"llama-70b\"", ""));
    refused(&s, &server, &["--reasoner", "local"], true, &["llama-70b", "local", "model"]);

    // An OpenAI-compatible reasoner needs a model.
    let s = scratch(&team(
        &format!("kind = \"openai\"\nbase_url = \"{url}\"\napi_key_env = \"{KEY_VAR}\""),
        "",
    ));
    refused(&s, &server, &[], true, &["openai", "needs a model", "model = "]);

    // Budget settings.
    let s = scratch(&team(&openai(&server), "[budget]\nmax_wall = \"0s\"\n"));
    let out = strata_env(&s, &["run", "plan.toml", "--team", "team.toml", "--data", "D"], true);
    out.bad_input(&["team.toml:", "`0s`", "longer than 0"]);
    assert!(!out.stderr.contains("heartbeat"), "the error names the wrong setting: {}", out.stderr);
    let s = scratch(&team(&openai(&server), "[budget]\nmax_calls = 3\non_exceed = \"maybe\"\n"));
    refused(&s, &server, &[], true, &["team.toml:", "`on_exceed`", "\"stop\"", "\"ask\"", "maybe"]);
    let s =
        scratch(&team(&openai(&server), "[budget]\nmax_calls = 3\non_exceed = \"ask_human\"\n"));
    refused(&s, &server, &[], true, &["team.toml:", "ask_human", "[approvals]", "humans"]);

    // No such kind on the command line.
    let s = scratch(&team(&openai(&server), ""));
    refused(
        &s,
        &server,
        &["--reasoner", "nonsense"],
        true,
        &[
            "--reasoner nonsense",
            "unknown reasoner kind `nonsense`",
            "rule-based, openai, anthropic, local",
        ],
    );
    assert!(server.requests().is_empty(), "settings refused before any request to the server");
}

#[test]
fn a_model_the_server_does_not_list_is_refused_before_the_run() {
    let server = FakeLlm::start(Mode::Sensible);
    let text = team(&openai(&server).replace("\"fake-model\"", "\"gpt-9\""), "");
    let s = scratch(&text);
    refused(
        &s,
        &server,
        &[],
        true,
        &["openai", "gpt-9", "does not serve this model", "fake-model"],
    );
    assert_eq!(server.requests().len(), 1, "one look at the model list");
}

#[test]
fn a_key_the_server_refuses_is_refused_before_the_run() {
    let server = FakeLlm::start(Mode::Unauthorized);
    let s = scratch(&team(&openai(&server), ""));
    // The server echoes the key it was sent in its error message: it must not be shown.
    refused(&s, &server, &[], true, &["openai", "fake-model", "401"]);
    assert_eq!(server.requests().len(), 1, "one look at the model list");
}

#[test]
fn a_key_refused_during_the_run_fails_it_naming_provider_model_and_status() {
    // The model list answers, the model calls get 401: the key was revoked, or may list but
    // not use models.
    let server = FakeLlm::start(Mode::UnauthorizedCalls);
    let s = scratch(&team(&openai(&server), ""));
    let out = run(&s, &[]);
    out.code(1);
    // The pre-run check's probe was answered (the key was revoked after it); every call of
    // the run was refused.
    let requests = server.calls();
    assert_eq!(server.probes().len(), 1);
    all_openai_with_key(&requests);
    // The run stops when the first power fails past its retries, naming it and the cause.
    let info = run_info(&s);
    assert_eq!(info["status"], "failed");
    let failure = info["failure"].as_str().unwrap_or_default();
    let stderr = &out.stderr;
    for needle in ["failed", "top-", "openai", "fake-model", "401"] {
        assert!(failure.contains(needle), "the failure does not name {needle:?}: {failure}");
        assert!(stderr.contains(needle), "stderr does not name {needle:?}:\n{stderr}");
    }
    out.stdout_has(&["task `hello` FAILED"]);
    let report = &usage(&s, true).code(0).json()["usage"];
    assert_eq!(report["total"]["calls"], 0);
    assert_eq!(report["total"]["failed_calls"], requests.len() as u64);
    key_nowhere(&s, &[&out], &["D", "W"]);
}

/// The hello team's top powers with `max_retries = 0`: a failed reasoning call fails the power
/// at once, without backoff.
fn no_retries(team_text: &str) -> String {
    let mut out = String::new();
    for line in team_text.lines() {
        out.push_str(line);
        out.push('\n');
        if line.starts_with("power_type = ") {
            out.push_str("max_retries = 0\n");
        }
    }
    out
}

#[test]
fn a_server_failing_during_the_run_fails_it_instead_of_hanging() {
    let server = FakeLlm::start(Mode::ServerError);
    let s = scratch(&no_retries(&team(&openai(&server), "")));
    let out = run(&s, &[]);
    out.code(1).stdout_has(&["task `hello` FAILED"]);
    let failure = run_info(&s)["failure"].as_str().unwrap_or_default().to_owned();
    for needle in ["top-", "openai", "fake-model", "500"] {
        assert!(failure.contains(needle), "the failure does not name {needle:?}: {failure}");
    }
    let report = &usage(&s, true).code(0).json()["usage"];
    assert_eq!(report["total"]["calls"], 0);
    assert_eq!(report["total"]["failed_calls"], server.calls().len() as u64);
}

#[test]
fn a_model_answering_out_of_form_gets_one_repair_then_fails_the_run() {
    let server = FakeLlm::start(Mode::Invalid);
    let s = scratch(&no_retries(&team(&openai(&server), "")));
    let out = run(&s, &[]);
    out.code(1).stdout_has(&["task `hello` FAILED"]);
    let failure = run_info(&s)["failure"].as_str().unwrap_or_default().to_owned();
    for needle in ["top-", "fake-model", "invalid review answer", "repair"] {
        assert!(failure.contains(needle), "the failure does not name {needle:?}: {failure}");
    }
    // Each review is asked twice: the answer, then one repair quoting the problem.
    let calls = server.calls();
    assert!(calls.iter().all(|c| c.decision() == "review"), "only reviews were asked");
    let repairs = calls.iter().filter(|c| c.body.contains("That answer is invalid")).count();
    assert_eq!(repairs * 2, calls.len(), "one repair per question");
    // The calls succeeded as calls: the answers were only unusable.
    let report = &usage(&s, true).code(0).json()["usage"];
    assert_eq!(report["total"]["calls"], calls.len() as u64);
}

/// `strata run` as [`run`] does, killed if it has not ended within `limit`; its exit code, or
/// `None` if it was killed.
fn run_within(s: &Scratch, limit: Duration) -> Option<i32> {
    let mut child = s
        .command(&RUN)
        .env(KEY_VAR, KEY)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("cannot start strata");
    let deadline = Instant::now() + limit;
    loop {
        if let Some(status) = child.try_wait().expect("cannot poll strata") {
            return status.code();
        }
        if Instant::now() > deadline {
            child.kill().expect("cannot kill strata");
            child.wait().expect("cannot wait for strata");
            return None;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// The powers' reviews of an extension count against the limit they extend; with `max_calls`
/// at or below the number of powers, an extension of the original size would be used up by its
/// own reviews. The ledger grows the limit to what is used plus the original size, so the run
/// goes on.
#[test]
fn an_extension_smaller_than_its_own_reviews_still_lets_the_run_finish() {
    let server = FakeLlm::start(Mode::Sensible);
    let s = scratch(&team(&openai(&server), "[budget]\nmax_calls = 2\non_exceed = \"ask\"\n"));
    let code = run_within(&s, Duration::from_secs(60));
    let calls = server.calls().len();
    assert_eq!(code, Some(0), "the run did not finish within a minute; {calls} model calls made");
}

/// A budget a human extends: `on_exceed = "ask_human"` with alice allowed, and time limits
/// short enough that a human's wait outlasts them.
fn human_budget(server: &FakeLlm) -> Scratch {
    scratch(&team(
        &openai(server),
        &format!(
            "[budget]\nmax_calls = 5\non_exceed = \"ask_human\"\n\n[approvals]\nhumans = [\"alice\"]\n\n[timeouts]\nreasoning_ms = {LIMIT_MS}\nturn_ms = {LIMIT_MS}\n"
        ),
    ))
}

/// The reasoning and turn limits of [`human_budget`].
const LIMIT_MS: u64 = 3_000;

/// `strata run` of [`human_budget`] in the background.
fn start_human_budget(s: &Scratch) -> crate::support::Running {
    let mut command = s.command(&RUN);
    command.env(KEY_VAR, KEY);
    Scratch::spawn_command(&RUN, &mut command)
}

/// The budget extension waiting for a human, read through `inspect` on the live run; `None`
/// once the run has ended.
fn pending_extension(s: &Scratch, run: &mut crate::support::Running) -> Option<String> {
    let mut found = None;
    let mut ended = false;
    crate::support::wait_for("a budget extension waiting for a human", || {
        if run.exited() {
            ended = true;
            return true;
        }
        let out = s.strata(&["inspect", "r1", "decisions", "--data", "D", "--json"]);
        if out.status.code() != Some(0) {
            return false; // the copy of a live run may be caught mid-write
        }
        let decisions: Value = out.json();
        found = decisions.as_array().unwrap().iter().find_map(|d| {
            let waiting = d["status"] == "pending"
                && d["content"]["kind"] == "budget_extension"
                && d["human_approval"]["allowed"][0] == "alice";
            waiting.then(|| d["id"].as_str().unwrap().to_owned())
        });
        found.is_some()
    });
    if ended { None } else { found }
}

/// `on_exceed = "ask_human"`: past its budget the run waits for a human, longer than a
/// reasoning call and a turn may take, and `strata approve` from another process extends it;
/// the run finishes.
#[test]
fn a_human_extends_the_budget_from_another_process_after_the_time_limits_and_the_run_finishes() {
    let server = FakeLlm::start(Mode::Sensible);
    let s = human_budget(&server);
    let mut run = start_human_budget(&s);
    let first = pending_extension(&s, &mut run)
        .unwrap_or_else(|| panic!("the run ended without asking:\n{}", run.stderr_so_far()));
    let calls = server.calls().len();
    // The human takes longer than a reasoning call and a turn may.
    std::thread::sleep(Duration::from_millis(2 * LIMIT_MS));
    assert!(!run.exited(), "the run did not wait for the human:\n{}", run.stderr_so_far());
    assert_eq!(server.calls().len(), calls, "no model call while it waits");
    s.strata(&["inspect", "r1", "decisions", "--data", "D"])
        .code(0)
        .stdout_has(&[&first, "needs one human (waiting): alice"]);
    s.strata(&["approve", "r1", &first, "--as", "alice", "--data", "D"])
        .code(0)
        .stdout_has(&[&first, "by human:alice"]);
    // Each further extension the run asks for, alice grants at once.
    let mut approved = vec![first];
    while let Some(next) = pending_extension(&s, &mut run) {
        s.strata(&["approve", "r1", &next, "--as", "alice", "--data", "D"]).code(0);
        approved.push(next);
    }
    let out = run.finish();
    out.code(0).stdout_has(&["task `hello` succeeded"]);

    let report = &usage(&s, true).code(0).json()["usage"];
    assert_eq!(report["extensions"].as_array().unwrap().len(), approved.len(), "{report}");
    assert_eq!(report["stopped"], Value::Null);
    assert_eq!(report["total"]["failed_calls"], 0, "{report}");
    usage(&s, false).code(0).stdout_has(&["on exceed: ask a human"]);
    let audit = s.strata(&["inspect", "r1", "audit", "--data", "D", "--json"]).code(0).json();
    let timed_out: Vec<&Value> =
        audit.as_array().unwrap().iter().filter(|r| r["event"]["event"] == "timed_out").collect();
    assert!(timed_out.is_empty(), "the wait counted against a limit: {timed_out:?}");
    let decisions =
        s.strata(&["inspect", "r1", "decisions", "--data", "D", "--json"]).code(0).json();
    for d in
        decisions.as_array().unwrap().iter().filter(|d| d["content"]["kind"] == "budget_extension")
    {
        assert_eq!(d["status"], "approved", "{d}");
        assert_eq!(d["required_signers"], serde_json::json!([]), "no power signs: {d}");
        assert_eq!(d["signatures"][0]["signer"], "human:alice", "{d}");
    }
}

/// A human's veto of the extension stops the run with the reason.
#[test]
fn a_humans_veto_of_a_budget_extension_stops_the_run_with_the_reason() {
    let server = FakeLlm::start(Mode::Sensible);
    let s = human_budget(&server);
    let mut run = start_human_budget(&s);
    let decision = pending_extension(&s, &mut run)
        .unwrap_or_else(|| panic!("the run ended without asking:\n{}", run.stderr_so_far()));
    s.strata(&[
        "veto",
        "r1",
        &decision,
        "--as",
        "alice",
        "--reason",
        "spent enough",
        "--data",
        "D",
    ])
    .code(0)
    .stdout_has(&["vetoed by human:alice"]);
    let out = run.finish();
    out.code(1);
    let both = format!("{}\n{}", out.stdout, out.stderr);
    assert!(both.contains("vetoed by human:alice: spent enough"), "{both}");
    let report = &usage(&s, true).code(0).json()["usage"];
    assert_eq!(report["stopped"]["refused"], "vetoed by human:alice: spent enough", "{report}");
    assert_eq!(report["stopped"]["on_exceed"], "ask_human");
}

#[test]
fn a_server_that_takes_only_json_object_is_met_where_it_is_and_the_mode_is_shown() {
    // Like llama-cpp-python: `json_schema` answered with HTTP 500 and a validation error.
    let server = FakeLlm::start(Mode::JsonObjectOnly);
    let s = scratch(&team(&openai(&server), ""));
    run(&s, &[]).code(0).stdout_has(&["task `hello` succeeded"]);
    assert_eq!(s.read("W/hello.txt"), "hello, strata\n");

    // The pre-run check learned it: `json_schema` was sent once, by the probe, never retried,
    // and every decision of the run went out as `json_object` with its schema.
    let calls: Vec<Recorded> =
        server.requests().into_iter().filter(|r| r.method == "POST").collect();
    let format_of = |r: &Recorded| {
        r.json().pointer("/response_format/type").and_then(Value::as_str).map(str::to_owned)
    };
    let json_schema: Vec<&Recorded> =
        calls.iter().filter(|r| format_of(r).as_deref() == Some("json_schema")).collect();
    assert_eq!(json_schema.len(), 1, "{json_schema:?}");
    let decisions: Vec<&Recorded> = calls
        .iter()
        .filter(|r| format_of(r).as_deref() == Some("json_object") && r.decision() != "probe")
        .collect();
    assert!(decisions.iter().any(|r| r.decision() == "review"), "{decisions:?}");
    for r in &decisions {
        assert!(r.json().pointer("/response_format/schema/properties").is_some(), "{}", r.body);
    }

    usage(&s, false).code(0).stdout_has(&[
        "structured output",
        "openai/fake-model: json_object (auto); refused: json_schema (HTTP 500",
        "Input should be 'text' or 'json_object'",
    ]);
    let report = usage(&s, true).code(0).json();
    let choice = &report["usage"]["structured_output"]["openai/fake-model"];
    assert_eq!(choice["mode"], "json_object", "{report}");
    assert_eq!(choice["setting"], "auto");
    assert_eq!(choice["rejected"][0]["mode"], "json_schema");
    assert_eq!(report["usage"]["total"]["failed_calls"], 0, "a refused mode is no failed call");
}

#[test]
fn an_explicit_mode_the_server_refuses_fails_the_pre_run_check_naming_what_was_tried() {
    let server = FakeLlm::start(Mode::JsonObjectOnly);
    let reasoner = format!("{}\nstructured_output = \"json_schema\"", openai(&server));
    let s = scratch(&team(&reasoner, ""));
    let out = run(&s, &[]);
    out.bad_input(&[
        "reasoner check before the run",
        "openai model `fake-model`",
        &format!("the server at {}/chat/completions", server.openai_url()),
        "tried: json_schema (HTTP 500",
        "structured_output = \"auto\"",
    ]);
    assert!(!s.path("D").exists() && !s.path("W").exists(), "nothing is written");
    assert_eq!(server.probes().len(), 1, "one probe, not retried");
    assert!(server.calls().is_empty());

    // `auto` (the default) runs on the same server.
    let s = scratch(&team(&openai(&server), ""));
    run(&s, &[]).code(0);
}
