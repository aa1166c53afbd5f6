//! A scripted reasoner for tests: answers from a list or a function and records every request,
//! so a team can be tested without a model.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex, PoisonError};

use agent_state::{AgentId, Decision, RoleBook, Subtask, SubtaskResult, Task, WorkPackage};
use async_trait::async_trait;

use crate::reasoner::{
    Candidate, Conflict, Judgement, NextAction, Persona, Placement, Plan, ReasonError, Reasoner,
    ToolCallRecord, Verdict,
};

/// One question a layer asked its reasoner, with who asked.
#[derive(Clone, Debug, PartialEq)]
pub enum ReasoningRequest {
    /// A top power reviews a decision.
    Review {
        /// Who asked.
        agent: AgentId,
        /// The decision.
        decision: Decision,
    },
    /// A top power votes on a conflict.
    Vote {
        /// Who asked.
        agent: AgentId,
        /// The conflict.
        conflict: Conflict,
    },
    /// A lead places its work package on its executors.
    Decompose {
        /// Who asked.
        agent: AgentId,
        /// The work package.
        work: WorkPackage,
        /// The executors it could use.
        team: Vec<Candidate>,
    },
    /// An executor chooses its next tool call.
    NextAction {
        /// Who asked.
        agent: AgentId,
        /// The subtask.
        subtask: Subtask,
        /// The calls made so far.
        history: Vec<ToolCallRecord>,
    },
    /// A top power judges a task.
    Judge {
        /// Who asked.
        agent: AgentId,
        /// The task.
        task: Task,
        /// Its results.
        results: Vec<SubtaskResult>,
    },
    /// A top power plans a goal.
    Plan {
        /// Who asked.
        agent: AgentId,
        /// The task (its goal; steps if the submitter gave some).
        task: Task,
        /// The roles the team has.
        roles: RoleBook,
    },
    /// An agent answers what its supervisor or a subordinate said to it.
    Answer {
        /// Who asked.
        agent: AgentId,
        /// Who spoke.
        from: AgentId,
        /// What was said.
        message: String,
        /// What the agent is doing.
        context: String,
    },
    /// An executor kind asks for text (a draft, notes, a summary).
    Compose {
        /// Who asked.
        agent: AgentId,
        /// What to write.
        instruction: String,
        /// What to write it from.
        material: String,
    },
}

impl ReasoningRequest {
    /// The agent that asked.
    pub fn agent(&self) -> &AgentId {
        match self {
            ReasoningRequest::Review { agent, .. }
            | ReasoningRequest::Vote { agent, .. }
            | ReasoningRequest::Decompose { agent, .. }
            | ReasoningRequest::NextAction { agent, .. }
            | ReasoningRequest::Judge { agent, .. }
            | ReasoningRequest::Plan { agent, .. }
            | ReasoningRequest::Answer { agent, .. }
            | ReasoningRequest::Compose { agent, .. } => agent,
        }
    }

    fn kind(&self) -> &'static str {
        match self {
            ReasoningRequest::Review { .. } => "review",
            ReasoningRequest::Vote { .. } => "vote",
            ReasoningRequest::Decompose { .. } => "decompose",
            ReasoningRequest::NextAction { .. } => "next action",
            ReasoningRequest::Judge { .. } => "judge",
            ReasoningRequest::Plan { .. } => "plan",
            ReasoningRequest::Answer { .. } => "answer",
            ReasoningRequest::Compose { .. } => "compose",
        }
    }
}

/// One scripted answer; its kind must match the question it answers.
#[derive(Clone, Debug, PartialEq)]
pub enum ScriptedAnswer {
    /// For a review.
    Verdict(Verdict),
    /// For a vote.
    Vote(agent_state::BallotChoice),
    /// For a decomposition.
    Placements(Vec<Placement>),
    /// For a next action.
    Action(NextAction),
    /// For a judgement.
    Judgement(Judgement),
    /// For a plan.
    Plan(Plan),
    /// For an answer to what was said.
    Reply(String),
    /// For a text an executor kind asked to compose.
    Compose(String),
    /// Any question: the reasoner fails with this error.
    Fail(ReasonError),
    /// Any question: answer as the fallback reasoner would.
    Fallback,
}

impl ScriptedAnswer {
    fn kind(&self) -> &'static str {
        match self {
            ScriptedAnswer::Verdict(_) => "review",
            ScriptedAnswer::Vote(_) => "vote",
            ScriptedAnswer::Placements(_) => "decompose",
            ScriptedAnswer::Action(_) => "next action",
            ScriptedAnswer::Judgement(_) => "judge",
            ScriptedAnswer::Plan(_) => "plan",
            ScriptedAnswer::Reply(_) => "answer",
            ScriptedAnswer::Compose(_) => "compose",
            ScriptedAnswer::Fail(_) => "fail",
            ScriptedAnswer::Fallback => "fallback",
        }
    }
}

