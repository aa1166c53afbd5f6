//! Runs on NATS JetStream (`strata run --nats URL`), against the server at `STRATA_NATS_URL`
//! (default `nats://127.0.0.1:4222`): a run succeeds with its stores on the server, `verify`,
//! `inspect` and `approve` read them there, a run killed mid-step is resumed over a new
//! connection, and every bad `--nats` is refused with exit 2 before anything is written, here or
//! on the server. Each test's run id is a fresh namespace, deleted when the test ends (also when
//! it fails).

use nats_store::{NatsStore, TestNamespaces, TestServer, test_url};

use crate::support::*;

/// Runs `future` on a runtime of its own (the tests are synchronous, like the binary's users).
fn block_on<T>(future: impl std::future::Future<Output = T>) -> T {
    tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(future)
}

/// A fresh run id, which is the run's namespace on the server; everything under it is deleted
/// when dropped (nats-store's `TestNamespaces`, also when a test fails).
pub(crate) struct Namespace(
    String,
    #[allow(dead_code, reason = "deletes the namespace when dropped")] TestNamespaces,
);

impl Namespace {
    pub(crate) fn new() -> Self {
        let namespaces = TestNamespaces::new();
        Self(namespaces.make(), namespaces)
    }

    pub(crate) fn id(&self) -> &str {
        &self.0
    }

    /// The names of the streams (buckets included) of the namespace on the server.
    fn streams(&self) -> Vec<String> {
        block_on(async {
            NatsStore::connect(&test_url(), &self.0).await.unwrap().streams().await.unwrap()
        })
    }
}

/// `strata run PLAN --data D --workspace W --run-id ID --nats URL`, fast and quiet, with
/// `extra` arguments.
pub(crate) fn run_args<'a>(
    plan: &'a str,
    id: &'a str,
    url: &'a str,
    extra: &[&'a str],
) -> Vec<&'a str> {
    let mut args = vec![
        "run",
        plan,
        "--data",
        "D",
        "--workspace",
        "W",
        "--run-id",
        id,
        "--nats",
        url,
        // Workers live on the machine's server (a developer's) must not take these runs.
        "--local",
        FAST[0],
        FAST[1],
        "--no-sync",
        "--quiet",
    ];
    args.extend_from_slice(extra);
    args
}

