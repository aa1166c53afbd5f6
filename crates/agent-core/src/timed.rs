//! The team's reasoning limits (`[timeouts] reasoning_ms` and `silence_ms`): every reasoner
//! call an agent makes through [`AgentContext::reasoner`](crate::AgentContext::reasoner) goes
//! through [`TimedReasoner`], which stops a call still running at its total limit, or one that
//! produced nothing (no token, no prompt batch: see [`progress`](crate::progress)) for the
//! silence limit (on tokio's clock), audits it as [`AuditEvent::TimedOut`] and fails it with
//! [`ReasonError::TimedOut`] or [`ReasonError::Silent`] (transient: the heartbeat that made it
//! is retried). A call still producing tokens is never cut by its silence. Time the call spends
//! in [`untimed`](crate::untimed) sections (the LLM reasoner's wait for a budget decision)
//! counts toward neither.
//!
//! Soft limits (`[timeouts] tool_soft_ms`, `turn_soft_ms`): a tool call or a heartbeat turn
//! still running at its soft limit goes on to its hard limit as before, but [`soft_timeout`]
//! tells once: a tracing warning, an [`AuditEvent::SoftTimeout`] and a `warning` message from
//! `system` to the agent's supervisor (`system` for an agent without one).
//! [`with_soft_limit`] runs a call under its soft limit. Which limit is in force is
//! [`agent_state::soft_limit`].

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use agent_state::{
    Address, AgentId, Limit, Message, MessageKind, RoleBook, Subtask, SubtaskResult, Task,
    WorkPackage,
};
use async_trait::async_trait;

use crate::agent::AgentDeps;
use crate::audit::{AuditEvent, AuditLog};
use crate::clock::Clock;
use crate::offclock::Cut;
use crate::protocol::Warning;
use crate::reasoner::{
    Candidate, Conflict, Judgement, NextAction, Persona, Placement, Plan, ReasonError, Reasoner,
    ToolCallRecord, Verdict,
};

/// What passed its soft limit, and whom to tell.
#[derive(Clone, Debug)]
pub(crate) struct SoftTimeout {
    /// Which limit.
    pub(crate) limit: Limit,
    /// What is slow, in words.
    pub(crate) what: String,
    /// The soft limit passed.
    pub(crate) soft_ms: u64,
    /// The hard limit it still runs under.
    pub(crate) hard_ms: u64,
}

/// Tells that `agent`'s work passed its soft limit: a tracing warning, an
/// [`AuditEvent::SoftTimeout`] and a `warning` from `system` to `supervisor` (or to `system`
/// for an agent without one). The work goes on: a record or a message that cannot be written
/// is logged, not failed.
pub(crate) async fn soft_timeout(
    deps: &AgentDeps,
    agent: &AgentId,
    supervisor: Option<&AgentId>,
    soft: SoftTimeout,
) {
    let SoftTimeout { limit, what, soft_ms, hard_ms } = soft;
    tracing::warn!(agent = %agent, %limit, what = %what, soft_ms, hard_ms, "past its soft time limit; still running");
    let now = deps.clock.now();
    let reason = format!(
        "{what} has run {soft_ms} ms, past its soft limit (`[timeouts] {key}`); still running, \
         stopped at {hard_ms} ms",
        key = limit.soft_key().unwrap_or_default()
    );
    let event = AuditEvent::SoftTimeout { limit, what, soft_ms, hard_ms };
    if let Err(error) = deps.audit.append(agent, now, event).await {
        tracing::warn!(agent = %agent, %error, "could not audit a soft timeout");
    }
    let to = supervisor.map_or(Address::System, |s| Address::Agent(s.clone()));
    let content = match serde_json::to_value(Warning { about: agent.clone(), reason }) {
        Ok(content) => content,
        Err(error) => {
            tracing::warn!(agent = %agent, %error, "cannot encode a soft timeout warning");
            return;
        }
    };
    let message = Message::new(
        deps.clock.message_id(),
        Address::System,
        to,
        MessageKind::Warning,
        content,
        now,
    );
    if let Err(error) = deps.bus.send(message).await {
        tracing::warn!(agent = %agent, %error, "cannot warn the supervisor of a soft timeout");
    }
}

