//! The runtime's OpenTelemetry spans: `tracing` spans of target [`TARGET`], which the
//! `agent-telemetry` crate exports as OTLP traces (one trace per task, linked across agents
//! and processes by ids derived from the run's: see that crate for the field conventions).
//!
//! With no subscriber for [`TARGET`] (telemetry off), [`enabled`] is false after one load
//! and a branch, and every function here returns [`Span::none`] without looking at its
//! arguments: nothing is formatted or allocated on the heartbeat path.

use agent_state::{AgentId, AgentLayer, Message, MessageId, MessageKind};
use tracing::Span;

/// The target of every span and event of the runtime's telemetry.
pub const TARGET: &str = "strata::otel";

/// Whether telemetry is on (a subscriber wants [`TARGET`]).
#[inline]
pub fn enabled() -> bool {
    tracing::enabled!(target: "strata::otel", tracing::Level::INFO)
}

/// The key of a task's own span: `task:ID`.
pub fn task_key(task: &str) -> String {
    format!("task:{task}")
}

/// The key of the span that sent message `id`: `msg:ID`.
pub fn message_key(id: &MessageId) -> String {
    format!("msg:{id}")
}

/// The task a message's content is about: its `task_id`, or the `id` of the `task` it
/// carries, at the top level or one level down (a work package, a subtask, a report).
pub fn task_of(content: &serde_json::Value) -> Option<&str> {
    // (`step_of` below finds the step the same way.)
    fn direct(v: &serde_json::Value) -> Option<&str> {
        v.get("task_id")
            .and_then(serde_json::Value::as_str)
            .or_else(|| v.get("task").and_then(|t| t.get("id")).and_then(serde_json::Value::as_str))
    }
    direct(content).or_else(|| content.as_object()?.values().find_map(direct))
}

/// The plan step a message's content is about: its `step_id`, or the `id` of the `step` it
/// carries, at the top level or one level down (a subtask, a result).
pub fn step_of(content: &serde_json::Value) -> Option<&str> {
    fn direct(v: &serde_json::Value) -> Option<&str> {
        v.get("step_id")
            .and_then(serde_json::Value::as_str)
            .or_else(|| v.get("step").and_then(|t| t.get("id")).and_then(serde_json::Value::as_str))
    }
    direct(content).or_else(|| content.as_object()?.values().find_map(direct))
}

/// The span of a task, from its submission until its outcome is read: the root of the task's
/// trace. `attempt` tells a resubmission (after a resume) from the first.
pub fn task(id: &str, goal: &str, attempt: &'static str) -> Span {
    if !enabled() {
        return Span::none();
    }
    tracing::info_span!(
        target: "strata::otel",
        "strata.task",
        strata.task = id,
        strata.span_key = task_key(id).as_str(),
        task.goal = goal,
        task.submission = attempt,
        task.outcome = tracing::field::Empty,
        otel.status_code = tracing::field::Empty,
    )
}

/// The span of the agents of run `run` that a worker hosts (`agent_pool::placement`): their
/// spans know the run through it.
pub fn share(run: &str, agents: usize) -> Span {
    if !enabled() {
        return Span::none();
    }
    tracing::info_span!(target: "strata::otel", "strata.share", run.id = run, agents)
}

/// The span of a heartbeat (or a wake-on-work turn) that has work: `messages` to process.
/// It is a child of the span that sent the first message about a task, and linked to the
/// senders of the others.
pub fn heartbeat(
    agent: &AgentId,
    layer: AgentLayer,
    number: u64,
    cycle: bool,
    messages: &[Message],
) -> Span {
    if !enabled() {
        return Span::none();
    }
    let mut first: Option<(&str, String)> = None;
    let mut links = Vec::new();
    for m in messages {
        match (&first, task_of(&m.content)) {
            (None, Some(task)) => first = Some((task, message_key(&m.id))),
            _ => links.push(message_key(&m.id)),
        }
    }
    let links = links.join(",");
    let kinds: Vec<String> = messages.iter().map(|m| m.kind.to_string()).collect();
    tracing::info_span!(
        target: "strata::otel",
        "strata.heartbeat",
        agent.id = %agent,
        agent.layer = %layer,
        heartbeat = number,
        heartbeat.wake = !cycle,
        messages = messages.len(),
        message.kinds = kinds.join(",").as_str(),
        strata.task = first.as_ref().map(|f| f.0),
        strata.parent_key = first.as_ref().map(|f| f.1.as_str()),
        strata.links = (!links.is_empty()).then_some(links.as_str()),
    )
}

