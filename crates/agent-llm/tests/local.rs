//! The embedded model end to end: the real Gemma 3 270M file from the default model directory
//! (`strata model fetch` puts it there; CI fetches it before the tests).
#![allow(clippy::unwrap_used, clippy::expect_used, reason = "tests")]

use std::sync::Arc;

use agent_llm::{
    ChatMessage, ChatRequest, LocalConfig, LocalError, LocalProvider, ModelFileError, Provider,
    ResponseFormat, ToolSpec, verify_model,
};
use serde_json::{Value, json};

/// The provider on the fetched model; fails, saying how to fetch it, when it is missing.
///
/// One inference thread: the test runner runs tests side by side, and llama.cpp's threads spin
/// while they wait for each other, so more threads than free cores slow every test down.
async fn provider() -> LocalProvider {
    let config =
        LocalConfig { threads: 1, ..LocalConfig::default_model().expect("no model directory") };
    if let Err(error) = std::fs::metadata(&config.model_path) {
        panic!(
            "the embedded model is not at {} ({error}): fetch it with \
             `cargo run -p agent-cli --features local -- model fetch` (or set STRATA_MODEL_DIR)",
            config.model_path.display()
        );
    }
    LocalProvider::start(config).await.unwrap()
}

fn verdict_request(statement: &str) -> ChatRequest {
    ChatRequest {
        system: "You check statements. Say whether each statement is true or false.".to_owned(),
        messages: vec![ChatMessage::user(format!("Statement: {statement}"))],
        response: ResponseFormat::Json {
            name: "verdict".to_owned(),
            schema: json!({
                "type": "object",
                "properties": { "verdict": { "enum": ["true", "false"] } },
                "required": ["verdict"]
            }),
        },
        max_tokens: 32,
        ..ChatRequest::default()
    }
}

