//! The runs the dashboard watches: for each, a model ([`RunModel`]) loaded from the run's
//! stores and kept up to date by a task that reads the audit records after the last one it
//! folded (every [`POLL`] while the run is live, the way `strata inspect` reads a run: a
//! private copy of its database, or its NATS server), publishes each on the run's
//! [`EventHub`] and sends the deltas ([`Frame`]s) to whoever follows them (the browsers). The
//! task stops once the run has ended, or when nobody has watched the run for [`IDLE`].
//!
//! What the front end gives ([`RunReader`]): its event lines ([`EventLines`]: the `strata`
//! command's). A run's database is read from a
//! private copy while another process writes it, and its audit log with its anchors, as
//! `strata inspect` and `strata verify` read them.
//!
//! The run of this process (`strata run --serve`, [`RunWatch::live`]) is fed by its own event
//! stream instead: each audit record as it is published, the log read from
//! the last one folded when the stream fell behind or skipped one; every [`POLL`] its
//! decisions, usage and status are read from its stores in memory.
//!
//! A run placed on the NATS server of `strata serve --nats URL` with no directory here
//! is read from the server alone: its team, goal and plan from what the
//! run placed in the workers' registry, its records and decisions from its namespace, its
//! status from the registry (running while placed and open, ended once closed or taken back).
//! When the server does not answer, its status says so, until it answers again.

use std::collections::{HashMap, VecDeque};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, Weak};
use std::time::{Duration, Instant};

use agent_core::{
    AuditRecord, EventHub, EventStream, Received, TeamEvent, check_transition_chain, verify_chain,
};
use tokio::sync::broadcast;

use agent_pool::placement::{PlacedRun, Registry};
use agent_state::RunId;
use nats_store::NatsStore;

use super::model::{AgentCost, AuditCheck, Delta, LineFn, Outline, RunModel, Seed};
use crate::Stores;
use crate::error::{Context as _, Error, Result};
use crate::placement::PlacedSpec;
use crate::run_dir::{PLAN_FILE, RunInfo, RunStatus, TEAM_FILE, effective_status, now_ms};

/// What the front end gives the dashboard: how an audit record becomes a line of its event
/// log (the live view's lines, for `strata serve`).
pub trait RunReader: Send + Sync {
    /// How an audit record becomes one line of text.
    fn event_line(&self) -> LineFn;
}

/// The event lines of the `strata` command ([`crate::lines::event_line`]), for a front end
/// that has none of its own.
pub struct EventLines;

impl RunReader for EventLines {
    fn event_line(&self) -> LineFn {
        crate::lines::event_line
    }
}

/// How often a live run is read.
pub const POLL: Duration = Duration::from_millis(500);
/// A run nobody watched for this long is dropped (its task stops).
pub const IDLE: Duration = Duration::from_secs(60);
/// How long a read of the NATS server of the placed runs may take.
pub const SERVER_PATIENCE: Duration = Duration::from_secs(5);
/// How often a live run's audit log is verified again (a finished one: once more at its end).
const VERIFY_EVERY: Duration = Duration::from_secs(3);
/// Deltas kept for a browser that reconnects (`Last-Event-ID`).
const RING: usize = 4096;

/// One delta as sent: `seq` is the last record folded when it was made (the SSE `id:`), `n`
/// counts the frames of the run.
#[derive(Debug)]
pub struct Frame {
    /// Counts frames, from 1.
    pub n: u64,
    /// The last record folded.
    pub seq: Option<u64>,
    /// The delta's JSON.
    pub json: String,
}

/// The model and the last frames.
pub struct State {
    /// The run's model.
    pub model: RunModel,
    /// The last frames, oldest first.
    pub ring: VecDeque<Arc<Frame>>,
    n: u64,
}

