//! The model thread: owns llama.cpp's model and context, and runs one call at a time.

use std::num::NonZeroU32;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::{Arc, OnceLock};
use std::time::Instant;

use agent_core::Progress;

use llama_cpp_2::context::LlamaContext;
use llama_cpp_2::context::params::LlamaContextParams;
use llama_cpp_2::llama_backend::LlamaBackend;
use llama_cpp_2::llama_batch::LlamaBatch;
use llama_cpp_2::model::LlamaModel;
use llama_cpp_2::model::params::LlamaModelParams;
use llama_cpp_2::sampling::LlamaSampler;
use llama_cpp_2::token::LlamaToken;
use llama_cpp_2::token::data::LlamaTokenData;
use llama_cpp_2::token::data_array::LlamaTokenDataArray;
use tokio::sync::{mpsc, oneshot};

use super::closing::{Closers, JsonCursor, closing_from};
use super::prompt::{self, Answer};
use super::{LocalConfig, LocalError, LocalStartup};
use crate::fetch::{ModelFileError, verify_model};
use crate::provider::{ChatRequest, ChatResponse, EngineTiming, Usage};

/// One call for the model thread.
#[derive(Debug)]
pub(super) struct Job {
    /// The request.
    pub(super) request: ChatRequest,
    /// The call's number on its provider, from 1 (tool call ids are `local-<call>`).
    pub(super) call: u64,
    /// Where the answer goes; an error is the message of an engine failure.
    pub(super) reply: oneshot::Sender<Result<ChatResponse, String>>,
    /// The progress of the caller's turn, told of each batch of the prompt read and each token
    /// generated ([`agent_core::progress`]), if the caller runs in one.
    pub(super) progress: Option<Arc<Progress>>,
}

/// How many prompt tokens are read per batch: the progress of the caller's turn is told after
/// each, so even a long prompt on a slow machine is never silent for long (llama.cpp reads a
/// prompt in batches of 512 tokens itself, so this costs nothing).
const PROMPT_BATCH: usize = 512;

/// The model thread's body: verify, load, report readiness on `ready`, then answer jobs until
/// the queue closes.
pub(super) fn run(
    config: LocalConfig,
    ready: oneshot::Sender<Result<LocalStartup, LocalError>>,
    mut queue: mpsc::Receiver<Job>,
) {
    let started = Instant::now();
    let checked = match &config.spec {
        Some(spec) => verify_model(&config.model_path, spec),
        // Unchecked, but it must exist: llama-cpp-2 asserts that it does.
        None if !config.model_path.is_file() => {
            Err(ModelFileError::Missing { path: config.model_path.clone() })
        }
        None => Ok(()),
    };
    if let Err(error) = checked {
        let _ = ready.send(Err(error.into()));
        return;
    }
    let verify = started.elapsed();
    let load_error = |detail: String| LocalError::Load { path: config.model_path.clone(), detail };
    let backend = match backend() {
        Ok(backend) => backend,
        Err(detail) => {
            let _ = ready.send(Err(load_error(detail)));
            return;
        }
    };
    let loading = Instant::now();
    let model =
        match LlamaModel::load_from_file(backend, &config.model_path, &LlamaModelParams::default())
        {
            Ok(model) => model,
            Err(error) => {
                let _ = ready.send(Err(load_error(format!("{error} (is it a GGUF model file?)"))));
                return;
            }
        };
    let threads = i32::try_from(config.threads.max(1)).unwrap_or(i32::MAX);
    let params = LlamaContextParams::default()
        .with_n_ctx(NonZeroU32::new(config.context_tokens))
        .with_n_batch(config.context_tokens)
        .with_n_threads(threads)
        .with_n_threads_batch(threads)
        .with_no_perf(false);
    let context = match model.new_context(backend, params) {
        Ok(context) => context,
        Err(error) => {
            let _ = ready.send(Err(load_error(format!("cannot create a context: {error}"))));
            return;
        }
    };
    let closers = Closers::of(&model);
    let mut engine =
        Engine { model: &model, context, context_tokens: config.context_tokens, closers };
    let startup = LocalStartup { verify, load: loading.elapsed() };
    if ready.send(Ok(startup)).is_err() {
        return; // the starter gave up
    }
    while let Some(job) = queue.blocking_recv() {
        if job.reply.is_closed() {
            continue; // the caller gave up while queued
        }
        let answer = catch_unwind(AssertUnwindSafe(|| engine.complete(&job)))
            .unwrap_or_else(|_| Err("llama.cpp panicked during the call".to_owned()));
        let _ = job.reply.send(answer);
    }
    tracing::debug!("local model thread stopping");
}

