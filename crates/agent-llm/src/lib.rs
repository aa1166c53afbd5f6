//! LLM reasoners for Strata: real models behind [`agent_core::Reasoner`].
//!
//! The package is `strata-agent-llm` (`strata-agent-llm = "0.1"` in `Cargo.toml`); code
//! names it `agent_llm`.
//!
//! - [`LlmReasoner`] asks a [`Provider`] for every decision a layer takes — sign or veto, vote,
//!   decompose, the executor's tool loop, judge progress, plan (a goal in words into goal steps
//!   and the leads to create from the team's roles), answer (a reply to an agent that speaks to
//!   it through `speak_to_agent`) — as structured output checked against a JSON Schema; an
//!   invalid answer goes back to the model with its problems (one repair, a plan up to
//!   [`LlmSettings::plan_repairs`]), each repair audited. In the tool loop the agent is offered
//!   the tools it holds, the supervisor tools (`spawn_agent`, ...) and `return_results`
//!   included, and a call the model still gets wrong after the repair goes to the runtime to
//!   refuse rather than failing the agent.
//! - Providers: [`OpenAiProvider`] (any OpenAI-compatible chat completions server: OpenAI,
//!   vLLM, Ollama, LM Studio, llama.cpp's server, llama-cpp-python) and [`AnthropicProvider`] (feature `http`,
//!   on by default); `LocalProvider`, the embedded Gemma 3 270M on llama.cpp (feature `local`,
//!   model fetched once by `fetch_model`, feature `fetch`). Test doubles implement [`Provider`]
//!   in a few lines; [`agent_core::ScriptedReasoner`] replaces the whole reasoner.
//! - Structured output that adapts to the server ([`StructuredOutput`]): `json_schema`,
//!   `json_object` with a schema, a forced tool call or the schema in the prompt; with `auto`
//!   a provider moves to the next mode when the server refuses one because of its format (not
//!   a retry), remembers it, and reports what it uses ([`Provider::structured_choice`],
//!   [`ModeChoice`], kept in the [`UsageReport`]). A server that answers `tool_choice:
//!   "required"` without a call gets tool calls asked as JSON.
//! - Per-agent [`Conversations`], bounded by a documented rule and kept with the run.
//! - A [`CallRecord`] of every model call (who asked, the system prompt and messages, the
//!   answer and its tool calls, tokens, latency, cost, outcome, retries; redacted and
//!   bounded), kept in the [`UsageLedger`] and its store: `strata inspect RUN calls`.
//! - A team-wide [`UsageLedger`]: tokens and cost per agent, layer and model ([`PriceTable`]),
//!   and run [`Budget`]s (tokens, cost, wall time, calls) that stop the run or, with
//!   [`OnExceed::AskTop`], pause it while the top layer votes on an extension ([`ApprovalDesk`])
//!   or, with [`OnExceed::AskHuman`], until one of the team's humans signs or vetoes it. The
//!   pause does not count against the reasoning calls' time limit ([`agent_core::untimed`]).
//! - Transient provider errors are retried with the agent's backoff ([`complete_with_retry`]);
//!   rate-limit waits honour `Retry-After` and are not failures; permanent errors fail at once
//!   with a message naming provider, model and cause. Keys come from the caller (the `strata`
//!   command reads them from environment variables) and never appear in errors or logs.
//! - Streamed answers: [`Provider::complete_streaming`] delivers an answer's [`Piece`]s to a
//!   [`TokenSink`] as the model writes it (the HTTP providers read the server's event stream;
//!   the answer and its usage are exactly a whole answer's), and [`LlmReasoner::with_events`]
//!   publishes them on the team's event hub (`agent_core::TeamEvent::Tokens`). Only the
//!   finished, checked answer is recorded.
//! - Feature `testing` (off by default): `testing`, a fake OpenAI-compatible model on a
//!   loopback HTTP server (`FakeModel`) and the scripted goal scenario that drives a whole
//!   goal-driven team through it (`add_program_scenario`).
//!
//! With the embedded model, decisions are grammar-constrained and therefore always valid JSON,
//! but the model is a 270M-parameter *base* model: it shows real local inference, not good
//! judgement.
//!
//! ```
//! use std::sync::Arc;
//! use agent_core::{Persona, Reasoner, Conflict};
//! use agent_llm::*;
//! use agent_state::{AgentConfig, AgentId, AgentLayer, Capability};
//!
//! /// A provider that always votes for "b".
//! struct VotesB;
//! #[async_trait::async_trait]
//! impl Provider for VotesB {
//!     fn name(&self) -> &str { "mock" }
//!     fn model(&self) -> &str { "votes-b" }
//!     async fn complete(&self, _: &ChatRequest) -> Result<ChatResponse, ProviderError> {
//!         let text = r#"{"choice": "b", "reason": "cheaper"}"#.to_owned();
//!         Ok(ChatResponse { text, usage: Usage { input_tokens: 50, output_tokens: 8 }, ..Default::default() })
//!     }
//! }
//!
//! # tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(async {
//! let ledger = Arc::new(UsageLedger::new(PriceTable::new(), Budget::default()));
//! let conversations = Arc::new(Conversations::in_memory(ConversationLimits::default()));
//! let reasoner = LlmReasoner::new(Arc::new(VotesB), ledger.clone(), conversations);
//! let config = AgentConfig {
//!     id: AgentId::new("top-a"), name: "A".into(), layer: AgentLayer::Top, role: String::new(),
//!     supervisor: None, subordinates: vec![], capabilities: vec![Capability::Arbitrate].into(),
//!     model: None, temperature: None, max_retries: 3, timeout_ms: 30_000,
//! };
//! let conflict = Conflict {
//!     id: "c1".into(), issue: "which".into(), parties: vec![], options: vec!["a".into(), "b".into()],
//! };
//! let who = Persona { config: &config, system_prompt: "You are top-a.", tools: &[], roles: &[], domains: &[] };
//! assert_eq!(reasoner.vote(who, &conflict).await.unwrap(), "b");
//! assert_eq!(ledger.report().total.input_tokens, 50);
//! # });
//! ```