/// The stores of the run this process drives, in memory, and its event stream.
pub struct Live {
    /// The run's event stream (the one the CLI's view follows).
    pub events: EventHub,
    /// The run's store.
    pub store: run_store::RunStore,
    /// The run's stores.
    pub stores: Stores,
    /// The usage ledger, when some agent reasons with a model.
    pub ledger: Option<Arc<agent_llm::UsageLedger>>,
}

/// Where a watched run's records come from.
enum Source {
    /// Its stores, read every [`POLL`] (a private copy of its database, or its NATS server):
    /// another process runs it.
    Poll,
    /// This process runs it: its event stream, and its stores in memory.
    Hub(Live),
    /// Placed on the server of `strata serve --nats` by a process elsewhere (no directory
    /// here): read from the server every [`POLL`].
    Placed(Box<PlacedSource>),
}

/// The NATS server of `strata serve --nats URL`: the workers' registry there.
#[derive(Clone)]
pub struct Server {
    /// The URL given.
    pub url: String,
    /// The connection.
    pub store: NatsStore,
    /// The registry of workers and placed runs.
    pub registry: Registry,
}

/// Where a placed run is read.
struct PlacedSource {
    server: Server,
    /// The run's id in the registry.
    run_id: RunId,
    /// The run's stores in its namespace on the server.
    stores: Stores,
}

/// A watched run.
pub struct RunWatch {
    /// The run's directory (empty for a placed run: it has none here).
    dir: PathBuf,
    source: Source,
    prices: agent_llm::PriceTable,
    /// The model and the last frames.
    pub state: Mutex<State>,
    /// The deltas, as they are made.
    pub frames: broadcast::Sender<Arc<Frame>>,
    /// The run's event stream: every record read, once folded.
    pub hub: EventHub,
    touched: Mutex<Instant>,
    verified: Mutex<Option<Instant>>,
    stores: tokio::sync::Mutex<Option<Stores>>,
    task: Mutex<Option<tokio::task::JoinHandle<()>>>,
}

/// Every watched run, by id.
pub struct Watches {
    runs: Mutex<HashMap<String, Arc<RunWatch>>>,
    reader: Arc<dyn RunReader>,
}

impl Watches {
    /// No run watched yet; the runs are read with `reader`.
    pub fn new(reader: Arc<dyn RunReader>) -> Self {
        Self { runs: Mutex::default(), reader }
    }

    /// The watch of the run `id` in `dir`, loaded (and its task started while the run is live)
    /// if it was not watched.
    pub async fn get(&self, id: &str, dir: &Path) -> Result<Arc<RunWatch>> {
        self.evict();
        let found = lock(&self.runs).get(id).cloned();
        if let Some(watch) = found {
            watch.touch();
            watch.restart_if_live(dir);
            return Ok(watch);
        }
        let watch = Arc::new(RunWatch::load_from(dir, Source::Poll, self.reader.clone()).await?);
        let watch = lock(&self.runs).entry(id.to_owned()).or_insert(watch).clone();
        watch.restart_if_live(dir);
        Ok(watch)
    }

    /// The watch of run `id` placed on `server`, if it is watched already or the registry
    /// there holds it (then loaded from the server); `None` if neither.
    pub async fn placed(&self, id: &RunId, server: &Server) -> Result<Option<Arc<RunWatch>>> {
        self.evict();
        let found = lock(&self.runs).get(id.as_str()).cloned();
        if let Some(watch) = found.filter(|w| matches!(w.source, Source::Placed(_))) {
            watch.touch();
            watch.restart_if_live(&watch.dir.clone());
            return Ok(Some(watch));
        }
        let run = tokio::time::timeout(SERVER_PATIENCE, server.registry.run(id))
            .await
            .map_err(|_| unanswered(server))?
            .with_context(|| format!("the NATS server {}", server.url))?;
        let Some(run) = run else { return Ok(None) };
        let watch = Arc::new(
            tokio::time::timeout(SERVER_PATIENCE * 2, RunWatch::placed(&run, server, &self.reader))
                .await
                .map_err(|_| unanswered(server))??,
        );
        let watch = lock(&self.runs).entry(id.to_string()).or_insert(watch).clone();
        watch.restart_if_live(&watch.dir.clone());
        Ok(Some(watch))
    }

