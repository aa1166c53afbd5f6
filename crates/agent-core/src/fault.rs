//! Fault injection for testing a deployment: `STRATA_FAULT_PANIC` makes one agent's heartbeat
//! turn panic, so that what a panicking layer costs (the turn reloaded from the agent's stored
//! state, the agent failed after [`MAX_PANICS`](crate::MAX_PANICS) panics in a row) can be seen
//! in a real run. Inert unless set: the variable is read once, and when it is unset each turn
//! with work costs one load of a [`OnceLock`].
//!
//! Format: `<agent-id>[:<n>]` panics that agent's `n`-th turn with work in this process (1 by
//! default); `<agent-id>:always` panics every turn of it that has work.

use std::sync::OnceLock;
use std::sync::atomic::{AtomicU64, Ordering};

use agent_state::AgentId;

/// The variable that names the agent to panic.
pub const PANIC_VAR: &str = "STRATA_FAULT_PANIC";

/// When the named agent panics.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum When {
    /// On its n-th turn with work only.
    Nth(u64),
    /// On every turn with work.
    Always,
}

struct Fault {
    agent: String,
    when: When,
    turns: AtomicU64,
}

fn fault() -> Option<&'static Fault> {
    static FAULT: OnceLock<Option<Fault>> = OnceLock::new();
    FAULT
        .get_or_init(|| {
            let value = std::env::var(PANIC_VAR).ok()?;
            let parsed = parse(&value);
            if parsed.is_none() {
                tracing::warn!(value = %value, "{PANIC_VAR} is not `<agent-id>[:<n>]` or `<agent-id>:always`; no fault injected");
            }
            let (agent, when) = parsed?;
            tracing::warn!(agent = %agent, ?when, "fault injection: {PANIC_VAR} makes this agent's turn panic");
            Some(Fault { agent, when, turns: AtomicU64::new(0) })
        })
        .as_ref()
}

fn parse(value: &str) -> Option<(String, When)> {
    let value = value.trim();
    let (agent, when) = match value.rsplit_once(':') {
        Some((agent, "always")) => (agent, When::Always),
        Some((agent, n)) => (agent, When::Nth(n.parse().ok().filter(|&n: &u64| n > 0)?)),
        None => (value, When::Nth(1)),
    };
    (!agent.is_empty()).then(|| (agent.to_owned(), when))
}

/// Panics if `STRATA_FAULT_PANIC` names `agent` and this is the turn it names. Called at the
/// start of each turn with work.
pub(crate) fn panic_if_due(agent: &AgentId) {
    let Some(fault) = fault() else { return };
    if fault.agent != agent.as_str() {
        return;
    }
    let turn = fault.turns.fetch_add(1, Ordering::SeqCst) + 1;
    let due = match fault.when {
        When::Always => true,
        When::Nth(n) => turn == n,
    };
    if due {
        panic!("{PANIC_VAR}: injected panic of {agent} on its turn {turn} with work");
    }
}

/// A future that turns a panic while it is polled into `Err(message)`.
pub(crate) struct CatchPanic<F>(pub(crate) F);

impl<F: std::future::Future + Unpin> std::future::Future for CatchPanic<F> {
    type Output = Result<F::Output, String>;

    fn poll(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Self::Output> {
        let inner = &mut self.0;
        match std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            std::pin::Pin::new(inner).poll(cx)
        })) {
            Ok(poll) => poll.map(Ok),
            Err(payload) => std::task::Poll::Ready(Err(panic_message(payload.as_ref()))),
        }
    }
}

/// The text of a panic's payload.
pub fn panic_message(payload: &(dyn std::any::Any + Send)) -> String {
    if let Some(s) = payload.downcast_ref::<&str>() {
        (*s).to_owned()
    } else if let Some(s) = payload.downcast_ref::<String>() {
        s.clone()
    } else {
        "a panic without a message".to_owned()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_the_setting() {
        assert_eq!(parse("exec-1"), Some(("exec-1".into(), When::Nth(1))));
        assert_eq!(parse("exec-1:3"), Some(("exec-1".into(), When::Nth(3))));
        assert_eq!(parse("lead:always"), Some(("lead".into(), When::Always)));
        assert_eq!(parse("lead:0"), None);
        assert_eq!(parse("lead:x"), None);
        assert_eq!(parse(""), None);
    }
}
