//! Conflicts that arise in real runs and go to the top layer's weighted vote: a step every
//! executor failed (retry or abandon), a result the lead finds short of its acceptance check
//! (redo or accept), a vetoed plan when the team arbitrates vetoes (proceed or abandon). No
//! message is injected except in the bad-input cases.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use agent_core::protocol::{ConflictReport, VoteResponse};
use agent_core::tools::{Tool, ToolContext, ToolError, ToolOutput, ToolRegistry};
use agent_core::{
    AuditEvent, Conflict, Judgement, ReasoningRequest, RuleBasedReasoner, ScriptedAnswer,
    ScriptedReasoner, new_message_id,
};
use agent_pool::{Team, TeamError, TeamServices};
use agent_state::{
    Actor, AgentId, BoardId, Capability, DecisionStatus, Message, MessageKind, TaskFailure,
    TaskOutcome,
};
use async_trait::async_trait;
use whiteboard::Whiteboard;

use crate::support::*;

/// A tool that fails until the global board shows a vote to retry: the step can only succeed
/// once the team has arbitrated it.
struct AfterRetryVote {
    boards: Arc<dyn Whiteboard>,
    calls: AtomicUsize,
}

#[async_trait]
impl Tool for AfterRetryVote {
    fn name(&self) -> &str {
        "deploy"
    }
    fn description(&self) -> &str {
        "fails until the powers voted to retry"
    }
    fn schema(&self) -> &serde_json::Value {
        object_schema()
    }
    fn has_side_effects(&self) -> bool {
        false
    }
    async fn call(
        &self,
        _ctx: &ToolContext,
        _args: serde_json::Value,
    ) -> Result<ToolOutput, ToolError> {
        self.calls.fetch_add(1, Ordering::SeqCst);
        let global = self
            .boards
            .read(&Actor::System, &BoardId::Global)
            .await
            .map_err(|e| ToolError::Failed { tool: "deploy".into(), message: e.to_string() })?;
        let voted = global.content.contains("Resolution: retry");
        Ok(ToolOutput {
            success: voted,
            output: if voted { "deployed".into() } else { "the target refuses".into() },
            data: serde_json::Value::Null,
        })
    }
}

fn prefer(services: &mut TeamServices, power: &str, options: &[&str]) {
    services.reasoners.insert(
        AgentId::new(power),
        Arc::new(RuleBasedReasoner::new().prefer(options.iter().copied())),
    );
}

async fn global(services: &TeamServices) -> String {
    services.boards.read(&Actor::System, &BoardId::Global).await.unwrap().content
}

async fn arbitrated(team: &Team, power: &str) -> u64 {
    team.pool().get(&AgentId::new(power)).unwrap().metrics().await.conflicts_arbitrated
}

/// `agent`'s audited refusals, as `(action, error)`.
async fn denied(services: &TeamServices, agent: &str) -> Vec<(String, String)> {
    services
        .audit
        .records(Some(&AgentId::new(agent)))
        .await
        .unwrap()
        .into_iter()
        .filter_map(|r| match r.event {
            AuditEvent::Denied { action, error } => Some((action, error)),
            _ => None,
        })
        .collect()
}

/// A task of one `deploy` step for the docs lead.
fn deploy_task(id: &str) -> agent_state::Task {
    agent_state::Task {
        id: id.into(),
        goal: "deploy the docs".into(),
        steps: vec![step("deploy", "docs", "deploy", serde_json::json!({}))],
    }
}

/// The standard team whose docs executors also hold `deploy`.
fn deploy_team() -> agent_pool::TeamSpec {
    let mut spec = standard_team();
    let tools = ["read_file", "write_file", "list_dir", "shell", "deploy"];
    for agent in &mut spec.agents {
        if agent.config.id.as_str().starts_with("bottom-d") {
            *agent = bottom(agent.config.id.as_str(), "mid-docs", &tools);
        }
    }
    spec
}

