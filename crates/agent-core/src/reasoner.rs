//! The reasoning hook: every judgement a layer makes goes through [`Reasoner`], and
//! [`RuleBasedReasoner`] is the deterministic default.

use agent_state::{
    AgentConfig, AgentId, BallotChoice, Decision, LeadRequest, PlanStep, RoleBook, StepTarget,
    Subtask, SubtaskResult, Task, WorkPackage,
};
use async_trait::async_trait;
use serde::{Deserialize, Serialize};
use thiserror::Error;

/// The `kind` in the content of a decision asking the top layer to extend a run's reasoning
/// budget (proposed by agent-llm's `ApprovalDesk`).
pub const BUDGET_EXTENSION_KIND: &str = "budget_extension";

/// Who is asking: the agent's configuration and its system prompt.
#[derive(Clone, Copy, Debug)]
pub struct Persona<'a> {
    /// The agent's configuration.
    pub config: &'a AgentConfig,
    /// Its system prompt.
    pub system_prompt: &'a str,
    /// The tools it holds now, when its layer says (an executor's workspace tools, and the
    /// supervisor tools of an agent whose role may spawn); empty: the reasoner's own idea of
    /// its tools (such as agent-llm's per-agent map).
    pub tools: &'a [String],
    /// The roles it may spawn with `spawn_agent`, each with what it is for; empty for an agent
    /// that may not spawn.
    pub roles: &'a [(String, String)],
    /// The domains of the leads it has already, for a planning agent (a layered team's
    /// proposing power with fixed `[[mid]]` leads): a plan's steps may go to them, and without
    /// lead roles to create others they are the only domains a step can be placed in. Empty:
    /// none, the domains are the plan's own (or any, for a crew or a single agent).
    pub domains: &'a [String],
}

/// A plan the top layer's reasoner made from a goal in words: the steps (goal steps, which say
/// what to do and leave the tool calls to the executors, or scripted ones) and the mid-layer
/// leads to create for them (dynamic team formation, docs/concepts.md#roles-and-spawning).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Plan {
    /// The steps, in order; `after` names earlier steps.
    pub steps: Vec<PlanStep>,
    /// The leads to create, each for one domain that steps target.
    #[serde(default)]
    pub leads: Vec<LeadRequest>,
}

/// A top power's answer to a signature request.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "verdict", rename_all = "snake_case")]
pub enum Verdict {
    /// Sign.
    Sign,
    /// Veto, with the reason.
    Veto {
        /// Why.
        reason: String,
    },
}

/// A conflict put to the top layer.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Conflict {
    /// Id, unique within a run.
    pub id: String,
    /// What the conflict is about.
    pub issue: String,
    /// The agents in conflict.
    pub parties: Vec<AgentId>,
    /// The resolutions to choose from; at least one.
    pub options: Vec<BallotChoice>,
}

/// An executor a lead can assign work to.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Candidate {
    /// The executor.
    pub id: AgentId,
    /// The tools it has.
    pub tools: std::sync::Arc<[String]>,
    /// Subtasks it holds now.
    pub load: usize,
    /// Whether it can take work (not dismissed).
    pub available: bool,
    /// Whether it is failed now (retries exhausted); a lead prefers healthy executors, and a new
    /// assignment brings a failed one back to working.
    pub failed: bool,
}

/// A step placed on an executor.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Placement {
    /// The step.
    pub step: PlanStep,
    /// The executor.
    pub assignee: AgentId,
}

/// The tool a reasoner's tool loop offers for ending a subtask (`NextAction::Finish`); a
/// finish the runtime puts off while workers still work stays in the history under this name.
pub const FINISH_TOOL: &str = "finish_subtask";

/// One tool call.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ToolCall {
    /// The tool.
    pub tool: String,
    /// Its arguments.
    pub args: serde_json::Value,
}

/// A tool call and what came of it, fed back to the reasoner.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ToolCallRecord {
    /// The call.
    pub call: ToolCall,
    /// Whether it succeeded.
    pub success: bool,
    /// Its output or error.
    pub output: String,
    /// Not a call this agent made but something that reached it while it worked (a worker's
    /// results, words spoken to it), kept in the history under `call.tool`: a model is shown
    /// it as a message, not as a call of its own.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub event: bool,
}

