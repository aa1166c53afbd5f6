//! The mid layer: leads that decompose work, delegate it to executors, follow it, reassign it when
//! an executor fails, escalate what they cannot place, and report upward (docs/concepts.md#layers).

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::Arc;

use agent_core::protocol::{
    ArbitrationResult, ConflictReport, ConflictSubject, ErrorReport, Escalation, HelpResponse,
    PeerCoordination, StatusReport, Warning,
};
use agent_core::{AgentBehavior, AgentContext, AgentError, AuditEvent, Candidate, ReasonError};
use agent_state::{
    Action, AgentId, ArbitrationSettings, Assignment, BallotChoice, BoardSnapshot, GuardSettings,
    Message, MessageKind, ProgressReport, ProgressStatus, QUOTE_CHARS, Subtask, SubtaskResult,
    TaskFailure, WorkPackage, quote,
};
use async_trait::async_trait;
use serde::{Deserialize, Serialize};

use crate::desk::{Desk, DeskMail};
use crate::work::{Means, Outcome, Progress, WorkLoop};

mod handover;

/// A lead's settings.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct MidSpec {
    /// The lead's domain, such as `backend`.
    pub domain: String,
    /// Most executors this lead may have.
    pub max_subordinates: usize,
}

/// A mid-layer agent.
pub struct MidAgent {
    spec: MidSpec,
    top: Vec<AgentId>,
    peers: Vec<AgentId>,
    executors: Vec<Executor>,
    /// Where each executor is in `executors` (a lead may have a thousand, and each message it
    /// gets asks whether its sender is one of them). The list does not change after `new`.
    by_id: HashMap<AgentId, usize>,
    work: BTreeMap<String, WorkState>,
    /// Its role enables roles: without executors of its own, it carries out each step of its work
    /// through its reasoner's tool loop with the supervisor tools
    /// (docs/concepts.md#roles-and-spawning).
    supervises: bool,
    /// The team's guards (its own tool loops that repeat themselves are stopped).
    guards: GuardSettings,
    /// Which of its disagreements and escalations go to the top layer's vote.
    arbitration: ArbitrationSettings,
    /// A crew's lead ([`MidAgent::leading`]): the tasks it takes itself, from `system`.
    desk: Option<Desk>,
}

#[derive(Serialize, Deserialize)]
struct Executor {
    id: AgentId,
    tools: Arc<[String]>,
    failed: bool,
    failures: u32,
    dismissed: bool,
}

/// Executor `id` of `executors`, found through its index `by_id`.
fn executor_mut<'a>(
    executors: &'a mut [Executor],
    by_id: &HashMap<AgentId, usize>,
    id: &AgentId,
) -> Option<&'a mut Executor> {
    by_id.get(id).and_then(|&i| executors.get_mut(i))
}

/// An executor's state as a lead saves it (only for those not in their first state).
#[derive(Clone, Copy, Default, Serialize, Deserialize)]
struct ExecutorState {
    #[serde(default)]
    failed: bool,
    #[serde(default)]
    failures: u32,
    #[serde(default)]
    dismissed: bool,
}

/// A lead's saved executors: by id, only those not in their first state; or, in records
/// saved before, every executor listed.
#[derive(Deserialize)]
#[serde(untagged)]
enum SavedExecutors {
    ById(BTreeMap<String, ExecutorState>),
    Listed(Vec<ListedExecutor>),
}

impl Default for SavedExecutors {
    fn default() -> Self {
        Self::ById(BTreeMap::new())
    }
}

#[derive(Deserialize)]
struct ListedExecutor {
    id: AgentId,
    #[serde(flatten)]
    state: ExecutorState,
}

/// A lead dismisses an executor (failed → terminated) after this many failures.
pub const MAX_FAILURES_BEFORE_DISMISSAL: u32 = 3;

#[derive(Serialize, Deserialize)]
struct WorkState {
    package: WorkPackage,
    from: AgentId,
    subtasks: BTreeMap<String, Subtask>,
    tried: BTreeMap<String, Vec<AgentId>>,
    results: BTreeMap<String, SubtaskResult>,
    closed: bool,
    /// A supervising lead's tool loop per step still in progress.
    #[serde(default)]
    loops: BTreeMap<String, WorkLoop>,
    /// Steps that went to the top layer's vote once (a step is arbitrated at most once).
    #[serde(default)]
    arbitrated: BTreeSet<String>,
    /// Steps escalated as a conflict, waiting for the ruling.
    #[serde(default)]
    escalated: BTreeSet<String>,
    /// Results this lead disputes (they fall short of the step's acceptance check), waiting
    /// for the ruling.
    #[serde(default)]
    disputed: BTreeMap<String, SubtaskResult>,
}

impl WorkState {
    /// A package just taken from `from`, nothing placed yet.
    fn new(work: &WorkPackage, from: &AgentId) -> Self {
        Self {
            package: work.clone(),
            from: from.clone(),
            subtasks: BTreeMap::new(),
            tried: BTreeMap::new(),
            results: BTreeMap::new(),
            closed: false,
            loops: BTreeMap::new(),
            arbitrated: BTreeSet::new(),
            escalated: BTreeSet::new(),
            disputed: BTreeMap::new(),
        }
    }
}

