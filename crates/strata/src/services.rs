//! What a team file becomes before its team starts: the run's sandbox, the per-agent network
//! rule (its `shell` with or without the network), the reasoners (with the run's usage ledger
//! and conversations), the workspace and the executor of kinds: the [`TeamServices`] that
//! `strata run`, `strata resume`, the workers and evolution build their teams on.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use agent_core::TokioClock;
use agent_core::tools::{Sandbox, SandboxError, Shell, ToolContext, ToolRegistry};
use agent_llm::UsageLedger;
use agent_pool::TeamServices;
use agent_state::{AgentId, Task};
use run_store::RunStore;
use team_file::{ReasonerKind, TeamFile};

use crate::error::{Context as _, Error, Result};
use crate::reasoners;
use crate::run_dir::{ModelFlags, RunInfo};
use crate::stores::Stores;

/// The `--reasoner` kind, if one was given.
pub fn reasoner_kind(kind: Option<&str>) -> Result<Option<ReasonerKind>> {
    kind.map(|kind| {
        kind.parse::<ReasonerKind>()
            .map_err(|e| Error::bad_input(format!("--reasoner {kind}: {e}")))
    })
    .transpose()
}

/// What `--reasoner kind` and `flags` set over the team file's reasoner settings.
pub fn overrides(kind: Option<&str>, flags: &ModelFlags) -> Result<reasoners::Overrides> {
    Ok(reasoners::Overrides {
        kind: reasoner_kind(kind)?,
        base_url: flags.base_url.clone(),
        model: flags.model.clone(),
        openai_base_url: flags.openai_base_url.clone(),
        small_model: flags.small_model,
    })
}

/// Every reasoner setting of `team` (with `--reasoner kind` and `flags`), checked before
/// anything is written or marked: a wrong setting is bad input, a server that cannot answer
/// now is not.
pub async fn check_reasoners(
    team: &TeamFile,
    kind: Option<&str>,
    flags: &ModelFlags,
) -> Result<()> {
    match reasoners::check(team, &overrides(kind, flags)?).await {
        Ok(()) => Ok(()),
        Err(e @ reasoners::CheckError::Setting(_)) => Err(Error::bad_input_from(e)),
        Err(e @ reasoners::CheckError::Unavailable(_)) => Err(Error::failed_from(e)),
    }
}

/// The sandbox of a run's commands: the team file's, checked to work here (else the run is
/// refused, exit 2, saying how to fix it or to pass `--unsandboxed`), or none when
/// `unsandboxed`.
pub fn sandbox(team: &TeamFile, unsandboxed: bool) -> Result<Sandbox> {
    checked_sandbox(team, unsandboxed)
        .map_err(|err| Error::bad_input(format!("cannot start the run: {err}")))
}

/// The sandbox of [`sandbox`], or why it cannot work here, for a caller that says so in its
/// own words (an evolution).
pub fn checked_sandbox(team: &TeamFile, unsandboxed: bool) -> Result<Sandbox, SandboxError> {
    if unsandboxed {
        return Ok(Sandbox::unsandboxed().pass_env(team.sandbox.env.iter().cloned()));
    }
    let sandbox = team.sandbox.sandbox();
    sandbox.check()?;
    Ok(sandbox)
}

/// The tool registries of the configured agents, and of the roles (for the agents spawned
/// with them), whose commands' network differs from the team's `[sandbox] network` (their own
/// `network`, or their role's): the team's tools with a `shell` that says so.
pub fn network_tools(
    team: &TeamFile,
    tools: &ToolRegistry,
) -> (NetworkTools<AgentId>, NetworkTools<String>) {
    let settings = &team.sandbox;
    let with_network = |network: bool| -> Option<Arc<ToolRegistry>> {
        if network == settings.network || tools.get(Shell::NAME).is_none() {
            return None;
        }
        let mut own = tools.clone();
        // The built-in `shell`'s schema passes the check, so this cannot fail.
        own.replace(Arc::new(Shell::new().with_network(network))).ok()?;
        Some(Arc::new(own))
    };
    let mut agents = BTreeMap::new();
    for agent in &team.spec.agents {
        let id = &agent.config.id;
        let role = team.spec.agent_roles.get(id).map(String::as_str);
        if let Some(registry) = with_network(settings.network_for(id, role)) {
            agents.insert(id.clone(), registry);
        }
    }
    let mut roles = BTreeMap::new();
    for (role, network) in &settings.role_network {
        if let Some(registry) = with_network(*network) {
            roles.insert(role.clone(), registry);
        }
    }
    (agents, roles)
}

/// Tool registries by agent id or role name.
pub type NetworkTools<K> = BTreeMap<K, Arc<ToolRegistry>>;

/// A run's tools and where they work: the registry (the built-in tools and the MCP servers'),
/// the sandbox of its commands ([`sandbox`], with what it hides), and the directory of the
/// `shell` commands' crash journals.
pub struct Tooling {
    /// The tools.
    pub tools: ToolRegistry,
    /// The sandbox of the run's commands.
    pub sandbox: Sandbox,
    /// The crash journals' directory.
    pub journal: PathBuf,
}

