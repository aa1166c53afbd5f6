//! The team's time limits as the runtime applies them: a tool call cut at the workspace's tool
//! limit (and `search`, `glob` and `shell` stopping their own work at it), a reasoning call cut
//! at `reasoning_ms`, a heartbeat turn cut at the agent's `timeout_ms`; each a typed error,
//! audited, with the agent's stored state consistent.

use agent_state::{AgentStatus::*, ErrorClass, Limit, RoleBook, Task, Timeouts};
use serde_json::json;

use super::*;
use crate::testing::{FakeTool, StuckReasoner};
use crate::tools::{Tool, ToolError};
use crate::{Conflict, HeartbeatOutcome, ReasonError, ToolCall};

/// `s`'s services with the hanging tools `hang` (no side effects) and `hang_effect`, a tool
/// limit of 2 s and a reasoning limit of 3 s.
fn limited(s: &Services) -> Arc<AgentDeps> {
    let mut tools = ToolRegistry::with_builtins();
    tools.register(Arc::new(FakeTool::hanging("hang"))).unwrap();
    tools.register(Arc::new(FakeTool::hanging("hang_effect").with_side_effects(true))).unwrap();
    let workspace =
        s.deps.workspace.as_ref().clone().with_tool_timeout(Duration::from_millis(2_000));
    let timeouts = Timeouts { reasoning_ms: 3_000, ..Timeouts::default() };
    Arc::new(AgentDeps {
        tools: Arc::new(tools),
        workspace: Arc::new(workspace),
        timeouts,
        ..(*s.deps).clone()
    })
}

async fn ready(deps: Arc<AgentDeps>, config: AgentConfig) -> Agent {
    let mut agent = Agent::new(config, Box::new(TestBehavior(Probe::default())), deps).unwrap();
    agent.initialize().await.unwrap();
    agent
}

/// `agent`'s audited tool calls as (tool, success, summary).
async fn tool_calls(s: &Services, agent: &str) -> Vec<(String, bool, String)> {
    s.events(agent)
        .await
        .into_iter()
        .filter_map(|e| match e {
            AuditEvent::ToolCall { tool, success, summary, .. } => Some((tool, success, summary)),
            _ => None,
        })
        .collect()
}

/// `agent`'s audited time-outs as (limit, what, limit_ms).
async fn timed_out(s: &Services, agent: &str) -> Vec<(Limit, String, u64)> {
    s.events(agent)
        .await
        .into_iter()
        .filter_map(|e| match e {
            AuditEvent::TimedOut { limit, what, limit_ms } => Some((limit, what, limit_ms)),
            _ => None,
        })
        .collect()
}

#[tokio::test(start_paused = true)]
async fn a_tool_call_past_the_tool_limit_is_a_timeout_error_audited_as_a_failed_call() {
    let s = Services::new().await;
    let deps = limited(&s);
    let mut agent = ready(deps.clone(), bottom_config()).await;
    let started = s.now();

    let call = ToolCall { tool: "hang".into(), args: json!({}) };
    let error = agent.ctx_mut().call_tool(&call).await.unwrap_err();

    let AgentError::Tool(ToolError::Timeout { tool, after_ms }) = &error else {
        panic!("expected a tool timeout, got {error:?}");
    };
    assert_eq!((tool.as_str(), *after_ms), ("hang", 2_000));
    assert_eq!(error.class(), ErrorClass::Transient);
    assert_eq!(s.now(), Timestamp(started.0 + 2_000), "cut at the limit");
    let calls = tool_calls(&s, ME).await;
    assert_eq!(calls.len(), 1);
    assert_eq!((calls[0].0.as_str(), calls[0].1), ("hang", false));
    assert!(calls[0].2.contains("timed out after 2000 ms"), "{}", calls[0].2);
    assert!(calls[0].2.contains("[timeouts] tool_ms"), "says what to raise: {}", calls[0].2);
    assert_eq!(s.chain().await, [(id(ME), Idle)]);
}