impl MidAgent {
    /// A message from a worker this lead spawned: its result or failure, a reply, or something
    /// it says.
    async fn worker_message(
        &mut self,
        ctx: &mut AgentContext,
        child: &AgentId,
        message: &Message,
    ) -> Result<(), AgentError> {
        match message.kind {
            MessageKind::ProgressReport => {
                let Some(report) = ctx.read_payload::<ProgressReport>(message).await? else {
                    return Ok(());
                };
                if report.status != ProgressStatus::InProgress {
                    self.worker_returned(ctx, child, report).await?;
                }
            }
            MessageKind::ErrorReport => {
                let Some(report) = ctx.read_payload::<ErrorReport>(message).await? else {
                    return Ok(());
                };
                let result = SubtaskResult {
                    task_id: report.work.as_ref().map(|w| w.task_id.clone()).unwrap_or_default(),
                    step_id: child.to_string(),
                    agent: child.clone(),
                    success: false,
                    output: format!("failed: {}", report.error),
                    result: None,
                };
                if let Some(l) = self.loop_with_child(child) {
                    l.child_reported(child, result);
                }
            }
            MessageKind::PeerHelpResponse => {
                let response = ctx.read_payload(message).await?;
                let correlation = message.correlation_id;
                match (response, self.loop_with_child(child)) {
                    (Some(HelpResponse::Said { reply }), Some(l)) => {
                        l.replied(correlation, &reply);
                    }
                    // A failed worker refuses at once: the loop learns it now.
                    (Some(HelpResponse::Refused { reason }), Some(l)) => {
                        l.refused(correlation, &reason);
                    }
                    _ => {}
                }
            }
            MessageKind::PeerHelpRequest => self.spoken_to(ctx, message).await?,
            _ => {}
        }
        Ok(())
    }

    /// A worker's last progress report: its result for the loop that spawned it, or, stopped
    /// by a guard that stops the task, the task escalated with the worker's reason.
    async fn worker_returned(
        &mut self,
        ctx: &mut AgentContext,
        child: &AgentId,
        report: ProgressReport,
    ) -> Result<(), AgentError> {
        if let Some(failure) = report.failure.clone().filter(TaskFailure::is_stuck) {
            let Some(state) = self
                .work
                .values_mut()
                .find(|w| !w.closed && w.loops.values().any(|l| l.has_child(child)))
            else {
                return Ok(());
            };
            state.closed = true;
            let to = state.from.clone();
            ctx.append_own(&format!("- [{child}] stopped by a guard, escalated: {failure}"))
                .await?;
            let escalation = Escalation { task_id: report.task_id.clone(), failure };
            ctx.send(&to, MessageKind::IssueEscalation, &escalation).await?;
            return Ok(());
        }
        let result = report.results.into_iter().next().unwrap_or(SubtaskResult {
            task_id: report.task_id,
            step_id: child.to_string(),
            agent: child.clone(),
            success: report.status == ProgressStatus::Completed,
            output: report.description,
            result: None,
        });
        ctx.append_own(&format!(
            "- [{child}] returned: {}",
            if result.success { "success" } else { "failure" }
        ))
        .await?;
        if let Some(l) = self.loop_with_child(child) {
            l.child_reported(child, result);
        }
        Ok(())
    }

    /// Its supervisor or one of its workers speaks to it: it answers, and the words join its
    /// tool loops' history.
    async fn spoken_to(
        &mut self,
        ctx: &mut AgentContext,
        message: &Message,
    ) -> Result<(), AgentError> {
        let Some(agent_core::protocol::HelpRequest::Speak { message: said }) =
            ctx.read_payload(message).await?
        else {
            return Ok(());
        };
        let Some(from) = message.from.agent().cloned() else { return Ok(()) };
        let context = self.current_work().unwrap_or_default();
        let reply = crate::answer(ctx, &from, &said, &context).await;
        for w in self.work.values_mut().filter(|w| !w.closed) {
            for l in w.loops.values_mut() {
                l.heard(&from, &said);
            }
        }
        ctx.reply(
            message,
            MessageKind::PeerHelpResponse,
            &agent_core::protocol::HelpResponse::Said { reply },
        )
        .await?;
        Ok(())
    }

    /// A lead with its executors (id and tools), the top powers it takes work from, and its
    /// peer leads.
    pub fn new(
        spec: MidSpec,
        executors: Vec<(AgentId, Arc<[String]>)>,
        top: Vec<AgentId>,
        peers: Vec<AgentId>,
    ) -> Self {
        let executors: Vec<Executor> = executors
            .into_iter()
            .map(|(id, tools)| Executor { id, tools, failed: false, failures: 0, dismissed: false })
            .collect();
        let mut by_id = HashMap::with_capacity(executors.len());
        for (i, e) in executors.iter().enumerate() {
            // The first of an id listed twice, as a search of the list would find.
            by_id.entry(e.id.clone()).or_insert(i);
        }
        Self {
            spec,
            top,
            peers,
            executors,
            by_id,
            work: BTreeMap::new(),
            supervises: false,
            guards: GuardSettings::default(),
            arbitration: ArbitrationSettings::default(),
            desk: None,
        }
    }

    /// The same lead as a crew's lead: with no powers above it, it takes the team's tasks
    /// from `system` itself (a goal planned by its reasoner), places each wave of steps on its
    /// executors, judges the results and closes the task (see `desk.rs`). Nothing goes to a
    /// vote: a step every able executor failed fails the task, and a result it finds short of
    /// its step's acceptance check goes to another executor at once.
    #[must_use]
    pub fn leading(mut self) -> Self {
        self.desk = Some(Desk::default());
        self
    }

    /// The same lead settling with the top layer's vote what the settings say: a step no
    /// executor could finish (instead of failing the task at once), and a result that falls
    /// short of the step's acceptance check while its executor reports it done.
    #[must_use]
    pub fn with_arbitration(mut self, arbitration: ArbitrationSettings) -> Self {
        self.arbitration = arbitration;
        self
    }

    /// The same lead with the team's guards: its own tool loops (a supervising lead's) that
    /// repeat the same calls `repeat_limit` times in a row are stopped and escalated with
    /// [`TaskFailure::Loop`]; a worker's loop stopped that way stops the task too when the
    /// guards say [`OnStuck::Stop`](agent_state::OnStuck::Stop).
    #[must_use]
    pub fn with_guards(mut self, guards: GuardSettings) -> Self {
        self.guards = guards;
        self
    }

    /// A lead whose role may spawn: without executors of its own, it spawns its workers with
    /// `spawn_agent`, speaks to them, collects their results and reports each step.
    #[must_use]
    pub fn supervising(mut self) -> Self {
        self.supervises = true;
        self
    }

    fn spawns_workers(&self) -> bool {
        self.supervises && self.executors.is_empty()
    }

    fn loop_with_child(&mut self, child: &AgentId) -> Option<&mut WorkLoop> {
        self.work
            .values_mut()
            .filter(|w| !w.closed)
            .flat_map(|w| w.loops.values_mut())
            .find(|l| l.has_child(child))
    }