/// llama.cpp's backend, initialised once per process (llama-cpp-2 refuses a second init).
fn backend() -> Result<&'static LlamaBackend, String> {
    static BACKEND: OnceLock<Result<LlamaBackend, String>> = OnceLock::new();
    BACKEND
        .get_or_init(|| {
            llama_cpp_2::send_logs_to_tracing(llama_cpp_2::LogOptions::default());
            LlamaBackend::init().map_err(|error| format!("cannot initialise llama.cpp: {error}"))
        })
        .as_ref()
        .map_err(Clone::clone)
}

/// The loaded model and its context.
struct Engine<'m> {
    model: &'m LlamaModel,
    context: LlamaContext<'m>,
    context_tokens: u32,
    /// The tokens that close a JSON value, for an answer near its limit.
    closers: Closers,
}

impl Engine<'_> {
    /// Answers one job.
    fn complete(&mut self, job: &Job) -> Result<ChatResponse, String> {
        let request = &job.request;
        let n_ctx = self.context_tokens as usize;
        let reserve = match request.max_tokens {
            0 => (n_ctx / 4).min(512),
            max => (max as usize).min(n_ctx / 2),
        };
        let prompt = self.fit_prompt(request, n_ctx - reserve)?;
        let grammar = self.grammar(request)?;
        let limit = match request.max_tokens {
            0 => n_ctx - prompt.len(),
            max => (max as usize).min(n_ctx - prompt.len()),
        };

        self.context.clear_kv_cache();
        self.context.reset_timings();
        let mut batch = self.read_prompt(job, &prompt)?;
        let mut generation = Generation::new(job, grammar, limit);
        while generation.generated < limit {
            if job.reply.is_closed() {
                return Err("the caller gave up".to_owned());
            }
            let Some(token) = self.next_token(&mut generation, &batch)? else { break };
            if generation.done() || generation.generated == limit {
                break;
            }
            batch.clear();
            let pos = (prompt.len() + generation.generated - 1) as i32;
            batch.add(token, pos, &[0], true).map_err(|e| format!("batch: {e}"))?;
            self.context.decode(&mut batch).map_err(|e| format!("cannot decode: {e}"))?;
        }
        self.answer(job, &generation, prompt.len())
    }

    /// Reads the prompt into the context in batches of [`PROMPT_BATCH`], telling the caller's
    /// progress after each; the last batch (whose last logits come next) is returned.
    fn read_prompt(
        &mut self,
        job: &Job,
        prompt: &[LlamaToken],
    ) -> Result<LlamaBatch<'static>, String> {
        let mut batch = LlamaBatch::new(prompt.len().clamp(1, PROMPT_BATCH), 1);
        for (chunk, tokens) in prompt.chunks(PROMPT_BATCH).enumerate() {
            if job.reply.is_closed() {
                return Err("the caller gave up".to_owned());
            }
            batch.clear();
            for (i, token) in tokens.iter().enumerate() {
                let pos = chunk * PROMPT_BATCH + i;
                let last = pos + 1 == prompt.len();
                batch.add(*token, pos as i32, &[0], last).map_err(|e| format!("batch: {e}"))?;
            }
            self.context.decode(&mut batch).map_err(|e| format!("cannot read the prompt: {e}"))?;
            if let Some(progress) = job.progress.as_deref() {
                progress.touch();
            }
        }
        Ok(batch)
    }

    /// Picks the next token from the last logits of `batch` and adds it to the answer;
    /// `None` at the end of generation (an end-of-generation token).
    fn next_token(
        &mut self,
        g: &mut Generation<'_>,
        batch: &LlamaBatch<'_>,
    ) -> Result<Option<LlamaToken>, String> {
        let logits = self.context.get_logits_ith(batch.n_tokens() - 1);
        let closer = g
            .cursor
            .closer()
            .filter(|_| g.answer.is_json() && g.generated >= g.closing)
            .and_then(|c| self.closers.token(c))
            .filter(|t| g.grammar.as_mut().is_some_and(|gr| allows(gr, *t)));
        let (token, checked) = match closer {
            Some(token) => {
                g.closed += 1;
                (token, Checked::Top)
            }
            // A text answer is picked with its repeats penalised (see `dry`).
            None if !g.answer.is_json() => (pick_text(logits, &g.written), Checked::Top),
            None => pick(logits, g.grammar.as_mut())?,
        };
        g.checks[checked as usize] += 1;
        let vocab = self.model.vocab();
        if vocab.is_eog(token) {
            return Ok(None);
        }
        if let Some(grammar) = g.grammar.as_mut() {
            grammar.try_accept(token).map_err(|e| format!("grammar: {e}"))?;
        }
        g.generated += 1;
        g.written.push(token.0);
        if let Some(progress) = g.job.progress.as_deref() {
            progress.add_tokens(1);
        }
        g.piece.clear();
        vocab.token_to_piece_into(token, &mut g.piece, false, None);
        g.output.extend_from_slice(&g.piece);
        g.cursor.feed(&g.piece);
        Ok(Some(token))
    }

    /// The answer generated, interpreted (text, or tool calls), with its usage and timing.
    fn answer(
        &mut self,
        job: &Job,
        g: &Generation<'_>,
        prompt_tokens: usize,
    ) -> Result<ChatResponse, String> {
        let timings = self.context.timings();
        tracing::debug!(
            call = job.call,
            prompt_tokens,
            generated = g.generated,
            top_checks = g.checks[Checked::Top as usize],
            shortlist_checks = g.checks[Checked::Shortlist as usize],
            vocabulary_checks = g.checks[Checked::All as usize],
            closing_tokens = g.closed,
            prompt_ms = timings.t_p_eval_ms(),
            generate_ms = timings.t_eval_ms(),
            "local model call done"
        );
        let text = String::from_utf8_lossy(&g.output);
        let (text, tool_calls) =
            prompt::interpret(&g.answer, &text, g.fenced, || format!("local-{}", job.call))?;
        Ok(ChatResponse {
            text,
            tool_calls,
            usage: Usage { input_tokens: prompt_tokens as u64, output_tokens: g.generated as u64 },
            timing: Some(EngineTiming {
                prompt_tokens: u64::try_from(timings.n_p_eval()).unwrap_or(0),
                prompt_ms: timings.t_p_eval_ms(),
                generated_tokens: u64::try_from(timings.n_eval()).unwrap_or(0),
                generate_ms: timings.t_eval_ms(),
            }),
        })
    }

    /// The prompt's tokens, leaving out the oldest messages until it fits in `budget` tokens.
    fn fit_prompt(&self, request: &ChatRequest, budget: usize) -> Result<Vec<LlamaToken>, String> {
        let vocab = self.model.vocab();
        let mut dropped = 0;
        loop {
            let text = prompt::render(request, dropped);
            let tokens = vocab.tokenize(text.as_bytes(), true, false);
            if tokens.len() <= budget {
                if dropped > 0 {
                    tracing::debug!(
                        dropped,
                        tokens = tokens.len(),
                        "left out old messages to fit the context"
                    );
                }
                return Ok(tokens);
            }
            if dropped + 1 >= request.messages.len() {
                return Err(format!(
                    "the prompt is {} tokens even with only the system prompt and the last message, \
                     more than the {budget} that fit in the context of {} tokens with room for the answer; \
                     shorten them or raise the context size",
                    tokens.len(),
                    self.context_tokens
                ));
            }
            dropped += 1;
        }
    }

    /// The grammar sampler for the request's answer, if it is JSON. A schema that llama.cpp
    /// cannot turn into a grammar falls back to a permissive one (any object for tool
    /// arguments, any JSON value for an answer), with a warning.
    fn grammar(&self, request: &ChatRequest) -> Result<Option<LlamaSampler>, String> {
        let Some(schema) = prompt::answer_schema(request, false) else {
            return Ok(None);
        };
        let strict = llama_cpp_2::json_schema_to_grammar(&schema)
            .map_err(|e| e.to_string())
            .and_then(|grammar| {
                LlamaSampler::grammar(self.model, &grammar, "root").map_err(|e| e.to_string())
            });
        match strict {
            Ok(sampler) => Ok(Some(sampler)),
            Err(error) => {
                tracing::warn!(%error, schema, "cannot build a grammar from the schema; using a permissive one");
                let schema =
                    prompt::answer_schema(request, true).unwrap_or_else(|| "{}".to_owned());
                let grammar = llama_cpp_2::json_schema_to_grammar(&schema)
                    .map_err(|e| format!("cannot build a JSON grammar: {e}"))?;
                LlamaSampler::grammar(self.model, &grammar, "root")
                    .map(Some)
                    .map_err(|e| format!("cannot build a JSON grammar: {e}"))
            }
        }
    }
}

