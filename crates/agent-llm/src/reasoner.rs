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
//!
//! In the tool loop, a call identical to the last one, which succeeded, is not repeated: the
//! subtask finishes with that result (the loop guard; small models repeat themselves instead
//! of finishing). The runtime also caps a subtask at `MAX_TOOL_CALLS_PER_SUBTASK` calls.
//!
//! The answer is checked against the schema and against the question (a vote names an option
//! on the ballot, every step is placed once on an available executor, tool arguments match
//! the tool's schema). An invalid answer gets **one repair attempt** that quotes the problems;
//! a second invalid answer is a [`ReasonError::Backend`], which the runtime treats like any
//! other task error (retries, then a failure report).
//!
//! The prompt is the agent's system prompt (role, layer, capabilities, responsibilities), the
//! tail of its own whiteboard and of the global board, its own bounded conversation
//! ([`crate::Conversations`]) and the question. Each call reserves its estimate in the team's
//! [`UsageLedger`] first, retries transient provider errors with the agent's backoff policy
//! ([`crate::complete_with_retry`]), and records the tokens the provider counted.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::sync::Arc;

use agent_core::tools::{ToolRegistry, validate};
use agent_core::{
    Candidate, Conflict, Judgement, NextAction, Persona, Placement, ReasonError, Reasoner,
    ToolCall, ToolCallRecord, Verdict,
};
use agent_state::{
    Actor, AgentId, AgentLayer, BoardId, Decision, PlanStep, RetryPolicy, StepTarget, Subtask,
    SubtaskResult, Task, WorkPackage,
};
use async_trait::async_trait;
use serde_json::{Value, json};
use whiteboard::Whiteboard;

use crate::conversation::{Conversations, Turn};
use crate::ledger::{CallSite, Pass, Reservation, UsageLedger};
use crate::provider::{
    ChatMessage, ChatRequest, ChatResponse, Provider, ProviderErrorKind, ProviderToolCall,
    ResponseFormat, ToolSpec, Usage,
};
use crate::retry::{RetryEvent, complete_with_retry};

/// The tool an executor calls to end its subtask.
pub const FINISH_TOOL: &str = "finish_subtask";

/// Content of a budget-extension decision (see [`crate::ApprovalDesk`]) carries this `kind`.
pub const BUDGET_DECISION_KIND: &str = agent_core::BUDGET_EXTENSION_KIND;

/// Knobs of an [`LlmReasoner`].
#[derive(Clone, Debug, PartialEq)]
pub struct LlmSettings {
    /// Most tokens a decision may generate (default 512).
    pub max_tokens: u32,
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
    /// finishing: for small models that cannot write arguments. Default off.
    pub planned_arguments_only: bool,
}

