//! The team's [`Spawner`]: creates agents of the team's roles while it works
//! (docs/concepts.md#roles-and-spawning), lists and dismisses them, and rebuilds them when a run is
//! resumed.
//!
//! Rules, checked in this order for `spawn_agent`:
//! 1. the role exists, and the caller may spawn it: a top power may create any mid role (a
//!    lead for a signed plan); any other agent only the roles its own role's `enabled_agents`
//!    lists;
//! 2. permissions only narrow down the tree, in every layer combination
//!    ([`agent_core::spawn::check_grant`]): the new agent holds no capability the caller's
//!    layer may hold and the caller does not, the network only if the caller has it (the
//!    team's [`NetworkGrants`]; a top power's grant is the team's mid roles as defined), and a
//!    role of the caller's own layer no tool or enabled role the caller lacks (across layers
//!    the caller's `enabled_agents` is the grant: a lead holds no tools, its executors do);
//! 3. the new agent's depth (1 below a configured agent, one more per level) is at most the
//!    team's `max_spawn_depth`;
//! 4. fewer than `max_instances` agents of the role are alive, and the pool has room.
//!
//! A spawn is audited ([`AuditEvent::Spawned`]) by the caller before the agent is created; a
//! resumed run creates again every spawned agent the audit log names (restoring its status and
//! state like any other agent). Spawns are serialized, so limits hold under concurrency.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, PoisonError, Weak};
use tracing::Instrument as _;

use agent_core::spawn::{Holdings, NetworkGrants, check_grant};
use agent_core::{
    Agent, AgentBehavior, AgentDeps, AgentRecord, AuditEvent, SpawnError, SpawnRecord,
    SpawnRequest, Spawner, Subordinate,
};
use agent_layers::{BottomAgent, BottomSpec, MidAgent, MidSpec};
use agent_state::{
    AgentConfig, AgentId, AgentLayer, AgentStatus, Capability, GuardSettings, Role, RoleBook,
};
use async_trait::async_trait;

use crate::pool::{AgentPool, PoolError};
use crate::team::{TeamServices, TeamSpec};

/// Most executors a spawned lead may have alive at once when its role sets no `max_instances`.
const DEFAULT_SPAWNED_SUBORDINATES: usize = 16;

/// What a spawned agent is made of: its configuration, behaviour and services.
type Built = (AgentConfig, Box<dyn AgentBehavior>, Arc<AgentDeps>);

/// A spawned agent as the spawner keeps it.
#[derive(Clone, Debug)]
struct Node {
    record: SpawnRecord,
    despawned: bool,
}

/// The spawner of one team.
pub(crate) struct TeamSpawner {
    me: Weak<TeamSpawner>,
    pool: Weak<AgentPool>,
    services: TeamServices,
    roles: Arc<RoleBook>,
    max_depth: u32,
    tops: Vec<AgentId>,
    /// Configured agents that have a role.
    agent_roles: BTreeMap<AgentId, String>,
    nodes: Mutex<BTreeMap<AgentId, Node>>,
    /// Serializes spawns and despawns, so counts and limits hold.
    gate: tokio::sync::Mutex<()>,
    /// The team's guards, given to every agent it spawns.
    guards: GuardSettings,
    /// The team's time limits: a spawned agent's turns are bounded by `turn_ms`.
    timeouts: agent_state::Timeouts,
    /// This spawner serves a share of a run (`Share::Agents`): other processes spawn too, so
    /// a spawned agent's id names the configured agent its spawn tree starts from, which only
    /// one process hosts at a time.
    shared: bool,
    /// Which agents' commands may use the network: a spawn gives it only where the spawner
    /// has it.
    network: NetworkGrants,
    /// The layer and capabilities of the configured agents (their configuration's), by id.
    configured: BTreeMap<AgentId, (AgentLayer, Vec<Capability>)>,
}

