//! The team API: build a three-layer team from one value, submit tasks, wait for outcomes,
//! watch its events as they happen ([`Team::events`]), shut down.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;
use tracing::Instrument as _;

use agent_core::protocol::StatusReport;
use agent_core::tools::{ToolContext, ToolRegistry};
use agent_core::{
    Agent, AgentBehavior, AgentDeps, AgentRecord, AuditLog, Clock, Reasoner, StateStore,
    check_transition_chain, payload,
};
use agent_layers::{
    BottomAgent, BottomSpec, KindRunner, LeadInfo, MidAgent, MidSpec, TopAgent, TopSpec,
};
use agent_state::{
    Address, AgentConfig, AgentId, AgentLayer, AgentStatus, Assignment, CommandOutcome,
    DEFAULT_MAX_SPAWN_DEPTH, GuardSettings, Message, MessageId, MessageKind, OperatorCommand,
    RoleBook, Task, TaskFailure, TaskOutcome,
};
use governance::Governance;
use message_bus::MessageBus;
use thiserror::Error;
use tokio::sync::{Mutex, Notify, watch};
use tokio::task::JoinHandle;
use whiteboard::Whiteboard;

use crate::deadline::TaskDeadlines;
use crate::guard::{Observer, RunGuard};
use crate::metrics::{AgentSummary, MetricsCalculator};
use crate::pool::{AgentPool, DEFAULT_MAX_AGENTS, PoolError};
use crate::scheduler::{DEFAULT_HEARTBEAT, HeartbeatScheduler};
use crate::spawner::TeamSpawner;
use crate::wake::WakingBus;

/// What a layer adds to an agent's configuration.
#[derive(Clone, Debug, PartialEq)]
pub enum RoleSpec {
    /// A top power.
    Top(TopSpec),
    /// A mid lead.
    Mid(MidSpec),
    /// A bottom executor.
    Bottom(BottomSpec),
}

impl RoleSpec {
    fn layer(&self) -> AgentLayer {
        match self {
            RoleSpec::Top(_) => AgentLayer::Top,
            RoleSpec::Mid(_) => AgentLayer::Mid,
            RoleSpec::Bottom(_) => AgentLayer::Bottom,
        }
    }
}

/// One agent of a team.
#[derive(Clone, Debug, PartialEq)]
pub struct AgentSpec {
    /// Its configuration. Subordinates may be left empty: they are derived from supervisors.
    pub config: AgentConfig,
    /// Its layer's settings.
    pub role: RoleSpec,
}

/// A whole team.
#[derive(Clone, Debug, PartialEq)]
pub struct TeamSpec {
    /// The agents. The first top power proposes the plans.
    pub agents: Vec<AgentSpec>,
    /// The heartbeat period.
    pub heartbeat: Duration,
    /// The pool's limit.
    pub max_agents: usize,
    /// The roles agents may spawn while the team works (seed 003); empty: none.
    pub roles: RoleBook,
    /// How deep the spawn tree may grow (default [`DEFAULT_MAX_SPAWN_DEPTH`]).
    pub max_spawn_depth: u32,
    /// The roles of configured agents that may spawn: agent id → role name.
    pub agent_roles: BTreeMap<AgentId, String>,
    /// The guards against loops, ping-pong, runs without progress and wait cycles, and
    /// whether they stop the task or escalate first (default [`GuardSettings::default`]).
    pub guards: GuardSettings,
    /// The team's time limits (a team file's `[timeouts]`; defaults:
    /// [`Timeouts::default`](agent_state::Timeouts)): `tool_ms` bounds every tool call (the
    /// workspace's [`ToolContext::tool_timeout`]), `reasoning_ms` every reasoning call,
    /// `turn_ms` the turns of spawned agents (configured agents have their own `timeout_ms`),
    /// `subtask_ms` every subtask's tool loop and `task_ms` every task from its submission
    /// ([`Team::submit`]; a task that runs out is closed with [`TaskFailure::TimedOut`]).
    /// Checked by [`Team::start`].
    pub timeouts: agent_state::Timeouts,
    /// Which situations the top layer settles by a weighted vote (a team file's
    /// `[arbitration]`; default [`ArbitrationSettings::default`](agent_state::ArbitrationSettings):
    /// escalations and acceptance disputes, not vetoed plans).
    pub arbitration: agent_state::ArbitrationSettings,
    /// Who may sign for humans, and what needs a human's signature (a team file's
    /// `[approvals]`; default: no humans, nothing needs one).
    pub approvals: Approvals,
    /// Which agents' commands may use the network (a team file's `[sandbox] network` and the
    /// `network` of its executors and roles; default: none): a spawn gives a role's network
    /// only to an agent whose spawner has it ([`agent_core::spawn::check_grant`]).
    pub network: agent_core::spawn::NetworkGrants,
}

/// Humans in the team's governance (a team file's `[approvals]`): who may sign as
/// `human:<name>` (`strata approve` / `strata veto`), and whether plans need one of them.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Approvals {
    /// The humans who may sign (names without `human:`, each checked with
    /// [`agent_state::check_human_name`]); empty: none.
    pub humans: Vec<String>,
    /// Every plan the top layer proposes also needs the signature of one of
    /// [`humans`](Self::humans) ([`agent_state::HumanApproval`]): the proposer waits in
    /// `waiting_approval` until one signs or vetoes it.
    pub plans: bool,
}

impl TeamSpec {
    /// A team with the default heartbeat (4 s) and pool limit (50), and no roles.
    pub fn new(agents: Vec<AgentSpec>) -> Self {
        Self {
            agents,
            heartbeat: DEFAULT_HEARTBEAT,
            max_agents: DEFAULT_MAX_AGENTS,
            roles: RoleBook::default(),
            max_spawn_depth: DEFAULT_MAX_SPAWN_DEPTH,
            agent_roles: BTreeMap::new(),
            guards: GuardSettings::default(),
            timeouts: agent_state::Timeouts::default(),
            arbitration: agent_state::ArbitrationSettings::default(),
            approvals: Approvals::default(),
            network: agent_core::spawn::NetworkGrants::default(),
        }
    }
}

/// Which part of a team's run a [`Team`] hosts in this process ([`Team::join`]).
///
/// A run spread over several processes (workers on NATS, see [`crate::placement`]) has one
/// **coordinator**, which hands tasks to the proposing power and reads their outcomes, and any
/// number of processes each hosting a **share of the agents**. Every process is given the
/// whole [`TeamSpec`]: each agent knows the others by id, wherever they run.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Share {
    /// Every agent, the tasks and their outcomes: a run in one process ([`Team::start`],
    /// [`Team::resume`]).
    All,
    /// These configured agents (and the agents they spawn, named `role-ROOT-N` after the
    /// configured agent their spawn tree starts from, so two shares never pick one id), each
    /// restored from the stores if it ran before (on another worker, say), or created. The
    /// `system` inbox and the tasks' deadlines are the coordinator's; ping-pong is watched
    /// here; the guards that need every agent's state in one process (no progress, wait
    /// cycles) are not watched.
    Agents(std::collections::BTreeSet<AgentId>),
    /// No agent: the tasks ([`Team::submit`]), their deadlines and outcomes ([`Team::wait`],
    /// read from the `system` inbox).
    Coordinator,
}

impl Share {
    fn hosts(&self, agent: &AgentId) -> bool {
        match self {
            Share::All => true,
            Share::Agents(agents) => agents.contains(agent),
            Share::Coordinator => false,
        }
    }

    /// Whether this share reads the `system` inbox and keeps the tasks' deadlines.
    fn coordinates(&self) -> bool {
        !matches!(self, Share::Agents(_))
    }
}

