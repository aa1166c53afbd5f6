//! Tests of the model calls as JSON: each tool call with its result, found in the agent's
//! next call.
#![allow(clippy::unwrap_used, reason = "tests")]

use agent_llm::{ChatMessage, ProviderToolCall, Role};

use super::*;
use crate::tests::call;

#[test]
fn each_tool_call_gets_its_result_from_the_agents_next_call() {
    let asked =
        ProviderToolCall { id: "c1".into(), name: "read_file".into(), arguments: "{}".into() };
    let first = CallRecord { tool_calls: vec![asked.clone()], ..call(1, "e1", 100) };
    let answer = |role, content: &str, tool_calls, id: Option<&str>| ChatMessage {
        role,
        content: content.into(),
        tool_calls,
        tool_call_id: id.map(str::to_owned),
    };
    let next = CallRecord {
        messages: vec![
            answer(Role::Assistant, "", vec![asked], None),
            answer(Role::Tool, "the text", Vec::new(), Some("c1")),
        ],
        ..call(2, "e1", 200)
    };
    let all = [first, next, call(3, "e9", 300)];
    let json = calls_json(&all[..1], &all);
    assert_eq!(json["calls"].as_array().unwrap().len(), 1, "{json}");
    assert_eq!(json["calls"][0]["agent"], "e1");
    assert_eq!(json["calls"][0]["tool_calls"][0]["result"], "the text");
    let unknown = calls_json(&all[..1], &all[..1]);
    assert!(unknown["calls"][0]["tool_calls"][0].get("result").is_none(), "{unknown}");
    let mine = calls_of_agent(all.to_vec(), Some("e9"));
    assert_eq!(mine.iter().map(|c| c.seq).collect::<Vec<_>>(), [3]);
}
