//! The embedded model closes a JSON answer that its token limit would cut off: the answer is
//! still valid JSON of the schema's shape. Needs the fetched model (`strata model fetch`).
#![cfg(feature = "local")]
#![allow(clippy::unwrap_used, clippy::expect_used, reason = "tests")]

use agent_llm::{ChatMessage, ChatRequest, LocalConfig, LocalProvider, Provider, ResponseFormat};
use serde_json::{Value, json};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_long_json_answer_is_closed_before_its_token_limit() {
    let config =
        LocalConfig { threads: 1, ..LocalConfig::default_model().expect("no model directory") };
    assert!(
        config.model_path.is_file(),
        "the embedded model is not at {}: fetch it with `strata model fetch`",
        config.model_path.display()
    );
    let provider = LocalProvider::start(config).await.unwrap();
    let schema = json!({
        "type": "object",
        "properties": {
            "fruits": {
                "type": "array",
                "items": {
                    "type": "object",
                    "properties": {
                        "name": {"type": "string"},
                        "description": {"type": "string", "minLength": 1}
                    },
                    "required": ["name", "description"]
                },
                "minItems": 1
            }
        },
        "required": ["fruits"]
    });
    for max_tokens in [24, 48, 96] {
        let request = ChatRequest {
            system: "You describe fruits at length.".to_owned(),
            messages: vec![ChatMessage::user(
                "List twenty fruits, each with a description of several sentences.",
            )],
            response: ResponseFormat::Json { name: "fruits".to_owned(), schema: schema.clone() },
            max_tokens,
            ..ChatRequest::default()
        };
        let answer = provider.complete(&request).await.unwrap();
        let value: Value = serde_json::from_str(&answer.text)
            .unwrap_or_else(|e| panic!("{max_tokens} tokens: not JSON ({e}): {}", answer.text));
        let fruits = value["fruits"].as_array().unwrap_or_else(|| panic!("{}", answer.text));
        assert!(!fruits.is_empty(), "{}", answer.text);
        for fruit in fruits {
            assert!(fruit["name"].is_string(), "{}", answer.text);
            assert!(fruit["description"].as_str().is_some_and(|d| !d.is_empty()));
        }
        assert!(answer.usage.output_tokens <= u64::from(max_tokens), "{:?}", answer.usage);
    }
}