/// The answer is JSON of the schema's shape.
fn check_verdict(text: &str) {
    let value: Value =
        serde_json::from_str(text).unwrap_or_else(|e| panic!("not JSON ({e}): {text}"));
    let object = value.as_object().unwrap_or_else(|| panic!("not an object: {text}"));
    assert_eq!(object.len(), 1, "{text}");
    let verdict = object["verdict"].as_str().unwrap_or_else(|| panic!("no verdict: {text}"));
    assert!(["true", "false"].contains(&verdict), "{text}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_json_request_gets_json_valid_for_its_schema_with_usage_and_engine_timing() {
    let provider = provider().await;
    assert_eq!((provider.name(), provider.model()), ("local", "gemma-3-270m-q4_k_m"));
    let response = provider.complete(&verdict_request("Water is wet.")).await.unwrap();
    check_verdict(&response.text);
    assert!(response.tool_calls.is_empty());
    assert!(response.usage.input_tokens > 10, "{:?}", response.usage);
    assert!(response.usage.output_tokens >= 4, "{:?}", response.usage);
    let timing = response.timing.expect("the engine's timing");
    assert_eq!(timing.prompt_tokens, response.usage.input_tokens, "{timing:?}");
    assert!(timing.prompt_ms > 0.0 && timing.generate_ms > 0.0, "{timing:?}");
    // Each generated token is fed back through the model, except the last when the answer is
    // complete without asking the model for another.
    let fed = timing.generated_tokens;
    assert!(
        fed + 1 == response.usage.output_tokens || fed == response.usage.output_tokens,
        "{timing:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tool_request_gets_a_call_to_an_offered_tool_with_json_arguments() {
    let provider = provider().await;
    let weather = ToolSpec {
        name: "get_weather".to_owned(),
        description: "Get the current weather in a city.".to_owned(),
        parameters: json!({
            "type": "object",
            "properties": { "city": { "type": "string", "maxLength": 40 } },
            "required": ["city"]
        }),
    };
    let clock = ToolSpec {
        name: "get_time".to_owned(),
        description: "Get the current time in a time zone.".to_owned(),
        parameters: json!({
            "type": "object",
            "properties": { "zone": { "type": "string", "maxLength": 40 } },
            "required": ["zone"]
        }),
    };
    let request = ChatRequest {
        system: "You are an assistant that answers by calling tools.".to_owned(),
        messages: vec![ChatMessage::user("What is the weather in Paris?")],
        tools: vec![weather, clock],
        require_tool: true,
        max_tokens: 64,
        ..ChatRequest::default()
    };
    let response = provider.complete(&request).await.unwrap();
    assert_eq!(response.tool_calls.len(), 1, "{response:?}");
    let call = &response.tool_calls[0];
    assert_eq!(call.id, "local-1");
    assert!(["get_weather", "get_time"].contains(&call.name.as_str()), "{call:?}");
    let arguments: Value = serde_json::from_str(&call.arguments).unwrap();
    let key = if call.name == "get_weather" { "city" } else { "zone" };
    assert!(arguments[key].is_string(), "{call:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_requests_both_complete() {
    let provider = Arc::new(provider().await);
    let (a, b) = tokio::join!(
        {
            let provider = provider.clone();
            async move { provider.complete(&verdict_request("Fire is cold.")).await }
        },
        {
            let provider = provider.clone();
            async move { provider.complete(&verdict_request("The sun is a star.")).await }
        }
    );
    check_verdict(&a.unwrap().text);
    check_verdict(&b.unwrap().text);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_providers_in_one_process_both_answer() {
    // llama.cpp's backend is initialised once per process; the second provider shares it.
    let (first, second) = tokio::join!(provider(), provider());
    let (grass, stones) = (verdict_request("Grass is green."), verdict_request("Stones can fly."));
    let (a, b) = tokio::join!(first.complete(&grass), second.complete(&stones));
    check_verdict(&a.unwrap().text);
    check_verdict(&b.unwrap().text);
    drop(first);
    check_verdict(&second.complete(&verdict_request("Salt is sweet.")).await.unwrap().text);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_text_request_stops_before_the_next_turn() {
    let provider = provider().await;
    let request = ChatRequest {
        system: "A friendly conversation.".to_owned(),
        messages: vec![ChatMessage::user("Hello! What colour is the sky?")],
        max_tokens: 48,
        ..ChatRequest::default()
    };
    let response = provider.complete(&request).await.unwrap();
    assert!(!response.text.contains("\nUser:"), "{response:?}");
    assert!(response.usage.output_tokens <= 48, "{response:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_long_conversation_drops_old_messages_to_fit_the_context() {
    let config =
        LocalConfig { context_tokens: 256, threads: 1, ..LocalConfig::default_model().unwrap() };
    let provider = LocalProvider::start(config).await.unwrap();
    let mut request = verdict_request("Snow is white.");
    let filler = "This is an old message that no longer matters. ".repeat(4);
    request.messages =
        (0..20).map(|_| ChatMessage::user(filler.clone())).chain(request.messages).collect();
    let response = provider.complete(&request).await.unwrap();
    check_verdict(&response.text);
    assert!(response.usage.input_tokens + response.usage.output_tokens <= 256, "{response:?}");

    // The last message alone cannot fit: a clear engine error.
    request.messages = vec![ChatMessage::user(filler.repeat(20))];
    let error = provider.complete(&request).await.unwrap_err();
    assert_eq!(error.kind, agent_llm::ProviderErrorKind::Engine);
    assert!(error.to_string().contains("context"), "{error}");
}

#[tokio::test]
async fn a_bad_model_path_is_a_clear_error() {
    let dir = tempfile::tempdir().unwrap();
    let missing = dir.path().join("gemma-3-270m-q4_k_m.gguf");
    let error = LocalProvider::start(LocalConfig::new(&missing)).await.unwrap_err();
    assert!(matches!(error, LocalError::ModelFile(ModelFileError::Missing { .. })), "{error:?}");
    assert!(error.to_string().contains("strata model fetch"), "{error}");

    // Without a spec to check against, a missing file is still named as missing.
    let config = LocalConfig { spec: None, ..LocalConfig::new(&missing) };
    let error = LocalProvider::start(config).await.unwrap_err();
    assert!(matches!(error, LocalError::ModelFile(ModelFileError::Missing { .. })), "{error:?}");

    // Not a GGUF file, with no spec to check it against: llama.cpp refuses it.
    let junk = dir.path().join("junk.gguf");
    std::fs::write(&junk, b"this is not a model").unwrap();
    let config = LocalConfig { spec: None, ..LocalConfig::new(&junk) };
    let error = LocalProvider::start(config).await.unwrap_err();
    assert!(matches!(error, LocalError::Load { .. }), "{error:?}");
    assert!(error.to_string().contains("junk.gguf"), "{error}");
}

#[test]
fn the_fetched_model_verifies() {
    let config = LocalConfig::default_model().unwrap();
    match verify_model(&config.model_path, &agent_llm::GEMMA3_270M_Q4_K_M) {
        Ok(()) => {}
        Err(error) => panic!("{error}"),
    }
}
