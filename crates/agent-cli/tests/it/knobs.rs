//! The simple knobs of a model run: `--base-url`, `--model` and `--small-model` on `strata run`
//! (and `exec`),
//! without a team file too; `$OPENAI_BASE_URL` and `$OPENAI_API_KEY` read as the official OpenAI
//! clients read them (`--base-url`, else the team file's `base_url`, else the variable, else
//! OpenAI's API; the key from `api_key_env`, else `OPENAI_API_KEY` for a server the user
//! named, never for one only a team file names); no key needed for a server on loopback (and
//! then no `Authorization` header), a clear refusal for any other; and
//! `strata model path` printing the path alone, so that `$(strata model path)` works.
//!
//! Every command runs with `OPENAI_API_KEY` and `OPENAI_BASE_URL` removed from its
//! environment unless the test sets them.

use std::process::Command;

use agent_llm::testing::{FakeModel, add_program_scenario};
use serde_json::Value;

use crate::fake_llm::{FakeLlm, Mode, Recorded};
use crate::support::{Out, Scratch, snapshot, wait_for};

const HELLO_PLAN: &str = include_str!("../../../../examples/hello/plan.toml");
const GOAL_TEXT: &str = include_str!("../../../../examples/goal/goal.txt");

/// A key for the tests that set `OPENAI_API_KEY`.
const KEY: &str = "sk-knobs-3e9d1c-not-a-real-key";

/// A server that is not on loopback (and does not exist: `.invalid` never resolves).
const REMOTE: &str = "https://llm.example.invalid/v1";

/// `strata ARGS` in `s` with `OPENAI_API_KEY` and `OPENAI_BASE_URL` removed, then `env` set.
fn strata(s: &Scratch, args: &[&str], env: &[(&str, &str)]) -> Out {
    let mut command: Command = s.command(args);
    command.env_remove("OPENAI_API_KEY").env_remove("OPENAI_BASE_URL");
    for (name, value) in env {
        command.env(name, value);
    }
    Out::of(args, &mut command)
}

/// `strata run plan.toml` (the hello plan) into `D` and `W` as run `r1`, fast and quiet, with
/// `more` arguments.
fn run_args<'a>(more: &[&'a str]) -> Vec<&'a str> {
    let mut args = vec![
        "run",
        "plan.toml",
        "--data",
        "D",
        "--workspace",
        "W",
        "--heartbeat",
        "50ms",
        "--no-sync",
        "--quiet",
        "--run-id",
        "r1",
    ];
    args.extend_from_slice(more);
    args
}

/// A scratch directory holding the hello plan, and no team file.
fn scratch() -> Scratch {
    let s = Scratch::new();
    s.write("plan.toml", HELLO_PLAN);
    s
}

/// The hello team with a `[reasoner]` of kind `openai` and `lines` (its other fields).
fn openai_team(lines: &str) -> String {
    crate::llm::team(&format!("kind = \"openai\"\n{lines}"), "")
}

/// The run succeeded and wrote what the hello plan writes.
#[track_caller]
fn succeeded(s: &Scratch, out: &Out) {
    out.code(0).stdout_has(&["task `hello` succeeded"]);
    assert_eq!(s.read("W/hello.txt"), "hello, strata\n");
}

/// Every request `server` got (the model list, the probe, the run's calls) has no
/// `Authorization` header, and every model call names `model`.
#[track_caller]
fn all_without_key(server: &FakeLlm, model: &str) {
    let requests = server.requests();
    assert!(!requests.is_empty(), "no request reached the server");
    for r in &requests {
        assert_eq!(r.header("authorization"), None, "{} {}", r.method, r.path);
    }
    let calls: Vec<Recorded> = requests.into_iter().filter(|r| r.method == "POST").collect();
    assert!(!calls.is_empty(), "no model call reached the server");
    for r in &calls {
        assert_eq!(r.json()["model"], model, "{}", r.body);
    }
}

/// `run.json` of run `r1`.
fn run_info(s: &Scratch) -> Value {
    serde_json::from_str(&s.read("D/r1/run.json")).unwrap()
}

