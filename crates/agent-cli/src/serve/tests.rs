//! The server's pure parts: the token check and where a request's token is read.
#![allow(clippy::unwrap_used, clippy::expect_used, reason = "tests")]

use super::*;

fn app(token: &str) -> App {
    App {
        data: PathBuf::from("D"),
        server: None,
        placed: std::sync::Mutex::default(),
        token: token.to_owned(),
        loopback: true,
        watches: watch::Watches::default(),
        stopping: tokio::sync::watch::Sender::new(false),
    }
}

#[test]
fn the_token_must_match_exactly() {
    let app = app("s3cret");
    assert!(token_ok(&app, Some("s3cret")));
    assert!(!token_ok(&app, Some("s3cre")));
    assert!(!token_ok(&app, Some("s3cretX")));
    assert!(!token_ok(&app, Some("")));
    assert!(!token_ok(&app, None));
}

#[test]
fn the_token_comes_from_the_header_or_the_query() {
    let request = |uri: &str, auth: Option<&str>| {
        let mut b = axum::http::Request::builder().uri(uri);
        if let Some(auth) = auth {
            b = b.header(header::AUTHORIZATION, auth);
        }
        b.body(axum::body::Body::empty()).unwrap()
    };
    assert_eq!(request_token(&request("/api/runs", Some("Bearer abc"))).as_deref(), Some("abc"));
    assert_eq!(request_token(&request("/api/runs", Some("Basic abc"))), None);
    assert_eq!(request_token(&request("/x?after=3&token=t1", None)).as_deref(), Some("t1"));
    assert_eq!(request_token(&request("/x", None)), None);
}

/// The run of this process, fed by its event stream: a subscriber that fell behind (a hub
/// that keeps one event) loses no record: the missed ones are read from the audit log.
#[tokio::test]
async fn a_lagged_event_stream_loses_no_record() {
    use crate::run::{RunInfo, RunStatus, TEAM_FILE};
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("r");
    let store = run_store::RunStore::create(
        &dir,
        "r",
        agent_state::Timestamp(crate::run::now_ms()),
        run_store::Durability::NoSync,
    )
    .unwrap();
    std::fs::write(dir.join(TEAM_FILE), team_file::example_team_toml()).unwrap();
    RunInfo {
        run_id: "r".to_owned(),
        task_id: "t".to_owned(),
        goal: "g".to_owned(),
        workspace: tmp.path().to_path_buf(),
        heartbeat_ms: 100,
        reasoner: None,
        started_at: crate::run::now_ms(),
        finished_at: None,
        status: RunStatus::Running,
        failure: None,
        unsandboxed: false,
        nats: None,
        local: false,
    }
    .write(&dir)
    .unwrap();
    let stores = crate::nats::Stores::sled(&store).unwrap();
    let audit = stores.audit.clone();
    let events = agent_core::EventHub::new(1);
    let live = Live { events: events.clone(), store, stores, ledger: None };
    let w = watch::RunWatch::live(&dir, live).await.unwrap();
    let agent = agent_state::AgentId::from("top-a");
    let mut last = 0;
    for i in 0..50u32 {
        let event =
            agent_core::AuditEvent::Error { error: format!("e{i}"), retry: 1, max_retries: 3 };
        let record = audit
            .append_record(&agent, agent_state::Timestamp(crate::run::now_ms()), event)
            .await
            .unwrap();
        last = record.seq;
        events.publish(agent_core::TeamEvent::Audit(record));
    }
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while watch::lock(&w.state).model.last_seq() != Some(last) {
        assert!(std::time::Instant::now() < deadline, "the missed records were not read");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    w.finish().await;
    let seqs: Vec<u64> = watch::lock(&w.state).ring.iter().filter_map(|f| f.seq).collect();
    assert!(seqs.contains(&last), "{seqs:?}");
}
