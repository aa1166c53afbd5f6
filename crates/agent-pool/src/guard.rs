//! The run's guards in the team's driver: a run without progress, agents waiting on each other
//! in a cycle, and two agents bouncing the same work item, from what the driver and the team's
//! bus see (the rules are `agent-state`'s: [`ProgressWatch`], [`WaitGraph`], [`PingPong`]).
//!
//! What the bus sees: [`Observer`] counts every message that moves work (everything but
//! heartbeat acks and warnings) and records the hand-overs of work items: a step assigned to an
//! executor and its report back (item `step task/step`), and what one agent says to another
//! with `speak_to_agent` (item `message "…"`).
//!
//! What the driver does at each heartbeat ([`RunGuard::heartbeat`]): with a task open and no
//! agent busy, a heartbeat in which nothing moved counts as idle. On an idle heartbeat it
//! builds the wait-for graph from every agent's [`waiting_on`](agent_core::Agent::waiting_on);
//! the same cycle seen on `wait_heartbeats` idle heartbeats in a row is broken. After
//! `idle_heartbeats` idle heartbeats the run has made no progress. A bounce of `bounce_limit`
//! hops is a ping-pong. Each is audited ([`AuditEvent::Stuck`]) and, with [`OnStuck::Stop`],
//! ends the task: the proposing power gets an `issue_escalation` with the typed reason and
//! closes the task with it, the way a lead's escalation closes one. With
//! [`OnStuck::Escalate`] the stuck agent's supervisor gets a `warning` first, and the same
//! condition found again stops the task.
//!
//! A run placed on workers (`placement`, feature `nats`) has these guards too: its coordinator
//! hosts no agent, so its guard reads the agents it does not host from a [`RemoteAgents`] (what
//! each worker reports of its agents at every heartbeat, [`agent_views`]) and counts the work
//! moving on the run's bus from every process ([`RemoteAgents::progress`]).

use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};

use agent_core::protocol::{Escalation, Warning};
use agent_core::{AuditEvent, AuditLog, Clock};
use agent_state::{
    Address, AgentId, GuardSettings, Message, MessageKind, OnStuck, PingPong, ProgressWatch,
    TaskFailure, WaitEdge, WaitGraph,
};
use async_trait::async_trait;
use message_bus::MessageBus;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::pool::AgentPool;

/// At most this many work items followed for ping-pong at once.
const MAX_FOLLOWED: usize = 100_000;

/// At most this many characters of a spoken message name it as a work item.
const MAX_ITEM: usize = 120;

/// One agent as the run's guards see it: what a process hosting it reports to a coordinator
/// that does not host it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct AgentView {
    /// The agent.
    pub id: AgentId,
    /// Its supervisor, if any (a stuck agent's escalation goes there).
    pub supervisor: Option<AgentId>,
    /// The tasks it has open work for.
    pub open_tasks: Vec<String>,
    /// Whom it waits on, and for what.
    pub waits: Vec<WaitEdge>,
    /// In a turn when it was looked at (its other fields are then empty): work going on.
    pub busy: bool,
}

/// The agents of a run that this process does not host, as the processes hosting them report
/// them: what a coordinator's guards read ([`Team::watch_remote`](crate::Team::watch_remote)).
#[async_trait]
pub trait RemoteAgents: Send + Sync {
    /// The agents hosted elsewhere, as last reported (an agent whose host is gone keeps its
    /// last report, not busy: its state is in the stores, as its next host will find it).
    async fn agents(&self) -> Vec<AgentView>;
    /// A counter of the messages that move work (everything but heartbeat acks and warnings)
    /// sent on the run's bus by any process: it changes when work moves anywhere.
    fn progress(&self) -> u64;
}

/// Every agent of `pool` as the guards see it; an agent in a turn is only marked busy.
pub fn agent_views(pool: &AgentPool) -> Vec<AgentView> {
    pool.all()
        .iter()
        .map(|slot| {
            let supervisor = slot.supervisor().cloned();
            match slot.agent().try_lock() {
                Ok(agent) => AgentView {
                    id: slot.id().clone(),
                    supervisor,
                    open_tasks: agent.open_tasks(),
                    waits: agent.waiting_on(),
                    busy: false,
                },
                Err(_) => AgentView {
                    id: slot.id().clone(),
                    supervisor,
                    open_tasks: Vec::new(),
                    waits: Vec::new(),
                    busy: true,
                },
            }
        })
        .collect()
}

/// Whether `message` moves work, as the guards count it.
pub fn moves_work(message: &Message) -> bool {
    !matches!(message.kind, MessageKind::HeartbeatAck | MessageKind::Warning)
}

/// Where the guards read the agents hosted elsewhere: set on a coordinator of a placed run.
#[derive(Default)]
struct RemoteSlot(Mutex<Option<Arc<dyn RemoteAgents>>>);

