//! Unit tests of the prompt and answer mapping (no model needed).

#![allow(clippy::unwrap_used, clippy::expect_used, reason = "tests")]

use serde_json::{Value, json};

use super::prompt::{
    Answer, MAX_ARRAY_ITEMS, MAX_STRING_CHARS, answer_schema, bounded, interpret, json_complete,
    opens_fence, render, text_stop,
};
use crate::provider::{ChatMessage, ChatRequest, ProviderToolCall, ResponseFormat, ToolSpec};

fn tool(name: &str) -> ToolSpec {
    ToolSpec {
        name: name.to_owned(),
        description: format!("Does {name}."),
        parameters: json!({"type": "object", "properties": {"x": {"type": "integer"}}}),
    }
}

fn json_request() -> ChatRequest {
    ChatRequest {
        system: "Judge.".to_owned(),
        messages: vec![ChatMessage::user("first"), ChatMessage::user("second")],
        response: ResponseFormat::Json {
            name: "verdict".to_owned(),
            schema: json!({"type": "object", "properties": {"ok": {"type": "boolean"}}}),
        },
        ..ChatRequest::default()
    }
}

#[test]
fn a_json_request_renders_a_transcript_with_the_schema_and_a_cue() {
    let prompt = render(&json_request(), 0);
    assert_eq!(
        prompt,
        "Judge.\n\nUser: first\nUser: second\n\nThe answer is JSON matching this JSON Schema: \
         {\"properties\":{\"ok\":{\"type\":\"boolean\"}},\"type\":\"object\"}\nAnswer as JSON:\n"
    );
    assert_eq!(
        answer_schema(&json_request(), false).unwrap(),
        r#"{"properties":{"ok":{"type":"boolean"}},"type":"object"}"#
    );
}

#[test]
fn dropping_old_messages_keeps_the_system_prompt_and_the_last_message() {
    let request = json_request();
    let prompt = render(&request, 1);
    assert!(prompt.starts_with("Judge.\n\n(The 1 oldest messages are left out.)\nUser: second\n"));
    assert!(!prompt.contains("first"));
    // Never past the last message.
    assert_eq!(render(&request, 5), prompt);
}

#[test]
fn a_text_request_ends_with_the_assistant_label_and_stops_at_the_next_turn() {
    let request = ChatRequest { messages: vec![ChatMessage::user("hi")], ..ChatRequest::default() };
    assert_eq!(render(&request, 0), "User: hi\n\nAssistant:");
    assert_eq!(Answer::of(&request), Answer::Text);
    assert_eq!(answer_schema(&request, false), None);
    let output = " Hello there.\nUser: and then";
    assert_eq!(text_stop(output, false), Some(13));
    let (text, calls) = interpret(&Answer::Text, output, false, || unreachable!()).unwrap();
    assert_eq!((text.as_str(), calls.len()), ("Hello there.", 0));
}

#[test]
fn a_text_request_ending_with_the_assistant_s_words_continues_them() {
    let request = ChatRequest {
        messages: vec![
            ChatMessage::user("Write a.py."),
            ChatMessage::assistant("Here is a.py:\n\n```python\n"),
        ],
        ..ChatRequest::default()
    };
    assert_eq!(render(&request, 0), "User: Write a.py.\n\nAssistant: Here is a.py:\n\n```python\n");
    // It continues the fence the start opened, and ends where the model closes it.
    assert!(opens_fence(&request));
    let output = "def f():\n    return 1\n```\nThat is all.";
    assert_eq!(text_stop(output, true), Some(21));
    assert_eq!(text_stop(output, false), None);
    assert_eq!(text_stop("```\n", true), Some(0), "an empty file");
    let (text, _) = interpret(&Answer::Text, output, true, || unreachable!()).unwrap();
    assert_eq!(text, "def f():\n    return 1");
    // A JSON request does not continue it: the assistant's words are history there.
    let mut json = request.clone();
    json.response = json_request().response;
    assert!(render(&json, 0).contains("Assistant: Here is a.py:\n"), "{}", render(&json, 0));
    assert!(render(&json, 0).ends_with("Answer as JSON:\n"));
    // An assistant's tool call is not words to continue.
    let mut called = request.clone();
    called.messages[1].tool_calls.push(ProviderToolCall {
        id: "c".into(),
        name: "t".into(),
        arguments: "{}".into(),
    });
    assert!(render(&called, 0).ends_with("\nAssistant:"), "{}", render(&called, 0));
}

