//! Teams across processes on NATS JetStream: workers that host a share of each run's agents,
//! placed by leases, and taken over when a worker dies or is cut off.
//!
//! **The registry** ([`Registry`], the namespace [`REGISTRY`] on the server) holds two
//! key-value buckets: the live workers ([`WorkerInfo`], each entry expiring
//! [`WORKER_TTL`] after the worker last announced itself), and the placed runs
//! ([`PlacedRun`]: the run's id, the Strata version that started it, its agents and
//! heartbeat, and what a worker needs to build the team, opaque here).
//!
//! **A worker** ([`Worker`]) announces itself every [`WORKER_BEAT`], and joins every open run
//! of its own Strata version (a run of another version is refused, once, with
//! [`WorkerEvent::Refused`]; a run whose stores do not answer, as while the server restarts,
//! is tried again at the next beat: [`BuildError::Unavailable`]). For each run it keeps, at
//! the run's heartbeat:
//! - a **lease** per agent it hosts, in the run's bucket `leases` (a [`Leases`] whose time to
//!   live is [`LEASE_BEATS`] heartbeats), renewed every heartbeat. A lease that cannot be
//!   renewed (taken over, or the server out of reach until it is no longer valid) ends the
//!   hosting of its group of agents at once: the [`Team`] hosting them is dropped (its turns
//!   are aborted, as if the process died), and nothing of them runs here any more.
//! - **placement**: every agent of the run that matches the worker's [`WorkerFilter`] and is
//!   not leased is taken, up to the worker's fair share (the run's agents over the live
//!   workers of this version) and its capacity; an agent left unleased for a whole heartbeat
//!   is taken by any worker that matches and has room. The agents taken together are hosted by
//!   one [`Team::join`] with [`Share::Agents`]: restored from the run's stores (status,
//!   metrics, processed messages, layer state; unacknowledged messages are read again), so a
//!   takeover goes on where the dead worker stopped, and a tool call recorded in the tool
//!   journal is not made again.
//!   The group's agents take their turns in that team's own [`Driver`](crate::Driver), the
//!   one heartbeat loop of every team (`strata run`, a library run, evolution): the worker's
//!   beat here only renews the leases, reads the registry and places agents.
//! - **wake on work across processes**: a plain subscription to the run's bus subjects sees
//!   every message any process sends, wakes the teams here, and shows it to their guards.
//! - when the run is closed ([`Registry::close`]), its agents are shut down (terminated) and
//!   the leases released. Agents are placed only once the run, read again with their leases
//!   held, is still open: so once the coordinator saw every lease released after its close
//!   ([`wait_released`]), no agent of the run runs, and its last read of `system` finds
//!   everything they sent.
//!
//! **The coordinator** (the process that placed the run) hosts [`Share::Coordinator`]: it
//! submits the tasks, keeps their deadlines and reads their outcomes; [`follow`] wakes it.
//!
//! A worker stopped cleanly ([`Worker::run`]'s stop) stops its teams (their agents stay
//! resumable) and releases its leases, so other workers take the agents at once; a worker
//! killed is noticed when its leases expire, within [`LEASE_BEATS`] heartbeats.
//!
//! **Delivery waits for placement**: a worker's agents send through an [`AwaitingBus`], so a
//! message to an agent no worker hosts yet (not registered on the bus) waits for it, at most
//! [`PlacedRun::delivery_patience`], instead of failing at once; past it the send fails with
//! [`SendError::NotHosted`].
//!
//! **The guards of a placed run** are the coordinator's, as in a run in one process: every
//! worker reports its agents at each heartbeat in the run's bucket [`GUARD`] ([`AgentView`]s:
//! open tasks, whom each waits on, busy), and the coordinator's [`PlacedWatch`] hands them to
//! its team's guards ([`Team::watch_remote`]) with the count of work messages it sees on the
//! run's bus: a placed run that makes no progress, or whose agents wait on each other in a
//! cycle, ends with the typed reason. The same watch follows who holds each agent's lease,
//! and audits a worker that stopped holding its agents and who took them over
//! ([`AuditEvent::WorkerLost`]).
//!
//! **Worker ids are unique**: [`Worker::new`] claims its id in the registry atomically (a
//! create, not a write), so a second worker with an id in use is refused
//! ([`WorkerError::DuplicateId`]) even when both start at once.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;
use tracing::Instrument as _;

use agent_core::{AuditEvent, AuditLog, Clock};
use agent_state::{Address, AgentId, AgentLayer, BackendError, Message, MessageId, RunId};
use async_nats::jetstream::kv;
use async_trait::async_trait;
use futures_util::StreamExt as _;
use nats_store::{Found, Lease, Leases, NatsError, NatsStore, backend_error, entry, escape_token};
use serde::{Deserialize, Serialize};
use tokio::sync::{mpsc, watch};
use tokio::task::JoinHandle;

use crate::guard::{AgentView, RemoteAgents, agent_views, moves_work};
use crate::team::{Share, Team, TeamServices, TeamSpec};
use message_bus::{InboxError, MessageBus, RegisterError, SendError};
use std::sync::atomic::AtomicU64;

/// The Strata version of this build: a worker hosts only runs started by the same version.
pub const VERSION: &str = env!("CARGO_PKG_VERSION");
/// The namespace of the registry of workers and placed runs (no run may use it as its id).
pub const REGISTRY: &str = "workers";
/// How often a worker announces itself.
pub const WORKER_BEAT: Duration = Duration::from_secs(1);
/// How long a worker counts as live after it last announced itself.
pub const WORKER_TTL: Duration = Duration::from_secs(5);
/// A lease lives this many of the run's heartbeats after its last renewal: a worker that
/// stops renewing is noticed within this many missed heartbeats.
pub const LEASE_BEATS: u32 = 3;
/// The shortest period at which leases are renewed, whatever the run's heartbeat.
pub const MIN_LEASE_PERIOD: Duration = Duration::from_millis(100);
/// How long a worker that stops (or a run taken back) waits for its agents' running turns
/// before it stops them as a crash would (a command keeps running; its journal lets the next
/// holder adopt it).
pub const STOP_PATIENCE: Duration = Duration::from_secs(2);
/// The part of a run's namespace that holds its agents' leases.
pub const LEASES: &str = "leases";
/// The part of a run's namespace where each worker reports its agents to the run's guards.
pub const GUARD: &str = "guard";
/// The shortest time a delivery waits for its recipient to be hosted.
pub const MIN_DELIVERY_PATIENCE: Duration = Duration::from_secs(10);
/// How many looks at the leases (one per lease period) the coordinator waits for a lost
/// worker's agents to be taken over before it reports them not taken.
const LOST_PATIENCE: u32 = LEASE_BEATS * 3;

/// A live worker, as it announces itself.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct WorkerInfo {
    /// Its id, unique among the live workers.
    pub id: String,
    /// The Strata version it runs.
    pub version: String,
    /// Which agents it hosts.
    pub filter: WorkerFilter,
    /// How many agents it hosts at most.
    pub capacity: usize,
    /// How many it hosts now.
    pub hosting: usize,
}

/// An agent of a placed run.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct PlacedAgent {
    /// Its id.
    pub id: AgentId,
    /// Its layer.
    pub layer: AgentLayer,
}

/// A run placed on workers.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct PlacedRun {
    /// The run's id: its namespace on the server. Stored as its text; a stored run whose id
    /// breaks the run id rule does not read (a worker skips it, with a warning).
    pub run_id: RunId,
    /// The Strata version that placed it.
    pub version: String,
    /// The team's heartbeat, in milliseconds: the period of the leases.
    pub heartbeat_ms: u64,
    /// The configured agents to place.
    pub agents: Vec<PlacedAgent>,
    /// Closed: its agents shut down and nothing more is placed.
    pub closed: bool,
    /// What a worker builds the team from (for `strata`, the team and plan files): read by
    /// the [`RunBuilder`], opaque here.
    pub spec: serde_json::Value,
}

