//! A team given only a goal, every agent reasoning through `LlmReasoner` over `OpenAiProvider`
//! against a fake model on a loopback HTTP server that speaks the OpenAI tool-call wire format:
//! the top layer plans (naming the leads), the powers sign, the pool creates the leads, each
//! lead spawns its workers with `spawn_agent` tool calls, the workers write files and run the
//! test through real tools, return structured results, the leads finish, and the task succeeds.
//!
//! The fake model is `agent_llm::testing`'s `FakeModel` playing `add_program_scenario`: it
//! answers each request from what it says, in whatever order requests arrive (many agents ask
//! at once): the decision by the name of its `response_format` schema, and in the tool loop the
//! agent by its system prompt, the step by the question, and how far the step got by the tool
//! messages after the question and the workers' results, which reach a lead as user messages
//! (`[return_results] results from …`), never as calls it did not make.

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Duration;

use agent_core::spawn::{RETURN_RESULTS, supervisor_tool_spec};
use agent_core::tools::{ToolContext, ToolRegistry};
use agent_core::{AuditEvent, AuditRecord, InMemoryAuditLog, InMemoryStateStore, TokioClock};
use agent_layers::TopSpec;
use agent_llm::testing::{
    FakeModel, USAGE_COMPLETION_TOKENS, USAGE_PROMPT_TOKENS, add_program_scenario, decision_of,
    speaker_of,
};
use agent_llm::{
    Budget, ConversationLimits, Conversations, FINISH_TOOL, LlmReasoner, OpenAiConfig,
    OpenAiProvider, PriceTable, UsageLedger,
};
use agent_pool::{AgentSpec, RoleSpec, Team, TeamServices, TeamSpec};
use agent_state::{AgentConfig, AgentId, AgentLayer, Role, RoleBook, Task, TaskOutcome, Timestamp};
use governance::InMemoryGovernance;
use message_bus::InMemoryBus;
use serde_json::Value;
use whiteboard::InMemoryWhiteboard;

const KEY: &str = "sk-wire-0123456789";

/// Tokens the fake model counts for every answer, in and out.
const TOKENS_IN: u64 = USAGE_PROMPT_TOKENS;
const TOKENS_OUT: u64 = USAGE_COMPLETION_TOKENS;

fn top(id: &str, power: &str, weight: f64) -> AgentSpec {
    AgentSpec {
        config: AgentConfig::new(id, format!("Power {power}"), AgentLayer::Top)
            .with_role("governance"),
        role: RoleSpec::Top(TopSpec {
            power_type: power.into(),
            vote_weight: weight,
            signature_authority: vec!["plan".into()],
        }),
    }
}

fn role(name: &str, layer: AgentLayer, tools: &[&str], enabled: &[&str]) -> Role {
    Role {
        description: format!("the {name}"),
        tools: tools.iter().map(|t| (*t).to_owned()).collect(),
        enabled_agents: enabled.iter().map(|t| (*t).to_owned()).collect(),
        ..Role::new(name, layer)
    }
}

/// The workspace tools of each bottom role.
const WORKER_TOOLS: [(&str, &[&str]); 3] = [
    ("coder", &["write_file", "read_file"]),
    ("tester", &["shell", "read_file"]),
    ("writer", &["write_file"]),
];

fn roles() -> RoleBook {
    let mut book = vec![
        role("code_lead", AgentLayer::Mid, &[], &["coder", "tester"]),
        role("docs_lead", AgentLayer::Mid, &[], &["writer"]),
    ];
    book.extend(
        WORKER_TOOLS.iter().map(|(name, tools)| role(name, AgentLayer::Bottom, tools, &[])),
    );
    RoleBook::new(book).unwrap()
}

/// Three powers and nothing else: the leads and workers are created as the work unfolds.
fn goal_team() -> TeamSpec {
    let mut spec = TeamSpec::new(vec![
        top("top-a", "power_a", 2.0),
        top("top-b", "power_b", 1.0),
        top("top-c", "power_c", 1.0),
    ]);
    spec.heartbeat = Duration::from_secs(4);
    spec.roles = roles();
    spec
}

fn services(
    workspace: &std::path::Path,
    reasoner: LlmReasoner,
    tools: Arc<ToolRegistry>,
) -> TeamServices {
    TeamServices {
        bus: Arc::new(InMemoryBus::new()),
        boards: Arc::new(InMemoryWhiteboard::new()),
        governance: Arc::new(InMemoryGovernance::new()),
        audit: Arc::new(InMemoryAuditLog::new()),
        clock: Arc::new(TokioClock::starting_at(Timestamp(1_700_000_000_000))),
        workspace: Arc::new(ToolContext::new(workspace).unwrap()),
        tools,
        reasoner: Arc::new(reasoner),
        state: Arc::new(InMemoryStateStore::new()),
        reasoners: Default::default(),
        agent_tools: Default::default(),
        role_reasoners: Default::default(),
        role_tools: Default::default(),
        costs: None,
        executor: None,
        events: agent_core::EventHub::default(),
    }
}

