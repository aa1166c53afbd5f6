//! Building a [`Team`] from its spec ([`TeamBuilder`]): the services wired for the team, what a
//! resumed run stored ([`Restored`]), who is who ([`Roster`]), every hosted agent created or
//! restored, and the [`Driver`] started.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use agent_core::{
    Agent, AgentBehavior, AgentDeps, AgentRecord, SpawnRecord, check_transition_chain,
};
use agent_layers::{BottomAgent, BottomSpec, LeadInfo, MidAgent, TopAgent};
use agent_state::{AgentConfig, AgentId, AgentStatus, RoleBook, TaskOutcome};
use tokio::sync::{Mutex, watch};
use tokio::task::JoinSet;

use super::{
    AgentSpec, CONCURRENT_CREATIONS, KindCoverage, RoleSpec, Share, Team, TeamError, TeamServices,
    TeamSpec, created, hosted_spawns, leads, validate,
};
use crate::deadline::TaskDeadlines;
use crate::driver::{Coordination, Driver};
use crate::guard::{Observer, Outlets, RunGuard};
use crate::pool::{AgentPool, PoolError};
use crate::scheduler::HeartbeatScheduler;
use crate::spawner::TeamSpawner;
use crate::wake::{ReadyQueue, WakingBus};

/// A team on its way up: the checked spec, the services wired for it, and the share of the
/// run this process hosts.
pub(super) struct TeamBuilder {
    spec: TeamSpec,
    services: TeamServices,
    share: Share,
    /// Each agent's configuration with subordinates filled in, in the spec's order.
    configs: Vec<AgentConfig>,
    /// Filled by every delivery through the team's bus: wakes the driver.
    ready: Arc<ReadyQueue>,
    /// What the guards are shown of the deliveries.
    observer: Arc<Observer>,
}

/// What a resumed run stored about its agents (nothing for a new run).
#[derive(Default)]
struct Restored {
    /// Each agent's last status, from the audit log's transitions.
    statuses: BTreeMap<AgentId, AgentStatus>,
    /// Each agent's stored record (metrics, retries, processed ids, layer state).
    records: BTreeMap<AgentId, AgentRecord>,
    /// The spawns the audit log records, in order, and the agents despawned since.
    spawns: Vec<SpawnRecord>,
    despawned: Vec<AgentId>,
}

impl Restored {
    /// Reads the audit log and the state store of a run being resumed.
    async fn read(services: &TeamServices) -> Result<Self, TeamError> {
        let audit = services.audit.records(None).await.map_err(TeamError::Store)?;
        let mut restored = Self::default();
        for record in &audit {
            match &record.event {
                agent_core::AuditEvent::Spawned { spawn } => restored.spawns.push(spawn.clone()),
                agent_core::AuditEvent::Despawned { agent, .. } => {
                    restored.despawned.push(agent.clone())
                }
                _ => {}
            }
        }
        restored.statuses =
            check_transition_chain(&audit).map_err(TeamError::Chain)?.into_iter().collect();
        restored.records = services
            .state
            .agents()
            .await
            .map_err(TeamError::Store)?
            .into_iter()
            .map(|r| (r.id.clone(), r))
            .collect();
        Ok(restored)
    }
}

/// Who is who in the team: what each agent's behaviour is built from.
struct Roster {
    leads: Vec<LeadInfo>,
    /// Each lead's executors, one shared list per lead (peer help).
    peers: BTreeMap<AgentId, agent_layers::Peers>,
    /// The top powers with their signature authority.
    tops: Vec<(AgentId, Vec<String>)>,
    top_ids: Vec<AgentId>,
    /// The powers that vote in arbitrations.
    voters: Vec<AgentId>,
    /// The agent tasks go to ([`TeamSpec::entry`]): the first top power, which proposes the
    /// plans; a crew's lead; a single agent.
    proposer: AgentId,
    /// The roles agents may spawn (empty without a spawner).
    roles: Arc<RoleBook>,
}

impl Roster {
    fn of(spec: &TeamSpec, configs: &[AgentConfig]) -> Result<Self, TeamError> {
        let leads = leads(spec, configs);
        let peers = leads.iter().map(|l| (l.id.clone(), l.executors.clone().into())).collect();
        let tops: Vec<(AgentId, Vec<String>)> = spec
            .agents
            .iter()
            .filter_map(|a| match &a.role {
                RoleSpec::Top(t) => Some((a.config.id.clone(), t.signature_authority.clone())),
                _ => None,
            })
            .collect();
        let top_ids: Vec<AgentId> = tops.iter().map(|(id, _)| id.clone()).collect();
        let voters = spec
            .agents
            .iter()
            .filter(|a| {
                matches!(a.role, RoleSpec::Top(_))
                    && a.config.has(agent_state::Capability::Arbitrate)
            })
            .map(|a| a.config.id.clone())
            .collect();
        let proposer = spec.entry().map(|a| a.config.id.clone()).ok_or_else(|| {
            TeamError::Shape { shape: spec.shape(), reason: "the team has no agents".into() }
        })?;
        Ok(Self { leads, peers, tops, top_ids, voters, proposer, roles: Arc::default() })
    }
}