/// The span of a message being sent, whose id the receiver derives from the message's
/// (`msg:ID`): `strata.delegation` for a task handed down, `strata.message` otherwise.
/// `layer` is the sender's, when an agent sends it.
pub fn message(message: &Message, layer: Option<AgentLayer>) -> Span {
    if !enabled() {
        return Span::none();
    }
    let key = message_key(&message.id);
    let task = task_of(&message.content);
    let from = message.from.to_string();
    let to = message.to.to_string();
    let layer = layer.map(|l| l.to_string());
    if message.kind == MessageKind::TaskAssign {
        tracing::info_span!(
            target: "strata::otel",
            "strata.delegation",
            otel.kind = "producer",
            delegation.kind = "task",
            delegation.from = from.as_str(),
            delegation.to = to.as_str(),
            agent.id = from.as_str(),
            agent.layer = layer.as_deref(),
            message.id = %message.id,
            message.kind = %message.kind,
            strata.task = task,
            strata.span_key = key.as_str(),
        )
    } else {
        tracing::info_span!(
            target: "strata::otel",
            "strata.message",
            otel.kind = "producer",
            message.from = from.as_str(),
            message.to = to.as_str(),
            agent.id = from.as_str(),
            agent.layer = layer.as_deref(),
            message.id = %message.id,
            message.kind = %message.kind,
            strata.task = task,
            strata.span_key = key.as_str(),
        )
    }
}

/// The span of an agent spawned by another.
pub fn spawn(spawner: &AgentId, spawned: &AgentId, role: &str) -> Span {
    if !enabled() {
        return Span::none();
    }
    tracing::info_span!(
        target: "strata::otel",
        "strata.delegation",
        delegation.kind = "spawn",
        delegation.from = %spawner,
        delegation.to = %spawned,
        agent.role = role,
    )
}

/// The span of a decision being proposed, signed or vetoed; `signer` is who acts.
pub fn decision(action: &'static str, id: &impl std::fmt::Display, signer: &AgentId) -> Span {
    if !enabled() {
        return Span::none();
    }
    tracing::info_span!(
        target: "strata::otel",
        "strata.decision",
        decision.id = %id,
        decision.action = action,
        decision.signer = %signer,
        decision.status = tracing::field::Empty,
        decision.signatures = tracing::field::Empty,
        decision.vetoes = tracing::field::Empty,
    )
}

/// Records a decision's state on its span: status, who signed, who vetoed.
pub fn decided(span: &Span, decision: &agent_state::Decision) {
    if span.is_disabled() {
        return;
    }
    let signers: Vec<String> = decision.signatures.iter().map(|s| s.signer.to_string()).collect();
    let vetoes: Vec<String> = decision.vetoes.iter().map(|v| v.vetoer.to_string()).collect();
    span.record("decision.status", tracing::field::debug(&decision.status));
    span.record("decision.signatures", signers.join(",").as_str());
    span.record("decision.vetoes", vetoes.join(",").as_str());
}

/// The span of a tool call (OpenTelemetry GenAI: `execute_tool TOOL`).
pub fn tool(agent: &AgentId, tool: &str) -> Span {
    if !enabled() {
        return Span::none();
    }
    tracing::info_span!(
        target: "strata::otel",
        "execute_tool",
        otel.name = format!("execute_tool {tool}").as_str(),
        gen_ai.operation.name = "execute_tool",
        gen_ai.tool.name = tool,
        agent.id = %agent,
        tool.outcome = tracing::field::Empty,
        error.type = tracing::field::Empty,
        otel.status_code = tracing::field::Empty,
    )
}

/// Records how a tool call ended on its span.
pub fn tool_done<E: std::fmt::Display>(span: &Span, result: &Result<crate::tools::ToolOutput, E>) {
    if span.is_disabled() {
        return;
    }
    match result {
        Ok(out) if out.success => {
            span.record("tool.outcome", "ok");
        }
        Ok(_) => {
            span.record("tool.outcome", "failed");
            span.record("otel.status_code", "error");
        }
        Err(e) => {
            span.record("tool.outcome", "error");
            span.record("error.type", e.to_string().as_str());
            span.record("otel.status_code", "error");
        }
    }
}

/// Tells the telemetry an agent changed status (counted as metrics).
pub fn transition(agent: &AgentId, layer: AgentLayer, to: agent_state::AgentStatus) {
    if enabled() {
        tracing::event!(
            target: "strata::otel",
            tracing::Level::INFO,
            strata.event = "transition",
            agent.id = %agent,
            agent.layer = %layer,
            to = %to,
        );
    }
}

/// Tells the telemetry an agent retries a heartbeat (counted as metrics).
pub fn retry(agent: &AgentId, layer: AgentLayer, retry: u32) {
    if enabled() {
        tracing::event!(
            target: "strata::otel",
            tracing::Level::INFO,
            strata.event = "retry",
            agent.id = %agent,
            agent.layer = %layer,
            retry,
        );
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn the_task_and_step_are_found_at_the_top_or_one_level_down() {
        let subtask =
            json!({"type": "subtask", "subtask": {"task_id": "t1", "step": {"id": "s2"}}});
        assert_eq!(task_of(&subtask), Some("t1"));
        assert_eq!(step_of(&subtask), Some("s2"));
        let task = json!({"type": "task", "task": {"id": "t9", "steps": []}});
        assert_eq!(task_of(&task), Some("t9"));
        assert_eq!(step_of(&task), None);
        let result = json!({"task_id": "t1", "step_id": "s3"});
        assert_eq!((task_of(&result), step_of(&result)), (Some("t1"), Some("s3")));
        assert_eq!(task_of(&json!({"heartbeat": 4})), None);
        assert_eq!(task_of(&json!("text")), None);
    }
}
