//! [`LlmReasoner`]: every decision a layer takes, asked of a model as structured output.
//!
//! Each decision is one question with a JSON Schema for the answer:
//!
//! | decision | answer |
//! |---|---|
//! | review (sign or veto) | `{"verdict": "sign" \| "veto", "reason": "..."}` |
//! | arbitration vote | `{"choice": <one of the options>, "reason": "..."}` |
//! | decompose | `{"placements": {<step id>: <an executor that can take it>, ...}}` |
//! | next action (tool loop) | a call of one of the offered tools, or of `finish_subtask` |
//! | judge progress | `{"complete": true \| false, "summary": "..."}` |
//! | plan (a goal in words) | `{"leads": [{"role", "domain"}], "steps": [{"id", "description", "domain", "after", "acceptance", "role"}]}` |
//! | answer (`speak_to_agent`) | `{"reply": "..."}` |
//! | compose (an executor kind's text) | free text |
//!
//! A **plan** turns a task's goal into goal steps (no tool: the executor's reasoner chooses its
//! calls), each for a domain, and the mid-layer leads to create for those domains from the
//! team's [`RoleBook`]. It is checked beyond its schema: at least one step; step ids of 1 to 64
//! ASCII letters, digits, `-` and `_`, unique; `after` naming earlier steps only (a step that
//! waits for itself, for a later step or for no step is told which); lead roles that are mid
//! roles of the book, one lead per domain; every step's domain led by a proposed lead (when
//! the book has mid roles); a step's role, if given, a bottom role of the book that its lead
//! can spawn. Without roles in the book the plan has steps only, their domains free text. The
//! question is short, for small models: the roles, what a step says, and one worked example,
//! the goal itself as one step for the first lead that can spawn a worker (a goal that is one
//! piece of work may be planned so; a model that can only copy plans a valid step asking for
//! the whole goal). The schema bounds the plan (at most 8 steps, bounded strings and arrays)
//! and lists a step's properties in the order they are written, `id` first. An **answer**
//! is a short reply (at most 256 tokens) of an agent spoken to by its supervisor or a
//! subordinate. A **composition** is the text an executor kind asks for (a draft, research
//! notes): a plain text completion from the agent's system prompt, the instruction and the
//! material, outside the agent's conversation (the executor's capsule keeps the run's own), at
//! most [`LlmSettings::plan_max_tokens`] tokens if that is more than `max_tokens`.
//!
//! In the tool loop the agent is offered the tools its layer says it holds now
//! ([`Persona::tools`]: workspace tools described from the registry, agent-management tools
//! such as `spawn_agent` and `return_results` with their schemas) and
//! `finish_subtask`; without that list, its tools from [`LlmReasoner::with_agent_tools`] and
//! its step's tool. A goal step (no tool) is put to the model as what to achieve and how it is
//! accepted, and the model chooses its calls. An agent that holds `return_results` is told to
//! conclude with it (the runtime turns it into the step's result); `finish_subtask` still ends
//! the step.
//!
//! In the tool loop, a call identical to the last one, which succeeded, is not repeated: the
//! subtask finishes with that result (the loop guard; small models repeat themselves instead
//! of finishing). The runtime also caps a subtask at `MAX_TOOL_CALLS_PER_SUBTASK` calls. The
//! subtask's earlier calls are fed back with each result's last
//! [`LlmSettings::tool_output_chars`] characters and each string argument's first 1 000 (a
//! file written is not sent whole again in every later prompt).
//!
//! The answer is checked against the schema and against the question (a vote names an option
//! on the ballot, every step is placed once on an available executor, tool arguments match
//! the tool's schema). An invalid answer goes back to the model with its problems, each named
//! once (at most 8): a **repair**. The repair request is the question, the invalid answer and
//! its problems (not the earlier answers). Every repair is audited
//! ([`agent_core::AuditEvent::AnswerRepair`], under the agent whose call it is). A decision
//! gets one repair; a second invalid answer is a [`ReasonError::Backend`], which the runtime
//! treats like any other task error (retries, then a failure report). A **plan** gets up to
//! [`LlmSettings::plan_repairs`] (3 by default); a plan still invalid then is a
//! [`ReasonError::BadQuestion`] giving the last answer's problems once, on which the top power
//! fails the task as an invalid plan instead of planning again from scratch (a greedy model
//! would answer the same). What a model wrote that goes into an error or a message is shown
//! without the chat template's tokens (`[INST]`, `<start_of_turn>`, `<|im_end|>`, ...) and,
//! in an error, quoted on one line of at most 200 characters.
//!
//! The tool loop is the exception: a tool call the model got wrong twice never fails the
//! agent. If the repaired answer (or else the first one) still calls a tool, that call is
//! returned as [`NextAction::Call`] with the arguments as the model wrote them (parsed JSON,
//! or `{"$unparsed": "<the raw text>"}` when they are not JSON), and the runtime's tool
//! registry or agent tools refuse it as a tool error that the model reads in its history and
//! can correct; a call of a tool that was not offered goes the same way (the runtime refuses a
//! tool the agent does not hold). A `finish_subtask` with invalid arguments finishes with what
//! can be read from them (`success` only if it says `true`). Only a model that calls no tool
//! at all, twice, is a [`ReasonError::Backend`].
//!
//! The prompt is the agent's system prompt (role, layer, capabilities, responsibilities), the
//! tail of its own whiteboard and of the global board, its own bounded conversation
//! ([`crate::Conversations`]) and the question. Each call reserves its estimate in the team's
//! [`UsageLedger`] first, retries transient provider errors with the agent's backoff policy
//! ([`crate::complete_with_retry`]), and records the tokens the provider counted.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::sync::Arc;
use tracing::Instrument as _;

use agent_core::spawn::{RETURN_RESULTS, SPAWN_AGENT, is_agent_tool, supervisor_tool_spec};
use agent_core::tools::{ToolRegistry, validate};
use agent_core::{
    AuditEvent, Candidate, Conflict, Judgement, NextAction, Persona, Placement, Plan, ReasonError,
    Reasoner, ToolCall, ToolCallRecord, Verdict,
};
use agent_state::{
    Actor, AgentId, AgentLayer, BallotChoice, BoardId, Decision, PlanStep, RetryPolicy, RoleBook,
    StepTarget, Subtask, SubtaskResult, Task, WorkPackage,
};
use async_trait::async_trait;
use serde_json::{Value, json};
use whiteboard::Whiteboard;

use crate::conversation::{Conversations, Turn};
use crate::ledger::{CallSite, Pass, Reservation, UsageLedger};
use crate::model_text::{one_line, quoted, shown, stripped};
use crate::provider::{
    ChatMessage, ChatRequest, ChatResponse, Provider, ProviderErrorKind, ProviderToolCall,
    ResponseFormat, ToolSpec, Usage,
};
use crate::retry::{RetryEvent, complete_streaming_with_retry, complete_with_retry};
use crate::tokens::complete_publishing;

pub(crate) mod plan;

/// The tool an executor calls to end its subtask (the runtime's name for it).
pub use agent_core::FINISH_TOOL;

/// Most tokens an answer to `speak_to_agent` may generate: a reply is short.
const ANSWER_MAX_TOKENS: u32 = 256;

/// Repairs a plan gets by default ([`LlmSettings::plan_repairs`]).
pub const DEFAULT_PLAN_REPAIRS: u32 = 3;

/// Content of a budget-extension decision (see [`crate::ApprovalDesk`]) carries this `kind`.
pub const BUDGET_DECISION_KIND: &str = agent_core::BUDGET_EXTENSION_KIND;

/// Knobs of an [`LlmReasoner`].
#[derive(Clone, Debug, PartialEq)]
pub struct LlmSettings {
    /// Most tokens a decision may generate (default 512); a plan may use
    /// [`plan_max_tokens`](Self::plan_max_tokens) if that is more, an answer at most 256.
    pub max_tokens: u32,
    /// Most tokens a plan or a composed text may generate, if more than `max_tokens` (default
    /// 2 048): a plan of several steps with their descriptions and acceptance checks, and a
    /// draft or notes an executor kind asks for, are the longest answers.
    pub plan_max_tokens: u32,
    /// Characters of each whiteboard's tail put in the prompt (default 2 000).
    pub board_chars: usize,
    /// Characters of a tool's output fed back to the model (default 4 000).
    pub tool_output_chars: usize,
    /// Backoff for transient provider errors; `None`: the agent's own (its `max_retries`, 1 s
    /// doubling to 30 s).
    pub retry: Option<RetryPolicy>,
    /// In the tool loop, offer every tool the executor holds (default), or only the step's own
    /// tool (and `finish_subtask`): for small models that cannot choose among tools.
    pub offer_agent_tools: bool,
    /// In the tool loop, let the step's own tool be called only with the plan's arguments (its
    /// schema narrowed to those values), so the model chooses between the planned call and
    /// finishing: for small models that cannot write arguments. On a goal step the model writes
    /// its arguments, without the parameters' descriptions and with `path` narrowed to the
    /// files the step names (a file write: those not written yet in the step, while any is
    /// left). Default off.
    pub planned_arguments_only: bool,
    /// A supervising lead's tool loop runs without the model: it spawns one worker for the
    /// step (the step's role, else the first role it may spawn) with the step as its task,
    /// waits for its results and finishes the step with them. For small models, which cannot
    /// drive the supervisor tools (Gemma 3 270M spoke to an agent named `speak_to_agent` until
    /// the loop guard stopped the task). Default off.
    pub scripted_supervision: bool,
    /// Stream each answer (default on): with an event hub ([`LlmReasoner::with_events`]) that
    /// someone watches, publish it as it arrives; either way each piece is progress of the
    /// agent's turn (its heartbeat answers busy, with tokens so far, and the call's silence
    /// limit, `[timeouts] silence_ms`, starts over). Off, a call shows no progress until its
    /// answer: the provider tells the turn how long such a whole answer may take (its
    /// `request_timeout` plus twice its `max_tokens` at the slowest rate measured), and the
    /// silence counts from there. The answer, its checks and its usage are the same either way.
    pub stream: bool,
    /// Most times a plan that fails its checks goes back to the model with its problems before
    /// the plan is given up as invalid (default 3; `[reasoner] plan_repairs` in a team file).
    /// Every other decision gets one repair.
    pub plan_repairs: u32,
    /// The sampling temperature of an agent that sets none (default `None`: the server's
    /// own). Small models get 0: greedy, as the embedded model always decodes.
    pub temperature: Option<f32>,
}

