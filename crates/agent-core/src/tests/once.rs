//! `AgentContext::call_tool_once`: a side-effecting call runs at most once per key across
//! crashes. A crash is simulated by leaving the state store and the journal as a crash at that
//! point would (a `started` record without a result, a journal prepared by hand or by a runner
//! the test spawns), then calling again.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};

use agent_state::ErrorClass;
use serde_json::{Value, json};

use super::*;
use crate::tools::{Recovery, Tool, ToolError, ToolOutput};
use crate::{StateStore, ToolCall};

/// The key `call_tool_once` uses for [`ME`]'s call `key`.
fn scoped(key: &str) -> String {
    format!("{ME}/{key}")
}

fn output(text: &str, success: bool) -> ToolOutput {
    ToolOutput { success, output: text.into(), data: json!({}) }
}

/// What [`Scripted`] returns when it runs.
#[derive(Clone, Copy, Debug)]
enum Returns {
    /// `Ok` with `success: true`.
    Success,
    /// `Ok` with `success: false`, like a command exiting non-zero.
    Failure,
    /// `Err(ToolError::Timeout)`.
    Timeout,
}

/// What [`Scripted::recover`] reports.
#[derive(Clone, Debug)]
enum Recovers {
    With(Recovery),
    Fails,
}

/// A tool whose side effects, idempotence, result and recovery the test scripts. It counts its
/// runs, keeps the journal paths it was given, and notes what the state store held for `watch`
/// while it ran.
struct Scripted {
    name: &'static str,
    side_effects: bool,
    idempotent: bool,
    schema: Value,
    returns: Mutex<Returns>,
    recovers: Mutex<Recovers>,
    runs: AtomicUsize,
    journals: Mutex<Vec<Option<PathBuf>>>,
    recovered_from: Mutex<Vec<PathBuf>>,
    watch: Mutex<Option<(Arc<InMemoryStateStore>, String)>>,
    seen: Mutex<Vec<Option<Option<ToolOutput>>>>,
}

impl Scripted {
    /// A side-effecting, non-idempotent tool named `name` that succeeds and whose journal
    /// knows nothing.
    fn new(name: &'static str) -> Self {
        Self {
            name,
            side_effects: true,
            idempotent: false,
            schema: json!({
                "type": "object",
                "properties": { "n": { "type": "integer" } },
                "additionalProperties": false,
            }),
            returns: Mutex::new(Returns::Success),
            recovers: Mutex::new(Recovers::With(Recovery::Unknown)),
            runs: AtomicUsize::new(0),
            journals: Mutex::new(Vec::new()),
            recovered_from: Mutex::new(Vec::new()),
            watch: Mutex::new(None),
            seen: Mutex::new(Vec::new()),
        }
    }

    fn idempotent(mut self) -> Self {
        self.idempotent = true;
        self
    }

    fn pure(mut self) -> Self {
        self.side_effects = false;
        self
    }

    fn returns(&self, returns: Returns) {
        *self.returns.lock().unwrap() = returns;
    }

    fn recovers(&self, recovers: Recovers) {
        *self.recovers.lock().unwrap() = recovers;
    }

    fn runs(&self) -> usize {
        self.runs.load(Ordering::SeqCst)
    }

    async fn run(&self, journal: Option<&Path>) -> Result<ToolOutput, ToolError> {
        self.runs.fetch_add(1, Ordering::SeqCst);
        self.journals.lock().unwrap().push(journal.map(Path::to_path_buf));
        let watch = self.watch.lock().unwrap().clone();
        if let Some((state, key)) = watch {
            let seen = state.tool(&key).await.unwrap();
            self.seen.lock().unwrap().push(seen);
        }
        let n = self.runs();
        match *self.returns.lock().unwrap() {
            Returns::Success => Ok(output(&format!("{} run {n}", self.name), true)),
            Returns::Failure => Ok(output(&format!("{} failed on run {n}", self.name), false)),
            Returns::Timeout => Err(ToolError::Timeout { tool: self.name.into(), after_ms: 7 }),
        }
    }
}

#[async_trait]
impl Tool for Scripted {
    fn name(&self) -> &str {
        self.name
    }

    fn description(&self) -> &str {
        "does what the test scripts"
    }

    fn schema(&self) -> &Value {
        &self.schema
    }

    fn has_side_effects(&self) -> bool {
        self.side_effects
    }

    fn idempotent(&self) -> bool {
        self.idempotent
    }

    async fn call(&self, _ctx: &ToolContext, _args: Value) -> Result<ToolOutput, ToolError> {
        self.run(None).await
    }

    async fn call_journaled(
        &self,
        _ctx: &ToolContext,
        _args: Value,
        journal: &Path,
    ) -> Result<ToolOutput, ToolError> {
        self.run(Some(journal)).await
    }

    async fn recover(
        &self,
        _ctx: &ToolContext,
        _args: Value,
        journal: &Path,
    ) -> Result<Recovery, ToolError> {
        self.recovered_from.lock().unwrap().push(journal.to_path_buf());
        match self.recovers.lock().unwrap().clone() {
            Recovers::With(recovery) => Ok(recovery),
            Recovers::Fails => Err(ToolError::Failed {
                tool: self.name.into(),
                message: "journal unreadable".into(),
            }),
        }
    }
}

