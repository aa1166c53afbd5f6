//! `integrations_agent` against a loopback server: a call and its answer, a 5xx retried, a 4xx
//! not, hosts outside the allow-list refused without a request, and secrets from environment
//! variables sent but never shown.

use std::collections::BTreeMap;

use agent_executor::{
    Endpoint, ExecEnv, HeaderValue, INTEGRATIONS_AGENT, Method, RunRequest, RunResponse,
};
use agent_state::{FailureKind, RunState};
use serde_json::{Value, json};

use crate::server::{Reply, Server, allowing};
use crate::support::{Events, Workspace, executor, rule_based};

/// A variable every `cargo test` run has: the test's secret. Tests cannot set one (setting
/// the environment is `unsafe`, which the workspace forbids).
const SECRET_VAR: &str = "CARGO_MANIFEST_DIR";

/// A variable no one sets.
const UNSET_VAR: &str = "STRATA_TEST_INTEGRATIONS_UNSET_7F3A";

fn endpoint(name: &str, method: Method, url: &str) -> Endpoint {
    Endpoint {
        name: name.into(),
        method,
        url: url.into(),
        headers: BTreeMap::new(),
        description: String::new(),
    }
}

/// An environment allowing `hosts`, with `endpoints`.
fn env(hosts: &[&str], endpoints: Vec<Endpoint>) -> ExecEnv {
    let mut env = Workspace::new().env();
    env.http = allowing(hosts);
    env.endpoints = endpoints.into_iter().map(|e| (e.name.clone(), e)).collect();
    env
}

async fn call(env: ExecEnv, inputs: Value) -> (RunResponse, Events) {
    let (cx, events) = rule_based(INTEGRATIONS_AGENT);
    let request = RunRequest::new(INTEGRATIONS_AGENT, "Call the service").with_inputs(inputs);
    (executor(env).execute(request, cx).await.unwrap(), events)
}

#[tokio::test]
async fn a_call_sends_path_query_and_body_and_returns_the_parsed_answer() {
    let server = Server::start(vec![Reply::json(200, json!({"id": 42, "ok": true}))]).await;
    let mut items = endpoint("items", Method::Post, &server.url("/api?v=2"));
    items.headers.insert("X-Client".into(), HeaderValue::Value("strata".into()));
    let (response, events) = call(
        env(&[&server.host()], vec![items]),
        json!({
            "endpoint": "items",
            "path": "/orders/7",
            "query": {"q": "a b&c", "lang": "fr"},
            "body": {"name": "widget", "count": 3},
        }),
    )
    .await;
    assert_eq!(response.status, RunState::Completed, "{:?}", response.failure);
    assert_eq!(
        response.data,
        json!({"endpoint": "items", "status": 200, "body": {"id": 42, "ok": true}, "truncated": false})
    );
    assert!(
        response.primary_output.starts_with("POST endpoint `items`: HTTP 200 OK\n"),
        "{}",
        response.primary_output
    );
    assert_eq!(response.needs_model, None);

    let hits = server.hits();
    assert_eq!(hits.len(), 1);
    let hit = &hits[0];
    assert_eq!(hit.method, "POST");
    assert_eq!(hit.target, "/api/orders/7?v=2&lang=fr&q=a%20b%26c");
    assert_eq!(
        serde_json::from_str::<Value>(&hit.body).unwrap(),
        json!({"name": "widget", "count": 3})
    );
    assert_eq!(hit.header("content-type"), Some("application/json"));
    assert_eq!(hit.header("x-client"), Some("strata"));
    assert_eq!(
        events.notes("endpoint_called"),
        [json!({"endpoint": "items", "method": "POST", "status": 200})]
    );
    // It calls an external service: a run a crash interrupted is not repeated.
    let registry = agent_executor::builtins();
    assert!(!registry.get(INTEGRATIONS_AGENT).unwrap().idempotent());
}

#[tokio::test]
async fn a_server_error_is_retried_once_and_the_retry_completes() {
    let server =
        Server::start(vec![Reply::new(500, "boom"), Reply::new(200, "fine, plain text")]).await;
    let (response, _) = call(
        env(&[&server.host()], vec![endpoint("status", Method::Get, &server.url("/status"))]),
        json!({"endpoint": "status"}),
    )
    .await;
    assert_eq!(response.status, RunState::Completed, "{:?}", response.failure);
    assert_eq!((response.attempts, response.retries), (2, 1));
    assert_eq!(server.hits().len(), 2);
    assert_eq!(response.data["body"], "fine, plain text", "not JSON: kept as text");
}