impl std::fmt::Debug for RemoteSlot {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let set = self.0.lock().unwrap_or_else(PoisonError::into_inner).is_some();
        f.debug_tuple("RemoteSlot").field(&set).finish()
    }
}

/// What the team's bus tells the guards: a progress counter and the hand-overs of work items.
#[derive(Debug, Default)]
pub(crate) struct Observer {
    progress: AtomicU64,
    hops: Mutex<Vec<Handed>>,
    remote: RemoteSlot,
}

/// A work item handed from one agent to another.
#[derive(Debug)]
struct Handed {
    item: String,
    from: AgentId,
    to: AgentId,
    /// The hand-over reports the item completed: it is no longer followed.
    done: bool,
}

impl Observer {
    /// Looks at one delivered message. Reads only the few fields that name a work item, without
    /// decoding the whole content (every message of a run passes here).
    pub(crate) fn saw(&self, message: &Message) {
        if !moves_work(message) {
            return;
        }
        self.progress.fetch_add(1, Ordering::Relaxed);
        let (Some(from), Some(to)) = (message.from.agent(), message.to.agent()) else { return };
        let content = &message.content;
        let text = |v: &Value| v.as_str().map(str::to_owned);
        let step_of = |subtask: &Value| {
            Some(format!("step {}/{}", text(&subtask["task_id"])?, text(&subtask["step"]["id"])?))
        };
        let (item, done) = match message.kind {
            MessageKind::TaskAssign if content["assign"] == "subtask" => {
                (step_of(&content["subtask"]), false)
            }
            MessageKind::ProgressReport => match content["results"].as_array() {
                Some(results) if results.len() == 1 => {
                    let r = &results[0];
                    let item = (|| {
                        Some(format!("step {}/{}", text(&r["task_id"])?, text(&r["step_id"])?))
                    })();
                    (item, content["status"] == "completed")
                }
                _ => (None, false),
            },
            MessageKind::ErrorReport => (step_of(&content["work"]), false),
            MessageKind::PeerHelpRequest if content["help"] == "speak" => {
                let said = content["message"].as_str().unwrap_or_default();
                (
                    Some(format!(
                        "the message {:?}",
                        said.chars().take(MAX_ITEM).collect::<String>()
                    )),
                    false,
                )
            }
            MessageKind::PeerHelpRequest if content["help"] == "take_over_task" => {
                (step_of(&content["subtask"]), false)
            }
            _ => (None, false),
        };
        if let Some(item) = item {
            self.hops.lock().unwrap_or_else(PoisonError::into_inner).push(Handed {
                item,
                from: from.clone(),
                to: to.clone(),
                done,
            });
        }
    }

    fn mark(&self) -> u64 {
        self.progress.load(Ordering::Relaxed)
    }

    /// The guards read the agents hosted elsewhere from `remote` from now on.
    pub(crate) fn set_remote(&self, remote: Arc<dyn RemoteAgents>) {
        *self.remote.0.lock().unwrap_or_else(PoisonError::into_inner) = Some(remote);
    }

    fn remote(&self) -> Option<Arc<dyn RemoteAgents>> {
        self.remote.0.lock().unwrap_or_else(PoisonError::into_inner).clone()
    }

    fn take_hops(&self) -> Vec<Handed> {
        std::mem::take(&mut *self.hops.lock().unwrap_or_else(PoisonError::into_inner))
    }
}

/// Where a run's guards send their warnings and escalations, and record what they do.
pub(crate) struct Outlets {
    pub(crate) bus: Arc<dyn MessageBus>,
    pub(crate) audit: Arc<dyn AuditLog>,
    /// Stamps their messages and records.
    pub(crate) clock: Arc<dyn Clock>,
}

/// The guards of one team's run, kept by its driver.
pub(crate) struct RunGuard {
    pub(crate) settings: GuardSettings,
    pub(crate) observer: Arc<Observer>,
    pub(crate) pool: Arc<AgentPool>,
    pub(crate) bus: Arc<dyn MessageBus>,
    pub(crate) audit: Arc<dyn AuditLog>,
    pub(crate) clock: Arc<dyn Clock>,
    /// The power that owns the tasks: it closes a stopped one.
    pub(crate) proposer: AgentId,
    watch: ProgressWatch,
    pingpong: PingPong,
    /// The cycle seen on the last idle heartbeats, and on how many in a row.
    cycle: Option<(Vec<WaitEdge>, u32)>,
    /// Conditions escalated once: found again, they stop the task.
    escalated: BTreeSet<String>,
    /// Tasks this guard stopped (their escalation is on its way).
    stopped: BTreeSet<String>,
    /// The agents hosted elsewhere, as read at the last heartbeat.
    remote: Vec<AgentView>,
}

