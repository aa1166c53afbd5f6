//! Progress and events reach the caller in order, and a slow consumer never holds a run up.

use std::sync::Arc;

use agent_state::{RunEvent, RunState};

use super::cx;
use crate::{ChannelObserver, Executor, FnKind, KindOutput, Registry, RunRequest};

fn counting() -> Executor {
    let mut registry = Registry::new();
    registry
        .register(FnKind::new("count", "reports 0..=100 by tens, then 30", |_, capsule| {
            Box::pin(async move {
                for p in (0..=100).step_by(10) {
                    capsule.progress(p, format!("at {p}"));
                    tokio::task::yield_now().await;
                }
                // Progress never goes back.
                capsule.progress(30, "late");
                capsule.note("file_written", serde_json::json!({ "path": "a.txt" }));
                Ok(KindOutput::new("counted", 1.0))
            })
        }))
        .unwrap();
    Executor::new(registry)
}

#[tokio::test(start_paused = true)]
async fn events_arrive_in_order_as_they_happen() {
    let (observer, mut events) = ChannelObserver::new(1_000);
    let task = {
        let executor = counting();
        tokio::spawn(async move {
            executor
                .execute(
                    RunRequest::new("count", "go"),
                    cx("count").with_observer(Arc::new(observer)),
                )
                .await
        })
    };
    // The first events come while the run is still going.
    let first = events.recv().await.unwrap();
    assert!(
        matches!(&first, RunEvent::Transition { transition, .. } if transition.to == RunState::Running)
    );
    let response = task.await.unwrap().unwrap();
    let mut lines = Vec::new();
    while let Ok(event) = events.try_recv() {
        assert_eq!(event.run_id(), &response.run_id);
        lines.push(match event {
            RunEvent::Progress { percent, message, .. } => format!("{percent} {message}"),
            RunEvent::Note { name, .. } => name,
            RunEvent::Transition { transition, .. } => transition.to.to_string(),
            other => format!("{other:?}"),
        });
    }
    let mut expected: Vec<String> = (0..=100).step_by(10).map(|p| format!("{p} at {p}")).collect();
    expected.extend(["100 late".to_owned(), "file_written".to_owned(), "completed".to_owned()]);
    assert_eq!(lines, expected);
}

#[tokio::test(start_paused = true)]
async fn a_slow_consumer_loses_progress_not_the_run() {
    let (observer, events) = ChannelObserver::new(2);
    let observer = Arc::new(observer);
    let response = counting()
        .execute(RunRequest::new("count", "go"), cx("count").with_observer(observer.clone()))
        .await
        .unwrap();
    assert!(response.success());
    assert_eq!(events.len(), 2, "the channel holds what fits");
    // 2 transitions, 11 + 1 progress updates and a note: 15 events, 2 kept.
    assert_eq!(observer.dropped(), 15 - 2, "the rest was dropped, not waited for");
    // The response keeps every transition.
    assert_eq!(response.transitions.len(), 2);
}
