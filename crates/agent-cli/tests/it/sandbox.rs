//! The command sandbox from the command line: a run whose commands cannot be sandboxed is
//! refused unless `--unsandboxed` is given, which the run then records and `inspect` shows; a
//! sandboxed run's commands do not see the data directory.

use std::path::Path;
use std::process::Command;

use serde_json::Value;
use tempfile::TempDir;

use crate::support::{FAST, Out, Scratch, run_id_of};

/// A `PATH` with every program of `/usr/bin` and `/bin` but `bwrap`: a machine without
/// bubblewrap.
fn path_without_bwrap() -> TempDir {
    let dir = tempfile::tempdir().unwrap();
    for bin in ["/usr/bin", "/bin", "/usr/sbin", "/sbin"] {
        let Ok(entries) = std::fs::read_dir(bin) else { continue };
        for entry in entries.flatten() {
            let name = entry.file_name();
            let link = dir.path().join(&name);
            if name == "bwrap" || link.exists() {
                continue;
            }
            std::os::unix::fs::symlink(entry.path(), link).unwrap();
        }
    }
    assert!(!dir.path().join("bwrap").exists());
    dir
}

/// `strata ARGS` in `s` with `path` as its `PATH`.
fn strata_with_path(s: &Scratch, path: &Path, args: &[&str]) -> Out {
    let mut command: Command = s.command(args);
    command.env("PATH", path);
    Out::of(args, &mut command)
}

fn run_json(s: &Scratch, data: &str, id: &str) -> Value {
    serde_json::from_str(&s.read(&format!("{data}/{id}/run.json"))).unwrap()
}

#[test]
fn a_run_without_a_usable_sandbox_is_refused_and_writes_nothing() {
    let s = Scratch::with_example();
    let path = path_without_bwrap();
    let args = ["run", "plan.toml", "--team", "team.toml", "--data", "D", "--workspace", "W"];
    let out = strata_with_path(&s, path.path(), &args);
    out.bad_input(&["bwrap", "install", "bubblewrap", "--unsandboxed"]);
    let runs = std::fs::read_dir(s.path("D")).map(|d| d.count()).unwrap_or(0);
    assert_eq!(runs, 0, "a refused run left something in the data directory");
    assert!(!s.path("W/hello.txt").exists(), "a refused run ran a step");
}

#[test]
fn unsandboxed_runs_record_it_and_inspect_shows_it() {
    let s = Scratch::with_example();
    let path = path_without_bwrap();
    let mut args =
        vec!["run", "plan.toml", "--team", "team.toml", "--data", "D", "--workspace", "W"];
    args.extend([FAST[0], FAST[1], "--quiet", "--unsandboxed"]);
    let out = strata_with_path(&s, path.path(), &args);
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
    // The data directory holds this run on the host; the command saw it empty, and no
    // password hashes.
    assert_eq!(std::fs::read_dir(s.path("D")).unwrap().count(), 1);
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
