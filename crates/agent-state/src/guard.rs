//! Guards against runs that go nowhere: the pure rules that find an agent repeating itself,
//! two agents bouncing the same work, a run without progress, and agents waiting on each
//! other in a cycle.
//!
//! Each rule is a function of what the caller observed (calls, hops, heartbeats, waits): no
//! clock, no ids made here. The runtime (`agent-layers`' tool loop, `agent-pool`'s driver)
//! feeds them and ends the task with the [`TaskFailure`](crate::TaskFailure) they describe,
//! or escalates, as [`GuardSettings::on_stuck`] says.

use std::collections::{BTreeMap, BTreeSet};

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::{AgentId, canonical_json};

/// Default of [`GuardSettings::repeat_limit`]: the same call three times in a row is a loop.
pub const DEFAULT_REPEAT_LIMIT: u32 = 3;
/// Default of [`GuardSettings::bounce_limit`]: a step handed back and forth four times.
pub const DEFAULT_BOUNCE_LIMIT: u32 = 4;
/// Default of [`GuardSettings::idle_heartbeats`]: fifteen heartbeats without progress.
pub const DEFAULT_IDLE_HEARTBEATS: u32 = 15;
/// Default of [`GuardSettings::wait_heartbeats`]: a wait cycle seen on two heartbeats in a row.
pub const DEFAULT_WAIT_HEARTBEATS: u32 = 2;
/// The longest block of calls [`repeated_tail`] looks for (`a b a b a b` is a block of 2).
pub const MAX_LOOP_PERIOD: usize = 3;

/// What the runtime does when a guard finds the run stuck.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum OnStuck {
    /// The task ends with the typed reason.
    #[default]
    Stop,
    /// The stuck agent's supervisor is told and decides (a lead reassigns a looping
    /// executor's step, a supervising lead's model sees its worker's failure); a condition of
    /// the whole run (no progress, a wait cycle) that lasts as long again after the warning
    /// stops the task.
    Escalate,
}

/// The thresholds of the guards and what to do when one trips.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct GuardSettings {
    /// How many times in a row one agent may make the same call (same tool, same arguments;
    /// or the same block of up to [`MAX_LOOP_PERIOD`] calls) before it is a loop. At least 2.
    pub repeat_limit: u32,
    /// How many hops of one work item back and forth between the same two agents make a
    /// ping-pong. At least 3.
    pub bounce_limit: u32,
    /// How many heartbeats in a row with a task open and no progress stop the run. At least 1.
    pub idle_heartbeats: u32,
    /// On how many heartbeats in a row the same wait cycle must be seen to be broken (a reply
    /// already on its way ends a wait by itself). At least 1.
    pub wait_heartbeats: u32,
    /// Stop the task, or escalate first.
    pub on_stuck: OnStuck,
}

impl Default for GuardSettings {
    fn default() -> Self {
        Self {
            repeat_limit: DEFAULT_REPEAT_LIMIT,
            bounce_limit: DEFAULT_BOUNCE_LIMIT,
            idle_heartbeats: DEFAULT_IDLE_HEARTBEATS,
            wait_heartbeats: DEFAULT_WAIT_HEARTBEATS,
            on_stuck: OnStuck::Stop,
        }
    }
}

/// A threshold out of range.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("guard setting `{field}` is {value}, but it must be at least {min}: {why}")]
pub struct GuardError {
    /// The setting.
    pub field: &'static str,
    /// Its value.
    pub value: u32,
    /// The smallest allowed.
    pub min: u32,
    /// Why, in words.
    pub why: &'static str,
}

impl GuardSettings {
    /// Checks the thresholds.
    pub fn check(&self) -> Result<(), GuardError> {
        let rules: [(&'static str, u32, u32, &'static str); 4] = [
            ("repeat_limit", self.repeat_limit, 2, "one call is not a repetition"),
            ("bounce_limit", self.bounce_limit, 3, "a hand-over and its answer are normal"),
            ("idle_heartbeats", self.idle_heartbeats, 1, "0 would stop every run at once"),
            ("wait_heartbeats", self.wait_heartbeats, 1, "0 would never look"),
        ];
        for (field, value, min, why) in rules {
            if value < min {
                return Err(GuardError { field, value, min, why });
            }
        }
        Ok(())
    }
}

