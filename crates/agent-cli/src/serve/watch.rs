//! The runs the dashboard watches: for each, a model ([`RunModel`]) loaded from the run's
//! stores and kept up to date by a task that reads the audit records after the last one it
//! folded (every [`POLL`] while the run is live, the way `strata inspect` reads a run: a
//! private copy of its database, or its NATS server), publishes each on the run's
//! [`EventHub`] and sends the deltas to the browsers. The task stops once the run has ended,
//! or when nobody has watched the run for [`IDLE`].

use std::collections::{HashMap, VecDeque};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use agent_core::{AuditRecord, EventHub, TeamEvent, check_transition_chain, verify_chain};
use anyhow::Context;
use tokio::sync::broadcast;

use super::model::{AgentCost, AuditCheck, Delta, RunModel, Seed};
use crate::nats::Stores;
use crate::run::{PLAN_FILE, RunInfo, TEAM_FILE};
use crate::{Failure, runs};

/// How often a live run is read.
pub(crate) const POLL: Duration = Duration::from_millis(500);
/// A run nobody watched for this long is dropped (its task stops).
pub(crate) const IDLE: Duration = Duration::from_secs(60);
/// How often a live run's audit log is verified again (a finished one: once more at its end).
const VERIFY_EVERY: Duration = Duration::from_secs(3);
/// Deltas kept for a browser that reconnects (`Last-Event-ID`).
const RING: usize = 4096;

/// One delta as sent: `seq` is the last record folded when it was made (the SSE `id:`), `n`
/// counts the frames of the run.
#[derive(Debug)]
pub(crate) struct Frame {
    /// Counts frames, from 1.
    pub(crate) n: u64,
    /// The last record folded.
    pub(crate) seq: Option<u64>,
    /// The delta's JSON.
    pub(crate) json: String,
}

/// The model and the last frames.
pub(crate) struct State {
    /// The run's model.
    pub(crate) model: RunModel,
    /// The last frames, oldest first.
    pub(crate) ring: VecDeque<Arc<Frame>>,
    n: u64,
}

/// A watched run.
pub(crate) struct RunWatch {
    dir: PathBuf,
    nats: Option<String>,
    prices: agent_llm::PriceTable,
    /// The model and the last frames.
    pub(crate) state: Mutex<State>,
    /// The deltas, as they are made.
    pub(crate) frames: broadcast::Sender<Arc<Frame>>,
    /// The run's event stream: every record read, once folded.
    pub(crate) hub: EventHub,
    touched: Mutex<Instant>,
    verified: Mutex<Option<Instant>>,
    stores: tokio::sync::Mutex<Option<Stores>>,
    task: Mutex<Option<tokio::task::JoinHandle<()>>>,
}

/// Every watched run, by id.
#[derive(Default)]
pub(crate) struct Watches {
    runs: Mutex<HashMap<String, Arc<RunWatch>>>,
}

impl Watches {
    /// The watch of the run `id` in `dir`, loaded (and its task started while the run is live)
    /// if it was not watched.
    pub(crate) async fn get(
        &self,
        id: &str,
        dir: &Path,
        nats: Option<&str>,
    ) -> anyhow::Result<Arc<RunWatch>> {
        self.evict();
        let found = lock(&self.runs).get(id).cloned();
        if let Some(watch) = found {
            watch.touch();
            watch.restart_if_live(dir);
            return Ok(watch);
        }
        let watch = Arc::new(RunWatch::load(dir, nats).await?);
        let watch = lock(&self.runs).entry(id.to_owned()).or_insert(watch).clone();
        watch.restart_if_live(dir);
        Ok(watch)
    }

    /// The model of run `id` if it is watched: for its agent count.
    pub(crate) fn agents(&self, id: &str) -> Option<usize> {
        let watch = lock(&self.runs).get(id).cloned()?;
        Some(lock(&watch.state).model.agent_count())
    }

