//! The progress of an agent's turn: what it is doing now (a model call, a tool, a wait for a
//! decision) and how far it got (tokens so far, the last sign of progress), so that
//!
//! - the heartbeat scheduler (`agent-pool`) tells a busy agent from a wedged one: an agent whose
//!   turn shows progress answers its heartbeat as **busy**, with what it is doing, its tokens
//!   so far and how long its turn has run ([`Progress::answer`]); one silent past its silence
//!   limit is missed;
//! - the silence limit (`[timeouts] silence_ms`) cuts a reasoning call that produces nothing
//!   for that long, while a call still producing tokens goes on to its total limit
//!   (`TimedReasoner`, in `timed.rs`).
//!
//! One [`Progress`] per agent (the scheduler keeps it in the agent's slot) is shared with the
//! turn through a task-local value ([`scope`]), as [`untimed`](crate::untimed)'s pauses are:
//! code inside the turn reports with [`tokens`] and [`pieces`] (the LLM reasoner, as a model's
//! answer streams) or takes the handle ([`current`]) to report from another thread (the
//! embedded model's thread, per token generated and per prompt batch read). The runtime marks
//! the rest itself: a reasoning call, a tool call (its own `tool_ms` bounds it) and an untimed
//! wait. Every report is a few atomic operations and never waits.

use std::future::Future;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use serde::{Deserialize, Serialize};
use tokio::time::Instant;

tokio::task_local! {
    static CURRENT: Arc<Progress>;
}

/// "Not set" in the millisecond fields of [`Progress`].
const NONE: u64 = u64::MAX;

/// What a busy turn is doing, as its heartbeat answer says.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", tag = "kind", content = "name")]
pub enum Activity {
    /// The turn's own work between calls (reading mail, bookkeeping).
    Turn,
    /// A reasoning call (a model call, when the reasoner is a model).
    Model,
    /// A tool call, by tool name.
    Tool(String),
    /// A wait that is not the turn's own work (a budget decision by the top powers or a
    /// human): off the clock of its limits.
    Waiting,
}

impl std::fmt::Display for Activity {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Activity::Turn => f.write_str("turn"),
            Activity::Model => f.write_str("model call"),
            Activity::Tool(tool) => write!(f, "tool `{tool}`"),
            Activity::Waiting => f.write_str("waiting for a decision"),
        }
    }
}

/// A busy agent's heartbeat answer: what its turn is doing and how far it got.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct BusyAnswer {
    /// What the turn is doing.
    pub activity: Activity,
    /// Tokens its model calls produced so far in this turn: those the embedded model generated,
    /// or for a streamed HTTP call the pieces received (each about one token).
    pub tokens: u64,
    /// How long the turn has run, in milliseconds.
    pub elapsed_ms: u64,
    /// How long since its last sign of progress, in milliseconds.
    pub silent_ms: u64,
}

/// A tool call in progress.
#[derive(Clone, Debug)]
struct RunningTool {
    /// The tool.
    name: String,
    /// Its hard limit.
    limit: Duration,
    /// When it started.
    since: u64,
    /// Reasoning calls open when it started: one opened since (a run that asks the model, such
    /// as an executor kind's) is the innermost activity, and its silence counts again.
    calls: u32,
}

/// One agent's progress (see the [module](self)). Shared (`Arc`) between the scheduler, the
/// turn's task and the threads that work for it; every method is lock-free but
/// [`Activity::Tool`]'s name.
#[derive(Debug)]
pub struct Progress {
    /// What the millisecond fields count from.
    origin: Instant,
    /// When the current turn started ([`NONE`]: no turn).
    started: AtomicU64,
    /// The last sign of progress.
    last: AtomicU64,
    /// Tokens counted by an engine in this turn.
    tokens: AtomicU64,
    /// Streamed pieces received in this turn.
    pieces: AtomicU64,
    /// Reasoning calls open.
    calls: AtomicU32,
    /// Untimed waits open.
    waits: AtomicU32,
    /// The tool running (or a run standing for one, such as an executor kind's).
    tool: Mutex<Option<RunningTool>>,
    /// The silence limit of this agent's turns ([`Progress::answer`]).
    silence_ms: AtomicU64,
    /// Until when a call answered whole is expected to be quiet ([`expect_quiet`]); 0: none.
    quiet_until: AtomicU64,
}

impl Default for Progress {
    fn default() -> Self {
        Self::new(Duration::from_millis(agent_state::DEFAULT_SILENCE_MS))
    }
}

