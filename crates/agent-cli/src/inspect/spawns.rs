//! `inspect tree` and `inspect results`, as pure functions of a run's audit log: which agents
//! were spawned under which (`Spawned`, appended by the spawner), each one's last status
//! (`Transition`), what it returned (`Result`) and whether it was dismissed (`Despawned`), with
//! each agent's cost from a [`CostMeter`] rolled up its subtree.
//!
//! Every line is escaped like the rest of what strata prints ([`esc`]): a task or a summary
//! with a newline or a terminal escape in it cannot break a line or drive the terminal.

use std::collections::HashMap;

use agent_core::{AuditEvent, AuditRecord, CostMeter, SpawnRecord};
use agent_state::{AgentId, AgentLayer, AgentResult, AgentStatus, ChangeType, ResultStatus};
use serde_json::{Value, json};
use team_file::escape_controls as esc;

/// How many characters of a task's first line the tree shows.
const TASK_CHARS: usize = 60;

/// An agent of the team file.
pub(crate) struct Configured {
    /// Its id.
    pub(crate) id: AgentId,
    /// Its layer.
    pub(crate) layer: AgentLayer,
    /// Its configured supervisor.
    pub(crate) supervisor: Option<AgentId>,
    /// Its role, if it has one.
    pub(crate) role: Option<String>,
}

/// One agent of the tree.
struct Node {
    id: AgentId,
    layer: AgentLayer,
    supervisor: Option<AgentId>,
    role: Option<String>,
    /// How it was spawned; `None` for a configured agent.
    spawn: Option<SpawnRecord>,
    status: Option<AgentStatus>,
    /// Its final summary, if its supervisor dismissed it.
    despawned: Option<String>,
    results: u32,
    untrusted: u32,
    cost: Option<f64>,
    /// Its own cost and its subtree's known costs.
    subtree: Option<f64>,
    /// Whether a cost in its subtree (its own included) is not known.
    subtree_unknown: bool,
    children: Vec<usize>,
}

/// The agents of a run, configured and spawned, as a tree.
pub(crate) struct SpawnTree {
    nodes: Vec<Node>,
    /// The nodes in the order they are drawn, with their depth and whether each is the last
    /// child of its parent.
    order: Vec<(usize, usize, bool)>,
    /// Whether costs are shown (some agent's cost is known).
    costs: bool,
}

impl SpawnTree {
    /// The tree of `configured` and of the agents the `Spawned` records of `records` add,
    /// each under its supervisor (a spawned agent under its spawner), with statuses, results,
    /// dismissals, and, with `costs`, each agent's own cost and its subtree's.
    pub(crate) fn build(
        configured: Vec<Configured>,
        records: &[AuditRecord],
        costs: Option<&dyn CostMeter>,
    ) -> Self {
        let mut nodes: Vec<Node> = configured
            .into_iter()
            .map(|c| node(c.id, c.layer, c.supervisor, c.role, None))
            .collect();
        let mut index: HashMap<AgentId, usize> =
            nodes.iter().enumerate().map(|(i, n)| (n.id.clone(), i)).collect();
        for r in records {
            if let AuditEvent::Spawned { spawn } = &r.event
                && !index.contains_key(&spawn.agent)
            {
                index.insert(spawn.agent.clone(), nodes.len());
                nodes.push(node(
                    spawn.agent.clone(),
                    spawn.layer,
                    Some(spawn.parent.clone()),
                    Some(spawn.role.clone()),
                    Some(spawn.clone()),
                ));
            }
        }
        // Each task's result counts once (the last, if a replayed turn recorded it twice).
        let mut latest: HashMap<(&AgentId, &str), bool> = HashMap::new();
        for r in records {
            if let AuditEvent::Result { task, trusted, .. } = &r.event {
                latest.insert((&r.agent, task.as_str()), *trusted);
            }
        }
        for ((agent, _), trusted) in &latest {
            if let Some(n) = index.get(*agent).map(|&i| &mut nodes[i]) {
                n.results += 1;
                n.untrusted += u32::from(!trusted);
            }
        }
        for r in records {
            let target = match &r.event {
                AuditEvent::Despawned { agent, .. } => agent,
                _ => &r.agent,
            };
            let Some(n) = index.get(target).map(|&i| &mut nodes[i]) else { continue };
            match &r.event {
                AuditEvent::Transition { to, .. } => n.status = Some(*to),
                AuditEvent::Despawned { summary, .. } => n.despawned = Some(summary.clone()),
                _ => {}
            }
        }
        let mut roots = Vec::new();
        for i in 0..nodes.len() {
            match nodes[i].supervisor.as_ref().and_then(|s| index.get(s)).copied() {
                Some(p) if p != i => nodes[p].children.push(i),
                _ => roots.push(i),
            }
        }
        // Depth first from the roots; a node a damaged log left in a cycle is drawn as a root.
        let mut order = Vec::with_capacity(nodes.len());
        let mut seen = vec![false; nodes.len()];
        for start in roots.into_iter().chain(0..nodes.len()) {
            let mut stack = vec![(start, 0, true)];
            while let Some((i, depth, last)) = stack.pop() {
                if std::mem::replace(&mut seen[i], true) {
                    continue;
                }
                order.push((i, depth, last));
                let children = &nodes[i].children;
                stack.extend(
                    children
                        .iter()
                        .enumerate()
                        .rev()
                        .map(|(k, &c)| (c, depth + 1, k + 1 == children.len())),
                );
            }
        }
        let mut shown = false;
        if let Some(meter) = costs {
            for n in &mut nodes {
                n.cost = meter.cost_usd(&n.id);
                shown |= n.cost.is_some();
            }
        }
        // Children come after their parent in `order`: walking it backwards rolls costs up.
        for &(i, _, _) in order.iter().rev() {
            let (mut sum, mut unknown) = (nodes[i].cost, nodes[i].cost.is_none());
            for &c in &nodes[i].children {
                if let Some(s) = nodes[c].subtree {
                    sum = Some(sum.unwrap_or(0.0) + s);
                }
                unknown |= nodes[c].subtree_unknown;
            }
            nodes[i].subtree = sum;
            nodes[i].subtree_unknown = unknown;
        }
        Self { nodes, order, costs: shown }
    }