/// Issue 31, item 4: a side-effecting call that is not idempotent may still be running when
/// it is cut at the tool limit; its outcome is unknown, recorded so that nothing under its key
/// sends it again (a retry gets the same error without calling the tool), and audited.
#[tokio::test(start_paused = true)]
async fn a_side_effecting_call_past_the_tool_limit_has_an_unknown_outcome_and_is_not_sent_again() {
    let s = Services::new().await;
    let deps = limited(&s);
    let mut agent = ready(deps.clone(), bottom_config()).await;

    let call = ToolCall { tool: "hang_effect".into(), args: json!({}) };
    let error = agent.ctx_mut().call_tool_once("step-1", &call).await.unwrap_err();

    assert!(
        matches!(error, AgentError::Tool(ToolError::OutcomeUnknown { after_ms: 2_000, .. })),
        "{error:?}"
    );
    assert_eq!(error.class(), ErrorClass::Permanent, "never retried automatically");
    let recorded = deps.state.tool(&format!("{ME}/step-1")).await.unwrap();
    let recorded = recorded.flatten().expect("the unknown outcome is recorded");
    assert_eq!(recorded.data["outcome_unknown"], true, "{recorded:?}");
    let unknown: Vec<_> = s
        .events(ME)
        .await
        .into_iter()
        .filter(|e| matches!(e, AuditEvent::ToolOutcomeUnknown { .. }))
        .collect();
    assert_eq!(unknown.len(), 1, "{unknown:?}");
    // A retry under the same key does not call the tool again (it would hang again).
    let started = s.now();
    let again = agent.ctx_mut().call_tool_once("step-1", &call).await.unwrap_err();
    assert!(matches!(again, AgentError::Tool(ToolError::OutcomeUnknown { .. })), "{again:?}");
    assert_eq!(s.now(), started, "not sent again: no time spent waiting");
    let calls = tool_calls(&s, ME).await;
    assert_eq!(calls.len(), 2);
    assert!(!calls[0].1 && !calls[1].1);
    assert_eq!(s.chain().await, [(id(ME), Idle)]);
}

/// An idempotent or read-only tool cut at the limit is a plain timeout: a retry may send it.
#[tokio::test(start_paused = true)]
async fn a_read_only_call_past_the_tool_limit_is_a_transient_timeout() {
    let s = Services::new().await;
    let deps = limited(&s);
    let mut agent = ready(deps.clone(), bottom_config()).await;
    let call = ToolCall { tool: "hang".into(), args: json!({}) };
    let error = agent.ctx_mut().call_tool_once("step-2", &call).await.unwrap_err();
    assert!(matches!(error, AgentError::Tool(ToolError::Timeout { .. })), "{error:?}");
    assert_eq!(error.class(), ErrorClass::Transient);
}

#[tokio::test(start_paused = true)]
async fn a_reasoning_call_past_the_reasoning_limit_is_a_transient_timed_out_error_and_audited() {
    let s = Services::with_reasoner(StuckReasoner::silent()).await;
    let deps = limited(&s);
    let agent = ready(deps, bottom_config()).await;
    let started = s.now();

    let reasoner = agent.ctx().reasoner();
    let error = reasoner.next_action(agent.ctx().persona(), &subtask("s1"), &[]).await.unwrap_err();

    assert_eq!(
        error,
        ReasonError::TimedOut {
            reasoner: "silent".into(),
            call: "next_action".into(),
            limit_ms: 3_000
        }
    );
    assert!(error.to_string().contains("raise `reasoning_ms`"), "{error}");
    assert_eq!(AgentError::from(error).class(), ErrorClass::Transient);
    assert_eq!(s.now(), Timestamp(started.0 + 3_000), "cut at the limit");
    assert_eq!(
        timed_out(&s, ME).await,
        [(Limit::Reasoning, "reasoning call `next_action` of reasoner `silent`".into(), 3_000)]
    );
    // Every call the runtime makes goes through the bound, planning included.
    let task = Task::goal("t1", "anything");
    let error =
        reasoner.plan(agent.ctx().persona(), &task, &RoleBook::default()).await.unwrap_err();
    assert!(matches!(error, ReasonError::TimedOut { ref call, .. } if call == "plan"));
    assert_eq!(s.chain().await, [(id(ME), Idle)]);
}

/// `s`'s services with a reasoning limit of 10 minutes and a silence limit of 60 s.
fn with_silence(s: &Services) -> Arc<AgentDeps> {
    let timeouts = Timeouts { reasoning_ms: 600_000, silence_ms: 60_000, ..Timeouts::default() };
    Arc::new(AgentDeps { timeouts, ..(*s.deps).clone() })
}

fn conflict() -> Conflict {
    Conflict {
        id: "c1".into(),
        issue: "which".into(),
        parties: vec![id(ME)],
        options: vec!["a".into(), "b".into()],
    }
}

