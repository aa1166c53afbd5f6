//! `strata exec KIND "objective"`: one run of an executor kind as a durable team run. It
//! writes what the kind writes and exits 0, appears in `runs` and `inspect`; bad input (an
//! unknown kind, an empty or too long objective, inputs the kind does not take) is exit 2
//! before any run directory exists; `--list` lists the kinds. A non-idempotent kind killed
//! while its HTTP request is in flight is not repeated by `resume`: the step is reported
//! interrupted.

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use serde_json::Value;

use crate::support::{FAST, Out, Scratch, listed_run, snapshot, wait_for};

/// The four built-in kinds, as `--list` and the unknown-kind error name them.
const KINDS: [&str; 4] = ["integrations_agent", "planner_agent", "research_agent", "writer_agent"];

/// `strata exec ARGS` with the data directory `D`, the workspace `W`, a fast heartbeat and
/// `--quiet`.
fn exec(s: &Scratch, args: &[&str]) -> Out {
    let mut all = vec!["exec"];
    all.extend_from_slice(args);
    all.extend_from_slice(&["--data", "D", "--workspace", "W", FAST[0], FAST[1], "--quiet"]);
    s.strata(&all)
}

/// `strata exec ARGS` that must be refused as bad input before anything is written: exit 2,
/// one error line with every one of `needles`, and no data directory, workspace or other file.
#[track_caller]
fn refused(s: &Scratch, args: &[&str], needles: &[&str]) {
    let before = snapshot(s.root());
    let out = exec(s, args);
    out.bad_input(needles);
    assert!(!s.path("D").exists(), "`strata {}` created the data directory", out.args);
    assert!(!s.path("W").exists(), "`strata {}` created the workspace", out.args);
    assert_eq!(snapshot(s.root()), before, "`strata {}` wrote something", out.args);
}

#[test]
fn exec_writer_agent_writes_the_file_and_the_run_is_listed_and_inspectable() {
    let s = Scratch::new();
    let out = exec(
        &s,
        &[
            "writer_agent",
            "write a short note",
            "--input",
            "content=hello from exec\n",
            "--input",
            "path=notes/x.md",
            "--run-id",
            "w1",
        ],
    );
    out.code(0).stdout_has(&["run w1 started: task `exec-writer_agent` (write a short note)"]);
    assert_eq!(s.read("W/notes/x.md"), "hello from exec\n");

    let listed = listed_run(&s, "D", "w1");
    assert_eq!(listed["status"], "succeeded", "{listed}");
    assert_eq!(listed["task"], "exec-writer_agent", "{listed}");
    assert_eq!(listed["goal"], "write a short note", "{listed}");
    s.strata(&["runs", "--data", "D"]).code(0).stdout_has(&[
        "w1",
        "succeeded",
        "exec-writer_agent",
    ]);

    // The run is a team run like any other: its tree, its audit with the kind's call.
    let tree = s.strata(&["inspect", "w1", "--data", "D", "--json"]).code(0).json();
    assert_eq!(tree["status"], "succeeded", "{tree}");
    let audit = s.strata(&["inspect", "w1", "audit", "--data", "D", "--json"]).code(0).json();
    let calls: Vec<&Value> = audit
        .as_array()
        .unwrap()
        .iter()
        .filter(|r| r["event"]["event"] == "tool_call" && r["event"]["tool"] == "writer_agent")
        .collect();
    assert_eq!(calls.len(), 1, "the kind's run is audited once: {audit}");
    assert_eq!(calls[0]["event"]["success"], true);
    assert_eq!(calls[0]["event"]["args"]["inputs"]["path"], "notes/x.md");
    s.strata(&["inspect", "w1", "audit", "--data", "D"]).code(0).stdout_has(&["writer_agent"]);
    s.strata(&["verify", "w1", "--data", "D"]).code(0);
    // Its structured result, with the file it created.
    s.strata(&["inspect", "w1", "results", "--data", "D"])
        .code(0)
        .stdout_has(&["task: exec-writer_agent/writer_agent", "created notes/x.md"]);
    // It is stored as files `resume` reads: a finished run is not run again.
    assert!(s.read("D/w1/team.toml").contains("kind = \"writer_agent\""));
    assert!(s.read("D/w1/plan.toml").contains("tool = \"writer_agent\""));
    s.strata(&["resume", "w1", "--data", "D"]).code(0).stdout_has(&["already finished"]);
    assert_eq!(s.read("W/notes/x.md"), "hello from exec\n");
}