/// [`Services`] whose agents use the built-in tools plus `extra` and, if
/// `journal`, keep crash journals under `journal_root`.
struct Once {
    s: Services,
    state: Arc<InMemoryStateStore>,
    deps: Arc<AgentDeps>,
    journal_root: PathBuf,
    _runs: TempDir,
}

impl Once {
    async fn new(extra: Option<Arc<dyn Tool>>, journal: bool) -> Self {
        let s = Services::new().await;
        let runs = tempfile::tempdir().unwrap();
        let journal_root = runs.path().join("journal");
        let mut tools = ToolRegistry::with_builtins();
        if let Some(tool) = extra {
            tools.register(tool).unwrap();
        }
        let mut workspace = (*s.deps.workspace).clone();
        if journal {
            workspace = workspace.with_journal(&journal_root);
        }
        let state = Arc::new(InMemoryStateStore::new());
        let deps = Arc::new(AgentDeps {
            tools: Arc::new(tools),
            workspace: Arc::new(workspace),
            state: state.clone(),
            ..(*s.deps).clone()
        });
        Self { s, state, deps, journal_root, _runs: runs }
    }

    /// An initialized bottom agent named `name`.
    async fn agent(&self, name: &str) -> Agent {
        let config = AgentConfig::new(name, "Executor", AgentLayer::Bottom)
            .with_role("executor")
            .with_supervisor(SUPERVISOR);
        let behavior = Box::new(TestBehavior(Probe::default()));
        let mut agent = Agent::new(config, behavior, self.deps.clone()).unwrap();
        agent.initialize().await.unwrap();
        agent
    }

    fn workspace(&self) -> &Path {
        self.deps.workspace.workspace()
    }

    /// The journal directory of [`ME`]'s call `key`.
    fn journal(&self, key: &str) -> PathBuf {
        self.journal_root.join(format!("{ME}_2f{key}"))
    }

    async fn record(&self, key: &str) -> Option<Option<ToolOutput>> {
        self.state.tool(&scoped(key)).await.unwrap()
    }

    /// Leaves the state a crash leaves after the call `key` was recorded as started.
    async fn crash_after_begin(&self, key: &str) {
        // What `call_tool_once` does before a call runs: discard a stale journal, record started.
        self.deps.tools.discard_journal(&self.deps.workspace, &scoped(key)).await.unwrap();
        self.state.begin_tool(&scoped(key)).await.unwrap();
    }

    /// `agent`'s audited tool calls as (tool, success, summary).
    async fn tool_calls(&self, agent: &str) -> Vec<(String, bool, String)> {
        self.s
            .events(agent)
            .await
            .into_iter()
            .filter_map(|e| match e {
                AuditEvent::ToolCall { tool, success, summary, .. } => {
                    Some((tool, success, summary))
                }
                _ => None,
            })
            .collect()
    }

    /// The shell's log file in the workspace: one line per run of a logging command.
    fn log(&self) -> String {
        std::fs::read_to_string(self.workspace().join("log")).unwrap_or_default()
    }
}

fn call_of(tool: &str) -> ToolCall {
    ToolCall { tool: tool.into(), args: json!({ "n": 1 }) }
}

fn audited(tool: &str, success: bool, summary: &str) -> (String, bool, String) {
    (tool.into(), success, summary.into())
}

fn shell(command: &str) -> ToolCall {
    ToolCall { tool: "shell".into(), args: json!({ "command": command, "timeout_ms": 30000 }) }
}

fn interrupted(err: AgentError) -> String {
    match err {
        AgentError::Tool(ref e @ ToolError::Interrupted { ref tool, .. }) => {
            assert_eq!(err.class(), ErrorClass::Permanent);
            assert!(!e.is_transient());
            tool.clone()
        }
        other => panic!("expected an interrupted call, got {other:?}"),
    }
}

// ---------------------------------------------------------------------------------------------
// without a crash

#[tokio::test(start_paused = true)]
async fn a_side_effect_runs_once_per_key_and_its_recorded_result_is_reused() {
    let tool = Arc::new(Scripted::new("deploy"));
    let once = Once::new(Some(tool.clone()), true).await;
    let mut agent = once.agent(ME).await;

    let first = agent.ctx_mut().call_tool_once("k1", &call_of("deploy")).await.unwrap();
    let again = agent.ctx_mut().call_tool_once("k1", &call_of("deploy")).await.unwrap();
    let other = agent.ctx_mut().call_tool_once("k2", &call_of("deploy")).await.unwrap();

    assert_eq!(first, output("deploy run 1", true));
    assert_eq!(again, first);
    assert_eq!(other, output("deploy run 2", true));
    assert_eq!(tool.runs(), 2);
    assert_eq!(once.record("k1").await, Some(Some(first)));
    assert_eq!(once.record("k2").await, Some(Some(other)));
    assert_eq!(once.state.tool("k1").await.unwrap(), None, "keys are scoped by agent");
    assert_eq!(
        once.tool_calls(ME).await,
        [
            audited("deploy", true, "deploy run 1"),
            audited("deploy", true, "recorded result reused, tool not run again: deploy run 1"),
            audited("deploy", true, "deploy run 2"),
        ]
    );
}