type AnswerFn = dyn Fn(&ReasoningRequest) -> ScriptedAnswer + Send + Sync;

enum Script {
    List(VecDeque<ScriptedAnswer>),
    Function(Box<AnswerFn>),
}

/// A reasoner that answers from a script and records every request.
///
/// With [`ScriptedReasoner::from_answers`] it answers in order; once the list is used up (or for
/// [`ScriptedAnswer::Fallback`]) it asks its fallback, the [`RuleBasedReasoner`](crate::RuleBasedReasoner)
/// unless [`with_fallback`](ScriptedReasoner::with_fallback) gave another. With
/// [`ScriptedReasoner::from_fn`] a function answers each request. An answer of the wrong kind
/// for the question is a [`ReasonError::BadQuestion`] naming both, so a script that drifts out of
/// step with the team fails loudly.
///
/// ```
/// use agent_core::{Reasoner, ScriptedAnswer, ScriptedReasoner, Verdict};
///
/// let veto = ScriptedReasoner::from_answers([ScriptedAnswer::Verdict(Verdict::Veto {
///     reason: "not today".into(),
/// })]);
/// assert_eq!(veto.name(), "scripted");
/// assert!(veto.requests().is_empty());
/// ```
pub struct ScriptedReasoner {
    script: Mutex<Script>,
    requests: Mutex<Vec<ReasoningRequest>>,
    fallback: Arc<dyn Reasoner>,
}

impl ScriptedReasoner {
    /// Answers these, in order, then defers to the fallback.
    pub fn from_answers(answers: impl IntoIterator<Item = ScriptedAnswer>) -> Self {
        Self::with_script(Script::List(answers.into_iter().collect()))
    }

    /// Answers every request with `answer(request)`.
    pub fn from_fn(
        answer: impl Fn(&ReasoningRequest) -> ScriptedAnswer + Send + Sync + 'static,
    ) -> Self {
        Self::with_script(Script::Function(Box::new(answer)))
    }

    fn with_script(script: Script) -> Self {
        Self {
            script: Mutex::new(script),
            requests: Mutex::new(Vec::new()),
            fallback: Arc::new(crate::RuleBasedReasoner::new()),
        }
    }

    /// Uses `fallback` once the list is used up and for [`ScriptedAnswer::Fallback`].
    #[must_use]
    pub fn with_fallback(mut self, fallback: Arc<dyn Reasoner>) -> Self {
        self.fallback = fallback;
        self
    }

    /// Every request so far, in order.
    pub fn requests(&self) -> Vec<ReasoningRequest> {
        self.requests.lock().unwrap_or_else(PoisonError::into_inner).clone()
    }

    /// How many scripted answers are left (0 for a function).
    pub fn remaining(&self) -> usize {
        match &*self.script.lock().unwrap_or_else(PoisonError::into_inner) {
            Script::List(list) => list.len(),
            Script::Function(_) => 0,
        }
    }

    /// Records `request` and picks its answer.
    fn pick(&self, request: ReasoningRequest) -> ScriptedAnswer {
        let answer = match &mut *self.script.lock().unwrap_or_else(PoisonError::into_inner) {
            Script::List(list) => list.pop_front().unwrap_or(ScriptedAnswer::Fallback),
            Script::Function(f) => f(&request),
        };
        self.requests.lock().unwrap_or_else(PoisonError::into_inner).push(request);
        answer
    }
}

fn mismatch(request_kind: &str, answer: &ScriptedAnswer) -> ReasonError {
    ReasonError::BadQuestion(format!(
        "the scripted reasoner was asked to {request_kind} but its next answer is a {} answer",
        answer.kind()
    ))
}

#[async_trait]
impl Reasoner for ScriptedReasoner {
    fn name(&self) -> &str {
        "scripted"
    }

    async fn review_decision(
        &self,
        who: Persona<'_>,
        decision: &Decision,
    ) -> Result<Verdict, ReasonError> {
        let request =
            ReasoningRequest::Review { agent: who.config.id.clone(), decision: decision.clone() };
        let kind = request.kind();
        match self.pick(request) {
            ScriptedAnswer::Verdict(v) => Ok(v),
            ScriptedAnswer::Fail(e) => Err(e),
            ScriptedAnswer::Fallback => self.fallback.review_decision(who, decision).await,
            other => Err(mismatch(kind, &other)),
        }
    }

