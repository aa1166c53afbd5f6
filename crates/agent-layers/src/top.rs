//! The top layer: three powers that propose, sign, veto, arbitrate and close tasks
//! (docs/concepts.md#layers).
//!
//! Arbitration: a `conflict_report` from one of the conflict's parties is put to a weighted
//! vote (the power's own vote first, then one from each other power holding `arbitrate`);
//! [`tally`] decides, the result goes on the global board and to every party as an
//! `arbitration_result` with the conflict's [`ConflictSubject`], and a power that is a party
//! acts on it at once (an escalation voted `abandon` fails the task; a vetoed plan voted
//! `proceed` runs).

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use agent_core::protocol::{
    ArbitrationResult, ConflictReport, ConflictSubject, ErrorReport, Escalation, StatusReport,
    VoteRequest, VoteResponse,
};
use agent_core::{AgentBehavior, AgentContext, AgentError, Conflict, Verdict};
use agent_state::{
    Action, Address, AgentId, AgentStatus, ArbitrationSettings, Assignment, BallotChoice, BoardId,
    BoardSnapshot, Capability, DecisionId, DecisionStatus, LeadRequest, Message, MessageKind,
    PlanStep, ProgressReport, ProgressStatus, RoleBook, SignOutcome, StepTarget, SubtaskResult,
    Task, TaskFailure, TaskOutcome, Vote, WorkPackage, tally,
};
use async_trait::async_trait;
use serde::{Deserialize, Serialize};

use crate::LeadInfo;

/// A top power's settings.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct TopSpec {
    /// Which power, such as `power_a`.
    pub power_type: String,
    /// Weight of this power's vote in arbitration.
    pub vote_weight: f64,
    /// What this power signs, such as `plan`; a power without `plan` is not asked to sign plans.
    pub signature_authority: Vec<String>,
}

/// The signature authority that covers task plans.
pub const PLAN_AUTHORITY: &str = "plan";

/// A top-layer agent.
pub struct TopAgent {
    spec: TopSpec,
    /// The other powers and their signature authority.
    peers: Vec<(AgentId, Vec<String>)>,
    leads: Vec<LeadInfo>,
    tasks: BTreeMap<String, TaskState>,
    arbitrations: BTreeMap<String, Arbitration>,
    /// The roles the team may create; a goal's plan names the mid roles to create from them.
    roles: Arc<RoleBook>,
    /// Which situations the team settles by a vote.
    arbitration: ArbitrationSettings,
    /// The other powers that vote in arbitrations (those holding `arbitrate`); `None`: all.
    voters: Option<Vec<AgentId>>,
    /// The humans one of whom must also sign each plan this power proposes (`None`: no human).
    humans: Option<Vec<String>>,
}

#[derive(Serialize, Deserialize)]
struct TaskState {
    task: Task,
    decision: DecisionId,
    phase: Phase,
    results: Vec<SubtaskResult>,
    dispatched: BTreeSet<String>,
    wave: u32,
    /// The leads the signed plan asks to create (dynamic team formation).
    #[serde(default)]
    leads: Vec<LeadRequest>,
    /// The leads created for it.
    #[serde(default)]
    formed: Vec<LeadInfo>,
}

#[derive(Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
enum Phase {
    AwaitingSignatures,
    /// The plan was vetoed and the powers vote on whether it runs.
    Arbitrating,
    Running,
    Closed,
}

#[derive(Serialize, Deserialize)]
struct Arbitration {
    conflict: Conflict,
    votes: Vec<Vote>,
    awaiting: Vec<AgentId>,
    /// What the conflict is about, passed on to the parties with the ruling.
    #[serde(default)]
    subject: Option<ConflictSubject>,
}

impl TopAgent {
    /// A power that knows its peers (the other top agents with their signature authority) and
    /// the mid leads it hands work to.
    pub fn new(spec: TopSpec, peers: Vec<(AgentId, Vec<String>)>, leads: Vec<LeadInfo>) -> Self {
        Self {
            spec,
            peers,
            leads,
            tasks: BTreeMap::new(),
            arbitrations: BTreeMap::new(),
            roles: Arc::default(),
            arbitration: ArbitrationSettings::default(),
            voters: None,
            humans: None,
        }
    }

    /// Every plan this power proposes also needs the signature of one of `humans` (a team
    /// file's `[approvals] plans = true`); the power waits in `waiting_approval` until one of
    /// them signs or vetoes (`strata approve` / `strata veto`). `None` or an empty list: no human.
    #[must_use]
    pub fn with_human_approval(mut self, humans: Option<Vec<String>>) -> Self {
        self.humans = humans.filter(|h| !h.is_empty());
        self
    }

    /// Which situations the team settles by a weighted vote (default
    /// [`ArbitrationSettings::default`]); a power that proposes plans uses
    /// [`vetoed_plans`](ArbitrationSettings::vetoed_plans).
    #[must_use]
    pub fn with_arbitration(mut self, arbitration: ArbitrationSettings) -> Self {
        self.arbitration = arbitration;
        self
    }

    /// The other powers asked to vote when this one arbitrates: those holding `arbitrate`
    /// (default: every other power).
    #[must_use]
    pub fn with_voters(mut self, voters: Vec<AgentId>) -> Self {
        self.voters = Some(voters);
        self
    }

    fn voters(&self) -> Vec<AgentId> {
        match &self.voters {
            Some(v) => v.clone(),
            None => self.peers.iter().map(|(p, _)| p.clone()).collect(),
        }
    }

    /// Gives the power the team's roles: a goal's plan may then ask for mid-layer leads of
    /// these roles, which the power creates once the plan is signed.
    #[must_use]
    pub fn with_roles(mut self, roles: Arc<RoleBook>) -> Self {
        self.roles = roles;
        self
    }