/// A tool call as one line: `tool {canonical args}`. Equal for the same tool with the same
/// arguments in any key order.
pub fn call_fingerprint(tool: &str, args: &Value) -> String {
    format!("{tool} {}", canonical_json(args))
}

/// How the end of a sequence repeats: the block of `period` items repeated `times` times.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Repetition {
    /// The length of the repeated block (1: the same item in a row).
    pub period: usize,
    /// How many times the block occurs at the end, in a row.
    pub times: usize,
}

/// The strongest repetition at the end of `items`: for each block length up to
/// [`MAX_LOOP_PERIOD`], how many times the last block occurs in a row at the end; the one
/// with the most occurrences (the shortest block on a tie). `None` for an empty sequence.
pub fn repeated_tail<T: PartialEq>(items: &[T]) -> Option<Repetition> {
    let mut best: Option<Repetition> = None;
    for period in 1..=MAX_LOOP_PERIOD.min(items.len()) {
        let block = &items[items.len() - period..];
        let mut times = 1;
        while items.len() >= (times + 1) * period {
            let start = items.len() - (times + 1) * period;
            if &items[start..start + period] != block {
                break;
            }
            times += 1;
        }
        if best.is_none_or(|b| times > b.times) {
            best = Some(Repetition { period, times });
        }
    }
    best
}

/// The loop rule: whether the end of one agent's calls (fingerprints, oldest first) repeats
/// at least `limit` times. A block of several calls counts only when its calls differ from
/// each other (`a a a a` is the block `a`, not `a a`).
pub fn detect_loop(calls: &[String], limit: u32) -> Option<Repetition> {
    let repetition = repeated_tail(calls)?;
    (repetition.times >= limit as usize && repetition.times >= 2).then_some(repetition)
}

/// One hand-over of a work item from one agent to another.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Hop {
    /// Who handed it over.
    pub from: AgentId,
    /// Who got it.
    pub to: AgentId,
}

/// The ping-pong rule: remembers, per work item, its last hand-overs, and says when one item
/// went back and forth between the same two agents `limit` times in a row (A→B, B→A, A→B...;
/// hops that cross on their way, A→B, A→B, B→A, B→A, count the same: what matters is that
/// the item stays between the two, in both directions).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct PingPong {
    /// Per item, the hops between the same two agents since another agent last had it,
    /// oldest first.
    items: BTreeMap<String, Vec<Hop>>,
}

/// Two agents bouncing one item.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Bounce {
    /// The two agents, in the order of the first hop.
    pub agents: [AgentId; 2],
    /// The item.
    pub item: String,
    /// How many hops back and forth.
    pub hops: usize,
}

impl PingPong {
    /// Records that `item` went from `from` to `to`; returns the bounce once the item has
    /// gone between the same two agents `limit` times in a row, in both directions. A hop
    /// involving another agent starts a new run with that hop; a hop to oneself is ignored.
    /// After a bounce the item starts afresh.
    pub fn observe(
        &mut self,
        item: &str,
        from: &AgentId,
        to: &AgentId,
        limit: u32,
    ) -> Option<Bounce> {
        if from == to {
            return None;
        }
        let hop = Hop { from: from.clone(), to: to.clone() };
        let hops = self.items.entry(item.to_owned()).or_default();
        let continues = hops.last().is_some_and(|last| {
            (last.from == hop.from && last.to == hop.to)
                || (last.from == hop.to && last.to == hop.from)
        });
        if !continues {
            hops.clear();
        }
        hops.push(hop);
        let both_ways = hops.iter().any(|h| h.from != hops[0].from);
        if hops.len() >= limit as usize && limit >= 2 && both_ways {
            let first = &hops[0];
            let bounce = Bounce {
                agents: [first.from.clone(), first.to.clone()],
                item: item.to_owned(),
                hops: hops.len(),
            };
            self.items.remove(item);
            return Some(bounce);
        }
        None
    }

