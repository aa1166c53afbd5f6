//! The heartbeat scheduler: one cycle drives every agent that has something to do, each in its
//! own task, so one slow agent never delays the others; every other agent acknowledges the
//! cycle through its bookkeeping (a sweep of the pool's slots), which costs an idle agent no
//! task, no allocation, no message and no reasoning call. An agent whose turn is still running
//! answers busy, with its turn's progress ([`agent_core::progress`]), unless that turn has been
//! silent past its silence limit: "missed" means an agent that did not answer at all.

use std::collections::{BTreeSet, HashMap};
use std::sync::{Arc, Mutex, PoisonError};

use agent_core::protocol::Warning;
use agent_core::{Agent, AuditEvent, AuditLog, Clock, HeartbeatOutcome};
use agent_state::{Address, AgentId, AgentStatus, Message, MessageKind};
use message_bus::MessageBus;
use rustc_hash::FxBuildHasher;
use tokio::sync::OwnedMutexGuard;
use tokio::task::JoinSet;

use crate::pool::{AgentPool, AgentSlot};
use crate::wake::ReadyQueue;

/// The default heartbeat period.
pub const DEFAULT_HEARTBEAT: std::time::Duration = std::time::Duration::from_secs(4);

/// How many turns one agent can take in a burst because mail arrived (wake on work).
pub const WAKE_BURST: u32 = 256;

/// How many turns per second one agent takes at most, once its burst is spent: a storm of
/// messages to one agent cannot keep it running at the others' expense (each turn takes up to
/// [`MAX_MESSAGES_PER_HEARTBEAT`](agent_core::MAX_MESSAGES_PER_HEARTBEAT) messages, so this
/// still lets a busy agent through millions of messages per second). Its mail waits, at most
/// `1 / WAKE_RATE` seconds, and is then taken.
pub const WAKE_RATE: f64 = 20_000.0;

/// How soon an agent with mail whose lock someone else held (a status read, a summary) is
/// looked at again: the driver wakes then, whether or not more mail arrives.
const CONTENDED_RETRY: std::time::Duration = std::time::Duration::from_millis(1);

/// One agent's allowance of wake-up turns: a token bucket of [`WAKE_BURST`] turns refilled
/// at [`WAKE_RATE`] per second.
#[derive(Clone, Copy, Debug)]
struct Allowance {
    tokens: f64,
    at: tokio::time::Instant,
}

impl Allowance {
    /// Takes one turn now, or says when one is available.
    fn take(&mut self, now: tokio::time::Instant) -> Result<(), tokio::time::Instant> {
        let refill = now.saturating_duration_since(self.at).as_secs_f64() * WAKE_RATE;
        self.tokens = (self.tokens + refill).min(f64::from(WAKE_BURST));
        self.at = now;
        if self.tokens >= 1.0 {
            self.tokens -= 1.0;
            Ok(())
        } else {
            let wait = (1.0 - self.tokens) / WAKE_RATE;
            Err(now + std::time::Duration::from_secs_f64(wait))
        }
    }
}

/// What one cycle did. Every agent in the pool is in exactly one of `started`, `idle`, `busy`,
/// `missed` and `exempt` (see [`AgentSlot`](crate::AgentSlot)).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct CycleReport {
    /// The heartbeat number.
    pub number: u64,
    /// Agents whose heartbeat was started (they had mail or pending work).
    pub started: usize,
    /// Idle agents with nothing new whose answer the cycle's sweep recorded (their lock was free
    /// and their status one that answers): without a task, an allocation or a reasoning call.
    pub idle: usize,
    /// Agents whose turn was still running and showed progress (a model call producing tokens,
    /// a tool within its limit, a wait for a decision): each answered busy, counted in its slot
    /// with its progress ([`AgentSlot::last_busy`](crate::AgentSlot::last_busy)); neither
    /// audited nor warned about.
    pub busy: Vec<AgentId>,
    /// Agents that did not answer, each counted, audited as
    /// [`AuditEvent::MissedHeartbeat`] and its supervisor warned: a turn silent past its
    /// silence limit (`[timeouts] silence_ms`: wedged), a heartbeat task that died, or held by
    /// someone else through the cycle.
    pub missed: Vec<AgentId>,
    /// Agents not expected to answer, neither answered nor missed: initializing, failed (waiting
    /// for their supervisor's orders), shutting down, terminated, or being destroyed.
    pub exempt: usize,
}