/// Refused with exit 2 before anything was written, nothing sent to `server`.
#[track_caller]
fn refused_before_anything(s: &Scratch, out: &Out, server: Option<&FakeLlm>) {
    out.code(2);
    assert!(!s.path("D").exists(), "`strata {}` created the data directory", out.args);
    assert!(!s.path("W").exists(), "`strata {}` created the workspace", out.args);
    if let Some(server) = server {
        assert!(server.requests().is_empty(), "`strata {}` asked the server", out.args);
    }
}

#[test]
fn the_flags_run_a_plan_without_a_team_file_on_a_loopback_server_without_a_key() {
    let server = FakeLlm::start(Mode::Sensible);
    let s = scratch();
    let url = server.openai_url();
    let out = strata(
        &s,
        &run_args(&["--reasoner", "openai", "--base-url", &url, "--model", "fake-model"]),
        &[],
    );
    succeeded(&s, &out);
    // No key in the environment, a server on loopback: nothing sent as a key.
    all_without_key(&server, "fake-model");
    // The run keeps the flags, for `resume` and the workers.
    let info = run_info(&s);
    assert_eq!((&info["reasoner"], &info["base_url"]), (&"openai".into(), &url.clone().into()));
    assert_eq!(info["model"], "fake-model");
}

/// The names of the tools each model call of `server` offered.
fn offered_tools(server: &FakeLlm) -> Vec<Vec<String>> {
    server
        .calls()
        .iter()
        .map(|r| {
            let body = r.json();
            body["tools"]
                .as_array()
                .map(|tools| {
                    tools
                        .iter()
                        .filter_map(|t| t["function"]["name"].as_str().map(str::to_owned))
                        .collect()
                })
                .unwrap_or_default()
        })
        .collect()
}

#[test]
fn small_model_gives_every_server_agent_the_narrow_tool_loop_and_resume_keeps_it() {
    let url_of = |server: &FakeLlm| server.openai_url();
    // Without the flag, an executor is offered all its tools.
    let wide = FakeLlm::start(Mode::Sensible);
    let s = scratch();
    let flags = ["--reasoner", "openai", "--base-url", &url_of(&wide), "--model", "fake-model"];
    succeeded(&s, &strata(&s, &run_args(&flags), &[]));
    assert!(
        offered_tools(&wide).iter().any(|names| names.len() > 2),
        "without --small-model no call offered more than the step's tool: {:?}",
        offered_tools(&wide)
    );
    assert_eq!(run_info(&s).get("small_model"), None, "recorded though not given");

    // With it: only the step's own tool and `finish_subtask`, and run.json keeps it.
    let narrow = FakeLlm::start(Mode::Sensible);
    let s = scratch();
    let url = url_of(&narrow);
    let mut flags = vec!["--reasoner", "openai", "--base-url", &url, "--model", "fake-model"];
    flags.push("--small-model");
    succeeded(&s, &strata(&s, &run_args(&flags), &[]));
    let offered = offered_tools(&narrow);
    assert!(offered.iter().any(|names| !names.is_empty()), "no tool was offered: {offered:?}");
    for names in &offered {
        assert!(names.len() <= 2, "--small-model offered {names:?}");
    }
    assert_eq!(run_info(&s)["small_model"], true);

    // A flag no agent would use is refused, not ignored.
    let s = scratch();
    let out = strata(&s, &run_args(&["--small-model"]), &[]);
    out.bad_input(&["--small-model", "no agent reasons with a model server"]);
    refused_before_anything(&s, &out, None);
}