#[tokio::test(start_paused = true)]
async fn a_call_is_recorded_as_started_before_it_runs_with_its_journal_under_its_key() {
    let tool = Arc::new(Scripted::new("deploy"));
    let once = Once::new(Some(tool.clone()), true).await;
    *tool.watch.lock().unwrap() = Some((once.state.clone(), scoped("task-1#1#0")));
    let mut agent = once.agent(ME).await;

    agent.ctx_mut().call_tool_once("task-1#1#0", &call_of("deploy")).await.unwrap();

    assert_eq!(*tool.seen.lock().unwrap(), [Some(None)]);
    let journal = once.journal_root.join("bottom-1_2ftask-1_231_230");
    assert_eq!(*tool.journals.lock().unwrap(), [Some(journal)]);
    assert!(tool.recovered_from.lock().unwrap().is_empty(), "a fresh call recovers nothing");
}

#[tokio::test(start_paused = true)]
async fn each_agent_has_its_own_records_for_the_same_key() {
    let tool = Arc::new(Scripted::new("deploy"));
    let once = Once::new(Some(tool.clone()), true).await;
    let mut one = once.agent(ME).await;
    let mut two = once.agent("bottom-2").await;

    let first = one.ctx_mut().call_tool_once("k", &call_of("deploy")).await.unwrap();
    let second = two.ctx_mut().call_tool_once("k", &call_of("deploy")).await.unwrap();

    assert_eq!((first.output.as_str(), second.output.as_str()), ("deploy run 1", "deploy run 2"));
    assert_eq!(tool.runs(), 2);
    let journals = tool.journals.lock().unwrap().clone();
    assert_eq!(
        journals,
        [
            Some(once.journal_root.join("bottom-1_2fk")),
            Some(once.journal_root.join("bottom-2_2fk")),
        ]
    );
}

#[tokio::test(start_paused = true)]
async fn a_failed_result_is_forgotten_so_a_retry_runs_again() {
    let tool = Arc::new(Scripted::new("deploy"));
    tool.returns(Returns::Failure);
    let once = Once::new(Some(tool.clone()), true).await;
    let mut agent = once.agent(ME).await;

    let failed = agent.ctx_mut().call_tool_once("k", &call_of("deploy")).await.unwrap();
    assert_eq!(once.record("k").await, None);
    tool.returns(Returns::Success);
    let retried = agent.ctx_mut().call_tool_once("k", &call_of("deploy")).await.unwrap();

    assert_eq!(failed, output("deploy failed on run 1", false));
    assert_eq!(retried, output("deploy run 2", true));
    assert_eq!(once.record("k").await, Some(Some(retried)));
    assert_eq!(
        once.tool_calls(ME).await,
        [
            audited("deploy", false, "deploy failed on run 1"),
            audited("deploy", true, "deploy run 2")
        ]
    );
}

#[tokio::test(start_paused = true)]
async fn a_tool_error_is_forgotten_audited_and_returned() {
    let tool = Arc::new(Scripted::new("deploy"));
    tool.returns(Returns::Timeout);
    let once = Once::new(Some(tool.clone()), true).await;
    let mut agent = once.agent(ME).await;

    let err = agent.ctx_mut().call_tool_once("k", &call_of("deploy")).await.unwrap_err();

    assert!(matches!(err, AgentError::Tool(ToolError::Timeout { after_ms: 7, .. })), "{err:?}");
    assert_eq!(err.class(), ErrorClass::Transient);
    assert_eq!(once.record("k").await, None);
    assert_eq!(once.tool_calls(ME).await, [audited("deploy", false, &err.to_string())]);
}

#[tokio::test(start_paused = true)]
async fn invalid_arguments_are_refused_without_running_and_leave_no_record() {
    let tool = Arc::new(Scripted::new("deploy"));
    let once = Once::new(Some(tool.clone()), true).await;
    let mut agent = once.agent(ME).await;
    let bad = ToolCall { tool: "deploy".into(), args: json!({ "n": "one" }) };

    let err = agent.ctx_mut().call_tool_once("k", &bad).await.unwrap_err();

    assert!(matches!(err, AgentError::Tool(ToolError::InvalidArguments { .. })), "{err:?}");
    assert_eq!(tool.runs(), 0);
    assert_eq!(once.record("k").await, None);
    assert_eq!(once.tool_calls(ME).await, [audited("deploy", false, &err.to_string())]);
}

#[tokio::test(start_paused = true)]
async fn tools_without_side_effects_simply_run_every_time_and_leave_no_record() {
    let tool = Arc::new(Scripted::new("lookup").pure());
    let once = Once::new(Some(tool.clone()), true).await;
    once.crash_after_begin("k").await;
    let mut agent = once.agent(ME).await;

    let first = agent.ctx_mut().call_tool_once("k", &call_of("lookup")).await.unwrap();
    let second = agent.ctx_mut().call_tool_once("k", &call_of("lookup")).await.unwrap();

    assert_eq!((first.output.as_str(), second.output.as_str()), ("lookup run 1", "lookup run 2"));
    assert_eq!(*tool.journals.lock().unwrap(), [None, None], "called plainly, no journal");
    assert!(tool.recovered_from.lock().unwrap().is_empty());
    assert_eq!(once.record("k").await, Some(None), "the record is left alone");
    assert_eq!(
        once.tool_calls(ME).await,
        [audited("lookup", true, "lookup run 1"), audited("lookup", true, "lookup run 2")]
    );
}