    async fn vote(
        &self,
        who: Persona<'_>,
        conflict: &Conflict,
    ) -> Result<agent_state::BallotChoice, ReasonError> {
        let request =
            ReasoningRequest::Vote { agent: who.config.id.clone(), conflict: conflict.clone() };
        let kind = request.kind();
        match self.pick(request) {
            ScriptedAnswer::Vote(v) => Ok(v),
            ScriptedAnswer::Fail(e) => Err(e),
            ScriptedAnswer::Fallback => self.fallback.vote(who, conflict).await,
            other => Err(mismatch(kind, &other)),
        }
    }

    async fn decompose(
        &self,
        who: Persona<'_>,
        work: &WorkPackage,
        team: &[Candidate],
    ) -> Result<Vec<Placement>, ReasonError> {
        let request = ReasoningRequest::Decompose {
            agent: who.config.id.clone(),
            work: work.clone(),
            team: team.to_vec(),
        };
        let kind = request.kind();
        match self.pick(request) {
            ScriptedAnswer::Placements(p) => Ok(p),
            ScriptedAnswer::Fail(e) => Err(e),
            ScriptedAnswer::Fallback => self.fallback.decompose(who, work, team).await,
            other => Err(mismatch(kind, &other)),
        }
    }

    async fn next_action(
        &self,
        who: Persona<'_>,
        subtask: &Subtask,
        history: &[ToolCallRecord],
    ) -> Result<NextAction, ReasonError> {
        let request = ReasoningRequest::NextAction {
            agent: who.config.id.clone(),
            subtask: subtask.clone(),
            history: history.to_vec(),
        };
        let kind = request.kind();
        match self.pick(request) {
            ScriptedAnswer::Action(a) => Ok(a),
            ScriptedAnswer::Fail(e) => Err(e),
            ScriptedAnswer::Fallback => self.fallback.next_action(who, subtask, history).await,
            other => Err(mismatch(kind, &other)),
        }
    }

    async fn judge_progress(
        &self,
        who: Persona<'_>,
        task: &Task,
        results: &[SubtaskResult],
        global_board: &str,
    ) -> Result<Judgement, ReasonError> {
        let request = ReasoningRequest::Judge {
            agent: who.config.id.clone(),
            task: task.clone(),
            results: results.to_vec(),
        };
        let kind = request.kind();
        match self.pick(request) {
            ScriptedAnswer::Judgement(j) => Ok(j),
            ScriptedAnswer::Fail(e) => Err(e),
            ScriptedAnswer::Fallback => {
                self.fallback.judge_progress(who, task, results, global_board).await
            }
            other => Err(mismatch(kind, &other)),
        }
    }

    /// A scripted reasoner is the test kit for goal-driven teams: it plans when its script
    /// gives a plan.
    fn plans(&self) -> bool {
        true
    }

    async fn plan(
        &self,
        who: Persona<'_>,
        task: &Task,
        roles: &RoleBook,
    ) -> Result<Plan, ReasonError> {
        let request = ReasoningRequest::Plan {
            agent: who.config.id.clone(),
            task: task.clone(),
            roles: roles.clone(),
        };
        let kind = request.kind();
        match self.pick(request) {
            ScriptedAnswer::Plan(p) => Ok(p),
            ScriptedAnswer::Fail(e) => Err(e),
            ScriptedAnswer::Fallback => self.fallback.plan(who, task, roles).await,
            other => Err(mismatch(kind, &other)),
        }
    }

    async fn answer(
        &self,
        who: Persona<'_>,
        from: &AgentId,
        message: &str,
        context: &str,
    ) -> Result<String, ReasonError> {
        let request = ReasoningRequest::Answer {
            agent: who.config.id.clone(),
            from: from.clone(),
            message: message.to_owned(),
            context: context.to_owned(),
        };
        let kind = request.kind();
        match self.pick(request) {
            ScriptedAnswer::Reply(r) => Ok(r),
            ScriptedAnswer::Fail(e) => Err(e),
            ScriptedAnswer::Fallback => self.fallback.answer(who, from, message, context).await,
            other => Err(mismatch(kind, &other)),
        }
    }

    /// Answers with a scripted [`ScriptedAnswer::Compose`]; its fallback (the rule-based
    /// reasoner unless another was given) cannot write:
    /// [`ReasonError::NeedsModel`].
    async fn compose(
        &self,
        who: Persona<'_>,
        instruction: &str,
        material: &str,
    ) -> Result<String, ReasonError> {
        let request = ReasoningRequest::Compose {
            agent: who.config.id.clone(),
            instruction: instruction.to_owned(),
            material: material.to_owned(),
        };
        let kind = request.kind();
        match self.pick(request) {
            ScriptedAnswer::Compose(text) => Ok(text),
            ScriptedAnswer::Fail(e) => Err(e),
            ScriptedAnswer::Fallback => self.fallback.compose(who, instruction, material).await,
            other => Err(mismatch(kind, &other)),
        }
    }
}
