//! The team API: build a team (layered, a crew or a single agent: [`crate::TeamShape`]) from
//! one value, submit tasks, wait for outcomes,
//! watch its events as they happen ([`Team::events`]), shut down.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;
use tracing::Instrument as _;

use agent_core::tools::{ToolContext, ToolRegistry};
use agent_core::{Agent, AuditLog, Clock, Reasoner, StateStore, check_transition_chain};
use agent_layers::{BottomSpec, KindRunner, LeadInfo, MidSpec, TopSpec};
use agent_state::{
    Address, AgentConfig, AgentId, AgentLayer, AgentStatus, Assignment, CommandOutcome,
    DEFAULT_MAX_SPAWN_DEPTH, GuardSettings, Message, MessageId, MessageKind, OperatorCommand,
    RoleBook, Task, TaskFailure, TaskOutcome,
};
use governance::Governance;
use message_bus::MessageBus;
use thiserror::Error;
use tokio::sync::{Mutex, watch};
use whiteboard::Whiteboard;

use crate::deadline::TaskDeadlines;
use crate::driver::DriverHandle;
use crate::guard::Observer;
use crate::metrics::{AgentSummary, MetricsCalculator};
use crate::pool::{AgentPool, DEFAULT_MAX_AGENTS, PoolError};
use crate::scheduler::DEFAULT_HEARTBEAT;
use crate::stores::TeamStores;

mod build;

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
    /// The roles agents may spawn while the team works (docs/concepts.md#roles-and-spawning);
    /// empty: none.
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
    /// The executor that runs the subtasks of executors with a `kind`
    /// (docs/concepts.md#executor-kinds); `None`: one with the built-in kinds
    /// ([`agent_executor::builtins()`]) in the team's workspace.
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
        Self::on_stores(TeamStores::in_memory(), workspace, reasoner)
    }

    /// Services on `stores`, and otherwise as [`TeamServices::in_memory`]: the real clock, the
    /// built-in tools in `workspace`, every agent reasoning with `reasoner`.
    pub fn on_stores(
        stores: TeamStores,
        workspace: ToolContext,
        reasoner: Arc<dyn Reasoner>,
    ) -> Self {
        let TeamStores { bus, boards, governance, audit, state } = stores;
        Self {
            bus,
            boards,
            governance,
            audit,
            clock: Arc::new(agent_core::TokioClock::new()),
            workspace: Arc::new(workspace),
            tools: Arc::new(ToolRegistry::with_builtins()),
            reasoner,
            state,
            reasoners: BTreeMap::new(),
            agent_tools: BTreeMap::new(),
            role_reasoners: BTreeMap::new(),
            role_tools: BTreeMap::new(),
            costs: None,
            executor: None,
            events: agent_core::EventHub::default(),
        }
    }

    /// Services on the NATS JetStream stores of `store`'s namespace ([`NatsStores::open`]: bus,
    /// whiteboards, governance, audit log, state store and its tool journal), created there if
    /// new, and otherwise as [`TeamServices::on_stores`]. A team started on them can be resumed
    /// by another process (or after a restart) with services opened on the same namespace.
    ///
    /// [`NatsStores::open`]: crate::NatsStores::open
    #[cfg(feature = "nats")]
    pub async fn on_nats(
        store: &nats_store::NatsStore,
        workspace: ToolContext,
        reasoner: Arc<dyn Reasoner>,
    ) -> Result<Self, crate::NatsStoresError> {
        let stores = crate::NatsStores::open(store).await?;
        Ok(Self::on_stores(stores.into(), workspace, reasoner))
    }
}