#[test]
fn openai_base_url_is_read_when_neither_the_flag_nor_the_team_file_sets_one() {
    let env_server = FakeLlm::start(Mode::Sensible);
    let env_url = env_server.openai_url();
    let env = [("OPENAI_BASE_URL", env_url.as_str())];

    // Without a team file: the variable's server.
    let s = scratch();
    let out = strata(&s, &run_args(&["--reasoner", "openai", "--model", "fake-model"]), &env);
    succeeded(&s, &out);
    all_without_key(&env_server, "fake-model");
    assert_eq!(run_info(&s)["openai_base_url"], env_url.as_str(), "recorded for resume");

    // A team file without `base_url`: the same.
    let file_server = FakeLlm::start(Mode::Sensible);
    let s = scratch();
    s.write("team.toml", &openai_team("model = \"fake-model\""));
    let before = env_server.requests().len();
    succeeded(&s, &strata(&s, &run_args(&["--team", "team.toml"]), &env));
    assert!(env_server.requests().len() > before, "the variable's server was not asked");

    // A team file's own `base_url` wins over the variable.
    let s = scratch();
    let with_url = format!("base_url = \"{}\"\nmodel = \"fake-model\"", file_server.openai_url());
    s.write("team.toml", &openai_team(&with_url));
    let before = env_server.requests().len();
    succeeded(&s, &strata(&s, &run_args(&["--team", "team.toml"]), &env));
    all_without_key(&file_server, "fake-model");
    assert_eq!(env_server.requests().len(), before, "the variable's server was asked");

    // And `--base-url` wins over both.
    let flag_server = FakeLlm::start(Mode::Sensible);
    let s = scratch();
    s.write("team.toml", &openai_team(&with_url));
    let (file_before, env_before) = (file_server.requests().len(), env_server.requests().len());
    let flag_url = flag_server.openai_url();
    succeeded(&s, &strata(&s, &run_args(&["--team", "team.toml", "--base-url", &flag_url]), &env));
    all_without_key(&flag_server, "fake-model");
    assert_eq!(file_server.requests().len(), file_before, "the team file's server was asked");
    assert_eq!(env_server.requests().len(), env_before, "the variable's server was asked");
}

#[test]
fn resume_reaches_the_server_and_model_the_run_started_with() {
    let first = FakeLlm::start(Mode::Sensible);
    let other = FakeLlm::start(Mode::Sensible);
    let s = scratch();
    // Started with its server in $OPENAI_BASE_URL and its model by flag, slowly enough to be
    // killed part-way.
    let args: Vec<&str> = run_args(&["--reasoner", "openai", "--model", "fake-model"])
        .into_iter()
        .map(|a| if a == "50ms" { "1s" } else { a })
        .collect();
    let mut command = s.command(&args);
    command.env_remove("OPENAI_API_KEY").env("OPENAI_BASE_URL", first.openai_url());
    let running = Scratch::spawn_command(&args, &mut command);
    wait_for("the run's first model call", || !first.calls().is_empty());
    running.kill();
    let asked = first.requests().len();

    // Resumed where the variable names another server, without the flags: the run's own.
    let resume = ["resume", "r1", "--data", "D", "--quiet"];
    let out = strata(&s, &resume, &[("OPENAI_BASE_URL", &other.openai_url())]);
    succeeded(&s, &out);
    assert!(first.requests().len() > asked, "the resumed run did not ask its server");
    assert!(other.requests().is_empty(), "the resumed run asked $OPENAI_BASE_URL's server now");
    all_without_key(&first, "fake-model");
}

#[test]
fn openai_api_key_goes_to_a_server_the_user_named_never_to_one_only_a_team_file_names() {
    let server = FakeLlm::start(Mode::Sensible);
    let s = scratch();
    let sent = |server: &FakeLlm| -> Vec<Option<String>> {
        server.requests().iter().map(|r| r.header("authorization").map(str::to_owned)).collect()
    };
    // A team file's `base_url` without `api_key_env`: the file may come from anyone, so the
    // user's OPENAI_API_KEY is not sent to the server it names.
    let lines = format!("base_url = \"{}\"\nmodel = \"fake-model\"", server.openai_url());
    s.write("team.toml", &openai_team(&lines));
    let out = strata(&s, &run_args(&["--team", "team.toml"]), &[("OPENAI_API_KEY", KEY)]);
    succeeded(&s, &out);
    let headers = sent(&server);
    assert!(!headers.is_empty());
    assert!(headers.iter().all(Option::is_none), "the key went to the team file's server");

    // The same server named by the user (--base-url): the key is sent, as the OpenAI clients do.
    let named = FakeLlm::start(Mode::Sensible);
    let s = scratch();
    s.write("team.toml", &openai_team("model = \"fake-model\""));
    let url = named.openai_url();
    let args = run_args(&["--team", "team.toml", "--base-url", &url]);
    let out = strata(&s, &args, &[("OPENAI_API_KEY", KEY)]);
    succeeded(&s, &out);
    let bearer = format!("Bearer {KEY}");
    let headers = sent(&named);
    assert!(!headers.is_empty());
    assert!(headers.iter().all(|h| h.as_deref() == Some(bearer.as_str())), "{headers:?}");
    assert!(!out.stdout.contains(KEY) && !out.stderr.contains(KEY), "the key was printed");

    // A team file that names the variable itself: sent to its server.
    let own = FakeLlm::start(Mode::Sensible);
    let s = scratch();
    let lines = format!(
        "base_url = \"{}\"\nmodel = \"fake-model\"\napi_key_env = \"OPENAI_API_KEY\"",
        own.openai_url()
    );
    s.write("team.toml", &openai_team(&lines));
    let out = strata(&s, &run_args(&["--team", "team.toml"]), &[("OPENAI_API_KEY", KEY)]);
    succeeded(&s, &out);
    let headers = sent(&own);
    assert!(headers.iter().all(|h| h.as_deref() == Some(bearer.as_str())), "{headers:?}");
}

