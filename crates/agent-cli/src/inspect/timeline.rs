//! `strata inspect RUN timeline [AGENT]` as text: each piece of work of a run
//! ([`strata::audit::timeline`] builds them, and gives them as JSON) with who did it, for
//! whom, when and how long, what it was given and what came of it, its records and its model
//! calls.

use std::fmt::Write as _;

use agent_llm::CallRecord;
use team_file::escape_controls as esc;

use super::calls::shown;
use strata::audit::timeline::{Entry, calls_of, secs};
use strata::lines::event_line;

#[cfg(test)]
mod tests;

/// The entries as text: a line per piece of work, its input, its records, its model calls
/// (`calls`: the run's), its output; texts cut to one line unless `full`.
pub(crate) fn plain(
    entries: &[Entry<'_>],
    run_start: u64,
    full: bool,
    calls: &[CallRecord],
) -> String {
    let text = |s: &str| if full { esc(s.trim()).into_owned() } else { shown(s) };
    let mut out = String::new();
    for e in entries {
        let attempt =
            if e.attempt > 1 { format!(" (attempt {})", e.attempt) } else { String::new() };
        let _ = write!(
            out,
            "{} {}{attempt} · {} for {} · from {:.2} s",
            e.kind,
            esc(&e.key),
            esc(e.who.as_str()),
            esc(e.by.as_str()),
            secs(e.start, run_start)
        );
        match (e.end, &e.outcome) {
            (Some(end), outcome) => {
                let how = match outcome {
                    Some((true, _)) => "succeeded",
                    Some((false, _)) => "FAILED",
                    None => "ended, no result returned",
                };
                let _ = write!(
                    out,
                    " to {:.2} s ({:.2} s) · {how}",
                    secs(end, run_start),
                    secs(end, e.start),
                );
            }
            (None, _) => out.push_str(" · not finished"),
        }
        out.push('\n');
        let _ = writeln!(out, "  input: {}", text(&e.input));
        for r in &e.records {
            let _ = writeln!(out, "  {}", esc(&event_line(r, run_start)));
        }
        let seqs = calls_of(e, calls);
        if !seqs.is_empty() {
            let each: Vec<String> = seqs.iter().map(|s| format!("#{s}")).collect();
            let _ = writeln!(
                out,
                "  model calls: {} (`inspect RUN calls {}` shows them)",
                each.join(" "),
                esc(e.who.as_str())
            );
        }
        if let Some((_, output)) = &e.outcome {
            let _ = writeln!(out, "  output: {}", text(output));
        }
    }
    out
}
