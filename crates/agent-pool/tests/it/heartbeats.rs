//! Heartbeat acks from every agent (issue #15): an idle agent's answer is recorded by each
//! cycle's sweep, one that cannot answer (held by someone else) is missed, audited and its
//! supervisor warned, and one that is not expected to answer is neither.

use std::sync::Arc;

use agent_core::AuditEvent;
use agent_pool::{AgentSlot, CycleReport, HeartbeatScheduler, Team};
use agent_state::{Address, AgentId, Message, MessageKind, Timestamp};

use crate::support::*;

/// A standard team whose driver is stopped after its first heartbeat, and a scheduler to drive
/// its pool by hand, one cycle at a time.
async fn team_driven_by_hand(dir: &std::path::Path) -> (Team, HeartbeatScheduler) {
    let team = Team::start(standard_team(), services(dir)).await.unwrap();
    team.stop().await;
    let services = team.services();
    let scheduler = HeartbeatScheduler::new(
        team.pool().clone(),
        services.bus.clone(),
        services.audit.clone(),
        services.clock.clone(),
    );
    (team, scheduler)
}

/// One cycle, with every heartbeat it started finished.
async fn cycle(scheduler: &mut HeartbeatScheduler) -> CycleReport {
    let report = scheduler.tick().await;
    scheduler.settle().await;
    report
}

/// `(acked, ran, missed)` of a slot.
fn counts(slot: &AgentSlot) -> (u64, u64, u64) {
    (slot.acked(), slot.ran(), slot.missed())
}

/// The cycles in which `agent` was audited as missing its heartbeat.
async fn missed_audited(team: &Team, agent: &AgentId) -> Vec<u64> {
    let records = team.services().audit.records(Some(agent)).await.unwrap();
    records
        .iter()
        .filter_map(|r| match r.event {
            AuditEvent::MissedHeartbeat { heartbeat } => Some(heartbeat),
            _ => None,
        })
        .collect()
}

/// The reasons of the warnings about `about` waiting in `supervisor`'s inbox (left there).
async fn warnings(team: &Team, supervisor: &str, about: &AgentId) -> Vec<String> {
    let bus = &team.services().bus;
    let inbox = Address::Agent(AgentId::new(supervisor));
    let taken = bus.take(&inbox, 1_000).await.unwrap();
    bus.release(&inbox).await.unwrap();
    taken
        .iter()
        .filter(|m| m.kind == MessageKind::Warning && m.from == Address::System)
        .filter(|m| m.content["about"] == serde_json::json!(about))
        .map(|m| m.content["reason"].as_str().unwrap_or_default().to_owned())
        .collect()
}

#[tokio::test(start_paused = true)]
async fn an_idle_agent_acks_every_cycle() {
    let dir = tempfile::tempdir().unwrap();
    let (team, mut scheduler) = team_driven_by_hand(dir.path()).await;
    let id = AgentId::new("bottom-d1");
    let slot = team.pool().get(&id).unwrap();
    let (acked, ran, missed) = counts(&slot);
    let responded = slot.metrics().await.heartbeats_responded;

    for n in 1..=3_u64 {
        let report = cycle(&mut scheduler).await;
        assert!(report.missed.is_empty(), "{report:?}");
        assert_eq!(slot.last_ack(), Some(report.number), "cycle {n} recorded its answer");
        assert_eq!(counts(&slot), (acked + n, ran, missed), "cycle {n}");
        let metrics = slot.metrics().await;
        assert_eq!(metrics.heartbeats_responded, responded + n, "cycle {n}: {metrics:?}");
        assert_eq!(metrics.heartbeats_missed, 0, "cycle {n}: {metrics:?}");
    }
    // Every agent of the team was idle: each answered through the sweep, none was started.
    let report = cycle(&mut scheduler).await;
    assert_eq!((report.started, report.idle, report.exempt), (0, team.pool().len(), 0));
    for slot in team.pool().all() {
        assert_eq!(slot.last_ack(), Some(report.number), "{}", slot.id());
    }
}

