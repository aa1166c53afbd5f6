//! The command sandbox from the command line: a run whose commands cannot be sandboxed is
//! refused unless `--unsandboxed` is given, which the run then records and `inspect` shows; a
//! sandboxed run's commands do not see the data directory.

use std::process::Command;

use serde_json::Value;

use crate::support::{FAST, Out, Scratch, run_id_of};

/// `strata ARGS` in `s` with `vars` added to its environment.
fn strata_with_env(s: &Scratch, vars: &[(&str, &str)], args: &[&str]) -> Out {
    let mut command: Command = s.command(args);
    command.envs(vars.iter().copied());
    Out::of(args, &mut command)
}

fn run_json(s: &Scratch, data: &str, id: &str) -> Value {
    serde_json::from_str(&s.read(&format!("{data}/{id}/run.json"))).unwrap()
}

#[test]
fn a_run_without_a_usable_sandbox_is_refused_and_writes_nothing() {
    // The built-in sandbox needs no program; one that cannot be built (its skeleton
    // directory has nowhere to go) refuses the run.
    let s = Scratch::with_example();
    let args = ["run", "plan.toml", "--team", "team.toml", "--data", "D", "--workspace", "W"];
    let out = strata_with_env(&s, &[("TMPDIR", "/nonexistent-strata-tmp")], &args);
    out.bad_input(&["built-in sandbox", "cannot be built", "--unsandboxed"]);
    let runs = std::fs::read_dir(s.path("D")).map(|d| d.count()).unwrap_or(0);
    assert_eq!(runs, 0, "a refused run left something in the data directory");
    assert!(!s.path("W/hello.txt").exists(), "a refused run ran a step");
}

#[test]
fn the_main_command_runs_sandboxed_without_any_system_package() {
    let s = Scratch::with_example();
    let args = ["run", "plan.toml", "--team", "team.toml", "--data", "D", "--workspace", "W"];
    let out = s.strata(&[&args[..], &FAST[..], &["--quiet"]].concat());
    out.code(0);
    assert!(!out.stderr.contains("unsandboxed"), "{}", out.stderr);
    assert_eq!(s.read("W/hello.txt"), "hello, strata\n", "the run ran");
    assert_eq!(run_json(&s, "D", &run_id_of(&out))["unsandboxed"], false);
}

#[test]
fn unsandboxed_runs_record_it_and_inspect_shows_it() {
    let s = Scratch::with_example();
    let mut args =
        vec!["run", "plan.toml", "--team", "team.toml", "--data", "D", "--workspace", "W"];
    args.extend([FAST[0], FAST[1], "--quiet", "--unsandboxed"]);
    let out = s.strata(&args);
    out.code(0);
    assert!(out.stderr.contains("warning: --unsandboxed"), "{}", out.stderr);
    assert_eq!(s.read("W/hello.txt"), "hello, strata\n", "the run ran");
    let id = run_id_of(&out);
    assert_eq!(run_json(&s, "D", &id)["unsandboxed"], true);

    let tree = s.strata(&["inspect", &id, "tree", "--data", "D", "--json"]).code(0).json();
    assert_eq!(tree["sandbox"], "off");
    s.strata(&["inspect", &id, "tree", "--data", "D"])
        .code(0)
        .stdout_has(&["sandbox: off (--unsandboxed)"]);
}

