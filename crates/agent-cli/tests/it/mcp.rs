//! MCP tools in a run: the team file's `[[mcp_servers]]` started before the team (a real MCP
//! server written with PyPI's `mcp` package, from the Python `.ci/mcp-setup` installs), plan
//! steps calling their tools, each side effect once (also across a SIGKILL), and a server that
//! fails to start or lacks a listed tool refused before anything is written.

use std::path::{Path, PathBuf};

use crate::support::{FAST, Scratch, replace_once, wait_for};

/// The Python with the `mcp` package; panics, saying how to install it, when there is none.
fn python() -> String {
    let python = match std::env::var_os("STRATA_MCP_PYTHON") {
        Some(path) => PathBuf::from(path),
        None => {
            let cache = std::env::var_os("XDG_CACHE_HOME")
                .map(PathBuf::from)
                .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cache")))
                .expect("neither XDG_CACHE_HOME nor HOME is set");
            cache.join("strata/mcp/venv/bin/python")
        }
    };
    assert!(
        python.is_file(),
        "no Python with the `mcp` package at {}: run `bash .ci/mcp-setup` (CI's setup does), \
         or set STRATA_MCP_PYTHON to one",
        python.display()
    );
    python.display().to_string()
}

fn repo(rel: &str) -> String {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..").join(rel).display().to_string()
}

/// The example team (`examples/mcp`), its server started with the tests' Python and writing
/// its notes to `notes.md` in the scratch directory.
fn example(s: &Scratch) {
    let team = std::fs::read_to_string(repo("examples/mcp/team.toml")).unwrap();
    let team = replace_once(&team, "command = \"python3\"", &format!("command = {:?}", python()));
    // The server's script in the workspace (the directory strata runs in, here): a sandboxed
    // server sees its workspace, the system read-only, and its Python's prefix.
    s.write(
        "examples/mcp/notes_server.py",
        &std::fs::read_to_string(repo("examples/mcp/notes_server.py")).unwrap(),
    );
    assert!(team.contains("target/mcp-example/notes.md"));
    let team = team.replace("target/mcp-example/notes.md", "notes.md");
    s.write("team.toml", &team);
    s.write("plan.toml", &std::fs::read_to_string(repo("examples/mcp/plan.toml")).unwrap());
}

#[test]
fn the_example_team_calls_mcp_tools_and_the_audit_shows_each_call_once() {
    let s = Scratch::new();
    example(&s);
    let args = [
        "run",
        "plan.toml",
        "--team",
        "team.toml",
        "--data",
        "D",
        "--workspace",
        ".",
        "--run-id",
        "m",
        FAST[0],
        FAST[1],
        "--no-sync",
        "--quiet",
    ];
    s.strata(&args).code(0).stdout_has(&[
        "task `mcp-notes` succeeded",
        "(4 steps)",
        "notes.md has 2 line(s)",
    ]);
    assert_eq!(s.read("notes.md"), "strata called an MCP tool\nand recorded the call once\n");
    let audit = s.strata(&["inspect", "m", "audit", "--data", "D", "--json"]).code(0).json();
    let calls: Vec<(&str, &str)> = audit
        .as_array()
        .unwrap()
        .iter()
        .filter(|r| r["event"]["event"] == "tool_call")
        .map(|r| (r["agent"].as_str().unwrap(), r["event"]["tool"].as_str().unwrap()))
        .collect();
    let appends = calls.iter().filter(|(_, t)| *t == "mcp__notes__append_note").count();
    assert_eq!(appends, 2, "each side effect audited once: {calls:?}");
    assert!(calls.contains(&("counter", "mcp__notes__count_words")), "{calls:?}");
    // The stored team file is read without starting the server.
    s.strata(&["inspect", "m", "tree", "--data", "D"]).code(0).stdout_has(&["writer"]);
}

