//! What the models are writing, as their answers stream ([`TeamEvent::Tokens`]): each agent's
//! latest output ([`ModelOutputs`]), the tail of it kept, started over with each new call,
//! attempt or tool call: what a live view shows of the models' work.
//!
//! [`TeamEvent::Tokens`]: agent_core::TeamEvent::Tokens

use std::collections::BTreeMap;

use agent_core::ModelTokens;
use agent_state::AgentId;

/// Characters of an agent's latest output that are kept (the tail).
pub const OUTPUT_CHARS: usize = 96;

/// Each agent's latest model output.
#[derive(Debug, Default)]
pub struct ModelOutputs {
    by_agent: BTreeMap<AgentId, Output>,
    /// Pieces received, to order the agents by their latest.
    seen: u64,
}

/// One agent's latest output: the call, attempt and tool it is of, and its tail.
#[derive(Debug)]
pub struct Output {
    /// The reasoner's number of the call.
    pub call: u64,
    /// The call's attempt (1, then more for each retry).
    pub attempt: u32,
    /// The tool whose arguments are being written, if any.
    pub tool: Option<String>,
    /// The last [`OUTPUT_CHARS`] characters written, as written (not escaped).
    pub tail: String,
    /// Whether the tail is not the whole output.
    pub cut: bool,
    /// When it was last written to, in pieces received.
    last: u64,
}

impl ModelOutputs {
    /// Takes in a piece: more of the agent's current output, or the start of a new one (another
    /// call, attempt or tool call).
    pub fn record(&mut self, tokens: &ModelTokens) {
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

    /// The `most` agents written to last, the latest first, with their output.
    pub fn latest(&self, most: usize) -> Vec<(&AgentId, &Output)> {
        let mut agents: Vec<(&AgentId, &Output)> = self.by_agent.iter().collect();
        agents.sort_by_key(|(_, o)| std::cmp::Reverse(o.last));
        agents.truncate(most);
        agents
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn piece(agent: &str, call: u64, attempt: u32, tool: Option<&str>, text: &str) -> ModelTokens {
        ModelTokens {
            agent: AgentId::from(agent),
            call,
            attempt,
            tool: tool.map(str::to_owned),
            text: text.into(),
        }
    }

    /// Pieces of one output add up; a new call, attempt or tool starts it over; only the tail
    /// is kept; the agent written to last comes first.
    #[test]
    fn each_agent_keeps_the_tail_of_its_latest_output() {
        let mut outputs = ModelOutputs::default();
        outputs.record(&piece("top-a", 1, 1, None, "{\"verdict\": "));
        outputs.record(&piece("exec-1", 4, 1, Some("write_file"), "{\"path\": "));
        outputs.record(&piece("top-a", 1, 1, None, "\"sign\"}"));
        outputs.record(&piece("exec-1", 4, 2, Some("write_file"), "{\"pa"));
        let latest = outputs.latest(8);
        let tails: Vec<(&str, &str, u32)> =
            latest.iter().map(|(a, o)| (a.as_str(), o.tail.as_str(), o.attempt)).collect();
        assert_eq!(tails, [("exec-1", "{\"pa", 2), ("top-a", "{\"verdict\": \"sign\"}", 1)]);
        assert_eq!(outputs.latest(1).len(), 1);

        let long = format!("{}é-end", "x".repeat(200));
        outputs.record(&piece("top-a", 2, 1, None, &long));
        let (_, top) = outputs.latest(1)[0];
        assert!(top.cut);
        assert_eq!(top.tail.chars().count(), OUTPUT_CHARS);
        assert!(top.tail.ends_with("é-end"), "{}", top.tail);
    }
}
