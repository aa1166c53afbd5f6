//! The embedded model's speed as Strata sees it against llama.cpp's own counters.
//!
//! Starts a [`LocalProvider`] on the fetched Gemma 3 270M (from the default model directory),
//! makes one warm-up call, then [`CALLS`] decisions through Strata: a top power's
//! `LlmReasoner::review_decision` of a plan (system prompt, conversation, budget reservation,
//! retry wrapper, the grammar-constrained call, validation, the ledger), one at a time, timing
//! each. A thin wrapper around the provider keeps llama.cpp's counters of every call it made.
//! For the same calls it adds up those counters
//! ([`EngineTiming`](agent_llm::EngineTiming): prompt and generation tokens and milliseconds),
//! and compares Strata's end-to-end rate (answer tokens per second of wall time, the caller's
//! view: queueing, tokenising, prompt, grammar sampling, decoding, the reply) with the engine's.
//! Prints a table and, under `cargo bench`, writes the figures to
//! `<target>/strata-bench/local_model.json`, where `cargo xtask bench` picks them up. Without
//! `--bench` (as a test) it makes a single call.
#![allow(missing_docs)]
#![allow(clippy::unwrap_used, clippy::expect_used, reason = "benchmarks")]
#![allow(
    clippy::print_stdout,
    reason = "the figures are printed next to the other benches' output"
)]

use std::path::PathBuf;
use std::time::{Duration, Instant};

use std::sync::{Arc, Mutex};

use agent_core::{Persona, Reasoner};
use agent_llm::{
    Budget, ChatMessage, ChatRequest, ChatResponse, ConversationLimits, Conversations,
    EngineTiming, LlmReasoner, LocalConfig, LocalProvider, PriceTable, Provider, ProviderError,
    ResponseFormat, UsageLedger,
};
use agent_state::{AgentConfig, AgentId, AgentLayer, Capability, Decision, DecisionId, Timestamp};
use async_trait::async_trait;
use serde_json::json;

/// The local provider, keeping the engine's counters of every call.
struct Recording {
    inner: LocalProvider,
    timings: Mutex<Vec<(u64, EngineTiming)>>,
}

#[async_trait]
impl Provider for Recording {
    fn name(&self) -> &str {
        self.inner.name()
    }

    fn model(&self) -> &str {
        self.inner.model()
    }

    async fn complete(&self, request: &ChatRequest) -> Result<ChatResponse, ProviderError> {
        let response = self.inner.complete(request).await?;
        let timing = response.timing.expect("the local provider reports engine timing");
        self.timings.lock().unwrap().push((response.usage.output_tokens, timing));
        Ok(response)
    }
}

/// A plan for `statement`, as a top power gets it to sign.
fn plan(n: usize, statement: &str) -> Decision {
    let content = json!({
        "task_id": format!("t{n}"),
        "goal": statement,
        "steps": [{"id": "write", "tool": "write_file", "args": {"path": "note.txt", "content": statement}}]
    });
    Decision::propose(
        DecisionId::from_u128(n as u128 + 1),
        AgentId::new("top-a"),
        content,
        vec![AgentId::new("top-b")],
        Timestamp(1_700_000_000_000),
    )
    .unwrap()
}

fn power(n: usize) -> AgentConfig {
    AgentConfig {
        id: AgentId::new(format!("top-{n}")),
        name: format!("Power {n}"),
        layer: AgentLayer::Top,
        role: "reviews plans for safety".into(),
        supervisor: None,
        subordinates: Vec::new(),
        capabilities: vec![Capability::Review].into(),
        model: None,
        temperature: None,
        max_retries: 1,
        timeout_ms: 60_000,
    }
}

/// Measured calls.
const CALLS: usize = 8;
/// The figures' id in the `cargo xtask bench` table.
const ID: &str = "agent-llm/local_model";