fn with_deploy(services: &mut TeamServices) -> Arc<AfterRetryVote> {
    let deploy =
        Arc::new(AfterRetryVote { boards: services.boards.clone(), calls: AtomicUsize::new(0) });
    let mut tools = ToolRegistry::with_builtins();
    tools.register(deploy.clone()).unwrap();
    services.tools = Arc::new(tools);
    deploy
}

#[tokio::test(start_paused = true)]
async fn a_step_every_executor_failed_is_voted_on_and_retried_until_it_succeeds() {
    let dir = tempfile::tempdir().unwrap();
    let mut services = services(dir.path());
    let deploy = with_deploy(&mut services);
    for power in ["top-a", "top-b", "top-c"] {
        prefer(&mut services, power, &["retry"]);
    }
    let team = Team::start(deploy_team(), services.clone()).await.unwrap();

    team.submit(deploy_task("t-retry")).await.unwrap();
    let outcome = team.wait("t-retry").await;

    assert!(outcome.is_success(), "{outcome:?}");
    let global = global(&services).await;
    assert!(global.contains("## Arbitration Result"), "{global}");
    assert!(global.contains("Conflict: lead mid-docs cannot finish step deploy"), "{global}");
    assert!(global.contains("Parties: mid-docs, top-a"), "{global}");
    assert!(global.contains("Resolution: retry"), "{global}");
    assert_eq!(arbitrated(&team, "top-a").await, 1, "one vote, by the proposer");
    assert!(deploy.calls.load(Ordering::SeqCst) > 2, "it failed before the vote");
    let lead = services
        .boards
        .read(&Actor::System, &BoardId::Agent(AgentId::new("mid-docs")))
        .await
        .unwrap()
        .content;
    assert!(lead.contains("arbitration `t-retry/deploy/escalation` by top-a: retry"), "{lead}");
    team.shutdown().await.unwrap();
}

#[tokio::test(start_paused = true)]
async fn a_step_every_executor_failed_is_voted_on_and_abandoned_by_default() {
    let dir = tempfile::tempdir().unwrap();
    let mut services = services(dir.path());
    let deploy = with_deploy(&mut services);
    let team = Team::start(deploy_team(), services.clone()).await.unwrap();

    team.submit(deploy_task("t-abandon")).await.unwrap();
    let outcome = team.wait("t-abandon").await;

    let TaskOutcome::Failed { reason: TaskFailure::StepFailed { step, error, .. }, .. } = &outcome
    else {
        panic!("{outcome:?}")
    };
    assert_eq!(step, "deploy");
    assert!(error.contains("the target refuses"), "{error}");
    assert!(global(&services).await.contains("Resolution: abandon"));
    assert_eq!(arbitrated(&team, "top-a").await, 1);
    let calls = deploy.calls.load(Ordering::SeqCst);
    // Nothing runs after the vote.
    tokio::time::sleep(std::time::Duration::from_secs(60)).await;
    assert_eq!(deploy.calls.load(Ordering::SeqCst), calls);
    team.shutdown().await.unwrap();
}

#[tokio::test(start_paused = true)]
async fn without_arbitration_a_step_every_executor_failed_fails_the_task_at_once() {
    let dir = tempfile::tempdir().unwrap();
    let mut services = services(dir.path());
    with_deploy(&mut services);
    let mut spec = deploy_team();
    spec.arbitration.escalations = false;
    let team = Team::start(spec, services.clone()).await.unwrap();

    team.submit(deploy_task("t-plain")).await.unwrap();
    let outcome = team.wait("t-plain").await;

    assert!(matches!(outcome, TaskOutcome::Failed { reason: TaskFailure::StepFailed { .. }, .. }));
    assert!(!global(&services).await.contains("## Arbitration Result"));
    assert_eq!(arbitrated(&team, "top-a").await, 0);
    team.shutdown().await.unwrap();
}

