//! The Anthropic provider against a loopback server: the Messages wire format both ways, JSON
//! answers through a forced tool, and how failures are classified.

use std::time::Duration;

use agent_llm::{
    AnthropicConfig, AnthropicProvider, ChatMessage, ChatRequest, ConfigError, Provider,
    ProviderErrorKind, ProviderToolCall, ResponseFormat, ToolSpec, Usage,
};
use serde_json::json;

use crate::http_server::{Reply, TestServer, refused_url};

const KEY: &str = "sk-ant-test-0123456789-secret";

fn provider(url: &str, timeout: Duration) -> AnthropicProvider {
    AnthropicProvider::new(AnthropicConfig {
        base_url: url.to_owned(),
        model: "claude-test".to_owned(),
        api_key: Some(KEY.to_owned()),
        timeout,
        structured_output: agent_llm::StructuredOutput::Auto,
    })
    .unwrap()
}

fn message(content: serde_json::Value) -> serde_json::Value {
    json!({
        "id": "msg_1",
        "type": "message",
        "role": "assistant",
        "content": content,
        "stop_reason": "end_turn",
        "usage": {"input_tokens": 40, "output_tokens": 9},
    })
}

fn verdict_schema() -> serde_json::Value {
    json!({"type": "object", "properties": {"ok": {"type": "boolean"}}, "required": ["ok"]})
}

fn read_file_tool() -> ToolSpec {
    ToolSpec {
        name: "read_file".to_owned(),
        description: "Read a file".to_owned(),
        parameters: json!({"type": "object", "properties": {"path": {"type": "string"}}}),
    }
}

#[tokio::test]
async fn json_answer_is_a_forced_tool_whose_input_is_the_text() {
    let server = TestServer::start([Reply::json(
        200,
        message(json!([
            {"type": "tool_use", "id": "toolu_1", "name": "verdict", "input": {"ok": true}},
        ])),
    )])
    .await;
    let provider = provider(&server.url(), Duration::from_secs(5));
    let request = ChatRequest {
        system: "You judge.".to_owned(),
        messages: vec![ChatMessage::user("Is 2 even?")],
        response: ResponseFormat::Json { name: "verdict".to_owned(), schema: verdict_schema() },
        max_tokens: 100,
        temperature: Some(0.5),
        ..ChatRequest::default()
    };

    let response = provider.complete(&request).await.unwrap();

    assert_eq!(response.text, "{\"ok\":true}");
    assert!(response.tool_calls.is_empty(), "the JSON answer is not a tool call");
    assert_eq!(response.usage, Usage { input_tokens: 40, output_tokens: 9 });
    let wire = server.single_request();
    assert_eq!((wire.method.as_str(), wire.path.as_str()), ("POST", "/v1/messages"));
    assert_eq!(wire.header("x-api-key"), Some(KEY));
    assert_eq!(wire.header("anthropic-version"), Some("2023-06-01"));
    assert_eq!(wire.header("content-type"), Some("application/json"));
    assert_eq!(wire.header("authorization"), None);
    let body = wire.json();
    assert_eq!(body["tools"][0]["name"], "verdict");
    assert_eq!(body["tools"][0]["input_schema"], verdict_schema());
    let mut expected = json!({
        "model": "claude-test",
        "max_tokens": 100,
        "system": "You judge.",
        "messages": [{"role": "user", "content": [{"type": "text", "text": "Is 2 even?"}]}],
        "tools": [{"name": "verdict", "input_schema": verdict_schema()}],
        "tool_choice": {"type": "tool", "name": "verdict"},
        "temperature": 0.5,
    });
    expected["tools"][0]["description"] = body["tools"][0]["description"].clone();
    assert_eq!(body, expected);
}

