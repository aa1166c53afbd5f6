//! `LlmReasoner` against a scripted provider: every decision's request and answer, the one
//! repair attempt, and the agents' own bounded conversations.

use std::collections::BTreeMap;
use std::sync::Arc;

use agent_core::spawn::{
    DESPAWN_AGENT, GET_AGENTS, RETURN_RESULTS, SPAWN_AGENT, SPEAK_TO_AGENT, supervisor_tool_spec,
};
use agent_core::tools::{ToolRegistry, validate};
use agent_core::{
    AuditEvent, AuditLog, Candidate, Conflict, InMemoryAuditLog, Judgement, NextAction, Persona,
    ReasonError, Reasoner, TokioClock, ToolCall, ToolCallRecord, Verdict, with_reasoning_audit,
};
use agent_llm::{
    Budget, ChatRequest, ConversationLimits, Conversations, FINISH_TOOL, LlmReasoner, LlmSettings,
    LlmStore, PriceTable, ProviderErrorKind, ResponseFormat, Role, SledLlmStore, UsageLedger,
};
use agent_state::{
    AgentConfig, AgentId, AgentLayer, Decision, DecisionId, LeadRequest, PlanStep, RoleBook,
    StepTarget, Subtask, SubtaskResult, Task, Timestamp, WorkPackage,
};
use run_store::{Durability, RunStore};
use serde_json::json;

use crate::mock::{
    MockProvider, decision, failure, json, last_message, schema, shared, text, tool_call,
    user_texts,
};

/// An agent as the runtime hands it to a reasoner: its configuration and system prompt.
pub(crate) struct Agent {
    pub(crate) config: AgentConfig,
    pub(crate) prompt: String,
}

impl Agent {
    pub(crate) fn new(id: &str, layer: AgentLayer) -> Self {
        Self {
            config: AgentConfig::new(id, format!("Agent {id}"), layer).with_max_retries(2),
            prompt: format!("You are {id}, a {layer} agent of the test team."),
        }
    }

    pub(crate) fn persona(&self) -> Persona<'_> {
        Persona {
            config: &self.config,
            system_prompt: &self.prompt,
            tools: &[],
            roles: &[],
            domains: &[],
        }
    }
}

/// A reasoner on `provider` with its ledger and conversations, all kept for inspection.
pub(crate) struct Rig {
    pub(crate) provider: Arc<MockProvider>,
    pub(crate) ledger: Arc<UsageLedger>,
    pub(crate) conversations: Arc<Conversations>,
    pub(crate) reasoner: Arc<LlmReasoner>,
}

/// No budget, default conversation limits.
pub(crate) fn rig(provider: MockProvider) -> Rig {
    rig_with(provider, UsageLedger::new(PriceTable::new(), Budget::default()))
}

pub(crate) fn rig_with(provider: MockProvider, ledger: UsageLedger) -> Rig {
    let conversations = Arc::new(Conversations::in_memory(ConversationLimits::default()));
    rig_full(provider, Arc::new(ledger), conversations)
}

pub(crate) fn rig_full(
    provider: MockProvider,
    ledger: Arc<UsageLedger>,
    conversations: Arc<Conversations>,
) -> Rig {
    let (provider, dynamic) = shared(provider);
    let reasoner = LlmReasoner::new(dynamic, ledger.clone(), conversations.clone())
        .with_tools(&ToolRegistry::with_builtins())
        .with_settings(LlmSettings { max_tokens: 200, ..LlmSettings::default() });
    Rig { provider, ledger, conversations, reasoner: Arc::new(reasoner) }
}

pub(crate) fn plan_decision(n: u128) -> Decision {
    Decision::propose(
        DecisionId::from_u128(n),
        AgentId::new("top-b"),
        json!({"task_id": "t1", "goal": "greet", "steps": [{"id": "s1", "tool": "write_file"}]}),
        vec![AgentId::new("top-a")],
        Timestamp(0),
    )
    .unwrap()
}

pub(crate) fn conflict(options: &[&str]) -> Conflict {
    Conflict {
        id: "c1".into(),
        issue: "two leads want the same file".into(),
        parties: vec![AgentId::new("mid-a"), AgentId::new("mid-b")],
        options: options.iter().map(|o| (*o).into()).collect(),
    }
}

fn step(id: &str, tool: &str, args: serde_json::Value) -> PlanStep {
    PlanStep::scripted(id, format!("do {id}"), StepTarget::Domain("docs".into()), tool, args)
}

fn work() -> WorkPackage {
    WorkPackage {
        task_id: "t1".into(),
        goal: "greet".into(),
        decision: DecisionId::from_u128(1),
        wave: 1,
        steps: vec![
            step("write", "write_file", json!({"path": "a.txt", "content": "hi"})),
            step("count", "shell", json!({"command": "wc -c a.txt"})),
        ],
    }
}

fn candidate(id: &str, tools: &[&str], available: bool) -> Candidate {
    Candidate {
        id: AgentId::new(id),
        tools: tools.iter().map(|t| (*t).to_owned()).collect(),
        load: 0,
        available,
        failed: false,
    }
}

fn team() -> Vec<Candidate> {
    vec![
        candidate("exec-w", &["write_file"], true),
        candidate("exec-s", &["shell"], true),
        candidate("exec-gone", &["write_file", "shell"], false),
    ]
}

fn subtask() -> Subtask {
    Subtask {
        task_id: "t1".into(),
        step: step("write", "write_file", json!({"path": "a.txt", "content": "hi"})),
        assignee: AgentId::new("exec-w"),
        attempt: 1,
    }
}

fn finish(success: bool, summary: &str) -> String {
    json!({"success": success, "summary": summary}).to_string()
}

/// The JSON answer format of a request, or a panic.
fn json_format(request: &ChatRequest) -> (&str, &serde_json::Value) {
    match &request.response {
        ResponseFormat::Json { name, schema } => (name, schema),
        ResponseFormat::Text => panic!("expected a JSON request: {request:?}"),
    }
}

/// A JSON request built for `agent`: its system prompt, no tools, the settings' token limit.
fn assert_structured(request: &ChatRequest, agent: &Agent, name: &str) {
    assert!(request.system.starts_with(&agent.prompt), "{}", request.system);
    assert!(request.tools.is_empty() && !request.require_tool, "{request:?}");
    assert_eq!(json_format(request).0, name);
    assert_eq!(request.max_tokens, 200);
    assert_eq!(last_message(request).role, Role::User);
}

// ---------------------------------------------------------------------------------------------
// Each decision
// ---------------------------------------------------------------------------------------------

#[tokio::test(start_paused = true)]
async fn review_signs_and_asks_with_the_personas_prompt_and_a_verdict_schema() {
    let rig = rig(MockProvider::queue([json(json!({"verdict": "sign", "reason": "safe"}))]));
    let agent = Agent::new("top-a", AgentLayer::Top);
    let decision = plan_decision(7);
    let verdict = rig.reasoner.review_decision(agent.persona(), &decision).await.unwrap();
    assert_eq!(verdict, Verdict::Sign);

    let request = rig.provider.last();
    assert_structured(&request, &agent, "review");
    assert_eq!(request.messages.len(), 1, "a fresh agent has no history");
    let question = &last_message(&request).content;
    assert!(question.contains(&decision.id.to_string()), "{question}");
    assert!(question.contains("\"write_file\""), "the plan's content is quoted: {question}");
    let schema = json_format(&request).1;
    assert_eq!(schema["properties"]["verdict"]["enum"], json!(["sign", "veto"]));
    assert_eq!(schema["required"], json!(["verdict", "reason"]));
    assert_eq!(rig.reasoner.name(), "mock:mock-model");
}

#[tokio::test(start_paused = true)]
async fn review_vetoes_with_the_models_reason() {
    let rig =
        rig(MockProvider::queue([json(json!({"verdict": "veto", "reason": "  too risky "}))]));
    let agent = Agent::new("top-a", AgentLayer::Top);
    let verdict = rig.reasoner.review_decision(agent.persona(), &plan_decision(1)).await.unwrap();
    assert_eq!(verdict, Verdict::Veto { reason: "too risky".into() });
}

#[tokio::test(start_paused = true)]
async fn vote_returns_the_chosen_option_and_offers_exactly_the_ballot() {
    let rig = rig(MockProvider::queue([json(json!({"choice": "split", "reason": "fair"}))]));
    let agent = Agent::new("top-a", AgentLayer::Top);
    let choice = rig.reasoner.vote(agent.persona(), &conflict(&["merge", "split"])).await.unwrap();
    assert_eq!(choice, "split");
    let request = rig.provider.last();
    assert_structured(&request, &agent, "vote");
    assert_eq!(schema(&request)["properties"]["choice"]["enum"], json!(["merge", "split"]));
    let question = &last_message(&request).content;
    assert!(question.contains("- merge") && question.contains("- split"), "{question}");
}

#[tokio::test(start_paused = true)]
async fn a_vote_without_options_is_a_bad_question_and_no_call() {
    let rig = rig(MockProvider::queue([]));
    let agent = Agent::new("top-a", AgentLayer::Top);
    let err = rig.reasoner.vote(agent.persona(), &conflict(&[])).await.unwrap_err();
    assert!(matches!(err, ReasonError::BadQuestion(_)), "{err:?}");
    assert_eq!(rig.provider.calls(), 0);
}

#[tokio::test(start_paused = true)]
async fn decompose_places_steps_on_available_executors_only() {
    let answer = json!({"placements": {"count": "exec-s", "write": "exec-w"}});
    let rig = rig(MockProvider::queue([json(answer)]));
    let agent = Agent::new("mid-docs", AgentLayer::Mid);
    let placements = rig.reasoner.decompose(agent.persona(), &work(), &team()).await.unwrap();
    let got: Vec<(&str, &str)> =
        placements.iter().map(|p| (p.step.id.as_str(), p.assignee.as_str())).collect();
    assert_eq!(got, [("write", "exec-w"), ("count", "exec-s")], "in the work package's order");
    assert_eq!(placements[0].step, work().steps[0], "the whole step is carried");

    let request = rig.provider.last();
    assert_structured(&request, &agent, "decompose");
    let placements = &schema(&request)["properties"]["placements"];
    assert_eq!(placements["required"], json!(["write", "count"]));
    assert_eq!(placements["additionalProperties"], json!(false));
    // Each step offers only the available executors that have its tool.
    assert_eq!(placements["properties"]["write"]["enum"], json!(["exec-w"]));
    assert_eq!(placements["properties"]["count"]["enum"], json!(["exec-s"]));
    let question = &last_message(&request).content;
    assert!(question.contains("exec-w: tools [write_file]"), "{question}");
    assert!(!question.contains("exec-gone"), "{question}");
}

#[tokio::test(start_paused = true)]
async fn decompose_without_available_executors_is_unplaceable_without_a_call() {
    let rig = rig(MockProvider::queue([]));
    let agent = Agent::new("mid-docs", AgentLayer::Mid);
    let team = [candidate("exec-gone", &["write_file"], false)];
    let err = rig.reasoner.decompose(agent.persona(), &work(), &team).await.unwrap_err();
    assert!(matches!(err, ReasonError::Unplaceable { ref step, .. } if step == "write"), "{err:?}");
    assert_eq!(rig.provider.calls(), 0);
}

/// A reasoner on `rig` that knows `exec-w` holds `read_file` and `write_file`.
fn exec_w_reasoner(rig: &Rig, settings: LlmSettings) -> LlmReasoner {
    LlmReasoner::new(rig.provider.clone(), rig.ledger.clone(), rig.conversations.clone())
        .with_tools(&ToolRegistry::with_builtins())
        .with_agent_tools(Arc::new(BTreeMap::from([(
            AgentId::new("exec-w"),
            ["read_file".to_owned(), "write_file".to_owned()].into(),
        )])))
        .with_settings(settings)
}

