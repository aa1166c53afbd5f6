//! The bottom layer: an executor takes subtasks from its lead only, runs them through its tools,
//! records and reports the result, helps peers and answers its lead's status queries.

use agent_core::protocol::{ErrorReport, HelpRequest, HelpResponse, StatusReport};
use agent_core::testing::FakeTool;
use agent_core::{
    AgentError, HeartbeatOutcome, NextAction, ReasoningRequest, ScriptedAnswer, ScriptedReasoner,
    ToolCall, ToolCallRecord,
};
use agent_state::{Assignment, ProgressReport, ProgressStatus, SubtaskResult};
use serde_json::json;

use super::*;
use crate::{BottomAgent, BottomSpec};

const ME: &str = "bottom-1";
const LEAD: &str = "mid-1";

fn write(step_id: &str, path: &str, content: &str) -> Subtask {
    let args = json!({"path": path, "content": content});
    subtask("t1", step(step_id, "docs", "write_file", args), ME)
}

/// An executor with `tools` under [`LEAD`], with `mid-2` and `bottom-2` as bare inboxes too;
/// `bottom-2` is its peer (the other executor of [`LEAD`]), holding only `read_file`.
async fn executor(w: &World, tools: &[&str]) -> Agent {
    w.parties(&[LEAD, "mid-2", "bottom-2"]).await;
    let spec = BottomSpec::new(tools.iter().map(|t| (*t).to_owned()));
    let peers = vec![(id(ME), spec.tools.clone()), (id("bottom-2"), tools_of(&["read_file"]))];
    let executor = BottomAgent::new(spec).with_peers(peers);
    w.spawn(config(ME, AgentLayer::Bottom, Some(LEAD)), executor).await
}

fn tools_of(tools: &[&str]) -> Arc<[String]> {
    tools.iter().map(|t| (*t).to_owned()).collect()
}

async fn assign(w: &World, from: &str, subtask: Subtask) -> MessageId {
    w.send(addr(from), ME, MessageKind::TaskAssign, &Assignment::Subtask { subtask }).await
}

/// The messages of `kind` in `inbox`, whole (for their correlation ids).
async fn messages(w: &World, inbox: &str, kind: MessageKind) -> Vec<Message> {
    w.drain(&addr(inbox)).await.into_iter().filter(|m| m.kind == kind).collect()
}

#[tokio::test(start_paused = true)]
async fn an_executor_takes_subtasks_only_from_its_supervisor() {
    let w = World::new();
    let mut agent = executor(&w, &["write_file"]).await;
    assign(&w, "mid-2", write("s1", "a.txt", "from a stranger")).await;
    w.send(
        Address::System,
        ME,
        MessageKind::TaskAssign,
        &Assignment::Subtask { subtask: write("s2", "b.txt", "from the system") },
    )
    .await;

    assert_eq!(agent.heartbeat(1).await.unwrap(), HeartbeatOutcome::Processed { messages: 2 });

    assert_eq!(w.denied(ME).await, ["task_assign from mid-2", "task_assign from system"]);
    assert_eq!((w.file("a.txt"), w.file("b.txt")), (None, None));
    assert_eq!(w.tool_calls(ME).await, 0);
    assert!(w.kinds(&addr(LEAD)).await.is_empty());
    assert!(w.kinds(&addr("mid-2")).await.is_empty());
    assert_eq!(agent.status(), AgentStatus::Idle);
}