    /// Whether `agent` is a worker one of this lead's open tool loops spawned. A worker the
    /// loop does not list yet (the lead's state was saved before the spawn, and a crash made
    /// its turn run again: the worker's report can arrive before the loop calls `spawn_agent`
    /// again) is found by its spawn record and adopted by the loop that spawned it, so its
    /// report is not lost.
    fn worker_of_mine(&mut self, ctx: &AgentContext, agent: &AgentId) -> bool {
        if self.loop_with_child(agent).is_some() {
            return true;
        }
        let Some(record) = ctx.spawner().and_then(|s| s.record(agent)) else { return false };
        if &record.parent != ctx.id() {
            return false;
        }
        let spawned_by = |l: &WorkLoop| record.key.starts_with(&format!("{}#", l.key()));
        let Some(l) = self
            .work
            .values_mut()
            .filter(|w| !w.closed)
            .flat_map(|w| w.loops.values_mut())
            .find(|l| spawned_by(l))
        else {
            return false;
        };
        l.adopt(agent.clone(), record.role);
        true
    }

    /// Takes a work package as a supervising lead: one tool loop per step.
    async fn take_work_supervising(
        &mut self,
        ctx: &mut AgentContext,
        from: AgentId,
        work: WorkPackage,
    ) -> Result<(), AgentError> {
        let mut plan = format!("## Task Allocation Plan ({})\n\n", work.task_id);
        let mut state = WorkState::new(&work, &from);
        for step in &work.steps {
            let subtask = Subtask {
                task_id: work.task_id.clone(),
                step: step.clone(),
                assignee: ctx.id().clone(),
                attempt: 1,
            };
            plan.push_str(&format!(
                "- [{} and the agents it spawns] {}\n",
                ctx.id(),
                step.description
            ));
            state.loops.insert(step.id.clone(), WorkLoop::new(subtask.clone(), ctx.now()));
            state.subtasks.insert(step.id.clone(), subtask);
        }
        ctx.write_board(plan).await?;
        let taken = format!("{} step(s) taken; spawning workers", state.subtasks.len());
        self.started(ctx, &from, work.key(), state, taken).await
    }

    /// Tells the top power the package is under way and keeps it.
    async fn started(
        &mut self,
        ctx: &mut AgentContext,
        from: &AgentId,
        key: String,
        state: WorkState,
        description: String,
    ) -> Result<(), AgentError> {
        if let Some(report) = started_report(ctx, from, &state, description) {
            ctx.send(from, MessageKind::ProgressReport, &report).await?;
        }
        self.work.insert(key, state);
        Ok(())
    }

    /// Runs every open tool loop until it ends or waits; reports finished steps.
    async fn advance(&mut self, ctx: &mut AgentContext) -> Result<(), AgentError> {
        let keys: Vec<String> = self
            .work
            .iter()
            .filter(|(_, w)| !w.closed && !w.loops.is_empty())
            .map(|(k, _)| k.clone())
            .collect();
        for key in keys {
            let steps: Vec<String> =
                self.work.get(&key).map(|w| w.loops.keys().cloned().collect()).unwrap_or_default();
            for step in steps {
                let Some(mut work) = self.work.get_mut(&key).and_then(|w| w.loops.remove(&step))
                else {
                    continue;
                };
                let means =
                    Means { tools: &[], supervises: true, returns: false, guards: self.guards };
                let progress = match work.run(ctx, &means).await {
                    Ok(p) => p,
                    Err(e) => {
                        if let Some(w) = self.work.get_mut(&key) {
                            w.loops.insert(step, work);
                        }
                        return Err(e);
                    }
                };
                let Some(state) = self.work.get_mut(&key) else { continue };
                match progress {
                    Progress::Suspended => {
                        state.loops.insert(step, work);
                    }
                    Progress::Done(outcome) => {
                        let Outcome { success, summary, result, error, stuck, .. } = *outcome;
                        if !success && result.is_none() {
                            state.closed = true;
                            let to = state.from.clone();
                            let failure = stuck.unwrap_or_else(|| TaskFailure::StepFailed {
                                step: step.clone(),
                                attempts: 1,
                                error: error.map(|e| e.to_string()).unwrap_or(summary),
                            });
                            let escalation =
                                Escalation { task_id: state.package.task_id.clone(), failure };
                            ctx.send(&to, MessageKind::IssueEscalation, &escalation).await?;
                            break;
                        }
                        let result = SubtaskResult {
                            task_id: state.package.task_id.clone(),
                            step_id: step.clone(),
                            agent: ctx.id().clone(),
                            success,
                            output: summary,
                            result,
                        };
                        state.results.insert(step.clone(), result);
                        ctx.append_own(&format!("- {step} done by {} and its workers", ctx.id()))
                            .await?;
                        self.report_if_done(ctx, &key).await?;
                    }
                }
            }
        }
        Ok(())
    }

    /// The lead's settings.
    pub fn spec(&self) -> &MidSpec {
        &self.spec
    }

    fn candidates(&self) -> Vec<Candidate> {
        self.executors
            .iter()
            .map(|e| Candidate {
                id: e.id.clone(),
                tools: e.tools.clone(),
                load: self
                    .work
                    .values()
                    .filter(|w| !w.closed)
                    .flat_map(|w| w.subtasks.values())
                    .filter(|s| s.assignee == e.id)
                    .count(),
                available: !e.dismissed,
                failed: e.failed,
            })
            .collect()
    }