/// The team's services on `stores`, and the reasoning (with the run's ledger, if any agent
/// uses a model; the ledger and the conversations are kept in `store`). Every reasoner setting
/// is checked here, before any agent runs.
pub async fn services(
    store: &RunStore,
    stores: Stores,
    info: &RunInfo,
    team: &TeamFile,
    tooling: Tooling,
) -> Result<(TeamServices, Option<Arc<UsageLedger>>)> {
    let Tooling { tools, sandbox, journal } = tooling;
    let overrides = overrides(info.reasoner.as_deref(), &info.flags)?;
    // MCP servers running outside the sandbox are on the record.
    crate::mcp::audit_opt_outs(team, info.unsandboxed, stores.audit.as_ref()).await?;
    // The team's event stream: the model reasoners publish their answers on it as they stream.
    let events = agent_core::EventHub::default();
    let reasoning =
        reasoners::build(team, &overrides, Some(store), stores.boards.clone(), &tools, &events)
            .await
            .map_err(Error::bad_input_from)?;
    let mut context = workspace(&info.workspace, sandbox)?.with_journal(journal);
    if info.nats.is_some() {
        // Its agents may have run on workers, on other hosts.
        context = context.with_foreign_calls();
    }
    let ledger = reasoning.ledger.clone();
    let parts = Parts { stores, workspace: Arc::new(context), tools, reasoning, events };
    Ok((assemble(team, parts), ledger))
}

/// The tool context of `path`: its commands in `sandbox`, and what the sandbox hides (the data
/// directory) out of the file tools' reach too.
pub fn workspace(path: &Path, sandbox: Sandbox) -> Result<ToolContext> {
    Ok(ToolContext::new(path)
        .context("cannot use the workspace")?
        .with_masked(sandbox.hidden().to_vec())
        .with_sandbox(sandbox))
}

/// What a team's services are made of besides its team file: its stores, its workspace, its
/// tools, its reasoners ([`reasoners::build`]) and the event stream they publish on.
pub struct Parts {
    /// The stores.
    pub stores: Stores,
    /// The workspace, with its sandbox ([`workspace`]).
    pub workspace: Arc<ToolContext>,
    /// The tools (the built-in ones and the MCP servers').
    pub tools: ToolRegistry,
    /// The reasoners.
    pub reasoning: reasoners::Reasoning,
    /// The team's event stream.
    pub events: agent_core::EventHub,
}

/// The [`TeamServices`] of `team` on `parts`: with the per-agent network rule
/// ([`network_tools`]), and the executor of the team file's `[http]`, `[[endpoints]]` and
/// `[executor]` in the workspace. The one assembly of `strata run` and of evolution's task
/// teams.
pub fn assemble(team: &TeamFile, parts: Parts) -> TeamServices {
    let Parts { stores, workspace, tools, reasoning, events } = parts;
    let Stores { bus, boards, governance, audit, state, nats_audit: _ } = stores;
    let (agent_tools, role_tools) = network_tools(team, &tools);
    let clock: Arc<dyn agent_core::Clock> = Arc::new(TokioClock::new());
    TeamServices {
        bus,
        boards,
        governance,
        audit,
        state,
        executor: Some(Arc::new(team.executor(workspace.clone()).with_clock(clock.clone()))),
        clock,
        workspace,
        tools: Arc::new(tools),
        reasoner: reasoning.default,
        reasoners: reasoning.per_agent,
        agent_tools,
        role_reasoners: reasoning.per_role,
        role_tools,
        costs: reasoning.ledger.map(|ledger| -> Arc<dyn agent_core::CostMeter> { ledger }),
        events,
    }
}

/// The top powers of `team`, in file order.
pub fn top_ids(team: &TeamFile) -> Vec<AgentId> {
    team.spec
        .agents
        .iter()
        .filter(|a| a.config.layer == agent_state::AgentLayer::Top)
        .map(|a| a.config.id.clone())
        .collect()
}

/// Refuses a task with goal steps (or only a goal) when a reasoner that must plan it does not
/// ([`reasoners::check_planning`]): bad input, before anything is written.
pub fn check_planning(team: &TeamFile, kind: Option<&str>, task: &Task) -> Result<()> {
    reasoners::check_planning(team, reasoner_kind(kind)?, task).map_err(Error::bad_input_from)
}

/// The task with every large string of its steps' arguments stored once in the run and
/// replaced by a reference (see `agent_core::blob`): messages, decisions, agents' saved state
/// and the audit log then carry a few bytes instead of the content. Storing is idempotent, so
/// a resumed run gets the same references.
pub async fn store_large_contents(mut task: Task, services: &TeamServices) -> Result<Task> {
    for step in &mut task.steps {
        agent_core::blob::externalize(
            &mut step.args,
            services.state.as_ref(),
            agent_core::blob::BLOB_THRESHOLD,
        )
        .await
        .context("cannot store the plan's large contents")?;
    }
    Ok(task)
}
