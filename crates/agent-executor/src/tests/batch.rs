//! Batches: request order, the concurrency bound, stop-on-failure.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use agent_state::{FailureKind, RunState};

use super::cx;
use crate::{BatchItem, ExecError, Executor, FnKind, KindError, KindOutput, Registry, RunRequest};

/// `work`: sleeps the milliseconds its objective says, counting how many run at once; an
/// objective `fail` fails permanently.
fn executor(running: Arc<AtomicUsize>, peak: Arc<AtomicUsize>) -> Executor {
    let mut registry = Registry::new();
    registry
        .register(FnKind::new("work", "sleeps", move |req, _| {
            let running = running.clone();
            let peak = peak.clone();
            Box::pin(async move {
                if req.objective == "fail" {
                    return Err(KindError::new(FailureKind::InvalidInput, "asked to fail"));
                }
                let now = running.fetch_add(1, Ordering::SeqCst) + 1;
                peak.fetch_max(now, Ordering::SeqCst);
                let ms: u64 = req.objective.parse().unwrap_or(0);
                tokio::time::sleep(Duration::from_millis(ms)).await;
                running.fetch_sub(1, Ordering::SeqCst);
                Ok(KindOutput::new(req.objective.clone(), 1.0))
            })
        }))
        .unwrap();
    Executor::new(registry)
}

#[tokio::test(start_paused = true)]
async fn parallel_results_come_back_in_request_order_within_the_bound() {
    let peak = Arc::new(AtomicUsize::new(0));
    let executor = executor(Arc::default(), peak.clone());
    let objectives = ["600", "500", "400", "300", "200", "100"];
    let requests = objectives.iter().map(|o| RunRequest::new("work", *o)).collect();
    let started = tokio::time::Instant::now();
    let results = executor.execute_parallel(requests, cx("work"), 2).await;
    let outputs: Vec<String> =
        results.iter().map(|r| r.as_ref().unwrap().primary_output.clone()).collect();
    assert_eq!(outputs, objectives);
    assert_eq!(peak.load(Ordering::SeqCst), 2, "at most 2 at once, and 2 did run at once");
    // Two lanes, each request taking the first free one in request order: 600 and 500 start,
    // 400 follows 500 (at 500), 300 follows 600 (at 600), 200 and 100 start at 900: 1100 ms,
    // where one lane would take 2100.
    assert_eq!(started.elapsed(), Duration::from_millis(1_100));
}

#[tokio::test(start_paused = true)]
async fn parallel_reports_refusals_in_place() {
    let executor = executor(Arc::default(), Arc::default());
    let requests = vec![
        RunRequest::new("work", "1"),
        RunRequest::new("nope", "1"),
        RunRequest::new("work", "fail"),
    ];
    let results = executor.execute_parallel(requests, cx("work"), 4).await;
    assert!(results[0].as_ref().unwrap().success());
    assert!(matches!(results[1], Err(ExecError::UnknownKind { .. })));
    assert_eq!(results[2].as_ref().unwrap().status, RunState::Failed);
}

#[tokio::test(start_paused = true)]
async fn sequential_stops_at_the_first_failure() {
    let peak = Arc::new(AtomicUsize::new(0));
    let executor = executor(Arc::default(), peak.clone());
    let requests = vec![
        RunRequest::new("work", "10"),
        RunRequest::new("work", "fail"),
        RunRequest::new("work", "10").with_run_id("third".parse().unwrap()),
    ];
    let results = executor.execute_sequential(requests, cx("work")).await;
    assert!(matches!(&results[0], BatchItem::Ran(r) if r.success()));
    assert!(matches!(&results[1], BatchItem::Ran(r) if r.status == RunState::Failed));
    assert_eq!(results[2], BatchItem::Skipped { run_id: "third".parse().unwrap() });
    assert_eq!(peak.load(Ordering::SeqCst), 1, "one at a time");

    let requests = vec![RunRequest::new("work", "   "), RunRequest::new("work", "1")];
    let results = executor.execute_sequential(requests, cx("work")).await;
    assert!(matches!(results[0], BatchItem::Refused(ExecError::EmptyObjective { .. })));
    assert!(matches!(results[1], BatchItem::Skipped { .. }));
}
