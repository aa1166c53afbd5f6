//! A human as a signer: with `[approvals] plans = true` every plan also needs one of the
//! allowed humans, who signs or vetoes it through the governance trait as `human:<name>`.

use agent_pool::{Approvals, Team, TeamSpec};
use agent_state::{
    AgentId, AgentStatus, Decision, DecisionStatus, SignError, SignOutcome, TaskFailure,
    TaskOutcome, Timestamp,
};
use governance::DecideError;

use crate::support::*;

fn team_with_humans() -> TeamSpec {
    let mut spec = standard_team();
    spec.approvals = Approvals { humans: vec!["alice".into(), "bob".into()], plans: true };
    spec
}

/// The plan without its shell step (no sandbox needed).
fn task(id: &str) -> agent_state::Task {
    let mut task = hello_task(id);
    task.steps.truncate(2);
    task
}

/// Lets the team run until the plan has every power's signature and waits only for a human;
/// then checks it keeps waiting, longer than the guards' `idle_heartbeats`, without being
/// stopped as a run without progress.
async fn plan_waiting_for_a_human(team: &Team, services: &agent_pool::TeamServices) -> Decision {
    let heartbeat = team_with_humans().heartbeat;
    let mut waited = 0;
    let decision = loop {
        let pending = services.governance.list_pending().await.unwrap();
        if let Some(d) = pending.first()
            && d.missing_signers().next().is_none()
        {
            break d.clone();
        }
        waited += 1;
        assert!(waited < 100, "the powers never signed the plan: {pending:?}");
        tokio::time::sleep(heartbeat / 4).await;
    };
    assert!(decision.needs_human(), "{decision:?}");
    let allowed = &decision.human_approval.as_ref().unwrap().allowed;
    assert_eq!(allowed, &["alice", "bob"]);
    let idle = agent_state::GuardSettings::default().idle_heartbeats;
    tokio::time::sleep(heartbeat * (idle + 5)).await;
    let proposer = team.pool().get(&AgentId::new("top-a")).unwrap();
    assert_eq!(proposer.try_peek().unwrap().status, AgentStatus::WaitingApproval);
    assert_eq!(team.outcome("human-plan"), None, "the task still waits for the human");
    assert_eq!(
        services.governance.get(decision.id).await.unwrap().unwrap().status,
        DecisionStatus::Pending
    );
    decision
}

#[tokio::test(start_paused = true)]
async fn a_plan_that_needs_a_human_waits_and_runs_once_an_allowed_human_signs() {
    let dir = tempfile::tempdir().unwrap();
    let services = services(dir.path());
    let team = Team::start(team_with_humans(), services.clone()).await.unwrap();
    team.submit(task("human-plan")).await.unwrap();
    let decision = plan_waiting_for_a_human(&team, &services).await;
    assert!(!dir.path().join("hello.txt").exists(), "nothing runs before the human signs");

    // Someone not allowed is refused, and nothing changes.
    let mallory = AgentId::human("mallory").unwrap();
    let refused = services.governance.sign(decision.id, &mallory, Timestamp(1)).await;
    assert!(
        matches!(refused, Err(DecideError::Rule(SignError::NotARequiredSigner { ref agent, .. })) if *agent == mallory),
        "{refused:?}"
    );
    assert_eq!(services.governance.get(decision.id).await.unwrap().unwrap(), decision);

    let alice = AgentId::human("alice").unwrap();
    let signed = services.governance.sign(decision.id, &alice, Timestamp(2)).await.unwrap();
    assert_eq!(signed, SignOutcome::Approved);
    let outcome = team.wait("human-plan").await;
    assert!(outcome.is_success(), "{outcome:?}");
    assert!(dir.path().join("hello.txt").is_file());
    team.shutdown().await.unwrap();
}

#[tokio::test(start_paused = true)]
async fn a_human_veto_fails_the_task_with_the_reason() {
    let dir = tempfile::tempdir().unwrap();
    let services = services(dir.path());
    let team = Team::start(team_with_humans(), services.clone()).await.unwrap();
    team.submit(task("human-plan")).await.unwrap();
    let decision = plan_waiting_for_a_human(&team, &services).await;
    let bob = AgentId::human("bob").unwrap();
    services.governance.veto(decision.id, &bob, "not on a Friday", Timestamp(3)).await.unwrap();
    let outcome = team.wait("human-plan").await;
    let TaskOutcome::Failed { reason: TaskFailure::Vetoed { by, reason }, .. } = outcome else {
        panic!("expected the human's veto, got {outcome:?}")
    };
    assert_eq!((by, reason.as_str()), (bob, "not on a Friday"));
    assert!(!dir.path().join("hello.txt").exists(), "a vetoed plan must not run");
    team.shutdown().await.unwrap();
}

#[tokio::test(start_paused = true)]
async fn without_plans_set_no_human_is_asked() {
    let dir = tempfile::tempdir().unwrap();
    let services = services(dir.path());
    let mut spec = team_with_humans();
    spec.approvals.plans = false;
    let team = Team::start(spec, services.clone()).await.unwrap();
    team.submit(task("no-human")).await.unwrap();
    assert!(team.wait("no-human").await.is_success());
    let decisions = services.governance.list().await.unwrap();
    assert!(decisions.iter().all(|d| d.human_approval.is_none()), "{decisions:?}");
    team.shutdown().await.unwrap();
}
