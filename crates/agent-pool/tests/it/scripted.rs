//! The scripted reasoner drives a team without a model and records what the layers asked.

use std::sync::Arc;

use agent_core::{
    NextAction, Persona, ReasonError, Reasoner, ReasoningRequest, ScriptedAnswer, ScriptedReasoner,
    Verdict,
};
use agent_pool::Team;
use agent_state::{
    AgentConfig, AgentId, AgentLayer, Decision, DecisionId, TaskFailure, TaskOutcome, Timestamp,
};

use crate::support::*;

#[tokio::test(start_paused = true)]
async fn a_scripted_power_vetoes_and_its_request_is_recorded() {
    let dir = tempfile::tempdir().unwrap();
    let mut services = services(dir.path());
    let scripted =
        Arc::new(ScriptedReasoner::from_answers([ScriptedAnswer::Verdict(Verdict::Veto {
            reason: "budget review pending".into(),
        })]));
    services.reasoners.insert(AgentId::new("top-b"), scripted.clone());
    let team = Team::start(standard_team(), services.clone()).await.unwrap();
    team.submit(hello_task("scripted-veto")).await.unwrap();
    let outcome = team.wait("scripted-veto").await;
    let TaskOutcome::Failed { reason: TaskFailure::Vetoed { by, reason }, .. } = outcome else {
        panic!("expected the scripted veto, got {outcome:?}")
    };
    assert_eq!((by.as_str(), reason.as_str()), ("top-b", "budget review pending"));
    let requests = scripted.requests();
    assert_eq!(requests.len(), 1, "{requests:?}");
    let ReasoningRequest::Review { agent, decision } = &requests[0] else {
        panic!("expected a review, got {:?}", requests[0])
    };
    assert_eq!(agent.as_str(), "top-b");
    assert_eq!(decision.content["task_id"], "scripted-veto");
    assert_eq!(scripted.remaining(), 0);
    team.shutdown().await.unwrap();
}

#[tokio::test(start_paused = true)]
async fn a_function_can_answer_every_question_and_fall_back_for_the_rest() {
    let dir = tempfile::tempdir().unwrap();
    let mut services = services(dir.path());
    // Executors report every step done without calling a tool; everything else falls back to
    // the rule-based reasoner.
    let scripted = Arc::new(ScriptedReasoner::from_fn(|request| match request {
        ReasoningRequest::NextAction { .. } => {
            ScriptedAnswer::Action(NextAction::Finish { success: true, summary: "dry run".into() })
        }
        _ => ScriptedAnswer::Fallback,
    }));
    services.reasoner = scripted.clone();
    let team = Team::start(standard_team(), services.clone()).await.unwrap();
    team.submit(hello_task("dry")).await.unwrap();
    let TaskOutcome::Succeeded { results, .. } = team.wait("dry").await else {
        panic!("dry run failed")
    };
    assert!(results.iter().all(|r| r.output == "dry run"), "{results:?}");
    assert!(!dir.path().join("hello.txt").exists(), "no tool ran");
    let requests = scripted.requests();
    let count = |kind: fn(&ReasoningRequest) -> bool| requests.iter().filter(|r| kind(r)).count();
    assert_eq!(count(|r| matches!(r, ReasoningRequest::Review { .. })), 2, "two powers reviewed");
    assert_eq!(count(|r| matches!(r, ReasoningRequest::NextAction { .. })), 3, "one per step");
    assert_eq!(count(|r| matches!(r, ReasoningRequest::Judge { .. })), 1);
    assert!(
        requests
            .iter()
            .filter(|r| matches!(r, ReasoningRequest::NextAction { .. }))
            .all(|r| r.agent().as_str().starts_with("bottom-"))
    );
    team.shutdown().await.unwrap();
}

#[tokio::test]
async fn an_answer_of_the_wrong_kind_is_a_clear_error() {
    let scripted = ScriptedReasoner::from_answers([
        ScriptedAnswer::Vote("merge".into()),
        ScriptedAnswer::Fail(ReasonError::Backend {
            reasoner: "scripted".into(),
            message: "down".into(),
        }),
    ]);
    let config = AgentConfig::new("top-a", "Power A", AgentLayer::Top);
    let who = Persona { config: &config, system_prompt: "", tools: &[], roles: &[], domains: &[] };
    let decision = Decision::propose(
        DecisionId::from_u128(1),
        AgentId::new("top-a"),
        serde_json::json!({"steps": [{"id": "a", "tool": "shell"}]}),
        vec![AgentId::new("top-a")],
        Timestamp(0),
    )
    .unwrap();
    let err = scripted.review_decision(who, &decision).await.unwrap_err();
    assert_eq!(
        err.to_string(),
        "cannot decide: the scripted reasoner was asked to review but its next answer is a vote answer"
    );
    let err = scripted.review_decision(who, &decision).await.unwrap_err();
    assert!(matches!(err, ReasonError::Backend { .. }), "{err}");
    // The script is used up: the rule-based fallback signs a plan with steps.
    assert_eq!(scripted.review_decision(who, &decision).await.unwrap(), Verdict::Sign);
    assert_eq!(scripted.requests().len(), 3);
}