impl RunGuard {
    /// The guards of `pool`'s run: `settings`, shown the deliveries by `observer`, stopping
    /// tasks for `proposer` and warning through `outlets`.
    pub(crate) fn new(
        settings: GuardSettings,
        observer: Arc<Observer>,
        pool: Arc<AgentPool>,
        proposer: AgentId,
        outlets: Outlets,
    ) -> Self {
        let Outlets { bus, audit, clock } = outlets;
        Self {
            settings,
            observer,
            pool,
            bus,
            audit,
            clock,
            proposer,
            watch: ProgressWatch::default(),
            pingpong: PingPong::default(),
            cycle: None,
            escalated: BTreeSet::new(),
            stopped: BTreeSet::new(),
            remote: Vec::new(),
        }
    }

    /// Whether an agent waits for a human's signature (an agent held by a turn is skipped: it
    /// is not idle).
    fn someone_waits_for_a_human(&self) -> bool {
        self.pool.all().iter().any(|slot| {
            slot.agent()
                .try_lock()
                .is_ok_and(|agent| agent.waiting_on().iter().any(|e| e.on.is_human()))
        }) || self.remote.iter().any(|v| v.waits.iter().any(|e| e.on.is_human()))
    }

    /// Every agent as the guards see it: those of the pool (an agent held by a turn is busy),
    /// then those hosted elsewhere.
    fn views(&self) -> Vec<AgentView> {
        let mut views = agent_views(&self.pool);
        let here: BTreeSet<AgentId> = views.iter().map(|v| v.id.clone()).collect();
        views.extend(self.remote.iter().filter(|v| !here.contains(&v.id)).cloned());
        views
    }

    /// One heartbeat of the driver; `busy`: whether some agent is still running a turn.
    pub(crate) async fn heartbeat(&mut self, busy: bool) {
        self.bounces().await;
        let remote = self.observer.remote();
        let mut mark = self.observer.mark();
        if let Some(remote) = &remote {
            self.remote = remote.agents().await;
            mark = mark.wrapping_add(remote.progress());
        }
        // The proposer's open tasks; a busy proposer is work going on.
        let open: Vec<String> = match self.pool.get(&self.proposer) {
            Some(slot) => match slot.agent().try_lock() {
                Ok(agent) => agent.open_tasks(),
                Err(_) => Vec::new(),
            },
            None => self
                .remote
                .iter()
                .find(|v| v.id == self.proposer)
                .map(|v| v.open_tasks.clone())
                .unwrap_or_default(),
        };
        let open: Vec<String> = open.into_iter().filter(|t| !self.stopped.contains(t)).collect();
        let busy = busy || self.remote.iter().any(|v| v.busy);
        // So is an agent waiting for a human's signature (a plan's, an OODA agent's change: a
        // person may take a while, not a stuck run); looked for only when the heartbeat would
        // otherwise count as idle.
        let human = !open.is_empty() && !busy && self.someone_waits_for_a_human();
        let idle = self.watch.heartbeat(mark, !open.is_empty() && !busy && !human);
        if idle == 0 {
            self.cycle = None;
            return;
        }
        let views = self.views();
        // Nothing moved since the last heartbeat: who waits on whom?
        let mut graph = WaitGraph::new();
        let mut working: BTreeMap<AgentId, Vec<String>> = BTreeMap::new();
        for view in views {
            for edge in view.waits {
                graph.add(edge);
            }
            if !view.open_tasks.is_empty() {
                working.insert(view.id, view.open_tasks);
            }
        }
        match graph.cycle() {
            Some(cycle) => {
                let seen = match self.cycle.take() {
                    Some((last, n)) if last == cycle => n + 1,
                    _ => 1,
                };
                if seen >= self.settings.wait_heartbeats {
                    self.cycle = None;
                    self.watch.reset();
                    let agents: Vec<AgentId> = cycle.iter().map(|e| e.waiter.clone()).collect();
                    let failure = TaskFailure::WaitCycle {
                        cycle: agents.clone(),
                        waits: cycle.iter().map(|e| e.what.clone()).collect(),
                    };
                    let mut tasks: Vec<String> =
                        cycle.iter().filter_map(|e| e.task.clone()).collect();
                    tasks.dedup();
                    let key = format!(
                        "cycle {}",
                        agents.iter().map(AgentId::as_str).collect::<Vec<_>>().join(">")
                    );
                    self.stuck(key, &agents, tasks, &open, failure).await;
                    return;
                }
                self.cycle = Some((cycle, seen));
            }
            None => self.cycle = None,
        }
        if idle >= self.settings.idle_heartbeats {
            self.watch.reset();
            let agents: Vec<AgentId> = working.keys().cloned().collect();
            let failure = TaskFailure::NoProgress { heartbeats: idle, agents: agents.clone() };
            self.stuck("no progress".into(), &agents, open.clone(), &open, failure).await;
        }
    }

