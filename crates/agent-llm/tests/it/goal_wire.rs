//! A team given only a goal, every agent reasoning through `LlmReasoner` over `OpenAiProvider`
//! against a fake model on a loopback HTTP server that speaks the OpenAI tool-call wire format:
//! the top layer plans (naming the leads), the powers sign, the pool creates the leads, each
//! lead spawns its workers with `spawn_agent` tool calls, the workers write files and run the
//! test through real tools, return structured results, the leads finish, and the task succeeds.
//!
//! The fake model answers each request from what it says, in whatever order requests arrive
//! (many agents ask at once): the decision by the name of its `response_format` schema, and in
//! the tool loop the agent by its system prompt, the step by the question, and how far the step
//! got by the tool messages after the question and the workers' results, which reach a lead as
//! user messages (`[return_results] results from …`), never as calls it did not make.

use std::collections::BTreeSet;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use agent_core::spawn::{RETURN_RESULTS, SPAWN_AGENT, supervisor_tool_spec};
use agent_core::tools::{ToolContext, ToolRegistry};
use agent_core::{AuditEvent, AuditRecord, InMemoryAuditLog, InMemoryStateStore, TokioClock};
use agent_layers::TopSpec;
use agent_llm::{
    Budget, ConversationLimits, Conversations, FINISH_TOOL, LlmReasoner, OpenAiConfig,
    OpenAiProvider, PriceTable, UsageLedger,
};
use agent_pool::{AgentSpec, RoleSpec, Team, TeamServices, TeamSpec};
use agent_state::{AgentConfig, AgentId, AgentLayer, Role, RoleBook, Task, TaskOutcome, Timestamp};
use governance::InMemoryGovernance;
use message_bus::InMemoryBus;
use serde_json::{Value, json};
use whiteboard::InMemoryWhiteboard;

use crate::http_server::{Recorded, Reply, TestServer};

const KEY: &str = "sk-wire-0123456789";

/// Tokens the fake model counts for every answer, in and out.
const TOKENS_IN: u64 = 100;
const TOKENS_OUT: u64 = 20;

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
        costs: None,
    }
}

// ---------------------------------------------------------------------------------------------
// The fake model.
// ---------------------------------------------------------------------------------------------

/// What the fake model chose: a structured answer (text) or one tool call.
enum Choice {
    Text(Value),
    Call(&'static str, Value),
}

fn call(tool: &'static str, args: Value) -> Result<Choice, String> {
    Ok(Choice::Call(tool, args))
}

fn finish(summary: &str) -> Result<Choice, String> {
    call(FINISH_TOOL, json!({"success": true, "summary": summary}))
}

fn results(status: &str, summary: &str, artifacts: &[(&str, &str)]) -> Result<Choice, String> {
    let artifacts: Vec<Value> = artifacts
        .iter()
        .map(
            |(path, change)| json!({"file_path": path, "description": path, "change_type": change}),
        )
        .collect();
    call(
        RETURN_RESULTS,
        json!({"result": {"status": status, "summary": summary, "artifacts": artifacts, "known_issues": []}}),
    )
}

/// The `response_format` schema's name: which decision a structured question is.
fn decision(body: &Value) -> Option<&str> {
    body["response_format"]["json_schema"]["name"].as_str()
}

fn messages(body: &Value) -> &[Value] {
    body["messages"].as_array().map(Vec::as_slice).unwrap_or_default()
}

/// The content of the first message of `role`.
fn first_of<'a>(body: &'a Value, role: &str) -> &'a str {
    messages(body)
        .iter()
        .find(|m| m["role"] == role)
        .and_then(|m| m["content"].as_str())
        .unwrap_or_default()
}

/// The content of the last message of `role`.
fn last_of<'a>(body: &'a Value, role: &str) -> &'a str {
    messages(body)
        .iter()
        .rev()
        .find(|m| m["role"] == role)
        .and_then(|m| m["content"].as_str())
        .unwrap_or_default()
}

/// Who asks: the name the system prompt gives (`You are code_lead, a mid-layer agent.`), which
/// for a spawned agent is its role.
fn speaker(body: &Value) -> &str {
    let system = first_of(body, "system");
    system
        .strip_prefix("You are ")
        .and_then(|rest| rest.split_once(", a "))
        .map_or("", |(name, _)| name)
}