impl PlacedRun {
    /// A run of `spec`'s agents, open, placed by this version.
    pub fn new(run_id: RunId, team: &TeamSpec, spec: serde_json::Value) -> Self {
        Self {
            run_id,
            version: VERSION.to_owned(),
            heartbeat_ms: u64::try_from(team.heartbeat.as_millis()).unwrap_or(u64::MAX),
            agents: team
                .agents
                .iter()
                .map(|a| PlacedAgent { id: a.config.id.clone(), layer: a.config.layer })
                .collect(),
            closed: false,
            spec,
        }
    }

    /// How often its leases are renewed.
    pub fn lease_period(&self) -> Duration {
        Duration::from_millis(self.heartbeat_ms).max(MIN_LEASE_PERIOD)
    }

    /// How long a lease lives after its last renewal.
    pub fn lease_ttl(&self) -> Duration {
        self.lease_period() * LEASE_BEATS
    }

    /// How long a message to an agent no worker hosts yet waits for it: ten lease lives, and
    /// at least [`MIN_DELIVERY_PATIENCE`] (a worker joins a run within a second or two, and
    /// takes an unleased agent within a heartbeat of seeing it).
    pub fn delivery_patience(&self) -> Duration {
        (self.lease_ttl() * 10).max(MIN_DELIVERY_PATIENCE)
    }

    /// How long a worker's report of its agents stays in [`GUARD`] without being renewed.
    fn report_ttl(&self) -> Duration {
        (self.lease_ttl() * 2).max(Duration::from_secs(2))
    }
}

/// Which agents a worker hosts: those matching every condition given (none: every agent).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct WorkerFilter {
    /// Agent id patterns, `*` matching any run of characters; empty: any id.
    pub agents: Vec<String>,
    /// Layers; empty: any layer.
    pub layers: Vec<AgentLayer>,
}

impl WorkerFilter {
    /// Whether an agent `id` on `layer` is one this worker hosts.
    pub fn matches(&self, id: &AgentId, layer: AgentLayer) -> bool {
        (self.agents.is_empty() || self.agents.iter().any(|p| glob(p, id.as_str())))
            && (self.layers.is_empty() || self.layers.contains(&layer))
    }
}

/// Whether `text` matches `pattern`, where `*` matches any run of characters.
fn glob(pattern: &str, text: &str) -> bool {
    let parts: Vec<&str> = pattern.split('*').collect();
    let [first, middle @ .., last] = parts.as_slice() else {
        return pattern == text;
    };
    let Some(mut rest) = text.strip_prefix(first) else { return false };
    for part in middle {
        match rest.find(part) {
            Some(at) => rest = &rest[at + part.len()..],
            None => return false,
        }
    }
    rest.len() >= last.len() && rest.ends_with(last)
}

/// The registry of workers and placed runs on a NATS server.
#[derive(Clone, Debug)]
pub struct Registry {
    workers: kv::Store,
    workers_name: String,
    runs: kv::Store,
    runs_name: String,
}

impl Registry {
    /// The registry on `store`'s server (in the namespace [`REGISTRY`], whatever `store`'s),
    /// created if it does not exist; refused if another schema version made it.
    pub async fn open(store: &NatsStore) -> Result<Self, NatsError> {
        let store = store.with_namespace(REGISTRY)?;
        let workers = store
            .bucket("workers", kv::Config { history: 1, max_age: WORKER_TTL, ..Default::default() })
            .await?;
        let runs = store.bucket("runs", kv::Config { history: 1, ..Default::default() }).await?;
        Ok(Self {
            workers,
            workers_name: store.name("workers"),
            runs,
            runs_name: store.name("runs"),
        })
    }

    /// The live workers: those that announced themselves within [`WORKER_TTL`].
    pub async fn workers(&self) -> Result<Vec<WorkerInfo>, BackendError> {
        read_all(&self.workers, &self.workers_name).await
    }

    /// Claims `worker`'s id: announces it only if no live worker has it (atomically, so of
    /// two workers claiming one id at once exactly one gets it); `false` if one has.
    pub async fn claim(&self, worker: &WorkerInfo) -> Result<bool, BackendError> {
        let key = escape_token(&worker.id);
        let bytes = serde_json::to_vec(worker).map_err(|e| {
            BackendError::new(
                nats_store::BACKEND,
                format!("cannot encode `{key}` of `{}`: {e}", self.workers_name),
            )
        })?;
        match self.workers.create(&key, bytes.into()).await {
            Ok(_) => Ok(true),
            Err(e) if e.kind() == kv::CreateErrorKind::AlreadyExists => Ok(false),
            Err(e) => Err(backend_error(
                format!("cannot claim the worker id `{}` in `{}`", worker.id, self.workers_name),
                e,
            )),
        }
    }

    /// Announces (or renews) `worker`.
    pub async fn announce(&self, worker: &WorkerInfo) -> Result<(), BackendError> {
        put(&self.workers, &self.workers_name, &escape_token(&worker.id), worker).await
    }

    /// Withdraws worker `id` (it stops).
    pub async fn withdraw(&self, id: &str) -> Result<(), BackendError> {
        self.workers.delete(escape_token(id)).await.map_err(|e| {
            backend_error(format!("cannot withdraw worker `{id}` from `{}`", self.workers_name), e)
        })
    }

    /// Places `run` (or updates it).
    pub async fn publish(&self, run: &PlacedRun) -> Result<(), BackendError> {
        put(&self.runs, &self.runs_name, &escape_token(&run.run_id), run).await
    }

    /// The placed run `run_id`, if there is one.
    pub async fn run(&self, run_id: &RunId) -> Result<Option<PlacedRun>, BackendError> {
        read(&self.runs, &self.runs_name, &escape_token(run_id)).await
    }

    /// Every placed run, open or closed.
    pub async fn runs(&self) -> Result<Vec<PlacedRun>, BackendError> {
        read_all(&self.runs, &self.runs_name).await
    }

    /// Takes the placed run `run_id` back: its workers stop its agents (which stay
    /// resumable) and release them.
    pub async fn remove(&self, run_id: &RunId) -> Result<(), BackendError> {
        self.runs.delete(escape_token(run_id)).await.map_err(|e| {
            backend_error(format!("cannot remove run `{run_id}` from `{}`", self.runs_name), e)
        })
    }

    /// Closes the placed run `run_id`: its workers shut its agents down and release them.
    pub async fn close(&self, run_id: &RunId) -> Result<(), BackendError> {
        if let Some(mut run) = self.run(run_id).await? {
            run.closed = true;
            self.publish(&run).await?;
        }
        Ok(())
    }
}

async fn put<T: Serialize>(
    bucket: &kv::Store,
    name: &str,
    key: &str,
    value: &T,
) -> Result<(), BackendError> {
    let bytes = serde_json::to_vec(value).map_err(|e| {
        BackendError::new(nats_store::BACKEND, format!("cannot encode `{key}` of `{name}`: {e}"))
    })?;
    bucket
        .put(key, bytes.into())
        .await
        .map_err(|e| backend_error(format!("cannot write `{key}` of `{name}`"), e))?;
    Ok(())
}

async fn read<T: for<'de> Deserialize<'de>>(
    bucket: &kv::Store,
    name: &str,
    key: &str,
) -> Result<Option<T>, BackendError> {
    match entry(bucket, name, key).await? {
        Some(Found::Value(entry)) => serde_json::from_slice(&entry.value).map(Some).map_err(|e| {
            BackendError::new(
                nats_store::BACKEND,
                format!("`{key}` of `{name}` is not what this Strata writes: {e}"),
            )
        }),
        Some(Found::Deleted(_)) | None => Ok(None),
    }
}

async fn read_all<T: for<'de> Deserialize<'de>>(
    bucket: &kv::Store,
    name: &str,
) -> Result<Vec<T>, BackendError> {
    let mut out = Vec::new();
    for key in nats_store::keys(bucket, name).await? {
        match read(bucket, name, &key).await {
            Ok(Some(value)) => out.push(value),
            Ok(None) => {}
            // One unreadable entry (another version's) does not hide the others.
            Err(e) => tracing::warn!(error = %e, "skipping a registry entry"),
        }
    }
    Ok(out)
}

/// A run's team as a worker hosts it: built once per run and worker by a [`RunBuilder`].
pub struct HostedRun {
    /// The whole team (every process is given all of it).
    pub spec: TeamSpec,
    /// The services, on the run's namespace of the server; shared by the worker's groups of
    /// agents of this run.
    pub services: TeamServices,
    /// The connection, in the run's namespace.
    pub store: NatsStore,
}