/// Runs `work`; if it is still running after `soft` (on tokio's clock), runs `on_soft` beside
/// it, once. `work` is never cut: its own hard limit bounds it.
pub(crate) async fn with_soft_limit<T, N>(
    work: impl Future<Output = T>,
    soft: Option<Duration>,
    on_soft: impl FnOnce() -> N,
) -> T
where
    N: Future<Output = ()>,
{
    let Some(soft) = soft else {
        return work.await;
    };
    tokio::pin!(work);
    tokio::select! {
        // The work first, so a call that ends at its soft limit is not reported.
        biased;
        out = &mut work => return out,
        () = tokio::time::sleep(soft) => {}
    }
    let (out, ()) = tokio::join!(work, on_soft());
    out
}

/// `work`, a call of `tool` by `agent`, under the tool call's soft limit: the team's
/// `tool_soft_ms` against the workspace's tool limit ([`agent_state::soft_limit`]).
pub(crate) async fn tool_call<T>(
    deps: &AgentDeps,
    agent: &AgentId,
    supervisor: Option<&AgentId>,
    tool: &str,
    work: impl Future<Output = T>,
) -> T {
    let hard_ms = u64::try_from(deps.workspace.tool_timeout().as_millis()).unwrap_or(u64::MAX);
    let soft_ms = agent_state::soft_limit(hard_ms, deps.timeouts.tool_soft_ms);
    // A tool running is progress of the turn, bounded by its own limit.
    let _running = crate::progress::Section::tool(tool, deps.workspace.tool_timeout());
    with_soft_limit(work, soft_ms.map(Duration::from_millis), || {
        let soft = SoftTimeout {
            limit: Limit::Tool,
            what: format!("tool call `{tool}`"),
            soft_ms: soft_ms.unwrap_or_default(),
            hard_ms,
        };
        soft_timeout(deps, agent, supervisor, soft)
    })
    .await
}

/// A reasoner whose every call is bounded by a total time limit and a silence limit; a call
/// past either is audited for `agent` and fails with [`ReasonError::TimedOut`] or
/// [`ReasonError::Silent`].
///
/// The call reports to its task's [`Progress`](crate::Progress) (the agent's, in a turn the
/// scheduler runs; one of its own otherwise), which the reasoner feeds as tokens arrive
/// ([`progress::tokens`](crate::progress::tokens)); its start is its first sign of progress.
pub(crate) struct TimedReasoner {
    pub(crate) inner: Arc<dyn Reasoner>,
    pub(crate) limit_ms: u64,
    pub(crate) silence_ms: u64,
    pub(crate) agent: AgentId,
    pub(crate) audit: Arc<dyn AuditLog>,
    pub(crate) clock: Arc<dyn Clock>,
}