impl Progress {
    /// The progress of an agent whose turns are missed once silent for `silence` (its team's
    /// `[timeouts] silence_ms`).
    pub fn new(silence: Duration) -> Self {
        Self {
            origin: Instant::now(),
            started: AtomicU64::new(NONE),
            last: AtomicU64::new(0),
            tokens: AtomicU64::new(0),
            pieces: AtomicU64::new(0),
            calls: AtomicU32::new(0),
            waits: AtomicU32::new(0),
            tool: Mutex::new(None),
            silence_ms: AtomicU64::new(millis(silence)),
            quiet_until: AtomicU64::new(0),
        }
    }

    /// The silence limit of the agent's turns.
    pub fn silence(&self) -> Duration {
        Duration::from_millis(self.silence_ms.load(Ordering::Relaxed))
    }

    /// A turn starts now: its counts start at zero and its start is its first sign of progress.
    pub fn begin_turn(&self) {
        let now = self.now_ms();
        self.tokens.store(0, Ordering::Relaxed);
        self.pieces.store(0, Ordering::Relaxed);
        self.last.store(now, Ordering::Relaxed);
        self.started.store(now, Ordering::Relaxed);
    }

    /// The turn ended.
    pub fn end_turn(&self) {
        self.started.store(NONE, Ordering::Relaxed);
    }

    /// A sign of progress now (a prompt batch read, a call started or ended).
    pub fn touch(&self) {
        self.last.store(self.now_ms(), Ordering::Relaxed);
    }

    /// `n` more tokens generated (an engine that counts them), a sign of progress.
    pub fn add_tokens(&self, n: u64) {
        self.tokens.fetch_add(n, Ordering::Relaxed);
        self.touch();
    }

    /// `n` more pieces of a streamed answer received, a sign of progress.
    pub fn add_pieces(&self, n: u64) {
        self.pieces.fetch_add(n, Ordering::Relaxed);
        self.touch();
    }

    /// Tokens so far in this turn: those an engine counted, or the streamed pieces when no
    /// engine counts (a piece of an HTTP stream is about one token).
    pub fn tokens(&self) -> u64 {
        self.tokens.load(Ordering::Relaxed).max(self.pieces.load(Ordering::Relaxed))
    }

    /// Time since the last sign of progress, as of `now`; a call expected to be quiet
    /// ([`expect_quiet`]) is not silent before its expected end.
    pub fn silent_for(&self, now: Instant) -> Duration {
        now.saturating_duration_since(self.origin + Duration::from_millis(self.counted_from()))
    }

    /// Where the silence counts from: the last sign of progress, or the end of the quiet
    /// expected of a call answered whole, whichever is later (in ms from `origin`).
    fn counted_from(&self) -> u64 {
        self.last.load(Ordering::Relaxed).max(self.quiet_until.load(Ordering::Relaxed))
    }

    /// When the silence since the last sign of progress reaches `silence`; `None` while the
    /// silence does not count: an untimed wait or a tool call is open (their own limits bound
    /// them), unless a reasoning call was opened inside that tool call.
    pub fn silent_at(&self, silence: Duration) -> Option<Instant> {
        if self.waits.load(Ordering::Relaxed) > 0 || self.tool_outermost().is_some() {
            return None;
        }
        Some(self.origin + Duration::from_millis(self.counted_from()) + silence)
    }

    /// Whether a turn is running (between [`begin_turn`](Self::begin_turn) and
    /// [`end_turn`](Self::end_turn)).
    pub fn in_turn(&self) -> bool {
        self.started.load(Ordering::Relaxed) != NONE
    }

    /// The busy answer of the turn running, as of `now`; `None` when the turn did not answer:
    /// no turn runs, or it is silent past the silence limit (no token, no prompt batch, no call
    /// begun or ended) outside a tool call and a wait, or a tool call of it has run past its own
    /// limit by the silence limit. A tool call and an untimed wait are progress: the tool's
    /// own limit bounds the one, the top powers or a human the other.
    pub fn answer(&self, now: Instant) -> Option<BusyAnswer> {
        let started = self.started.load(Ordering::Relaxed);
        if started == NONE {
            return None;
        }
        let silence = self.silence();
        let now_ms = millis(now.saturating_duration_since(self.origin));
        let silent_ms = millis(self.silent_for(now));
        let activity = if let Some(tool) = self.tool_outermost() {
            if now_ms.saturating_sub(tool.since) > millis(tool.limit + silence) {
                return None;
            }
            Activity::Tool(tool.name)
        } else if self.waits.load(Ordering::Relaxed) > 0 {
            Activity::Waiting
        } else if Duration::from_millis(silent_ms) > silence {
            return None;
        } else if self.calls.load(Ordering::Relaxed) > 0 {
            Activity::Model
        } else {
            Activity::Turn
        };
        Some(BusyAnswer {
            activity,
            tokens: self.tokens(),
            elapsed_ms: now_ms.saturating_sub(started),
            silent_ms,
        })
    }