#[tokio::test(start_paused = true)]
async fn a_result_the_lead_finds_short_of_its_acceptance_check_is_redone_by_vote() {
    let dir = tempfile::tempdir().unwrap();
    let mut services = services(dir.path());
    // The docs lead finds the first result short of the check, and the second one fine.
    let judged = Arc::new(AtomicUsize::new(0));
    let count = judged.clone();
    let lead = ScriptedReasoner::from_fn(move |request| match request {
        ReasoningRequest::Judge { .. } => {
            let first = count.fetch_add(1, Ordering::SeqCst) == 0;
            ScriptedAnswer::Judgement(Judgement {
                complete: !first,
                summary: if first { "no greeting in it".into() } else { "fine".into() },
            })
        }
        _ => ScriptedAnswer::Fallback,
    });
    services.reasoners.insert(AgentId::new("mid-docs"), Arc::new(lead));
    let team = Team::start(standard_team(), services.clone()).await.unwrap();
    let mut task = hello_task("t-accept");
    task.steps.truncate(1);
    task.steps[0].acceptance = "hello.txt greets the reader".into();

    team.submit(task).await.unwrap();
    let outcome = team.wait("t-accept").await;

    let TaskOutcome::Succeeded { results, .. } = &outcome else { panic!("{outcome:?}") };
    assert_eq!(judged.load(Ordering::SeqCst), 2, "judged once per result");
    let global = global(&services).await;
    assert!(global.contains("Resolution: redo"), "{global}");
    assert!(global.contains("falls short of its acceptance check"), "{global}");
    assert_eq!(arbitrated(&team, "top-a").await, 1);
    // The first executor's result was disputed; the step was done again by the other one.
    let parties = global
        .lines()
        .find_map(|l| l.strip_prefix("Parties: mid-docs, "))
        .expect("the parties are on the board")
        .to_owned();
    assert_ne!(results[0].agent.as_str(), parties, "redone by another executor");
    // The disputed executor was told the ruling.
    let board = services
        .boards
        .read(&Actor::System, &BoardId::Agent(AgentId::new(parties.as_str())))
        .await
        .unwrap()
        .content;
    assert!(
        board.contains("- arbitration `t-accept/write-hello/acceptance` by top-a: redo"),
        "{board}"
    );
    team.shutdown().await.unwrap();
}

/// The standard team where arbitration covers vetoed plans and top-b vetoes shell.
async fn vetoing_team(weights: [f64; 3]) -> (Team, TeamServices, tempfile::TempDir) {
    let dir = tempfile::tempdir().unwrap();
    let mut services = services(dir.path());
    prefer(&mut services, "top-a", &["proceed"]);
    services.reasoners.insert(
        AgentId::new("top-b"),
        Arc::new(RuleBasedReasoner::new().forbid_tools(["shell"]).prefer(["abandon"])),
    );
    prefer(&mut services, "top-c", &["proceed"]);
    let mut spec = standard_team();
    spec.arbitration.vetoed_plans = true;
    for (agent, weight) in spec.agents.iter_mut().zip(weights) {
        if let agent_pool::RoleSpec::Top(t) = &mut agent.role {
            t.vote_weight = weight;
        }
    }
    let team = Team::start(spec, services.clone()).await.unwrap();
    (team, services, dir)
}

#[tokio::test(start_paused = true)]
async fn a_vetoed_plan_goes_to_the_vote_when_the_team_asks_and_the_vote_can_overrule_it() {
    let (team, services, _dir) = vetoing_team([2.0, 1.0, 1.0]).await;

    team.submit(hello_task("t-veto")).await.unwrap();
    let outcome = team.wait("t-veto").await;

    assert!(outcome.is_success(), "{outcome:?}");
    let decisions = services.governance.list().await.unwrap();
    assert_eq!(decisions[0].status, DecisionStatus::Vetoed, "the veto is on record");
    let global = global(&services).await;
    assert!(global.contains("Resolution: proceed"), "{global}");
    assert!(global.contains("the vote overrules the veto by top-b"), "{global}");
    assert_eq!(arbitrated(&team, "top-a").await, 1);
    team.shutdown().await.unwrap();
}