/// The names of the tools the request offers.
fn offered(body: &Value) -> Vec<&str> {
    body["tools"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|t| t["function"]["name"].as_str())
        .collect()
}

/// One call of the step so far, as the wire tells it: the tool called (its arguments checked
/// to be a JSON string) and the tool message that answered it.
struct Past {
    tool: String,
    output: String,
}

/// The step's question (the last user message that asks to carry out a step) and the calls
/// made and results received since it.
fn step_so_far(body: &Value) -> Result<(String, Vec<Past>), String> {
    let messages = messages(body);
    let Some(at) = messages.iter().rposition(|m| {
        m["role"] == "user"
            && m["content"].as_str().is_some_and(|c| c.starts_with("Carry out step "))
    }) else {
        let question = messages
            .iter()
            .rev()
            .find(|m| m["role"] == "user")
            .and_then(|m| m["content"].as_str())
            .unwrap_or_default();
        return Err(format!("not a step's question: {question:?}"));
    };
    let question = messages[at]["content"].as_str().unwrap_or_default();
    // "Carry out step <id> of task <task>: <description>\n..."
    let description = question
        .lines()
        .next()
        .filter(|l| l.starts_with("Carry out step "))
        .and_then(|l| l.split_once(": "))
        .map(|(_, d)| d.to_owned())
        .ok_or_else(|| format!("not a step's question: {question:?}"))?;
    let mut past: Vec<Past> = Vec::new();
    let mut pending: Vec<(String, String)> = Vec::new(); // (call id, tool)
    for m in &messages[at + 1..] {
        match m["role"].as_str() {
            Some("assistant") => {
                for c in m["tool_calls"].as_array().into_iter().flatten() {
                    let args = c["function"]["arguments"].as_str().unwrap_or_default();
                    serde_json::from_str::<Value>(args)
                        .map_err(|e| format!("arguments not a JSON string ({e}): {c}"))?;
                    pending.push((
                        c["id"].as_str().unwrap_or_default().to_owned(),
                        c["function"]["name"].as_str().unwrap_or_default().to_owned(),
                    ));
                }
            }
            Some("tool") => {
                let id = m["tool_call_id"].as_str().unwrap_or_default();
                let Some(i) = pending.iter().position(|(p, _)| p == id) else {
                    return Err(format!("a tool message answering no call: {m}"));
                };
                let (_, tool) = pending.remove(i);
                let output = m["content"].as_str().unwrap_or_default().to_owned();
                past.push(Past { tool, output });
            }
            // What reached the agent meanwhile: a worker's results.
            Some("user") => {
                let content = m["content"].as_str().unwrap_or_default();
                let Some(rest) = content.strip_prefix("[return_results] ") else {
                    return Err(format!("an unexpected user message in the loop: {content:?}"));
                };
                past.push(Past { tool: RETURN_RESULTS.into(), output: rest.to_owned() });
            }
            other => return Err(format!("unexpected {other:?} message after the question")),
        }
    }
    if !pending.is_empty() {
        return Err("a tool call without its answer".into());
    }
    Ok((description, past))
}

fn count(past: &[Past], tool: &str) -> usize {
    past.iter().filter(|p| p.tool == tool).count()
}

/// A lead of code: two coders, then (their results in) a tester, then done. Finishing while
/// workers still work is deferred by the runtime; the lead is asked again as results arrive.
fn code_lead(past: &[Past]) -> Result<Choice, String> {
    match (count(past, SPAWN_AGENT), count(past, RETURN_RESULTS)) {
        (0, _) => call(
            SPAWN_AGENT,
            json!({"role_name": "coder", "task_prompt": "write add.sh: print the sum of two numbers"}),
        ),
        (1, _) => call(
            SPAWN_AGENT,
            json!({"role_name": "coder", "task_prompt": "write test_add.sh: check add.sh 2 3 prints 5"}),
        ),
        (2, r) if r < 2 => finish("waiting for the coders"),
        (2, _) => call(
            SPAWN_AGENT,
            json!({"role_name": "tester", "task_prompt": "run the tests with shell"}),
        ),
        (3, r) if r < 3 => finish("waiting for the tester"),
        _ => finish("add.sh written and its test passes"),
    }
}

fn docs_lead(past: &[Past]) -> Result<Choice, String> {
    match (count(past, SPAWN_AGENT), count(past, RETURN_RESULTS)) {
        (0, _) => call(
            SPAWN_AGENT,
            json!({"role_name": "writer", "task_prompt": "write README.md for add.sh"}),
        ),
        (_, 0) => finish("waiting for the writer"),
        _ => finish("README written"),
    }
}

