//! Every model call, kept with the run: who asked, what was asked, what came back, what it
//! cost and how it ended ([`CallRecord`]).
//!
//! [`crate::LlmReasoner`] records each call it makes in the team's [`crate::UsageLedger`]
//! once the call has ended, answered or not (retries included: one record per call, with how
//! many attempts failed before it ended). A ledger with a store writes the record through
//! ([`crate::LlmStore::append_call`]), so `strata inspect RUN calls` lists them after the run;
//! a ledger without one keeps the latest [`MEMORY_CALLS`] in memory
//! ([`crate::UsageLedger::calls`]).
//!
//! What is kept, and its bounds: the system prompt, every message of the request and the
//! answer (its text and tool calls), each text cut to [`MAX_TEXT_CHARS`] characters (the
//! record says how many were cut), with the secrets this process knows redacted
//! ([`agent_core::secrets`]). A tool call's result is not a field of its own: it is the
//! [`crate::Role::Tool`] message answering the call's id in the agent's next request, which
//! [`CallRecord::tool_results`] finds.

use std::collections::BTreeMap;

use agent_state::{AgentId, AgentLayer, Versioned};
use serde::{Deserialize, Serialize};

use crate::ledger::CallSite;
use crate::provider::{ChatMessage, ChatRequest, ChatResponse, ProviderToolCall, Usage};

/// Most characters of one text (a message, the system prompt, the answer, a tool call's
/// arguments) a record keeps; the rest is cut and counted in [`CallRecord::cut_chars`].
pub const MAX_TEXT_CHARS: usize = 32_768;

/// Most records a ledger without a store keeps in memory (the oldest go first).
pub const MEMORY_CALLS: usize = 1_024;

/// How a call ended.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "outcome", rename_all = "snake_case")]
pub enum CallOutcome {
    /// The model answered (whether the answer was then accepted is the reasoner's business:
    /// a repair is the next call).
    Answered,
    /// No answer: the provider's error after its retries, or the call was cancelled.
    Failed {
        /// The error's kind (`timeout`, `rate_limited`, `server`, ..., or `cancelled`).
        kind: String,
        /// The error's message.
        message: String,
    },
}

/// One model call as it was made.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct CallRecord {
    /// Its number in the run, from 1, in the order the calls ended (set when it is recorded).
    pub seq: u64,
    /// Which call of its reasoner this was (the number of its streaming events).
    pub call: u64,
    /// The agent that asked.
    pub agent: AgentId,
    /// Its layer.
    pub layer: AgentLayer,
    /// The provider's name.
    pub provider: String,
    /// The model.
    pub model: String,
    /// When the call started, in milliseconds since the Unix epoch.
    pub started_ms: u64,
    /// How long it took, retries and waits included, in milliseconds.
    pub latency_ms: u64,
    /// The system prompt.
    pub system: String,
    /// The request's messages, oldest first (the last is the one answered).
    pub messages: Vec<ChatMessage>,
    /// The names of the tools offered.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tools: Vec<String>,
    /// The answer's text (for a JSON answer: the JSON text).
    pub answer: String,
    /// The tool calls the model made.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tool_calls: Vec<ProviderToolCall>,
    /// Tokens read and written, as the provider counted them (zero for a failed call).
    pub usage: Usage,
    /// What the tokens cost at the run's prices (`None`: the model has no price).
    pub cost_usd: Option<f64>,
    /// How it ended.
    #[serde(flatten)]
    pub outcome: CallOutcome,
    /// Attempts that failed and were retried, and waits on a rate limit, before it ended.
    pub retries: u64,
    /// Characters cut from its texts to keep the record bounded.
    #[serde(default)]
    pub cut_chars: u64,
}

impl Versioned for CallRecord {
    const KIND: &'static str = "llm_call";
    const VERSION: u32 = 1;
}

/// Who made a call and how it went, for [`CallRecord::new`].
#[derive(Clone, Debug)]
pub struct CallFacts<'a> {
    /// The agent, its layer, the provider and the model.
    pub site: &'a CallSite,
    /// The reasoner's number for the call.
    pub call: u64,
    /// Start, milliseconds since the Unix epoch.
    pub started_ms: u64,
    /// Duration in milliseconds.
    pub latency_ms: u64,
    /// Retried attempts and rate-limit waits.
    pub retries: u64,
    /// Cost of the answer's tokens, if the model has a price.
    pub cost_usd: Option<f64>,
}

