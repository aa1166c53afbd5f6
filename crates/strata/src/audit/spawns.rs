//! The agents of a run and what they returned, as pure functions of its audit log (`strata
//! inspect RUN tree` and `results`, the dashboard): which agents were spawned under which
//! (`Spawned`, appended by the spawner), each one's last status (`Transition`), what it
//! returned (`Result`) and whether it was dismissed (`Despawned`), with each agent's cost
//! from a [`CostMeter`] rolled up its subtree; and both as the JSON of `strata inspect RUN
//! tree --json` and `results --json` ([`SpawnTree::json`], [`results_json`]).

use std::collections::HashMap;

use agent_core::{AuditEvent, AuditRecord, CostMeter, SpawnRecord};
use agent_state::{AgentId, AgentLayer, AgentResult, AgentStatus};
use serde_json::{Value, json};

#[cfg(any(test, feature = "testing"))]
#[doc(hidden)]
pub mod fixtures;
#[cfg(test)]
mod tests;

/// An agent of the team file.
pub struct Configured {
    /// Its id.
    pub id: AgentId,
    /// Its layer.
    pub layer: AgentLayer,
    /// Its configured supervisor.
    pub supervisor: Option<AgentId>,
    /// Its role, if it has one.
    pub role: Option<String>,
}

/// One agent of the tree.
pub struct Node {
    /// Its id.
    pub id: AgentId,
    /// Its layer.
    pub layer: AgentLayer,
    /// Its supervisor (a spawned agent's spawner).
    pub supervisor: Option<AgentId>,
    /// Its role, if it has one.
    pub role: Option<String>,
    /// How it was spawned; `None` for a configured agent.
    pub spawn: Option<SpawnRecord>,
    /// Its last status, if it has one.
    pub status: Option<AgentStatus>,
    /// Its final summary, if its supervisor dismissed it.
    pub despawned: Option<String>,
    /// How many tasks it returned results for.
    pub results: u32,
    /// How many of those results are untrusted.
    pub untrusted: u32,
    /// Its own cost (USD), if known.
    pub cost: Option<f64>,
    /// Its own cost and its subtree's known costs.
    pub subtree: Option<f64>,
    /// Whether a cost in its subtree (its own included) is not known.
    pub subtree_unknown: bool,
    /// Its children, as indexes of [`SpawnTree::nodes`].
    pub children: Vec<usize>,
}

/// The agents of a run, configured and spawned, as a tree.
pub struct SpawnTree {
    /// Every agent: configured ones first (team file order), then spawned ones (in the order
    /// they were spawned).
    pub nodes: Vec<Node>,
    /// The nodes in the order they are drawn, with their depth and whether each is the last
    /// child of its parent.
    pub order: Vec<(usize, usize, bool)>,
    /// Whether costs are shown (some agent's cost is known).
    pub costs: bool,
}

impl SpawnTree {
    /// The tree of `configured` and of the agents the `Spawned` records of `records` add,
    /// each under its supervisor (a spawned agent under its spawner), with statuses, results,
    /// dismissals, and, with `costs`, each agent's own cost and its subtree's.
    pub fn build(
        configured: Vec<Configured>,
        records: &[AuditRecord],
        costs: Option<&dyn CostMeter>,
    ) -> Self {
        let (mut nodes, index) = nodes(configured, records);
        count_results(&mut nodes, &index, records);
        statuses(&mut nodes, &index, records);
        let order = order(&mut nodes, &index);
        let mut shown = false;
        if let Some(meter) = costs {
            for n in &mut nodes {
                n.cost = meter.cost_usd(&n.id);
                shown |= n.cost.is_some();
            }
        }
        roll_up(&mut nodes, &order);
        Self { nodes, order, costs: shown }
    }

    /// How many agents were spawned.
    pub fn spawned(&self) -> usize {
        self.nodes.iter().filter(|n| n.spawn.is_some()).count()
    }

    /// Every agent as JSON, configured ones first (team file order), then spawned ones (in
    /// the order they were spawned): id, layer, supervisor, status, role, how it was spawned,
    /// its results, its dismissal, and its costs (`null` when no cost is known).
    pub fn json(&self) -> Vec<Value> {
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

/// The configured agents and those the `Spawned` records of `records` add, with each one's
/// index by id.
fn nodes(
    configured: Vec<Configured>,
    records: &[AuditRecord],
) -> (Vec<Node>, HashMap<AgentId, usize>) {
    let mut nodes: Vec<Node> =
        configured.into_iter().map(|c| node(c.id, c.layer, c.supervisor, c.role, None)).collect();
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
    (nodes, index)
}

/// Counts each agent's results, and the untrusted ones: each task's result once (the last,
/// if a replayed turn recorded it twice).
fn count_results(nodes: &mut [Node], index: &HashMap<AgentId, usize>, records: &[AuditRecord]) {
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
}

/// Each agent's last status and its dismissal.
fn statuses(nodes: &mut [Node], index: &HashMap<AgentId, usize>, records: &[AuditRecord]) {
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
}

/// Links each node to its supervisor's, and returns the order they are drawn in: depth first
/// from the roots; a node a damaged log left in a cycle is drawn as a root.
fn order(nodes: &mut [Node], index: &HashMap<AgentId, usize>) -> Vec<(usize, usize, bool)> {
    let mut roots = Vec::new();
    for i in 0..nodes.len() {
        match nodes[i].supervisor.as_ref().and_then(|s| index.get(s)).copied() {
            Some(p) if p != i => nodes[p].children.push(i),
            _ => roots.push(i),
        }
    }
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
    order
}

/// Rolls the costs up the tree: children come after their parent in `order`, so walking it
/// backwards sees every child before its parent.
fn roll_up(nodes: &mut [Node], order: &[(usize, usize, bool)]) {
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

/// One structured result of the audit log.
pub struct Returned<'a> {
    /// Its record.
    pub record: &'a AuditRecord,
    /// The role of the agent that returned it.
    pub role: Option<String>,
    /// The task it is the result of.
    pub task: &'a str,
    /// The result.
    pub result: &'a AgentResult,
    /// Whether it is trusted.
    pub trusted: bool,
}

/// Every `Result` record of `records`, in order, with the role of the agent that returned it
/// (from its `Spawned` record, else from `roles`, the configured agents' roles).
pub fn results<'a>(
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

/// The results as JSON, in order: each one's audit record (`seq`, `at`), agent, role, task,
/// whether it is trusted, and the result as returned.
pub fn results_json(results: &[Returned<'_>]) -> Value {
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