impl Default for LlmSettings {
    fn default() -> Self {
        Self {
            max_tokens: 512,
            plan_max_tokens: 2_048,
            board_chars: 2_000,
            tool_output_chars: 4_000,
            retry: None,
            offer_agent_tools: true,
            planned_arguments_only: false,
            scripted_supervision: false,
            stream: true,
            plan_repairs: DEFAULT_PLAN_REPAIRS,
            temperature: None,
        }
    }
}

/// A reasoner backed by a model (any [`Provider`]).
///
/// Share one [`UsageLedger`] and one [`Conversations`] between the reasoners of a team: the
/// ledger enforces the run's budget across all of them, and each agent's conversation stays
/// its own whichever reasoner serves it.
pub struct LlmReasoner {
    provider: Arc<dyn Provider>,
    name: String,
    tools: BTreeMap<String, ToolSpec>,
    agent_tools: Arc<BTreeMap<AgentId, Arc<[String]>>>,
    ledger: Arc<UsageLedger>,
    conversations: Arc<Conversations>,
    boards: Option<Arc<dyn Whiteboard>>,
    settings: LlmSettings,
    /// Where answers are published as they stream, if anywhere.
    events: Option<agent_core::EventHub>,
    /// Calls made so far, to number them in the events.
    calls: std::sync::atomic::AtomicU64,
}

impl std::fmt::Debug for LlmReasoner {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LlmReasoner").field("name", &self.name).finish_non_exhaustive()
    }
}

impl LlmReasoner {
    /// A reasoner asking `provider`, recording usage in `ledger` and history in
    /// `conversations`.
    pub fn new(
        provider: Arc<dyn Provider>,
        ledger: Arc<UsageLedger>,
        conversations: Arc<Conversations>,
    ) -> Self {
        let name = format!("{}:{}", provider.name(), provider.model());
        Self {
            provider,
            name,
            tools: BTreeMap::new(),
            agent_tools: Arc::default(),
            ledger,
            conversations,
            boards: None,
            settings: LlmSettings::default(),
            events: None,
            calls: std::sync::atomic::AtomicU64::new(0),
        }
    }

    /// Publishes every answer on `hub` as it streams from the model
    /// ([`agent_core::TeamEvent::Tokens`]), when [`LlmSettings::stream`] is on and the hub is
    /// watched (see [`crate::Provider::complete_streaming`]).
    pub fn with_events(mut self, hub: agent_core::EventHub) -> Self {
        self.events = Some(hub);
        self
    }

    /// Describes the tools of `registry` to the model (names, descriptions, argument schemas).
    pub fn with_tools(mut self, registry: &ToolRegistry) -> Self {
        self.tools = registry
            .names()
            .into_iter()
            .filter_map(|n| registry.get(n))
            .map(|t| {
                let spec = ToolSpec {
                    name: t.name().to_owned(),
                    description: t.description().to_owned(),
                    parameters: t.schema().clone(),
                };
                (spec.name.clone(), spec)
            })
            .collect();
        self
    }

    /// The tools each executor holds; an executor is offered its own tools in the tool loop
    /// (an executor not listed is offered only its step's tool). Shared: every reasoner of a
    /// team can hold the same map.
    pub fn with_agent_tools(mut self, tools: Arc<BTreeMap<AgentId, Arc<[String]>>>) -> Self {
        self.agent_tools = tools;
        self
    }

    /// Reads whiteboards from `boards` to put in prompts.
    pub fn with_boards(mut self, boards: Arc<dyn Whiteboard>) -> Self {
        self.boards = Some(boards);
        self
    }

    /// Replaces the settings.
    pub fn with_settings(mut self, settings: LlmSettings) -> Self {
        self.settings = settings;
        self
    }

    fn retry_policy(&self, who: Persona<'_>) -> RetryPolicy {
        self.settings.retry.clone().unwrap_or(RetryPolicy {
            max_retries: who.config.max_retries,
            initial_delay_ms: 1_000,
            max_delay_ms: 30_000,
            backoff_multiplier: 2.0,
            hard_timeout_ms: who.config.timeout_ms,
            soft_timeout_ms: who.config.timeout_ms / 2,
        })
    }

    fn backend(&self, message: impl Into<String>) -> ReasonError {
        ReasonError::Backend { reasoner: self.name.clone(), message: message.into() }
    }

    fn site(&self, who: Persona<'_>) -> CallSite {
        CallSite {
            agent: who.config.id.clone(),
            layer: who.config.layer,
            provider: self.provider.name().to_owned(),
            model: self.provider.model().to_owned(),
        }
    }

    /// The system prompt: the agent's own, its boards' tails, a note on dropped turns, and
    /// that answers are structured.
    async fn system(&self, who: Persona<'_>, dropped: u64) -> String {
        let mut s = self.context(who, dropped).await;
        s.push_str("\n\nAnswer every question in the requested structured form only.");
        s
    }

    /// The agent's system prompt, its boards' tails, and a note on dropped turns.
    async fn context(&self, who: Persona<'_>, dropped: u64) -> String {
        let mut s = who.system_prompt.to_owned();
        if let Some(boards) = &self.boards {
            let me = &who.config.id;
            let mut wanted = vec![("Your whiteboard", BoardId::Agent(me.clone()))];
            if who.config.layer != AgentLayer::Bottom {
                wanted.push(("The global whiteboard", BoardId::Global));
            }
            for (title, board) in wanted {
                match boards.read(&Actor::Agent(me.clone()), &board).await {
                    Ok(snap) if !snap.content.trim().is_empty() => {
                        let _ = write!(
                            s,
                            "\n\n{title} (latest part):\n{}",
                            tail(&snap.content, self.settings.board_chars)
                        );
                    }
                    Ok(_) => {}
                    Err(e) => {
                        tracing::debug!(agent = %me, board = %board.as_str(), error = %e, "board not readable for the prompt")
                    }
                }
            }
        }
        if dropped > 0 {
            let _ = write!(
                s,
                "\n\nNote: {dropped} earlier turns were dropped from this conversation to keep it short."
            );
        }
        s
    }

    /// Reserves the budget a call of `request` may spend: its input estimate and its most
    /// output tokens (a top power's call may wait while an extension is pending; an `exempt`
    /// one may spend a budget that is used up).
    async fn reserve(
        &self,
        who: Persona<'_>,
        request: &ChatRequest,
        exempt: bool,
    ) -> Result<Reservation, ReasonError> {
        let input_estimate = estimate_tokens(request);
        let tokens = input_estimate + u64::from(request.max_tokens);
        let cost = self.ledger.estimate_cost(
            self.provider.model(),
            input_estimate,
            u64::from(request.max_tokens),
        );
        let pass = if exempt {
            Pass::Exempt
        } else if who.config.layer == AgentLayer::Top {
            Pass::WhilePending
        } else {
            Pass::Checked
        };
        self.ledger.reserve_as(tokens, cost, pass).await.map_err(|e| self.backend(e.to_string()))
    }

    /// Records a call's usage and cost (or its error) and its retries on its telemetry span.
    fn record_on(
        &self,
        span: &tracing::Span,
        response: Result<&ChatResponse, &crate::provider::ProviderError>,
        retries: u64,
    ) {
        match response {
            Ok(response) => {
                let usage = response.usage;
                let cost = self.ledger.prices().cost(self.provider.model(), usage);
                span.record("gen_ai.usage.input_tokens", usage.input_tokens);
                span.record("gen_ai.usage.output_tokens", usage.output_tokens);
                span.record("strata.cost_usd", cost);
            }
            Err(e) => {
                span.record("error.type", tracing::field::debug(&e.kind));
                span.record("otel.status_code", "error");
            }
        }
        span.record("gen_ai.request.retries", retries);
    }

