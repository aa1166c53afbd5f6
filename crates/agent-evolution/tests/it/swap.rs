//! Hot-swapping a genome into a live OODA agent: its next turn runs with it, its audit records
//! it, a rollback goes back to the version before.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use agent_core::tools::ToolContext;
use agent_core::{AuditEvent, RuleBasedReasoner};
use agent_evolution::{FlightRecorder, MemoryRecorder, SwapError, hot_swap};
use agent_layers::{BottomSpec, MidSpec, TopSpec};
use agent_pool::{AgentSpec, RoleSpec, Team, TeamServices, TeamSpec};
use agent_state::evolution::{EvolutionaryEventType, Genome, GenomeConfig, Lineage};
use agent_state::ooda::OodaConfig;
use agent_state::{AgentConfig, AgentLayer, CommandOutcome, OperatorCommand};
use serde_json::{Value, json};

use crate::support::*;

fn team() -> TeamSpec {
    let top = |id: &str, power: &str| AgentSpec {
        config: AgentConfig::new(id, id, AgentLayer::Top),
        role: RoleSpec::Top(TopSpec {
            power_type: power.into(),
            vote_weight: 1.0,
            signature_authority: vec!["plan".into()],
        }),
    };
    let mut ooda = OodaConfig::new("Editor", "keep notes");
    ooda.tools = vec!["read_file".into(), "write_file".into()];
    let mut spec = TeamSpec::new(vec![
        top("top-a", "power_a"),
        top("top-b", "power_b"),
        top("top-c", "power_c"),
        AgentSpec {
            config: AgentConfig::new("mid-docs", "lead", AgentLayer::Mid).with_supervisor("top-a"),
            role: RoleSpec::Mid(MidSpec { domain: "docs".into(), max_subordinates: 4 }),
        },
        AgentSpec {
            config: AgentConfig::new("ooda-1", "editor", AgentLayer::Bottom)
                .with_supervisor("mid-docs"),
            role: RoleSpec::Bottom(
                BottomSpec::new(["read_file", "write_file", "list_dir"]).with_ooda(ooda),
            ),
        },
        AgentSpec {
            config: AgentConfig::new("bottom-1", "plain", AgentLayer::Bottom)
                .with_supervisor("mid-docs"),
            role: RoleSpec::Bottom(BottomSpec::new(["read_file"])),
        },
    ]);
    spec.heartbeat = Duration::from_millis(20);
    spec
}

fn services(workspace: &std::path::Path) -> TeamServices {
    TeamServices::in_memory(
        ToolContext::new(workspace).unwrap(),
        Arc::new(RuleBasedReasoner::new()),
    )
}

fn winner(tools: &[&str]) -> Genome {
    let mut config = GenomeConfig::new("Careful editor");
    config.prompt = "check twice".into();
    config.max_retries = 5;
    config.timeout_ms = 12_345;
    config.tools = tools.iter().map(|t| (*t).to_owned()).collect();
    config.strategy.insert("style".into(), json!("terse"));
    let permissions = ["list_dir", "read_file", "write_file", "shell"].map(String::from).to_vec();
    Genome::genesis_with_code(
        config,
        BTreeMap::from([("agent/prompt.md".to_owned(), "be careful\n".to_owned())]),
        permissions,
    )
    .unwrap()
}