    /// Forgets an item (it was finished).
    pub fn forget(&mut self, item: &str) {
        self.items.remove(item);
    }

    /// How many items it follows.
    pub fn len(&self) -> usize {
        self.items.len()
    }

    /// Whether it follows no item.
    pub fn is_empty(&self) -> bool {
        self.items.is_empty()
    }
}

/// The no-progress rule: counts the heartbeats in a row with a task open and nothing
/// changed.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ProgressWatch {
    /// The progress mark last seen (any number that grows with progress).
    mark: u64,
    /// Heartbeats in a row without progress while a task was open.
    idle: u32,
}

impl ProgressWatch {
    /// One heartbeat: `mark` is the run's progress counter now (anything that grows when work
    /// moves), `open` whether a task is open. Returns the heartbeats in a row without progress
    /// while a task was open: 0 after progress or with no task open.
    pub fn heartbeat(&mut self, mark: u64, open: bool) -> u32 {
        if mark != self.mark || !open {
            self.mark = mark;
            self.idle = 0;
        } else {
            self.idle = self.idle.saturating_add(1);
        }
        self.idle
    }

    /// Starts counting again (after an escalation).
    pub fn reset(&mut self) {
        self.idle = 0;
    }
}

/// One agent waiting on another.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
pub struct WaitEdge {
    /// Who waits.
    pub waiter: AgentId,
    /// On whom.
    pub on: AgentId,
    /// For what, in words (`the reply to speak_to_agent`, `the results of step s1`...).
    pub what: String,
    /// The task the wait belongs to, if known.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub task: Option<String>,
}

/// A wait-for graph: who waits on whom.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct WaitGraph {
    edges: BTreeSet<WaitEdge>,
}

impl WaitGraph {
    /// An empty graph.
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds a wait (a wait on oneself is kept: it is a cycle of one).
    pub fn add(&mut self, edge: WaitEdge) {
        self.edges.insert(edge);
    }

    /// The waits.
    pub fn edges(&self) -> impl Iterator<Item = &WaitEdge> {
        self.edges.iter()
    }

    /// A cycle of waits, if there is one: the edges in order, each waiting on the next's
    /// waiter and the last on the first's. The same graph always gives the same cycle (the
    /// one found first from the smallest agent id).
    pub fn cycle(&self) -> Option<Vec<WaitEdge>> {
        let mut out: BTreeMap<&AgentId, Vec<&WaitEdge>> = BTreeMap::new();
        for edge in &self.edges {
            out.entry(&edge.waiter).or_default().push(edge);
        }
        // Iterative depth-first search; colour 1: on the path, 2: done.
        let mut colour: BTreeMap<&AgentId, u8> = BTreeMap::new();
        let starts: Vec<&AgentId> = out.keys().copied().collect();
        for start in starts {
            if colour.contains_key(start) {
                continue;
            }
            let mut path: Vec<&WaitEdge> = Vec::new();
            let mut stack: Vec<(&AgentId, usize)> = vec![(start, 0)];
            colour.insert(start, 1);
            while let Some(&(node, next)) = stack.last() {
                let edges = out.get(node).map(Vec::as_slice).unwrap_or_default();
                let Some(edge) = edges.get(next) else {
                    colour.insert(node, 2);
                    stack.pop();
                    path.pop();
                    continue;
                };
                if let Some(top) = stack.last_mut() {
                    top.1 += 1;
                }
                match colour.get(&edge.on) {
                    Some(1) => {
                        path.push(edge);
                        let begin = path.iter().position(|e| e.waiter == edge.on).unwrap_or(0);
                        return Some(path[begin..].iter().map(|e| (*e).clone()).collect());
                    }
                    Some(_) => {}
                    None => {
                        colour.insert(&edge.on, 1);
                        path.push(edge);
                        stack.push((&edge.on, 0));
                    }
                }
            }
        }
        None
    }
}