#[test]
fn a_server_that_fails_to_start_is_bad_input_and_nothing_is_written() {
    let s = Scratch::new();
    example(&s);
    let team = s.read("team.toml");
    s.write("team.toml", &team.replace(&python(), "/nonexistent/strata-python"));
    // Without `--workspace`: the run's own workspace is made for the server, then removed.
    let run = s.strata(&["run", "plan.toml", "--team", "team.toml", "--data", "D", "--quiet"]);
    run.bad_input(&["MCP server `notes` failed to start: cannot run `/nonexistent/strata-python`"]);
    assert!(!s.path("D").exists(), "a refused run writes nothing");
}

#[test]
fn a_listed_tool_the_server_does_not_offer_is_bad_input_at_its_name() {
    let s = Scratch::new();
    example(&s);
    let team = s.read("team.toml");
    // Listed beside the tools the plan calls: the plan is checked (by name) before the server
    // starts, the tool lists again once it offers its tools.
    let team = team.replace(
        "\"mcp__notes__count_words\", ",
        "\"mcp__notes__count_words\", \"mcp__notes__nope\", ",
    );
    s.write("team.toml", &team);
    let run = s.strata(&[
        "run",
        "plan.toml",
        "--team",
        "team.toml",
        "--data",
        "D",
        "--workspace",
        ".",
        "--quiet",
    ]);
    run.bad_input(&[
        "team.toml:",
        "MCP server `notes` does not offer a tool `nope` (it offers: mcp__notes__append_note, \
         mcp__notes__count_words, mcp__notes__read_notes)",
    ]);
    assert!(!s.path("D").exists(), "a refused run writes nothing");
}

/// SIGKILL while an MCP tool with side effects runs (it appended, then sleeps): `resume`
/// restarts the server and does not call the tool again (it is not annotated idempotent);
/// the step is interrupted and the task asks for a decision.
#[test]
fn a_kill_during_an_mcp_side_effect_is_not_repeated_on_resume() {
    let s = Scratch::new();
    let count = s.path("count.txt").display().to_string();
    s.write(
        "team.toml",
        &format!(
            "[[mcp_servers]]\nname = \"t\"\ncommand = {:?}\nargs = [{:?}]\n\n\
             [[top]]\nid = \"top-a\"\npower_type = \"power_a\"\n\n\
             [[mid]]\nid = \"lead\"\ndomain = \"d\"\nsupervisor = \"top-a\"\n\n\
             [[bottom]]\nid = \"e\"\nsupervisor = \"lead\"\ntools = [\"mcp__t__append_then_sleep\"]\n",
            python(),
            "server.py",
        ),
    );
    s.write(
        "server.py",
        &std::fs::read_to_string(repo("crates/agent-mcp/tests/it/server.py")).unwrap(),
    );
    s.write(
        "plan.toml",
        &format!(
            "id = \"k\"\ngoal = \"g\"\n\n[[steps]]\nid = \"s\"\nagent = \"e\"\n\
             tool = \"mcp__t__append_then_sleep\"\nargs = {{ path = {count:?}, line = \"ran\", seconds = 5 }}\n"
        ),
    );
    let mut run = s.spawn(&[
        "run",
        "plan.toml",
        "--team",
        "team.toml",
        "--data",
        "D",
        "--workspace",
        ".",
        "--run-id",
        "k",
        "--heartbeat",
        "100ms",
        "--quiet",
    ]);
    wait_for("the MCP tool to append", || {
        assert!(!run.exited(), "strata exited before the tool ran: {}", run.stderr_so_far());
        s.path("count.txt").exists()
    });
    assert_eq!(run.kill().status.code(), None, "killed by a signal");

    let resume = s.strata(&["resume", "k", "--data", "D", "--quiet"]);
    resume.code(1);
    let printed = format!("{}{}", resume.stdout, resume.stderr);
    assert!(
        printed.contains("was interrupted while `e` ran `mcp__t__append_then_sleep`"),
        "{printed}"
    );
    assert_eq!(s.read("count.txt"), "ran\n", "the side effect ran exactly once");
    // Its outcome is recorded and audited as unknown (issue 31, item 4).
    let unknown = audited(&s, "k", "tool_outcome_unknown");
    assert_eq!(unknown.len(), 1, "{unknown:?}");
    assert_eq!(unknown[0]["event"]["tool"], "mcp__t__append_then_sleep");
    assert_eq!(unknown[0]["event"]["cancelled"], false, "{}", unknown[0]);
    let verify = s.strata(&["verify", "k", "--data", "D", "--json"]).code(0).json();
    assert_eq!(verify["ok"], true, "{verify}");
}

