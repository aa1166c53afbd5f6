//! The step counter of a run (the `strata` command's live view and the dashboard's model):
//! `planning` until the task's plan is known, then `N/M steps`, `M` the plan's steps and `N`
//! those of them known to be done.
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
pub struct Steps {
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
    pub fn new(task: &Task) -> Self {
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

    /// Takes where the task stands at its top power, when it could be read: kept until
    /// the next reading (a power busy in its turn cannot be read; its last state stands).
    pub fn power(&mut self, power: Option<TaskProgress>) {
        if power.is_some() {
            self.power = power;
        }
    }

    /// Takes note of an audit record: a successful call of a scripted step's tool with its
    /// arguments marks the step done. Whether it did (the counter may have moved).
    pub fn saw(&mut self, record: &AuditRecord) -> bool {
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
    pub fn line(&self, task_id: &str, decisions: &[Decision]) -> String {
        match self.count(task_id, decisions) {
            Some((done, total)) => format!("{done}/{total} steps"),
            None => "planning".to_owned(),
        }
    }

    /// The counter as numbers: `(done, total)`, or `None` while no plan is known.
    pub fn count(&self, task_id: &str, decisions: &[Decision]) -> Option<(usize, usize)> {
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

/// Where task `task_id` stands at the agent of `team` that takes tasks (its proposing power;
/// a crew's lead, a single agent) when it runs in this process and can be read now (an
/// agent busy in its turn cannot; agents on workers are not here).
pub fn team_power(team: &agent_pool::Team, task_id: &str) -> Option<TaskProgress> {
    let slot = team.pool().get(team.entry())?;
    let agent = slot.agent().try_lock().ok()?;
    agent_layers::task_progress(&agent.record().behavior, task_id)
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

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, reason = "tests")]

    use agent_state::{AgentId, Timestamp};
    use serde_json::json;

    use super::*;
    use crate::tests::record;

    /// A successful call of `tool` with `args`.
    fn call(seq: u64, tool: &str, args: serde_json::Value) -> AuditRecord {
        let event =
            AuditEvent::ToolCall { tool: tool.into(), args, success: true, summary: "ok".into() };
        AuditRecord { seq, ..record(event) }
    }

    /// The plan `top-a` proposed for task `t` at `at`: steps `ids`.
    fn proposed(n: u128, at: u64, task: &str, ids: &[&str]) -> agent_state::Decision {
        let steps: Vec<serde_json::Value> =
            ids.iter().map(|id| json!({"id": id, "description": "do it"})).collect();
        agent_state::Decision::propose(
            agent_state::DecisionId::from_u128(n),
            AgentId::from("top-a"),
            json!({"task_id": task, "goal": "g", "steps": steps}),
            vec![AgentId::from("top-b")],
            Timestamp(at),
        )
        .unwrap()
    }

    /// Issue #32: a goal run's counter read `1/0 steps` (every successful tool call counted, out
    /// of the submitted task's steps: none). It says `planning` until the plan is known, then
    /// counts the plan's steps done, whatever the calls.
    #[test]
    fn a_goal_runs_counter_says_planning_then_counts_the_planned_steps() {
        let goal = Task::goal("t", "write the docs");
        let mut steps = Steps::new(&goal);
        for seq in 0..5 {
            steps.saw(&call(seq, "write_file", json!({"path": "a.md", "content": "x"})));
        }
        assert_eq!(steps.line("t", &[]), "planning");
        // Another task's plan is not this one's.
        assert_eq!(steps.line("t", &[proposed(1, 10, "other", &["x"])]), "planning");

        // Proposed for signature (the power's state not readable: agents on workers).
        let plans = [proposed(1, 10, "t", &["a", "b"]), proposed(2, 20, "t", &["a", "b", "c"])];
        assert_eq!(steps.line("t", &plans), "0/3 steps", "the last plan proposed");
        // A power still planning holds no steps: the proposed plan counts.
        steps.power(Some(agent_layers::TaskProgress::default()));
        assert_eq!(steps.line("t", &plans), "0/3 steps");
        assert_eq!(steps.line("t", &[]), "planning");

        // The power's state: its plan and the steps with a successful result.
        let power = agent_layers::TaskProgress {
            steps: vec!["a".into(), "b".into(), "c".into()],
            succeeded: vec!["a".into(), "c".into()],
        };
        steps.power(Some(power));
        assert_eq!(steps.line("t", &[]), "2/3 steps");
        assert_eq!(steps.line("t", &plans), "2/3 steps");
        // A power busy in its turn cannot be read: what it said last stands.
        steps.power(None);
        assert_eq!(steps.line("t", &plans), "2/3 steps");
    }

    /// A scripted plan: a step is done once a call of its tool with its arguments succeeded; its
    /// repeated calls, calls of other tools and failed calls do not count.
    #[test]
    fn a_scripted_runs_counter_counts_each_step_once_and_never_passes_the_plan() {
        let task = Task {
            id: "t".into(),
            goal: "g".into(),
            steps: vec![
                agent_state::PlanStep::scripted(
                    "write",
                    "write",
                    agent_state::StepTarget::Any,
                    "write_file",
                    json!({"path": "a.txt", "content": "a"}),
                ),
                agent_state::PlanStep::scripted(
                    "list",
                    "list",
                    agent_state::StepTarget::Any,
                    "list_dir",
                    json!({"path": "."}),
                ),
            ],
        };
        let mut steps = Steps::new(&task);
        assert_eq!(steps.line("t", &[]), "0/2 steps");
        // Same arguments in another key order: the same call.
        steps.saw(&call(0, "write_file", json!({"content": "a", "path": "a.txt"})));
        steps.saw(&call(1, "write_file", json!({"path": "a.txt", "content": "a"})));
        steps.saw(&call(2, "read_file", json!({"path": "a.txt"})));
        steps.saw(&call(3, "list_dir", json!({"path": "sub"})));
        let failed = AuditEvent::ToolCall {
            tool: "list_dir".into(),
            args: json!({"path": "."}),
            success: false,
            summary: "no".into(),
        };
        steps.saw(&AuditRecord { seq: 4, ..record(failed) });
        assert_eq!(steps.line("t", &[]), "1/2 steps");
        steps.saw(&call(5, "list_dir", json!({"path": "."})));
        assert_eq!(steps.line("t", &[]), "2/2 steps");
    }
}