    /// Whether run `id` is watched as a placed run (it has no directory here).
    pub fn is_placed(&self, id: &str) -> bool {
        lock(&self.runs).get(id).is_some_and(|w| matches!(w.source, Source::Placed(_)))
    }

    /// Watches `watch` as run `id` for as long as the server runs (never evicted).
    pub fn insert(&self, id: &str, watch: Arc<RunWatch>) {
        lock(&self.runs).insert(id.to_owned(), watch);
    }

    /// The model of run `id` if it is watched: for its agent count.
    pub fn agents(&self, id: &str) -> Option<usize> {
        let watch = lock(&self.runs).get(id).cloned()?;
        Some(lock(&watch.state).model.agent_count())
    }

    /// Drops the runs nobody watched for [`IDLE`], stopping their tasks.
    fn evict(&self) {
        lock(&self.runs).retain(|_, w| {
            let keep = matches!(w.source, Source::Hub(_))
                || w.frames.receiver_count() > 0
                || lock(&w.touched).elapsed() < IDLE;
            if !keep && let Some(task) = lock(&w.task).take() {
                task.abort();
            }
            keep
        });
    }

    /// Stops every task.
    pub fn stop(&self) {
        for w in lock(&self.runs).values() {
            if let Some(task) = lock(&w.task).take() {
                task.abort();
            }
        }
    }
}

/// Locks `m`; a poisoned lock (a panic elsewhere) is taken as it is.
pub fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// The error of a server that did not answer within [`SERVER_PATIENCE`].
pub fn unanswered(server: &Server) -> Error {
    Error::failed(format!(
        "the NATS server {} (--nats) did not answer within {}s; is it still running?",
        server.url,
        SERVER_PATIENCE.as_secs()
    ))
}

/// What a new watch starts from: the run's directory (empty for a placed run) and outline.
struct Header<'a> {
    dir: PathBuf,
    run_id: &'a RunId,
    goal: &'a str,
    started_at: u64,
}

impl RunWatch {
    /// The placed run `run` of `server`: its team, goal and plan from what it placed, then
    /// everything its stores on the server hold so far.
    async fn placed(run: &PlacedRun, server: &Server, reader: &Arc<dyn RunReader>) -> Result<Self> {
        let placed: PlacedSpec = serde_json::from_value(run.spec.clone()).with_context(|| {
            format!(
                "run `{}` on {}: its placement is not what this Strata writes",
                run.run_id, server.url
            )
        })?;
        let tools = agent_core::tools::ToolRegistry::with_builtins();
        let team_path = Path::new(TEAM_FILE);
        let team = team_file::parse_stored_team(team_path, &placed.team, &tools)
            .map_err(Error::failed_from)?;
        let task = placed
            .plan
            .as_deref()
            .and_then(|plan| {
                team_file::parse_plan(Path::new(PLAN_FILE), plan, &team.spec, &tools).ok()
            })
            .unwrap_or_else(|| goal_task(&placed.task_id, &placed.goal));
        let namespace = server.store.with_namespace(&run.run_id).map_err(Error::failed_from)?;
        let stores = Stores::nats(&namespace).await?;
        let source = Source::Placed(Box::new(PlacedSource {
            server: server.clone(),
            run_id: run.run_id.clone(),
            stores,
        }));
        let header = Header {
            dir: PathBuf::new(),
            run_id: &run.run_id,
            goal: &placed.goal,
            started_at: placed.started_at,
        };
        let watch = Self::build(header, &team, &task, source, reader.clone());
        watch.poll().await?;
        Ok(watch)
    }