#[test]
fn conversation_history_shows_tool_calls_and_their_results_by_name() {
    let mut assistant = ChatMessage::assistant("");
    assistant.tool_calls = vec![ProviderToolCall {
        id: "c1".to_owned(),
        name: "look".to_owned(),
        arguments: r#"{"x": 1}"#.to_owned(),
    }];
    let request = ChatRequest {
        messages: vec![ChatMessage::user("go"), assistant, ChatMessage::tool_result("c1", "seen")],
        tools: vec![tool("look")],
        require_tool: true,
        ..ChatRequest::default()
    };
    let prompt = render(&request, 0);
    assert!(
        prompt.starts_with("Tools you can call:\n- look: Does look. Arguments (JSON Schema): "),
        "{prompt}"
    );
    // The transcript comes after the tools, right before the answer.
    assert!(
        prompt.ends_with(
            "User: go\nAssistant: {\"tool\":\"look\",\"arguments\":{\"x\":1}}\nTool result (look): seen\n\nAnswer as JSON:\n"
        ),
        "{prompt}"
    );
    assert!(!prompt.contains("without a tool"), "{prompt}");
}

#[test]
fn tool_schemas_put_the_tool_first_and_offer_an_answer_when_no_tool_is_required() {
    let mut request = ChatRequest { tools: vec![tool("a")], require_tool: true, ..json_request() };
    let one = answer_schema(&request, false).unwrap();
    assert_eq!(
        one,
        r#"{"type":"object","properties":{"tool":{"const":"a"},"arguments":{"properties":{"x":{"type":"integer"}},"type":"object"}},"required":["tool","arguments"]}"#
    );
    assert!(one.find("\"tool\"") < one.find("\"arguments\""));

    request.tools.push(tool("b"));
    request.require_tool = false;
    let any: Value = serde_json::from_str(&answer_schema(&request, false).unwrap()).unwrap();
    let options = any["anyOf"].as_array().unwrap();
    assert_eq!(options.len(), 3);
    assert_eq!(options[1]["properties"]["tool"]["const"], "b");
    assert_eq!(options[2]["properties"]["answer"]["properties"]["ok"]["type"], "boolean");

    // The fallback keeps the structure: each tool's arguments object, the answer's object.
    let permissive: Value = serde_json::from_str(&answer_schema(&request, true).unwrap()).unwrap();
    assert_eq!(
        permissive["anyOf"][0]["properties"]["arguments"],
        json!({"type": "object", "properties": {"x": {"type": "integer"}}})
    );
    assert_eq!(
        permissive["anyOf"][2]["properties"]["answer"],
        json!({"type": "object", "properties": {"ok": {"type": "boolean"}}})
    );
}

