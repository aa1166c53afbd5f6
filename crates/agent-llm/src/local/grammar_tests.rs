//! Every answer the reasoner asks of the embedded model has a strict grammar: each schema it
//! sends (every decision, the tool loop with each kind of tool set) converts with llama.cpp,
//! every string pattern in it is kept (llama.cpp turns a pattern it cannot express into "any
//! string", with only a warning), and the permissive fallback keeps the answer's structure.
//! No model needed: llama.cpp's converter alone.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, reason = "tests")]

use std::sync::{Arc, Mutex, PoisonError};

use agent_core::spawn::{RETURN_RESULTS, SUPERVISOR_TOOLS};
use agent_core::tools::ToolRegistry;
use agent_core::{Candidate, Conflict, Persona, Reasoner};
use agent_state::{
    AgentConfig, AgentId, AgentLayer, Decision, DecisionId, PlanStep, Role, RoleBook, StepTarget,
    Subtask, SubtaskResult, Task, Timestamp, WorkPackage, ooda,
};
use async_trait::async_trait;
use serde_json::{Value, json};

use super::{answer_schema, loosened};
use crate::provider::{ChatRequest, ChatResponse, Provider, ProviderError};
use crate::{
    Budget, ConversationLimits, Conversations, LlmReasoner, LlmSettings, PriceTable, UsageLedger,
};

/// Records every request and answers `{}`: every decision is then invalid and repaired, which
/// does not matter here; only the requests do.
#[derive(Default)]
struct Recorder(Mutex<Vec<ChatRequest>>);

#[async_trait]
impl Provider for Recorder {
    fn name(&self) -> &str {
        "local"
    }

    fn model(&self) -> &str {
        "recorder"
    }

    async fn complete(&self, request: &ChatRequest) -> Result<ChatResponse, ProviderError> {
        self.0.lock().unwrap_or_else(PoisonError::into_inner).push(request.clone());
        Ok(ChatResponse { text: "{}".to_owned(), ..ChatResponse::default() })
    }
}

fn roles() -> RoleBook {
    let lead = |name: &str, workers: &[&str], max: Option<u32>| Role {
        description: format!("Leads {name}."),
        enabled_agents: workers.iter().map(|w| (*w).to_owned()).collect(),
        max_instances: max,
        ..Role::new(name, AgentLayer::Mid)
    };
    let worker = |name: &str, tools: &[&str]| Role {
        description: format!("Does {name} work."),
        tools: tools.iter().map(|t| (*t).to_owned()).collect(),
        ..Role::new(name, AgentLayer::Bottom)
    };
    RoleBook::new([
        lead("code_lead", &["coder", "tester"], Some(1)),
        lead("docs_lead", &["writer"], None),
        worker("coder", &["write_file", "read_file"]),
        worker("tester", &["shell"]),
        worker("writer", &["write_file"]),
    ])
    .unwrap()
}

fn step(id: &str, tool: &str, args: Value) -> PlanStep {
    PlanStep::scripted(id, format!("do {id}"), StepTarget::Domain("code".into()), tool, args)
}

