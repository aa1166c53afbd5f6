//! The LLM reasoner's own overhead per reasoning call, with a mock provider that answers at once.
//!
//! `llm/provider_call` is the bare `Provider::complete` of the mock; `llm/vote` and
//! `llm/next_action` are the same answer obtained through `LlmReasoner` (system prompt,
//! conversation, budget reservation and settlement, retry wrapper, JSON parsing and schema
//! validation, remembering the turn). Their difference is what Strata adds to every model call.
#![allow(missing_docs)]
#![allow(clippy::unwrap_used, clippy::expect_used, reason = "benchmarks")]

use std::hint::black_box;
use std::sync::Arc;

use agent_core::{Conflict, Persona, Reasoner};
use agent_llm::{
    Budget, ChatRequest, ChatResponse, ConversationLimits, Conversations, LlmReasoner, PriceTable,
    Provider, ProviderError, ProviderToolCall, Usage, UsageLedger,
};
use agent_state::{AgentConfig, AgentId, AgentLayer, Capability, PlanStep, StepTarget, Subtask};
use async_trait::async_trait;
use criterion::{Criterion, criterion_group, criterion_main};

/// Answers every request at once: a tool call when tools are offered, else a vote.
struct Instant;

#[async_trait]
impl Provider for Instant {
    fn name(&self) -> &str {
        "mock"
    }

    fn model(&self) -> &str {
        "instant"
    }

    async fn complete(&self, request: &ChatRequest) -> Result<ChatResponse, ProviderError> {
        let usage = Usage { input_tokens: 100, output_tokens: 10 };
        if request.tools.is_empty() {
            return Ok(ChatResponse {
                text: r#"{"choice": "a", "reason": "a is safer"}"#.into(),
                usage,
                ..ChatResponse::default()
            });
        }
        Ok(ChatResponse {
            tool_calls: vec![ProviderToolCall {
                id: "1".into(),
                name: "finish_subtask".into(),
                arguments: r#"{"success": true, "summary": "done"}"#.into(),
            }],
            usage,
            ..ChatResponse::default()
        })
    }
}

fn config(id: &str, layer: AgentLayer) -> AgentConfig {
    AgentConfig {
        id: AgentId::new(id),
        name: id.into(),
        layer,
        role: "bench".into(),
        supervisor: None,
        subordinates: Vec::new(),
        capabilities: vec![Capability::Plan].into(),
        model: None,
        temperature: None,
        max_retries: 3,
        timeout_ms: 30_000,
    }
}

fn bench(c: &mut Criterion) {
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    let provider: Arc<dyn Provider> = Arc::new(Instant);
    let ledger = Arc::new(UsageLedger::new(PriceTable::new(), Budget::default()));
    let conversations = Arc::new(Conversations::in_memory(ConversationLimits::default()));
    let reasoner = LlmReasoner::new(provider.clone(), ledger, conversations);
    let top = config("top-a", AgentLayer::Top);
    let bottom = config("bottom-a", AgentLayer::Bottom);
    let prompt = "You are top-a, a top-layer power.";
    let conflict = Conflict {
        id: "c1".into(),
        issue: "which option".into(),
        parties: vec![AgentId::new("mid-a"), AgentId::new("mid-b")],
        options: vec!["a".into(), "b".into()],
    };
    let subtask = Subtask {
        task_id: "t".into(),
        step: PlanStep::scripted(
            "s",
            "write",
            StepTarget::Any,
            "write_file",
            serde_json::json!({"path": "a.txt", "content": "a"}),
        ),
        assignee: AgentId::new("bottom-a"),
        attempt: 1,
    };
    let request = ChatRequest { system: prompt.into(), ..ChatRequest::default() };
    let mut g = c.benchmark_group("llm");
    g.bench_function("provider_call", |b| {
        b.iter(|| rt.block_on(async { black_box(provider.complete(&request).await.unwrap()) }))
    });
    g.bench_function("vote", |b| {
        let who =
            Persona { config: &top, system_prompt: prompt, tools: &[], roles: &[], domains: &[] };
        b.iter(|| rt.block_on(async { black_box(reasoner.vote(who, &conflict).await.unwrap()) }))
    });
    g.bench_function("next_action", |b| {
        let who = Persona {
            config: &bottom,
            system_prompt: prompt,
            tools: &[],
            roles: &[],
            domains: &[],
        };
        b.iter(|| {
            rt.block_on(async {
                black_box(reasoner.next_action(who, &subtask, &[]).await.unwrap())
            })
        })
    });
    g.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