#[test]
fn exec_research_agent_finds_a_workspace_document() {
    let s = Scratch::new();
    s.write("W/docs/greeting.md", "The secret greeting of the project is: hello strata.\n");
    s.write("W/docs/other.md", "Nothing to see here.\n");
    let out = s.strata(&[
        "exec",
        "research_agent",
        "what is the secret greeting",
        "--data",
        "D",
        "--workspace",
        "W",
        FAST[0],
        FAST[1],
        "--json",
    ]);
    out.code(0);
    let lines: Vec<Value> =
        out.stdout.lines().map(|l| serde_json::from_str(l).expect("a JSON line")).collect();
    // The run's progress is in the stream, and its notes name the document.
    assert!(
        lines.iter().any(|l| l["event"] == "executor_run" && l["run"]["event"] == "progress"),
        "no progress in:\n{}",
        out.stdout
    );
    let finished = lines.iter().find(|l| l["event"] == "run_finished").expect("run_finished");
    let results = finished["outcome"]["results"].as_array().expect("results");
    assert_eq!(results.len(), 1, "{finished}");
    let output = results[0]["output"].as_str().unwrap();
    assert!(output.contains("docs/greeting.md"), "{output}");
    assert!(output.contains("hello strata"), "{output}");
    assert!(!output.contains("docs/other.md"), "{output}");
}

#[test]
fn bad_exec_input_is_refused_before_any_run_directory_exists() {
    let s = Scratch::new();
    let kinds = KINDS.join(", ");
    refused(&s, &["poet_agent", "write a poem"], &["unknown agent kind `poet_agent`", &kinds]);
    refused(&s, &["writer_agent", ""], &["the objective is empty"]);
    refused(&s, &["writer_agent", "  \n "], &["the objective is empty"]);
    let long = "x".repeat(16 * 1024 + 1);
    refused(&s, &["writer_agent", &long], &["over the limit of 16384"]);
    refused(
        &s,
        &["writer_agent", "write", "--input", "colour=blue"],
        &["inputs of the `writer_agent` run"],
    );
    refused(&s, &["writer_agent", "write", "--input", "novalue"], &["is not KEY=VALUE"]);
    refused(&s, &["writer_agent", "write", "--inputs", "[1]"], &["--inputs is a JSON object"]);
    refused(&s, &["writer_agent", "write", "--inputs", "{"], &["--inputs is not JSON"]);
    refused(
        &s,
        &["research_agent", "look", "--inputs", "{\"paths\": null}"],
        &["inputs of the `research_agent` run"],
    );
    // A team file's mistakes point into it.
    s.write("bad-team.toml", "heartbeat = 5\n");
    refused(&s, &["writer_agent", "write", "--team", "bad-team.toml"], &["bad-team.toml:1:13"]);
    // A team without an executor for the kind.
    s.write("powers.toml", "[[top]]\nid = \"top-a\"\npower_type = \"p\"\n");
    refused(
        &s,
        &["writer_agent", "write", "--team", "powers.toml"],
        &["the team has no executor to run `writer_agent`"],
    );
    // A kind and no objective is clap's usage error (exit 2 too).
    let out = exec(&s, &["writer_agent"]);
    out.code(2);
    assert!(!s.path("D").exists());
}

