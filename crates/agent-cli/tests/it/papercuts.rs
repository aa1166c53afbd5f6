//! Papercuts: output closed early ends `strata` quietly (exit 141, no panic), `inspect
//! messages` lists every message of a run with its acknowledgement, the summary shows a tool's
//! output as lines cut with a count, and each run has its own workspace unless `--workspace`
//! chooses one.

use std::path::Path;
use std::process::Stdio;

use agent_state::{Address, AgentId, Message, MessageId, MessageKind, Timestamp};
use message_bus::{MessageBus, SledBus};
use run_store::{Durability, RunStore};

use crate::support::{FAST, Out, Scratch, finished_run, run_id_of};

/// `strata ARGS` with its standard output a pipe whose reader is already gone, as after
/// `strata ... | head` once `head` has its lines: every write fails with `EPIPE`.
fn with_closed_stdout(s: &Scratch, args: &[&str]) -> Out {
    let (reader, writer) = std::io::pipe().unwrap();
    drop(reader);
    let mut command = s.command(args);
    command.stdout(Stdio::from(writer));
    Out::of(args, &mut command)
}

/// Asserts `out` stopped quietly because its reader had gone: exit 141, nothing on stderr.
#[track_caller]
fn quiet_stop(out: &Out) {
    assert!(!out.stderr.contains("panicked"), "`strata {}` panicked:\n{}", out.args, out.stderr);
    out.code(141);
    assert_eq!(out.stderr, "", "`strata {}` complained about the closed output", out.args);
}

#[test]
fn closed_output_ends_every_command_quietly() {
    let s = Scratch::with_example();
    finished_run(&s);
    for args in [
        &["inspect", "r", "audit", "--data", "D"][..],
        &["inspect", "r", "audit", "--data", "D", "--json"],
        &["inspect", "r", "messages", "--data", "D"],
        &["inspect", "r", "--data", "D"],
        &["runs", "--data", "D"],
        &["verify", "r", "--data", "D"],
    ] {
        quiet_stop(&with_closed_stdout(&s, args));
    }

    // A run whose output is closed stops like an interrupted one: the run is kept and resumes.
    let run = [
        "run",
        "plan.toml",
        "--team",
        "team.toml",
        "--data",
        "D",
        "--workspace",
        "W",
        "--run-id",
        "p",
        FAST[0],
        FAST[1],
    ];
    quiet_stop(&with_closed_stdout(&s, &run));
    assert!(s.path("D/p/run.json").is_file());
    s.strata(&["resume", "p", "--data", "D", "--quiet"])
        .code(0)
        .stdout_has(&["task `hello` succeeded"]);
    assert_eq!(s.read("W/hello.txt"), "hello, strata\n");

    // And the text that fits in the pipe is still printed whole when nobody closes it.
    s.strata(&["inspect", "r", "audit", "--data", "D"]).code(0).stdout_has(&["tool write_file ok"]);
}

/// Sends one message to `top-a` in the stored run at `run`, as a message still waiting in an
/// inbox when a run stops, and closes the run cleanly.
fn leave_a_message(run: &Path) {
    let store = RunStore::open(run, Durability::Synced).unwrap();
    let bus = SledBus::open(&store).unwrap();
    let message = Message::new(
        MessageId::from_u128(u128::MAX),
        Address::System,
        AgentId::new("top-a"),
        MessageKind::StatusQuery,
        serde_json::json!("still there?"),
        Timestamp(0),
    );
    let runtime = tokio::runtime::Builder::new_current_thread().build().unwrap();
    runtime.block_on(async {
        bus.register(&AgentId::new("top-a")).await.unwrap();
        assert_eq!(bus.send(message).await.unwrap(), 1);
    });
    drop(bus);
    store.commit_blocking().unwrap();
    drop(store);
    // The store seals the run as it closes; wait until it has let go of the run.
    std::fs::File::open(run.join(run_store::RUN_MARKER)).unwrap().lock().unwrap();
}