// ---------------------------------------------------------------------------------------------
// The test.
// ---------------------------------------------------------------------------------------------

/// The messages of a request body.
fn messages(body: &Value) -> &[Value] {
    body["messages"].as_array().map(Vec::as_slice).unwrap_or_default()
}

fn spawned(records: &[AuditRecord]) -> Vec<(String, String, String)> {
    let mut out: Vec<(String, String, String)> = records
        .iter()
        .filter_map(|r| match &r.event {
            AuditEvent::Spawned { spawn } => {
                Some((r.agent.to_string(), spawn.agent.to_string(), spawn.role.clone()))
            }
            _ => None,
        })
        .collect();
    out.sort();
    out
}

/// The tool specs a request offered, by name.
fn tool_specs(body: &Value) -> Vec<(String, Value)> {
    body["tools"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|t| {
            (
                t["function"]["name"].as_str().unwrap_or_default().to_owned(),
                t["function"]["parameters"].clone(),
            )
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_goal_runs_to_success_with_every_agent_asking_a_model_over_http() {
    let server = FakeModel::start_with_key("gpt-wire", KEY, add_program_scenario).await.unwrap();

    let dir = tempfile::tempdir().unwrap();
    let provider = OpenAiProvider::new(OpenAiConfig {
        base_url: server.url(),
        model: "gpt-wire".to_owned(),
        api_key: Some(KEY.to_owned()),
        timeout: Duration::from_secs(10),
        structured_output: agent_llm::StructuredOutput::Auto,
        completions: false,
    })
    .unwrap();
    let ledger = Arc::new(UsageLedger::new(PriceTable::new(), Budget::default()));
    let conversations = Arc::new(Conversations::in_memory(ConversationLimits::default()));
    let tools = Arc::new(ToolRegistry::with_builtins());
    let reasoner = LlmReasoner::new(Arc::new(provider), ledger.clone(), conversations.clone())
        .with_tools(&tools);
    let services = services(dir.path(), reasoner, tools.clone());

    let team = Team::start(goal_team(), services.clone()).await.unwrap();
    team.submit(Task::goal("add", "a shell program that adds two numbers, tested, with a README"))
        .await
        .unwrap();
    let outcome = tokio::time::timeout(Duration::from_secs(60), team.wait("add")).await;
    let problems = server.problems();
    assert!(problems.is_empty(), "the fake model was asked what it did not expect: {problems:#?}");
    let outcome = outcome.expect("the task closes within a minute");
    let TaskOutcome::Succeeded { results, .. } = &outcome else { panic!("{outcome:?}") };
    assert_eq!(results.len(), 2, "{results:?}");
    assert!(results.iter().all(|r| r.success), "{results:?}");

    // The files are on disk, and the test the tester ran passes.
    for file in ["add.sh", "test_add.sh", "README.md"] {
        assert!(dir.path().join(file).is_file(), "{file} written");
    }
    let run = std::process::Command::new("sh")
        .arg("test_add.sh")
        .current_dir(dir.path())
        .output()
        .unwrap();
    assert_eq!(String::from_utf8_lossy(&run.stdout).trim(), "PASS");

    // Two leads created by the proposing power, four workers by the leads; four structured
    // results, all trusted.
    let records = services.audit.records(None).await.unwrap();
    let mut expected: Vec<(String, String, String)> = [
        ("top-a", "code_lead-1", "code_lead"),
        ("top-a", "docs_lead-1", "docs_lead"),
        ("code_lead-1", "coder-1", "coder"),
        ("code_lead-1", "coder-2", "coder"),
        ("code_lead-1", "tester-1", "tester"),
        ("docs_lead-1", "writer-1", "writer"),
    ]
    .into_iter()
    .map(|(a, b, c)| (a.to_owned(), b.to_owned(), c.to_owned()))
    .collect();
    expected.sort();
    assert_eq!(spawned(&records), expected, "every spawn is audited by its spawner");
    let structured: Vec<(String, bool)> = records
        .iter()
        .filter_map(|r| match &r.event {
            AuditEvent::Result { trusted, .. } => Some((r.agent.to_string(), *trusted)),
            _ => None,
        })
        .collect();
    assert_eq!(structured.len(), 4, "{structured:?}");
    assert!(structured.iter().all(|(_, trusted)| *trusted), "{structured:?}");
    team.shutdown().await.unwrap();

    // What went over the wire.
    let bodies: Vec<Value> = server.requests();
    assert_eq!(bodies.len(), server.chat_requests(), "every request was a JSON chat completion");
    let asked = |name: &str| bodies.iter().filter(|b| decision_of(b) == Some(name)).count();
    assert_eq!(asked("plan"), 1);
    assert!(
        bodies.iter().any(|b| decision_of(b) == Some("plan") && speaker_of(b) == "Power power_a")
    );
    assert_eq!(asked("review"), 2, "the two other powers reviewed the plan");
    assert_eq!(asked("judge"), 1);

    // The leads were offered the agent tools with their seed schemas, the workers their role's
    // tools (described from the registry) and `return_results`; everyone `finish_subtask`.
    let seed = |name: &str| supervisor_tool_spec(name).unwrap().parameters;
    for (who, workspace) in
        [("code_lead", &[][..]), ("docs_lead", &[][..])].into_iter().chain(WORKER_TOOLS)
    {
        let theirs: Vec<&Value> = bodies.iter().filter(|b| speaker_of(b) == who).collect();
        assert!(!theirs.is_empty(), "{who} asked the model");
        for body in theirs {
            let specs = tool_specs(body);
            let names: BTreeSet<&str> = specs.iter().map(|(n, _)| n.as_str()).collect();
            let mut want: BTreeSet<&str> = workspace.iter().copied().collect();
            want.insert(FINISH_TOOL);
            if who.ends_with("_lead") {
                want.extend(["spawn_agent", "speak_to_agent", "get_agents", "despawn_agent"]);
            } else {
                want.insert(RETURN_RESULTS);
            }
            assert_eq!(names, want, "{who} was offered {names:?}");
            for (name, parameters) in &specs {
                let expected = match tools.get(name) {
                    Some(tool) => tool.schema().clone(),
                    None if name == FINISH_TOOL => continue,
                    None => seed(name),
                };
                assert_eq!(parameters, &expected, "{who}: the parameters of {name}");
            }
        }
    }

    // Each lead is told, with its step, the roles it may spawn (its role's `enabled_agents`).
    for (lead, roles) in
        [("code_lead", ["- coder:", "- tester:"]), ("docs_lead", ["- writer:", "- writer:"])]
    {
        let asked: Vec<&Value> = bodies.iter().filter(|b| speaker_of(b) == lead).collect();
        assert!(!asked.is_empty(), "{lead} asked the model");
        let told = asked.iter().all(|b| {
            messages(b).iter().any(|m| {
                m["content"].as_str().is_some_and(|c| {
                    c.starts_with("Carry out step ")
                        && c.contains("The roles you may spawn with `spawn_agent`:")
                        && roles.iter().all(|r| c.contains(r))
                })
            })
        });
        assert!(told, "{lead} was told the roles it may spawn");
    }

    // Each lead's finish while its workers worked was deferred, and the workers' results came
    // back to it as user messages (not as calls it never made).
    for (lead, worker) in [("code_lead", "coder-1"), ("docs_lead", "writer-1")] {
        let told = bodies.iter().any(|b| {
            speaker_of(b) == lead
                && messages(b).iter().any(|m| {
                    m["role"] == "tool"
                        && m["content"].as_str().is_some_and(|c| c.contains("not finished yet"))
                })
                && messages(b).iter().any(|m| {
                    m["role"] == "user"
                        && m["content"].as_str().is_some_and(|c| {
                            c.starts_with(&format!("[return_results] results from {worker}"))
                        })
                })
                && messages(b).iter().all(|m| {
                    m["tool_calls"]
                        .as_array()
                        .into_iter()
                        .flatten()
                        .all(|c| c["function"]["name"] != RETURN_RESULTS)
                })
        });
        assert!(told, "{lead} was told to wait and then got {worker}'s results");
    }

    // A lead's conversation keeps its step as one turn, written when the step ended: the
    // finishes put off while workers ran are not turns.
    for lead in ["code_lead-1", "docs_lead-1"] {
        let turns = conversations.get(&AgentId::new(lead)).unwrap().turns;
        assert_eq!(turns.len(), 1, "{lead}: {turns:#?}");
        assert!(turns[0].answer.contains("; finished: success=true"), "{}", turns[0].answer);
    }

    // Every request was one call in the ledger, with the tokens the server counted.
    let report = ledger.report();
    let n = bodies.len() as u64;
    assert_eq!(report.total.calls, n);
    assert_eq!(report.total.failed_calls, 0);
    assert_eq!(report.total.input_tokens, TOKENS_IN * n);
    assert_eq!(report.total.output_tokens, TOKENS_OUT * n);
}
