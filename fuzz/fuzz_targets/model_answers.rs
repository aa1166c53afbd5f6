//! Any text as a model's answer to each decision the LLM reasoner asks for (review, vote,
//! decompose, next action as text or as a tool call, judge, plan, answer, compose): the
//! reasoner's parsers (JSON, the schema, each decision's own checks, the one repair) return a
//! decision or a `ReasonError`, never a panic. The same text answers the repair too.

#![no_main]

use std::sync::Arc;

use agent_core::{Candidate, Conflict, Persona, Reasoner};
use agent_llm::{
    Budget, ChatRequest, ChatResponse, ConversationLimits, Conversations, LlmReasoner, PriceTable,
    Provider, ProviderError, ProviderToolCall, UsageLedger,
};
use agent_state::{
    AgentConfig, AgentId, AgentLayer, Decision, DecisionId, PlanStep, RoleBook, StepTarget,
    Subtask, Task, Timestamp, WorkPackage,
};
use libfuzzer_sys::fuzz_target;

/// A model that answers every call with the fuzzer's text, as text or as one tool call.
struct Echo {
    text: String,
    as_tool_call: bool,
}

#[async_trait::async_trait]
impl Provider for Echo {
    fn name(&self) -> &str {
        "fuzz"
    }

    fn model(&self) -> &str {
        "echo"
    }

    async fn complete(&self, _: &ChatRequest) -> Result<ChatResponse, ProviderError> {
        let mut response = ChatResponse::default();
        if self.as_tool_call {
            let (name, arguments) =
                self.text.split_once('\n').unwrap_or(("write_file", &self.text));
            response.tool_calls.push(ProviderToolCall {
                id: "call-1".into(),
                name: name.to_owned(),
                arguments: arguments.to_owned(),
            });
        } else {
            response.text = self.text.clone();
        }
        Ok(response)
    }
}

fn step(id: &str) -> PlanStep {
    PlanStep {
        id: id.into(),
        description: format!("do {id}"),
        target: StepTarget::Domain("docs".into()),
        tool: "write_file".into(),
        args: serde_json::json!({ "path": "a.txt", "content": "a" }),
        after: Vec::new(),
        idempotent: false,
        role: None,
        acceptance: String::new(),
    }
}

fuzz_target!(|data: &[u8]| {
    let Some((&which, rest)) = data.split_first() else { return };
    let text = String::from_utf8_lossy(rest).into_owned();
    let provider = Arc::new(Echo { text, as_tool_call: which % 9 == 4 });
    let ledger = Arc::new(UsageLedger::new(PriceTable::new(), Budget::default()));
    let conversations = Arc::new(Conversations::in_memory(ConversationLimits::default()));
    let reasoner = LlmReasoner::new(provider, ledger, conversations)
        .with_tools(&agent_core::tools::ToolRegistry::with_builtins());
    let layer = match which % 9 {
        0 | 1 | 5 | 6 => AgentLayer::Top,
        2 => AgentLayer::Mid,
        _ => AgentLayer::Bottom,
    };
    let config = AgentConfig::new("agent-1", "Agent", layer);
    let tools = ["write_file".to_owned(), "read_file".to_owned()];
    let who = Persona {
        config: &config,
        system_prompt: "You are a test agent.",
        tools: &tools,
        roles: &[],
        domains: &[],
    };
    let task = Task { id: "t".into(), goal: "write a".into(), steps: vec![step("s1"), step("s2")] };
    let runtime = match tokio::runtime::Builder::new_current_thread().build() {
        Ok(runtime) => runtime,
        Err(_) => return,
    };
    runtime.block_on(async {
        // Every outcome is fine but a panic: the results are dropped.
        match which % 9 {
            0 => {
                let decision = Decision::propose(
                    DecisionId::from_u128(1),
                    AgentId::new("top-b"),
                    serde_json::json!({ "steps": [] }),
                    vec![AgentId::new("agent-1")],
                    Timestamp(0),
                );
                if let Ok(decision) = decision {
                    let _ = reasoner.review_decision(who, &decision).await;
                }
            }
            1 => {
                let conflict = Conflict {
                    id: "c".into(),
                    issue: "which".into(),
                    parties: vec![AgentId::new("mid-a")],
                    options: vec!["a".into(), "b".into()],
                };
                let _ = reasoner.vote(who, &conflict).await;
            }
            2 => {
                let work = WorkPackage {
                    task_id: "t".into(),
                    goal: "write a".into(),
                    decision: DecisionId::from_u128(1),
                    wave: 0,
                    steps: vec![step("s1")],
                };
                let team = [Candidate {
                    id: AgentId::new("bottom-1"),
                    tools: tools.to_vec().into(),
                    load: 0,
                    available: true,
                    failed: false,
                }];
                let _ = reasoner.decompose(who, &work, &team).await;
            }
            3 | 4 => {
                let subtask = Subtask {
                    task_id: "t".into(),
                    step: step("s1"),
                    assignee: AgentId::new("agent-1"),
                    attempt: 1,
                };
                let _ = reasoner.next_action(who, &subtask, &[]).await;
            }
            5 => {
                let _ = reasoner.judge_progress(who, &task, &[], "board").await;
            }
            6 => {
                let _ = reasoner.plan(who, &Task::goal("g", "write a"), &RoleBook::default()).await;
            }
            7 => {
                let _ = reasoner.answer(who, &AgentId::new("mid-a"), "how is it going?", "").await;
            }
            _ => {
                let _ = reasoner.compose(who, "write a note", "material").await;
            }
        }
    });
});