#[test]
fn a_remote_server_without_a_key_is_refused_naming_the_variable() {
    let s = scratch();
    let before = snapshot(s.root());
    // The flags, without a team file.
    let args = run_args(&["--reasoner", "openai", "--base-url", REMOTE, "--model", "m"]);
    let out = strata(&s, &args, &[]);
    out.bad_input(&["OPENAI_API_KEY", "is not set", REMOTE, "not on loopback", "api_key_env"]);
    refused_before_anything(&s, &out, None);

    // A team file's remote `base_url` naming the variable: the same refusal.
    s.write(
        "team.toml",
        &openai_team(&format!(
            "base_url = \"{REMOTE}\"\nmodel = \"m\"\napi_key_env = \"OPENAI_API_KEY\""
        )),
    );
    let out = strata(&s, &run_args(&["--team", "team.toml"]), &[]);
    out.bad_input(&["OPENAI_API_KEY", "api_key_env", "is not set"]);
    refused_before_anything(&s, &out, None);

    // OpenAI's own API (no URL anywhere): the same.
    let out = strata(&s, &run_args(&["--reasoner", "openai", "--model", "m"]), &[]);
    out.bad_input(&["OPENAI_API_KEY", "is not set", "https://api.openai.com/v1"]);
    refused_before_anything(&s, &out, None);
    std::fs::remove_file(s.path("team.toml")).unwrap();
    assert_eq!(snapshot(s.root()), before, "a refused run wrote something");
}

#[test]
fn bad_flag_values_are_refused_naming_the_flag() {
    let server = FakeLlm::start(Mode::Sensible);
    let url = server.openai_url();
    let s = scratch();
    for (args, needles) in [
        (
            vec!["--reasoner", "openai", "--base-url", "not a url", "--model", "fake-model"],
            vec!["--base-url", "`not a url` is not an http(s) URL"],
        ),
        (
            vec!["--reasoner", "openai", "--base-url", "ftp://127.0.0.1/v1", "--model", "m"],
            vec!["--base-url", "is not an http(s) URL"],
        ),
        (
            vec!["--reasoner", "openai", "--base-url", "http://127.0.0.1:99999/v1"],
            vec!["--base-url", "is not an http(s) URL"],
        ),
        (
            vec!["--reasoner", "openai", "--base-url", &url, "--model", ""],
            vec!["--model", "the model name is empty"],
        ),
        (
            vec!["--reasoner", "openai", "--base-url", &url, "--model", "  "],
            vec!["--model", "the model name is empty"],
        ),
    ] {
        let out = strata(&s, &run_args(&args), &[]);
        refused_before_anything(&s, &out, Some(&server));
        for needle in needles {
            assert!(out.stderr.contains(needle), "{:?}: lacks {needle:?}:\n{}", args, out.stderr);
        }
    }
    // `exec` takes the same flags, checked the same way.
    let args = ["exec", "writer_agent", "write a note", "--base-url", "nope", "--data", "D"];
    let out = strata(&s, &args, &[]);
    refused_before_anything(&s, &out, Some(&server));
    assert!(out.stderr.contains("--base-url") && out.stderr.contains("`nope`"), "{}", out.stderr);

    // A bad $OPENAI_BASE_URL, where it is used, names the variable.
    let out = strata(
        &s,
        &run_args(&["--reasoner", "openai", "--model", "m"]),
        &[("OPENAI_BASE_URL", "localhost:8080")],
    );
    out.bad_input(&["$OPENAI_BASE_URL", "`localhost:8080` is not an http(s) URL"]);
    refused_before_anything(&s, &out, None);

    // Flags no agent would use (every one rule-based) are refused, not ignored.
    let out = strata(&s, &run_args(&["--base-url", &url]), &[]);
    out.bad_input(&["--base-url", "no agent reasons with a model server", "--reasoner openai"]);
    refused_before_anything(&s, &out, Some(&server));
    let out = strata(&s, &run_args(&["--model", "fake-model"]), &[]);
    out.bad_input(&["--model fake-model", "no agent reasons with a model"]);
    refused_before_anything(&s, &out, Some(&server));
}

