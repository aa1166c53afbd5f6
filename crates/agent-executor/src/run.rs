//! The executor: runs one request through its lifecycle, with retries, soft and hard timeouts,
//! progress, and a capsule of its own, and batches of requests.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use agent_core::{Clock, Reasoner, TokioClock, ToolPath};
use agent_state::{
    AfterFailure, AgentConfig, AgentLayer, Artifact, FailureKind, RetryPolicy, RunFailure,
    RunLifecycle, RunState, RunTransition, Timestamp,
};
use serde::{Deserialize, Serialize};
use tokio::time::Instant;

use crate::capsule::Capsule;
use crate::env::ExecEnv;
use crate::events::{NoObserver, RunObserver};
use crate::kind::{Kind, KindError, KindOutput, Registry};
use crate::request::{ExecError, MAX_INPUTS_BYTES, MAX_OBJECTIVE_BYTES, RunRequest};
use agent_state::RunEvent;

/// Who a run works for and how its caller hears of it.
#[derive(Clone)]
pub struct RunContext {
    /// The agent: in a team, the executor running the subtask.
    pub agent: Arc<AgentConfig>,
    /// Its system prompt, given to the reasoner.
    pub system_prompt: Arc<str>,
    /// Its reasoner.
    pub reasoner: Arc<dyn Reasoner>,
    /// Receives the run's events.
    pub observer: Arc<dyn RunObserver>,
    /// The agent's own retry policy, over the kind's and the executor's.
    pub policy: Option<RetryPolicy>,
    /// The run's share of the reasoning budget: at most this many reasoner calls (`None`: no
    /// limit of its own; the team's budget still applies).
    pub reasoner_calls: Option<u32>,
    /// The agent's tool path, which the capsule's tool calls go through
    /// ([`Capsule::call_tool`]): in a team, the agent's own
    /// ([`AgentContext::tool_path`](agent_core::AgentContext::tool_path)). `None`: a path of
    /// `agent` on the executor's workspace and tools, its audit log and state store in memory.
    pub tools: Option<ToolPath>,
}

impl std::fmt::Debug for RunContext {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RunContext")
            .field("agent", &self.agent.id)
            .field("reasoner", &self.reasoner.name())
            .field("policy", &self.policy)
            .field("reasoner_calls", &self.reasoner_calls)
            .finish_non_exhaustive()
    }
}

impl RunContext {
    /// A context for a run outside a team: an agent named after the kind (`exec-<kind>`, a
    /// bottom-layer executor) with `reasoner`, and no observer.
    pub fn standalone(kind: &str, reasoner: Arc<dyn Reasoner>) -> Self {
        let id = format!("exec-{}", kind.replace('_', "-"));
        let agent = AgentConfig::new(id.as_str(), kind, AgentLayer::Bottom);
        let system_prompt = format!(
            "You are {id}, a {kind} run by the Strata executor. Do what the objective says and \
             nothing else."
        );
        Self {
            agent: Arc::new(agent),
            system_prompt: system_prompt.into(),
            reasoner,
            observer: Arc::new(NoObserver),
            policy: None,
            reasoner_calls: None,
            tools: None,
        }
    }

    /// The same context with `observer`.
    #[must_use]
    pub fn with_observer(mut self, observer: Arc<dyn RunObserver>) -> Self {
        self.observer = observer;
        self
    }

    /// The same context with the agent's tool path `tools` (see [`RunContext::tools`]).
    #[must_use]
    pub fn with_tools(mut self, tools: ToolPath) -> Self {
        self.tools = Some(tools);
        self
    }

    /// The same context with the agent's own retry policy.
    #[must_use]
    pub fn with_policy(mut self, policy: RetryPolicy) -> Self {
        self.policy = Some(policy);
        self
    }
}

/// How long a run took.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Timings {
    /// When it started.
    pub started_at: Timestamp,
    /// When it ended.
    pub finished_at: Timestamp,
    /// From start to end, retries and waits included, in milliseconds.
    pub duration_ms: u64,
    /// Each attempt's own duration, in milliseconds.
    pub attempts_ms: Vec<u64>,
}