    /// Creates the leads a signed plan asks for, through the team's spawner; `Err` with the
    /// reason when one cannot be created.
    async fn form_team(
        &mut self,
        ctx: &mut AgentContext,
        task_id: &str,
    ) -> Result<Result<(), String>, AgentError> {
        let Some(state) = self.tasks.get(task_id) else { return Ok(Ok(())) };
        let wanted: Vec<LeadRequest> = state
            .leads
            .iter()
            .filter(|l| !state.formed.iter().any(|f| f.domain == l.domain))
            .cloned()
            .collect();
        if wanted.is_empty() {
            return Ok(Ok(()));
        }
        let Some(spawner) = ctx.spawner() else {
            return Ok(Err("the plan asks for new leads but this team cannot spawn agents".into()));
        };
        let goal = state.task.goal.clone();
        for lead in wanted {
            ctx.require(Action::Spawn, &format!("a `{}` lead", lead.role)).await?;
            let request = agent_core::SpawnRequest {
                parent: ctx.id().clone(),
                role: lead.role.clone(),
                task_prompt: format!(
                    "Lead the `{}` part of task {task_id}. The goal: {goal}",
                    lead.domain
                ),
                key: format!("{task_id}#lead#{}", lead.domain),
                domain: Some(lead.domain.clone()),
            };
            let record = match spawner.spawn(request).await {
                Ok(r) => r,
                Err(e) => {
                    ctx.audit(agent_core::AuditEvent::Denied {
                        action: format!("create lead {} for {}", lead.role, lead.domain),
                        error: e.to_string(),
                    })
                    .await?;
                    return Ok(Err(format!(
                        "cannot create the `{}` lead for `{}`: {e}",
                        lead.role, lead.domain
                    )));
                }
            };
            let info = LeadInfo { id: record.agent, domain: lead.domain, executors: Vec::new() };
            if !self.leads.iter().any(|l| l.id == info.id) {
                self.leads.push(info.clone());
            }
            ctx.append_to(
                &BoardId::Global,
                &format!("- created lead {} ({}) for `{}`", info.id, lead.role, info.domain),
            )
            .await?;
            if let Some(state) = self.tasks.get_mut(task_id) {
                state.formed.push(info);
            }
        }
        Ok(Ok(()))
    }

    /// The power's settings.
    pub fn spec(&self) -> &TopSpec {
        &self.spec
    }

    fn is_top(&self, from: &Address) -> bool {
        from.agent().is_some_and(|a| self.peers.iter().any(|(p, _)| p == a))
    }

    fn signers(&self, me: &AgentId) -> Vec<AgentId> {
        let others: Vec<AgentId> = self
            .peers
            .iter()
            .filter(|(_, auth)| auth.iter().any(|a| a == PLAN_AUTHORITY))
            .map(|(p, _)| p.clone())
            .collect();
        if others.is_empty() { vec![me.clone()] } else { others }
    }

    async fn propose_task(
        &mut self,
        ctx: &mut AgentContext,
        cause: agent_state::MessageId,
        mut task: Task,
    ) -> Result<(), AgentError> {
        if self.tasks.contains_key(&task.id) {
            return Ok(()); // redelivered: already proposed
        }
        let mut leads = Vec::new();
        if let Some(earlier) = ctx.proposed_for(cause).await? {
            // This turn is done again after a crash: the plan proposed then (and perhaps
            // signed since) is the task's plan; a goal is not planned a second time.
            let planned: ProposedPlan = serde_json::from_value(earlier.content).map_err(|e| {
                AgentError::NotAllowed(format!(
                    "the plan proposed earlier as decision {} cannot be read: {e}",
                    earlier.id
                ))
            })?;
            task.steps = planned.steps;
            leads = planned.leads;
        } else if task.steps.is_empty() {
            match self.plan_goal(ctx, &mut task).await? {
                Ok(planned) => leads = planned,
                Err(failure) => return fail(ctx, &task, failure).await,
            }
        }
        if let Err(failure) = task.check() {
            return fail(ctx, &task, failure).await;
        }
        let content = if leads.is_empty() {
            serde_json::json!({ "task_id": task.id, "goal": task.goal, "steps": task.steps })
        } else {
            serde_json::json!({
                "task_id": task.id, "goal": task.goal, "steps": task.steps, "leads": leads
            })
        };
        let decision = self.put_to_signers(ctx, cause, content).await?;
        ctx.append_to(
            &BoardId::Global,
            &format!(
                "## Task {}\nGoal: {}\nPlan proposed as decision {decision}",
                task.id, task.goal
            ),
        )
        .await?;
        if let Some(humans) = &self.humans {
            ctx.append_to(
                &BoardId::Global,
                &format!(
                    "- decision {decision} also needs one human's signature ({}): `strata approve RUN {decision} --as NAME` or `strata veto RUN {decision} --reason TEXT`",
                    humans.join(", ")
                ),
            )
            .await?;
        }
        self.tasks.insert(
            task.id.clone(),
            TaskState {
                task,
                decision,
                phase: Phase::AwaitingSignatures,
                results: Vec::new(),
                dispatched: BTreeSet::new(),
                wave: 0,
                leads,
                formed: Vec::new(),
            },
        );
        if ctx.status() == AgentStatus::Working {
            ctx.transition(AgentStatus::WaitingApproval, "plan submitted for signatures").await?;
        }
        Ok(())
    }

    /// Plans a goal in words with the reasoner: the task gets its steps, and the leads to
    /// create are returned; a plan that cannot be made, or asks for a lead of a role the team
    /// does not have as a mid role, is the task's failure.
    async fn plan_goal(
        &self,
        ctx: &mut AgentContext,
        task: &mut Task,
    ) -> Result<Result<Vec<LeadRequest>, TaskFailure>, AgentError> {
        // The team's fixed leads: a step for one of their domains is placed with it.
        let domains: Vec<String> = self.leads.iter().map(|l| l.domain.clone()).collect();
        let who = agent_core::Persona { domains: &domains, ..ctx.persona() };
        let leads = match ctx.reasoner().plan(who, task, &self.roles).await {
            Ok(plan) => {
                task.steps = plan.steps;
                plan.leads
            }
            Err(
                e @ (agent_core::ReasonError::CannotPlan { .. }
                | agent_core::ReasonError::BadQuestion(_)),
            ) => return Ok(Err(TaskFailure::InvalidPlan { reason: e.to_string() })),
            Err(e) => return Err(e.into()),
        };
        if let Some(bad) = leads.iter().find(|l| {
            self.roles.get(&l.role).is_none_or(|r| r.layer != agent_state::AgentLayer::Mid)
        }) {
            return Ok(Err(TaskFailure::InvalidPlan {
                reason: format!(
                    "the plan asks for a lead of role `{}`, which is not a mid role of the team (roles: {})",
                    bad.role,
                    self.roles.names()
                ),
            }));
        }
        ctx.append_to(
            &BoardId::Global,
            &format!(
                "## Task {} planned from its goal: {} step(s), {} new lead(s)",
                task.id,
                task.steps.len(),
                leads.len()
            ),
        )
        .await?;
        Ok(Ok(leads))
    }

