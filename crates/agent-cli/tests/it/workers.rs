//! Teams across processes: `strata worker` processes host the agents of a run that
//! `strata run --nats` places on them. Three workers run a team; the one hosting the powers and
//! leads is killed with SIGKILL mid-task and a standby takes its agents over, the task
//! completes, and its command ran once. Workers and runs of another Strata version are refused,
//! and a worker's bad input is refused before it announces itself. With `--otlp` on the
//! coordinator and the workers, a task's spans from the three processes form one trace.
//!
//! Each test has a NATS server of its own (`nats_store::TestServer`): the registry of workers is
//! one per server, so these workers never take the runs of other tests.

use agent_pool::placement::{PlacedRun, Registry, WorkerFilter, WorkerInfo};
use agent_state::RunId;
use nats_store::{NatsStore, TestServer};

use crate::support::*;

/// A server of the test's own, with JetStream in a temporary directory, and a client runtime
/// whose connection to the registry lives as long as the server.
pub(crate) struct Server {
    server: TestServer,
    _dir: tempfile::TempDir,
    runtime: tokio::runtime::Runtime,
    registry: Registry,
}

impl Server {
    pub(crate) fn start() -> Self {
        let dir = tempfile::tempdir().unwrap();
        let server = TestServer::with_jetstream(dir.path()).expect("cannot start nats-server");
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .enable_all()
            .build()
            .unwrap();
        let url = server.url();
        let registry = runtime.block_on(async {
            let store = NatsStore::connect(&url, "test").await.unwrap();
            Registry::open(&store).await.unwrap()
        });
        Self { server, _dir: dir, runtime, registry }
    }

    pub(crate) fn url(&self) -> String {
        self.server.url()
    }

    fn block_on<T>(&self, future: impl std::future::Future<Output = T>) -> T {
        self.runtime.block_on(future)
    }
}

/// `strata worker --nats URL --id ID --data D --workspace W` and `extra`.
pub(crate) fn worker(s: &Scratch, url: &str, id: &str, extra: &[&str]) -> Running {
    let workspace = s.path("W");
    std::fs::create_dir_all(&workspace).unwrap();
    let workspace = workspace.to_str().unwrap();
    let mut args =
        vec!["worker", "--nats", url, "--id", id, "--data", "D", "--workspace", workspace];
    args.extend_from_slice(extra);
    let running = s.spawn(&args);
    wait_for(&format!("worker {id} to start"), || {
        running.stdout_so_far().contains("waiting for runs")
    });
    running
}

/// The gated plan (see `GATED_PLAN`) run on the workers of `url` as run `id`, with the
/// workspace `W` and a 200 ms heartbeat, once its gate step has started on an executor.
pub(crate) fn gated_run(s: &Scratch, url: &str, id: &str) -> Running {
    s.write("gated.toml", GATED_PLAN);
    let mut run = s.spawn(&[
        "run",
        "gated.toml",
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
        "--quiet",
    ]);
    wait_for("the gate step to start on an executor", || {
        assert!(!run.exited(), "the run exited early:\n{}", run.stderr_so_far());
        s.path("W/waiting").exists()
    });
    run
}

/// The lines of `worker`'s output that say it hosts agents of `run` (a takeover may come in
/// several groups), joined; `None` if there are none.
fn hosting(worker: &Running, run: &str) -> Option<String> {
    let lines: Vec<String> = worker
        .stdout_so_far()
        .lines()
        .filter(|l| l.starts_with(&format!("run {run}: hosting")))
        .map(str::to_owned)
        .collect();
    (!lines.is_empty()).then(|| lines.join("\n"))
}