/// A team with the test server (`server.py`, copied into the scratch directory, the workspace)
/// as `t`, its `extra` lines added to the server's entry, and a plan of one step calling
/// `tool` with `args` (TOML inline table).
fn test_server_team(s: &Scratch, extra: &str, tool: &str, args: &str) {
    s.write(
        "server.py",
        &std::fs::read_to_string(repo("crates/agent-mcp/tests/it/server.py")).unwrap(),
    );
    s.write(
        "team.toml",
        &format!(
            "[[mcp_servers]]\nname = \"t\"\ncommand = {:?}\nargs = [\"server.py\"]\n{extra}\n\n\
             [[top]]\nid = \"top-a\"\npower_type = \"power_a\"\n\n\
             [[mid]]\nid = \"lead\"\ndomain = \"d\"\nsupervisor = \"top-a\"\n\n\
             [[bottom]]\nid = \"e\"\nsupervisor = \"lead\"\ntools = [\"mcp__t__{tool}\"]\n",
            python(),
        ),
    );
    s.write(
        "plan.toml",
        &format!(
            "id = \"p\"\ngoal = \"g\"\n\n[[steps]]\nid = \"s\"\nagent = \"e\"\n\
             tool = \"mcp__t__{tool}\"\nargs = {args}\n"
        ),
    );
}

const RUN: [&str; 13] = [
    "run",
    "plan.toml",
    "--team",
    "team.toml",
    "--data",
    "D",
    "--workspace",
    ".",
    "--run-id",
    "r",
    "--heartbeat",
    "100ms",
    "--quiet",
];

/// Attack (issue 30, item 2): strata's API key and the dashboard's token are in its
/// environment; an MCP server's tool that returns its environment shows neither, only the
/// minimal environment, what its entry passes by name and its own `env`. Both with the
/// sandbox (the default) and with the opt-out.
#[test]
fn an_mcp_server_never_sees_strata_secrets() {
    for extra in [
        "pass_env = [\"STRATA_TEST_PASSED\"]\nenv = { OWN = \"own\" }",
        "sandbox = false\npass_env = [\"STRATA_TEST_PASSED\"]\nenv = { OWN = \"own\" }",
    ] {
        let s = Scratch::new();
        test_server_team(&s, extra, "env", "{ path = \"seen.json\" }");
        let mut run = s.command(&RUN);
        run.env("OPENAI_API_KEY", "sk-strata-test-openai-key-0123456789")
            .env("STRATA_SERVE_TOKEN", "strata-test-serve-token-0123456789")
            .env("STRATA_TEST_PASSED", "passed by name")
            .env("STRATA_TEST_NOT_PASSED", "not passed");
        let out = crate::support::Out::of(&RUN, &mut run);
        out.code(0);
        let seen: serde_json::Value = serde_json::from_str(&s.read("seen.json")).unwrap();
        let env = seen["env"].as_object().unwrap();
        let text = seen.to_string();
        for leaked in [
            "OPENAI_API_KEY",
            "sk-strata-test",
            "STRATA_SERVE_TOKEN",
            "strata-test-serve",
            "STRATA_TEST_NOT_PASSED",
        ] {
            assert!(!text.contains(leaked), "{extra}: the server saw {leaked}: {text}");
        }
        assert_eq!(env["STRATA_TEST_PASSED"], "passed by name", "{extra}");
        assert_eq!(env["OWN"], "own", "{extra}");
        let workspace = std::fs::canonicalize(s.root()).unwrap();
        assert_eq!(seen["cwd"], workspace.display().to_string(), "{extra}: works in the workspace");
    }
}

