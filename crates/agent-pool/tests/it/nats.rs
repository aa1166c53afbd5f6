//! A whole team on the NATS JetStream backends (`TeamServices::on_nats`), against the server at
//! `STRATA_NATS_URL` (default `nats://127.0.0.1:4222`), on real time: the run completes, and a
//! team dropped mid-run (as if its process died) is resumed over a new connection, as another
//! process would, and finishes without running a side effect twice. (Kills while a command
//! runs are the crash torture harness's, on whole processes.)

use std::sync::Arc;
use std::time::Duration;

use agent_core::tools::ToolContext;
use agent_core::{AuditEvent, AuditLog, RuleBasedReasoner, check_transition_chain, verify_chain};
use agent_pool::{Team, TeamServices, TeamSpec};
use agent_state::{AgentId, AgentStatus, SignOutcome, Task, Timestamp};
use nats_store::{NatsStore, TestNamespaces, TestServer};

use crate::support::*;

/// A fresh namespace on the test server, deleted when dropped (also when a test fails).
struct Namespace(
    NatsStore,
    #[allow(dead_code, reason = "deletes the namespace when dropped")] TestNamespaces,
);

impl Namespace {
    async fn new() -> Self {
        let namespaces = TestNamespaces::new();
        Self(namespaces.connect().await.unwrap(), namespaces)
    }
}

fn team() -> TeamSpec {
    let mut spec = standard_team();
    spec.heartbeat = Duration::from_millis(250);
    spec
}

/// Four shell steps, one after the other, each appending a line: a step run twice shows.
fn appending_task() -> Task {
    let append = |id: &str, domain: &str, after: &[&str]| {
        let command = format!("sleep 0.2; echo {id} >> log.txt");
        step(id, domain, "shell", serde_json::json!({ "command": command }))
            .with_after(after.iter().copied())
    };
    Task {
        id: "append".into(),
        goal: "append four lines in order".into(),
        steps: vec![
            append("one", "docs", &[]),
            append("two", "build", &["one"]),
            append("three", "docs", &["two"]),
            append("four", "build", &["three"]),
        ],
    }
}

async fn services(store: &NatsStore, workspace: &std::path::Path) -> TeamServices {
    TeamServices::on_nats(
        store,
        ToolContext::new(workspace).unwrap(),
        Arc::new(RuleBasedReasoner::new()),
    )
    .await
    .unwrap()
}

