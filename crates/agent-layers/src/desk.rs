//! The desk of an agent that takes a team's tasks itself, with no powers above it: a crew's
//! lead ([`MidAgent::leading`](crate::MidAgent::leading)) and a single agent
//! ([`BottomAgent::solo`](crate::BottomAgent::solo)).
//!
//! It holds what a proposing top power holds of a task, without the governance: a goal is
//! planned with the agent's own reasoner (no leads are created), the plan is checked and runs
//! at once (nothing is signed or vetoed), its steps go out in waves as their `after` steps
//! succeed, the results are judged by the agent's reasoner once every step has one, and the
//! task is closed to `system` with its outcome, as a power closes it. Where a layered team
//! would put something to the powers' vote, the desk's agent decides alone: a step no
//! executor could finish fails the task (as `[arbitration] escalations = false` does), a
//! result short of its step's acceptance check goes to another executor.
//!
//! Its saved state has a top power's shape (`tasks`, each with its `task` and `results`), so
//! [`task_progress`](crate::task_progress) reads where a task stands from either.

use std::collections::{BTreeMap, BTreeSet};

use agent_core::{AgentContext, AgentError, AuditEvent, ReasonError};
use agent_state::{
    Action, Address, Assignment, BoardId, DecisionId, Message, MessageKind, PlanStep,
    ProgressReport, ProgressStatus, RoleBook, SubtaskResult, Task, TaskFailure, TaskOutcome,
    WorkPackage,
};
use serde::{Deserialize, Serialize};

use crate::top::{closing_line, report_closed, steps_succeeded};

/// The tasks an agent took itself.
#[derive(Debug, Default, Serialize, Deserialize)]
#[serde(transparent)]
pub(crate) struct Desk {
    tasks: BTreeMap<String, DeskTask>,
}

/// One task at the desk.
#[derive(Debug, Serialize, Deserialize)]
struct DeskTask {
    task: Task,
    results: Vec<SubtaskResult>,
    dispatched: BTreeSet<String>,
    wave: u32,
    closed: bool,
}

/// What a message meant to the desk ([`Desk::read_mail`]).
pub(crate) enum DeskMail {
    /// Not the desk's: the agent handles it as any other.
    NotMine,
    /// Handled by the desk; nothing more to do.
    Handled,
    /// A wave of steps to work on.
    Work(WorkPackage),
    /// The team escalated a task (its time limit, its guards): it fails with `failure`.
    Escalated {
        /// The task.
        task_id: String,
        /// Why it fails.
        failure: TaskFailure,
    },
    /// The agent's own report of work it could not finish: the task fails with it.
    Failed(ProgressReport),
}

impl Desk {
    /// Reads `message` as the desk's agent (`who`, for refusals: "a crew's lead", "a single
    /// agent"): a task from `system` is taken, the team's escalation of a task and the
    /// reports the agent sends itself of its work are answered; anything else is not the
    /// desk's.
    pub(crate) async fn read_mail(
        &mut self,
        ctx: &mut AgentContext,
        message: &Message,
        who: &str,
    ) -> Result<DeskMail, AgentError> {
        let own = message.from.agent() == Some(ctx.id());
        let system = message.from == Address::System;
        match message.kind {
            MessageKind::TaskAssign if system => {
                match ctx.read_payload::<Assignment>(message).await? {
                    Some(Assignment::Task { task }) => {
                        Ok(self.take(ctx, task).await?.map_or(DeskMail::Handled, DeskMail::Work))
                    }
                    Some(_) => {
                        ctx.audit(AuditEvent::Denied {
                            action: format!("task_assign from {}", message.from),
                            error: format!("{who} takes whole tasks from the system"),
                        })
                        .await?;
                        Ok(DeskMail::Handled)
                    }
                    None => Ok(DeskMail::Handled), // unreadable: refused and audited by read_payload
                }
            }
            MessageKind::IssueEscalation if system || own => {
                Ok(match ctx.read_payload::<agent_core::protocol::Escalation>(message).await? {
                    Some(e) => DeskMail::Escalated { task_id: e.task_id, failure: e.failure },
                    None => DeskMail::Handled,
                })
            }
            MessageKind::ProgressReport if own => {
                let Some(report) = ctx.read_payload::<ProgressReport>(message).await? else {
                    return Ok(DeskMail::Handled);
                };
                match report.status {
                    ProgressStatus::InProgress => Ok(DeskMail::Handled),
                    ProgressStatus::Completed => Ok(self
                        .completed(ctx, &report.task_id, report.results)
                        .await?
                        .map_or(DeskMail::Handled, DeskMail::Work)),
                    ProgressStatus::Failed => Ok(DeskMail::Failed(report)),
                }
            }
            _ => Ok(DeskMail::NotMine),
        }
    }

