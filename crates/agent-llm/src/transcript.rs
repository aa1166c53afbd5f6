//! From a [`ChatRequest`] to a completion prompt and an answer schema for a base model, and
//! from the model's output back to a [`ChatResponse`]'s text and tool calls. Pure: no engine.
//!
//! The embedded model is a base model without a chat template, so a request becomes a plain
//! transcript to continue (and so does a request to an OpenAI-compatible server for a small
//! model, on its `/completions` endpoint with the answer's grammar, see [`crate::gbnf`]):
//!
//! ```text
//! <system prompt>
//!
//! <with tools: the tools, their argument schemas, how to call one>
//!
//! User: <message>
//! Assistant: <message, then its tool calls as {"tool": ..., "arguments": ...}>
//! Tool result (<tool name>): <output>
//!
//! <for a JSON answer: its JSON Schema>
//! Answer as JSON:
//! ```
//!
//! A text request ends with `Assistant:` instead (or, when its last message is the assistant's
//! own text, with `Assistant: <that text>`, which the answer continues), and its answer stops
//! where the model starts a new labelled line.

use std::fmt::Write as _;

use serde_json::Value;

use crate::model_text::quoted;
use crate::provider::{ChatMessage, ChatRequest, ProviderToolCall, ResponseFormat, Role};
use crate::structured::schema_text;

/// What the answer must look like, decided from the request.
#[derive(Clone, Debug, PartialEq)]
pub(crate) enum Answer {
    /// Free text: no grammar; stop at the next labelled line.
    Text,
    /// A JSON value valid against the request's schema.
    Json,
    /// A tool call `{"tool": name, "arguments": {...}}`, or when not required, also
    /// `{"answer": ...}` (a string for a text request, the schema's value for a JSON one).
    Tools {
        /// Whether the request requires a tool call.
        required: bool,
        /// Whether an answer (when allowed) is JSON rather than text.
        json_answer: bool,
    },
}

impl Answer {
    /// The answer shape for `request`.
    pub(crate) fn of(request: &ChatRequest) -> Self {
        let json = matches!(request.response, ResponseFormat::Json { .. });
        if request.tools.is_empty() {
            if json { Self::Json } else { Self::Text }
        } else {
            Self::Tools { required: request.require_tool, json_answer: json }
        }
    }

    /// Whether the output is grammar-constrained JSON.
    #[cfg(feature = "local")]
    pub(crate) fn is_json(&self) -> bool {
        !matches!(self, Self::Text)
    }
}

/// Lines that start a new turn: a text answer stops before the first of them.
pub(crate) const STOPS: [&str; 4] = ["\nUser:", "\nAssistant:", "\nTool result", "\n\n\n"];

/// The prompt for `request` without its `dropped` oldest messages (the last message is always
/// kept).
pub(crate) fn render(request: &ChatRequest, dropped: usize) -> String {
    let mut out = String::new();
    let system = request.system.trim();
    if !system.is_empty() {
        out.push_str(system);
        out.push_str("\n\n");
    }
    let answer = Answer::of(request);
    // The tools come before the transcript: a small base model continues what it read last,
    // and that should be the question (with the plan's call), not the tools' schemas.
    if let Answer::Tools { required, json_answer } = &answer {
        out.push_str("Tools you can call:\n");
        for tool in &request.tools {
            let _ = writeln!(
                out,
                "- {}: {} Arguments (JSON Schema): {}",
                tool.name,
                tool.description.trim(),
                schema_text(&tool.parameters)
            );
        }
        out.push_str(
            "To call a tool, answer {\"tool\": <its name>, \"arguments\": <its arguments>}.\n",
        );
        if !required {
            match (&request.response, json_answer) {
                (ResponseFormat::Json { schema, .. }, true) => {
                    let _ = writeln!(
                        out,
                        "To answer without a tool, answer {{\"answer\": <JSON matching {schema}>}}."
                    );
                }
                _ => out.push_str(
                    "To answer without a tool, answer {\"answer\": <your answer as a string>}.\n",
                ),
            }
        }
        out.push('\n');
    }
    let keep_from = dropped.min(request.messages.len().saturating_sub(1));
    if keep_from > 0 {
        let _ = writeln!(out, "(The {keep_from} oldest messages are left out.)");
    }
    // A text answer whose request ends with the assistant's own words continues them.
    let start = prefill(request).filter(|_| answer == Answer::Text);
    let end = request.messages.len() - usize::from(start.is_some());
    for message in &request.messages[keep_from.min(end)..end] {
        render_message(&mut out, request, message);
    }
    match &answer {
        Answer::Text if start.is_some() => {
            out.push_str("\nAssistant: ");
            out.push_str(start.unwrap_or_default());
        }
        Answer::Text => out.push_str("\nAssistant:"),
        Answer::Json => {
            if let ResponseFormat::Json { schema, .. } = &request.response {
                let schema = schema_text(schema);
                let _ = writeln!(out, "\nThe answer is JSON matching this JSON Schema: {schema}");
            }
            out.push_str("Answer as JSON:\n");
        }
        Answer::Tools { .. } => out.push_str("\nAnswer as JSON:\n"),
    }
    out
}