/// The workers, by what they were spawned for: one call, then their results.
fn worker(description: &str, past: &[Past]) -> Result<Choice, String> {
    let first = past.is_empty();
    match description {
        d if d.starts_with("write add.sh") => {
            if first {
                call("write_file", json!({"path": "add.sh", "content": "echo $(($1 + $2))\n"}))
            } else {
                results("success", "wrote add.sh", &[("add.sh", "created")])
            }
        }
        d if d.starts_with("write test_add.sh") => {
            if first {
                call(
                    "write_file",
                    json!({"path": "test_add.sh", "content": "[ \"$(sh add.sh 2 3)\" = 5 ] && echo PASS\n"}),
                )
            } else {
                results("success", "wrote test_add.sh", &[("test_add.sh", "created")])
            }
        }
        d if d.starts_with("run the tests") => {
            if first {
                call("shell", json!({"command": "sh test_add.sh"}))
            } else {
                let ran = &past[0].output;
                let passed = ran.starts_with("ok") && ran.contains("PASS");
                results(
                    if passed { "success" } else { "failure" },
                    &format!("tests: {}", if passed { "PASS" } else { ran.as_str() }),
                    &[("test_add.sh", "referenced")],
                )
            }
        }
        d if d.starts_with("write README.md") => {
            if first {
                call(
                    "write_file",
                    json!({"path": "README.md", "content": "# add\n\nsh add.sh 2 3\n"}),
                )
            } else {
                results("success", "wrote README.md", &[("README.md", "created")])
            }
        }
        other => Err(format!("unexpected worker task {other:?}")),
    }
}

/// The plan: a lead for code and one for docs, one goal step each.
fn plan(body: &Value) -> Result<Choice, String> {
    let schema = &body["response_format"]["json_schema"]["schema"];
    let lead_roles = &schema["properties"]["leads"]["items"]["properties"]["role"]["enum"];
    if *lead_roles != json!(["code_lead", "docs_lead"]) {
        return Err(format!("the plan schema offers the lead roles {lead_roles}"));
    }
    Ok(Choice::Text(json!({
        "leads": [
            {"role": "code_lead", "domain": "code"},
            {"role": "docs_lead", "domain": "docs"}
        ],
        "steps": [
            {
                "id": "program",
                "description": "write add.sh and its test, and run the test",
                "domain": "code",
                "role": "coder",
                "after": [],
                "acceptance": "sh test_add.sh prints PASS"
            },
            {
                "id": "readme",
                "description": "write README.md",
                "domain": "docs",
                "role": "writer",
                "after": [],
                "acceptance": "README.md says how to run add.sh"
            }
        ]
    })))
}

/// The fake model's choice for one request body.
fn choose(body: &Value) -> Result<Choice, String> {
    if let Some(name) = decision(body) {
        let schema = &body["response_format"]["json_schema"]["schema"];
        return match name {
            "plan" => plan(body),
            "review" => Ok(Choice::Text(json!({"verdict": "sign", "reason": "the plan is sound"}))),
            "judge" => {
                let failed = last_of(body, "user").contains(": failed");
                Ok(Choice::Text(json!({"complete": !failed, "summary": "judged from the results"})))
            }
            "answer" => Ok(Choice::Text(json!({"reply": "Understood; working on it."}))),
            "vote" => Ok(Choice::Text(
                json!({"choice": schema["properties"]["choice"]["enum"][0], "reason": "first"}),
            )),
            other => Err(format!("unexpected decision {other:?}")),
        };
    }
    let tools = offered(body);
    if tools.is_empty() {
        return Err("neither a decision nor a tool-loop request".into());
    }
    if body["tool_choice"] != "required" || tools.last() != Some(&FINISH_TOOL) {
        return Err(format!(
            "a tool loop must require a tool and offer {FINISH_TOOL} last: {tools:?}"
        ));
    }
    let (description, past) = step_so_far(body)?;
    let choice = match speaker(body) {
        "code_lead" => code_lead(&past),
        "docs_lead" => docs_lead(&past),
        "coder" | "tester" | "writer" => worker(&description, &past),
        other => Err(format!("unexpected agent {other:?} in the tool loop")),
    }?;
    if let Choice::Call(tool, _) = &choice
        && !tools.contains(tool)
    {
        return Err(format!(
            "{} would call `{tool}`, which is not offered: {tools:?}",
            speaker(body)
        ));
    }
    Ok(choice)
}