#[tokio::test]
async fn a_client_error_fails_at_once() {
    let server = Server::start(vec![Reply::new(404, "no such order"), Reply::new(200, "{}")]).await;
    let (response, _) = call(
        env(&[&server.host()], vec![endpoint("order", Method::Delete, &server.url("/o"))]),
        json!({"endpoint": "order", "path": "9"}),
    )
    .await;
    assert_eq!(response.status, RunState::Failed);
    let failure = response.failure.unwrap();
    assert_eq!(failure.kind, FailureKind::Client);
    assert!(
        failure.reason.contains("endpoint `order` answered 404 Not Found: no such order"),
        "{failure}"
    );
    assert_eq!((response.attempts, response.retries), (1, 0));
    let hits = server.hits();
    assert_eq!(hits.len(), 1, "not retried");
    assert_eq!((hits[0].method.as_str(), hits[0].target.as_str()), ("DELETE", "/o/9"));
}

#[tokio::test]
async fn a_host_outside_the_allow_list_is_refused_without_a_request() {
    let server = Server::start(vec![Reply::new(200, "never")]).await;
    let other = format!("127.0.0.1:{}", server.port().wrapping_add(1).max(1));
    let (response, _) = call(
        env(&[&other], vec![endpoint("svc", Method::Get, &server.url("/x"))]),
        json!({"endpoint": "svc"}),
    )
    .await;
    assert_eq!(response.status, RunState::Failed);
    let failure = response.failure.unwrap();
    assert_eq!(failure.kind, FailureKind::Permission, "{failure}");
    assert!(failure.reason.contains(&format!("host `{}`", server.host())), "{failure}");
    assert!(failure.reason.contains("`[http] allow_hosts`"), "{failure}");
    assert_eq!(response.attempts, 1);
    assert!(server.hits().is_empty());

    // A `path` cannot move the call to another host either.
    let (response, _) = call(
        env(&[&server.host()], vec![endpoint("svc", Method::Get, &server.url(""))]),
        json!({"endpoint": "svc", "path": "@localhost:9/x"}),
    )
    .await;
    assert_eq!(response.failure.unwrap().kind, FailureKind::InvalidInput);
    assert!(server.hits().is_empty());
}

#[tokio::test]
async fn a_secret_header_is_sent_but_never_shown() {
    let secret = std::env::var(SECRET_VAR).expect("cargo test sets CARGO_MANIFEST_DIR");
    assert!(secret.len() > 8);
    // The server echoes the header back in its body: the run shows it redacted.
    let server = Server::start(vec![Reply::new(200, "your key: ").echoing("x-api-key")]).await;
    let mut svc = endpoint("svc", Method::Post, &server.url("/hook"));
    svc.headers.insert("X-Api-Key".into(), HeaderValue::Env(SECRET_VAR.into()));
    let (response, events) =
        call(env(&[&server.host()], vec![svc]), json!({"endpoint": "svc", "body": null})).await;
    assert_eq!(response.status, RunState::Completed, "{:?}", response.failure);
    let hits = server.hits();
    assert_eq!(hits[0].header("x-api-key"), Some(secret.as_str()), "sent to the server");
    assert_eq!(hits[0].body, "", "no body");
    let shown = serde_json::to_string(&response).unwrap();
    assert!(!shown.contains(&secret), "{shown}");
    assert!(!events.text().contains(&secret));
    assert_eq!(response.data["body"], "your key: [redacted]");

    // Also when the answer is an error.
    let server = Server::start(vec![Reply::new(403, "bad key ").echoing("x-api-key")]).await;
    let mut svc = endpoint("svc", Method::Post, &server.url("/hook"));
    svc.headers.insert("X-Api-Key".into(), HeaderValue::Env(SECRET_VAR.into()));
    let (response, events) =
        call(env(&[&server.host()], vec![svc]), json!({"endpoint": "svc"})).await;
    let failure = response.failure.clone().unwrap();
    assert_eq!(failure.kind, FailureKind::Permission);
    assert!(failure.reason.contains("bad key [redacted]"), "{failure}");
    assert!(!serde_json::to_string(&response).unwrap().contains(&secret));
    assert!(!events.text().contains(&secret));
}

