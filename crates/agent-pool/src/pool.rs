//! The pool: agents by id and by layer, created and destroyed with a size limit
//! (docs/concepts.md#the-pool).

use std::collections::BTreeMap;
use std::ops::Bound::{Excluded, Unbounded};
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, RwLock};

use agent_core::{Agent, AgentBehavior, AgentDeps, AgentError, BusyAnswer, Progress};
use agent_state::{AgentConfig, AgentId, AgentLayer, AgentMetrics, AgentStatus, ConfigError};
use thiserror::Error;
use tokio::sync::{Mutex, MutexGuard, OwnedMutexGuard, TryLockError};

/// At most this many agents in a pool by default.
pub const DEFAULT_MAX_AGENTS: usize = 50;

/// The largest pool a team may ask for (`max_agents`): one million agents.
pub const MAX_POOL_SIZE: usize = 1_000_000;

/// How many agents [`AgentPool::for_each`] visits under one hold of the pool's read lock (from
/// about 15 µs of the scheduler's sweep in a small pool to about 130 µs in a pool too large for
/// the CPU's caches).
const SWEEP_CHUNK: usize = 1024;

/// One agent in the pool, with what the scheduler reads without locking it.
///
/// Each heartbeat cycle books every agent in the pool exactly once (see
/// [`HeartbeatScheduler::tick`](crate::HeartbeatScheduler::tick)), in one of five ways:
///
/// - **ran**: the scheduler started its heartbeat (it had mail or pending work); the heartbeat
///   acks to `system` itself and counts in the agent's own metrics (answered, or missed when it
///   failed);
/// - **acked**: it was idle and free to answer (its lock was free and its status one that
///   answers a heartbeat: idle, working, waiting for approval or blocked), so the cycle's sweep
///   recorded its answer in bulk, without a task, a message or a reasoning call
///   ([`acked`](Self::acked), [`last_ack`](Self::last_ack)); one it acked in the last cycle
///   whose lock nobody took since (the [`AgentLock`] counts every taking) is acked by epoch,
///   without locking it again: its status changes only under its lock;
/// - **busy**: a turn of it is still running and shows progress ([`progress`](Self::progress):
///   a model call producing tokens, a tool running within its limit, a wait for a decision), so
///   it answered busy, with what it is doing, its tokens so far and how long its turn has run
///   ([`busy`](Self::busy), [`last_busy`](Self::last_busy)): an answer, not a miss;
/// - **missed**: it could not answer: its lock held by someone else through the cycle, or a
///   turn of it silent past its silence limit (`[timeouts] silence_ms`: wedged)
///   ([`missed`](Self::missed));
/// - **exempt**: it is not expected to answer (initializing, failed and waiting for its
///   supervisor's orders, shutting down, terminated, or being destroyed): neither acked nor
///   missed, as its own heartbeat would skip it.
// `repr(C)`: the fields the sweep reads and writes for an idle agent come first, together, so
// that it touches one or two cache lines of the slot and nothing else.
#[repr(C)]
pub struct AgentSlot {
    /// The last cycle in which the scheduler dealt with this agent before its sweep (ran it,
    /// counted it missed, or found it held), so the sweep skips it.
    booked: AtomicU64,
    /// [`AgentLock::taken`] when the sweep last recorded the agent's answer (`u64::MAX`: it did
    /// not, or found it exempt): while the count stays there nobody has taken its lock, so it
    /// is still free and its status, which changes only under the lock, still answers, and the
    /// sweep acks it without locking it (acknowledgement by epoch).
    quiet: AtomicU64,
    agent: AgentLock,
    /// The last cycle it answered (0: never): acked by the sweep, or its heartbeat completed.
    last_ack: AtomicU64,
    /// How many times its counts changed (only the pool's scheduler counts), modulo
    /// `u32::MAX` (which [`stored`](Self::stored) uses as "due").
    changes: AtomicU32,
    /// Cycles in which it was idle and the sweep recorded its answer.
    acked: AtomicU32,
    /// Terminated (absorbing) or being destroyed: the sweep skips it without locking it.
    gone: AtomicBool,
    layer: AgentLayer,
    /// Cycles in which the scheduler ran this agent's heartbeat (32 bits keep the slot small;
    /// they count up to 497 days of 10 ms heartbeats and then stay at their maximum).
    ran: AtomicU32,
    /// Cycles in which a turn of it was running and showed progress.
    busy: AtomicU32,
    /// Cycles in which it could not answer.
    missed: AtomicU32,
    /// `changes` as the liveness ledger last stored them (`u32::MAX`: due).
    stored: AtomicU32,
    /// Its turns' silence limit, in milliseconds, for its progress (at most `u32::MAX`, 49
    /// days).
    silence_ms: u32,
    id: AgentId,
    supervisor: Option<AgentId>,
    /// The progress of its turns and its last busy answer: made by its first turn (an idle
    /// agent that never ran one holds none).
    turns: std::sync::OnceLock<Box<SlotTurns>>,
}