    /// Proposes `content` as a decision, once for the message `cause` (a redone turn finds
    /// the decision it proposed before), and asks its signers while it is pending: this power
    /// signs itself (if it may review), the others get a signature request (again, if the
    /// turn is redone: a signer ignores a request for what it signed).
    async fn put_to_signers(
        &self,
        ctx: &mut AgentContext,
        cause: agent_state::MessageId,
        content: serde_json::Value,
    ) -> Result<agent_state::DecisionId, AgentError> {
        let signers = self.signers(ctx.id());
        let proposed =
            ctx.propose_once(cause, content, signers.clone(), self.humans.clone()).await?;
        let decision = proposed.id;
        if proposed.status != DecisionStatus::Pending {
            return Ok(decision); // decided while this turn was cut short: nothing to ask
        }
        // The other signers' requests in one batch (this power is a signer only when it has
        // no peers with plan authority, so the order against its own signature is moot).
        let request = agent_core::protocol::SignatureRequest { decision };
        let others = signers.iter().filter(|signer| *signer != ctx.id());
        let requests: Vec<_> = others
            .map(|signer| (signer.clone(), MessageKind::SignatureRequest, &request))
            .collect();
        ctx.send_all(requests).await?;
        // audited: a power without `review` does not sign its own plan
        if signers.contains(ctx.id()) && may_review(ctx, decision).await? {
            ctx.sign(decision).await?;
        }
        Ok(decision)
    }

    /// A task handed to this power, by the system or another power; any other assignment,
    /// or one from anyone else, is refused.
    async fn task_assigned(
        &mut self,
        ctx: &mut AgentContext,
        message: &Message,
    ) -> Result<(), AgentError> {
        let allowed = message.from == Address::System || self.is_top(&message.from);
        let assignment =
            if allowed { ctx.read_payload::<Assignment>(message).await? } else { None };
        let error = match assignment {
            Some(Assignment::Task { task }) => {
                return self.propose_task(ctx, message.id, task).await;
            }
            Some(_) => "a top power does not take an assignment meant for another layer",
            None if allowed => return Ok(()), // unreadable: refused and audited by read_payload
            None => "a top power takes tasks only from the system or another power",
        };
        ctx.audit(agent_core::AuditEvent::Denied {
            action: format!("task_assign from {}", message.from),
            error: error.into(),
        })
        .await
    }

    /// Another power asks for this one's vote on a conflict: it votes with its weight.
    async fn vote_requested(
        &mut self,
        ctx: &mut AgentContext,
        message: &Message,
    ) -> Result<(), AgentError> {
        if !self.is_top(&message.from) {
            return ctx
                .audit(agent_core::AuditEvent::Denied {
                    action: format!("vote_request from {}", message.from),
                    error: "only a top power asks the others to vote".into(),
                })
                .await;
        }
        let Some(request) = ctx.read_payload::<VoteRequest>(message).await? else {
            return Ok(());
        };
        let choice = ctx.reasoner().vote(ctx.persona(), &request.conflict).await?;
        let vote = VoteResponse {
            conflict_id: request.conflict.id,
            choice,
            weight: self.spec.vote_weight,
        };
        ctx.reply(message, MessageKind::VoteResponse, &vote).await?;
        Ok(())
    }

    async fn review(
        &mut self,
        ctx: &mut AgentContext,
        message: &Message,
    ) -> Result<(), AgentError> {
        let Some(request) =
            ctx.read_payload::<agent_core::protocol::SignatureRequest>(message).await?
        else {
            return Ok(());
        };
        let Some(decision) = ctx.decision(request.decision).await? else {
            return Ok(());
        };
        if !decision.is_required_signer(ctx.id()) {
            ctx.audit(agent_core::AuditEvent::Denied {
                action: format!(
                    "signature request from {} for decision {}",
                    message.from, decision.id
                ),
                error: "this power is not a required signer of that decision; request ignored"
                    .into(),
            })
            .await?;
            return Ok(());
        }
        if decision.status != DecisionStatus::Pending || decision.has_signed(ctx.id()) {
            return Ok(()); // decided already, or a redelivered request
        }
        if !may_review(ctx, decision.id).await? {
            return Ok(()); // audited: the decision waits for a signer who may review
        }
        let verdict = ctx.reasoner().review_decision(ctx.persona(), &decision).await?;
        let status = match verdict {
            Verdict::Sign => match ctx.sign(decision.id).await? {
                SignOutcome::Approved => DecisionStatus::Approved,
                _ => DecisionStatus::Pending,
            },
            Verdict::Veto { reason } => {
                ctx.veto(decision.id, &reason).await?;
                DecisionStatus::Vetoed
            }
        };
        // The proposer waits on the decision: tell it, so it does not wait for a heartbeat.
        let answer = StatusReport::Decided { decision: decision.id, status };
        ctx.reply(message, MessageKind::StatusReport, &answer).await?;
        Ok(())
    }

