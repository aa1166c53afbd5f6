//! Time off the clock: waits that are not a call's own work do not count against the time
//! limits of the reasoning call ([`TimedReasoner`](crate::timed::TimedReasoner),
//! `[timeouts] reasoning_ms`) and of the heartbeat turn (the agent's `timeout_ms`) that await
//! them.
//!
//! A reasoner wraps such a wait in [`untimed`] — the LLM reasoner does, around the usage
//! ledger's wait for a budget extension, which lasts as long as the top powers or a human take
//! to decide it. The limits of a task are kept in a [`Stopwatch`] shared through a task-local
//! value: the outermost limit of a task (a turn, or a reasoning call made outside one) puts it
//! in place, inner limits use the same one, and each limit's deadline moves on by the time
//! spent in untimed sections since it started; while one is open its clock stands still. The
//! work itself (the model call) stays bounded.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::watch;
use tokio::time::Instant;

tokio::task_local! {
    static PAUSES: Arc<Pauses>;
}

/// Runs `f` off the clock: the time it takes does not count against the limits of the
/// reasoning call and heartbeat turn that await it (in the same task), nor as the silence of
/// the call ([`progress`](crate::progress): the turn answers its heartbeats as busy, waiting).
/// For waits that are not the call's own work, such as a wait for a budget decision. Outside
/// any limit it is `f`.
pub async fn untimed<F: Future>(f: F) -> F::Output {
    // Dropped in reverse order: the wait's end is a sign of progress before the limits' clocks
    // see the pause end, so the silence starts over when they look again.
    let _open = PAUSES.try_with(Arc::clone).ok().map(Open::new);
    let _waiting = crate::progress::Section::wait();
    f.await
}

/// The untimed sections of one task.
#[derive(Debug)]
pub(crate) struct Pauses {
    state: watch::Sender<PauseState>,
}

#[derive(Clone, Copy, Debug, Default)]
struct PauseState {
    /// Untimed sections open now.
    open: u32,
    /// When the first of them opened.
    since: Option<Instant>,
    /// Time spent in closed ones.
    total: Duration,
}

impl PauseState {
    /// Time spent off the clock up to `now`, the open section included.
    fn off_by(&self, now: Instant) -> Duration {
        self.total + self.since.map_or(Duration::ZERO, |s| now.saturating_duration_since(s))
    }
}

/// An open untimed section; closed when dropped (also when its future is).
struct Open(Arc<Pauses>);

impl Open {
    fn new(pauses: Arc<Pauses>) -> Self {
        pauses.state.send_modify(|s| {
            if s.open == 0 {
                s.since = Some(Instant::now());
            }
            s.open += 1;
        });
        Self(pauses)
    }
}

impl Drop for Open {
    fn drop(&mut self) {
        self.0.state.send_modify(|s| {
            s.open = s.open.saturating_sub(1);
            if s.open == 0
                && let Some(since) = s.since.take()
            {
                s.total += Instant::now().saturating_duration_since(since);
            }
        });
    }
}

/// The clock of one time limit: its deadline moves on by the untimed time since it started.
pub(crate) struct Stopwatch {
    rx: watch::Receiver<PauseState>,
    start: Instant,
    limit: Duration,
    /// Untimed time before the start.
    before: Duration,
}

impl Stopwatch {
    /// Starts `limit` now on the current task's pauses; `work` (to be awaited under the
    /// returned stopwatch) is put in their scope. A task without pauses gets new ones.
    pub(crate) fn start<F: Future>(
        limit: Duration,
        work: F,
    ) -> (Self, impl Future<Output = F::Output>) {
        let pauses = PAUSES.try_with(Arc::clone).unwrap_or_else(|_| {
            Arc::new(Pauses { state: watch::Sender::new(PauseState::default()) })
        });
        let rx = pauses.state.subscribe();
        let start = Instant::now();
        let before = rx.borrow().off_by(start);
        (Self { rx, start, limit, before }, PAUSES.scope(pauses, work))
    }

    /// The deadline now; `None` while an untimed section is open (the clock stands still).
    pub(crate) fn deadline(&mut self) -> Option<Instant> {
        let state = *self.rx.borrow_and_update();
        state
            .since
            .is_none()
            .then(|| self.start + self.limit + state.total.saturating_sub(self.before))
    }

    /// Waits until the deadline may have changed (an untimed section opened or closed).
    pub(crate) async fn changed(&mut self) {
        if self.rx.changed().await.is_err() {
            // The sender lives in the task's scope as long as the work does.
            std::future::pending::<()>().await;
        }
    }
}

/// `work` bounded by `limit` on tokio's clock, untimed sections excepted; `None` past it.
#[cfg(test)]
pub(crate) async fn bounded<T>(limit: Duration, work: impl Future<Output = T>) -> Option<T> {
    let (mut clock, work) = Stopwatch::start(limit, work);
    tokio::pin!(work);
    loop {
        let deadline = clock.deadline();
        tokio::select! {
            // The work first, so a call that ends at its deadline is kept.
            biased;
            out = &mut work => return Some(out),
            () = clock.changed() => {}
            () = sleep_until_some(deadline) => return None,
        }
    }
}

/// Why [`bounded_while_producing`] stopped its work.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Cut {
    /// It ran past its total limit.
    Total,
    /// It produced nothing for the silence limit.
    Silent,
}

