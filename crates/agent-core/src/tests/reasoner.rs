//! Each documented rule of the rule-based reasoner.

use agent_state::{Decision, DecisionId, SubtaskResult, Task, WorkPackage};
use serde_json::json;

use super::*;
use crate::{
    Candidate, Conflict, Judgement, NextAction, Persona, Placement, ReasonError, ToolCall,
    ToolCallRecord, Verdict,
};

fn config() -> AgentConfig {
    AgentConfig::new("top-a", "Power A", AgentLayer::Top)
}

fn persona(config: &AgentConfig) -> Persona<'_> {
    Persona { config, system_prompt: "", tools: &[], roles: &[], domains: &[] }
}

fn plan(content: serde_json::Value) -> Decision {
    Decision::propose(DecisionId::from_u128(1), id("top-a"), content, vec![id("top-b")], START)
        .unwrap()
}

fn step(id: &str, tool: &str, target: StepTarget) -> PlanStep {
    PlanStep::scripted(
        id,
        format!("{id} with {tool}"),
        target,
        tool,
        json!({"path": format!("{id}.txt")}),
    )
}

fn work(steps: Vec<PlanStep>) -> WorkPackage {
    WorkPackage {
        task_id: "task-1".into(),
        goal: "test".into(),
        decision: DecisionId::from_u128(1),
        wave: 1,
        steps,
    }
}

fn candidate(agent: &str, tools: &[&str], load: usize) -> Candidate {
    Candidate {
        id: id(agent),
        tools: tools.iter().map(|t| (*t).to_owned()).collect(),
        load,
        available: true,
        failed: false,
    }
}

async fn assignees(team: &[Candidate], steps: Vec<PlanStep>) -> Result<Vec<String>, ReasonError> {
    let config = config();
    let placements =
        RuleBasedReasoner::new().decompose(persona(&config), &work(steps), team).await?;
    Ok(placements.into_iter().map(|p: Placement| p.assignee.to_string()).collect())
}

fn write(id: &str) -> PlanStep {
    step(id, "write_file", StepTarget::Any)
}

#[tokio::test(start_paused = true)]
async fn review_signs_a_plan_with_steps_and_vetoes_one_without() {
    let config = config();
    let reasoner = RuleBasedReasoner::new();
    let with_steps = plan(json!({"steps": [{"id": "s1", "tool": "shell"}]}));
    assert_eq!(reasoner.review_decision(persona(&config), &with_steps).await, Ok(Verdict::Sign));

    let no_steps = Verdict::Veto { reason: "risk assessment failed: the plan has no steps".into() };
    for content in [json!({"steps": []}), json!({"goal": "no plan at all"}), json!({"steps": 3})] {
        let verdict = reasoner.review_decision(persona(&config), &plan(content.clone())).await;
        assert_eq!(verdict, Ok(no_steps.clone()), "{content}");
    }
}

#[tokio::test(start_paused = true)]
async fn review_vetoes_a_budget_extension() {
    let config = config();
    let reasoner = RuleBasedReasoner::new();
    let extension = plan(json!({"kind": crate::BUDGET_EXTENSION_KIND, "steps": [{"id": "s"}]}));
    let verdict = reasoner.review_decision(persona(&config), &extension).await;
    match verdict {
        Ok(Verdict::Veto { reason }) => assert!(reason.contains("budget extensions"), "{reason}"),
        other => panic!("a budget extension must be vetoed, got {other:?}"),
    }
}

#[tokio::test(start_paused = true)]
async fn review_vetoes_a_plan_that_uses_a_forbidden_tool() {
    let config = config();
    let reasoner = RuleBasedReasoner::new().forbid_tools(["shell", "deploy"]);
    let risky = plan(json!({"steps": [
        {"id": "s1", "tool": "write_file"},
        {"id": "s2", "tool": "deploy"},
        {"id": "s3", "tool": "shell"},
    ]}));
    assert_eq!(
        reasoner.review_decision(persona(&config), &risky).await,
        Ok(Verdict::Veto {
            reason: "risk assessment failed: step `s2` uses forbidden tool `deploy`".into()
        })
    );
    let safe = plan(json!({"steps": [{"id": "s1", "tool": "write_file"}]}));
    assert_eq!(reasoner.review_decision(persona(&config), &safe).await, Ok(Verdict::Sign));
}

#[tokio::test(start_paused = true)]
async fn vote_takes_the_first_preference_on_the_ballot_else_the_first_option() {
    let config = config();
    let conflict = |options: &[&str]| Conflict {
        id: "c1".into(),
        issue: "which way".into(),
        parties: vec![id("mid-1"), id("mid-2")],
        options: options.iter().map(|o| (*o).into()).collect(),
    };
    let reasoner = RuleBasedReasoner::new().prefer(["b", "c"]);

    let preferred = reasoner.vote(persona(&config), &conflict(&["a", "c", "b"])).await;
    let fallback = reasoner.vote(persona(&config), &conflict(&["x", "y"])).await;
    let empty = reasoner.vote(persona(&config), &conflict(&[])).await;

    assert_eq!(preferred, Ok("b".into()));
    assert_eq!(fallback, Ok("x".into()));
    assert_eq!(empty, Err(ReasonError::BadQuestion("conflict `c1` has no options".into())));
}

