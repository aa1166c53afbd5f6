//! A small model behind an OpenAI-compatible server asked as the embedded model is
//! (`OpenAiConfig::completions`): a transcript on `/completions` under the answer's grammar,
//! found by the pre-run check, with chat completions when the server does not keep a grammar.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use agent_llm::testing::FakeModel;
use agent_llm::{
    ChatMessage, ChatRequest, OpenAiConfig, OpenAiProvider, Provider, ProviderToolCall,
    ResponseFormat, ToolSpec, Usage,
};
use serde_json::{Value, json};

fn small_model(server: &FakeModel) -> OpenAiProvider {
    let mut config = OpenAiConfig::new(server.url(), server.model());
    config.timeout = Duration::from_secs(10);
    config.completions = true;
    OpenAiProvider::new(config).unwrap()
}

fn text(text: &str) -> Value {
    json!({"choices": [{"text": text, "finish_reason": "stop"}],
           "usage": {"prompt_tokens": 40, "completion_tokens": 9}})
}

fn write_file() -> ToolSpec {
    ToolSpec {
        name: "write_file".to_owned(),
        description: "Write a file.".to_owned(),
        parameters: json!({"type": "object", "properties": {
            "path": {"type": "string"}, "content": {"type": "string"}}, "required": ["path"]}),
    }
}

