//! Structured output that adapts to the server, against loopback servers: each mode's wire
//! format, `auto` moving on when the server refuses a mode because of its format (at once, not
//! retried), remembering it for later calls, explicit modes honoured as given, a server that
//! refuses every mode, and a server's validation error in a 5xx that is not retried.

use std::time::Duration;

use agent_llm::{
    AnthropicConfig, AnthropicProvider, ChatMessage, ChatRequest, ConfigError, OpenAiConfig,
    OpenAiProvider, Provider, ProviderErrorKind, ResponseFormat, RetryEvent, StructuredMode,
    StructuredOutput, complete_with_retry,
};
use agent_state::RetryPolicy;
use serde_json::json;

use crate::http_server::{Reply, TestServer};

fn provider(url: &str, structured_output: StructuredOutput) -> OpenAiProvider {
    OpenAiProvider::new(OpenAiConfig {
        timeout: Duration::from_secs(5),
        structured_output,
        ..OpenAiConfig::new(format!("{url}/v1"), "gemma")
    })
    .unwrap()
}

fn answer(message: serde_json::Value) -> Reply {
    Reply::json(
        200,
        json!({
            "choices": [{"index": 0, "message": message, "finish_reason": "stop"}],
            "usage": {"prompt_tokens": 20, "completion_tokens": 5},
        }),
    )
}

fn text(content: &str) -> Reply {
    answer(json!({"role": "assistant", "content": content}))
}

fn schema() -> serde_json::Value {
    json!({"type": "object", "properties": {"ok": {"type": "boolean"}}, "required": ["ok"]})
}

fn verdict() -> ChatRequest {
    ChatRequest {
        system: "You judge.".to_owned(),
        messages: vec![ChatMessage::user("Is 2 even?")],
        response: ResponseFormat::Json { name: "verdict".to_owned(), schema: schema() },
        max_tokens: 50,
        ..ChatRequest::default()
    }
}

/// What llama-cpp-python 0.3 answers to `response_format: json_schema`: HTTP 500 with
/// pydantic's validation error.
fn llama_cpp_python_refusal() -> Reply {
    Reply::json(
        500,
        json!({"error": {"message": "[{'type': 'literal_error', 'loc': ('body', 'response_format', 'type'), 'msg': \"Input should be 'text' or 'json_object'\", 'input': 'json_schema', 'ctx': {'expected': \"'text' or 'json_object'\"}}]", "type": "internal_server_error"}}),
    )
}

/// Every call of the policy's retries, counted.
async fn with_retries(
    provider: &dyn Provider,
    request: &ChatRequest,
) -> (Result<agent_llm::ChatResponse, agent_llm::ProviderError>, u32) {
    let mut failed = 0;
    let mut observe = |_: &RetryEvent<'_>| failed += 1;
    let policy = RetryPolicy { max_retries: 3, ..RetryPolicy::executor_default() };
    let result = complete_with_retry(provider, request, &policy, &mut observe).await;
    (result.map(|(r, _)| r), failed)
}

#[tokio::test]
async fn auto_moves_from_json_schema_to_json_object_at_once_and_remembers() {
    let server = TestServer::start([
        llama_cpp_python_refusal(),
        text("{\"ok\": true}"),
        text("```json\n{\"ok\": false}\n```"),
    ])
    .await;
    let provider = provider(&server.url(), StructuredOutput::Auto);

    let (first, failed) = with_retries(&provider, &verdict()).await;
    let second = provider.complete(&verdict()).await.unwrap();

    assert_eq!(first.unwrap().text, "{\"ok\": true}");
    assert_eq!(failed, 0, "a refused mode is not a failed attempt");
    assert_eq!(second.text, "{\"ok\": false}", "a fenced answer is taken out of its fence");
    let requests = server.requests();
    assert_eq!(requests.len(), 3, "one refusal, then json_object for both calls");
    assert_eq!(requests[0].json()["response_format"]["type"], "json_schema");
    for later in &requests[1..] {
        let body = later.json();
        assert_eq!(body["response_format"], json!({"type": "json_object", "schema": schema()}));
        let system = body["messages"][0]["content"].as_str().unwrap();
        assert!(system.starts_with("You judge.") && system.contains("\"required\":[\"ok\"]"));
    }
    let choice = provider.structured_choice().unwrap();
    assert_eq!(choice.mode, Some(StructuredMode::JsonObject));
    assert_eq!(choice.setting, "auto");
    assert_eq!(choice.rejected.len(), 1);
    assert_eq!(choice.rejected[0].mode, StructuredMode::JsonSchema);
    assert!(choice.rejected[0].reason.contains("Input should be 'text' or 'json_object'"));
}

