//! Tool calls through structured output, for servers that take `tools` but ignore
//! `tool_choice: "required"` (llama-cpp-python answers such a request with empty text) or whose
//! chat template knows no tool messages.
//!
//! The request becomes a structured question: the tools' names, descriptions and argument
//! schemas go into the system prompt, and the answer's schema is `{"tool": NAME, "arguments":
//! {...}}`, one branch per tool (`anyOf`), so a server that constrains its output to the schema
//! can only name an offered tool with arguments of its shape. The conversation is rewritten
//! for templates that know only `user` and `assistant`: an earlier tool call is the assistant's
//! JSON, a tool result a user message, and consecutive messages of one role are joined. The
//! answer is read back into a [`ProviderToolCall`]; one that is not such JSON is returned as
//! text, for the reasoner to refuse and repair like any answer that calls no tool.

use serde_json::{Value, json};

use crate::provider::{
    ChatMessage, ChatRequest, ChatResponse, ProviderToolCall, ResponseFormat, Role,
};

/// The name of the structured question that stands for a tool choice.
pub(crate) const TOOL_CHOICE: &str = "tool_choice";

/// `request` (which offers tools and requires a call) as a structured question.
pub(crate) fn request(request: &ChatRequest) -> ChatRequest {
    let branches: Vec<Value> = request
        .tools
        .iter()
        .map(|tool| {
            json!({
                "type": "object",
                "properties": {"tool": {"const": tool.name}, "arguments": tool.parameters},
                "required": ["tool", "arguments"],
                "additionalProperties": false,
            })
        })
        .collect();
    let schema = match <[Value; 1]>::try_from(branches) {
        Ok([only]) => only,
        Err(branches) => json!({"anyOf": branches}),
    };
    let mut listed = String::from(
        "Call exactly one of these tools. Answer with only a JSON object {\"tool\": NAME, \"arguments\": {...}}, the arguments matching the tool's schema.",
    );
    for tool in &request.tools {
        listed.push_str(&format!(
            "\n- {}: {} Arguments: {}",
            tool.name, tool.description, tool.parameters
        ));
    }
    let system =
        if request.system.is_empty() { listed } else { format!("{}\n\n{listed}", request.system) };
    ChatRequest {
        system,
        messages: alternating(&request.messages),
        tools: Vec::new(),
        require_tool: false,
        response: ResponseFormat::Json { name: TOOL_CHOICE.to_owned(), schema },
        max_tokens: request.max_tokens,
        temperature: request.temperature,
    }
}

/// The answer to a [`request`], as the tool call it names.
pub(crate) fn answer(mut response: ChatResponse) -> ChatResponse {
    let text = crate::structured::unfenced(&response.text);
    let call = serde_json::from_str::<Value>(&text).ok().and_then(|value| {
        let name = value.get("tool")?.as_str()?.to_owned();
        let arguments = value.get("arguments").cloned().unwrap_or_else(|| json!({}));
        Some(ProviderToolCall { id: "call_0".to_owned(), name, arguments: arguments.to_string() })
    });
    if let Some(call) = call {
        response.text.clear();
        response.tool_calls = vec![call];
    }
    response
}

/// `messages` with only `user` and `assistant` roles, alternating.
fn alternating(messages: &[ChatMessage]) -> Vec<ChatMessage> {
    let mut out: Vec<ChatMessage> = Vec::with_capacity(messages.len());
    for message in messages {
        let (role, text) = match message.role {
            Role::User => (Role::User, message.content.clone()),
            Role::Assistant => {
                let mut parts: Vec<String> =
                    Some(message.content.clone()).filter(|c| !c.is_empty()).into_iter().collect();
                parts.extend(message.tool_calls.iter().map(|call| {
                    let arguments = serde_json::from_str::<Value>(&call.arguments)
                        .unwrap_or_else(|_| Value::String(call.arguments.clone()));
                    json!({"tool": call.name, "arguments": arguments}).to_string()
                }));
                (Role::Assistant, parts.join("\n"))
            }
            Role::Tool => (Role::User, format!("The tool's result:\n{}", message.content)),
        };
        match out.last_mut() {
            Some(last) if last.role == role => {
                last.content.push_str("\n\n");
                last.content.push_str(&text);
            }
            _ => out.push(ChatMessage {
                role,
                content: text,
                tool_calls: Vec::new(),
                tool_call_id: None,
            }),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, reason = "tests")]

    use super::*;
    use crate::provider::ToolSpec;

    fn tool(name: &str) -> ToolSpec {
        ToolSpec {
            name: name.to_owned(),
            description: format!("Does {name}."),
            parameters: json!({"type": "object", "properties": {"path": {"type": "string"}}}),
        }
    }

    #[test]
    fn the_question_offers_each_tool_as_a_branch_and_rewrites_the_conversation() {
        let original = ChatRequest {
            system: "You act.".to_owned(),
            messages: vec![
                ChatMessage::user("Write a.txt."),
                ChatMessage {
                    role: Role::Assistant,
                    content: String::new(),
                    tool_calls: vec![ProviderToolCall {
                        id: "c1".into(),
                        name: "write_file".into(),
                        arguments: "{\"path\":\"a.txt\"}".into(),
                    }],
                    tool_call_id: None,
                },
                ChatMessage::tool_result("c1", "ok"),
                ChatMessage::user("Next?"),
            ],
            tools: vec![tool("write_file"), tool("finish_subtask")],
            require_tool: true,
            max_tokens: 64,
            ..ChatRequest::default()
        };
        let question = request(&original);
        assert!(question.tools.is_empty() && !question.require_tool);
        let ResponseFormat::Json { name, schema } = &question.response else {
            panic!("not a JSON question")
        };
        assert_eq!(name, TOOL_CHOICE);
        assert_eq!(schema["anyOf"][1]["properties"]["tool"]["const"], "finish_subtask");
        assert!(
            question.system.starts_with("You act.")
                && question.system.contains("- write_file: Does write_file.")
        );
        let roles: Vec<Role> = question.messages.iter().map(|m| m.role).collect();
        assert_eq!(roles, [Role::User, Role::Assistant, Role::User]);
        assert_eq!(
            question.messages[1].content,
            "{\"arguments\":{\"path\":\"a.txt\"},\"tool\":\"write_file\"}"
        );
        assert_eq!(question.messages[2].content, "The tool's result:\nok\n\nNext?");
    }

    #[test]
    fn the_answer_becomes_the_call_or_stays_text() {
        let text = |t: &str| ChatResponse { text: t.to_owned(), ..ChatResponse::default() };
        let called = answer(text("{\"tool\": \"write_file\", \"arguments\": {\"path\": \"a\"}}"));
        assert!(called.text.is_empty());
        assert_eq!(called.tool_calls[0].name, "write_file");
        assert_eq!(called.tool_calls[0].arguments, "{\"path\":\"a\"}");
        let refused = answer(text("I'd rather not."));
        assert!(refused.tool_calls.is_empty());
        assert_eq!(refused.text, "I'd rather not.");
        let single = request(&ChatRequest { tools: vec![tool("x")], ..ChatRequest::default() });
        let ResponseFormat::Json { schema, .. } = single.response else { panic!() };
        assert_eq!(schema["properties"]["tool"]["const"], "x", "one tool: no anyOf");
    }
}