#[tokio::test(start_paused = true)]
async fn an_idle_agent_held_through_a_cycle_misses_it_and_acks_again_once_released() {
    let dir = tempfile::tempdir().unwrap();
    let (team, mut scheduler) = team_driven_by_hand(dir.path()).await;
    let id = AgentId::new("bottom-d1");
    let slot = team.pool().get(&id).unwrap();
    let before = cycle(&mut scheduler).await;
    assert_eq!(slot.last_ack(), Some(before.number));
    let (acked, ran, missed) = counts(&slot);
    let metrics = slot.metrics().await;

    // Wedged: someone holds the agent through the whole cycle.
    let held = slot.agent().lock().await;
    let report = cycle(&mut scheduler).await;
    assert_eq!(report.missed, vec![id.clone()]);
    assert_eq!(report.idle, team.pool().len() - 1, "{report:?}");
    assert_eq!(slot.last_ack(), Some(before.number), "no answer recorded");
    assert_eq!(counts(&slot), (acked, ran, missed + 1));
    assert_eq!(missed_audited(&team, &id).await, vec![report.number]);
    let warned = warnings(&team, "mid-docs", &id).await;
    assert_eq!(warned.len(), 1, "{warned:?}");
    assert!(warned[0].contains(&format!("missed heartbeat {}", report.number)), "{warned:?}");
    drop(held);

    let after = cycle(&mut scheduler).await;
    assert!(!after.missed.contains(&id), "{after:?}");
    assert_eq!(slot.last_ack(), Some(after.number), "it answers again");
    assert_eq!(counts(&slot), (acked + 1, ran, missed + 1));
    let now = slot.metrics().await;
    assert_eq!(now.heartbeats_missed, metrics.heartbeats_missed + 1, "{now:?}");
    assert_eq!(now.heartbeats_responded, metrics.heartbeats_responded + 1, "{now:?}");
    assert_eq!(missed_audited(&team, &id).await, vec![report.number], "missed once only");
}

#[tokio::test(start_paused = true)]
async fn every_cycle_books_every_agent_once_and_the_counts_add_up() {
    let dir = tempfile::tempdir().unwrap();
    let (team, mut scheduler) = team_driven_by_hand(dir.path()).await;
    let pool = team.pool().clone();
    let start: Vec<(Arc<AgentSlot>, (u64, u64, u64))> =
        pool.all().into_iter().map(|s| (s.clone(), counts(&s))).collect();
    let target = AgentId::new("bottom-b1");
    let slot = pool.get(&target).unwrap();
    let query = |n: u64| {
        Message::new(
            agent_core::new_message_id(),
            Address::System,
            &target,
            MessageKind::StatusQuery,
            serde_json::json!({ "n": n }),
            Timestamp(0),
        )
    };

    let cycles = 9_u64;
    let (mut ran, mut missed) = (0, 0);
    for n in 0..cycles {
        let held = match n % 3 {
            // Mail: its heartbeat runs.
            0 => {
                team.services().bus.send(query(n)).await.unwrap();
                ran += 1;
                None
            }
            // Held through the cycle: missed.
            1 if n < 6 => {
                missed += 1;
                Some(slot.agent().lock_owned().await)
            }
            // Idle: acked.
            _ => None,
        };
        let report = cycle(&mut scheduler).await;
        drop(held);
        assert_eq!(
            report.started + report.idle + report.missed.len() + report.exempt,
            pool.len(),
            "every agent is booked once: {report:?}"
        );
        if n % 3 == 0 {
            assert_eq!(slot.last_ack(), Some(report.number), "its heartbeat answered");
        }
    }

    let (acked0, ran0, missed0) = start.iter().find(|(s, _)| s.id() == &target).unwrap().1;
    let (acked, ran_now, missed_now) = counts(&slot);
    assert_eq!((ran_now - ran0, missed_now - missed0), (ran, missed));
    assert_eq!(acked - acked0, cycles - ran - missed, "every other cycle acked");
    for (slot, (acked, ran, missed)) in start {
        let (a, r, m) = counts(&slot);
        assert_eq!((a - acked) + (r - ran) + (m - missed), cycles, "{}", slot.id());
    }
    assert_eq!(missed_audited(&team, &target).await.len() as u64, missed);
}

