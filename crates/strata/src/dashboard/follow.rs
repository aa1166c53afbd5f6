//! Following a watched run's deltas ([`RunWatch::follow`]), as an event stream sends them to a
//! browser: the frames after the last one it had that the ring still holds, then every new
//! one; a [`Sent::Reset`] when some were lost (the browser then reloads the snapshot).

use std::collections::VecDeque;
use std::sync::Arc;

use tokio::sync::broadcast::{self, error::RecvError};

use super::watch::{Frame, RunWatch, lock};

/// The delta that tells a browser it missed some: it reloads the snapshot.
pub const RESET: &str = r#"{"kind":"reset"}"#;

/// What a follower sends next.
#[derive(Debug)]
pub enum Sent {
    /// A frame: its delta's JSON, the SSE `id:` its `seq`.
    Frame(Arc<Frame>),
    /// Some frames were lost: [`RESET`].
    Reset,
}

/// A follower of a watched run's frames ([`RunWatch::follow`]).
pub struct Follower {
    /// What is sent first: the frames the ring holds after the follower's last, or a reset.
    first: VecDeque<Sent>,
    receiver: broadcast::Receiver<Arc<Frame>>,
    /// The number of the last frame sent (frames up to it that the receiver holds are
    /// skipped).
    seen: u64,
    watch: Arc<RunWatch>,
}

impl RunWatch {
    /// Follows the run's frames after the record `after` (the last one the follower had, its
    /// `Last-Event-ID`), if any: the frames the ring still holds after it, else a reset when
    /// the run went past it; then every new frame.
    pub fn follow(self: &Arc<Self>, after: Option<u64>) -> Follower {
        let receiver = self.frames.subscribe();
        // Subscribed first: a frame made meanwhile is in the ring and on the receiver, and is
        // sent once (frames up to `seen` are skipped on the receiver).
        let state = lock(&self.state);
        let seen = state.ring.back().map_or(0, |f| f.n);
        let last = state.model.last_seq();
        let first = match after {
            Some(after) if last.is_some_and(|l| l > after) => {
                let covered = state.ring.front().is_some_and(|f| f.seq.is_some_and(|s| s <= after));
                if covered {
                    state
                        .ring
                        .iter()
                        .filter(|f| f.seq.is_some_and(|s| s > after))
                        .map(|f| Sent::Frame(f.clone()))
                        .collect()
                } else {
                    VecDeque::from([Sent::Reset])
                }
            }
            _ => VecDeque::new(),
        };
        drop(state);
        Follower { first, receiver, seen, watch: self.clone() }
    }
}

impl Follower {
    /// What to send next; `None` once the run's watch is gone.
    pub async fn next(&mut self) -> Option<Sent> {
        if let Some(sent) = self.first.pop_front() {
            return Some(sent);
        }
        loop {
            match self.receiver.recv().await {
                Ok(frame) if frame.n <= self.seen => continue,
                Ok(frame) => {
                    self.watch.touch();
                    self.seen = frame.n;
                    return Some(Sent::Frame(frame));
                }
                Err(RecvError::Lagged(_)) => {
                    self.seen = lock(&self.watch.state).ring.back().map_or(0, |f| f.n);
                    return Some(Sent::Reset);
                }
                Err(RecvError::Closed) => return None,
            }
        }
    }
}