#[tokio::test(start_paused = true)]
async fn an_executor_runs_its_subtask_records_the_result_and_reports_it() {
    let w = World::new();
    let mut agent = executor(&w, &["write_file"]).await;
    assign(&w, LEAD, write("s1", "out/a.txt", "hello")).await;

    assert_eq!(agent.heartbeat(1).await.unwrap(), HeartbeatOutcome::Processed { messages: 1 });

    assert_eq!(w.file("out/a.txt").as_deref(), Some("hello"));
    let calls: Vec<AuditEvent> = w
        .events(ME)
        .await
        .into_iter()
        .filter(|e| matches!(e, AuditEvent::ToolCall { .. }))
        .collect();
    let output = match &calls[..] {
        [AuditEvent::ToolCall { tool, success: true, summary, .. }] if tool == "write_file" => {
            summary.clone()
        }
        other => panic!("expected one successful write_file call, got {other:?}"),
    };
    assert_eq!(
        w.board(BoardId::Agent(id(ME))).await,
        format!(
            "## Task Execution Result\n\nTask: s1 with write_file\nStatus: Success\nOutput:\n```\n{output}\n```"
        )
    );
    let reports: Vec<ProgressReport> = w.received(&addr(LEAD), MessageKind::ProgressReport).await;
    assert_eq!(
        reports,
        [ProgressReport {
            task_id: "t1".into(),
            status: ProgressStatus::Completed,
            percentage: 100,
            description: "s1 with write_file".into(),
            results: vec![SubtaskResult {
                task_id: "t1".into(),
                step_id: "s1".into(),
                agent: id(ME),
                success: true,
                output,
                result: None,
            }],
            failure: None,
        }]
    );
    assert_eq!(agent.ctx().metrics().tasks_completed, 1);
    assert_eq!(agent.status(), AgentStatus::Idle);
}

#[tokio::test(start_paused = true)]
async fn a_redelivered_assignment_is_not_executed_twice() {
    let w = World::new();
    let mut agent = executor(&w, &["write_file"]).await;
    assign(&w, LEAD, write("s1", "a.txt", "once")).await;
    assign(&w, LEAD, write("s1", "a.txt", "once")).await;
    agent.heartbeat(1).await.unwrap();
    assign(&w, LEAD, write("s1", "a.txt", "once")).await;
    agent.heartbeat(2).await.unwrap();

    assert_eq!(w.tool_calls(ME).await, 1);
    let reports: Vec<ProgressReport> = w.received(&addr(LEAD), MessageKind::ProgressReport).await;
    assert_eq!(reports.len(), 1);
    assert_eq!(agent.ctx().metrics().tasks_completed, 1);
}

#[tokio::test(start_paused = true)]
async fn a_peer_asking_for_knowledge_gets_the_board_content() {
    let w = World::new();
    let mut agent = executor(&w, &["write_file"]).await;
    agent.ctx().write_board("## Notes\nthe build needs `make`".into()).await.unwrap();
    let request = w
        .send(addr("bottom-2"), ME, MessageKind::PeerHelpRequest, &HelpRequest::ShareKnowledge)
        .await;

    agent.heartbeat(1).await.unwrap();

    let answers = messages(&w, "bottom-2", MessageKind::PeerHelpResponse).await;
    assert_eq!(answers.len(), 1);
    assert_eq!(answers[0].correlation_id, Some(request));
    assert_eq!(
        payload::<HelpResponse>(&answers[0]).unwrap(),
        HelpResponse::Knowledge { knowledge: "## Notes\nthe build needs `make`".into() }
    );
}

#[tokio::test(start_paused = true)]
async fn an_idle_executor_takes_over_a_peers_task_and_runs_it() {
    let w = World::new();
    let mut agent = executor(&w, &["write_file"]).await;
    let mut theirs = write("s9", "peer.txt", "taken over");
    theirs.assignee = id("bottom-2");
    let help = HelpRequest::TakeOverTask { subtask: Box::new(theirs) };
    w.send(addr("bottom-2"), ME, MessageKind::PeerHelpRequest, &help).await;

    agent.heartbeat(1).await.unwrap();

    let answers: Vec<HelpResponse> =
        w.received(&addr("bottom-2"), MessageKind::PeerHelpResponse).await;
    assert_eq!(answers, [HelpResponse::Accepted]);
    assert_eq!(w.file("peer.txt").as_deref(), Some("taken over"));
    let reports: Vec<ProgressReport> = w.received(&addr(LEAD), MessageKind::ProgressReport).await;
    assert_eq!(reports.len(), 1);
    assert_eq!(
        (reports[0].results[0].step_id.as_str(), &reports[0].results[0].agent),
        ("s9", &id(ME))
    );
}