/// A team file naming one of strata's own secrets in `pass_env` is refused at its place.
#[test]
fn passing_a_strata_secret_to_an_mcp_server_is_bad_input() {
    let s = Scratch::new();
    test_server_team(&s, "pass_env = [\"OPENAI_API_KEY\"]", "echo", "{ text = \"x\" }");
    s.strata(&RUN).bad_input(&["team.toml:5:", "`OPENAI_API_KEY` is one of strata's own secrets"]);
    assert!(!s.path("D").exists());
}

/// [`test_server_team`] for a run in its own workspace (`D/r/workspace`, no `--workspace`):
/// the server's script named by its absolute path and shown to the sandbox with
/// `[sandbox] read_only` (the scratch directory is under the private `/tmp` of the sandbox).
fn own_workspace_team(s: &Scratch, extra: &str, tool: &str, args: &str) {
    test_server_team(s, extra, tool, args);
    let root = std::fs::canonicalize(s.root()).unwrap().display().to_string();
    let team = replace_once(
        &s.read("team.toml"),
        "args = [\"server.py\"]",
        &format!("args = [{:?}]", format!("{root}/server.py")),
    );
    s.write("team.toml", &format!("[sandbox]\nread_only = [{root:?}]\n\n{team}"));
}

/// [`RUN`] without `--workspace`: the README's way.
const RUN_OWN_WORKSPACE: [&str; 11] = [
    "run",
    "plan.toml",
    "--team",
    "team.toml",
    "--data",
    "D",
    "--run-id",
    "r",
    "--heartbeat",
    "100ms",
    "--quiet",
];

/// A new run with a stdio server needs no `--workspace`: its servers start, sandboxed, in the
/// run's own workspace (`<data>/<run id>/workspace`), made before they start, where their
/// relative paths land.
#[test]
fn a_stdio_server_starts_in_the_run_s_own_workspace() {
    let s = Scratch::new();
    own_workspace_team(&s, "", "env", "{ path = \"seen.json\" }");
    s.strata(&RUN_OWN_WORKSPACE).code(0);
    let workspace = std::fs::canonicalize(s.path("D/r/workspace")).unwrap();
    let seen: serde_json::Value = serde_json::from_str(&s.read("D/r/workspace/seen.json")).unwrap();
    assert_eq!(seen["cwd"], workspace.display().to_string(), "works in the run's workspace");
    assert_eq!(seen["pid"], 2, "in the sandbox's own PID namespace: {seen}");
    assert!(!s.path("seen.json").exists());
}

/// Bad input found once the servers started (a tool the file lists that its server does not
/// offer; a plan step's `args` that do not fit the server's schema): exit 2, and the run's
/// directory, made for the servers' workspace, is removed again: nothing is written.
#[test]
fn bad_input_found_once_the_servers_started_leaves_nothing_written() {
    let s = Scratch::new();
    own_workspace_team(&s, "", "echo", "{ text = \"x\" }");
    let team = s.read("team.toml");
    s.write("team.toml", &team.replace("tools = [\"mcp__t__echo\"]", "tools = [\"mcp__t__nope\"]"));
    let plan = s.read("plan.toml");
    s.write("plan.toml", &plan.replace("mcp__t__echo", "mcp__t__nope"));
    s.strata(&RUN_OWN_WORKSPACE)
        .bad_input(&["team.toml:", "MCP server `t` does not offer a tool `nope`"]);
    assert!(!s.path("D").exists(), "a refused run writes nothing");

    let s = Scratch::new();
    own_workspace_team(&s, "", "echo", "{ words = 3 }");
    s.strata(&RUN_OWN_WORKSPACE)
        .bad_input(&["plan.toml:", "`args` do not fit the tool `mcp__t__echo`"]);
    assert!(!s.path("D").exists(), "a refused run writes nothing");

    // In an existing data directory, only the refused run's directory goes.
    let s = Scratch::new();
    own_workspace_team(&s, "", "echo", "{ words = 3 }");
    s.write("D/other.txt", "kept");
    s.strata(&RUN_OWN_WORKSPACE).bad_input(&["`args` do not fit the tool `mcp__t__echo`"]);
    let left: Vec<_> =
        std::fs::read_dir(s.path("D")).unwrap().flatten().map(|e| e.file_name()).collect();
    assert_eq!(left, ["other.txt"], "only the run's directory is removed");
}