/// Whether an agent in `status` answers a heartbeat: the statuses in which
/// [`Agent::heartbeat`] counts one answered when there is nothing to do. It skips the others
/// (initializing, failed without orders, shutting down, terminated).
fn answers(status: AgentStatus) -> bool {
    matches!(
        status,
        AgentStatus::Idle
            | AgentStatus::Working
            | AgentStatus::WaitingApproval
            | AgentStatus::Blocked
    )
}

/// What a turn's task returns: its agent and how the turn went.
type TurnEnd = (AgentId, Result<HeartbeatOutcome, String>);

/// Drives the agents of a pool, one cycle per call to [`tick`](HeartbeatScheduler::tick).
///
/// Heartbeats (tasks, messages, reasoning) are started only for the agents with something to
/// do: the bus names the inboxes with mail, and the scheduler remembers who asked for another
/// tick. Every other agent acknowledges the cycle in bulk: one sweep over the pool's slots,
/// under the pool's read lock (taken for a chunk of agents at a time), reads each slot's
/// atomics and tries its lock without waiting;
/// an agent free to answer has its answer recorded in its slot
/// ([`AgentSlot::last_ack`](crate::AgentSlot::last_ack),
/// [`AgentSlot::acked`](crate::AgentSlot::acked)), with no task, no allocation and no message.
/// So an idle agent costs a few atomic operations per cycle; one whose turn is still running
/// answers busy with that turn's progress ([`AgentSlot::progress`](crate::AgentSlot::progress),
/// fed from inside the turn); and one that is wedged (its turn silent past its silence limit,
/// or held by someone else through the cycle) or whose heartbeat task died is missed, not
/// credited.
pub struct HeartbeatScheduler {
    pool: Arc<AgentPool>,
    bus: Arc<dyn MessageBus>,
    audit: Arc<dyn AuditLog>,
    clock: Arc<dyn Clock>,
    running: JoinSet<TurnEnd>,
    /// Agents with a turn running, each with whether mail reached it during the turn (it is
    /// made ready again when the turn ends). Looked up once per delivery, so hashed; sorted
    /// where the order shows (missed heartbeats are warned about in id order).
    busy: HashMap<AgentId, bool, FxBuildHasher>,
    /// The agent of each running task, so that a task that dies (a panic outside the layer's
    /// turn, which [`Agent::recover_from_panic`] handles) is booked to its agent.
    tasks: HashMap<tokio::task::Id, AgentId, FxBuildHasher>,
    /// Agents whose heartbeat task died since the last cycle: that cycle misses them.
    died: BTreeSet<AgentId>,
    ticking: Arc<Mutex<BTreeSet<AgentId>>>,
    number: u64,
    /// Each agent's allowance of wake-up turns.
    wakes: HashMap<AgentId, Allowance, FxBuildHasher>,
    /// When an agent whose allowance ran out may take its mail: the driver wakes then.
    next_wake: Option<tokio::time::Instant>,
    /// Agents the cycle found held by someone else, looked at once more before it ends, and
    /// whether each is due a heartbeat (kept from cycle to cycle: while nobody holds an agent,
    /// a cycle allocates nothing for it).
    contended: Vec<(Arc<AgentSlot>, bool)>,
    /// Where the heartbeat answers the sweep books are stored, once per cycle (see
    /// [`with_ledger`](Self::with_ledger)).
    ledger: Option<crate::metrics::Ledger>,
    /// The agents deliveries made ready (see [`with_ready`](Self::with_ready)); without it a
    /// wake lists the inboxes with mail.
    ready: Option<Arc<ReadyQueue>>,
    /// The agents one wake looks at (kept from wake to wake: its allocation is reused).
    woken: Vec<AgentId>,
}