/// Where goal steps land only on executors that carry them out by themselves (with a `kind`,
/// or OODA agents): those executors, and the domains whose every executor is one.
#[derive(Debug, Default)]
struct KindCoverage {
    agents: std::collections::BTreeSet<AgentId>,
    domains: std::collections::BTreeSet<String>,
    /// Every step: a crew whose every executor carries out its steps by itself, or a single
    /// agent that does (a crew's lead and a single agent take every domain).
    all: bool,
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
        coverage.all = match spec.shape() {
            crate::TeamShape::Layered => false,
            crate::TeamShape::Crew => !coverage.domains.is_empty(),
            crate::TeamShape::Single => !coverage.agents.is_empty(),
        };
        coverage
    }

    fn runs(&self, step: &agent_state::PlanStep) -> bool {
        if self.all {
            return true;
        }
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
    /// The agents do not make one of the team shapes ([`TeamShape`](crate::TeamShape)).
    #[error("a {shape} team: {reason}")]
    Shape {
        /// The shape the team's layers make.
        shape: crate::TeamShape,
        /// What is wrong, in words.
        reason: String,
    },
    /// A lead or an executor without a supervisor in a team that has a layer above it: in a
    /// team with powers every lead reports to a power and every executor to a lead; in a crew
    /// every executor reports to the lead.
    #[error(
        "agent `{agent}` ({layer}) has no supervisor; {}",
        crate::shape::reports_to(*.layer)
    )]
    MissingSupervisor {
        /// The agent.
        agent: AgentId,
        /// Its layer.
        layer: AgentLayer,
    },
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
    /// A goal-only task (or one with goal steps) for a team whose entry agent's reasoner
    /// (the proposing power's, a crew lead's, a single agent's) cannot plan.
    #[error(
        "task `{task}` has only a goal (or steps without a tool), but the reasoner `{reasoner}` \
         of the agent that takes the team's tasks cannot plan from words; give it a model \
         reasoner (openai, anthropic or local), or give every step a `tool` and its `args`"
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
    /// The agent tasks go to ([`TeamSpec::entry`]).
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
    driver: Mutex<Option<DriverHandle>>,
    /// Filled by every delivery through the team's bus: wakes the driver.
    ready: Arc<crate::wake::ReadyQueue>,
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
        services: TeamServices,
        resume: bool,
        share: Share,
    ) -> Result<Self, TeamError> {
        build::TeamBuilder::new(spec, services, share)?.launch(resume).await
    }

    /// Wakes the team's driver for mail it cannot see arrive: the agents with mail take their
    /// turns now, not at the next heartbeat. For mail that another process delivered (a
    /// worker sees it on the server): the next wake lists the inboxes with mail
    /// ([`ReadyQueue::rescan`](crate::ReadyQueue::rescan)).
    pub fn wake(&self) {
        self.ready.rescan();
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

    /// The agent the team hands its tasks to ([`TeamSpec::entry`]): the first top power of a
    /// layered team, the lead of a crew, the executor of a single agent.
    pub fn entry(&self) -> &AgentId {
        &self.proposer
    }

    /// Hands a task to the team's entry agent ([`Team::entry`]: the proposing top power, a
    /// crew's lead or a single agent). The plan is checked first; a task with only a goal (no
    /// steps: the entry agent plans it) or with goal steps needs an entry agent whose reasoner
    /// [plans](agent_core::Reasoner::plans), else [`SubmitError::CannotPlan`].
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
        if let Some(driver) = self.driver.lock().await.take() {
            driver.stop().await;
        }
    }

    /// Stops the heartbeat as [`stop`](Self::stop) does, waiting at most `patience` for the
    /// running heartbeats; past it they are aborted, as if the process died (a tool call that
    /// was running is what a crash leaves: its journal tells whoever resumes the agent what
    /// became of it). `false` if it had to abort.
    pub async fn stop_within(&self, patience: Duration) -> bool {
        match self.driver.lock().await.take() {
            Some(driver) => driver.stop_within(patience).await,
            None => true,
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
    ///
    /// The agents of a layer are shut down in batches with [`Agent::shutdown_many`], whose
    /// durable writes for a whole batch go in one call per step (one commit on sled), so a
    /// crash leaves each agent where a crash in its own shutdown could. An agent that fails to
    /// shut down is logged; once its layer is done, the first failure is returned and the
    /// layers above are left as they are.
    pub async fn shutdown(&self) -> Result<(), PoolError> {
        self.quiesce(self.heartbeat * QUIESCE_HEARTBEATS).await;
        self.stop().await;
        for layer in [AgentLayer::Bottom, AgentLayer::Mid, AgentLayer::Top] {
            // The agents of a layer shut down in batches ([`Agent::shutdown_many`]: each step's
            // durable writes for a whole batch in one call, one commit), a few batches at a
            // time, so a durable backend's group commit also serves several batches with one
            // sync.
            let mut stopping: tokio::task::JoinSet<Result<(), PoolError>> =
                tokio::task::JoinSet::new();
            let mut first_error = None;
            let slots = self.pool.by_layer(layer);
            for batch in slots.chunks(SHUTDOWN_BATCH) {
                if stopping.len() >= CONCURRENT_SHUTDOWN_BATCHES
                    && let Some(Err(e)) = stopping.join_next().await.map(flatten)
                {
                    first_error.get_or_insert(e);
                }
                let batch = batch.to_vec();
                stopping.spawn(async move {
                    let mut agents = Vec::with_capacity(batch.len());
                    for slot in &batch {
                        agents.push(slot.agent().lock().await);
                    }
                    let mut refs: Vec<&mut Agent> = agents.iter_mut().map(|a| &mut **a).collect();
                    let results = Agent::shutdown_many(&mut refs).await;
                    drop(refs);
                    drop(agents);
                    // The first agent's error, if any; every agent's failure is logged.
                    let mut first = None;
                    for (slot, result) in batch.iter().zip(results) {
                        if let Err(source) = result {
                            let error = PoolError::Shutdown { id: slot.id().clone(), source };
                            tracing::warn!(error = %error, "agent did not shut down");
                            first.get_or_insert(error);
                        }
                    }
                    first.map_or(Ok(()), Err)
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
        if let Some(driver) = self.driver.get_mut().take() {
            driver.abort();
        }
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

/// How many agents of a layer [`Team::shutdown`] shuts down as one batch.
const SHUTDOWN_BATCH: usize = 1024;

/// How many batches of agents [`Team::shutdown`] shuts down at the same time.
const CONCURRENT_SHUTDOWN_BATCHES: usize = 4;

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

/// Checks the whole team and returns each agent's configuration with subordinates filled in.
pub fn validate(spec: &TeamSpec, services: &TeamServices) -> Result<Vec<AgentConfig>, TeamError> {
    check_team_settings(spec)?;
    let executor = services.kind_runner().executor;
    let layers = check_agents(spec)?;
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
        check_supervisor(config, &layers)?;
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
            RoleSpec::Bottom(b) => check_executor(config, b, &executor, services)?,
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

/// The team's own settings: time limits, size, its shape (a layered team's arbitrator if it
/// votes), guards.
fn check_team_settings(spec: &TeamSpec) -> Result<(), TeamError> {
    spec.timeouts.check()?;
    spec.timeouts.check_soft()?;
    if spec.agents.len() > spec.max_agents {
        return Err(TeamError::TooManyAgents { count: spec.agents.len(), max: spec.max_agents });
    }
    let shape = crate::shape::check_shape(spec)?;
    // A crew or a single agent has no powers to vote: nothing is arbitrated.
    if shape == crate::TeamShape::Layered
        && spec.arbitration.any()
        && !spec.agents.iter().any(|a| {
            a.config.layer == AgentLayer::Top && a.config.has(agent_state::Capability::Arbitrate)
        })
    {
        return Err(TeamError::NoArbitrator);
    }
    spec.guards.check()?;
    Ok(())
}

/// Every agent's configuration, its role's layer, each id once; returns each agent's layer.
fn check_agents(spec: &TeamSpec) -> Result<BTreeMap<AgentId, AgentLayer>, TeamError> {
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
    Ok(layers)
}

/// An agent's supervisor, if it has one, is in the team, on the layer above.
fn check_supervisor(
    config: &AgentConfig,
    layers: &BTreeMap<AgentId, AgentLayer>,
) -> Result<(), TeamError> {
    let Some(supervisor) = &config.supervisor else { return Ok(()) };
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
    Ok(())
}

/// An executor's OODA settings, its kind (one `executor` has) and its tools (registered).
fn check_executor(
    config: &AgentConfig,
    b: &BottomSpec,
    executor: &agent_executor::Executor,
    services: &TeamServices,
) -> Result<(), TeamError> {
    if let Some(ooda) = &b.ooda {
        agent_ooda::check_config(ooda, &b.tools)
            .map_err(|e| TeamError::Ooda { agent: config.id.clone(), error: e.to_string() })?;
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
    if let Some(tool) = b.tools.iter().find(|t| registry.get(t).is_none() && !is_kind(t)) {
        return Err(TeamError::UnknownTool {
            agent: config.id.clone(),
            tool: tool.clone(),
            available: registry.names().join(", "),
        });
    }
    Ok(())
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