/// The explicit opt-out (`sandbox = false`) is printed at start (a warning naming the server)
/// and audited (a record under `mcp:t` saying it runs outside the sandbox); a sandboxed server
/// is neither.
#[test]
fn an_mcp_server_outside_the_sandbox_is_printed_and_audited() {
    let s = Scratch::new();
    test_server_team(&s, "sandbox = false", "echo", "{ text = \"x\" }");
    let out = s.strata(&RUN);
    out.code(0);
    assert!(
        out.stderr.contains("warning: MCP server `t` runs outside the sandbox (`sandbox = false`"),
        "{}",
        out.stderr
    );
    let audit = s.strata(&["inspect", "r", "audit", "--data", "D", "--json"]).code(0).json();
    let noted: Vec<&serde_json::Value> =
        audit.as_array().unwrap().iter().filter(|r| r["agent"] == "mcp:t").collect();
    assert_eq!(noted.len(), 1, "{audit}");
    // A recorded choice, not an error (which would count as a failure).
    assert_eq!(noted[0]["event"]["event"], "unsandboxed", "{}", noted[0]);
    assert_eq!(noted[0]["event"]["reason"], "`sandbox = false` in the team file", "{}", noted[0]);
    assert!(audit.as_array().unwrap().iter().all(|r| r["event"]["event"] != "error"), "{audit}");
    s.strata(&["inspect", "r", "audit", "--data", "D"]).code(0).stdout_has(&[
        "mcp:t",
        "runs outside the sandbox: `",
        "(`sandbox = false` in the team file)",
    ]);

    let s = Scratch::new();
    test_server_team(&s, "", "echo", "{ text = \"x\" }");
    let out = s.strata(&RUN);
    out.code(0);
    assert!(!out.stderr.contains("outside the sandbox"), "{}", out.stderr);
    let audit = s.strata(&["inspect", "r", "audit", "--data", "D", "--json"]).code(0).json();
    assert!(audit.as_array().unwrap().iter().all(|r| r["agent"] != "mcp:t"), "{audit}");
}

/// `sandbox`, `network` and `pass_env` are for started servers: on a `url` server they are
/// refused, saying it is not sandboxed by strata.
#[test]
fn sandbox_fields_on_an_http_server_are_bad_input() {
    let s = Scratch::new();
    s.write(
        "team.toml",
        "[[mcp_servers]]\nname = \"web\"\nurl = \"http://127.0.0.1:9/mcp\"\nsandbox = false\n",
    );
    s.write("plan.toml", "id = \"p\"\ngoal = \"g\"\n");
    s.strata(&RUN)
        .bad_input(&["team.toml:4:", "not a process strata starts, so strata does not sandbox it"]);
}

/// The processes whose command line holds `needle`, other than this test's.
fn processes_with(needle: &str) -> Vec<(u32, String)> {
    let mut found = Vec::new();
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        let Ok(pid) = entry.file_name().to_string_lossy().parse::<u32>() else { continue };
        if pid == std::process::id() {
            continue;
        }
        let Ok(cmdline) = std::fs::read(entry.path().join("cmdline")) else { continue };
        let cmdline = String::from_utf8_lossy(&cmdline).replace('\0', " ");
        if cmdline.contains(needle) {
            found.push((pid, cmdline));
        }
    }
    found
}