/// What an executor does next for its subtask.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "action", rename_all = "snake_case")]
pub enum NextAction {
    /// Call a tool.
    Call(ToolCall),
    /// Stop: the subtask is done (or cannot be done).
    Finish {
        /// Whether it succeeded.
        success: bool,
        /// What was done.
        summary: String,
    },
}

/// A judgement of a task's progress.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Judgement {
    /// Whether the task is complete and acceptable.
    pub complete: bool,
    /// In words.
    pub summary: String,
}

/// A reasoner could not decide.
#[derive(Clone, Debug, PartialEq, Eq, Error)]
pub enum ReasonError {
    /// A step cannot be placed on any executor.
    #[error("step `{step}` cannot be placed: {reason}")]
    Unplaceable {
        /// The step.
        step: String,
        /// Why.
        reason: String,
    },
    /// The question itself is malformed (no options to vote on, and so on).
    #[error("cannot decide: {0}")]
    BadQuestion(String),
    /// This reasoner cannot turn a goal in words into a plan.
    #[error(
        "reasoner `{reasoner}` cannot plan from a goal in words; give the top layer a model \
         reasoner (`--reasoner openai`, `anthropic` or `local`), or give every step a `tool` and \
         its `args`"
    )]
    CannotPlan {
        /// The reasoner.
        reasoner: String,
    },
    /// This reasoner cannot write text in words (an executor kind's draft, notes or summary).
    #[error(
        "reasoner `{reasoner}` cannot {what}: that needs a model reasoner (`--reasoner openai`, \
         `anthropic` or `local`)"
    )]
    NeedsModel {
        /// The reasoner.
        reasoner: String,
        /// What it was asked to do, in words (`draft a report`).
        what: String,
    },
    /// The call ran past the team's reasoning limit (`[timeouts] reasoning_ms`) and was
    /// stopped. Transient: the heartbeat that made it is retried (up to the agent's
    /// `max_retries`), since a slow model may answer in time on the next try.
    #[error(
        "reasoner `{reasoner}` did not answer `{call}` within {limit_ms} ms; raise \
         `reasoning_ms` in the team file's `[timeouts]`, or use a faster model"
    )]
    TimedOut {
        /// The reasoner.
        reasoner: String,
        /// The call (`next_action`, `plan`, ...).
        call: String,
        /// The limit, in milliseconds.
        limit_ms: u64,
    },
    /// The call produced nothing (no token, no prompt batch read) for the team's silence limit
    /// (`[timeouts] silence_ms`) and was stopped. Transient, as [`TimedOut`](Self::TimedOut).
    #[error(
        "reasoner `{reasoner}` timed out: `{call}` produced nothing for {silence_ms} ms; raise \
         `silence_ms` in the team file's `[timeouts]` (a slow server reading a long prompt is \
         silent until its first token), or check that the model server is up"
    )]
    Silent {
        /// The reasoner.
        reasoner: String,
        /// The call (`next_action`, `plan`, ...).
        call: String,
        /// The silence limit, in milliseconds.
        silence_ms: u64,
    },
    /// The reasoning backend failed.
    #[error("reasoner `{reasoner}` failed: {message}")]
    Backend {
        /// The reasoner.
        reasoner: String,
        /// What failed.
        message: String,
    },
}