#[tokio::test(start_paused = true)]
async fn an_unknown_tool_is_refused_and_audited() {
    let once = Once::new(None, true).await;
    let mut agent = once.agent(ME).await;

    let err = agent.ctx_mut().call_tool_once("k", &call_of("deploy")).await.unwrap_err();

    assert!(matches!(err, AgentError::Tool(ToolError::UnknownTool { .. })), "{err:?}");
    assert_eq!(once.record("k").await, None);
    assert_eq!(once.tool_calls(ME).await, [audited("deploy", false, &err.to_string())]);
}

#[tokio::test(start_paused = true)]
async fn long_outputs_are_shortened_in_the_audit_but_recorded_whole() {
    let once = Once::new(None, true).await;
    let mut agent = once.agent(ME).await;
    let long = format!("{}é{}", "a".repeat(511), "b".repeat(100));
    let call = shell(&format!("printf '%s' '{long}'"));

    let out = agent.ctx_mut().call_tool_once("k", &call).await.unwrap();
    agent.ctx_mut().call_tool_once("k", &call).await.unwrap();

    assert_eq!(out.output, long);
    assert_eq!(once.record("k").await, Some(Some(out)));
    // 512 bytes would split `é`: the summary stops before it.
    let short = format!("{}…", "a".repeat(511));
    assert_eq!(
        once.tool_calls(ME).await,
        [
            audited("shell", true, &short),
            audited("shell", true, &format!("recorded result reused, tool not run again: {short}")),
        ]
    );
}

// ---------------------------------------------------------------------------------------------
// after a crash, with a scripted journal

#[tokio::test(start_paused = true)]
async fn an_interrupted_call_that_completed_is_adopted_recorded_and_not_run_again() {
    let tool = Arc::new(Scripted::new("deploy"));
    let done = output("deployed before the crash", true);
    tool.recovers(Recovers::With(Recovery::Completed(done.clone())));
    let once = Once::new(Some(tool.clone()), true).await;
    once.crash_after_begin("k").await;
    let mut agent = once.agent(ME).await;

    let out = agent.ctx_mut().call_tool_once("k", &call_of("deploy")).await.unwrap();
    let again = agent.ctx_mut().call_tool_once("k", &call_of("deploy")).await.unwrap();

    assert_eq!(out, done);
    assert_eq!(again, done);
    assert_eq!(tool.runs(), 0);
    assert_eq!(*tool.recovered_from.lock().unwrap(), [once.journal("k")]);
    assert_eq!(once.record("k").await, Some(Some(done)));
    assert_eq!(
        once.tool_calls(ME).await,
        [
            audited(
                "deploy",
                true,
                "completed before a crash; result adopted, not run again: deployed before the crash",
            ),
            audited(
                "deploy",
                true,
                "recorded result reused, tool not run again: deployed before the crash",
            ),
        ]
    );
}

#[tokio::test(start_paused = true)]
async fn an_adopted_failed_result_is_returned_and_audited_as_a_failure() {
    let tool = Arc::new(Scripted::new("deploy"));
    let failed = output("exit 1 before the crash", false);
    tool.recovers(Recovers::With(Recovery::Completed(failed.clone())));
    let once = Once::new(Some(tool.clone()), true).await;
    once.crash_after_begin("k").await;
    let mut agent = once.agent(ME).await;

    let out = agent.ctx_mut().call_tool_once("k", &call_of("deploy")).await.unwrap();

    assert_eq!(out, failed);
    assert_eq!(tool.runs(), 0);
    assert_eq!(
        once.tool_calls(ME).await,
        [audited(
            "deploy",
            false,
            "completed before a crash; result adopted, not run again: exit 1 before the crash",
        )]
    );
}

#[tokio::test(start_paused = true)]
async fn an_interrupted_call_that_never_started_runs_once_and_is_recorded() {
    let tool = Arc::new(Scripted::new("deploy"));
    tool.recovers(Recovers::With(Recovery::NotStarted));
    let once = Once::new(Some(tool.clone()), true).await;
    once.crash_after_begin("k").await;
    let mut agent = once.agent(ME).await;

    let out = agent.ctx_mut().call_tool_once("k", &call_of("deploy")).await.unwrap();

    assert_eq!(out, output("deploy run 1", true));
    assert_eq!(tool.runs(), 1);
    assert_eq!(*tool.journals.lock().unwrap(), [Some(once.journal("k"))]);
    assert_eq!(once.record("k").await, Some(Some(out)));
    assert_eq!(once.tool_calls(ME).await, [audited("deploy", true, "deploy run 1")]);
}

