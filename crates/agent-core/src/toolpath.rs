//! An agent's tool path: every tool call an agent makes, whoever makes it for it (its layer's
//! code, an executor kind's capsule, an OODA loop), goes through here. The agent's capabilities
//! are checked (a refusal is audited as `Denied`), the call is audited as a `ToolCall`, its
//! large strings are stored once, and a call with side effects is journaled and recorded under
//! a key so that it runs at most once across crashes ([`ToolPath::call_once`]).
//!
//! [`AgentContext`](crate::AgentContext) calls tools through this path; a [`ToolPath`] is the
//! same path as an owned handle, for work that runs outside the context's borrow (an executor
//! kind's run in a task of its own).

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use agent_state::{Action, AgentConfig, AgentId, Timestamp};
use tracing::Instrument as _;

use crate::agent::{AgentDeps, store_outcome};
use crate::audit::AuditEvent;
use crate::error::AgentError;
use crate::reasoner::ToolCall;
use crate::tools::{Recovery, ToolError, ToolOutput};

/// An agent's tool path as an owned handle ([`AgentContext::tool_path`](crate::AgentContext::tool_path)):
/// the capability check, the per-call audit record, the tool journal and exactly-once on
/// resume, the same as the agent's own calls. Cheap to clone.
#[derive(Clone)]
pub struct ToolPath {
    config: Arc<AgentConfig>,
    deps: Arc<AgentDeps>,
    in_flight: Option<Arc<AtomicUsize>>,
}

impl std::fmt::Debug for ToolPath {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ToolPath").field("agent", &self.config.id).finish_non_exhaustive()
    }
}

impl ToolPath {
    /// The tool path of `config`'s agent on `deps`, outside a team's heartbeat (no turn
    /// timeout watches its calls): for an agent that runs alone, such as `strata exec`'s.
    pub fn new(config: AgentConfig, deps: Arc<AgentDeps>) -> Self {
        Self { config: Arc::new(config), deps, in_flight: None }
    }

    pub(crate) fn of_context(
        config: &AgentConfig,
        deps: &Arc<AgentDeps>,
        in_flight: Option<&Arc<AtomicUsize>>,
    ) -> Self {
        Self { config: Arc::new(config.clone()), deps: deps.clone(), in_flight: in_flight.cloned() }
    }

    /// The agent whose path it is.
    pub fn agent(&self) -> &AgentConfig {
        &self.config
    }

    /// The services its calls use (tools, workspace, audit log, state store).
    pub fn deps(&self) -> &Arc<AgentDeps> {
        &self.deps
    }

    /// Calls a tool once, without a key: capability check, audit
    /// ([`AgentContext::call_tool`](crate::AgentContext::call_tool)).
    pub async fn call(&self, call: &ToolCall) -> Result<ToolOutput, AgentError> {
        self.caller().call_tool(call).await
    }

    /// Calls a tool at most once under `key` across crashes, as
    /// [`AgentContext::call_step_tool`](crate::AgentContext::call_step_tool) does (`idempotent`:
    /// an interrupted call may run again). A tool without side effects simply runs.
    pub async fn call_once(
        &self,
        key: &str,
        call: &ToolCall,
        idempotent: bool,
    ) -> Result<ToolOutput, AgentError> {
        self.caller().call_step_tool(key, call, idempotent).await
    }

    fn caller(&self) -> Caller<'_> {
        Caller { config: &self.config, deps: &self.deps, in_flight: self.in_flight.as_ref() }
    }
}

/// The tool path borrowed from an agent's context or a [`ToolPath`].
pub(crate) struct Caller<'a> {
    pub(crate) config: &'a AgentConfig,
    pub(crate) deps: &'a AgentDeps,
    pub(crate) in_flight: Option<&'a Arc<AtomicUsize>>,
}