    /// Checks the decisions this power waits on and dispatches or fails the tasks.
    async fn follow_decisions(&mut self, ctx: &mut AgentContext) -> Result<(), AgentError> {
        let waiting: Vec<String> = self
            .tasks
            .iter()
            .filter(|(_, t)| t.phase == Phase::AwaitingSignatures)
            .map(|(id, _)| id.clone())
            .collect();
        for task_id in waiting {
            let Some(state) = self.tasks.get(&task_id) else { continue };
            let Some(decision) = ctx.decision(state.decision).await? else { continue };
            match decision.status {
                DecisionStatus::Pending => {}
                DecisionStatus::Approved => self.run_plan(ctx, &task_id, "plan approved").await?,
                DecisionStatus::Vetoed => {
                    let (by, reason) = decision
                        .vetoes
                        .first()
                        .map(|v| (v.vetoer.clone(), v.reason.clone()))
                        .unwrap_or_else(|| (ctx.id().clone(), "vetoed".into()));
                    if self.arbitration.vetoed_plans && decision.proposer == *ctx.id() {
                        // The proposer stands by its plan and the team arbitrates vetoes.
                        if let Some(state) = self.tasks.get_mut(&task_id) {
                            state.phase = Phase::Arbitrating;
                        }
                        let conflict = Conflict {
                            id: format!("{task_id}/plan"),
                            issue: format!(
                                "{by} vetoed the plan of task {task_id} ({reason}) that {} proposed; run it anyway?",
                                ctx.id()
                            ),
                            parties: vec![ctx.id().clone(), by.clone()],
                            options: vec![BallotChoice::Abandon, BallotChoice::Proceed],
                        };
                        let subject = ConflictSubject::VetoedPlan {
                            task_id: task_id.clone(),
                            decision: decision.id,
                            by,
                            reason,
                        };
                        self.start_arbitration(ctx, conflict, Some(subject)).await?;
                        continue;
                    }
                    self.veto_stands(ctx, &task_id, by, reason).await?;
                }
            }
        }
        Ok(())
    }

    /// The plan of `task_id` was vetoed and stays so: the task closes failed.
    async fn veto_stands(
        &mut self,
        ctx: &mut AgentContext,
        task_id: &str,
        by: AgentId,
        reason: String,
    ) -> Result<(), AgentError> {
        if let Some(state) = self.tasks.get_mut(task_id) {
            state.phase = Phase::Closed;
        }
        if ctx.status() == AgentStatus::WaitingApproval {
            ctx.transition(AgentStatus::Idle, format!("plan vetoed by {by}")).await?;
        }
        let outcome = TaskOutcome::Failed {
            task_id: task_id.into(),
            reason: TaskFailure::Vetoed { by, reason },
        };
        close(ctx, task_id, outcome).await
    }

    /// The plan of `task_id` runs (signed, or upheld by arbitration): the leads it asks for
    /// are created and its first steps handed out.
    async fn run_plan(
        &mut self,
        ctx: &mut AgentContext,
        task_id: &str,
        why: &'static str,
    ) -> Result<(), AgentError> {
        if ctx.status() == AgentStatus::WaitingApproval {
            ctx.transition(AgentStatus::Working, why).await?;
        }
        if let Some(state) = self.tasks.get_mut(task_id) {
            state.phase = Phase::Running;
        }
        if let Err(reason) = self.form_team(ctx, task_id).await? {
            if let Some(state) = self.tasks.get_mut(task_id) {
                state.phase = Phase::Closed;
            }
            let failure = TaskFailure::TeamNotFormed { reason };
            return close(
                ctx,
                task_id,
                TaskOutcome::Failed { task_id: task_id.into(), reason: failure },
            )
            .await;
        }
        self.dispatch_ready(ctx, task_id).await
    }

    /// Hands every step whose `after` steps have succeeded, and that was not handed out yet, to
    /// its lead, one work package per lead.
    async fn dispatch_ready(
        &mut self,
        ctx: &mut AgentContext,
        task_id: &str,
    ) -> Result<(), AgentError> {
        let Some(state) = self.tasks.get(task_id) else { return Ok(()) };
        let done: BTreeSet<&str> =
            state.results.iter().filter(|r| r.success).map(|r| r.step_id.as_str()).collect();
        let ready: Vec<&PlanStep> = state
            .task
            .steps
            .iter()
            .filter(|s| {
                !state.dispatched.contains(&s.id)
                    && s.after.iter().all(|d| done.contains(d.as_str()))
            })
            .collect();
        if ready.is_empty() {
            return Ok(());
        }
        let mut packages: BTreeMap<AgentId, Vec<PlanStep>> = BTreeMap::new();
        for step in ready {
            let Some(lead) = route(&self.leads, step) else {
                let failure = TaskFailure::Unplaceable {
                    step: step.id.clone(),
                    reason: "no mid lead covers its domain, agent or tool".into(),
                };
                if let Some(state) = self.tasks.get_mut(task_id) {
                    state.phase = Phase::Closed;
                }
                return close(
                    ctx,
                    task_id,
                    TaskOutcome::Failed { task_id: task_id.into(), reason: failure },
                )
                .await;
            };
            packages.entry(lead).or_default().push(step.clone());
        }
        let (goal, decision, wave) = (state.task.goal.clone(), state.decision, state.wave + 1);
        let mut allocation = format!("## Task {task_id}, wave {wave}: allocation to leads\n");
        let mut assignments = Vec::with_capacity(packages.len());
        for (lead, steps) in &packages {
            let work = WorkPackage {
                task_id: task_id.into(),
                goal: goal.clone(),
                decision,
                wave,
                steps: steps.clone(),
            };
            assignments.push((lead, MessageKind::TaskAssign, Assignment::Work { work }));
            let ids: Vec<&str> = steps.iter().map(|s| s.id.as_str()).collect();
            allocation.push_str(&format!("- [{lead}] {}\n", ids.join(", ")));
        }
        // The wave in one batch: every lead gets its package, or none does.
        ctx.send_all(assignments).await?;
        ctx.append_own(&allocation).await?;
        if let Some(state) = self.tasks.get_mut(task_id) {
            state.wave = wave;
            state.dispatched.extend(packages.into_values().flatten().map(|s| s.id));
        }
        Ok(())
    }