    /// One model call: reserve, call with retries, record.
    async fn call(
        &self,
        who: Persona<'_>,
        request: &ChatRequest,
        exempt: bool,
    ) -> Result<ChatResponse, ReasonError> {
        let reservation = self.reserve(who, request, exempt).await?;
        let site = self.site(who);
        // If this future is dropped mid-call (the agent's task timeout), the guard books the
        // call as failed and frees its estimate, which would otherwise hold the budget forever.
        let mut held = Held { ledger: &self.ledger, site: &site, reservation: Some(reservation) };
        let policy = self.retry_policy(who);
        // Every attempt counts toward the budget: failed attempts that were retried are booked
        // as failed calls, waits on a rate limit as such (on success and on failure alike).
        let (mut retried_failures, mut rate_limit_waits) = (0_u64, 0_u64);
        let mut observe = |event: &RetryEvent<'_>| {
            if event.wait.is_none() {
                return; // the failure that ends the call, booked below
            }
            if event.error.kind == ProviderErrorKind::RateLimited {
                rate_limit_waits += 1;
            } else {
                retried_failures += 1;
            }
        };
        let call = self.calls.fetch_add(1, std::sync::atomic::Ordering::Relaxed) + 1;
        // Recorded however the call ends, a cancelled call (this future dropped) included.
        let mut recorder = Recorder::new(&self.ledger, &site, request, call);
        let span = chat_span(who, self.provider.name(), self.provider.model(), request, call);
        let result =
            self.complete(who, request, &policy, &mut observe, call).instrument(span.clone()).await;
        let retries = retried_failures + rate_limit_waits;
        if !span.is_disabled() {
            let response = result.as_ref().map(|(response, _)| response);
            self.record_on(&span, response, retries);
        }
        self.ledger.retried(&site, retried_failures, rate_limit_waits);
        if let Some(choice) = self.provider.structured_choice() {
            self.ledger.structured_mode(&site, choice);
        }
        match result {
            Ok((response, _)) => {
                held.settle(response.usage);
                recorder.finish(Ok(&response), retries);
                Ok(response)
            }
            Err(e) => {
                held.fail();
                let kind = serde_json::to_value(e.kind)
                    .ok()
                    .and_then(|k| k.as_str().map(str::to_owned))
                    .unwrap_or_default();
                recorder.finish(Err((kind, e.message.clone())), retries);
                Err(self.backend(e.to_string()))
            }
        }
    }

    /// Model call `call` with retries: published as it arrives when someone watches the team's
    /// events, else streamed (each piece is progress of the agent's turn) or, without
    /// streaming, in one answer.
    async fn complete(
        &self,
        who: Persona<'_>,
        request: &ChatRequest,
        policy: &RetryPolicy,
        observe: &mut (dyn FnMut(&RetryEvent<'_>) + Send),
        call: u64,
    ) -> Result<(ChatResponse, crate::retry::RetryStats), crate::provider::ProviderError> {
        let provider = self.provider.as_ref();
        match self.events.as_ref().filter(|h| self.settings.stream && h.is_watched()) {
            Some(hub) => {
                let to = crate::tokens::PublishTo { hub, agent: &who.config.id, call };
                complete_publishing(provider, request, policy, observe, to).await
            }
            // Unwatched, streamed all the same: each piece is progress of the agent's turn
            // (`agent_core::progress`), so a call still producing is not cut by its silence.
            None if self.settings.stream => {
                let mut progress = |_: crate::Piece<'_>| agent_core::progress::pieces(1);
                complete_streaming_with_retry(provider, request, policy, observe, &mut progress)
                    .await
            }
            None => complete_with_retry(provider, request, policy, observe).await,
        }
    }

    /// Asks a structured question, checks the answer, repairs it once, remembers the turn.
    async fn ask<T>(
        &self,
        who: Persona<'_>,
        decision: &'static str,
        prompt: String,
        schema: Value,
        exempt: bool,
        check: impl Fn(&Value) -> Result<T, String>,
    ) -> Result<T, ReasonError> {
        let max_tokens = self.settings.max_tokens;
        let asked = Asked { decision, prompt, schema, exempt, max_tokens, repairs: 1 };
        self.ask_limited(who, asked, check).await
    }

    /// [`ask`](Self::ask) with its own limit on the tokens generated (`asked.max_tokens`).
    async fn ask_limited<T>(
        &self,
        who: Persona<'_>,
        asked: Asked,
        check: impl Fn(&Value) -> Result<T, String>,
    ) -> Result<T, ReasonError> {
        let decision = asked.decision;
        self.ask_asked(who, asked, check).await.map_err(|unanswered| match unanswered {
            Unanswered::Failed(error) => error,
            Unanswered::Invalid { problems, .. } => self.invalid(decision, &problems),
        })
    }

    /// A decision the model answered invalidly, also after its one repair.
    fn invalid(&self, decision: &str, problems: &str) -> ReasonError {
        self.backend(format!(
            "{} model `{}` gave an invalid {decision} answer, also after one repair attempt: \
             {problems}",
            self.provider.name(),
            self.provider.model()
        ))
    }

    /// Asks a structured question and checks the answer; an invalid one goes back to the model
    /// with its problems, up to `asked.repairs` times, each repair audited
    /// ([`AuditEvent::AnswerRepair`]). The valid answer is remembered as a turn of the agent's
    /// conversation.
    ///
    /// A repair request is the question, the last answer and that answer's problems (not every
    /// earlier answer: the request stays the size of one repair, and a small model reads the
    /// problems of the answer it just gave). An answer that repeats the previous invalid one
    /// exactly is left out of the next repair request, which gives its problems only: a model
    /// that copies the last JSON it read (a small one decoding greedily) would repeat it again.
    async fn ask_asked<T>(
        &self,
        who: Persona<'_>,
        asked: Asked,
        check: impl Fn(&Value) -> Result<T, String>,
    ) -> Result<T, Unanswered> {
        let Asked { decision, prompt, schema, exempt, max_tokens, repairs } = asked;
        let failed = |e: String| Unanswered::Failed(self.backend(e));
        let me = &who.config.id;
        let history = self.conversations.get(me).map_err(|e| failed(e.to_string()))?;
        let mut request = ChatRequest {
            system: self.system(who, history.dropped).await,
            messages: history.messages(),
            tools: Vec::new(),
            require_tool: false,
            response: ResponseFormat::Json { name: decision.to_owned(), schema: schema.clone() },
            max_tokens,
            temperature: who.config.temperature.or(self.settings.temperature),
        };
        request.messages.push(ChatMessage::user(prompt.clone()));
        let question_ends = request.messages.len();
        let mut answers = 0_u32;
        let mut previous: Option<String> = None;
        loop {
            let response = self.call(who, &request, exempt).await.map_err(Unanswered::Failed)?;
            answers += 1;
            let answer = response.text.trim().to_owned();
            let checked = serde_json::from_str::<Value>(&answer)
                .map_err(|e| format!("the answer is not JSON ({e})"))
                .and_then(|v| {
                    let problems = validate(&schema, &v);
                    if problems.is_empty() { Ok(v) } else { Err(listed(problems)) }
                })
                .and_then(|v| check(&v));
            let problems = match checked {
                Ok(value) => {
                    self.conversations
                        .push(me, Turn { decision: decision.to_owned(), prompt, answer })
                        .map_err(|e| failed(e.to_string()))?;
                    return Ok(value);
                }
                Err(problems) => problems,
            };
            let repair = answers;
            tracing::warn!(agent = %me, decision, answer = answers, problems = %problems, "invalid answer from the model");
            if repair > repairs {
                return Err(Unanswered::Invalid { answers, problems });
            }
            let event = AuditEvent::AnswerRepair {
                decision: decision.to_owned(),
                repair,
                max_repairs: repairs,
                problems: problems.clone(),
            };
            if let Err(error) = agent_core::audit_reasoning(event).await {
                tracing::warn!(agent = %me, decision, %error, "could not audit a repair");
            }
            request.messages.truncate(question_ends);
            if previous.as_deref() == Some(answer.as_str()) {
                // The same invalid answer again: a model that copies the last JSON it read
                // would write it once more. This repair leaves it out, so the last JSON before
                // the answer is the question's own example.
                request.messages.push(ChatMessage::user(format!(
                    "Your answer to that question was invalid again, the same as before: \
                     {problems}. Answer the question anew, differently, with only JSON that \
                     matches the schema."
                )));
            } else {
                request.messages.push(ChatMessage::assistant(stripped(&answer)));
                request.messages.push(ChatMessage::user(format!(
                    "That answer is invalid: {problems}. Answer the same question again, with \
                     only JSON that matches the schema."
                )));
            }
            previous = Some(answer);
        }
    }

    /// The tools offered in the tool loop, `finish_subtask` last: the tools the persona holds
    /// when its layer says; else the agent's tools from the map (unless the settings offer only
    /// the step's tool) and the step's own tool, if it has one. `history` is the subtask's
    /// calls so far (a small model's file writes are offered the named paths not written yet).
    fn offered_tools(
        &self,
        who: Persona<'_>,
        subtask: &Subtask,
        history: &[ToolCallRecord],
    ) -> Vec<ToolSpec> {
        let step = &subtask.step;
        let scripted = step.is_scripted();
        let only_the_steps = scripted && !self.settings.offer_agent_tools;
        let mut names: Vec<&str> = if only_the_steps {
            Vec::new()
        } else if !who.tools.is_empty() {
            who.tools.iter().map(String::as_str).collect()
        } else {
            self.agent_tools
                .get(&who.config.id)
                .map(|t| t.iter().map(String::as_str).collect())
                .unwrap_or_default()
        };
        if scripted
            && (only_the_steps || who.tools.is_empty())
            && !names.contains(&step.tool.as_str())
        {
            names.insert(0, &step.tool);
        }
        let mut seen = std::collections::BTreeSet::new();
        names.retain(|n| !n.is_empty() && *n != FINISH_TOOL && seen.insert(*n));
        let mut out: Vec<ToolSpec> = names
            .into_iter()
            .map(|n| {
                let mut spec = self.tools.get(n).cloned().unwrap_or_else(|| {
                    if let Some(agent) = supervisor_tool_spec(n).filter(|_| is_agent_tool(n)) {
                        ToolSpec {
                            name: agent.name.to_owned(),
                            description: agent.description.to_owned(),
                            parameters: agent.parameters,
                        }
                    } else if let Some(call) = agent_state::ooda::call_spec(n) {
                        // An OODA agent's own calls (`modify_self`, `send_message`).
                        ToolSpec {
                            name: call.name.to_owned(),
                            description: call.description.to_owned(),
                            parameters: call.parameters,
                        }
                    } else {
                        ToolSpec {
                            name: n.to_owned(),
                            description: format!("the tool `{n}`"),
                            parameters: json!({"type": "object"}),
                        }
                    }
                });
                if self.settings.planned_arguments_only && scripted && n == step.tool {
                    spec.parameters = planned_only(&step.args);
                } else if self.settings.planned_arguments_only && !scripted {
                    // A goal step on a small model: it writes the arguments itself.
                    let mut paths = mentioned_paths(step);
                    if has_text_body(&spec.parameters) {
                        paths = not_yet_written(paths, n, history);
                    }
                    spec.parameters = for_small_model(&spec.parameters, &paths);
                }
                spec
            })
            .collect();
        out.push(ToolSpec {
            name: FINISH_TOOL.into(),
            description: "End the subtask: say whether it succeeded and what was done.".into(),
            parameters: json!({
                "type": "object",
                "properties": {
                    "success": {"type": "boolean"},
                    "summary": {"type": "string", "minLength": 1}
                },
                "required": ["success", "summary"],
                "additionalProperties": false
            }),
        });
        out
    }

    /// A small model's call of a tool whose [`TEXT_BODY`] was left out of its JSON
    /// ([`for_small_model`]), with the body written: the model is asked, in a text call of its
    /// own, for the file's content alone, given the step and the file's path. Any other action
    /// is returned as it is.
    async fn text_body(
        &self,
        who: Persona<'_>,
        subtask: &Subtask,
        offered: &[ToolSpec],
        action: NextAction,
    ) -> Result<NextAction, ReasonError> {
        let NextAction::Call(mut call) = action else { return Ok(action) };
        let narrowed = offered
            .iter()
            .find(|t| t.name == call.tool)
            .is_some_and(|t| !has_text_body(&t.parameters));
        let own = self.tools.get(&call.tool).is_some_and(|t| has_text_body(&t.parameters));
        let Value::Object(args) = &mut call.args else { return Ok(NextAction::Call(call)) };
        if !narrowed || !own || args.contains_key(TEXT_BODY) {
            return Ok(NextAction::Call(call));
        }
        let step = &subtask.step;
        let path = args.get("path").and_then(Value::as_str).unwrap_or("the file").to_owned();
        // The task and the file only: the step's acceptance is about the whole step (its
        // tests pass, say), not about this file's content, and a small model given it writes
        // about it (with a lead's "It is done when: what the goal asks for is done" in the
        // request, the 270M model wrote "This is a list of tasks for the project." as the
        // whole todo list). A worker's task from a small model's lead carries the acceptance
        // after [`DONE_WHEN`]: that part is left out too.
        let task = step.description.split(DONE_WHEN).next().unwrap_or_default();
        let mut instruction =
            format!("Task: {}\nWrite the complete content of {path}.", task.trim());
        let language = fence_language(&path);
        let mut messages = Vec::new();
        if self.provider.continues_assistant() {
            // The answer starts as a file shown in a reply does: a base model continues it
            // with the file (asked to "write the content", the 270M model repeated the request).
            messages.push(ChatMessage::user(instruction));
            messages.push(ChatMessage::assistant(format!("Here is {path}:\n\n```{language}\n")));
        } else {
            let _ = write!(
                instruction,
                " Answer with the file's content alone, in one ```{language} code block."
            );
            messages.push(ChatMessage::user(instruction));
        }
        let request = self.writing(who, self.context(who, 0).await, messages);
        let response = self.call(who, &request, false).await?;
        let continued = self.provider.continues_assistant();
        args.insert(TEXT_BODY.to_owned(), Value::String(file_text(&response.text, continued)));
        Ok(NextAction::Call(call))
    }

    /// A request for a text to write (a file's content, a composed text): no tools, free
    /// text, the longer token limit of a plan.
    fn writing(&self, who: Persona<'_>, system: String, messages: Vec<ChatMessage>) -> ChatRequest {
        ChatRequest {
            system,
            messages,
            tools: Vec::new(),
            require_tool: false,
            response: ResponseFormat::Text,
            max_tokens: self.settings.max_tokens.max(self.settings.plan_max_tokens),
            temperature: who.config.temperature.or(self.settings.temperature),
        }
    }

    /// Checks a tool call the model made.
    fn check_call(
        &self,
        offered: &[ToolSpec],
        call: &ProviderToolCall,
    ) -> Result<NextAction, String> {
        let Some(spec) = offered.iter().find(|t| t.name == call.name) else {
            let names: Vec<&str> = offered.iter().map(|t| t.name.as_str()).collect();
            return Err(format!(
                "{} is not one of the offered tools ({})",
                shown(&call.name),
                names.join(", ")
            ));
        };
        let args: Value = serde_json::from_str(if call.arguments.trim().is_empty() {
            "{}"
        } else {
            &call.arguments
        })
        .map_err(|e| format!("the arguments of `{}` are not JSON ({e})", call.name))?;
        let problems = validate(&spec.parameters, &args);
        if !problems.is_empty() {
            return Err(format!(
                "the arguments of `{}` are invalid: {}",
                call.name,
                listed(problems)
            ));
        }
        if call.name == FINISH_TOOL {
            let success = args.get("success").and_then(Value::as_bool).unwrap_or(false);
            let summary = stripped(args.get("summary").and_then(Value::as_str).unwrap_or_default());
            return Ok(NextAction::Finish { success, summary });
        }
        Ok(NextAction::Call(ToolCall { tool: call.name.clone(), args }))
    }
}

#[async_trait]
impl Reasoner for LlmReasoner {
    fn name(&self) -> &str {
        &self.name
    }

    async fn review_decision(
        &self,
        who: Persona<'_>,
        decision: &Decision,
    ) -> Result<Verdict, ReasonError> {
        let budget =
            decision.content.get("kind").and_then(Value::as_str) == Some(BUDGET_DECISION_KIND);
        let what = if budget {
            "The run has reached its reasoning budget and asks to extend it."
        } else {
            "A plan needs your signature."
        };
        let prompt = format!(
            "{what}\nDecision {} proposed by {}:\n{}\n\nSign it if it is sound and safe for \
             your responsibilities; veto it, with the reason, if not.\nExample answer: \
             {{\"verdict\": \"sign\", \"reason\": \"the steps are safe\"}}",
            decision.id,
            decision.proposer,
            pretty(&decision.content)
        );
        let schema = json!({
            "type": "object",
            "properties": {
                "verdict": {"enum": ["sign", "veto"]},
                "reason": {"type": "string"}
            },
            "required": ["verdict", "reason"]
        });
        self.ask(who, "review", prompt, schema, budget, |v| {
            let reason = stripped(v.get("reason").and_then(Value::as_str).unwrap_or_default());
            match v.get("verdict").and_then(Value::as_str) {
                Some("sign") => Ok(Verdict::Sign),
                Some("veto") if reason.is_empty() => Err("a veto needs a reason".into()),
                Some("veto") => Ok(Verdict::Veto { reason }),
                other => Err(format!(
                    "`verdict` must be \"sign\" or \"veto\", not {}",
                    other.map_or_else(|| "missing".to_owned(), quoted)
                )),
            }
        })
        .await
    }

    async fn vote(
        &self,
        who: Persona<'_>,
        conflict: &Conflict,
    ) -> Result<BallotChoice, ReasonError> {
        if conflict.options.is_empty() {
            return Err(ReasonError::BadQuestion(format!(
                "conflict `{}` has no options",
                conflict.id
            )));
        }
        let prompt = format!(
            "Arbitrate conflict {} between {}: {}\nOptions:\n{}\nChoose one option.\n\
             Example answer: {{\"choice\": {}, \"reason\": \"...\"}}",
            conflict.id,
            join(conflict.parties.iter().map(AgentId::as_str)),
            conflict.issue,
            conflict.options.iter().map(|o| format!("- {o}")).collect::<Vec<_>>().join("\n"),
            Value::from(conflict.options[0].as_str()),
        );
        let schema = json!({
            "type": "object",
            "properties": {
                "choice": {"enum": conflict.options},
                "reason": {"type": "string"}
            },
            "required": ["choice", "reason"]
        });
        self.ask(who, "vote", prompt, schema, false, |v| {
            let choice = v.get("choice").and_then(Value::as_str).unwrap_or_default();
            if conflict.options.iter().any(|o| o == choice) {
                Ok(BallotChoice::from(choice))
            } else {
                Err(format!("{} is not one of the options", shown(choice)))
            }
        })
        .await
    }

    async fn decompose(
        &self,
        who: Persona<'_>,
        work: &WorkPackage,
        team: &[Candidate],
    ) -> Result<Vec<Placement>, ReasonError> {
        let available: Vec<&Candidate> = team.iter().filter(|c| c.available).collect();
        if work.steps.is_empty() {
            return Ok(Vec::new());
        }
        if available.is_empty() {
            return Err(ReasonError::Unplaceable {
                step: work.steps[0].id.clone(),
                reason: "no executor of this lead is available".into(),
            });
        }
        let eligible = eligible(work, &available)?;
        let prompt = placement_prompt(work, &eligible, &available);
        let schema = placement_schema(work, &eligible);
        self.ask(who, "decompose", prompt, schema, false, |v| {
            let chosen = v.get("placements").and_then(Value::as_object);
            let mut out = Vec::with_capacity(eligible.len());
            for (step, ids) in &eligible {
                let Some(who) = chosen.and_then(|c| c.get(&step.id)).and_then(Value::as_str) else {
                    return Err(format!("step `{}` is not placed", step.id));
                };
                if !ids.contains(&who) {
                    return Err(format!(
                        "step `{}` cannot go to {}; it can go to {}",
                        step.id,
                        shown(who),
                        ids.join(", ")
                    ));
                }
                let Some(c) = available.iter().find(|c| c.id.as_str() == who) else {
                    return Err(format!("{} is not an available executor", shown(who)));
                };
                out.push(Placement { step: (*step).clone(), assignee: c.id.clone() });
            }
            Ok(out)
        })
        .await
    }

    async fn next_action(
        &self,
        who: Persona<'_>,
        subtask: &Subtask,
        history: &[ToolCallRecord],
    ) -> Result<NextAction, ReasonError> {
        let me = &who.config.id;
        let offered = self.offered_tools(who, subtask, history);
        if self.settings.scripted_supervision
            && let Some(action) = scripted_supervision(&offered, subtask, who.roles, history)
        {
            return Ok(action);
        }
        let past = self.conversations.get(me).map_err(|e| self.backend(e.to_string()))?;
        // An agent that holds `return_results` concludes with it (the runtime turns it into
        // the step's result); `finish_subtask` still ends the step too.
        let returns = offered.iter().any(|t| t.name == RETURN_RESULTS);
        let conclude = if returns { RETURN_RESULTS } else { FINISH_TOOL };
        let prompt = step_prompt(subtask, returns, who.roles);
        let mut request = ChatRequest {
            system: self.system(who, past.dropped).await,
            messages: past.messages(),
            tools: offered.clone(),
            require_tool: true,
            response: ResponseFormat::Text,
            max_tokens: self.settings.max_tokens,
            temperature: who.config.temperature.or(self.settings.temperature),
        };
        request.messages.push(ChatMessage::user(prompt.clone()));
        let chars = self.settings.tool_output_chars;
        request.messages.extend(history_messages(history, conclude, chars));
        let mut last_problem = String::new();
        // The last tool call the model made, however wrong: what the loop passes on if the
        // repair fails too.
        let mut last_call: Option<ProviderToolCall> = None;
        for attempt in 0..2 {
            let response = self.call(who, &request, false).await?;
            let checked = match response.tool_calls.first() {
                Some(call) => self.check_call(&offered, call).map_err(|p| (p, Some(call.clone()))),
                None => Err((
                    format!("no tool was called; call one of the offered tools or `{conclude}`"),
                    None,
                )),
            };
            match checked {
                Ok(action) => {
                    let action = finish_a_repeat(action, history);
                    return self.text_body(who, subtask, &offered, action).await;
                }
                Err((problem, call)) => {
                    tracing::warn!(agent = %me, attempt, problem = %problem, "invalid tool call from the model");
                    if let Some(call) = &call {
                        last_call = Some(call.clone());
                    }
                    let bad = ChatMessage::assistant(response.text.clone());
                    request.messages.extend(repair_messages(bad, call, &problem));
                    last_problem = problem;
                }
            }
        }
        // Wrong twice. A model that called no tool at all cannot go on; a call, however wrong,
        // goes to the runtime, whose refusal the model reads in its history and can correct.
        let Some(call) = last_call else {
            return Err(self.invalid("next_action", &last_problem));
        };
        let action = pass_on(&call, &last_problem);
        tracing::warn!(agent = %me, tool = %call.name, problem = %last_problem, "the model's tool call is still invalid after the repair; passed on for the runtime to refuse");
        Ok(action)
    }

    async fn judge_progress(
        &self,
        who: Persona<'_>,
        task: &Task,
        results: &[SubtaskResult],
        global_board: &str,
    ) -> Result<Judgement, ReasonError> {
        let mut prompt = format!(
            "Judge whether task {} is complete and acceptable.\nGoal: {}\nSteps: {}\nResults:\n",
            task.id,
            task.goal,
            join(task.steps.iter().map(|s| s.id.as_str()))
        );
        for r in results {
            let _ = writeln!(
                prompt,
                "- {} by {}: {} — {}",
                r.step_id,
                r.agent,
                if r.success { "succeeded" } else { "failed" },
                tail(&r.output, 400)
            );
        }
        if !global_board.trim().is_empty() {
            let _ = writeln!(
                prompt,
                "Global whiteboard (latest part):\n{}",
                tail(global_board, self.settings.board_chars)
            );
        }
        prompt.push_str(
            "Example answer: {\"complete\": true, \"summary\": \"every step succeeded\"}",
        );
        let schema = json!({
            "type": "object",
            "properties": {
                "complete": {"type": "boolean"},
                "summary": {"type": "string"}
            },
            "required": ["complete", "summary"]
        });
        self.ask(who, "judge", prompt, schema, false, |v| {
            Ok(Judgement {
                complete: v.get("complete").and_then(Value::as_bool).unwrap_or(false),
                summary: stripped(v.get("summary").and_then(Value::as_str).unwrap_or_default()),
            })
        })
        .await
    }

    fn plans(&self) -> bool {
        true
    }

    async fn plan(
        &self,
        who: Persona<'_>,
        task: &Task,
        roles: &RoleBook,
    ) -> Result<Plan, ReasonError> {
        let question = plan::PlanQuestion::new(task, roles, who.domains);
        let asked = Asked {
            decision: "plan",
            prompt: question.prompt.clone(),
            schema: question.schema.clone(),
            exempt: false,
            max_tokens: self.settings.max_tokens.max(self.settings.plan_max_tokens),
            repairs: self.settings.plan_repairs,
        };
        self.ask_asked(who, asked, |v| question.check(v)).await.map_err(|unanswered| {
            match unanswered {
                Unanswered::Failed(error) => error,
                // No valid plan after its repairs: the plan is invalid (the top power fails
                // the task with these problems), not the call failed (a failed call's turn is
                // tried again from scratch, which a greedy model answers the same way).
                Unanswered::Invalid { answers, problems } => ReasonError::BadQuestion(format!(
                    "{} model `{}` gave no valid plan in {answers} answers ({} repairs); \
                         the last answer's problems: {problems}",
                    self.provider.name(),
                    self.provider.model(),
                    answers.saturating_sub(1)
                )),
            }
        })
    }

    async fn concluded(
        &self,
        who: Persona<'_>,
        subtask: &Subtask,
        history: &[ToolCallRecord],
        ending: &str,
    ) -> Result<(), ReasonError> {
        // One turn of the agent's conversation per step, written when the step really ends.
        let returns = who.tools.iter().any(|t| t == RETURN_RESULTS);
        let prompt = step_prompt(subtask, returns, who.roles);
        let calls: Vec<String> = history
            .iter()
            .filter(|r| !r.event)
            .map(|r| format!("{}({})", r.call.tool, r.call.args))
            .collect();
        let answer = format!("called [{}]; {ending}", calls.join(", "));
        self.conversations
            .push(&who.config.id, Turn { decision: "next_action".into(), prompt, answer })
            .map_err(|e| self.backend(e.to_string()))
    }

    async fn answer(
        &self,
        who: Persona<'_>,
        from: &AgentId,
        message: &str,
        context: &str,
    ) -> Result<String, ReasonError> {
        let speaker = if who.config.supervisor.as_ref() == Some(from) {
            format!("Your supervisor {from}")
        } else {
            from.to_string()
        };
        let mut prompt = format!("{speaker} says to you: {}\n", message.trim());
        if context.trim().is_empty() {
            prompt.push_str("You have no work in hand.\n");
        } else {
            let _ = writeln!(
                prompt,
                "What you are doing now:\n{}",
                tail(context.trim(), self.settings.board_chars)
            );
        }
        let _ = write!(
            prompt,
            "Reply to {from} in a few sentences: answer the question or acknowledge the \
             instruction, and say where your work stands.\nExample answer: {{\"reply\": \
             \"Understood; the tests are written and I am running them now.\"}}"
        );
        let schema = json!({
            "type": "object",
            "properties": {"reply": {"type": "string", "minLength": 1}},
            "required": ["reply"]
        });
        let max_tokens = self.settings.max_tokens.min(ANSWER_MAX_TOKENS);
        let asked =
            Asked { decision: "answer", prompt, schema, exempt: false, max_tokens, repairs: 1 };
        self.ask_limited(who, asked, |v| {
            match v.get("reply").and_then(Value::as_str).map(stripped) {
                Some(reply) if !reply.is_empty() => Ok(reply),
                _ => Err("`reply` must say something".to_owned()),
            }
        })
        .await
    }

    async fn compose(
        &self,
        who: Persona<'_>,
        instruction: &str,
        material: &str,
    ) -> Result<String, ReasonError> {
        let mut prompt = instruction.trim().to_owned();
        if !material.trim().is_empty() {
            let _ = write!(prompt, "\n\nMaterial:\n{}", material.trim());
        }
        prompt.push_str("\n\nAnswer with the text itself, without remarks about it.");
        let mut system = self.context(who, 0).await;
        system.push_str("\n\nYou are asked to write a text: answer with the text, not JSON.");
        let request = self.writing(who, system, vec![ChatMessage::user(prompt)]);
        let response = self.call(who, &request, false).await?;
        let text = response.text.trim();
        if text.is_empty() {
            tracing::warn!(agent = %who.config.id, "the model composed an empty text");
            return Err(self.backend(format!(
                "{} model `{}` answered with no text to a request to write ({})",
                self.provider.name(),
                self.provider.model(),
                instruction.lines().next().unwrap_or_default().chars().take(80).collect::<String>()
            )));
        }
        Ok(text.to_owned())
    }
}

/// The language tag of a code fence around the file `path`, by its extension.
fn fence_language(path: &str) -> &'static str {
    match path.rsplit_once('.').map(|(_, ext)| ext.to_ascii_lowercase()).as_deref() {
        Some("py") => "python",
        Some("rs") => "rust",
        Some("md") => "markdown",
        Some("toml") => "toml",
        Some("json") => "json",
        Some("sh") => "sh",
        Some("js") => "javascript",
        Some("ts") => "typescript",
        Some("yaml" | "yml") => "yaml",
        _ => "",
    }
}