    async fn take_work(
        &mut self,
        ctx: &mut AgentContext,
        from: AgentId,
        work: WorkPackage,
    ) -> Result<(), AgentError> {
        if self.work.contains_key(&work.key()) {
            return Ok(()); // redelivered
        }
        // Decomposing a task into steps for others is planning.
        ctx.require(Action::Plan, &format!("(decompose task {})", work.task_id)).await?;
        if self.spawns_workers() {
            return self.take_work_supervising(ctx, from, work).await;
        }
        let placements =
            match ctx.reasoner().decompose(ctx.persona(), &work, &self.candidates()).await {
                Ok(p) => p,
                Err(ReasonError::Unplaceable { step, reason }) => {
                    let failure = TaskFailure::Unplaceable { step, reason };
                    let escalation = Escalation { task_id: work.task_id.clone(), failure };
                    ctx.send(&from, MessageKind::IssueEscalation, &escalation).await?;
                    return Ok(());
                }
                Err(e) => return Err(e.into()),
            };
        let mut plan = format!("## Task Allocation Plan ({})\n\n", work.task_id);
        let mut state = WorkState::new(&work, &from);
        for placement in placements {
            let subtask = Subtask {
                task_id: work.task_id.clone(),
                step: placement.step,
                assignee: placement.assignee,
                attempt: 1,
            };
            plan.push_str(&format!("- [{}] {}\n", subtask.assignee, subtask.step.description));
            state.tried.insert(subtask.step.id.clone(), vec![subtask.assignee.clone()]);
            state.subtasks.insert(subtask.step.id.clone(), subtask);
        }
        ctx.write_board(plan).await?;
        // The subtasks, then the note to the peers, in one batch.
        #[derive(Serialize)]
        #[serde(untagged)]
        enum Outgoing {
            Subtask(Box<Assignment>),
            Note(PeerCoordination),
            Report(ProgressReport),
        }
        let mut batch: Vec<(AgentId, MessageKind, Outgoing)> = state
            .subtasks
            .values()
            .map(|subtask| {
                let assignment = Assignment::Subtask { subtask: subtask.clone() };
                (
                    subtask.assignee.clone(),
                    MessageKind::TaskAssign,
                    Outgoing::Subtask(Box::new(assignment)),
                )
            })
            .collect();
        let note =
            format!("{} takes {} step(s) of {}", ctx.id(), state.subtasks.len(), work.task_id);
        for peer in &self.peers {
            let coordination =
                PeerCoordination { task_id: work.task_id.clone(), note: note.clone() };
            batch.push((peer.clone(), MessageKind::PeerCoordination, Outgoing::Note(coordination)));
        }
        // And the progress report that tells the top power the package is under way: the
        // turn's messages are one batch, so a durable bus stores them with one commit.
        let assigned = format!("{} step(s) assigned", state.subtasks.len());
        if let Some(report) = started_report(ctx, &from, &state, assigned) {
            batch.push((from.clone(), MessageKind::ProgressReport, Outgoing::Report(report)));
        }
        ctx.send_all(batch).await?;
        self.work.insert(work.key(), state);
        Ok(())
    }

    async fn executor_report(
        &mut self,
        ctx: &mut AgentContext,
        message: &Message,
    ) -> Result<(), AgentError> {
        let Some(report) = ctx.read_payload::<ProgressReport>(message).await? else {
            return Ok(());
        };
        let Some(executor) = message.from.agent().cloned() else { return Ok(()) };
        let Some(result) = report.results.first().cloned() else { return Ok(()) };
        ctx.append_own(&format!(
            "- [{executor}] {:?}: {} ({}%)",
            report.status, report.description, report.percentage
        ))
        .await?;
        let Some(key) = self.package_of(&report.task_id, &result.step_id) else { return Ok(()) };
        let Some(state) = self.work.get_mut(&key) else { return Ok(()) };
        if state.closed || state.disputed.contains_key(&result.step_id) {
            return Ok(());
        }
        if let Some(failure) = report.failure.filter(|f| {
            matches!(
                f,
                TaskFailure::Interrupted { .. }
                    | TaskFailure::Blocked { .. }
                    | TaskFailure::TimedOut { .. }
            ) || f.is_stuck()
        }) {
            // Not reassigned: running an interrupted step again could repeat its effect, and a
            // blocked one would miss the same input on any executor.
            state.closed = true;
            let to = state.from.clone();
            let what = match failure {
                TaskFailure::Blocked { .. } => "blocked on a missing input",
                TaskFailure::TimedOut { .. } => "out of time",
                ref f if f.is_stuck() => "stopped by a guard",
                _ => "interrupted",
            };
            ctx.append_own(&format!("- {} {what}, escalated: needs a decision", result.step_id))
                .await?;
            let escalation = Escalation { task_id: report.task_id.clone(), failure };
            ctx.send(&to, MessageKind::IssueEscalation, &escalation).await?;
            return Ok(());
        }
        if report.status != ProgressStatus::Completed || !result.success {
            let Some(subtask) = state.subtasks.get(&result.step_id).cloned() else { return Ok(()) };
            return self.reassign(ctx, subtask, result.output).await;
        }
        if self.arbitration.acceptance
            && let Some(subtask) = state.subtasks.get(&result.step_id).cloned()
            && !subtask.step.acceptance.trim().is_empty()
        {
            let task = agent_state::Task {
                id: subtask.task_id.clone(),
                goal: state.package.goal.clone(),
                steps: vec![subtask.step.clone()],
            };
            let judgement = ctx
                .reasoner()
                .judge_progress(ctx.persona(), &task, std::slice::from_ref(&result), "")
                .await?;
            if !judgement.complete {
                return self.dispute(ctx, &key, subtask, executor, result, judgement.summary).await;
            }
        }
        let Some(state) = self.work.get_mut(&key) else { return Ok(()) };
        state.results.insert(result.step_id.clone(), result);
        if let Some(e) = executor_mut(&mut self.executors, &self.by_id, &executor) {
            e.failed = false;
        }
        self.report_if_done(ctx, &key).await
    }