#[tokio::test(start_paused = true)]
async fn a_reasoning_call_still_producing_tokens_runs_past_the_silence_limit_to_its_answer() {
    // A token every 50 s for 5 minutes: five times the silence limit, under the total.
    let s = Services::with_reasoner(StuckReasoner::trickling(Duration::from_secs(50), 6)).await;
    let agent = ready(with_silence(&s), bottom_config()).await;
    let started = s.now();
    let answer = agent.ctx().reasoner().vote(agent.ctx().persona(), &conflict()).await;
    assert_eq!(answer, Ok("a".into()));
    assert_eq!(s.now(), Timestamp(started.0 + 300_000));
    assert_eq!(timed_out(&s, ME).await, []);
}

#[tokio::test(start_paused = true)]
async fn a_reasoning_call_silent_for_the_silence_limit_is_cut_as_a_transient_error_and_audited() {
    // Two tokens, then silence: cut 60 s after the second.
    let s = Services::with_reasoner(StuckReasoner::trickling(Duration::from_secs(50), 2)).await;
    let agent = ready(with_silence(&s), bottom_config()).await;
    let reasoner = agent.ctx().reasoner();
    assert_eq!(reasoner.vote(agent.ctx().persona(), &conflict()).await, Ok("a".into()));
    let started = s.now();
    let error = reasoner.next_action(agent.ctx().persona(), &subtask("s1"), &[]).await.unwrap_err();
    assert_eq!(
        error,
        ReasonError::Silent {
            reasoner: "trickle".into(),
            call: "next_action".into(),
            silence_ms: 60_000
        }
    );
    assert!(error.to_string().contains("raise `silence_ms`"), "{error}");
    assert_eq!(AgentError::from(error).class(), ErrorClass::Transient);
    assert_eq!(s.now(), Timestamp(started.0 + 60_000), "cut at the silence limit, not the total");
    assert_eq!(
        timed_out(&s, ME).await,
        [(
            Limit::Silence,
            "reasoning call `next_action` of reasoner `trickle`, silent".into(),
            60_000
        )]
    );
}

#[tokio::test(start_paused = true)]
async fn a_turn_past_the_agents_timeout_is_audited_as_timed_out_and_retried() {
    let s = Services::new().await;
    let probe = Probe::default();
    let mut agent = s.agent(bottom_config().with_timeout_ms(1_500), &probe);
    agent.initialize().await.unwrap();
    probe.steps([Step::Sleep(Duration::from_secs(60))]);
    s.send(inbox(SUPERVISOR), ME, MessageKind::StatusQuery, json!({})).await;

    let outcome = agent.heartbeat(1).await.unwrap();

    let error = AgentError::Timeout { after_ms: 1_500 }.to_string();
    assert!(error.contains("`[timeouts] turn_ms`"), "{error}");
    assert_eq!(outcome, HeartbeatOutcome::Retrying { retry: 1, error: error.clone() });
    assert_eq!(timed_out(&s, ME).await, [(Limit::Turn, "heartbeat turn".into(), 1_500)]);
    assert_eq!(s.errors(ME).await, [(error, 1, 2)]);
    // The retry processes the same message; the agent ends idle, its chain intact.
    assert_eq!(agent.heartbeat(2).await.unwrap(), HeartbeatOutcome::Processed { messages: 1 });
    assert_eq!(s.chain().await, [(id(ME), Idle)]);
}

#[tokio::test]
async fn search_and_glob_stop_their_own_walk_at_the_tool_limit() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("a.txt"), "needle").unwrap();
    let ctx = ToolContext::new(dir.path()).unwrap();
    let search = crate::tools::Search::new();
    let glob = crate::tools::Glob::new();
    // Within the limit both find the file.
    assert!(search.call(&ctx, json!({ "pattern": "needle" })).await.unwrap().success);
    assert!(glob.call(&ctx, json!({ "pattern": "*.txt" })).await.unwrap().output.contains("a.txt"));

    // Called directly (no registry around them), they stop walking once the limit is spent.
    let spent = ctx.with_tool_timeout(Duration::ZERO);
    for (tool, result) in [
        ("search", search.call(&spent, json!({ "pattern": "needle" })).await),
        ("glob", glob.call(&spent, json!({ "pattern": "*.txt" })).await),
    ] {
        match result {
            Err(ToolError::Timeout { tool: t, after_ms: 0 }) => assert_eq!(t, tool),
            other => panic!("{tool}: expected a timeout, got {other:?}"),
        }
    }
}