/// A file's content as a model wrote it, ending with one newline. `continued`: the text
/// continues an opened code fence (a prefill), so it ends at the first fence line; otherwise
/// a model that answered anew put the file in a code block (perhaps after a remark), whose
/// content is taken, or wrote the file bare.
fn file_text(text: &str, continued: bool) -> String {
    let is_fence = |line: &str| line.trim_start().starts_with("```");
    let lines: Vec<&str> = text.lines().collect();
    let body: &[&str] = match lines.iter().position(|l| is_fence(l)) {
        Some(close) if continued => &lines[..close],
        Some(open) => {
            let rest = &lines[open + 1..];
            &rest[..rest.iter().position(|l| is_fence(l)).unwrap_or(rest.len())]
        }
        None => &lines,
    };
    let mut out = body.join("\n").trim_matches('\n').trim_end().to_owned();
    out.push('\n');
    out
}

/// A role's description for a prompt.
fn described(description: &str) -> &str {
    let d = description.trim();
    if d.is_empty() { "(no description)" } else { d }
}

/// Most distinct problems of one answer put in a repair prompt or an error.
const MOST_PROBLEMS: usize = 8;

/// Most characters of one problem (it may quote what the model wrote).
const PROBLEM_CHARS: usize = 300;

/// Problems as one text: each once, on one line, without the chat template's tokens, at most
/// [`MOST_PROBLEMS`] of them and how many more.
fn listed(problems: Vec<String>) -> String {
    let mut distinct: Vec<String> = Vec::new();
    for p in problems {
        let p = one_line(&stripped(&p), PROBLEM_CHARS);
        if !distinct.contains(&p) {
            distinct.push(p);
        }
    }
    let more = distinct.len().saturating_sub(MOST_PROBLEMS);
    distinct.truncate(MOST_PROBLEMS);
    let mut text = distinct.join("; ");
    if more > 0 {
        let _ = write!(text, "; and {more} more problem(s)");
    }
    text
}

