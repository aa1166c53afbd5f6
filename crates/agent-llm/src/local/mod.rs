//! The embedded model: [`LocalProvider`], a [`Provider`] that runs a GGUF model (Gemma 3 270M by
//! default) in this process with llama.cpp, on a thread of its own.

mod closing;
mod dry;
mod engine;
#[cfg(test)]
mod tests;

use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use async_trait::async_trait;
use thiserror::Error;
use tokio::sync::{mpsc, oneshot};

use crate::transcript as prompt;

use crate::fetch::{
    GEMMA3_270M_Q4_K_M, ModelDirError, ModelFileError, ModelSpec, default_model_dir,
};
use crate::provider::{ChatRequest, ChatResponse, Provider, ProviderError, ProviderErrorKind};

/// The context size when not configured: room for a system prompt, a conversation of a few
/// dozen turns and the answer, at about 40 MB of KV cache for Gemma 3 270M.
pub const DEFAULT_CONTEXT_TOKENS: u32 = 4096;

/// How many calls may wait for the model thread before [`Provider::complete`] waits to queue.
const QUEUE: usize = 64;

/// How to start a [`LocalProvider`].
#[derive(Clone, Debug, PartialEq)]
pub struct LocalConfig {
    /// The GGUF file.
    pub model_path: PathBuf,
    /// What the file must be (size and sha256), checked before loading; `None` loads any GGUF
    /// file unchecked.
    pub spec: Option<ModelSpec>,
    /// The context size in tokens (prompt and answer together). Default
    /// [`DEFAULT_CONTEXT_TOKENS`].
    pub context_tokens: u32,
    /// Threads for inference. Default: the cores available to the process. Generation gains
    /// little from more than one (it is bound by memory), reading the prompt does; with several
    /// providers or other busy work on few cores, use fewer: llama.cpp's threads spin while
    /// they wait for each other, so more threads than free cores slow everything down.
    pub threads: usize,
}

impl LocalConfig {
    /// The model at `model_path`, checked against Gemma 3 270M Q4_K_M's spec, with the default
    /// context and threads.
    pub fn new(model_path: impl Into<PathBuf>) -> Self {
        Self {
            model_path: model_path.into(),
            spec: Some(GEMMA3_270M_Q4_K_M),
            context_tokens: DEFAULT_CONTEXT_TOKENS,
            threads: std::thread::available_parallelism().map_or(1, |cores| cores.get()),
        }
    }

    /// Gemma 3 270M Q4_K_M in the [default model directory](default_model_dir), where
    /// `strata model fetch` puts it.
    pub fn default_model() -> Result<Self, ModelDirError> {
        Ok(Self::new(GEMMA3_270M_Q4_K_M.path_in(&default_model_dir()?)))
    }
}

/// How long starting took.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct LocalStartup {
    /// Checking the file's size and sha256 (zero without a spec).
    pub verify: Duration,
    /// Loading the model and creating its context.
    pub load: Duration,
}