impl Caller<'_> {
    fn id(&self) -> &AgentId {
        &self.config.id
    }

    fn now(&self) -> Timestamp {
        self.deps.clock.now()
    }

    async fn audit(&self, event: AuditEvent) -> Result<(), AgentError> {
        self.deps.audit.append(self.id(), self.now(), event).await?;
        Ok(())
    }

    /// See [`AgentContext::require`](crate::AgentContext::require).
    pub(crate) async fn require(&self, action: Action, target: &str) -> Result<(), AgentError> {
        let capability = action.required_capability();
        if self.config.capabilities.contains(&capability) {
            return Ok(());
        }
        let error = AgentError::MissingCapability { agent: self.id().clone(), action, capability };
        tracing::warn!(agent = %self.id(), %action, %capability, "missing capability, act refused");
        let action =
            if target.is_empty() { action.to_string() } else { format!("{action} {target}") };
        self.audit(AuditEvent::Denied { action, error: error.to_string() }).await?;
        Err(error)
    }

    /// Checks the actions a call of `tool` performs: [`Action::CallTool`], and what
    /// [`Action::of_tool`] adds (writing the workspace needs `code_gen`).
    async fn require_tool(&self, tool: &str) -> Result<(), AgentError> {
        self.require(Action::CallTool, tool).await?;
        match Action::of_tool(tool) {
            Some(action) => self.require(action, tool).await,
            None => Ok(()),
        }
    }

    /// See [`AgentContext::call_tool`](crate::AgentContext::call_tool).
    pub(crate) async fn call_tool(&self, call: &ToolCall) -> Result<ToolOutput, AgentError> {
        let span = crate::otel::tool(self.id(), &call.tool);
        let result = self.run_tool(call).instrument(span.clone()).await;
        crate::otel::tool_done(&span, &result);
        result
    }

    /// See [`AgentContext::call_step_tool`](crate::AgentContext::call_step_tool).
    pub(crate) async fn call_step_tool(
        &self,
        key: &str,
        call: &ToolCall,
        idempotent: bool,
    ) -> Result<ToolOutput, AgentError> {
        let span = crate::otel::tool(self.id(), &call.tool);
        let result = self.step_tool(key, call, idempotent).instrument(span.clone()).await;
        crate::otel::tool_done(&span, &result);
        result
    }

    async fn step_tool(
        &self,
        key: &str,
        call: &ToolCall,
        idempotent: bool,
    ) -> Result<ToolOutput, AgentError> {
        self.require_tool(&call.tool).await?;
        let Some(tool) = self.deps.tools.get(&call.tool).filter(|t| t.has_side_effects()) else {
            return self.run_tool(call).await;
        };
        // Outside a heartbeat no timeout watches the call, so there is nothing to mark.
        let _in_flight = self.in_flight.map(EffectInFlight::mark);
        let (call, args) = self.prepare_call(call).await?;
        let call = &call;
        let rerun_allowed = idempotent || tool.idempotent();
        let key = format!("{}/{key}", self.id());
        match self.deps.state.tool(&key).await? {
            Some(Some(recorded)) => return self.recorded(call, recorded).await,
            Some(None) => {
                if let Some(adopted) = self.resume(call, &args, &key, rerun_allowed).await? {
                    return Ok(adopted);
                }
            }
            None => {
                self.deps.tools.discard_journal(&self.deps.workspace, &key).await?;
                self.deps.state.begin_tool(&key).await?;
            }
        }
        let result = self.deps.tools.call_journaled(&self.deps.workspace, &call.tool, args, &key);
        let supervisor = self.config.supervisor.as_ref();
        let result =
            crate::timed::tool_call(self.deps, self.id(), supervisor, &call.tool, result).await;
        let (success, summary) = match &result {
            Ok(out) => (out.success, shorten(&out.output)),
            Err(e) => (false, shorten(&e.to_string())),
        };
        self.store_result(call, &key, &result).await?;
        self.discard_journal(&key).await;
        self.audit_tool(call, success, summary).await?;
        Ok(result?)
    }

    /// A call under `key` that was begun before a crash and never finished: the tool is asked
    /// what became of it. Its result when it completed (adopted, not run again); `None` when
    /// it may run now (it never started, or running it again is allowed); an error when its
    /// outcome is unknown and it must not be sent again.
    async fn resume(
        &self,
        call: &ToolCall,
        args: &serde_json::Value,
        key: &str,
        rerun_allowed: bool,
    ) -> Result<Option<ToolOutput>, AgentError> {
        let recovery =
            self.deps.tools.recover(&self.deps.workspace, &call.tool, args.clone(), key).await;
        match recovery {
            Ok(Recovery::Completed(output)) => {
                self.deps.state.record_tool(key, &output).await?;
                self.discard_journal(key).await;
                self.audit_tool(
                    call,
                    output.success,
                    format!(
                        "completed before a crash; result adopted, not run again: {}",
                        shorten(&output.output)
                    ),
                )
                .await?;
                Ok(Some(output))
            }
            Ok(Recovery::NotStarted) => Ok(None),
            Ok(Recovery::Interrupted(_) | Recovery::Unknown) | Err(_) if rerun_allowed => {
                self.audit_tool(
                    call,
                    false,
                    "interrupted by a crash; idempotent, so it runs again".into(),
                )
                .await?;
                self.discard_journal(key).await;
                Ok(None)
            }
            other => {
                let partial = match other {
                    Ok(Recovery::Interrupted(output)) => output,
                    _ => ToolOutput {
                        success: false,
                        output: String::new(),
                        data: serde_json::Value::Null,
                    },
                };
                Err(self.interrupted_by_crash(call, key, partial).await?)
            }
        }
    }

    /// A call that a crash interrupted after it was started and that must not be sent again:
    /// recorded under `key` as interrupted (with what it left, `partial`) and audited; the
    /// error it ends with.
    async fn interrupted_by_crash(
        &self,
        call: &ToolCall,
        key: &str,
        mut partial: ToolOutput,
    ) -> Result<AgentError, AgentError> {
        partial.success = false;
        if !partial.data.is_object() {
            partial.data = serde_json::json!({});
        }
        partial.data["interrupted"] = serde_json::Value::Bool(true);
        self.deps.state.record_tool(key, &partial).await?;
        self.discard_journal(key).await;
        self.audit(AuditEvent::ToolOutcomeUnknown {
            tool: call.tool.clone(),
            args: call.args.clone(),
            reason: "interrupted by a crash after it was started; not idempotent, \
                     so not sent again"
                .into(),
            cancelled: false,
        })
        .await?;
        let error = ToolError::Interrupted { tool: call.tool.clone(), partial: partial.output };
        self.audit_tool(call, false, shorten(&error.to_string())).await?;
        Ok(error.into())
    }

    /// Stores the outcome of a journaled call under `key`: a success is recorded; a call whose
    /// outcome is unknown is recorded as interrupted (and audited so), so that nothing under
    /// `key` sends it again; a failure is forgotten, so that the key may run it again.
    async fn store_result(
        &self,
        call: &ToolCall,
        key: &str,
        result: &Result<ToolOutput, ToolError>,
    ) -> Result<(), AgentError> {
        let state = &self.deps.state;
        match result {
            Ok(output) if output.success => {
                store_outcome(key, || state.record_tool(key, output)).await?;
            }
            // Past the tool limit while it may still run where it is served: recorded as
            // unknown, so that nothing under `key` sends it again.
            Err(error @ ToolError::OutcomeUnknown { after_ms, cancelled, .. }) => {
                let unknown = ToolOutput {
                    success: false,
                    output: error.to_string(),
                    data: serde_json::json!({
                        "interrupted": true,
                        "outcome_unknown": true,
                        "after_ms": after_ms,
                        "cancelled": cancelled,
                    }),
                };
                store_outcome(key, || state.record_tool(key, &unknown)).await?;
                let reason = format!("no answer within the tool limit ({after_ms} ms)");
                self.audit_outcome_unknown(call, reason, *cancelled).await?;
            }
            // It ran, but its end was not recorded (a shell command whose runner left no exit
            // code): its outcome is unknown too, and nothing under `key` runs it again.
            Err(error @ ToolError::Interrupted { partial, .. }) => {
                let unknown = ToolOutput {
                    success: false,
                    output: partial.clone(),
                    // Replayed as this same interruption (not as a call past its limit).
                    data: serde_json::json!({ "interrupted": true }),
                };
                store_outcome(key, || state.record_tool(key, &unknown)).await?;
                self.audit_outcome_unknown(call, shorten(&error.to_string()), false).await?;
            }
            _ => store_outcome(key, || state.forget_tool(key)).await?,
        }
        Ok(())
    }

    async fn audit_outcome_unknown(
        &self,
        call: &ToolCall,
        reason: String,
        cancelled: bool,
    ) -> Result<(), AgentError> {
        self.audit(AuditEvent::ToolOutcomeUnknown {
            tool: call.tool.clone(),
            args: call.args.clone(),
            reason,
            cancelled,
        })
        .await
    }

    /// See [`AgentContext::call_effect_once`](crate::AgentContext::call_effect_once).
    pub(crate) async fn call_effect_once<F>(
        &self,
        key: &str,
        call: &ToolCall,
        idempotent: bool,
        effect: F,
    ) -> Result<ToolOutput, AgentError>
    where
        F: std::future::Future<Output = Result<ToolOutput, AgentError>> + Send,
    {
        self.require_tool(&call.tool).await?;
        let _in_flight = self.in_flight.map(EffectInFlight::mark);
        // Audited with its large strings stored once, like a tool call.
        let (audited, _) = self.prepare_call(call).await?;
        let call = &audited;
        let key = format!("{}/{key}", self.id());
        let state = self.deps.state.clone();
        match state.tool(&key).await? {
            Some(Some(recorded)) => return self.recorded(call, recorded).await,
            Some(None) if !idempotent => {
                let partial = ToolOutput {
                    success: false,
                    output: String::new(),
                    data: serde_json::json!({ "interrupted": true }),
                };
                state.record_tool(&key, &partial).await?;
                let error =
                    ToolError::Interrupted { tool: call.tool.clone(), partial: String::new() };
                self.audit_tool(call, false, shorten(&error.to_string())).await?;
                return Err(error.into());
            }
            Some(None) => {
                self.audit_tool(
                    call,
                    false,
                    "interrupted by a crash; idempotent, so it runs again".into(),
                )
                .await?;
            }
            None => state.begin_tool(&key).await?,
        }
        // Progress of the turn while it runs (its own limits bound it), as a tool call is.
        let running =
            crate::progress::Section::tool(&call.tool, self.deps.workspace.tool_timeout());
        let result = effect.await;
        drop(running);
        match result {
            Ok(output) => {
                store_outcome(&key, || state.record_tool(&key, &output)).await?;
                self.audit_tool(call, output.success, shorten(&output.output)).await?;
                Ok(output)
            }
            Err(error) => {
                store_outcome(&key, || state.forget_tool(&key)).await?;
                self.audit_tool(call, false, shorten(&error.to_string())).await?;
                Err(error)
            }
        }
    }

    /// A call found recorded under its key: the recorded interruption as an error, or the
    /// recorded result, reused; audited either way, never run again.
    async fn recorded(
        &self,
        call: &ToolCall,
        recorded: ToolOutput,
    ) -> Result<ToolOutput, AgentError> {
        if is_interrupted(&recorded)
            && recorded.data.get("outcome_unknown").and_then(serde_json::Value::as_bool)
                == Some(true)
        {
            let field = |name: &str| recorded.data.get(name);
            let error = ToolError::OutcomeUnknown {
                tool: call.tool.clone(),
                after_ms: field("after_ms").and_then(serde_json::Value::as_u64).unwrap_or(0),
                cancelled: field("cancelled").and_then(serde_json::Value::as_bool) == Some(true),
            };
            self.audit_tool(call, false, shorten(&error.to_string())).await?;
            return Err(error.into());
        }
        if is_interrupted(&recorded) {
            let error =
                ToolError::Interrupted { tool: call.tool.clone(), partial: recorded.output };
            self.audit_tool(call, false, shorten(&error.to_string())).await?;
            return Err(error.into());
        }
        let summary =
            format!("recorded result reused, tool not run again: {}", shorten(&recorded.output));
        self.audit_tool(call, recorded.success, summary).await?;
        Ok(recorded)
    }

    /// The call as it is audited and recorded (its large strings stored once and referenced)
    /// and the arguments the tool runs with (every reference resolved).
    async fn prepare_call(
        &self,
        call: &ToolCall,
    ) -> Result<(ToolCall, serde_json::Value), AgentError> {
        let state = self.deps.state.as_ref();
        let mut audited = call.clone();
        crate::blob::externalize(&mut audited.args, state, crate::blob::BLOB_THRESHOLD).await?;
        let args = crate::blob::resolve(&audited.args, state).await?;
        Ok((audited, args))
    }

    /// Removes a call's crash journal once its outcome is stored. A journal that cannot be
    /// removed is only clutter (the next call under the key clears it first), so that is
    /// logged, not failed.
    async fn discard_journal(&self, key: &str) {
        if let Err(error) = self.deps.tools.discard_journal(&self.deps.workspace, key).await {
            tracing::warn!(agent = %self.id(), key, %error, "could not remove a tool journal");
        }
    }

    async fn audit_tool(
        &self,
        call: &ToolCall,
        success: bool,
        summary: String,
    ) -> Result<(), AgentError> {
        self.audit(AuditEvent::ToolCall {
            tool: call.tool.clone(),
            args: call.args.clone(),
            success,
            summary,
        })
        .await
    }

    async fn run_tool(&self, call: &ToolCall) -> Result<ToolOutput, AgentError> {
        self.require_tool(&call.tool).await?;
        let (call, args) = self.prepare_call(call).await?;
        let call = &call;
        let result = self.deps.tools.call(&self.deps.workspace, &call.tool, args);
        let supervisor = self.config.supervisor.as_ref();
        let result =
            crate::timed::tool_call(self.deps, self.id(), supervisor, &call.tool, result).await;
        let (success, summary) = match &result {
            Ok(out) => (out.success, shorten(&out.output)),
            Err(e) => (false, shorten(&e.to_string())),
        };
        self.audit(AuditEvent::ToolCall {
            tool: call.tool.clone(),
            args: call.args.clone(),
            success,
            summary,
        })
        .await?;
        Ok(result?)
    }
}

/// Whether a recorded tool result is the record of an interrupted call.
pub(crate) fn is_interrupted(output: &ToolOutput) -> bool {
    !output.success
        && output.data.get("interrupted").and_then(serde_json::Value::as_bool) == Some(true)
}

/// Marks that a side-effecting tool call is running, for as long as it lives. A count, not a
/// flag: an executor kind's run is one such call, and the tool calls its capsule makes through
/// the same path are more, inside it.
struct EffectInFlight(Arc<AtomicUsize>);

impl EffectInFlight {
    fn mark(flag: &Arc<AtomicUsize>) -> Self {
        flag.fetch_add(1, Ordering::SeqCst);
        Self(flag.clone())
    }
}

impl Drop for EffectInFlight {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::SeqCst);
    }
}

/// At most 512 bytes of `s` (`…` when cut): what an audit record keeps of a tool's output.
fn shorten(s: &str) -> String {
    agent_state::shorten_bytes(s, 512)
}