    /// The tool call running, unless a reasoning call was opened inside it.
    fn tool_outermost(&self) -> Option<RunningTool> {
        let tool = self.tool.lock().unwrap_or_else(PoisonError::into_inner).clone()?;
        (self.calls.load(Ordering::Relaxed) <= tool.calls).then_some(tool)
    }

    fn now_ms(&self) -> u64 {
        millis(Instant::now().saturating_duration_since(self.origin))
    }
}

fn millis(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

/// Runs `f` with `progress` as the current task's progress ([`current`], [`tokens`], ...).
pub async fn scope<F: Future>(progress: Arc<Progress>, f: F) -> F::Output {
    CURRENT.scope(progress, f).await
}

/// The current task's progress, if it runs in a [`scope`]: for work that reports from another
/// thread (the embedded model's).
pub fn current() -> Option<Arc<Progress>> {
    CURRENT.try_with(Arc::clone).ok()
}

/// `n` more tokens generated in the current task's turn (nothing outside a [`scope`]).
pub fn tokens(n: u64) {
    let _ = CURRENT.try_with(|p| p.add_tokens(n));
}

/// `n` more pieces of a streamed answer received in the current task's turn (nothing outside a
/// [`scope`]).
pub fn pieces(n: u64) {
    let _ = CURRENT.try_with(|p| p.add_pieces(n));
}

/// Declares that the call about to be made in the current task shows no progress until it ends
/// (an HTTP answer sent whole, not streamed) and may take up to `expected`: until the returned
/// guard drops, its silence counts from `expected` after now, so the silence limit cuts it only
/// once it has run `expected` plus the silence limit, and its heartbeats answer busy meanwhile.
/// The caller bounds the call by `expected` itself. `None` outside a [`scope`].
pub fn expect_quiet(expected: Duration) -> Option<Quiet> {
    let progress = current()?;
    let until = progress.now_ms().saturating_add(millis(expected));
    progress.quiet_until.store(until, Ordering::Relaxed);
    Some(Quiet { progress })
}

/// The quiet expected of a call answered whole ([`expect_quiet`]); its end, when dropped, is a
/// sign of progress.
#[derive(Debug)]
#[must_use = "the quiet ends when this is dropped"]
pub struct Quiet {
    progress: Arc<Progress>,
}

impl Drop for Quiet {
    fn drop(&mut self) {
        self.progress.quiet_until.store(0, Ordering::Relaxed);
        self.progress.touch();
    }
}

/// An open section of a turn (a reasoning call, a tool call, a wait); its start and its end
/// are signs of progress. Closed when dropped (also when its future is).
pub(crate) struct Section {
    progress: Arc<Progress>,
    kind: SectionKind,
}

#[derive(Clone, Copy)]
enum SectionKind {
    Call,
    Wait,
    Tool,
}

impl Section {
    /// A reasoning call on `progress`.
    pub(crate) fn call(progress: Arc<Progress>) -> Self {
        progress.calls.fetch_add(1, Ordering::Relaxed);
        progress.touch();
        Self { progress, kind: SectionKind::Call }
    }

    /// An untimed wait in the current task, if it has a progress.
    pub(crate) fn wait() -> Option<Self> {
        let progress = current()?;
        progress.waits.fetch_add(1, Ordering::Relaxed);
        progress.touch();
        Some(Self { progress, kind: SectionKind::Wait })
    }

    /// A call of `tool` bounded by `limit` in the current task, if it has a progress.
    pub(crate) fn tool(tool: &str, limit: Duration) -> Option<Self> {
        let progress = current()?;
        let running = RunningTool {
            name: tool.to_owned(),
            limit,
            since: progress.now_ms(),
            calls: progress.calls.load(Ordering::Relaxed),
        };
        *progress.tool.lock().unwrap_or_else(PoisonError::into_inner) = Some(running);
        progress.touch();
        Some(Self { progress, kind: SectionKind::Tool })
    }
}

impl Drop for Section {
    fn drop(&mut self) {
        let p = &self.progress;
        match self.kind {
            SectionKind::Call => {
                let _ = p
                    .calls
                    .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |n| n.checked_sub(1));
            }
            SectionKind::Wait => {
                let _ = p
                    .waits
                    .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |n| n.checked_sub(1));
            }
            SectionKind::Tool => {
                *p.tool.lock().unwrap_or_else(PoisonError::into_inner) = None;
            }
        }
        p.touch();
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used, reason = "tests")]

    use super::*;

    const SILENCE: Duration = Duration::from_secs(60);

    fn turn() -> Arc<Progress> {
        let progress = Arc::new(Progress::new(SILENCE));
        progress.begin_turn();
        progress
    }

    #[tokio::test(start_paused = true)]
    async fn a_turn_with_tokens_answers_busy_with_them_and_its_elapsed_time() {
        let progress = turn();
        let _call = Section::call(progress.clone());
        for _ in 0..5 {
            tokio::time::sleep(SILENCE / 2).await;
            scope(progress.clone(), async { tokens(7) }).await;
        }
        let answer = progress.answer(Instant::now()).unwrap();
        assert_eq!(
            answer,
            BusyAnswer {
                activity: Activity::Model,
                tokens: 35,
                elapsed_ms: millis(SILENCE * 5 / 2),
                silent_ms: 0
            }
        );
    }

    #[tokio::test(start_paused = true)]
    async fn a_turn_silent_past_the_limit_does_not_answer() {
        let progress = turn();
        tokio::time::sleep(SILENCE).await;
        assert!(progress.answer(Instant::now()).is_some(), "at the limit it still answers");
        tokio::time::sleep(Duration::from_millis(1)).await;
        assert_eq!(progress.answer(Instant::now()), None);
        progress.end_turn();
        assert_eq!(progress.answer(Instant::now()), None, "no turn, no answer");
    }

    #[tokio::test(start_paused = true)]
    async fn a_call_answered_whole_is_silent_only_past_its_expected_time_and_the_limit() {
        let progress = turn();
        let _call = Section::call(progress.clone());
        let quiet = scope(progress.clone(), async { expect_quiet(SILENCE * 3) }).await.unwrap();
        let start = Instant::now();
        assert_eq!(progress.silent_at(SILENCE), Some(start + SILENCE * 4));
        tokio::time::sleep(SILENCE * 4).await;
        let answer = progress.answer(Instant::now()).unwrap();
        assert_eq!((answer.activity, answer.silent_ms), (Activity::Model, millis(SILENCE)));
        tokio::time::sleep(Duration::from_millis(1)).await;
        assert_eq!(progress.answer(Instant::now()), None, "past its time and the silence");
        drop(quiet);
        assert_eq!(progress.answer(Instant::now()).unwrap().silent_ms, 0, "its end is progress");
        assert_eq!(progress.silent_at(SILENCE), Some(Instant::now() + SILENCE), "quiet no more");
        assert!(expect_quiet(SILENCE).is_none(), "no progress outside a scope");
    }

    #[tokio::test(start_paused = true)]
    async fn a_tool_and_a_wait_are_progress_within_their_bounds() {
        let progress = turn();
        let tool = scope(progress.clone(), async { Section::tool("build", SILENCE * 10) }).await;
        assert_eq!(progress.silent_at(SILENCE), None, "a tool call is not silence");
        tokio::time::sleep(SILENCE * 10).await;
        let answer = progress.answer(Instant::now()).unwrap();
        assert_eq!(answer.activity, Activity::Tool("build".into()));
        tokio::time::sleep(SILENCE + Duration::from_millis(1)).await;
        assert_eq!(progress.answer(Instant::now()), None, "past its own limit by the silence");
        drop(tool);
        let answer = progress.answer(Instant::now()).unwrap();
        assert_eq!((answer.activity, answer.silent_ms), (Activity::Turn, 0), "its end is progress");

        // A run standing for a tool that asks the model: the model call's silence counts.
        let run = scope(progress.clone(), async { Section::tool("kind", SILENCE * 10) }).await;
        let call = Section::call(progress.clone());
        assert!(progress.silent_at(SILENCE).is_some(), "a model call inside a run is silent");
        tokio::time::sleep(SILENCE + Duration::from_millis(1)).await;
        assert_eq!(progress.answer(Instant::now()), None, "silent past the limit in its call");
        drop(call);
        assert_eq!(
            progress.answer(Instant::now()).unwrap().activity,
            Activity::Tool("kind".into())
        );
        drop(run);

        let wait = scope(progress.clone(), async { Section::wait() }).await;
        tokio::time::sleep(SILENCE * 100).await;
        assert_eq!(progress.answer(Instant::now()).unwrap().activity, Activity::Waiting);
        drop(wait);
        assert!(progress.silent_at(SILENCE).is_some());
    }

    #[tokio::test(start_paused = true)]
    async fn the_engines_count_wins_over_streamed_pieces_and_a_new_turn_starts_at_zero() {
        let progress = turn();
        progress.add_tokens(40);
        progress.add_pieces(1);
        assert_eq!(progress.tokens(), 40);
        progress.add_pieces(60);
        assert_eq!(progress.tokens(), 61);
        progress.end_turn();
        progress.begin_turn();
        assert_eq!(progress.tokens(), 0);
    }

    #[tokio::test(start_paused = true)]
    async fn outside_a_scope_reports_are_dropped() {
        tokens(3);
        pieces(3);
        assert!(current().is_none());
        assert!(Section::wait().is_none());
    }
}
