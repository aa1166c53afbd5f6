//! A whole team on `LlmReasoner`: every agent of every layer reasons through a scripted model,
//! and the plan runs to a successful outcome with real tool calls.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use agent_core::tools::{ToolContext, ToolRegistry};
use agent_core::{InMemoryAuditLog, InMemoryStateStore, TokioClock};
use agent_layers::{BottomSpec, MidSpec, TopSpec};
use agent_llm::{
    ApprovalDesk, BUDGET_DECISION_KIND, Budget, BudgetLimit, ChatRequest, ConversationLimits,
    Conversations, FINISH_TOOL, LlmReasoner, OnExceed, PriceTable, Role, UsageLedger,
};
use agent_pool::{AgentSpec, RoleSpec, Team, TeamServices, TeamSpec};
use agent_state::{
    AgentConfig, AgentId, AgentLayer, DecisionStatus, PlanStep, StepTarget, Task, TaskOutcome,
    Timestamp,
};
use governance::InMemoryGovernance;
use message_bus::InMemoryBus;
use serde_json::{Value, json};
use whiteboard::InMemoryWhiteboard;

use crate::mock::{Answer, MockProvider, decision, last_message, schema, shared, tool_call};

const TOOLS: [&str; 4] = ["read_file", "write_file", "list_dir", "shell"];

fn agent(id: &str, layer: AgentLayer, supervisor: Option<&str>, role: RoleSpec) -> AgentSpec {
    let mut config = AgentConfig::new(id, format!("Agent {id}"), layer);
    if let Some(s) = supervisor {
        config = config.with_supervisor(s);
    }
    AgentSpec { config, role }
}

fn top(id: &str, weight: f64) -> AgentSpec {
    agent(
        id,
        AgentLayer::Top,
        None,
        RoleSpec::Top(TopSpec {
            power_type: id.into(),
            vote_weight: weight,
            signature_authority: vec!["plan".into()],
        }),
    )
}

fn mid(id: &str, domain: &str) -> AgentSpec {
    agent(
        id,
        AgentLayer::Mid,
        Some("top-a"),
        RoleSpec::Mid(MidSpec { domain: domain.into(), max_subordinates: 4 }),
    )
}

fn bottom(id: &str, lead: &str) -> AgentSpec {
    let tools = TOOLS.iter().map(|t| (*t).to_owned()).collect();
    agent(
        id,
        AgentLayer::Bottom,
        Some(lead),
        RoleSpec::Bottom(BottomSpec { tools, kind: None, ooda: None }),
    )
}

/// Three powers, two leads with two executors each.
fn team_spec() -> TeamSpec {
    let mut spec = TeamSpec::new(vec![
        top("top-a", 2.0),
        top("top-b", 1.0),
        top("top-c", 1.0),
        mid("mid-docs", "docs"),
        mid("mid-build", "build"),
        bottom("bottom-d1", "mid-docs"),
        bottom("bottom-d2", "mid-docs"),
        bottom("bottom-b1", "mid-build"),
        bottom("bottom-b2", "mid-build"),
    ]);
    spec.heartbeat = Duration::from_secs(4);
    spec
}

fn step(id: &str, domain: &str, tool: &str, args: Value, after: &[&str]) -> PlanStep {
    PlanStep::scripted(
        id,
        format!("{id} with {tool}"),
        StepTarget::Domain(domain.into()),
        tool,
        args,
    )
    .with_after(after.iter().copied())
}

fn task(id: &str) -> Task {
    Task {
        id: id.into(),
        goal: "write a greeting and check it".into(),
        steps: vec![
            step(
                "write-hello",
                "docs",
                "write_file",
                json!({"path": "hello.txt", "content": "hello, strata\n"}),
                &[],
            ),
            step(
                "write-notes",
                "docs",
                "write_file",
                json!({"path": "docs/notes.md", "content": "# Notes\n"}),
                &[],
            ),
            step(
                "count",
                "build",
                "shell",
                json!({"command": "wc -c < hello.txt > size.txt && cat size.txt"}),
                &["write-hello"],
            ),
        ],
    }
}

/// The plan's tool and arguments, read back from the step's question.
fn planned_call(question: &str) -> (String, String) {
    let call: Value = question
        .split_once("The plan's call for it: ")
        .and_then(|(_, rest)| rest.split_once('\n'))
        .and_then(|(call, _)| serde_json::from_str(call).ok())
        .unwrap_or_else(|| panic!("no planned call in {question:?}"));
    let tool = call["tool"].as_str().unwrap_or_else(|| panic!("no tool in {call}")).to_owned();
    (tool, call["arguments"].to_string())
}