#[tokio::test(start_paused = true)]
async fn small_model_settings_offer_only_the_planned_call_and_finish() {
    let rig = rig(MockProvider::queue([tool_call(
        "abc",
        "write_file",
        r#"{"path": "a.txt", "content": "hi"}"#,
    )]));
    let agent = Agent::new("exec-w", AgentLayer::Bottom);
    let reasoner = exec_w_reasoner(
        &rig,
        LlmSettings {
            offer_agent_tools: false,
            planned_arguments_only: true,
            ..LlmSettings::default()
        },
    );
    reasoner.next_action(agent.persona(), &subtask(), &[]).await.unwrap();
    let request = rig.provider.last();
    let offered: Vec<&str> = request.tools.iter().map(|t| t.name.as_str()).collect();
    assert_eq!(offered, ["write_file", FINISH_TOOL], "not the agent's other tools");
    assert_eq!(
        request.tools[0].parameters,
        json!({
            "type": "object",
            "properties": {"path": {"enum": ["a.txt"]}, "content": {"enum": ["hi"]}},
            "required": ["content", "path"],
            "additionalProperties": false
        }),
        "only the plan's arguments"
    );

    // Other arguments are refused and repaired like any invalid call.
    let rig = rig_with(
        MockProvider::queue([
            tool_call("c1", "write_file", r#"{"path": "b.txt", "content": "hi"}"#),
            tool_call("c2", "write_file", r#"{"path": "a.txt", "content": "hi"}"#),
        ]),
        UsageLedger::new(PriceTable::new(), Budget::default()),
    );
    let reasoner = small_model_reasoner(&rig);
    let action = reasoner.next_action(agent.persona(), &subtask(), &[]).await.unwrap();
    assert_eq!(
        action,
        NextAction::Call(ToolCall {
            tool: "write_file".into(),
            args: json!({"path": "a.txt", "content": "hi"})
        })
    );
    assert_eq!(rig.provider.calls(), 2);
}

#[tokio::test(start_paused = true)]
async fn next_action_requires_a_tool_and_offers_the_steps_tool_the_agents_tools_and_finish() {
    let rig = rig(MockProvider::queue([tool_call(
        "abc",
        "write_file",
        r#"{"path": "a.txt", "content": "hi"}"#,
    )]));
    let agent = Agent::new("exec-w", AgentLayer::Bottom);
    let reasoner = exec_w_reasoner(&rig, LlmSettings::default());
    let action = reasoner.next_action(agent.persona(), &subtask(), &[]).await.unwrap();
    assert_eq!(
        action,
        NextAction::Call(ToolCall {
            tool: "write_file".into(),
            args: json!({"path": "a.txt", "content": "hi"})
        })
    );
    let request = rig.provider.last();
    assert!(request.system.starts_with(&agent.prompt));
    assert!(request.require_tool);
    assert_eq!(request.response, ResponseFormat::Text);
    let offered: Vec<&str> = request.tools.iter().map(|t| t.name.as_str()).collect();
    assert_eq!(offered, ["read_file", "write_file", FINISH_TOOL]);
    let write = &request.tools[1];
    assert_eq!(
        &write.parameters,
        ToolRegistry::with_builtins().get("write_file").unwrap().schema()
    );
    assert_eq!(request.messages.len(), 1);
    let question = &request.messages[0].content;
    assert!(
        question.contains(r#"The plan's call for it: {"arguments":{"content":"hi","path":"a.txt"},"tool":"write_file"}"#),
        "{question}"
    );
    assert!(
        rig.conversations.get(&AgentId::new("exec-w")).unwrap().turns.is_empty(),
        "a tool call is not a finished turn"
    );
}

/// The coding tools reach the model like the others: named, described and with the registry's
/// argument schema, against which the model's call is checked (and repaired).
#[tokio::test(start_paused = true)]
async fn an_executor_is_offered_the_coding_tools_with_the_registrys_schemas() {
    let rig = rig(MockProvider::queue([
        tool_call("c1", "search", r#"{"pattern": "todo", "max_results": "5"}"#),
        tool_call("c2", "search", r#"{"pattern": "todo", "max_results": 5}"#),
    ]));
    let agent = Agent::new("exec-w", AgentLayer::Bottom);
    let registry = ToolRegistry::with_builtins();
    let coding = ["edit_file", "search", "glob"].map(String::from);
    let reasoner =
        LlmReasoner::new(rig.provider.clone(), rig.ledger.clone(), rig.conversations.clone())
            .with_tools(&registry)
            .with_agent_tools(Arc::new(BTreeMap::from([(AgentId::new("exec-w"), coding.into())])));
    let action = reasoner.next_action(agent.persona(), &subtask(), &[]).await.unwrap();
    assert_eq!(
        action,
        NextAction::Call(ToolCall {
            tool: "search".into(),
            args: json!({"pattern": "todo", "max_results": 5})
        })
    );
    assert_eq!(rig.provider.calls(), 2, "the mistyped call was repaired");
    let request = rig.provider.last();
    let offered: Vec<&str> = request.tools.iter().map(|t| t.name.as_str()).collect();
    assert_eq!(offered, ["write_file", "edit_file", "search", "glob", FINISH_TOOL]);
    for spec in &request.tools[..4] {
        let tool = registry.get(&spec.name).unwrap();
        assert_eq!(&spec.parameters, tool.schema(), "{}", spec.name);
        assert_eq!(spec.description, tool.description(), "{}", spec.name);
    }
}

#[tokio::test(start_paused = true)]
async fn a_repeat_of_the_last_successful_call_finishes_the_subtask_instead() {
    let args = json!({"path": "a.txt", "content": "hi"});
    let (rig, done, action) = the_same_write_again(&args, "wrote 2 bytes").await;
    match action {
        NextAction::Finish { success: true, summary } => {
            assert!(summary.starts_with("wrote 2 bytes"), "{summary}");
            assert!(summary.contains("loop guard"), "{summary}");
        }
        other => panic!("the repeat must finish the subtask, got {other:?}"),
    }
    // The hint after a successful call says how to finish.
    let request = rig.provider.last();
    assert!(last_message(&request).content.contains(FINISH_TOOL), "{request:#?}");

    // A failed call may be tried again as it was.
    let failed = ToolCallRecord { success: false, output: "disk full".into(), ..done };
    let rig = rig_again(&args);
    let agent = Agent::new("exec-w", AgentLayer::Bottom);
    let action = rig.reasoner.next_action(agent.persona(), &subtask(), &[failed]).await.unwrap();
    assert_eq!(action, NextAction::Call(ToolCall { tool: "write_file".into(), args }));
}

/// A model that, after a successful `write_file` of `args`, asks for it again: the rig, the
/// earlier call's record and the action returned.
async fn the_same_write_again(
    args: &serde_json::Value,
    output: &str,
) -> (Rig, ToolCallRecord, NextAction) {
    let done = ToolCallRecord {
        call: ToolCall { tool: "write_file".into(), args: args.clone() },
        success: true,
        output: output.into(),
        event: false,
    };
    let rig = rig_again(args);
    let agent = Agent::new("exec-w", AgentLayer::Bottom);
    let action = rig
        .reasoner
        .next_action(agent.persona(), &subtask(), std::slice::from_ref(&done))
        .await
        .unwrap();
    (rig, done, action)
}

#[tokio::test(start_paused = true)]
async fn an_earlier_write_is_fed_back_with_its_content_cut_but_a_repeat_is_still_one() {
    // A file of 5 000 characters written: later prompts show its first 1 000, not all of it
    // again (a small model's 8 KB file took a 4 096-token context past its limit).
    let args = json!({"path": "a.txt", "content": "y".repeat(5_000)});
    let (rig, _, action) = the_same_write_again(&args, "wrote 5000 bytes").await;
    // The model asked for the whole call again: still the same call, still finished.
    assert!(matches!(action, NextAction::Finish { success: true, .. }), "{action:?}");
    let request = rig.provider.last();
    let shown = request.messages.iter().flat_map(|m| &m.tool_calls).next().unwrap();
    let shown: serde_json::Value = serde_json::from_str(&shown.arguments).unwrap();
    assert_eq!(shown["path"], "a.txt");
    let content = shown["content"].as_str().unwrap();
    assert!(content.starts_with(&"y".repeat(1_000)), "{content}");
    assert!(content.ends_with("[… 4000 more characters]"), "{content}");
}

fn rig_again(args: &serde_json::Value) -> Rig {
    rig(MockProvider::queue([tool_call("c2", "write_file", &args.to_string())]))
}

#[tokio::test(start_paused = true)]
async fn next_action_feeds_the_history_back_as_tool_calls_and_results_then_finishes() {
    let rig = rig(MockProvider::queue([tool_call("f1", FINISH_TOOL, &finish(true, "wrote it"))]));
    let agent = Agent::new("exec-w", AgentLayer::Bottom);
    let history = [
        ToolCallRecord {
            call: ToolCall { tool: "write_file".into(), args: json!({"path": "a.txt"}) },
            success: false,
            output: "missing content".into(),
            event: false,
        },
        ToolCallRecord {
            call: ToolCall {
                tool: "write_file".into(),
                args: json!({"path": "a.txt", "content": "hi"}),
            },
            success: true,
            output: "wrote 2 bytes".into(),
            event: false,
        },
    ];
    let action = rig.reasoner.next_action(agent.persona(), &subtask(), &history).await.unwrap();
    assert_eq!(action, NextAction::Finish { success: true, summary: "wrote it".into() });

    let request = rig.provider.last();
    // Only the step's tool (the agent has no list) and finish are offered.
    let offered: Vec<&str> = request.tools.iter().map(|t| t.name.as_str()).collect();
    assert_eq!(offered, ["write_file", FINISH_TOOL]);
    let m = &request.messages;
    assert_eq!(m.len(), 5, "{m:#?}");
    assert_eq!(m[0].role, Role::User);
    for (i, record) in history.iter().enumerate() {
        let call = &m[1 + 2 * i];
        let result = &m[2 + 2 * i];
        assert_eq!(call.role, Role::Assistant);
        assert_eq!(call.tool_calls.len(), 1);
        assert_eq!(call.tool_calls[0].name, "write_file");
        let args: serde_json::Value = serde_json::from_str(&call.tool_calls[0].arguments).unwrap();
        assert_eq!(args, record.call.args);
        assert_eq!(result.role, Role::Tool);
        assert_eq!(result.tool_call_id.as_deref(), Some(call.tool_calls[0].id.as_str()));
        assert!(result.content.contains(&record.output), "{}", result.content);
    }
    assert_ne!(m[1].tool_calls[0].id, m[3].tool_calls[0].id, "ids are distinct");
    assert!(m[2].content.starts_with("failed"), "{}", m[2].content);
    assert!(m[4].content.starts_with("ok"), "{}", m[4].content);

    // Choosing to finish is not yet the end (the runtime may put a finish off while workers
    // still run); once the loop tells the reasoner the step is over, it is one turn of the
    // executor's conversation, without the records that were not its calls.
    assert!(rig.conversations.get(&AgentId::new("exec-w")).unwrap().turns.is_empty());
    let mut seen = history.to_vec();
    seen.push(ToolCallRecord {
        call: ToolCall { tool: "message".into(), args: json!({"from": "lead"}) },
        success: true,
        output: "lead says: hurry".into(),
        event: true,
    });
    rig.reasoner
        .concluded(agent.persona(), &subtask(), &seen, "finished: success=true, wrote it")
        .await
        .unwrap();
    let conversation = rig.conversations.get(&AgentId::new("exec-w")).unwrap();
    assert_eq!(conversation.turns.len(), 1);
    assert!(!conversation.turns[0].answer.contains("hurry"), "{}", conversation.turns[0].answer);
    assert_eq!(conversation.turns[0].decision, "next_action");
    assert!(conversation.turns[0].answer.contains("wrote it"));
}

#[tokio::test(start_paused = true)]
async fn judge_reads_the_results_and_the_global_board() {
    let rig =
        rig(MockProvider::queue([json(json!({"complete": false, "summary": "count failed"}))]));
    let agent = Agent::new("top-a", AgentLayer::Top);
    let task = Task { id: "t1".into(), goal: "greet".into(), steps: work().steps };
    let results = [
        SubtaskResult {
            task_id: "t1".into(),
            step_id: "write".into(),
            agent: AgentId::new("exec-w"),
            success: true,
            output: "wrote a.txt".into(),
            result: None,
        },
        SubtaskResult {
            task_id: "t1".into(),
            step_id: "count".into(),
            agent: AgentId::new("exec-s"),
            success: false,
            output: "wc: no such file".into(),
            result: None,
        },
    ];
    let judgement = rig
        .reasoner
        .judge_progress(agent.persona(), &task, &results, "## Task t1\nall hands on deck")
        .await
        .unwrap();
    assert_eq!(judgement, Judgement { complete: false, summary: "count failed".into() });
    let request = rig.provider.last();
    assert_structured(&request, &agent, "judge");
    let question = &last_message(&request).content;
    assert!(question.contains("count by exec-s: failed"), "{question}");
    assert!(question.contains("all hands on deck"), "{question}");
}

// ---------------------------------------------------------------------------------------------
// One repair attempt
// ---------------------------------------------------------------------------------------------

/// Runs `ask` against a provider answering `first` then `second`, and returns the result and
/// the two requests.
async fn twice<T>(
    first: crate::mock::Answer,
    second: crate::mock::Answer,
    ask: impl AsyncFnOnce(&LlmReasoner, Persona<'_>) -> Result<T, ReasonError>,
    layer: AgentLayer,
) -> (Result<T, ReasonError>, Vec<ChatRequest>) {
    let rig = rig(MockProvider::queue([first, second]));
    let agent = Agent::new("agent-1", layer);
    let result = ask(&rig.reasoner, agent.persona()).await;
    (result, rig.provider.requests())
}

/// The repair request repeats the first one and adds the bad answer and a user message quoting
/// `problem`.
fn assert_json_repair(requests: &[ChatRequest], bad: &str, problem: &str) {
    assert_eq!(requests.len(), 2, "exactly one repair attempt");
    let (first, second) = (&requests[0], &requests[1]);
    assert_eq!(second.system, first.system);
    assert_eq!(second.response, first.response, "the same schema is asked for");
    assert_eq!(second.messages[..first.messages.len()], first.messages[..]);
    assert_eq!(second.messages.len(), first.messages.len() + 2);
    let echoed = &second.messages[first.messages.len()];
    assert_eq!((echoed.role, echoed.content.as_str()), (Role::Assistant, bad));
    let repair = last_message(second);
    assert_eq!(repair.role, Role::User);
    assert!(repair.content.contains(problem), "{:?} should quote {problem:?}", repair.content);
}

#[tokio::test(start_paused = true)]
async fn an_answer_that_is_not_json_gets_one_repair_quoting_the_problem() {
    let (result, requests) = twice(
        text("I would sign this.", 10, 5),
        json(json!({"verdict": "sign", "reason": "ok"})),
        async |r, who| r.review_decision(who, &plan_decision(1)).await,
        AgentLayer::Top,
    )
    .await;
    assert_eq!(result.unwrap(), Verdict::Sign);
    assert_json_repair(&requests, "I would sign this.", "the answer is not JSON");
}

#[tokio::test(start_paused = true)]
async fn an_answer_invalid_twice_is_a_backend_error_naming_provider_model_and_problem() {
    let rig = rig(MockProvider::queue([
        json(json!({"verdict": "maybe", "reason": "?"})),
        json(json!({"verdict": "perhaps", "reason": "?"})),
        json(json!({"verdict": "sign", "reason": "never asked"})),
    ]));
    let agent = Agent::new("top-a", AgentLayer::Top);
    let err = rig.reasoner.review_decision(agent.persona(), &plan_decision(1)).await.unwrap_err();
    let ReasonError::Backend { reasoner, message } = &err else { panic!("{err:?}") };
    assert_eq!(reasoner, "mock:mock-model");
    assert!(message.contains("mock model `mock-model`"), "{message}");
    assert!(message.contains("review"), "{message}");
    assert!(message.contains("perhaps"), "the second problem is quoted: {message}");
    assert_eq!(rig.provider.calls(), 2, "no third attempt");
    assert!(
        rig.conversations.get(&AgentId::new("top-a")).unwrap().turns.is_empty(),
        "an invalid answer is not remembered"
    );
    // Both attempts were made and counted.
    assert_eq!(rig.ledger.report().total.calls, 2);
}

#[tokio::test(start_paused = true)]
async fn a_veto_without_a_reason_is_repaired() {
    let (result, requests) = twice(
        json(json!({"verdict": "veto", "reason": "   "})),
        json(json!({"verdict": "veto", "reason": "step s1 writes outside the workspace"})),
        async |r, who| r.review_decision(who, &plan_decision(1)).await,
        AgentLayer::Top,
    )
    .await;
    assert_eq!(
        result.unwrap(),
        Verdict::Veto { reason: "step s1 writes outside the workspace".into() }
    );
    assert_json_repair(
        &requests,
        &json!({"verdict": "veto", "reason": "   "}).to_string(),
        "a veto needs a reason",
    );
}

#[tokio::test(start_paused = true)]
async fn a_vote_for_an_option_not_on_the_ballot_is_repaired() {
    let bad = json!({"choice": "abstain", "reason": "neither"});
    let (result, requests) = twice(
        json(bad.clone()),
        json(json!({"choice": "merge", "reason": "simpler"})),
        async |r, who| r.vote(who, &conflict(&["merge", "split"])).await,
        AgentLayer::Top,
    )
    .await;
    assert_eq!(result.unwrap(), "merge");
    assert_json_repair(&requests, &bad.to_string(), "\"abstain\"");
    assert!(last_message(&requests[1]).content.contains("`choice`"));
}

#[tokio::test(start_paused = true)]
async fn a_decomposition_missing_a_step_is_repaired() {
    let bad = json!({"placements": {"write": "exec-w"}});
    let good = json!({"placements": {"write": "exec-w", "count": "exec-s"}});
    let (result, requests) = twice(
        json(bad.clone()),
        json(good),
        async |r, who| r.decompose(who, &work(), &team()).await,
        AgentLayer::Mid,
    )
    .await;
    assert_eq!(result.unwrap().len(), 2);
    assert_json_repair(&requests, &bad.to_string(), "`placements.count`");
}

#[tokio::test(start_paused = true)]
async fn a_decomposition_using_an_executor_without_the_tool_is_repaired() {
    let bad = json!({"placements": {"write": "exec-s", "count": "exec-s"}});
    let good = json!({"placements": {"write": "exec-w", "count": "exec-s"}});
    let (result, requests) = twice(
        json(bad.clone()),
        json(good),
        async |r, who| r.decompose(who, &work(), &team()).await,
        AgentLayer::Mid,
    )
    .await;
    let placements = result.unwrap();
    assert_eq!(placements[0].assignee.as_str(), "exec-w");
    assert_json_repair(&requests, &bad.to_string(), "`placements.write`");
}

#[tokio::test(start_paused = true)]
async fn a_decomposition_using_an_unavailable_executor_is_repaired() {
    let bad = json!({"placements": {"write": "exec-gone", "count": "exec-s"}});
    let good = json!({"placements": {"write": "exec-w", "count": "exec-s"}});
    let (result, requests) = twice(
        json(bad.clone()),
        json(good),
        async |r, who| r.decompose(who, &work(), &team()).await,
        AgentLayer::Mid,
    )
    .await;
    assert_eq!(result.unwrap()[0].assignee.as_str(), "exec-w");
    assert_json_repair(&requests, &bad.to_string(), "\"exec-gone\"");
}

#[tokio::test(start_paused = true)]
async fn a_placement_of_a_step_not_in_the_package_is_repaired() {
    let bad = json!({"placements": {"write": "exec-w", "count": "exec-s", "deploy": "exec-s"}});
    let good = json!({"placements": {"write": "exec-w", "count": "exec-s"}});
    let (result, requests) = twice(
        json(bad.clone()),
        json(good),
        async |r, who| r.decompose(who, &work(), &team()).await,
        AgentLayer::Mid,
    )
    .await;
    assert_eq!(result.unwrap().len(), 2);
    assert_json_repair(&requests, &bad.to_string(), "`placements.deploy`");
}

/// The repair of a tool call answers the bad call with a tool result quoting `problem`.
fn assert_tool_repair(requests: &[ChatRequest], bad_id: &str, bad_tool: &str, problem: &str) {
    assert_eq!(requests.len(), 2, "exactly one repair attempt");
    let (first, second) = (&requests[0], &requests[1]);
    assert_eq!(second.tools, first.tools);
    assert!(second.require_tool);
    assert_eq!(second.messages[..first.messages.len()], first.messages[..]);
    assert_eq!(second.messages.len(), first.messages.len() + 2);
    let echoed = &second.messages[first.messages.len()];
    assert_eq!(echoed.role, Role::Assistant);
    assert_eq!(echoed.tool_calls.len(), 1);
    assert_eq!(
        (echoed.tool_calls[0].id.as_str(), echoed.tool_calls[0].name.as_str()),
        (bad_id, bad_tool)
    );
    let result = last_message(second);
    assert_eq!(result.role, Role::Tool);
    assert_eq!(result.tool_call_id.as_deref(), Some(bad_id), "the result answers the bad call");
    assert!(result.content.contains(problem), "{:?} should quote {problem:?}", result.content);
}

#[tokio::test(start_paused = true)]
async fn malformed_tool_arguments_are_repaired() {
    let (result, requests) = twice(
        tool_call("bad-1", "write_file", r#"{"path": "a.txt", "content": "hi""#),
        tool_call("good-1", "write_file", r#"{"path": "a.txt", "content": "hi"}"#),
        async |r, who| r.next_action(who, &subtask(), &[]).await,
        AgentLayer::Bottom,
    )
    .await;
    assert!(
        matches!(result.unwrap(), NextAction::Call(ToolCall { ref tool, .. }) if tool == "write_file")
    );
    assert_tool_repair(
        &requests,
        "bad-1",
        "write_file",
        "the arguments of `write_file` are not JSON",
    );
}

#[tokio::test(start_paused = true)]
async fn tool_arguments_against_the_schema_are_repaired() {
    let (result, requests) = twice(
        tool_call("bad-1", "write_file", r#"{"path": 3}"#),
        tool_call("good-1", FINISH_TOOL, &finish(false, "cannot write")),
        async |r, who| r.next_action(who, &subtask(), &[]).await,
        AgentLayer::Bottom,
    )
    .await;
    assert_eq!(
        result.unwrap(),
        NextAction::Finish { success: false, summary: "cannot write".into() }
    );
    assert_tool_repair(
        &requests,
        "bad-1",
        "write_file",
        "the arguments of `write_file` are invalid",
    );
    assert!(last_message(&requests[1]).content.contains("`path`"));
}

#[tokio::test(start_paused = true)]
async fn a_tool_that_was_not_offered_is_repaired() {
    let (result, requests) = twice(
        tool_call("bad-1", "shell", r#"{"command": "rm -rf /"}"#),
        tool_call("good-1", "write_file", r#"{"path": "a.txt", "content": "hi"}"#),
        async |r, who| r.next_action(who, &subtask(), &[]).await,
        AgentLayer::Bottom,
    )
    .await;
    assert!(matches!(result.unwrap(), NextAction::Call(_)));
    assert_tool_repair(&requests, "bad-1", "shell", "`shell` is not one of the offered tools");
}

#[tokio::test(start_paused = true)]
async fn an_answer_without_a_tool_call_is_repaired_with_a_user_message() {
    let (result, requests) = twice(
        text("I think I am done.", 10, 5),
        tool_call("f", FINISH_TOOL, &finish(true, "done")),
        async |r, who| r.next_action(who, &subtask(), &[]).await,
        AgentLayer::Bottom,
    )
    .await;
    assert_eq!(result.unwrap(), NextAction::Finish { success: true, summary: "done".into() });
    let repair = last_message(&requests[1]);
    assert_eq!(repair.role, Role::User);
    assert!(repair.content.contains("no tool was called"), "{}", repair.content);
    assert_eq!(requests[1].messages[requests[0].messages.len()].content, "I think I am done.");
}

#[tokio::test(start_paused = true)]
async fn a_tool_loop_without_any_tool_call_twice_is_a_backend_error() {
    let (result, requests) = twice(
        text("I am thinking.", 10, 5),
        text("Still thinking.", 10, 5),
        async |r, who| r.next_action(who, &subtask(), &[]).await,
        AgentLayer::Bottom,
    )
    .await;
    let err = result.unwrap_err();
    let ReasonError::Backend { message, .. } = &err else { panic!("{err:?}") };
    assert!(message.contains("next_action"), "{message}");
    assert!(message.contains("no tool was called"), "{message}");
    assert_eq!(requests.len(), 2);
}

/// The argument schema of the built-in `write_file`.
fn write_schema() -> serde_json::Value {
    ToolRegistry::with_builtins().get("write_file").unwrap().schema().clone()
}

/// Issue #12 item 6: a model that gets a call's arguments wrong twice does not fail its agent;
/// the call goes to the runtime, whose tool registry refuses it as a tool error the model reads.
#[tokio::test(start_paused = true)]
async fn tool_arguments_invalid_twice_are_passed_on_as_the_call_not_an_error() {
    let (result, requests) = twice(
        tool_call("bad-1", "write_file", r#"{"path": "a.txt", "content": "hi""#),
        tool_call("bad-2", "write_file", r#"{"path": 3}"#),
        async |r, who| r.next_action(who, &subtask(), &[]).await,
        AgentLayer::Bottom,
    )
    .await;
    assert_eq!(
        result.unwrap(),
        NextAction::Call(ToolCall { tool: "write_file".into(), args: json!({"path": 3}) }),
        "the repaired call, with its arguments as the model wrote them"
    );
    assert_eq!(requests.len(), 2, "no third attempt");
    // The registry's schema refuses those arguments: a tool error, not a crash.
    assert!(!validate(&write_schema(), &json!({"path": 3})).is_empty());

    // Arguments that are not JSON at all are passed on as text under `$unparsed`.
    let raw = r#"{"path": "a.txt", "content": "#;
    let (result, _) = twice(
        tool_call("bad-1", "write_file", raw),
        tool_call("bad-2", "write_file", raw),
        async |r, who| r.next_action(who, &subtask(), &[]).await,
        AgentLayer::Bottom,
    )
    .await;
    assert_eq!(
        result.unwrap(),
        NextAction::Call(ToolCall { tool: "write_file".into(), args: json!({ "$unparsed": raw }) })
    );
    assert!(!validate(&write_schema(), &json!({ "$unparsed": raw })).is_empty());

    // The first attempt's call counts when the repair calls no tool.
    let (result, _) = twice(
        tool_call("bad-1", "write_file", r#"{"path": 3}"#),
        text("I give up.", 10, 5),
        async |r, who| r.next_action(who, &subtask(), &[]).await,
        AgentLayer::Bottom,
    )
    .await;
    assert_eq!(
        result.unwrap(),
        NextAction::Call(ToolCall { tool: "write_file".into(), args: json!({"path": 3}) })
    );
}

#[tokio::test(start_paused = true)]
async fn a_tool_not_offered_twice_is_passed_on_for_the_runtime_to_refuse() {
    let (result, requests) = twice(
        tool_call("a", "shell", "{}"),
        tool_call("b", "list_dir", "{}"),
        async |r, who| r.next_action(who, &subtask(), &[]).await,
        AgentLayer::Bottom,
    )
    .await;
    assert_eq!(
        result.unwrap(),
        NextAction::Call(ToolCall { tool: "list_dir".into(), args: json!({}) })
    );
    assert_eq!(requests.len(), 2);
}

#[tokio::test(start_paused = true)]
async fn a_finish_with_invalid_arguments_twice_finishes_with_what_they_say() {
    let (result, _) = twice(
        tool_call("a", FINISH_TOOL, r#"{"success": "yes"}"#),
        tool_call("b", FINISH_TOOL, r#"{"success": true}"#),
        async |r, who| r.next_action(who, &subtask(), &[]).await,
        AgentLayer::Bottom,
    )
    .await;
    let NextAction::Finish { success, summary } = result.unwrap() else { panic!("not a finish") };
    assert!(success, "it says true");
    assert!(summary.contains("invalid arguments") && summary.contains("`summary`"), "{summary}");

    let (result, _) = twice(
        tool_call("a", FINISH_TOOL, "done"),
        tool_call("b", FINISH_TOOL, r#"{"success": "yes", "summary": "wrote it"}"#),
        async |r, who| r.next_action(who, &subtask(), &[]).await,
        AgentLayer::Bottom,
    )
    .await;
    assert_eq!(
        result.unwrap(),
        NextAction::Finish { success: false, summary: "wrote it".into() },
        "success only when the arguments say `true`"
    );
}

// ---------------------------------------------------------------------------------------------
// Conversations
// ---------------------------------------------------------------------------------------------

/// Answers every vote with the first option and every review with a signature.
fn agreeable() -> MockProvider {
    MockProvider::from_fn(|request| match decision(request) {
        Some("vote") => {
            let first = schema(request)["properties"]["choice"]["enum"][0].clone();
            json(json!({"choice": first, "reason": "first"}))
        }
        Some("review") => json(json!({"verdict": "sign", "reason": "fine"})),
        other => panic!("unexpected question {other:?}"),
    })
}

#[tokio::test(start_paused = true)]
async fn agents_sharing_a_reasoner_see_only_their_own_turns() {
    let rig = rig(agreeable());
    let a = Agent::new("top-a", AgentLayer::Top);
    let b = Agent::new("top-b", AgentLayer::Top);
    rig.reasoner.vote(a.persona(), &conflict(&["alpha-option", "x"])).await.unwrap();
    rig.reasoner.vote(b.persona(), &conflict(&["beta-option", "y"])).await.unwrap();
    rig.reasoner.review_decision(a.persona(), &plan_decision(3)).await.unwrap();
    rig.reasoner.review_decision(b.persona(), &plan_decision(4)).await.unwrap();

    let requests = rig.provider.requests();
    assert_eq!(requests.len(), 4);
    // a's second question carries a's first turn only.
    let a2 = &requests[2];
    assert!(a2.system.starts_with(&a.prompt));
    assert_eq!(a2.messages.len(), 3);
    assert!(a2.messages[0].content.contains("alpha-option"));
    assert_eq!(a2.messages[1].role, Role::Assistant);
    assert!(a2.messages[1].content.contains("alpha-option"), "the accepted answer");
    let everything = serde_json::to_string(a2).unwrap();
    assert!(!everything.contains("beta-option"), "b's turn leaked into a's request");
    // And b's carries b's only.
    let b2 = &requests[3];
    assert!(b2.system.starts_with(&b.prompt));
    assert_eq!(b2.messages.len(), 3);
    assert!(b2.messages[0].content.contains("beta-option"));
    assert!(!serde_json::to_string(b2).unwrap().contains("alpha-option"));

    for (agent, decisions) in [("top-a", ["vote", "review"]), ("top-b", ["vote", "review"])] {
        let turns = rig.conversations.get(&AgentId::new(agent)).unwrap().turns;
        let got: Vec<&str> = turns.iter().map(|t| t.decision.as_str()).collect();
        assert_eq!(got, decisions);
    }
}

#[tokio::test(start_paused = true)]
async fn a_bounded_conversation_drops_the_oldest_turns_and_says_so() {
    let conversations =
        Arc::new(Conversations::in_memory(ConversationLimits { max_turns: 2, max_chars: 100_000 }));
    let ledger = Arc::new(UsageLedger::new(PriceTable::new(), Budget::default()));
    let rig = rig_full(agreeable(), ledger, conversations);
    let a = Agent::new("top-a", AgentLayer::Top);
    for n in 0..5 {
        let options = [format!("option-{n}"), "other".into()];
        let options: Vec<&str> = options.iter().map(String::as_str).collect();
        rig.reasoner.vote(a.persona(), &conflict(&options)).await.unwrap();
    }
    let requests = rig.provider.requests();
    // The third question sees two turns and no drop yet.
    assert_eq!(user_texts(&requests[2]).len(), 3);
    assert!(!requests[2].system.contains("dropped"), "{}", requests[2].system);
    // The fifth sees turns 2 and 3; turns 0 and 1 were dropped.
    let last = &requests[4];
    let users = user_texts(last);
    assert_eq!(users.len(), 3);
    assert!(users[0].contains("option-2") && users[1].contains("option-3"), "{users:?}");
    assert!(users[2].contains("option-4"));
    assert!(last.system.contains("2 earlier turns were dropped"), "{}", last.system);
    let kept = rig.conversations.get(&AgentId::new("top-a")).unwrap();
    assert_eq!((kept.turns.len(), kept.dropped), (2, 3));
}

#[tokio::test(start_paused = true)]
async fn conversations_are_stored_with_the_run_and_read_back_after_reopening() {
    let root = tempfile::tempdir().unwrap();
    let dir = root.path().join("run");
    let limits = ConversationLimits { max_turns: 2, max_chars: 100_000 };
    {
        let store = RunStore::create(&dir, "run-1", Timestamp(0), Durability::Synced).unwrap();
        let llm: Arc<dyn LlmStore> = Arc::new(SledLlmStore::open(&store).unwrap());
        let conversations = Arc::new(Conversations::stored(limits, llm.clone()));
        let ledger =
            Arc::new(UsageLedger::stored(PriceTable::new(), Budget::default(), llm).unwrap());
        let rig = rig_full(agreeable(), ledger, conversations);
        let a = Agent::new("top-a", AgentLayer::Top);
        let b = Agent::new("top-b", AgentLayer::Top);
        for n in 0..3 {
            let options = [format!("a-{n}"), "other".into()];
            let options: Vec<&str> = options.iter().map(String::as_str).collect();
            rig.reasoner.vote(a.persona(), &conflict(&options)).await.unwrap();
        }
        rig.reasoner.review_decision(b.persona(), &plan_decision(9)).await.unwrap();
        store.commit().await.unwrap();
    }
    let store = RunStore::open(&dir, Durability::Synced).unwrap();
    let sled = Arc::new(SledLlmStore::open(&store).unwrap());
    let stored = sled.conversations().unwrap();
    let ids: Vec<&str> = stored.iter().map(|(id, _)| id.as_str()).collect();
    assert_eq!(ids, ["top-a", "top-b"]);
    assert_eq!((stored[0].1.turns.len(), stored[0].1.dropped), (2, 1));
    assert!(stored[0].1.turns[0].prompt.contains("a-1"));
    assert_eq!(stored[1].1.turns[0].decision, "review");

    // A resumed run's reasoner continues the stored conversation.
    let llm: Arc<dyn LlmStore> = sled;
    let conversations = Arc::new(Conversations::stored(limits, llm));
    let ledger = Arc::new(UsageLedger::new(PriceTable::new(), Budget::default()));
    let rig = rig_full(agreeable(), ledger, conversations);
    let a = Agent::new("top-a", AgentLayer::Top);
    rig.reasoner.vote(a.persona(), &conflict(&["a-3", "other"])).await.unwrap();
    let request = rig.provider.last();
    let users = user_texts(&request);
    assert_eq!(users.len(), 3);
    assert!(users[0].contains("a-1") && users[1].contains("a-2"), "{users:?}");
    assert!(request.system.contains("1 earlier turns were dropped"), "{}", request.system);
}

// ---------------------------------------------------------------------------------------------
// Provider failures
// ---------------------------------------------------------------------------------------------

#[tokio::test(start_paused = true)]
async fn a_permanent_provider_failure_is_a_backend_error_and_is_not_retried() {
    let rig = rig(MockProvider::queue([failure(ProviderErrorKind::Unauthorized, "401 bad key")]));
    let agent = Agent::new("top-a", AgentLayer::Top);
    let err = rig.reasoner.vote(agent.persona(), &conflict(&["a", "b"])).await.unwrap_err();
    let ReasonError::Backend { message, .. } = &err else { panic!("{err:?}") };
    assert!(message.contains("unauthorized") && message.contains("401 bad key"), "{message}");
    assert_eq!(rig.provider.calls(), 1);
}

#[tokio::test(start_paused = true)]
async fn a_transient_failure_is_retried_with_the_agents_backoff() {
    let rig = rig(MockProvider::queue([
        failure(ProviderErrorKind::Server, "503"),
        json(json!({"choice": "b", "reason": "ok"})),
    ]));
    let agent = Agent::new("top-a", AgentLayer::Top);
    let start = tokio::time::Instant::now();
    let choice = rig.reasoner.vote(agent.persona(), &conflict(&["a", "b"])).await.unwrap();
    assert_eq!(choice, "b");
    assert_eq!(rig.provider.calls(), 2);
    assert_eq!(start.elapsed(), std::time::Duration::from_secs(1), "the agent's 1 s first backoff");
    let requests = rig.provider.requests();
    assert_eq!(requests[0], requests[1], "a retry repeats the request");
}

// ---------------------------------------------------------------------------------------------
// Goal-driven teams (issue #12): plan, answer, the tools an agent holds, goal steps
// ---------------------------------------------------------------------------------------------

/// Two lead roles and two worker roles.
fn roles() -> RoleBook {
    use agent_state::Role;
    let lead = |name: &str, description: &str, workers: &[&str]| Role {
        description: description.into(),
        enabled_agents: workers.iter().map(|w| (*w).to_owned()).collect(),
        ..Role::new(name, AgentLayer::Mid)
    };
    let worker = |name: &str, description: &str, tools: &[&str]| Role {
        description: description.into(),
        tools: tools.iter().map(|t| (*t).to_owned()).collect(),
        ..Role::new(name, AgentLayer::Bottom)
    };
    RoleBook::new([
        lead("docs_lead", "Leads the documentation work.", &["writer"]),
        lead("code_lead", "Leads the code work.", &["writer", "tester"]),
        worker("writer", "Writes and edits files.", &["read_file", "write_file"]),
        worker("tester", "Runs the tests.", &["shell"]),
    ])
    .unwrap()
}

fn goal_task() -> Task {
    Task { id: "t9".into(), goal: "Document the project and test it".into(), steps: Vec::new() }
}

fn good_plan() -> serde_json::Value {
    json!({
        "leads": [
            {"role": "docs_lead", "domain": "docs"},
            {"role": "code_lead", "domain": "code"}
        ],
        "steps": [
            {"id": "readme", "description": "Write README.md", "domain": "docs", "role": "writer",
             "after": [], "acceptance": "README.md says what the project does"},
            {"id": "test", "description": "Run the test suite", "domain": "code", "role": "tester",
             "after": ["readme"], "acceptance": "every test passes"},
            {"id": "notes", "description": "Write release notes", "domain": "docs",
             "after": ["readme", "test"], "acceptance": ""}
        ]
    })
}

#[tokio::test(start_paused = true)]
async fn plan_turns_a_goal_into_goal_steps_and_leads_from_the_role_book() {
    let rig = rig(MockProvider::queue([json(good_plan())]));
    let agent = Agent::new("top-a", AgentLayer::Top);
    assert!(rig.reasoner.plans());
    let plan = rig.reasoner.plan(agent.persona(), &goal_task(), &roles()).await.unwrap();

    assert_eq!(
        plan.leads,
        [
            LeadRequest { role: "docs_lead".into(), domain: "docs".into() },
            LeadRequest { role: "code_lead".into(), domain: "code".into() }
        ]
    );
    let ids: Vec<&str> = plan.steps.iter().map(|s| s.id.as_str()).collect();
    assert_eq!(ids, ["readme", "test", "notes"]);
    assert_eq!(
        plan.steps[1],
        PlanStep::goal("test", "Run the test suite", StepTarget::Domain("code".into()))
            .with_after(["readme"])
            .with_role("tester")
            .with_acceptance("every test passes")
    );
    assert!(plan.steps.iter().all(|s| !s.is_scripted()), "goal steps: no tool");
    assert_eq!(plan.steps[2].role, None);

    let request = rig.provider.last();
    assert!(request.system.starts_with(&agent.prompt));
    assert!(request.tools.is_empty());
    assert_eq!(json_format(&request).0, "plan");
    assert_eq!(request.max_tokens, 2_048, "a plan may be longer than other decisions");
    let s = schema(&request);
    assert_eq!(s["required"], json!(["leads", "steps"]));
    assert_eq!(
        s["properties"]["leads"]["items"]["properties"]["role"]["enum"],
        json!(["code_lead", "docs_lead"])
    );
    let step = &s["properties"]["steps"]["items"];
    assert_eq!(step["properties"]["role"]["enum"], json!(["tester", "writer", null]));
    assert_eq!(step["required"], json!(["id", "description", "domain", "after", "acceptance"]));
    let question = &last_message(&request).content;
    for needle in [
        "Document the project and test it",
        "- docs_lead: Leads the documentation work.",
        "- writer: Writes and edits files. (tools: read_file, write_file)",
        "- tester: Runs the tests. (tools: shell)",
        "A goal that is one piece of work is one step, such as:\n{\"leads\":",
    ] {
        assert!(question.contains(needle), "{needle:?} missing from {question}");
    }
    // The accepted plan is a turn of the top power's conversation.
    let turns = rig.conversations.get(&AgentId::new("top-a")).unwrap().turns;
    assert_eq!(turns.len(), 1);
    assert_eq!(turns[0].decision, "plan");
}

#[tokio::test(start_paused = true)]
async fn a_plan_with_an_unknown_lead_role_is_repaired_once_then_accepted() {
    let mut bad = good_plan();
    bad["leads"][1]["role"] = json!("tester");
    let (result, requests) = twice(
        json(bad.clone()),
        json(good_plan()),
        async |r, who| r.plan(who, &goal_task(), &roles()).await,
        AgentLayer::Top,
    )
    .await;
    assert_eq!(result.unwrap().leads.len(), 2);
    assert_json_repair(&requests, &bad.to_string(), "\"tester\"");
    assert!(last_message(&requests[1]).content.contains("`leads[1].role`"));
}

/// The audit records of `agent` that are repairs: (decision, repair, max_repairs, problems).
async fn repairs_of(log: &InMemoryAuditLog, agent: &str) -> Vec<(String, u32, u32, String)> {
    log.records(Some(&AgentId::new(agent)))
        .await
        .unwrap()
        .into_iter()
        .filter_map(|r| match r.event {
            AuditEvent::AnswerRepair { decision, repair, max_repairs, problems } => {
                Some((decision, repair, max_repairs, problems))
            }
            _ => None,
        })
        .collect()
}

/// Plans `goal_task` for `top-a` as the runtime does: in the agent's reasoning-audit scope.
async fn plan_audited(
    rig: &Rig,
    agent: &Agent,
) -> (Result<agent_core::Plan, ReasonError>, Arc<InMemoryAuditLog>) {
    let log = Arc::new(InMemoryAuditLog::new());
    let result = with_reasoning_audit(
        log.clone(),
        agent.config.id.clone(),
        Arc::new(TokioClock::new()),
        rig.reasoner.plan(agent.persona(), &goal_task(), &roles()),
    )
    .await;
    (result, log)
}

#[tokio::test(start_paused = true)]
async fn a_plan_invalid_after_three_repairs_is_an_invalid_plan_listing_its_problems_once() {
    // Four invalid plans: ids used twice and a step waiting on a later one; then three times a
    // step for a domain no lead leads, a step role that is a lead's, an id with a space, two
    // leads for one domain.
    let mut first = good_plan();
    first["steps"][0]["after"] = json!(["test"]);
    first["steps"][2]["id"] = json!("test");
    let mut last = good_plan();
    last["steps"][1]["domain"] = json!("ops");
    last["steps"][1]["role"] = json!(null);
    last["steps"][2]["id"] = json!("release notes");
    last["leads"] =
        json!([{"role": "docs_lead", "domain": "docs"}, {"role": "code_lead", "domain": "docs"}]);
    let rig = rig(MockProvider::queue([
        json(first.clone()),
        json(last.clone()),
        json(last.clone()),
        json(last.clone()),
        json(good_plan()), // never asked
    ]));
    let agent = Agent::new("top-a", AgentLayer::Top);
    let (result, log) = plan_audited(&rig, &agent).await;
    let requests = rig.provider.requests();
    assert_eq!(requests.len(), 4, "the answer and three repairs");

    // Each repair request is the question, the last answer and its problems only; an answer
    // that repeats the one before exactly (the third) is left out.
    let question = &requests[0].messages;
    for (i, repair) in requests[1..].iter().enumerate() {
        assert_eq!(repair.messages[..question.len()], question[..]);
        assert_eq!(repair.response, requests[0].response, "the same schema");
        if i < 2 {
            assert_eq!(repair.messages.len(), question.len() + 2, "repair {}", i + 1);
            let bad = if i == 0 { &first } else { &last };
            assert_eq!(repair.messages[question.len()].content, bad.to_string());
        } else {
            assert_eq!(repair.messages.len(), question.len() + 1, "repair {}", i + 1);
            let asked = &last_message(repair).content;
            assert!(asked.contains("invalid again, the same as before"), "{asked}");
            assert!(asked.contains("domain `ops`"), "{asked}");
        }
    }
    let repair = &last_message(&requests[1]).content;
    assert!(repair.contains("step `readme` waits for `test`, which comes after it"), "{repair}");
    assert!(repair.contains("step id `test` is used twice"), "{repair}");

    // The task's plan is invalid (the top power fails the task), not the call failed (which
    // the runtime would try again from scratch).
    let err = result.unwrap_err();
    let ReasonError::BadQuestion(message) = &err else { panic!("{err:?}") };
    assert!(
        message.contains("mock model `mock-model` gave no valid plan in 4 answers (3 repairs)")
    );
    for problem in [
        "domain `ops`, which none of your leads leads",
        "step id \"release notes\" is not valid",
        "two leads for domain `docs`",
    ] {
        assert_eq!(message.matches(problem).count(), 1, "{problem:?} once in {message}");
    }
    assert!(!message.contains("used twice"), "only the last answer's problems: {message}");
    assert!(rig.conversations.get(&AgentId::new("top-a")).unwrap().turns.is_empty());

    // Each repair is audited under the planning agent, with the problems it sent back.
    let audited = repairs_of(&log, "top-a").await;
    let numbers: Vec<(u32, u32)> = audited.iter().map(|(_, n, of, _)| (*n, *of)).collect();
    assert_eq!(numbers, [(1, 3), (2, 3), (3, 3)]);
    assert!(audited.iter().all(|(decision, ..)| decision == "plan"));
    assert!(audited[0].3.contains("waits for `test`"), "{}", audited[0].3);
    assert!(audited[1].3.contains("domain `ops`"), "{}", audited[1].3);
}

#[tokio::test(start_paused = true)]
async fn a_repeated_invalid_answer_is_left_out_so_the_model_does_not_copy_it_again() {
    // A model that copies the last JSON it read: the question's example, or its own answer.
    let mut copied = good_plan();
    copied["steps"][0]["after"] = json!(["readme"]);
    let first = copied.clone();
    let rig = rig(MockProvider::from_fn(move |request| {
        match request.messages.iter().rev().find(|m| m.role == Role::Assistant) {
            Some(own) => json(serde_json::from_str(&own.content).unwrap()),
            None if request.messages.len() > 1
                && last_message(request).content.contains("the same as before") =>
            {
                json(good_plan())
            }
            None => json(first.clone()),
        }
    }));
    let agent = Agent::new("top-a", AgentLayer::Top);
    let plan = rig.reasoner.plan(agent.persona(), &goal_task(), &roles()).await.unwrap();
    assert_eq!(plan.steps.len(), 3);
    let requests = rig.provider.requests();
    assert_eq!(requests.len(), 3, "the answer, a repair it copied, a repair without it");
    assert!(requests[1].messages.iter().any(|m| m.role == Role::Assistant));
    assert!(!requests[2].messages.iter().any(|m| m.role == Role::Assistant));
    let asked = &last_message(&requests[2]).content;
    assert!(asked.contains("step `readme` waits for itself"), "{asked}");
}

#[tokio::test(start_paused = true)]
async fn a_plan_repaired_on_the_last_repair_is_accepted_and_each_repair_audited() {
    let mut self_waiting = good_plan();
    self_waiting["steps"][1]["after"] = json!(["test"]);
    let rig = rig(MockProvider::queue([
        json(self_waiting.clone()),
        json(self_waiting.clone()),
        json(self_waiting),
        json(good_plan()),
    ]));
    let agent = Agent::new("top-a", AgentLayer::Top);
    let (result, log) = plan_audited(&rig, &agent).await;
    assert_eq!(result.unwrap().steps.len(), 3);
    assert_eq!(rig.provider.calls(), 4);
    let audited = repairs_of(&log, "top-a").await;
    assert_eq!(audited.len(), 3);
    assert!(audited[2].3.contains("step `test` waits for itself"), "{}", audited[2].3);
    // The valid plan, once, is the turn remembered.
    let turns = rig.conversations.get(&AgentId::new("top-a")).unwrap().turns;
    assert_eq!(turns.len(), 1);
    assert_eq!(turns[0].answer, good_plan().to_string());
}

#[tokio::test(start_paused = true)]
async fn the_repairs_a_plan_gets_are_a_setting_and_other_decisions_get_one() {
    let mut bad = good_plan();
    bad["steps"] = json!([]);
    for repairs in [0_u32, 1, 5] {
        let bad = bad.clone();
        let rig = rig(MockProvider::from_fn(move |_| json(bad.clone())));
        let reasoner =
            LlmReasoner::new(rig.provider.clone(), rig.ledger.clone(), rig.conversations.clone())
                .with_settings(LlmSettings { plan_repairs: repairs, ..LlmSettings::default() });
        let agent = Agent::new("top-a", AgentLayer::Top);
        let err = reasoner.plan(agent.persona(), &goal_task(), &roles()).await.unwrap_err();
        assert_eq!(rig.provider.calls(), repairs as usize + 1, "{repairs} repairs");
        assert!(err.to_string().contains("the plan has no steps"), "{err}");
    }
    assert_eq!(LlmSettings::default().plan_repairs, agent_llm::DEFAULT_PLAN_REPAIRS);
    assert_eq!(agent_llm::DEFAULT_PLAN_REPAIRS, 3);

    // A review still gets one repair, audited as such.
    let rig = rig(MockProvider::from_fn(|_| json(json!({"verdict": "maybe", "reason": "?"}))));
    let agent = Agent::new("top-b", AgentLayer::Top);
    let log = Arc::new(InMemoryAuditLog::new());
    let err = with_reasoning_audit(
        log.clone(),
        agent.config.id.clone(),
        Arc::new(TokioClock::new()),
        rig.reasoner.review_decision(agent.persona(), &plan_decision(1)),
    )
    .await
    .unwrap_err();
    assert!(matches!(err, ReasonError::Backend { .. }), "{err:?}");
    assert_eq!(rig.provider.calls(), 2);
    let audited = repairs_of(&log, "top-b").await;
    assert_eq!(audited.len(), 1);
    assert_eq!((audited[0].0.as_str(), audited[0].1, audited[0].2), ("review", 1, 1));
}

#[tokio::test(start_paused = true)]
async fn a_plan_repeating_itself_is_told_each_problem_once_and_at_most_eight() {
    // A small model repeats itself: the same lead twice (meant once: accepted), and a step
    // waiting on twenty steps that are not in the plan.
    let mut plan = good_plan();
    let lead = plan["leads"][0].clone();
    plan["leads"].as_array_mut().unwrap().push(lead);
    let missing: Vec<String> = (0..20).map(|i| format!("later-{}", i % 12)).collect();
    plan["steps"][0]["after"] = json!(missing);
    let rig = rig(MockProvider::from_fn(move |_| json(plan.clone())));
    let agent = Agent::new("top-a", AgentLayer::Top);
    let err = rig.reasoner.plan(agent.persona(), &goal_task(), &roles()).await.unwrap_err();
    let ReasonError::BadQuestion(message) = &err else { panic!("{err:?}") };
    assert!(!message.contains("two leads"), "{message}");
    assert_eq!(message.matches("waits for `later-0`").count(), 1, "{message}");
    assert_eq!(message.matches("which is no step of the plan").count(), 8, "{message}");
    assert!(message.contains("and 4 more problem(s)"), "{message}");
}

#[tokio::test(start_paused = true)]
async fn a_plan_without_steps_or_with_a_step_its_lead_cannot_staff_is_refused() {
    let mut no_steps = good_plan();
    no_steps["steps"] = json!([]);
    let mut lead_as_worker = good_plan();
    lead_as_worker["steps"][0]["role"] = json!("docs_lead");
    // `docs_lead` can spawn writers only.
    let mut unstaffed = good_plan();
    unstaffed["steps"][0]["role"] = json!("tester");
    let rig = rig(MockProvider::queue([
        json(no_steps),
        json(lead_as_worker),
        json(unstaffed.clone()),
        json(unstaffed),
    ]));
    let agent = Agent::new("top-a", AgentLayer::Top);
    let err = rig.reasoner.plan(agent.persona(), &goal_task(), &roles()).await.unwrap_err();
    let requests = rig.provider.requests();
    let repair = |i: usize| last_message(&requests[i]).content.clone();
    assert!(repair(1).contains("the plan has no steps"), "{}", repair(1));
    assert!(repair(2).contains("`steps[0].role`"), "the schema's worker roles: {}", repair(2));
    let message = err.to_string();
    assert!(
        message.contains(
            "step `readme` names role `tester`, which its lead (docs_lead, domain `docs`) \
             cannot spawn; use one of: writer"
        ),
        "{message}"
    );
}

#[tokio::test(start_paused = true)]
async fn a_plan_copying_its_example_is_valid_and_asks_for_the_whole_goal() {
    // The worked example is the goal as one step: a model that can only copy plans that.
    let rig = rig(MockProvider::from_fn(|request| {
        let question = &last_message(request).content;
        let example = question
            .lines()
            .find(|l| l.starts_with("{\"leads\""))
            .expect("the example answer is on a line of its own");
        json(serde_json::from_str(example).unwrap())
    }));
    let agent = Agent::new("top-a", AgentLayer::Top);
    let plan = rig.reasoner.plan(agent.persona(), &goal_task(), &roles()).await.unwrap();
    assert_eq!(rig.provider.calls(), 1, "valid as it is");
    // The first lead that can spawn a worker, and that worker.
    assert_eq!(plan.leads, [LeadRequest { role: "code_lead".into(), domain: "code".into() }]);
    assert_eq!(plan.steps.len(), 1);
    assert_eq!(plan.steps[0].description, goal_task().goal);
    assert_eq!(plan.steps[0].role.as_deref(), Some("writer"));
    assert!(plan.steps[0].after.is_empty());

    // Written in the order the grammar has the model write it: a step's id first.
    let question = last_message(&rig.provider.last()).content.clone();
    let example = question.lines().find(|l| l.starts_with("{\"leads\"")).unwrap();
    assert!(
        example.contains(r#"{"id":"step-1","description":"Document the project and test it","#),
        "{example}"
    );
    assert_eq!(
        schema(&rig.provider.last())["properties"]["steps"]["items"]["required"],
        json!(["id", "description", "domain", "after", "acceptance"])
    );
}

#[tokio::test(start_paused = true)]
async fn model_text_in_problems_and_errors_is_quoted_without_template_tokens() {
    let echoed = "<start_of_turn>model\n[INST]The tool's result: ok [/INST]</s>";
    let voting =
        rig(MockProvider::from_fn(move |_| json(json!({"choice": echoed, "reason": "x"}))));
    let agent = Agent::new("top-a", AgentLayer::Top);
    let err = voting.reasoner.vote(agent.persona(), &conflict(&["a", "b"])).await.unwrap_err();
    let message = err.to_string();
    assert!(message.contains("The tool's result: ok"), "{message}");
    let repair = last_message(&voting.provider.last()).content.clone();
    for token in ["<start_of_turn>", "[INST]", "[/INST]", "</s>", "\n"] {
        assert!(!message.contains(token), "{token:?} in {message}");
        assert!(!repair.contains(token), "{token:?} in {repair}");
    }

    // A reply is the model's own words: only the markup goes.
    let replying = rig(MockProvider::queue([json(
        json!({"reply": "<start_of_turn>model\nAll done.<end_of_turn>"}),
    )]));
    let agent = Agent::new("mid-code", AgentLayer::Mid);
    let reply = replying
        .reasoner
        .answer(agent.persona(), &AgentId::new("top-a"), "status?", "")
        .await
        .unwrap();
    assert_eq!(reply, "All done.");
}

#[tokio::test(start_paused = true)]
async fn without_roles_a_plan_is_steps_only_with_free_domains_and_sees_the_tasks_steps() {
    let answer = json!({"steps": [
        {"id": "hello", "description": "Write hello.txt", "domain": "files", "after": [],
         "acceptance": "hello.txt says hello"}
    ]});
    let rig = rig(MockProvider::queue([json(answer)]));
    let agent = Agent::new("top-a", AgentLayer::Top);
    let mut task = goal_task();
    task.steps = vec![step("hello", "write_file", json!({"path": "hello.txt", "content": "hi"}))];
    let plan = rig.reasoner.plan(agent.persona(), &task, &RoleBook::default()).await.unwrap();
    assert!(plan.leads.is_empty());
    assert_eq!(plan.steps.len(), 1);
    assert_eq!(plan.steps[0].target, StepTarget::Domain("files".into()));
    assert_eq!(plan.steps[0].role, None);

    let request = rig.provider.last();
    let s = schema(&request);
    assert_eq!(s["required"], json!(["steps"]));
    assert!(s["properties"].get("leads").is_none(), "{s}");
    assert!(s["properties"]["steps"]["items"]["properties"].get("role").is_none(), "{s}");
    let question = &last_message(&request).content;
    assert!(question.contains("- hello: do hello (tool `write_file`)"), "{question}");
    assert!(!question.contains("Leads you may create"), "{question}");
}

/// A power whose team has fixed leads (`[[mid]]`, no lead roles) is told their domains, its
/// schema allows only those, and a step for another domain is repaired naming them.
#[tokio::test(start_paused = true)]
async fn a_team_with_fixed_leads_plans_steps_for_their_domains_only() {
    let step = |domain: &str| {
        json!({"steps": [{"id": "fix", "description": "Fix the failing test", "domain": domain,
                          "after": [], "acceptance": "the tests pass"}]})
    };
    let rig = rig(MockProvider::queue([json(step("work")), json(step("build"))]));
    let agent = Agent::new("top-a", AgentLayer::Top);
    let domains = ["docs".to_owned(), "build".to_owned()];
    let who = Persona { domains: &domains, ..agent.persona() };
    let plan = rig.reasoner.plan(who, &goal_task(), &RoleBook::default()).await.unwrap();
    assert_eq!(plan.steps[0].target, StepTarget::Domain("build".into()));
    assert!(plan.leads.is_empty());

    let requests = rig.provider.requests();
    let first = &requests[0];
    let s = schema(first);
    assert_eq!(s["properties"]["steps"]["items"]["properties"]["domain"]["enum"], json!(domains));
    let question = &last_message(first).content;
    assert!(
        question.contains("a lead for each of these domains already; a step for one of them goes to its lead: `docs`, `build`."),
        "{question}"
    );
    assert!(question.contains("\"domain\":\"docs\""), "the example uses a team domain: {question}");
    let repair = &last_message(&requests[1]).content;
    assert!(
        repair.contains("`steps[0].domain`: expected one of \"docs\", \"build\", found \"work\""),
        "{repair}"
    );
}

/// With lead roles and fixed leads both, a plan may give steps to a fixed lead's domain and
/// need propose no lead; proposing a second lead for a fixed lead's domain is repaired.
#[tokio::test(start_paused = true)]
async fn a_plan_may_use_the_fixed_leads_beside_the_leads_it_proposes() {
    let plan = |leads: serde_json::Value| {
        json!({"leads": leads, "steps": [
            {"id": "a", "description": "Write the docs", "domain": "ops", "after": [],
             "acceptance": "docs written"}
        ]})
    };
    let twice_led = plan(json!([{"role": "docs_lead", "domain": "ops"}]));
    let rig = rig(MockProvider::queue([json(twice_led), json(plan(json!([])))]));
    let agent = Agent::new("top-a", AgentLayer::Top);
    let domains = ["ops".to_owned()];
    let who = Persona { domains: &domains, ..agent.persona() };
    let planned = rig.reasoner.plan(who, &goal_task(), &roles()).await.unwrap();
    assert!(planned.leads.is_empty());
    assert_eq!(planned.steps[0].target, StepTarget::Domain("ops".into()));
    let requests = rig.provider.requests();
    assert_eq!(schema(&requests[0])["properties"]["leads"]["minItems"], json!(0));
    let repair = &last_message(&requests[1]).content;
    assert!(repair.contains("the team has a lead for domain `ops` already"), "{repair}");
}

#[tokio::test(start_paused = true)]
async fn answer_replies_in_a_few_words_knowing_the_speaker_and_the_work() {
    let rig = rig(MockProvider::queue([json(json!({"reply": "  Tests are running.  "}))]));
    let mut agent = Agent::new("mid-code", AgentLayer::Mid);
    agent.config = agent.config.clone().with_supervisor("top-a");
    let reply = rig
        .reasoner
        .answer(
            agent.persona(),
            &AgentId::new("top-a"),
            "How far along are you?",
            "step test: running cargo test",
        )
        .await
        .unwrap();
    assert_eq!(reply, "Tests are running.");
    let request = rig.provider.last();
    assert_structured(&request, &agent, "answer");
    assert_eq!(schema(&request)["required"], json!(["reply"]));
    let question = &last_message(&request).content;
    assert!(
        question.contains("Your supervisor top-a says to you: How far along are you?"),
        "{question}"
    );
    assert!(question.contains("step test: running cargo test"), "{question}");
    let turns = rig.conversations.get(&AgentId::new("mid-code")).unwrap().turns;
    assert_eq!(turns[0].decision, "answer");

    // An answer is short whatever the decisions' limit: at most 256 tokens.
    let rig = rig_with(
        MockProvider::queue([json(json!({"reply": "idle"}))]),
        UsageLedger::new(PriceTable::new(), Budget::default()),
    );
    let reasoner =
        LlmReasoner::new(rig.provider.clone(), rig.ledger.clone(), rig.conversations.clone());
    let worker = Agent::new("exec-1", AgentLayer::Bottom);
    let reply =
        reasoner.answer(worker.persona(), &AgentId::new("mid-code"), "status?", "").await.unwrap();
    assert_eq!(reply, "idle");
    let request = rig.provider.last();
    assert_eq!(request.max_tokens, 256);
    assert!(last_message(&request).content.contains("mid-code says to you: status?"));
    assert!(last_message(&request).content.contains("no work in hand"));
}

fn goal_subtask(acceptance: &str) -> Subtask {
    Subtask {
        task_id: "t9".into(),
        step: PlanStep::goal("readme", "Write README.md", StepTarget::Domain("docs".into()))
            .with_role("writer")
            .with_acceptance(acceptance),
        assignee: AgentId::new("worker-1"),
        attempt: 1,
    }
}

fn names(request: &ChatRequest) -> Vec<&str> {
    request.tools.iter().map(|t| t.name.as_str()).collect()
}

#[tokio::test(start_paused = true)]
async fn next_action_offers_the_tools_the_persona_holds_with_the_supervisor_tool_specs() {
    let result = json!({"result": {"status": "success", "summary": "wrote README.md",
        "artifacts": [{"file_path": "README.md", "description": "the readme", "change_type": "created"}],
        "known_issues": []}});
    let rig = rig(MockProvider::queue([tool_call("r1", RETURN_RESULTS, &result.to_string())]));
    let agent = Agent::new("lead-1", AgentLayer::Mid);
    let held: Vec<String> =
        ["read_file", SPAWN_AGENT, SPEAK_TO_AGENT, GET_AGENTS, DESPAWN_AGENT, RETURN_RESULTS]
            .map(String::from)
            .to_vec();
    let roles = [
        ("writer".to_owned(), "writes documents".to_owned()),
        ("tester".to_owned(), String::new()),
    ];
    let who = Persona {
        config: &agent.config,
        system_prompt: &agent.prompt,
        tools: &held,
        roles: &roles,
        domains: &[],
    };
    let action = rig.reasoner.next_action(who, &goal_subtask(""), &[]).await.unwrap();
    assert_eq!(action, NextAction::Call(ToolCall { tool: RETURN_RESULTS.into(), args: result }));
    // It is told the step's role and which roles it may spawn.
    let asked = last_message(&rig.provider.last()).content.clone();
    assert!(asked.contains("The plan gives this step to the role `writer`."), "{asked}");
    assert!(asked.contains("The roles you may spawn with `spawn_agent`:\n- writer: writes documents\n- tester: (no description)"), "{asked}");

    let request = rig.provider.last();
    let mut expected: Vec<&str> = held.iter().map(String::as_str).collect();
    expected.push(FINISH_TOOL);
    assert_eq!(names(&request), expected, "exactly the tools held, and finish");
    let registry = ToolRegistry::with_builtins();
    assert_eq!(&request.tools[0].parameters, registry.get("read_file").unwrap().schema());
    for spec in &request.tools[1..6] {
        let seed = supervisor_tool_spec(&spec.name).unwrap();
        assert_eq!(spec.parameters, seed.parameters, "{}", spec.name);
        assert_eq!(spec.description, seed.description, "{}", spec.name);
    }
    assert_eq!(request.tools[1].parameters["required"], json!(["role_name", "task_prompt"]));
    let question = &last_message(&request).content;
    assert!(question.contains(&format!("call `{RETURN_RESULTS}` with your result")), "{question}");
    // Returning the results concludes the subtask (the loop says so): one turn of the
    // conversation.
    rig.reasoner
        .concluded(who, &goal_subtask(""), &[], "returned results: {\"status\": \"success\"}")
        .await
        .unwrap();
    let turns = rig.conversations.get(&AgentId::new("lead-1")).unwrap().turns;
    assert_eq!(turns.len(), 1);
    assert!(turns[0].answer.contains("returned results"), "{}", turns[0].answer);

    // Finishing still works for an agent that holds `return_results`; bad arguments of an
    // agent tool are repaired like any other.
    let rig = rig_again_with([
        tool_call("s1", SPAWN_AGENT, r#"{"role_name": "writer"}"#),
        tool_call("f1", FINISH_TOOL, &finish(true, "done")),
    ]);
    let action = rig.reasoner.next_action(who, &goal_subtask(""), &[]).await.unwrap();
    assert_eq!(action, NextAction::Finish { success: true, summary: "done".into() });
    let repair = last_message(&rig.provider.last()).content.clone();
    assert!(repair.contains("`task_prompt`: required property is missing"), "{repair}");
}

/// A reasoner for `rig`'s model as a small one: the built-in tools, planned arguments only.
fn small_model_reasoner(rig: &Rig) -> LlmReasoner {
    LlmReasoner::new(rig.provider.clone(), rig.ledger.clone(), rig.conversations.clone())
        .with_tools(&ToolRegistry::with_builtins())
        .with_settings(LlmSettings { planned_arguments_only: true, ..LlmSettings::default() })
}

#[tokio::test(start_paused = true)]
async fn a_small_model_names_the_file_and_writes_its_content_as_text_in_a_second_call() {
    // The model names the path only (its schema has no `content`); the content comes from a
    // text call, which a chat server answers anew, here in a code block after a remark.
    let rig = rig(MockProvider::queue([
        tool_call("w1", "write_file", r#"{"path": "README.md"}"#),
        crate::mock::text("Here it is:\n```markdown\n# Word count\n\nRun it.\n```\nDone.", 9, 9),
    ]));
    let agent = Agent::new("writer-1", AgentLayer::Bottom);
    let held = vec!["write_file".to_owned()];
    let who = Persona {
        config: &agent.config,
        system_prompt: &agent.prompt,
        tools: &held,
        roles: &[],
        domains: &[],
    };
    let reasoner = small_model_reasoner(&rig);
    // The task as a small model's lead words it for the worker it spawns: the step, then
    // when it is done.
    let mut subtask = goal_subtask("");
    subtask.step.description = "Write README.md\nIt is done when: what the goal asks for".into();
    let action = reasoner.next_action(who, &subtask, &[]).await.unwrap();
    assert_eq!(
        action,
        NextAction::Call(ToolCall {
            tool: "write_file".into(),
            args: json!({"path": "README.md", "content": "# Word count\n\nRun it.\n"})
        })
    );
    let requests = rig.provider.requests();
    assert_eq!(requests.len(), 2, "the call, then its content");
    let write = requests[0].tools.iter().find(|t| t.name == "write_file").unwrap();
    assert_eq!(write.parameters["properties"].get("content"), None, "{}", write.parameters);
    assert_eq!(write.parameters["properties"]["path"]["enum"], json!(["README.md"]));
    // The content's question: text, no tools, the task and the file; a server is not given
    // the assistant's words to continue (it would answer anew, with nothing).
    let body = &requests[1];
    assert!(body.tools.is_empty());
    assert_eq!(body.response, ResponseFormat::Text);
    assert_eq!(body.messages.len(), 1, "{:?}", body.messages);
    let asked = &body.messages[0].content;
    assert!(asked.contains("Write README.md"), "{asked}");
    // Not when the step is done: that is about the whole step, and a small model writes it
    // into the file.
    assert!(!asked.contains("It is done when"), "{asked}");
    assert!(!asked.contains("what the goal asks for"), "{asked}");
    assert!(asked.contains("Write the complete content of README.md."), "{asked}");
    assert!(asked.contains("```markdown code block"), "{asked}");
    // Both calls are the agent's: counted in the ledger.
    assert_eq!(rig.ledger.report().total.calls, 2);
}

#[tokio::test(start_paused = true)]
async fn a_small_model_s_next_write_is_offered_the_named_files_it_has_not_written() {
    // The 270M model wrote `test_wordcount.py`, then asked for it again, which the loop guard
    // took for the end of the step: two of the three files the step names were never written.
    let rig = rig(MockProvider::queue([
        tool_call("w2", "write_file", r#"{"path": "wordcount.py"}"#),
        crate::mock::text("def count_words(text):\n    return {}\n```", 9, 9),
    ]));
    let agent = Agent::new("coder-1", AgentLayer::Bottom);
    let held = vec!["write_file".to_owned(), "read_file".to_owned()];
    let who = Persona {
        config: &agent.config,
        system_prompt: &agent.prompt,
        tools: &held,
        roles: &[],
        domains: &[],
    };
    let reasoner = small_model_reasoner(&rig);
    let mut subtask = goal_subtask("");
    subtask.step.description =
        "Write wordcount.py, its tests in test_wordcount.py and a README.md".into();
    let written = |path: &str, success: bool| ToolCallRecord {
        call: ToolCall {
            tool: "write_file".into(),
            args: json!({"path": path, "content": "import numpy"}),
        },
        success,
        output: if success { "wrote 12 bytes".into() } else { "disk full".into() },
        event: false,
    };
    // One file written, one write that failed: the written one is no longer offered.
    let history = [written("test_wordcount.py", true), written("README.md", false)];
    let action = reasoner.next_action(who, &subtask, &history).await.unwrap();
    assert!(
        matches!(&action, NextAction::Call(call) if call.args["path"] == "wordcount.py"),
        "{action:?}"
    );
    let offered = |request: &agent_llm::ChatRequest, tool: &str| {
        let spec = request.tools.iter().find(|t| t.name == tool).unwrap();
        spec.parameters["properties"]["path"]["enum"].clone()
    };
    let asked = &rig.provider.requests()[0];
    assert_eq!(offered(asked, "write_file"), json!(["wordcount.py", "README.md"]));
    // Reading is not writing: every named file stays readable.
    assert_eq!(
        offered(asked, "read_file"),
        json!(["wordcount.py", "test_wordcount.py", "README.md"])
    );

    // Once every named file is written, any of them may be written again.
    let rig = rig_again(&json!({"path": "README.md"}));
    let reasoner = small_model_reasoner(&rig);
    let all = ["wordcount.py", "test_wordcount.py", "README.md"].map(|p| written(p, true));
    let _ = reasoner.next_action(who, &subtask, &all).await;
    assert_eq!(
        offered(&rig.provider.requests()[0], "write_file"),
        json!(["wordcount.py", "test_wordcount.py", "README.md"])
    );
}

fn rig_again_with(answers: impl IntoIterator<Item = crate::mock::Answer>) -> Rig {
    rig(MockProvider::queue(answers))
}

#[tokio::test(start_paused = true)]
async fn a_goal_step_is_put_as_what_to_achieve_without_a_planned_call() {
    let rig = rig(MockProvider::queue([tool_call("c1", "read_file", r#"{"path": "src/lib.rs"}"#)]));
    let agent = Agent::new("worker-1", AgentLayer::Bottom);
    let held = ["read_file".to_owned(), "write_file".to_owned()];
    let who = Persona {
        config: &agent.config,
        system_prompt: &agent.prompt,
        tools: &held,
        roles: &[],
        domains: &[],
    };
    let subtask = goal_subtask("README.md says what the project does");
    let action = rig.reasoner.next_action(who, &subtask, &[]).await.unwrap();
    assert_eq!(
        action,
        NextAction::Call(ToolCall {
            tool: "read_file".into(),
            args: json!({"path": "src/lib.rs"})
        })
    );
    let request = rig.provider.last();
    assert_eq!(names(&request), ["read_file", "write_file", FINISH_TOOL], "no empty tool name");
    let question = &last_message(&request).content;
    assert!(question.contains("Carry out step readme of task t9: Write README.md"), "{question}");
    assert!(!question.contains("The plan's call"), "{question}");
    assert!(
        question.contains("It is accepted when: README.md says what the project does"),
        "{question}"
    );
    assert!(question.contains("choose the tools you need yourself"), "{question}");
    assert!(question.contains(&format!("call `{FINISH_TOOL}`")), "{question}");
    assert!(!question.contains(RETURN_RESULTS), "{question}");

    // Without a list of tools from its layer or the reasoner's map, a goal step offers only
    // finish: never a tool without a name.
    let rig = rig_again_with([tool_call("f", FINISH_TOOL, &finish(false, "no tools"))]);
    rig.reasoner.next_action(agent.persona(), &subtask, &[]).await.unwrap();
    assert_eq!(names(&rig.provider.last()), [FINISH_TOOL]);
}

#[tokio::test(start_paused = true)]
async fn decompose_offers_a_goal_step_to_every_available_executor() {
    let answer = json!({"placements": {"readme": "exec-s"}});
    let rig = rig(MockProvider::queue([json(answer)]));
    let agent = Agent::new("mid-docs", AgentLayer::Mid);
    let mut work = work();
    work.steps = vec![goal_subtask("").step];
    let placements = rig.reasoner.decompose(agent.persona(), &work, &team()).await.unwrap();
    assert_eq!(placements[0].assignee.as_str(), "exec-s");
    let request = rig.provider.last();
    let offered = &schema(&request)["properties"]["placements"]["properties"]["readme"]["enum"];
    assert_eq!(offered, &json!(["exec-w", "exec-s"]), "not the unavailable one");
    let question = &last_message(&request).content;
    assert!(question.contains("no tool named (the executor chooses)"), "{question}");
    assert!(!question.contains("tool ``"), "{question}");
}

// ---------------------------------------------------------------------------------------------
// Compose (an executor kind's text)
// ---------------------------------------------------------------------------------------------

#[tokio::test(start_paused = true)]
async fn compose_is_a_plain_text_completion_with_the_persona_instruction_and_material() {
    let rig = rig(MockProvider::queue([text("  # Report\n\nAll is well.\n  ", 30, 12)]));
    let agent = Agent::new("exec-writer", AgentLayer::Bottom);
    let written = rig
        .reasoner
        .compose(agent.persona(), "Write a report on the release", "notes: v2 shipped on Monday")
        .await
        .unwrap();
    assert_eq!(written, "# Report\n\nAll is well.");

    let request = rig.provider.last();
    assert!(request.system.starts_with(&agent.prompt), "{}", request.system);
    assert!(!request.system.contains("structured form"), "free text: {}", request.system);
    assert_eq!(request.response, ResponseFormat::Text);
    assert!(request.tools.is_empty() && !request.require_tool, "{request:?}");
    // The longer of the limits: a draft is one of the longest answers (the rig's decisions
    // may use 200 tokens, a plan 2 048).
    assert_eq!(request.max_tokens, 2_048);
    assert_eq!(request.messages.len(), 1, "no conversation history");
    let asked = &last_message(&request).content;
    assert!(asked.starts_with("Write a report on the release"), "{asked}");
    assert!(asked.contains("Material:\nnotes: v2 shipped on Monday"), "{asked}");

    // The call went through the ledger like any other, and stays out of the agent's own
    // conversation (the executor's capsule keeps the run's).
    let report = rig.ledger.report();
    assert_eq!(
        (report.total.calls, report.total.input_tokens, report.total.output_tokens),
        (1, 30, 12)
    );
    assert!(rig.conversations.get(&AgentId::new("exec-writer")).unwrap().turns.is_empty());
}

#[tokio::test(start_paused = true)]
async fn compose_retries_a_transient_failure_and_reports_a_permanent_one_as_a_backend_error() {
    let rig = rig(MockProvider::queue([
        failure(ProviderErrorKind::Server, "503 overloaded"),
        text("notes", 5, 1),
    ]));
    let agent = Agent::new("exec-r", AgentLayer::Bottom);
    let written = rig.reasoner.compose(agent.persona(), "Write notes", "").await.unwrap();
    assert_eq!(written, "notes");
    assert_eq!(rig.provider.calls(), 2, "retried once");
    assert!(
        !last_message(&rig.provider.last()).content.contains("Material:"),
        "no material, no material section"
    );

    let rig = rig_again_with([failure(ProviderErrorKind::Unauthorized, "401 bad key")]);
    let err = rig.reasoner.compose(agent.persona(), "Write notes", "m").await.unwrap_err();
    let ReasonError::Backend { reasoner, message } = &err else { panic!("{err:?}") };
    assert_eq!(reasoner, "mock:mock-model");
    assert!(message.contains("401 bad key"), "{message}");
    assert_eq!(rig.provider.calls(), 1, "a permanent failure is not retried");

    // A model that writes nothing has not written the text.
    let rig = rig_again_with([text("   \n", 5, 0)]);
    let err = rig.reasoner.compose(agent.persona(), "Write notes", "m").await.unwrap_err();
    let ReasonError::Backend { message, .. } = &err else { panic!("{err:?}") };
    assert!(message.contains("no text") && message.contains("Write notes"), "{message}");
}

#[tokio::test(start_paused = true)]
async fn compose_is_refused_by_a_spent_budget_without_a_call() {
    let rig = rig_with(
        MockProvider::queue([text("never", 1, 1)]),
        UsageLedger::new(PriceTable::new(), Budget { max_calls: Some(0), ..Budget::default() }),
    );
    let agent = Agent::new("exec-w", AgentLayer::Bottom);
    let err = rig.reasoner.compose(agent.persona(), "Write", "m").await.unwrap_err();
    assert!(matches!(err, ReasonError::Backend { .. }), "{err:?}");
    assert_eq!(rig.provider.calls(), 0);
}

/// Every model call is recorded in the ledger and its store (`strata inspect RUN calls`): the
/// request, the answer with its tool calls, tokens and outcome, a failed call with its error;
/// numbered on from the stored ones when a run resumes.
#[tokio::test(start_paused = true)]
async fn every_call_is_recorded_with_its_request_answer_and_outcome() {
    let root = tempfile::tempdir().unwrap();
    let dir = root.path().join("run");
    let agent = Agent::new("exec-w", AgentLayer::Bottom);
    {
        let store = RunStore::create(&dir, "run-1", Timestamp(0), Durability::Synced).unwrap();
        let llm: Arc<dyn LlmStore> = Arc::new(SledLlmStore::open(&store).unwrap());
        let conversations =
            Arc::new(Conversations::stored(ConversationLimits::default(), llm.clone()));
        let mut prices = PriceTable::new();
        prices
            .set("mock-model", agent_llm::Price { input_per_mtok: 1.0, output_per_mtok: 2.0 })
            .unwrap();
        let ledger = Arc::new(UsageLedger::stored(prices, Budget::default(), llm).unwrap());
        let provider = MockProvider::queue([
            tool_call("c1", "write_file", r#"{"path": "a.txt", "content": "hi"}"#),
            failure(ProviderErrorKind::BadRequest, "the request was refused"),
        ]);
        let rig = rig_full(provider, ledger.clone(), conversations);
        let action = rig.reasoner.next_action(agent.persona(), &subtask(), &[]).await.unwrap();
        assert!(matches!(action, NextAction::Call(_)), "{action:?}");
        let refused = rig.reasoner.next_action(agent.persona(), &subtask(), &[]).await;
        assert!(refused.is_err(), "{refused:?}");

        let calls = ledger.calls().unwrap();
        assert_eq!(calls.len(), 2, "{calls:#?}");
        let first = &calls[0];
        assert_eq!(
            (first.seq, first.agent.as_str(), first.layer),
            (1, "exec-w", AgentLayer::Bottom)
        );
        assert_eq!((first.provider.as_str(), first.model.as_str()), ("mock", "mock-model"));
        assert_eq!(first.outcome, agent_llm::CallOutcome::Answered);
        assert_eq!(first.tool_calls[0].name, "write_file");
        assert!(first.tool_calls[0].arguments.contains("a.txt"));
        assert_eq!((first.usage.input_tokens, first.usage.output_tokens), (10, 5));
        assert_eq!(first.cost_usd, Some((10.0 * 1.0 + 5.0 * 2.0) / 1e6));
        assert!(first.tools.iter().any(|t| t == "write_file"), "{:?}", first.tools);
        assert!(first.system.contains("exec-w"), "{}", first.system);
        assert_eq!(first.messages, rig.provider.requests()[0].messages, "the request as sent");
        let second = &calls[1];
        assert_eq!(second.seq, 2);
        assert_eq!(
            second.outcome,
            agent_llm::CallOutcome::Failed {
                kind: "bad_request".into(),
                message: "the request was refused".into()
            }
        );
        assert!(second.answer.is_empty() && second.tool_calls.is_empty());
        store.commit().await.unwrap();
    }
    // Resumed: the records are still there and the next call is number 3.
    let store = RunStore::open(&dir, Durability::Synced).unwrap();
    let llm: Arc<dyn LlmStore> = Arc::new(SledLlmStore::open(&store).unwrap());
    assert_eq!(llm.load_calls().unwrap().len(), 2);
    let ledger =
        Arc::new(UsageLedger::stored(PriceTable::new(), Budget::default(), llm.clone()).unwrap());
    let conversations = Arc::new(Conversations::stored(ConversationLimits::default(), llm.clone()));
    let rig = rig_full(agreeable(), ledger, conversations);
    let top = Agent::new("top-a", AgentLayer::Top);
    rig.reasoner.review_decision(top.persona(), &plan_decision(3)).await.unwrap();
    let calls = llm.load_calls().unwrap();
    let seqs: Vec<u64> = calls.iter().map(|c| c.seq).collect();
    assert_eq!(seqs, [1, 2, 3]);
    assert_eq!(calls[2].agent.as_str(), "top-a");
    assert_eq!(calls[2].cost_usd, None, "no price here");
}

/// Without a store the ledger keeps the latest calls in memory.
#[tokio::test(start_paused = true)]
async fn a_ledger_without_a_store_keeps_the_calls_in_memory() {
    let rig = rig(agreeable());
    let top = Agent::new("top-a", AgentLayer::Top);
    rig.reasoner.review_decision(top.persona(), &plan_decision(3)).await.unwrap();
    rig.reasoner.review_decision(top.persona(), &plan_decision(4)).await.unwrap();
    let calls = rig.ledger.calls().unwrap();
    assert_eq!(calls.iter().map(|c| c.seq).collect::<Vec<_>>(), [1, 2]);
    assert!(!calls[1].answer.is_empty(), "{:?}", calls[1]);
}
