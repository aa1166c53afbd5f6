//! What the models are writing, as their answers stream ([`TeamEvent::Tokens`]; the library
//! keeps each agent's latest, [`strata::model_output`]): the live view's "model output"
//! lines, one per agent with the tail of its latest answer (the `tokens` lines of `--json`
//! are [`strata::json_lines::tokens`]).
//!
//! [`TeamEvent::Tokens`]: agent_core::TeamEvent::Tokens

use team_file::escape_controls as esc;

pub(super) use strata::model_output::{ModelOutputs as Outputs, OUTPUT_CHARS};

/// Agents whose output the live view shows: the most recent ones.
const OUTPUT_AGENTS: usize = 8;

/// The live view's lines: the agents with the latest output first, at most
/// [`OUTPUT_AGENTS`], each `agent  [tool] …tail` on one line, escaped.
pub(super) fn lines(outputs: &Outputs) -> Vec<String> {
    outputs
        .latest(OUTPUT_AGENTS)
        .into_iter()
        .map(|(agent, o)| {
            let tool = o.tool.as_ref().map(|t| format!("{t}(")).unwrap_or_default();
            let retry =
                if o.attempt > 1 { format!(" (retry {})", o.attempt - 1) } else { String::new() };
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
