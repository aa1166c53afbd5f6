//! [`StuckReasoner`]: a model that never answers, or answers a vote only after a slow
//! trickle of tokens, for tests of the reasoning and silence limits.

use std::time::Duration;

use agent_state::{Decision, RoleBook, Subtask, SubtaskResult, Task, WorkPackage};
use async_trait::async_trait;

use crate::{
    Candidate, Conflict, Judgement, NextAction, Persona, Placement, Plan, ReasonError, Reasoner,
    ToolCallRecord, Verdict,
};

/// A reasoner that never answers (every call waits for ever), except, when it trickles, a
/// `vote`: a token every `every` ([`progress::tokens`](crate::progress::tokens)), `tokens` of
/// them, then the answer `a`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StuckReasoner {
    trickle: Option<(Duration, u32)>,
}

impl StuckReasoner {
    /// A reasoner named `silent` that never answers any call.
    pub fn silent() -> Self {
        Self { trickle: None }
    }

    /// A reasoner named `trickle` (a slow model): its `vote` produces a token every `every`,
    /// `tokens` of them, then answers `a`; every other call never answers.
    pub fn trickling(every: Duration, tokens: u32) -> Self {
        Self { trickle: Some((every, tokens)) }
    }
}

#[async_trait]
impl Reasoner for StuckReasoner {
    fn name(&self) -> &str {
        if self.trickle.is_some() { "trickle" } else { "silent" }
    }

    async fn review_decision(&self, _: Persona<'_>, _: &Decision) -> Result<Verdict, ReasonError> {
        std::future::pending().await
    }

    async fn vote(
        &self,
        _: Persona<'_>,
        _: &Conflict,
    ) -> Result<agent_state::BallotChoice, ReasonError> {
        let Some((every, tokens)) = self.trickle else { return std::future::pending().await };
        for _ in 0..tokens {
            tokio::time::sleep(every).await;
            crate::progress::tokens(1);
        }
        Ok("a".into())
    }

    async fn decompose(
        &self,
        _: Persona<'_>,
        _: &WorkPackage,
        _: &[Candidate],
    ) -> Result<Vec<Placement>, ReasonError> {
        std::future::pending().await
    }

    async fn next_action(
        &self,
        _: Persona<'_>,
        _: &Subtask,
        _: &[ToolCallRecord],
    ) -> Result<NextAction, ReasonError> {
        std::future::pending().await
    }

    async fn judge_progress(
        &self,
        _: Persona<'_>,
        _: &Task,
        _: &[SubtaskResult],
        _: &str,
    ) -> Result<Judgement, ReasonError> {
        std::future::pending().await
    }

    async fn plan(&self, _: Persona<'_>, _: &Task, _: &RoleBook) -> Result<Plan, ReasonError> {
        std::future::pending().await
    }
}