/// Builds the team of a placed run on a worker (the CLI reads the team file from
/// [`PlacedRun::spec`], and makes the reasoners, tools and workspace).
#[async_trait]
pub trait RunBuilder: Send + Sync {
    /// The team and services of `run`; [`BuildError::Refused`] refuses the run on this
    /// worker, [`BuildError::Unavailable`] tries again at the worker's next beat.
    async fn build(&self, run: &PlacedRun) -> Result<HostedRun, BuildError>;
}

/// Why a [`RunBuilder`] could not build a placed run's team.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum BuildError {
    /// Not on this worker (a team it cannot build, a run's stores of another schema): the run
    /// is refused, once, and not joined again.
    Refused(String),
    /// Not now (the server did not answer, as while it restarts): the worker reports the
    /// trouble and tries again at its next beat.
    Unavailable(String),
}

impl From<String> for BuildError {
    /// Words alone refuse the run.
    fn from(reason: String) -> Self {
        BuildError::Refused(reason)
    }
}

/// What a worker does, as it happens.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum WorkerEvent {
    /// It joined a run.
    Joined {
        /// The run.
        run: RunId,
    },
    /// It refused a run (another Strata version, or the team could not be built here).
    Refused {
        /// The run.
        run: RunId,
        /// Why.
        reason: String,
    },
    /// It hosts these agents of a run from now on.
    Hosting {
        /// The run.
        run: RunId,
        /// The agents taken.
        agents: Vec<AgentId>,
    },
    /// It stopped hosting these agents: a lease was lost.
    Lost {
        /// The run.
        run: RunId,
        /// The agents given up.
        agents: Vec<AgentId>,
        /// Why.
        reason: String,
    },
    /// The run was taken back by its coordinator (stopped, to be resumed): its agents here
    /// were stopped, resumable, and released.
    Withdrawn {
        /// The run.
        run: RunId,
    },
    /// The run was closed: its agents here were shut down and released.
    Closed {
        /// The run.
        run: RunId,
    },
    /// Something failed and is retried (hosting a group of agents, reading the registry).
    Trouble {
        /// The run, if it is about one.
        run: Option<RunId>,
        /// What failed.
        error: String,
    },
}

/// A worker's settings.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct WorkerConfig {
    /// Its id, unique among the live workers.
    pub id: String,
    /// Which agents it hosts.
    pub filter: WorkerFilter,
    /// How many agents it hosts at most, over all runs (at least 1).
    pub capacity: usize,
}

/// A worker refused at start.
#[derive(Debug, thiserror::Error)]
pub enum WorkerError {
    /// The registry cannot be opened (another schema version, or the server failed).
    #[error("the registry of workers on the server: {0}")]
    Registry(#[from] NatsError),
    /// Another live worker has this id.
    #[error(
        "a live worker named `{id}` is on the server already (a worker that stopped abruptly stays listed for 5 s); give this one another --id, or stop that one"
    )]
    DuplicateId {
        /// The id.
        id: String,
    },
    /// A capacity of zero.
    #[error("a worker's capacity must be at least 1 agent")]
    NoCapacity,
    /// The server failed.
    #[error(transparent)]
    Backend(#[from] BackendError),
}

/// A worker: hosts a share of every open run placed on the server.
pub struct Worker {
    registry: Registry,
    store: NatsStore,
    config: WorkerConfig,
    builder: Arc<dyn RunBuilder>,
    events: mpsc::Sender<WorkerEvent>,
    hosting: Arc<AtomicUsize>,
}

/// How many events wait for the reader before new ones are dropped (logged all the same).
const EVENT_QUEUE: usize = 1_024;

impl Worker {
    /// A worker on `store`'s server; its events come on the receiver. Checks the registry and
    /// claims its id there ([`Registry::claim`]): refused if a live worker has it. It hosts
    /// nothing until [`run`](Self::run) (which renews the claim every [`WORKER_BEAT`]).
    pub async fn new(
        store: &NatsStore,
        config: WorkerConfig,
        builder: Arc<dyn RunBuilder>,
    ) -> Result<(Self, mpsc::Receiver<WorkerEvent>), WorkerError> {
        if config.capacity == 0 {
            return Err(WorkerError::NoCapacity);
        }
        let registry = Registry::open(store).await?;
        let info = WorkerInfo {
            id: config.id.clone(),
            version: VERSION.to_owned(),
            filter: config.filter.clone(),
            capacity: config.capacity,
            hosting: 0,
        };
        if !registry.claim(&info).await? {
            return Err(WorkerError::DuplicateId { id: config.id });
        }
        let (events, receiver) = mpsc::channel(EVENT_QUEUE);
        let worker = Self {
            registry,
            store: store.clone(),
            config,
            builder,
            events,
            hosting: Arc::new(AtomicUsize::new(0)),
        };
        Ok((worker, receiver))
    }

    /// Works until `stop` turns true: announces itself, joins runs, hosts agents. On stop,
    /// every team here is stopped (its agents resumable) and every lease released.
    pub async fn run(self, mut stop: watch::Receiver<bool>) {
        let mut hosts = Hosts::default();
        let mut beat = tokio::time::interval(WORKER_BEAT);
        beat.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                _ = stop.changed() => break,
                _ = beat.tick() => {}
            }
            if *stop.borrow() {
                break;
            }
            self.beat(&mut hosts).await;
        }
        for (_, (stop_run, task)) in hosts.running {
            let _ = stop_run.send(true);
            if let Err(e) = task.await {
                tracing::error!(error = %e, "a run's host task failed");
            }
        }
        if let Err(e) = self.registry.withdraw(&self.config.id).await {
            tracing::warn!(error = %e, "could not withdraw the worker from the registry");
        }
    }

    /// One beat: announces the worker, forgets the hosts that ended, joins the runs placed
    /// since.
    async fn beat(&self, hosts: &mut Hosts) {
        let info = WorkerInfo {
            id: self.config.id.clone(),
            version: VERSION.to_owned(),
            filter: self.config.filter.clone(),
            capacity: self.config.capacity,
            hosting: self.hosting.load(Ordering::Relaxed),
        };
        if let Err(e) = self.registry.announce(&info).await {
            self.emit(WorkerEvent::Trouble { run: None, error: e.to_string() });
        }
        hosts.reap().await;
        let runs = match self.registry.runs().await {
            Ok(runs) => runs,
            Err(e) => {
                self.emit(WorkerEvent::Trouble { run: None, error: e.to_string() });
                return;
            }
        };
        for run in runs {
            let run_id = &run.run_id;
            if run.closed || hosts.running.contains_key(run_id) || hosts.refused.contains(run_id) {
                continue;
            }
            self.join(run, hosts).await;
        }
    }

    /// Joins `run`: builds its share here and starts its host, or refuses it (another
    /// version, or a share this worker cannot build).
    async fn join(&self, run: PlacedRun, hosts: &mut Hosts) {
        if run.version != VERSION {
            hosts.refused.insert(run.run_id.clone());
            self.emit(WorkerEvent::Refused {
                reason: format!(
                    "it was placed by Strata {}, this worker is Strata {VERSION}; start a worker of that version for it",
                    run.version
                ),
                run: run.run_id,
            });
            return;
        }
        let hosted = match self.builder.build(&run).await {
            Ok(hosted) => hosted,
            Err(BuildError::Refused(reason)) => {
                hosts.refused.insert(run.run_id.clone());
                self.emit(WorkerEvent::Refused { run: run.run_id, reason });
                return;
            }
            Err(BuildError::Unavailable(error)) => {
                // Joined at a later beat, once the server answers again.
                self.emit(WorkerEvent::Trouble { run: Some(run.run_id), error });
                return;
            }
        };
        let (stop_run, stopped) = watch::channel(false);
        let host = RunHost {
            run: run.clone(),
            hosted,
            registry: self.registry.clone(),
            registry_store: self.store.clone(),
            config: self.config.clone(),
            events: self.events.clone(),
            hosting: self.hosting.clone(),
        };
        self.emit(WorkerEvent::Joined { run: run.run_id.clone() });
        hosts.running.insert(run.run_id, (stop_run, tokio::spawn(host.run(stopped))));
    }

    fn emit(&self, event: WorkerEvent) {
        emit(&self.events, event);
    }
}