#[test]
fn exec_list_names_the_four_kinds_with_their_inputs() {
    let s = Scratch::new();
    let out = s.strata(&["exec", "--list"]);
    out.code(0).stdout_has(&KINDS).stdout_has(&["inputs:", "endpoint", "content", "urls"]);
    let json = s.strata(&["exec", "--list", "--json"]).code(0).json();
    let names: Vec<&str> =
        json["kinds"].as_array().unwrap().iter().map(|k| k["name"].as_str().unwrap()).collect();
    assert_eq!(names, KINDS);
    let integrations = &json["kinds"][0];
    assert_eq!(integrations["idempotent"], false, "{integrations}");
    assert_eq!(integrations["inputs_schema"]["type"], "object");

    // With a team file, its endpoints are listed too.
    s.write("team.toml", &format!("{}{}", team_file::example_team_toml(), endpoint_section(8080)));
    s.strata(&["exec", "--list", "--team", "team.toml"]).code(0).stdout_has(&[
        "tickets",
        "POST",
        "http://127.0.0.1:8080/tickets",
    ]);
    // Nothing was written.
    assert!(!s.path(".strata").exists());
    // `--list` takes no kind.
    s.strata(&["exec", "--list", "writer_agent", "x"]).code(2);
}

/// `[http]` allowing `127.0.0.1:port` and an endpoint `tickets` there.
fn endpoint_section(port: u16) -> String {
    format!(
        r#"
[http]
allow_hosts = ["127.0.0.1:{port}"]
timeout_ms = 120000

[[endpoints]]
name = "tickets"
method = "POST"
url = "http://127.0.0.1:{port}/tickets"
description = "opens a ticket"
headers = {{ Accept = "application/json" }}
"#
    )
}

/// A loopback HTTP server that counts the requests it receives and never answers: each
/// connection is held open until the client goes away.
struct HoldingServer {
    port: u16,
    requests: Arc<AtomicUsize>,
    first: Arc<Mutex<String>>,
}

impl HoldingServer {
    fn start() -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let requests = Arc::new(AtomicUsize::new(0));
        let first = Arc::new(Mutex::new(String::new()));
        let (count, head) = (requests.clone(), first.clone());
        std::thread::spawn(move || {
            for stream in listener.incoming() {
                let Ok(stream) = stream else { continue };
                let (count, head) = (count.clone(), head.clone());
                std::thread::spawn(move || hold(stream, &count, &head));
            }
        });
        Self { port, requests, first }
    }

    fn requests(&self) -> usize {
        self.requests.load(Ordering::SeqCst)
    }
}

/// Reads a request's head, counts it, and waits (answering nothing) until the client closes.
fn hold(mut stream: TcpStream, count: &AtomicUsize, first: &Mutex<String>) {
    let mut seen = Vec::new();
    let mut buf = [0u8; 4096];
    let mut counted = false;
    loop {
        match stream.read(&mut buf) {
            Ok(0) | Err(_) => break,
            Ok(n) => {
                seen.extend_from_slice(&buf[..n]);
                if !counted && seen.windows(4).any(|w| w == b"\r\n\r\n") {
                    counted = true;
                    let mut head = first.lock().unwrap();
                    if head.is_empty() {
                        *head = String::from_utf8_lossy(&seen).into_owned();
                    }
                    count.fetch_add(1, Ordering::SeqCst);
                }
            }
        }
    }
    let _ = stream.flush();
}

