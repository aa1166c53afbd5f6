//! A run spread over several [`Team`]s with [`Share`]s (as workers host it): a coordinator
//! that submits and waits, and two shares of the agents, on one set of services. Here the
//! services are in memory and the teams in one process; `placement` puts them on workers over
//! NATS (the CLI's worker tests run that end to end).

use std::collections::BTreeSet;
use std::time::Duration;

use agent_pool::{Share, Team, TeamError};
use agent_state::{AgentId, AgentStatus};

use crate::support::*;

fn ids(names: &[&str]) -> BTreeSet<AgentId> {
    names.iter().map(|n| AgentId::new(*n)).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_coordinator_and_two_shares_of_the_agents_complete_a_task() {
    let dir = tempfile::tempdir().unwrap();
    let services = services(dir.path());
    let mut spec = standard_team();
    spec.heartbeat = Duration::from_millis(20);
    let powers = ids(&["top-a", "top-b", "top-c"]);
    let rest = ids(&["mid-docs", "mid-build", "bottom-d1", "bottom-d2", "bottom-b1", "bottom-b2"]);
    let leads_share =
        Team::join(spec.clone(), services.clone(), Share::Agents(rest.clone())).await.unwrap();
    let powers_share =
        Team::join(spec.clone(), services.clone(), Share::Agents(powers.clone())).await.unwrap();
    let coordinator = Team::join(spec.clone(), services.clone(), Share::Coordinator).await.unwrap();
    assert!(coordinator.pool().is_empty(), "the coordinator hosts no agent");
    assert_eq!(powers_share.pool().len(), 3);
    assert_eq!(leads_share.pool().len(), 6);

    coordinator.submit(hello_task("shared")).await.unwrap();
    let outcome =
        tokio::time::timeout(Duration::from_secs(60), coordinator.wait("shared")).await.unwrap();
    assert!(outcome.is_success(), "{outcome:?}");
    assert_eq!(std::fs::read_to_string(dir.path().join("size.txt")).unwrap().trim(), "14");
    // Only the coordinator reads outcomes: the shares never saw the task close.
    assert_eq!(powers_share.outcome("shared"), None);

    // Each share shuts its own agents down; the coordinator's summary shows all of them, the
    // others as the stores recorded them.
    powers_share.shutdown().await.unwrap();
    leads_share.shutdown().await.unwrap();
    let summary = coordinator.summary().await;
    assert_eq!(summary.len(), 9, "{summary:?}");
    assert!(summary.iter().all(|a| a.status == AgentStatus::Terminated), "{summary:?}");
    let top = summary.iter().find(|a| a.id.as_str() == "top-a").unwrap();
    assert_eq!(top.metrics.tasks_completed, 1, "top-a's stored metrics");
}

#[tokio::test]
async fn a_share_naming_an_agent_outside_the_team_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let error = Team::join(standard_team(), services(dir.path()), Share::Agents(ids(&["ghost"])))
        .await
        .err()
        .expect("refused");
    assert!(matches!(&error, TeamError::NotInTeam { agent } if agent.as_str() == "ghost"));
    assert!(error.to_string().contains("`ghost` is not in the team"), "{error}");
}

#[tokio::test(start_paused = true)]
async fn agents_spawned_in_a_share_are_named_after_its_configured_agent_and_do_the_work() {
    use crate::goal::{audit, goal_team, roles, run_goal, script, scripted_services, spawned};
    let dir = tempfile::tempdir().unwrap();
    let (services, _reasoner) = scripted_services(dir.path(), script);
    let spec = goal_team(roles());
    // top-a plans and spawns the leads, which spawn the workers: all of them live in top-a's
    // share, named after it, so another share's spawns could never take their ids.
    let proposer =
        Team::join(spec.clone(), services.clone(), Share::Agents(ids(&["top-a"]))).await.unwrap();
    let signers =
        Team::join(spec.clone(), services.clone(), Share::Agents(ids(&["top-b", "top-c"])))
            .await
            .unwrap();
    let coordinator = Team::join(spec, services.clone(), Share::Coordinator).await.unwrap();
    let outcome = run_goal(&coordinator).await;
    assert!(outcome.is_success(), "{outcome:?}");
    let spawns = spawned(&audit(&services).await);
    assert!(!spawns.is_empty());
    for (_, agent, role) in &spawns {
        assert!(agent.starts_with(&format!("{role}-top-a-")), "{spawns:?}");
        assert!(
            proposer.pool().get(&AgentId::new(agent.as_str())).is_some(),
            "{agent} is hosted with its root"
        );
        assert!(signers.pool().get(&AgentId::new(agent.as_str())).is_none());
    }
}