/// A structured question for [`LlmReasoner::ask_asked`].
struct Asked {
    /// The decision's name (the schema's name, the conversation turn's).
    decision: &'static str,
    /// The question.
    prompt: String,
    /// The answer's JSON Schema.
    schema: Value,
    /// Whether the call may spend a budget that is used up (a budget extension's review).
    exempt: bool,
    /// Most tokens the answer may have.
    max_tokens: u32,
    /// Most repairs an invalid answer gets.
    repairs: u32,
}

/// Why a structured question has no valid answer.
enum Unanswered {
    /// A call failed (the provider, the budget, the conversation store).
    Failed(ReasonError),
    /// Every answer was invalid, the repairs' too.
    Invalid {
        /// How many answers the model gave.
        answers: u32,
        /// The last answer's problems.
        problems: String,
    },
}

/// A reservation held while its call runs; dropped unsettled (the call was cancelled), it books
/// the call as failed: it may have reached the provider, which counted whatever it read.
struct Held<'a> {
    ledger: &'a UsageLedger,
    site: &'a CallSite,
    reservation: Option<Reservation>,
}

impl Held<'_> {
    fn settle(&mut self, usage: Usage) {
        if let Some(reservation) = self.reservation.take() {
            self.ledger.settle(reservation, self.site, usage);
        }
    }

    fn fail(&mut self) {
        if let Some(reservation) = self.reservation.take() {
            self.ledger.fail(reservation, self.site);
        }
    }
}