/// One run's result envelope.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct RunResponse {
    /// The run.
    pub run_id: agent_state::RunId,
    /// Its kind.
    pub kind: String,
    /// How it ended: completed, blocked or failed.
    pub status: RunState,
    /// The main result (empty unless completed).
    pub primary_output: String,
    /// 0..1 (0 unless completed).
    pub confidence: f64,
    /// Files written or consulted.
    pub artifacts: Vec<Artifact>,
    /// The kind's structured data.
    pub data: serde_json::Value,
    /// What needs a model and was not done, if anything.
    pub needs_model: Option<String>,
    /// Why it is blocked or failed.
    pub failure: Option<RunFailure>,
    /// Soft timeouts and other things the caller should know.
    pub warnings: Vec<String>,
    /// Attempts made.
    pub attempts: u32,
    /// Retries made (attempts after the first).
    pub retries: u32,
    /// Every state change, in order.
    pub transitions: Vec<RunTransition>,
    /// Timings.
    pub timings: Timings,
}

impl RunResponse {
    /// Whether the run completed.
    pub fn success(&self) -> bool {
        self.status == RunState::Completed
    }
}

/// Runs requests on the kinds of its [`Registry`].
///
/// ```
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// use std::sync::Arc;
/// use agent_core::RuleBasedReasoner;
/// use agent_executor::{Executor, FnKind, KindOutput, Registry, RunContext, RunRequest};
///
/// let mut registry = Registry::new();
/// registry.register(FnKind::new("echo", "says the objective back", |req, capsule| {
///     Box::pin(async move {
///         capsule.progress(50, "echoing");
///         Ok(KindOutput::new(req.objective.clone(), 1.0))
///     })
/// }))?;
/// let executor = Executor::new(registry);
/// let cx = RunContext::standalone("echo", Arc::new(RuleBasedReasoner::new()));
/// let response = executor.execute(RunRequest::new("echo", "hello"), cx).await?;
/// assert!(response.success());
/// assert_eq!(response.primary_output, "hello");
/// # Ok(())
/// # }
/// ```
#[derive(Clone)]
pub struct Executor {
    registry: Arc<Registry>,
    env: Arc<ExecEnv>,
    policy: RetryPolicy,
    kind_policies: BTreeMap<String, RetryPolicy>,
    agent_policies: BTreeMap<String, RetryPolicy>,
    clock: Arc<dyn Clock>,
}

impl std::fmt::Debug for Executor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Executor")
            .field("kinds", &self.registry)
            .field("policy", &self.policy)
            .field("kind_policies", &self.kind_policies)
            .field("agent_policies", &self.agent_policies)
            .finish_non_exhaustive()
    }
}

impl Executor {
    /// An executor on `registry`, with the default retry policy
    /// ([`RetryPolicy::executor_default`]), no workspace and no HTTP hosts.
    pub fn new(registry: Registry) -> Self {
        Self {
            registry: Arc::new(registry),
            env: Arc::new(ExecEnv::default()),
            policy: RetryPolicy::executor_default(),
            kind_policies: BTreeMap::new(),
            agent_policies: BTreeMap::new(),
            clock: Arc::new(TokioClock::new()),
        }
    }

    /// The same executor in `env`.
    #[must_use]
    pub fn with_env(mut self, env: ExecEnv) -> Self {
        self.env = Arc::new(env);
        self
    }

    /// The same executor with `policy` as its default.
    #[must_use]
    pub fn with_policy(mut self, policy: RetryPolicy) -> Self {
        self.policy = policy;
        self
    }

    /// The same executor with `policy` for runs of `kind` (over the kind's own).
    #[must_use]
    pub fn with_kind_policy(mut self, kind: impl Into<String>, policy: RetryPolicy) -> Self {
        self.kind_policies.insert(kind.into(), policy);
        self
    }

    /// The same executor with `policy` for runs made for the agent `agent` (over the kind's).
    #[must_use]
    pub fn with_agent_policy(mut self, agent: impl Into<String>, policy: RetryPolicy) -> Self {
        self.agent_policies.insert(agent.into(), policy);
        self
    }