/// A model that behaves: signs plans, places each step on the first executor with its tool,
/// calls the planned tool once and finishes with its result, and judges a task complete when
/// every result succeeded. Each call counts 100 tokens in, 20 out.
fn sensible(request: &ChatRequest) -> Answer {
    let answer = |value: Value| crate::mock::text(value.to_string(), 100, 20);
    match decision(request) {
        Some("review") => answer(json!({"verdict": "sign", "reason": "the steps are safe"})),
        Some("vote") => {
            let first = schema(request)["properties"]["choice"]["enum"][0].clone();
            answer(json!({"choice": first, "reason": "first"}))
        }
        Some("decompose") => {
            // Each step to the first executor the schema offers for it.
            let steps = schema(request)["properties"]["placements"]["properties"]
                .as_object()
                .unwrap()
                .iter()
                .map(|(step, allowed)| (step.clone(), allowed["enum"][0].clone()))
                .collect::<serde_json::Map<String, Value>>();
            answer(json!({ "placements": steps }))
        }
        Some("judge") => {
            let question = &last_message(request).content;
            let failed = question.contains(": failed");
            answer(json!({"complete": !failed, "summary": "judged from the results"}))
        }
        Some(other) => panic!("unexpected decision {other}"),
        None => {
            let offered: Vec<&str> = request.tools.iter().map(|t| t.name.as_str()).collect();
            assert!(request.require_tool && offered.contains(&FINISH_TOOL), "{offered:?}");
            let last = last_message(request);
            match last.role {
                Role::User => {
                    let (tool, args) = planned_call(&last.content);
                    assert!(offered.contains(&tool.as_str()), "{tool} not offered: {offered:?}");
                    let mut call = tool_call("call-1", &tool, &args)?;
                    call.usage.input_tokens = 100;
                    call.usage.output_tokens = 20;
                    Ok(call)
                }
                Role::Tool => {
                    let ok = last.content.starts_with("ok");
                    let args = json!({"success": ok, "summary": last.content}).to_string();
                    let mut call = tool_call("call-2", FINISH_TOOL, &args)?;
                    call.usage.input_tokens = 100;
                    call.usage.output_tokens = 20;
                    Ok(call)
                }
                Role::Assistant => panic!("a request ending with the model's own message"),
            }
        }
    }
}

struct Setup {
    services: TeamServices,
    provider: Arc<MockProvider>,
    ledger: Arc<UsageLedger>,
    conversations: Arc<Conversations>,
}

fn setup(workspace: &std::path::Path, budget: Budget) -> Setup {
    let (provider, dynamic) = shared(MockProvider::from_fn(sensible));
    let ledger = Arc::new(UsageLedger::new(PriceTable::new(), budget));
    let conversations = Arc::new(Conversations::in_memory(ConversationLimits::default()));
    let boards = Arc::new(InMemoryWhiteboard::new());
    let tools = Arc::new(ToolRegistry::with_builtins());
    let executors: BTreeMap<_, _> = team_spec()
        .agents
        .iter()
        .filter(|a| a.config.layer == AgentLayer::Bottom)
        .map(|a| (a.config.id.clone(), TOOLS.iter().map(|t| (*t).to_owned()).collect()))
        .collect();
    let reasoner = LlmReasoner::new(dynamic, ledger.clone(), conversations.clone())
        .with_tools(&tools)
        .with_agent_tools(Arc::new(executors))
        .with_boards(boards.clone());
    let services = TeamServices {
        bus: Arc::new(InMemoryBus::new()),
        boards,
        governance: Arc::new(InMemoryGovernance::new()),
        audit: Arc::new(InMemoryAuditLog::new()),
        clock: Arc::new(TokioClock::starting_at(Timestamp(1_700_000_000_000))),
        workspace: Arc::new(ToolContext::new(workspace).unwrap()),
        tools,
        reasoner: Arc::new(reasoner),
        state: Arc::new(InMemoryStateStore::new()),
        reasoners: BTreeMap::new(),
        agent_tools: BTreeMap::new(),
        role_reasoners: Default::default(),
        role_tools: Default::default(),
        costs: None,
        executor: None,
        events: agent_core::EventHub::default(),
    };
    Setup { services, provider, ledger, conversations }
}