fn emit(events: &mpsc::Sender<WorkerEvent>, event: WorkerEvent) {
    tracing::info!(?event, "worker");
    let _ = events.try_send(event);
}

/// The runs a worker hosts, by id, and those it refused (not joined again).
#[derive(Default)]
struct Hosts {
    /// Each hosted run's stop signal and host task (`false` when it ends: refused).
    running: BTreeMap<RunId, (watch::Sender<bool>, JoinHandle<bool>)>,
    refused: BTreeSet<RunId>,
}

impl Hosts {
    /// Forgets the hosts that ended: a run whose host ended is joined again if it is placed
    /// again (a resumed run), unless it was refused.
    async fn reap(&mut self) {
        let ended: Vec<RunId> = self
            .running
            .iter()
            .filter(|(_, (_, t))| t.is_finished())
            .map(|(r, _)| r.clone())
            .collect();
        for run in ended {
            if let Some((_, task)) = self.running.remove(&run)
                && !task.await.unwrap_or(false)
            {
                self.refused.insert(run);
            }
        }
    }
}

/// A group of agents hosted together: one team, and a lease per configured agent.
struct Group {
    team: Arc<Team>,
    leases: Vec<(AgentId, Lease)>,
}

/// The teams hosting a run's groups, shared with the subscription that wakes them.
type Teams = Arc<Mutex<Vec<Arc<Team>>>>;

/// One worker's part in one run.
struct RunHost {
    run: PlacedRun,
    hosted: HostedRun,
    registry: Registry,
    /// The connection the registry is on (also the worker's own).
    #[allow(dead_code, reason = "keeps the worker's connection alive as long as the host")]
    registry_store: NatsStore,
    config: WorkerConfig,
    events: mpsc::Sender<WorkerEvent>,
    hosting: Arc<AtomicUsize>,
}

