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
    let team = replace_once(
        &team,
        "args = [\"examples/mcp/notes_server.py\"]",
        &format!("args = [{:?}]", repo("examples/mcp/notes_server.py")),
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
    let run = s.strata(&["run", "plan.toml", "--team", "team.toml", "--data", "D", "--quiet"]);
    run.bad_input(&["MCP server `notes` failed to start: cannot run `/nonexistent/strata-python`"]);
    assert!(!s.path("D").exists(), "a refused run writes nothing");
}

#[test]
fn a_listed_tool_the_server_does_not_offer_is_bad_input_at_its_name() {
    let s = Scratch::new();
    example(&s);
    let team = s.read("team.toml");
    s.write("team.toml", &team.replace("\"mcp__notes__count_words\", ", "\"mcp__notes__nope\", "));
    let run = s.strata(&["run", "plan.toml", "--team", "team.toml", "--data", "D", "--quiet"]);
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
            repo("crates/agent-mcp/tests/it/server.py"),
        ),
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
    let verify = s.strata(&["verify", "k", "--data", "D", "--json"]).code(0).json();
    assert_eq!(verify["ok"], true, "{verify}");
}
