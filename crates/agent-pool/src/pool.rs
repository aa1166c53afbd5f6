//! The pool: agents by id and by layer, created and destroyed with a size limit (seed 000 §7).

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, RwLock};

use agent_core::{Agent, AgentBehavior, AgentDeps, AgentError};
use agent_state::{AgentConfig, AgentId, AgentLayer, AgentMetrics, AgentStatus, ConfigError};
use thiserror::Error;
use tokio::sync::Mutex;

/// At most this many agents in a pool by default (seed 000 §7).
pub const DEFAULT_MAX_AGENTS: usize = 50;

/// The largest pool a team may ask for (`max_agents`): one million agents.
pub const MAX_POOL_SIZE: usize = 1_000_000;

/// One agent in the pool, with what the scheduler reads without locking it.
pub struct AgentSlot {
    id: AgentId,
    layer: AgentLayer,
    supervisor: Option<AgentId>,
    agent: Arc<Mutex<Agent>>,
    /// The pool's cycle counter, and its value when this agent joined.
    cycles: Arc<AtomicU64>,
    joined: u64,
    /// Cycles in which the scheduler ran this agent's heartbeat (32 bits keep the slot small;
    /// they count up to 497 days of 10 ms heartbeats and then stay at their maximum).
    ran: AtomicU32,
    /// Cycles in which it was still busy.
    missed: AtomicU32,
}

impl AgentSlot {
    /// The agent's id.
    pub fn id(&self) -> &AgentId {
        &self.id
    }

    /// Its layer.
    pub fn layer(&self) -> AgentLayer {
        self.layer
    }

    /// Its supervisor.
    pub fn supervisor(&self) -> Option<&AgentId> {
        self.supervisor.as_ref()
    }

    /// The agent itself. Lock it to act as the agent; the scheduler skips it while locked.
    pub fn agent(&self) -> &Arc<Mutex<Agent>> {
        &self.agent
    }

    /// Its status (waits for a running heartbeat to finish).
    pub async fn status(&self) -> AgentStatus {
        self.agent.lock().await.status()
    }

    /// Its metrics, with the scheduler's share: heartbeats missed while it was busy, and the
    /// cycles in which it was idle with nothing new, answered without running it.
    pub async fn metrics(&self) -> AgentMetrics {
        let mut metrics = self.agent.lock().await.ctx().metrics().clone();
        let missed = u64::from(self.missed.load(Ordering::Relaxed));
        let idle = self
            .cycles
            .load(Ordering::Relaxed)
            .saturating_sub(self.joined)
            .saturating_sub(u64::from(self.ran.load(Ordering::Relaxed)))
            .saturating_sub(missed);
        metrics.heartbeats_missed = metrics.heartbeats_missed.saturating_add(missed);
        metrics.heartbeats_responded = metrics.heartbeats_responded.saturating_add(idle);
        metrics
    }

    /// A glance at the agent without waiting: `None` while a heartbeat holds it.
    pub fn try_peek(&self) -> Option<AgentPeek> {
        let agent = self.agent.try_lock().ok()?;
        Some(AgentPeek {
            status: agent.status(),
            current_work: agent.current_work(),
            metrics: agent.ctx().metrics().clone(),
        })
    }

    pub(crate) fn count_ran(&self) {
        count(&self.ran);
    }

    pub(crate) fn count_missed(&self) {
        count(&self.missed);
    }
}

/// Adds one to `counter`, staying at the maximum instead of wrapping.
fn count(counter: &AtomicU32) {
    let _ = counter.fetch_update(Ordering::Relaxed, Ordering::Relaxed, |n| n.checked_add(1));
}

/// What [`AgentSlot::try_peek`] sees.
#[derive(Clone, Debug, PartialEq)]
pub struct AgentPeek {
    /// The status.
    pub status: AgentStatus,
    /// What it is working on.
    pub current_work: Option<String>,
    /// Its metrics (without the scheduler's idle and missed counts).
    pub metrics: AgentMetrics,
}

/// Creating or destroying an agent failed.
#[derive(Debug, Error)]
pub enum PoolError {
    /// The pool holds its maximum.
    #[error("agent pool full (max {max}); raise the pool's `max_agents` or destroy an agent first")]
    Full {
        /// The limit.
        max: usize,
    },
    /// An agent with this id exists.
    #[error("agent `{id}` already exists in the pool; agent ids must be unique")]
    Duplicate {
        /// The id.
        id: AgentId,
    },
    /// The configuration is invalid.
    #[error(transparent)]
    Config(#[from] ConfigError),
    /// Initialization failed; the agent is not in the pool.
    #[error("agent `{id}` failed to initialize: {source}")]
    Initialize {
        /// The agent.
        id: AgentId,
        /// Why.
        #[source]
        source: AgentError,
    },
    /// No such agent.
    #[error("no agent `{id}` in the pool")]
    Unknown {
        /// The id.
        id: AgentId,
    },
    /// Shutting the agent down failed.
    #[error("agent `{id}` failed to shut down: {source}")]
    Shutdown {
        /// The agent.
        id: AgentId,
        /// Why.
        #[source]
        source: AgentError,
    },
    /// A task creating or stopping agents stopped before it finished (it panicked: a bug).
    #[error("{0}")]
    Stopped(String),
}

/// Many agents, by id, with a size limit.
pub struct AgentPool {
    agents: RwLock<BTreeMap<AgentId, Arc<AgentSlot>>>,
    max_agents: usize,
    cycles: Arc<AtomicU64>,
    /// Agents added since the scheduler last looked that want a heartbeat without mail (see
    /// [`Agent::wants_tick`]), so it runs them once; the others wait for their mail.
    arrivals: std::sync::Mutex<Vec<AgentId>>,
}

impl AgentPool {
    /// A pool of at most `max_agents`.
    pub fn new(max_agents: usize) -> Self {
        Self {
            agents: RwLock::new(BTreeMap::new()),
            max_agents,
            cycles: Arc::new(AtomicU64::new(0)),
            arrivals: std::sync::Mutex::new(Vec::new()),
        }
    }