#[tokio::test]
async fn tool_calls_round_trip() {
    let server = TestServer::start([Reply::json(
        200,
        message(json!([
            {"type": "thinking", "thinking": "hmm", "signature": "x"},
            {"type": "text", "text": "Reading "},
            {"type": "text", "text": "both."},
            {"type": "tool_use", "id": "toolu_1", "name": "read_file", "input": {"path": "a.txt"}},
            {"type": "tool_use", "id": "toolu_2", "name": "read_file", "input": {}},
        ])),
    )])
    .await;
    let provider = provider(&server.url(), Duration::from_secs(5));
    let request = ChatRequest {
        messages: vec![ChatMessage::user("Read a.txt and b.txt")],
        tools: vec![read_file_tool()],
        require_tool: true,
        ..ChatRequest::default()
    };

    let response = provider.complete(&request).await.unwrap();

    assert_eq!(response.text, "Reading both.");
    assert_eq!(
        response.tool_calls,
        vec![
            ProviderToolCall {
                id: "toolu_1".to_owned(),
                name: "read_file".to_owned(),
                arguments: "{\"path\":\"a.txt\"}".to_owned(),
            },
            ProviderToolCall {
                id: "toolu_2".to_owned(),
                name: "read_file".to_owned(),
                arguments: "{}".to_owned(),
            },
        ]
    );
    assert_eq!(
        server.single_request().json(),
        json!({
            "model": "claude-test",
            "max_tokens": AnthropicConfig::DEFAULT_MAX_TOKENS,
            "messages": [{"role": "user", "content": [
                {"type": "text", "text": "Read a.txt and b.txt"},
            ]}],
            "tools": [{
                "name": "read_file",
                "description": "Read a file",
                "input_schema": read_file_tool().parameters,
            }],
            "tool_choice": {"type": "any"},
        })
    );
}

#[tokio::test]
async fn tool_results_merge_into_one_user_message() {
    let server =
        TestServer::start([Reply::json(200, message(json!([{"type": "text", "text": "Done."}])))])
            .await;
    let provider = provider(&server.url(), Duration::from_secs(5));
    let calls = vec![
        ProviderToolCall {
            id: "toolu_1".to_owned(),
            name: "read_file".to_owned(),
            arguments: "{\"path\":\"a.txt\"}".to_owned(),
        },
        ProviderToolCall {
            id: "toolu_2".to_owned(),
            name: "read_file".to_owned(),
            arguments: "{\"path\": \"b.tx".to_owned(),
        },
    ];
    let request = ChatRequest {
        system: "Be brief.".to_owned(),
        messages: vec![
            ChatMessage::user("Read a.txt and b.txt"),
            ChatMessage { tool_calls: calls, ..ChatMessage::assistant("Reading.") },
            ChatMessage::tool_result("toolu_1", "alpha"),
            ChatMessage::tool_result("toolu_2", "error: bad arguments"),
            ChatMessage::user("Go on."),
        ],
        tools: vec![read_file_tool()],
        ..ChatRequest::default()
    };

    let response = provider.complete(&request).await.unwrap();

    assert_eq!(response.text, "Done.");
    let body = server.single_request().json();
    assert_eq!(body["system"], "Be brief.");
    assert_eq!(body.get("tool_choice"), None);
    assert_eq!(
        body["messages"],
        json!([
            {"role": "user", "content": [{"type": "text", "text": "Read a.txt and b.txt"}]},
            {"role": "assistant", "content": [
                {"type": "text", "text": "Reading."},
                {"type": "tool_use", "id": "toolu_1", "name": "read_file",
                 "input": {"path": "a.txt"}},
                {"type": "tool_use", "id": "toolu_2", "name": "read_file", "input": {}},
            ]},
            {"role": "user", "content": [
                {"type": "tool_result", "tool_use_id": "toolu_1", "content": "alpha"},
                {"type": "tool_result", "tool_use_id": "toolu_2",
                 "content": "error: bad arguments"},
                {"type": "text", "text": "Go on."},
            ]},
        ])
    );
}

async fn fail_with(reply: Reply) -> agent_llm::ProviderError {
    let server = TestServer::start([reply]).await;
    let provider = provider(&server.url(), Duration::from_secs(5));
    let error = provider.complete(&ChatRequest::default()).await.unwrap_err();
    assert_eq!(server.requests().len(), 1);
    error
}

