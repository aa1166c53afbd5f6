//! Without the `http` feature: what needs HTTP fails at once with a clear
//! [`FailureKind::InvalidInput`], and nothing else changes.

use std::collections::BTreeMap;

use agent_executor::{Endpoint, INTEGRATIONS_AGENT, Method, RESEARCH_AGENT, RunRequest};
use agent_state::{FailureKind, RunState};
use serde_json::json;

use crate::support::{Workspace, executor, rule_based};

#[tokio::test]
async fn urls_and_endpoints_fail_saying_the_feature_is_off() {
    let ws = Workspace::new();
    let mut env = ws.env();
    env.http.allow_hosts = vec!["127.0.0.1".into()];
    env.endpoints.insert(
        "svc".into(),
        Endpoint {
            name: "svc".into(),
            method: Method::Get,
            url: "http://127.0.0.1/x".into(),
            headers: BTreeMap::new(),
            description: String::new(),
        },
    );
    let executor = executor(env);
    let requests = [
        RunRequest::new(RESEARCH_AGENT, "Research it")
            .with_inputs(json!({"urls": ["http://127.0.0.1/page"]})),
        RunRequest::new(INTEGRATIONS_AGENT, "Call it").with_inputs(json!({"endpoint": "svc"})),
    ];
    for request in requests {
        let kind = request.kind.clone();
        let (cx, _) = rule_based(&kind);
        let response = executor.execute(request, cx).await.unwrap();
        assert_eq!(response.status, RunState::Failed, "{kind}");
        let failure = response.failure.unwrap();
        assert_eq!(failure.kind, FailureKind::InvalidInput, "{kind}: {failure}");
        assert!(failure.reason.contains("no `http` feature"), "{kind}: {failure}");
        assert_eq!(response.attempts, 1, "{kind}");
    }
}