impl TeamSpawner {
    /// The spawner of the team `spec` (its roles, spawn depth, agent roles, guards, time limits
    /// and network grants), spawning into `pool` on `services`; `tops` are the top powers;
    /// `shared`: it serves a share of a run.
    pub(crate) fn new(
        pool: &Arc<AgentPool>,
        services: TeamServices,
        spec: &TeamSpec,
        tops: Vec<AgentId>,
        shared: bool,
    ) -> Arc<Self> {
        let configured = spec
            .agents
            .iter()
            .map(|a| {
                let config = &a.config;
                (config.id.clone(), (config.layer, config.capabilities.to_vec()))
            })
            .collect();
        Arc::new_cyclic(|me| Self {
            me: me.clone(),
            pool: Arc::downgrade(pool),
            services,
            roles: Arc::new(spec.roles.clone()),
            max_depth: spec.max_spawn_depth,
            tops,
            agent_roles: spec.agent_roles.clone(),
            nodes: Mutex::new(BTreeMap::new()),
            gate: tokio::sync::Mutex::new(()),
            guards: spec.guards,
            timeouts: spec.timeouts,
            shared,
            network: spec.network.clone(),
            configured,
        })
    }

    pub(crate) fn roles(&self) -> Arc<RoleBook> {
        self.roles.clone()
    }

    fn nodes(&self) -> std::sync::MutexGuard<'_, BTreeMap<AgentId, Node>> {
        self.nodes.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn pool(&self) -> Result<Arc<AgentPool>, SpawnError> {
        self.pool.upgrade().ok_or_else(|| SpawnError::Failed("the team has shut down".into()))
    }

    /// The role of `agent`: spawned, or configured with one.
    fn role_of(&self, agent: &AgentId) -> Option<String> {
        self.nodes()
            .get(agent)
            .map(|n| n.record.role.clone())
            .or_else(|| self.agent_roles.get(agent).cloned())
    }

    /// What `agent` holds that it could pass on: a configured agent its configuration's
    /// capabilities (and its role's tools), a spawned one its role's; its network as the team
    /// file sets it. `None`: an agent the team does not know.
    fn holdings(&self, agent: &AgentId, role: Option<&Role>) -> Option<Holdings> {
        let tools = role.map(|r| r.tools.clone()).unwrap_or_default();
        let network = self.network.of(agent, role.map(|r| r.name.as_str()));
        if let Some((layer, capabilities)) = self.configured.get(agent) {
            let capabilities = capabilities.clone();
            return Some(Holdings { layer: *layer, tools, capabilities, network });
        }
        let role = role?;
        Some(Holdings { layer: role.layer, tools, capabilities: role.capabilities(), network })
    }

    fn depth_of(&self, agent: &AgentId) -> u32 {
        self.nodes().get(agent).map_or(0, |n| n.record.depth)
    }

    /// The roles `caller` may spawn.
    fn allowed(&self, caller: &AgentId) -> Vec<String> {
        if self.tops.contains(caller) {
            return self.roles.of_layer(AgentLayer::Mid).map(|r| r.name.clone()).collect();
        }
        self.role_of(caller)
            .and_then(|r| self.roles.get(&r).map(|r| r.enabled_agents.clone()))
            .unwrap_or_default()
    }

    fn check(&self, request: &SpawnRequest) -> Result<(Role, u32), SpawnError> {
        let allowed = self.allowed(&request.parent);
        let allowed_text = if allowed.is_empty() { "none".to_owned() } else { allowed.join(", ") };
        let Some(role) = self.roles.get(&request.role).cloned() else {
            return Err(SpawnError::UnknownRole {
                role: request.role.clone(),
                allowed: allowed_text,
            });
        };
        if !allowed.contains(&role.name) {
            return Err(SpawnError::NotEnabled { role: role.name, allowed: allowed_text });
        }
        let parent_role = self.role_of(&request.parent).and_then(|r| self.roles.get(&r).cloned());
        let Some(holds) = self.holdings(&request.parent, parent_role.as_ref()) else {
            return Err(SpawnError::NotEnabled { role: role.name, allowed: allowed_text });
        };
        let child = Holdings {
            layer: role.layer,
            tools: role.tools.clone(),
            capabilities: role.capabilities(),
            network: self.network.of_role(&role.name),
        };
        check_grant(&holds, &role.name, &child)?;
        if let Some(parent) = parent_role.filter(|p| p.layer == role.layer)
            && let Some(r) = role.enabled_agents.iter().find(|r| !parent.enabled_agents.contains(r))
        {
            return Err(SpawnError::Widens {
                role: role.name,
                what: format!("the enabled role `{r}`"),
            });
        }
        let depth = self.depth_of(&request.parent) + 1;
        if depth > self.max_depth {
            return Err(SpawnError::TooDeep { depth, max: self.max_depth });
        }
        if let Some(max) = role.max_instances {
            let alive = self
                .nodes()
                .values()
                .filter(|n| n.record.role == role.name && !n.despawned)
                .count();
            if alive >= max as usize {
                return Err(SpawnError::MaxInstances { role: role.name, max });
            }
        }
        Ok((role, depth))
    }