    /// The executor reports `subtask` done, but this lead finds `result` falls short of the
    /// step's acceptance check (`objection`): the first time, lead and executor disagree and
    /// the top layer votes (`redo` or `accept`) while the result waits; after a ruling, the
    /// step counts as failed and moves to another executor.
    async fn dispute(
        &mut self,
        ctx: &mut AgentContext,
        key: &str,
        subtask: Subtask,
        executor: AgentId,
        result: SubtaskResult,
        objection: String,
    ) -> Result<(), AgentError> {
        let Some(state) = self.work.get_mut(key) else { return Ok(()) };
        let step = subtask.step.id.clone();
        // A crew's lead has no powers to ask: its own judgement stands.
        if self.desk.is_some() || !state.arbitrated.insert(step.clone()) {
            let error =
                format!("falls short of its acceptance check: {}", quote(&objection, QUOTE_CHARS));
            return self.reassign(ctx, subtask, error).await;
        }
        let me = ctx.id().clone();
        let to = state.from.clone();
        let conflict = agent_core::Conflict {
            id: format!("{}/acceptance", subtask.key()),
            issue: format!(
                "executor {executor} reports step {step} of task {} done; lead {me} finds it falls short of its acceptance check ({}): {}. Redo it on another executor, or accept it?",
                subtask.task_id,
                subtask.step.acceptance,
                quote(&objection, QUOTE_CHARS)
            ),
            parties: vec![me.clone(), executor.clone()],
            options: vec![BallotChoice::Redo, BallotChoice::Accept],
        };
        let subject = ConflictSubject::Acceptance {
            task_id: subtask.task_id.clone(),
            step: step.clone(),
            lead: me,
            executor: executor.clone(),
            objection,
        };
        state.disputed.insert(step, result);
        ctx.append_own(&format!(
            "- {} by [{executor}] disputed: put to the top layer's vote",
            subtask.key()
        ))
        .await?;
        let report = ConflictReport { conflict, subject: Some(subject) };
        ctx.send(&to, MessageKind::ConflictReport, &report).await?;
        Ok(())
    }

    /// A top power's ruling on a conflict this lead is a party to: an escalated step voted
    /// `retry` is placed again (on any able executor, once), `abandon` closes its package (the
    /// power fails the task); a disputed result voted `accept` stands, `redo` moves the step to
    /// another executor.
    async fn ruling(
        &mut self,
        ctx: &mut AgentContext,
        message: &Message,
    ) -> Result<(), AgentError> {
        let Some(ruling) = ctx.read_payload::<ArbitrationResult>(message).await? else {
            return Ok(());
        };
        crate::note_ruling(ctx, &ruling).await?;
        let Some(subject) = ruling.subject else { return Ok(()) };
        let (task_id, step) = match &subject {
            ConflictSubject::Escalation { task_id, step, .. }
            | ConflictSubject::Acceptance { task_id, step, .. } => (task_id.clone(), step.clone()),
            ConflictSubject::VetoedPlan { .. } => return Ok(()),
        };
        let Some(key) = self.package_of(&task_id, &step) else { return Ok(()) };
        let Some(state) = self.work.get_mut(&key) else { return Ok(()) };
        let Some(subtask) = state.subtasks.get(&step).cloned() else { return Ok(()) };
        if state.closed {
            return Ok(());
        }
        match subject {
            ConflictSubject::Escalation { failure, .. } => {
                if !state.escalated.remove(&step) {
                    return Ok(()); // ruled on already
                }
                if ruling.resolution == BallotChoice::Retry {
                    // Every executor may take it again.
                    state.tried.remove(&step);
                    return self.reassign(ctx, subtask, failure.to_string()).await;
                }
                state.closed = true;
                Ok(())
            }
            ConflictSubject::Acceptance { executor, objection, .. } => {
                let Some(result) = state.disputed.remove(&step) else { return Ok(()) };
                if ruling.resolution == BallotChoice::Accept {
                    state.results.insert(step, result);
                    if let Some(e) = executor_mut(&mut self.executors, &self.by_id, &executor) {
                        e.failed = false;
                    }
                    return self.report_if_done(ctx, &key).await;
                }
                let error = format!(
                    "falls short of its acceptance check: {}",
                    quote(&objection, QUOTE_CHARS)
                );
                self.reassign(ctx, subtask, error).await
            }
            ConflictSubject::VetoedPlan { .. } => Ok(()),
        }
    }

    /// The key of the open package holding step `step_id` of task `task_id`.
    fn package_of(&self, task_id: &str, step_id: &str) -> Option<String> {
        let holds =
            |w: &WorkState| w.package.task_id == task_id && w.subtasks.contains_key(step_id);
        // A step placed again in a later wave (after an arbitration) is in an open package;
        // the package it was first in may be closed.
        self.work
            .iter()
            .find(|(_, w)| !w.closed && holds(w))
            .or_else(|| self.work.iter().find(|(_, w)| holds(w)))
            .map(|(k, _)| k.clone())
    }

    async fn report_if_done(
        &mut self,
        ctx: &mut AgentContext,
        key: &str,
    ) -> Result<(), AgentError> {
        let Some(state) = self.work.get_mut(key) else { return Ok(()) };
        let task_id = state.package.task_id.clone();
        let total = state.subtasks.len().max(1);
        let done = state.results.len();
        let percentage = u8::try_from(done * 100 / total).unwrap_or(100);
        let complete = done == state.subtasks.len();
        let report = ProgressReport {
            task_id,
            status: if complete { ProgressStatus::Completed } else { ProgressStatus::InProgress },
            percentage,
            description: format!("{done} of {} step(s) done", state.subtasks.len()),
            results: if complete {
                state
                    .package
                    .steps
                    .iter()
                    .filter_map(|s| state.results.get(&s.id).cloned())
                    .collect()
            } else {
                Vec::new()
            },
            failure: None,
        };
        if complete {
            state.closed = true;
        }
        let to = state.from.clone();
        if complete || to != *ctx.id() {
            ctx.send(&to, MessageKind::ProgressReport, &report).await?;
        }
        Ok(())
    }