impl HeartbeatScheduler {
    /// A scheduler for `pool`.
    pub fn new(
        pool: Arc<AgentPool>,
        bus: Arc<dyn MessageBus>,
        audit: Arc<dyn AuditLog>,
        clock: Arc<dyn Clock>,
    ) -> Self {
        Self {
            pool,
            bus,
            audit,
            clock,
            running: JoinSet::new(),
            busy: HashMap::default(),
            tasks: HashMap::default(),
            died: BTreeSet::new(),
            ticking: Arc::default(),
            number: 0,
            wakes: HashMap::default(),
            next_wake: None,
            contended: Vec::new(),
            ledger: None,
            ready: None,
            woken: Vec::new(),
        }
    }

    /// Wakes from `ready`, the queue a [`WakingBus`](crate::WakingBus) fills: each
    /// [`wake`](Self::wake) starts turns for the agents made ready since the last one, in time
    /// proportional to them, instead of listing every inbox with mail.
    pub fn with_ready(mut self, ready: Arc<ReadyQueue>) -> Self {
        self.ready = Some(ready);
        self
    }

    /// The ready queue it wakes from, if any.
    pub fn ready(&self) -> Option<&Arc<ReadyQueue>> {
        self.ready.as_ref()
    }

    /// Stores the heartbeat answers the scheduler books itself (the sweep's acks of idle
    /// agents, the busy answers with their progress, the misses) in `state`'s liveness ledger
    /// ([`StateStore::save_liveness`](agent_core::StateStore::save_liveness)): at the end of
    /// each cycle, one write for every agent whose counts changed, made in a task so a slow
    /// store never holds up the next cycle (while one write is in flight, the next cycle's
    /// changes wait for the one after); [`settle`](Self::settle) stores the rest. Without it
    /// they are counted in memory only.
    pub fn with_ledger(mut self, state: Arc<dyn agent_core::StateStore>) -> Self {
        self.ledger = Some(crate::metrics::Ledger::new(state));
        self
    }

    /// The last heartbeat number.
    pub fn number(&self) -> u64 {
        self.number
    }

    /// Runs one cycle, booking every agent of the pool once:
    ///
    /// - an agent still running an earlier turn is **busy** when that turn shows progress
    ///   ([`Progress::answer`](agent_core::Progress::answer): a sign of progress within its
    ///   silence limit, a tool call within its own limit, a wait for a decision), its answer
    ///   and progress recorded in its slot; a turn silent past its silence limit is
    ///   **missed**, and so is an agent whose heartbeat task died since the last cycle;
    /// - an agent with mail or pending work has its heartbeat **started** in a task (it acks the
    ///   heartbeat to `system` itself), unless it waits for a failed turn's next attempt, due
    ///   at a later heartbeat: that one is swept;
    /// - every other agent is swept: one free to answer (its lock free, its status one that
    ///   answers: idle, working, waiting for approval, blocked) is **idle**, its answer
    ///   recorded in its slot; one not expected to answer (initializing, failed, shutting down,
    ///   terminated, being destroyed) is **exempt**, neither answered nor missed.
    ///
    /// An agent (due or swept) whose lock someone else holds is looked at once more after the
    /// scheduler yields; still held, it is **missed**. Each missed agent is counted in its slot,
    /// audited as [`AuditEvent::MissedHeartbeat`], and its supervisor gets a `warning`.
    /// Returns at once; heartbeats run in tasks.
    pub async fn tick(&mut self) -> CycleReport {
        let number = self.pool.next_cycle();
        self.number = number;
        self.reap();
        let mut report = CycleReport { number, ..CycleReport::default() };
        let due = self.due().await;
        self.report_died(number, &mut report).await;
        self.answer_busy(number, &mut report).await;
        let mut contended = std::mem::take(&mut self.contended);
        self.start_due(due, number, &mut report, &mut contended);
        self.sweep_all(number, &mut report, &mut contended);
        if !contended.is_empty() {
            // Held while the cycle looked: a short hold (a status read, a summary) has a chance
            // to end; one held through the cycle cannot answer it.
            tokio::task::yield_now().await;
            self.look_again(&mut contended, number, &mut report).await;
        }
        self.contended = contended;
        if let Some(ledger) = &mut self.ledger {
            ledger.store(&self.pool, number);
        }
        report
    }

