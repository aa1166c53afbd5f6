//! A small base model behind an OpenAI-compatible server, asked as the embedded model is
//! ([`OpenAiConfig::completions`](super::OpenAiConfig::completions)): `POST
//! {base_url}/completions` with the request rendered as a plain transcript
//! ([`crate::transcript`]) and, for a JSON answer or a tool call, the answer's JSON Schema as a
//! GBNF `grammar` ([`crate::gbnf`]); a text answer stops at the next labelled line. The
//! server's chat template is not used: a base model (Gemma 3 270M has none of its own, so
//! llama-cpp-python falls back to Llama-2's `[INST]`) answers a format it was never trained on
//! with the template's own words.
//!
//! `{"model", "prompt", "max_tokens", "temperature", "grammar" | "stop"}` (and
//! `"repeat_penalty": 1.0` with a grammar) is what llama.cpp's
//! server and llama-cpp-python take; the answer is `choices[0].text` and `usage`. A prompt
//! longer than the server's context (HTTP 400, "exceed context window") is sent again without
//! its oldest messages, as the embedded model fits its own. The answer is read as the embedded
//! model's is ([`transcript::interpret`]), so a tool call is `{"tool", "arguments"}`.
//!
//! Whether the server takes this is found by the pre-run check ([`probe`]): a grammar that
//! allows one answer only, which no model writes unconstrained. A server without the endpoint,
//! or one that refuses or ignores the grammar, is asked through chat completions instead.

use std::sync::atomic::{AtomicU8, AtomicU64, Ordering};

use serde::Deserialize;
use serde_json::{Value, json};

use super::{OpenAiProvider, WireUsage};
use crate::gbnf;
use crate::http::UNSTATED_MAX_TOKENS;
use crate::provider::{ChatRequest, ChatResponse, ProviderError, ProviderErrorKind, Usage};
use crate::stream::SharedSink;
use crate::transcript::{self, Answer, STOPS};

/// Whether requests go to `/completions`.
#[derive(Debug)]
pub(super) struct State {
    /// [`OFF`], [`ON`] or [`REFUSED`].
    mode: AtomicU8,
    /// Numbers the tool calls of the answers.
    calls: AtomicU64,
}

/// Not asked for: chat completions.
const OFF: u8 = 0;
/// Asked for, and in use.
const ON: u8 = 1;
/// Asked for, but the server does not take it: chat completions.
const REFUSED: u8 = 2;

impl State {
    pub(super) fn new(asked: bool) -> Self {
        Self { mode: AtomicU8::new(if asked { ON } else { OFF }), calls: AtomicU64::new(0) }
    }

    /// Whether requests go to `/completions` now.
    pub(super) fn in_use(&self) -> bool {
        self.mode.load(Ordering::Relaxed) == ON
    }

    /// The server does not take it: chat completions from now on.
    pub(super) fn refuse(&self) {
        let _ = self.mode.compare_exchange(ON, REFUSED, Ordering::Relaxed, Ordering::Relaxed);
    }

    /// For [`crate::ModeChoice::completions`].
    pub(super) fn choice(&self) -> Option<bool> {
        match self.mode.load(Ordering::Relaxed) {
            ON => Some(true),
            REFUSED => Some(false),
            _ => None,
        }
    }
}

/// `POST /completions` answer (the fields read).
#[derive(Deserialize)]
struct Completion {
    choices: Vec<TextChoice>,
    #[serde(default)]
    usage: Option<WireUsage>,
}

#[derive(Deserialize)]
struct TextChoice {
    #[serde(default)]
    text: Option<String>,
}

impl Completion {
    fn generated(&self) -> u64 {
        self.usage.as_ref().map_or(0, |u| u.completion_tokens)
    }
}

/// The answer to `request`, asked as a transcript (delivered to `sink` whole, if there is one).
pub(super) async fn answer(
    provider: &OpenAiProvider,
    request: &ChatRequest,
    sink: Option<&SharedSink<'_>>,
) -> Result<ChatResponse, ProviderError> {
    let http = &provider.http;
    let answer = Answer::of(request);
    let ask = Ask::of(provider, request)?;
    let completion = ask.complete(provider).await?;
    let usage = completion.usage.unwrap_or_default();
    let output = completion.choices.into_iter().next().and_then(|c| c.text).ok_or_else(|| {
        http.error(ProviderErrorKind::BadResponse, "the answer has no choices".to_owned())
    })?;
    let call = provider.completions.calls.fetch_add(1, Ordering::Relaxed);
    let (text, tool_calls) =
        transcript::interpret(&answer, &output, ask.fenced, || format!("call_{call}"))
            .map_err(|e| http.error(ProviderErrorKind::BadResponse, e))?;
    let response = ChatResponse {
        text,
        tool_calls,
        usage: Usage { input_tokens: usage.prompt_tokens, output_tokens: usage.completion_tokens },
        timing: None,
    };
    if let Some(shared) = sink {
        let mut sink = shared;
        crate::stream::deliver_whole(&response, &mut sink);
    }
    Ok(response)
}