#[tokio::test(start_paused = true)]
async fn decompose_gives_a_step_to_the_executor_it_names_if_available() {
    let team = [candidate("bottom-1", &["write_file"], 0), candidate("bottom-2", &["shell"], 5)];
    let named = step("s1", "write_file", StepTarget::Agent(id("bottom-2")));
    assert_eq!(assignees(&team, vec![named.clone()]).await.unwrap(), ["bottom-2"]);

    let mut unavailable = team.clone();
    unavailable[1].available = false;
    assert_eq!(assignees(&unavailable, vec![named]).await.unwrap(), ["bottom-1"]);
}

#[tokio::test(start_paused = true)]
async fn decompose_picks_the_least_loaded_executor_with_the_tool_then_the_lowest_id() {
    let team = [
        candidate("bottom-3", &["write_file"], 1),
        candidate("bottom-1", &["write_file"], 2),
        candidate("bottom-2", &["write_file"], 1),
        candidate("bottom-0", &["shell"], 0),
    ];
    assert_eq!(assignees(&team, vec![write("s1")]).await.unwrap(), ["bottom-2"]);
    // Each placement adds to the load, so a package spreads over the team.
    assert_eq!(
        assignees(&team, vec![write("s1"), write("s2"), write("s3"), write("s4")]).await.unwrap(),
        ["bottom-2", "bottom-3", "bottom-1", "bottom-2"]
    );
}

#[tokio::test(start_paused = true)]
async fn decompose_prefers_healthy_executors_over_failed_ones() {
    let mut failed = candidate("bottom-1", &["write_file"], 0);
    failed.failed = true;
    let team = [failed.clone(), candidate("bottom-2", &["write_file"], 5)];
    assert_eq!(assignees(&team, vec![write("s1")]).await.unwrap(), ["bottom-2"]);
    // A failed executor still takes work when it is the only one with the tool.
    assert_eq!(assignees(&[failed], vec![write("s1")]).await.unwrap(), ["bottom-1"]);
}

#[tokio::test(start_paused = true)]
async fn decompose_refuses_a_step_no_available_executor_can_take() {
    let mut gone = candidate("bottom-2", &["deploy"], 0);
    gone.available = false;
    let team = [candidate("bottom-1", &["write_file"], 0), gone];
    assert_eq!(
        assignees(&team, vec![write("s1"), step("s2", "deploy", StepTarget::Any)]).await,
        Err(ReasonError::Unplaceable {
            step: "s2".into(),
            reason: "no available executor has the tool `deploy`".into(),
        })
    );
    let named_stranger = step("s3", "deploy", StepTarget::Agent(id("bottom-9")));
    assert!(matches!(
        assignees(&team, vec![named_stranger]).await,
        Err(ReasonError::Unplaceable { step, .. }) if step == "s3"
    ));
}

#[tokio::test(start_paused = true)]
async fn next_action_calls_the_steps_tool_once_then_finishes_with_its_outcome() {
    let config = config();
    let reasoner = RuleBasedReasoner::new();
    let subtask = subtask("s1");
    let call = ToolCall { tool: subtask.step.tool.clone(), args: subtask.step.args.clone() };

    let first = reasoner.next_action(persona(&config), &subtask, &[]).await;
    assert_eq!(first, Ok(NextAction::Call(call.clone())));

    for (success, output) in [(true, "wrote 1 bytes"), (false, "disk full")] {
        let history =
            [ToolCallRecord { call: call.clone(), success, output: output.into(), event: false }];
        assert_eq!(
            reasoner.next_action(persona(&config), &subtask, &history).await,
            Ok(NextAction::Finish { success, summary: output.into() })
        );
    }
}

#[tokio::test(start_paused = true)]
async fn judge_progress_is_complete_exactly_when_every_step_succeeded() {
    let config = config();
    let reasoner = RuleBasedReasoner::new();
    let task = Task {
        id: "task-1".into(),
        goal: "two files".into(),
        steps: vec![write("s1"), write("s2")],
    };
    let result = |step: &str, success: bool| SubtaskResult {
        task_id: "task-1".into(),
        step_id: step.into(),
        agent: id(ME),
        success,
        output: String::new(),
        result: None,
    };
    let judge = |results: Vec<SubtaskResult>| {
        let (reasoner, task, config) = (&reasoner, &task, &config);
        async move { reasoner.judge_progress(persona(config), task, &results, "").await.unwrap() }
    };

    assert_eq!(
        judge(vec![result("s2", true), result("s1", true)]).await,
        Judgement { complete: true, summary: "2 of 2 steps succeeded".into() }
    );
    assert_eq!(
        judge(vec![result("s1", true), result("s2", false)]).await,
        Judgement { complete: false, summary: "1 of 2 steps succeeded".into() }
    );
    assert_eq!(
        judge(vec![result("s1", true), result("s3", true)]).await,
        Judgement { complete: false, summary: "1 of 2 steps succeeded".into() }
    );
}
