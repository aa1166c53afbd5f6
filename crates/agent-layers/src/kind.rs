//! Executors with a `kind` (docs/concepts.md#executor-kinds): such an executor runs a subtask as
//! one run of its kind on the team's [`Executor`] instead of a tool loop, when the step is a goal
//! step (the objective is its description) or a scripted step whose `tool` is the kind (`args` =
//! `{"objective": "...", "inputs": {...}}`).
//!
//! The run goes through [`AgentContext::call_effect_once`]: its start and its response are
//! recorded durably, so a resumed run reuses a finished run's response, and a run a crash cut
//! short is not repeated unless the kind is idempotent (the step is then reported interrupted
//! and escalated). Its events (transitions, progress, notes) go to the team's event stream as
//! [`TeamEvent::Run`]; its response (transitions, retries, timings) is kept with the recorded
//! output. The tools the run calls go through the agent's own tool path
//! ([`AgentContext::tool_path`]): checked against its capabilities, audited, and each call with
//! side effects recorded under the run, so a run that is resumed (an idempotent kind, run again
//! after a crash) reuses what its calls did instead of doing it again.

use std::sync::Arc;

use agent_core::tools::{ToolError, ToolOutput};
use agent_core::{AgentContext, AgentError, EventHub, TeamEvent, ToolCall};
use agent_executor::{ExecError, Executor, RunContext, RunObserver, RunRequest, RunResponse};
use agent_state::{AgentId, AgentResult, ResultStatus, RunEvent, RunId, RunState, Subtask};
use serde_json::json;

/// What an executor with a kind holds: the team's executor and its event stream.
#[derive(Clone, Debug)]
pub struct KindRunner {
    /// Runs the kind.
    pub executor: Arc<Executor>,
    /// Where the run's events go.
    pub events: EventHub,
}

/// How a kind's run of a subtask ended.
pub(crate) enum KindEnd {
    /// Completed or failed: the response.
    Ran(Box<RunResponse>),
    /// Blocked on a missing input.
    Blocked { missing: String },
    /// Refused before running (bad objective or inputs, unknown kind): a permanent failure.
    Refused(ExecError),
    /// A crash cut an earlier run of it short, and it is not run again.
    Interrupted { partial: String },
}

/// Whether a subtask of `step` runs through `kind` rather than the tool loop.
pub(crate) fn runs_through(kind: &str, subtask: &Subtask) -> bool {
    !subtask.step.is_scripted() || subtask.step.tool == kind
}

/// The run's request for `subtask`.
fn request(kind: &str, subtask: &Subtask) -> RunRequest {
    let step = &subtask.step;
    let (objective, inputs) = if step.is_scripted() {
        let objective = step
            .args
            .get("objective")
            .and_then(serde_json::Value::as_str)
            .map_or_else(|| step.description.clone(), str::to_owned);
        (objective, step.args.get("inputs").cloned().unwrap_or(serde_json::Value::Null))
    } else if step.acceptance.trim().is_empty() {
        (step.description.clone(), serde_json::Value::Null)
    } else {
        (format!("{}\n\nDone when: {}", step.description, step.acceptance), serde_json::Value::Null)
    };
    RunRequest { run_id: run_id(subtask), kind: kind.to_owned(), objective, inputs }
}

/// A run id for `subtask`: its key and attempt with every character outside the run id rule
/// made `-`, and followed by a hash of the whole when that changed it or it is longer than 64.
pub(crate) fn run_id(subtask: &Subtask) -> RunId {
    let raw = format!("{}-{}-{}", subtask.task_id, subtask.step.id, subtask.attempt);
    if let Ok(id) = RunId::parse(&raw) {
        return id;
    }
    let clean: String =
        raw.chars().map(|c| if c.is_ascii_alphanumeric() || c == '-' { c } else { '-' }).collect();
    // Different keys may clean to the same text: a hash of the raw key keeps them apart.
    let hash = raw
        .bytes()
        .fold(0xcbf2_9ce4_8422_2325_u64, |h, b| (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3));
    let head: String = clean.chars().take(47).collect();
    // 47 ASCII characters of the rule, `-` and 16 hex digits: always a run id.
    RunId::parse(&format!("{head}-{hash:016x}")).unwrap_or_else(|_| RunId::hex(u128::from(hash)))
}

struct HubObserver {
    hub: EventHub,
    agent: AgentId,
}

impl RunObserver for HubObserver {
    fn observe(&self, event: &RunEvent) {
        self.hub.publish(TeamEvent::Run { agent: self.agent.clone(), event: event.clone() });
    }
}

