//! The live view's step counter: `planning` until the task's plan is known, then `N/M steps`,
//! `M` the plan's steps and `N` those of them known to be done.
//!
//! The plan is the task's own steps when it came with some; a goal's is the one its top power
//! planned, read from that power's state ([`agent_layers::task_progress`]) or, when the agents
//! run elsewhere (on workers), from the plan it proposed for signature (the task's decision). A
//! step is done when the power holds its successful result, or (a scripted step) when a call of
//! its tool with its arguments succeeded in the audit stream: the counter never passes `M`, and
//! a step's extra calls, retries or a goal step's many calls count once.

use std::collections::{BTreeMap, BTreeSet};

use agent_core::{AuditEvent, AuditRecord};
use agent_layers::TaskProgress;
use agent_state::{Decision, Task, call_fingerprint};

/// What the counter has seen of the run's steps.
pub(crate) struct Steps {
    /// The task's own steps, in order (empty for a goal).
    given: Vec<String>,
    /// The scripted steps of `given` by the fingerprint of their call (tool and arguments).
    calls: BTreeMap<String, Vec<String>>,
    /// The steps whose call succeeded.
    called: BTreeSet<String>,
    /// Where the task stood at its top power when last read.
    power: Option<TaskProgress>,
}

impl Steps {
    /// The counter of `task`.
    pub(crate) fn new(task: &Task) -> Self {
        let mut calls: BTreeMap<String, Vec<String>> = BTreeMap::new();
        for step in task.steps.iter().filter(|s| s.is_scripted()) {
            calls
                .entry(call_fingerprint(&step.tool, &step.args))
                .or_default()
                .push(step.id.clone());
        }
        Self {
            given: task.steps.iter().map(|s| s.id.clone()).collect(),
            calls,
            called: BTreeSet::new(),
            power: None,
        }
    }

    /// Takes where the task stands at its top power, when the view could read it: kept until
    /// the next reading (a power busy in its turn cannot be read; its last state stands).
    pub(crate) fn power(&mut self, power: Option<TaskProgress>) {
        if power.is_some() {
            self.power = power;
        }
    }

    /// Takes note of an audit record: a successful call of a scripted step's tool with its
    /// arguments marks the step done. Whether it did (the counter may have moved).
    pub(crate) fn saw(&mut self, record: &AuditRecord) -> bool {
        if let AuditEvent::ToolCall { tool, args, success: true, .. } = &record.event
            && let Some(steps) = self.calls.get(&call_fingerprint(tool, args))
        {
            self.called.extend(steps.iter().cloned());
            return true;
        }
        false
    }

    /// The counter: `planning` while no plan is known, else `N/M steps`; `decisions` are the
    /// run's decisions.
    pub(crate) fn line(&self, task_id: &str, decisions: &[Decision]) -> String {
        match self.count(task_id, decisions) {
            Some((done, total)) => format!("{done}/{total} steps"),
            None => "planning".to_owned(),
        }
    }

    /// The counter as numbers: `(done, total)`, or `None` while no plan is known.
    pub(crate) fn count(&self, task_id: &str, decisions: &[Decision]) -> Option<(usize, usize)> {
        let power = self.power.as_ref();
        let planned: Vec<String> = if !self.given.is_empty() {
            self.given.clone()
        } else if let Some(power) = power.filter(|p| !p.steps.is_empty()) {
            power.steps.clone()
        } else {
            proposed_plan(task_id, decisions)?
        };
        let succeeded = power.map(|p| p.succeeded.as_slice()).unwrap_or_default();
        let done =
            planned.iter().filter(|id| self.called.contains(*id) || succeeded.contains(id)).count();
        Some((done, planned.len()))
    }
}

/// The step ids of the last plan proposed for task `task_id` (a decision whose content names
/// the task and lists steps), if any.
fn proposed_plan(task_id: &str, decisions: &[Decision]) -> Option<Vec<String>> {
    decisions
        .iter()
        .filter(|d| d.content.get("task_id").and_then(|t| t.as_str()) == Some(task_id))
        .filter_map(|d| Some((d.created_at, d.content.get("steps")?.as_array()?)))
        .max_by_key(|(at, _)| *at)
        .map(|(_, steps)| {
            steps
                .iter()
                .filter_map(|s| s.get("id").and_then(|id| id.as_str()).map(str::to_owned))
                .collect()
        })
}