/// The services a team runs on. Per-agent reasoners and tool registries override the defaults.
#[derive(Clone)]
pub struct TeamServices {
    /// The message bus.
    pub bus: Arc<dyn MessageBus>,
    /// The whiteboards.
    pub boards: Arc<dyn Whiteboard>,
    /// Governance.
    pub governance: Arc<dyn Governance>,
    /// The audit log.
    pub audit: Arc<dyn AuditLog>,
    /// The clock.
    pub clock: Arc<dyn Clock>,
    /// The workspace the tools work in.
    pub workspace: Arc<ToolContext>,
    /// The default tool registry.
    pub tools: Arc<ToolRegistry>,
    /// The default reasoner.
    pub reasoner: Arc<dyn Reasoner>,
    /// Where agents' state, tool results and task outcomes are kept across restarts.
    pub state: Arc<dyn StateStore>,
    /// Reasoners for particular agents.
    pub reasoners: BTreeMap<AgentId, Arc<dyn Reasoner>>,
    /// Tool registries for particular agents.
    pub agent_tools: BTreeMap<AgentId, Arc<ToolRegistry>>,
    /// Reasoners for the agents of particular roles (spawned agents), by role name.
    pub role_reasoners: BTreeMap<String, Arc<dyn Reasoner>>,
    /// Tool registries for the agents of particular roles (spawned agents), by role name: a
    /// `shell` with the network allowed for a role whose team file entry allows it, say.
    pub role_tools: BTreeMap<String, Arc<ToolRegistry>>,
    /// What each agent's reasoning costs, for `get_agents`; `None`: costs are not shown.
    pub costs: Option<Arc<dyn agent_core::CostMeter>>,
    /// The executor that runs the subtasks of executors with a `kind` (seed 002); `None`: one
    /// with the built-in kinds ([`agent_executor::builtins()`]) in the team's workspace.
    pub executor: Option<Arc<agent_executor::Executor>>,
    /// The team's live event stream ([`Team::events`]): audit records and executor runs.
    pub events: agent_core::EventHub,
}

impl TeamServices {
    /// Services on the in-memory backends (bus, whiteboards, governance, audit log, state
    /// store), the real clock, the built-in tools in `workspace`, every agent reasoning with
    /// `reasoner`, no cost meter and no executor of kinds: a team for a test, an example or an
    /// evaluation, whose data goes with the process. Set any field to change one.
    pub fn in_memory(workspace: ToolContext, reasoner: Arc<dyn Reasoner>) -> Self {
        Self {
            bus: Arc::new(message_bus::InMemoryBus::new()),
            boards: Arc::new(whiteboard::InMemoryWhiteboard::new()),
            governance: Arc::new(governance::InMemoryGovernance::new()),
            audit: Arc::new(agent_core::InMemoryAuditLog::new()),
            clock: Arc::new(agent_core::TokioClock::new()),
            workspace: Arc::new(workspace),
            tools: Arc::new(ToolRegistry::with_builtins()),
            reasoner,
            state: Arc::new(agent_core::InMemoryStateStore::new()),
            reasoners: BTreeMap::new(),
            agent_tools: BTreeMap::new(),
            role_reasoners: BTreeMap::new(),
            role_tools: BTreeMap::new(),
            costs: None,
            executor: None,
            events: agent_core::EventHub::default(),
        }
    }
}

#[cfg(feature = "nats")]
impl TeamServices {
    /// Services on the NATS JetStream backends of `store`'s namespace (bus, whiteboards,
    /// governance, audit log, state store and its tool journal), created there if new, and
    /// otherwise as [`TeamServices::in_memory`]: the real clock, the built-in tools in
    /// `workspace`, every agent reasoning with `reasoner`. A team started on them can be resumed
    /// by another process (or after a restart) with services opened on the same namespace.
    pub async fn on_nats(
        store: &nats_store::NatsStore,
        workspace: ToolContext,
        reasoner: Arc<dyn Reasoner>,
    ) -> Result<Self, agent_state::BackendError> {
        Ok(Self {
            bus: Arc::new(message_bus::NatsBus::open(store).await?),
            boards: Arc::new(whiteboard::NatsWhiteboard::open(store).await?),
            governance: Arc::new(governance::NatsGovernance::open(store).await?),
            audit: Arc::new(agent_core::NatsAuditLog::open(store).await?),
            state: Arc::new(agent_core::NatsStateStore::open(store).await?),
            ..Self::in_memory(workspace, reasoner)
        })
    }
}

/// Where goal steps land only on executors that carry them out by themselves (with a `kind`,
/// or OODA agents): those executors, and the domains whose every executor is one.
#[derive(Debug, Default)]
struct KindCoverage {
    agents: std::collections::BTreeSet<AgentId>,
    domains: std::collections::BTreeSet<String>,
}

impl KindCoverage {
    fn of(spec: &TeamSpec) -> Self {
        let mut coverage = Self::default();
        // A lead's domain counts if it has executors and all of them have a kind.
        let mut leads: BTreeMap<&AgentId, (bool, usize)> = BTreeMap::new();
        for agent in &spec.agents {
            if let RoleSpec::Bottom(b) = &agent.role {
                // An executor kind, or an OODA agent, carries out a goal step by itself.
                let own = b.kind.is_some() || b.ooda.is_some();
                if own {
                    coverage.agents.insert(agent.config.id.clone());
                }
                if let Some(lead) = &agent.config.supervisor {
                    let entry = leads.entry(lead).or_insert((true, 0));
                    entry.0 &= own;
                    entry.1 += 1;
                }
            }
        }
        for agent in &spec.agents {
            if let RoleSpec::Mid(m) = &agent.role
                && leads.get(&agent.config.id).is_some_and(|(all, n)| *all && *n > 0)
            {
                coverage.domains.insert(m.domain.clone());
            }
        }
        coverage
    }

    fn runs(&self, step: &agent_state::PlanStep) -> bool {
        match &step.target {
            agent_state::StepTarget::Agent(id) => self.agents.contains(id),
            agent_state::StepTarget::Domain(domain) => self.domains.contains(domain),
            _ => false,
        }
    }
}

impl TeamServices {
    /// What an executor with a `kind` runs its subtasks on: the services' executor (or one with
    /// the built-in kinds in the team's workspace, if none was given) and the event stream.
    pub fn kind_runner(&self) -> KindRunner {
        let executor = self.executor.clone().unwrap_or_else(|| {
            Arc::new(
                agent_executor::Executor::new(agent_executor::builtins())
                    .with_env(agent_executor::ExecEnv::with_workspace(self.workspace.clone()))
                    .with_clock(self.clock.clone()),
            )
        });
        KindRunner { executor, events: self.events.clone() }
    }
}