    /// The same executor reading time from `clock`.
    #[must_use]
    pub fn with_clock(mut self, clock: Arc<dyn Clock>) -> Self {
        self.clock = clock;
        self
    }

    /// The kinds.
    pub fn registry(&self) -> &Registry {
        &self.registry
    }

    /// The environment.
    pub fn env(&self) -> &ExecEnv {
        &self.env
    }

    /// The policy a run of `kind` for `cx` gets: the context's, else the executor's for the
    /// agent ([`with_agent_policy`](Self::with_agent_policy)), else the executor's for the kind,
    /// else the kind's own, else the executor's default.
    pub fn policy_for(&self, kind: &str, cx: &RunContext) -> RetryPolicy {
        cx.policy
            .clone()
            .or_else(|| self.agent_policies.get(cx.agent.id.as_str()).cloned())
            .or_else(|| self.kind_policies.get(kind).cloned())
            .or_else(|| self.registry.get(kind).and_then(|k| k.policy()))
            .unwrap_or_else(|| self.policy.clone())
    }

    /// Checks `request` without running it: the kind exists, the objective is not empty nor
    /// too long, the inputs are an object within the limit (the run id is valid: it is a
    /// [`RunId`](agent_state::RunId)).
    pub fn check(&self, request: &RunRequest) -> Result<Arc<dyn Kind>, ExecError> {
        let kind =
            self.registry.get(&request.kind).cloned().ok_or_else(|| ExecError::UnknownKind {
                kind: request.kind.clone(),
                known: self.registry.names().collect::<Vec<_>>().join(", "),
            })?;
        if request.objective.trim().is_empty() {
            return Err(ExecError::EmptyObjective { kind: request.kind.clone() });
        }
        if request.objective.len() > MAX_OBJECTIVE_BYTES {
            return Err(ExecError::ObjectiveTooLong {
                bytes: request.objective.len(),
                limit: MAX_OBJECTIVE_BYTES,
            });
        }
        let bad = |problem: String| ExecError::BadInputs { kind: request.kind.clone(), problem };
        match &request.inputs {
            serde_json::Value::Null => {}
            serde_json::Value::Object(_) => {
                let bytes = serde_json::to_vec(&request.inputs).map_or(usize::MAX, |v| v.len());
                if bytes > MAX_INPUTS_BYTES {
                    return Err(bad(format!(
                        "{bytes} bytes, over the limit of {MAX_INPUTS_BYTES}"
                    )));
                }
                let schema = kind.inputs_schema();
                let problems = agent_core::tools::validate(&schema, &request.inputs);
                if !problems.is_empty() {
                    return Err(bad(problems.join("; ")));
                }
            }
            other => {
                return Err(bad(format!("expected a JSON object, found {}", json_type(other))));
            }
        }
        Ok(kind)
    }

    /// Runs `request` to its end: completed, blocked or failed (the run lifecycle and retry policy
    /// of docs/concepts.md#executor-kinds). A request that [`check`](Self::check) refuses is an
    /// [`ExecError`] and nothing runs; every other outcome, a handler's panic included, is a
    /// [`RunResponse`].
    ///
    /// - A transient failure is retried as the policy says, after its backoff.
    /// - A permanent failure fails the run at once; a missing input blocks it.
    /// - Past the soft timeout a [`RunEvent::SoftTimeout`] is sent and a warning kept; at the
    ///   hard timeout (counted from the start, retries included) the attempt is cancelled
    ///   (its capsule dropped, which kills the processes it started) and the run fails with
    ///   [`FailureKind::HardTimeout`].
    pub async fn execute(
        &self,
        request: RunRequest,
        cx: RunContext,
    ) -> Result<RunResponse, ExecError> {
        let kind = self.check(&request)?;
        let policy = self.policy_for(&request.kind, &cx);
        Ok(self.run_checked(kind, Arc::new(request), cx, policy).await)
    }