    /// The agents due a turn this cycle: those with mail, those still ticking, and newly
    /// added (or restored) agents that have work without mail. An agent with mail whose turn
    /// is running takes it when that turn ends. The ready queue is emptied first: the inboxes
    /// with mail, listed after, name every agent it held that still has mail.
    async fn due(&mut self) -> BTreeSet<AgentId> {
        if let Some(ready) = &self.ready {
            self.woken.clear();
            ready.drain(&mut self.woken);
            self.woken.clear();
        }
        let mut due: BTreeSet<AgentId> = match self.bus.inboxes_with_mail().await {
            Ok(agents) => {
                for agent in &agents {
                    if let Some(again) = self.busy.get_mut(agent) {
                        *again = true;
                    }
                }
                agents.into_iter().collect()
            }
            Err(e) => {
                tracing::warn!(error = %e, "cannot list inboxes with mail; driving every agent this cycle");
                self.pool.all().iter().map(|s| s.id().clone()).collect()
            }
        };
        let mut ticking = self.ticking.lock().unwrap_or_else(PoisonError::into_inner);
        // A newly added (or restored) agent may have work without mail: ask it once.
        for id in self.pool.take_arrivals() {
            let Some(slot) = self.pool.get(&id) else { continue };
            match slot.agent().try_lock() {
                Ok(agent) if !agent.wants_tick() => {}
                _ => {
                    ticking.insert(id);
                }
            }
        }
        due.extend(ticking.iter().cloned());
        due
    }

    /// Every agent whose heartbeat task died since the last cycle: missed.
    async fn report_died(&mut self, number: u64, report: &mut CycleReport) {
        for id in std::mem::take(&mut self.died) {
            let Some(slot) = self.pool.get(&id) else { continue };
            if slot.is_gone() {
                continue;
            }
            slot.count_missed(number);
            self.warn_missed(&id, slot.supervisor(), number, "its heartbeat task died").await;
            report.missed.push(id);
        }
    }

    /// Every agent whose turn is running answers busy with its progress, or is missed if its
    /// turn has been silent too long.
    async fn answer_busy(&mut self, number: u64, report: &mut CycleReport) {
        let now = tokio::time::Instant::now();
        let mut busy: Vec<AgentId> = self.busy.keys().cloned().collect();
        busy.sort_unstable();
        for id in busy {
            let Some(slot) = self.pool.get(&id) else { continue };
            if slot.booked_in(number) {
                continue; // its task died: missed above
            }
            if slot.is_gone() {
                // Being destroyed: the destroyer waits for its turn to end.
                slot.book(number);
                report.exempt += 1;
                continue;
            }
            match slot.progress().answer(now) {
                Some(answer) => {
                    tracing::debug!(
                        agent = %id,
                        heartbeat = number,
                        activity = %answer.activity,
                        tokens = answer.tokens,
                        elapsed_ms = answer.elapsed_ms,
                        "busy"
                    );
                    slot.count_busy(number, answer);
                    report.busy.push(id);
                }
                None => {
                    let progress = slot.progress();
                    let why = format!(
                        "its turn has shown no progress for {} ms (`[timeouts] silence_ms` = {})",
                        progress.silent_for(now).as_millis(),
                        progress.silence().as_millis()
                    );
                    slot.count_missed(number);
                    self.warn_missed(&id, slot.supervisor(), number, &why).await;
                    report.missed.push(id);
                }
            }
        }
    }