impl RunHost {
    /// Hosts this worker's share of the run until it is closed, taken back or `stop` turns
    /// true; `false` if the run was refused (its leases cannot be used), not to be joined again.
    async fn run(mut self, mut stop: watch::Receiver<bool>) -> bool {
        let run_id = self.run.run_id.clone();
        // A message to an agent no worker hosts yet waits for it (bounded), not fails at once.
        self.hosted.services.bus = Arc::new(AwaitingBus::new(
            self.hosted.services.bus.clone(),
            self.run.delivery_patience(),
            self.run.lease_period(),
        ));
        // Where this worker reports its agents to the run's guards (the coordinator's).
        let reports = match guard_bucket(&self.hosted.store, &self.run).await {
            Ok(bucket) => Some(bucket),
            Err(e) => {
                self.trouble(format!("cannot report its agents to the run's guards: {e}"));
                None
            }
        };
        let leases = match Leases::open(&self.hosted.store, LEASES, self.run.lease_ttl()).await {
            Ok(leases) => leases,
            Err(e) => {
                emit(
                    &self.events,
                    WorkerEvent::Refused { run: run_id, reason: format!("its leases: {e}") },
                );
                return false;
            }
        };
        let teams: Teams = Arc::default();
        let follower = self.follow_deliveries(&teams);
        let mut groups: Vec<Group> = Vec::new();
        // Agents seen unleased at the last heartbeat: taken beyond the fair share now.
        let mut waiting: BTreeSet<AgentId> = BTreeSet::new();
        // Where the next beat's look at the present leases starts.
        let mut cursor = 0;
        let mut beat = tokio::time::interval(self.run.lease_period());
        beat.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            // The first lease to run out ends its group at once, not at the next beat.
            let deadline =
                groups.iter().flat_map(|g| g.leases.iter()).map(|(_, l)| l.valid_until()).min();
            tokio::select! {
                _ = stop.changed() => break,
                () = sleep_until(deadline), if deadline.is_some() => {}
                _ = beat.tick() => {}
            }
            if *stop.borrow() {
                break;
            }
            // The beat's work is bounded by the first lease to run out: a server that does
            // not answer (a partition) must not keep a group acting past its lease.
            let first_out = earliest(&groups);
            let beat_work = self.beat(&leases, &teams, &mut groups, &mut waiting, &mut cursor);
            let end = match first_out {
                Some(at) => tokio::time::timeout_at(at, beat_work).await.unwrap_or(Beat::Open),
                None => beat_work.await,
            };
            self.stop_expired(&leases, &teams, &mut groups).await;
            if let (Some(bucket), Beat::Open) = (&reports, &end) {
                self.report(bucket, &groups).await;
            }
            if !self.carry_on(end, &leases, &teams, &mut groups).await {
                break;
            }
        }
        if *stop.borrow() {
            // A clean stop: the agents stay resumable, and others may take them at once.
            self.stop_all(&leases, &teams, std::mem::take(&mut groups)).await;
        }
        follower.abort();
        if let Some(bucket) = &reports
            && let Err(e) = bucket.delete(escape_token(&self.config.id)).await
        {
            tracing::debug!(error = %e, "could not withdraw the report of the agents; it expires");
        }
        true
    }

    /// Follows the run's deliveries: every group's team is shown each (its guards follow
    /// ping-pong across workers) and woken by it.
    fn follow_deliveries(&self, teams: &Teams) -> JoinHandle<()> {
        let teams = teams.clone();
        follow(&self.hosted.store, move |message| {
            for team in lock(&teams).iter() {
                team.observe(message);
                team.wake();
            }
        })
    }

    /// Every group with a lease no longer valid stops at once, whatever the beat did.
    async fn stop_expired(&self, leases: &Leases, teams: &Teams, groups: &mut Vec<Group>) {
        let (expired, valid): (Vec<Group>, Vec<Group>) = std::mem::take(groups)
            .into_iter()
            .partition(|g| g.leases.iter().any(|(_, l)| !l.is_valid()));
        *groups = valid;
        for group in expired {
            let reason =
                "a lease ran out before it could be renewed (the server did not answer in time)"
                    .to_owned();
            self.give_up(leases, teams, group, reason).await;
        }
    }

    /// Whether the host goes on after a beat that ended with `end`: a closed run's agents are
    /// shut down and released; a run taken back (its coordinator stopped) leaves them
    /// resumable.
    async fn carry_on(
        &self,
        end: Beat,
        leases: &Leases,
        teams: &Teams,
        groups: &mut Vec<Group>,
    ) -> bool {
        let run_id = &self.run.run_id;
        match end {
            Beat::Open => true,
            Beat::Closed => {
                for group in std::mem::take(groups) {
                    if let Err(e) = group.team.shutdown().await {
                        tracing::warn!(error = %e, run = %run_id, "an agent did not shut down cleanly");
                    }
                    self.release(leases, teams, group).await;
                }
                emit(&self.events, WorkerEvent::Closed { run: run_id.clone() });
                false
            }
            Beat::Withdrawn => {
                self.stop_all(leases, teams, std::mem::take(groups)).await;
                emit(&self.events, WorkerEvent::Withdrawn { run: run_id.clone() });
                false
            }
        }
    }

    /// Tells the run's guards (the coordinator's) what this worker's agents are doing: their
    /// open tasks, whom they wait on, whether they are in a turn. Bounded by a lease period.
    async fn report(&self, bucket: &kv::Store, groups: &[Group]) {
        let report = GuardReport {
            worker: self.config.id.clone(),
            agents: groups.iter().flat_map(|g| agent_views(g.team.pool())).collect(),
        };
        let name = self.hosted.store.name(GUARD);
        let key = escape_token(&self.config.id);
        match tokio::time::timeout(self.run.lease_period(), put(bucket, &name, &key, &report)).await
        {
            Ok(Ok(())) => {}
            Ok(Err(e)) => tracing::debug!(error = %e, "could not report the agents to the guards"),
            Err(_) => tracing::debug!("reporting the agents to the guards timed out"),
        }
    }

    /// Stops every group's agents (resumable; turns still running after [`STOP_PATIENCE`]
    /// are stopped as a crash would) and releases them.
    async fn stop_all(&self, leases: &Leases, teams: &Teams, groups: Vec<Group>) {
        for group in groups {
            if !group.team.stop_within(STOP_PATIENCE).await {
                tracing::info!(run = %self.run.run_id, "turns still running were stopped as a crash would");
            }
            self.release(leases, teams, group).await;
        }
    }

    /// One heartbeat's work: renew the leases (a group with one lost is given up), read
    /// whether the run is still open, place what is free.
    async fn beat(
        &self,
        leases: &Leases,
        teams: &Teams,
        groups: &mut Vec<Group>,
        waiting: &mut BTreeSet<AgentId>,
        cursor: &mut usize,
    ) -> Beat {
        let mut i = 0;
        while i < groups.len() {
            match renew(leases, &mut groups[i]).await {
                None => i += 1,
                Some(reason) => {
                    let group = groups.remove(i);
                    self.give_up(leases, teams, group, reason).await;
                }
            }
        }
        match self.registry.run(&self.run.run_id).await {
            Ok(Some(run)) if !run.closed => {}
            Ok(Some(_)) => return Beat::Closed,
            Ok(None) => return Beat::Withdrawn,
            Err(e) => {
                emit(
                    &self.events,
                    WorkerEvent::Trouble {
                        run: Some(self.run.run_id.clone()),
                        error: e.to_string(),
                    },
                );
                return Beat::Open;
            }
        }
        self.place(leases, teams, groups, waiting, cursor).await;
        Beat::Open
    }

    /// Takes the unleased agents this worker should host, as one new group.
    async fn place(
        &self,
        leases: &Leases,
        teams: &Teams,
        groups: &mut Vec<Group>,
        waiting: &mut BTreeSet<AgentId>,
        cursor: &mut usize,
    ) {
        let taken = self.take_leases(leases, groups, waiting, cursor).await;
        if taken.is_empty() {
            return;
        }
        // The run may have closed since the beat read it open: its coordinator then waits for
        // the leases it sees to be released, and drains `system` once none is left. A lease
        // taken after that look would let agents start (and answer heartbeats to `system`)
        // after the coordinator's last read: read the run again now that the leases are
        // held, so that a close before this look is seen here, and one after it finds them.
        if !matches!(self.registry.run(&self.run.run_id).await, Ok(Some(run)) if !run.closed) {
            for (_, lease) in taken {
                let _ = leases.release(lease).await;
            }
            return;
        }
        self.host(leases, teams, groups, taken).await;
    }

    /// Takes the leases of the free agents this worker may host (its filter, its capacity, its
    /// fair share of the live workers), at most for one heartbeat; the free agents left are
    /// noted in `waiting`, and `cursor` says where the next look at held leases starts.
    async fn take_leases(
        &self,
        leases: &Leases,
        groups: &[Group],
        waiting: &mut BTreeSet<AgentId>,
        cursor: &mut usize,
    ) -> Vec<(AgentId, Lease)> {
        let mine: BTreeSet<&AgentId> =
            groups.iter().flat_map(|g| g.leases.iter().map(|(a, _)| a)).collect();
        let share = self.run.agents.len().div_ceil(self.live_workers().await);
        // The keys with an entry: leased (or released a moment ago); one request for all.
        let present = match leases.keys().await {
            Ok(keys) => keys,
            Err(e) => {
                tracing::debug!(error = %e, "cannot list the leases; asking for each");
                BTreeSet::new()
            }
        };
        // Leases are taken for at most one heartbeat, so the first one taken still has most
        // of its life when the group starts; the rest wait for the next beat.
        let started = tokio::time::Instant::now();
        let (mut probes, mut seen) = (0, 0);
        let mut taken: Vec<(AgentId, Lease)> = Vec::new();
        let mut unleased = BTreeSet::new();
        for agent in &self.run.agents {
            if mine.contains(&agent.id) || !self.config.filter.matches(&agent.id, agent.layer) {
                continue;
            }
            let key = escape_token(agent.id.as_str());
            let room = self.hosting.load(Ordering::Relaxed) + taken.len() < self.config.capacity;
            let fair = mine.len() + taken.len() < share || waiting.contains(&agent.id);
            if present.contains(&key) {
                // Held, or released a moment ago (a delete marker stays until it expires): a
                // few are looked at each beat, in turn, so a released agent is taken soon
                // without asking for every held one at every beat.
                if room && fair && probes < PROBES_PER_BEAT && seen >= *cursor {
                    probes += 1;
                    *cursor = seen + 1;
                    if let Ok(Some(lease)) = leases.acquire(&key, &self.config.id).await {
                        taken.push((agent.id.clone(), lease));
                    }
                }
                seen += 1;
                continue;
            }
            if !(room && fair) || started.elapsed() > self.run.lease_period() {
                // Only noted, so that it is taken at the next heartbeat if still free.
                unleased.insert(agent.id.clone());
                continue;
            }
            match leases.acquire(&key, &self.config.id).await {
                Ok(Some(lease)) => taken.push((agent.id.clone(), lease)),
                Ok(None) => {}
                Err(e) => self.trouble(e.to_string()),
            }
        }
        *waiting = unleased;
        if probes < PROBES_PER_BEAT {
            // Every present key was looked at: start again from the first.
            *cursor = 0;
        }
        taken
    }

    /// How many workers of this version are alive (at least this one).
    async fn live_workers(&self) -> usize {
        match self.registry.workers().await {
            Ok(workers) => workers.iter().filter(|w| w.version == VERSION).count().max(1),
            Err(_) => 1,
        }
    }

    /// Reports trouble with this run.
    fn trouble(&self, error: String) {
        emit(&self.events, WorkerEvent::Trouble { run: Some(self.run.run_id.clone()), error });
    }

    /// Hosts the agents whose leases were `taken` as one group: a team joined on the run's
    /// services, or, if it cannot start (or its leases cannot be renewed), nothing.
    async fn host(
        &self,
        leases: &Leases,
        teams: &Teams,
        groups: &mut Vec<Group>,
        mut taken: Vec<(AgentId, Lease)>,
    ) {
        let agents: BTreeSet<AgentId> = taken.iter().map(|(a, _)| a.clone()).collect();
        let span = agent_core::otel::share(&self.run.run_id, agents.len());
        let joined = Team::join(
            self.hosted.spec.clone(),
            self.hosted.services.clone(),
            Share::Agents(agents.clone()),
        )
        .instrument(span)
        .await;
        let team = match joined {
            Ok(team) => team,
            Err(e) => {
                self.trouble(format!("cannot host {}: {e}", names(&agents)));
                for (_, lease) in taken {
                    let _ = leases.release(lease).await;
                }
                return;
            }
        };
        // Creating many agents takes a while: the leases are renewed before they act.
        if let Some(why) = renew_all(leases, &mut taken).await {
            self.trouble(format!("cannot host {}: {why}", names(&agents)));
            drop(team);
            for (agent, lease) in taken {
                let _ = self.hosted.services.bus.release(&agent_state::Address::Agent(agent)).await;
                if lease.is_valid() {
                    let _ = leases.release(lease).await;
                }
            }
            return;
        }
        let team = Arc::new(team);
        self.hosting.fetch_add(taken.len(), Ordering::Relaxed);
        lock(teams).push(team.clone());
        // Mail may be waiting already.
        team.wake();
        emit(
            &self.events,
            WorkerEvent::Hosting {
                run: self.run.run_id.clone(),
                agents: agents.into_iter().collect(),
            },
        );
        groups.push(Group { team, leases: taken });
    }

    /// Ends the hosting of `group` at once (its turns aborted), gives its inboxes' messages
    /// back, and releases what leases it still holds.
    async fn give_up(&self, leases: &Leases, teams: &Teams, group: Group, reason: String) {
        let agents: Vec<AgentId> = group.leases.iter().map(|(a, _)| a.clone()).collect();
        emit(&self.events, WorkerEvent::Lost { run: self.run.run_id.clone(), agents, reason });
        self.release(leases, teams, group).await;
    }

    /// Drops `group`'s team (aborting what still runs), puts its agents' messages taken and
    /// not acknowledged back, and releases its leases.
    async fn release(&self, leases: &Leases, teams: &Teams, group: Group) {
        let Group { team, leases: held } = group;
        let inboxes: Vec<AgentId> = team.pool().all().iter().map(|s| s.id().clone()).collect();
        lock(teams).retain(|t| !Arc::ptr_eq(t, &team));
        drop(team);
        for agent in inboxes {
            let _ = self.hosted.services.bus.release(&agent_state::Address::Agent(agent)).await;
        }
        self.hosting.fetch_sub(held.len(), Ordering::Relaxed);
        for (_, lease) in held {
            if lease.is_valid()
                && let Err(e) = leases.release(lease).await
            {
                tracing::debug!(error = %e, "could not release a lease; it expires");
            }
        }
    }
}