    /// The run of this process in `dir`, fed by `live`'s event stream until [`Self::finish`],
    /// read with `reader`.
    pub async fn live(dir: &Path, live: Live, reader: Arc<dyn RunReader>) -> Result<Arc<Self>> {
        // Subscribed before the log is read: a record appended in between is read, received,
        // or both (then folded once).
        let events = live.events.subscribe();
        let watch = Arc::new(Self::load_from(dir, Source::Hub(live), reader).await?);
        *lock(&watch.task) = Some(tokio::spawn(follow(Arc::downgrade(&watch), events)));
        Ok(watch)
    }

    /// Stops following the run of this process (it has ended) and folds what it still holds:
    /// its last records, its end status, the audit log verified once more.
    pub async fn finish(&self) {
        let task = lock(&self.task).take();
        if let Some(task) = task {
            task.abort();
            let _ = task.await;
        }
        *lock(&self.verified) = None;
        if let Err(e) = self.poll().await {
            tracing::warn!(error = %e.chain_text(), "cannot read the run's last records");
        }
    }

    /// The run in `dir`: its team and plan, then everything its stores hold so far.
    async fn load_from(dir: &Path, source: Source, reader: Arc<dyn RunReader>) -> Result<Self> {
        let info = RunInfo::read(dir)?;
        let tools = agent_core::tools::ToolRegistry::with_builtins();
        let team_path = dir.join(TEAM_FILE);
        let text = std::fs::read_to_string(&team_path)
            .with_context(|| format!("cannot read {}", team_path.display()))?;
        let team =
            team_file::parse_stored_team(&team_path, &text, &tools).map_err(Error::failed_from)?;
        let task = std::fs::read_to_string(dir.join(PLAN_FILE))
            .ok()
            .and_then(|plan| {
                team_file::parse_plan(&dir.join(PLAN_FILE), &plan, &team.spec, &tools).ok()
            })
            .unwrap_or_else(|| goal_task(&info.task_id, &info.goal));
        let header = Header {
            dir: dir.to_path_buf(),
            run_id: &info.run_id,
            goal: &info.goal,
            started_at: info.started_at,
        };
        let watch = Self::build(header, &team, &task, source, reader);
        watch.poll().await?;
        Ok(watch)
    }

    /// A watch of the run `header` names, of `team`, nothing folded yet.
    fn build(
        header: Header<'_>,
        team: &team_file::TeamFile,
        task: &agent_state::Task,
        source: Source,
        reader: Arc<dyn RunReader>,
    ) -> Self {
        // The agents of the team file, as `strata inspect` lists them.
        let seeds: Vec<Seed> = crate::audit::configured(team)
            .into_iter()
            .map(|c| Seed { id: c.id, layer: c.layer, parent: c.supervisor, role: c.role })
            .collect();
        let outline = Outline {
            run_id: header.run_id.clone(),
            title: header.goal.to_owned(),
            started_at: header.started_at,
            agents: seeds,
            humans: team.spec.approvals.humans.clone(),
        };
        let model = RunModel::new(outline, task, reader.event_line());
        let (frames, _) = broadcast::channel(RING);
        Self {
            dir: header.dir,
            source,
            prices: team.prices.clone(),
            state: Mutex::new(State { model, ring: VecDeque::new(), n: 0 }),
            frames,
            hub: EventHub::default(),
            touched: Mutex::new(Instant::now()),
            verified: Mutex::new(None),
            stores: tokio::sync::Mutex::new(None),
            task: Mutex::new(None),
        }
    }

    /// Marks the run as watched now.
    pub fn touch(&self) {
        *lock(&self.touched) = Instant::now();
    }