    /// Starts the turn of every due agent that is free; one held by someone else is booked
    /// and looked at again after the sweep.
    fn start_due(
        &mut self,
        due: BTreeSet<AgentId>,
        number: u64,
        report: &mut CycleReport,
        contended: &mut Vec<(Arc<AgentSlot>, bool)>,
    ) {
        for id in due {
            if self.busy.contains_key(&id) {
                continue;
            }
            let Some(slot) = self.pool.get(&id) else { continue };
            if slot.is_gone() {
                // Being destroyed, or terminated: the sweep counts it exempt.
                continue;
            }
            match slot.agent().try_lock_owned() {
                // A failed turn's next attempt is not due yet (it waits 1, 2, 4
                // heartbeats): no turn; the sweep below books its answer like an idle agent's.
                Ok(guard) if guard.waits_for_retry(number) => {}
                Ok(guard) => self.start(slot, guard, number, report),
                Err(_) => {
                    // Someone else is acting as the agent right now: looked at again below.
                    slot.book(number);
                    contended.push((slot, true));
                }
            }
        }
    }

    /// The sweep: every agent not booked yet acks the cycle, in bulk, if it is free to.
    fn sweep_all(
        &self,
        number: u64,
        report: &mut CycleReport,
        contended: &mut Vec<(Arc<AgentSlot>, bool)>,
    ) {
        self.pool.for_each(|slot| {
            if slot.booked_in(number) {
                return;
            }
            if slot.is_gone() {
                report.exempt += 1;
                return;
            }
            if slot.still_quiet() {
                // Acked by the last sweep and its lock not taken since: free, and its status
                // (changed only under the lock) still answers.
                slot.count_acked(number);
                report.idle += 1;
                return;
            }
            match slot.agent().try_lock() {
                Ok(agent) => count_sweep(sweep(slot, &agent, number), report),
                Err(_) => {
                    slot.book(number);
                    contended.push((slot.clone(), false));
                }
            }
        });
    }

    /// The agents held by someone else while the cycle looked, looked at once more (`true`:
    /// due a turn): still held, they are missed.
    async fn look_again(
        &mut self,
        contended: &mut Vec<(Arc<AgentSlot>, bool)>,
        number: u64,
        report: &mut CycleReport,
    ) {
        for (slot, due) in contended.drain(..) {
            if due {
                if let Ok(guard) = slot.agent().try_lock_owned() {
                    if guard.waits_for_retry(number) {
                        count_sweep(sweep(&slot, &guard, number), report);
                    } else {
                        self.start(slot, guard, number, report);
                    }
                    continue;
                }
            } else if let Ok(agent) = slot.agent().try_lock() {
                count_sweep(sweep(&slot, &agent, number), report);
                continue;
            }
            if due && self.ready.is_some() {
                // Its mail is looked at again in a wake shortly.
                self.requeue(slot.id());
                self.retry_soon(tokio::time::Instant::now());
            }
            slot.count_missed(number);
            let why = "cannot answer: another task holds it";
            self.warn_missed(slot.id(), slot.supervisor(), number, why).await;
            report.missed.push(slot.id().clone());
        }
    }

    /// Starts `slot`'s heartbeat for cycle `number` in a task, holding `guard` until it ends.
    fn start(
        &mut self,
        slot: Arc<AgentSlot>,
        mut guard: OwnedMutexGuard<Agent>,
        number: u64,
        report: &mut CycleReport,
    ) {
        let id = slot.id().clone();
        slot.count_ran(number);
        report.started += 1;
        self.busy.insert(id.clone(), false);
        let ticking = self.ticking.clone();
        let agent = id.clone();
        let progress = slot.progress().clone();
        progress.begin_turn();
        let task = self.running.spawn(tracing::Instrument::in_current_span(async move {
            let turn = guard.heartbeat(number);
            let result =
                agent_core::progress::scope(progress, turn).await.map_err(|e| e.to_string());
            if matches!(result, Ok(HeartbeatOutcome::Idle | HeartbeatOutcome::Processed { .. })) {
                slot.note_answer(number);
            }
            note_ticking(&ticking, &id, guard.wants_tick());
            (id, result)
        }));
        self.tasks.insert(task.id(), agent);
    }

