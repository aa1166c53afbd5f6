//! The OpenAI-compatible provider against a loopback server: the wire format both ways, and
//! how each failure is classified.

use std::time::Duration;

use agent_llm::{
    ChatMessage, ChatRequest, ConfigError, OpenAiConfig, OpenAiProvider, Provider,
    ProviderErrorKind, ProviderToolCall, ResponseFormat, ToolSpec, Usage,
};
use serde_json::json;

use crate::http_server::{Reply, TestServer, refused_url};

const KEY: &str = "sk-test-0123456789-secret";

/// A provider for `gpt-test` at `url` + `/v1`, with `key`.
fn provider(url: &str, key: Option<&str>, timeout: Duration) -> OpenAiProvider {
    OpenAiProvider::new(OpenAiConfig {
        base_url: format!("{url}/v1"),
        model: "gpt-test".to_owned(),
        api_key: key.map(str::to_owned),
        timeout,
        structured_output: agent_llm::StructuredOutput::Auto,
        completions: false,
    })
    .unwrap()
}

fn answer(message: serde_json::Value) -> serde_json::Value {
    json!({
        "id": "chatcmpl-1",
        "object": "chat.completion",
        "choices": [{"index": 0, "message": message, "finish_reason": "stop"}],
        "usage": {"prompt_tokens": 31, "completion_tokens": 7, "total_tokens": 38},
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
async fn json_answer_sends_the_schema_and_reads_the_text() {
    let server = TestServer::start([Reply::json(
        200,
        answer(json!({"role": "assistant", "content": "{\"ok\":true}"})),
    )])
    .await;
    let provider = provider(&server.url(), Some(KEY), Duration::from_secs(5));
    let request = ChatRequest {
        system: "You judge.".to_owned(),
        messages: vec![
            ChatMessage::user("Is 2 even?"),
            ChatMessage::assistant("Let me think."),
            ChatMessage::user("Answer."),
        ],
        response: ResponseFormat::Json { name: "verdict".to_owned(), schema: verdict_schema() },
        max_tokens: 100,
        temperature: Some(0.5),
        ..ChatRequest::default()
    };

    let response = provider.complete(&request).await.unwrap();

    assert_eq!(response.text, "{\"ok\":true}");
    assert!(response.tool_calls.is_empty());
    assert_eq!(response.usage, Usage { input_tokens: 31, output_tokens: 7 });
    let wire = server.single_request();
    assert_eq!((wire.method.as_str(), wire.path.as_str()), ("POST", "/v1/chat/completions"));
    assert_eq!(wire.header("authorization"), Some(format!("Bearer {KEY}").as_str()));
    assert_eq!(wire.header("content-type"), Some("application/json"));
    assert_eq!(
        wire.json(),
        json!({
            "model": "gpt-test",
            "messages": [
                {"role": "system", "content": "You judge."},
                {"role": "user", "content": "Is 2 even?"},
                {"role": "assistant", "content": "Let me think."},
                {"role": "user", "content": "Answer."},
            ],
            "response_format": {
                "type": "json_schema",
                "json_schema": {"name": "verdict", "schema": verdict_schema(), "strict": false},
            },
            "max_tokens": 100,
            "temperature": 0.5,
        })
    );
}

#[tokio::test]
async fn tool_calls_round_trip_and_malformed_arguments_stay_raw() {
    let server = TestServer::start([Reply::json(
        200,
        json!({"choices": [{"message": {
            "role": "assistant",
            "content": null,
            "tool_calls": [
                {"id": "call_1", "type": "function",
                 "function": {"name": "read_file", "arguments": "{\"path\":\"a.txt\"}"}},
                {"id": "call_2", "type": "function",
                 "function": {"name": "read_file", "arguments": "{\"path\": \"b.tx"}},
            ],
        }}]}),
    )])
    .await;
    let provider = provider(&server.url(), None, Duration::from_secs(5));
    let request = ChatRequest {
        messages: vec![ChatMessage::user("Read a.txt and b.txt")],
        tools: vec![read_file_tool()],
        require_tool: true,
        ..ChatRequest::default()
    };

    let response = provider.complete(&request).await.unwrap();

    assert_eq!(response.text, "");
    assert_eq!(
        response.tool_calls,
        vec![
            ProviderToolCall {
                id: "call_1".to_owned(),
                name: "read_file".to_owned(),
                arguments: "{\"path\":\"a.txt\"}".to_owned(),
            },
            ProviderToolCall {
                id: "call_2".to_owned(),
                name: "read_file".to_owned(),
                arguments: "{\"path\": \"b.tx".to_owned(),
            },
        ]
    );
    assert_eq!(response.usage, Usage::default(), "no usage in the answer: zeros");
    let wire = server.single_request();
    assert_eq!(wire.header("authorization"), None, "no key, no header");
    assert_eq!(
        wire.json(),
        json!({
            "model": "gpt-test",
            "messages": [{"role": "user", "content": "Read a.txt and b.txt"}],
            "tools": [{"type": "function", "function": {
                "name": "read_file",
                "description": "Read a file",
                "parameters": read_file_tool().parameters,
            }}],
            "tool_choice": "required",
        })
    );
}

#[tokio::test]
async fn tool_results_map_onto_tool_messages() {
    let server = TestServer::start([Reply::json(
        200,
        answer(json!({"role": "assistant", "content": "Both read."})),
    )])
    .await;
    let provider = provider(&server.url(), None, Duration::from_secs(5));
    let calls = vec![
        ProviderToolCall {
            id: "call_1".to_owned(),
            name: "read_file".to_owned(),
            arguments: "{\"path\":\"a.txt\"}".to_owned(),
        },
        ProviderToolCall {
            id: "call_2".to_owned(),
            name: "read_file".to_owned(),
            arguments: "{\"path\": \"b.tx".to_owned(),
        },
    ];
    let request = ChatRequest {
        system: "Be brief.".to_owned(),
        messages: vec![
            ChatMessage::user("Read a.txt and b.txt"),
            ChatMessage { tool_calls: calls, ..ChatMessage::assistant("") },
            ChatMessage::tool_result("call_1", "alpha"),
            ChatMessage::tool_result("call_2", "error: bad arguments"),
            ChatMessage { tool_calls: Vec::new(), ..ChatMessage::assistant("Retrying.") },
            ChatMessage::user("Go on."),
        ],
        tools: vec![read_file_tool()],
        ..ChatRequest::default()
    };

    let response = provider.complete(&request).await.unwrap();

    assert_eq!(response.text, "Both read.");
    let body = server.single_request().json();
    assert_eq!(body.get("tool_choice"), None, "require_tool is off: the server's default");
    assert_eq!(
        body["messages"],
        json!([
            {"role": "system", "content": "Be brief."},
            {"role": "user", "content": "Read a.txt and b.txt"},
            {"role": "assistant", "content": null, "tool_calls": [
                {"id": "call_1", "type": "function",
                 "function": {"name": "read_file", "arguments": "{\"path\":\"a.txt\"}"}},
                {"id": "call_2", "type": "function",
                 "function": {"name": "read_file", "arguments": "{\"path\": \"b.tx"}},
            ]},
            {"role": "tool", "tool_call_id": "call_1", "content": "alpha"},
            {"role": "tool", "tool_call_id": "call_2", "content": "error: bad arguments"},
            {"role": "assistant", "content": "Retrying."},
            {"role": "user", "content": "Go on."},
        ])
    );
}

/// Sends one request to a server answering `reply` and returns the error.
async fn fail_with(reply: Reply) -> (agent_llm::ProviderError, usize) {
    let server = TestServer::start([reply]).await;
    let provider = provider(&server.url(), Some(KEY), Duration::from_secs(5));
    let error = provider.complete(&ChatRequest::default()).await.unwrap_err();
    (error, server.requests().len())
}

#[tokio::test]
async fn unauthorized_names_provider_model_and_status_but_never_the_key() {
    let (error, requests) = fail_with(Reply::json(
        401,
        json!({"error": {"message": format!("Incorrect API key provided: {KEY}"),
                         "type": "invalid_request_error", "code": "invalid_api_key"}}),
    ))
    .await;

    assert_eq!(requests, 1);
    assert_eq!(error.kind, ProviderErrorKind::Unauthorized);
    assert!(!error.is_transient());
    let text = error.to_string();
    for part in ["openai", "gpt-test", "401", "Incorrect API key provided"] {
        assert!(text.contains(part), "{part} missing from {text}");
    }
    assert!(!text.contains(KEY), "the key leaked: {text}");
    assert!(!format!("{error:?}").contains(KEY));

    // A key straddling the truncation point leaks no prefix either.
    let long = format!("{} {KEY} {}", "x".repeat(290), "y".repeat(100));
    let (error, _) = fail_with(Reply::json(401, json!({"error": {"message": long}}))).await;
    assert!(!error.message.contains(&KEY[..8]), "{}", error.message);
}

#[tokio::test]
async fn debug_output_redacts_the_key() {
    let config =
        OpenAiConfig { api_key: Some(KEY.to_owned()), ..OpenAiConfig::new("http://x", "m") };
    assert!(format!("{config:?}").contains("<redacted>"));
    assert!(!format!("{config:?}").contains(KEY));
    let provider = OpenAiProvider::new(config).unwrap();
    assert!(!format!("{provider:?}").contains(KEY), "{provider:?}");
}

#[tokio::test]
async fn not_found_is_an_unknown_model() {
    let (error, _) = fail_with(Reply::json(
        404,
        json!({"error": {"message": "The model `gpt-test` does not exist", "code": "model_not_found"}}),
    ))
    .await;
    assert_eq!(error.kind, ProviderErrorKind::UnknownModel);
    assert!(error.message.contains("404") && error.message.contains("does not exist"));
}

#[tokio::test]
async fn bad_request_saying_model_not_found_is_an_unknown_model() {
    let (error, _) = fail_with(Reply::json(
        400,
        json!({"error": {"message": "no such thing", "code": "model_not_found"}}),
    ))
    .await;
    assert_eq!(error.kind, ProviderErrorKind::UnknownModel);
    // Ollama's dialect: a string error naming the model.
    let (error, _) = fail_with(Reply::json(
        400,
        json!({"error": "model \"gpt-test\" not found, try pulling it"}),
    ))
    .await;
    assert_eq!(error.kind, ProviderErrorKind::UnknownModel);
    let (error, _) = fail_with(Reply::json(
        400,
        json!({"error": {"message": "max_tokens is too large", "code": null}}),
    ))
    .await;
    assert_eq!(error.kind, ProviderErrorKind::BadRequest);
    assert!(error.message.contains("400") && error.message.contains("max_tokens is too large"));
}

#[tokio::test]
async fn forbidden_and_server_errors_are_classified() {
    let (error, _) = fail_with(Reply::json(403, json!({"error": {"message": "no"}}))).await;
    assert_eq!(error.kind, ProviderErrorKind::Forbidden);
    let (error, _) = fail_with(Reply::raw(502, "text/html", "<html>bad gateway</html>")).await;
    assert_eq!(error.kind, ProviderErrorKind::Server);
    assert!(error.message.contains("502") && error.message.contains("bad gateway"));
    let long = "x".repeat(2_000);
    let (error, _) = fail_with(Reply::json(500, json!({"error": {"message": long}}))).await;
    assert!(error.message.len() < 400, "provider message truncated: {}", error.message.len());
}

#[tokio::test]
async fn rate_limit_carries_retry_after() {
    let (error, _) = fail_with(
        Reply::json(429, json!({"error": {"message": "slow down"}})).header("retry-after", "2"),
    )
    .await;
    assert_eq!(error.kind, ProviderErrorKind::RateLimited);
    assert_eq!(error.retry_after, Some(Duration::from_secs(2)));
}

/// A request for at most `max_tokens` tokens.
fn at_most(max_tokens: u32) -> ChatRequest {
    ChatRequest { max_tokens, ..ChatRequest::default() }
}

#[tokio::test]
async fn slow_answer_times_out() {
    let server = TestServer::start([
        Reply::json(200, answer(json!({"content": "late"}))).after(Duration::from_secs(10))
    ])
    .await;
    let provider = provider(&server.url(), None, Duration::from_millis(200));
    let started = std::time::Instant::now();
    // One token at the assumed 8 a second, twice: 250 ms on top of the 200 ms timeout.
    let error = provider.complete(&at_most(1)).await.unwrap_err();
    assert_eq!(error.kind, ProviderErrorKind::Timeout, "{error}");
    assert!(error.message.contains("no answer within 450ms"), "{error}");
    assert!(started.elapsed() < Duration::from_secs(5));
}

/// An answer sent whole shows nothing until it ends: it may take its timeout plus twice the
/// time of its `max_tokens` at the slowest rate measured (8 tokens a second before any).
#[tokio::test]
async fn a_whole_answer_has_time_for_its_max_tokens_at_the_slowest_rate_measured() {
    let quick = json!({
        "choices": [{"index": 0, "message": {"content": "quick"}, "finish_reason": "stop"}],
        "usage": {"prompt_tokens": 3, "completion_tokens": 4_000},
    });
    let server = TestServer::start([
        // 16 tokens at most, before any rate is measured: 4 s beyond the 200 ms timeout.
        Reply::json(200, answer(json!({"content": "slow but within"})))
            .after(Duration::from_secs(1)),
        // 4 000 tokens in a few milliseconds: a fast server.
        Reply::json(200, quick),
        // The same 16 tokens now have a few milliseconds: the same slow answer is cut.
        Reply::json(200, answer(json!({"content": "too slow now"}))).after(Duration::from_secs(1)),
    ])
    .await;
    let provider = provider(&server.url(), None, Duration::from_millis(200));
    let first = provider.complete(&at_most(16)).await.unwrap();
    assert_eq!(first.text, "slow but within");
    provider.complete(&at_most(16)).await.unwrap();
    let error = provider.complete(&at_most(16)).await.unwrap_err();
    assert_eq!(error.kind, ProviderErrorKind::Timeout, "{error}");
}

#[tokio::test]
async fn refused_connection_is_a_connection_error() {
    let provider = provider(&refused_url().await, None, Duration::from_secs(5));
    let error = provider.complete(&ChatRequest::default()).await.unwrap_err();
    assert_eq!(error.kind, ProviderErrorKind::Connection, "{error}");
    assert!(error.is_transient());
}

#[tokio::test]
async fn closed_connection_is_a_connection_error() {
    let (error, requests) = fail_with(Reply::close()).await;
    assert_eq!(requests, 1);
    assert_eq!(error.kind, ProviderErrorKind::Connection, "{error}");
}

#[tokio::test]
async fn answer_that_is_not_the_wire_format_is_a_bad_response() {
    let (error, _) = fail_with(Reply::raw(200, "text/html", "<html>hello</html>")).await;
    assert_eq!(error.kind, ProviderErrorKind::BadResponse);
    assert!(error.message.contains("<html>hello</html>"), "{error}");
    let (error, _) = fail_with(Reply::json(200, json!({"object": "list", "data": []}))).await;
    assert_eq!(error.kind, ProviderErrorKind::BadResponse);
    let (error, _) = fail_with(Reply::json(200, json!({"choices": []}))).await;
    assert_eq!(error.kind, ProviderErrorKind::BadResponse);
}

#[test]
fn bad_config_is_refused_with_a_fix() {
    let refuse = |config: OpenAiConfig| OpenAiProvider::new(config).unwrap_err();

    let error = refuse(OpenAiConfig::new("not a url", "gpt-test"));
    assert!(matches!(error, ConfigError::BaseUrl { .. }));
    let text = error.to_string();
    assert!(text.starts_with("base_url `not a url`: not a URL"), "{text}");
    assert!(text.contains("https://api.openai.com/v1"), "{text}");

    let error = refuse(OpenAiConfig::new("ftp://example.com/v1", "gpt-test"));
    assert!(error.to_string().contains("scheme `ftp`"), "{error}");
    let error = refuse(OpenAiConfig::new("http://localhost:8000/v1", " "));
    assert!(matches!(error, ConfigError::EmptyModel { .. }), "{error}");
    assert!(error.to_string().starts_with("model: empty"));
    let error = refuse(OpenAiConfig {
        timeout: Duration::ZERO,
        ..OpenAiConfig::new("http://localhost:8000/v1", "m")
    });
    assert_eq!(error, ConfigError::ZeroTimeout);
    let error = refuse(OpenAiConfig {
        api_key: Some("sk-a\nb".to_owned()),
        ..OpenAiConfig::new("http://localhost:8000/v1", "m")
    });
    assert_eq!(error, ConfigError::ApiKey);
    assert!(!error.to_string().contains("sk-a"));
}