    async fn lead_report(
        &mut self,
        ctx: &mut AgentContext,
        message: &Message,
    ) -> Result<(), AgentError> {
        let Some(report) = ctx.read_payload::<ProgressReport>(message).await? else {
            return Ok(());
        };
        let Some(lead) = message.from.agent().cloned() else { return Ok(()) };
        let Some(state) = self.tasks.get_mut(&report.task_id) else { return Ok(()) };
        ctx.append_own(&format!(
            "- [{lead}] {:?}: {} ({}%)",
            report.status, report.description, report.percentage
        ))
        .await?;
        match report.status {
            ProgressStatus::InProgress => Ok(()),
            ProgressStatus::Failed => {
                state.phase = Phase::Closed;
                let task_id = report.task_id.clone();
                let reason = reported_failure(lead, report);
                close(ctx, &task_id, TaskOutcome::Failed { task_id: task_id.clone(), reason }).await
            }
            ProgressStatus::Completed => {
                if state.phase != Phase::Running {
                    return Ok(());
                }
                for r in report.results {
                    if !state.results.iter().any(|x| x.step_id == r.step_id) {
                        state.results.push(r);
                    }
                }
                let finished = state
                    .task
                    .steps
                    .iter()
                    .all(|s| state.results.iter().any(|r| r.step_id == s.id));
                if !finished {
                    let task_id = report.task_id.clone();
                    return self.dispatch_ready(ctx, &task_id).await;
                }
                let global = ctx.read_board(&BoardId::Global).await?;
                let judgement = ctx
                    .reasoner()
                    .judge_progress(ctx.persona(), &state.task, &state.results, &global.content)
                    .await?;
                state.phase = Phase::Closed;
                let task_id = report.task_id.clone();
                let outcome = if judgement.complete {
                    let mut results = state.results.clone();
                    let order: Vec<&str> = state.task.steps.iter().map(|s| s.id.as_str()).collect();
                    results.sort_by_key(|r| order.iter().position(|s| *s == r.step_id));
                    TaskOutcome::Succeeded { task_id: task_id.clone(), results }
                } else {
                    // No step failed (each has its result): the task fails on this power's
                    // judgement, which says so, beside what the results say.
                    let (succeeded, steps) = steps_succeeded(&state.task, &state.results);
                    TaskOutcome::Failed {
                        task_id: task_id.clone(),
                        reason: TaskFailure::JudgedIncomplete {
                            by: ctx.id().clone(),
                            reason: judgement.summary,
                            succeeded,
                            steps,
                        },
                    }
                };
                close(ctx, &task_id, outcome).await
            }
        }
    }

    async fn escalation(
        &mut self,
        ctx: &mut AgentContext,
        message: &Message,
    ) -> Result<(), AgentError> {
        let Some(escalation) = ctx.read_payload::<Escalation>(message).await? else {
            return Ok(());
        };
        let Some(state) = self.tasks.get_mut(&escalation.task_id) else { return Ok(()) };
        if state.phase == Phase::Closed {
            return Ok(());
        }
        state.phase = Phase::Closed;
        // The team's task limit ran out (the team tells the proposing power): audited here,
        // where the task is closed.
        if let TaskFailure::TimedOut { limit: limit @ agent_state::Limit::Task, what, limit_ms } =
            &escalation.failure
        {
            ctx.audit(agent_core::AuditEvent::TimedOut {
                limit: *limit,
                what: what.clone(),
                limit_ms: *limit_ms,
            })
            .await?;
        }
        let outcome =
            TaskOutcome::Failed { task_id: escalation.task_id.clone(), reason: escalation.failure };
        close(ctx, &escalation.task_id, outcome).await
    }

    /// A `conflict_report`: arbitrated when its sender is a party to it and its ballot is
    /// sound; refused and audited otherwise. A power without `arbitrate` hands it to one that
    /// holds it.
    async fn conflict_reported(
        &mut self,
        ctx: &mut AgentContext,
        message: &Message,
    ) -> Result<(), AgentError> {
        let Some(report) = ctx.read_payload::<ConflictReport>(message).await? else {
            return Ok(());
        };
        let refuse = |error: String| agent_core::AuditEvent::Denied {
            action: format!("conflict_report `{}` from {}", report.conflict.id, message.from),
            error,
        };
        let sender = message.from.agent().cloned();
        let problem = match &sender {
            None => Some("a conflict is reported by one of its parties, not the system".to_owned()),
            Some(s) if !report.conflict.parties.contains(s) => Some(format!(
                "{s} is not a party to the conflict (parties: {}); only a party may report it",
                report.conflict.parties.iter().map(AgentId::as_str).collect::<Vec<_>>().join(", ")
            )),
            Some(_) if report.conflict.options.is_empty() => {
                Some("the conflict offers no options to vote on".to_owned())
            }
            Some(s) => match &report.subject {
                Some(
                    ConflictSubject::Escalation { lead, .. }
                    | ConflictSubject::Acceptance { lead, .. },
                ) if lead != s => Some(format!("only the lead {lead} reports this conflict")),
                Some(ConflictSubject::VetoedPlan { .. }) => {
                    Some("a vetoed plan is put to the vote by its proposer only".to_owned())
                }
                _ => None,
            },
        };
        if let Some(error) = problem {
            return ctx.audit(refuse(error)).await;
        }
        if !ctx.config().has(Capability::Arbitrate) {
            let to = self.voters().into_iter().next();
            let error = match &to {
                Some(to) => format!("this power does not hold `arbitrate`; handed to {to}"),
                None => "no power of the team holds `arbitrate`; the conflict stays open".into(),
            };
            ctx.audit(refuse(error)).await?;
            if let Some(to) = to {
                ctx.send(&to, MessageKind::ConflictReport, &report).await?;
            }
            return Ok(());
        }
        self.start_arbitration(ctx, report.conflict, report.subject).await
    }

    async fn start_arbitration(
        &mut self,
        ctx: &mut AgentContext,
        conflict: Conflict,
        subject: Option<ConflictSubject>,
    ) -> Result<(), AgentError> {
        if self.arbitrations.contains_key(&conflict.id) {
            return Ok(());
        }
        ctx.require(Action::Arbitrate, &format!("conflict `{}`", conflict.id)).await?;
        let choice = ctx.reasoner().vote(ctx.persona(), &conflict).await?;
        let choice = valid_choice(&conflict, choice);
        let own = Vote { voter: ctx.id().clone(), choice, weight: self.spec.vote_weight };
        let awaiting = self.voters();
        let request = VoteRequest { conflict: conflict.clone() };
        ctx.send_all(awaiting.iter().map(|peer| (peer, MessageKind::VoteRequest, &request)))
            .await?;
        ctx.append_to(
            &BoardId::Global,
            &format!(
                "- conflict `{}` put to the vote by {}: {}",
                conflict.id,
                ctx.id(),
                conflict.options.iter().map(BallotChoice::as_str).collect::<Vec<_>>().join(" or ")
            ),
        )
        .await?;
        let id = conflict.id.clone();
        self.arbitrations
            .insert(id.clone(), Arbitration { conflict, votes: vec![own], awaiting, subject });
        self.try_resolve(ctx, &id).await
    }