#[tokio::test(start_paused = true)]
async fn a_busy_executor_refuses_to_take_over_a_peers_task() {
    let w = World::new();
    let mut agent = executor(&w, &["write_file"]).await;
    assign(&w, LEAD, write("s1", "mine.txt", "mine")).await;
    let help = HelpRequest::TakeOverTask { subtask: Box::new(write("s9", "peer.txt", "theirs")) };
    w.send(addr("bottom-2"), ME, MessageKind::PeerHelpRequest, &help).await;

    agent.heartbeat(1).await.unwrap();

    let answers: Vec<HelpResponse> =
        w.received(&addr("bottom-2"), MessageKind::PeerHelpResponse).await;
    assert_eq!(answers, [HelpResponse::Refused { reason: "busy".into() }]);
    assert_eq!(w.file("mine.txt").as_deref(), Some("mine"));
    assert_eq!(w.file("peer.txt"), None);
    assert_eq!(w.tool_calls(ME).await, 1);
}

#[tokio::test(start_paused = true)]
async fn a_status_query_from_the_supervisor_gets_a_status_report() {
    let w = World::new();
    let mut agent = executor(&w, &["write_file"]).await;
    assign(&w, LEAD, write("s1", "a.txt", "a")).await;
    let query = w.send(addr(LEAD), ME, MessageKind::StatusQuery, &json!({})).await;
    w.send(addr("mid-2"), ME, MessageKind::StatusQuery, &json!({})).await;

    agent.heartbeat(1).await.unwrap();

    let reports = messages(&w, LEAD, MessageKind::StatusReport).await;
    assert_eq!(reports.len(), 1);
    assert_eq!(reports[0].correlation_id, Some(query));
    assert_eq!(
        payload::<StatusReport>(&reports[0]).unwrap(),
        StatusReport::Agent {
            status: AgentStatus::Working,
            current: Some("t1/s1: s1 with write_file".into())
        }
    );
    assert!(w.kinds(&addr("mid-2")).await.is_empty(), "only the supervisor is answered");
}

/// No peer of its lead holds the tool either: nobody is asked.
#[tokio::test(start_paused = true)]
async fn a_step_whose_tool_the_executor_lacks_fails_permanently() {
    let w = World::new();
    let mut agent = executor(&w, &["read_file"]).await;
    let work = write("s1", "a.txt", "a");
    assign(&w, LEAD, work.clone()).await;

    let outcome = agent.heartbeat(1).await.unwrap();

    let HeartbeatOutcome::Failed { error } = outcome else {
        panic!("expected a failure without retries, got {outcome:?}")
    };
    assert!(error.contains("does not have the tool `write_file`"), "{error}");
    assert_eq!(agent.status(), AgentStatus::Failed);
    assert_eq!(agent.ctx().metrics().retries, 0);
    assert_eq!((w.file("a.txt"), w.tool_calls(ME).await), (None, 0));
    let reports: Vec<ErrorReport> = w.received(&addr(LEAD), MessageKind::ErrorReport).await;
    assert_eq!(reports.len(), 1);
    assert_eq!(reports[0].error, error);
    assert_eq!(reports[0].work, Some(work), "the lead gets the subtask back to reassign");
    assert!(w.kinds(&addr("bottom-2")).await.is_empty(), "a peer without the tool is not asked");
}

#[tokio::test(start_paused = true)]
async fn a_tool_that_reports_failure_is_retried_and_the_subtask_reported_once() {
    let mut tools = ToolRegistry::with_builtins();
    tools.register(Arc::new(FakeTool::flaky("flaky", 1))).unwrap();
    let w = World::with_tools(tools);
    let mut agent = executor(&w, &["flaky"]).await;
    assign(&w, LEAD, subtask("t1", step("s1", "docs", "flaky", json!({})), ME)).await;

    let first = agent.heartbeat(1).await.unwrap();
    let second = agent.heartbeat(2).await.unwrap();

    let failed = AgentError::ToolFailed { tool: "flaky".into(), output: "not yet".into() };
    assert_eq!(first, HeartbeatOutcome::Retrying { retry: 1, error: failed.to_string() });
    assert_eq!(second, HeartbeatOutcome::Processed { messages: 1 });
    assert_eq!(w.tool_calls(ME).await, 2);
    let reports: Vec<ProgressReport> = w.received(&addr(LEAD), MessageKind::ProgressReport).await;
    assert_eq!(reports.len(), 1);
    assert_eq!(reports[0].results[0].output, "done");
    assert_eq!(agent.status(), AgentStatus::Idle);
}

