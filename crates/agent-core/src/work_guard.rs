//! The guards every working agent's tool loop runs inside, whichever loop it is (a layer's
//! tool loop in `agent-layers`, an OODA agent's decide/act loop in `agent-ooda`):
//!
//! - the **loop rule** ([`repeated_call`]): a call that would repeat the calls made since
//!   anything new arrived `repeat_limit` times in a row is not made; the loop ends with
//!   [`TaskFailure::Loop`], audited as [`AuditEvent::Stuck`];
//! - the **subtask limit** ([`out_of_time`], `[timeouts] subtask_ms`): a lead's step worked
//!   on for that long on the run's clock ends with [`TaskFailure::TimedOut`], audited as
//!   [`AuditEvent::TimedOut`].
//!
//! The rules themselves are `agent-state`'s ([`detect_loop`], [`call_fingerprint`]); this is
//! where a working agent applies them, so every loop stops for the same reasons with the same
//! typed failure.

use agent_state::{
    GuardSettings, Limit, OnStuck, Subtask, TaskFailure, Timestamp, call_fingerprint, detect_loop,
};

use crate::agent::AgentContext;
use crate::audit::AuditEvent;
use crate::error::AgentError;
use crate::reasoner::{ToolCall, ToolCallRecord};

/// Longest description of a repeated block kept in a [`TaskFailure::Loop`], in characters.
const MAX_ITEM: usize = 300;

/// The loop rule: whether making `call` after `history` (the loop's calls, and the events that
/// reached it, `event: true`) repeats the calls since the last event `guards.repeat_limit`
/// times in a row. If so the call must not be made: the typed reason is returned, audited as
/// [`AuditEvent::Stuck`] for `step`'s task (escalated to the agent's supervisor with
/// [`OnStuck::Escalate`]).
pub async fn repeated_call(
    ctx: &AgentContext,
    step: Option<&Subtask>,
    history: &[ToolCallRecord],
    call: &ToolCall,
    guards: &GuardSettings,
) -> Result<Option<TaskFailure>, AgentError> {
    let since_news = history.iter().rposition(|r| r.event).map_or(0, |i| i + 1);
    let mut calls: Vec<String> = history[since_news..]
        .iter()
        .map(|r| call_fingerprint(&r.call.tool, &r.call.args))
        .collect();
    calls.push(call_fingerprint(&call.tool, &call.args));
    let Some(repetition) = detect_loop(&calls, guards.repeat_limit) else { return Ok(None) };
    let block = &calls[calls.len() - repetition.period..];
    let failure = TaskFailure::Loop {
        agent: ctx.id().clone(),
        item: shorten_item(&block.join(" then ")),
        repeats: u32::try_from(repetition.times).unwrap_or(u32::MAX),
    };
    let key = step.map(Subtask::key).unwrap_or_default();
    tracing::warn!(agent = %ctx.id(), step = %key, %failure, "loop stopped");
    let escalated_to = match guards.on_stuck {
        OnStuck::Stop => None,
        OnStuck::Escalate => ctx.config().supervisor.clone(),
    };
    ctx.audit(AuditEvent::Stuck {
        task: step.map(|s| s.task_id.clone()),
        reason: failure.clone(),
        escalated_to,
    })
    .await?;
    Ok(Some(failure))
}

/// The subtask limit (`[timeouts] subtask_ms`): whether `step`, worked on since `started` (on
/// the run's clock, across heartbeats, suspensions and retries), has run out of time. If so
/// the typed reason is returned, audited as [`AuditEvent::TimedOut`]; its owner reports the
/// step failed with it and its lead escalates it (neither retried nor reassigned).
pub async fn out_of_time(
    ctx: &AgentContext,
    step: &Subtask,
    started: Timestamp,
) -> Result<Option<TaskFailure>, AgentError> {
    let limit_ms = ctx.timeouts().subtask_ms;
    if ctx.now().millis_since(started) < limit_ms {
        return Ok(None);
    }
    let what = format!("step `{}` of task `{}` on `{}`", step.step.id, step.task_id, ctx.id());
    tracing::warn!(agent = %ctx.id(), step = %step.key(), limit_ms, "subtask timed out");
    ctx.audit(AuditEvent::TimedOut { limit: Limit::Subtask, what: what.clone(), limit_ms }).await?;
    Ok(Some(TaskFailure::TimedOut { limit: Limit::Subtask, what, limit_ms }))
}

fn shorten_item(item: &str) -> String {
    match item.char_indices().nth(MAX_ITEM) {
        Some((end, _)) => format!("{}…", &item[..end]),
        None => item.to_owned(),
    }
}