    /// Wake on work: starts a turn ([`Agent::wake_in`](agent_core::Agent::wake_in) the current
    /// cycle) for every agent with mail that is not busy, does not wait for a failed turn's
    /// next attempt ([`Agent::waits_for_retry`](agent_core::Agent::waits_for_retry): that waits
    /// for its heartbeat, whatever mail arrives) and has a turn left in its allowance
    /// ([`WAKE_BURST`] at once, [`WAKE_RATE`] per second). Returns how many turns it started;
    /// they run in tasks, as heartbeats do. An agent left waiting for its allowance is due at
    /// [`next_wake`](Self::next_wake).
    ///
    /// With a ready queue ([`with_ready`](Self::with_ready)) the agents with mail are those
    /// the deliveries since the last wake made ready, and a wake costs time in their number:
    /// one whose turn is running is made ready again when that turn ends, one held by someone
    /// else or out of allowance is looked at again in the next wake, and a working agent's
    /// turn runs only if its mail is still there (an earlier turn may have taken it; its ticks
    /// wait for the heartbeat). Without one, or when the queue asks for a rescan, the inboxes
    /// with mail are listed, which costs time in their number, like a cycle.
    pub async fn wake(&mut self) -> usize {
        self.reap();
        self.next_wake = None;
        let mut woken = std::mem::take(&mut self.woken);
        woken.clear();
        self.with_mail(&mut woken).await;
        let now = tokio::time::Instant::now();
        let mut started = 0;
        for id in woken.drain(..) {
            if self.wake_one(id, now) {
                started += 1;
            }
        }
        self.woken = woken;
        started
    }

    /// Fills `woken` with the agents a wake looks at: those the ready queue holds, and, without
    /// a queue or when it asks for a rescan, the inboxes with mail.
    async fn with_mail(&mut self, woken: &mut Vec<AgentId>) {
        let rescan = match &self.ready {
            Some(ready) => ready.drain(woken),
            None => true,
        };
        if !rescan {
            return;
        }
        match self.bus.inboxes_with_mail().await {
            Ok(agents) if woken.is_empty() => *woken = agents,
            Ok(agents) => {
                woken.extend(agents);
                woken.sort_unstable();
                woken.dedup();
            }
            Err(e) => {
                tracing::debug!(error = %e, "cannot list inboxes with mail; waiting for the heartbeat");
            }
        }
    }

    /// Starts a wake turn of `id`, which has mail, if it may take one now; `true` if started.
    fn wake_one(&mut self, id: AgentId, now: tokio::time::Instant) -> bool {
        if let Some(again) = self.busy.get_mut(&id) {
            // Its running turn may have taken the mail already, or not: looked at once more
            // when the turn ends.
            *again = true;
            return false;
        }
        let Some(slot) = self.pool.get(&id) else { return false };
        let Ok(guard) = slot.agent().try_lock_owned() else {
            // Someone else is acting as it: looked at again in a wake shortly (nothing else
            // may wake the driver before the heartbeat).
            self.requeue(&id);
            self.retry_soon(now);
            return false;
        };
        if guard.waits_for_retry(self.number) {
            // Its mail waits for the heartbeat its failed turn's next attempt is due at.
            return false;
        }
        let allowance = match self.wakes.get_mut(&id) {
            Some(allowance) => allowance,
            None => self
                .wakes
                .entry(id.clone())
                .or_insert(Allowance { tokens: f64::from(WAKE_BURST), at: now }),
        };
        if let Err(due) = allowance.take(now) {
            self.next_wake = Some(self.next_wake.map_or(due, |next| next.min(due)));
            self.requeue(&id);
            return false;
        }
        self.start_wake(slot, guard);
        true
    }