impl Drop for Held<'_> {
    fn drop(&mut self) {
        if self.reservation.is_some() {
            tracing::debug!(agent = %self.site.agent, "model call cancelled; booked as failed");
            self.fail();
        }
    }
}

/// Keeps the record of one model call in the ledger ([`crate::calls`]): when it ends, or as
/// cancelled when dropped before.
struct Recorder<'a> {
    ledger: &'a UsageLedger,
    site: &'a CallSite,
    request: &'a ChatRequest,
    call: u64,
    started_ms: u64,
    started: tokio::time::Instant,
    done: bool,
}

impl<'a> Recorder<'a> {
    fn new(
        ledger: &'a UsageLedger,
        site: &'a CallSite,
        request: &'a ChatRequest,
        call: u64,
    ) -> Self {
        let started_ms = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX));
        Self {
            ledger,
            site,
            request,
            call,
            started_ms,
            started: tokio::time::Instant::now(),
            done: false,
        }
    }

    fn finish(&mut self, result: Result<&ChatResponse, (String, String)>, retries: u64) {
        self.done = true;
        let prices = self.ledger.prices();
        let cost_usd = match (&result, prices.get(&self.site.model)) {
            (Ok(response), Some(_)) => Some(prices.cost(&self.site.model, response.usage)),
            (Err(_), Some(_)) => Some(0.0),
            (_, None) => None,
        };
        let facts = crate::calls::CallFacts {
            site: self.site,
            call: self.call,
            started_ms: self.started_ms,
            latency_ms: u64::try_from(self.started.elapsed().as_millis()).unwrap_or(u64::MAX),
            retries,
            cost_usd,
        };
        let record = crate::calls::CallRecord::new(&facts, self.request, result);
        // The record is for looking back; a store that cannot take it does not fail the call
        // (the run's own commits report a failing store).
        if let Err(e) = self.ledger.record_call(record) {
            tracing::error!(agent = %self.site.agent, error = %e, "could not store the model call's record");
        }
    }
}

impl Drop for Recorder<'_> {
    fn drop(&mut self) {
        if !self.done {
            let why = "the call was cancelled before it ended (its agent's turn ended)";
            self.finish(Err(("cancelled".to_owned(), why.to_owned())), 0);
        }
    }
}

/// The tool loop's question: the step, and for a scripted step the plan's call for it; for a
/// goal step what to achieve, and that the agent chooses its own calls.
/// A supervising lead's next action without the model ([`LlmSettings::scripted_supervision`]):
/// `None` when `offered` holds no `spawn_agent` or the lead may spawn no role (a loop of
/// another kind). In order: a worker's results arrived, so finish the step with them (success
/// as the worker said); a worker was spawned, so finish, which the loop turns into a wait for
/// its results while it works; a spawn failed, so fail the step with its refusal; else spawn
/// one worker of the step's role (or the first role the lead may spawn) with the step's
/// description and acceptance as its task.
fn scripted_supervision(
    offered: &[ToolSpec],
    subtask: &Subtask,
    roles: &[(String, String)],
    history: &[ToolCallRecord],
) -> Option<NextAction> {
    if !offered.iter().any(|t| t.name == SPAWN_AGENT) {
        return None;
    }
    let first_role = &roles.first()?.0;
    if let Some(results) = history.iter().rev().find(|r| r.event && r.call.tool == RETURN_RESULTS) {
        return Some(NextAction::Finish {
            success: results.success,
            summary: results.output.clone(),
        });
    }
    let spawns = || history.iter().filter(|r| !r.event && r.call.tool == SPAWN_AGENT);
    if spawns().any(|r| r.success) {
        return Some(NextAction::Finish {
            success: true,
            summary: "the worker has the step; its results finish it".to_owned(),
        });
    }
    if let Some(refused) = spawns().next_back() {
        return Some(NextAction::Finish { success: false, summary: refused.output.clone() });
    }
    let step = &subtask.step;
    let role = step
        .role
        .as_deref()
        .filter(|role| roles.iter().any(|(name, _)| name == role))
        .unwrap_or(first_role);
    let mut task = step.description.clone();
    if !step.acceptance.trim().is_empty() {
        task.push_str(DONE_WHEN);
        task.push_str(step.acceptance.trim());
    }
    Some(NextAction::Call(ToolCall {
        tool: SPAWN_AGENT.to_owned(),
        args: json!({"role_name": role, "task_prompt": task}),
    }))
}

fn step_prompt(subtask: &Subtask, returns: bool, roles: &[(String, String)]) -> String {
    let step = &subtask.step;
    let mut prompt =
        format!("Carry out step {} of task {}: {}\n", step.id, subtask.task_id, step.description);
    if step.is_scripted() {
        let planned = json!({ "tool": step.tool, "arguments": step.args });
        let _ = writeln!(prompt, "The plan's call for it: {planned}");
    }
    if !step.acceptance.trim().is_empty() {
        let _ = writeln!(prompt, "It is accepted when: {}", step.acceptance.trim());
    }
    if !step.is_scripted() {
        prompt.push_str(
            "The plan names no tool for this step: choose the tools you need yourself.\n",
        );
    }
    if let Some(role) = step.role.as_deref().filter(|r| !r.trim().is_empty()) {
        let _ = writeln!(prompt, "The plan gives this step to the role `{role}`.");
    }
    if !roles.is_empty() {
        prompt.push_str("The roles you may spawn with `spawn_agent`:\n");
        for (name, description) in roles {
            let _ = writeln!(prompt, "- {name}: {}", described(description));
        }
    }
    prompt.push_str("Call one tool at a time; when the step is done (or cannot be done), ");
    if returns {
        let _ = write!(
            prompt,
            "call `{RETURN_RESULTS}` with your result: its status, a summary, the files your \
             own calls created or changed, and any known issues."
        );
    } else {
        let _ =
            write!(prompt, "call `{FINISH_TOOL}` saying whether it succeeded and what was done.");
    }
    prompt
}

/// What the tool loop does with a call still invalid after the repair: a call of the tool
/// with the arguments as written (parsed, or `{"$unparsed": <text>}`), for the runtime to
/// refuse; a `finish_subtask` finishes with what its arguments say (`success` only if `true`).
fn pass_on(call: &ProviderToolCall, problem: &str) -> NextAction {
    let text = call.arguments.trim();
    let args = if text.is_empty() {
        json!({})
    } else {
        serde_json::from_str::<Value>(text)
            .unwrap_or_else(|_| json!({ "$unparsed": call.arguments }))
    };
    if call.name == FINISH_TOOL {
        let success = args.get("success").and_then(Value::as_bool).unwrap_or(false);
        let summary = args
            .get("summary")
            .and_then(Value::as_str)
            .map(stripped)
            .filter(|s| !s.is_empty())
            .unwrap_or_else(|| format!("the model finished with invalid arguments ({problem})"));
        return NextAction::Finish { success, summary };
    }
    NextAction::Call(ToolCall { tool: call.name.clone(), args })
}

/// An argument schema that accepts exactly `args` (each property one allowed value).
/// The string argument a small model writes as plain text, in a call of its own
/// ([`LlmReasoner::text_body`]), rather than inside its tool call's JSON: `write_file`'s
/// `content` (and any tool's string property of that name).
const TEXT_BODY: &str = "content";

/// What separates a step's description from its acceptance in the task a small model's lead
/// gives the worker it spawns ([`scripted_supervision`]).
const DONE_WHEN: &str = "\nIt is done when: ";

/// Whether a tool's `parameters` have a string [`TEXT_BODY`] property.
fn has_text_body(parameters: &Value) -> bool {
    parameters
        .get("properties")
        .and_then(|p| p.get(TEXT_BODY))
        .and_then(|p| p.get("type"))
        .and_then(Value::as_str)
        == Some("string")
}

