//! A capsule's tool calls go through the agent's tool path: the agent's capabilities are
//! checked, every call is audited, and a call with side effects is recorded under the run so a
//! resumed run does not do it again.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

use agent_core::tools::{Tool, ToolContext, ToolError, ToolOutput, ToolRegistry};
use agent_core::{
    AgentDeps, AuditEvent, AuditLog, InMemoryAuditLog, InMemoryStateStore, RuleBasedReasoner,
    ToolPath,
};
use agent_state::{AgentConfig, AgentLayer, Capability, FailureKind, RunState};
use async_trait::async_trait;
use serde_json::{Value, json};

use crate::{Executor, FnKind, KindOutput, Registry, RunContext, RunRequest};

/// A tool with a side effect the test can count: every run bumps `runs`.
struct Bump {
    runs: AtomicUsize,
    schema: Value,
}

impl Bump {
    fn new() -> Arc<Self> {
        Arc::new(Self { runs: AtomicUsize::new(0), schema: json!({ "type": "object" }) })
    }
}

#[async_trait]
impl Tool for Bump {
    fn name(&self) -> &str {
        "bump"
    }

    fn description(&self) -> &str {
        "counts its runs"
    }

    fn schema(&self) -> &Value {
        &self.schema
    }

    fn has_side_effects(&self) -> bool {
        true
    }

    async fn call(&self, _ctx: &ToolContext, _args: Value) -> Result<ToolOutput, ToolError> {
        let n = self.runs.fetch_add(1, Ordering::SeqCst) + 1;
        Ok(ToolOutput { success: true, output: format!("bumped {n}"), data: Value::Null })
    }
}

/// An agent's services on a temporary workspace with the built-in tools and `bump`, whose audit
/// log and state store the test reads.
struct Agent {
    audit: Arc<InMemoryAuditLog>,
    deps: Arc<AgentDeps>,
    bump: Arc<Bump>,
    _dir: tempfile::TempDir,
}

impl Agent {
    fn new() -> Self {
        let dir = tempfile::tempdir().unwrap();
        let workspace = Arc::new(ToolContext::new(dir.path()).unwrap());
        let bump = Bump::new();
        let mut tools = ToolRegistry::with_builtins();
        tools.register(bump.clone()).unwrap();
        let audit = Arc::new(InMemoryAuditLog::new());
        let deps = Arc::new(AgentDeps {
            audit: audit.clone(),
            state: Arc::new(InMemoryStateStore::new()),
            ..AgentDeps::standalone(Arc::new(tools), workspace)
        });
        Self { audit, deps, bump, _dir: dir }
    }

    fn workspace(&self) -> &std::path::Path {
        self.deps.workspace.workspace()
    }

    /// A run context of agent `exec-1` with `capabilities`, calling tools through its path.
    fn cx(&self, capabilities: &[Capability]) -> RunContext {
        let config = AgentConfig::new("exec-1", "executor", AgentLayer::Bottom)
            .with_capabilities(capabilities.iter().copied());
        let path = ToolPath::new(config.clone(), self.deps.clone());
        RunContext {
            agent: Arc::new(config),
            ..RunContext::standalone("tools", Arc::new(RuleBasedReasoner::new()))
        }
        .with_tools(path)
    }

    async fn events(&self) -> Vec<AuditEvent> {
        self.audit.records(None).await.unwrap().into_iter().map(|r| r.event).collect()
    }

    async fn tool_calls(&self) -> Vec<(String, bool)> {
        self.events()
            .await
            .into_iter()
            .filter_map(|e| match e {
                AuditEvent::ToolCall { tool, success, .. } => Some((tool, success)),
                _ => None,
            })
            .collect()
    }
}