    /// Feeds the hand-overs the bus saw to the ping-pong rule: after every turn, not only at
    /// heartbeats (agents woken by mail can hand an item back and forth many times in one).
    pub(crate) async fn bounces(&mut self) {
        if self.pingpong.len() > MAX_FOLLOWED {
            // A run with this many work items in flight: start afresh rather than grow.
            self.pingpong = PingPong::default();
        }
        for Handed { item, from, to, done } in self.observer.take_hops() {
            let bounce = self.pingpong.observe(&item, &from, &to, self.settings.bounce_limit);
            if done {
                self.pingpong.forget(&item);
            }
            let Some(bounce) = bounce else { continue };
            let agents = bounce.agents.to_vec();
            let failure = TaskFailure::PingPong {
                agents: agents.clone(),
                item: bounce.item.clone(),
                hops: u32::try_from(bounce.hops).unwrap_or(u32::MAX),
            };
            // A step's item names its task (`step task/step`); otherwise the agents' tasks.
            let tasks: Vec<String> = item
                .strip_prefix("step ")
                .and_then(|key| key.split_once('/'))
                .map(|(task, _)| vec![task.to_owned()])
                .unwrap_or_default();
            let open = self.open_of(&agents);
            self.stuck(format!("ping-pong {item}"), &agents, tasks, &open, failure).await;
        }
    }

    /// The open tasks of `agents`, or the proposer's if they name none.
    fn open_of(&self, agents: &[AgentId]) -> Vec<String> {
        let mut tasks = Vec::new();
        for id in agents.iter().chain([&self.proposer]) {
            if let Some(slot) = self.pool.get(id)
                && let Ok(agent) = slot.agent().try_lock()
            {
                tasks.extend(agent.open_tasks());
            }
            if !tasks.is_empty() {
                break;
            }
        }
        tasks.dedup();
        tasks
    }

    /// Stops the tasks (`tasks`, else the open ones) or, the first time with
    /// [`OnStuck::Escalate`], warns the supervisor of the first agent; audits either.
    async fn stuck(
        &mut self,
        key: String,
        agents: &[AgentId],
        tasks: Vec<String>,
        open: &[String],
        failure: TaskFailure,
    ) {
        let tasks: Vec<String> = if tasks.is_empty() { open.to_vec() } else { tasks };
        let tasks: Vec<String> = tasks.into_iter().filter(|t| !self.stopped.contains(t)).collect();
        let about = agents.first().cloned().unwrap_or_else(|| self.proposer.clone());
        let now = self.clock.now();
        if self.settings.on_stuck == OnStuck::Escalate && self.escalated.insert(key) {
            let to = self
                .pool
                .get(&about)
                .and_then(|s| s.supervisor().cloned())
                .or_else(|| {
                    self.remote.iter().find(|v| v.id == about).and_then(|v| v.supervisor.clone())
                })
                .unwrap_or_else(|| self.proposer.clone());
            tracing::warn!(%failure, supervisor = %to, "run stuck: escalated");
            for task in tasks.iter().map(Some).chain(tasks.is_empty().then_some(None)) {
                let event = AuditEvent::Stuck {
                    task: task.cloned(),
                    reason: failure.clone(),
                    escalated_to: Some(to.clone()),
                };
                if let Err(e) = self.audit.append(&about, now, event).await {
                    tracing::warn!(error = %e, "could not audit a stuck run");
                }
            }
            let warning = Warning { about: about.clone(), reason: failure.to_string() };
            self.send(&to, MessageKind::Warning, &warning).await;
            return;
        }
        tracing::warn!(%failure, ?tasks, "run stuck: stopping the task");
        for task in tasks {
            let event = AuditEvent::Stuck {
                task: Some(task.clone()),
                reason: failure.clone(),
                escalated_to: None,
            };
            if let Err(e) = self.audit.append(&about, now, event).await {
                tracing::warn!(error = %e, "could not audit a stuck run");
            }
            let escalation = Escalation { task_id: task.clone(), failure: failure.clone() };
            let proposer = self.proposer.clone();
            self.send(&proposer, MessageKind::IssueEscalation, &escalation).await;
            self.stopped.insert(task);
        }
    }

    async fn send<T: serde::Serialize>(&self, to: &AgentId, kind: MessageKind, content: &T) {
        let content = match serde_json::to_value(content) {
            Ok(c) => c,
            Err(e) => {
                tracing::warn!(error = %e, "cannot encode a guard's message");
                return;
            }
        };
        let message = Message::new(
            self.clock.message_id(),
            Address::System,
            to,
            kind,
            content,
            self.clock.now(),
        );
        if let Err(e) = self.bus.send(message).await {
            tracing::warn!(to = %to, error = %e, "cannot send a guard's message");
        }
    }
}

#[cfg(test)]
mod tests;