/// Attack (issue 30, item 6): `kill -9` of a `strata run` whose MCP server is busy in a call;
/// within a few seconds no process of the server is left (none orphaned to pid 1), with the
/// sandbox and with the opt-out.
#[test]
fn a_killed_run_leaves_no_mcp_server_behind() {
    for extra in ["", "sandbox = false"] {
        let s = Scratch::new();
        test_server_team(
            &s,
            extra,
            "append_then_sleep",
            "{ path = \"started.txt\", line = \"in\", seconds = 60 }",
        );
        let script = std::fs::canonicalize(s.path("server.py")).unwrap();
        let scratch = script.parent().unwrap().display().to_string();
        let mut run = s.spawn(&RUN);
        wait_for("the MCP tool to start", || {
            assert!(!run.exited(), "strata exited before the tool ran: {}", run.stderr_so_far());
            s.path("started.txt").exists()
        });
        assert!(!processes_with("server.py").is_empty(), "{extra}: the server runs");
        assert_eq!(run.kill().status.code(), None, "killed by a signal");
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
        loop {
            // This run's servers: a sandboxed one's launcher names the run's directories (under
            // the scratch directory, unique to this test) on its command line; one outside the
            // sandbox works in the run's workspace, under it too. (A sandboxed process's working
            // directory as seen from here can be `/`: it does not tell whose it is.)
            let left: Vec<(u32, String)> = processes_with("server.py")
                .into_iter()
                .filter(|(pid, cmdline)| {
                    cmdline.contains(&scratch)
                        || std::fs::read_link(format!("/proc/{pid}/cwd"))
                            .is_ok_and(|cwd| cwd.starts_with(&scratch))
                })
                .collect();
            if left.is_empty() {
                break;
            }
            assert!(
                std::time::Instant::now() < deadline,
                "{extra}: MCP server processes outlived the killed run: {left:?}"
            );
            std::thread::sleep(std::time::Duration::from_millis(100));
        }
    }
}

/// Attack (issue 30, item 5): Ctrl-C (SIGINT) of a `strata run` in its own workspace whose
/// sandboxed MCP server is busy in a call. Once: strata finishes the running heartbeat (the
/// call), stores its state and exits 130. Twice: it stops at once. Either way no process of
/// the server is left a few seconds after strata exited.
#[test]
fn ctrl_c_of_a_run_leaves_no_mcp_server_behind() {
    for (seconds, interrupts) in [(2, 1), (60, 2)] {
        let s = Scratch::new();
        own_workspace_team(
            &s,
            "",
            "append_then_sleep",
            &format!("{{ path = \"started.txt\", line = \"in\", seconds = {seconds} }}"),
        );
        let script = std::fs::canonicalize(s.path("server.py")).unwrap().display().to_string();
        let mut run = s.spawn(&RUN_OWN_WORKSPACE);
        wait_for("the MCP tool to start", || {
            assert!(!run.exited(), "strata exited before the tool ran: {}", run.stderr_so_far());
            s.path("D/r/workspace/started.txt").exists()
        });
        assert!(!processes_with(&script).is_empty(), "the server runs");
        for _ in 0..interrupts {
            let pid = run.pid().to_string();
            let sent = std::process::Command::new("kill").args(["-INT", &pid]).status().unwrap();
            assert!(sent.success(), "kill -INT failed");
            wait_for("strata to say it is interrupting", || {
                run.stderr_so_far().contains("interrupted") || run.exited()
            });
        }
        let out = run.finish();
        assert_eq!(out.status.code(), Some(130), "Ctrl-C x{interrupts}: {}", out.stderr);
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
        loop {
            let left = processes_with(&script);
            if left.is_empty() {
                break;
            }
            assert!(
                std::time::Instant::now() < deadline,
                "Ctrl-C x{interrupts}: MCP server processes outlived the run: {left:?}"
            );
            std::thread::sleep(std::time::Duration::from_millis(100));
        }
    }
}

/// The team of [`test_server_team`] with `[timeouts] tool_ms = 1000`.
fn with_tool_ms(s: &Scratch) {
    let team = s.read("team.toml");
    s.write("team.toml", &format!("[timeouts]\ntool_ms = 1000\n\n{team}"));
}

