//! Trace and span ids derived from a run's own ids, so that every process of a run (the
//! coordinator, each worker, a resumed run) gives one task the same trace, and the span of a
//! message the same id on both sides of the bus, without anything added to the messages.

use opentelemetry::trace::{SpanId, TraceId};
use sha2::{Digest, Sha256};

/// The key of a task's own span and trace: `task:ID`.
pub fn task_key(task: &str) -> String {
    format!("task:{task}")
}

/// The key of the span that sent a message: `msg:ID`.
pub fn message_key(message: &str) -> String {
    format!("msg:{message}")
}

fn digest(run: &str, key: &str) -> [u8; 32] {
    let mut hash = Sha256::new();
    // Lengths first: ("ab", "c") and ("a", "bc") must not collide.
    hash.update((run.len() as u64).to_le_bytes());
    hash.update(run.as_bytes());
    hash.update((key.len() as u64).to_le_bytes());
    hash.update(key.as_bytes());
    hash.finalize().into()
}

/// The trace id of `key` (a [`task_key`], or `run` for the run's own trace) in run `run`.
/// Never the invalid all-zero id.
pub fn trace_id(run: &str, key: &str) -> TraceId {
    let d = digest(run, key);
    let mut bytes = [0u8; 16];
    bytes.copy_from_slice(&d[..16]);
    if bytes == [0; 16] {
        bytes[15] = 1;
    }
    TraceId::from_bytes(bytes)
}

/// The span id of `key` (a [`task_key`] or a [`message_key`]) in run `run`. Never the invalid
/// all-zero id.
pub fn span_id(run: &str, key: &str) -> SpanId {
    let d = digest(run, key);
    let mut bytes = [0u8; 8];
    bytes.copy_from_slice(&d[16..24]);
    if bytes == [0; 8] {
        bytes[7] = 1;
    }
    SpanId::from_bytes(bytes)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_are_stable_per_run_and_key_and_differ_across_runs() {
        assert_eq!(trace_id("r1", &task_key("t")), trace_id("r1", &task_key("t")));
        assert_ne!(trace_id("r1", &task_key("t")), trace_id("r2", &task_key("t")));
        assert_ne!(span_id("r1", &message_key("m1")), span_id("r1", &message_key("m2")));
        assert_ne!(trace_id("ab", "c"), trace_id("a", "bc"));
        assert_ne!(trace_id("r", "k"), TraceId::INVALID);
        assert_ne!(span_id("r", "k"), SpanId::INVALID);
    }
}