#[tokio::test(start_paused = true)]
async fn a_shell_call_asking_for_more_than_the_tool_limit_gets_the_limit() {
    let dir = tempfile::tempdir().unwrap();
    let ctx = ToolContext::new(dir.path()).unwrap().with_tool_timeout(Duration::from_millis(300));
    let args = json!({ "command": "sleep 5", "timeout_ms": 10_000 });

    let error = ToolRegistry::with_builtins().call(&ctx, "shell", args).await.unwrap_err();

    assert!(
        matches!(error, ToolError::Timeout { ref tool, after_ms: 300 } if tool == "shell"),
        "{error:?}"
    );
}

/// `agent`'s audited soft timeouts as (limit, what, soft_ms, hard_ms).
async fn soft_timeouts(s: &Services, agent: &str) -> Vec<(Limit, String, u64, u64)> {
    s.events(agent)
        .await
        .into_iter()
        .filter_map(|e| match e {
            AuditEvent::SoftTimeout { limit, what, soft_ms, hard_ms } => {
                Some((limit, what, soft_ms, hard_ms))
            }
            _ => None,
        })
        .collect()
}

/// The warnings `system` sent to `to`, as (about, reason).
async fn warnings(s: &Services, to: &Address) -> Vec<(AgentId, String)> {
    s.drain(to)
        .await
        .into_iter()
        .filter(|m| m.kind == MessageKind::Warning && m.from == Address::System)
        .map(|m| {
            let w: crate::protocol::Warning = serde_json::from_value(m.content).unwrap();
            (w.about, w.reason)
        })
        .collect()
}

/// `s`'s services with the tool `slow` (taking `ms`), a tool limit of 2 s and `timeouts`.
fn with_slow(s: &Services, ms: u64, timeouts: Timeouts) -> Arc<AgentDeps> {
    let mut tools = ToolRegistry::with_builtins();
    tools.register(Arc::new(FakeTool::slow("slow", Duration::from_millis(ms)))).unwrap();
    tools.register(Arc::new(FakeTool::hanging("hang"))).unwrap();
    let workspace =
        s.deps.workspace.as_ref().clone().with_tool_timeout(Duration::from_millis(2_000));
    Arc::new(AgentDeps {
        tools: Arc::new(tools),
        workspace: Arc::new(workspace),
        timeouts,
        ..(*s.deps).clone()
    })
}

#[tokio::test(start_paused = true)]
async fn a_tool_call_past_its_soft_limit_is_audited_and_the_supervisor_warned_but_runs_on() {
    let s = Services::new().await;
    let timeouts = Timeouts { tool_soft_ms: Some(500), ..Timeouts::default() };
    let mut agent = ready(with_slow(&s, 1_200, timeouts), bottom_config()).await;
    let started = s.now();

    let call = ToolCall { tool: "slow".into(), args: json!({}) };
    let output = agent.ctx_mut().call_tool(&call).await.unwrap();

    assert!(output.success, "the call ran to its end");
    assert_eq!(s.now(), Timestamp(started.0 + 1_200), "not cut at the soft limit");
    assert_eq!(soft_timeouts(&s, ME).await, [(Limit::Tool, "tool call `slow`".into(), 500, 2_000)]);
    assert_eq!(timed_out(&s, ME).await, [], "no hard timeout");
    let told = warnings(&s, &inbox(SUPERVISOR)).await;
    assert_eq!(told.len(), 1, "{told:?}");
    assert_eq!(told[0].0, id(ME));
    assert!(told[0].1.contains("tool call `slow` has run 500 ms"), "{}", told[0].1);
    assert!(told[0].1.contains("`[timeouts] tool_soft_ms`"), "{}", told[0].1);
    assert_eq!(tool_calls(&s, ME).await.len(), 1);
    assert_eq!(s.chain().await, [(id(ME), Idle)]);
}

#[tokio::test(start_paused = true)]
async fn a_tool_call_within_its_soft_limit_tells_nobody() {
    let s = Services::new().await;
    // Left out, the soft limit is half the hard one: 1 s.
    let mut agent = ready(with_slow(&s, 1_000, Timeouts::default()), bottom_config()).await;

    let call = ToolCall { tool: "slow".into(), args: json!({}) };
    assert!(agent.ctx_mut().call_tool(&call).await.unwrap().success);

    assert_eq!(soft_timeouts(&s, ME).await, [], "a call ending at its soft limit is not slow");
    assert_eq!(warnings(&s, &inbox(SUPERVISOR)).await, []);
}