#[tokio::test]
async fn a_missing_variable_blocks_the_run_and_names_it() {
    let server = Server::start(vec![Reply::new(200, "never")]).await;
    let mut svc = endpoint("svc", Method::Get, &server.url("/x"));
    svc.headers.insert("Authorization".into(), HeaderValue::Env(UNSET_VAR.into()));
    let (response, _) = call(env(&[&server.host()], vec![svc]), json!({"endpoint": "svc"})).await;
    assert_eq!(response.status, RunState::Blocked);
    let failure = response.failure.unwrap();
    assert_eq!(failure.kind, FailureKind::MissingInput);
    assert!(failure.reason.contains(&format!("`{UNSET_VAR}`")), "{failure}");
    assert!(failure.reason.contains("`Authorization`"), "{failure}");
    assert!(server.hits().is_empty());
}

#[tokio::test]
async fn unknown_endpoints_and_bad_inputs_are_refused() {
    let server = Server::start(vec![Reply::new(200, "never")]).await;
    let endpoints = || {
        vec![
            endpoint("alpha", Method::Get, &server.url("/a")),
            endpoint("beta", Method::Post, &server.url("/b")),
        ]
    };
    let host = server.host();
    let cases = [
        (json!({"endpoint": "gamma"}), "unknown endpoint `gamma`; the endpoints are: alpha, beta"),
        (json!({"endpoint": "alpha", "body": {"x": 1}}), "uses GET, which takes no body"),
        (json!({"endpoint": "beta", "query": {"n": 1}}), "`query` parameter `n` must be a string"),
        (json!({"endpoint": "beta", "path": "/a/../b"}), "is not a plain URL path"),
    ];
    for (inputs, expected) in cases {
        let (response, _) = call(env(&[&host], endpoints()), inputs.clone()).await;
        assert_eq!(response.status, RunState::Failed, "{inputs}");
        let failure = response.failure.unwrap();
        assert_eq!(failure.kind, FailureKind::InvalidInput, "{inputs}: {failure}");
        assert!(failure.reason.contains(expected), "{inputs}: {failure}");
    }
    // None configured: says where to define them.
    let (response, _) = call(env(&[&host], Vec::new()), json!({"endpoint": "alpha"})).await;
    assert!(response.failure.unwrap().reason.contains("`[[endpoints]]`"));
    // No endpoint named at all: blocked, naming the known ones.
    let (cx, _) = rule_based(INTEGRATIONS_AGENT);
    let response = executor(env(&[&host], endpoints()))
        .execute(RunRequest::new(INTEGRATIONS_AGENT, "Call something"), cx)
        .await
        .unwrap();
    assert_eq!(response.status, RunState::Blocked);
    assert!(response.failure.unwrap().reason.contains("alpha, beta"));
    assert!(server.hits().is_empty());
}

#[tokio::test]
async fn transport_failures_are_transient_network_or_timeout() {
    // Nothing listens on the port: the connection is refused, retried once, and fails.
    let port = {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        listener.local_addr().unwrap().port()
    };
    let host = format!("127.0.0.1:{port}");
    let (response, _) = call(
        env(&[&host], vec![endpoint("svc", Method::Get, &format!("http://{host}/x"))]),
        json!({"endpoint": "svc"}),
    )
    .await;
    assert_eq!(response.status, RunState::Failed);
    let failure = response.failure.unwrap();
    assert_eq!(failure.kind, FailureKind::Network, "{failure}");
    assert!(failure.reason.contains("could not connect"), "{failure}");
    assert_eq!(response.retries, 1, "transient: retried");

    // A server that accepts and never answers: the policy's timeout ends each attempt.
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let host = listener.local_addr().unwrap().to_string();
    let held = tokio::spawn(async move {
        let mut open = Vec::new();
        while let Ok((stream, _)) = listener.accept().await {
            open.push(stream);
        }
    });
    let mut env = env(&[&host], vec![endpoint("svc", Method::Get, &format!("http://{host}/x"))]);
    env.http.timeout_ms = 50;
    let (response, _) = call(env, json!({"endpoint": "svc"})).await;
    held.abort();
    assert_eq!(response.status, RunState::Failed);
    let failure = response.failure.unwrap();
    assert_eq!(failure.kind, FailureKind::Timeout, "{failure}");
    assert_eq!(response.retries, 1, "transient: retried");
}