/// `run`'s audit records of `event`.
fn audited(s: &Scratch, run: &str, event: &str) -> Vec<serde_json::Value> {
    let audit = s.strata(&["inspect", run, "audit", "--data", "D", "--json"]).code(0).json();
    audit.as_array().unwrap().iter().filter(|r| r["event"]["event"] == event).cloned().collect()
}

/// Issue 31, item 4: a slow MCP tool that is neither read-only nor idempotent, past the
/// team's `tool_ms`, runs exactly once: its request is cancelled through the protocol (the
/// server sees `notifications/cancelled`), its outcome is recorded and audited as unknown,
/// and the step goes to the lead as interrupted (exit 1, needing a decision), never sent again
/// by a retry, a reassignment or the heartbeat.
#[test]
fn a_slow_side_effecting_mcp_tool_past_tool_ms_runs_once_and_its_outcome_is_unknown() {
    let s = Scratch::new();
    test_server_team(
        &s,
        "",
        "effect_then_sleep",
        "{ path = \"effects.txt\", line = \"ran\", seconds = 60 }",
    );
    with_tool_ms(&s);
    let out = s.strata(&RUN);
    out.code(1);
    let printed = format!("{}{}", out.stdout, out.stderr);
    assert!(printed.contains("mcp__t__effect_then_sleep"), "{printed}");
    wait_for("the server to note the cancellation", || s.path("effects.txt.cancelled").exists());
    assert_eq!(s.read("effects.txt"), "ran\n", "the side effect ran exactly once");
    assert_eq!(s.read("effects.txt.cancelled"), "cancelled\n", "the server got the cancel");
    let unknown = audited(&s, "r", "tool_outcome_unknown");
    assert_eq!(unknown.len(), 1, "{unknown:?}");
    assert_eq!(unknown[0]["event"]["tool"], "mcp__t__effect_then_sleep");
    assert_eq!(unknown[0]["event"]["cancelled"], true, "{}", unknown[0]);
    let calls: Vec<_> = audited(&s, "r", "tool_call")
        .into_iter()
        .filter(|r| r["event"]["tool"] == "mcp__t__effect_then_sleep")
        .collect();
    assert_eq!(calls.len(), 1, "one call, never sent again: {calls:?}");
    let summary = calls[0]["event"]["summary"].as_str().unwrap();
    assert!(summary.contains("may or may not have had its effect"), "{summary}");
    s.strata(&["inspect", "r", "audit", "--data", "D"]).code(0).stdout_has(&[
        "OUTCOME UNKNOWN: mcp__t__effect_then_sleep",
        "not sent again, needs a decision",
    ]);
    // A resume does not send it again either: the unknown outcome is recorded.
    let _ = s.strata(&["resume", "r", "--data", "D", "--quiet"]);
    assert_eq!(s.read("effects.txt"), "ran\n", "not sent again on resume");
    let verify = s.strata(&["verify", "r", "--data", "D", "--json"]).code(0).json();
    assert_eq!(verify["ok"], true, "{verify}");
}

/// A read-only MCP tool past `tool_ms` is a plain time-out: it may be sent again.
#[test]
fn a_slow_read_only_mcp_tool_past_tool_ms_is_a_timeout() {
    let s = Scratch::new();
    test_server_team(&s, "", "slow", "{ seconds = 60 }");
    with_tool_ms(&s);
    let out = s.strata(&RUN);
    assert_ne!(out.status.code(), Some(0), "{}{}", out.stdout, out.stderr);
    assert!(audited(&s, "r", "tool_outcome_unknown").is_empty());
    let calls = audited(&s, "r", "tool_call");
    assert!(!calls.is_empty());
    assert!(calls[0]["event"]["summary"].as_str().unwrap().contains("timed out after 1000 ms"));
}

/// The peak resident memory (`VmHWM`) of the process `pid`, in bytes.
fn peak_rss(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let line = status.lines().find(|l| l.starts_with("VmHWM:")).unwrap();
    line.split_whitespace().nth(1).unwrap().parse::<u64>().unwrap() * 1024
}