impl CallRecord {
    /// The record of a call of `request` that ended with `result` (`Err`: the error's kind
    /// and message), its texts redacted and cut to [`MAX_TEXT_CHARS`].
    pub fn new(
        facts: &CallFacts<'_>,
        request: &ChatRequest,
        result: Result<&ChatResponse, (String, String)>,
    ) -> Self {
        let mut cut = 0_u64;
        let mut text = |s: &str| kept(s, &mut cut);
        let system = text(&request.system);
        let messages = request
            .messages
            .iter()
            .map(|m| ChatMessage {
                role: m.role,
                content: text(&m.content),
                tool_calls: m.tool_calls.iter().map(|c| call_kept(c, &mut text)).collect(),
                tool_call_id: m.tool_call_id.clone(),
            })
            .collect();
        let (answer, tool_calls, usage, outcome) = match result {
            Ok(response) => (
                text(&response.text),
                response.tool_calls.iter().map(|c| call_kept(c, &mut text)).collect(),
                response.usage,
                CallOutcome::Answered,
            ),
            Err((kind, message)) => (
                String::new(),
                Vec::new(),
                Usage::default(),
                CallOutcome::Failed { kind, message: text(&message) },
            ),
        };
        Self {
            seq: 0,
            call: facts.call,
            agent: facts.site.agent.clone(),
            layer: facts.site.layer,
            provider: facts.site.provider.clone(),
            model: facts.site.model.clone(),
            started_ms: facts.started_ms,
            latency_ms: facts.latency_ms,
            system,
            messages,
            tools: request.tools.iter().map(|t| t.name.clone()).collect(),
            answer,
            tool_calls,
            usage,
            cost_usd: facts.cost_usd,
            outcome,
            retries: facts.retries,
            cut_chars: cut,
        }
    }

    /// The question: the request's last message from the runtime or a tool (what the model
    /// answered), or the empty string.
    pub fn prompt(&self) -> &str {
        self.messages.last().map_or("", |m| m.content.as_str())
    }

    /// For each tool call of each record, the tool's result, by `(seq, call id)`: what the
    /// same agent's next request says the call returned. The reasoner writes an agent's earlier
    /// calls into its next request as assistant tool calls answered by [`crate::Role::Tool`]
    /// messages, under ids of its own; so a record's calls are matched with the last as many
    /// answered calls of that request, by name and in order (or by id, where the ids were
    /// kept). A call with no later request (the agent's last) or none that matches is absent.
    pub fn tool_results(records: &[CallRecord]) -> BTreeMap<(u64, String), String> {
        let mut ordered: Vec<&CallRecord> = records.iter().collect();
        ordered.sort_by_key(|r| r.seq);
        let mut out = BTreeMap::new();
        for (i, record) in ordered.iter().enumerate() {
            if record.tool_calls.is_empty() {
                continue;
            }
            let Some(next) = ordered[i + 1..].iter().find(|r| r.agent == record.agent) else {
                continue;
            };
            let answered = answered_calls(&next.messages);
            let by_id: Vec<Option<&String>> = record
                .tool_calls
                .iter()
                .map(|call| answered.iter().find(|(id, _, _)| *id == call.id).map(|(_, _, r)| *r))
                .collect();
            if by_id.iter().all(Option::is_some) {
                for (call, result) in record.tool_calls.iter().zip(by_id) {
                    if let Some(result) = result {
                        out.insert((record.seq, call.id.clone()), result.clone());
                    }
                }
                continue;
            }
            let Some(tail) = answered.len().checked_sub(record.tool_calls.len()) else {
                continue;
            };
            let last = &answered[tail..];
            if last.iter().zip(&record.tool_calls).all(|((_, name, _), call)| *name == call.name) {
                for ((_, _, result), call) in last.iter().zip(&record.tool_calls) {
                    out.insert((record.seq, call.id.clone()), (*result).clone());
                }
            }
        }
        out
    }
}

/// The assistant tool calls of `messages` that a tool message answers, in order: (id, tool,
/// result).
fn answered_calls(messages: &[ChatMessage]) -> Vec<(&str, &str, &String)> {
    let mut out = Vec::new();
    for (i, message) in messages.iter().enumerate() {
        for call in &message.tool_calls {
            let result = messages[i + 1..]
                .iter()
                .find(|m| m.tool_call_id.as_deref() == Some(call.id.as_str()));
            if let Some(result) = result {
                out.push((call.id.as_str(), call.name.as_str(), &result.content));
            }
        }
    }
    out
}

/// `call` with its arguments redacted and cut.
fn call_kept(call: &ProviderToolCall, text: &mut impl FnMut(&str) -> String) -> ProviderToolCall {
    ProviderToolCall {
        id: call.id.clone(),
        name: call.name.clone(),
        arguments: text(&call.arguments),
    }
}