    /// A task from `system`: planned (a goal without steps), checked and kept; its first wave
    /// of steps, or `None` (a redelivered task, or one that failed and is closed).
    pub(crate) async fn take(
        &mut self,
        ctx: &mut AgentContext,
        mut task: Task,
    ) -> Result<Option<WorkPackage>, AgentError> {
        if self.tasks.contains_key(&task.id) {
            return Ok(None); // redelivered: taken already
        }
        if task.steps.is_empty()
            && let Err(failure) = plan(ctx, &mut task).await?
        {
            return self.closed_at_once(ctx, task, failure).await;
        }
        if let Err(failure) = task.check() {
            return self.closed_at_once(ctx, task, failure).await;
        }
        ctx.append_to(
            &BoardId::Global,
            &format!(
                "## Task {}\nGoal: {}\nTaken by {}: no powers sign it, it runs",
                task.id,
                task.goal,
                ctx.id()
            ),
        )
        .await?;
        let id = task.id.clone();
        self.tasks.insert(
            id.clone(),
            DeskTask {
                task,
                results: Vec::new(),
                dispatched: BTreeSet::new(),
                wave: 0,
                closed: false,
            },
        );
        Ok(self.next_wave(&id))
    }

    /// Keeps `task` closed as failed with `failure` before any step ran.
    async fn closed_at_once(
        &mut self,
        ctx: &mut AgentContext,
        task: Task,
        failure: TaskFailure,
    ) -> Result<Option<WorkPackage>, AgentError> {
        let id = task.id.clone();
        let state = DeskTask {
            task,
            results: Vec::new(),
            dispatched: BTreeSet::new(),
            wave: 0,
            closed: true,
        };
        self.tasks.insert(id.clone(), state);
        close(ctx, &id, TaskOutcome::Failed { task_id: id.clone(), reason: failure }).await?;
        Ok(None)
    }

    /// The steps of `task_id` whose `after` steps have all succeeded and that did not go out
    /// yet, as the next wave; `None` when there are none.
    pub(crate) fn next_wave(&mut self, task_id: &str) -> Option<WorkPackage> {
        let state = self.tasks.get_mut(task_id).filter(|t| !t.closed)?;
        let done: BTreeSet<&str> =
            state.results.iter().filter(|r| r.success).map(|r| r.step_id.as_str()).collect();
        let ready: Vec<PlanStep> = state
            .task
            .steps
            .iter()
            .filter(|s| {
                !state.dispatched.contains(&s.id)
                    && s.after.iter().all(|d| done.contains(d.as_str()))
            })
            .cloned()
            .collect();
        if ready.is_empty() {
            return None;
        }
        state.wave += 1;
        state.dispatched.extend(ready.iter().map(|s| s.id.clone()));
        Some(WorkPackage {
            task_id: task_id.to_owned(),
            goal: state.task.goal.clone(),
            decision: DecisionId::from_u128(0),
            wave: state.wave,
            steps: ready,
        })
    }