    async fn run_checked(
        &self,
        kind: Arc<dyn Kind>,
        request: Arc<RunRequest>,
        cx: RunContext,
        policy: RetryPolicy,
    ) -> RunResponse {
        let started = Instant::now();
        let started_at = self.clock.now();
        let mut run = Run::new(request.clone(), &cx, self.clock.clone(), policy, started);
        let mut capsule = Some(Capsule::new(&request.run_id, &request.kind, cx, self.env.clone()));
        let mut output = None;

        let change = run.life.start(self.clock.now());
        run.record(change);
        loop {
            let Some(current) = capsule.take() else { break };
            let joined = run.attempt(&kind, current).await;
            let at = self.clock.now();
            let failure = match joined {
                None => {
                    run.abandon(at, hard_timeout(&run.policy));
                    break;
                }
                Some(Err(join)) => handler_failure(&request.kind, join),
                Some(Ok((back, Ok(out)))) => {
                    capsule = Some(back);
                    let change = run.life.complete(at);
                    run.record(change);
                    output = Some(out);
                    break;
                }
                Some(Ok((back, Err(KindError(failure))))) => {
                    capsule = Some(back);
                    if failure.kind == FailureKind::MissingInput {
                        let change = run.life.block(at, &failure.reason);
                        run.record(change);
                        break;
                    }
                    failure
                }
            };
            if !run.retry_after(at, failure, capsule.is_some()).await {
                break;
            }
        }
        drop(capsule);
        let finished_at = self.clock.now();
        run.response(output, started_at, finished_at, millis(started.elapsed()))
    }

    /// Runs `requests` at most `concurrency` at a time (at least 1); the results come back in
    /// request order, each the run's response or why it was refused.
    pub async fn execute_parallel(
        &self,
        requests: Vec<RunRequest>,
        cx: RunContext,
        concurrency: usize,
    ) -> Vec<Result<RunResponse, ExecError>> {
        let limit = Arc::new(tokio::sync::Semaphore::new(concurrency.max(1)));
        let mut tasks = Vec::with_capacity(requests.len());
        for request in requests {
            let this = self.clone();
            let cx = cx.clone();
            let limit = limit.clone();
            tasks.push(tokio::spawn(async move {
                let _permit = limit.acquire_owned().await;
                this.execute(request, cx).await
            }));
        }
        let mut results = Vec::with_capacity(tasks.len());
        for task in tasks {
            results.push(match task.await {
                Ok(result) => result,
                // `execute` does not panic (handlers run in tasks of their own); a cancelled
                // runtime is the only way here.
                Err(e) => Err(ExecError::Aborted { reason: e.to_string() }),
            });
        }
        results
    }

    /// Runs `requests` one after another and stops at the first that does not complete (a
    /// refused request, a failed or blocked run); the ones after it are
    /// [`BatchItem::Skipped`]. The results are in request order.
    pub async fn execute_sequential(
        &self,
        requests: Vec<RunRequest>,
        cx: RunContext,
    ) -> Vec<BatchItem> {
        let mut results = Vec::with_capacity(requests.len());
        let mut stopped = false;
        for request in requests {
            if stopped {
                results.push(BatchItem::Skipped { run_id: request.run_id });
                continue;
            }
            let item = match self.execute(request, cx.clone()).await {
                Ok(response) => BatchItem::Ran(Box::new(response)),
                Err(error) => BatchItem::Refused(error),
            };
            stopped = !matches!(&item, BatchItem::Ran(r) if r.success());
            results.push(item);
        }
        results
    }
}

/// One request's fate in a sequential batch.
#[derive(Clone, Debug, PartialEq)]
pub enum BatchItem {
    /// It ran; see its status.
    Ran(Box<RunResponse>),
    /// It was refused before running.
    Refused(ExecError),
    /// An earlier request did not complete, so it was not run.
    Skipped {
        /// The request's run id.
        run_id: agent_state::RunId,
    },
}

/// The run under way: its lifecycle, its deadlines, and what the response will carry.
struct Run {
    request: Arc<RunRequest>,
    life: RunLifecycle,
    transitions: Vec<RunTransition>,
    warnings: Vec<String>,
    attempts_ms: Vec<u64>,
    observer: Arc<dyn RunObserver>,
    clock: Arc<dyn Clock>,
    policy: RetryPolicy,
    /// When the run is cancelled, counted from its start, retries included.
    hard_at: Instant,
    /// When the soft timeout is told, until it has been (`None` after, or when it is not
    /// before the hard timeout).
    soft_at: Option<Instant>,
}