    /// Moves a failed subtask to another executor with the tool, or escalates when none is left.
    async fn reassign(
        &mut self,
        ctx: &mut AgentContext,
        failed: Subtask,
        error: String,
    ) -> Result<(), AgentError> {
        let candidates = self.candidates();
        let Some(key) = self.package_of(&failed.task_id, &failed.step.id) else { return Ok(()) };
        let Some(state) = self.work.get_mut(&key) else { return Ok(()) };
        if state.closed || state.results.contains_key(&failed.step.id) {
            return Ok(()); // escalated or finished already: nothing to move
        }
        let tried = state.tried.entry(failed.step.id.clone()).or_default();
        let next = candidates
            .iter()
            .filter(|c| {
                c.available
                    && !tried.contains(&c.id)
                    && (!failed.step.is_scripted() || c.tools.contains(&failed.step.tool))
            })
            .min_by(|a, b| (a.failed, a.load, &a.id).cmp(&(b.failed, b.load, &b.id)));
        let Some(next) = next else {
            let failure = TaskFailure::StepFailed {
                step: failed.step.id.clone(),
                attempts: failed.attempt,
                error,
            };
            let to = state.from.clone();
            let vote = self.arbitration.escalations && self.desk.is_none();
            if vote && state.arbitrated.insert(failed.step.id.clone()) {
                // Every able executor failed it: the top layer votes on retrying it or
                // abandoning the task; the package stays open for the ruling.
                state.escalated.insert(failed.step.id.clone());
                ctx.append_own(&format!(
                    "- {} failed on every able executor: put to the top layer's vote",
                    failed.key()
                ))
                .await?;
                let report = escalation_vote(ctx.id().clone(), &to, &failed, failure);
                ctx.send(&to, MessageKind::ConflictReport, &report).await?;
                return Ok(());
            }
            state.closed = true;
            let escalation = Escalation { task_id: failed.task_id.clone(), failure };
            ctx.send(&to, MessageKind::IssueEscalation, &escalation).await?;
            return Ok(());
        };
        tried.push(next.id.clone());
        let subtask = Subtask { assignee: next.id.clone(), attempt: failed.attempt + 1, ..failed };
        state.subtasks.insert(subtask.step.id.clone(), subtask.clone());
        ctx.append_own(&format!(
            "- reassigned {} to [{}] (attempt {})",
            subtask.step.id, subtask.assignee, subtask.attempt
        ))
        .await?;
        ctx.send(
            &subtask.assignee,
            MessageKind::TaskAssign,
            &Assignment::Subtask { subtask: subtask.clone() },
        )
        .await?;
        Ok(())
    }

    async fn executor_failed(
        &mut self,
        ctx: &mut AgentContext,
        message: &Message,
    ) -> Result<(), AgentError> {
        let Some(report) = ctx.read_payload::<ErrorReport>(message).await? else { return Ok(()) };
        let Some(executor) = message.from.agent().cloned() else { return Ok(()) };
        // A failed executor stays a candidate for new work (which brings it back to working),
        // behind healthy ones; after repeated failures it is dismissed (failed → terminated).
        let mut dismissed = false;
        if let Some(e) = executor_mut(&mut self.executors, &self.by_id, &executor) {
            e.failed = true;
            e.failures += 1;
            if e.failures >= MAX_FAILURES_BEFORE_DISMISSAL && !e.dismissed {
                e.dismissed = true;
                dismissed = true;
                let reason = format!("failed {} times; last error: {}", e.failures, report.error);
                ctx.send(&executor, MessageKind::TaskAssign, &Assignment::Dismiss { reason })
                    .await?;
            }
        }
        // The failed work moves on; a dismissed executor gives up everything it still holds.
        let mut moving: Vec<Subtask> = report.work.into_iter().collect();
        if dismissed || moving.is_empty() {
            for subtask in self
                .work
                .values()
                .filter(|w| !w.closed)
                .flat_map(|w| w.subtasks.values().filter(|s| !w.results.contains_key(&s.step.id)))
                .filter(|s| s.assignee == executor)
            {
                if !moving.iter().any(|m| m.key() == subtask.key()) {
                    moving.push(subtask.clone());
                }
                if !dismissed {
                    break;
                }
            }
        }
        for subtask in moving {
            self.reassign(ctx, subtask, report.error.clone()).await?;
        }
        Ok(())
    }
}

/// Who sent a message, as a lead sees it.
struct Sender {
    /// The top power it came from, if it came from one.
    top: Option<AgentId>,
    /// It came from one of the lead's executors.
    executor: bool,
    /// It came from the lead's own supervisor.
    supervisor: bool,
}

impl MidAgent {
    /// Handles one message of a turn.
    async fn on_message(
        &mut self,
        ctx: &mut AgentContext,
        message: &Message,
    ) -> Result<(), AgentError> {
        let from = message.from.agent();
        let sender = Sender {
            top: from.filter(|a| self.top.contains(a)).cloned(),
            executor: from.is_some_and(|a| self.by_id.contains_key(a)),
            supervisor: from.is_some_and(|a| ctx.config().supervisor.as_ref() == Some(a)),
        };
        if let Some(child) = from.filter(|a| self.worker_of_mine(ctx, a)).cloned() {
            return self.worker_message(ctx, &child, message).await;
        }
        if self.at_desk(ctx, message).await? {
            return Ok(());
        }
        if message.kind == MessageKind::PeerHelpResponse {
            return self.help_response(ctx, message).await;
        }
        // Its power, its own supervisor and its executors (an OODA executor asks its lead)
        // may speak to it.
        if message.kind == MessageKind::PeerHelpRequest
            && (sender.top.is_some() || sender.supervisor || sender.executor)
        {
            return self.spoken_to(ctx, message).await;
        }
        match message.kind {
            MessageKind::TaskAssign => self.task_assigned(ctx, message, sender).await?,
            MessageKind::ProgressReport if sender.executor => {
                self.executor_report(ctx, message).await?
            }
            MessageKind::ArbitrationResult if sender.top.is_some() => {
                self.ruling(ctx, message).await?
            }
            MessageKind::ArbitrationResult => {
                ctx.audit(AuditEvent::Denied {
                    action: format!("arbitration_result from {}", message.from),
                    error: "only a top power announces the result of an arbitration".into(),
                })
                .await?;
            }
            MessageKind::ErrorReport if sender.executor => {
                self.executor_failed(ctx, message).await?
            }
            MessageKind::PeerCoordination => {
                let Some(note) = ctx.read_payload::<PeerCoordination>(message).await? else {
                    return Ok(());
                };
                let answer = PeerCoordination {
                    task_id: note.task_id,
                    note: format!("{} acknowledges", ctx.id()),
                };
                ctx.reply(message, MessageKind::PeerCoordinationResponse, &answer).await?;
            }
            MessageKind::StatusReport if sender.executor => {
                self.executor_status(ctx, message).await?
            }
            MessageKind::Warning => self.warned(ctx, message).await?,
            MessageKind::StatusQuery => {
                let status =
                    StatusReport::Agent { status: ctx.status(), current: self.current_work() };
                ctx.reply(message, MessageKind::StatusReport, &status).await?;
            }
            _ => {}
        }
        Ok(())
    }