#[tokio::test(start_paused = true)]
async fn an_interrupted_call_of_unknown_fate_is_not_run_again_unless_idempotent() {
    for recovers in [Recovers::With(Recovery::Unknown), Recovers::Fails] {
        let tool = Arc::new(Scripted::new("deploy"));
        tool.recovers(recovers.clone());
        let once = Once::new(Some(tool.clone()), true).await;
        once.crash_after_begin("k").await;
        let mut agent = once.agent(ME).await;

        let err = agent.ctx_mut().call_tool_once("k", &call_of("deploy")).await.unwrap_err();
        let message = err.to_string();
        let again = agent.ctx_mut().call_tool_once("k", &call_of("deploy")).await.unwrap_err();

        assert_eq!(interrupted(err), "deploy", "{recovers:?}");
        assert_eq!(interrupted(again), "deploy", "{recovers:?}");
        assert_eq!(tool.runs(), 0, "{recovers:?}");
        assert_eq!(tool.recovered_from.lock().unwrap().len(), 1, "recorded: asked once");
        let Some(Some(recorded)) = once.record("k").await else {
            panic!("the interruption is recorded: {recovers:?}");
        };
        assert!(!recorded.success);
        assert_eq!(recorded.data["interrupted"], true, "{recovers:?}");
        assert_eq!(
            once.tool_calls(ME).await,
            [audited("deploy", false, &message), audited("deploy", false, &message)]
        );
    }
}

#[tokio::test(start_paused = true)]
async fn an_interrupted_idempotent_call_of_unknown_fate_runs_again() {
    for recovers in [Recovers::With(Recovery::Unknown), Recovers::Fails] {
        let tool = Arc::new(Scripted::new("put").idempotent());
        tool.recovers(recovers.clone());
        let once = Once::new(Some(tool.clone()), true).await;
        once.crash_after_begin("k").await;
        let mut agent = once.agent(ME).await;

        let out = agent.ctx_mut().call_tool_once("k", &call_of("put")).await.unwrap();

        assert_eq!(out, output("put run 1", true), "{recovers:?}");
        assert_eq!(tool.runs(), 1, "{recovers:?}");
        assert_eq!(once.record("k").await, Some(Some(out)), "{recovers:?}");
        assert_eq!(
            once.tool_calls(ME).await,
            [
                audited("put", false, "interrupted by a crash; idempotent, so it runs again"),
                audited("put", true, "put run 1")
            ]
        );
    }
}

#[tokio::test(start_paused = true)]
async fn a_rerun_after_a_crash_that_fails_is_forgotten() {
    let tool = Arc::new(Scripted::new("deploy"));
    tool.recovers(Recovers::With(Recovery::NotStarted));
    tool.returns(Returns::Timeout);
    let once = Once::new(Some(tool.clone()), true).await;
    once.crash_after_begin("k").await;
    let mut agent = once.agent(ME).await;

    let err = agent.ctx_mut().call_tool_once("k", &call_of("deploy")).await.unwrap_err();

    assert!(matches!(err, AgentError::Tool(ToolError::Timeout { .. })), "{err:?}");
    assert_eq!(once.record("k").await, None);
}

// ---------------------------------------------------------------------------------------------
// the built-in tools, after a crash

#[tokio::test(start_paused = true)]
async fn a_journaled_shell_command_runs_once_and_is_reused() {
    let once = Once::new(None, true).await;
    let mut agent = once.agent(ME).await;
    let call = shell("echo line >> log; echo ran");

    let out = agent.ctx_mut().call_tool_once("k", &call).await.unwrap();
    let again = agent.ctx_mut().call_tool_once("k", &call).await.unwrap();

    assert_eq!(out.output, "ran\n");
    assert_eq!(again, out);
    assert_eq!(once.log(), "line\n");
    assert!(!once.journal("k").exists(), "the result is stored, so its journal is gone");
}

#[tokio::test(start_paused = true)]
async fn a_shell_command_that_completed_before_the_crash_is_adopted_not_run_again() {
    let once = Once::new(None, true).await;
    let call = shell("echo line >> log; echo ran");
    // The command ran and finished; the crash came before its result was recorded.
    once.crash_after_begin("k").await;
    let ran = once
        .deps
        .tools
        .call_journaled(&once.deps.workspace, "shell", call.args.clone(), &scoped("k"))
        .await
        .unwrap();
    let mut agent = once.agent(ME).await;

    let out = agent.ctx_mut().call_tool_once("k", &call).await.unwrap();

    assert_eq!(out, ran);
    assert_eq!(once.log(), "line\n");
    assert_eq!(once.record("k").await, Some(Some(out)));
    assert_eq!(
        once.tool_calls(ME).await,
        [audited("shell", true, "completed before a crash; result adopted, not run again: ran\n")]
    );
}

#[tokio::test(start_paused = true)]
async fn a_shell_command_that_never_started_before_the_crash_runs_once() {
    let once = Once::new(None, true).await;
    let call = shell("echo line >> log; echo ran");
    once.crash_after_begin("k").await;
    let mut agent = once.agent(ME).await;

    let out = agent.ctx_mut().call_tool_once("k", &call).await.unwrap();

    assert_eq!(out.output, "ran\n");
    assert_eq!(once.log(), "line\n");
    assert_eq!(once.record("k").await, Some(Some(out)));
}