/// The executor's reasoner asks for a call `args` of `tool`.
fn call(tool: &str, args: serde_json::Value) -> ScriptedAnswer {
    ScriptedAnswer::Action(NextAction::Call(ToolCall { tool: tool.into(), args }))
}

/// What the executor's reasoner saw of its earlier calls, question by question.
fn histories(reasoner: &ScriptedReasoner) -> Vec<Vec<ToolCallRecord>> {
    reasoner
        .requests()
        .into_iter()
        .filter_map(|r| match r {
            ReasoningRequest::NextAction { history, .. } => Some(history),
            _ => None,
        })
        .collect()
}

#[tokio::test(start_paused = true)]
async fn a_refused_tool_call_goes_back_to_the_reasoner_which_can_correct_it() {
    let w = World::new();
    w.parties(&[LEAD, "mid-2", "bottom-2"]).await;
    let reasoner = Arc::new(ScriptedReasoner::from_answers([
        // A path outside the workspace, a tool it does not hold, arguments of the wrong type:
        call("write_file", json!({"path": "../escape.txt", "content": "x"})),
        call("shell", json!({"command": "true"})),
        call("write_file", json!({"path": 7, "content": "x"})),
        // Then the right call, and done.
        call("write_file", json!({"path": "out/a.txt", "content": "hello"})),
        ScriptedAnswer::Action(NextAction::Finish { success: true, summary: "written".into() }),
    ]));
    let spec = BottomSpec::new(["write_file"]);
    let config = config(ME, AgentLayer::Bottom, Some(LEAD));
    let mut agent = w.spawn_sharing(config, BottomAgent::new(spec), reasoner.clone()).await;
    assign(&w, LEAD, write("s1", "out/a.txt", "hello")).await;

    assert_eq!(agent.heartbeat(1).await.unwrap(), HeartbeatOutcome::Processed { messages: 1 });

    assert_eq!(w.file("out/a.txt").as_deref(), Some("hello"));
    assert_eq!(agent.status(), AgentStatus::Idle);
    assert_eq!(agent.ctx().metrics().tasks_completed, 1);
    let seen = histories(&reasoner);
    assert_eq!(seen.len(), 5, "one question per call and one to finish");
    let refusals: Vec<(bool, &str)> =
        seen[4].iter().map(|r| (r.success, r.output.as_str())).take(3).collect();
    assert!(
        refusals.iter().all(|(success, output)| !success && output.starts_with("error: ")),
        "each refusal is a failed call whose output is the error: {refusals:?}"
    );
    assert!(refusals[0].1.contains("outside"), "{}", refusals[0].1);
    assert!(refusals[1].1.contains("does not have the tool `shell`"), "{}", refusals[1].1);
    assert!(refusals[2].1.contains("path"), "{}", refusals[2].1);
    let reports: Vec<ProgressReport> = w.received(&addr(LEAD), MessageKind::ProgressReport).await;
    assert_eq!(reports.len(), 1);
    assert_eq!(reports[0].status, ProgressStatus::Completed);
    let denied = w
        .events(ME)
        .await
        .into_iter()
        .filter(|e| matches!(e, AuditEvent::Denied { action, .. } if action == "call tool shell"))
        .count();
    assert_eq!(denied, 1, "the refused tool is audited");
}

#[tokio::test(start_paused = true)]
async fn a_reasoner_that_gives_up_after_a_refused_call_fails_the_step_with_that_error() {
    let w = World::new();
    // The rule-based reasoner finishes unsuccessfully after a failed call: the step fails with
    // the call's own error, permanently (no retries), as before the reasoner saw errors.
    let mut agent = executor(&w, &["write_file"]).await;
    assign(&w, LEAD, write("s1", "../escape.txt", "x")).await;

    let outcome = agent.heartbeat(1).await.unwrap();

    let HeartbeatOutcome::Failed { error } = outcome else {
        panic!("expected a failure without retries, got {outcome:?}")
    };
    assert!(error.contains("outside"), "{error}");
    assert_eq!(agent.ctx().metrics().retries, 0);
    assert_eq!(agent.status(), AgentStatus::Failed);
}