/// The fake model behind the server: an OpenAI chat completion for every request it
/// understands; for anything else a 400 and a note in `problems`.
fn respond(request: &Recorded, problems: &Mutex<Vec<String>>, ids: &AtomicUsize) -> Reply {
    let body: Value = if request.method == "POST" && request.path == "/v1/chat/completions" {
        request.json()
    } else {
        Value::Null
    };
    let choice = if body.is_null() {
        Err(format!("{} {}", request.method, request.path))
    } else if request.header("authorization") != Some(format!("Bearer {KEY}").as_str()) {
        Err("no bearer key".to_owned())
    } else {
        choose(&body)
    };
    let message = match choice {
        Ok(Choice::Text(answer)) => json!({"role": "assistant", "content": answer.to_string()}),
        Ok(Choice::Call(tool, args)) => {
            let id = format!("call_{}", ids.fetch_add(1, Ordering::Relaxed));
            json!({
                "role": "assistant",
                "content": null,
                "tool_calls": [{
                    "id": id,
                    "type": "function",
                    "function": {"name": tool, "arguments": args.to_string()}
                }]
            })
        }
        Err(problem) => {
            let error = json!({"error": {"message": problem, "type": "invalid_request_error"}});
            problems.lock().unwrap().push(format!("{problem}\nrequest: {body}"));
            return Reply::json(400, error);
        }
    };
    Reply::json(
        200,
        json!({
            "id": "chatcmpl-wire",
            "object": "chat.completion",
            "model": "gpt-wire",
            "choices": [{"index": 0, "message": message, "finish_reason": "stop"}],
            "usage": {
                "prompt_tokens": TOKENS_IN,
                "completion_tokens": TOKENS_OUT,
                "total_tokens": TOKENS_IN + TOKENS_OUT
            }
        }),
    )
}

// ---------------------------------------------------------------------------------------------
// The test.
// ---------------------------------------------------------------------------------------------

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
    let problems = Arc::new(Mutex::new(Vec::<String>::new()));
    let ids = AtomicUsize::new(1);
    let noted = problems.clone();
    let server = TestServer::responding(move |request| respond(request, &noted, &ids)).await;

    let dir = tempfile::tempdir().unwrap();
    let provider = OpenAiProvider::new(OpenAiConfig {
        base_url: format!("{}/v1", server.url()),
        model: "gpt-wire".to_owned(),
        api_key: Some(KEY.to_owned()),
        timeout: Duration::from_secs(10),
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
    let problems = problems.lock().unwrap().clone();
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
    let requests = server.requests();
    let bodies: Vec<Value> = requests.iter().map(Recorded::json).collect();
    let asked = |name: &str| bodies.iter().filter(|b| decision(b) == Some(name)).count();
    assert_eq!(asked("plan"), 1);
    assert!(bodies.iter().any(|b| decision(b) == Some("plan") && speaker(b) == "Power power_a"));
    assert_eq!(asked("review"), 2, "the two other powers reviewed the plan");
    assert_eq!(asked("judge"), 1);

    // The leads were offered the agent tools with their seed schemas, the workers their role's
    // tools (described from the registry) and `return_results`; everyone `finish_subtask`.
    let seed = |name: &str| supervisor_tool_spec(name).unwrap().parameters;
    for (who, workspace) in
        [("code_lead", &[][..]), ("docs_lead", &[][..])].into_iter().chain(WORKER_TOOLS)
    {
        let theirs: Vec<&Value> = bodies.iter().filter(|b| speaker(b) == who).collect();
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

    // Each lead's finish while its workers worked was deferred, and the workers' results came
    // back to it as user messages (not as calls it never made).
    for (lead, worker) in [("code_lead", "coder-1"), ("docs_lead", "writer-1")] {
        let told = bodies.iter().any(|b| {
            speaker(b) == lead
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
    let n = requests.len() as u64;
    assert_eq!(report.total.calls, n);
    assert_eq!(report.total.failed_calls, 0);
    assert_eq!(report.total.input_tokens, TOKENS_IN * n);
    assert_eq!(report.total.output_tokens, TOKENS_OUT * n);
}
