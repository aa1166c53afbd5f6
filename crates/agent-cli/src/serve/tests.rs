//! The server's pure parts: the token check and where a request's token is read.
#![allow(clippy::unwrap_used, clippy::expect_used, reason = "tests")]

use super::*;

fn app(token: &str) -> App {
    App {
        data: PathBuf::from("D"),
        server: None,
        placed: std::sync::Mutex::default(),
        token: token.to_owned(),
        local: "127.0.0.1:7878".parse().unwrap(),
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

fn request(uri: &str, headers: &[(header::HeaderName, &str)]) -> Request {
    let mut b = axum::http::Request::builder().uri(uri);
    for (name, value) in headers {
        b = b.header(name, *value);
    }
    b.body(axum::body::Body::empty()).unwrap()
}

#[test]
fn the_token_comes_from_the_header_the_cookie_or_the_query_of_a_first_load() {
    let auth = |v| request("/api/runs", &[(header::AUTHORIZATION, v)]);
    assert_eq!(header_token(&auth("Bearer abc")), Some("abc"));
    assert_eq!(header_token(&auth("Basic abc")), None);
    assert_eq!(header_token(&request("/x?token=t1", &[])), None, "never from the query");
    let r = request("/", &[(header::COOKIE, "a=1; strata_token_7878=t%2B1; strata_token_9=x")]);
    assert_eq!(cookie_token(&r, "strata_token_7878"), Some("t%2B1"));
    assert_eq!(cookie_token(&r, "strata_token_78"), None, "another server's cookie");
    assert_eq!(
        query_token(Some("after=3&token=t%2B1&run=x")),
        Some(("t+1".to_owned(), "after=3&run=x".to_owned()))
    );
    assert_eq!(query_token(Some("after=3")), None);
    assert_eq!(query_token(None), None);
}

#[test]
fn tokens_round_trip_through_the_url() {
    for token in ["abc", "a b&c=d/é%", "t0k"] {
        assert_eq!(query_unescape(&query_escape(token)).as_deref(), Some(token));
    }
    assert_eq!(url("127.0.0.1:7878".parse().unwrap(), "a&b"), "http://127.0.0.1:7878/?token=a%26b");
    assert_eq!(query_unescape("%zz"), None);
    assert_eq!(html_escape(r#"<a href="x">'&"#), "&lt;a href=&quot;x&quot;&gt;&#39;&amp;");
}

#[test]
fn only_this_servers_own_addresses_are_accepted_as_host() {
    let local: SocketAddr = "127.0.0.1:7878".parse().unwrap();
    for host in
        ["127.0.0.1:7878", "localhost:7878", "LOCALHOST:7878", "[::1]:7878", "127.0.0.2:7878"]
    {
        assert!(host_ok(local, host), "{host}");
    }
    for host in [
        "evil.example:7878",
        "127.0.0.1.nip.io:7878",
        "127.0.0.1:7879",
        "127.0.0.1",
        "localhost",
        "192.168.1.5:7878",
        "[::1]",
        "[::1:7878",
        "",
    ] {
        assert!(!host_ok(local, host), "{host}");
    }
    let wide: SocketAddr = "0.0.0.0:80".parse().unwrap();
    assert!(host_ok(wide, "192.168.1.5"), "any address of this machine, port 80 implied");
    assert!(!host_ok(wide, "rebound.example"));
    let lan: SocketAddr = "192.168.1.5:7878".parse().unwrap();
    assert!(host_ok(lan, "192.168.1.5:7878"));
    assert!(!host_ok(lan, "192.168.1.6:7878"));
}

/// The run of this process, fed by its event stream: a subscriber that fell behind (a hub
/// that keeps one event) loses no record: the missed ones are read from the audit log.
#[tokio::test]
async fn a_lagged_event_stream_loses_no_record() {
    use strata::run_dir::{RunInfo, RunStatus, TEAM_FILE};
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("r");
    let store = run_store::RunStore::create(
        &dir,
        "r",
        agent_state::Timestamp(strata::run_dir::now_ms()),
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
        flags: Default::default(),
        started_at: strata::run_dir::now_ms(),
        finished_at: None,
        status: RunStatus::Running,
        failure: None,
        unsandboxed: false,
        nats: None,
        local: false,
        usage: None,
    }
    .write(&dir)
    .unwrap();
    let stores = strata::Stores::sled(&store).unwrap();
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
            .append_record(&agent, agent_state::Timestamp(strata::run_dir::now_ms()), event)
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