fn anthropic_error(kind: &str, message: &str) -> serde_json::Value {
    json!({"type": "error", "error": {"type": kind, "message": message}})
}

#[tokio::test]
async fn unauthorized_names_provider_model_and_status_but_never_the_key() {
    let error = fail_with(Reply::json(
        401,
        anthropic_error("authentication_error", &format!("invalid x-api-key {KEY}")),
    ))
    .await;
    assert_eq!(error.kind, ProviderErrorKind::Unauthorized);
    let text = error.to_string();
    for part in ["anthropic", "claude-test", "401", "invalid x-api-key"] {
        assert!(text.contains(part), "{part} missing from {text}");
    }
    assert!(!text.contains(KEY), "the key leaked: {text}");
    let config = AnthropicConfig { api_key: Some(KEY.to_owned()), ..AnthropicConfig::new("m") };
    assert!(!format!("{config:?}").contains(KEY));
    assert!(!format!("{:?}", AnthropicProvider::new(config).unwrap()).contains(KEY));
}

#[tokio::test]
async fn failures_are_classified() {
    let error =
        fail_with(Reply::json(529, anthropic_error("overloaded_error", "Overloaded"))).await;
    assert_eq!(error.kind, ProviderErrorKind::Server);
    assert!(error.message.contains("529") && error.message.contains("Overloaded"), "{error}");
    let error =
        fail_with(Reply::json(404, anthropic_error("not_found_error", "model: claude-test"))).await;
    assert_eq!(error.kind, ProviderErrorKind::UnknownModel);
    let error = fail_with(Reply::json(
        400,
        anthropic_error("invalid_request_error", "messages: roles must alternate"),
    ))
    .await;
    assert_eq!(error.kind, ProviderErrorKind::BadRequest);
    let error = fail_with(
        Reply::json(429, anthropic_error("rate_limit_error", "slow down"))
            .header("retry-after", "1.5"),
    )
    .await;
    assert_eq!(error.kind, ProviderErrorKind::RateLimited);
    assert_eq!(error.retry_after, Some(Duration::from_millis(1_500)));
    let error = fail_with(Reply::json(200, json!({"type": "message"}))).await;
    assert_eq!(error.kind, ProviderErrorKind::BadResponse);
    let error = fail_with(Reply::raw(200, "text/plain", "not json")).await;
    assert_eq!(error.kind, ProviderErrorKind::BadResponse);
}

#[tokio::test]
async fn transport_failures_are_classified() {
    let server =
        TestServer::start([Reply::json(200, message(json!([]))).after(Duration::from_secs(10))])
            .await;
    // One token at the assumed 8 a second, twice: the call may take 200 + 250 ms.
    let error = provider(&server.url(), Duration::from_millis(200))
        .complete(&ChatRequest { max_tokens: 1, ..ChatRequest::default() })
        .await
        .unwrap_err();
    assert_eq!(error.kind, ProviderErrorKind::Timeout, "{error}");
    assert!(error.message.contains("within 450ms"), "{error}");
    let error = provider(&refused_url().await, Duration::from_secs(5))
        .complete(&ChatRequest::default())
        .await
        .unwrap_err();
    assert_eq!(error.kind, ProviderErrorKind::Connection, "{error}");
}

#[test]
fn bad_config_is_refused_with_a_fix() {
    let error = AnthropicProvider::new(AnthropicConfig {
        base_url: "not a url".to_owned(),
        ..AnthropicConfig::new("claude-test")
    })
    .unwrap_err();
    let text = error.to_string();
    assert!(text.starts_with("base_url `not a url`: not a URL"), "{text}");
    assert!(text.contains("https://api.anthropic.com"), "{text}");
    let error = AnthropicProvider::new(AnthropicConfig::new("")).unwrap_err();
    assert!(matches!(error, ConfigError::EmptyModel { .. }), "{error}");
    assert!(AnthropicProvider::new(AnthropicConfig::new("claude-test")).is_ok());
}