    async fn record_vote(
        &mut self,
        ctx: &mut AgentContext,
        message: &Message,
    ) -> Result<(), AgentError> {
        let Some(vote) = ctx.read_payload::<VoteResponse>(message).await? else { return Ok(()) };
        let Some(voter) = message.from.agent().cloned() else { return Ok(()) };
        let Some(arbitration) = self.arbitrations.get_mut(&vote.conflict_id) else { return Ok(()) };
        if !arbitration.awaiting.contains(&voter) {
            if arbitration.votes.iter().any(|v| v.voter == voter) {
                return Ok(()); // counted already (a redelivered vote)
            }
            return ctx
                .audit(agent_core::AuditEvent::Denied {
                    action: format!("vote on `{}` by {voter}", vote.conflict_id),
                    error: "only the powers holding `arbitrate`, asked by the arbitrator, vote"
                        .into(),
                })
                .await;
        }
        arbitration.awaiting.retain(|a| *a != voter);
        let choice = valid_choice(&arbitration.conflict, vote.choice);
        arbitration.votes.push(Vote { voter, choice, weight: vote.weight });
        self.try_resolve(ctx, &vote.conflict_id).await
    }

    async fn try_resolve(&mut self, ctx: &mut AgentContext, id: &str) -> Result<(), AgentError> {
        let Some(arbitration) = self.arbitrations.get(id) else { return Ok(()) };
        if !arbitration.awaiting.is_empty() {
            return Ok(());
        }
        let Some(arbitration) = self.arbitrations.remove(id) else { return Ok(()) };
        let result = tally(&arbitration.votes)
            .map_err(|e| AgentError::NotAllowed(format!("arbitration of `{id}`: {e}")))?;
        let votes = arbitration
            .votes
            .iter()
            .map(|v| format!("{}={} (weight {})", v.voter, v.choice, v.weight))
            .collect::<Vec<_>>()
            .join(", ");
        let parties =
            arbitration.conflict.parties.iter().map(AgentId::as_str).collect::<Vec<_>>().join(", ");
        ctx.append_to(
            &BoardId::Global,
            &format!(
                "## Arbitration Result\n\nConflict: {}\nParties: {parties}\nResolution: {}\nVotes: {votes}\nArbitrator: {}\nTime: {}",
                arbitration.conflict.issue,
                result.winner,
                ctx.config().name,
                ctx.now()
            ),
        )
        .await?;
        ctx.metrics_mut().conflicts_arbitrated += 1;
        let message = ArbitrationResult {
            conflict_id: id.into(),
            resolution: result.winner.clone(),
            tally: result,
            arbitrator: ctx.id().clone(),
            subject: arbitration.subject,
        };
        // Every other party in one batch; this power acts on it below.
        let others = arbitration.conflict.parties.iter().filter(|party| *party != ctx.id());
        let results: Vec<_> =
            others.map(|party| (party.clone(), MessageKind::ArbitrationResult, &message)).collect();
        ctx.send_all(results).await?;
        if arbitration.conflict.parties.contains(ctx.id()) {
            self.act_on_ruling(ctx, &message).await?;
        }
        Ok(())
    }

    /// An `arbitration_result` from another power: acted on when this power is a party.
    async fn ruling_received(
        &mut self,
        ctx: &mut AgentContext,
        message: &Message,
    ) -> Result<(), AgentError> {
        let Some(ruling) = ctx.read_payload::<ArbitrationResult>(message).await? else {
            return Ok(());
        };
        if !self.is_top(&message.from) {
            return ctx
                .audit(agent_core::AuditEvent::Denied {
                    action: format!("arbitration_result from {}", message.from),
                    error: "only a top power announces the result of an arbitration".into(),
                })
                .await;
        }
        self.act_on_ruling(ctx, &ruling).await
    }

    /// Acts on a ruling as a party: an escalation voted `abandon` fails its task (`retry`: the
    /// lead places the step again); a vetoed plan voted `proceed` runs, else the veto stands.
    async fn act_on_ruling(
        &mut self,
        ctx: &mut AgentContext,
        ruling: &ArbitrationResult,
    ) -> Result<(), AgentError> {
        let Some(subject) = &ruling.subject else { return Ok(()) };
        let task_id = subject.task_id().to_owned();
        let Some(state) = self.tasks.get_mut(&task_id) else { return Ok(()) };
        match subject {
            ConflictSubject::Escalation { step, failure, .. } => {
                if state.phase != Phase::Running {
                    return Ok(());
                }
                if ruling.resolution == BallotChoice::Retry {
                    ctx.append_own(&format!("- {task_id}/{step}: the vote says retry")).await?;
                    return Ok(());
                }
                state.phase = Phase::Closed;
                let outcome =
                    TaskOutcome::Failed { task_id: task_id.clone(), reason: failure.clone() };
                close(ctx, &task_id, outcome).await
            }
            ConflictSubject::VetoedPlan { by, reason, .. } => {
                if state.phase != Phase::Arbitrating {
                    return Ok(());
                }
                if ruling.resolution == BallotChoice::Proceed {
                    ctx.append_to(
                        &BoardId::Global,
                        &format!(
                            "## Task {task_id}: the vote overrules the veto by {by}; the plan runs"
                        ),
                    )
                    .await?;
                    return self.run_plan(ctx, &task_id, "plan upheld by arbitration").await;
                }
                self.veto_stands(ctx, &task_id, by.clone(), reason.clone()).await
            }
            ConflictSubject::Acceptance { .. } => Ok(()),
        }
    }
}

/// A vote for an option not on the ballot counts for the first option (the conservative
/// one: the runtime lists it first), so a confused voter cannot stall or skew the tally.
fn valid_choice(conflict: &Conflict, choice: BallotChoice) -> BallotChoice {
    if conflict.options.contains(&choice) {
        return choice;
    }
    tracing::warn!(conflict = %conflict.id, %choice, "vote for an option not on the ballot");
    conflict.options.first().cloned().unwrap_or(choice)
}