/// A tool's parameters as a small model writing its own arguments gets them: without the
/// properties' descriptions (Gemma 3 270M copied them as values: it wrote "the complete new
/// content of the file" to a file named "file path relative to the workspace root"), with a
/// `path` property narrowed to the paths the step names, when it names any, and without the
/// [`TEXT_BODY`]: a file's content is written as text in a call of its own, not as a JSON
/// string (the 270M model, writing it inside the call, wrote the step's own words).
fn for_small_model(parameters: &Value, paths: &[String]) -> Value {
    let mut parameters = parameters.clone();
    if has_text_body(&parameters) {
        if let Some(properties) = parameters.get_mut("properties").and_then(Value::as_object_mut) {
            properties.remove(TEXT_BODY);
        }
        if let Some(required) = parameters.get_mut("required").and_then(Value::as_array_mut) {
            required.retain(|name| name != TEXT_BODY);
        }
    }
    if let Some(properties) = parameters.get_mut("properties").and_then(Value::as_object_mut) {
        for (name, property) in properties.iter_mut() {
            if let Some(property) = property.as_object_mut() {
                property.remove("description");
                if name == "path"
                    && !paths.is_empty()
                    && property.get("type").and_then(Value::as_str) == Some("string")
                {
                    property.insert("enum".to_owned(), json!(paths));
                }
            }
        }
    }
    parameters
}

/// Of `paths`, those that no successful call of `tool` in `history` wrote (all of them once
/// each was): a small model whose step names three files and that asks to write the first one
/// again (the 270M model wrote `test_wordcount.py` and asked for it again, which the loop guard
/// took for the end of the step) is offered the other two.
fn not_yet_written(paths: Vec<String>, tool: &str, history: &[ToolCallRecord]) -> Vec<String> {
    let written = |path: &String| {
        history.iter().any(|r| {
            !r.event
                && r.success
                && r.call.tool == tool
                && r.call.args.get("path").and_then(Value::as_str) == Some(path.as_str())
        })
    };
    let left: Vec<String> = paths.iter().filter(|p| !written(p)).cloned().collect();
    if left.is_empty() { paths } else { left }
}

/// The file paths a step's words name (its description and acceptance), in order, each once:
/// words with a `/` or a file extension (`notes/todo.md`, `wordcount.py`), stripped of quotes,
/// backticks and punctuation around them; not URLs.
fn mentioned_paths(step: &PlanStep) -> Vec<String> {
    let text = format!("{} {}", step.description, step.acceptance);
    let mut paths: Vec<String> = Vec::new();
    for word in text.split(|c: char| c.is_whitespace() || c == '`' || c == '"' || c == '\'') {
        let word = word.trim_matches(|c: char| {
            matches!(c, ',' | ';' | ':' | '.' | '(' | ')' | '[' | ']' | '!' | '?')
        });
        let plain =
            word.chars().all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.' | '/'));
        if !plain || word.is_empty() || word.contains("//") || word.starts_with('/') {
            continue;
        }
        let file = word.rsplit('/').next().unwrap_or(word);
        let extension = file.rsplit_once('.').filter(|(stem, ext)| {
            stem.len() > 1
                && (1..=5).contains(&ext.len())
                && ext.chars().all(|c| c.is_ascii_alphanumeric())
        });
        if (extension.is_some() || (word.contains('/') && !file.is_empty()))
            && !paths.iter().any(|p| p == word)
        {
            paths.push(word.to_owned());
        }
    }
    paths
}

fn planned_only(args: &Value) -> Value {
    let Some(map) = args.as_object() else {
        return json!({ "type": "object" });
    };
    let properties: serde_json::Map<String, Value> =
        map.iter().map(|(k, v)| (k.clone(), json!({ "enum": [v] }))).collect();
    let required: Vec<&String> = map.keys().collect();
    json!({
        "type": "object",
        "properties": properties,
        "required": required,
        "additionalProperties": false
    })
}

/// The loop guard of the tool loop: a model that calls again exactly the tool and arguments
/// of its last call, which succeeded, has nothing more to do (small models do this instead of
/// finishing). The call is not repeated; the subtask finishes with that call's result.
fn finish_a_repeat(action: NextAction, history: &[ToolCallRecord]) -> NextAction {
    match (&action, history.last().filter(|r| !r.event)) {
        (NextAction::Call(call), Some(last)) if last.success && same_call(call, &last.call) => {
            tracing::info!(tool = %call.tool, "the model repeated its last successful call; the subtask finishes with its result");
            NextAction::Finish {
                success: true,
                summary: format!(
                    "{} (finished by the loop guard: the model asked for the same call again)",
                    last.output
                ),
            }
        }
        _ => action,
    }
}

/// Whether `call` asks for `last` again: the same tool and arguments, where a call without
/// its [`TEXT_BODY`] (a small model's, whose body is written after) is compared without it.
fn same_call(call: &ToolCall, last: &ToolCall) -> bool {
    if call.tool != last.tool {
        return false;
    }
    match (&call.args, &last.args) {
        (Value::Object(new), Value::Object(old))
            if !new.contains_key(TEXT_BODY) && old.contains_key(TEXT_BODY) =>
        {
            let mut old = old.clone();
            old.remove(TEXT_BODY);
            *new == old
        }
        _ => call.args == last.args,
    }
}

/// Tokens of a request, estimated at 4 characters a token.
fn estimate_tokens(request: &ChatRequest) -> u64 {
    let mut chars = request.system.len();
    for m in &request.messages {
        chars += m.content.len();
        for c in &m.tool_calls {
            chars += c.name.len() + c.arguments.len();
        }
    }
    for t in &request.tools {
        chars += t.name.len() + t.description.len() + t.parameters.to_string().len();
    }
    if let ResponseFormat::Json { schema, .. } = &request.response {
        chars += schema.to_string().len();
    }
    (chars as u64).div_ceil(4)
}

/// Characters of each string argument of an earlier tool call shown back to the model.
const ARGUMENT_CHARS: usize = 1_000;

/// `args` as an earlier call is shown back to the model: each string longer than
/// [`ARGUMENT_CHARS`] (a file's content, say) cut to its start and marked. The model wrote it;
/// the whole of it again in every later prompt only fills the context (a small model's 8 KB
/// todo list took a server's 4 096-token context past its limit on the next call).
fn shortened(args: &Value) -> Value {
    match args {
        Value::String(s) if s.chars().nth(ARGUMENT_CHARS).is_some() => {
            let head: String = s.chars().take(ARGUMENT_CHARS).collect();
            let rest = s.chars().count() - ARGUMENT_CHARS;
            Value::String(format!("{head}[… {rest} more characters]"))
        }
        Value::Array(items) => Value::Array(items.iter().map(shortened).collect()),
        Value::Object(map) => {
            Value::Object(map.iter().map(|(k, v)| (k.clone(), shortened(v))).collect())
        }
        other => other.clone(),
    }
}

/// The last `max` characters of `s` (at a character boundary), marked if cut.
fn tail(s: &str, max: usize) -> String {
    let count = s.chars().count();
    if count <= max {
        return s.to_owned();
    }
    let cut: String = s.chars().skip(count - max).collect();
    format!("[…]{cut}")
}

fn pretty(v: &Value) -> String {
    serde_json::to_string_pretty(v).unwrap_or_else(|_| v.to_string())
}

fn join<'a>(items: impl Iterator<Item = &'a str>) -> String {
    items.collect::<Vec<_>>().join(", ")
}

/// The span of one reasoning call (OpenTelemetry GenAI conventions: `chat MODEL`, with the
/// provider, the model and, once it ended, the tokens in and out and the cost), or a disabled
/// one when telemetry is off.
fn chat_span(
    who: Persona<'_>,
    provider: &str,
    model: &str,
    request: &ChatRequest,
    call: u64,
) -> tracing::Span {
    if !agent_core::otel::enabled() {
        return tracing::Span::none();
    }
    tracing::info_span!(
        target: "strata::otel",
        "chat",
        otel.name = format!("chat {model}").as_str(),
        otel.kind = "client",
        gen_ai.operation.name = "chat",
        gen_ai.provider.name = provider,
        gen_ai.request.model = model,
        gen_ai.request.max_tokens = request.max_tokens,
        gen_ai.usage.input_tokens = tracing::field::Empty,
        gen_ai.usage.output_tokens = tracing::field::Empty,
        gen_ai.request.retries = tracing::field::Empty,
        strata.cost_usd = tracing::field::Empty,
        strata.call = call,
        agent.id = %who.config.id,
        agent.layer = %who.config.layer,
        error.type = tracing::field::Empty,
        otel.status_code = tracing::field::Empty,
    )
}

/// Who may take each step of `work`: the executor the plan names, if available, else every
/// available executor with the step's tool. The schema offers only those, so even a model
/// that cannot read the table answers with a valid placement.
fn eligible<'a>(
    work: &'a WorkPackage,
    available: &[&'a Candidate],
) -> Result<Vec<(&'a PlanStep, Vec<&'a str>)>, ReasonError> {
    let mut eligible: Vec<(&PlanStep, Vec<&str>)> = Vec::with_capacity(work.steps.len());
    for step in &work.steps {
        let named = match &step.target {
            StepTarget::Agent(id) => available.iter().find(|c| &c.id == id),
            _ => None,
        };
        // A goal step names no tool: any available executor may take it and choose its own
        // calls.
        let ids: Vec<&str> = match named {
            Some(c) => vec![c.id.as_str()],
            None => available
                .iter()
                .filter(|c| !step.is_scripted() || c.tools.contains(&step.tool))
                .map(|c| c.id.as_str())
                .collect(),
        };
        if ids.is_empty() {
            return Err(ReasonError::Unplaceable {
                step: step.id.clone(),
                reason: format!("no available executor has the tool `{}`", step.tool),
            });
        }
        eligible.push((step, ids));
    }
    Ok(eligible)
}