impl TeamBuilder {
    /// Checks `spec` (and that `share` names only its agents) and wires `services` for the
    /// team: the tool limit on the workspace, the waking and observed bus, the publishing audit
    /// log, one executor for every executor with a kind.
    pub(super) fn new(
        spec: TeamSpec,
        mut services: TeamServices,
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
        // Wake on work: every delivery through the team's bus makes its recipient ready and
        // wakes the driver, and is shown to the run's guards.
        let ready = Arc::new(ReadyQueue::new());
        let observer = Arc::new(Observer::default());
        services.bus = Arc::new(
            WakingBus::new(services.bus.clone(), ready.clone()).observed(observer.clone()),
        );
        // Every record any agent appends is published on the team's event stream once stored.
        services.audit = Arc::new(agent_core::PublishingAuditLog::new(
            services.audit.clone(),
            services.events.clone(),
        ));
        // One executor for every executor with a kind, made now if none was given.
        services.executor = Some(services.kind_runner().executor);
        Ok(Self { spec, services, share, configs, ready, observer })
    }

    /// Creates (or, with `resume`, restores from the stores) every agent the share hosts and
    /// starts the heartbeat.
    pub(super) async fn launch(mut self, resume: bool) -> Result<Team, TeamError> {
        let mut restored =
            if resume { Restored::read(&self.services).await? } else { Restored::default() };
        let pool = Arc::new(AgentPool::new(self.spec.max_agents));
        let mut roster = Roster::of(&self.spec, &self.configs)?;
        let spawner = (!self.spec.roles.is_empty()).then(|| {
            let shared = matches!(self.share, Share::Agents(_));
            TeamSpawner::new(
                &pool,
                self.services.clone(),
                &self.spec,
                roster.top_ids.clone(),
                shared,
            )
        });
        if let Some(spawner) = &spawner {
            roster.roles = spawner.roles();
        }
        self.create_agents(&pool, &roster, spawner.as_ref(), &mut restored).await?;
        if let Some(spawner) = &spawner {
            // Spawned agents live with the configured agent their spawn tree starts from.
            let spawns = match &self.share {
                Share::All => std::mem::take(&mut restored.spawns),
                share => {
                    hosted_spawns(std::mem::take(&mut restored.spawns), |root| share.hosts(root))
                }
            };
            let Restored { statuses, records, despawned, .. } = &mut restored;
            spawner.restore(&pool, spawns, despawned, statuses, records).await?;
        }
        self.start(pool, roster.proposer).await
    }