    /// Starts `slot`'s wake turn in a task, holding `guard` until it ends.
    fn start_wake(&mut self, slot: Arc<AgentSlot>, mut guard: OwnedMutexGuard<Agent>) {
        let id = slot.id().clone();
        self.busy.insert(id.clone(), false);
        let ticking = self.ticking.clone();
        let cycle = self.number;
        let agent = id.clone();
        let progress = slot.progress().clone();
        progress.begin_turn();
        // Made ready by a delivery whose message an earlier turn may have taken: a working
        // agent would tick without mail, which only its heartbeat does.
        let check = self.ready.is_some().then(|| self.bus.clone());
        let task = self.running.spawn(tracing::Instrument::in_current_span(async move {
            let result = match check {
                Some(bus) if guard.wants_tick() && !has_mail(bus.as_ref(), &id).await => {
                    Ok(HeartbeatOutcome::Idle)
                }
                _ => {
                    let turn = guard.wake_in(cycle);
                    agent_core::progress::scope(progress, turn).await.map_err(|e| e.to_string())
                }
            };
            note_ticking(&ticking, &id, guard.wants_tick());
            (id, result)
        }));
        self.tasks.insert(task.id(), agent);
    }

    /// Queues `agent` again to be looked at in the next wake (with a ready queue; without
    /// one, the next wake lists the inboxes with mail anyway).
    fn requeue(&self, agent: &AgentId) {
        if let Some(ready) = &self.ready {
            ready.requeue(agent);
        }
    }

    /// Asks for a wake [`CONTENDED_RETRY`] after `now` (or sooner, if one is due sooner).
    fn retry_soon(&mut self, now: tokio::time::Instant) {
        let due = now + CONTENDED_RETRY;
        self.next_wake = Some(self.next_wake.map_or(due, |next| next.min(due)));
    }

    /// When the driver should wake without a signal: an agent that used up its wake-up
    /// allowance may take its mail, or one whose lock was held is looked at again.
    pub fn next_wake(&self) -> Option<tokio::time::Instant> {
        self.next_wake
    }

    /// Waits until one running turn ends and books it; `false` when none is running.
    pub async fn next_finished(&mut self) -> bool {
        match self.running.join_next_with_id().await {
            Some(joined) => {
                self.finished(joined);
                true
            }
            None => false,
        }
    }

    /// Waits for every running heartbeat to finish, then stores the heartbeat answers not
    /// stored yet (with a ledger).
    pub async fn settle(&mut self) {
        while let Some(joined) = self.running.join_next_with_id().await {
            self.finished(joined);
        }
        if let Some(ledger) = &mut self.ledger {
            ledger.flush(&self.pool, self.number).await;
        }
    }

    /// How many heartbeats are running.
    pub fn running(&self) -> usize {
        self.running.len()
    }

    /// How many heartbeats are still running, after booking those that ended.
    pub fn still_running(&mut self) -> usize {
        self.reap();
        self.running.len()
    }

    fn reap(&mut self) {
        while let Some(joined) = self.running.try_join_next_with_id() {
            self.finished(joined);
        }
    }

    fn finished(&mut self, joined: Result<(tokio::task::Id, TurnEnd), tokio::task::JoinError>) {
        match joined {
            Ok((task, (agent, result))) => {
                self.tasks.remove(&task);
                match result {
                    Ok(outcome) => tracing::trace!(agent = %agent, ?outcome, "heartbeat done"),
                    Err(error) => {
                        tracing::warn!(agent = %agent, error = %error, "heartbeat could not complete")
                    }
                }
                if self.busy.remove(&agent) == Some(true) {
                    // Mail reached it during the turn.
                    self.requeue(&agent);
                }
                self.end_turn(&agent);
            }
            Err(e) => {
                let Some(agent) = self.tasks.remove(&e.id()) else {
                    tracing::error!(error = %e, "a heartbeat task of an unknown agent died");
                    return;
                };
                self.busy.remove(&agent);
                self.end_turn(&agent);
                self.died.insert(agent.clone());
                let message = if e.is_panic() {
                    agent_core::fault::panic_message(e.into_panic().as_ref())
                } else {
                    "its heartbeat task was cancelled".to_owned()
                };
                self.recover(agent, message);
            }
        }
    }

    /// `agent`'s turn ended (booked here, not in its task: until the scheduler has booked the
    /// end, the turn counts as running).
    fn end_turn(&self, agent: &AgentId) {
        if let Some(slot) = self.pool.get(agent) {
            slot.progress().end_turn();
        }
    }