/// What the pool keeps of an agent's turns.
struct SlotTurns {
    /// The progress of its turns, fed from inside them.
    progress: Arc<Progress>,
    /// Its last busy answer.
    last_busy: std::sync::Mutex<Option<BusyAnswer>>,
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

    /// The agent itself. Lock it to act as the agent, briefly: the scheduler does not run it
    /// while it is locked, and an agent held through a heartbeat cycle cannot answer it and
    /// counts a missed heartbeat (see [`AgentSlot`]).
    pub fn agent(&self) -> &AgentLock {
        &self.agent
    }

    /// Its status (waits for a running heartbeat to finish).
    pub async fn status(&self) -> AgentStatus {
        self.agent.lock().await.status()
    }

    /// Its metrics, with the scheduler's share added: the cycles the sweep recorded its answer
    /// while it was idle ([`acked`](Self::acked)) and those it answered busy
    /// ([`busy`](Self::busy)) count as answered, the cycles it could not answer as missed
    /// ([`missed`](Self::missed)). The heartbeats it ran count in the agent's own metrics
    /// (answered, or missed when they failed). Cycles in which it was not expected to answer
    /// (see [`AgentSlot`]) count in neither.
    pub async fn metrics(&self) -> AgentMetrics {
        let mut metrics = self.agent.lock().await.ctx().metrics().clone();
        let answered = self.acked().saturating_add(self.busy());
        metrics.heartbeats_missed = metrics.heartbeats_missed.saturating_add(self.missed());
        metrics.heartbeats_responded = metrics.heartbeats_responded.saturating_add(answered);
        metrics
    }

    /// The progress of its turns: the scheduler starts and ends each turn on it and the turn
    /// reports to it ([`agent_core::progress`]).
    pub fn progress(&self) -> &Arc<Progress> {
        &self.turns().progress
    }

    /// What the pool keeps of its turns, made by the first need of it.
    fn turns(&self) -> &SlotTurns {
        self.turns.get_or_init(|| {
            let silence = std::time::Duration::from_millis(u64::from(self.silence_ms));
            Box::new(SlotTurns {
                progress: Arc::new(Progress::new(silence)),
                last_busy: std::sync::Mutex::new(None),
            })
        })
    }

    /// Cycles in which a turn of it was running and showed progress, so it answered busy.
    pub fn busy(&self) -> u64 {
        u64::from(self.busy.load(Ordering::Relaxed))
    }

    /// Its last busy answer, if it gave one.
    pub fn last_busy(&self) -> Option<BusyAnswer> {
        let turns = self.turns.get()?;
        turns.last_busy.lock().unwrap_or_else(std::sync::PoisonError::into_inner).clone()
    }

    /// The last heartbeat cycle the agent answered, `None` if it never did: the sweep recorded
    /// its answer while it was idle, or a heartbeat the scheduler started completed (processed
    /// its work or found none). An agent that is wedged or gone stops advancing it.
    pub fn last_ack(&self) -> Option<u64> {
        match self.last_ack.load(Ordering::Relaxed) {
            0 => None,
            cycle => Some(cycle),
        }
    }

    /// Cycles in which the agent was idle and the sweep recorded its answer.
    pub fn acked(&self) -> u64 {
        u64::from(self.acked.load(Ordering::Relaxed))
    }

    /// Cycles in which the scheduler started the agent's heartbeat.
    pub fn ran(&self) -> u64 {
        u64::from(self.ran.load(Ordering::Relaxed))
    }