impl Default for LlmSettings {
    fn default() -> Self {
        Self {
            max_tokens: 512,
            board_chars: 2_000,
            tool_output_chars: 4_000,
            retry: None,
            offer_agent_tools: true,
            planned_arguments_only: false,
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
        }
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

    /// The system prompt: the agent's own, its boards' tails, and a note on dropped turns.
    async fn system(&self, who: Persona<'_>, dropped: u64) -> String {
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
        s.push_str("\n\nAnswer every question in the requested structured form only.");
        s
    }

    /// One model call: reserve, call with retries, record.
    async fn call(
        &self,
        who: Persona<'_>,
        request: &ChatRequest,
        exempt: bool,
    ) -> Result<ChatResponse, ReasonError> {
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
        let reservation = self
            .ledger
            .reserve_as(tokens, cost, pass)
            .await
            .map_err(|e| self.backend(e.to_string()))?;
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
        let result =
            complete_with_retry(self.provider.as_ref(), request, &policy, &mut observe).await;
        self.ledger.retried(&site, retried_failures, rate_limit_waits);
        match result {
            Ok((response, _)) => {
                held.settle(response.usage);
                Ok(response)
            }
            Err(e) => {
                held.fail();
                Err(self.backend(e.to_string()))
            }
        }
    }

    /// Asks a structured question, checks the answer, repairs once, remembers the turn.
    async fn ask<T>(
        &self,
        who: Persona<'_>,
        decision: &'static str,
        prompt: String,
        schema: Value,
        exempt: bool,
        check: impl Fn(&Value) -> Result<T, String>,
    ) -> Result<T, ReasonError> {
        let me = &who.config.id;
        let history = self.conversations.get(me).map_err(|e| self.backend(e.to_string()))?;
        let mut request = ChatRequest {
            system: self.system(who, history.dropped).await,
            messages: history.messages(),
            tools: Vec::new(),
            require_tool: false,
            response: ResponseFormat::Json { name: decision.to_owned(), schema: schema.clone() },
            max_tokens: self.settings.max_tokens,
            temperature: who.config.temperature,
        };
        request.messages.push(ChatMessage::user(prompt.clone()));
        let mut last_problem = String::new();
        for attempt in 0..2 {
            let response = self.call(who, &request, exempt).await?;
            let answer = response.text.trim().to_owned();
            let checked = serde_json::from_str::<Value>(&answer)
                .map_err(|e| format!("the answer is not JSON ({e})"))
                .and_then(|v| {
                    let problems = validate(&schema, &v);
                    if problems.is_empty() { Ok(v) } else { Err(problems.join("; ")) }
                })
                .and_then(|v| check(&v));
            match checked {
                Ok(value) => {
                    self.conversations
                        .push(me, Turn { decision: decision.to_owned(), prompt, answer })
                        .map_err(|e| self.backend(e.to_string()))?;
                    return Ok(value);
                }
                Err(problem) => {
                    tracing::warn!(agent = %me, decision, attempt, problem = %problem, "invalid answer from the model");
                    request.messages.push(ChatMessage::assistant(answer));
                    request.messages.push(ChatMessage::user(format!(
                        "That answer is invalid: {problem}. Answer the same question again, with only JSON that matches the schema."
                    )));
                    last_problem = problem;
                }
            }
        }
        Err(self.invalid(decision, &last_problem))
    }

    fn invalid(&self, decision: &str, problem: &str) -> ReasonError {
        self.backend(format!(
            "{} model `{}` gave an invalid {decision} answer, also after one repair attempt: {problem}",
            self.provider.name(),
            self.provider.model()
        ))
    }

    fn offered_tools(&self, who: Persona<'_>, subtask: &Subtask) -> Vec<ToolSpec> {
        let mut names: Vec<&str> = self
            .agent_tools
            .get(&who.config.id)
            .filter(|_| self.settings.offer_agent_tools)
            .map(|t| t.iter().map(String::as_str).collect())
            .unwrap_or_default();
        if !names.contains(&subtask.step.tool.as_str()) {
            names.insert(0, &subtask.step.tool);
        }
        let mut out: Vec<ToolSpec> = names
            .into_iter()
            .map(|n| {
                let mut spec = self.tools.get(n).cloned().unwrap_or_else(|| ToolSpec {
                    name: n.to_owned(),
                    description: format!("the tool `{n}`"),
                    parameters: json!({"type": "object"}),
                });
                if self.settings.planned_arguments_only && n == subtask.step.tool {
                    spec.parameters = planned_only(&subtask.step.args);
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

    /// Checks a tool call the model made.
    fn check_call(
        &self,
        offered: &[ToolSpec],
        call: &ProviderToolCall,
    ) -> Result<NextAction, String> {
        let Some(spec) = offered.iter().find(|t| t.name == call.name) else {
            let names: Vec<&str> = offered.iter().map(|t| t.name.as_str()).collect();
            return Err(format!(
                "`{}` is not one of the offered tools ({})",
                call.name,
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
                problems.join("; ")
            ));
        }
        if call.name == FINISH_TOOL {
            let success = args.get("success").and_then(Value::as_bool).unwrap_or(false);
            let summary =
                args.get("summary").and_then(Value::as_str).unwrap_or_default().to_owned();
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
            let reason = v.get("reason").and_then(Value::as_str).unwrap_or_default().trim();
            match v.get("verdict").and_then(Value::as_str) {
                Some("sign") => Ok(Verdict::Sign),
                Some("veto") if reason.is_empty() => Err("a veto needs a reason".into()),
                Some("veto") => Ok(Verdict::Veto { reason: reason.to_owned() }),
                other => Err(format!("`verdict` must be \"sign\" or \"veto\", not {other:?}")),
            }
        })
        .await
    }

    async fn vote(&self, who: Persona<'_>, conflict: &Conflict) -> Result<String, ReasonError> {
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
                Ok(choice.to_owned())
            } else {
                Err(format!("`{choice}` is not one of the options"))
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
        // Who may take each step: the executor the plan names, if available, else every
        // available executor with the step's tool. The schema offers only those, so even a
        // model that cannot read the table answers with a valid placement.
        let mut eligible: Vec<(&PlanStep, Vec<&str>)> = Vec::with_capacity(work.steps.len());
        for step in &work.steps {
            let named = match &step.target {
                StepTarget::Agent(id) => available.iter().find(|c| &c.id == id),
                _ => None,
            };
            let ids: Vec<&str> = match named {
                Some(c) => vec![c.id.as_str()],
                None => available
                    .iter()
                    .filter(|c| c.tools.contains(&step.tool))
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
        let mut prompt =
            format!("Place each step of task {} on one of your executors.\nSteps:\n", work.task_id);
        for (s, ids) in &eligible {
            let target = match &s.target {
                StepTarget::Agent(id) => format!(" (the plan names {id})"),
                _ => String::new(),
            };
            let _ = writeln!(
                prompt,
                "- {}: {} — tool `{}`{target}; can go to {}",
                s.id,
                s.description,
                s.tool,
                ids.join(", ")
            );
        }
        prompt.push_str("Executors:\n");
        for c in &available {
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
        let properties: serde_json::Map<String, Value> =
            eligible.iter().map(|(s, ids)| (s.id.clone(), json!({ "enum": ids }))).collect();
        let step_ids: Vec<&str> = work.steps.iter().map(|s| s.id.as_str()).collect();
        let schema = json!({
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
        });
        self.ask(who, "decompose", prompt, schema, false, |v| {
            let chosen = v.get("placements").and_then(Value::as_object);
            let mut out = Vec::with_capacity(eligible.len());
            for (step, ids) in &eligible {
                let Some(who) = chosen.and_then(|c| c.get(&step.id)).and_then(Value::as_str) else {
                    return Err(format!("step `{}` is not placed", step.id));
                };
                if !ids.contains(&who) {
                    return Err(format!(
                        "step `{}` cannot go to `{who}`; it can go to {}",
                        step.id,
                        ids.join(", ")
                    ));
                }
                let Some(c) = available.iter().find(|c| c.id.as_str() == who) else {
                    return Err(format!("`{who}` is not an available executor"));
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
        let offered = self.offered_tools(who, subtask);
        let past = self.conversations.get(me).map_err(|e| self.backend(e.to_string()))?;
        let step = &subtask.step;
        let planned = json!({ "tool": step.tool, "arguments": step.args });
        let prompt = format!(
            "Carry out step {} of task {}: {}\nThe plan's call for it: {planned}\nCall one tool \
             at a time; when the step is done (or cannot be done), call `{FINISH_TOOL}` saying \
             whether it succeeded and what was done.",
            step.id, subtask.task_id, step.description
        );
        let mut request = ChatRequest {
            system: self.system(who, past.dropped).await,
            messages: past.messages(),
            tools: offered.clone(),
            require_tool: true,
            response: ResponseFormat::Text,
            max_tokens: self.settings.max_tokens,
            temperature: who.config.temperature,
        };
        request.messages.push(ChatMessage::user(prompt.clone()));
        for (i, record) in history.iter().enumerate() {
            let id = format!("call-{i}");
            let mut call = ChatMessage::assistant("");
            call.tool_calls.push(ProviderToolCall {
                id: id.clone(),
                name: record.call.tool.clone(),
                arguments: record.call.args.to_string(),
            });
            request.messages.push(call);
            let status = if record.success { "ok" } else { "failed" };
            let hint = if record.success {
                format!(" (if the step is done, call `{FINISH_TOOL}`)")
            } else {
                String::new()
            };
            request.messages.push(ChatMessage::tool_result(
                id,
                format!(
                    "{status}: {}{hint}",
                    tail(&record.output, self.settings.tool_output_chars)
                ),
            ));
        }
        let mut last_problem = String::new();
        for attempt in 0..2 {
            let response = self.call(who, &request, false).await?;
            let checked = match response.tool_calls.first() {
                Some(call) => self.check_call(&offered, call).map_err(|p| (p, Some(call.clone()))),
                None => Err((
                    format!("no tool was called; call one of the offered tools or `{FINISH_TOOL}`"),
                    None,
                )),
            };
            match checked {
                Ok(action) => {
                    let action = finish_a_repeat(action, history);
                    if let NextAction::Finish { success, summary } = &action {
                        let calls: Vec<String> = history
                            .iter()
                            .map(|r| format!("{}({})", r.call.tool, r.call.args))
                            .collect();
                        let answer = format!(
                            "called [{}]; finished: success={success}, {summary}",
                            calls.join(", ")
                        );
                        self.conversations
                            .push(me, Turn { decision: "next_action".into(), prompt, answer })
                            .map_err(|e| self.backend(e.to_string()))?;
                    }
                    return Ok(action);
                }
                Err((problem, call)) => {
                    tracing::warn!(agent = %me, attempt, problem = %problem, "invalid tool call from the model");
                    let mut bad = ChatMessage::assistant(response.text.clone());
                    match call {
                        Some(call) => {
                            let id = call.id.clone();
                            bad.tool_calls.push(call);
                            request.messages.push(bad);
                            request.messages.push(ChatMessage::tool_result(
                                id,
                                format!(
                                    "error: {problem}. Call a tool again with valid arguments."
                                ),
                            ));
                        }
                        None => {
                            request.messages.push(bad);
                            request.messages.push(ChatMessage::user(format!(
                                "That answer is invalid: {problem}."
                            )));
                        }
                    }
                    last_problem = problem;
                }
            }
        }
        Err(self.invalid("next_action", &last_problem))
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
                summary: v.get("summary").and_then(Value::as_str).unwrap_or_default().to_owned(),
            })
        })
        .await
    }
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

/// An argument schema that accepts exactly `args` (each property one allowed value).
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
    match (&action, history.last()) {
        (NextAction::Call(call), Some(last)) if last.success && *call == last.call => {
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