/// How an attempt's task ended: `None` when the hard timeout cancelled it, else the task's
/// join result (an error when the handler panicked), with the capsule it gives back.
type Joined = Option<Result<(Capsule, Result<KindOutput, KindError>), tokio::task::JoinError>>;

impl Run {
    fn new(
        request: Arc<RunRequest>,
        cx: &RunContext,
        clock: Arc<dyn Clock>,
        policy: RetryPolicy,
        started: Instant,
    ) -> Self {
        let hard_at = started + Duration::from_millis(policy.hard_timeout_ms);
        let soft_at = Some(started + Duration::from_millis(policy.soft_timeout_ms))
            .filter(|_| policy.soft_timeout_ms < policy.hard_timeout_ms);
        Self {
            request,
            life: RunLifecycle::new(),
            transitions: Vec::new(),
            warnings: Vec::new(),
            attempts_ms: Vec::new(),
            observer: cx.observer.clone(),
            clock,
            policy,
            hard_at,
            soft_at,
        }
    }

    /// Runs one attempt of `kind` in a task of its own with `capsule`, telling the soft
    /// timeout if it passes meanwhile and cancelling the task at the hard timeout.
    async fn attempt(&mut self, kind: &Arc<dyn Kind>, mut capsule: Capsule) -> Joined {
        capsule.begin_attempt(self.life.attempts());
        let attempt_started = Instant::now();
        let mut task = {
            let kind = kind.clone();
            let request = self.request.clone();
            tokio::spawn(async move {
                let result = kind.run(&request, &mut capsule).await;
                (capsule, result)
            })
        };
        let abort = task.abort_handle();
        let joined = loop {
            tokio::select! {
                // In order (the run's end first), not tokio's random choice: reproducible.
                biased;
                joined = &mut task => break Some(joined),
                () = sleep_until_opt(self.soft_at) => {
                    self.soft_at = None;
                    self.soft_timeout(self.policy.soft_timeout_ms);
                }
                () = tokio::time::sleep_until(self.hard_at) => {
                    abort.abort();
                    // The aborted task drops its capsule, killing its processes; a
                    // handler stuck in blocking code cannot be stopped, so it is not
                    // waited for long.
                    let _ = tokio::time::timeout(ABORT_GRACE, &mut task).await;
                    break None;
                }
            }
        };
        self.attempts_ms.push(millis(attempt_started.elapsed()));
        joined
    }

    /// Fails the attempt that ended at `at` with `failure` and, when the policy retries it and
    /// the capsule is still there (`capsule_kept`; a panic loses it), waits out the backoff
    /// and starts the retry. Whether there is a next attempt.
    async fn retry_after(
        &mut self,
        at: Timestamp,
        failure: RunFailure,
        capsule_kept: bool,
    ) -> bool {
        let after = match self.life.fail(at, failure.clone(), &self.policy) {
            Ok((transition, after)) => {
                self.record(Ok(transition));
                after
            }
            Err(e) => {
                self.record(Err(e));
                return false;
            }
        };
        let AfterFailure::Retry { retry, delay_ms } = after else { return false };
        if !capsule_kept {
            return false; // a panic lost the capsule; the failure is permanent anyway
        }
        self.observer.observe(&RunEvent::Retrying {
            run_id: self.request.run_id.clone(),
            kind: self.request.kind.clone(),
            retry,
            delay_ms,
            failure,
        });
        let wake = Instant::now() + Duration::from_millis(delay_ms);
        if wake >= self.hard_at {
            tokio::time::sleep_until(self.hard_at).await;
            self.abandon(self.clock.now(), hard_timeout(&self.policy));
            return false;
        }
        tokio::time::sleep_until(wake).await;
        if self.soft_at.is_some_and(|s| s <= Instant::now()) {
            self.soft_at = None;
            self.soft_timeout(self.policy.soft_timeout_ms);
        }
        let change = self.life.retry(self.clock.now());
        self.record(change);
        true
    }
    fn record(&mut self, change: Result<RunTransition, agent_state::RunTransitionError>) {
        match change {
            Ok(transition) => {
                self.observer.observe(&RunEvent::Transition {
                    run_id: self.request.run_id.clone(),
                    kind: self.request.kind.clone(),
                    transition: transition.clone(),
                });
                self.transitions.push(transition);
            }
            // The executor drives the table in its documented order; a refusal is a bug here,
            // kept visible instead of hidden.
            Err(error) => {
                tracing::error!(run = %self.request.run_id, %error, "executor run transition refused");
                self.warnings.push(format!("internal: {error}"));
            }
        }
    }