/// The central promise of a durable run: a non-idempotent kind killed (SIGKILL) while its HTTP
/// call is in flight is not called again by `resume`; the step is reported interrupted and the
/// run fails (exit 1) saying a decision is needed.
#[test]
fn an_integrations_run_killed_mid_request_is_not_repeated_on_resume() {
    let server = HoldingServer::start();
    let s = Scratch::new();
    s.write(
        "team.toml",
        &format!("{}{}", team_file::example_team_toml(), endpoint_section(server.port)),
    );
    let args = [
        "exec",
        "integrations_agent",
        "open a ticket for the broken build",
        "--team",
        "team.toml",
        "--inputs",
        r#"{"endpoint": "tickets", "body": {"title": "the build is broken"}}"#,
        "--data",
        "D",
        "--workspace",
        "W",
        "--run-id",
        "i1",
        FAST[0],
        FAST[1],
        "--quiet",
    ];
    let mut run = s.spawn(&args);
    wait_for("the endpoint to receive the request", || {
        assert!(!run.exited(), "strata exited before calling the endpoint");
        server.requests() > 0
    });
    let killed = run.kill();
    assert_eq!(killed.status.code(), None, "killed by a signal");
    let head = server.first.lock().unwrap().clone();
    assert!(head.starts_with("POST /tickets "), "{head}");
    assert_eq!(listed_run(&s, "D", "i1")["status"], "killed (resumable)");

    let resumed = s.strata(&["resume", "i1", "--data", "D", "--quiet"]);
    resumed.code(1).stdout_has(&["interrupted", "integrations_agent", "needs a decision"]);
    assert_eq!(server.requests(), 1, "the endpoint was called again after the crash");
    let listed = listed_run(&s, "D", "i1");
    assert_eq!(listed["status"], "failed", "{listed}");
    let audit = s.strata(&["inspect", "i1", "audit", "--data", "D", "--json"]).code(0).json();
    let calls = audit
        .as_array()
        .unwrap()
        .iter()
        .filter(|r| {
            r["event"]["event"] == "tool_call"
                && r["event"]["tool"] == "integrations_agent"
                && r["event"]["success"] == true
        })
        .count();
    assert_eq!(calls, 0, "no successful call is recorded: {audit}");
    // Resuming again changes nothing.
    s.strata(&["resume", "i1", "--data", "D"]).code(1).stdout_has(&["already finished"]);
    assert_eq!(server.requests(), 1);
}

#[test]
fn a_kind_run_that_misses_an_input_is_blocked_and_exits_1_saying_so() {
    let s = Scratch::new();
    // On the rule-based reasoner the writer cannot draft: without `content` it is blocked.
    let out = exec(&s, &["writer_agent", "write a poem about rust", "--run-id", "b1"]);
    out.code(1).stdout_has(&[
        "FAILED",
        "step `writer_agent` is blocked: `bottom-d1` ran `writer_agent` and it needs",
        "content",
    ]);
    let listed = listed_run(&s, "D", "b1");
    assert_eq!(listed["status"], "failed", "{listed}");
    assert!(!s.path("W/drafts").exists(), "a blocked run wrote nothing");
}

#[test]
fn a_goal_step_for_an_executor_with_a_kind_runs_on_the_rule_based_reasoner() {
    let s = Scratch::with_example();
    s.write("W/docs/greeting.md", "The secret greeting of the project is: hello strata.\n");
    let team = s.read("team.toml");
    let with_kind = crate::support::replace_once(
        &team,
        "id = \"bottom-d1\"",
        "kind = \"research_agent\"\nid = \"bottom-d1\"",
    );
    s.write("kind-team.toml", &with_kind);
    s.write(
        "goal-step.toml",
        "id = \"find\"\ngoal = \"find the greeting\"\n\n[[steps]]\nid = \"research\"\ndescription = \"what is the secret greeting\"\nagent = \"bottom-d1\"\n",
    );
    let out = s.strata(&[
        "run",
        "goal-step.toml",
        "--team",
        "kind-team.toml",
        "--data",
        "D",
        "--workspace",
        "W",
        FAST[0],
        FAST[1],
        "--quiet",
    ]);
    out.code(0).stdout_has(&["task `find` succeeded", "research_agent run"]);
    // The same goal step for an executor without a kind still needs a planner.
    s.strata(&[
        "run",
        "goal-step.toml",
        "--team",
        "team.toml",
        "--data",
        "D2",
        "--workspace",
        "W",
        FAST[0],
        FAST[1],
        "--quiet",
    ])
    .bad_input(&["this task has goal steps (research), which need a reasoner that plans"]);
    assert!(!s.path("D2").exists());
}