/// A run whose first step's MCP tool answers `bytes` bytes of text and whose second step
/// (after it) holds the run while strata's peak memory is read; the peak and the run's end.
fn peak_of_a_run_answering(s: &Scratch, bytes: u64) -> (u64, crate::support::Out) {
    s.write(
        "server.py",
        &std::fs::read_to_string(repo("crates/agent-mcp/tests/it/server.py")).unwrap(),
    );
    s.write(
        "team.toml",
        &format!(
            "[[mcp_servers]]\nname = \"t\"\ncommand = {:?}\nargs = [\"server.py\"]\n\n\
             [[top]]\nid = \"top-a\"\npower_type = \"power_a\"\n\n\
             [[mid]]\nid = \"lead\"\ndomain = \"d\"\nsupervisor = \"top-a\"\n\n\
             [[bottom]]\nid = \"e\"\nsupervisor = \"lead\"\n\
             tools = [\"mcp__t__huge\", \"mcp__t__append_then_sleep\"]\n",
            python(),
        ),
    );
    s.write(
        "plan.toml",
        &format!(
            "id = \"p\"\ngoal = \"g\"\n\n\
             [[steps]]\nid = \"big\"\nagent = \"e\"\ntool = \"mcp__t__huge\"\n\
             args = {{ bytes = {bytes} }}\n\n\
             [[steps]]\nid = \"hold\"\nagent = \"e\"\ntool = \"mcp__t__append_then_sleep\"\n\
             args = {{ path = \"held.txt\", line = \"in\", seconds = 2 }}\nafter = [\"big\"]\n"
        ),
    );
    let mut run = s.spawn(&RUN);
    wait_for("the second step to start", || {
        assert!(!run.exited(), "strata exited early: {}", run.stderr_so_far());
        s.path("held.txt").exists()
    });
    let peak = peak_rss(run.pid());
    (peak, run.finish())
}

/// Issue 31, item 4: a 200 MiB MCP answer keeps strata's peak memory bounded (within a
/// generous bound derived from the message limit above a run answering 1 KB, far below the
/// answer's size), the step's output is capped like a `shell` stream, and the whole answer is
/// kept as a blob in the run's `mcp-results/`, named by its SHA-256.
#[test]
fn a_huge_mcp_answer_is_capped_kept_as_a_blob_and_memory_stays_bounded() {
    let small = Scratch::new();
    let (baseline, out) = peak_of_a_run_answering(&small, 1_000);
    out.code(0);

    let s = Scratch::new();
    let size: u64 = 200 * 1024 * 1024;
    let (peak, out) = peak_of_a_run_answering(&s, size);
    out.code(0);
    let bound = baseline + 16 * agent_mcp::MAX_MESSAGE_BYTES as u64;
    assert!(
        peak < bound,
        "strata's peak was {} MiB with a {} MiB answer (baseline {} MiB, bound {} MiB)",
        peak >> 20,
        size >> 20,
        baseline >> 20,
        bound >> 20
    );
    let calls: Vec<_> = audited(&s, "r", "tool_call")
        .into_iter()
        .filter(|r| r["event"]["tool"] == "mcp__t__huge")
        .collect();
    assert_eq!(calls.len(), 1, "{calls:?}");
    let summary = calls[0]["event"]["summary"].as_str().unwrap();
    assert!(summary.starts_with("0123456789abcdef"), "{summary:.200}");
    let kept: Vec<_> = std::fs::read_dir(s.path("D/r/mcp-results"))
        .unwrap()
        .flatten()
        .map(|e| (e.file_name().to_string_lossy().into_owned(), e.metadata().unwrap().len()))
        .collect();
    assert_eq!(kept.len(), 1, "{kept:?}");
    assert_eq!(kept[0].0.len(), 64, "named by its SHA-256: {kept:?}");
    assert!(kept[0].1 > size, "the whole answer is kept: {kept:?}");
}