#[tokio::test(start_paused = true)]
async fn a_vetoed_plan_the_vote_upholds_fails_with_the_veto() {
    let (team, services, _dir) = vetoing_team([1.0, 5.0, 1.0]).await;

    team.submit(hello_task("t-veto-stands")).await.unwrap();
    let outcome = team.wait("t-veto-stands").await;

    let TaskOutcome::Failed { reason: TaskFailure::Vetoed { by, .. }, .. } = &outcome else {
        panic!("{outcome:?}")
    };
    assert_eq!(by.as_str(), "top-b");
    assert!(global(&services).await.contains("Resolution: abandon"));
    assert!(!services.workspace.workspace().join("hello.txt").exists(), "nothing ran");
    team.shutdown().await.unwrap();
}

#[tokio::test(start_paused = true)]
async fn conflict_reports_and_votes_from_the_wrong_agents_are_refused_and_audited() {
    let dir = tempfile::tempdir().unwrap();
    let services = services(dir.path());
    let team = Team::start(standard_team(), services.clone()).await.unwrap();
    let send = |from: &str, kind: MessageKind, content: serde_json::Value| {
        Message::new(
            new_message_id(),
            AgentId::new(from),
            AgentId::new("top-a"),
            kind,
            content,
            services.clock.now(),
        )
    };
    // mid-build reports a conflict between two others.
    let conflict = Conflict {
        id: "c-stranger".into(),
        issue: "who owns the docs".into(),
        parties: vec![AgentId::new("mid-docs"), AgentId::new("bottom-d1")],
        options: vec!["a".into(), "b".into()],
    };
    let report = ConflictReport { conflict, subject: None };
    services
        .bus
        .send(send(
            "mid-build",
            MessageKind::ConflictReport,
            serde_json::to_value(&report).unwrap(),
        ))
        .await
        .unwrap();
    // An executor casts a vote nobody asked for.
    let vote = VoteResponse { conflict_id: "c-stranger".into(), choice: "a".into(), weight: 9.0 };
    services
        .bus
        .send(send("bottom-d1", MessageKind::VoteResponse, serde_json::to_value(&vote).unwrap()))
        .await
        .unwrap();
    tokio::time::sleep(std::time::Duration::from_secs(30)).await;

    let refused = denied(&services, "top-a").await;
    assert!(
        refused
            .iter()
            .any(|(action, error)| action == "conflict_report `c-stranger` from mid-build"
                && error.contains("not a party")),
        "{refused:?}"
    );
    assert_eq!(arbitrated(&team, "top-a").await, 0, "nothing was arbitrated");
    assert!(!global(&services).await.contains("## Arbitration Result"));
    team.shutdown().await.unwrap();
}

#[tokio::test(start_paused = true)]
async fn a_power_without_arbitrate_is_not_asked_to_vote_and_a_team_without_any_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let mut services = services(dir.path());
    with_deploy(&mut services);
    let mut spec = deploy_team();
    let without = [Capability::Plan, Capability::Review, Capability::Coordinate];
    spec.agents[2].config = spec.agents[2].config.clone().with_capabilities(without);
    let team = Team::start(spec.clone(), services.clone()).await.unwrap();

    team.submit(deploy_task("t-two-voters")).await.unwrap();
    let outcome = team.wait("t-two-voters").await;

    assert!(!outcome.is_success());
    let global = global(&services).await;
    let votes = global.lines().find_map(|l| l.strip_prefix("Votes: ")).expect("votes on the board");
    assert!(votes.contains("top-a=") && votes.contains("top-b="), "{votes}");
    assert!(!votes.contains("top-c="), "top-c may not arbitrate: {votes}");
    team.shutdown().await.unwrap();

    for agent in spec.agents.iter_mut().take(3) {
        agent.config = agent.config.clone().with_capabilities(without);
    }
    let dir = tempfile::tempdir().unwrap();
    let err = Team::start(spec, crate::support::services(dir.path())).await.err().expect("refused");
    assert!(matches!(err, TeamError::NoArbitrator), "{err}");
    assert!(err.to_string().contains("[arbitration]"), "{err}");
}