/// The start of the answer, when the request's last message is the assistant's own text (no
/// tool calls): a text answer continues it (the answer holds what follows, not the start).
pub(crate) fn prefill(request: &ChatRequest) -> Option<&str> {
    request
        .messages
        .last()
        .filter(|m| m.role == Role::Assistant && m.tool_calls.is_empty())
        .map(|m| m.content.trim_start())
        .filter(|c| !c.is_empty())
}

/// Longest string the grammar lets the model write where the schema sets no `maxLength`.
pub(crate) const MAX_STRING_CHARS: u64 = 256;
/// Most array items the grammar lets the model write where the schema sets no `maxItems`.
pub(crate) const MAX_ARRAY_ITEMS: u64 = 16;

/// Largest `maxLength` (and `minLength`) a schema may ask of the grammar: a grammar repeats a
/// bounded rule once per allowed character, so a tool's schema asking for a billion would
/// make a grammar no sampler can hold.
pub(crate) const LARGEST_STRING_CHARS: u64 = 8192;
/// Largest `maxItems` (and `minItems`) a schema may ask of the grammar, for the same reason.
pub(crate) const LARGEST_ARRAY_ITEMS: u64 = 256;

/// `schema` with a `maxLength` on every string and a `maxItems` on every array that has none.
/// A small model decoding greedily can run on forever inside a string ("path/to/file/path/to/
/// ...") until it hits `max_tokens` with the JSON unfinished; bounded, the grammar closes the
/// value in time and the answer is always complete, valid JSON.
///
/// The schemas come from tools too (an MCP server's, which Strata does not control), so the
/// bounds they set are capped: a `maxLength` above [`LARGEST_STRING_CHARS`] or a `maxItems`
/// above [`LARGEST_ARRAY_ITEMS`] is lowered to it, a minimum above its maximum is lowered to
/// the maximum, a bound that is not a non-negative integer is replaced by the default, and a
/// string `pattern` that names a count above the largest is dropped (the grammar is looser,
/// never huge).
pub(crate) fn bounded(schema: &Value) -> Value {
    let mut out = schema.clone();
    bound(&mut out);
    out
}

fn bound(node: &mut Value) {
    match node {
        Value::Object(map) => {
            let is = |t: &str, map: &serde_json::Map<String, Value>| match map.get("type") {
                Some(Value::String(s)) => s == t,
                Some(Value::Array(types)) => types.iter().any(|x| x == t),
                _ => false,
            };
            let fixed = map.contains_key("enum") || map.contains_key("const");
            if is("string", map) && !fixed {
                cap(map, ("minLength", "maxLength"), MAX_STRING_CHARS, LARGEST_STRING_CHARS);
                let huge = map
                    .get("pattern")
                    .and_then(Value::as_str)
                    .is_some_and(|p| names_a_count_above(p, LARGEST_STRING_CHARS));
                if huge {
                    map.remove("pattern");
                }
            }
            if is("array", map) {
                cap(map, ("minItems", "maxItems"), MAX_ARRAY_ITEMS, LARGEST_ARRAY_ITEMS);
            }
            for value in map.values_mut() {
                bound(value);
            }
        }
        Value::Array(items) => items.iter_mut().for_each(bound),
        _ => {}
    }
}

/// Sets `keys.1` (the maximum) to the schema's own, at most `largest`, or `default` when it
/// has none usable; lowers `keys.0` (the minimum) to the maximum, or drops it when unusable.
fn cap(
    map: &mut serde_json::Map<String, Value>,
    (min_key, max_key): (&str, &str),
    default: u64,
    largest: u64,
) {
    let max = map.get(max_key).and_then(Value::as_u64).map_or(default, |m| m.min(largest));
    map.insert(max_key.into(), Value::from(max));
    match map.get(min_key).map(Value::as_u64) {
        Some(Some(min)) if min > max => {
            map.insert(min_key.into(), Value::from(max));
        }
        Some(None) => {
            map.remove(min_key);
        }
        _ => {}
    }
}

