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

/// `strata verify --json`: each check with its detail or error, the verdict, the protection.
#[test]
fn a_verification_as_json_has_every_check_and_the_verdict() {
    let found = Verification {
        checks: vec![
            Check::new("audit chain", Ok("12 records".into())),
            Check::new("audit anchors", Err("the seal is gone".into())),
        ],
        protection: Some("a seal".into()),
    };
    let json = found.json(Path::new("runs/r1"));
    assert_eq!(json["run"], "runs/r1");
    assert_eq!(json["ok"], false);
    assert_eq!(json["verdict"], "the run is damaged");
    assert_eq!(json["protection"], "a seal");
    assert_eq!(
        json["checks"][0],
        serde_json::json!({"check": "audit chain", "ok": true, "detail": "12 records"})
    );
    assert_eq!(
        json["checks"][1],
        serde_json::json!({"check": "audit anchors", "ok": false, "error": "the seal is gone"})
    );
    assert_eq!(Verification::default().json(Path::new("r"))["ok"], true);
}

/// `inspect messages --json` of a run on NATS: no history, each inbox's count and kinds (or
/// why they cannot be read).
#[test]
fn what_waits_on_nats_as_json_has_each_inbox() {
    let waiting = [
        Waiting {
            inbox: "exec-1".into(),
            held: 2,
            kinds: Ok(BTreeMap::from([("task_assign", 2)])),
        },
        Waiting { inbox: "system".into(), held: 1, kinds: Err("timed out".into()) },
    ];
    let json = waiting_json("nats://127.0.0.1:4222", &waiting);
    assert_eq!(json["nats"], "nats://127.0.0.1:4222");
    assert_eq!(json["history"], false);
    assert_eq!(
        json["waiting"][0],
        serde_json::json!({"inbox": "exec-1", "not_acknowledged": 2, "kinds": {"task_assign": 2}})
    );
    assert_eq!(json["waiting"][1]["kinds"], serde_json::Value::Null);
    assert_eq!(json["waiting"][1]["kinds_error"], "timed out");
}
