//! `strata inspect RUN calls [AGENT]`: every model call of a run, from its store's call
//! records ([`agent_llm::CallRecord`]): who asked which model, the prompt and the answer, the
//! tool calls with their arguments and results, tokens, latency, cost and outcome.
//!
//! Plain, each text is one line cut to [`SHOWN_CHARS`] characters (`--full`: whole, every
//! message of the request, line by line); `--json` is the library's
//! ([`strata::audit::calls_json`]). Model text is printed with its control characters
//! escaped, so an answer cannot move the terminal's cursor or colours.

use std::fmt::Write as _;

use agent_llm::{CallOutcome, CallRecord, Role};
use team_file::escape_controls as esc;

/// Most characters of a text shown on a plain line.
pub(crate) const SHOWN_CHARS: usize = 200;

/// The records as text, one block per call.
pub(crate) fn plain(records: &[CallRecord], all: &[CallRecord], full: bool) -> String {
    let results = CallRecord::tool_results(all);
    let mut out = String::new();
    for r in records {
        let _ = write!(
            out,
            "#{} {} ({}) · {}/{} · {:.1} s · {} in / {} out tokens",
            r.seq,
            esc(r.agent.as_str()),
            r.layer,
            esc(&r.provider),
            esc(&r.model),
            r.latency_ms as f64 / 1000.0,
            r.usage.input_tokens,
            r.usage.output_tokens,
        );
        if let Some(cost) = r.cost_usd {
            let _ = write!(out, " · ${cost:.4}");
        }
        match &r.outcome {
            CallOutcome::Answered => out.push_str(" · answered"),
            CallOutcome::Failed { kind, message } => {
                let _ = write!(out, " · FAILED ({}): {}", esc(kind), shown(message));
            }
        }
        if r.retries > 0 {
            let _ = write!(out, " · {} retried", r.retries);
        }
        out.push('\n');
        if !r.tools.is_empty() {
            let _ = writeln!(out, "  tools offered: {}", esc(&r.tools.join(", ")));
        }
        prompt(&mut out, r, full);
        let answered = matches!(r.outcome, CallOutcome::Answered);
        if answered && (!r.answer.is_empty() || r.tool_calls.is_empty()) {
            if full {
                block(&mut out, "answer", &r.answer);
            } else {
                let _ = writeln!(out, "  answer: {}", shown(&r.answer));
            }
        }
        tool_calls(&mut out, r, &results, full);
        if r.cut_chars > 0 {
            let _ = writeln!(out, "  ({} characters were cut when it was recorded)", r.cut_chars);
        }
    }
    out
}

/// The request of `r`: every message and the system prompt (`full`), else its last prompt
/// on one line.
fn prompt(out: &mut String, r: &CallRecord, full: bool) {
    if full {
        block(out, "system", &r.system);
        for m in &r.messages {
            let who = match m.role {
                Role::User => "user",
                Role::Assistant => "assistant",
                Role::Tool => "tool result",
            };
            block(out, who, &m.content);
            for call in &m.tool_calls {
                block(out, &format!("assistant called {}", esc(&call.name)), &call.arguments);
            }
        }
    } else {
        let earlier = r.messages.len().saturating_sub(1);
        if earlier > 0 {
            let _ = writeln!(out, "  ({earlier} earlier message(s) and the system prompt: --full)");
        }
        let _ = writeln!(out, "  prompt: {}", shown(r.prompt()));
    }
}

/// The tool calls `r` answered with, each with its result when a later call holds it.
fn tool_calls(
    out: &mut String,
    r: &CallRecord,
    results: &std::collections::BTreeMap<(u64, String), String>,
    full: bool,
) {
    for call in &r.tool_calls {
        if full {
            block(out, &format!("calls {}", esc(&call.name)), &call.arguments);
        } else {
            let _ = writeln!(out, "  calls {} {}", esc(&call.name), shown(&call.arguments));
        }
        if let Some(result) = results.get(&(r.seq, call.id.clone())) {
            if full {
                block(out, "  result", result);
            } else {
                let _ = writeln!(out, "    result: {}", shown(result));
            }
        }
    }
}

/// `text` on one line, its controls escaped, cut to [`SHOWN_CHARS`] (with how much more).
pub(crate) fn shown(text: &str) -> String {
    let text = text.trim();
    let total = text.chars().count();
    if total <= SHOWN_CHARS {
        return esc(text).into_owned();
    }
    let head: String = text.chars().take(SHOWN_CHARS).collect();
    format!("{}… ({total} characters; --full shows all)", esc(&head))
}

/// `text` whole under `title`, line by line, each line's controls escaped.
fn block(out: &mut String, title: &str, text: &str) {
    let _ = writeln!(out, "  {title}:");
    for line in text.lines() {
        let _ = writeln!(out, "    {}", esc(line));
    }
}