impl TimedReasoner {
    async fn bound<T>(
        &self,
        call: &str,
        work: impl Future<Output = Result<T, ReasonError>> + Send,
    ) -> Result<T, ReasonError> {
        let silence = Duration::from_millis(self.silence_ms);
        let progress =
            crate::progress::current().unwrap_or_else(|| Arc::new(crate::Progress::new(silence)));
        let section = crate::progress::Section::call(progress.clone());
        let work = crate::progress::scope(progress.clone(), work);
        // What the reasoner records itself (a repaired answer) goes to this agent's audit log.
        let work = crate::audit::with_reasoning_audit(
            self.audit.clone(),
            self.agent.clone(),
            self.clock.clone(),
            work,
        );
        let limit = Duration::from_millis(self.limit_ms);
        let cut =
            match crate::offclock::bounded_while_producing(limit, silence, &progress, work).await {
                Ok(result) => return result,
                Err(cut) => cut,
            };
        drop(section);
        let reasoner = self.inner.name().to_owned();
        let (limit, limit_ms, what) = match cut {
            Cut::Total => {
                tracing::warn!(agent = %self.agent, %reasoner, call, limit_ms = self.limit_ms, "reasoning call timed out");
                (Limit::Reasoning, self.limit_ms, "")
            }
            Cut::Silent => {
                tracing::warn!(agent = %self.agent, %reasoner, call, silence_ms = self.silence_ms, "reasoning call produced nothing for its silence limit");
                (Limit::Silence, self.silence_ms, ", silent")
            }
        };
        let event = AuditEvent::TimedOut {
            limit,
            what: format!("reasoning call `{call}` of reasoner `{reasoner}`{what}"),
            limit_ms,
        };
        // The error below fails the heartbeat, which audits it too; a log that cannot take
        // this record fails the next append the same way.
        if let Err(error) = self.audit.append(&self.agent, self.clock.now(), event).await {
            tracing::warn!(agent = %self.agent, %error, "could not audit a reasoning timeout");
        }
        let call = call.to_owned();
        Err(match cut {
            Cut::Total => ReasonError::TimedOut { reasoner, call, limit_ms },
            Cut::Silent => ReasonError::Silent { reasoner, call, silence_ms: limit_ms },
        })
    }
}

#[async_trait]
impl Reasoner for TimedReasoner {
    fn name(&self) -> &str {
        self.inner.name()
    }

    async fn review_decision(
        &self,
        who: Persona<'_>,
        decision: &agent_state::Decision,
    ) -> Result<Verdict, ReasonError> {
        self.bound("review_decision", self.inner.review_decision(who, decision)).await
    }

    async fn vote(
        &self,
        who: Persona<'_>,
        conflict: &Conflict,
    ) -> Result<agent_state::BallotChoice, ReasonError> {
        self.bound("vote", self.inner.vote(who, conflict)).await
    }

    async fn decompose(
        &self,
        who: Persona<'_>,
        work: &WorkPackage,
        team: &[Candidate],
    ) -> Result<Vec<Placement>, ReasonError> {
        self.bound("decompose", self.inner.decompose(who, work, team)).await
    }

    async fn next_action(
        &self,
        who: Persona<'_>,
        subtask: &Subtask,
        history: &[ToolCallRecord],
    ) -> Result<NextAction, ReasonError> {
        self.bound("next_action", self.inner.next_action(who, subtask, history)).await
    }

    async fn judge_progress(
        &self,
        who: Persona<'_>,
        task: &Task,
        results: &[SubtaskResult],
        global_board: &str,
    ) -> Result<Judgement, ReasonError> {
        self.bound("judge_progress", self.inner.judge_progress(who, task, results, global_board))
            .await
    }

    fn plans(&self) -> bool {
        self.inner.plans()
    }

    async fn plan(
        &self,
        who: Persona<'_>,
        task: &Task,
        roles: &RoleBook,
    ) -> Result<Plan, ReasonError> {
        self.bound("plan", self.inner.plan(who, task, roles)).await
    }

    async fn concluded(
        &self,
        who: Persona<'_>,
        subtask: &Subtask,
        history: &[ToolCallRecord],
        ending: &str,
    ) -> Result<(), ReasonError> {
        self.bound("concluded", self.inner.concluded(who, subtask, history, ending)).await
    }

    async fn compose(
        &self,
        who: Persona<'_>,
        instruction: &str,
        material: &str,
    ) -> Result<String, ReasonError> {
        self.bound("compose", self.inner.compose(who, instruction, material)).await
    }

    async fn answer(
        &self,
        who: Persona<'_>,
        from: &AgentId,
        message: &str,
        context: &str,
    ) -> Result<String, ReasonError> {
        self.bound("answer", self.inner.answer(who, from, message, context)).await
    }
}