    /// A fresh id for an agent of `role` spawned by `parent`: `role-N`; in a share of a run,
    /// `role-ROOT-N`, ROOT the configured agent the spawn tree starts from.
    fn new_id(&self, role: &str, parent: &AgentId, pool: &AgentPool) -> AgentId {
        let nodes = self.nodes();
        let prefix = match self.shared {
            false => role.to_owned(),
            true => {
                let mut root = parent.clone();
                // Bounded: a malformed parent cycle ends the walk.
                for _ in 0..=nodes.len() {
                    match nodes.get(&root) {
                        Some(node) => root = node.record.parent.clone(),
                        None => break,
                    }
                }
                format!("{role}-{root}")
            }
        };
        let mut n = nodes.values().filter(|x| x.record.role == role).count() + 1;
        loop {
            let id = AgentId::new(format!("{prefix}-{n}"));
            if !nodes.contains_key(&id) && pool.get(&id).is_none() {
                return id;
            }
            n += 1;
        }
    }

    /// The configuration, behaviour and services of a spawned agent.
    fn build(&self, record: &SpawnRecord) -> Result<Built, SpawnError> {
        let role = self
            .roles
            .get(&record.role)
            .ok_or_else(|| SpawnError::Failed(format!("role `{}` is gone", record.role)))?;
        let prompt = role.system_prompt.clone().unwrap_or_else(|| {
            if role.description.is_empty() { role.name.clone() } else { role.description.clone() }
        });
        let mut config = AgentConfig::new(record.agent.clone(), role.name.clone(), role.layer)
            .with_role(prompt)
            .with_supervisor(record.parent.clone());
        if role.capabilities.is_some() {
            config.capabilities = role.capabilities().into();
        }
        config.model = role.model.clone();
        config.timeout_ms = self.timeouts.turn_ms;
        let behavior: Box<dyn AgentBehavior> = match role.layer {
            AgentLayer::Mid => {
                let max = role.max_instances.map_or(DEFAULT_SPAWNED_SUBORDINATES, |m| m as usize);
                let spec = MidSpec {
                    domain: record.domain.clone().unwrap_or_else(|| role.name.clone()),
                    max_subordinates: max,
                };
                let lead = MidAgent::new(spec, Vec::new(), self.tops.clone(), Vec::new())
                    .with_guards(self.guards);
                Box::new(if role.supervises() { lead.supervising() } else { lead })
            }
            AgentLayer::Bottom => {
                let spec = BottomSpec::new(role.tools.iter().cloned());
                Box::new(match &role.kind {
                    Some(kind) => BottomAgent::new(spec.with_kind(kind.as_str()))
                        .spawned()
                        .with_runner(self.services.kind_runner())
                        .with_guards(self.guards),
                    None => BottomAgent::new(spec).spawned().with_guards(self.guards),
                })
            }
            AgentLayer::Top => {
                return Err(SpawnError::Failed("a top power cannot be spawned".into()));
            }
        };
        let s = &self.services;
        let deps = Arc::new(AgentDeps {
            bus: s.bus.clone(),
            boards: s.boards.clone(),
            governance: s.governance.clone(),
            audit: s.audit.clone(),
            reasoner: s
                .role_reasoners
                .get(&role.name)
                .cloned()
                .unwrap_or_else(|| s.reasoner.clone()),
            tools: s.role_tools.get(&role.name).cloned().unwrap_or_else(|| s.tools.clone()),
            workspace: s.workspace.clone(),
            clock: s.clock.clone(),
            state: s.state.clone(),
            spawner: self.me.upgrade().map(|me| me as Arc<dyn Spawner>),
            timeouts: self.timeouts,
        });
        Ok((config, behavior, deps))
    }

