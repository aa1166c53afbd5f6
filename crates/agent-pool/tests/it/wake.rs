//! Wake on work: an agent with new mail runs when the mail arrives, not at the next heartbeat,
//! and the heartbeat keeps its meaning.

use std::time::Duration;

use agent_pool::{HeartbeatScheduler, Team, WAKE_BURST, WAKE_RATE, WakingBus};
use agent_state::{Address, AgentId, Message, MessageKind, TaskOutcome, Timestamp};
use message_bus::{InMemoryBus, MessageBus};

use crate::support::*;

/// Regression (issue #11): each hop of a task (top → mid → bottom and back, signatures)
/// waited for the next heartbeat, so the 4-step example took ~44 s at the default 4 s. With a
/// one-hour heartbeat, a whole task now completes long before the second heartbeat is due.
/// (Real time on purpose: the tools run on the blocking pool, where paused time could jump to
/// the next heartbeat while they work. The minute is a hang guard, not a speed target.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_task_moves_at_the_speed_of_its_work_not_of_the_heartbeat() {
    let dir = tempfile::tempdir().unwrap();
    let mut spec = standard_team();
    spec.heartbeat = Duration::from_secs(3600);
    let team = Team::start(spec, services(dir.path())).await.unwrap();

    team.submit(hello_task("task-1")).await.unwrap();
    let outcome = tokio::time::timeout(Duration::from_secs(60), team.wait("task-1"))
        .await
        .expect("the task waited for the next heartbeat (an hour away)");

    assert!(matches!(outcome, TaskOutcome::Succeeded { .. }), "{outcome:?}");
    assert_eq!(team.pool().cycles(), 1, "only the first heartbeat ran");
    team.shutdown().await.unwrap();
}

/// Idle agents still answer every cycle and cost nothing; a heartbeat still runs after wakes.
#[tokio::test(start_paused = true)]
async fn heartbeats_keep_counting_cycles_with_wake_on_work() {
    let dir = tempfile::tempdir().unwrap();
    let mut spec = standard_team();
    spec.heartbeat = Duration::from_secs(1);
    let team = Team::start(spec, services(dir.path())).await.unwrap();
    team.submit(hello_task("task-1")).await.unwrap();
    team.wait("task-1").await;

    tokio::time::sleep(Duration::from_millis(5_500)).await;

    for line in team.summary().await {
        assert_eq!(line.metrics.heartbeats_missed, 0, "{}", line.id);
        assert!(line.metrics.heartbeats_responded >= 5, "{}: {:?}", line.id, line.metrics);
    }
    team.shutdown().await.unwrap();
}

/// A storm of mail to one agent: it takes at most `WAKE_BURST` turns at once; its mail then
/// waits until its allowance refills (logical time here), not for the next heartbeat.
#[tokio::test(start_paused = true)]
async fn one_agent_is_woken_at_a_bounded_rate() {
    let dir = tempfile::tempdir().unwrap();
    let services = services(dir.path());
    let inner: std::sync::Arc<dyn MessageBus> = std::sync::Arc::new(InMemoryBus::new());
    let mail = std::sync::Arc::new(tokio::sync::Notify::new());
    let bus: std::sync::Arc<dyn MessageBus> =
        std::sync::Arc::new(WakingBus::new(inner.clone(), mail.clone()));
    let team =
        Team::start(standard_team(), agent_pool::TeamServices { bus: bus.clone(), ..services })
            .await
            .unwrap();
    let pool = team.pool().clone();
    team.stop().await; // drive by hand from here
    let audit = team.services().audit.clone();
    let clock = team.services().clock.clone();
    let mut scheduler = HeartbeatScheduler::new(pool, bus.clone(), audit, clock);
    scheduler.tick().await;
    scheduler.settle().await;
    let target = AgentId::new("bottom-d1");
    let inbox = Address::Agent(target.clone());
    let query = |n: u32| {
        Message::new(
            agent_core::new_message_id(),
            Address::System,
            &target,
            MessageKind::StatusQuery,
            serde_json::json!({ "n": n }),
            Timestamp(0),
        )
    };

    let mut turns = 0;
    for n in 0..(WAKE_BURST + 10) {
        bus.send(query(n)).await.unwrap();
        turns += scheduler.wake().await;
        scheduler.settle().await;
    }

    assert_eq!(turns, WAKE_BURST as usize, "the burst is spent, no time has passed");
    assert_eq!(inner.pending(&inbox).await.unwrap(), 10, "the rest waits");
    let due = scheduler.next_wake().expect("the driver is told when to come back");
    assert!(due > tokio::time::Instant::now());
    tokio::time::sleep_until(due).await;
    assert_eq!(scheduler.wake().await, 1);
    scheduler.settle().await;
    assert_eq!(inner.pending(&inbox).await.unwrap(), 0, "one turn takes what waited");
    let refill = std::time::Duration::from_secs_f64(f64::from(WAKE_BURST) / WAKE_RATE);
    assert!(refill < std::time::Duration::from_millis(100), "a burst refills fast");
}