/// What a heartbeat found of the run.
enum Beat {
    /// Open (or unknown: the registry did not answer).
    Open,
    /// Closed by its coordinator: shut the agents down.
    Closed,
    /// Taken back by its coordinator: stop the agents, resumable.
    Withdrawn,
}

/// When the first lease of `groups` runs out, if any is held.
fn earliest(groups: &[Group]) -> Option<tokio::time::Instant> {
    groups.iter().flat_map(|g| g.leases.iter()).map(|(_, l)| l.valid_until()).min()
}

/// Renews every lease of `group`; `Some(why)` when one is lost.
async fn renew(leases: &Leases, group: &mut Group) -> Option<String> {
    renew_all(leases, &mut group.leases).await
}

/// How many held (or just released) leases one beat looks at to find released ones.
const PROBES_PER_BEAT: usize = 64;

/// How many lease renewals are in flight at once (each is one round trip to the server).
const RENEWALS_IN_FLIGHT: usize = 64;

/// Renews every lease of `held`, [`RENEWALS_IN_FLIGHT`] at a time; `Some(why)` when one is
/// lost. A renewal not finished when this is dropped (the beat ran out of time) leaves its
/// lease as it was: seen as running out, which gives its group up.
async fn renew_all(leases: &Leases, held: &mut [(AgentId, Lease)]) -> Option<String> {
    let mut next = 0;
    let mut lost = None;
    let mut renewing = tokio::task::JoinSet::new();
    loop {
        while renewing.len() < RENEWALS_IN_FLIGHT && next < held.len() {
            let (leases, mut lease, at) = (leases.clone(), held[next].1.clone(), next);
            renewing.spawn(async move {
                let renewed = leases.renew(&mut lease).await;
                (at, lease, renewed)
            });
            next += 1;
        }
        let Some(joined) = renewing.join_next().await else { break };
        let Ok((at, lease, renewed)) = joined else { continue };
        let agent = &held[at].0;
        let why = match renewed {
            Ok(true) if lease.is_valid() => None,
            Ok(true) => Some(format!("the lease of `{agent}` ran out before it was renewed")),
            Ok(false) => Some(format!("the lease of `{agent}` was taken over")),
            Err(e) if !lease.is_valid() => {
                Some(format!("the lease of `{agent}` could not be renewed in time: {e}"))
            }
            Err(e) => {
                tracing::debug!(agent = %agent, error = %e, "a lease renewal failed; retried");
                None
            }
        };
        held[at].1 = lease;
        if lost.is_none() {
            lost = why;
        }
    }
    lost
}

fn names(agents: &BTreeSet<AgentId>) -> String {
    agents.iter().map(AgentId::as_str).collect::<Vec<_>>().join(", ")
}

fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}

async fn sleep_until(at: Option<tokio::time::Instant>) {
    if let Some(at) = at {
        tokio::time::sleep_until(at).await;
    }
}

/// Calls `seen` with every message any process sends on the bus of `store`'s namespace (a
/// plain subscription to its subjects: nothing is taken or acknowledged), until the returned
/// task is aborted. What wakes a process's teams on mail another process sent.
pub fn follow(store: &NatsStore, seen: impl Fn(&Message) + Send + 'static) -> JoinHandle<()> {
    let client = store.client().clone();
    let subject = format!("{}.>", store.subject(message_bus::NatsBus::STREAM));
    tokio::spawn(async move {
        loop {
            match client.subscribe(subject.clone()).await {
                Ok(mut messages) => {
                    while let Some(delivered) = messages.next().await {
                        match agent_state::decode::<Message>(&delivered.payload) {
                            Ok(message) => seen(&message),
                            Err(e) => tracing::debug!(error = %e, "an unreadable bus message"),
                        }
                    }
                }
                Err(e) => tracing::warn!(error = %e, subject, "cannot follow the bus; retrying"),
            }
            tokio::time::sleep(Duration::from_millis(500)).await;
        }
    })
}

/// Waits until none of `run`'s agents is leased (the workers shut them down and released them
/// after [`Registry::close`]), or `patience` passed: `false` then.
pub async fn wait_released(
    store: &NatsStore,
    run: &PlacedRun,
    patience: Duration,
) -> Result<bool, NatsError> {
    let leases = Leases::open(store, LEASES, run.lease_ttl()).await?;
    let until = tokio::time::Instant::now() + patience;
    loop {
        let mut held = false;
        for agent in &run.agents {
            if leases.holder(&escape_token(agent.id.as_str())).await?.is_some() {
                held = true;
                break;
            }
        }
        if !held {
            return Ok(true);
        }
        if tokio::time::Instant::now() >= until {
            return Ok(false);
        }
        tokio::time::sleep(run.lease_period()).await;
    }
}

/// Who holds each of `run`'s agents now (its lease's holder), by agent.
pub async fn placement(
    store: &NatsStore,
    run: &PlacedRun,
) -> Result<BTreeMap<AgentId, Option<String>>, NatsError> {
    let leases = Leases::open(store, LEASES, run.lease_ttl()).await?;
    let mut out = BTreeMap::new();
    for agent in &run.agents {
        out.insert(agent.id.clone(), leases.holder(&escape_token(agent.id.as_str())).await?);
    }
    Ok(out)
}

/// What a worker reports of its agents to the run's guards, in [`GUARD`] under its id.
#[derive(Clone, Debug, Serialize, Deserialize)]
struct GuardReport {
    worker: String,
    agents: Vec<AgentView>,
}

/// The run's bucket of the workers' reports.
async fn guard_bucket(store: &NatsStore, run: &PlacedRun) -> Result<kv::Store, NatsError> {
    store
        .bucket(GUARD, kv::Config { history: 1, max_age: run.report_ttl(), ..Default::default() })
        .await
}

/// A bus on which a message to an agent not registered yet waits for it, up to a patience,
/// instead of being refused at once: in a placed run, the recipient may be an agent no worker
/// took yet (another worker is joining the run, or taking it over). Past the patience the send
/// fails with [`SendError::NotHosted`]. Everything else goes straight to the bus it wraps.
pub struct AwaitingBus {
    inner: Arc<dyn MessageBus>,
    patience: Duration,
    poll: Duration,
}

impl AwaitingBus {
    /// `inner`, with deliveries waiting up to `patience` for their recipient, looking every
    /// `poll`.
    pub fn new(inner: Arc<dyn MessageBus>, patience: Duration, poll: Duration) -> Self {
        Self { inner, patience, poll: poll.max(Duration::from_millis(10)) }
    }
}

#[async_trait]
impl MessageBus for AwaitingBus {
    async fn register(&self, agent: &AgentId) -> Result<(), RegisterError> {
        self.inner.register(agent).await
    }

    async fn unregister(&self, agent: &AgentId) -> Result<(), RegisterError> {
        self.inner.unregister(agent).await
    }

    async fn unregister_many(&self, agents: &[AgentId]) -> Result<Vec<bool>, BackendError> {
        self.inner.unregister_many(agents).await
    }

    async fn is_registered(&self, agent: &AgentId) -> Result<bool, BackendError> {
        self.inner.is_registered(agent).await
    }

    async fn registered(&self) -> Result<Vec<AgentId>, BackendError> {
        self.inner.registered().await
    }

    async fn send(&self, message: Message) -> Result<usize, SendError> {
        self.waiting(|| async { self.inner.send(message.clone()).await }).await
    }

