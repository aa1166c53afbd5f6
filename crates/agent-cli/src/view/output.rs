//! What the models are writing, as their answers stream ([`TeamEvent::Tokens`]): the live
//! view's "model output" lines, one per agent with the tail of its latest answer, and the
//! `tokens` lines of `--json`.
//!
//! [`TeamEvent::Tokens`]: agent_core::TeamEvent::Tokens

use std::collections::BTreeMap;

use agent_core::ModelTokens;
use agent_state::AgentId;
use team_file::escape_controls as esc;

/// Characters of an agent's latest output the live view keeps and shows (the tail).
pub(super) const OUTPUT_CHARS: usize = 96;

/// Agents whose output the live view shows: the most recent ones.
pub(super) const OUTPUT_AGENTS: usize = 8;

/// Each agent's latest model output.
#[derive(Debug, Default)]
pub(super) struct Outputs {
    by_agent: BTreeMap<AgentId, Output>,
    /// Events received, to order the agents by their latest.
    seen: u64,
}

/// One agent's latest output: the call, attempt and tool it is of, and its tail.
#[derive(Debug)]
struct Output {
    call: u64,
    attempt: u32,
    tool: Option<String>,
    tail: String,
    /// Whether the tail is not the whole output.
    cut: bool,
    last: u64,
}

impl Outputs {
    /// Takes in a piece: more of the agent's current output, or the start of a new one (another
    /// call, attempt or tool call).
    pub(super) fn record(&mut self, tokens: &ModelTokens) {
        self.seen += 1;
        let output = self.by_agent.entry(tokens.agent.clone()).or_insert_with(|| Output {
            call: tokens.call,
            attempt: tokens.attempt,
            tool: tokens.tool.clone(),
            tail: String::new(),
            cut: false,
            last: 0,
        });
        if (output.call, output.attempt, &output.tool)
            != (tokens.call, tokens.attempt, &tokens.tool)
        {
            output.call = tokens.call;
            output.attempt = tokens.attempt;
            output.tool = tokens.tool.clone();
            output.tail.clear();
            output.cut = false;
        }
        output.last = self.seen;
        output.tail.push_str(&tokens.text);
        let extra = output.tail.chars().count().saturating_sub(OUTPUT_CHARS);
        if extra > 0 {
            let cut = output.tail.char_indices().nth(extra).map_or(0, |(i, _)| i);
            output.tail.drain(..cut);
            output.cut = true;
        }
    }

    /// The live view's lines: the agents with the latest output first, at most
    /// [`OUTPUT_AGENTS`], each `agent  [tool] …tail` on one line, escaped.
    pub(super) fn lines(&self) -> Vec<String> {
        let mut agents: Vec<(&AgentId, &Output)> = self.by_agent.iter().collect();
        agents.sort_by_key(|(_, o)| std::cmp::Reverse(o.last));
        agents
            .into_iter()
            .take(OUTPUT_AGENTS)
            .map(|(agent, o)| {
                let tool = o.tool.as_ref().map(|t| format!("{t}(")).unwrap_or_default();
                let retry = if o.attempt > 1 {
                    format!(" (retry {})", o.attempt - 1)
                } else {
                    String::new()
                };
                // Newlines and other controls escaped, so each agent stays one line.
                let tail: String = esc(&o.tail).into_owned();
                let count = tail.chars().count();
                let tail: String = tail.chars().skip(count.saturating_sub(OUTPUT_CHARS)).collect();
                format!(
                    "{:<14} {tool}{}{tail}{retry}",
                    agent.as_str(),
                    if o.cut || count > OUTPUT_CHARS { "…" } else { "" }
                )
            })
            .collect()
    }
}

/// A piece as one `--json` line: `{"event": "tokens", "agent", "call", "attempt", "tool",
/// "text"}`.
pub(super) fn json_line(tokens: &ModelTokens) -> String {
    serde_json::json!({
        "event": "tokens",
        "agent": tokens.agent,
        "call": tokens.call,
        "attempt": tokens.attempt,
        "tool": tokens.tool,
        "text": tokens.text,
    })
    .to_string()
}