    /// Starts the polling task if the run is live and no task runs.
    fn restart_if_live(self: &Arc<Self>, dir: &Path) {
        if matches!(self.source, Source::Hub(_)) {
            return;
        }
        let mut task = lock(&self.task);
        if task.as_ref().is_some_and(|t| !t.is_finished()) {
            return;
        }
        // A placed run is polled until it has ended: the poll says so.
        let live = matches!(self.source, Source::Placed(_))
            || RunInfo::read(dir).is_ok_and(|info| effective_status(dir, &info) == "running");
        if live {
            let me = Arc::downgrade(self);
            *task = Some(tokio::spawn(async move {
                loop {
                    tokio::time::sleep(POLL).await;
                    let Some(watch) = me.upgrade() else { return };
                    if watch.frames.receiver_count() == 0 && lock(&watch.touched).elapsed() >= IDLE
                    {
                        return;
                    }
                    match watch.poll().await {
                        Ok(true) => {}
                        Ok(false) => return,
                        Err(e) => {
                            tracing::debug!(error = %e.chain_text(), "cannot read the run; trying again")
                        }
                    }
                }
            }));
        }
    }

    /// Reads what is new in the run and folds it; whether the run is still live.
    pub async fn poll(&self) -> Result<bool> {
        let live = match &self.source {
            Source::Poll => return self.poll_store().await,
            Source::Placed(placed) => return self.poll_placed(placed).await,
            Source::Hub(live) => live,
        };
        let next = lock(&self.state).model.next_seq();
        let records = live.stores.audit.records_from(next).await?;
        self.refresh_live(live, records).await
    }

    /// Folds `received` (of the run of this process): its audit records when they follow the
    /// last one folded, else (the stream fell behind, or a record came out of order) what the
    /// log holds after it.
    async fn received(&self, live: &Live, received: Vec<Received>) -> Result<bool> {
        let mut lagged = false;
        let mut records = Vec::new();
        for r in &received {
            match r {
                Received::Event(event) => {
                    if let TeamEvent::Audit(record) = &**event {
                        records.push(record.clone());
                    }
                }
                Received::Lagged(_) => lagged = true,
                Received::Closed => {}
            }
        }
        let next = lock(&self.state).model.next_seq();
        records.retain(|r| r.seq >= next);
        let follows = records.iter().zip(next..).all(|(r, seq)| r.seq == seq);
        if lagged || !follows {
            return self.poll().await;
        }
        if records.is_empty() {
            return Ok(true);
        }
        self.refresh_live(live, records).await
    }

    /// Folds `records` of the run of this process, with its decisions, usage and status.
    async fn refresh_live(&self, live: &Live, records: Vec<AuditRecord>) -> Result<bool> {
        let info = RunInfo::read(&self.dir)?;
        let status = match info.status {
            RunStatus::Running => "running",
            _ => effective_status(&self.dir, &info),
        };
        let costs =
            live.ledger.as_ref().map(|l| costs(&l.report(), &self.prices)).unwrap_or_default();
        self.fold(info.failure.clone(), status, records, Some(&live.store), &live.stores, costs)
            .await
    }

    /// Reads what is new in a placed run from its server; when the server does not answer,
    /// the run's status says so (and the error is returned).
    async fn poll_placed(&self, placed: &PlacedSource) -> Result<bool> {
        let read = tokio::time::timeout(SERVER_PATIENCE * 2, self.read_placed(placed))
            .await
            .unwrap_or_else(|_| Err(unanswered(&placed.server)));
        if let Err(e) = &read {
            let why = format!(
                "cannot read the run on the NATS server {}: {}",
                placed.server.url,
                e.chain_text()
            );
            let mut state = lock(&self.state);
            if let Some(delta) = state.model.set_status("unreachable", Some(why)) {
                let seq = state.model.last_seq();
                self.send(&mut state, &delta, seq, None)?;
            }
        }
        read
    }

    async fn read_placed(&self, placed: &PlacedSource) -> Result<bool> {
        let run = placed.server.registry.run(&placed.run_id).await?;
        let status = match run {
            Some(run) if !run.closed => "running",
            _ => "ended",
        };
        let next = lock(&self.state).model.next_seq();
        let records = placed.stores.audit.records_from(next).await?;
        self.fold(None, status, records, None, &placed.stores, Vec::new()).await
    }