    /// The limit.
    pub fn max_agents(&self) -> usize {
        self.max_agents
    }

    /// Creates an agent from its configuration and behaviour, initializes it (initializing →
    /// idle) and adds it. The configuration is validated first; nothing is added on error.
    pub async fn create(
        &self,
        config: AgentConfig,
        behavior: Box<dyn AgentBehavior>,
        deps: Arc<AgentDeps>,
    ) -> Result<Arc<AgentSlot>, PoolError> {
        {
            let agents = self.read();
            if agents.len() >= self.max_agents {
                return Err(PoolError::Full { max: self.max_agents });
            }
            if agents.contains_key(&config.id) {
                return Err(PoolError::Duplicate { id: config.id.clone() });
            }
        }
        let id = config.id.clone();
        let mut agent = Agent::new(config, behavior, deps)?;
        agent
            .initialize()
            .await
            .map_err(|source| PoolError::Initialize { id: id.clone(), source })?;
        self.insert(agent)
    }

    /// Adds an agent that is already initialized or restored (see [`Agent::restore`]).
    pub fn insert(&self, agent: Agent) -> Result<Arc<AgentSlot>, PoolError> {
        let id = agent.id().clone();
        let config = agent.ctx().config();
        let (layer, supervisor) = (config.layer, config.supervisor.clone());
        let wants_tick = agent.wants_tick();
        let mut agents = self.write();
        if agents.len() >= self.max_agents {
            return Err(PoolError::Full { max: self.max_agents });
        }
        if agents.contains_key(&id) {
            return Err(PoolError::Duplicate { id });
        }
        let slot = Arc::new(AgentSlot {
            id: id.clone(),
            layer,
            supervisor,
            agent: Arc::new(Mutex::new(agent)),
            cycles: self.cycles.clone(),
            joined: self.cycles.load(Ordering::Relaxed),
            ran: AtomicU32::new(0),
            missed: AtomicU32::new(0),
        });
        agents.insert(id.clone(), slot.clone());
        drop(agents);
        if wants_tick {
            // It has work without mail (a restored agent mid-task): the scheduler asks it once.
            self.arrivals
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner)
                .push(id.clone());
        }
        tracing::info!(agent = %id, layer = %layer, "agent added to the pool");
        Ok(slot)
    }

    /// Shuts an agent down (→ terminated) and removes it.
    pub async fn destroy(&self, id: &AgentId) -> Result<(), PoolError> {
        let slot = self.get(id).ok_or_else(|| PoolError::Unknown { id: id.clone() })?;
        slot.agent
            .lock()
            .await
            .shutdown()
            .await
            .map_err(|source| PoolError::Shutdown { id: id.clone(), source })?;
        self.write().remove(id);
        tracing::info!(agent = %id, "agent destroyed");
        Ok(())
    }

    /// An agent by id.
    pub fn get(&self, id: &AgentId) -> Option<Arc<AgentSlot>> {
        self.read().get(id).cloned()
    }

    /// Every agent, by id.
    pub fn all(&self) -> Vec<Arc<AgentSlot>> {
        self.read().values().cloned().collect()
    }

    /// The agents of one layer, by id.
    pub fn by_layer(&self, layer: AgentLayer) -> Vec<Arc<AgentSlot>> {
        self.read().values().filter(|s| s.layer == layer).cloned().collect()
    }

    /// How many agents the pool holds.
    pub fn len(&self) -> usize {
        self.read().len()
    }

    /// Whether the pool is empty.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The agents added since the last call.
    pub(crate) fn take_arrivals(&self) -> Vec<AgentId> {
        std::mem::take(
            &mut *self.arrivals.lock().unwrap_or_else(std::sync::PoisonError::into_inner),
        )
    }

    /// Counts one scheduler cycle; returns its number (from 1).
    /// How many heartbeat cycles have run.
    pub fn cycles(&self) -> u64 {
        self.cycles.load(Ordering::Relaxed)
    }

    pub(crate) fn next_cycle(&self) -> u64 {
        self.cycles.fetch_add(1, Ordering::Relaxed) + 1
    }

    fn read(&self) -> std::sync::RwLockReadGuard<'_, BTreeMap<AgentId, Arc<AgentSlot>>> {
        self.agents.read().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    fn write(&self) -> std::sync::RwLockWriteGuard<'_, BTreeMap<AgentId, Arc<AgentSlot>>> {
        self.agents.write().unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

impl Default for AgentPool {
    fn default() -> Self {
        Self::new(DEFAULT_MAX_AGENTS)
    }
}