/// Whether `pattern` holds a run of digits worth more than `largest` (a `{n}` count, or a
/// literal that could be one: either way the pattern is dropped, which only loosens).
fn names_a_count_above(pattern: &str, largest: u64) -> bool {
    pattern
        .split(|c: char| !c.is_ascii_digit())
        .any(|digits| !digits.is_empty() && digits.parse::<u64>().map_or(true, |n| n > largest))
}

/// The JSON Schema types llama.cpp knows.
const TYPES: [&str; 7] = ["object", "array", "string", "integer", "number", "boolean", "null"];

/// `schema` with only what any grammar can express and llama.cpp always converts: `type` (of
/// known types), `properties`, `required`, `additionalProperties`, `items` (one schema),
/// non-empty `enum`, `const`, `anyOf` and `oneOf`, and the bounds `minLength`, `maxLength`,
/// `minItems`, `maxItems` (non-negative integers), `minimum`, `maximum` (numbers). Gone: string
/// `pattern`s and `format`s, `$ref`s, `allOf`, `not`, tuples and anything malformed; so the
/// structure stays (objects, their properties and which are required, arrays, types, enums)
/// and only what llama.cpp may refuse is loosened.
pub(crate) fn loosened(node: &Value) -> Value {
    let Value::Object(map) = node else {
        return Value::Object(serde_json::Map::new());
    };
    let mut out = serde_json::Map::new();
    for (key, value) in map {
        let kept = match (key.as_str(), value) {
            ("type", Value::String(t)) if TYPES.contains(&t.as_str()) => Some(value.clone()),
            ("type", Value::Array(types))
                if !types.is_empty()
                    && types.iter().all(|t| t.as_str().is_some_and(|t| TYPES.contains(&t))) =>
            {
                Some(value.clone())
            }
            ("properties", Value::Object(properties)) => Some(Value::Object(
                properties.iter().map(|(k, v)| (k.clone(), loosened(v))).collect(),
            )),
            ("required", Value::Array(names)) => {
                Some(Value::Array(names.iter().filter(|n| n.is_string()).cloned().collect()))
            }
            ("additionalProperties", Value::Bool(_)) => Some(value.clone()),
            ("additionalProperties" | "items", Value::Object(_)) => Some(loosened(value)),
            ("enum", Value::Array(values)) if !values.is_empty() => Some(value.clone()),
            ("const", _) => Some(value.clone()),
            ("anyOf" | "oneOf", Value::Array(options)) if !options.is_empty() => {
                Some(Value::Array(options.iter().map(loosened).collect()))
            }
            ("minLength" | "maxLength" | "minItems" | "maxItems", Value::Number(n))
                if n.as_u64().is_some_and(|n| n <= i32::MAX as u64) =>
            {
                Some(value.clone())
            }
            ("minimum" | "maximum", Value::Number(_)) => Some(value.clone()),
            _ => None,
        };
        if let Some(kept) = kept {
            out.insert(key.clone(), kept);
        }
    }
    Value::Object(out)
}