/// A kind that calls `write_file`, `read_file` and `bump` in turn; `crash` (while set) makes
/// it panic after them, as a crash would end the run before its end was recorded.
fn tools_kind(crash: Arc<AtomicBool>) -> Executor {
    let mut registry = Registry::new();
    registry
        .register(FnKind::new("tools", "calls three tools", move |_, capsule| {
            let crash = crash.clone();
            Box::pin(async move {
                capsule.call_tool("write_file", json!({"path": "a.txt", "content": "A"})).await?;
                let read = capsule.call_tool("read_file", json!({"path": "a.txt"})).await?;
                let bumped = capsule.call_tool("bump", json!({})).await?;
                assert!(!crash.swap(false, Ordering::SeqCst), "crashed after its calls");
                Ok(KindOutput::new(format!("{} {}", read.output.trim(), bumped.output), 1.0))
            })
        }))
        .unwrap();
    Executor::new(registry)
}

#[tokio::test]
async fn each_capsule_tool_call_leaves_one_audit_record_of_the_agent() {
    let agent = Agent::new();
    let executor = tools_kind(Arc::default());
    let cx = agent.cx(&[Capability::ToolCall, Capability::CodeGen]);
    let response = executor.execute(RunRequest::new("tools", "go"), cx).await.unwrap();
    assert!(response.success(), "{:?}", response.failure);
    assert_eq!(
        agent.tool_calls().await,
        [("write_file".into(), true), ("read_file".into(), true), ("bump".into(), true)]
    );
    let records = agent.audit.records(None).await.unwrap();
    assert!(records.iter().all(|r| r.agent.as_str() == "exec-1"), "{records:?}");
    // The agent's workspace, not another.
    assert_eq!(std::fs::read_to_string(agent.workspace().join("a.txt")).unwrap(), "A");
}

#[tokio::test]
async fn a_capsule_tool_call_the_agents_capabilities_deny_is_refused_and_audited() {
    let agent = Agent::new();
    let executor = tools_kind(Arc::default());
    // It may call tools but not write code: `write_file` needs `code_gen`.
    let cx = agent.cx(&[Capability::ToolCall]);
    let response = executor.execute(RunRequest::new("tools", "go"), cx).await.unwrap();
    assert_eq!(response.status, RunState::Failed, "{response:?}");
    let failure = response.failure.unwrap();
    assert_eq!(failure.kind, FailureKind::Permission, "{failure}");
    assert!(failure.reason.contains("code_gen"), "{failure}");
    assert!(!agent.workspace().join("a.txt").exists(), "the refused call did not run");
    let denied: Vec<String> = agent
        .events()
        .await
        .into_iter()
        .filter_map(|e| match e {
            AuditEvent::Denied { action, .. } => Some(action),
            _ => None,
        })
        .collect();
    assert_eq!(denied, ["write_code write_file"]);
    assert_eq!(agent.tool_calls().await, [], "nothing ran");
    assert_eq!(agent.bump.runs.load(Ordering::SeqCst), 0);
}

#[tokio::test]
async fn a_resumed_run_does_not_repeat_a_capsule_side_effect() {
    let agent = Agent::new();
    let crash = Arc::new(AtomicBool::new(true));
    let executor = tools_kind(crash.clone());
    let caps = [Capability::ToolCall, Capability::CodeGen];
    let request = RunRequest::new("tools", "go").with_run_id("run-1".parse().unwrap());
    // The first run does its calls, then dies before it ends.
    let first = executor.execute(request.clone(), agent.cx(&caps)).await.unwrap();
    assert_eq!(first.status, RunState::Failed, "{first:?}");
    assert_eq!(agent.bump.runs.load(Ordering::SeqCst), 1);
    // Resumed, the same run makes the same calls: their recorded results are reused.
    let resumed = executor.execute(request, agent.cx(&caps)).await.unwrap();
    assert!(resumed.success(), "{:?}", resumed.failure);
    assert_eq!(resumed.primary_output, "A bumped 1");
    assert_eq!(agent.bump.runs.load(Ordering::SeqCst), 1, "not bumped again");
    // Another run is another call.
    let other = RunRequest::new("tools", "go").with_run_id("run-2".parse().unwrap());
    let response = executor.execute(other, agent.cx(&caps)).await.unwrap();
    assert_eq!(response.primary_output, "A bumped 2");
}