/// One answer being generated: what was written so far and how it was picked.
struct Generation<'j> {
    job: &'j Job,
    answer: Answer,
    grammar: Option<LlamaSampler>,
    /// A text answer continuing an opened code fence ends where it closes.
    fenced: bool,
    /// The answer's bytes so far.
    output: Vec<u8>,
    /// Its tokens so far.
    written: Vec<i32>,
    generated: usize,
    /// The last token's text.
    piece: Vec<u8>,
    /// How many tokens were checked each way ([`Checked`]).
    checks: [usize; 3],
    /// Near the limit, an open JSON answer is closed (see `closing`): from this many tokens,
    /// with the JSON read so far, and how many closing tokens were forced.
    closing: usize,
    cursor: JsonCursor,
    closed: usize,
}

impl<'j> Generation<'j> {
    fn new(job: &'j Job, grammar: Option<LlamaSampler>, limit: usize) -> Self {
        Generation {
            job,
            answer: Answer::of(&job.request),
            grammar,
            fenced: prompt::opens_fence(&job.request),
            output: Vec::new(),
            written: Vec::new(),
            generated: 0,
            piece: Vec::new(),
            checks: [0; 3],
            closing: closing_from(limit),
            cursor: JsonCursor::default(),
            closed: 0,
        }
    }