    /// Cycles in which the agent could not answer: its lock held by someone else through the
    /// cycle, or a turn of it silent past its silence limit. Each was audited
    /// ([`AuditEvent::MissedHeartbeat`](agent_core::AuditEvent::MissedHeartbeat)) and its
    /// supervisor warned.
    pub fn missed(&self) -> u64 {
        u64::from(self.missed.load(Ordering::Relaxed))
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

    /// Whether nobody took the agent's lock since the sweep last recorded its answer (which it
    /// did holding the lock, after [`AgentLock`] counted the sweep's own taking), so it still
    /// answers as it did then.
    pub(crate) fn still_quiet(&self) -> bool {
        self.quiet.load(Ordering::Relaxed) == self.agent.taken()
    }

    /// The sweep, holding the agent's lock, recorded its answer (`true`) or found it exempt.
    pub(crate) fn set_quiet(&self, answered: bool) {
        let quiet = if answered { self.agent.taken() } else { u64::MAX };
        self.quiet.store(quiet, Ordering::Relaxed);
    }

    /// Whether the scheduler already booked the agent in cycle `number`.
    pub(crate) fn booked_in(&self, number: u64) -> bool {
        self.booked.load(Ordering::Relaxed) == number
    }

    /// Books the agent in cycle `number` without counting anything yet (it is exempt, or its
    /// answer is decided later in the cycle).
    pub(crate) fn book(&self, number: u64) {
        self.booked.store(number, Ordering::Relaxed);
    }

    /// Whether the agent is terminated or being destroyed (the sweep skips it).
    pub(crate) fn is_gone(&self) -> bool {
        self.gone.load(Ordering::Relaxed)
    }

    /// Marks the agent terminated (an absorbing status) or being destroyed.
    pub(crate) fn set_gone(&self, gone: bool) {
        self.gone.store(gone, Ordering::Relaxed);
    }

    pub(crate) fn count_ran(&self, number: u64) {
        self.booked.store(number, Ordering::Relaxed);
        count(&self.ran);
    }

    /// The sweep recorded the idle agent's answer to cycle `number` (it visits each agent once
    /// a cycle, so it needs no booking). Plain loads and stores, no read-modify-write: this runs
    /// for every idle agent every cycle, and only the pool's scheduler writes these.
    pub(crate) fn count_acked(&self, number: u64) {
        self.last_ack.store(number, Ordering::Relaxed);
        let acked = self.acked.load(Ordering::Relaxed);
        self.acked.store(acked.saturating_add(1), Ordering::Relaxed);
        self.changed();
    }

    /// A turn of it answered cycle `number` busy, with `answer`.
    pub(crate) fn count_busy(&self, number: u64, answer: BusyAnswer) {
        self.booked.store(number, Ordering::Relaxed);
        self.last_ack.fetch_max(number, Ordering::Relaxed);
        count(&self.busy);
        *self.turns().last_busy.lock().unwrap_or_else(std::sync::PoisonError::into_inner) =
            Some(answer);
        self.changed();
    }

    /// Its counts changed (only the pool's scheduler counts, so a plain load and store).
    fn changed(&self) {
        let changes = self.changes.load(Ordering::Relaxed);
        self.changes.store(changes.wrapping_add(1) % u32::MAX, Ordering::Relaxed);
    }

    /// A heartbeat the scheduler started for cycle `number` answered.
    pub(crate) fn note_answer(&self, number: u64) {
        self.last_ack.fetch_max(number, Ordering::Relaxed);
    }

    /// Counts on from the answers and misses the liveness ledger holds for this agent (a
    /// resumed run): its counts continue, not reset and not counted twice.
    pub(crate) fn seed_liveness(&self, record: &agent_core::LivenessRecord) {
        let clamp = |n: u64| u32::try_from(n).unwrap_or(u32::MAX);
        self.acked.store(clamp(record.answered), Ordering::Relaxed);
        self.busy.store(clamp(record.busy), Ordering::Relaxed);
        self.missed.store(clamp(record.missed), Ordering::Relaxed);
        if let Some(answer) = &record.last_busy {
            *self.turns().last_busy.lock().unwrap_or_else(std::sync::PoisonError::into_inner) =
                Some(answer.clone());
        } else if let Some(turns) = self.turns.get() {
            *turns.last_busy.lock().unwrap_or_else(std::sync::PoisonError::into_inner) = None;
        }
        self.stored.store(self.changes.load(Ordering::Relaxed), Ordering::Relaxed);
    }

    /// The agent's liveness record as of cycle `number` and the change it is as of, if its
    /// counts changed since the ledger last stored them.
    pub(crate) fn liveness_due(&self, number: u64) -> Option<(agent_core::LivenessRecord, u32)> {
        let changes = self.changes.load(Ordering::Relaxed);
        (changes != self.stored.load(Ordering::Relaxed)).then(|| {
            let record = agent_core::LivenessRecord {
                id: self.id.clone(),
                answered: self.acked(),
                busy: self.busy(),
                missed: self.missed(),
                cycle: number,
                last_busy: self.last_busy(),
            };
            (record, changes)
        })
    }

    /// The ledger is storing the record made by [`liveness_due`](Self::liveness_due) as of
    /// `changes`.
    pub(crate) fn liveness_stored(&self, changes: u32) {
        self.stored.store(changes, Ordering::Relaxed);
    }

    /// The ledger failed to store the agent's counts: it is due again at the next cycle.
    pub(crate) fn liveness_unstored(&self) {
        self.stored.store(u32::MAX, Ordering::Relaxed);
    }

    pub(crate) fn count_missed(&self, number: u64) {
        self.booked.store(number, Ordering::Relaxed);
        count(&self.missed);
        self.changed();
    }
}

/// Adds one to `counter`, staying at the maximum instead of wrapping.
fn count(counter: &AtomicU32) {
    let _ = counter.fetch_update(Ordering::Relaxed, Ordering::Relaxed, |n| n.checked_add(1));
}

/// An agent behind its lock ([`tokio::sync::Mutex`]), counting every time the lock is taken,
/// so that the scheduler's sweep can tell, without locking it, that nobody took it since it
/// last looked (see [`AgentSlot`]).
#[repr(C)]
pub struct AgentLock {
    /// How many times the lock was taken (counted once taken, before the holder acts).
    taken: AtomicU64,
    mutex: Arc<Mutex<Agent>>,
}

impl AgentLock {
    fn new(agent: Agent) -> Self {
        Self { taken: AtomicU64::new(0), mutex: Arc::new(Mutex::new(agent)) }
    }

