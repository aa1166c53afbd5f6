//! Where the teams of a suite's tasks run: the [`TaskServices`] a
//! [`SuiteEvaluator`](crate::SuiteEvaluator) asks for each task's team (its stores, workspace,
//! sandbox, tools and reasoners), and the built-in [`InMemoryServices`] (in-memory backends,
//! the built-in tools, one sandbox for every agent, a rule-based reasoner unless the program
//! gives another).
//!
//! A program that runs teams from team files gives the evaluator its own: the `strata` crate's
//! (`strata::evolve`) builds each task's services as `strata run` builds a run's, with the
//! team file's sandbox, per-agent network rule and reasoners.

use std::path::Path;
use std::sync::Arc;

use agent_core::tools::{Sandbox, ToolContext};
use agent_core::{Reasoner, RuleBasedReasoner};
use agent_pool::{TeamServices, TeamSpec};
use agent_state::evolution::Genome;
use async_trait::async_trait;

use crate::evolve::EvalError;
use crate::suite::TaskSuite;

/// Reads how many model tokens a reasoning has used so far.
pub type TokenMeter = Arc<dyn Fn() -> u64 + Send + Sync>;

/// One task's team about to start: what its services are made for.
#[derive(Clone, Copy)]
pub struct TaskSetup<'a> {
    /// The suite (its team file: the sandbox, network and reasoner settings).
    pub suite: &'a TaskSuite,
    /// The genome under evaluation.
    pub genome: &'a Genome,
    /// The team the genome makes of the suite's team ([`TaskSuite::team_for`]).
    pub spec: &'a TeamSpec,
    /// The task's fresh workspace, with the task's files and the genome's code in it.
    pub workspace: &'a Path,
}

/// The services of one task's team, and the meter of the tokens its reasoning uses.
pub struct TaskTeam {
    /// What the team runs on.
    pub services: TeamServices,
    /// Tokens used so far by the team's reasoning; `None` when it uses no model (then the
    /// task's tokens are not counted).
    pub tokens: Option<TokenMeter>,
}

/// Makes the services each task's team runs on. The evaluator asks once per task run, with a
/// fresh workspace each time.
#[async_trait]
pub trait TaskServices: Send + Sync + 'static {
    /// The sandbox the tasks' check commands run in (the teams' `shell` commands run in the
    /// one of their services' workspace, normally the same).
    fn sandbox(&self) -> &Sandbox;

    /// The services of the team of one task.
    async fn services(&self, setup: TaskSetup<'_>) -> Result<TaskTeam, EvalError>;
}

/// What the agents of one task's team reason with: a reasoner and, for one that uses a model,
/// a meter of the tokens it has used so far (read before and after the task).
#[derive(Clone)]
pub struct Reasoning {
    /// The reasoner of every agent of the team.
    pub reasoner: Arc<dyn Reasoner>,
    /// Tokens used so far by `reasoner`; `None` when it uses no model.
    pub tokens: Option<TokenMeter>,
}

/// Makes the reasoning of each task run, for the genome under evaluation (which may name a
/// model and a temperature).
pub type ReasoningFactory = Arc<dyn Fn(&Genome) -> Reasoning + Send + Sync>;

/// The built-in services: every task's team on in-memory backends
/// ([`TeamServices::in_memory`]) with the built-in tools, its commands in one sandbox, every
/// agent reasoning as the [`ReasoningFactory`] says for the genome.
#[derive(Clone)]
pub struct InMemoryServices {
    sandbox: Sandbox,
    reasoning: ReasoningFactory,
}

impl InMemoryServices {
    /// Services with commands in `sandbox` and the reasoning `reasoning` makes.
    pub fn new(sandbox: Sandbox, reasoning: ReasoningFactory) -> Self {
        Self { sandbox, reasoning }
    }

    /// Services with commands in `sandbox`, every agent on the rule-based reasoner with the
    /// `suite` team's default reasoner settings (`forbid_tools`, `prefer`).
    pub fn rule_based(suite: &TaskSuite, sandbox: Sandbox) -> Self {
        let settings = &suite.team.default_reasoner;
        let reasoner: Arc<dyn Reasoner> = Arc::new(
            RuleBasedReasoner::new()
                .forbid_tools(settings.forbid_tools.iter().cloned())
                .prefer(settings.prefer.iter().cloned()),
        );
        Self::new(sandbox, fixed(reasoner))
    }
}

/// The same reasoner for every genome, its tokens not metered.
pub(crate) fn fixed(reasoner: Arc<dyn Reasoner>) -> ReasoningFactory {
    Arc::new(move |_| Reasoning { reasoner: reasoner.clone(), tokens: None })
}

#[async_trait]
impl TaskServices for InMemoryServices {
    fn sandbox(&self) -> &Sandbox {
        &self.sandbox
    }

    async fn services(&self, setup: TaskSetup<'_>) -> Result<TaskTeam, EvalError> {
        let workspace = ToolContext::new(setup.workspace)
            .map_err(|e| EvalError::new(format!("cannot use the workspace: {e}")))?
            .with_sandbox(self.sandbox.clone());
        let reasoning = (self.reasoning)(setup.genome);
        let services = TeamServices::in_memory(workspace, reasoning.reasoner);
        Ok(TaskTeam { services, tokens: reasoning.tokens })
    }
}