/// The decisions the layers delegate. Object-safe: hold it as `Arc<dyn Reasoner>`.
///
/// Implementations: [`RuleBasedReasoner`] here; LLM reasoners plug into the same trait.
#[async_trait]
pub trait Reasoner: Send + Sync + 'static {
    /// A short name for logs and the audit log.
    fn name(&self) -> &str;

    /// A top power reviews a decision: sign or veto.
    async fn review_decision(
        &self,
        who: Persona<'_>,
        decision: &Decision,
    ) -> Result<Verdict, ReasonError>;

    /// A top power votes on a conflict: one of `conflict.options`.
    async fn vote(
        &self,
        who: Persona<'_>,
        conflict: &Conflict,
    ) -> Result<BallotChoice, ReasonError>;

    /// A lead places each step of its work package on one of its executors.
    async fn decompose(
        &self,
        who: Persona<'_>,
        work: &WorkPackage,
        team: &[Candidate],
    ) -> Result<Vec<Placement>, ReasonError>;

    /// An executor chooses its next tool call, given what its calls returned so far.
    async fn next_action(
        &self,
        who: Persona<'_>,
        subtask: &Subtask,
        history: &[ToolCallRecord],
    ) -> Result<NextAction, ReasonError>;

    /// A top power judges whether a task is complete from its results and the global board.
    async fn judge_progress(
        &self,
        who: Persona<'_>,
        task: &Task,
        results: &[SubtaskResult],
        global_board: &str,
    ) -> Result<Judgement, ReasonError>;

    /// Whether this reasoner can plan from a goal in words ([`plan`](Reasoner::plan)) and
    /// carry out goal steps, which name no tool. `false` by default: a team refuses a
    /// goal-only task before it starts when its reasoners cannot.
    fn plans(&self) -> bool {
        false
    }

    /// A top power turns the goal of `task` into a plan: steps (with the role each needs,
    /// dependencies and acceptance checks) and the mid-layer leads to create from `roles`.
    /// The default cannot: [`ReasonError::CannotPlan`].
    async fn plan(
        &self,
        _who: Persona<'_>,
        _task: &Task,
        _roles: &RoleBook,
    ) -> Result<Plan, ReasonError> {
        Err(ReasonError::CannotPlan { reasoner: self.name().to_owned() })
    }

    /// The tool loop of `subtask` ended for good with `ending` (what it concluded, in words)
    /// after the calls in `history`; a finish the runtime puts off (workers still running) is
    /// not an ending. A reasoner that keeps conversations remembers the step now. The default
    /// does nothing.
    async fn concluded(
        &self,
        _who: Persona<'_>,
        _subtask: &Subtask,
        _history: &[ToolCallRecord],
        _ending: &str,
    ) -> Result<(), ReasonError> {
        Ok(())
    }

    /// Writes text for an executor kind: `instruction` says what to write (a
    /// report, an email body, research notes), `material` what to write it from (documents,
    /// fetched pages, earlier output). The default cannot: [`ReasonError::NeedsModel`], and
    /// the kinds then do the deterministic part of their work and say what needs a model.
    async fn compose(
        &self,
        _who: Persona<'_>,
        instruction: &str,
        _material: &str,
    ) -> Result<String, ReasonError> {
        Err(ReasonError::NeedsModel {
            reasoner: self.name().to_owned(),
            what: format!("write text ({})", instruction.chars().take(60).collect::<String>()),
        })
    }

    /// An agent answers `message`, spoken to it by `from` (its supervisor or a subordinate,
    /// through `speak_to_agent`), knowing `context` (what it is doing). The default answers
    /// with the context itself: where the work stands.
    async fn answer(
        &self,
        _who: Persona<'_>,
        _from: &AgentId,
        _message: &str,
        context: &str,
    ) -> Result<String, ReasonError> {
        Ok(if context.trim().is_empty() { "idle: no work in hand".into() } else { context.into() })
    }
}

/// The deterministic default reasoner. Its rules:
///
/// - **review**: veto a budget extension (content `"kind": "budget_extension"`, see agent-llm:
///   approving more spending takes judgement a rule cannot supply); veto a plan whose content
///   has no steps, or any step using a tool in `forbidden_tools` (reason: `risk assessment
///   failed: step S uses forbidden tool T`); else sign.
/// - **vote**: the first option that appears in `preferences`, else the first option.
/// - **decompose**: a step targeting an executor of this lead goes to it if available; otherwise
///   to an available executor with that tool, preferring healthy over failed ones, then the least
///   load, then the lowest id; none → [`ReasonError::Unplaceable`].
/// - **next action**: call the step's own tool with its own arguments once; then finish with
///   that call's outcome.
/// - **judge**: complete exactly when every step of the task has a successful result.
#[derive(Clone, Debug, Default)]
pub struct RuleBasedReasoner {
    forbidden_tools: Vec<String>,
    preferences: Vec<BallotChoice>,
}

impl RuleBasedReasoner {
    /// A reasoner that signs every plan with steps and votes for the first option.
    pub fn new() -> Self {
        Self::default()
    }

    /// Vetoes plans that use any of these tools.
    pub fn forbid_tools<I: IntoIterator<Item = S>, S: Into<String>>(mut self, tools: I) -> Self {
        self.forbidden_tools = tools.into_iter().map(Into::into).collect();
        self
    }