/// The JSON Schema (as text, each object's properties in the order its `required` lists them:
/// the order the grammar makes the model write them, see [`schema_text`]) that the output must
/// match, or `None` for free text.
///
/// With `permissive`, every schema in it is [`loosened`]: the fallback when llama.cpp cannot
/// turn the request's own schemas into a grammar. It keeps the answer's structure (a tool call
/// is still `{"tool", "arguments"}` with an object of arguments; a JSON answer still has its
/// objects, their required properties and their types), so even the fallback grammar cannot
/// produce an answer of another shape.
pub(crate) fn answer_schema(request: &ChatRequest, permissive: bool) -> Option<String> {
    let shaped = |schema: &Value| {
        let schema = bounded(schema);
        schema_text(&if permissive { loosened(&schema) } else { schema })
    };
    let answer_value = || match &request.response {
        ResponseFormat::Json { schema, .. } => shaped(schema),
        ResponseFormat::Text => r#"{"type":"string"}"#.to_owned(),
    };
    match Answer::of(request) {
        Answer::Text => None,
        Answer::Json => Some(answer_value()),
        Answer::Tools { required, .. } => {
            let mut options: Vec<String> = request
                .tools
                .iter()
                .map(|tool| {
                    let arguments = if tool.parameters.is_object() {
                        shaped(&tool.parameters)
                    } else {
                        r#"{"type":"object"}"#.to_owned()
                    };
                    format!(
                        r#"{{"type":"object","properties":{{"tool":{{"const":{}}},"arguments":{arguments}}},"required":["tool","arguments"]}}"#,
                        Value::String(tool.name.clone())
                    )
                })
                .collect();
            if !required {
                options.push(format!(
                    r#"{{"type":"object","properties":{{"answer":{}}},"required":["answer"]}}"#,
                    answer_value()
                ));
            }
            if options.len() == 1 {
                options.pop()
            } else {
                Some(format!(r#"{{"anyOf":[{}]}}"#, options.join(",")))
            }
        }
    }
}

/// The output of a JSON answer is complete: it parses, and nothing could extend it (it ends
/// with `}`, `]` or `"`).
#[cfg(feature = "local")]
pub(crate) fn json_complete(text: &str) -> bool {
    let trimmed = text.trim_end();
    trimmed.ends_with(['}', ']', '"'])
        && serde_json::from_str::<serde::de::IgnoredAny>(trimmed).is_ok()
}

/// Where a text answer stops: the byte offset of the first stop line, if any; with `fenced`
/// (the answer continues a code fence its start opened, see [`opens_fence`]), also where a
/// line closes the fence.
pub(crate) fn text_stop(text: &str, fenced: bool) -> Option<usize> {
    let fence = fenced
        .then(|| if text.starts_with("```") { Some(0) } else { text.find("\n```") })
        .flatten();
    STOPS.iter().filter_map(|stop| text.find(stop)).chain(fence).min()
}

/// Whether a text answer continues an open code fence: the request's [`prefill`] opened one
/// (it holds an odd number of fence lines).
pub(crate) fn opens_fence(request: &ChatRequest) -> bool {
    prefill(request).is_some_and(|start| {
        start.lines().filter(|l| l.trim_start().starts_with("```")).count() % 2 == 1
    })
}

/// What the model's output means: the answer text and tool calls. `call_id` names a tool call.
/// Errors say what is wrong with the output (cut off by the token limit, typically). `fenced`:
/// see [`text_stop`].
pub(crate) fn interpret(
    answer: &Answer,
    output: &str,
    fenced: bool,
    call_id: impl FnOnce() -> String,
) -> Result<(String, Vec<ProviderToolCall>), String> {
    match answer {
        Answer::Text => {
            let end = text_stop(output, fenced).unwrap_or(output.len());
            Ok((output[..end].trim().to_owned(), Vec::new()))
        }
        Answer::Json => Ok((output.trim().to_owned(), Vec::new())),
        Answer::Tools { json_answer, .. } => {
            let value: Value = serde_json::from_str(output.trim()).map_err(|error| {
                format!("the model's answer is not complete JSON ({error}): {}", quoted(output))
            })?;
            if let Some(name) = value.get("tool").and_then(Value::as_str) {
                let arguments = value.get("arguments").cloned().unwrap_or(Value::Null);
                let call = ProviderToolCall {
                    id: call_id(),
                    name: name.to_owned(),
                    arguments: arguments.to_string(),
                };
                return Ok((String::new(), vec![call]));
            }
            match value.get("answer") {
                Some(Value::String(text)) if !json_answer => Ok((text.clone(), Vec::new())),
                Some(answer) => Ok((answer.to_string(), Vec::new())),
                None => Err(format!(
                    "the model's answer is neither a tool call nor an answer: {}",
                    quoted(output)
                )),
            }
        }
    }
}

/// One message as a transcript line.
fn render_message(out: &mut String, request: &ChatRequest, message: &ChatMessage) {
    let content = message.content.trim();
    match message.role {
        Role::User => {
            let _ = writeln!(out, "User: {content}");
        }
        Role::Assistant => {
            out.push_str("Assistant:");
            if !content.is_empty() {
                out.push(' ');
                out.push_str(content);
            }
            for call in &message.tool_calls {
                let arguments = serde_json::from_str::<Value>(&call.arguments)
                    .unwrap_or_else(|_| Value::String(call.arguments.clone()));
                let name = Value::String(call.name.clone());
                let _ = write!(out, r#" {{"tool":{name},"arguments":{arguments}}}"#);
            }
            out.push('\n');
        }
        Role::Tool => {
            let name = message
                .tool_call_id
                .as_deref()
                .and_then(|id| tool_name(request, id))
                .unwrap_or("tool");
            let _ = writeln!(out, "Tool result ({name}): {content}");
        }
    }
}

/// The name of the tool that call `id` called, from the conversation.
fn tool_name<'a>(request: &'a ChatRequest, id: &str) -> Option<&'a str> {
    request
        .messages
        .iter()
        .flat_map(|message| &message.tool_calls)
        .find(|call| call.id == id)
        .map(|call| call.name.as_str())
}

#[cfg(all(test, feature = "local"))]
#[path = "local/grammar_tests.rs"]
mod grammar_tests;