/// Every request the reasoner makes: each decision, and the tool loop of an executor with the
/// workspace tools, of a supervisor with the agent tools, of an OODA agent with its calls, and
/// of a small model offered only the planned call.
async fn every_request() -> Vec<ChatRequest> {
    let recorder = Arc::new(Recorder::default());
    let ledger = Arc::new(UsageLedger::new(PriceTable::new(), Budget::default()));
    let conversations = Arc::new(Conversations::in_memory(ConversationLimits::default()));
    let make = |settings: LlmSettings| {
        LlmReasoner::new(recorder.clone(), ledger.clone(), conversations.clone())
            .with_tools(&ToolRegistry::with_builtins())
            .with_settings(LlmSettings { plan_repairs: 0, ..settings })
    };
    let reasoner = make(LlmSettings::default());
    let small = make(LlmSettings {
        offer_agent_tools: false,
        planned_arguments_only: true,
        ..LlmSettings::default()
    });
    let top = AgentConfig::new("top-a", "A", AgentLayer::Top);
    let mid = AgentConfig::new("mid-a", "M", AgentLayer::Mid);
    let bottom = AgentConfig::new("bottom-a", "B", AgentLayer::Bottom);
    let persona = |config| Persona {
        config,
        system_prompt: "You are it.",
        tools: &[],
        roles: &[],
        domains: &[],
    };

    let decision = Decision::propose(
        DecisionId::from_u128(1),
        AgentId::new("top-b"),
        json!({"task_id": "t1", "steps": []}),
        vec![AgentId::new("top-a")],
        Timestamp(0),
    )
    .unwrap();
    let _ = reasoner.review_decision(persona(&top), &decision).await;
    let conflict = Conflict {
        id: "c1".into(),
        issue: "which".into(),
        parties: vec![],
        options: vec!["a".into(), "b \"quoted\"".into()],
    };
    let _ = reasoner.vote(persona(&top), &conflict).await;
    let work = WorkPackage {
        task_id: "t1".into(),
        goal: "g".into(),
        decision: DecisionId::from_u128(1),
        wave: 1,
        steps: vec![
            step("write", "write_file", json!({"path": "a"})),
            step("goal-step", "", Value::Null),
        ],
    };
    let team = [Candidate {
        id: AgentId::new("bottom-a"),
        tools: vec!["write_file".to_owned()].into(),
        load: 0,
        available: true,
        failed: false,
    }];
    let _ = reasoner.decompose(persona(&mid), &work, &team).await;
    let task = Task { id: "t1".into(), goal: "Write a.txt".into(), steps: Vec::new() };
    let results = [SubtaskResult {
        task_id: "t1".into(),
        step_id: "write".into(),
        agent: AgentId::new("bottom-a"),
        success: true,
        output: "ok".into(),
        result: None,
    }];
    let _ = reasoner.judge_progress(persona(&top), &task, &results, "").await;
    let _ = reasoner.plan(persona(&top), &task, &roles()).await;
    let _ = reasoner.plan(persona(&top), &task, &RoleBook::default()).await;
    let workers_only = RoleBook::new([Role::new("writer", AgentLayer::Bottom)]).unwrap();
    let _ = reasoner.plan(persona(&top), &task, &workers_only).await;
    let _ = reasoner.answer(persona(&mid), &AgentId::new("top-a"), "status?", "").await;

    let subtask = |step: PlanStep| Subtask {
        task_id: "t1".into(),
        step,
        assignee: AgentId::new("bottom-a"),
        attempt: 1,
    };
    let scripted = subtask(step("write", "write_file", json!({"path": "a.txt", "content": "hi"})));
    let goal = subtask(step("goal-step", "", Value::Null));
    let builtins: Vec<String> =
        ToolRegistry::with_builtins().names().into_iter().map(str::to_owned).collect();
    let _ =
        reasoner.next_action(Persona { tools: &builtins, ..persona(&bottom) }, &goal, &[]).await;
    let supervisor: Vec<String> =
        SUPERVISOR_TOOLS.iter().chain([&RETURN_RESULTS]).map(|t| (*t).to_owned()).collect();
    let spawnable = [("writer".to_owned(), "Writes.".to_owned())];
    let _ = reasoner
        .next_action(Persona { tools: &supervisor, roles: &spawnable, ..persona(&mid) }, &goal, &[])
        .await;
    let calls: Vec<String> =
        [ooda::MODIFY_SELF, ooda::SEND_MESSAGE].iter().map(|t| (*t).to_owned()).collect();
    let _ = reasoner.next_action(Persona { tools: &calls, ..persona(&bottom) }, &goal, &[]).await;
    let _ = small.next_action(persona(&bottom), &scripted, &[]).await;

    let requests = recorder.0.lock().unwrap_or_else(PoisonError::into_inner).clone();
    let mut distinct: Vec<ChatRequest> = Vec::new();
    for r in requests {
        if !distinct.iter().any(|d| d.response == r.response && d.tools == r.tools) {
            distinct.push(r);
        }
    }
    distinct
}

/// Every `pattern` in `schema`.
fn patterns(schema: &Value, out: &mut Vec<String>) {
    match schema {
        Value::Object(map) => {
            if let Some(Value::String(p)) = map.get("pattern") {
                out.push(p.clone());
            }
            map.values().for_each(|v| patterns(v, out));
        }
        Value::Array(items) => items.iter().for_each(|v| patterns(v, out)),
        _ => {}
    }
}

fn grammar(schema: &str) -> Result<String, String> {
    llama_cpp_2::json_schema_to_grammar(schema).map_err(|e| format!("{e}: {schema}"))
}