    /// Votes for the first of these options that is on the ballot.
    pub fn prefer<I: IntoIterator<Item = S>, S: Into<BallotChoice>>(mut self, options: I) -> Self {
        self.preferences = options.into_iter().map(Into::into).collect();
        self
    }
}

#[async_trait]
impl Reasoner for RuleBasedReasoner {
    fn name(&self) -> &str {
        "rule-based"
    }

    async fn review_decision(
        &self,
        _who: Persona<'_>,
        decision: &Decision,
    ) -> Result<Verdict, ReasonError> {
        if decision.content.get("kind").and_then(|k| k.as_str()) == Some(BUDGET_EXTENSION_KIND) {
            return Ok(Verdict::Veto {
                reason: "the rule-based reasoner does not approve budget extensions; give the top powers a model reasoner or raise the budget".into(),
            });
        }
        let steps = decision.content.get("steps").and_then(|s| s.as_array());
        let Some(steps) = steps.filter(|s| !s.is_empty()) else {
            return Ok(Verdict::Veto {
                reason: "risk assessment failed: the plan has no steps".into(),
            });
        };
        for step in steps {
            let tool = step.get("tool").and_then(|t| t.as_str()).unwrap_or_default();
            if self.forbidden_tools.iter().any(|f| f == tool) {
                let id = step.get("id").and_then(|t| t.as_str()).unwrap_or("?");
                return Ok(Verdict::Veto {
                    reason: format!(
                        "risk assessment failed: step `{id}` uses forbidden tool `{tool}`"
                    ),
                });
            }
        }
        Ok(Verdict::Sign)
    }

    async fn vote(
        &self,
        _who: Persona<'_>,
        conflict: &Conflict,
    ) -> Result<BallotChoice, ReasonError> {
        if let Some(p) = self.preferences.iter().find(|p| conflict.options.contains(p)) {
            return Ok(p.clone());
        }
        conflict.options.first().cloned().ok_or_else(|| {
            ReasonError::BadQuestion(format!("conflict `{}` has no options", conflict.id))
        })
    }

    async fn decompose(
        &self,
        _who: Persona<'_>,
        work: &WorkPackage,
        team: &[Candidate],
    ) -> Result<Vec<Placement>, ReasonError> {
        let mut load: Vec<usize> = team.iter().map(|c| c.load).collect();
        let mut placements = Vec::with_capacity(work.steps.len());
        for step in &work.steps {
            let named = match &step.target {
                StepTarget::Agent(id) => team.iter().position(|c| &c.id == id && c.available),
                _ => None,
            };
            let chosen = named.or_else(|| {
                team.iter()
                    .enumerate()
                    .filter(|(_, c)| {
                        c.available && (!step.is_scripted() || c.tools.contains(&step.tool))
                    })
                    .min_by(|(i, a), (j, b)| {
                        (a.failed, load[*i], &a.id).cmp(&(b.failed, load[*j], &b.id))
                    })
                    .map(|(i, _)| i)
            });
            let Some(i) = chosen else {
                return Err(ReasonError::Unplaceable {
                    step: step.id.clone(),
                    reason: format!("no available executor has the tool `{}`", step.tool),
                });
            };
            load[i] += 1;
            placements.push(Placement { step: step.clone(), assignee: team[i].id.clone() });
        }
        Ok(placements)
    }

    async fn next_action(
        &self,
        _who: Persona<'_>,
        subtask: &Subtask,
        history: &[ToolCallRecord],
    ) -> Result<NextAction, ReasonError> {
        Ok(match history.last() {
            None => NextAction::Call(ToolCall {
                tool: subtask.step.tool.clone(),
                args: subtask.step.args.clone(),
            }),
            Some(last) => {
                NextAction::Finish { success: last.success, summary: last.output.clone() }
            }
        })
    }

    async fn judge_progress(
        &self,
        _who: Persona<'_>,
        task: &Task,
        results: &[SubtaskResult],
        _global_board: &str,
    ) -> Result<Judgement, ReasonError> {
        let done = task
            .steps
            .iter()
            .filter(|s| results.iter().any(|r| r.step_id == s.id && r.success))
            .count();
        Ok(Judgement {
            complete: done == task.steps.len(),
            summary: format!("{done} of {} steps succeeded", task.steps.len()),
        })
    }
}