#[test]
fn three_workers_run_a_team_and_a_killed_workers_agents_are_taken_over() {
    let s = Scratch::new();
    let server = Server::start();
    let url = server.url();
    let gate = Gate(s.path("W/go"));
    // A hosts the powers and the leads, B the executors.
    let a = worker(&s, &url, "wa", &["--layer", "top,mid"]);
    let b = worker(&s, &url, "wb", &["--layer", "bottom"]);
    let run = gated_run(&s, &url, "dist");
    let a_hosts = hosting(&a, "dist").expect("worker A hosts agents");
    for agent in ["top-a", "top-b", "top-c", "mid-build", "mid-docs"] {
        assert!(a_hosts.contains(agent), "{agent} not on A: {a_hosts}");
    }
    let b_hosts = hosting(&b, "dist").expect("worker B hosts agents");
    assert!(b_hosts.contains("bottom-b1") && !b_hosts.contains("top-"), "{b_hosts}");
    let live = server.block_on(server.registry.workers()).unwrap();
    assert_eq!(live.len(), 2, "{live:?}");

    // C, with no filter, joins the run but finds nothing free: it hosts nothing yet.
    let c = worker(&s, &url, "wc", &[]);
    wait_for("worker C to join the run", || c.stdout_so_far().contains("run dist: joined"));
    assert_eq!(hosting(&c, "dist"), None, "C took agents held by live workers");

    // A dies mid-task; its leases expire and C takes its agents, restored from the server.
    let killed = a.kill();
    assert_eq!(killed.status.code(), None, "killed by a signal");
    wait_for("worker C to take A's agents over", || {
        hosting(&c, "dist").is_some_and(|l| l.contains("top-a") && l.contains("mid-build"))
    });
    gate.open();
    let out = run.finish();
    out.code(0).stdout_has(&["task `gated` succeeded"]);
    assert_eq!(s.read("W/count.txt"), "ran\n", "the gate's command ran exactly once");
    assert_eq!(s.read("W/done.txt"), "done\n");
    assert_eq!(audited_calls(&s, "dist", "shell"), 1, "the gate is audited once");
    let verify = s.strata(&["verify", "dist", "--data", "D", "--json"]).code(0).json();
    assert_eq!(verify["ok"], true, "{verify}");
    // The run is over: the workers shut its agents down and leave the registry without it.
    for w in [&b, &c] {
        wait_for("the workers to close the run", || w.stdout_so_far().contains("run dist: closed"));
    }
    assert!(
        server.block_on(server.registry.run(&RunId::parse("dist").unwrap())).unwrap().is_none(),
        "the closed run stays placed"
    );
    // The coordinator's view shows what the agents did on the workers.
    assert!(
        out.stdout.lines().any(|l| l.contains("bottom-b1") && l.contains("tool shell ok")),
        "the workers' records are not in the run's view:\n{}",
        out.stdout
    );
    let summary = out.stdout.clone();
    assert!(summary.contains("terminated"), "agents hosted elsewhere are summarised:\n{summary}");
}

#[test]
fn a_run_on_workers_carries_on_when_the_nats_server_is_killed_and_started_again() {
    let s = Scratch::new();
    let mut server = Server::start();
    let url = server.url();
    let gate = Gate(s.path("W/go"));
    let a = worker(&s, &url, "wa", &["--layer", "top,mid"]);
    let b = worker(&s, &url, "wb", &["--layer", "bottom"]);
    let run = gated_run(&s, &url, "restart");
    // The server dies mid-step, for longer than a lease lives: both workers stop their
    // agents; once it is back they take them again, restored from what it stored.
    server.server.kill();
    wait_for("the workers to stop their agents", || {
        a.stdout_so_far().contains("run restart: stopped hosting")
            && b.stdout_so_far().contains("run restart: stopped hosting")
    });
    server.server.restart().expect("nats-server restarts");
    wait_for("the workers to host the agents again", || {
        [&a, &b].iter().all(|w| {
            w.stdout_so_far().lines().filter(|l| l.starts_with("run restart: hosting")).count() >= 2
        })
    });
    gate.open();
    run.finish().code(0).stdout_has(&["task `gated` succeeded"]);
    assert_eq!(s.read("W/count.txt"), "ran\n", "the gate's command ran exactly once");
    assert_eq!(s.read("W/done.txt"), "done\n");
    for w in [&a, &b] {
        wait_for("the workers to close the run", || {
            w.stdout_so_far().contains("run restart: closed")
        });
    }
    let verify = s.strata(&["verify", "restart", "--data", "D", "--json"]).code(0).json();
    assert_eq!(verify["ok"], true, "{verify}");
}