    /// Drops the runs nobody watched for [`IDLE`], stopping their tasks.
    fn evict(&self) {
        lock(&self.runs).retain(|_, w| {
            let keep = w.frames.receiver_count() > 0 || lock(&w.touched).elapsed() < IDLE;
            if !keep && let Some(task) = lock(&w.task).take() {
                task.abort();
            }
            keep
        });
    }

    /// Stops every task.
    pub(crate) fn stop(&self) {
        for w in lock(&self.runs).values() {
            if let Some(task) = lock(&w.task).take() {
                task.abort();
            }
        }
    }
}

/// Locks `m`; a poisoned lock (a panic elsewhere) is taken as it is.
pub(crate) fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

fn to_anyhow(f: Failure) -> anyhow::Error {
    match f {
        Failure::BadInput(e) | Failure::Other(e) => e,
    }
}

/// The run's info, with its NATS server replaced by `nats` (`strata serve --nats`).
fn read_info(dir: &Path, nats: Option<&str>) -> anyhow::Result<RunInfo> {
    let mut info = RunInfo::read(dir)?;
    if let (Some(url), Some(_)) = (nats, &info.nats) {
        info.nats = Some(url.to_owned());
    }
    Ok(info)
}

impl RunWatch {
    /// The run in `dir`: its team and plan, then everything its stores hold so far.
    async fn load(dir: &Path, nats: Option<&str>) -> anyhow::Result<Self> {
        let info = read_info(dir, nats)?;
        let tools = agent_core::tools::ToolRegistry::with_builtins();
        let team_path = dir.join(TEAM_FILE);
        let text = std::fs::read_to_string(&team_path)
            .with_context(|| format!("cannot read {}", team_path.display()))?;
        let team = team_file::parse_stored_team(&team_path, &text, &tools)?;
        let seeds: Vec<Seed> = crate::inspect::configured(&team)
            .into_iter()
            .map(|c| Seed { id: c.id, layer: c.layer, parent: c.supervisor, role: c.role })
            .collect();
        let steps = std::fs::read_to_string(dir.join(PLAN_FILE))
            .ok()
            .and_then(|plan| {
                team_file::parse_plan(&dir.join(PLAN_FILE), &plan, &team.spec, &tools).ok()
            })
            .map_or(0, |task| task.steps.len());
        let model = RunModel::new(
            &info.run_id,
            &info.goal,
            info.started_at,
            seeds,
            team.spec.approvals.humans.clone(),
            steps,
            crate::view::event_line,
        );
        let (frames, _) = broadcast::channel(RING);
        let watch = Self {
            dir: dir.to_path_buf(),
            nats: nats.map(str::to_owned),
            prices: team.prices.clone(),
            state: Mutex::new(State { model, ring: VecDeque::new(), n: 0 }),
            frames,
            hub: EventHub::default(),
            touched: Mutex::new(Instant::now()),
            verified: Mutex::new(None),
            stores: tokio::sync::Mutex::new(None),
            task: Mutex::new(None),
        };
        watch.poll().await?;
        Ok(watch)
    }

    /// Marks the run as watched now.
    pub(crate) fn touch(&self) {
        *lock(&self.touched) = Instant::now();
    }