#[tokio::test(start_paused = true)]
async fn a_shell_command_begun_where_this_host_cannot_see_its_journal_is_not_run_again() {
    // A run on workers: the call was begun on another host (no crash journal here), so it may
    // have run; it fails as interrupted instead of running a second time.
    let mut once = Once::new(None, true).await;
    let workspace = once.deps.workspace.as_ref().clone().with_foreign_calls();
    once.deps = Arc::new(AgentDeps { workspace: Arc::new(workspace), ..(*once.deps).clone() });
    let call = shell("echo line >> log; echo ran");
    once.crash_after_begin("k").await;
    let mut agent = once.agent(ME).await;

    let err = agent.ctx_mut().call_tool_once("k", &call).await.unwrap_err();

    assert!(err.to_string().contains("interrupted"), "{err}");
    assert_eq!(once.log(), "", "the command did not run here");
    // The same call with its journal here (workers sharing a data directory) is adopted as
    // before: the foreign-calls rule only changes "no journal at all".
    assert!(!once.journal("k").exists());
}

#[tokio::test(start_paused = true)]
async fn a_shell_command_still_running_after_the_crash_is_waited_for_and_adopted() {
    let once = Once::new(None, true).await;
    let call = shell("echo line >> log; echo ran");
    once.crash_after_begin("k").await;
    // The runner of the crashed call: it marked its start (with its own pid, as a runner
    // does: a made-up one made the test depend on whether the machine had such a process)
    // and finishes a little later.
    let journal = once.journal("k");
    std::fs::create_dir_all(&journal).unwrap();
    let script = r#"sleep 0.3; echo line >> log; echo ran > "$1/out"; : > "$1/err"; echo 0 > "$1/done.tmp"; mv "$1/done.tmp" "$1/done""#;
    let mut runner = Command::new("sh")
        .arg("-c")
        .arg(script)
        .arg("test-runner")
        .arg(&journal)
        .current_dir(once.workspace())
        .stdin(Stdio::null())
        .spawn()
        .unwrap();
    std::fs::write(journal.join("started"), format!("{}\n", runner.id())).unwrap();
    let mut agent = once.agent(ME).await;

    let out = agent.ctx_mut().call_tool_once("k", &call).await.unwrap();

    assert!(runner.wait().unwrap().success());
    assert_eq!(out.output, "ran\n");
    assert_eq!(once.log(), "line\n", "the command ran once, in the crashed call's runner");
    assert_eq!(once.record("k").await, Some(Some(out)));
}

#[tokio::test(start_paused = true)]
async fn a_shell_command_of_unknown_fate_fails_as_interrupted_and_is_not_run_again() {
    let once = Once::new(None, true).await;
    // Its runner marked its start and died without recording an exit code.
    let call = ToolCall {
        tool: "shell".into(),
        args: json!({ "command": "echo line >> log", "timeout_ms": 50 }),
    };
    once.crash_after_begin("k").await;
    std::fs::create_dir_all(once.journal("k")).unwrap();
    // Its pid is one that is there, started before the file was written, as its runner's
    // would be: pid 1 (whose group is never killed). Another number made the test depend on
    // the machine: with no such process the runner counts as gone, not timed out.
    std::fs::write(once.journal("k").join("started"), "1\n").unwrap();
    let mut agent = once.agent(ME).await;

    let err = agent.ctx_mut().call_tool_once("k", &call).await.unwrap_err();

    let message = err.to_string();
    assert!(message.starts_with("tool `shell` was interrupted while running"), "{message}");
    assert!(message.contains("stopped at its timeout of 50 ms"), "{message}");
    assert_eq!(interrupted(err), "shell");
    assert_eq!(once.log(), "");
    let Some(Some(recorded)) = once.record("k").await else { panic!("not recorded") };
    assert_eq!(recorded.data["interrupted"], true);
    assert!(!once.journal("k").exists(), "the journal goes once the outcome is stored");
}