    /// A crew lead's desk: a task from `system`, the team's escalation of one (its time limit,
    /// its guards), and what this lead tells itself of its work (a package done, a step it
    /// cannot finish); `false` for anything else, or a lead that is not a crew's.
    async fn at_desk(
        &mut self,
        ctx: &mut AgentContext,
        message: &Message,
    ) -> Result<bool, AgentError> {
        let Some(desk) = self.desk.as_mut() else { return Ok(false) };
        match desk.read_mail(ctx, message, "a crew's lead").await? {
            DeskMail::NotMine => return Ok(false),
            DeskMail::Handled => {}
            DeskMail::Work(work) => {
                let me = ctx.id().clone();
                self.take_work(ctx, me, work).await?;
            }
            DeskMail::Escalated { task_id, failure } => desk.fail(ctx, &task_id, failure).await?,
            DeskMail::Failed(report) => {
                let task_id = report.task_id.clone();
                let failure = crate::top::reported_failure(ctx.id().clone(), report);
                desk.fail(ctx, &task_id, failure).await?;
            }
        }
        Ok(true)
    }

    /// The answer of an agent this lead spoke to, handed to the tool loop waiting for it.
    async fn help_response(
        &mut self,
        ctx: &mut AgentContext,
        message: &Message,
    ) -> Result<(), AgentError> {
        let correlation = message.correlation_id;
        match ctx.read_payload(message).await? {
            Some(HelpResponse::Said { reply }) => {
                for w in self.work.values_mut().filter(|w| !w.closed) {
                    if w.loops.values_mut().any(|l| l.replied(correlation, &reply)) {
                        break;
                    }
                }
            }
            // The agent spoken to has failed (its supervisor, or a worker of another loop):
            // the call fails at once instead of waiting for its limit.
            Some(HelpResponse::Refused { reason }) => {
                for w in self.work.values_mut().filter(|w| !w.closed) {
                    if w.loops.values_mut().any(|l| l.refused(correlation, &reason)) {
                        break;
                    }
                }
            }
            _ => {}
        }
        Ok(())
    }

    /// Work handed to this lead: a work package from the top layer, or (for a lead spawned by
    /// a lead) one subtask from its supervisor; from anyone else, refused.
    async fn task_assigned(
        &mut self,
        ctx: &mut AgentContext,
        message: &Message,
        sender: Sender,
    ) -> Result<(), AgentError> {
        let assignment = match &sender.top {
            Some(_) => ctx.read_payload::<Assignment>(message).await?,
            None => None,
        };
        let supervisor = message.from.agent().filter(|_| sender.supervisor).cloned();
        if let (true, None, Some(supervisor)) = (self.spawns_workers(), &sender.top, supervisor) {
            // A lead spawned by a lead gets its work as one subtask.
            if let Some(Assignment::Subtask { subtask }) =
                ctx.read_payload::<Assignment>(message).await?
            {
                let work = WorkPackage {
                    task_id: subtask.task_id.clone(),
                    goal: subtask.step.description.clone(),
                    decision: agent_state::DecisionId::from_u128(0),
                    wave: 0,
                    steps: vec![subtask.step],
                };
                self.take_work(ctx, supervisor, work).await?;
            }
            return Ok(());
        }
        match (sender.top, assignment) {
            (Some(top), Some(Assignment::Work { work })) => self.take_work(ctx, top, work).await,
            (Some(_), None) => Ok(()), // unreadable: refused and audited by read_payload
            _ => {
                ctx.audit(AuditEvent::Denied {
                    action: format!("task_assign from {}", message.from),
                    error: "a lead takes work packages only from the top layer".into(),
                })
                .await
            }
        }
    }

    /// An executor's status: noted on the lead's board, or a step it handed over.
    async fn executor_status(
        &mut self,
        ctx: &mut AgentContext,
        message: &Message,
    ) -> Result<(), AgentError> {
        match ctx.read_payload(message).await? {
            Some(StatusReport::Agent { status, current }) => {
                ctx.append_own(&format!(
                    "- [{}] status {status}: {}",
                    message.from,
                    current.unwrap_or_default()
                ))
                .await?;
            }
            Some(StatusReport::HandedOver { task_id, step_id, from, to }) => {
                let step = (task_id.as_str(), step_id.as_str());
                self.handed_over(ctx, message, step, &from, &to).await?;
            }
            _ => {}
        }
        Ok(())
    }

    /// A warning about one of the lead's agents: counted and noted on its board.
    async fn warned(
        &mut self,
        ctx: &mut AgentContext,
        message: &Message,
    ) -> Result<(), AgentError> {
        let Some(warning) = ctx.read_payload::<Warning>(message).await? else {
            return Ok(());
        };
        ctx.metrics_mut().warnings_received += 1;
        ctx.append_own(&format!("- warning about [{}]: {}", warning.about, warning.reason)).await?;
        Ok(())
    }
}