#[test]
fn a_worker_stopped_with_ctrl_c_hands_its_agents_to_another_mid_task() {
    let s = Scratch::new();
    let server = Server::start();
    let url = server.url();
    let gate = Gate(s.path("W/go"));
    let mut a = worker(&s, &url, "wa", &[]);
    let run = gated_run(&s, &url, "handover");
    let b = worker(&s, &url, "wb", &[]);
    wait_for("worker B to join", || b.stdout_so_far().contains("run handover: joined"));
    assert_eq!(hosting(&b, "handover"), None, "B took agents A holds");
    // Ctrl-C: A stops its agents (resumable) and releases their leases; B takes all nine.
    let status = std::process::Command::new("kill").args(["-INT", &a.pid().to_string()]).status();
    assert!(status.unwrap().success());
    wait_for("worker A to stop", || a.exited());
    assert!(a.stdout_so_far().contains("worker wa: stopped"), "{}", a.stdout_so_far());
    wait_for("worker B to host every agent", || {
        hosting(&b, "handover").is_some_and(|l| {
            ["top-a", "top-b", "top-c", "mid-docs", "mid-build", "bottom-b1", "bottom-d2"]
                .iter()
                .all(|agent| l.contains(agent))
        })
    });
    gate.open();
    run.finish().code(0).stdout_has(&["task `gated` succeeded"]);
    assert_eq!(s.read("W/count.txt"), "ran\n", "the gate's command ran exactly once");
    assert_eq!(s.read("W/done.txt"), "done\n");
}

#[test]
fn a_local_run_on_nats_is_not_placed_on_the_live_workers() {
    let s = Scratch::with_example();
    let server = Server::start();
    let url = server.url();
    let w = worker(&s, &url, "w1", &[]);
    s.strata(&[
        "run",
        "plan.toml",
        "--team",
        "team.toml",
        "--data",
        "D",
        "--workspace",
        "W",
        "--run-id",
        "here",
        "--nats",
        &url,
        "--local",
        "--heartbeat",
        "50ms",
        "--no-sync",
        "--quiet",
    ])
    .code(0)
    .stdout_has(&["task `hello` succeeded"]);
    assert_eq!(
        server.block_on(server.registry.run(&RunId::parse("here").unwrap())).unwrap(),
        None,
        "the run was placed"
    );
    std::thread::sleep(std::time::Duration::from_millis(1_200));
    assert!(!w.stdout_so_far().contains("run here"), "{}", w.stdout_so_far());
    // `--local` needs `--nats`.
    let out = s.strata(&["run", "plan.toml", "--local"]);
    out.code(2);
    assert!(out.stderr.contains("--nats"), "{}", out.stderr);
}

#[test]
fn workers_and_runs_of_another_version_and_bad_worker_input_are_refused() {
    let s = Scratch::with_example();
    let server = Server::start();
    let url = server.url();
    let registry = &server.registry;

    // Only a worker of another version is live: the run is refused, nothing written.
    server
        .block_on(registry.announce(&WorkerInfo {
            id: "old".into(),
            version: "0.0.1".into(),
            filter: WorkerFilter::default(),
            capacity: 10,
            hosting: 0,
        }))
        .unwrap();
    s.strata(&[
        "run",
        "plan.toml",
        "--team",
        "team.toml",
        "--data",
        "D",
        "--run-id",
        "newer",
        "--nats",
        &url,
        "--quiet",
    ])
    .bad_input(&["--nats", "another Strata version", "`old` (Strata 0.0.1)"]);
    assert!(!s.path("D/newer").exists(), "a run directory was written");
    let streams = server.block_on(async {
        NatsStore::connect(&url, "newer").await.unwrap().streams().await.unwrap()
    });
    assert!(streams.is_empty(), "streams were made on the server: {streams:?}");

    // A run placed by another version: a worker refuses it, and takes none of its agents.
    let mut old_run = PlacedRun {
        run_id: RunId::parse("older").unwrap(),
        version: "0.0.1".into(),
        heartbeat_ms: 200,
        agents: vec![],
        closed: false,
        spec: serde_json::Value::Null,
    };
    old_run.agents.push(agent_pool::placement::PlacedAgent {
        id: agent_state::AgentId::new("top-a"),
        layer: agent_state::AgentLayer::Top,
    });
    server.block_on(registry.publish(&old_run)).unwrap();
    let w = worker(&s, &url, "w1", &[]);
    wait_for("the worker to refuse the old run", || {
        w.stderr_so_far().contains("run older: refused: it was placed by Strata 0.0.1")
    });
    assert!(!w.stdout_so_far().contains("run older: hosting"), "{}", w.stdout_so_far());

    // A second live worker with the same id, an unreachable server, no capacity, no such
    // layer, a bad id: refused with exit 2 before anything is announced.
    s.strata(&["worker", "--nats", &url, "--id", "w1", "--data", "D"])
        .bad_input(&["--nats", "a live worker named `w1`"]);
    s.strata(&["worker", "--nats", "nats://127.0.0.1:1", "--data", "D"])
        .bad_input(&["--nats nats://127.0.0.1:1", "cannot connect"]);
    s.strata(&["worker", "--nats", &url, "--capacity", "0", "--data", "D"])
        .bad_input(&["capacity must be at least 1"]);
    for (args, needle) in
        [(["--layer", "side"], "`side` is not a layer"), (["--id", "a b"], "cannot be a worker id")]
    {
        let out = s.strata(&["worker", "--nats", &url, args[0], args[1]]);
        out.code(2);
        assert!(out.stderr.contains(needle), "{}", out.stderr);
    }
    let live: Vec<String> =
        server.block_on(registry.workers()).unwrap().into_iter().map(|w| w.id).collect();
    assert!(!live.contains(&"w2".to_owned()) && live.contains(&"w1".to_owned()), "{live:?}");
}