/// Runs `subtask` as one run of `kind`, at most once (see the module docs).
pub(crate) async fn run(
    ctx: &mut AgentContext,
    runner: &KindRunner,
    kind: &str,
    subtask: &Subtask,
) -> Result<KindEnd, AgentError> {
    let request = request(kind, subtask);
    let known = match runner.executor.check(&request) {
        Ok(known) => known,
        Err(error) => return Ok(KindEnd::Refused(error)),
    };
    let call = ToolCall {
        tool: kind.to_owned(),
        args: json!({ "objective": request.objective, "inputs": request.inputs }),
    };
    let cx = RunContext {
        agent: Arc::new(ctx.config().clone()),
        system_prompt: ctx.system_prompt().into(),
        reasoner: ctx.reasoner(),
        observer: Arc::new(HubObserver { hub: runner.events.clone(), agent: ctx.id().clone() }),
        policy: None,
        reasoner_calls: None,
        // The capsule's tool calls go through the agent's own path: its capabilities, its
        // audit, its journal, each recorded under the run so a resumed run does not repeat it.
        tools: Some(ctx.tool_path()),
    };
    let executor = runner.executor.clone();
    let key = format!("{}#{}#kind", subtask.key(), subtask.attempt);
    let effect = async move {
        let response = executor
            .execute(request, cx)
            .await
            .map_err(|e| AgentError::NotAllowed(e.to_string()))?;
        Ok(output_of(&response))
    };
    let idempotent = known.idempotent() || subtask.step.idempotent;
    let output = match ctx.call_effect_once(&key, &call, idempotent, effect).await {
        Ok(output) => output,
        Err(AgentError::Tool(ToolError::Interrupted { partial, .. })) => {
            return Ok(KindEnd::Interrupted { partial });
        }
        Err(error) => return Err(error),
    };
    let response: RunResponse = serde_json::from_value(output.data.clone()).map_err(|e| {
        AgentError::NotAllowed(format!(
            "the recorded response of the `{kind}` run cannot be read: {e}"
        ))
    })?;
    if response.status == RunState::Blocked {
        let missing = response
            .failure
            .as_ref()
            .map_or_else(|| "an input it was not given".to_owned(), |f| f.reason.clone());
        return Ok(KindEnd::Blocked { missing });
    }
    Ok(KindEnd::Ran(Box::new(response)))
}

/// The recorded output of a run: the response as data, a line as output.
fn output_of(response: &RunResponse) -> ToolOutput {
    let output = match (&response.status, &response.failure) {
        (RunState::Completed, _) => response.primary_output.clone(),
        (status, Some(failure)) => format!("{status}: {failure}"),
        (status, None) => status.to_string(),
    };
    ToolOutput {
        success: response.success(),
        output,
        data: serde_json::to_value(response).unwrap_or(serde_json::Value::Null),
    }
}

/// Audits the structured result of `subtask`'s run once per subtask and attempt (what
/// `strata inspect RUN results` reads); a turn run again after a crash does not record it
/// twice. Trusted: the kind's own code wrote what it reports.
pub(crate) async fn record_result(
    ctx: &mut AgentContext,
    subtask: &Subtask,
    result: &AgentResult,
) -> Result<(), AgentError> {
    let key = format!("{}/{}#{}#results", ctx.id(), subtask.key(), subtask.attempt);
    let state = ctx.deps().state.clone();
    if matches!(state.tool(&key).await?, Some(Some(_))) {
        return Ok(());
    }
    ctx.audit(agent_core::AuditEvent::Result {
        task: subtask.key(),
        result: result.clone(),
        trusted: true,
    })
    .await?;
    let output = ToolOutput {
        success: true,
        output: serde_json::to_string(result).unwrap_or_default(),
        data: serde_json::Value::Null,
    };
    state.record_tool(&key, &output).await?;
    Ok(())
}

/// The structured result a completed or failed run gives the lead.
pub(crate) fn result_of(response: &RunResponse) -> AgentResult {
    let mut known_issues = Vec::new();
    if let Some(needs) = &response.needs_model {
        known_issues.push(format!("needs a model: {needs}"));
    }
    if let Some(failure) = &response.failure {
        known_issues.push(failure.to_string());
    }
    known_issues.extend(response.warnings.iter().cloned());
    let status = match (response.success(), &response.needs_model) {
        (true, None) => ResultStatus::Success,
        (true, Some(_)) => ResultStatus::Partial,
        (false, _) => ResultStatus::Failure,
    };
    let summary = if response.success() {
        response.primary_output.clone()
    } else {
        response.failure.as_ref().map_or_else(|| response.status.to_string(), ToString::to_string)
    };
    AgentResult { status, summary, artifacts: response.artifacts.clone(), known_issues }
}