#[tokio::test]
async fn auto_reaches_a_forced_tool_call_and_reads_its_arguments() {
    let server = TestServer::start([
        Reply::json(400, json!({"error": {"message": "response_format is not supported"}})),
        Reply::json(400, json!({"error": {"message": "'response_format.type' must be 'json_schema'... json_object unsupported"}})),
        answer(json!({
            "role": "assistant",
            "content": null,
            "tool_calls": [{"id": "c1", "type": "function", "function": {"name": "verdict", "arguments": "{\"ok\":true}"}}],
        })),
    ])
    .await;
    let provider = provider(&server.url(), StructuredOutput::Auto);

    let response = provider.complete(&verdict()).await.unwrap();

    assert_eq!(response.text, "{\"ok\":true}");
    assert!(response.tool_calls.is_empty(), "the forced call is the answer, not a tool call");
    let body = server.requests()[2].json();
    assert!(body.get("response_format").is_none());
    assert_eq!(body["tool_choice"], json!({"type": "function", "function": {"name": "verdict"}}));
    assert_eq!(body["tools"][0]["function"]["name"], "verdict");
    assert_eq!(body["tools"][0]["function"]["parameters"], schema());
    assert_eq!(provider.structured_choice().unwrap().mode, Some(StructuredMode::ToolCall));
}

#[tokio::test]
async fn prompt_mode_sends_no_format_and_the_schema_in_the_prompt() {
    let server = TestServer::start([text("{\"ok\": true}")]).await;
    let provider = provider(&server.url(), StructuredOutput::Only(StructuredMode::Prompt));

    let response = provider.complete(&verdict()).await.unwrap();

    assert_eq!(response.text, "{\"ok\": true}");
    let body = server.single_request().json();
    assert!(body.get("response_format").is_none() && body.get("tools").is_none());
    let system = body["messages"][0]["content"].as_str().unwrap();
    assert!(system.contains("JSON Schema") && system.contains("\"ok\""));
}

#[tokio::test]
async fn a_server_that_refuses_every_mode_fails_once_naming_what_was_tried() {
    let refuse = || {
        Reply::json(
            400,
            json!({"error": {"message": "unsupported: response_format, tools and schema"}}),
        )
    };
    let server = TestServer::start([refuse(), refuse(), refuse(), refuse(), text("late")]).await;
    let provider = provider(&server.url(), StructuredOutput::Auto);

    let (result, failed) = with_retries(&provider, &verdict()).await;

    let error = result.unwrap_err();
    assert_eq!(error.kind, ProviderErrorKind::BadRequest);
    assert!(!error.is_transient());
    assert_eq!(failed, 1, "the exhausted call fails once, without retries");
    for mode in ["json_schema", "json_object", "tool_call", "prompt"] {
        assert!(error.message.contains(&format!("{mode} (HTTP 400")), "{mode}: {error}");
    }
    assert_eq!(server.requests().len(), 4, "one request per mode, none retried");
    assert_eq!(provider.structured_choice().unwrap().mode, None);
}

#[tokio::test]
async fn an_explicit_mode_is_honoured_and_its_refusal_says_to_use_auto() {
    let server = TestServer::start([llama_cpp_python_refusal(), text("{\"ok\": true}")]).await;
    let provider = provider(&server.url(), StructuredOutput::Only(StructuredMode::JsonSchema));

    let error = provider.complete(&verdict()).await.unwrap_err();

    assert_eq!(server.requests().len(), 1, "no other mode is tried");
    assert!(error.message.contains("structured_output = \"auto\""), "{error}");
    assert!(error.message.contains("json_schema (HTTP 500"), "{error}");
}