/// `s` redacted, cut to [`MAX_TEXT_CHARS`] characters; what was cut is added to `cut`.
fn kept(s: &str, cut: &mut u64) -> String {
    let redacted = agent_core::secrets::redact(s);
    match redacted.char_indices().nth(MAX_TEXT_CHARS) {
        None => redacted.into_owned(),
        Some((at, _)) => {
            *cut += redacted[at..].chars().count() as u64;
            let mut out = redacted[..at].to_owned();
            out.push_str(" [cut]");
            out
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, reason = "tests")]

    use super::*;

    fn site(agent: &str) -> CallSite {
        CallSite {
            agent: AgentId::new(agent),
            layer: AgentLayer::Bottom,
            provider: "fake".into(),
            model: "m".into(),
        }
    }

    fn facts(site: &CallSite) -> CallFacts<'_> {
        CallFacts { site, call: 1, started_ms: 1_000, latency_ms: 20, retries: 0, cost_usd: None }
    }

    #[test]
    fn texts_are_redacted_and_cut() {
        agent_core::secrets::register("sk-calls-test-secret-0123456789");
        let site = site("e-1");
        let request = ChatRequest {
            system: "key sk-calls-test-secret-0123456789".into(),
            messages: vec![ChatMessage::user("x".repeat(MAX_TEXT_CHARS + 10))],
            ..ChatRequest::default()
        };
        let response = ChatResponse {
            text: String::new(),
            tool_calls: vec![ProviderToolCall {
                id: "c1".into(),
                name: "shell".into(),
                arguments: r#"{"command": "echo sk-calls-test-secret-0123456789"}"#.into(),
            }],
            ..ChatResponse::default()
        };
        let record = CallRecord::new(&facts(&site), &request, Ok(&response));
        assert_eq!(record.system, "key [redacted]");
        assert_eq!(record.tool_calls[0].arguments, r#"{"command": "echo [redacted]"}"#);
        assert_eq!(record.cut_chars, 10);
        assert!(record.prompt().ends_with("x [cut]"), "{}", &record.prompt()[MAX_TEXT_CHARS - 5..]);
        assert_eq!(record.outcome, CallOutcome::Answered);
    }

    #[test]
    fn a_failed_call_keeps_its_reason_and_no_answer() {
        let site = site("e-1");
        let request =
            ChatRequest { messages: vec![ChatMessage::user("hi")], ..ChatRequest::default() };
        let record = CallRecord::new(
            &facts(&site),
            &request,
            Err(("timeout".into(), "no answer in 30s".into())),
        );
        assert_eq!(
            record.outcome,
            CallOutcome::Failed { kind: "timeout".into(), message: "no answer in 30s".into() }
        );
        assert_eq!(record.usage, Usage::default());
        let json = serde_json::to_value(&record).unwrap();
        assert_eq!(json["outcome"], "failed", "{json}");
        assert_eq!(json["kind"], "timeout");
        let back: CallRecord = serde_json::from_value(json).unwrap();
        assert_eq!(back, record);
    }

    #[test]
    fn a_tool_result_is_found_in_the_same_agents_next_request() {
        let call = |id: &str, name: &str| ProviderToolCall {
            id: id.into(),
            name: name.into(),
            arguments: "{}".into(),
        };
        let asked =
            |seq: u64, agent: &str, messages: Vec<ChatMessage>, calls: Vec<ProviderToolCall>| {
                let request = ChatRequest { messages, ..ChatRequest::default() };
                let response = ChatResponse { tool_calls: calls, ..ChatResponse::default() };
                CallRecord { seq, ..CallRecord::new(&facts(&site(agent)), &request, Ok(&response)) }
            };
        let fed_back = |id: &str, name: &str, result: &str| {
            vec![
                ChatMessage { tool_calls: vec![call(id, name)], ..ChatMessage::assistant("") },
                ChatMessage::tool_result(id, result),
            ]
        };
        let mut later = vec![ChatMessage::user("go on")];
        later.extend(fed_back("h1", "write_file", "wrote 5 bytes"));
        let records = vec![
            asked(1, "e-1", vec![ChatMessage::user("write")], vec![call("c1", "write_file")]),
            // Another agent's request in between is not the answer.
            asked(2, "e-2", fed_back("h1", "write_file", "not mine"), vec![]),
            // The reasoner's own ids: matched by name, the last answered calls.
            asked(3, "e-1", later, vec![call("c2", "shell")]),
            // A later request that fed back another tool: no match.
            asked(4, "e-1", fed_back("h2", "read_file", "text"), vec![call("c3", "shell")]),
            // Ids kept: matched by id.
            asked(5, "e-1", fed_back("c3", "shell", "exit 0"), vec![]),
        ];
        let results = CallRecord::tool_results(&records);
        let result = |seq: u64, id: &str| results.get(&(seq, id.to_owned())).map(String::as_str);
        assert_eq!(result(1, "c1"), Some("wrote 5 bytes"));
        assert_eq!(result(3, "c2"), None, "the next request fed back read_file, not shell");
        assert_eq!(result(4, "c3"), Some("exit 0"));
        assert_eq!(results.len(), 2, "{results:?}");
    }
}
