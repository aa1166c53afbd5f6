//! `--reasoner openai` against a real OpenAI-compatible server: llama-cpp-python's
//! (`llama-cpp-python[server]` 0.3.36 from PyPI, which `cargo xtask ci`'s setup installs into a
//! virtual environment, see `xtask/src/pyenv.rs`) serving the embedded model's GGUF file on
//! loopback. With `--small-model` (the README's setting for a model this small) each request is
//! the embedded model's transcript on `/completions` under the answer's grammar, which the run's
//! pre-run check must find the server keeps; the run must complete the hello plan. Asked through
//! chat completions instead, the server refuses `response_format: json_schema` with an HTTP 500,
//! and the provider's check must find the mode it takes (`json_object`).
//!
//! Needs the server (`STRATA_LLAMA_SERVER_PYTHON`, or the setup's default environment) and the
//! model file (`strata model fetch`): without them the test fails, saying how to get them.

use std::net::TcpListener;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use crate::support::Scratch;

/// The llama-cpp-python release the setup installs (`xtask/src/pyenv.rs`).
const VERSION: &str = "0.3.36";

/// `${XDG_CACHE_HOME:-$HOME/.cache}/strata`.
fn cache() -> PathBuf {
    std::env::var_os("XDG_CACHE_HOME")
        .filter(|v| !v.is_empty())
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cache")))
        .expect("neither XDG_CACHE_HOME nor HOME is set")
        .join("strata")
}

/// The server's Python.
fn python() -> PathBuf {
    std::env::var_os("STRATA_LLAMA_SERVER_PYTHON").map(PathBuf::from).unwrap_or_else(|| {
        cache().join(format!("llama-cpp-python-{VERSION}")).join("bin").join("python")
    })
}

/// The embedded model's file, where `strata model fetch` puts it.
fn model_file() -> PathBuf {
    let dir = agent_llm::default_model_dir().expect("neither STRATA_MODEL_DIR nor HOME is set");
    agent_llm::GEMMA3_270M_Q4_K_M.path_in(&dir)
}

/// The running server, killed when dropped.
struct LlamaServer {
    child: Child,
    port: u16,
}

impl LlamaServer {
    /// Starts the server on a free loopback port and waits until it lists its model.
    fn start(model_alias: &str) -> Self {
        let python = python();
        assert!(
            python.is_file(),
            "llama-cpp-python's server is not installed at {}: `cargo xtask ci` installs it in its setup step (or set STRATA_LLAMA_SERVER_PYTHON)",
            python.display()
        );
        let model = model_file();
        assert!(
            model.is_file(),
            "the model file {} is missing: run `cargo run -p agent-cli -- model fetch`",
            model.display()
        );
        let port = TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
        let child = Command::new(&python)
            .args(["-m", "llama_cpp.server", "--model"])
            .arg(&model)
            .args(["--model_alias", model_alias, "--host", "127.0.0.1", "--port"])
            .arg(port.to_string())
            .args(["--n_ctx", "4096", "--n_threads", "2", "--verbose", "false"])
            // Threads that sleep while they wait: spinning ones slow everything down on a
            // machine busy with other tests.
            .env("OMP_WAIT_POLICY", "PASSIVE")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start {}: {e}", python.display()));
        let mut server = Self { child, port };
        let started = Instant::now();
        loop {
            if let Ok(Some(status)) = server.child.try_wait() {
                panic!("llama-cpp-python's server exited at start ({status})");
            }
            if server.lists_models() {
                return server;
            }
            assert!(started.elapsed() < Duration::from_secs(120), "the server did not start");
            std::thread::sleep(Duration::from_millis(200));
        }
    }

    fn base_url(&self) -> String {
        format!("http://127.0.0.1:{}/v1", self.port)
    }

    /// Whether `GET /v1/models` answers 200.
    fn lists_models(&self) -> bool {
        use std::io::{Read, Write};
        let Ok(mut stream) = std::net::TcpStream::connect(("127.0.0.1", self.port)) else {
            return false;
        };
        let request = "GET /v1/models HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n";
        let mut answer = String::new();
        stream.write_all(request.as_bytes()).is_ok()
            && stream.read_to_string(&mut answer).is_ok()
            && answer.starts_with("HTTP/1.1 200")
    }
}