#[test]
fn tool_output_becomes_a_call_or_an_answer() {
    let required = Answer::Tools { required: true, json_answer: false };
    let (text, calls) =
        interpret(&required, r#"{"tool": "a", "arguments": {"x": 2}}"#, false, || {
            "local-7".to_owned()
        })
        .unwrap();
    assert_eq!(text, "");
    assert_eq!(
        calls,
        [ProviderToolCall {
            id: "local-7".to_owned(),
            name: "a".to_owned(),
            arguments: r#"{"x":2}"#.to_owned()
        }]
    );

    let text_answer = Answer::Tools { required: false, json_answer: false };
    let (text, calls) =
        interpret(&text_answer, r#"{"answer": "done"}"#, false, || unreachable!()).unwrap();
    assert_eq!((text.as_str(), calls.len()), ("done", 0));
    let json_answer = Answer::Tools { required: false, json_answer: true };
    let (text, _) =
        interpret(&json_answer, r#"{"answer": {"ok": true}}"#, false, || unreachable!()).unwrap();
    assert_eq!(text, r#"{"ok":true}"#);

    let cut = interpret(&required, r#"{"tool": "a", "argu"#, false, || unreachable!()).unwrap_err();
    assert!(cut.contains("not complete JSON"), "{cut}");
}

#[test]
fn json_is_complete_only_when_nothing_could_extend_it() {
    assert!(json_complete(r#"{"a": [1, 2]}"#));
    assert!(json_complete("[1]\n"));
    assert!(json_complete(r#""text""#));
    assert!(!json_complete(r#"{"a": "}"#));
    assert!(!json_complete("12"), "a number may have more digits");
    assert!(!json_complete(r#"{"a": 1"#));
}

#[test]
fn strings_and_arrays_without_bounds_get_them_so_the_answer_always_finishes() {
    let schema = serde_json::json!({
        "type": "object",
        "properties": {
            "path": {"type": "string", "description": "a path"},
            "short": {"type": "string", "maxLength": 8},
            "choice": {"type": "string", "enum": ["a", "b"]},
            "items": {"type": "array", "items": {"type": ["string", "null"]}}
        }
    });
    let b = bounded(&schema);
    assert_eq!(b["properties"]["path"]["maxLength"], MAX_STRING_CHARS);
    assert_eq!(b["properties"]["short"]["maxLength"], 8, "an existing bound stays");
    assert!(b["properties"]["choice"].get("maxLength").is_none(), "an enum needs none");
    assert_eq!(b["properties"]["items"]["maxItems"], MAX_ARRAY_ITEMS);
    assert_eq!(b["properties"]["items"]["items"]["maxLength"], MAX_STRING_CHARS);
    assert_eq!(b["properties"]["path"]["description"], "a path", "the rest is kept");
}

/// The agent-management tools (`spawn_agent`, ..., `return_results` with its nested
/// result object) offered to the embedded model: each becomes one grammar option under its
/// name, the nested strings and arrays bounded, and llama.cpp converts the whole schema (no
/// fall back to the permissive grammar).
#[test]
fn the_agent_tools_become_a_grammar_with_their_nested_schemas() {
    let tools: Vec<ToolSpec> = agent_core::spawn::supervisor_tool_specs()
        .into_iter()
        .map(|spec| ToolSpec {
            name: spec.name.to_owned(),
            description: spec.description.to_owned(),
            parameters: spec.parameters,
        })
        .collect();
    let request = ChatRequest {
        messages: vec![ChatMessage::user("go")],
        tools,
        require_tool: true,
        ..ChatRequest::default()
    };
    let schema = answer_schema(&request, false).unwrap();
    let value: Value = serde_json::from_str(&schema).unwrap();
    let options = value["anyOf"].as_array().unwrap();
    let names: Vec<&str> =
        options.iter().map(|o| o["properties"]["tool"]["const"].as_str().unwrap()).collect();
    assert_eq!(
        names,
        ["spawn_agent", "speak_to_agent", "get_agents", "despawn_agent", "return_results"]
    );
    let result = &options[4]["properties"]["arguments"]["properties"]["result"]["properties"];
    assert_eq!(result["summary"]["maxLength"], MAX_STRING_CHARS);
    assert_eq!(result["artifacts"]["maxItems"], MAX_ARRAY_ITEMS);
    assert_eq!(
        result["artifacts"]["items"]["properties"]["file_path"]["maxLength"],
        MAX_STRING_CHARS
    );
    assert!(result["status"].get("maxLength").is_none(), "an enum is not bounded");

    let grammar = llama_cpp_2::json_schema_to_grammar(&schema).unwrap();
    for name in names {
        assert!(grammar.contains(name), "{name} missing from the grammar:\n{grammar}");
    }
    assert!(grammar.contains("change_type"), "{grammar}");
}

/// The plan decision's schema (leads of the mid roles, goal steps with a step-id pattern and
/// an optional worker role) converts to a grammar too, with and without roles.
#[test]
fn the_plan_schema_becomes_a_grammar() {
    for (mids, workers) in [(vec!["docs_lead"], vec!["writer", "tester"]), (vec![], vec![])] {
        let request = ChatRequest {
            messages: vec![ChatMessage::user("plan")],
            response: ResponseFormat::Json {
                name: "plan".to_owned(),
                schema: crate::reasoner::plan::plan_schema(&mids, &workers, 2, &[]),
            },
            ..ChatRequest::default()
        };
        let schema = answer_schema(&request, false).unwrap();
        let grammar = llama_cpp_2::json_schema_to_grammar(&schema)
            .unwrap_or_else(|e| panic!("{e}: {schema}"));
        assert!(grammar.contains("acceptance"), "{grammar}");
        assert_eq!(grammar.contains("docs_lead"), !mids.is_empty(), "{grammar}");
    }
}
