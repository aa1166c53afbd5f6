//! The team's reasoning limit (`[timeouts] reasoning_ms`): every reasoner call an agent makes
//! through [`AgentContext::reasoner`](crate::AgentContext::reasoner) goes through
//! [`TimedReasoner`], which stops a call still running at the limit (on tokio's clock), audits
//! it as [`AuditEvent::TimedOut`] and fails it with [`ReasonError::TimedOut`] (transient: the
//! heartbeat that made it is retried). Time the call spends in [`untimed`](crate::untimed)
//! sections (the LLM reasoner's wait for a budget decision) does not count.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use agent_state::{AgentId, Limit, RoleBook, Subtask, SubtaskResult, Task, WorkPackage};
use async_trait::async_trait;

use crate::audit::{AuditEvent, AuditLog};
use crate::clock::Clock;
use crate::reasoner::{
    Candidate, Conflict, Judgement, NextAction, Persona, Placement, Plan, ReasonError, Reasoner,
    ToolCallRecord, Verdict,
};

/// A reasoner whose every call is bounded by a time limit; a call past it is audited for
/// `agent` and fails with [`ReasonError::TimedOut`].
pub(crate) struct TimedReasoner {
    pub(crate) inner: Arc<dyn Reasoner>,
    pub(crate) limit_ms: u64,
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
        match crate::offclock::bounded(Duration::from_millis(self.limit_ms), work).await {
            Some(result) => result,
            None => {
                let reasoner = self.inner.name().to_owned();
                tracing::warn!(agent = %self.agent, %reasoner, call, limit_ms = self.limit_ms, "reasoning call timed out");
                let event = AuditEvent::TimedOut {
                    limit: Limit::Reasoning,
                    what: format!("reasoning call `{call}` of reasoner `{reasoner}`"),
                    limit_ms: self.limit_ms,
                };
                // The error below fails the heartbeat, which audits it too; a log that cannot
                // take this record fails the next append the same way.
                if let Err(error) = self.audit.append(&self.agent, self.clock.now(), event).await {
                    tracing::warn!(agent = %self.agent, %error, "could not audit a reasoning timeout");
                }
                Err(ReasonError::TimedOut {
                    reasoner,
                    call: call.to_owned(),
                    limit_ms: self.limit_ms,
                })
            }
        }
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

    async fn vote(&self, who: Persona<'_>, conflict: &Conflict) -> Result<String, ReasonError> {
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
