//! The simulation's own parts: its invariant checks catch what they are for, its tool and
//! bus follow their seed.

#![allow(clippy::unwrap_used, reason = "tests")]

use std::sync::Arc;
use std::time::Duration;

use agent_core::tools::{Tool, ToolContext};
use agent_state::{Decision, DecisionId, Timestamp};
use governance::Governance;
use serde_json::json;

use super::*;

fn world(seed: u64) -> World {
    World::new(&Scenario::from_seed(seed)).unwrap()
}

#[tokio::test(start_paused = true)]
async fn a_side_effect_run_twice_is_caught() {
    let world = world(5);
    assert!(world.check().await.is_ok());
    world.effects.record("t0/s0");
    assert!(world.check().await.is_ok());
    world.effects.record("t0/s0");
    let error = world.check().await.unwrap_err();
    assert!(error.contains("`t0/s0` ran twice"), "{error}");
}

#[tokio::test(start_paused = true)]
async fn a_signature_by_a_stranger_is_caught() {
    let world = world(5);
    let id = DecisionId::from_u128(7);
    let decision =
        Decision::propose(id, "top-0".into(), json!({}), vec!["top-0".into()], Timestamp(1))
            .unwrap();
    world.governance.submit(decision).await.unwrap();
    let signed = AuditEvent::Decision { decision: id, action: "signed".into(), detail: "".into() };
    world.services.audit.append(&"top-0".into(), Timestamp(2), signed.clone()).await.unwrap();
    assert!(world.check().await.is_ok());
    world.services.audit.append(&"lead-0".into(), Timestamp(3), signed).await.unwrap();
    let error = world.check().await.unwrap_err();
    assert!(error.contains("`lead-0` signed decision"), "{error}");
}

#[tokio::test(start_paused = true)]
async fn a_simulated_tool_follows_its_seed() {
    let profile = ToolProfile {
        name: "sim".into(),
        latency_ms: (100, 900),
        transient_per_mille: 500,
        permanent: false,
    };
    let ctx = ToolContext::new(std::env::temp_dir()).unwrap();
    let mut runs = Vec::new();
    for _ in 0..2 {
        let effects = Arc::new(EffectLog::default());
        let tool = SimTool::new(profile.clone(), 9, effects.clone());
        let mut seen = Vec::new();
        for attempt in 0..8 {
            let started = tokio::time::Instant::now();
            let result = tool.call(&ctx, json!({"effect": format!("k{}", attempt % 3)})).await;
            seen.push((started.elapsed(), result.is_ok()));
        }
        runs.push((seen, effects.entries()));
    }
    assert_eq!(runs[0], runs[1]);
    let (seen, effects) = &runs[0];
    assert!(seen.iter().all(|(took, _)| *took >= Duration::from_millis(100)));
    assert!(seen.iter().any(|(_, ok)| *ok) && seen.iter().any(|(_, ok)| !*ok), "{seen:?}");
    assert_eq!(effects.len(), seen.iter().filter(|(_, ok)| *ok).count());

    let broken = SimTool::new(ToolProfile { permanent: true, ..profile }, 9, Arc::default());
    assert!(broken.call(&ctx, json!({"effect": "k"})).await.is_err());
}

#[test]
fn the_ids_of_a_sim_clock_follow_its_seed() {
    let ids = |seed| {
        let clock = SimClock::new(Timestamp(0), seed);
        (0..4).map(|_| clock.message_id()).collect::<Vec<_>>()
    };
    assert_eq!(ids(1), ids(1));
    assert_ne!(ids(1), ids(2));
}
