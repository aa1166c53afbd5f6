//! The embedded model's speed as Strata sees it against llama.cpp's own counters.
//!
//! Starts a [`LocalProvider`] on the fetched Gemma 3 270M (from the default model directory),
//! makes one warm-up call, then [`CALLS`] JSON verdict calls through [`Provider::complete`],
//! one at a time, timing each. For the same calls it adds up llama.cpp's counters
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

use agent_llm::{ChatMessage, ChatRequest, LocalConfig, LocalProvider, Provider, ResponseFormat};
use serde_json::json;

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
    let mut measured = Vec::new();
    for statement in STATEMENTS.iter().take(calls) {
        let began = Instant::now();
        let response = rt.block_on(provider.complete(&request(statement))).unwrap();
        let wall = began.elapsed();
        let timing = response.timing.expect("the local provider reports engine timing");
        serde_json::from_str::<serde_json::Value>(&response.text)
            .unwrap_or_else(|e| panic!("not JSON ({e}): {}", response.text));
        measured.push(Call {
            wall,
            input: response.usage.input_tokens,
            output: response.usage.output_tokens,
            prompt_tokens: timing.prompt_tokens,
            prompt_ms: timing.prompt_ms,
            generated_tokens: timing.generated_tokens,
            generate_ms: timing.generate_ms,
        });
    }

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
