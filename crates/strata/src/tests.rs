//! What the crate's unit tests share: hand-built audit records and model call records.

use agent_core::{AuditEvent, AuditRecord, GENESIS_HASH};
use agent_llm::CallRecord;
use agent_state::{AgentId, Timestamp};

/// Record 0 of the log: `event` of `bottom-d1` at 1.5 s after the epoch (unchained: the
/// hashes are the genesis hash). Change its `seq`, `at` or `agent` with struct update syntax.
pub(crate) fn record(event: AuditEvent) -> AuditRecord {
    AuditRecord {
        seq: 0,
        at: Timestamp(1_500),
        agent: AgentId::from("bottom-d1"),
        event,
        prev_hash: GENESIS_HASH,
        hash: GENESIS_HASH,
    }
}

/// A model call of `agent` started at `started_ms`, numbered `seq`.
pub(crate) fn call(seq: u64, agent: &str, started_ms: u64) -> CallRecord {
    CallRecord {
        seq,
        call: seq,
        agent: AgentId::new(agent),
        layer: agent_state::AgentLayer::Bottom,
        provider: "fake".into(),
        model: "m".into(),
        started_ms,
        latency_ms: 1,
        system: String::new(),
        messages: Vec::new(),
        tools: Vec::new(),
        answer: String::new(),
        tool_calls: Vec::new(),
        usage: agent_llm::Usage::default(),
        cost_usd: None,
        outcome: agent_llm::CallOutcome::Answered,
        retries: 0,
        cut_chars: 0,
    }
}