    /// Whether the answer is complete: a JSON value closed, or a text answer at its stop.
    fn done(&self) -> bool {
        if self.answer.is_json() {
            self.piece.iter().any(|b| matches!(b, b'}' | b']' | b'"'))
                && prompt::json_complete(&String::from_utf8_lossy(&self.output))
        } else {
            // The same rule `interpret` cuts the answer by (the whole answer is a few
            // kilobytes: scanning it is nothing beside a decoding step).
            prompt::text_stop(&String::from_utf8_lossy(&self.output), self.fenced).is_some()
        }
    }
}

/// How far [`pick`] had to go to find the most likely token that the grammar allows.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Checked {
    /// No grammar, or the grammar allowed the top token.
    Top,
    /// The grammar allowed one of the [`SHORTLIST`] most likely tokens.
    Shortlist,
    /// The grammar had to check the whole vocabulary.
    All,
}

/// How many of the most likely tokens the grammar checks before it checks them all.
const SHORTLIST: usize = 32;

/// The most likely token that the grammar allows (greedy decoding).
///
/// Applying a grammar to Gemma's 262k-token vocabulary takes several milliseconds, far more
/// than a decoding step, so it is applied in widening circles: the top token alone, then the
/// [`SHORTLIST`] most likely tokens, and only if the grammar rejects all of those, every token.
/// Each circle is exact: a token outside it is no more likely than every token in it.
fn pick(
    logits: &[f32],
    grammar: Option<&mut LlamaSampler>,
) -> Result<(LlamaToken, Checked), String> {
    let (best, best_logit) = argmax(logits.iter().copied().enumerate())
        .ok_or_else(|| "the model produced no logits".to_owned())?;
    let Some(grammar) = grammar else {
        return Ok((token(best), Checked::Top));
    };
    if let Some(id) = best_allowed(grammar, vec![(best, best_logit)]) {
        return Ok((token(id), Checked::Top));
    }
    if let Some(id) = best_allowed(grammar, shortlist(logits, SHORTLIST)) {
        return Ok((token(id), Checked::Shortlist));
    }
    best_allowed(grammar, logits.iter().copied().enumerate().collect())
        .map(|id| (token(id), Checked::All))
        .ok_or_else(|| "the grammar allows no token here".to_owned())
}