#[tokio::test(start_paused = true)]
async fn a_command_whose_end_is_not_recorded_is_of_unknown_outcome_and_not_run_again() {
    let once = Once::new(None, true).await;
    let mut agent = once.agent(ME).await;
    // The command has its effect, then its runner is killed before it can record the exit code
    // (as when a full disk refuses the runner's files): the call ends without one.
    // The command sleeps long and the killer looks for it for two minutes: under load (CI runs
    // model tests beside it) starting the sandboxed runner took longer than the 20 s the killer
    // once waited, and the command then ended on its own.
    let call =
        ToolCall { tool: "shell".into(), args: json!({ "command": "echo line >> log; sleep 60" }) };
    let (log, started) = (once.workspace().join("log"), once.journal("k").join("started"));
    let killer = std::thread::spawn(move || {
        for _ in 0..12_000 {
            let runner = std::fs::read_to_string(&started).ok();
            let ran = std::fs::read_to_string(&log).is_ok_and(|l| l == "line\n");
            if let (Some(runner), true) = (runner, ran) {
                let group = format!("-{}", runner.trim());
                let killed =
                    std::process::Command::new("kill").args(["-KILL", "--", &group]).status();
                return killed.is_ok_and(|s| s.success());
            }
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
        false
    });

    let err = agent.ctx_mut().call_tool_once("k", &call).await.unwrap_err();
    assert!(killer.join().unwrap(), "the runner was not found and killed");
    let again = agent.ctx_mut().call_tool_once("k", &call).await.unwrap_err();

    let message = err.to_string();
    assert!(message.starts_with("tool `shell` was interrupted while running"), "{message}");
    assert!(message.contains("ended without recording an exit code"), "{message}");
    assert_eq!(interrupted(err), "shell");
    assert_eq!(once.log(), "line\n", "it ran once, and not again under the same key");
    assert_eq!(interrupted(again), "shell", "the second call gets the recorded outcome");
    let Some(Some(recorded)) = once.record("k").await else { panic!("not recorded") };
    assert_eq!(recorded.data["interrupted"], true);
    let unknown = once
        .s
        .events(ME)
        .await
        .into_iter()
        .filter(|e| matches!(e, AuditEvent::ToolOutcomeUnknown { .. }))
        .count();
    assert_eq!(unknown, 1, "audited once, as an outcome nobody knows");
}

#[tokio::test(start_paused = true)]
async fn an_interrupted_step_declared_idempotent_runs_again_once() {
    let tool = Arc::new(Scripted::new("deploy"));
    tool.recovers(Recovers::With(Recovery::Interrupted(output("half", false))));
    let once = Once::new(Some(tool.clone()), true).await;
    once.crash_after_begin("k").await;
    let mut agent = once.agent(ME).await;

    let out = agent.ctx_mut().call_step_tool("k", &call_of("deploy"), true).await.unwrap();
    let again = agent.ctx_mut().call_step_tool("k", &call_of("deploy"), true).await.unwrap();

    assert_eq!(out, output("deploy run 1", true));
    assert_eq!(again, out, "the rerun's result is recorded and reused");
    assert_eq!(tool.runs(), 1);
    let calls = once.tool_calls(ME).await;
    assert_eq!(
        calls[0],
        audited("deploy", false, "interrupted by a crash; idempotent, so it runs again")
    );
}

#[tokio::test(start_paused = true)]
async fn journals_are_removed_once_the_outcome_is_stored() {
    let once = Once::new(None, true).await;
    let mut agent = once.agent(ME).await;

    let ok = agent.ctx_mut().call_tool_once("ok", &shell("echo fine")).await.unwrap();
    let failed = agent.ctx_mut().call_tool_once("bad", &shell("echo no; exit 3")).await.unwrap();

    assert!(ok.success && !failed.success);
    assert!(!once.journal("ok").exists(), "kept after success");
    assert!(!once.journal("bad").exists(), "kept after failure");
}

#[tokio::test(start_paused = true)]
async fn a_flood_of_output_is_bounded_in_memory_and_on_disk() {
    let once = Once::new(None, true).await;
    let mut agent = once.agent(ME).await;
    let total = 20 * 1024 * 1024;
    let call = shell(&format!("yes | head -c {total}"));

    let out = agent.ctx_mut().call_tool_once("flood", &call).await.unwrap();

    assert!(out.success, "{}", out.output);
    let kept = crate::tools::MAX_STREAM_BYTES;
    assert!(out.output.ends_with(&format!("[truncated: {} more bytes]\n", total - kept)));
    assert_eq!(out.data["stdout_truncated"], true);
    assert!(out.output.len() < kept + 100);
}

#[tokio::test(start_paused = true)]
async fn without_a_journal_an_interrupted_shell_fails_and_an_interrupted_write_runs_again() {
    let once = Once::new(None, false).await;
    once.crash_after_begin("sh").await;
    once.crash_after_begin("w").await;
    let mut agent = once.agent(ME).await;
    let write = ToolCall {
        tool: "write_file".into(),
        args: json!({ "path": "out.txt", "content": "same bytes" }),
    };

    let err = agent.ctx_mut().call_tool_once("sh", &shell("echo line >> log")).await.unwrap_err();
    let wrote = agent.ctx_mut().call_tool_once("w", &write).await.unwrap();

    assert_eq!(interrupted(err), "shell");
    assert_eq!(once.log(), "");
    assert!(wrote.success);
    let written = std::fs::read_to_string(once.workspace().join("out.txt")).unwrap();
    assert_eq!(written, "same bytes");
    assert_eq!(once.record("w").await, Some(Some(wrote)));
    assert!(!once.journal_root.exists());
}

/// Regression: a crashed retry used to adopt the failed result of an earlier attempt that left
/// its `done` marker under the same key.
#[tokio::test(start_paused = true)]
async fn a_crashed_retry_does_not_adopt_the_failed_result_of_an_earlier_attempt() {
    let once = Once::new(None, true).await;
    let mut agent = once.agent(ME).await;
    let call =
        shell("echo run >> log; [ $(wc -l < log) -ge 2 ] || { echo not yet; exit 1; }; echo ok");
    let failed = agent.ctx_mut().call_tool_once("k", &call).await.unwrap();
    assert!(!failed.success);
    assert_eq!(once.record("k").await, None, "a failed call is forgotten");
    once.crash_after_begin("k").await; // retry recorded as started, crash before its runner starts
    let retried = agent.ctx_mut().call_tool_once("k", &call).await.unwrap();
    assert_eq!(once.log(), "run\nrun\n", "the retry ran");
    assert!(retried.success, "{retried:?}");
}

// ---------------------------------------------------------------------------------------------
// a state store that fails for a while (a restarting server)

/// The in-memory store, but `record_tool` and `forget_tool` fail while `failures` is above
/// zero (each failure counts it down).
struct Unavailable {
    inner: InMemoryStateStore,
    failures: AtomicUsize,
}

impl Unavailable {
    fn refuse(&self) -> Result<(), BackendError> {
        let left = self.failures.load(Ordering::SeqCst);
        if left == 0 {
            return Ok(());
        }
        self.failures.store(left - 1, Ordering::SeqCst);
        Err(BackendError::new("test", "the server is restarting"))
    }
}

#[async_trait]
impl StateStore for Unavailable {
    async fn save_agent(&self, record: &crate::AgentRecord) -> Result<(), BackendError> {
        self.inner.save_agent(record).await
    }
    async fn agents(&self) -> Result<Vec<crate::AgentRecord>, BackendError> {
        self.inner.agents().await
    }
    async fn begin_tool(&self, key: &str) -> Result<(), BackendError> {
        self.inner.begin_tool(key).await
    }
    async fn record_tool(&self, key: &str, output: &ToolOutput) -> Result<(), BackendError> {
        self.refuse()?;
        self.inner.record_tool(key, output).await
    }
    async fn forget_tool(&self, key: &str) -> Result<(), BackendError> {
        self.refuse()?;
        self.inner.forget_tool(key).await
    }
    async fn tool(&self, key: &str) -> Result<Option<Option<ToolOutput>>, BackendError> {
        self.inner.tool(key).await
    }
    async fn record_outcome(&self, outcome: &agent_state::TaskOutcome) -> Result<(), BackendError> {
        self.inner.record_outcome(outcome).await
    }
    async fn outcomes(&self) -> Result<Vec<agent_state::TaskOutcome>, BackendError> {
        self.inner.outcomes().await
    }
    async fn put_blob(&self, hash: &str, content: &[u8]) -> Result<(), BackendError> {
        self.inner.put_blob(hash, content).await
    }
    async fn blob(&self, hash: &str) -> Result<Option<Vec<u8>>, BackendError> {
        self.inner.blob(hash).await
    }
}

/// An agent of `once` whose state store fails `failures` times to store a call's outcome.
async fn with_unavailable_store(once: &Once, failures: usize) -> (Agent, Arc<Unavailable>) {
    let state = Arc::new(Unavailable {
        inner: InMemoryStateStore::new(),
        failures: AtomicUsize::new(failures),
    });
    let deps = Arc::new(AgentDeps { state: state.clone(), ..(*once.deps).clone() });
    let config = AgentConfig::new(ME, "Executor", AgentLayer::Bottom)
        .with_role("executor")
        .with_supervisor(SUPERVISOR);
    let mut agent = Agent::new(config, Box::new(TestBehavior(Probe::default())), deps).unwrap();
    agent.initialize().await.unwrap();
    (agent, state)
}

/// A command that ran while the store was briefly unavailable has its outcome stored once the
/// store is back: it is neither lost (and later seen as interrupted) nor run again.
#[tokio::test(start_paused = true)]
async fn an_outcome_waits_for_a_state_store_that_is_briefly_unavailable() {
    let once = Once::new(None, true).await;
    let (mut agent, state) = with_unavailable_store(&once, 5).await;
    let done = agent.ctx_mut().call_tool_once("k", &shell("echo line >> log")).await.unwrap();
    assert!(done.success, "{done:?}");
    assert_eq!(state.failures.load(Ordering::SeqCst), 0, "it tried until the store took it");
    assert_eq!(state.inner.tool(&scoped("k")).await.unwrap(), Some(Some(done.clone())));
    let again = agent.ctx_mut().call_tool_once("k", &shell("echo line >> log")).await.unwrap();
    assert_eq!(again, done);
    assert_eq!(once.log(), "line\n", "the command ran once");
}

/// A store that stays unavailable longer than the patience: the error is returned (the call
/// is then recovered as after a crash), after waiting, on tokio's clock, no longer than it.
#[tokio::test(start_paused = true)]
async fn an_outcome_the_state_store_never_takes_is_an_error_after_the_patience() {
    let once = Once::new(None, true).await;
    let (mut agent, state) = with_unavailable_store(&once, usize::MAX).await;
    let started = tokio::time::Instant::now();
    let err = agent.ctx_mut().call_tool_once("k", &shell("echo line >> log")).await.unwrap_err();
    assert!(matches!(err, AgentError::Backend(_)), "{err:?}");
    assert!(started.elapsed() <= crate::agent::OUTCOME_PATIENCE, "{:?}", started.elapsed());
    assert!(started.elapsed() >= crate::agent::OUTCOME_PATIENCE / 2, "{:?}", started.elapsed());
    assert_eq!(state.inner.tool(&scoped("k")).await.unwrap(), Some(None), "left as started");
    assert_eq!(once.log(), "line\n");
}