#[test]
fn inspect_messages_shows_every_message_with_its_acknowledgement() {
    let s = Scratch::with_example();
    let run = finished_run(&s);
    let listed = s.strata(&["inspect", "r", "messages", "--data", "D", "--json"]).code(0).json();
    let listed = listed.as_array().unwrap().clone();
    assert!(listed.len() > 9, "every message of the run, not only those left: {listed:?}");
    // Every assignment was acknowledged; a warning sent as the run closed may be left unread.
    let acked = listed.iter().filter(|m| m["acknowledged"] == true).count();
    assert!(
        listed
            .iter()
            .filter(|m| m["message"]["kind"] == "task_assign")
            .all(|m| m["acknowledged"] == true),
        "{listed:?}"
    );
    assert!(acked > 9, "{listed:?}");
    let text = s.strata(&["inspect", "r", "messages", "--data", "D"]);
    text.code(0);
    let left = listed.len() - acked;
    text.stdout_has(&[&format!(
        "{} messages, {acked} acknowledged, {left} not acknowledged",
        listed.len()
    )]);

    leave_a_message(&run);
    let after = s.strata(&["inspect", "r", "messages", "--data", "D", "--json"]).code(0).json();
    let after = after.as_array().unwrap();
    assert_eq!(after.len(), listed.len() + 1, "{after:?}");
    assert_eq!(&after[..listed.len()], &listed[..], "the acknowledged ones are unchanged");
    let waiting = &after[listed.len()];
    assert_eq!(waiting["acknowledged"], false, "{waiting}");
    assert_eq!(waiting["inbox"], "top-a");
    assert_eq!(waiting["message"]["content"], "still there?");
    let text = s.strata(&["inspect", "r", "messages", "--data", "D"]);
    text.code(0);
    let line = text.stdout.lines().find(|l| l.contains("still there?")).unwrap();
    assert!(line.contains(" NO "), "{line}");
    text.stdout_has(&[&format!("{acked} acknowledged, {} not acknowledged", left + 1)]);
}

#[test]
fn the_summary_shows_a_tools_output_as_lines_with_a_count_of_the_rest() {
    let s = Scratch::with_example();
    s.write(
        "lines.toml",
        "id = \"lines\"\ngoal = \"count\"\n\n[[steps]]\nid = \"count\"\ndomain = \"build\"\n\
         tool = \"shell\"\nargs = { command = \"seq 101 120\" }\n",
    );
    let run = s.strata(&[
        "run",
        "lines.toml",
        "--team",
        "team.toml",
        "--data",
        "D",
        "--workspace",
        "W",
        FAST[0],
        FAST[1],
        "--quiet",
    ]);
    run.code(0);
    let summary = &run.stdout[run.stdout.find("task `lines` succeeded").unwrap()..];
    let shown: Vec<&str> = summary.lines().skip(1).take(7).map(str::trim).collect();
    assert!(shown[0].starts_with("count") && shown[0].ends_with(" 101"), "{summary}");
    assert_eq!(shown[1..5], ["102", "103", "104", "105"], "{summary}");
    assert_eq!(shown[5], "… 15 more lines", "{summary}");
    assert!(shown[6].starts_with("top layer:"), "{summary}");
    assert!(!summary.contains("\n120"), "{summary}");
}

#[test]
fn each_run_has_its_own_workspace_unless_one_is_chosen() {
    let s = Scratch::with_example();
    let mut ids = Vec::new();
    for id in ["a", "b"] {
        let run = s.strata(&["run", "plan.toml", "--data", "D", "--run-id", id, FAST[0], FAST[1]]);
        run.code(0);
        let own = std::fs::canonicalize(s.path(&format!("D/{id}/workspace"))).unwrap();
        run.stdout_has(&[&format!("workspace: {}", own.display())]);
        assert_eq!(
            std::fs::read_to_string(own.join("hello.txt")).unwrap(),
            "hello, strata\n",
            "run {id} wrote into its own workspace"
        );
        let info: serde_json::Value =
            serde_json::from_str(&s.read(&format!("D/{id}/run.json"))).expect("run.json is JSON");
        assert_eq!(info["workspace"], own.display().to_string());
        ids.push(run_id_of(&run));
    }
    assert_eq!(ids, ["a", "b"]);
    assert!(!s.path("workspace").exists(), "nothing goes to ./workspace any more");

    // `strata exec` too.
    s.strata(&[
        "exec",
        "writer_agent",
        "write a note",
        "--input",
        "path=note.md",
        "--input",
        "content=hi",
        "--data",
        "D",
        "--run-id",
        "e",
        FAST[0],
        FAST[1],
        "--quiet",
    ])
    .code(0);
    assert_eq!(s.read("D/e/workspace/note.md"), "hi");

    // `--workspace` shares one between runs.
    for id in ["c", "d"] {
        let args = ["run", "plan.toml", "--data", "D", "--workspace", "shared", "--run-id", id];
        let mut all = args.to_vec();
        all.extend_from_slice(&FAST);
        s.strata(&all).code(0);
        assert!(!s.path(&format!("D/{id}/workspace")).exists());
    }
    assert_eq!(s.read("shared/hello.txt"), "hello, strata\n");
}