#[tokio::test(start_paused = true)]
async fn the_hard_tool_limit_is_unchanged_after_the_soft_one() {
    let s = Services::new().await;
    let mut agent = ready(with_slow(&s, 0, Timeouts::default()), bottom_config()).await;
    let started = s.now();

    let call = ToolCall { tool: "hang".into(), args: json!({}) };
    let error = agent.ctx_mut().call_tool(&call).await.unwrap_err();

    assert!(matches!(error, AgentError::Tool(ToolError::Timeout { after_ms: 2_000, .. })));
    assert_eq!(s.now(), Timestamp(started.0 + 2_000), "cut at the hard limit");
    assert_eq!(
        soft_timeouts(&s, ME).await,
        [(Limit::Tool, "tool call `hang`".into(), 1_000, 2_000)]
    );
    assert_eq!(warnings(&s, &inbox(SUPERVISOR)).await.len(), 1);
}

#[tokio::test(start_paused = true)]
async fn a_turn_past_its_soft_limit_is_audited_and_the_supervisor_warned_but_finishes() {
    let s = Services::new().await;
    let probe = Probe::default();
    let mut agent = s.agent(bottom_config().with_timeout_ms(1_500), &probe);
    agent.initialize().await.unwrap();
    probe.steps([Step::Sleep(Duration::from_millis(1_000))]);
    s.send(inbox(SUPERVISOR), ME, MessageKind::StatusQuery, json!({})).await;

    let outcome = agent.heartbeat(1).await.unwrap();

    assert_eq!(outcome, HeartbeatOutcome::Processed { messages: 1 }, "the turn went on");
    assert_eq!(soft_timeouts(&s, ME).await, [(Limit::Turn, "heartbeat turn".into(), 750, 1_500)]);
    assert_eq!(timed_out(&s, ME).await, []);
    let told = warnings(&s, &inbox(SUPERVISOR)).await;
    assert_eq!(told.len(), 1, "{told:?}");
    assert!(told[0].1.contains("heartbeat turn has run 750 ms"), "{}", told[0].1);
    assert!(told[0].1.contains("stopped at 1500 ms"), "{}", told[0].1);
    assert_eq!(s.chain().await, [(id(ME), Idle)]);
}

#[tokio::test(start_paused = true)]
async fn a_turn_soft_limit_of_the_team_applies_and_a_top_power_tells_system() {
    let s = Services::new().await;
    let probe = Probe::default();
    let deps = Arc::new(AgentDeps {
        timeouts: Timeouts { turn_soft_ms: Some(200), ..Timeouts::default() },
        ..(*s.deps).clone()
    });
    let mut agent = Agent::new(
        top_config("top-a").with_timeout_ms(1_500),
        Box::new(TestBehavior(probe.clone())),
        deps,
    )
    .unwrap();
    agent.initialize().await.unwrap();
    probe.steps([Step::Sleep(Duration::from_millis(300))]);
    s.send(Address::System, "top-a", MessageKind::StatusQuery, json!({})).await;

    assert_eq!(agent.heartbeat(1).await.unwrap(), HeartbeatOutcome::Processed { messages: 1 });

    assert_eq!(
        soft_timeouts(&s, "top-a").await,
        [(Limit::Turn, "heartbeat turn".into(), 200, 1_500)]
    );
    let told = warnings(&s, &Address::System).await;
    assert_eq!(told.len(), 1, "no supervisor: system is told: {told:?}");
    assert_eq!(told[0].0, id("top-a"));
}

#[tokio::test(start_paused = true)]
async fn a_turn_past_its_hard_limit_is_still_cut_after_its_soft_one() {
    let s = Services::new().await;
    let probe = Probe::default();
    let mut agent = s.agent(bottom_config().with_timeout_ms(1_500), &probe);
    agent.initialize().await.unwrap();
    probe.steps([Step::Sleep(Duration::from_secs(60))]);
    s.send(inbox(SUPERVISOR), ME, MessageKind::StatusQuery, json!({})).await;
    let started = s.now();

    let outcome = agent.heartbeat(1).await.unwrap();

    assert!(matches!(outcome, HeartbeatOutcome::Retrying { retry: 1, .. }), "{outcome:?}");
    assert_eq!(s.now(), Timestamp(started.0 + 1_500), "cut at the hard limit");
    assert_eq!(soft_timeouts(&s, ME).await, [(Limit::Turn, "heartbeat turn".into(), 750, 1_500)]);
    assert_eq!(timed_out(&s, ME).await, [(Limit::Turn, "heartbeat turn".into(), 1_500)]);
}