#[test]
fn a_run_on_nats_succeeds_verifies_and_shows_its_records_from_the_server() {
    let s = Scratch::with_example();
    let ns = Namespace::new();
    let url = test_url();
    let id = ns.id();
    s.strata(&run_args("plan.toml", id, &url, &["--team", "team.toml"]))
        .code(0)
        .stdout_has(&["task `hello` succeeded"]);
    assert_eq!(s.read("W/hello.txt"), "hello, strata\n");
    let info: serde_json::Value =
        serde_json::from_str(&s.read(&format!("D/{id}/run.json"))).unwrap();
    assert_eq!(info["nats"], url.as_str(), "{info}");
    assert!(ns.streams().iter().any(|n| n.ends_with("_audit")), "{:?}", ns.streams());

    let verify = s.strata(&["verify", id, "--data", "D", "--json"]).code(0).json();
    assert_eq!(verify["ok"], true, "{verify}");
    let checks = verify["checks"].as_array().unwrap();
    let chain = checks.iter().find(|c| c["check"] == "audit chain").unwrap();
    assert!(chain["detail"].as_str().unwrap().ends_with("records, every hash links"), "{chain}");
    assert!(verify["protection"].as_str().unwrap().contains("no seal"), "{verify}");

    let audit = s.strata(&["inspect", id, "audit", "--data", "D", "--json"]).code(0).json();
    let records = audit.as_array().unwrap();
    assert!(records.len() > 20, "{audit}");
    let tools = records.iter().filter(|r| r["event"]["event"] == "tool_call").count();
    assert_eq!(tools, 4, "the four steps are audited once each");
    s.strata(&["inspect", id, "audit", "--data", "D"]).code(0).stdout_has(&["write_file ok"]);
    let tree = s.strata(&["inspect", id, "--data", "D", "--json"]).code(0).json();
    assert_eq!(tree["status"], "succeeded");
    assert_eq!(tree["audit_damage"].as_array().unwrap().len(), 0, "{tree}");
    let decisions = s.strata(&["inspect", id, "decisions", "--data", "D", "--json"]).code(0).json();
    let decisions = decisions.as_array().unwrap();
    assert_eq!(decisions.len(), 1, "{decisions:?}");
    let metrics = s.strata(&["inspect", id, "metrics", "--data", "D", "--json"]).code(0).json();
    assert_eq!(metrics.as_array().unwrap().len(), 9, "{metrics}");
    s.strata(&["inspect", id, "whiteboards", "--data", "D"]).code(0);
    // The server keeps no acknowledged message: `messages` says so instead of an empty list.
    s.strata(&["inspect", id, "messages", "--data", "D"])
        .code(0)
        .stdout_has(&["no history", "no message is waiting"]);
    let messages = s.strata(&["inspect", id, "messages", "--data", "D", "--json"]).code(0).json();
    assert_eq!(messages["history"], false, "{messages}");

    // An operator's request is checked against the decision on the server (not "no decision")
    // and, the run having ended, audited there.
    let decision = decisions[0]["id"].as_str().unwrap();
    s.strata(&["approve", id, decision, "--as", "alice", "--data", "D"])
        .bad_input(&["may not sign"]);
    let audit = s.strata(&["inspect", id, "audit", "--data", "D", "--json"]).code(0).json();
    let operator: Vec<_> =
        audit.as_array().unwrap().iter().filter(|r| r["event"]["event"] == "operator").collect();
    assert_eq!(operator.len(), 1, "{operator:?}");
    assert_eq!(operator[0]["event"]["outcome"], "refused");
    s.strata(&["verify", id, "--data", "D"]).code(0).stdout_has(&["the run verifies"]);

    // A second run with the same id on the server is refused, even from another data directory.
    let out =
        s.strata(&["run", "plan.toml", "--data", "D2", "--run-id", id, "--nats", &url, "--quiet"]);
    out.bad_input(&["--nats", "holds a run", &format!("strata resume {id}")]);
    assert!(!s.path("D2").exists(), "the refused run created its data directory");

    // A message left in an agent's inbox is shown with its kind, though the run that ended
    // unregistered its agents.
    block_on(async {
        use agent_state::{Address, AgentId, Message, MessageId, MessageKind, Timestamp};
        use message_bus::MessageBus as _;
        let store = NatsStore::connect(&url, id).await.unwrap();
        let bus = message_bus::NatsBus::open(&store).await.unwrap();
        let late = AgentId::new("late-reader");
        bus.register(&late).await.unwrap();
        let kind = MessageKind::Warning;
        let note = serde_json::json!({"why": "left over"});
        let message =
            Message::new(MessageId::from_u128(1), Address::System, &late, kind, note, Timestamp(0));
        bus.send(message).await.unwrap();
        bus.unregister(&late).await.unwrap();
    });
    s.strata(&["inspect", id, "messages", "--data", "D"])
        .code(0)
        .stdout_has(&["late-reader", "warning 1"]);
    let messages = s.strata(&["inspect", id, "messages", "--data", "D", "--json"]).code(0).json();
    assert_eq!(
        messages["waiting"],
        serde_json::json!([{"inbox": "late-reader", "not_acknowledged": 1, "kinds": {"warning": 1}}]),
        "{messages}"
    );
}

/// A human signs a run on NATS from another terminal: `inspect decisions` reads the pending
/// decision from the server while the run waits, and the running process applies the request.
#[test]
fn a_human_approves_a_live_run_on_nats() {
    let s = Scratch::with_example();
    let team = s.read("team.toml");
    s.write("team.toml", &format!("{team}\n[approvals]\nhumans = [\"alice\"]\nplans = true\n"));
    let ns = Namespace::new();
    let url = test_url();
    let id = ns.id();
    let mut run = s.spawn(&run_args("plan.toml", id, &url, &["--team", "team.toml"]));
    let decision = pending_decision(&s, &mut run, id, "the plan to wait for alice", |d| {
        d["status"] == "pending" && d["human_approval"]["allowed"][0] == "alice"
    });
    s.strata(&["approve", id, &decision, "--as", "alice", "--data", "D"])
        .code(0)
        .stdout_has(&[&decision, "by human:alice"]);
    run.finish().code(0).stdout_has(&["task `hello` succeeded"]);
    let audit = s.strata(&["inspect", id, "audit", "--data", "D", "--json"]).code(0).json();
    let approved = audit
        .as_array()
        .unwrap()
        .iter()
        .filter(|r| r["event"]["event"] == "operator" && r["event"]["outcome"] == "approved")
        .count();
    assert_eq!(approved, 1, "{audit}");
    s.strata(&["verify", id, "--data", "D"]).code(0).stdout_has(&["the run verifies"]);
}