/// A [`LocalProvider`] that could not start.
#[derive(Debug, Error)]
pub enum LocalError {
    /// The model file is missing or not the expected one; the message says how to fix it.
    #[error(transparent)]
    ModelFile(#[from] ModelFileError),
    /// llama.cpp could not load the model or create its context.
    #[error("cannot load model {}: {detail}", .path.display())]
    Load {
        /// The model file.
        path: PathBuf,
        /// What llama.cpp said.
        detail: String,
    },
    /// The configuration cannot work (such as a context of 0 tokens).
    #[error("invalid local model configuration: {detail}")]
    Config {
        /// What is wrong.
        detail: String,
    },
    /// The model thread could not be started, or died while starting.
    #[error("cannot start the model thread: {detail}")]
    Thread {
        /// What happened.
        detail: String,
    },
}

/// The embedded model behind [`Provider`]: name `local`, model the GGUF file's stem (such as
/// `gemma-3-270m-q4_k_m`).
///
/// [`LocalProvider::start`] verifies the model file, then starts one dedicated thread that owns
/// the model and its context; [`complete`](Provider::complete) sends the request to that thread
/// over a bounded queue and awaits the answer, so the async runtime never blocks on inference.
/// Calls run one at a time, in the order they arrive, each on a cleared KV cache. A caller that
/// gives up (drops the future) stops its call at the next token. Dropping the provider closes
/// the queue: the thread ends its current call, exits and frees the model.
///
/// # Prompting
/// The model is a base model without a chat template, so a request becomes a plain transcript
/// to continue: the system prompt, then one labelled line per message (`User:`, `Assistant:`,
/// `Tool result (<tool>):`), then for a JSON request the schema and the cue `Answer as JSON:`,
/// for a text request the label `Assistant:` (the answer stops where the model starts the next
/// labelled line).
///
/// When the prompt does not fit the context with room for the answer (`max_tokens`, at most
/// half the context; when `max_tokens` is 0, a quarter of the context up to 512 tokens), the
/// oldest messages are left out, keeping the system prompt and the last message; if those alone
/// do not fit, the call fails.
///
/// # Decoding
/// A JSON answer is generated under a grammar that llama.cpp builds from the request's JSON
/// Schema, so it is JSON of the schema's shape: the last 64 tokens before `max_tokens` (a
/// quarter of it when that is less) close what is open instead of going on. A schema that
/// llama.cpp cannot convert falls back, with a warning, to the same schema without what
/// llama.cpp may refuse (patterns, formats, references): same objects, properties and types.
/// Each object's required properties are written in the order its schema's `required` lists
/// them. With tools offered the answer is `{"tool": <name>, "arguments": <that tool's
/// parameters>}`, returned as one [`ProviderToolCall`](crate::ProviderToolCall) with id
/// `local-<n>`; when the request does not require a tool, `{"answer": ...}` is allowed too and
/// becomes the text.
///
/// Decoding is greedy (the request's `temperature` is ignored): the most likely token that the
/// grammar allows. The grammar checks the top token first, then the 32 most likely, and the
/// whole 262k-token vocabulary (several milliseconds) only when it rejects all of those.
///
/// Usage counts the prompt's tokens and the answer's; [`EngineTiming`](crate::EngineTiming)
/// holds llama.cpp's own counters for the call.
///
/// # Progress
/// A call made in an agent's turn tells the turn's progress ([`agent_core::progress`]) of each
/// batch of the prompt read and each token generated, from the model thread: the agent answers
/// its heartbeats busy with its tokens so far, and the call is never silent for its silence
/// limit (`[timeouts] silence_ms`) while the model works.
#[derive(Debug)]
pub struct LocalProvider {
    model: String,
    jobs: mpsc::Sender<engine::Job>,
    calls: AtomicU64,
    startup: LocalStartup,
}

impl LocalProvider {
    /// Verifies the model file against `config.spec`, loads it and starts the model thread.
    ///
    /// The verification reads the whole file (a fraction of a second for 253 MB in an
    /// optimised build); it and the load run on the new thread, not on the async runtime.
    pub async fn start(config: LocalConfig) -> Result<Self, LocalError> {
        if config.context_tokens < 64 {
            return Err(LocalError::Config {
                detail: format!(
                    "a context of {} tokens is too small; use at least 64",
                    config.context_tokens
                ),
            });
        }
        let model = config
            .model_path
            .file_stem()
            .map(|stem| stem.to_string_lossy().into_owned())
            .filter(|stem| !stem.is_empty())
            .unwrap_or_else(|| GEMMA3_270M_Q4_K_M.file_name.trim_end_matches(".gguf").to_owned());
        let (jobs, queue) = mpsc::channel(QUEUE);
        let (ready, started) = oneshot::channel();
        std::thread::Builder::new()
            .name("strata-local-model".to_owned())
            .spawn(move || engine::run(config, ready, queue))
            .map_err(|error| LocalError::Thread { detail: error.to_string() })?;
        let startup = started.await.map_err(|_| LocalError::Thread {
            detail: "the model thread stopped while loading".to_owned(),
        })??;
        tracing::info!(
            %model,
            verify_ms = startup.verify.as_millis() as u64,
            load_ms = startup.load.as_millis() as u64,
            "local model ready"
        );
        Ok(Self { model, jobs, calls: AtomicU64::new(0), startup })
    }

    /// How long verifying and loading the model took.
    pub fn startup(&self) -> LocalStartup {
        self.startup
    }
}

#[async_trait]
impl Provider for LocalProvider {
    fn name(&self) -> &str {
        "local"
    }

    fn model(&self) -> &str {
        &self.model
    }

    fn continues_assistant(&self) -> bool {
        true
    }

    async fn complete(&self, request: &ChatRequest) -> Result<ChatResponse, ProviderError> {
        let call = self.calls.fetch_add(1, Ordering::Relaxed) + 1;
        let (reply, answer) = oneshot::channel();
        // The model thread tells the caller's turn of each prompt batch and token.
        let progress = agent_core::progress::current();
        let job = engine::Job { request: request.clone(), call, reply, progress };
        let stopped =
            || ProviderError::new(self, ProviderErrorKind::Engine, "the model thread has stopped");
        self.jobs.send(job).await.map_err(|_| stopped())?;
        answer
            .await
            .map_err(|_| stopped())?
            .map_err(|message| ProviderError::new(self, ProviderErrorKind::Engine, message))
    }
}