#[tokio::test]
async fn a_refusal_not_about_the_format_does_not_switch_modes() {
    let server = TestServer::start([
        Reply::json(400, json!({"error": {"message": "max_tokens is too large"}})),
        text("{\"ok\": true}"),
    ])
    .await;
    let provider = provider(&server.url(), StructuredOutput::Auto);

    let error = provider.complete(&verdict()).await.unwrap_err();

    assert_eq!(error.kind, ProviderErrorKind::BadRequest);
    assert!(error.message.contains("max_tokens"));
    assert_eq!(server.requests().len(), 1);
    assert_eq!(provider.structured_choice().unwrap().mode, Some(StructuredMode::JsonSchema));
}

#[tokio::test]
async fn a_validation_error_in_a_5xx_is_not_retried_but_a_crash_is() {
    let server = TestServer::start([llama_cpp_python_refusal(), text("unused")]).await;
    let provider = provider(&server.url(), StructuredOutput::Auto);
    let plain = ChatRequest { messages: vec![ChatMessage::user("hi")], ..ChatRequest::default() };

    let (result, failed) = with_retries(&provider, &plain).await;

    let error = result.unwrap_err();
    assert_eq!(error.kind, ProviderErrorKind::BadRequest, "{error}");
    assert_eq!((failed, server.requests().len()), (1, 1), "not retried as transient");

    let server = TestServer::start([
        Reply::json(500, json!({"error": {"message": "CUDA error: out of memory"}})),
        text("recovered"),
    ])
    .await;
    let provider = self::provider(&server.url(), StructuredOutput::Auto);
    let policy = RetryPolicy { initial_delay_ms: 1, ..RetryPolicy::executor_default() };
    let (response, stats) =
        complete_with_retry(&provider, &plain, &policy, &mut |_: &RetryEvent<'_>| {})
            .await
            .unwrap();
    assert_eq!((response.text.as_str(), stats.failures), ("recovered", 1));
}

#[tokio::test]
async fn preflight_finds_the_mode_and_fails_naming_the_server_when_none_works() {
    // The server has no model list (404), takes json_object.
    let server = TestServer::start([
        Reply::json(404, json!({"error": "not found"})),
        llama_cpp_python_refusal(),
        text("{\"ok\": true}"),
    ])
    .await;
    let provider = provider(&server.url(), StructuredOutput::Auto);
    provider.preflight().await.unwrap();
    assert_eq!(provider.structured_choice().unwrap().mode, Some(StructuredMode::JsonObject));
    let probe = server.requests()[2].json();
    assert_eq!(probe["max_tokens"], 16, "the probe is short");

    let refuse = || Reply::json(400, json!({"error": {"message": "no response_format, no tools"}}));
    let server = TestServer::start([
        Reply::json(200, json!({"data": [{"id": "gemma"}]})),
        refuse(),
        refuse(),
        refuse(),
        refuse(),
    ])
    .await;
    let refusing = self::provider(&server.url(), StructuredOutput::Auto);
    let error = refusing.preflight().await.unwrap_err();
    let message = error.to_string();
    assert!(message.contains("openai model `gemma`"), "{message}");
    assert!(
        message.contains(&format!("the server at {}/v1/chat/completions", server.url())),
        "{message}"
    );
    assert!(message.contains("tried: json_schema"), "{message}");
}

#[tokio::test]
async fn a_choice_learned_elsewhere_is_not_tried_again() {
    let first = TestServer::start([llama_cpp_python_refusal(), text("{}")]).await;
    let probe = provider(&first.url(), StructuredOutput::Auto);
    probe.complete(&verdict()).await.unwrap();
    let server = TestServer::start([text("{\"ok\": true}")]).await;

    let later = provider(&server.url(), StructuredOutput::Auto);
    later.remember(&probe.structured_choice().unwrap());
    later.complete(&verdict()).await.unwrap();

    assert_eq!(server.single_request().json()["response_format"]["type"], "json_object");
}

#[tokio::test]
async fn anthropic_moves_from_tool_use_to_the_prompt_and_refuses_json_modes() {
    let server = TestServer::start([
        Reply::json(400, json!({"type": "error", "error": {"type": "invalid_request_error", "message": "tool_choice: tools are not supported by this proxy"}})),
        Reply::json(200, json!({"content": [{"type": "text", "text": "{\"ok\": true}"}], "usage": {"input_tokens": 9, "output_tokens": 4}})),
    ])
    .await;
    let provider = AnthropicProvider::new(AnthropicConfig {
        base_url: server.url(),
        ..AnthropicConfig::new("claude-test")
    })
    .unwrap();

    let response = provider.complete(&verdict()).await.unwrap();

    assert_eq!(response.text, "{\"ok\": true}");
    let body = server.requests()[1].json();
    assert!(body.get("tools").is_none() && body.get("tool_choice").is_none());
    assert!(body["system"].as_str().unwrap().contains("JSON Schema"));
    assert_eq!(provider.structured_choice().unwrap().mode, Some(StructuredMode::Prompt));

    let error = AnthropicProvider::new(AnthropicConfig {
        structured_output: StructuredOutput::Only(StructuredMode::JsonSchema),
        ..AnthropicConfig::new("claude-test")
    })
    .unwrap_err();
    assert!(matches!(error, ConfigError::StructuredOutput(_)));
    assert!(error.to_string().contains("\"tool_call\", \"prompt\""), "{error}");
}

fn write_file() -> agent_llm::ToolSpec {
    agent_llm::ToolSpec {
        name: "write_file".to_owned(),
        description: "Writes a file.".to_owned(),
        parameters: json!({"type": "object", "properties": {"path": {"type": "string"}}}),
    }
}

/// A tool-loop request: the model must call one of the tools.
fn must_call() -> ChatRequest {
    ChatRequest {
        system: "You act.".to_owned(),
        messages: vec![ChatMessage::user("Write a.txt.")],
        tools: vec![write_file()],
        require_tool: true,
        max_tokens: 50,
        ..ChatRequest::default()
    }
}

#[tokio::test]
async fn a_server_ignoring_tool_choice_required_gets_the_call_asked_as_json() {
    // llama-cpp-python answers `tool_choice: "required"` with empty text, then (after its
    // json_schema refusal) takes the question as json_object.
    let server = TestServer::start([
        text(""),
        llama_cpp_python_refusal(),
        text("{\"tool\": \"write_file\", \"arguments\": {\"path\": \"a.txt\"}}"),
        text("{\"tool\": \"write_file\", \"arguments\": {\"path\": \"b.txt\"}}"),
    ])
    .await;
    let provider = provider(&server.url(), StructuredOutput::Auto);

    let first = provider.complete(&must_call()).await.unwrap();
    let second = provider.complete(&must_call()).await.unwrap();

    assert_eq!(first.tool_calls.len(), 1);
    assert_eq!(first.tool_calls[0].name, "write_file");
    assert_eq!(first.tool_calls[0].arguments, "{\"path\":\"a.txt\"}");
    assert_eq!(first.usage.input_tokens, 40, "the answer without a call is counted too");
    assert_eq!(second.tool_calls[0].arguments, "{\"path\":\"b.txt\"}");
    let requests = server.requests();
    assert_eq!(requests.len(), 4, "once asked natively, then always as JSON");
    assert_eq!(requests[0].json()["tool_choice"], "required");
    let question = requests[3].json();
    assert!(question.get("tools").is_none() && question.get("tool_choice").is_none());
    assert_eq!(question["response_format"]["type"], "json_object");
    assert_eq!(question["response_format"]["schema"]["properties"]["tool"]["const"], "write_file");
    let choice = provider.structured_choice().unwrap();
    assert!(choice.tool_calls_emulated);
    assert!(choice.to_string().contains("tool calls asked as JSON"), "{choice}");
}