#[tokio::test(start_paused = true)]
async fn a_terminated_agent_is_neither_acked_nor_missed() {
    let dir = tempfile::tempdir().unwrap();
    let (team, mut scheduler) = team_driven_by_hand(dir.path()).await;
    let id = AgentId::new("bottom-d2");
    let slot = team.pool().get(&id).unwrap();
    cycle(&mut scheduler).await;
    let last = slot.last_ack();
    slot.agent().lock().await.shutdown().await.unwrap();
    let (acked, ran, missed) = counts(&slot);

    for _ in 0..2 {
        let report = cycle(&mut scheduler).await;
        assert_eq!(report.exempt, 1, "{report:?}");
        assert!(report.missed.is_empty(), "{report:?}");
        assert_eq!(report.idle, team.pool().len() - 1, "{report:?}");
    }
    assert_eq!(counts(&slot), (acked, ran, missed));
    assert_eq!(slot.last_ack(), last);
    assert!(missed_audited(&team, &id).await.is_empty());
    assert!(warnings(&team, "mid-docs", &id).await.is_empty());
}

/// An idle agent acked by epoch (the last sweep acked it and nobody took its lock since) is
/// acked every cycle without being locked; once someone takes its lock and changes its status,
/// the next sweep looks at it again.
#[tokio::test(start_paused = true)]
async fn an_agent_acked_by_epoch_is_looked_at_again_once_its_lock_was_taken() {
    let dir = tempfile::tempdir().unwrap();
    let (team, mut scheduler) = team_driven_by_hand(dir.path()).await;
    let id = AgentId::new("bottom-d2");
    let slot = team.pool().get(&id).unwrap();
    cycle(&mut scheduler).await;
    let (acked, ran, missed) = counts(&slot);
    for n in 1..=3 {
        let report = cycle(&mut scheduler).await;
        assert_eq!(report.idle, team.pool().len(), "{report:?}");
        assert_eq!(counts(&slot), (acked + n, ran, missed));
        assert_eq!(slot.last_ack(), Some(report.number));
    }
    slot.agent().lock().await.shutdown().await.unwrap();
    let report = cycle(&mut scheduler).await;
    assert_eq!(report.exempt, 1, "{report:?}");
    assert_eq!(counts(&slot), (acked + 3, ran, missed));
}

/// The sweep takes the pool's read lock a chunk of agents at a time: across chunks, every agent
/// is still visited exactly once.
#[tokio::test(start_paused = true)]
async fn a_sweep_over_a_pool_of_several_chunks_acks_every_agent_once() {
    let dir = tempfile::tempdir().unwrap();
    let services = services(dir.path());
    let deps = agent_deps(&services);
    let pool = Arc::new(agent_pool::AgentPool::new(usize::MAX));
    let agents = 2_500;
    for n in 0..agents {
        let id = format!("bottom-{n:04}");
        let config = agent_state::AgentConfig::new(
            id.as_str(),
            id.as_str(),
            agent_state::AgentLayer::Bottom,
        )
        .with_supervisor("mid-1");
        let behavior = agent_layers::BottomAgent::new(agent_layers::BottomSpec::new(["list_dir"]));
        pool.create(config, Box::new(behavior), deps.clone()).await.unwrap();
    }
    let mut scheduler = HeartbeatScheduler::new(
        pool.clone(),
        services.bus.clone(),
        services.audit.clone(),
        services.clock.clone(),
    );

    for _ in 0..2 {
        let report = cycle(&mut scheduler).await;
        assert_eq!((report.started, report.idle, report.exempt), (0, agents, 0), "{report:?}");
        assert!(report.missed.is_empty(), "{report:?}");
        for slot in pool.all() {
            assert_eq!(slot.last_ack(), Some(report.number), "{}", slot.id());
        }
    }
    for slot in pool.all() {
        assert_eq!(counts(&slot), (2, 0, 0), "{}", slot.id());
    }
}
