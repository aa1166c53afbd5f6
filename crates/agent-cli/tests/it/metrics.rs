//! Liveness numbers are kept (issue #31 item 7): a run whose agents sit idle for many
//! heartbeats (waiting for a human to sign its plan) shows the same heartbeat counts and scores
//! in the summary `strata run` prints, in `strata inspect RUN metrics` and in the dashboard's
//! JSON; killed with SIGKILL and resumed, the counts go on from where they were stored and the
//! three agree again.

use std::collections::BTreeMap;

use serde_json::Value;

use crate::serve::{free_port, get_json, serve};
use crate::support::*;

/// A one-step plan that waits for alice to sign it.
const PLAN: &str = r#"
id = "signed"
goal = "write a note once a human signs"

[[steps]]
id = "note"
domain = "docs"
tool = "write_file"
args = { path = "note.txt", content = "signed\n" }
"#;

/// An agent's heartbeats answered and missed, and its score to one decimal.
type Counts = (u64, u64, String);

fn scratch() -> Scratch {
    let s = Scratch::with_example();
    let team = s.read("team.toml");
    s.write("team.toml", &format!("{team}\n[approvals]\nhumans = [\"alice\"]\nplans = true\n"));
    s.write("plan.toml", PLAN);
    s
}

/// `strata run` of the plan as run `id`, printing its summary (not `--quiet`).
fn start(s: &Scratch, id: &str) -> Running {
    s.spawn(&[
        "run",
        "plan.toml",
        "--team",
        "team.toml",
        "--data",
        "D",
        "--run-id",
        id,
        FAST[0],
        FAST[1],
        "--no-sync",
    ])
}

/// The agent table of a run summary: `agent layer status done fail beats missed retries score`.
fn summary_counts(stdout: &str) -> BTreeMap<String, Counts> {
    let mut lines = stdout.lines().skip_while(|l| !l.starts_with("agent ")).skip(1);
    let mut table = BTreeMap::new();
    for line in lines.by_ref().take_while(|l| !l.trim().is_empty()) {
        let cols: Vec<&str> = line.split_whitespace().collect();
        assert_eq!(cols.len(), 9, "a summary row: {line}\n{stdout}");
        table.insert(
            cols[0].to_owned(),
            (cols[5].parse().unwrap(), cols[6].parse().unwrap(), cols[8].to_owned()),
        );
    }
    assert!(!table.is_empty(), "no agent table in the summary:\n{stdout}");
    table
}

/// The counts of a list of stored metrics (`inspect RUN metrics --json`, the dashboard's
/// `metrics`).
fn json_counts(list: &Value) -> BTreeMap<String, Counts> {
    list.as_array()
        .unwrap_or_else(|| panic!("not a list of metrics: {list}"))
        .iter()
        .map(|a| {
            let m = &a["metrics"];
            (
                a["agent"].as_str().unwrap().to_owned(),
                (
                    m["heartbeats_responded"].as_u64().unwrap(),
                    m["heartbeats_missed"].as_u64().unwrap(),
                    format!("{:.1}", a["score"].as_f64().unwrap()),
                ),
            )
        })
        .collect()
}

fn inspected(s: &Scratch, id: &str) -> BTreeMap<String, Counts> {
    json_counts(&s.strata(&["inspect", id, "metrics", "--data", "D", "--json"]).code(0).json())
}

/// The text table of `inspect RUN metrics`: `agent done fail msgs beats missed retries score`.
fn inspected_text(s: &Scratch, id: &str) -> BTreeMap<String, Counts> {
    let out = s.strata(&["inspect", id, "metrics", "--data", "D"]).code(0).stdout.clone();
    out.lines()
        .skip(1)
        .map(|line| {
            let cols: Vec<&str> = line.split_whitespace().collect();
            assert_eq!(cols.len(), 8, "{line}");
            (
                cols[0].to_owned(),
                (cols[4].parse().unwrap(), cols[5].parse().unwrap(), cols[7].to_owned()),
            )
        })
        .collect()
}

/// What the dashboard shows of run `id`, read from a `strata serve` of the data directory.
fn dashboard(s: &Scratch, id: &str) -> BTreeMap<String, Counts> {
    let port = free_port();
    let server = serve(s, &format!("127.0.0.1:{port}"), &["--token", "t0k"]);
    let snap = get_json(port, &format!("/api/runs/{id}"), &[], 200);
    drop(server);
    json_counts(&snap["metrics"])
}

/// Waits until run `id` (live) has stored at least `beats` idle answers for its bottom agent.
fn wait_for_beats(s: &Scratch, run: &mut Running, id: &str, beats: u64) {
    wait_for("idle heartbeat answers to be stored", || {
        assert!(!run.exited(), "the run ended first:\n{}", run.stderr_so_far());
        let out = s.strata(&["inspect", id, "metrics", "--data", "D", "--json"]);
        if out.status.code() != Some(0) {
            return false; // the copy of a live run may be caught mid-write
        }
        json_counts(&out.json()).get("bottom-d1").is_some_and(|c| c.0 >= beats)
    });
}

fn pending(s: &Scratch, run: &mut Running, id: &str) -> String {
    pending_decision(s, run, id, "the plan to wait for a human", |d| d["status"] == "pending")
}

#[test]
fn the_summary_inspect_and_the_dashboard_show_the_same_stored_heartbeat_counts() {
    let s = scratch();
    let mut run = start(&s, "m1");
    let decision = pending(&s, &mut run, "m1");
    // The agents sit idle, answering each heartbeat through the scheduler's sweep.
    wait_for_beats(&s, &mut run, "m1", 10);
    s.strata(&["approve", "m1", &decision, "--as", "alice", "--data", "D"]).code(0);
    let out = run.finish();
    out.code(0);
    let summary = summary_counts(&out.stdout);
    assert!(summary["bottom-d1"].0 >= 10, "{summary:?}");
    assert_eq!(inspected(&s, "m1"), summary, "inspect --json and the summary");
    assert_eq!(inspected_text(&s, "m1"), summary, "inspect and the summary");
    assert_eq!(dashboard(&s, "m1"), summary, "the dashboard and the summary");
}

#[test]
fn killed_and_resumed_the_counts_go_on_and_the_three_views_agree() {
    let s = scratch();
    let mut run = start(&s, "m2");
    let decision = pending(&s, &mut run, "m2");
    wait_for_beats(&s, &mut run, "m2", 10);
    assert_eq!(run.kill().status.code(), None, "killed by a signal");
    let before = inspected(&s, "m2");
    assert!(before["bottom-d1"].0 >= 10, "{before:?}");
    assert_eq!(dashboard(&s, "m2"), before, "the dashboard of the killed run and inspect");

    // Queued for the resumed run, which signs it and finishes.
    s.strata(&["approve", "m2", &decision, "--as", "alice", "--data", "D"]).code(0);
    let out = s.strata(&["resume", "m2", "--data", "D", "--no-sync"]);
    out.code(0);
    let summary = summary_counts(&out.stdout);
    for (agent, (beats, missed, _)) in &before {
        let (now_beats, now_missed, _) = &summary[agent];
        assert!(now_beats >= beats && now_missed >= missed, "{agent}: {before:?} then {summary:?}");
    }
    assert!(summary["bottom-d1"].0 > before["bottom-d1"].0, "{before:?} then {summary:?}");
    assert_eq!(inspected(&s, "m2"), summary, "inspect --json and the summary after resume");
    assert_eq!(inspected_text(&s, "m2"), summary, "inspect and the summary after resume");
    assert_eq!(dashboard(&s, "m2"), summary, "the dashboard and the summary after resume");
}