    /// Rebuilds the spawned agents of a resumed run from the audit log's spawn records: each
    /// gets back its status and saved state; one never created (the run died between the
    /// audit and the creation) is created now; despawned ones are remembered, not created.
    pub(crate) async fn restore(
        &self,
        pool: &AgentPool,
        spawns: Vec<SpawnRecord>,
        despawned: &[AgentId],
        statuses: &BTreeMap<AgentId, AgentStatus>,
        records: &mut BTreeMap<AgentId, AgentRecord>,
    ) -> Result<(), PoolError> {
        for record in spawns {
            let gone = despawned.contains(&record.agent)
                || statuses.get(&record.agent) == Some(&AgentStatus::Terminated);
            self.nodes()
                .insert(record.agent.clone(), Node { record: record.clone(), despawned: gone });
            if gone || pool.get(&record.agent).is_some() {
                continue;
            }
            let id = record.agent.clone();
            let (config, behavior, deps) =
                self.build(&record).map_err(|e| PoolError::Initialize {
                    id: id.clone(),
                    source: agent_core::AgentError::NotAllowed(e.to_string()),
                })?;
            match statuses.get(&id) {
                Some(&status) => {
                    let agent = Agent::restore(config, behavior, deps, status, records.remove(&id))
                        .await
                        .map_err(|source| PoolError::Initialize { id: id.clone(), source })?;
                    pool.insert(agent)?;
                }
                None => {
                    pool.create(config, behavior, deps).await?;
                }
            }
        }
        Ok(())
    }

    fn subtree(&self, agent: &AgentId) -> Vec<AgentId> {
        let nodes = self.nodes();
        let mut out = Vec::new();
        let mut stack = vec![agent.clone()];
        while let Some(a) = stack.pop() {
            for (id, n) in nodes.iter() {
                if n.record.parent == a && !n.despawned {
                    out.push(id.clone());
                    stack.push(id.clone());
                }
            }
        }
        out
    }

    fn cost(&self, agent: &AgentId) -> Option<f64> {
        let meter = self.services.costs.as_ref()?;
        let mut total = meter.cost_usd(agent);
        let nodes = self.nodes();
        let mut stack = vec![agent.clone()];
        while let Some(a) = stack.pop() {
            for (id, n) in nodes.iter() {
                if n.record.parent == a {
                    if let Some(c) = meter.cost_usd(id) {
                        total = Some(total.unwrap_or(0.0) + c);
                    }
                    stack.push(id.clone());
                }
            }
        }
        total
    }
}

#[async_trait]
impl Spawner for TeamSpawner {
    async fn spawn(&self, request: SpawnRequest) -> Result<SpawnRecord, SpawnError> {
        let _gate = self.gate.lock().await;
        let existing = self
            .nodes()
            .values()
            .find(|n| n.record.parent == request.parent && n.record.key == request.key)
            .map(|n| n.record.clone());
        if let Some(record) = existing {
            return Ok(record); // the same call, replayed after a crash
        }
        let (role, depth) = self.check(&request)?;
        let pool = self.pool()?;
        if pool.len() >= pool.max_agents() {
            return Err(SpawnError::PoolFull { max: pool.max_agents() });
        }
        let record = SpawnRecord {
            agent: self.new_id(&role.name, &request.parent, &pool),
            parent: request.parent.clone(),
            role: role.name.clone(),
            layer: role.layer,
            task_prompt: request.task_prompt,
            key: request.key,
            domain: request.domain,
            depth,
        };
        let (config, behavior, deps) = self.build(&record)?;
        let span = agent_core::otel::spawn(&record.parent, &record.agent, &record.role);
        // Audited first: a resumed run creates what the log says was spawned.
        let now = self.services.clock.now();
        self.services
            .audit
            .append(&record.parent, now, AuditEvent::Spawned { spawn: record.clone() })
            .instrument(span.clone())
            .await
            .map_err(|e| SpawnError::Failed(format!("cannot record the spawn: {e}")))?;
        self.nodes()
            .insert(record.agent.clone(), Node { record: record.clone(), despawned: false });
        match pool.create(config, behavior, deps).instrument(span).await {
            Ok(_) => {
                tracing::info!(agent = %record.agent, parent = %record.parent, role = %record.role, depth, "agent spawned");
                Ok(record)
            }
            Err(PoolError::Full { max }) => {
                self.nodes().remove(&record.agent);
                Err(SpawnError::PoolFull { max })
            }
            Err(e) => {
                self.nodes().remove(&record.agent);
                Err(SpawnError::Failed(e.to_string()))
            }
        }
    }