#[test]
fn a_run_on_nats_killed_mid_step_is_resumed_from_the_server_and_runs_the_step_once() {
    let s = Scratch::new();
    let ns = Namespace::new();
    let url = test_url();
    let id = ns.id();
    s.write("gated.toml", GATED_PLAN);
    std::fs::create_dir_all(s.path("W")).unwrap();
    let gate = Gate(s.path("W/go"));
    let mut run = s.spawn(&run_args("gated.toml", id, &url, &[]));
    let waiting = s.path("W/waiting");
    wait_for("the gate step to start", || {
        assert!(!run.exited(), "strata exited before the gate:\n{}", run.stderr_so_far());
        waiting.exists()
    });
    assert_eq!(run.kill().status.code(), None, "killed by a signal");
    assert!(!s.path("W/done.txt").exists(), "killed before the last step");

    // A server that does not answer: the resume is refused, naming it and run.json, and the run
    // is left as it was.
    let run_file = s.path(&format!("D/{id}/run.json"));
    let original = std::fs::read_to_string(&run_file).unwrap();
    let elsewhere = original.replace(&format!("\"{url}\""), "\"nats://127.0.0.1:1\"");
    assert_ne!(elsewhere, original);
    std::fs::write(&run_file, &elsewhere).unwrap();
    let before = snapshot(&s.path("W"));
    s.strata(&["resume", id, "--data", "D", "--no-sync", "--quiet"]).bad_input(&[
        "nats://127.0.0.1:1",
        "run.json",
        "cannot connect",
    ]);
    assert_eq!(std::fs::read_to_string(&run_file).unwrap(), elsewhere, "run.json was changed");
    assert_eq!(listed_run(&s, "D", id)["status"], "killed (resumable)");
    assert!(snapshot(&s.path("W")) == before, "a step ran");
    std::fs::write(&run_file, &original).unwrap();

    // The orphaned shell finishes on its own; resume reads the tool journal from the server
    // and adopts its result.
    std::fs::write(&gate.0, "").unwrap();
    s.strata(&["resume", id, "--data", "D", "--no-sync", "--quiet"])
        .code(0)
        .stdout_has(&[&format!("run {id} resumed"), "task `gated` succeeded"]);
    assert_eq!(s.read("W/count.txt"), "ran\n", "the gate's side effect ran exactly once");
    assert_eq!(s.read("W/done.txt"), "done\n");
    assert_eq!(listed_run(&s, "D", id)["status"], "succeeded");
    let verify = s.strata(&["verify", id, "--data", "D", "--json"]).code(0).json();
    assert_eq!(verify["ok"], true, "{verify}");
    assert_eq!(audited_calls(&s, id, "shell"), 1, "the gate is audited once");
}

#[test]
fn every_bad_nats_is_refused_before_anything_is_written() {
    let s = Scratch::with_example();
    let url = test_url();
    let refused = |id: &str, nats: &str, needles: &[&str]| {
        let out = s.strata(&run_args("plan.toml", id, nats, &[]));
        out.bad_input(needles);
        assert!(!s.path("D").exists(), "`strata {}` created the data directory", out.args);
        assert!(!s.path("W").exists(), "`strata {}` created the workspace", out.args);
    };

    // Nothing answers there.
    let ns = Namespace::new();
    refused(ns.id(), "nats://127.0.0.1:1", &["--nats nats://127.0.0.1:1", "cannot connect"]);
    refused(ns.id(), "not a url", &["--nats not a url", "cannot connect"]);

    // A server without JetStream.
    let plain = TestServer::without_jetstream().unwrap();
    let plain_url = plain.url();
    refused(ns.id(), &plain_url, &[&format!("--nats {plain_url}"), "no JetStream", "-js"]);
    drop(plain);
    assert_eq!(ns.streams(), Vec::<String>::new(), "a refused run made streams");

    // A run id that cannot name streams: refused by the command line, before anything is
    // written or the server is asked, with the one rule for run ids.
    let out = s.strata(&run_args("plan.toml", "a_b", &url, &[]));
    out.code(2);
    assert!(out.stderr.contains("`a_b` cannot be a run id"), "{}", out.stderr);
    assert!(out.stderr.contains("use 1 to 64 ASCII letters, digits or `-`"), "{}", out.stderr);
    assert!(!s.path("D").exists() && !s.path("W").exists(), "a refused run wrote something");

    // The namespace holds a run already.
    block_on(async {
        let store = NatsStore::connect(&url, ns.id()).await.unwrap();
        agent_core::NatsAuditLog::open(&store).await.unwrap();
    });
    let made = ns.streams();
    assert_eq!(made.len(), 1, "{made:?}");
    refused(
        ns.id(),
        &url,
        &["--nats", "holds a run", &format!("strata resume {}", ns.id()), "--run-id"],
    );
    assert_eq!(ns.streams(), made, "a refused run changed the server");

    // A stream of another schema version.
    let old = Namespace::new();
    block_on(async {
        let store = NatsStore::connect(&url, old.id()).await.unwrap();
        let config = async_nats::jetstream::stream::Config {
            name: store.name("audit"),
            description: Some("strata schema 0: audit".into()),
            subjects: vec![format!("{}.>", store.subject("audit"))],
            ..Default::default()
        };
        store.jetstream().create_stream(config).await.unwrap();
    });
    let made = old.streams();
    refused(old.id(), &url, &["--nats", "strata schema 0", "schema 1", "another --run-id"]);
    assert_eq!(old.streams(), made, "a refused run changed the server");
}
