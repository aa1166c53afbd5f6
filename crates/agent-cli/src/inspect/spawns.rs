//! `inspect tree` and `inspect results` as text: the agents of a run, configured and spawned,
//! drawn as a tree, and the structured results they returned ([`strata::audit::spawns`] reads
//! them from the audit log, and gives them as JSON).
//!
//! Every line is escaped like the rest of what strata prints ([`esc`]): a task or a summary
//! with a newline or a terminal escape in it cannot break a line or drive the terminal.

use agent_state::{AgentStatus, ChangeType, ResultStatus};
use strata::audit::spawns::{Node, Returned, SpawnTree};
use team_file::escape_controls as esc;

/// How many characters of a task's first line the tree shows.
const TASK_CHARS: usize = 60;

/// A [`SpawnTree`] as `strata inspect RUN tree` shows it.
pub(crate) trait TreeView {
    /// The tree as text, one line per agent (`├─ └─`), and a line about what was spawned.
    fn render(&self) -> String;
    /// One agent's line.
    fn line(&self, n: &Node) -> String;
}

impl TreeView for SpawnTree {
    fn render(&self) -> String {
        let mut out = String::new();
        // Whether the node drawn at each depth is the last of its siblings: the rails.
        let mut last_at: Vec<bool> = Vec::new();
        for &(i, depth, last) in &self.order {
            last_at.truncate(depth);
            let mut prefix = String::new();
            if depth > 0 {
                for &done in last_at.iter().skip(1) {
                    prefix.push_str(if done { "   " } else { "│  " });
                }
                prefix.push_str(if last { "└─ " } else { "├─ " });
            }
            last_at.push(last);
            out.push_str(&esc(&format!("{prefix}{}", self.line(&self.nodes[i]))));
            out.push('\n');
        }
        let spawned = self.spawned();
        if spawned == 0 {
            out.push_str("no agents were spawned in this run\n");
        } else {
            let despawned = self.nodes.iter().filter(|n| n.despawned.is_some()).count();
            let returned = self.nodes.iter().filter(|n| n.spawn.is_some() && n.results > 0);
            out.push_str(&format!(
                "{spawned} agent(s) spawned in this run, {} returned results, {despawned} despawned\n",
                returned.count()
            ));
        }
        if self.costs {
            out.push_str(
                "costs: the agent's own model calls in USD; subtree: with every agent below it (≥: some costs are not known)\n",
            );
        }
        out
    }

    fn line(&self, n: &Node) -> String {
        let mut parts = vec![match &n.role {
            Some(role) => format!("{} ({role})", n.id),
            None => n.id.to_string(),
        }];
        parts.push(n.status.map_or("not started", AgentStatus::as_str).to_owned());
        if let Some(spawn) = &n.spawn {
            parts.push(format!("task: {}", shorten(&spawn.task_prompt)));
        }
        if n.results > 0 || n.spawn.is_some() {
            parts.push(match (n.results, n.untrusted) {
                (0, _) => "no results".to_owned(),
                (1, 0) => "returned results".to_owned(),
                (1, _) => "returned UNTRUSTED results".to_owned(),
                (r, 0) => format!("returned results {r} times"),
                (r, u) => format!("returned results {r} times ({u} UNTRUSTED)"),
            });
        }
        if n.despawned.is_some() {
            parts.push("despawned".to_owned());
        }
        if self.costs {
            parts.push(n.cost.map_or("$? (no price)".to_owned(), |c| format!("${c:.4}")));
            if !n.children.is_empty() {
                let at_least = if n.subtree_unknown { "≥ " } else { "" };
                parts.push(match n.subtree {
                    Some(s) => format!("subtree {at_least}${s:.4}"),
                    None => "subtree $?".to_owned(),
                });
            }
        }
        parts.join(" · ")
    }
}

/// The first line of `text`, at most [`TASK_CHARS`] characters of it (`…` when cut).
fn shorten(text: &str) -> String {
    let line = text.trim().lines().next().unwrap_or_default();
    let mut chars = line.chars();
    let mut out: String = chars.by_ref().take(TASK_CHARS).collect();
    if chars.next().is_some() || text.trim().lines().nth(1).is_some() {
        out.push('…');
    }
    out
}

/// The results as text: a headline per result, then its task, summary, artifacts and known
/// issues, indented.
pub(crate) fn render_results(results: &[Returned<'_>]) -> String {
    if results.is_empty() {
        return "no structured results in this run (no agent returned results with return_results)\n"
            .to_owned();
    }
    let mut lines = Vec::new();
    for (k, r) in results.iter().enumerate() {
        if k > 0 {
            lines.push(String::new());
        }
        let role = r.role.as_ref().map(|role| format!(" ({role})")).unwrap_or_default();
        lines.push(format!(
            "{}{role} · {} · {} · audit record {}",
            r.record.agent,
            result_status(r.result.status),
            if r.trusted { "trusted" } else { "UNTRUSTED" },
            r.record.seq,
        ));
        lines.push(format!("  task: {}", shorten(r.task)));
        let mut summary = r.result.summary.trim().lines();
        lines.push(format!("  summary: {}", summary.next().unwrap_or_default()));
        lines.extend(summary.map(|l| format!("    {l}")));
        if r.result.artifacts.is_empty() {
            lines.push("  artifacts: none".to_owned());
        } else {
            lines.push("  artifacts:".to_owned());
            for a in &r.result.artifacts {
                let what = match a.description.trim() {
                    "" => String::new(),
                    d => format!(" — {d}"),
                };
                lines.push(format!("    {} {}{what}", change_type(a.change_type), a.file_path));
            }
        }
        if r.result.known_issues.is_empty() {
            lines.push("  known issues: none".to_owned());
        } else {
            lines.push("  known issues:".to_owned());
            lines.extend(r.result.known_issues.iter().map(|i| format!("    - {i}")));
        }
    }
    let mut out = String::new();
    for line in lines {
        out.push_str(&esc(&line));
        out.push('\n');
    }
    out
}

fn result_status(s: ResultStatus) -> &'static str {
    match s {
        ResultStatus::Success => "success",
        ResultStatus::Failure => "failure",
        ResultStatus::Partial => "partial",
    }
}

fn change_type(c: ChangeType) -> &'static str {
    match c {
        ChangeType::Created => "created",
        ChangeType::Modified => "modified",
        ChangeType::Deleted => "deleted",
        ChangeType::Referenced => "referenced",
    }
}