    async fn despawn(&self, caller: &AgentId, agent: &AgentId) -> Result<String, SpawnError> {
        let _gate = self.gate.lock().await;
        let node = self.nodes().get(agent).cloned();
        let Some(node) = node else {
            return Err(SpawnError::NoSuchAgent { agent: agent.to_string() });
        };
        if &node.record.parent != caller {
            return Err(SpawnError::Stranger { agent: agent.to_string() });
        }
        if node.despawned {
            return Ok("already despawned".into());
        }
        let pool = self.pool()?;
        // Its subtree first, deepest first.
        let mut below = self.subtree(agent);
        below.reverse();
        for id in below.into_iter().chain(std::iter::once(agent.clone())) {
            let summary = match pool.get(&id) {
                Some(slot) => slot.agent().lock().await.current_work(),
                None => None,
            };
            if pool.get(&id).is_some() {
                pool.destroy(&id).await.map_err(|e| SpawnError::Failed(e.to_string()))?;
            }
            if let Some(n) = self.nodes().get_mut(&id) {
                n.despawned = true;
            }
            if &id == agent {
                return Ok(match summary {
                    Some(work) => format!("stopped while {work}"),
                    None => "stopped with no work in hand".into(),
                });
            }
        }
        Ok("stopped".into())
    }

    async fn subordinates(&self, caller: &AgentId) -> Vec<Subordinate> {
        let mine: Vec<Node> =
            self.nodes().values().filter(|n| &n.record.parent == caller).cloned().collect();
        let pool = self.pool.upgrade();
        let mut out = Vec::with_capacity(mine.len());
        for n in mine {
            let slot = pool.as_ref().and_then(|p| p.get(&n.record.agent));
            // An agent in the middle of a turn (a model call, a long command) is not waited
            // for: it is working.
            let (status, current_work) = match slot {
                Some(slot) => match slot.agent().try_lock() {
                    Ok(agent) => (agent.status(), agent.current_work()),
                    Err(_) => (AgentStatus::Working, Some("in the middle of a turn".into())),
                },
                None => (AgentStatus::Terminated, None),
            };
            let mut task = n.record.task_prompt.clone();
            if task.chars().count() > 100 {
                task = format!("{}…", task.chars().take(100).collect::<String>());
            }
            out.push(Subordinate {
                cost_usd: self.cost(&n.record.agent),
                agent_id: n.record.agent,
                role_name: n.record.role,
                status,
                task_prompt: task,
                current_work,
                has_result: false,
                parent_id: n.record.parent,
            });
        }
        out
    }

    fn record(&self, agent: &AgentId) -> Option<SpawnRecord> {
        self.nodes().get(agent).map(|n| n.record.clone())
    }

    fn exists(&self, agent: &AgentId) -> bool {
        self.nodes().contains_key(agent)
            || self.pool.upgrade().is_some_and(|p| p.get(agent).is_some())
    }

    fn enabled_roles(&self, caller: &AgentId) -> Vec<(String, String)> {
        self.allowed(caller)
            .into_iter()
            .map(|r| {
                let d = self.roles.get(&r).map(|x| x.description.clone()).unwrap_or_default();
                (r, d)
            })
            .collect()
    }
}