/// The most likely token of a free-text answer once the answer's repeats are penalised
/// ([`super::dry::penalties`] of `written`, the answer's tokens so far).
fn pick_text(logits: &[f32], written: &[i32]) -> LlamaToken {
    let penalties = super::dry::penalties(written);
    let penalised = |id: usize, logit: f32| {
        let own = i32::try_from(id).ok();
        logit - penalties.iter().find(|(t, _)| Some(*t) == own).map_or(0.0, |(_, p)| *p)
    };
    let best = argmax(logits.iter().enumerate().map(|(id, &logit)| (id, penalised(id, logit))));
    token(best.map_or(0, |(id, _)| id))
}

/// Whether the grammar allows `token` next.
fn allows(grammar: &mut LlamaSampler, token: LlamaToken) -> bool {
    let id = usize::try_from(token.0).unwrap_or(usize::MAX);
    best_allowed(grammar, vec![(id, 0.0)]).is_some()
}

/// The most likely of `candidates` (token id, logit) that the grammar allows.
fn best_allowed(grammar: &mut LlamaSampler, candidates: Vec<(usize, f32)>) -> Option<usize> {
    let mut array = LlamaTokenDataArray::new(
        candidates
            .into_iter()
            .map(|(id, logit)| LlamaTokenData::new(token(id), logit, 0.0))
            .collect(),
        false,
    );
    array.apply_sampler(grammar);
    argmax(array.data.iter().map(|data| (data.id().0 as usize, data.logit())))
        .filter(|(_, logit)| *logit > f32::NEG_INFINITY)
        .map(|(id, _)| id)
}

/// The `k` largest logits with their token ids, largest first (NaNs left out).
fn shortlist(logits: &[f32], k: usize) -> Vec<(usize, f32)> {
    let mut top: Vec<(usize, f32)> = Vec::with_capacity(k + 1);
    for (id, &logit) in logits.iter().enumerate() {
        if logit.is_nan()
            || (top.len() == k && top.last().is_some_and(|&(_, floor)| logit <= floor))
        {
            continue;
        }
        let at = top.partition_point(|&(_, other)| other >= logit);
        top.insert(at, (id, logit));
        top.truncate(k);
    }
    top
}

/// The index and value of the largest value (the first of equals; NaN never wins over a number).
fn argmax(values: impl Iterator<Item = (usize, f32)>) -> Option<(usize, f32)> {
    values.fold(None, |best, (i, v)| match best {
        Some((_, b)) if v.partial_cmp(&b) != Some(std::cmp::Ordering::Greater) => best,
        _ => Some((i, v)),
    })
}

fn token(id: usize) -> LlamaToken {
    LlamaToken::new(i32::try_from(id).unwrap_or(i32::MAX))
}