/// Answers the probe as a server that keeps grammars does, and every other transcript with
/// `answer`.
fn keeps_grammars(answer: &'static str) -> impl Fn(&Value) -> Result<Value, String> {
    move |body| match body["grammar"].as_str() {
        Some(g) if g.starts_with("root ::= \"{\\\"grammar\\\"") => {
            Ok(text(r#"{"grammar": "kept"}"#))
        }
        _ if body.get("prompt").is_some() => Ok(text(answer)),
        _ => Err(format!("not a transcript: {body}")),
    }
}

#[tokio::test]
async fn a_tool_call_is_asked_as_a_transcript_under_its_grammar_and_read_back() {
    let server = FakeModel::start(
        "gemma-3-270m",
        keeps_grammars(r#" {"tool": "write_file", "arguments": {"path": "notes/todo.md"}}"#),
    )
    .await
    .unwrap();
    let provider = small_model(&server);
    provider.preflight().await.unwrap();
    assert_eq!(provider.structured_choice().unwrap().completions, Some(true));
    let request = ChatRequest {
        system: "You write files.".to_owned(),
        messages: vec![ChatMessage::user("Write notes/todo.md")],
        tools: vec![write_file()],
        require_tool: true,
        max_tokens: 64,
        temperature: Some(0.0),
        ..ChatRequest::default()
    };

    let response = provider.complete(&request).await.unwrap();

    assert_eq!(
        response.tool_calls,
        vec![ProviderToolCall {
            id: "call_0".to_owned(),
            name: "write_file".to_owned(),
            arguments: r#"{"path":"notes/todo.md"}"#.to_owned(),
        }]
    );
    assert_eq!(response.usage, Usage { input_tokens: 40, output_tokens: 9 });
    let asked = server.requests().pop().unwrap();
    let prompt = asked["prompt"].as_str().unwrap();
    assert!(
        prompt.starts_with("You write files.\n\nTools you can call:\n- write_file"),
        "{prompt}"
    );
    assert!(prompt.ends_with("User: Write notes/todo.md\n\nAnswer as JSON:\n"), "{prompt}");
    let grammar = asked["grammar"].as_str().unwrap();
    assert!(grammar.contains(r#""\"write_file\"" space"#), "the call names its tool: {grammar}");
    assert_eq!(asked["max_tokens"], 64);
    assert_eq!(asked["temperature"], 0.0);
    assert_eq!(asked.get("messages"), None, "no chat: {asked}");
    assert!(server.problems().is_empty(), "{:?}", server.problems());
}

#[tokio::test]
async fn a_text_answer_stops_at_the_next_turn_and_a_json_answer_is_the_schema_s() {
    let server =
        FakeModel::start("m", keeps_grammars("- Install Rust.\n- Run cargo new.\n")).await.unwrap();
    let provider = small_model(&server);
    let request = ChatRequest {
        messages: vec![ChatMessage::user("List three tasks.")],
        ..ChatRequest::default()
    };
    let response = provider.complete(&request).await.unwrap();
    assert_eq!(response.text, "- Install Rust.\n- Run cargo new.");
    let asked = server.requests().pop().unwrap();
    assert_eq!(asked["stop"], json!(["\nUser:", "\nAssistant:", "\nTool result", "\n\n\n"]));
    assert_eq!(asked.get("grammar"), None);
    assert_eq!(asked["max_tokens"], 2048, "no max_tokens: the assumed limit, not the server's 16");
    assert!(asked["prompt"].as_str().unwrap().ends_with("User: List three tasks.\n\nAssistant:"));

    let json_request = ChatRequest {
        response: ResponseFormat::Json {
            name: "verdict".to_owned(),
            schema: json!({"type": "object", "properties": {"ok": {"type": "boolean"}},
                           "required": ["ok"]}),
        },
        ..request
    };
    provider.complete(&json_request).await.unwrap();
    let asked = server.requests().pop().unwrap();
    assert!(asked["grammar"].as_str().unwrap().contains(r#""\"ok\"" space ":" space boolean"#));
    assert_eq!(asked["repeat_penalty"], 1.0, "grammar answers are decoded as the embedded model's");
}

#[tokio::test]
async fn a_prompt_too_long_for_the_server_loses_its_oldest_messages() {
    let calls = Arc::new(AtomicUsize::new(0));
    let seen = Arc::clone(&calls);
    let server = FakeModel::start("m", move |body| {
        let prompt = body["prompt"].as_str().unwrap_or_default();
        seen.fetch_add(1, Ordering::SeqCst);
        if prompt.contains("too long") {
            Err("Requested tokens (5000) exceed context window of 4096".to_owned())
        } else {
            Ok(text("fine"))
        }
    })
    .await
    .unwrap();
    let provider = small_model(&server);
    let request = ChatRequest {
        messages: vec![
            ChatMessage::user("too long"),
            ChatMessage::assistant("ok"),
            ChatMessage::user("the newest"),
        ],
        ..ChatRequest::default()
    };
    let response = provider.complete(&request).await.unwrap();
    assert_eq!(response.text, "fine");
    assert_eq!(calls.load(Ordering::SeqCst), 2);
    let prompt = server.requests().pop().unwrap()["prompt"].as_str().unwrap().to_owned();
    assert!(prompt.contains("(The 1 oldest messages are left out.)"), "{prompt}");

    // The last message alone still too long: the server's refusal, not a loop.
    let only = ChatRequest { messages: vec![ChatMessage::user("too long")], ..request };
    let error = provider.complete(&only).await.unwrap_err();
    assert!(error.message.contains("exceed context window"), "{error}");
    assert_eq!(calls.load(Ordering::SeqCst), 3);
}

#[tokio::test]
async fn a_server_that_ignores_the_grammar_is_asked_through_chat_completions() {
    let server = FakeModel::start("m", |body| {
        if body.get("prompt").is_some() {
            // llama.cpp servers keep it; this one writes what it likes.
            return Ok(text("Sure! Here is some JSON: {}"));
        }
        Ok(json!({"choices": [{"message": {"role": "assistant", "content": "{\"ok\": true}"}}],
                  "usage": {"prompt_tokens": 5, "completion_tokens": 3}}))
    })
    .await
    .unwrap();
    let provider = small_model(&server);
    provider.preflight().await.unwrap();
    let choice = provider.structured_choice().unwrap();
    assert_eq!(choice.completions, Some(false));
    assert!(choice.to_string().contains("chat completions"), "{choice}");
    let before = server.requests().len();
    provider.complete(&ChatRequest::default()).await.unwrap();
    let asked = &server.requests()[before];
    assert!(asked.get("messages").is_some(), "asked through chat: {asked}");

    // A later provider for the same server (the run's, after the pre-run check) starts there.
    let later = small_model(&server);
    later.remember(&choice);
    assert_eq!(later.structured_choice().unwrap().completions, Some(false));
}
