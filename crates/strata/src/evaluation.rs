//! Evolution's task teams on what `strata run` gives a run's team: [`TeamFileServices`], the
//! [`TaskServices`] of `strata evolve`. Each task's team gets the suite's team file's sandbox
//! (hiding the data directory), its per-agent network rule ([`services::network_tools`]), its
//! reasoners ([`reasoners::build`]) and its executor settings, all through the one assembly
//! of a run's services ([`services::assemble`]); only its stores are in memory, gone with the
//! task.
//!
//! ```no_run
//! # fn make(suite: agent_evolution::TaskSuite) -> Result<(), Box<dyn std::error::Error>> {
//! use std::sync::Arc;
//!
//! use agent_evolution::SuiteEvaluator;
//! use strata::evaluation::TeamFileServices;
//!
//! let services = TeamFileServices::new(&suite.team, false)?.hiding(".strata/runs");
//! let evaluator = SuiteEvaluator::with_services(suite, Arc::new(services));
//! # Ok(()) }
//! ```

use std::path::PathBuf;
use std::sync::Arc;

use agent_core::tools::{Sandbox, SandboxError, ToolRegistry};
use agent_evolution::{EvalError, TaskServices, TaskSetup, TaskTeam, TokenMeter};
use async_trait::async_trait;
use team_file::TeamFile;

use crate::reasoners::{self, Overrides};
use crate::services::{self, Parts};
use crate::stores::Stores;

/// The services of a suite's task teams, built from its team file as `strata run` builds a
/// run's.
#[derive(Clone)]
pub struct TeamFileServices {
    sandbox: Sandbox,
    tools: ToolRegistry,
}

impl TeamFileServices {
    /// The services of the task teams of `team` (a suite's team file): its sandbox, checked to
    /// work here ([`services::checked_sandbox`]), or none when `unsandboxed`; the built-in
    /// tools.
    pub fn new(team: &TeamFile, unsandboxed: bool) -> Result<Self, SandboxError> {
        let sandbox = services::checked_sandbox(team, unsandboxed)?;
        Ok(Self { sandbox, tools: ToolRegistry::with_builtins() })
    }

    /// The same services hiding `path` (a data directory) from the tasks' commands and file
    /// tools, as a run's sandbox hides its data directory.
    #[must_use]
    pub fn hiding(mut self, path: impl Into<PathBuf>) -> Self {
        self.sandbox = self.sandbox.hide(path);
        self
    }
}

#[async_trait]
impl TaskServices for TeamFileServices {
    fn sandbox(&self) -> &Sandbox {
        &self.sandbox
    }

    async fn services(&self, setup: TaskSetup<'_>) -> Result<TaskTeam, EvalError> {
        // The suite's team file with the genome's team: its network rule, reasoner settings
        // and executor settings are the file's, its executors the genome's.
        let team = TeamFile { spec: setup.spec.clone(), ..setup.suite.team.clone() };
        let stores = Stores::in_memory();
        let events = agent_core::EventHub::default();
        let boards = stores.boards.clone();
        let reasoning =
            reasoners::build(&team, &Overrides::default(), None, boards, &self.tools, &events)
                .await
                .map_err(|e| EvalError::new(format!("the suite's team's reasoners: {e}")))?;
        let workspace = services::workspace(setup.workspace, self.sandbox.clone())
            .map_err(|e| EvalError::new(e.chain_text()))?;
        let tokens = reasoning.ledger.clone().map(|ledger| -> TokenMeter {
            Arc::new(move || {
                let total = ledger.report().total;
                total.input_tokens + total.output_tokens
            })
        });
        let parts = Parts {
            stores,
            workspace: Arc::new(workspace),
            tools: self.tools.clone(),
            reasoning,
            events,
        };
        Ok(TaskTeam { services: services::assemble(&team, parts), tokens })
    }
}