/// Which lead takes a step: the lead of the step's domain, the lead that is or supervises the
/// named agent, or for `any` the first lead with an executor that has the tool.
pub fn route(leads: &[LeadInfo], step: &PlanStep) -> Option<AgentId> {
    let lead = match &step.target {
        StepTarget::Domain(d) => leads.iter().find(|l| &l.domain == d),
        StepTarget::Agent(a) => {
            leads.iter().find(|l| &l.id == a || l.executors.iter().any(|(e, _)| e == a))
        }
        StepTarget::Any if !step.is_scripted() => leads.first(),
        StepTarget::Any => {
            leads.iter().find(|l| l.executors.iter().any(|(_, tools)| tools.contains(&step.tool)))
        }
    };
    lead.map(|l| l.id.clone())
}

/// How many steps of `task` have a successful result in `results`, and how many steps it has.
pub(crate) fn steps_succeeded(task: &Task, results: &[SubtaskResult]) -> (u32, u32) {
    let succeeded = task
        .steps
        .iter()
        .filter(|s| results.iter().any(|r| r.step_id == s.id && r.success))
        .count();
    let count = |n: usize| u32::try_from(n).unwrap_or(u32::MAX);
    (count(succeeded), count(task.steps.len()))
}

pub(crate) async fn close(
    ctx: &mut AgentContext,
    task_id: &str,
    outcome: TaskOutcome,
) -> Result<(), AgentError> {
    let line = closing_line(task_id, &outcome);
    if outcome.is_success() {
        ctx.metrics_mut().tasks_completed += 1;
    }
    report_closed(ctx, outcome, &line).await
}

/// Writes `line` (how the task closed) on the global board and reports `outcome` to
/// `system`, which ends the task.
pub(crate) async fn report_closed(
    ctx: &mut AgentContext,
    outcome: TaskOutcome,
    line: &str,
) -> Result<(), AgentError> {
    ctx.append_to(&BoardId::Global, line).await?;
    ctx.send(Address::System, MessageKind::StatusReport, &StatusReport::TaskClosed { outcome })
        .await?;
    Ok(())
}

/// The global board's line about how task `task_id` closed.
pub(crate) fn closing_line(task_id: &str, outcome: &TaskOutcome) -> String {
    match outcome {
        TaskOutcome::Succeeded { results, .. } => {
            format!("## Task {task_id} closed: succeeded ({} steps)", results.len())
        }
        TaskOutcome::Failed { reason, .. } => format!("## Task {task_id} closed: failed: {reason}"),
    }
}

#[async_trait]
impl AgentBehavior for TopAgent {
    fn responsibilities(&self) -> &'static str {
        "- Approve major technical proposals and task allocations\n\
         - Monitor mid-layer leader progress\n\
         - Arbitrate conflicts between layers\n\
         - Evaluate overall task progress and quality\n\
         - Collaborate with other top-layer powers for major decisions"
    }

    async fn on_process(
        &mut self,
        ctx: &mut AgentContext,
        messages: &[Message],
        _board: &BoardSnapshot,
    ) -> Result<(), AgentError> {
        for message in messages {
            match message.kind {
                MessageKind::TaskAssign => self.task_assigned(ctx, message).await?,
                MessageKind::SignatureRequest => self.review(ctx, message).await?,
                MessageKind::ProgressReport => self.lead_report(ctx, message).await?,
                MessageKind::IssueEscalation => self.escalation(ctx, message).await?,
                MessageKind::ConflictReport => self.conflict_reported(ctx, message).await?,
                MessageKind::ArbitrationResult => self.ruling_received(ctx, message).await?,
                MessageKind::VoteRequest => self.vote_requested(ctx, message).await?,
                MessageKind::VoteResponse => self.record_vote(ctx, message).await?,
                MessageKind::PeerHelpRequest => {
                    // A lead (its subordinate) speaks to it with `speak_to_agent`: it answers
                    // from where its tasks stand, so the lead's loop is not left waiting (a
                    // lead waiting on its power while the power waits on the lead's results
                    // would otherwise be a wait cycle).
                    let Some(agent_core::protocol::HelpRequest::Speak { message: said }) =
                        ctx.read_payload(message).await?
                    else {
                        continue;
                    };
                    let Some(from) = message.from.agent().cloned() else { continue };
                    let context = self.current_work().unwrap_or_default();
                    let reply = crate::answer(ctx, &from, &said, &context).await;
                    let said = agent_core::protocol::HelpResponse::Said { reply };
                    ctx.reply(message, MessageKind::PeerHelpResponse, &said).await?;
                }
                MessageKind::ErrorReport => {
                    let Some(report) = ctx.read_payload::<ErrorReport>(message).await? else {
                        continue;
                    };
                    ctx.append_own(&format!("- [{}] failed: {}", message.from, report.error))
                        .await?;
                }
                _ => {}
            }
        }
        self.follow_decisions(ctx).await
    }

    async fn on_shutdown(&mut self, ctx: &mut AgentContext) -> Result<(), AgentError> {
        let m = ctx.metrics();
        let report = format!(
            "## Final Report - {}\n\n- Decisions Signed: {}\n- Decisions Vetoed: {}\n- Conflicts Arbitrated: {}\n- Tasks Closed Successfully: {}",
            ctx.config().name,
            m.decisions_signed,
            m.decisions_vetoed,
            m.conflicts_arbitrated,
            m.tasks_completed
        );
        ctx.write_board(report).await?;
        Ok(())
    }

    fn wants_tick(&self) -> bool {
        self.tasks.values().any(|t| t.phase == Phase::AwaitingSignatures)
    }

    fn snapshot(&self) -> serde_json::Value {
        if self.tasks.is_empty() && self.arbitrations.is_empty() {
            return serde_json::Value::Null;
        }
        serde_json::json!({ "tasks": self.tasks, "arbitrations": self.arbitrations })
    }

    fn restore(&mut self, state: serde_json::Value) -> Result<(), AgentError> {
        #[derive(Deserialize)]
        struct Saved {
            tasks: BTreeMap<String, TaskState>,
            arbitrations: BTreeMap<String, Arbitration>,
        }
        if state.is_null() {
            return Ok(());
        }
        let saved: Saved = serde_json::from_value(state).map_err(|e| {
            AgentError::NotAllowed(format!("saved state of a top power cannot be read: {e}"))
        })?;
        self.tasks = saved.tasks;
        self.arbitrations = saved.arbitrations;
        for info in self.tasks.values().flat_map(|t| t.formed.iter()) {
            if !self.leads.iter().any(|l| l.id == info.id) {
                self.leads.push(info.clone());
            }
        }
        Ok(())
    }

    fn waiting_on(&self, me: &AgentId) -> Vec<agent_state::WaitEdge> {
        let mut waits = Vec::new();
        for (id, t) in &self.tasks {
            let task = Some(id.clone());
            match t.phase {
                Phase::AwaitingSignatures => {
                    waits.extend(self.signers(me).into_iter().filter(|s| s != me).map(|s| {
                        agent_state::WaitEdge {
                            waiter: me.clone(),
                            on: s,
                            what: format!("its signature on the plan of {id}"),
                            task: task.clone(),
                        }
                    }));
                    // A human may take a while: the run's guards do not count that as idle.
                    if let Some(first) = self.humans.as_ref().and_then(|h| h.first())
                        && let Ok(human) = AgentId::human(first)
                    {
                        waits.push(agent_state::WaitEdge {
                            waiter: me.clone(),
                            on: human,
                            what: format!(
                                "a human's signature ({}) on the plan of {id}",
                                self.humans.as_deref().unwrap_or_default().join(" or ")
                            ),
                            task: task.clone(),
                        });
                    }
                }
                Phase::Running => {
                    // A step whose conflict this power arbitrates waits on the vote, not on
                    // its lead (the lead waits on this power for the ruling).
                    let voting = |step: &str| {
                        self.arbitrations.values().any(|a| match &a.subject {
                            Some(
                                ConflictSubject::Escalation { task_id, step: s, .. }
                                | ConflictSubject::Acceptance { task_id, step: s, .. },
                            ) => task_id == id && s == step,
                            _ => false,
                        })
                    };
                    let pending = t.task.steps.iter().filter(|s| {
                        t.dispatched.contains(&s.id)
                            && !t.results.iter().any(|r| r.step_id == s.id)
                            && !voting(&s.id)
                    });
                    let mut leads: Vec<(AgentId, String)> = Vec::new();
                    for step in pending {
                        if let Some(lead) = route(&self.leads, step)
                            && !leads.iter().any(|(l, _)| *l == lead)
                        {
                            leads.push((lead, step.id.clone()));
                        }
                    }
                    waits.extend(leads.into_iter().map(|(lead, step)| agent_state::WaitEdge {
                        waiter: me.clone(),
                        on: lead,
                        what: format!("the results of {id}/{step}"),
                        task: task.clone(),
                    }));
                }
                Phase::Arbitrating | Phase::Closed => {}
            }
        }
        waits
    }

    fn open_tasks(&self) -> Vec<String> {
        self.tasks
            .iter()
            .filter(|(_, t)| t.phase != Phase::Closed)
            .map(|(id, _)| id.clone())
            .collect()
    }

    fn current_work(&self) -> Option<String> {
        self.tasks.iter().find(|(_, t)| t.phase != Phase::Closed).map(|(id, t)| match t.phase {
            Phase::AwaitingSignatures => format!("{id}: awaiting signatures"),
            _ => {
                let (succeeded, steps) = steps_succeeded(&t.task, &t.results);
                format!("{id}: in progress, {succeeded} of {steps} step(s) done")
            }
        })
    }
}