    /// How many agents were spawned.
    pub(crate) fn spawned(&self) -> usize {
        self.nodes.iter().filter(|n| n.spawn.is_some()).count()
    }

    /// The tree as text, one line per agent (`├─ └─`), and a line about what was spawned.
    pub(crate) fn render(&self) -> String {
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

    /// Every agent as JSON, configured ones first (team file order), then spawned ones (in
    /// the order they were spawned).
    pub(crate) fn json(&self) -> Vec<Value> {
        self.nodes
            .iter()
            .map(|n| {
                let cost = |v: Option<f64>| if self.costs { json!(v) } else { Value::Null };
                json!({
                    "id": n.id,
                    "layer": n.layer,
                    "supervisor": n.supervisor,
                    "status": n.status.map_or("not started", AgentStatus::as_str),
                    "role": n.role,
                    "spawned": n.spawn.is_some(),
                    "task_prompt": n.spawn.as_ref().map(|s| &s.task_prompt),
                    "depth": n.spawn.as_ref().map(|s| s.depth),
                    "results": n.results,
                    "untrusted_results": n.untrusted,
                    "despawned": n.despawned.is_some(),
                    "despawn_summary": n.despawned,
                    "cost_usd": cost(n.cost),
                    "subtree_cost_usd": cost(n.subtree),
                    "subtree_cost_complete": self.costs.then_some(!n.subtree_unknown),
                })
            })
            .collect()
    }
}

fn node(
    id: AgentId,
    layer: AgentLayer,
    supervisor: Option<AgentId>,
    role: Option<String>,
    spawn: Option<SpawnRecord>,
) -> Node {
    Node {
        id,
        layer,
        supervisor,
        role,
        spawn,
        status: None,
        despawned: None,
        results: 0,
        untrusted: 0,
        cost: None,
        subtree: None,
        subtree_unknown: false,
        children: Vec::new(),
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

/// One structured result of the audit log.
pub(crate) struct Returned<'a> {
    record: &'a AuditRecord,
    role: Option<String>,
    task: &'a str,
    result: &'a AgentResult,
    trusted: bool,
}

/// Every `Result` record of `records`, in order, with the role of the agent that returned it
/// (from its `Spawned` record, else from `roles`, the configured agents' roles).
pub(crate) fn results<'a>(
    records: &'a [AuditRecord],
    roles: &HashMap<AgentId, String>,
) -> Vec<Returned<'a>> {
    let spawned: HashMap<&AgentId, &str> = records
        .iter()
        .filter_map(|r| match &r.event {
            AuditEvent::Spawned { spawn } => Some((&spawn.agent, spawn.role.as_str())),
            _ => None,
        })
        .collect();
    // A result recorded twice for the same task (a turn run again after a crash, in a log
    // written before results were recorded once) is shown once: the last.
    let last: HashMap<(&AgentId, &str), usize> = records
        .iter()
        .enumerate()
        .filter_map(|(i, r)| match &r.event {
            AuditEvent::Result { task, .. } => Some(((&r.agent, task.as_str()), i)),
            _ => None,
        })
        .collect();
    records
        .iter()
        .enumerate()
        .filter(|(i, r)| match &r.event {
            AuditEvent::Result { task, .. } => last.get(&(&r.agent, task.as_str())) == Some(i),
            _ => false,
        })
        .map(|(_, r)| r)
        .filter_map(|r| match &r.event {
            AuditEvent::Result { task, result, trusted } => Some(Returned {
                record: r,
                role: spawned
                    .get(&r.agent)
                    .copied()
                    .or_else(|| roles.get(&r.agent).map(String::as_str))
                    .map(str::to_owned),
                task,
                result,
                trusted: *trusted,
            }),
            _ => None,
        })
        .collect()
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

/// The results as JSON, in order.
pub(crate) fn results_json(results: &[Returned<'_>]) -> Value {
    results
        .iter()
        .map(|r| {
            json!({
                "seq": r.record.seq,
                "at": r.record.at,
                "agent": r.record.agent,
                "role": r.role,
                "task": r.task,
                "trusted": r.trusted,
                "result": r.result,
            })
        })
        .collect()
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