impl Drop for LlamaServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

#[test]
fn the_hello_plan_runs_through_llama_cpp_python_asked_as_the_embedded_model_is() {
    let server = LlamaServer::start("gemma-3-270m");
    let s = Scratch::with_example();
    // The README's settings for a small model behind a server: `--reasoner openai`,
    // `--base-url`, `--model` and `--small-model` (which also decodes greedily), nothing in
    // the team file, no raised limits.
    let base_url = server.base_url();
    let args = [
        "run",
        "plan.toml",
        "--team",
        "team.toml",
        "--reasoner",
        "openai",
        "--base-url",
        &base_url,
        "--model",
        "gemma-3-270m",
        "--small-model",
        "--heartbeat",
        "250ms",
        "--data",
        "D",
        "--workspace",
        "W",
        "--run-id",
        "r1",
        "--quiet",
    ];
    // No key: the server is on loopback.
    let mut command = s.command(&args);
    command.env_remove("OPENAI_API_KEY").env_remove("OPENAI_BASE_URL");
    let out = crate::support::Out::of(&args, &mut command);
    out.code(0).stdout_has(&["task `hello` succeeded"]);
    assert_eq!(s.read("W/hello.txt"), "hello, strata\n");
    assert_eq!(s.read("W/notes/plan.md"), "# Plan\n- greet\n- measure\n");

    // How it was asked: `--small-model` sends each request as the embedded model's transcript
    // to `/completions`, under the answer's grammar, which the pre-run check found the server
    // keeps; so no structured output mode was refused and no tool call emulated.
    let usage = s.strata(&["inspect", "r1", "usage", "--data", "D", "--json"]).code(0).json();
    let report = &usage["usage"];
    let choice = &report["structured_output"]["openai/gemma-3-270m"];
    assert_eq!(choice["completions"], true, "{report}");
    assert_eq!(choice["rejected"], serde_json::json!([]), "{report}");
    assert_eq!(choice["tool_calls_emulated"], false, "{report}");
    for (agent, tally) in report["by_agent"].as_object().unwrap() {
        if tally["calls"].as_u64().unwrap() > 0 {
            assert!(tally["input_tokens"].as_u64().unwrap() > 0, "{agent}: {report}");
            assert!(tally["output_tokens"].as_u64().unwrap() > 0, "{agent}: {report}");
        }
    }
    let calls = report["by_model"]["openai/gemma-3-270m"]["calls"].as_u64().unwrap();
    assert!(calls >= 6, "every layer asked the model: {report}");
    assert!(report["total"]["output_tokens"].as_u64().unwrap() > 0, "{report}");
    for layer in ["top", "mid", "bottom"] {
        assert!(report["by_layer"][layer]["calls"].as_u64().unwrap() > 0, "{layer}: {report}");
    }
    s.strata(&["verify", "r1", "--data", "D"]).code(0);

    // The same server through chat completions (a provider without `completions`): the
    // pre-run check finds the mode it takes, and that it streams without the usage.
    let chat = agent_llm::OpenAiProvider::new(agent_llm::OpenAiConfig::new(
        base_url.clone(),
        "gemma-3-270m",
    ))
    .unwrap();
    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    runtime.block_on(agent_llm::Provider::preflight(&chat)).unwrap();
    let choice = agent_llm::Provider::structured_choice(&chat).unwrap();
    assert_eq!(choice.mode, Some(agent_llm::StructuredMode::JsonObject), "{choice}");
    assert_eq!(choice.rejected[0].mode, agent_llm::StructuredMode::JsonSchema, "{choice}");
    assert!(choice.rejected[0].reason.contains("HTTP 500"), "{choice}");
    assert!(choice.stream_without_usage, "{choice}");
    assert_eq!(choice.completions, None, "{choice}");
}
