//! `research_agent` on URLs, against a loopback server: pages on allowed hosts fetched and
//! reduced to text, hosts outside the allow-list refused before any request (redirects
//! included), error statuses classified, long pages cut.

use agent_executor::{RESEARCH_AGENT, RunRequest};
use agent_state::{FailureKind, RunState};
use serde_json::json;

use crate::server::{Reply, Server, allowing};
use crate::support::{Workspace, executor, rule_based};

#[tokio::test]
async fn it_fetches_a_page_on_an_allowed_host_and_keeps_its_text() {
    let server = Server::start(vec![
        Reply::new(
            200,
            "<html><head><style>p{}</style></head><body><h1>Scheduler</h1>\
         <p>Work stealing &amp; fairness</p><script>track()</script></body></html>",
        )
        .header("Content-Type", "text/html"),
    ])
    .await;
    let ws = Workspace::new();
    let mut env = ws.env();
    env.http = allowing(&[&server.host()]);
    let (cx, events) = rule_based(RESEARCH_AGENT);
    let url = server.url("/guide?page=1");
    let request = RunRequest::new(RESEARCH_AGENT, "Research the scheduler")
        .with_inputs(json!({"urls": [url]}));
    let response = executor(env).execute(request, cx).await.unwrap();
    assert_eq!(response.status, RunState::Completed, "{:?}", response.failure);

    let hits = server.hits();
    assert_eq!(hits.len(), 1);
    assert_eq!((hits[0].method.as_str(), hits[0].target.as_str()), ("GET", "/guide?page=1"));
    let source = &response.data["sources"][0];
    assert_eq!(source["source"], url);
    let excerpt = source["excerpt"].as_str().unwrap();
    assert_eq!(excerpt, "Scheduler\nWork stealing & fairness");
    assert!(response.artifacts.is_empty(), "a page is not a workspace file");
    let fetched = events.notes("source_fetched");
    assert_eq!(fetched[0]["status"], 200);
    assert_eq!(fetched[0]["truncated"], false);
}

#[tokio::test]
async fn a_host_outside_the_allow_list_is_refused_before_any_request() {
    let server = Server::start(vec![Reply::new(200, "never read")]).await;
    let other = format!("127.0.0.1:{}", server.port().wrapping_add(1).max(1));
    let ws = Workspace::new();
    let mut env = ws.env();
    env.http = allowing(&[&other]);
    let (cx, _) = rule_based(RESEARCH_AGENT);
    // The first URL is allowed, the second is not: neither is fetched.
    let request = RunRequest::new(RESEARCH_AGENT, "Research the scheduler").with_inputs(json!({
        "urls": [format!("http://{other}/a"), server.url("/b")]
    }));
    let response = executor(env).execute(request, cx).await.unwrap();
    assert_eq!(response.status, RunState::Failed);
    let failure = response.failure.unwrap();
    assert_eq!(failure.kind, FailureKind::Permission, "{failure}");
    assert!(failure.reason.contains(&format!("`{}`", server.host())), "{failure}");
    assert!(failure.reason.contains("[http] allow_hosts"), "{failure}");
    assert_eq!(response.attempts, 1, "permanent: not retried");
    assert!(server.hits().is_empty(), "no request reached the server");

    // With no hosts allowed at all, likewise.
    let (cx, _) = rule_based(RESEARCH_AGENT);
    let request = RunRequest::new(RESEARCH_AGENT, "Research the scheduler")
        .with_inputs(json!({"urls": [server.url("/b")]}));
    let response = executor(Workspace::new().env()).execute(request, cx).await.unwrap();
    let failure = response.failure.unwrap();
    assert_eq!(failure.kind, FailureKind::Permission);
    assert!(failure.reason.contains("allowed hosts: none"), "{failure}");
    assert!(server.hits().is_empty());
}

#[tokio::test]
async fn a_redirect_to_a_host_outside_the_allow_list_is_not_followed() {
    let server =
        Server::start(vec![Reply::new(302, "").header("Location", "http://localhost:9/elsewhere")])
            .await;
    let ws = Workspace::new();
    let mut env = ws.env();
    env.http = allowing(&[&server.host()]);
    let (cx, _) = rule_based(RESEARCH_AGENT);
    let request = RunRequest::new(RESEARCH_AGENT, "Research the scheduler")
        .with_inputs(json!({"urls": [server.url("/moved")]}));
    let response = executor(env).execute(request, cx).await.unwrap();
    assert_eq!(response.status, RunState::Failed);
    let failure = response.failure.unwrap();
    assert_eq!(failure.kind, FailureKind::Permission, "{failure}");
    assert!(failure.reason.contains("`localhost:9`"), "{failure}");
    assert!(failure.reason.contains("not followed"), "{failure}");
    assert_eq!(server.hits().len(), 1);
}

#[tokio::test]
async fn a_missing_page_fails_at_once_and_a_long_one_is_cut() {
    let server = Server::start(vec![Reply::new(404, "no such page")]).await;
    let ws = Workspace::new();
    let mut env = ws.env();
    env.http = allowing(&[&server.host()]);
    let (cx, _) = rule_based(RESEARCH_AGENT);
    let request = RunRequest::new(RESEARCH_AGENT, "Research the scheduler")
        .with_inputs(json!({"urls": [server.url("/gone")]}));
    let response = executor(env).execute(request, cx).await.unwrap();
    assert_eq!(response.status, RunState::Failed);
    let failure = response.failure.unwrap();
    assert_eq!(failure.kind, FailureKind::Client);
    assert!(failure.reason.contains("404 Not Found: no such page"), "{failure}");
    assert_eq!((response.attempts, server.hits().len()), (1, 1), "a 4xx is not retried");

    let long = "x".repeat(500);
    let server = Server::start(vec![Reply::new(200, &long)]).await;
    let ws = Workspace::new();
    let mut env = ws.env();
    env.http = allowing(&[&server.host()]);
    env.http.max_body_bytes = 100;
    let (cx, events) = rule_based(RESEARCH_AGENT);
    let request = RunRequest::new(RESEARCH_AGENT, "Research the scheduler")
        .with_inputs(json!({"urls": [server.url("/long")]}));
    let response = executor(env).execute(request, cx).await.unwrap();
    assert_eq!(response.status, RunState::Completed, "{:?}", response.failure);
    let excerpt = response.data["sources"][0]["excerpt"].as_str().unwrap();
    assert!(excerpt.starts_with(&"x".repeat(100)), "{excerpt}");
    assert!(!excerpt.starts_with(&"x".repeat(101)), "cut at the limit: {excerpt}");
    assert!(excerpt.contains("[cut: the page is longer than 100 bytes"), "{excerpt}");
    assert_eq!(events.notes("source_fetched")[0]["bytes"], 100);
    assert_eq!(events.notes("source_fetched")[0]["truncated"], true);
}
