//! Placed runs that would hang: a message to an agent no worker hosts yet waits for it (a
//! worker that arrives late takes the agent and the run succeeds; none arriving ends the run
//! with the typed delivery error and then the no-progress guard), a worker lost mid-task is
//! audited with the worker that took its agents, and two workers started at once with one id:
//! one runs, the others are refused with exit 2.
//!
//! Each test has a NATS server of its own (see `workers.rs`).

use std::time::Duration;

use crate::support::*;
use crate::workers::{Server, worker};

/// `strata run plan.toml --team team.toml` of the example on the workers of `url` as run `id`.
fn placed_run(s: &Scratch, url: &str, id: &str) -> Running {
    s.spawn(&[
        "run",
        "plan.toml",
        "--team",
        "team.toml",
        "--data",
        "D",
        "--workspace",
        "W",
        "--run-id",
        id,
        "--nats",
        url,
        "--heartbeat",
        "200ms",
        "--no-sync",
    ])
}

/// The audit records of run `id`, as `strata inspect ID audit --json` gives them.
fn audit(s: &Scratch, id: &str) -> Vec<serde_json::Value> {
    let audit = s.strata(&["inspect", id, "audit", "--data", "D", "--json"]).code(0).json();
    audit.as_array().unwrap().clone()
}

#[test]
fn a_message_to_an_agent_not_hosted_yet_waits_for_the_worker_that_takes_it() {
    let s = Scratch::with_example();
    let server = Server::start();
    let url = server.url();
    // Only the powers and leads are hosted: the lead's work for an executor has nowhere to go.
    let a = worker(&s, &url, "wa", &["--layer", "top,mid"]);
    let mut run = placed_run(&s, &url, "late");
    wait_for("worker A to host the leads", || {
        a.stdout_so_far().lines().any(|l| l.starts_with("run late: hosting") && l.contains("mid-"))
    });
    // The leads have sent (or are sending) their steps by now; the executors come later.
    std::thread::sleep(Duration::from_secs(2));
    assert!(!run.exited(), "the run ended before its executors were hosted");
    let b = worker(&s, &url, "wb", &["--layer", "bottom"]);
    let out = run.finish();
    out.code(0).stdout_has(&["task `hello` succeeded"]);
    assert!(b.stdout_so_far().contains("run late: hosting"), "{}", b.stdout_so_far());
    // No send was refused: every delivery waited for its recipient.
    let refused: Vec<_> = audit(&s, "late")
        .into_iter()
        .filter(|r| r.to_string().contains("no such agent is registered"))
        .collect();
    assert!(refused.is_empty(), "{refused:#?}");
}

#[test]
fn an_agent_no_worker_hosts_ends_the_run_with_the_delivery_error_and_no_progress() {
    let s = Scratch::with_example();
    // Stuck runs stop after 5 idle heartbeats (1 s), not 15.
    let team = s.read("team.toml");
    s.write("team.toml", &format!("{team}\n[guards]\nidle_heartbeats = 5\n"));
    let server = Server::start();
    let url = server.url();
    let a = worker(&s, &url, "wa", &["--layer", "top,mid"]);
    let out = placed_run(&s, &url, "nobody").finish();
    assert_eq!(
        out.status.code(),
        Some(1),
        "{}\n{}\nworker:\n{}\n{}",
        out.stdout,
        out.stderr,
        a.stdout_so_far(),
        a.stderr_so_far()
    );
    assert!(out.stdout.contains("no progress"), "{}\n{}", out.stdout, out.stderr);
    let records = audit(&s, "nobody");
    let waited = records.iter().any(|r| {
        let text = r.to_string();
        text.contains("no worker hosted it within") && text.contains("bottom-")
    });
    assert!(waited, "no delivery error was audited: {records:#?}");
    let stuck = records
        .iter()
        .any(|r| r["event"]["event"] == "stuck" && r.to_string().contains("no_progress"));
    assert!(stuck, "the guard's stop is not audited: {records:#?}");
}

#[test]
fn a_worker_killed_mid_task_is_audited_with_the_worker_that_took_its_agents() {
    let s = Scratch::new();
    let server = Server::start();
    let url = server.url();
    let gate = Gate(s.path("W/go"));
    let a = worker(&s, &url, "wa", &["--layer", "top,mid"]);
    let b = worker(&s, &url, "wb", &["--layer", "bottom"]);
    let run = crate::workers::gated_run(&s, &url, "lost");
    let c = worker(&s, &url, "wc", &["--layer", "top,mid"]);
    wait_for("worker C to join the run", || c.stdout_so_far().contains("run lost: joined"));
    a.kill();
    wait_for("worker C to take A's agents over", || {
        c.stdout_so_far().lines().any(|l| l.starts_with("run lost: hosting") && l.contains("top-a"))
    });
    // The coordinator says so in the run's audit, with who took each agent.
    wait_for("the coordinator to audit the lost worker", || {
        audit(&s, "lost").iter().any(|r| r["event"]["event"] == "worker_lost")
    });
    gate.open();
    run.finish().code(0).stdout_has(&["task `gated` succeeded"]);
    let records = audit(&s, "lost");
    let lost: Vec<_> = records.iter().filter(|r| r["event"]["event"] == "worker_lost").collect();
    assert_eq!(lost.len(), 1, "{lost:#?}");
    let event = &lost[0]["event"];
    assert_eq!(event["worker"], "wa", "{event}");
    for agent in ["top-a", "mid-build"] {
        assert!(
            event["agents"].as_array().unwrap().iter().any(|a| a == agent),
            "{agent} not among the lost agents: {event}"
        );
        assert_eq!(event["taken_by"][agent], "wc", "{event}");
    }
    // `strata inspect` shows it as a line.
    let text = s.strata(&["inspect", "lost", "audit", "--data", "D"]);
    text.code(0);
    assert!(
        text.stdout
            .lines()
            .any(|l| l.contains("WORKER LOST: worker wa")
                && l.contains("top-a taken over by worker wc")),
        "{}",
        text.stdout
    );
    drop(b);
}

#[test]
fn workers_started_at_once_with_one_id_run_one_and_refuse_the_others() {
    let s = Scratch::new();
    let server = Server::start();
    let url = server.url();
    std::fs::create_dir_all(s.path("W")).unwrap();
    let mut started: Vec<Running> = (0..4)
        .map(|_| s.spawn(&["worker", "--nats", &url, "--id", "twin", "--data", "D"]))
        .collect();
    wait_for("every worker to start or be refused", || {
        started.iter_mut().all(|w| w.exited() || w.stdout_so_far().contains("waiting for runs"))
    });
    // Let the refused ones finish writing, and the running one announce itself.
    std::thread::sleep(Duration::from_millis(1_500));
    let mut running = Vec::new();
    let mut refused = Vec::new();
    for mut w in started {
        if w.exited() { refused.push(w.finish()) } else { running.push(w) }
    }
    assert_eq!(running.len(), 1, "exactly one worker runs as `twin`");
    assert_eq!(refused.len(), 3);
    for out in refused {
        out.bad_input(&["a live worker named `twin`"]);
    }
}