    /// A heartbeat task of `agent` died outside the layer's turn (a panic the turn could not
    /// catch itself, saying `message`): its lock was released as the task unwound. The agent
    /// is recovered in a task of its own, booked as its turn (busy until it ends, so nothing
    /// else acts as it meanwhile), as a panic in its turn is
    /// ([`Agent::recover_from_panic`]: audited, reloaded from its stored state with its mail
    /// back in its inbox, failed after [`MAX_PANICS`](agent_core::MAX_PANICS) in a row).
    /// Never left marked busy.
    fn recover(&mut self, agent: AgentId, message: String) {
        let Some(slot) = self.pool.get(&agent) else { return };
        tracing::error!(agent = %agent, panic = %message, "a heartbeat task died; recovering its agent");
        // Its mail is back in its inbox: looked at once more when the recovery ends.
        self.busy.insert(agent.clone(), true);
        let id = agent.clone();
        let progress = slot.progress().clone();
        progress.begin_turn();
        let task = self.running.spawn(tracing::Instrument::in_current_span(async move {
            let mut guard = slot.agent().lock_owned().await;
            let recovery = guard.recover_from_panic(message, &[]);
            let result =
                agent_core::progress::scope(progress, recovery).await.map_err(|e| e.to_string());
            (id, result)
        }));
        self.tasks.insert(task.id(), agent);
    }

    /// Audits a missed heartbeat and warns the agent's supervisor, saying `why`.
    async fn warn_missed(
        &self,
        agent: &AgentId,
        supervisor: Option<&AgentId>,
        number: u64,
        why: &str,
    ) {
        let now = self.clock.now();
        if let Err(e) =
            self.audit.append(agent, now, AuditEvent::MissedHeartbeat { heartbeat: number }).await
        {
            tracing::warn!(agent = %agent, error = %e, "could not audit a missed heartbeat");
        }
        tracing::info!(agent = %agent, heartbeat = number, "missed heartbeat");
        let Some(supervisor) = supervisor else { return };
        let warning =
            Warning { about: agent.clone(), reason: format!("missed heartbeat {number}: {why}") };
        let Ok(content) = serde_json::to_value(&warning) else { return };
        let message = Message::new(
            self.clock.message_id(),
            Address::System,
            supervisor,
            MessageKind::Warning,
            content,
            now,
        );
        if let Err(e) = self.bus.send(message).await {
            tracing::warn!(agent = %agent, error = %e, "could not warn the supervisor of a missed heartbeat");
        }
    }
}

/// Books a swept agent, whose lock the sweep holds, in cycle `number`: its answer recorded if
/// its status answers a heartbeat (`true`); otherwise exempt (`false`), and a terminated agent
/// (an absorbing status) is skipped without locking from then on.
/// Counts a swept agent: idle if it answered ([`sweep`] said `true`), else exempt.
fn count_sweep(answered: bool, report: &mut CycleReport) {
    if answered {
        report.idle += 1;
    } else {
        report.exempt += 1;
    }
}

fn sweep(slot: &AgentSlot, agent: &Agent, number: u64) -> bool {
    let status = agent.status();
    let answered = answers(status);
    slot.set_quiet(answered);
    if answered {
        slot.count_acked(number);
        true
    } else {
        if status == AgentStatus::Terminated {
            slot.set_gone(true);
        }
        false
    }
}

/// Books, once a turn of `id` has ended, whether the agent still ticks (`wants_tick`: it
/// works without mail, so every cycle gives it a turn) in `ticking`, the set the next cycle's
/// due agents are drawn from.
fn note_ticking(ticking: &Mutex<BTreeSet<AgentId>>, id: &AgentId, wants_tick: bool) {
    let mut ticking = ticking.lock().unwrap_or_else(PoisonError::into_inner);
    if wants_tick {
        ticking.insert(id.clone());
    } else {
        ticking.remove(id);
    }
}

/// Whether `agent`'s inbox has pending mail (a bus that cannot tell: yes).
async fn has_mail(bus: &dyn MessageBus, agent: &AgentId) -> bool {
    !matches!(bus.pending(&Address::Agent(agent.clone())).await, Ok(0))
}