#[cfg(feature = "http")]
mod anthropic;
mod approval;
mod calls;
mod conversation;
#[cfg(feature = "http")]
mod emulated_tools;
#[cfg(feature = "fetch")]
mod fetch;
#[cfg(feature = "http")]
mod gbnf;
#[cfg(feature = "http")]
mod http;
mod ledger;
#[cfg(feature = "local")]
mod local;
mod model_text;
#[cfg(feature = "http")]
mod openai;
mod provider;
mod reasoner;
mod retry;
#[cfg(feature = "http")]
mod sse;
mod store;
mod stream;
mod structured;
#[cfg(feature = "testing")]
pub mod testing;
mod tokens;
#[cfg(feature = "http")]
mod transcript;

#[cfg(feature = "http")]
pub use anthropic::{AnthropicConfig, AnthropicProvider};
pub use approval::ApprovalDesk;
pub use calls::{CallFacts, CallOutcome, CallRecord, MAX_TEXT_CHARS, MEMORY_CALLS};
pub use conversation::{Conversation, ConversationLimits, Conversations, Turn};
#[cfg(feature = "fetch")]
pub use fetch::{
    FetchError, FetchProgress, FetchSource, GEMMA3_270M_Q4_K_M, ModelDirError, ModelFileError,
    ModelPart, ModelSpec, default_model_dir, fetch_model, verify_model,
};
#[cfg(feature = "http")]
pub use http::ConfigError;
pub use ledger::{
    ApprovalRequest, Budget, BudgetExceeded, BudgetLimit, CallSite, Extension, OnExceed, Price,
    PriceError, PriceTable, Reservation, Tally, UsageLedger, UsageReport,
};
#[cfg(feature = "local")]
pub use local::{DEFAULT_CONTEXT_TOKENS, LocalConfig, LocalError, LocalProvider, LocalStartup};
#[cfg(feature = "http")]
pub use openai::{OpenAiConfig, OpenAiProvider};
pub use provider::{
    ChatMessage, ChatRequest, ChatResponse, EngineTiming, Provider, ProviderError,
    ProviderErrorKind, ProviderToolCall, ResponseFormat, Role, ToolSpec, Usage,
};
pub use reasoner::{
    BUDGET_DECISION_KIND, DEFAULT_PLAN_REPAIRS, FINISH_TOOL, LlmReasoner, LlmSettings,
};
pub use retry::{
    MAX_RATE_LIMIT_WAITS, MAX_WAIT, RetryEvent, RetryStats, complete_streaming_with_retry,
    complete_with_retry,
};
pub use store::LlmStore;
#[cfg(feature = "sled")]
pub use store::{CALLS_TREE, CONVERSATIONS_TREE, SledLlmStore, USAGE_TREE};
pub use stream::{Piece, TokenSink};
pub use structured::{ModeChoice, RejectedMode, StructuredMode, StructuredOutput, UnknownMode};