#[tokio::test(start_paused = true)]
async fn a_team_on_llm_reasoners_completes_a_plan_with_real_tool_calls() {
    let dir = tempfile::tempdir().unwrap();
    let s = setup(dir.path(), Budget::default());
    let team = Team::start(team_spec(), s.services.clone()).await.unwrap();
    team.submit(task("task-1")).await.unwrap();
    let outcome = team.wait("task-1").await;
    let TaskOutcome::Succeeded { results, .. } = &outcome else {
        panic!("task failed: {outcome:?}")
    };
    assert_eq!(results.len(), 3);
    assert!(results.iter().all(|r| r.success), "{results:?}");
    assert_eq!(std::fs::read_to_string(dir.path().join("hello.txt")).unwrap(), "hello, strata\n");
    assert_eq!(std::fs::read_to_string(dir.path().join("docs/notes.md")).unwrap(), "# Notes\n");
    assert_eq!(std::fs::read_to_string(dir.path().join("size.txt")).unwrap().trim(), "14");
    team.shutdown().await.unwrap();

    // Every decision of every layer went through the model.
    let requests = s.provider.requests();
    let count = |name: Option<&str>| requests.iter().filter(|r| decision(r) == name).count();
    assert_eq!(count(Some("review")), 2, "the two other powers reviewed the plan");
    assert!(count(Some("decompose")) >= 2, "each lead placed its steps");
    assert_eq!(count(Some("judge")), 1);
    assert_eq!(count(None), 6, "a tool call and a finish per step");

    let report = s.ledger.report();
    assert_eq!(report.total.calls, requests.len() as u64);
    assert_eq!(report.total.input_tokens, 100 * requests.len() as u64);
    assert_eq!(report.total.failed_calls, 0);
    assert_eq!(report.by_layer.keys().collect::<Vec<_>>(), ["bottom", "mid", "top"]);
    assert_eq!(report.by_layer["bottom"].calls, 6);
    assert_eq!(report.by_model["mock/mock-model"].calls, requests.len() as u64);

    // Each agent has its own conversation.
    let d1 = s.conversations.get(&AgentId::new("bottom-d1")).unwrap();
    assert_eq!(d1.turns.len(), 2, "bottom-d1 carried out both docs steps");
    assert!(d1.turns.iter().all(|t| t.decision == "next_action"));
    let b = s.conversations.get(&AgentId::new("top-b")).unwrap();
    assert_eq!(b.turns.iter().map(|t| t.decision.as_str()).collect::<Vec<_>>(), ["review"]);
    let decisions = s.services.governance.list().await.unwrap();
    assert_eq!(decisions.len(), 1);
    assert_eq!(decisions[0].status, DecisionStatus::Approved);
}

#[tokio::test(start_paused = true)]
async fn a_team_past_its_budget_asks_the_top_layer_and_completes_after_the_extension() {
    let dir = tempfile::tempdir().unwrap();
    // The plan takes 11 calls; the powers' reviews of the extension take 3 more.
    let budget = Budget { max_calls: Some(8), on_exceed: OnExceed::AskTop, ..Budget::default() };
    let s = setup(dir.path(), budget);
    let team = Team::start(team_spec(), s.services.clone()).await.unwrap();
    let powers: Vec<AgentId> = ["top-a", "top-b", "top-c"].into_iter().map(AgentId::new).collect();
    let desk = tokio::spawn(
        ApprovalDesk {
            ledger: s.ledger.clone(),
            governance: s.services.governance.clone(),
            bus: s.services.bus.clone(),
            clock: s.services.clock.clone(),
            proposer: powers[0].clone(),
            signers: powers,
            humans: Vec::new(),
            poll: Duration::from_secs(1),
        }
        .run(),
    );
    team.submit(task("task-1")).await.unwrap();
    let outcome = team.wait("task-1").await;
    assert!(matches!(outcome, TaskOutcome::Succeeded { .. }), "{outcome:?}");
    team.shutdown().await.unwrap();
    desk.abort();

    let report = s.ledger.report();
    assert_eq!(report.extensions.iter().map(|e| e.limit).collect::<Vec<_>>(), [BudgetLimit::Calls]);
    // Original 8; the extension raises it to what was used at approval (8 plus the three
    // powers' reviews) plus the original 8.
    assert_eq!(report.budget.max_calls, Some(19));
    assert_eq!(report.extensions[0].raised_by, 11.0);
    assert_eq!(report.stopped, None);
    let decisions = s.services.governance.list().await.unwrap();
    let extension: Vec<_> =
        decisions.iter().filter(|d| d.content["kind"] == BUDGET_DECISION_KIND).collect();
    assert_eq!(extension.len(), 1);
    assert_eq!(extension[0].status, DecisionStatus::Approved);
    assert_eq!(extension[0].signatures.len(), 3, "every power signed");
    assert_eq!(s.provider.calls() as u64, report.total.calls);
}