    /// The whole batch waits, and is sent again, while one of its recipients is not hosted:
    /// a batch refused is not delivered at all, so sending it again delivers it once.
    async fn send_many(&self, messages: Vec<Message>) -> Result<Vec<usize>, SendError> {
        self.waiting(|| async { self.inner.send_many(messages.clone()).await }).await
    }

    async fn take(&self, inbox: &Address, max: usize) -> Result<Vec<Message>, InboxError> {
        self.inner.take(inbox, max).await
    }

    async fn ack(&self, inbox: &Address, ids: &[MessageId]) -> Result<usize, InboxError> {
        self.inner.ack(inbox, ids).await
    }

    async fn release(&self, inbox: &Address) -> Result<usize, InboxError> {
        self.inner.release(inbox).await
    }

    async fn pending(&self, inbox: &Address) -> Result<usize, InboxError> {
        self.inner.pending(inbox).await
    }

    async fn inboxes_with_mail(&self) -> Result<Vec<AgentId>, BackendError> {
        self.inner.inboxes_with_mail().await
    }
}

impl AwaitingBus {
    /// Runs `attempt` (a send) again, every `poll`, while it is refused for an unknown
    /// recipient, up to the patience; then the refusal is [`SendError::NotHosted`].
    async fn waiting<T, F, Fut>(&self, mut attempt: F) -> Result<T, SendError>
    where
        F: FnMut() -> Fut,
        Fut: std::future::Future<Output = Result<T, SendError>>,
    {
        let started = tokio::time::Instant::now();
        let until = started + self.patience;
        let mut told = false;
        loop {
            match attempt().await {
                Err(SendError::UnknownRecipient { id, kind, recipient }) => {
                    if tokio::time::Instant::now() >= until {
                        let waited_ms =
                            u64::try_from(started.elapsed().as_millis()).unwrap_or(u64::MAX);
                        tracing::warn!(to = %recipient, waited_ms, "no worker hosted the recipient in time");
                        return Err(SendError::NotHosted { id, kind, recipient, waited_ms });
                    }
                    if !told {
                        told = true;
                        tracing::info!(to = %recipient, %id, "the recipient is not hosted yet; the delivery waits for it");
                    }
                    tokio::time::sleep(self.poll.min(until - tokio::time::Instant::now())).await;
                }
                other => return other,
            }
        }
    }
}

/// The coordinator's watch over a placed run's agents, which it does not host: what the
/// workers report of them (for the run's guards, as a [`RemoteAgents`]), the work moving on
/// the run's bus, and who holds each agent's lease: a worker that stops holding its agents is
/// audited ([`AuditEvent::WorkerLost`]) with the workers that took them over. Its tasks end
/// when it is dropped.
pub struct PlacedWatch {
    agents: Arc<Mutex<Vec<AgentView>>>,
    progress: Arc<AtomicU64>,
    tasks: Vec<JoinHandle<()>>,
}

impl PlacedWatch {
    /// Starts watching `run` on `store` (the run's namespace), reading the live workers from
    /// `registry` and auditing lost workers in `audit` (the log the run's records are stored
    /// in) as `system`, at `clock`'s time.
    pub async fn start(
        store: &NatsStore,
        registry: Registry,
        run: &PlacedRun,
        audit: Arc<dyn AuditLog>,
        clock: Arc<dyn Clock>,
    ) -> Result<Arc<Self>, NatsError> {
        let bucket = guard_bucket(store, run).await?;
        let leases = Leases::open(store, LEASES, run.lease_ttl()).await?;
        let agents: Arc<Mutex<Vec<AgentView>>> = Arc::default();
        let progress: Arc<AtomicU64> = Arc::default();
        let counting = {
            let progress = progress.clone();
            follow(store, move |message| {
                if moves_work(message) {
                    progress.fetch_add(1, Ordering::Relaxed);
                }
            })
        };
        let looking = {
            let agents = agents.clone();
            let name = store.name(GUARD);
            let run = run.clone();
            tokio::spawn(async move {
                let mut known: BTreeMap<AgentId, AgentView> = BTreeMap::new();
                let mut losses = Losses::default();
                let mut beat = tokio::time::interval(run.lease_period());
                beat.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
                loop {
                    beat.tick().await;
                    match read_all::<GuardReport>(&bucket, &name).await {
                        Ok(reports) => {
                            // An agent whose worker is gone keeps its last state, not busy.
                            for view in known.values_mut() {
                                view.busy = false;
                            }
                            for view in reports.into_iter().flat_map(|r| r.agents) {
                                known.insert(view.id.clone(), view);
                            }
                            *lock(&agents) = known.values().cloned().collect();
                        }
                        Err(e) => tracing::debug!(error = %e, "cannot read the workers' reports"),
                    }
                    let holders = match holders(&leases, &run).await {
                        Ok(holders) => holders,
                        Err(e) => {
                            tracing::debug!(error = %e, "cannot read who holds the agents");
                            continue;
                        }
                    };
                    let live: BTreeSet<String> = if losses.waiting() {
                        match registry.workers().await {
                            Ok(workers) => workers.into_iter().map(|w| w.id).collect(),
                            Err(_) => continue,
                        }
                    } else {
                        BTreeSet::new()
                    };
                    for lost in losses.observe(&holders, &live) {
                        tracing::warn!(worker = %lost.worker, agents = ?lost.agents, taken_by = ?lost.taken_by, "a worker lost its agents");
                        let event = AuditEvent::WorkerLost {
                            worker: lost.worker,
                            agents: lost.agents,
                            taken_by: lost.taken_by,
                        };
                        if let Err(e) =
                            audit.append(&AgentId::new("system"), clock.now(), event).await
                        {
                            tracing::warn!(error = %e, "could not audit a lost worker");
                        }
                    }
                }
            })
        };
        Ok(Arc::new(Self { agents, progress, tasks: vec![counting, looking] }))
    }
}

impl Drop for PlacedWatch {
    fn drop(&mut self) {
        for task in &self.tasks {
            task.abort();
        }
    }
}

#[async_trait]
impl RemoteAgents for PlacedWatch {
    async fn agents(&self) -> Vec<AgentView> {
        lock(&self.agents).clone()
    }

    fn progress(&self) -> u64 {
        self.progress.load(Ordering::Relaxed)
    }
}

/// Who holds each of `run`'s agents now.
async fn holders(
    leases: &Leases,
    run: &PlacedRun,
) -> Result<BTreeMap<AgentId, Option<String>>, BackendError> {
    let mut out = BTreeMap::new();
    for agent in &run.agents {
        out.insert(agent.id.clone(), leases.holder(&escape_token(agent.id.as_str())).await?);
    }
    Ok(out)
}

/// A worker that stopped holding agents, and who took them.
#[derive(Debug, PartialEq, Eq)]
struct LostWorker {
    worker: String,
    agents: Vec<AgentId>,
    taken_by: BTreeMap<AgentId, String>,
}

/// Follows who holds each agent, look after look, and finds the workers that stopped holding
/// agents: reported once every agent a worker gave up is held by another, or after
/// [`LOST_PATIENCE`] looks if the worker is gone (a live worker whose agents nobody took
/// released them: the run closed or was taken back).
#[derive(Debug, Default)]
struct Losses {
    holders: BTreeMap<AgentId, String>,
    lost: BTreeMap<String, Lost>,
}

#[derive(Debug, Default)]
struct Lost {
    agents: BTreeSet<AgentId>,
    taken_by: BTreeMap<AgentId, String>,
    looks: u32,
}

impl Losses {
    /// Whether a lost worker waits to be reported (the live workers are needed then).
    fn waiting(&self) -> bool {
        !self.lost.is_empty()
    }