    /// Reads what is new in a run another process runs, from a copy of its stores.
    async fn poll_store(&self) -> Result<bool> {
        let info = RunInfo::read(&self.dir)?;
        let status = effective_status(&self.dir, &info);
        let store = crate::operator::read_copy(&self.dir).await?;
        let stores = match &info.nats {
            None => Stores::sled(&store)?,
            Some(_) => {
                let mut cached = self.stores.lock().await;
                match &*cached {
                    Some(stores) => stores.clone(),
                    None => {
                        let stores = Stores::of_run(&store, &self.dir, &info).await?;
                        *cached = Some(stores.clone());
                        stores
                    }
                }
            }
        };
        let next = lock(&self.state).model.next_seq();
        let records = stores.audit.records_from(next).await?;
        let usage = agent_llm::LlmStore::load_usage(&agent_llm::SledLlmStore::open(&store)?)?;
        let costs = usage.map(|report| costs(&report, &self.prices)).unwrap_or_default();
        self.fold(info.failure.clone(), status, records, Some(&store), &stores, costs).await
    }

    /// Folds `records`, then the run's decisions, usage, status (with its `outcome`) and
    /// (when due) the audit log's verification; sends the deltas. Whether the run is still
    /// live. `store` is the run's database (none for a placed run).
    async fn fold(
        &self,
        outcome: Option<String>,
        status: &'static str,
        records: Vec<AuditRecord>,
        store: Option<&run_store::RunStore>,
        stores: &Stores,
        costs: Vec<AgentCost>,
    ) -> Result<bool> {
        let live = status == "running";
        let decisions = stores.governance.list().await.map_err(Error::failed_from)?;
        let verify = {
            let mut verified = lock(&self.verified);
            // An ended run is verified whenever it is read (once, at its end): a check made
            // less than VERIFY_EVERY before it ended must not stay its last.
            let due = !live
                || (verified.is_none_or(|at| at.elapsed() >= VERIFY_EVERY)
                    && (!records.is_empty() || verified.is_none()));
            if due {
                *verified = Some(Instant::now());
            }
            due
        };
        let audit = if verify { Some(check(&self.dir, store, stores, live).await) } else { None };
        // The one source of the numbers the summary and `inspect RUN metrics` show.
        let metrics =
            agent_pool::stored_metrics(stores.state.as_ref()).await.map_err(Error::failed_from)?;
        // Where the task stands at the agent that took it (a goal's plan and the steps done),
        // read when a top power (a crew's lead, a single agent) wrote a record (it holds the
        // plan and takes the results) or the run ended.
        let (powers_moved, task_id) = {
            let state = lock(&self.state);
            let moved = !live || records.iter().any(|r| state.model.takes_tasks(&r.agent));
            (moved, state.model.task_id().to_owned())
        };
        let power = if powers_moved {
            stores.state.agents().await.ok().and_then(|agents| {
                agents.iter().find_map(|a| agent_layers::task_progress(&a.behavior, &task_id))
            })
        } else {
            None
        };
        let mut deltas: Vec<(Delta, Option<&AuditRecord>)> = Vec::new();
        let mut state = lock(&self.state);
        for record in &records {
            if let Some(delta) = state.model.fold(record) {
                deltas.push((delta, Some(record)));
            }
        }
        deltas.extend(state.model.set_decisions(&decisions).into_iter().map(|d| (d, None)));
        if let Some(d) = state.model.set_power(power) {
            deltas.push((d, None));
        }
        if let Some(d) = state.model.set_usage(now_ms(), &costs) {
            deltas.push((d, None));
        }
        if let Some(d) = state.model.set_status(status, outcome) {
            deltas.push((d, None));
        }
        if let Some(d) = audit.and_then(|a| state.model.set_audit(a)) {
            deltas.push((d, None));
        }
        if let Some(d) = state.model.set_metrics(metrics) {
            deltas.push((d, None));
        }
        for (delta, record) in deltas {
            let seq = match record {
                Some(r) => Some(r.seq),
                None => state.model.last_seq(),
            };
            self.send(&mut state, &delta, seq, record)?;
        }
        Ok(live)
    }