/// `work` bounded by `limit` as [`bounded`] bounds it, and cut sooner once `progress` shows
/// no sign of it for `silence` ([`Progress::silent_at`](crate::Progress::silent_at): a token,
/// a prompt batch, a call begun or ended). The silence stands still while the clock does (an
/// untimed section is open) and while a tool call runs.
pub(crate) async fn bounded_while_producing<T>(
    limit: Duration,
    silence: Duration,
    progress: &crate::Progress,
    work: impl Future<Output = T>,
) -> Result<T, Cut> {
    let (mut clock, work) = Stopwatch::start(limit, work);
    tokio::pin!(work);
    loop {
        let deadline = clock.deadline();
        let quiet = deadline.and(progress.silent_at(silence));
        tokio::select! {
            // The work first, so a call that ends at its deadline is kept.
            biased;
            out = &mut work => return Ok(out),
            () = clock.changed() => {}
            () = sleep_until_some(deadline) => return Err(Cut::Total),
            () = sleep_until_some(quiet) => {
                // Progress may have come meanwhile: the silence is then counted from it.
                if progress.silent_at(silence).is_some_and(|at| at <= Instant::now()) {
                    return Err(Cut::Silent);
                }
            }
        }
    }
}

/// Sleeps until `deadline`, or forever for `None`.
pub(crate) async fn sleep_until_some(deadline: Option<Instant>) {
    match deadline {
        Some(d) => tokio::time::sleep_until(d).await,
        None => std::future::pending().await,
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used, reason = "tests")]

    use super::*;

    const LIMIT: Duration = Duration::from_secs(10);

    #[tokio::test(start_paused = true)]
    async fn work_past_the_limit_is_cut() {
        let out = bounded(LIMIT, tokio::time::sleep(LIMIT * 2)).await;
        assert_eq!(out, None);
    }

    #[tokio::test(start_paused = true)]
    async fn an_untimed_wait_does_not_count_and_the_work_around_it_does() {
        // 6 s of work, a 60 s untimed wait, 6 s of work: 12 s of work, past the 10 s limit.
        let work = async {
            tokio::time::sleep(LIMIT * 6 / 10).await;
            untimed(tokio::time::sleep(LIMIT * 6)).await;
            tokio::time::sleep(LIMIT * 6 / 10).await;
        };
        assert_eq!(bounded(LIMIT, work).await, None, "the work alone passes the limit");
        // 3 s, the wait, 3 s: within it.
        let work = async {
            tokio::time::sleep(LIMIT * 3 / 10).await;
            untimed(tokio::time::sleep(LIMIT * 6)).await;
            tokio::time::sleep(LIMIT * 3 / 10).await;
            "done"
        };
        assert_eq!(bounded(LIMIT, work).await, Some("done"));
    }

    #[tokio::test(start_paused = true)]
    async fn nested_limits_share_the_untimed_time() {
        // A turn of 10 s holding a call of 5 s that waits 60 s untimed: neither is cut.
        let call = bounded(LIMIT / 2, async {
            untimed(tokio::time::sleep(LIMIT * 6)).await;
            tokio::time::sleep(LIMIT / 4).await;
        });
        let turn = bounded(LIMIT, async {
            tokio::time::sleep(LIMIT / 4).await;
            call.await
        });
        assert_eq!(turn.await, Some(Some(())));
    }

    /// A call producing a token every 50 s, for 10 minutes: past the old 2-minute total.
    async fn streaming(progress: Arc<crate::Progress>) -> &'static str {
        crate::progress::scope(progress, async {
            for _ in 0..12 {
                tokio::time::sleep(Duration::from_secs(50)).await;
                crate::progress::tokens(1);
            }
            "answer"
        })
        .await
    }

    #[tokio::test(start_paused = true)]
    async fn a_call_still_producing_is_not_cut_and_a_silent_one_is_at_the_silence_limit() {
        let silence = Duration::from_secs(60);
        let total = Duration::from_secs(3_600);
        let progress = Arc::new(crate::Progress::new(silence));
        let out = bounded_while_producing(total, silence, &progress, streaming(progress.clone()));
        assert_eq!(out.await, Ok("answer"), "a token every 50 s keeps it going for 10 minutes");

        let started = Instant::now();
        let progress = Arc::new(crate::Progress::new(silence));
        let silent = async {
            crate::progress::tokens(1);
            tokio::time::sleep(Duration::from_secs(10)).await;
            crate::progress::tokens(1);
            std::future::pending::<()>().await
        };
        let silent = crate::progress::scope(progress.clone(), silent);
        let out = bounded_while_producing(total, silence, &progress, silent).await;
        assert_eq!(out, Err(Cut::Silent));
        assert_eq!(
            started.elapsed(),
            Duration::from_secs(10) + silence,
            "cut 60 s after its last token"
        );

        // Still producing, but past its total: cut there.
        let progress = Arc::new(crate::Progress::new(silence));
        let out = bounded_while_producing(
            Duration::from_secs(300),
            silence,
            &progress,
            streaming(progress.clone()),
        );
        assert_eq!(out.await, Err(Cut::Total));
    }

    #[tokio::test(start_paused = true)]
    async fn an_untimed_wait_is_not_silence() {
        let silence = Duration::from_secs(60);
        let progress = Arc::new(crate::Progress::new(silence));
        // A budget decision that takes an hour, then the answer 30 s later.
        let work = crate::progress::scope(progress.clone(), async {
            untimed(tokio::time::sleep(Duration::from_secs(3_600))).await;
            tokio::time::sleep(silence / 2).await;
            "answer"
        });
        let out = bounded_while_producing(LIMIT * 100, silence, &progress, work).await;
        assert_eq!(out, Ok("answer"));
    }

    #[tokio::test(start_paused = true)]
    async fn outside_a_limit_untimed_is_the_future_itself() {
        assert_eq!(untimed(async { 7 }).await, 7);
    }
}