    /// One look: `now`, who holds each agent, and `live`, the live workers' ids.
    fn observe(
        &mut self,
        now: &BTreeMap<AgentId, Option<String>>,
        live: &BTreeSet<String>,
    ) -> Vec<LostWorker> {
        for (agent, old) in &self.holders {
            let holder = now.get(agent).and_then(Option::as_deref);
            if holder != Some(old.as_str()) {
                self.lost.entry(old.clone()).or_default().agents.insert(agent.clone());
            }
        }
        let mut out = Vec::new();
        self.lost.retain(|worker, lost| {
            lost.looks += 1;
            for agent in &lost.agents {
                if let Some(Some(holder)) = now.get(agent)
                    && holder != worker
                {
                    lost.taken_by.insert(agent.clone(), holder.clone());
                }
            }
            let all_taken = lost.taken_by.len() == lost.agents.len();
            let patience_out = lost.looks >= LOST_PATIENCE;
            let report = all_taken
                || (patience_out && (!live.contains(worker) || !lost.taken_by.is_empty()));
            if report {
                out.push(LostWorker {
                    worker: worker.clone(),
                    agents: lost.agents.iter().cloned().collect(),
                    taken_by: std::mem::take(&mut lost.taken_by),
                });
            }
            !(report || patience_out)
        });
        self.holders = now.iter().filter_map(|(a, h)| h.clone().map(|h| (a.clone(), h))).collect();
        out
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, reason = "tests")]

    use super::*;

    /// A placed run's id is stored as its text, as when it was a `String`, so runs placed
    /// before read the same; a stored id that breaks the run id rule does not read, with the
    /// rule in the error.
    #[test]
    fn a_placed_run_keeps_its_id_as_text_and_a_bad_stored_id_does_not_read() {
        let stored = serde_json::json!({
            "run_id": "run-7",
            "version": VERSION,
            "heartbeat_ms": 250,
            "agents": [{ "id": "top", "layer": "top" }],
            "closed": false,
            "spec": null,
        });
        let run: PlacedRun = serde_json::from_value(stored.clone()).unwrap();
        assert_eq!(run.run_id, "run-7");
        assert_eq!(serde_json::to_value(&run).unwrap(), stored);
        let mut bad = stored;
        bad["run_id"] = "run.7".into();
        let error = serde_json::from_value::<PlacedRun>(bad).unwrap_err().to_string();
        assert!(error.contains("`run.7` cannot be a run id"), "{error}");
    }

    #[test]
    fn globs_match_as_a_shell_would() {
        assert!(glob("*", "anything"));
        assert!(glob("exec-*", "exec-1"));
        assert!(!glob("exec-*", "lead-1"));
        assert!(glob("*-1", "exec-1"));
        assert!(glob("a*b*c", "axxbyyc"));
        assert!(!glob("a*b*c", "axxbyy"));
        assert!(glob("top", "top"));
        assert!(!glob("top", "top2"));
        assert!(!glob("ab*ba", "aba"), "the two ends may not overlap");
    }

    #[test]
    fn a_filter_needs_every_condition_given() {
        let any = WorkerFilter::default();
        assert!(any.matches(&AgentId::new("x"), AgentLayer::Top));
        let bottoms = WorkerFilter { agents: vec![], layers: vec![AgentLayer::Bottom] };
        assert!(bottoms.matches(&AgentId::new("exec"), AgentLayer::Bottom));
        assert!(!bottoms.matches(&AgentId::new("exec"), AgentLayer::Mid));
        let both = WorkerFilter { agents: vec!["e*".into()], layers: vec![AgentLayer::Bottom] };
        assert!(both.matches(&AgentId::new("e1"), AgentLayer::Bottom));
        assert!(!both.matches(&AgentId::new("f1"), AgentLayer::Bottom));
        assert!(!both.matches(&AgentId::new("e1"), AgentLayer::Top));
    }

    fn holders(pairs: &[(&str, Option<&str>)]) -> BTreeMap<AgentId, Option<String>> {
        pairs.iter().map(|(a, h)| (AgentId::new(*a), h.map(str::to_owned))).collect()
    }

    #[test]
    fn a_worker_losing_its_agents_is_reported_once_with_who_took_each() {
        let mut losses = Losses::default();
        let live: BTreeSet<String> = ["wa".into(), "wb".into()].into();
        let first = holders(&[("top", Some("wa")), ("exec", Some("wa")), ("lead", Some("wb"))]);
        assert!(losses.observe(&first, &live).is_empty());
        // wa's leases ran out: nobody holds its agents for a look, then wb takes them.
        let gap = holders(&[("top", None), ("exec", None), ("lead", Some("wb"))]);
        assert!(losses.observe(&gap, &live).is_empty());
        let half = holders(&[("top", Some("wb")), ("exec", None), ("lead", Some("wb"))]);
        assert!(losses.observe(&half, &live).is_empty(), "exec not taken yet");
        let all = holders(&[("top", Some("wb")), ("exec", Some("wb")), ("lead", Some("wb"))]);
        let lost = losses.observe(&all, &live);
        assert_eq!(
            lost,
            vec![LostWorker {
                worker: "wa".into(),
                agents: vec![AgentId::new("exec"), AgentId::new("top")],
                taken_by: [
                    (AgentId::new("exec"), "wb".to_owned()),
                    (AgentId::new("top"), "wb".to_owned()),
                ]
                .into(),
            }]
        );
        for _ in 0..LOST_PATIENCE * 2 {
            assert!(losses.observe(&all, &live).is_empty(), "reported once");
        }
    }

    #[test]
    fn agents_released_by_a_live_worker_and_taken_by_none_are_not_a_loss() {
        let mut losses = Losses::default();
        let live: BTreeSet<String> = ["wa".into()].into();
        assert!(losses.observe(&holders(&[("top", Some("wa"))]), &live).is_empty());
        for _ in 0..LOST_PATIENCE * 2 {
            assert!(losses.observe(&holders(&[("top", None)]), &live).is_empty());
        }
        // A worker gone with agents nobody took: reported once its patience ran out.
        let mut losses = Losses::default();
        assert!(losses.observe(&holders(&[("top", Some("wa"))]), &live).is_empty());
        let gone = BTreeSet::new();
        let mut reports = Vec::new();
        for _ in 0..LOST_PATIENCE * 2 {
            reports.extend(losses.observe(&holders(&[("top", None)]), &gone));
        }
        assert_eq!(reports.len(), 1, "{reports:?}");
        assert!(reports[0].taken_by.is_empty());
    }

    fn message_to(to: &str) -> Message {
        Message::new(
            agent_core::new_message_id(),
            Address::System,
            AgentId::new(to),
            agent_state::MessageKind::TaskAssign,
            serde_json::json!({}),
            agent_state::Timestamp(0),
        )
    }

    #[tokio::test(start_paused = true)]
    async fn a_delivery_waits_for_its_recipient_to_be_hosted_up_to_its_patience() {
        let inner = Arc::new(message_bus::InMemoryBus::new());
        let bus =
            AwaitingBus::new(inner.clone(), Duration::from_secs(10), Duration::from_millis(100));
        // Registered 3 s after the send started: delivered then.
        let later = {
            let inner = inner.clone();
            tokio::spawn(async move {
                tokio::time::sleep(Duration::from_secs(3)).await;
                inner.register(&AgentId::new("exec")).await.unwrap();
            })
        };
        let started = tokio::time::Instant::now();
        assert_eq!(bus.send(message_to("exec")).await.unwrap(), 1);
        assert!(started.elapsed() >= Duration::from_secs(3));
        later.await.unwrap();
        assert_eq!(inner.pending(&Address::Agent(AgentId::new("exec"))).await.unwrap(), 1);
        // Never registered: refused with the typed reason once the patience passed.
        let started = tokio::time::Instant::now();
        match bus.send(message_to("nobody")).await {
            Err(SendError::NotHosted { recipient, waited_ms, .. }) => {
                assert_eq!(recipient, AgentId::new("nobody"));
                assert_eq!(waited_ms, 10_000);
            }
            other => panic!("{other:?}"),
        }
        assert_eq!(started.elapsed(), Duration::from_secs(10));
    }

    #[test]
    fn leases_live_three_heartbeats_and_never_less_than_the_floor() {
        let mut run = PlacedRun {
            run_id: RunId::parse("r").unwrap(),
            version: VERSION.into(),
            heartbeat_ms: 500,
            agents: vec![],
            closed: false,
            spec: serde_json::Value::Null,
        };
        assert_eq!(run.lease_ttl(), Duration::from_millis(1_500));
        run.heartbeat_ms = 20;
        assert_eq!(run.lease_period(), MIN_LEASE_PERIOD);
        assert_eq!(run.lease_ttl(), MIN_LEASE_PERIOD * 3);
    }
}