    fn abandon(&mut self, at: Timestamp, failure: RunFailure) {
        match self.life.abandon(at, failure) {
            Ok(Some(transition)) => self.record(Ok(transition)),
            Ok(None) => {}
            Err(error) => self.record(Err(error)),
        }
    }

    fn soft_timeout(&mut self, after_ms: u64) {
        tracing::warn!(run = %self.request.run_id, kind = %self.request.kind, after_ms, "run passed its soft timeout");
        self.warnings.push(format!("passed the soft timeout of {after_ms} ms"));
        self.observer.observe(&RunEvent::SoftTimeout {
            run_id: self.request.run_id.clone(),
            kind: self.request.kind.clone(),
            after_ms,
        });
    }

    fn response(
        self,
        output: Option<KindOutput>,
        started_at: Timestamp,
        finished_at: Timestamp,
        duration_ms: u64,
    ) -> RunResponse {
        let status = self.life.state();
        let failure =
            if status == RunState::Completed { None } else { self.life.last_failure().cloned() };
        let output = output.unwrap_or_default();
        RunResponse {
            run_id: self.request.run_id.clone(),
            kind: self.request.kind.clone(),
            status,
            primary_output: output.primary_output,
            confidence: if output.confidence.is_finite() {
                output.confidence.clamp(0.0, 1.0)
            } else {
                0.0
            },
            artifacts: output.artifacts,
            data: output.data,
            needs_model: output.needs_model,
            failure,
            warnings: self.warnings,
            attempts: self.life.attempts(),
            retries: self.life.retries(),
            transitions: self.transitions,
            timings: Timings {
                started_at,
                finished_at,
                duration_ms,
                attempts_ms: self.attempts_ms,
            },
        }
    }
}

/// How long a cancelled attempt's task is waited for, so that its capsule is dropped (and its
/// processes killed) before the run's response is returned.
const ABORT_GRACE: Duration = Duration::from_secs(1);

fn hard_timeout(policy: &RetryPolicy) -> RunFailure {
    RunFailure::new(
        FailureKind::HardTimeout,
        format!(
            "the run passed its hard timeout of {} ms and was cancelled",
            policy.hard_timeout_ms
        ),
    )
}

async fn sleep_until_opt(at: Option<Instant>) {
    match at {
        Some(at) => tokio::time::sleep_until(at).await,
        None => std::future::pending().await,
    }
}

fn millis(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

/// The failure of an attempt whose handler panicked or was cancelled.
fn handler_failure(kind: &str, join: tokio::task::JoinError) -> RunFailure {
    let reason = if join.is_panic() {
        format!("the `{kind}` handler panicked: {}", panic_text(join))
    } else {
        format!("the `{kind}` handler was cancelled")
    };
    RunFailure::new(FailureKind::Internal, reason)
}

fn panic_text(join: tokio::task::JoinError) -> String {
    let payload = join.into_panic();
    if let Some(s) = payload.downcast_ref::<&str>() {
        (*s).to_owned()
    } else if let Some(s) = payload.downcast_ref::<String>() {
        s.clone()
    } else {
        "a panic without a message".to_owned()
    }
}

fn json_type(value: &serde_json::Value) -> &'static str {
    match value {
        serde_json::Value::Null => "null",
        serde_json::Value::Bool(_) => "a boolean",
        serde_json::Value::Number(_) => "a number",
        serde_json::Value::String(_) => "a string",
        serde_json::Value::Array(_) => "an array",
        serde_json::Value::Object(_) => "an object",
    }
}