/// How `request` is asked: its answer's grammar (or the stops of a text answer) and its limit.
struct Ask<'a> {
    request: &'a ChatRequest,
    /// The GBNF grammar of a JSON answer or a tool call.
    grammar: Option<String>,
    /// Whether the prompt opens a fence the answer closes.
    fenced: bool,
    max_tokens: u64,
}

impl<'a> Ask<'a> {
    fn of(provider: &OpenAiProvider, request: &'a ChatRequest) -> Result<Self, ProviderError> {
        let grammar = match transcript::answer_schema(request, false) {
            Some(schema) => {
                let schema: Value = serde_json::from_str(&schema).map_err(|e| {
                    provider
                        .http
                        .error(ProviderErrorKind::BadRequest, format!("the answer's schema: {e}"))
                })?;
                Some(gbnf::grammar(&schema))
            }
            None => None,
        };
        let max_tokens = match request.max_tokens {
            0 => UNSTATED_MAX_TOKENS,
            max => u64::from(max),
        };
        Ok(Self { request, grammar, fenced: transcript::opens_fence(request), max_tokens })
    }

    /// The request body, with the `dropped` oldest messages left out of the prompt.
    fn body(&self, model: &str, dropped: usize) -> Value {
        let mut body = json!({
            "model": model,
            "prompt": transcript::render(self.request, dropped),
            "max_tokens": self.max_tokens,
        });
        if let Some(temperature) = self.request.temperature {
            body["temperature"] = json!(temperature);
        }
        match &self.grammar {
            Some(grammar) => {
                body["grammar"] = json!(grammar);
                // No penalty on repeats inside JSON (llama-cpp-python's default is 1.1): the
                // embedded model decodes its JSON answers without one.
                body["repeat_penalty"] = json!(1.0);
            }
            None => {
                let mut stops: Vec<&str> = STOPS.to_vec();
                if self.fenced {
                    stops.push("\n```");
                }
                body["stop"] = json!(stops);
            }
        }
        body
    }

    /// The server's completion, asked again without the oldest messages while the prompt is
    /// longer than its context.
    async fn complete(&self, provider: &OpenAiProvider) -> Result<Completion, ProviderError> {
        let http = &provider.http;
        let messages = self.request.messages.len();
        let mut dropped = 0;
        loop {
            let body = self.body(http.model(), dropped);
            match http.post_to(&provider.completions_url, &body, Completion::generated).await {
                Err(error)
                    if error.kind == ProviderErrorKind::BadRequest
                        && says_context_full(&error.message)
                        && dropped + 1 < messages =>
                {
                    // Twice as many of the oldest messages left out, the last one always kept.
                    dropped = (dropped * 2).max(1).min(messages - 1);
                    tracing::debug!(
                        provider = OpenAiProvider::NAME,
                        model = %http.model(),
                        dropped,
                        "the prompt is longer than the server's context; leaving out its oldest messages"
                    );
                }
                result => return result,
            }
        }
    }
}

/// The only answer [`PROBE_GRAMMAR`] allows.
const PROBE_ANSWER: &str = r#"{"grammar": "kept"}"#;
/// A grammar no unconstrained model follows by chance.
const PROBE_GRAMMAR: &str = r#"root ::= "{\"grammar\": \"kept\"}""#;

/// Whether the server answers `/completions` under a grammar: `Ok(None)` if it does, else
/// `Ok(Some(why not))`; an error that says nothing of it (the server is down) is returned.
pub(super) async fn probe(provider: &OpenAiProvider) -> Result<Option<String>, ProviderError> {
    let http = &provider.http;
    let body = json!({
        "model": http.model(),
        "prompt": "Answer as JSON:\n",
        "max_tokens": 16,
        "temperature": 0.0,
        "grammar": PROBE_GRAMMAR,
    });
    match http.post_to(&provider.completions_url, &body, Completion::generated).await {
        Ok(completion) => {
            let text = completion.choices.into_iter().next().and_then(|c| c.text);
            Ok(match text {
                Some(text) if text.trim() == PROBE_ANSWER => None,
                Some(text) => Some(format!(
                    "it ignored the grammar (answered {})",
                    crate::model_text::quoted(&text)
                )),
                None => Some("its answer has no choices".to_owned()),
            })
        }
        Err(error)
            if matches!(
                error.kind,
                ProviderErrorKind::BadRequest
                    | ProviderErrorKind::UnknownModel
                    | ProviderErrorKind::BadResponse
            ) =>
        {
            Ok(Some(error.message))
        }
        Err(error) => Err(error),
    }
}

/// Whether a refusal says the prompt does not fit the model's context (llama-cpp-python:
/// "Requested tokens (4163) exceed context window of 4096"; llama.cpp's server and others say
/// "context length" or "context size").
fn says_context_full(message: &str) -> bool {
    let message = message.to_lowercase();
    ["context window", "context length", "context size", "maximum context"]
        .iter()
        .any(|m| message.contains(m))
}