#[tokio::test(start_paused = true)]
async fn a_team_past_its_budget_waits_for_a_human_longer_than_its_time_limits_and_completes() {
    let dir = tempfile::tempdir().unwrap();
    let budget = Budget { max_calls: Some(6), on_exceed: OnExceed::AskHuman, ..Budget::default() };
    let s = setup(dir.path(), budget);
    let mut spec = team_spec();
    // A reasoning call may take 10 s, a turn 30 s (its agents' own default). The human takes
    // 10 min.
    spec.timeouts.reasoning_ms = 10_000;
    spec.timeouts.turn_ms = 30_000;
    let limits = spec.timeouts;
    let human_takes = Duration::from_secs(600);
    assert!(human_takes > Duration::from_millis(limits.reasoning_ms.max(limits.turn_ms)) * 2);
    let team = Team::start(spec, s.services.clone()).await.unwrap();
    let desk = tokio::spawn(
        ApprovalDesk {
            ledger: s.ledger.clone(),
            governance: s.services.governance.clone(),
            bus: s.services.bus.clone(),
            clock: s.services.clock.clone(),
            proposer: AgentId::new("top-a"),
            signers: Vec::new(),
            humans: vec!["alice".into()],
            poll: Duration::from_secs(1),
        }
        .run(),
    );
    team.submit(task("task-1")).await.unwrap();
    let request = s.ledger.next_approval().await;
    assert_eq!((request.limit, request.cap), (BudgetLimit::Calls, 6.0));
    let calls_at_request = s.provider.calls();

    // The human comes back after a while, finds the extension and signs it.
    tokio::time::sleep(human_takes).await;
    assert_eq!(s.provider.calls(), calls_at_request, "nothing reached the model meanwhile");
    assert_eq!(s.ledger.pending_approval(), Some(request.clone()), "still waiting");
    assert_eq!(timeouts(&s).await, [], "the waiting calls and turns did not time out");
    let pending = s.services.governance.list_pending().await.unwrap();
    let extension: Vec<_> =
        pending.iter().filter(|d| d.content["kind"] == BUDGET_DECISION_KIND).collect();
    assert_eq!(extension.len(), 1, "{pending:?}");
    let d = extension[0];
    assert!(d.required_signers.is_empty(), "no power signs: {d:?}");
    assert!(d.needs_human());
    let alice = AgentId::human("alice").unwrap();
    let outcome = s.services.governance.sign(d.id, &alice, Timestamp(1_700_000_900_000)).await;
    assert_eq!(outcome.unwrap(), agent_state::SignOutcome::Approved);

    let outcome = team.wait("task-1").await;
    assert!(matches!(outcome, TaskOutcome::Succeeded { .. }), "{outcome:?}");
    team.shutdown().await.unwrap();
    desk.abort();

    // No call and no turn timed out while they waited: the wait was off the clock.
    assert_eq!(timeouts(&s).await, []);
    let report = s.ledger.report();
    assert_eq!(report.extensions.iter().map(|e| e.limit).collect::<Vec<_>>(), [BudgetLimit::Calls]);
    assert_eq!(
        report.budget.max_calls,
        Some(12),
        "what was used (6) plus the original 6; the plan takes 11"
    );
    assert_eq!(report.stopped, None);
    assert_eq!(report.total.failed_calls, 0);
    let decision = s.services.governance.get(d.id).await.unwrap().unwrap();
    assert_eq!(decision.status, DecisionStatus::Approved);
    assert_eq!(decision.signatures.len(), 1);
    assert_eq!(decision.signatures[0].signer, alice);
}

/// The audit log's timeouts: (agent, what).
async fn timeouts(s: &Setup) -> Vec<(String, String)> {
    let records = s.services.audit.records(None).await.unwrap();
    records
        .iter()
        .filter_map(|r| match &r.event {
            agent_core::AuditEvent::TimedOut { what, .. } => {
                Some((r.agent.to_string(), what.clone()))
            }
            _ => None,
        })
        .collect()
}
