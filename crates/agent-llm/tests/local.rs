//! The embedded model end to end: the real Gemma 3 270M file from the default model directory
//! (`strata model fetch` puts it there; CI fetches it before the tests).
#![allow(clippy::unwrap_used, clippy::expect_used, reason = "tests")]

use std::sync::Arc;

use agent_llm::{
    ChatMessage, ChatRequest, LocalConfig, LocalError, LocalProvider, ModelFileError, Provider,
    ResponseFormat, ToolSpec, verify_model,
};
use serde_json::{Value, json};

/// The provider on the fetched model; fails, saying how to fetch it, when it is missing.
///
/// One inference thread: the test runner runs tests side by side, and llama.cpp's threads spin
/// while they wait for each other, so more threads than free cores slow every test down.
async fn provider() -> LocalProvider {
    let config =
        LocalConfig { threads: 1, ..LocalConfig::default_model().expect("no model directory") };
    if let Err(error) = std::fs::metadata(&config.model_path) {
        panic!(
            "the embedded model is not at {} ({error}): fetch it with \
             `cargo run -p agent-cli --features local -- model fetch` (or set STRATA_MODEL_DIR)",
            config.model_path.display()
        );
    }
    LocalProvider::start(config).await.unwrap()
}

fn verdict_request(statement: &str) -> ChatRequest {
    ChatRequest {
        system: "You check statements. Say whether each statement is true or false.".to_owned(),
        messages: vec![ChatMessage::user(format!("Statement: {statement}"))],
        response: ResponseFormat::Json {
            name: "verdict".to_owned(),
            schema: json!({
                "type": "object",
                "properties": { "verdict": { "enum": ["true", "false"] } },
                "required": ["verdict"]
            }),
        },
        max_tokens: 32,
        ..ChatRequest::default()
    }
}