/// The question placing `work`'s steps: each step with the executors that may take it, the
/// executors with their tools and load, and an example answer.
fn placement_prompt(
    work: &WorkPackage,
    eligible: &[(&PlanStep, Vec<&str>)],
    available: &[&Candidate],
) -> String {
    let mut prompt =
        format!("Place each step of task {} on one of your executors.\nSteps:\n", work.task_id);
    for (s, ids) in eligible {
        let target = match &s.target {
            StepTarget::Agent(id) => format!(" (the plan names {id})"),
            _ => String::new(),
        };
        let tool = if s.is_scripted() {
            format!("tool `{}`", s.tool)
        } else {
            "no tool named (the executor chooses)".to_owned()
        };
        let _ = writeln!(
            prompt,
            "- {}: {} — {tool}{target}; can go to {}",
            s.id,
            s.description,
            ids.join(", ")
        );
    }
    prompt.push_str("Executors:\n");
    for c in available {
        let _ = writeln!(
            prompt,
            "- {}: tools [{}], {} subtasks now{}",
            c.id,
            c.tools.join(", "),
            c.load,
            if c.failed { ", failed recently" } else { "" }
        );
    }
    let example: serde_json::Map<String, Value> =
        eligible.iter().map(|(s, ids)| (s.id.clone(), Value::from(ids[0]))).collect();
    let _ = write!(
        prompt,
        "Give every step one executor that can take it; spread the load.\nExample answer: {}",
        json!({ "placements": example })
    );
    prompt
}

/// The schema of a placement answer: every step placed on one of the executors that may take
/// it.
fn placement_schema(work: &WorkPackage, eligible: &[(&PlanStep, Vec<&str>)]) -> Value {
    let properties: serde_json::Map<String, Value> =
        eligible.iter().map(|(s, ids)| (s.id.clone(), json!({ "enum": ids }))).collect();
    let step_ids: Vec<&str> = work.steps.iter().map(|s| s.id.as_str()).collect();
    json!({
        "type": "object",
        "properties": {
            "placements": {
                "type": "object",
                "properties": properties,
                "required": step_ids,
                "additionalProperties": false
            }
        },
        "required": ["placements"]
    })
}

/// The messages of a tool loop's `history`: what reached the agent as a user message, each call
/// the model made with its result (`chars` of its output at most; a success reminds it to
/// call `conclude` once the step is done).
fn history_messages(history: &[ToolCallRecord], conclude: &str, chars: usize) -> Vec<ChatMessage> {
    let mut messages = Vec::with_capacity(history.len() * 2);
    for (i, record) in history.iter().enumerate() {
        if record.event {
            // Something that reached the agent (a worker's results, words spoken to it): a
            // message, never a call the model did not make.
            messages.push(ChatMessage::user(format!(
                "[{}] {}",
                record.call.tool,
                tail(&record.output, chars)
            )));
            continue;
        }
        let id = format!("call-{i}");
        let mut call = ChatMessage::assistant("");
        call.tool_calls.push(ProviderToolCall {
            id: id.clone(),
            name: record.call.tool.clone(),
            arguments: shortened(&record.call.args).to_string(),
        });
        messages.push(call);
        let status = if record.success { "ok" } else { "failed" };
        let hint = if record.success {
            format!(" (if the step is done, call `{conclude}`)")
        } else {
            String::new()
        };
        messages.push(ChatMessage::tool_result(
            id,
            format!("{status}: {}{hint}", tail(&record.output, chars)),
        ));
    }
    messages
}

/// The messages that send an invalid answer back for repair: the answer `bad` (with its
/// `call`, if it made one) and what is wrong with it.
fn repair_messages(
    mut bad: ChatMessage,
    call: Option<ProviderToolCall>,
    problem: &str,
) -> [ChatMessage; 2] {
    match call {
        Some(call) => {
            let id = call.id.clone();
            bad.tool_calls.push(call);
            let error = format!("error: {problem}. Call a tool again with valid arguments.");
            [bad, ChatMessage::tool_result(id, error)]
        }
        None => [bad, ChatMessage::user(format!("That answer is invalid: {problem}."))],
    }
}

#[cfg(test)]
mod small_model_tests {
    use super::*;

    fn goal_step(description: &str, acceptance: &str) -> PlanStep {
        PlanStep::goal("s", description, agent_state::StepTarget::Domain("code".into()))
            .with_acceptance(acceptance)
    }

    #[test]
    fn a_step_names_its_files() {
        let step = goal_step(
            "Write a small Python module `wordcount.py` with a function `count_words(text)`, a \
             test file `test_wordcount.py` (run with `python3 test_wordcount.py`), and a README.md \
             e.g. from https://example.com/x.md.",
            "notes/todo.md exists",
        );
        assert_eq!(
            mentioned_paths(&step),
            ["wordcount.py", "test_wordcount.py", "README.md", "notes/todo.md"]
        );
        assert!(mentioned_paths(&goal_step("say hello", "")).is_empty());
    }

    #[test]
    fn a_small_model_gets_no_descriptions_to_copy_and_the_step_s_paths() {
        let write = json!({
            "type": "object",
            "properties": {
                "path": {"type": "string", "description": "file path relative to the workspace root"},
                "content": {"type": "string", "description": "the complete new content of the file"}
            },
            "required": ["path", "content"]
        });
        let narrowed = for_small_model(&write, &["notes/todo.md".to_owned()]);
        assert_eq!(
            narrowed["properties"]["path"],
            json!({"type": "string", "enum": ["notes/todo.md"]})
        );
        // The content is written as text after the call, not inside its JSON.
        assert_eq!(narrowed["properties"].get("content"), None);
        assert_eq!(narrowed["required"], json!(["path"]));
        // No path named: the path stays free, only its description goes.
        let free = for_small_model(&write, &[]);
        assert_eq!(free["properties"]["path"], json!({"type": "string"}));
    }

    #[test]
    fn a_file_s_text_loses_a_fence_around_it_and_ends_with_one_newline() {
        // Answered anew: the code block's content, after a remark too; bare text as it is.
        assert_eq!(file_text("- a\n- b", false), "- a\n- b\n");
        assert_eq!(file_text("\n```markdown\n# Todo\n- a\n```\n", false), "# Todo\n- a\n");
        assert_eq!(file_text("Here it is:\n```python\nx = 1\n```\nDone.", false), "x = 1\n");
        assert_eq!(file_text("```\nprint(1)\n", false), "print(1)\n", "an unclosed fence");
        assert_eq!(file_text("a ``` b", false), "a ``` b\n", "a fence inside a line is kept");
        // Continuing an opened fence: up to the closing one, remarks after it gone.
        let continued = "def f():\n    return 1\n```\n\nThis is f.";
        assert_eq!(file_text(continued, true), "def f():\n    return 1\n");
        assert_eq!(file_text("- a\n- b", true), "- a\n- b\n");
        assert_eq!(fence_language("notes/todo.md"), "markdown");
        assert_eq!(fence_language("wordcount.py"), "python");
        assert_eq!(fence_language("Makefile"), "");
    }

    #[test]
    fn an_earlier_call_is_shown_with_its_long_arguments_cut() {
        let long = "x".repeat(ARGUMENT_CHARS + 5);
        let args = json!({"path": "a.md", "content": long, "n": 3, "list": [long]});
        let shown = shortened(&args);
        let cut = format!("{}[… 5 more characters]", "x".repeat(ARGUMENT_CHARS));
        assert_eq!(shown, json!({"path": "a.md", "content": cut, "n": 3, "list": [cut]}));
        let short = json!({"path": "a.md", "content": "x".repeat(ARGUMENT_CHARS)});
        assert_eq!(shortened(&short), short, "an argument at the limit is shown whole");
    }

    #[test]
    fn a_call_without_its_body_repeats_the_same_call_with_one() {
        let call = |args: Value| ToolCall { tool: "write_file".into(), args };
        let written = call(json!({"path": "a.md", "content": "x"}));
        assert!(same_call(&call(json!({"path": "a.md"})), &written));
        assert!(!same_call(&call(json!({"path": "b.md"})), &written));
        assert!(same_call(&written, &written));
        assert!(!same_call(&call(json!({"path": "a.md", "content": "y"})), &written));
        let other = ToolCall { tool: "read_file".into(), args: json!({"path": "a.md"}) };
        assert!(!same_call(&other, &call(json!({"path": "a.md"}))));
    }

    #[test]
    fn a_small_model_s_lead_spawns_one_worker_waits_and_finishes_with_its_results() {
        let offered = vec![ToolSpec {
            name: SPAWN_AGENT.into(),
            description: String::new(),
            parameters: json!({}),
        }];
        let roles = vec![
            ("writer".to_owned(), "writes".to_owned()),
            ("coder".to_owned(), "codes".to_owned()),
        ];
        let mut step = goal_step("create notes/todo.md", "it lists three tasks");
        step.role = Some("coder".into());
        let subtask =
            Subtask { task_id: "t".into(), step, assignee: AgentId::new("lead"), attempt: 1 };
        let Some(NextAction::Call(call)) = scripted_supervision(&offered, &subtask, &roles, &[])
        else {
            panic!("a spawn")
        };
        assert_eq!(call.tool, SPAWN_AGENT);
        assert_eq!(call.args["role_name"], "coder");
        assert_eq!(
            call.args["task_prompt"],
            "create notes/todo.md\nIt is done when: it lists three tasks"
        );
        let record = |tool: &str, success: bool, event: bool, output: &str| ToolCallRecord {
            call: ToolCall { tool: tool.into(), args: json!({}) },
            success,
            output: output.into(),
            event,
        };
        let spawned = [record(SPAWN_AGENT, true, false, "coder-1")];
        assert!(matches!(
            scripted_supervision(&offered, &subtask, &roles, &spawned),
            Some(NextAction::Finish { success: true, .. })
        ));
        let reported = [spawned[0].clone(), record(RETURN_RESULTS, false, true, "results: failed")];
        assert_eq!(
            scripted_supervision(&offered, &subtask, &roles, &reported),
            Some(NextAction::Finish { success: false, summary: "results: failed".into() })
        );
        let refused = [record(SPAWN_AGENT, false, false, "max_instances reached")];
        assert_eq!(
            scripted_supervision(&offered, &subtask, &roles, &refused),
            Some(NextAction::Finish { success: false, summary: "max_instances reached".into() })
        );
        // Not a supervising loop: the model decides.
        assert!(scripted_supervision(&[], &subtask, &roles, &[]).is_none());
        assert!(scripted_supervision(&offered, &subtask, &[], &[]).is_none());
    }
}