/// Where a task stands at the top power that proposed it: what [`task_progress`] reads from
/// the power's state.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct TaskProgress {
    /// The ids of the plan's steps (a goal's once the power has planned it).
    pub steps: Vec<String>,
    /// The ids of the steps with a successful result so far.
    pub succeeded: Vec<String>,
}

/// Where task `task_id` stands, read from a top power's state (its
/// [`AgentBehavior::snapshot`], as [`Agent::record`](agent_core::Agent::record) gives it):
/// `None` when the power holds no such task (it did not propose it, or it is still planning
/// it: a power holds a task once its plan is proposed).
pub fn task_progress(snapshot: &serde_json::Value, task_id: &str) -> Option<TaskProgress> {
    use serde_json::Value;
    fn list(value: Option<&Value>) -> impl Iterator<Item = &Value> {
        value.and_then(Value::as_array).into_iter().flatten()
    }
    fn text(value: &Value, key: &str) -> Option<String> {
        value.get(key).and_then(Value::as_str).map(str::to_owned)
    }
    let task = snapshot.get("tasks")?.get(task_id)?;
    let steps =
        list(task.get("task").and_then(|t| t.get("steps"))).filter_map(|s| text(s, "id")).collect();
    let succeeded = list(task.get("results"))
        .filter(|r| r.get("success").and_then(Value::as_bool) == Some(true))
        .filter_map(|r| text(r, "step_id"))
        .collect();
    Some(TaskProgress { steps, succeeded })
}

/// Whether this power may sign or veto decision `id` (it holds `review`); a refusal is
/// audited as `Denied` and is not an error of the agent: the decision waits for others.
async fn may_review(ctx: &AgentContext, id: agent_state::DecisionId) -> Result<bool, AgentError> {
    match ctx.require(Action::Review, &format!("(sign decision {id})")).await {
        Ok(()) => Ok(true),
        Err(AgentError::MissingCapability { .. }) => Ok(false),
        Err(e) => Err(e),
    }
}

/// Closes `task` as failed with `failure`.
async fn fail(ctx: &mut AgentContext, task: &Task, failure: TaskFailure) -> Result<(), AgentError> {
    close(ctx, &task.id, TaskOutcome::Failed { task_id: task.id.clone(), reason: failure }).await
}

/// Why a task failed, as `lead` reported it: a typed failure says what happened; without one,
/// what the reporter said, and the step it names if it names one.
pub(crate) fn reported_failure(lead: AgentId, report: ProgressReport) -> TaskFailure {
    report.failure.unwrap_or_else(|| {
        let failed = report.results.iter().find(|r| !r.success);
        TaskFailure::ReportedFailed {
            by: lead,
            step: failed.map(|r| r.step_id.clone()),
            reason: failed
                .map(|r| r.output.clone())
                .filter(|o| !o.trim().is_empty())
                .unwrap_or(report.description),
        }
    })
}

/// The plan in a proposed task's decision, as [`TopAgent::propose_task`] writes it.
#[derive(Deserialize)]
struct ProposedPlan {
    steps: Vec<agent_state::PlanStep>,
    #[serde(default)]
    leads: Vec<LeadRequest>,
}