/// The answer is JSON of the schema's shape.
fn check_verdict(text: &str) {
    let value: Value =
        serde_json::from_str(text).unwrap_or_else(|e| panic!("not JSON ({e}): {text}"));
    let object = value.as_object().unwrap_or_else(|| panic!("not an object: {text}"));
    assert_eq!(object.len(), 1, "{text}");
    let verdict = object["verdict"].as_str().unwrap_or_else(|| panic!("no verdict: {text}"));
    assert!(["true", "false"].contains(&verdict), "{text}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_json_request_gets_json_valid_for_its_schema_with_usage_and_engine_timing() {
    let provider = provider().await;
    assert_eq!((provider.name(), provider.model()), ("local", "gemma-3-270m-q4_k_m"));
    let response = provider.complete(&verdict_request("Water is wet.")).await.unwrap();
    check_verdict(&response.text);
    assert!(response.tool_calls.is_empty());
    assert!(response.usage.input_tokens > 10, "{:?}", response.usage);
    assert!(response.usage.output_tokens >= 4, "{:?}", response.usage);
    let timing = response.timing.expect("the engine's timing");
    assert_eq!(timing.prompt_tokens, response.usage.input_tokens, "{timing:?}");
    assert!(timing.prompt_ms > 0.0 && timing.generate_ms > 0.0, "{timing:?}");
    // Each generated token is fed back through the model, except the last when the answer is
    // complete without asking the model for another.
    let fed = timing.generated_tokens;
    assert!(
        fed + 1 == response.usage.output_tokens || fed == response.usage.output_tokens,
        "{timing:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tool_request_gets_a_call_to_an_offered_tool_with_json_arguments() {
    let provider = provider().await;
    let weather = ToolSpec {
        name: "get_weather".to_owned(),
        description: "Get the current weather in a city.".to_owned(),
        parameters: json!({
            "type": "object",
            "properties": { "city": { "type": "string", "maxLength": 40 } },
            "required": ["city"]
        }),
    };
    let clock = ToolSpec {
        name: "get_time".to_owned(),
        description: "Get the current time in a time zone.".to_owned(),
        parameters: json!({
            "type": "object",
            "properties": { "zone": { "type": "string", "maxLength": 40 } },
            "required": ["zone"]
        }),
    };
    let request = ChatRequest {
        system: "You are an assistant that answers by calling tools.".to_owned(),
        messages: vec![ChatMessage::user("What is the weather in Paris?")],
        tools: vec![weather, clock],
        require_tool: true,
        max_tokens: 64,
        ..ChatRequest::default()
    };
    let response = provider.complete(&request).await.unwrap();
    assert_eq!(response.tool_calls.len(), 1, "{response:?}");
    let call = &response.tool_calls[0];
    assert_eq!(call.id, "local-1");
    assert!(["get_weather", "get_time"].contains(&call.name.as_str()), "{call:?}");
    let arguments: Value = serde_json::from_str(&call.arguments).unwrap();
    let key = if call.name == "get_weather" { "city" } else { "zone" };
    assert!(arguments[key].is_string(), "{call:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_requests_both_complete() {
    let provider = Arc::new(provider().await);
    let (a, b) = tokio::join!(
        {
            let provider = provider.clone();
            async move { provider.complete(&verdict_request("Fire is cold.")).await }
        },
        {
            let provider = provider.clone();
            async move { provider.complete(&verdict_request("The sun is a star.")).await }
        }
    );
    check_verdict(&a.unwrap().text);
    check_verdict(&b.unwrap().text);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_providers_in_one_process_both_answer() {
    // llama.cpp's backend is initialised once per process; the second provider shares it.
    let (first, second) = tokio::join!(provider(), provider());
    let (grass, stones) = (verdict_request("Grass is green."), verdict_request("Stones can fly."));
    let (a, b) = tokio::join!(first.complete(&grass), second.complete(&stones));
    check_verdict(&a.unwrap().text);
    check_verdict(&b.unwrap().text);
    drop(first);
    check_verdict(&second.complete(&verdict_request("Salt is sweet.")).await.unwrap().text);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_text_request_stops_before_the_next_turn() {
    let provider = provider().await;
    let request = ChatRequest {
        system: "A friendly conversation.".to_owned(),
        messages: vec![ChatMessage::user("Hello! What colour is the sky?")],
        max_tokens: 48,
        ..ChatRequest::default()
    };
    let response = provider.complete(&request).await.unwrap();
    assert!(!response.text.contains("\nUser:"), "{response:?}");
    assert!(response.usage.output_tokens <= 48, "{response:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_long_conversation_drops_old_messages_to_fit_the_context() {
    let config =
        LocalConfig { context_tokens: 256, threads: 1, ..LocalConfig::default_model().unwrap() };
    let provider = LocalProvider::start(config).await.unwrap();
    let mut request = verdict_request("Snow is white.");
    let filler = "This is an old message that no longer matters. ".repeat(4);
    request.messages =
        (0..20).map(|_| ChatMessage::user(filler.clone())).chain(request.messages).collect();
    let response = provider.complete(&request).await.unwrap();
    check_verdict(&response.text);
    assert!(response.usage.input_tokens + response.usage.output_tokens <= 256, "{response:?}");

    // The last message alone cannot fit: a clear engine error.
    request.messages = vec![ChatMessage::user(filler.repeat(20))];
    let error = provider.complete(&request).await.unwrap_err();
    assert_eq!(error.kind, agent_llm::ProviderErrorKind::Engine);
    assert!(error.to_string().contains("context"), "{error}");
}

#[tokio::test]
async fn a_bad_model_path_is_a_clear_error() {
    let dir = tempfile::tempdir().unwrap();
    let missing = dir.path().join("gemma-3-270m-q4_k_m.gguf");
    let error = LocalProvider::start(LocalConfig::new(&missing)).await.unwrap_err();
    assert!(matches!(error, LocalError::ModelFile(ModelFileError::Missing { .. })), "{error:?}");
    assert!(error.to_string().contains("strata model fetch"), "{error}");

    // Without a spec to check against, a missing file is still named as missing.
    let config = LocalConfig { spec: None, ..LocalConfig::new(&missing) };
    let error = LocalProvider::start(config).await.unwrap_err();
    assert!(matches!(error, LocalError::ModelFile(ModelFileError::Missing { .. })), "{error:?}");

    // Not a GGUF file, with no spec to check it against: llama.cpp refuses it.
    let junk = dir.path().join("junk.gguf");
    std::fs::write(&junk, b"this is not a model").unwrap();
    let config = LocalConfig { spec: None, ..LocalConfig::new(&junk) };
    let error = LocalProvider::start(config).await.unwrap_err();
    assert!(matches!(error, LocalError::Load { .. }), "{error:?}");
    assert!(error.to_string().contains("junk.gguf"), "{error}");
}

#[test]
fn the_fetched_model_verifies() {
    let config = LocalConfig::default_model().unwrap();
    match verify_model(&config.model_path, &agent_llm::GEMMA3_270M_Q4_K_M) {
        Ok(()) => {}
        Err(error) => panic!("{error}"),
    }
}

/// The provider on the fetched model with the threads a 2-core machine gives it, recording the
/// usage and engine timing of each call it answers.
struct Recording {
    inner: LocalProvider,
    calls: std::sync::Mutex<Vec<(agent_llm::Usage, Option<agent_llm::EngineTiming>)>>,
}

#[async_trait::async_trait]
impl Provider for Recording {
    fn name(&self) -> &str {
        self.inner.name()
    }

    fn model(&self) -> &str {
        self.inner.model()
    }

    async fn complete(
        &self,
        request: &ChatRequest,
    ) -> Result<agent_llm::ChatResponse, agent_llm::ProviderError> {
        let response = self.inner.complete(request).await?;
        self.calls.lock().unwrap().push((response.usage, response.timing));
        Ok(response)
    }
}

/// An agent that does nothing itself: its context's reasoner is what the test calls.
struct Idle;

#[async_trait::async_trait]
impl agent_core::AgentBehavior for Idle {
    fn responsibilities(&self) -> &'static str {
        "- Approve major technical proposals and task allocations\n- Arbitrate conflicts"
    }

    async fn on_process(
        &mut self,
        _ctx: &mut agent_core::AgentContext,
        _messages: &[agent_state::Message],
        _board: &agent_state::BoardSnapshot,
    ) -> Result<(), agent_core::AgentError> {
        Ok(())
    }
}

/// Issue #32: a planning call of the embedded model, on the cores this machine has, through
/// the runtime's own limits at their defaults (`[timeouts] reasoning_ms` and `silence_ms`:
/// `ctx.reasoner()` bounds every call by them): it completes, never silent for the silence
/// limit, because the model thread reports each prompt batch and each token to the turn's
/// progress. Prints the figures the defaults are sized from.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[allow(clippy::print_stderr, reason = "its figures are what the defaults are sized from")]
async fn a_planning_call_completes_under_the_default_limits_reporting_progress_per_token() {
    use agent_state::{AgentConfig, AgentLayer, Role, RoleBook, Task, Timeouts};

    let config = LocalConfig::default_model().expect("no model directory");
    let threads = config.threads;
    let local = LocalProvider::start(config).await.unwrap();
    let provider = Arc::new(Recording { inner: local, calls: Default::default() });
    let ledger = Arc::new(agent_llm::UsageLedger::new(
        agent_llm::PriceTable::new(),
        agent_llm::Budget::default(),
    ));
    let talk = Arc::new(agent_llm::Conversations::in_memory(Default::default()));
    let reasoner = Arc::new(agent_llm::LlmReasoner::new(provider.clone(), ledger, talk));

    let dir = tempfile::tempdir().unwrap();
    let workspace = agent_core::tools::ToolContext::new(dir.path()).unwrap();
    let services = agent_pool::TeamServices::in_memory(workspace, reasoner);
    let limits = Timeouts::default();
    let deps = Arc::new(agent_core::AgentDeps {
        bus: services.bus.clone(),
        boards: services.boards.clone(),
        governance: services.governance.clone(),
        audit: services.audit.clone(),
        reasoner: services.reasoner.clone(),
        tools: services.tools.clone(),
        workspace: services.workspace.clone(),
        clock: services.clock.clone(),
        state: services.state.clone(),
        spawner: None,
        timeouts: limits,
    });
    let config = AgentConfig::new("top-a", "Power A", AgentLayer::Top);
    let mut agent = agent_core::Agent::new(config, Box::new(Idle), deps).unwrap();
    agent.initialize().await.unwrap();

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
    let roles = RoleBook::new([
        lead(
            "code_lead",
            "Leads the code: spawns a coder per piece and a tester.",
            &["coder", "tester"],
        ),
        lead("docs_lead", "Leads the documentation: spawns a writer per document.", &["writer"]),
        worker("coder", "Writes and edits source files.", &["read_file", "write_file", "list_dir"]),
        worker("tester", "Runs the tests with the shell.", &["read_file", "shell"]),
        worker("writer", "Writes documentation files.", &["read_file", "write_file"]),
    ])
    .unwrap();
    let task = Task {
        id: "t1".into(),
        goal: "Write a small Python module `stats.py` with mean and median functions, a test \
               file for it, and a README.md explaining how to use them."
            .into(),
        steps: Vec::new(),
    };

    // The turn's progress, as the scheduler gives it; sampled for its longest silence.
    let progress =
        Arc::new(agent_core::Progress::new(std::time::Duration::from_millis(limits.silence_ms)));
    progress.begin_turn();
    let sampler = {
        let progress = progress.clone();
        tokio::spawn(async move {
            let mut longest = std::time::Duration::ZERO;
            loop {
                tokio::time::sleep(std::time::Duration::from_millis(20)).await;
                longest = longest.max(progress.silent_for(tokio::time::Instant::now()));
                if !progress.in_turn() {
                    return longest;
                }
            }
        })
    };
    let started = std::time::Instant::now();
    let ctx = agent.ctx();
    let plan = agent_core::progress::scope(
        progress.clone(),
        ctx.reasoner().plan(ctx.persona(), &task, &roles),
    )
    .await;
    let took = started.elapsed();
    progress.end_turn();
    let longest_silence = sampler.await.unwrap();

    // Not cut by either limit (the plan itself may still be refused: a 270M model's plans are
    // another matter).
    if let Err(error) = &plan {
        assert!(
            !matches!(
                error,
                agent_core::ReasonError::TimedOut { .. } | agent_core::ReasonError::Silent { .. }
            ),
            "{error}"
        );
    }
    let calls = provider.calls.lock().unwrap().clone();
    assert!(!calls.is_empty(), "the model answered");
    let generated: u64 = calls.iter().map(|(usage, _)| usage.output_tokens).sum();
    assert_eq!(progress.tokens(), generated, "each token generated was reported as progress");
    for (usage, timing) in &calls {
        let timing = timing.unwrap();
        eprintln!(
            "planning call: {} prompt tokens read in {:.0} ms ({:.0} tokens/s), {} tokens \
             written in {:.0} ms ({:.1} tokens/s)",
            usage.input_tokens,
            timing.prompt_ms,
            usage.input_tokens as f64 * 1000.0 / timing.prompt_ms.max(1.0),
            usage.output_tokens,
            timing.generate_ms,
            timing.generated_tokens as f64 * 1000.0 / timing.generate_ms.max(1.0),
        );
    }
    eprintln!(
        "{} call(s) on {threads} thread(s) in {took:?}, longest silence {longest_silence:?} \
         (limits: reasoning_ms {}, silence_ms {}); plan: {}",
        calls.len(),
        limits.reasoning_ms,
        limits.silence_ms,
        match &plan {
            Ok(plan) => format!("{} step(s)", plan.steps.len()),
            Err(error) => format!("refused: {error}"),
        }
    );
}