#[test]
fn a_goal_runs_without_a_team_file_on_the_built_in_goal_team() {
    let runtime =
        tokio::runtime::Builder::new_multi_thread().worker_threads(1).enable_all().build().unwrap();
    // The scenario of the goal example: two leads of its roles, coders, a tester, a writer.
    let model = runtime.block_on(FakeModel::start("knobs-goal-model", add_program_scenario));
    let model = model.unwrap();
    let s = Scratch::new();
    let url = model.url();
    let args = [
        "run",
        "--goal",
        GOAL_TEXT.trim(),
        "--reasoner",
        "openai",
        "--base-url",
        &url,
        "--model",
        "knobs-goal-model",
        "--data",
        "D",
        "--workspace",
        "W",
        "--heartbeat",
        "250ms",
        "--quiet",
        "--run-id",
        "g1",
    ];
    let out = strata(&s, &args, &[]);
    let problems = model.problems();
    assert!(problems.is_empty(), "the model was asked what it did not expect: {problems:#?}");
    out.code(0);
    assert!(s.path("W/README.md").is_file(), "{}", out.stdout);
    // The team the run stored is the goal example's powers and roles, with no [reasoner].
    let team = s.read("D/g1/team.toml");
    for needle in
        ["built-in goal team", "id = \"top-a\"", "name = \"code_lead\"", "name = \"writer\""]
    {
        assert!(team.contains(needle), "lacks {needle:?}:\n{team}");
    }
    let reasoner = |l: &str| l.starts_with("[reasoner]") || l.starts_with("base_url");
    assert!(!team.lines().any(reasoner), "{team}");
    let tree = s.strata(&["inspect", "g1", "tree", "--data", "D"]);
    tree.code(0).stdout_has(&["code_lead-1 (code_lead)", "writer-1 (writer)"]);
    for body in model.requests() {
        assert_eq!(body["model"], "knobs-goal-model", "{body}");
    }

    // Without a reasoner that plans, the built-in goal team refuses the goal as before.
    let out = strata(&s, &["run", "--goal", "write a README", "--data", "D2"], &[]);
    out.bad_input(&["this task has only a goal", "use --reasoner openai"]);
}

#[test]
fn model_path_prints_the_path_alone() {
    // Where `strata model fetch` puts the model (CI fetches it in its setup).
    let dir = agent_llm::default_model_dir().expect("neither STRATA_MODEL_DIR nor HOME is set");
    let file = agent_llm::GEMMA3_270M_Q4_K_M.path_in(&dir);
    assert!(
        file.is_file(),
        "the model file {} is missing: run `cargo run -p agent-cli -- model fetch`",
        file.display()
    );
    let s = Scratch::new();
    let out = s.strata(&["model", "path"]);
    out.code(0);
    assert_eq!(out.stdout, format!("{}\n", file.display()), "stdout is the path alone");
    assert!(out.stderr.contains("present, size and sha256 verified"), "{}", out.stderr);

    // A directory without the model: the path alone still, the verdict on stderr, exit 2.
    let out = s.strata(&["model", "path", "--dir", "empty"]);
    out.code(2);
    let expected = agent_llm::GEMMA3_270M_Q4_K_M.path_in(std::path::Path::new("empty"));
    assert_eq!(out.stdout, format!("{}\n", expected.display()));
    assert!(out.stderr.starts_with("error: "), "{}", out.stderr);
}