const STATEMENTS: [&str; CALLS] = [
    "Water boils at 100 degrees Celsius at sea level.",
    "The moon is made of cheese.",
    "Paris is the capital of France.",
    "Cats are a kind of fish.",
    "Two plus two is four.",
    "The Pacific is the smallest ocean.",
    "Rust is a programming language.",
    "Ice is warmer than steam.",
];

fn request(statement: &str) -> ChatRequest {
    ChatRequest {
        system: "You check statements. For each statement, say whether it is true or false, \
                 and give a short reason."
            .to_owned(),
        messages: vec![ChatMessage::user(format!("Statement: {statement}"))],
        response: ResponseFormat::Json {
            name: "verdict".to_owned(),
            schema: json!({
                "type": "object",
                "properties": {
                    "verdict": { "enum": ["true", "false"] },
                    "reason": { "type": "string", "maxLength": 120 }
                },
                "required": ["verdict", "reason"]
            }),
        },
        max_tokens: 96,
        ..ChatRequest::default()
    }
}

/// One measured call.
struct Call {
    wall: Duration,
    input: u64,
    output: u64,
    prompt_tokens: u64,
    prompt_ms: f64,
    generated_tokens: u64,
    generate_ms: f64,
}

fn main() {
    let bench_mode = std::env::args().any(|arg| arg == "--bench");
    let calls = if bench_mode { CALLS } else { 1 };
    let rt = tokio::runtime::Builder::new_multi_thread().enable_all().build().unwrap();
    let config = LocalConfig::default_model().unwrap();
    let started = Instant::now();
    let provider = rt.block_on(LocalProvider::start(config)).unwrap_or_else(|error| {
        panic!("{error} (fetch the model with `cargo run -p agent-cli --features local -- model fetch`)")
    });
    let start_ms = started.elapsed().as_secs_f64() * 1e3;
    let startup = provider.startup();

    rt.block_on(provider.complete(&request("Snow is white."))).unwrap(); // warm-up
    let recording = Arc::new(Recording { inner: provider, timings: Mutex::new(Vec::new()) });
    let ledger = Arc::new(UsageLedger::new(PriceTable::new(), Budget::default()));
    let conversations = Arc::new(Conversations::in_memory(ConversationLimits::default()));
    let reasoner = LlmReasoner::new(recording.clone(), ledger.clone(), conversations);
    let mut measured = Vec::new();
    for (n, statement) in STATEMENTS.iter().take(calls).enumerate() {
        // A power of its own per call, so every prompt starts without history.
        let config = power(n);
        let who = Persona {
            config: &config,
            system_prompt: "You are a top-layer power.",
            tools: &[],
            roles: &[],
            domains: &[],
        };
        let decision = plan(n, statement);
        let before = recording.timings.lock().unwrap().len();
        let began = Instant::now();
        rt.block_on(reasoner.review_decision(who, &decision)).unwrap();
        let wall = began.elapsed();
        let timings = recording.timings.lock().unwrap()[before..].to_vec();
        let add = |f: fn(&EngineTiming) -> f64| timings.iter().map(|(_, t)| f(t)).sum::<f64>();
        measured.push(Call {
            wall,
            input: add(|t| t.prompt_tokens as f64) as u64,
            output: timings.iter().map(|(out, _)| out).sum(),
            prompt_tokens: add(|t| t.prompt_tokens as f64) as u64,
            prompt_ms: add(|t| t.prompt_ms),
            generated_tokens: add(|t| t.generated_tokens as f64) as u64,
            generate_ms: add(|t| t.generate_ms),
        });
    }
    let ledgered = ledger.report().total;
    println!(
        "{ID}: the ledger counted {} calls, {} prompt and {} answer tokens",
        ledgered.calls, ledgered.input_tokens, ledgered.output_tokens
    );

    println!(
        "{:>4} {:>9} {:>7} {:>7} {:>10} {:>10} {:>9} {:>9}",
        "call", "wall ms", "in", "out", "prompt ms", "gen ms", "e2e tok/s", "engine %"
    );
    for (i, call) in measured.iter().enumerate() {
        let wall_ms = call.wall.as_secs_f64() * 1e3;
        println!(
            "{:>4} {:>9.1} {:>7} {:>7} {:>10.1} {:>10.1} {:>9.1} {:>8.0}%",
            i + 1,
            wall_ms,
            call.input,
            call.output,
            call.prompt_ms,
            call.generate_ms,
            call.output as f64 / call.wall.as_secs_f64(),
            (call.prompt_ms + call.generate_ms) / wall_ms * 100.0,
        );
    }
    let sum = |f: fn(&Call) -> f64| measured.iter().map(f).sum::<f64>();
    let wall_ms = sum(|c| c.wall.as_secs_f64() * 1e3);
    let (prompt_ms, generate_ms) = (sum(|c| c.prompt_ms), sum(|c| c.generate_ms));
    let output = sum(|c| c.output as f64);
    let input = sum(|c| c.input as f64);
    // The engine's rates from its own counters.
    let engine_generate_tps = sum(|c| c.generated_tokens as f64) / generate_ms * 1e3;
    let engine_prompt_tps = sum(|c| c.prompt_tokens as f64) / prompt_ms * 1e3;
    // Answer tokens per second: of the caller's wall time, and of the engine's own time.
    let e2e_tps = output / wall_ms * 1e3;
    let engine_e2e_tps = output / (prompt_ms + generate_ms) * 1e3;
    let engine_share = (prompt_ms + generate_ms) / wall_ms * 100.0;
    let mean_ms = wall_ms / measured.len() as f64;
    println!(
        "{ID}: {} calls, {mean_ms:.0} ms per call ({input:.0} prompt and {output:.0} answer tokens in all)",
        measured.len()
    );
    println!(
        "{ID}: engine generates {engine_generate_tps:.1} tokens/s and reads prompts at {engine_prompt_tps:.0} tokens/s"
    );
    println!(
        "{ID}: answer tokens/s end to end {e2e_tps:.1}, by the engine's time {engine_e2e_tps:.1}: the engine's counters cover {engine_share:.0}% of the wall time"
    );
    println!(
        "{ID}: start {start_ms:.0} ms (verify {} ms, load {} ms)",
        startup.verify.as_millis(),
        startup.load.as_millis()
    );
    if bench_mode {
        let figure = json!({
            "id": ID,
            "calls": measured.len(),
            "ms_per_call": mean_ms.round(),
            "e2e_tokens_per_s": (e2e_tps * 10.0).round() / 10.0,
            "engine_e2e_tokens_per_s": (engine_e2e_tps * 10.0).round() / 10.0,
            "engine_generate_tokens_per_s": (engine_generate_tps * 10.0).round() / 10.0,
            "engine_prompt_tokens_per_s": engine_prompt_tps.round(),
            "engine_share_percent": engine_share.round(),
            "verify_ms": startup.verify.as_millis() as f64,
            "load_ms": startup.load.as_millis() as f64,
        });
        let dir = target_dir().join("strata-bench");
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("local_model.json");
        std::fs::write(&path, format!("{figure}\n")).unwrap();
        println!("{ID}: written to {}", path.display());
    }
}

/// Cargo's target directory: `CARGO_TARGET_DIR` when set (relative to the workspace root when
/// relative), else `target/` in the workspace root, the nearest directory up from here with a
/// `Cargo.lock`.
fn target_dir() -> PathBuf {
    let here = std::env::current_dir().unwrap();
    let root = here
        .ancestors()
        .find(|dir| dir.join("Cargo.lock").is_file())
        .unwrap_or(&here)
        .to_path_buf();
    match std::env::var_os("CARGO_TARGET_DIR") {
        Some(dir) => root.join(dir),
        None => root.join("target"),
    }
}