async fn max_retries(team: &Team, id: &str) -> u32 {
    let slot = team.pool().get(&agent(id)).unwrap();
    let guard = slot.agent().lock().await;
    guard.ctx().config().max_retries
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_genome_is_hot_swapped_into_a_live_agent_and_rolled_back() {
    let dir = tempfile::tempdir().unwrap();
    let team = Team::start(team(), services(dir.path())).await.unwrap();
    assert_eq!(max_retries(&team, "ooda-1").await, 3, "the team's default");
    let genome = winner(&["read_file", "list_dir"]);
    let recorder = MemoryRecorder::new();
    let version =
        hot_swap(&team, &agent("ooda-1"), &genome, Some(&recorder), Duration::from_secs(10))
            .await
            .unwrap();
    assert_eq!(version, 2);
    // Its next turn runs with the genome's settings, and its code is in the workspace.
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert_eq!(max_retries(&team, "ooda-1").await, 5);
    assert_eq!(
        std::fs::read_to_string(dir.path().join("agent/prompt.md")).unwrap(),
        "be careful\n"
    );
    // Its audit records the swap, with the genome and hashes before and after.
    let records = team.services().audit.records(Some(&agent("ooda-1"))).await.unwrap();
    let adopted: Vec<&Value> = records
        .iter()
        .filter_map(|r| match &r.event {
            AuditEvent::Ooda { ooda } if ooda.data["outcome"] == "adopted" => Some(&ooda.data),
            _ => None,
        })
        .collect();
    assert_eq!(adopted.len(), 1);
    assert_eq!(adopted[0]["change"]["genome_id"], json!(genome.id));
    assert_ne!(adopted[0]["before"], adopted[0]["after"]);
    // The flight recorder has the mutate and survival events for it.
    let events: Vec<_> = recorder.events().await.unwrap().into_iter().map(|(_, e)| e).collect();
    assert_eq!(events.len(), 2);
    assert_eq!(events[0].event_type, EvolutionaryEventType::Mutate);
    assert_eq!(events[0].payload["evolution_type"], "hot_swap");
    assert_eq!(events[1].payload["evolved_to"], json!(genome.id));
    assert!(Lineage::from_events(&events).nodes[&genome.id].adopted);

    // A rollback to version 1, an operator command of its own kind, is answered once it
    // applied: version 3, with the team's settings back and the code file gone.
    let rollback = OperatorCommand::Rollback { version: 1 };
    let sent = team.command(&agent("ooda-1"), &rollback).await.unwrap();
    let outcome = team.command_outcome(sent, Duration::from_secs(10)).await;
    assert_eq!(outcome, Some(CommandOutcome::Applied { version: 3, from: None }));
    // Its runtime settings follow its configuration at its next turn.
    let mut back = false;
    for _ in 0..200 {
        if max_retries(&team, "ooda-1").await == 3 {
            back = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(back, "the rollback restores the team's retries");
    assert!(!dir.path().join("agent/prompt.md").exists());
    // A rollback to a version it never had is refused, answered with why.
    let sent =
        team.command(&agent("ooda-1"), &OperatorCommand::Rollback { version: 9 }).await.unwrap();
    match team.command_outcome(sent, Duration::from_secs(10)).await {
        Some(CommandOutcome::Refused { reason }) => assert!(reason.contains('9'), "{reason}"),
        other => panic!("expected a refusal, got {other:?}"),
    }
    team.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hot_swap_beyond_the_agents_grant_or_into_a_plain_executor_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let team = Team::start(team(), services(dir.path())).await.unwrap();
    // `shell` is within the genome's permissions but not what the agent's lead granted it.
    let wide = winner(&["read_file", "shell"]);
    let err =
        hot_swap(&team, &agent("ooda-1"), &wide, None, Duration::from_secs(10)).await.unwrap_err();
    assert!(matches!(&err, SwapError::Refused { reason, .. } if reason.contains("shell")), "{err}");
    assert_eq!(max_retries(&team, "ooda-1").await, 3, "unchanged");
    let err =
        hot_swap(&team, &agent("bottom-1"), &winner(&["read_file"]), None, Duration::from_secs(10))
            .await
            .unwrap_err();
    assert!(matches!(err, SwapError::Refused { .. }), "{err}");
    let err =
        hot_swap(&team, &agent("nobody"), &wide, None, Duration::from_secs(1)).await.unwrap_err();
    assert!(matches!(err, SwapError::NoSuchAgent(_)), "{err}");
    team.shutdown().await.unwrap();
}