/// A team specification that cannot be built.
#[derive(Debug, Error)]
pub enum TeamError {
    /// An agent's configuration is invalid.
    #[error(transparent)]
    Config(#[from] agent_state::ConfigError),
    /// A time limit of the team is zero or absurdly large.
    #[error("team time limits: {0}")]
    Timeouts(#[from] agent_state::LimitError),
    /// A soft time limit not below its hard one.
    #[error("[timeouts] {0}")]
    SoftTimeouts(#[from] agent_state::SoftLimitError),
    /// The spec's role does not match the configuration's layer.
    #[error("agent `{agent}`: its role is for the {role} layer but `layer` says {layer}")]
    LayerMismatch {
        /// The agent.
        agent: AgentId,
        /// The role's layer.
        role: AgentLayer,
        /// The configured layer.
        layer: AgentLayer,
    },
    /// Two agents share an id.
    #[error("agent id `{agent}` is used twice; ids must be unique")]
    DuplicateAgent {
        /// The id.
        agent: AgentId,
    },
    /// A supervisor that is not in the team.
    #[error("agent `{agent}`: supervisor `{supervisor}` is not in the team")]
    UnknownSupervisor {
        /// The agent.
        agent: AgentId,
        /// The missing supervisor.
        supervisor: AgentId,
    },
    /// A supervisor on the wrong layer.
    #[error(
        "agent `{agent}` ({layer}): supervisor `{supervisor}` is a {supervisor_layer} agent; a {layer} agent reports to the {expected} layer"
    )]
    WrongSupervisorLayer {
        /// The agent.
        agent: AgentId,
        /// Its layer.
        layer: AgentLayer,
        /// The supervisor.
        supervisor: AgentId,
        /// The supervisor's layer.
        supervisor_layer: AgentLayer,
        /// The layer it should be on.
        expected: AgentLayer,
    },
    /// A subordinate list that disagrees with the supervisors.
    #[error(
        "agent `{agent}` lists `{subordinate}` as a subordinate, but that agent's supervisor is not `{agent}`"
    )]
    SubordinateMismatch {
        /// The lead.
        agent: AgentId,
        /// The subordinate.
        subordinate: AgentId,
    },
    /// A lead with more executors than its limit.
    #[error("lead `{agent}` has {count} executors, more than its `max_subordinates` of {max}")]
    TooManySubordinates {
        /// The lead.
        agent: AgentId,
        /// How many it has.
        count: usize,
        /// Its limit.
        max: usize,
    },
    /// An executor with a kind the team's executor does not have.
    #[error("executor `{agent}` has the kind `{kind}`, which is not registered (kinds: {known})")]
    UnknownKind {
        /// The executor.
        agent: AgentId,
        /// The kind.
        kind: String,
        /// The registered kinds.
        known: String,
    },
    /// An executor with a tool nobody registered.
    #[error(
        "executor `{agent}` names the tool `{tool}`, which is not registered (available: {available})"
    )]
    UnknownTool {
        /// The executor.
        agent: AgentId,
        /// The tool.
        tool: String,
        /// The registered tools.
        available: String,
    },
    /// No top power.
    #[error("a team needs at least one top-layer agent to propose and sign plans")]
    NoTopAgent,
    /// A share of a run names an agent the team does not have.
    #[error("agent `{agent}` is not in the team; a share can host only the team's agents")]
    NotInTeam {
        /// The agent.
        agent: AgentId,
    },
    /// An OODA executor's configuration is refused.
    #[error("OODA agent `{agent}`: {error}")]
    Ooda {
        /// The agent.
        agent: AgentId,
        /// Why, in words.
        error: String,
    },
    /// The team settles conflicts by a vote but no top power may arbitrate.
    #[error(
        "the team arbitrates conflicts but no top power holds `arbitrate`; give one the \
         capability, or turn arbitration off (`[arbitration]` with every setting false)"
    )]
    NoArbitrator,
    /// More agents than the pool allows.
    #[error(
        "the team has {count} agents but the pool allows {max}; raise `max_agents` or remove agents"
    )]
    TooManyAgents {
        /// How many.
        count: usize,
        /// The limit.
        max: usize,
    },
    /// Creating an agent failed.
    #[error(transparent)]
    Pool(#[from] PoolError),
    /// The run's stored state cannot be read.
    #[error("cannot read the run's stored state: {0}")]
    Store(#[source] agent_state::BackendError),
    /// The audit log's transitions do not form a chain, so statuses cannot be restored.
    #[error("cannot resume: {0}")]
    Chain(#[source] agent_core::ChainError),
    /// A guard threshold out of range.
    #[error(transparent)]
    Guards(#[from] agent_state::GuardError),
    /// An operator command could not be sent ([`Team::command`]).
    #[error("the operator command could not be sent: {0}")]
    Command(String),
}

/// Submitting a task failed.
#[derive(Debug, Error)]
pub enum SubmitError {
    /// The plan is invalid.
    #[error(transparent)]
    InvalidTask(#[from] TaskFailure),
    /// A task with this id was submitted before.
    #[error("task `{0}` was already submitted; use a new task id")]
    Duplicate(String),
    /// The team is shut down.
    #[error("the team is shut down")]
    ShutDown,
    /// The bus refused the task.
    #[error(transparent)]
    Send(#[from] message_bus::SendError),
    /// A goal-only task (or one with goal steps) for a team whose proposing power's reasoner
    /// cannot plan.
    #[error(
        "task `{task}` has only a goal (or steps without a tool), but the reasoner `{reasoner}` \
         of the proposing power cannot plan from words; give the top layer a model reasoner \
         (openai, anthropic or local), or give every step a `tool` and its `args`"
    )]
    CannotPlan {
        /// The task.
        task: String,
        /// The proposer's reasoner.
        reasoner: String,
    },
}

/// A running team.
pub struct Team {
    pool: Arc<AgentPool>,
    services: TeamServices,
    proposer: AgentId,
    /// Where a goal step runs without a model: on an executor with a `kind`.
    kinds: KindCoverage,
    outcomes: watch::Receiver<BTreeMap<String, TaskOutcome>>,
    /// The answers to operator commands sent by `system`, by the command's message id.
    commands: watch::Receiver<BTreeMap<MessageId, CommandOutcome>>,
    submitted: Mutex<Vec<String>>,
    /// The open tasks' telemetry spans (disabled ones when telemetry is off), ended when
    /// their outcome is read ([`wait`](Self::wait)).
    task_spans: std::sync::Mutex<BTreeMap<String, tracing::Span>>,
    /// The open tasks' submission times, for the task limit.
    deadlines: Arc<TaskDeadlines>,
    driver: Mutex<Option<(watch::Sender<bool>, JoinHandle<HeartbeatScheduler>)>>,
    /// Signalled by every delivery through the team's bus: wakes the driver.
    mail: Arc<Notify>,
    /// What the guards are shown of the deliveries.
    observer: Arc<Observer>,
    /// The layer of every configured agent, wherever it is hosted.
    layers: BTreeMap<AgentId, AgentLayer>,
    /// The heartbeat period.
    heartbeat: Duration,
}

/// How many heartbeats [`Team::shutdown`] lets the agents answer the mail still waiting.
pub const QUIESCE_HEARTBEATS: u32 = 5;

impl Team {
    /// Validates `spec`, creates every agent (initializing → idle) and starts the heartbeat.
    /// Nothing is started when the spec is invalid.
    pub async fn start(spec: TeamSpec, services: TeamServices) -> Result<Self, TeamError> {
        Self::launch(spec, services, false, Share::All).await
    }

    /// Carries on a team whose run was interrupted: each agent gets back its last status (from
    /// the audit log), its metrics, retries, processed message ids and its layer's state (from the
    /// state store); its unacknowledged messages are delivered again; closed tasks keep their
    /// outcomes. Agents the store has never seen are created fresh.
    pub async fn resume(spec: TeamSpec, services: TeamServices) -> Result<Self, TeamError> {
        Self::launch(spec, services, true, Share::All).await
    }

    /// Hosts `share` of a run that may be spread over several processes, on services every
    /// process shares (NATS): the agents of the share are restored from the stores as
    /// [`Team::resume`] does (an agent that never ran is created), and only they take turns
    /// here. `Share::All` is [`Team::resume`].
    pub async fn join(
        spec: TeamSpec,
        services: TeamServices,
        share: Share,
    ) -> Result<Self, TeamError> {
        Self::launch(spec, services, true, share).await
    }

    async fn launch(
        spec: TeamSpec,
        mut services: TeamServices,
        resume: bool,
        share: Share,
    ) -> Result<Self, TeamError> {
        let configs = validate(&spec, &services)?;
        if let Share::Agents(agents) = &share
            && let Some(stranger) =
                agents.iter().find(|a| !spec.agents.iter().any(|s| s.config.id == **a))
        {
            return Err(TeamError::NotInTeam { agent: stranger.clone() });
        }
        // Every tool call of the team is bounded by its tool limit.
        services.workspace = Arc::new(
            services
                .workspace
                .as_ref()
                .clone()
                .with_tool_timeout(Duration::from_millis(spec.timeouts.tool_ms)),
        );
        // Wake on work: every delivery through the team's bus wakes the driver, and is shown
        // to the run's guards.
        let mail = Arc::new(Notify::new());
        let observer = Arc::new(Observer::default());
        services.bus =
            Arc::new(WakingBus::new(services.bus.clone(), mail.clone()).observed(observer.clone()));
        // Every record any agent appends is published on the team's event stream once stored.
        services.audit = Arc::new(agent_core::PublishingAuditLog::new(
            services.audit.clone(),
            services.events.clone(),
        ));
        // One executor for every executor with a kind, made now if none was given.
        services.executor = Some(services.kind_runner().executor);
        let mut spawns = Vec::new();
        let mut despawned = Vec::new();
        let (statuses, mut records) = if resume {
            let audit = services.audit.records(None).await.map_err(TeamError::Store)?;
            for record in &audit {
                match &record.event {
                    agent_core::AuditEvent::Spawned { spawn } => spawns.push(spawn.clone()),
                    agent_core::AuditEvent::Despawned { agent, .. } => {
                        despawned.push(agent.clone())
                    }
                    _ => {}
                }
            }
            let statuses: BTreeMap<AgentId, AgentStatus> =
                check_transition_chain(&audit).map_err(TeamError::Chain)?.into_iter().collect();
            let records: BTreeMap<AgentId, AgentRecord> = services
                .state
                .agents()
                .await
                .map_err(TeamError::Store)?
                .into_iter()
                .map(|r| (r.id.clone(), r))
                .collect();
            (statuses, records)
        } else {
            (BTreeMap::new(), BTreeMap::new())
        };
        let pool = Arc::new(AgentPool::new(spec.max_agents));
        let leads = leads(&spec, &configs);
        // Each lead's executors know one another (peer help): one shared list per lead.
        let peers: BTreeMap<AgentId, agent_layers::Peers> =
            leads.iter().map(|l| (l.id.clone(), l.executors.clone().into())).collect();
        let tops: Vec<(AgentId, Vec<String>)> = spec
            .agents
            .iter()
            .filter_map(|a| match &a.role {
                RoleSpec::Top(t) => Some((a.config.id.clone(), t.signature_authority.clone())),
                _ => None,
            })
            .collect();
        let top_ids: Vec<AgentId> = tops.iter().map(|(id, _)| id.clone()).collect();
        // The powers that vote in arbitrations.
        let voters: Vec<AgentId> = spec
            .agents
            .iter()
            .filter(|a| {
                matches!(a.role, RoleSpec::Top(_))
                    && a.config.has(agent_state::Capability::Arbitrate)
            })
            .map(|a| a.config.id.clone())
            .collect();
        let proposer = top_ids.first().cloned().ok_or(TeamError::NoTopAgent)?;
        let spawner = (!spec.roles.is_empty()).then(|| {
            TeamSpawner::new(
                &pool,
                services.clone(),
                spec.roles.clone(),
                spec.max_spawn_depth,
                top_ids.clone(),
                spec.agent_roles.clone(),
                spec.guards,
                spec.timeouts,
                matches!(share, Share::Agents(_)),
                spec.network.clone(),
                spec.agents
                    .iter()
                    .map(|a| {
                        let config = &a.config;
                        (config.id.clone(), (config.layer, config.capabilities.to_vec()))
                    })
                    .collect(),
            )
        });
        let roles = spawner.as_ref().map(|s| s.roles()).unwrap_or_default();
        let mut creating: tokio::task::JoinSet<Result<(), PoolError>> = tokio::task::JoinSet::new();
        for (agent, config) in spec.agents.iter().zip(configs) {
            let id = config.id.clone();
            if !share.hosts(&id) {
                continue;
            }
            let behavior: Box<dyn AgentBehavior> = match &agent.role {
                RoleSpec::Top(t) => {
                    let peers = tops.iter().filter(|(p, _)| *p != id).cloned().collect();
                    let others = voters.iter().filter(|v| **v != id).cloned().collect();
                    Box::new(
                        TopAgent::new(t.clone(), peers, leads.clone())
                            .with_roles(roles.clone())
                            .with_arbitration(spec.arbitration)
                            .with_voters(others)
                            .with_human_approval(
                                spec.approvals.plans.then(|| spec.approvals.humans.clone()),
                            ),
                    )
                }
                RoleSpec::Mid(m) => {
                    let executors = leads
                        .iter()
                        .find(|l| l.id == id)
                        .map(|l| l.executors.clone())
                        .unwrap_or_default();
                    let peers = leads.iter().filter(|l| l.id != id).map(|l| l.id.clone()).collect();
                    let lead = MidAgent::new(m.clone(), executors, top_ids.clone(), peers)
                        .with_guards(spec.guards)
                        .with_arbitration(spec.arbitration);
                    let supervises = spec
                        .agent_roles
                        .get(&id)
                        .and_then(|r| spec.roles.get(r))
                        .is_some_and(agent_state::Role::supervises);
                    Box::new(if supervises { lead.supervising() } else { lead })
                }
                RoleSpec::Bottom(BottomSpec { ooda: Some(config), tools, .. }) => {
                    let ooda = agent_ooda::Ooda::new(
                        id.clone(),
                        config.as_ref().clone(),
                        agent_ooda::ReasonerLoop,
                        tools,
                        services.clock.now(),
                    )
                    .map_err(|e| TeamError::Ooda { agent: id.clone(), error: e.to_string() })?
                    .with_approvers(spec.approvals.humans.clone());
                    Box::new(agent_ooda::OodaBehavior::new(ooda))
                }
                RoleSpec::Bottom(b) => {
                    let mut executor = BottomAgent::new(b.clone()).with_guards(spec.guards);
                    if let Some(peers) = config.supervisor.as_ref().and_then(|s| peers.get(s)) {
                        executor = executor.with_peers(peers.clone());
                    }
                    Box::new(match b.kind {
                        Some(_) => executor.with_runner(services.kind_runner()),
                        None => executor,
                    })
                }
            };
            let deps = Arc::new(AgentDeps {
                bus: services.bus.clone(),
                boards: services.boards.clone(),
                governance: services.governance.clone(),
                audit: services.audit.clone(),
                reasoner: services
                    .reasoners
                    .get(&id)
                    .cloned()
                    .unwrap_or_else(|| services.reasoner.clone()),
                tools: services
                    .agent_tools
                    .get(&id)
                    .cloned()
                    .unwrap_or_else(|| services.tools.clone()),
                workspace: services.workspace.clone(),
                clock: services.clock.clone(),
                state: services.state.clone(),
                spawner: spawner.clone().map(|s| s as Arc<dyn agent_core::Spawner>),
                timeouts: spec.timeouts,
            });
            // Agents are created (or restored) concurrently, a bounded number at a time, so a
            // durable backend's group commit serves many of them with one sync.
            if creating.len() >= CONCURRENT_CREATIONS
                && let Some(joined) = creating.join_next().await
            {
                created(joined)?;
            }
            let pool = pool.clone();
            match statuses.get(&id) {
                Some(&status) => {
                    let record = records.remove(&id);
                    creating.spawn(async move {
                        let agent = Agent::restore(config, behavior, deps, status, record)
                            .await
                            .map_err(|source| PoolError::Initialize { id: id.clone(), source })?;
                        pool.insert(agent).map(drop)
                    });
                }
                None => {
                    creating
                        .spawn(async move { pool.create(config, behavior, deps).await.map(drop) });
                }
            }
        }
        while let Some(joined) = creating.join_next().await {
            created(joined)?;
        }
        if let Some(spawner) = &spawner {
            // Spawned agents live with the configured agent their spawn tree starts from.
            let spawns = match &share {
                Share::All => spawns,
                _ => hosted_spawns(spawns, |root| share.hosts(root)),
            };
            spawner.restore(&pool, spawns, &despawned, &statuses, &mut records).await?;
        }
        let known: BTreeMap<String, TaskOutcome> = services
            .state
            .outcomes()
            .await
            .map_err(TeamError::Store)?
            .into_iter()
            .map(|o| (o.task_id().to_owned(), o))
            .collect();
        let submitted = Mutex::new(known.keys().cloned().collect());
        let deadlines = Arc::new(TaskDeadlines::new(
            spec.timeouts.task_ms,
            spec.timeouts.soft(agent_state::Limit::Task),
            proposer.clone(),
            services.clock.clone(),
            services.audit.clone(),
        ));
        let (outcome_tx, outcomes) = watch::channel(known);
        let (command_tx, commands) = watch::channel(BTreeMap::new());
        let (stop_tx, stop_rx) = watch::channel(false);
        // The heartbeat answers the scheduler booked before a restart: counted on from.
        for liveness in services.state.liveness().await.map_err(TeamError::Store)? {
            if let Some(slot) = pool.get(&liveness.id) {
                slot.seed_liveness(&liveness);
            }
        }
        let scheduler = HeartbeatScheduler::new(
            pool.clone(),
            services.bus.clone(),
            services.audit.clone(),
            services.clock.clone(),
        )
        .with_ledger(services.state.clone());
        let guard = RunGuard::new(
            spec.guards,
            observer.clone(),
            pool.clone(),
            services.bus.clone(),
            services.audit.clone(),
            services.clock.clone(),
            proposer.clone(),
        );
        // The driver (and the turns it starts) run in the caller's span: a run's telemetry
        // knows which run every agent's span belongs to.
        let driver = tokio::spawn(tracing::Instrument::in_current_span(drive(
            scheduler,
            guard,
            spec.heartbeat,
            mail.clone(),
            services.bus.clone(),
            services.state.clone(),
            Reports { tasks: outcome_tx, commands: command_tx },
            stop_rx,
            deadlines.clone(),
            share.coordinates(),
        )));
        Ok(Self {
            pool,
            services,
            proposer,
            kinds: KindCoverage::of(&spec),
            outcomes,
            commands,
            submitted,
            task_spans: std::sync::Mutex::default(),
            deadlines,
            driver: Mutex::new(Some((stop_tx, driver))),
            mail,
            observer,
            layers: spec.agents.iter().map(|a| (a.config.id.clone(), a.config.layer)).collect(),
            heartbeat: spec.heartbeat,
        })
    }

    /// Wakes the team's driver as a delivery through its own bus does: the agents with mail
    /// take their turns now, not at the next heartbeat. For mail that another process
    /// delivered (a worker sees it on the server).
    pub fn wake(&self) {
        self.mail.notify_one();
    }

    /// Shows the team's guards a message that another process delivered, as they are shown
    /// every delivery through the team's own bus (ping-pong is followed across workers).
    pub fn observe(&self, message: &Message) {
        self.observer.saw(message);
    }

    /// The run's guards (no progress, wait cycles) read the agents this process does not host
    /// from `remote` from now on: for the coordinator of a run placed on workers, whose share
    /// hosts no agent (`placement::PlacedWatch`).
    pub fn watch_remote(&self, remote: Arc<dyn crate::guard::RemoteAgents>) {
        self.observer.set_remote(remote);
    }

    /// The pool of agents.
    pub fn pool(&self) -> &Arc<AgentPool> {
        &self.pool
    }

    /// The services. Its `audit` publishes every record it appends on the team's event
    /// stream ([`Team::events`]); reads go to the log the team was given.
    pub fn services(&self) -> &TeamServices {
        &self.services
    }

    /// A stream of the team's events from now on: every audit record once it is stored
    /// (transitions, tool calls, decisions, spawns, refusals...), and executor runs' states,
    /// progress and notes, as they happen. Bounded and lossy: a subscriber that falls behind is
    /// told how many events it missed ([`agent_core::Received::Lagged`]) and never slows an
    /// agent; the audit log keeps every record. To see the agents' creation too, subscribe to
    /// the hub ([`TeamServices::events`]) before [`Team::start`] or [`Team::resume`].
    pub fn events(&self) -> agent_core::EventStream {
        self.services.events.subscribe()
    }

    /// The hub the team's events are published on (the services' `events`).
    pub fn event_hub(&self) -> &agent_core::EventHub {
        &self.services.events
    }

    /// Hands a task to the proposing top power. The plan is checked first; a task with only a
    /// goal (no steps: the top layer plans it) or with goal steps needs a proposer whose
    /// reasoner [plans](agent_core::Reasoner::plans), else [`SubmitError::CannotPlan`].
    ///
    /// The task must close within the team's task limit (`TeamSpec::timeouts.task_ms`) from
    /// now: past it, the proposing power closes it with [`TaskFailure::TimedOut`].
    pub async fn submit(&self, task: Task) -> Result<(), SubmitError> {
        task.check_request()?;
        // A goal-only task needs a plan; a goal step needs a model to choose its tool calls,
        // unless an executor with a kind runs it.
        let needs_model = task.steps.is_empty()
            || task.steps.iter().any(|s| !s.is_scripted() && !self.kinds.runs(s));
        if needs_model {
            let reasoner =
                self.services.reasoners.get(&self.proposer).unwrap_or(&self.services.reasoner);
            if !reasoner.plans() {
                return Err(SubmitError::CannotPlan {
                    task: task.id,
                    reasoner: reasoner.name().to_owned(),
                });
            }
        }
        if self.driver.lock().await.is_none() {
            return Err(SubmitError::ShutDown);
        }
        let mut submitted = self.submitted.lock().await;
        if submitted.contains(&task.id) {
            return Err(SubmitError::Duplicate(task.id));
        }
        let content =
            serde_json::to_value(Assignment::Task { task: task.clone() }).map_err(|e| {
                SubmitError::InvalidTask(TaskFailure::InvalidPlan { reason: e.to_string() })
            })?;
        let message = Message::new(
            self.services.clock.message_id(),
            Address::System,
            &self.proposer,
            MessageKind::TaskAssign,
            content,
            self.services.clock.now(),
        );
        let span = agent_core::otel::task(&task.id, &task.goal, "submitted");
        let sent = span.in_scope(|| agent_core::otel::message(&message, None));
        self.services.bus.send(message).instrument(sent).await?;
        self.deadlines.submitted(&task.id);
        if !span.is_disabled() {
            self.task_spans
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner)
                .insert(task.id.clone(), span);
        }
        submitted.push(task.id);
        Ok(())
    }

    /// Waits until task `task_id` is closed and returns its outcome.
    pub async fn wait(&self, task_id: &str) -> TaskOutcome {
        let mut outcomes = self.outcomes.clone();
        loop {
            if let Some(outcome) = outcomes.borrow_and_update().get(task_id) {
                self.task_closed(outcome);
                return outcome.clone();
            }
            if outcomes.changed().await.is_err() {
                return TaskOutcome::Failed {
                    task_id: task_id.into(),
                    reason: TaskFailure::ShutDown,
                };
            }
        }
    }

    /// Ends a task's telemetry span with its outcome.
    fn task_closed(&self, outcome: &TaskOutcome) {
        let span = self
            .task_spans
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .remove(outcome.task_id());
        if let Some(span) = span {
            let succeeded = matches!(outcome, TaskOutcome::Succeeded { .. });
            span.record("task.outcome", if succeeded { "succeeded" } else { "failed" });
            span.record("otel.status_code", if succeeded { "ok" } else { "error" });
        }
    }

    /// The outcome of a task, if it is closed.
    pub fn outcome(&self, task_id: &str) -> Option<TaskOutcome> {
        self.outcomes.borrow().get(task_id).cloned()
    }

    /// Sends `command` to `agent` as an `operator_command` from `system` and returns the
    /// message's id, which the agent's answer ([`command_outcome`](Self::command_outcome))
    /// refers to.
    pub async fn command(
        &self,
        agent: &AgentId,
        command: &OperatorCommand,
    ) -> Result<MessageId, TeamError> {
        let content = serde_json::to_value(command)
            .map_err(|e| TeamError::Command(format!("cannot encode the command: {e}")))?;
        let id = self.services.clock.message_id();
        let now = self.services.clock.now();
        let message = Message::new(
            id,
            Address::System,
            agent.clone(),
            MessageKind::OperatorCommand,
            content,
            now,
        );
        self.services.bus.send(message).await.map_err(|e| TeamError::Command(e.to_string()))?;
        Ok(id)
    }

    /// Waits up to `wait` for the answer to the operator command `command` sent by `system`
    /// (see [`command`](Self::command)); `None` if none came (the agent may still answer:
    /// a change applies at its next turn), or the team stopped.
    pub async fn command_outcome(
        &self,
        command: MessageId,
        wait: Duration,
    ) -> Option<CommandOutcome> {
        let mut commands = self.commands.clone();
        let answered = async {
            loop {
                if let Some(outcome) = commands.borrow_and_update().get(&command) {
                    return Some(outcome.clone());
                }
                if commands.changed().await.is_err() {
                    return None;
                }
            }
        };
        tokio::time::timeout(wait, answered).await.ok().flatten()
    }

    /// Every agent's status, metrics and score, by id. The metrics are the stored ones
    /// ([`stored_metrics`](crate::stored_metrics): each agent's record with the heartbeat
    /// answers its scheduler booked), the numbers `strata inspect RUN metrics` and the
    /// dashboard show; only if the store cannot be read are the hosted agents' metrics taken
    /// from memory. Statuses: those hosted here as they are now, and the team's configured
    /// agents hosted elsewhere (a run spread over workers) as the audit log last recorded them
    /// (left out if it cannot be read). Current once the team is stopped (its scheduler stores
    /// the last answers as it settles); while it runs, up to a cycle behind.
    pub async fn summary(&self) -> Vec<AgentSummary> {
        let mut stored: Option<BTreeMap<AgentId, agent_state::AgentMetrics>> =
            match crate::metrics::stored_metrics(self.services.state.as_ref()).await {
                Ok(all) => Some(all.into_iter().map(|s| (s.agent, s.metrics)).collect()),
                Err(e) => {
                    tracing::warn!(error = %e, "cannot read the stored metrics; showing those in memory");
                    None
                }
            };
        let mut lines = Vec::new();
        for slot in self.pool.all() {
            let status = slot.status().await;
            let metrics = match &mut stored {
                Some(stored) => stored.remove(slot.id()).unwrap_or_default(),
                None => slot.metrics().await,
            };
            lines.push(MetricsCalculator::summarize(
                slot.id().clone(),
                slot.layer(),
                status,
                metrics,
            ));
        }
        let elsewhere: Vec<(&AgentId, &AgentLayer)> =
            self.layers.iter().filter(|(id, _)| self.pool.get(id).is_none()).collect();
        if elsewhere.is_empty() {
            return lines;
        }
        let (Ok(audit), Some(mut metrics)) = (self.services.audit.records(None).await, stored)
        else {
            return lines;
        };
        let statuses: BTreeMap<AgentId, AgentStatus> =
            check_transition_chain(&audit).map(|c| c.into_iter().collect()).unwrap_or_default();
        for (id, layer) in elsewhere {
            let Some(&status) = statuses.get(id) else { continue };
            lines.push(MetricsCalculator::summarize(
                id.clone(),
                *layer,
                status,
                metrics.remove(id).unwrap_or_default(),
            ));
        }
        lines.sort_by(|a, b| a.id.cmp(&b.id));
        lines
    }

    /// Stops the heartbeat and waits for the running heartbeats to finish, leaving every agent in
    /// its current status with everything stored: the run can be resumed later with
    /// [`Team::resume`]. (Shutting down instead ends every agent terminated, which is final.)
    pub async fn stop(&self) {
        if let Some((stop, driver)) = self.driver.lock().await.take() {
            let _ = stop.send(true);
            match driver.await {
                Ok(mut scheduler) => scheduler.settle().await,
                Err(e) => tracing::error!(error = %e, "the team's driver task failed"),
            }
        }
    }

    /// Stops the heartbeat as [`stop`](Self::stop) does, waiting at most `patience` for the
    /// running heartbeats; past it they are aborted, as if the process died (a tool call that
    /// was running is what a crash leaves: its journal tells whoever resumes the agent what
    /// became of it). `false` if it had to abort.
    pub async fn stop_within(&self, patience: Duration) -> bool {
        let Some((stop, mut driver)) = self.driver.lock().await.take() else { return true };
        let _ = stop.send(true);
        match tokio::time::timeout(patience, &mut driver).await {
            Ok(Ok(mut scheduler)) => {
                scheduler.settle().await;
                true
            }
            Ok(Err(e)) => {
                tracing::error!(error = %e, "the team's driver task failed");
                true
            }
            Err(_) => {
                driver.abort();
                false
            }
        }
    }

    /// Lets the agents answer the mail still waiting for them, for at most `patience` (the
    /// driver keeps running meanwhile): once every inbox of the team's agents is empty, or the
    /// time is up. A message can arrive after the task it is about closed (an agent resumed
    /// after a crash reports again what it had reported before); a graceful end answers it
    /// rather than leaving it unacknowledged.
    pub async fn quiesce(&self, patience: Duration) {
        let until = tokio::time::Instant::now() + patience;
        let poll = (self.heartbeat / 4).clamp(Duration::from_millis(5), Duration::from_millis(100));
        loop {
            let waiting = match self.services.bus.inboxes_with_mail().await {
                Ok(inboxes) => inboxes.iter().any(|a| self.pool.get(a).is_some()),
                Err(_) => false,
            };
            if !waiting || tokio::time::Instant::now() >= until {
                return;
            }
            self.wake();
            tokio::time::sleep(poll).await;
        }
    }

    /// Lets the agents answer the mail still waiting (at most [`QUIESCE_HEARTBEATS`]
    /// heartbeats, see [`quiesce`](Self::quiesce)), stops the heartbeat, waits for running
    /// heartbeats, and shuts every agent down (bottom layer first, top last, so the powers'
    /// final reports see the end): all end terminated.
    pub async fn shutdown(&self) -> Result<(), PoolError> {
        self.quiesce(self.heartbeat * QUIESCE_HEARTBEATS).await;
        self.stop().await;
        for layer in [AgentLayer::Bottom, AgentLayer::Mid, AgentLayer::Top] {
            // The agents of a layer shut down concurrently, a bounded number at a time, so a
            // durable backend's group commit serves many of them with one sync.
            let mut stopping: tokio::task::JoinSet<Result<(), PoolError>> =
                tokio::task::JoinSet::new();
            let mut first_error = None;
            for slot in self.pool.by_layer(layer) {
                if stopping.len() >= CONCURRENT_CREATIONS
                    && let Some(Err(e)) = stopping.join_next().await.map(flatten)
                {
                    first_error.get_or_insert(e);
                }
                stopping.spawn(async move {
                    let mut agent = slot.agent().lock().await;
                    agent
                        .shutdown()
                        .await
                        .map_err(|source| PoolError::Shutdown { id: slot.id().clone(), source })
                });
            }
            while let Some(joined) = stopping.join_next().await {
                if let Err(e) = flatten(joined) {
                    first_error.get_or_insert(e);
                }
            }
            if let Some(e) = first_error {
                return Err(e);
            }
        }
        Ok(())
    }
}

impl Drop for Team {
    /// A team dropped without [`Team::shutdown`] stops at once, as if the process died: the
    /// heartbeat driver and every running heartbeat are aborted, nothing is shut down, and the
    /// run can be resumed from what the backends stored.
    fn drop(&mut self) {
        if let Some((_, driver)) = self.driver.get_mut().take() {
            driver.abort();
        }
    }
}

/// What woke the driver.
enum Event {
    Heartbeat,
    Mail,
    TurnEnded,
    Stop,
}

/// The team's driver: a heartbeat every `period`, and in between, wake on work: when mail
/// arrives (`mail` is signalled by the team's [`WakingBus`]) or a turn ends (its agent may
/// have more mail by now), the agents with mail run at once.
#[allow(clippy::too_many_arguments, reason = "the driver's parts, each used in its loop")]
async fn drive(
    mut scheduler: HeartbeatScheduler,
    mut guard: RunGuard,
    period: Duration,
    mail: Arc<Notify>,
    bus: Arc<dyn MessageBus>,
    state: Arc<dyn StateStore>,
    reports: Reports,
    mut stop: watch::Receiver<bool>,
    deadlines: Arc<TaskDeadlines>,
    coordinates: bool,
) -> HeartbeatScheduler {
    let mut interval = tokio::time::interval(period);
    interval.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    // The first cycle starts before a stop is heeded (the interval's first tick is at once): a
    // resumed team's agents first take the turns an interruption cut short, their
    // unacknowledged mail, and a stop waits for those turns. Without this, a run killed after
    // its task closed but before the closing turn acknowledged its message would resume, see
    // the outcome, and shut down with that message never acknowledged.
    interval.tick().await;
    let mut event = Event::Heartbeat;
    // System messages read whose acknowledgement failed (a bus outage): sent again each cycle.
    let mut unacked = Vec::new();
    loop {
        match event {
            Event::Stop => {
                // Let the running heartbeats finish, then read what they reported. A bus that
                // fails now (its server restarting) is read again, a heartbeat later, a few
                // times at most: what the agents reported last is not left in `system`.
                scheduler.settle().await;
                if coordinates {
                    for attempt in 1..=FINAL_DRAINS {
                        let drained =
                            drain_system(bus.as_ref(), state.as_ref(), &reports, &mut unacked)
                                .await;
                        if drained {
                            break;
                        }
                        if attempt < FINAL_DRAINS {
                            tokio::time::sleep(period).await;
                        }
                    }
                }
                return scheduler;
            }
            Event::Heartbeat => {
                if coordinates {
                    guard.heartbeat(scheduler.still_running() > 0).await;
                    deadlines.expire(bus.as_ref(), &reports.tasks).await;
                } else {
                    // A share of a run sees only its own agents: whether the run moves is the
                    // coordinator's to judge; bounces are followed here.
                    guard.bounces().await;
                }
                let report = scheduler.tick().await;
                tracing::trace!(
                    heartbeat = report.number,
                    started = report.started,
                    idle = report.idle,
                    missed = report.missed.len(),
                    "cycle"
                );
            }
            Event::Mail | Event::TurnEnded => {
                guard.bounces().await;
                let woken = scheduler.wake().await;
                tracing::trace!(woken, "wake on work");
            }
        }
        if coordinates {
            drain_system(bus.as_ref(), state.as_ref(), &reports, &mut unacked).await;
        }
        let running = scheduler.running() > 0;
        let allowance = scheduler.next_wake();
        event = tokio::select! {
            biased;
            _ = stop.changed() => Event::Stop,
            _ = interval.tick() => Event::Heartbeat,
            () = mail.notified() => Event::Mail,
            true = scheduler.next_finished(), if running => Event::TurnEnded,
            () = sleep_until_some(allowance), if allowance.is_some() => Event::Mail,
        };
    }
}

/// The spawns among `spawns` whose spawn tree starts from a configured agent `hosted` says
/// yes to (a spawn's parent is a configured agent or an earlier spawn).
fn hosted_spawns(
    spawns: Vec<agent_core::SpawnRecord>,
    hosted: impl Fn(&AgentId) -> bool,
) -> Vec<agent_core::SpawnRecord> {
    let parents: BTreeMap<AgentId, AgentId> =
        spawns.iter().map(|s| (s.agent.clone(), s.parent.clone())).collect();
    let root = |agent: &AgentId| {
        let mut at = agent.clone();
        // Bounded: a malformed record with a parent cycle ends the walk.
        for _ in 0..=parents.len() {
            match parents.get(&at) {
                Some(parent) => at = parent.clone(),
                None => break,
            }
        }
        at
    };
    spawns.into_iter().filter(|s| hosted(&root(&s.agent))).collect()
}

/// How many agents [`Team`] creates or restores at the same time.
const CONCURRENT_CREATIONS: usize = 256;

/// A shutdown task's result, a panic as the agent's failure to shut down.
fn flatten(joined: Result<Result<(), PoolError>, tokio::task::JoinError>) -> Result<(), PoolError> {
    joined.unwrap_or_else(|e| {
        Err(PoolError::Stopped(format!("an agent's shutdown stopped before it finished: {e}")))
    })
}

/// The result of one agent's creation task.
fn created(joined: Result<Result<(), PoolError>, tokio::task::JoinError>) -> Result<(), TeamError> {
    match joined {
        Ok(result) => Ok(result?),
        Err(e) => Err(TeamError::Pool(PoolError::Stopped(format!(
            "an agent's creation stopped before it finished: {e}"
        )))),
    }
}

async fn sleep_until_some(at: Option<tokio::time::Instant>) {
    if let Some(at) = at {
        tokio::time::sleep_until(at).await;
    }
}

/// How many times the driver's last read of `system` (at a stop) is made when the bus fails.
const FINAL_DRAINS: u32 = 3;

/// What the agents report to `system`, published by the driver as it reads them.
struct Reports {
    /// The tasks' outcomes, by task id.
    tasks: watch::Sender<BTreeMap<String, TaskOutcome>>,
    /// The answers to operator commands, by the command's message id.
    commands: watch::Sender<BTreeMap<MessageId, CommandOutcome>>,
}

/// Reads the `system` inbox: heartbeat acks are dropped, task outcomes stored and published,
/// answers to operator commands published.
/// A message is acknowledged only after its outcome is stored. `true` if everything read (now
/// and before) is acknowledged; `false` if the bus or the store failed, leaving something for
/// the next drain.
async fn drain_system(
    bus: &dyn MessageBus,
    state: &dyn StateStore,
    reports: &Reports,
    unacked: &mut Vec<agent_state::MessageId>,
) -> bool {
    let messages = match bus.take(&Address::System, usize::MAX).await {
        Ok(m) => m,
        Err(e) => {
            tracing::warn!(error = %e, "cannot read the system inbox");
            ack_system(bus, unacked, Vec::new()).await;
            return false;
        }
    };
    for message in &messages {
        if message.kind == MessageKind::CommandOutcome {
            match (payload::<CommandOutcome>(message), message.correlation_id) {
                (Ok(outcome), Some(command)) => {
                    tracing::info!(agent = %message.from, ?outcome, "operator command answered");
                    reports.commands.send_modify(|c| {
                        c.insert(command, outcome);
                    });
                }
                (Ok(_), None) => {
                    tracing::warn!(from = %message.from, "a command outcome that answers no command");
                }
                (Err(e), _) => {
                    tracing::warn!(error = %e, "unreadable command outcome on the system inbox");
                }
            }
            continue;
        }
        if message.kind != MessageKind::StatusReport {
            continue;
        }
        match payload::<StatusReport>(message) {
            Ok(StatusReport::TaskClosed { outcome }) => {
                if let Err(e) = state.record_outcome(&outcome).await {
                    // Not acknowledged: the report comes again on the next cycle.
                    tracing::warn!(error = %e, "cannot store a task outcome; will retry");
                    let _ = bus.release(&Address::System).await;
                    ack_system(bus, unacked, Vec::new()).await;
                    return false;
                }
                tracing::info!(task = %outcome.task_id(), success = outcome.is_success(), "task closed");
                reports.tasks.send_modify(|o| {
                    o.entry(outcome.task_id().to_owned()).or_insert(outcome);
                });
            }
            Ok(_) => {}
            Err(e) => tracing::warn!(error = %e, "unreadable status report on the system inbox"),
        }
    }
    ack_system(bus, unacked, messages.iter().map(|m| m.id).collect()).await
}

/// Acknowledges `read` on the system inbox, with the ids in `unacked` whose acknowledgement
/// failed before: a failed acknowledgement (the bus unreachable for a while) keeps them all in
/// `unacked`, to be sent again at the next drain, so none stays pending once the bus is back.
/// Acknowledging an id again is harmless (a bus ignores ids no longer in flight). `true` if
/// nothing is left unacknowledged.
async fn ack_system(
    bus: &dyn MessageBus,
    unacked: &mut Vec<agent_state::MessageId>,
    read: Vec<agent_state::MessageId>,
) -> bool {
    unacked.extend(read);
    if unacked.is_empty() {
        return true;
    }
    match bus.ack(&Address::System, unacked).await {
        Ok(_) => {
            unacked.clear();
            true
        }
        Err(e) => {
            tracing::warn!(error = %e, pending = unacked.len(), "cannot acknowledge the system inbox; will send the acknowledgement again");
            false
        }
    }
}

/// Checks the whole team and returns each agent's configuration with subordinates filled in.
pub fn validate(spec: &TeamSpec, services: &TeamServices) -> Result<Vec<AgentConfig>, TeamError> {
    spec.timeouts.check()?;
    spec.timeouts.check_soft()?;
    if spec.agents.len() > spec.max_agents {
        return Err(TeamError::TooManyAgents { count: spec.agents.len(), max: spec.max_agents });
    }
    if !spec.agents.iter().any(|a| a.config.layer == AgentLayer::Top) {
        return Err(TeamError::NoTopAgent);
    }
    if spec.arbitration.any()
        && !spec.agents.iter().any(|a| {
            a.config.layer == AgentLayer::Top && a.config.has(agent_state::Capability::Arbitrate)
        })
    {
        return Err(TeamError::NoArbitrator);
    }
    spec.guards.check()?;
    let executor = services.kind_runner().executor;
    let mut layers: BTreeMap<AgentId, AgentLayer> = BTreeMap::new();
    for agent in &spec.agents {
        agent.config.validate()?;
        if agent.role.layer() != agent.config.layer {
            return Err(TeamError::LayerMismatch {
                agent: agent.config.id.clone(),
                role: agent.role.layer(),
                layer: agent.config.layer,
            });
        }
        if layers.insert(agent.config.id.clone(), agent.config.layer).is_some() {
            return Err(TeamError::DuplicateAgent { agent: agent.config.id.clone() });
        }
    }
    // Each agent's subordinates, found once (a team can have 100 000 agents).
    let mut children: BTreeMap<&AgentId, Vec<AgentId>> = BTreeMap::new();
    for agent in &spec.agents {
        if let Some(supervisor) = &agent.config.supervisor {
            children.entry(supervisor).or_default().push(agent.config.id.clone());
        }
    }
    let mut configs = Vec::with_capacity(spec.agents.len());
    for agent in &spec.agents {
        let config = &agent.config;
        if let Some(supervisor) = &config.supervisor {
            let Some(&supervisor_layer) = layers.get(supervisor) else {
                return Err(TeamError::UnknownSupervisor {
                    agent: config.id.clone(),
                    supervisor: supervisor.clone(),
                });
            };
            let expected =
                if config.layer == AgentLayer::Bottom { AgentLayer::Mid } else { AgentLayer::Top };
            if supervisor_layer != expected {
                return Err(TeamError::WrongSupervisorLayer {
                    agent: config.id.clone(),
                    layer: config.layer,
                    supervisor: supervisor.clone(),
                    supervisor_layer,
                    expected,
                });
            }
        }
        let derived: Vec<AgentId> = children.remove(&config.id).unwrap_or_default();
        if let Some(stray) = config.subordinates.iter().find(|s| !derived.contains(s)) {
            return Err(TeamError::SubordinateMismatch {
                agent: config.id.clone(),
                subordinate: stray.clone(),
            });
        }
        match &agent.role {
            RoleSpec::Mid(m) if config.layer == AgentLayer::Mid => {
                let count =
                    derived.iter().filter(|d| layers.get(*d) == Some(&AgentLayer::Bottom)).count();
                if count > m.max_subordinates {
                    return Err(TeamError::TooManySubordinates {
                        agent: config.id.clone(),
                        count,
                        max: m.max_subordinates,
                    });
                }
            }
            RoleSpec::Bottom(b) => {
                if let Some(ooda) = &b.ooda {
                    agent_ooda::check_config(ooda, &b.tools).map_err(|e| TeamError::Ooda {
                        agent: config.id.clone(),
                        error: e.to_string(),
                    })?;
                }
                if let Some(kind) = &b.kind
                    && !executor.registry().contains(kind)
                {
                    return Err(TeamError::UnknownKind {
                        agent: config.id.clone(),
                        kind: kind.to_string(),
                        known: executor.registry().names().collect::<Vec<_>>().join(", "),
                    });
                }
                let registry = services.agent_tools.get(&config.id).unwrap_or(&services.tools);
                let is_kind = |t: &String| b.kind.as_deref() == Some(t.as_str());
                if let Some(tool) =
                    b.tools.iter().find(|t| registry.get(t).is_none() && !is_kind(t))
                {
                    return Err(TeamError::UnknownTool {
                        agent: config.id.clone(),
                        tool: tool.clone(),
                        available: registry.names().join(", "),
                    });
                }
            }
            _ => {}
        }
        let mut config = config.clone();
        config.subordinates = derived;
        // Every executor of a lead names it: one shared id instead of a copy in each.
        if let Some(supervisor) = &config.supervisor
            && let Some((shared, _)) = layers.get_key_value(supervisor)
        {
            config.supervisor = Some(shared.clone());
        }
        configs.push(config);
    }
    Ok(configs)
}

fn leads(spec: &TeamSpec, configs: &[AgentConfig]) -> Vec<LeadInfo> {
    // Executors by lead, in one pass: a generated team has 100 leads and 100 000 executors.
    let mut executors: BTreeMap<&AgentId, Vec<_>> = BTreeMap::new();
    for agent in &spec.agents {
        if let (RoleSpec::Bottom(b), Some(lead)) = (&agent.role, &agent.config.supervisor) {
            executors.entry(lead).or_default().push((agent.config.id.clone(), b.tools.clone()));
        }
    }
    spec.agents
        .iter()
        .zip(configs)
        .filter_map(|(agent, config)| match &agent.role {
            RoleSpec::Mid(m) => Some(LeadInfo {
                id: config.id.clone(),
                domain: m.domain.clone(),
                executors: executors.remove(&config.id).unwrap_or_default(),
            }),
            _ => None,
        })
        .collect()
}

#[cfg(test)]
mod drain_tests {
    #![allow(clippy::unwrap_used, reason = "tests")]
    use std::sync::atomic::{AtomicU32, Ordering};

    use agent_state::{BackendError, MessageId, Timestamp};
    use async_trait::async_trait;
    use message_bus::{InMemoryBus, InboxError, RegisterError, SendError};

    use super::*;

    /// An in-memory bus whose next `fails` acknowledgements fail (a server restarting).
    struct FlakyAcks {
        inner: InMemoryBus,
        fails: AtomicU32,
    }

    #[async_trait]
    impl MessageBus for FlakyAcks {
        async fn register(&self, agent: &AgentId) -> Result<(), RegisterError> {
            self.inner.register(agent).await
        }
        async fn unregister(&self, agent: &AgentId) -> Result<(), RegisterError> {
            self.inner.unregister(agent).await
        }
        async fn is_registered(&self, agent: &AgentId) -> Result<bool, BackendError> {
            self.inner.is_registered(agent).await
        }
        async fn registered(&self) -> Result<Vec<AgentId>, BackendError> {
            self.inner.registered().await
        }
        async fn send(&self, message: Message) -> Result<usize, SendError> {
            self.inner.send(message).await
        }
        async fn take(&self, inbox: &Address, max: usize) -> Result<Vec<Message>, InboxError> {
            self.inner.take(inbox, max).await
        }
        async fn ack(&self, inbox: &Address, ids: &[MessageId]) -> Result<usize, InboxError> {
            if self
                .fails
                .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1))
                .is_ok()
            {
                return Err(InboxError::Backend(BackendError::new("test", "server restarting")));
            }
            self.inner.ack(inbox, ids).await
        }
        async fn release(&self, inbox: &Address) -> Result<usize, InboxError> {
            self.inner.release(inbox).await
        }
        async fn pending(&self, inbox: &Address) -> Result<usize, InboxError> {
            self.inner.pending(inbox).await
        }
    }

    #[tokio::test]
    async fn a_failed_system_ack_is_sent_again_at_the_next_drain() {
        let bus = FlakyAcks { inner: InMemoryBus::new(), fails: AtomicU32::new(1) };
        let from = AgentId::new("worker");
        bus.register(&from).await.unwrap();
        for heartbeat in 1..=2u64 {
            let ack = Message::new(
                agent_core::new_message_id(),
                Address::Agent(from.clone()),
                Address::System,
                MessageKind::HeartbeatAck,
                serde_json::json!({ "heartbeat": heartbeat }),
                Timestamp(heartbeat),
            );
            bus.send(ack).await.unwrap();
        }
        let state = agent_core::InMemoryStateStore::default();
        let reports = Reports {
            tasks: watch::channel(BTreeMap::new()).0,
            commands: watch::channel(BTreeMap::new()).0,
        };
        let mut unacked = Vec::new();
        // The acknowledgement fails during the outage: both are kept, and the drain says so
        // (a stop's last drain is made again).
        assert!(!drain_system(&bus, &state, &reports, &mut unacked).await);
        assert_eq!(unacked.len(), 2);
        // Back: the next drain, with nothing new to read, acknowledges them.
        assert!(drain_system(&bus, &state, &reports, &mut unacked).await);
        assert!(unacked.is_empty());
        assert_eq!(bus.pending(&Address::System).await.unwrap(), 0);
        assert_eq!(
            bus.release(&Address::System).await.unwrap(),
            0,
            "left in flight, unacknowledged"
        );
    }
}