    /// Creates or restores the hosted agents concurrently, a bounded number at a time, so a
    /// durable backend's group commit serves many of them with one sync.
    async fn create_agents(
        &mut self,
        pool: &Arc<AgentPool>,
        roster: &Roster,
        spawner: Option<&Arc<TeamSpawner>>,
        restored: &mut Restored,
    ) -> Result<(), TeamError> {
        let mut creating: JoinSet<Result<(), PoolError>> = JoinSet::new();
        let configs = std::mem::take(&mut self.configs);
        for (agent, config) in self.spec.agents.iter().zip(configs) {
            let id = config.id.clone();
            if !self.share.hosts(&id) {
                continue;
            }
            let behavior = self.behavior(agent, &config, roster)?;
            let deps = self.deps(&id, spawner);
            if creating.len() >= CONCURRENT_CREATIONS
                && let Some(joined) = creating.join_next().await
            {
                created(joined)?;
            }
            let pool = pool.clone();
            match restored.statuses.get(&id) {
                Some(&status) => {
                    let record = restored.records.remove(&id);
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
        Ok(())
    }

    /// The behaviour of `agent`, from its role.
    fn behavior(
        &self,
        agent: &AgentSpec,
        config: &AgentConfig,
        roster: &Roster,
    ) -> Result<Box<dyn AgentBehavior>, TeamError> {
        let id = &config.id;
        Ok(match &agent.role {
            RoleSpec::Top(t) => {
                let peers = roster.tops.iter().filter(|(p, _)| p != id).cloned().collect();
                let others = roster.voters.iter().filter(|v| *v != id).cloned().collect();
                Box::new(
                    TopAgent::new(t.clone(), peers, roster.leads.clone())
                        .with_roles(roster.roles.clone())
                        .with_arbitration(self.spec.arbitration)
                        .with_voters(others)
                        .with_human_approval(
                            self.spec.approvals.plans.then(|| self.spec.approvals.humans.clone()),
                        ),
                )
            }
            RoleSpec::Mid(m) => self.lead(m, id, roster),
            RoleSpec::Bottom(BottomSpec { ooda: Some(ooda), tools, .. }) => {
                let ooda = agent_ooda::Ooda::new(
                    id.clone(),
                    ooda.as_ref().clone(),
                    agent_ooda::ReasonerLoop,
                    tools,
                    self.services.clock.now(),
                )
                .map_err(|e| TeamError::Ooda { agent: id.clone(), error: e.to_string() })?
                .with_approvers(self.spec.approvals.humans.clone())
                .with_guards(self.spec.guards);
                Box::new(agent_ooda::OodaBehavior::new(ooda))
            }
            RoleSpec::Bottom(b) => {
                let mut executor = BottomAgent::new(b.clone()).with_guards(self.spec.guards);
                if config.supervisor.is_none() {
                    // A single agent: it takes the team's tasks itself.
                    executor = executor.solo();
                }
                if let Some(peers) = config.supervisor.as_ref().and_then(|s| roster.peers.get(s)) {
                    executor = executor.with_peers(peers.clone());
                }
                Box::new(match b.kind {
                    Some(_) => executor.with_runner(self.services.kind_runner()),
                    None => executor,
                })
            }
        })
    }

    /// A lead's behaviour: its executors, the top powers and the other leads.
    fn lead(
        &self,
        spec: &agent_layers::MidSpec,
        id: &AgentId,
        roster: &Roster,
    ) -> Box<dyn AgentBehavior> {
        let executors = roster
            .leads
            .iter()
            .find(|l| l.id == *id)
            .map(|l| l.executors.clone())
            .unwrap_or_default();
        let peers = roster.leads.iter().filter(|l| l.id != *id).map(|l| l.id.clone()).collect();
        let lead = MidAgent::new(spec.clone(), executors, roster.top_ids.clone(), peers)
            .with_guards(self.spec.guards)
            .with_arbitration(self.spec.arbitration);
        // A crew's lead: it takes the team's tasks itself, with no powers above it.
        let lead = if roster.proposer == *id { lead.leading() } else { lead };
        let supervises = self
            .spec
            .agent_roles
            .get(id)
            .and_then(|r| self.spec.roles.get(r))
            .is_some_and(agent_state::Role::supervises);
        Box::new(if supervises { lead.supervising() } else { lead })
    }

    /// What agent `id` works with: the team's services, its own reasoner and tools if it has
    /// them.
    fn deps(&self, id: &AgentId, spawner: Option<&Arc<TeamSpawner>>) -> Arc<AgentDeps> {
        let services = &self.services;
        Arc::new(AgentDeps {
            bus: services.bus.clone(),
            boards: services.boards.clone(),
            governance: services.governance.clone(),
            audit: services.audit.clone(),
            reasoner: services
                .reasoners
                .get(id)
                .cloned()
                .unwrap_or_else(|| services.reasoner.clone()),
            tools: services.agent_tools.get(id).cloned().unwrap_or_else(|| services.tools.clone()),
            workspace: services.workspace.clone(),
            clock: services.clock.clone(),
            state: services.state.clone(),
            spawner: spawner.cloned().map(|s| s as Arc<dyn agent_core::Spawner>),
            timeouts: self.spec.timeouts,
        })
    }

    /// Reads the closed tasks' outcomes, starts the driver and hands over the team.
    async fn start(self, pool: Arc<AgentPool>, proposer: AgentId) -> Result<Team, TeamError> {
        let Self { spec, services, share, ready, observer, .. } = self;
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
        let outlets = Outlets {
            bus: services.bus.clone(),
            audit: services.audit.clone(),
            clock: services.clock.clone(),
        };
        let guard =
            RunGuard::new(spec.guards, observer.clone(), pool.clone(), proposer.clone(), outlets);
        let mut driver = Driver::new(scheduler, spec.heartbeat)
            .with_wake(ready.clone())
            .with_guard(guard)
            .with_outcomes(outcome_tx);
        if share.coordinates() {
            driver = driver.with_coordination(Coordination::new(
                services.bus.clone(),
                services.state.clone(),
                deadlines.clone(),
                command_tx,
            ));
        }
        // The driver (and the turns it starts) run in the caller's span: a run's telemetry
        // knows which run every agent's span belongs to.
        let driver = driver.spawn();
        Ok(Team {
            pool,
            kinds: KindCoverage::of(&spec),
            services,
            proposer,
            outcomes,
            commands,
            submitted,
            task_spans: std::sync::Mutex::default(),
            deadlines,
            driver: Mutex::new(Some(driver)),
            ready,
            observer,
            layers: spec.agents.iter().map(|a| (a.config.id.clone(), a.config.layer)).collect(),
            heartbeat: spec.heartbeat,
        })
    }
}