    /// Locks the agent, waiting for the lock.
    pub async fn lock(&self) -> MutexGuard<'_, Agent> {
        let guard = self.mutex.lock().await;
        self.took();
        guard
    }

    /// Locks the agent if its lock is free.
    pub fn try_lock(&self) -> Result<MutexGuard<'_, Agent>, TryLockError> {
        let guard = self.mutex.try_lock()?;
        self.took();
        Ok(guard)
    }

    /// Locks the agent, waiting for the lock, with a guard that owns a reference to it.
    pub async fn lock_owned(&self) -> OwnedMutexGuard<Agent> {
        let guard = self.mutex.clone().lock_owned().await;
        self.took();
        guard
    }

    /// Locks the agent if its lock is free, with a guard that owns a reference to it.
    pub fn try_lock_owned(&self) -> Result<OwnedMutexGuard<Agent>, TryLockError> {
        let guard = self.mutex.clone().try_lock_owned()?;
        self.took();
        Ok(guard)
    }

    fn took(&self) {
        self.taken.fetch_add(1, Ordering::AcqRel);
    }

    /// How many times the lock was taken.
    fn taken(&self) -> u64 {
        self.taken.load(Ordering::Acquire)
    }
}

/// What [`AgentSlot::try_peek`] sees.
#[derive(Clone, Debug, PartialEq)]
pub struct AgentPeek {
    /// The status.
    pub status: AgentStatus,
    /// What it is working on.
    pub current_work: Option<String>,
    /// Its metrics (without the scheduler's acked, busy and missed counts: see
    /// [`AgentSlot::metrics`]).
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

/// A pool's agents by id, and the agents of the top and mid layers again, so that a glance at
/// a team's leaders (a run checks them every 100 ms) does not go through its executors.
#[derive(Default)]
struct Agents {
    all: BTreeMap<AgentId, Arc<AgentSlot>>,
    /// The agents of `all` that are not in the bottom layer.
    upper: BTreeMap<AgentId, Arc<AgentSlot>>,
}

impl Agents {
    fn remove(&mut self, id: &AgentId) {
        if self.all.remove(id).is_some_and(|slot| slot.layer != AgentLayer::Bottom) {
            self.upper.remove(id);
        }
    }
}

impl std::ops::Deref for Agents {
    type Target = BTreeMap<AgentId, Arc<AgentSlot>>;