    /// Starts the polling task if the run is live and no task runs.
    fn restart_if_live(self: &Arc<Self>, dir: &Path) {
        let mut task = lock(&self.task);
        if task.as_ref().is_some_and(|t| !t.is_finished()) {
            return;
        }
        let live =
            RunInfo::read(dir).is_ok_and(|info| runs::effective_status(dir, &info) == "running");
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
                            tracing::debug!(error = %format!("{e:#}"), "cannot read the run; trying again")
                        }
                    }
                }
            }));
        }
    }

    /// Reads what is new in the run and folds it; whether the run is still live.
    pub(crate) async fn poll(&self) -> anyhow::Result<bool> {
        let info = read_info(&self.dir, self.nats.as_deref())?;
        let status = runs::effective_status(&self.dir, &info);
        let live = status == "running";
        let store = crate::operator::read_copy(&self.dir).await.map_err(to_anyhow)?;
        let stores = match &info.nats {
            None => Stores::sled(&store)?,
            Some(_) => {
                let mut cached = self.stores.lock().await;
                match &*cached {
                    Some(stores) => stores.clone(),
                    None => {
                        let stores =
                            Stores::of_run(&store, &self.dir, &info).await.map_err(to_anyhow)?;
                        *cached = Some(stores.clone());
                        stores
                    }
                }
            }
        };
        let next = lock(&self.state).model.next_seq();
        let records = stores.audit.records_from(next).await?;
        let decisions = stores.governance.list().await?;
        let usage = agent_llm::LlmStore::load_usage(&agent_llm::SledLlmStore::open(&store)?)?;
        let costs: Vec<AgentCost> = usage
            .map(|report| {
                report
                    .by_agent
                    .iter()
                    .map(|(id, t)| AgentCost {
                        id: id.clone(),
                        tokens: t.input_tokens + t.output_tokens,
                        cost: report.agent_cost_usd(id, &self.prices),
                    })
                    .collect()
            })
            .unwrap_or_default();
        let verify = {
            let mut verified = lock(&self.verified);
            let due = verified.is_none_or(|at| at.elapsed() >= VERIFY_EVERY)
                && (!records.is_empty() || !live || verified.is_none());
            if due {
                *verified = Some(Instant::now());
            }
            due
        };
        let audit = if verify { Some(check(&self.dir, &store, &stores).await) } else { None };
        let mut deltas: Vec<(Delta, Option<&AuditRecord>)> = Vec::new();
        let mut state = lock(&self.state);
        for record in &records {
            if let Some(delta) = state.model.fold(record) {
                deltas.push((delta, Some(record)));
            }
        }
        deltas.extend(state.model.set_decisions(&decisions).into_iter().map(|d| (d, None)));
        if let Some(d) = state.model.set_usage(crate::run::now_ms(), &costs) {
            deltas.push((d, None));
        }
        if let Some(d) = state.model.set_status(status, info.failure.clone()) {
            deltas.push((d, None));
        }
        if let Some(d) = audit.and_then(|a| state.model.set_audit(a)) {
            deltas.push((d, None));
        }
        for (delta, record) in deltas {
            let seq = match record {
                Some(r) => Some(r.seq),
                None => state.model.last_seq(),
            };
            state.n += 1;
            let json = serde_json::to_string(&delta)?;
            let frame = Arc::new(Frame { n: state.n, seq, json });
            if state.ring.len() == RING {
                state.ring.pop_front();
            }
            state.ring.push_back(frame.clone());
            let _ = self.frames.send(frame);
            if let Some(record) = record {
                self.hub.publish(TeamEvent::Audit(record.clone()));
            }
        }
        Ok(live)
    }
}

/// The audit log's verification, as `strata verify` checks it: the hash chain, the anchors,
/// the transitions.
async fn check(dir: &Path, store: &run_store::RunStore, stores: &Stores) -> AuditCheck {
    let records = match stores.audit.records(None).await {
        Ok(records) => records,
        Err(e) => {
            return AuditCheck {
                ok: false,
                records: 0,
                problems: vec![format!("the audit log cannot be read: {e}")],
                protection: String::new(),
            };
        }
    };
    let mut problems = Vec::new();
    if let Err(e) = verify_chain(&records) {
        problems.push(e.to_string());
    }
    let protection = match crate::inspect::anchors(dir, store, stores, &records).await {
        Ok((breaks, words)) => {
            problems.extend(breaks);
            words
        }
        Err(e) => {
            problems.push(format!("the anchors cannot be read: {e:#}"));
            String::new()
        }
    };
    if let Err(e) = check_transition_chain(&records) {
        problems.push(e.to_string());
    }
    AuditCheck { ok: problems.is_empty(), records: records.len() as u64, problems, protection }
}