    /// Finished steps of `task_id` with their `results`: once every step has one, the task is
    /// judged and closed (`None`); until then, the next wave if finished steps release one.
    pub(crate) async fn completed(
        &mut self,
        ctx: &mut AgentContext,
        task_id: &str,
        results: Vec<SubtaskResult>,
    ) -> Result<Option<WorkPackage>, AgentError> {
        let Some(state) = self.tasks.get_mut(task_id).filter(|t| !t.closed) else {
            return Ok(None);
        };
        for r in results {
            if !state.results.iter().any(|x| x.step_id == r.step_id) {
                state.results.push(r);
            }
        }
        let finished =
            state.task.steps.iter().all(|s| state.results.iter().any(|r| r.step_id == s.id));
        if !finished {
            return Ok(self.next_wave(task_id));
        }
        let global = ctx.read_board(&BoardId::Global).await?;
        let judgement = ctx
            .reasoner()
            .judge_progress(ctx.persona(), &state.task, &state.results, &global.content)
            .await?;
        state.closed = true;
        let outcome = if judgement.complete {
            let mut results = state.results.clone();
            let order: Vec<&str> = state.task.steps.iter().map(|s| s.id.as_str()).collect();
            results.sort_by_key(|r| order.iter().position(|s| *s == r.step_id));
            TaskOutcome::Succeeded { task_id: task_id.to_owned(), results }
        } else {
            let (succeeded, steps) = steps_succeeded(&state.task, &state.results);
            TaskOutcome::Failed {
                task_id: task_id.to_owned(),
                reason: TaskFailure::JudgedIncomplete {
                    by: ctx.id().clone(),
                    reason: judgement.summary,
                    succeeded,
                    steps,
                },
            }
        };
        close(ctx, task_id, outcome).await?;
        Ok(None)
    }

    /// Closes the open task `task_id` as failed with `failure`: a step no executor finished,
    /// one that must not run again, or the team's time limit or guards (from `system`).
    pub(crate) async fn fail(
        &mut self,
        ctx: &mut AgentContext,
        task_id: &str,
        failure: TaskFailure,
    ) -> Result<(), AgentError> {
        let Some(state) = self.tasks.get_mut(task_id).filter(|t| !t.closed) else {
            return Ok(()); // closed already, or not this agent's
        };
        state.closed = true;
        // The team's task limit ran out: audited here, where the task is closed (as a
        // proposing power does).
        if let TaskFailure::TimedOut { limit: limit @ agent_state::Limit::Task, what, limit_ms } =
            &failure
        {
            ctx.audit(agent_core::AuditEvent::TimedOut {
                limit: *limit,
                what: what.clone(),
                limit_ms: *limit_ms,
            })
            .await?;
        }
        close(ctx, task_id, TaskOutcome::Failed { task_id: task_id.to_owned(), reason: failure })
            .await
    }

    /// The open tasks.
    pub(crate) fn open_tasks(&self) -> impl Iterator<Item = &String> {
        self.tasks.iter().filter(|(_, t)| !t.closed).map(|(id, _)| id)
    }

    /// Where the first open task stands, in words.
    pub(crate) fn current_work(&self) -> Option<String> {
        self.tasks.iter().find(|(_, t)| !t.closed).map(|(id, t)| {
            let (succeeded, steps) = steps_succeeded(&t.task, &t.results);
            format!("{id}: in progress, {succeeded} of {steps} step(s) done")
        })
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.tasks.is_empty()
    }
}

/// Reports how task `task_id` closed, as a power does, without counting it in the agent's
/// metrics: an executor's `tasks_completed` counts its steps, a lead's is not shown.
async fn close(
    ctx: &mut AgentContext,
    task_id: &str,
    outcome: TaskOutcome,
) -> Result<(), AgentError> {
    let line = closing_line(task_id, &outcome);
    report_closed(ctx, outcome, &line).await
}

/// Plans `task`'s goal with the agent's reasoner: the task gets its steps; a plan that cannot
/// be made, or that asks for leads (a crew or a single agent creates none), is the task's
/// failure.
async fn plan(
    ctx: &mut AgentContext,
    task: &mut Task,
) -> Result<Result<(), TaskFailure>, AgentError> {
    ctx.require(Action::Plan, &format!("(plan task {})", task.id)).await?;
    let plan = match ctx.reasoner().plan(ctx.persona(), task, &RoleBook::default()).await {
        Ok(plan) => plan,
        Err(e @ (ReasonError::CannotPlan { .. } | ReasonError::BadQuestion(_))) => {
            return Ok(Err(TaskFailure::InvalidPlan { reason: e.to_string() }));
        }
        Err(e) => return Err(e.into()),
    };
    if let Some(lead) = plan.leads.first() {
        return Ok(Err(TaskFailure::InvalidPlan {
            reason: format!(
                "the plan asks for a `{}` lead, but this team creates no leads: {} takes the task itself",
                lead.role,
                ctx.id()
            ),
        }));
    }
    task.steps = plan.steps;
    ctx.append_to(
        &BoardId::Global,
        &format!("## Task {} planned from its goal: {} step(s)", task.id, task.steps.len()),
    )
    .await?;
    Ok(Ok(()))
}