#[tokio::test(start_paused = true)]
async fn every_schema_the_reasoner_sends_converts_to_a_strict_grammar() {
    let requests = every_request().await;
    let names: Vec<String> = requests
        .iter()
        .map(|r| match &r.response {
            crate::ResponseFormat::Json { name, .. } => name.clone(),
            crate::ResponseFormat::Text => {
                format!(
                    "tools: {}",
                    r.tools.iter().map(|t| t.name.as_str()).collect::<Vec<_>>().join(" ")
                )
            }
        })
        .collect();
    for expected in ["review", "vote", "decompose", "judge", "plan", "answer"] {
        assert!(names.iter().any(|n| n == expected), "no {expected} request among {names:?}");
    }
    assert!(names.iter().any(|n| n.contains("spawn_agent") && n.contains("return_results")));
    assert!(names.iter().any(|n| n.contains("modify_self") && !n.contains("shell")));
    assert!(names.iter().any(|n| n.contains("edit_file")), "the builtins: {names:?}");
    assert!(names.iter().filter(|n| n.as_str() == "plan").count() >= 3, "{names:?}");

    // What llama.cpp makes of a pattern it cannot express: any string.
    let any_string = grammar(r#"{"type":"string","pattern":"^(?=x)$"}"#).unwrap();
    for (request, name) in requests.iter().zip(&names) {
        let schema = answer_schema(request, false).unwrap_or_else(|| panic!("{name}: no schema"));
        let strict = grammar(&schema).unwrap_or_else(|e| panic!("{name}: {e}"));
        assert!(strict.contains("root ::="), "{name}: {strict}");
        // Each pattern is one llama.cpp expresses (not silently "any string").
        let mut found = Vec::new();
        patterns(&serde_json::from_str(&schema).unwrap(), &mut found);
        for pattern in found {
            let alone = json!({"type": "string", "pattern": pattern}).to_string();
            assert_ne!(grammar(&alone).unwrap(), any_string, "{name}: pattern {pattern} is lost");
        }
        // The fallback converts too and keeps the structure: the same required properties.
        let permissive = answer_schema(request, true).unwrap();
        grammar(&permissive).unwrap_or_else(|e| panic!("{name} (permissive): {e}"));
        let (strict_value, loose_value): (Value, Value) =
            (serde_json::from_str(&schema).unwrap(), serde_json::from_str(&permissive).unwrap());
        assert_eq!(required(&strict_value), required(&loose_value), "{name}");
    }
}

/// Every `required` list in `schema`, in order.
fn required(schema: &Value) -> Vec<Value> {
    let mut out = Vec::new();
    fn walk(v: &Value, out: &mut Vec<Value>) {
        match v {
            Value::Object(map) => {
                if let Some(r) = map.get("required") {
                    out.push(r.clone());
                }
                map.values().for_each(|x| walk(x, out));
            }
            Value::Array(items) => items.iter().for_each(|x| walk(x, out)),
            _ => {}
        }
    }
    walk(schema, &mut out);
    out
}

#[test]
fn what_llama_cpp_refuses_is_loosened_and_the_structure_kept() {
    // An invalid pattern, an unknown type, an empty enum, an outside $ref: llama.cpp refuses
    // each; the fallback drops them and keeps the object and its required properties.
    let schema = json!({
        "type": "object",
        "properties": {
            "id": {"type": "string", "pattern": "^[a-$"},
            "kind": {"type": "thing"},
            "none": {"enum": []},
            "ref": {"$ref": "https://example.com/schema"},
            "items": {"type": "array", "items": {"type": "integer", "format": "int32"}, "maxItems": 3}
        },
        "required": ["id", "items"]
    });
    assert!(grammar(&schema.to_string()).is_err(), "llama.cpp refuses the original");
    let loose = loosened(&schema);
    grammar(&loose.to_string()).unwrap();
    assert_eq!(loose["required"], json!(["id", "items"]));
    assert_eq!(loose["properties"]["id"], json!({"type": "string"}));
    assert_eq!(loose["properties"]["kind"], json!({}));
    assert_eq!(loose["properties"]["items"]["items"], json!({"type": "integer"}));
    assert_eq!(loose["properties"]["items"]["maxItems"], 3);
}