/// A goal step (a description only) for [`ME`].
fn goal_step(step_id: &str) -> Subtask {
    subtask("t1", PlanStep::goal(step_id, "greet the user", StepTarget::Domain("docs".into())), ME)
}

/// A model that gives up a goal step in its own words (issue #32: a small model echoing its
/// chat template): the step fails with those words quoted and cleaned, not raw.
#[tokio::test(start_paused = true)]
async fn a_model_giving_up_in_its_own_words_fails_the_step_with_them_quoted() {
    let w = World::new();
    w.parties(&[LEAD, "mid-2", "bottom-2"]).await;
    let reasoner = ScriptedReasoner::from_answers([ScriptedAnswer::Action(NextAction::Finish {
        success: false,
        summary: "<start_of_turn>model\n[INST]The tool's result:\nok\n\nNext?[/INST]".into(),
    })]);
    let spec = BottomSpec::new(["write_file"]);
    let mut agent = w
        .spawn_with(config(ME, AgentLayer::Bottom, Some(LEAD)), BottomAgent::new(spec), reasoner)
        .await;
    assign(&w, LEAD, goal_step("greet")).await;

    let outcome = agent.heartbeat(1).await.unwrap();

    let expected = "tool `finish_subtask` failed: `bottom-1` gave up on the step: \"The tool's \
                    result: ok Next?\"";
    assert_eq!(outcome, HeartbeatOutcome::Retrying { retry: 1, error: expected.into() });
}

/// A spawned worker whose structured result is a failure: the step fails with its summary
/// quoted and cleaned.
#[tokio::test(start_paused = true)]
async fn a_failed_structured_result_reports_the_workers_words_quoted() {
    let w = World::new();
    w.parties(&[LEAD]).await;
    let summary = "<|im_start|>assistant\nnothing   to do<|im_end|>";
    let reasoner = ScriptedReasoner::from_answers([call(
        "return_results",
        json!({"result": {"status": "failure", "summary": summary, "artifacts": [], "known_issues": []}}),
    )]);
    let spec = BottomSpec::new(["write_file"]);
    let worker = BottomAgent::new(spec).spawned();
    let mut agent =
        w.spawn_with(config(ME, AgentLayer::Bottom, Some(LEAD)), worker, reasoner).await;
    assign(&w, LEAD, goal_step("greet")).await;

    let outcome = agent.heartbeat(1).await.unwrap();

    let reports: Vec<ProgressReport> = w.received(&addr(LEAD), MessageKind::ProgressReport).await;
    assert_eq!(reports.len(), 1, "{outcome:?} {:?}", w.events(ME).await);
    assert_eq!(reports[0].status, ProgressStatus::Failed);
    assert_eq!(reports[0].results[0].output, "\"nothing to do\"");
    let result = reports[0].results[0].result.as_ref().unwrap();
    assert_eq!(result.summary, summary, "the structured result keeps the worker's words");
}

/// An executor kind's run id is the subtask's key when that fits the run id rule; otherwise
/// the key cleaned to the rule and a hash of it, which keeps apart keys that clean alike.
#[test]
fn a_kinds_run_id_follows_the_run_id_rule() {
    let id_of = |task: &str, step_id: &str| {
        crate::kind::run_id(&subtask(task, step(step_id, "docs", "", json!({})), ME))
    };
    assert_eq!(id_of("t1", "s-1").as_str(), "t1-s-1-1");
    let under = id_of("t1", "s_1");
    let dot = id_of("t1", "s.1");
    assert!(under.starts_with("t1-s-1-1-"), "{under}");
    assert_ne!(under, dot);
    let long = id_of(&"t".repeat(80), "s");
    assert_eq!(long.len(), 64, "{long}");
    for id in [under, dot, long] {
        assert_eq!(agent_state::RunId::parse(&id), Ok(id.clone()));
    }
}