#[async_trait]
impl AgentBehavior for MidAgent {
    fn responsibilities(&self) -> &'static str {
        "- Receive tasks from top layer and decompose into subtasks\n\
         - Assign subtasks to bottom-layer agents\n\
         - Monitor subordinate progress and quality\n\
         - Coordinate with peer mid-layer agents\n\
         - Detect issues and escalate to top layer\n\
         - Report overall progress periodically"
    }

    async fn on_process(
        &mut self,
        ctx: &mut AgentContext,
        messages: &[Message],
        _board: &BoardSnapshot,
    ) -> Result<(), AgentError> {
        for message in messages {
            self.on_message(ctx, message).await?;
        }
        if self.supervises {
            self.advance(ctx).await?;
        }
        Ok(())
    }

    fn wants_tick(&self) -> bool {
        self.work
            .values()
            .filter(|w| !w.closed)
            .flat_map(|w| w.loops.values())
            .any(|l| l.wants_tick() || l.waiting.is_none())
    }

    fn snapshot(&self) -> serde_json::Value {
        let desk = self.desk.as_ref().filter(|d| !d.is_empty());
        if self.work.is_empty()
            && self.executors.iter().all(|e| e.failures == 0 && !e.failed)
            && desk.is_none()
        {
            return serde_json::Value::Null;
        }
        // Only the executors whose state is not the one the team file gives them, by id: the
        // saved record does not list every subordinate.
        let executors: BTreeMap<&str, ExecutorState> = self
            .executors
            .iter()
            .filter(|e| e.failed || e.failures > 0 || e.dismissed)
            .map(|e| {
                let state = ExecutorState {
                    failed: e.failed,
                    failures: e.failures,
                    dismissed: e.dismissed,
                };
                (e.id.as_str(), state)
            })
            .collect();
        let mut saved = serde_json::json!({ "work": self.work, "executors": executors });
        if let Some(desk) = desk {
            // A top power's shape: `task_progress` reads it.
            saved["tasks"] = serde_json::json!(desk);
        }
        saved
    }

    fn restore(&mut self, state: serde_json::Value) -> Result<(), AgentError> {
        #[derive(Deserialize)]
        struct Saved {
            work: BTreeMap<String, WorkState>,
            #[serde(default)]
            executors: SavedExecutors,
            #[serde(default)]
            tasks: Option<Desk>,
        }
        if state.is_null() {
            return Ok(());
        }
        let saved: Saved = serde_json::from_value(state).map_err(|e| {
            AgentError::NotAllowed(format!("saved state of a lead cannot be read: {e}"))
        })?;
        self.work = saved.work;
        if let (Some(desk), Some(tasks)) = (self.desk.as_mut(), saved.tasks) {
            *desk = tasks;
        }
        let saved: BTreeMap<String, ExecutorState> = match saved.executors {
            SavedExecutors::ById(by_id) => by_id,
            SavedExecutors::Listed(listed) => {
                listed.into_iter().map(|e| (e.id.as_str().to_owned(), e.state)).collect()
            }
        };
        for e in &mut self.executors {
            let state = saved.get(e.id.as_str()).copied().unwrap_or_default();
            e.failed = state.failed;
            e.failures = state.failures;
            e.dismissed = state.dismissed;
        }
        Ok(())
    }

    async fn on_shutdown(&mut self, ctx: &mut AgentContext) -> Result<(), AgentError> {
        let open = self.work.values().filter(|w| !w.closed).count();
        if open > 0 {
            tracing::warn!(agent = %ctx.id(), open, "lead shutting down with unfinished work");
        }
        Ok(())
    }

    fn waiting_on(&self, me: &AgentId) -> Vec<agent_state::WaitEdge> {
        let mut waits = Vec::new();
        for w in self.work.values().filter(|w| !w.closed) {
            waits.extend(w.loops.values().flat_map(|l| l.waits(me)));
            // A lead with executors waits for each step it placed and has no result for.
            // A step put to the vote waits on the top power for the ruling.
            if w.loops.is_empty() {
                waits.extend(
                    w.subtasks.values().filter(|s| !w.results.contains_key(&s.step.id)).map(|s| {
                        let ruling =
                            w.escalated.contains(&s.step.id) || w.disputed.contains_key(&s.step.id);
                        agent_state::WaitEdge {
                            waiter: me.clone(),
                            on: if ruling { w.from.clone() } else { s.assignee.clone() },
                            what: if ruling {
                                format!("the ruling on step {}", s.key())
                            } else {
                                format!("the result of step {}", s.key())
                            },
                            task: Some(s.task_id.clone()),
                        }
                    }),
                );
            }
        }
        waits
    }

    fn open_tasks(&self) -> Vec<String> {
        let mut tasks: Vec<String> =
            self.work.values().filter(|w| !w.closed).map(|w| w.package.task_id.clone()).collect();
        tasks.extend(self.desk.iter().flat_map(Desk::open_tasks).cloned());
        tasks.sort();
        tasks.dedup();
        tasks
    }

    fn current_work(&self) -> Option<String> {
        self.work
            .iter()
            .find(|(_, w)| !w.closed)
            .map(|(id, w)| {
                format!("{id}: {} of {} step(s) done", w.results.len(), w.subtasks.len())
            })
            .or_else(|| self.desk.as_ref().and_then(Desk::current_work))
    }
}

/// The vote a lead asks of the top layer (`to`) on step `failed`, which every able executor
/// failed with `failure`: retry it once more, or abandon the task.
fn escalation_vote(
    me: AgentId,
    to: &AgentId,
    failed: &Subtask,
    failure: TaskFailure,
) -> ConflictReport {
    let conflict = agent_core::Conflict {
        id: format!("{}/escalation", failed.key()),
        issue: format!(
            "lead {me} cannot finish step {} of task {}: {failure}. Retry the step once more, or abandon the task?",
            failed.step.id, failed.task_id
        ),
        parties: vec![me.clone(), to.clone()],
        options: vec![BallotChoice::Abandon, BallotChoice::Retry],
    };
    let subject = ConflictSubject::Escalation {
        task_id: failed.task_id.clone(),
        step: failed.step.id.clone(),
        lead: me,
        failure,
    };
    ConflictReport { conflict, subject: Some(subject) }
}

/// The report that tells `from` (the top power that sent the package) that the package
/// `state` is under way, described by `description`; none for a crew's lead, whose package is
/// its own (it tells itself only when the package is done).
fn started_report(
    ctx: &AgentContext,
    from: &AgentId,
    state: &WorkState,
    description: String,
) -> Option<ProgressReport> {
    (from != ctx.id()).then(|| ProgressReport {
        task_id: state.package.task_id.clone(),
        status: ProgressStatus::InProgress,
        percentage: 0,
        description,
        results: Vec::new(),
        failure: None,
    })
}