async fn finished(team: &Team) -> agent_state::TaskOutcome {
    tokio::time::timeout(Duration::from_secs(120), team.wait("append"))
        .await
        .expect("the task closes within two minutes")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_team_on_nats_completes_its_task_with_every_record_on_the_server() {
    let namespace = Namespace::new().await;
    let dir = tempfile::tempdir().unwrap();
    let services = services(&namespace.0, dir.path()).await;
    let team = Team::start(team(), services.clone()).await.unwrap();
    team.submit(appending_task()).await.unwrap();
    let outcome = finished(&team).await;
    assert!(outcome.is_success(), "{outcome:?}");
    team.shutdown().await.unwrap();
    assert_eq!(
        std::fs::read_to_string(dir.path().join("log.txt")).unwrap(),
        "one\ntwo\nthree\nfour\n"
    );

    // What a second process reads from the server: the whole chained log, every agent ended,
    // and the outcome.
    let reader = namespace.0.reconnect().await.unwrap();
    let audit = agent_core::NatsAuditLog::open(&reader).await.unwrap();
    let records = audit.records(None).await.unwrap();
    verify_chain(&records).unwrap();
    let finals = check_transition_chain(&records).unwrap();
    assert!(finals.iter().all(|(_, s)| *s == AgentStatus::Terminated), "{finals:?}");
    let state = agent_core::NatsStateStore::open(&reader).await.unwrap();
    use agent_core::StateStore as _;
    let outcomes = state.outcomes().await.unwrap();
    assert!(outcomes.iter().any(|o| o.task_id() == "append" && o.is_success()), "{outcomes:?}");
}

/// A team whose plans also need a human's signature: it stops, deterministically, with the
/// plan signed by the powers and nothing run yet.
fn team_with_a_human() -> TeamSpec {
    let mut spec = team();
    spec.approvals = agent_pool::Approvals { humans: vec!["alice".into()], plans: true };
    spec
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_team_dropped_mid_run_is_resumed_by_another_connection_and_runs_each_step_once() {
    let namespace = Namespace::new().await;
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("log.txt");
    let decision = {
        let first = namespace.0.reconnect().await.unwrap();
        let services = services(&first, dir.path()).await;
        let team = Team::start(team_with_a_human(), services.clone()).await.unwrap();
        team.submit(appending_task()).await.unwrap();
        // Until the powers have signed and only the human is missing; then as if the process
        // died: nothing shut down, its connection gone with it.
        let decision = tokio::time::timeout(Duration::from_secs(60), async {
            loop {
                let pending = services.governance.list_pending().await.unwrap();
                if let Some(d) = pending.first()
                    && d.missing_signers().next().is_none()
                {
                    break d.id;
                }
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        })
        .await
        .expect("the powers signed within a minute");
        drop(team);
        decision
    };
    assert!(!log.exists(), "nothing ran before the human signed");

    // Another process: a new connection, the team resumed from the server, the human signs
    // there.
    let second = namespace.0.reconnect().await.unwrap();
    let services = services(&second, dir.path()).await;
    let team = Team::resume(team_with_a_human(), services.clone()).await.unwrap();
    assert_eq!(team.outcome("append"), None);
    let alice = AgentId::human("alice").unwrap();
    let signed = services.governance.sign(decision, &alice, Timestamp(1)).await.unwrap();
    assert_eq!(signed, SignOutcome::Approved);
    let outcome = finished(&team).await;
    assert!(outcome.is_success(), "{outcome:?}");
    team.shutdown().await.unwrap();
    assert_eq!(std::fs::read_to_string(&log).unwrap(), "one\ntwo\nthree\nfour\n");
    let records = services.audit.records(None).await.unwrap();
    verify_chain(&records).unwrap();
    let finals = check_transition_chain(&records).unwrap();
    assert!(finals.iter().all(|(_, s)| *s == AgentStatus::Terminated), "{finals:?}");
    let runs = records.iter().filter(|r| matches!(&r.event, AuditEvent::ToolCall { .. })).count();
    assert_eq!(runs, 4, "each shell step ran exactly once");
}

/// The NATS server is killed mid-run and started again with what it stored: the team carries on
/// when it is back (the client reconnects, failed turns are retried), and the task completes
/// with each step run once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_goes_on_when_the_nats_server_comes_back_after_a_crash() {
    let data = tempfile::tempdir().unwrap();
    let mut server = TestServer::with_jetstream(data.path()).unwrap();
    let store = NatsStore::connect(&server.url(), "restart").await.unwrap();
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("log.txt");
    let services = services(&store, dir.path()).await;
    let team = Team::start(team(), services.clone()).await.unwrap();
    team.submit(appending_task()).await.unwrap();
    tokio::time::timeout(Duration::from_secs(60), async {
        while std::fs::read_to_string(&log).unwrap_or_default().lines().count() < 1 {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await
    .expect("a step ran within a minute");
    server.kill();
    tokio::time::sleep(Duration::from_secs(1)).await;
    server.restart().unwrap();
    let outcome = finished(&team).await;
    assert!(outcome.is_success(), "{outcome:?}");
    team.shutdown().await.unwrap();
    assert_eq!(std::fs::read_to_string(&log).unwrap(), "one\ntwo\nthree\nfour\n");
    let records = services.audit.records(None).await.unwrap();
    verify_chain(&records).unwrap();
}

/// The one assembly of the five stores on NATS: they open on a fresh namespace, and the first
/// that cannot be opened (here a bus stream of another schema version) is named with the
/// server's URL, its backend's typed error kept as the cause.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_stores_open_on_nats_and_a_foreign_one_is_named_with_the_server() {
    let fresh = Namespace::new().await;
    let stores = agent_pool::NatsStores::open(&fresh.0).await.unwrap();
    assert!(stores.audit.records(None).await.unwrap().is_empty());

    let foreign = Namespace::new().await;
    let store = &foreign.0;
    let config = async_nats::jetstream::stream::Config {
        name: store.name(message_bus::NatsBus::STREAM),
        description: Some("strata schema 0: bus".into()),
        subjects: vec![format!("{}.>", store.subject(message_bus::NatsBus::STREAM))],
        ..Default::default()
    };
    store.jetstream().create_stream(config).await.unwrap();
    let Err(error) = agent_pool::NatsStores::open(store).await else {
        panic!("a bus of another schema version was opened");
    };
    assert_eq!(error.store, "the message bus");
    assert_eq!(error.url, store.url());
    assert_eq!(
        error.to_string(),
        format!("cannot open the message bus on the NATS server at {}", store.url())
    );
    let cause = std::error::Error::source(&error).unwrap();
    assert!(
        matches!(
            cause.downcast_ref::<message_bus::NatsBusError>(),
            Some(message_bus::NatsBusError::Store(nats_store::NatsError::SchemaMismatch { .. }))
        ),
        "{cause:?}"
    );
    // The same error through TeamServices.
    let workspace = tempfile::tempdir().unwrap();
    let on_nats = TeamServices::on_nats(
        store,
        ToolContext::new(workspace.path()).unwrap(),
        Arc::new(RuleBasedReasoner::new()),
    )
    .await;
    assert_eq!(on_nats.err().map(|e| e.store), Some("the message bus"));
}