/// Stops `worker` with Ctrl-C and waits for it to exit (it sends its telemetry first).
fn interrupt(mut worker: Running) {
    let status =
        std::process::Command::new("kill").args(["-INT", &worker.pid().to_string()]).status();
    assert!(status.unwrap().success());
    wait_for("the worker to stop", || worker.exited());
}

#[test]
fn a_placed_runs_telemetry_from_every_process_is_one_trace_per_task() {
    let s = Scratch::with_example();
    let server = Server::start();
    let url = server.url();
    let receiver = server.block_on(agent_telemetry::testing::Receiver::start()).unwrap();
    let otlp = receiver.endpoint();
    // The powers and leads on one worker, the executors on another, the task's span in the
    // coordinator: three processes.
    let a = worker(&s, &url, "wa", &["--layer", "top,mid", "--otlp", &otlp]);
    let b = worker(&s, &url, "wb", &["--layer", "bottom", "--otlp", &otlp]);
    s.strata(&[
        "run",
        "plan.toml",
        "--team",
        "team.toml",
        "--data",
        "D",
        "--workspace",
        "W",
        "--run-id",
        "traced",
        "--nats",
        &url,
        "--heartbeat",
        "200ms",
        "--no-sync",
        "--quiet",
        "--otlp",
        &otlp,
    ])
    .code(0)
    .stdout_has(&["task `hello` succeeded"]);
    interrupt(a);
    interrupt(b);

    let spans = receiver.spans();
    let task = spans.iter().find(|s| s.name == "strata.task").expect("the task's span");
    let shares: Vec<_> = spans.iter().filter(|s| s.name == "strata.share").collect();
    assert!(shares.len() >= 2, "each worker's share of the run: {shares:?}");
    assert!(shares.iter().all(|s| s.attr("run.id") == Some("traced")));
    let ids: std::collections::BTreeMap<&str, _> =
        spans.iter().map(|s| (s.span_id.as_str(), s)).collect();
    let tools: Vec<_> =
        spans.iter().filter(|s| s.attr("gen_ai.operation.name") == Some("execute_tool")).collect();
    assert!(tools.len() >= 4, "{tools:?}");
    for tool in tools {
        // Run on worker B, under a heartbeat of B's, delegated by a lead on worker A, whose
        // work came from a power on A, for the task the coordinator submitted.
        assert_eq!(tool.trace_id, task.trace_id, "{tool:?}");
        let mut at = tool;
        let mut agents = Vec::new();
        while let Some(parent) = ids.get(at.parent_span_id.as_str()) {
            agents.extend(parent.attr("agent.id").map(str::to_owned));
            at = parent;
        }
        assert_eq!(at.span_id, task.span_id, "the chain of {} stops at {at:?}", tool.name);
        assert!(agents.iter().any(|a| a.starts_with("bottom-")), "{agents:?}");
        assert!(agents.iter().any(|a| a.starts_with("mid-")), "{agents:?}");
        assert!(agents.iter().any(|a| a.starts_with("top-")), "{agents:?}");
    }
}