#[test]
fn no_secret_of_strata_s_environment_reaches_a_command_sandboxed_or_not() {
    let s = Scratch::with_example();
    s.write(
        "env.toml",
        r#"
id = "env"
goal = "print what a command sees of the environment"

[[steps]]
id = "env"
description = "print the environment"
domain = "build"
tool = "shell"
args = { command = "env > env.txt" }
"#,
    );
    let team = s.read("team.toml");
    assert!(!team.contains("[sandbox]"), "the example grew a [sandbox] table");
    s.write("team.toml", &format!("{team}\n[sandbox]\nenv = [\"STRATA_TEST_SHARED\"]\n"));
    let secrets = [
        ("OPENAI_API_KEY", "sk-test-openai-secret"),
        ("ANTHROPIC_API_KEY", "sk-ant-test-secret"),
        ("STRATA_SERVE_TOKEN", "serve-token-secret"),
        ("OTEL_EXPORTER_OTLP_HEADERS", "authorization=otlp-secret"),
        ("STRATA_TEST_SHARED", "shared-on-purpose"),
    ];
    for extra in [&[][..], &["--unsandboxed"][..]] {
        let args = ["run", "env.toml", "--team", "team.toml", "--data", "D", "--workspace", "W"];
        let args = [&args[..], &FAST[..], &["--quiet"], extra].concat();
        strata_with_env(&s, &secrets, &args).code(0);
        let env = s.read("W/env.txt");
        for (name, value) in &secrets[..4] {
            assert!(
                !env.contains(name) && !env.contains(value),
                "{name} reached a command ({extra:?}):\n{env}"
            );
        }
        assert!(env.contains("STRATA_TEST_SHARED=shared-on-purpose"), "{env}");
        assert!(env.lines().any(|line| line.starts_with("PATH=")), "{env}");
    }
}

#[test]
fn a_sandboxed_run_records_it_and_its_commands_do_not_see_the_data_directory() {
    let s = Scratch::with_example();
    s.write(
        "peek.toml",
        r#"
id = "peek"
goal = "count what a command sees of the runs"

[[steps]]
id = "peek"
description = "count the entries of the data directory"
domain = "build"
tool = "shell"
args = { command = "ls -A D | wc -l > seen.txt; cat /etc/shadow >> seen.txt 2>/dev/null; true" }
"#,
    );
    let args = ["run", "peek.toml", "--team", "team.toml", "--data", "D", "--workspace", "."];
    let out = s.strata(&[&args[..], &FAST[..], &["--quiet"]].concat());
    out.code(0);
    assert!(!out.stderr.contains("unsandboxed"), "{}", out.stderr);
    let id = run_id_of(&out);
    assert_eq!(run_json(&s, "D", &id)["unsandboxed"], false);
    // The data directory holds this run (and the copies of its audit anchor) on the host;
    // the command saw it empty, and no password hashes.
    let mut held: Vec<String> = std::fs::read_dir(s.path("D"))
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    held.sort();
    let mut expected = [id.clone(), "strata-anchors".to_owned()];
    expected.sort();
    assert_eq!(held, expected);
    assert_eq!(s.read("seen.txt"), "0\n");
    let tree = s.strata(&["inspect", &id, "tree", "--data", "D", "--json"]).code(0).json();
    assert_eq!(tree["sandbox"], "on");
}

#[test]
fn only_an_executor_the_team_file_lets_use_the_network_reaches_it() {
    let s = Scratch::with_example();
    let team = s.read("team.toml").replace(
        "id = \"bottom-b1\"\n",
        "id = \"bottom-b1\"\nnetwork = true                 # this executor's commands may\n",
    );
    assert!(team.contains("network = true"));
    s.write("team.toml", &team);
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let connect = format!("bash -c 'echo hi > /dev/tcp/127.0.0.1/{port}' && echo ok");
    s.write(
        "net.toml",
        &format!(
            r#"
id = "net"
goal = "reach a local server from two executors"

[[steps]]
id = "allowed"
description = "connect from the executor with the network"
agent = "bottom-b1"
tool = "shell"
args = {{ command = "({connect}) > allowed.txt" }}
idempotent = true

[[steps]]
id = "cut-off"
description = "connect from an executor without it"
agent = "bottom-b2"
tool = "shell"
args = {{ command = "({connect}) > cut-off.txt; true" }}
"#
        ),
    );
    let args = ["run", "net.toml", "--team", "team.toml", "--data", "D", "--workspace", "W"];
    s.strata(&[&args[..], &FAST[..], &["--quiet"]].concat()).code(0);
    assert_eq!(s.read("W/allowed.txt"), "ok\n");
    assert_eq!(s.read("W/cut-off.txt"), "", "the executor without the network reached it");
    // Exactly one connection arrived: the allowed executor's.
    listener.set_nonblocking(true).unwrap();
    assert!(listener.accept().is_ok());
    assert_eq!(listener.accept().unwrap_err().kind(), std::io::ErrorKind::WouldBlock);
}