    fn deref(&self) -> &Self::Target {
        &self.all
    }
}

/// Many agents, by id, with a size limit.
pub struct AgentPool {
    agents: RwLock<Agents>,
    max_agents: usize,
    cycles: AtomicU64,
    /// Agents added since the scheduler last looked that want a heartbeat without mail (see
    /// [`Agent::wants_tick`]), so it runs them once; the others wait for their mail.
    arrivals: std::sync::Mutex<Vec<AgentId>>,
}

impl AgentPool {
    /// A pool of at most `max_agents`.
    pub fn new(max_agents: usize) -> Self {
        Self {
            agents: RwLock::new(Agents::default()),
            max_agents,
            cycles: AtomicU64::new(0),
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

    /// Creates several agents, each as [`create`](Self::create) would, and answers each one's
    /// result, in order: what a team or a benchmark that starts thousands of agents calls.
    ///
    /// Each agent is checked first, as `create` checks it (its configuration, its id against
    /// the pool and the agents before it in the batch, the pool's limit counting the agents
    /// before it); one that fails a check gets its error and nothing of it is created. The
    /// others are initialized together ([`Agent::initialize_many`]: one audit append, one
    /// commit on a durable log, for all their moves to idle) and added under one lock of
    /// the pool. An agent that fails to initialize is not added, as with `create`.
    pub async fn create_many(
        &self,
        agents: impl IntoIterator<Item = (AgentConfig, Box<dyn AgentBehavior>, Arc<AgentDeps>)>,
    ) -> Vec<Result<Arc<AgentSlot>, PoolError>> {
        let agents = agents.into_iter();
        let expected = agents.size_hint().0;
        let mut results: Vec<Option<Result<Arc<AgentSlot>, PoolError>>> =
            Vec::with_capacity(expected);
        // The agents that passed their checks, each with its place in `results`.
        let mut created = Vec::with_capacity(expected);
        let mut places = Vec::with_capacity(expected);
        {
            let pool = self.read();
            let mut batch: rustc_hash::FxHashSet<AgentId> =
                rustc_hash::FxHashSet::with_capacity_and_hasher(expected, Default::default());
            for (config, behavior, deps) in agents {
                let checked = if pool.len().saturating_add(created.len()) >= self.max_agents {
                    Err(PoolError::Full { max: self.max_agents })
                } else if pool.contains_key(&config.id) || batch.contains(&config.id) {
                    Err(PoolError::Duplicate { id: config.id.clone() })
                } else {
                    batch.insert(config.id.clone());
                    Agent::new(config, behavior, deps).map_err(PoolError::from)
                };
                match checked {
                    Ok(agent) => {
                        places.push(results.len());
                        created.push(agent);
                        results.push(None);
                    }
                    Err(e) => results.push(Some(Err(e))),
                }
            }
        }
        let initialized = Agent::initialize_many(&mut created).await;
        let mut ready = Vec::with_capacity(created.len());
        for ((agent, outcome), place) in created.into_iter().zip(initialized).zip(places) {
            match outcome {
                Ok(()) => ready.push((place, agent)),
                Err(source) => {
                    results[place] =
                        Some(Err(PoolError::Initialize { id: agent.id().clone(), source }));
                }
            }
        }
        let mut added = Vec::with_capacity(ready.len());
        {
            let mut pool = self.write();
            for (place, agent) in ready {
                added.push((place, self.insert_into(&mut pool, agent)));
            }
        }
        for (place, inserted) in added {
            results[place] = Some(inserted.map(|(slot, wants_tick)| self.added(slot, wants_tick)));
        }
        results
            .into_iter()
            .map(|r| {
                r.unwrap_or_else(|| {
                    Err(PoolError::Stopped("an agent of the batch was lost".into()))
                })
            })
            .collect()
    }

    /// Adds an agent that is already initialized or restored (see [`Agent::restore`]).
    pub fn insert(&self, agent: Agent) -> Result<Arc<AgentSlot>, PoolError> {
        let (slot, wants_tick) = self.insert_into(&mut self.write(), agent)?;
        Ok(self.added(slot, wants_tick))
    }

    /// [`insert`](Self::insert)'s part under the pool's lock: `agent` put into `agents`, the
    /// pool's map, locked by the caller. Answers its slot and whether it wants a heartbeat
    /// without mail, for [`added`](Self::added) once the lock is released.
    fn insert_into(
        &self,
        agents: &mut Agents,
        agent: Agent,
    ) -> Result<(Arc<AgentSlot>, bool), PoolError> {
        let id = agent.id().clone();
        let config = agent.ctx().config();
        let (layer, supervisor) = (config.layer, config.supervisor.clone());
        let wants_tick = agent.wants_tick();
        let silence_ms = u32::try_from(agent.ctx().timeouts().silence_ms).unwrap_or(u32::MAX);
        if agents.len() >= self.max_agents {
            return Err(PoolError::Full { max: self.max_agents });
        }
        // One search of the map for both the check and the insertion.
        let std::collections::btree_map::Entry::Vacant(entry) = agents.all.entry(id.clone()) else {
            return Err(PoolError::Duplicate { id });
        };
        let slot = Arc::new(AgentSlot {
            id: id.clone(),
            layer,
            supervisor,
            agent: AgentLock::new(agent),
            quiet: AtomicU64::new(u64::MAX),
            // Not booked yet: its first cycle books it.
            booked: AtomicU64::new(0),
            last_ack: AtomicU64::new(0),
            ran: AtomicU32::new(0),
            acked: AtomicU32::new(0),
            busy: AtomicU32::new(0),
            missed: AtomicU32::new(0),
            gone: AtomicBool::new(false),
            changes: AtomicU32::new(0),
            stored: AtomicU32::new(0),
            turns: std::sync::OnceLock::new(),
            silence_ms,
        });
        entry.insert(slot.clone());
        if layer != AgentLayer::Bottom {
            agents.upper.insert(id, slot.clone());
        }
        Ok((slot, wants_tick))
    }

    /// [`insert`](Self::insert)'s part after the pool's lock: the scheduler told of an agent
    /// that wants a heartbeat without mail, and the addition logged.
    fn added(&self, slot: Arc<AgentSlot>, wants_tick: bool) -> Arc<AgentSlot> {
        if wants_tick {
            // It has work without mail (a restored agent mid-task): the scheduler asks it once.
            self.arrivals
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner)
                .push(slot.id.clone());
        }
        tracing::info!(agent = %slot.id, layer = %slot.layer, "agent added to the pool");
        slot
    }

    /// Shuts an agent down (→ terminated) and removes it. While it shuts down the scheduler
    /// expects no heartbeat answer from it (neither acked nor missed).
    pub async fn destroy(&self, id: &AgentId) -> Result<(), PoolError> {
        let slot = self.get(id).ok_or_else(|| PoolError::Unknown { id: id.clone() })?;
        slot.set_gone(true);
        let result = slot.agent.lock().await.shutdown().await;
        if let Err(source) = result {
            // Still in the pool, and possibly still running: the sweep looks at it again.
            slot.set_gone(false);
            return Err(PoolError::Shutdown { id: id.clone(), source });
        }
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
        let agents = self.read();
        let of_layer = if layer == AgentLayer::Bottom { &agents.all } else { &agents.upper };
        of_layer.values().filter(|s| s.layer == layer).cloned().collect()
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

    /// How many heartbeat cycles have run.
    pub fn cycles(&self) -> u64 {
        self.cycles.load(Ordering::Relaxed)
    }

    /// Counts one scheduler cycle; returns its number (from 1).
    pub(crate) fn next_cycle(&self) -> u64 {
        self.cycles.fetch_add(1, Ordering::Relaxed) + 1
    }

    /// Calls `visit` on every agent, by id, without allocating: under the pool's read lock, taken
    /// for [`SWEEP_CHUNK`] agents at a time so that adding or removing an agent never waits for
    /// a whole sweep of a large pool. `visit` must not block (the scheduler's sweep only reads
    /// atomics and tries locks). An agent added or removed meanwhile may be visited or not.
    pub(crate) fn for_each(&self, mut visit: impl FnMut(&Arc<AgentSlot>)) {
        let mut after: Option<AgentId> = None;
        loop {
            let agents = self.read();
            let mut rest = match &after {
                Some(last) => agents.range::<AgentId, _>((Excluded(last), Unbounded)),
                None => agents.range::<AgentId, _>(..),
            };
            let mut visited = 0;
            for (id, slot) in rest.by_ref() {
                visit(slot);
                visited += 1;
                if visited == SWEEP_CHUNK {
                    after = Some(id.clone());
                    break;
                }
            }
            if visited < SWEEP_CHUNK {
                return;
            }
        }
    }

    fn read(&self) -> std::sync::RwLockReadGuard<'_, Agents> {
        self.agents.read().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    fn write(&self) -> std::sync::RwLockWriteGuard<'_, Agents> {
        self.agents.write().unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

impl Default for AgentPool {
    fn default() -> Self {
        Self::new(DEFAULT_MAX_AGENTS)
    }
}