    /// Sends `delta` (made when `seq` was the last record folded; `record`'s, if it is one)
    /// and keeps it in the ring; publishes `record`.
    fn send(
        &self,
        state: &mut State,
        delta: &Delta,
        seq: Option<u64>,
        record: Option<&AuditRecord>,
    ) -> Result<()> {
        state.n += 1;
        let json = serde_json::to_string(delta)?;
        let frame = Arc::new(Frame { n: state.n, seq, json });
        if state.ring.len() == RING {
            state.ring.pop_front();
        }
        state.ring.push_back(frame.clone());
        let _ = self.frames.send(frame);
        if let Some(record) = record {
            self.hub.publish(TeamEvent::Audit(record.clone()));
        }
        Ok(())
    }
}

/// What each agent spent, from the run's usage report.
fn costs(report: &agent_llm::UsageReport, prices: &agent_llm::PriceTable) -> Vec<AgentCost> {
    report
        .by_agent
        .iter()
        .map(|(id, t)| AgentCost {
            id: id.clone(),
            tokens: t.input_tokens + t.output_tokens,
            cost: report.agent_cost_usd(id, prices),
        })
        .collect()
}

/// Follows the run of this process: folds what `events` brings as it comes, and every
/// [`POLL`] its decisions, usage and status; until aborted ([`RunWatch::finish`]) or the
/// stream closes.
async fn follow(me: Weak<RunWatch>, mut events: EventStream) {
    let mut tick = tokio::time::interval(POLL);
    loop {
        let received = tokio::select! {
            biased;
            received = events.next() => {
                let mut all = vec![received];
                while all.len() < 1024 && let Some(more) = events.try_next() {
                    all.push(more);
                }
                Some(all)
            }
            _ = tick.tick() => None,
        };
        let Some(watch) = me.upgrade() else { return };
        let Source::Hub(live) = &watch.source else { return };
        let closed =
            received.as_ref().is_some_and(|r| r.iter().any(|r| matches!(r, Received::Closed)));
        let folded = match received {
            Some(received) => watch.received(live, received).await,
            None => watch.refresh_live(live, Vec::new()).await,
        };
        if let Err(e) = folded {
            tracing::debug!(error = %e.chain_text(), "cannot read the run; trying again");
        }
        if closed {
            return;
        }
    }
}

/// The audit log's verification, as `strata verify` checks it: the hash chain, the anchors,
/// the transitions. `store` is the run's database in `dir` (none for a placed run, whose
/// audit stream is on NATS; `live` then says whether it may be appended to).
async fn check(
    dir: &Path,
    store: Option<&run_store::RunStore>,
    stores: &Stores,
    live: bool,
) -> AuditCheck {
    let (records, anchored) = match crate::audit::anchored_log(dir, store, stores, live).await {
        Ok(read) => read,
        Err(e) => {
            return AuditCheck {
                ok: false,
                records: 0,
                problems: vec![format!("the audit log cannot be read: {}", e.chain_text())],
                protection: String::new(),
            };
        }
    };
    let mut problems = Vec::new();
    if let Err(e) = verify_chain(&records) {
        problems.push(e.to_string());
    }
    let protection = match anchored {
        Ok((breaks, words)) => {
            problems.extend(breaks);
            words
        }
        Err(e) => {
            problems.push(format!("the anchors cannot be read: {}", e.chain_text()));
            String::new()
        }
    };
    if let Err(e) = check_transition_chain(&records) {
        problems.push(e.to_string());
    }
    AuditCheck { ok: problems.is_empty(), records: records.len() as u64, problems, protection }
}

/// The task of a run whose plan file cannot be read as a plan: its goal, no steps (the counter
/// says `planning` until the power's plan is known).
fn goal_task(task_id: &str, goal: &str) -> agent_state::Task {
    agent_state::Task { id: task_id.to_owned(), goal: goal.to_owned(), steps: Vec::new() }
}
