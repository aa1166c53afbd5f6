//! The seed's lifecycle and retry policy, on paused time.

use std::time::Duration;

use agent_state::{FailureKind, RetryPolicy, RunEvent, RunState};

use super::{Answer, Scripted, cx};
use crate::{ChannelObserver, Executor, KindError, Registry, RunRequest};

fn executor(kind: Scripted) -> Executor {
    let mut registry = Registry::new();
    registry.register(kind).unwrap();
    Executor::new(registry)
}

fn states(response: &crate::RunResponse) -> Vec<(RunState, RunState)> {
    response.transitions.iter().map(|t| (t.from, t.to)).collect()
}

#[tokio::test(start_paused = true)]
async fn a_transient_failure_is_retried_after_the_seed_delay() {
    let kind = Scripted::new(
        "flaky",
        vec![Answer::Fail(KindError::new(FailureKind::Network, "reset")), Answer::Ok("done")],
    );
    let starts = kind.starts();
    let (observer, mut events) = ChannelObserver::new(64);
    let response = executor(kind)
        .execute(
            RunRequest::new("flaky", "go"),
            cx("flaky").with_observer(std::sync::Arc::new(observer)),
        )
        .await
        .unwrap();
    assert_eq!(response.status, RunState::Completed);
    assert_eq!((response.attempts, response.retries), (2, 1));
    assert_eq!(response.primary_output, "done");
    let starts = starts.lock().unwrap().clone();
    assert_eq!(starts[1] - starts[0], Duration::from_millis(1_000), "seed: 1 s before the retry");
    use RunState::*;
    assert_eq!(
        states(&response),
        [(Pending, Running), (Running, Failed), (Failed, Running), (Running, Completed)]
    );
    let mut retrying = Vec::new();
    while let Ok(event) = events.try_recv() {
        if let RunEvent::Retrying { retry, delay_ms, failure, .. } = event {
            retrying.push((retry, delay_ms, failure.kind));
        }
    }
    assert_eq!(retrying, [(1, 1_000, FailureKind::Network)]);
}

#[tokio::test(start_paused = true)]
async fn retries_back_off_exponentially_up_to_the_cap() {
    let kind =
        Scripted::new("down", vec![Answer::Fail(KindError::new(FailureKind::Server, "503"))]);
    let starts = kind.starts();
    let policy = RetryPolicy { max_retries: 4, ..RetryPolicy::executor_default() };
    let response = executor(kind)
        .with_policy(policy)
        .execute(RunRequest::new("down", "go"), cx("down"))
        .await
        .unwrap();
    assert_eq!(response.status, RunState::Failed);
    assert_eq!((response.attempts, response.retries), (5, 4));
    assert_eq!(response.failure.as_ref().map(|f| f.kind), Some(FailureKind::Server));
    let starts = starts.lock().unwrap().clone();
    let gaps: Vec<u128> = starts.windows(2).map(|w| (w[1] - w[0]).as_millis()).collect();
    assert_eq!(gaps, [1_000, 2_000, 4_000, 5_000], "×2 from 1 s, capped at 5 s");
}

#[tokio::test(start_paused = true)]
async fn a_permanent_failure_is_not_retried() {
    let kind = Scripted::new(
        "strict",
        vec![Answer::Fail(KindError::new(FailureKind::Client, "HTTP 404"))],
    );
    let starts = kind.starts();
    let response =
        executor(kind).execute(RunRequest::new("strict", "go"), cx("strict")).await.unwrap();
    assert_eq!(response.status, RunState::Failed);
    assert_eq!((response.attempts, response.retries), (1, 0));
    assert_eq!(starts.lock().unwrap().len(), 1);
    let failure = response.failure.unwrap();
    assert_eq!((failure.kind, failure.reason.as_str()), (FailureKind::Client, "HTTP 404"));
    assert_eq!(response.primary_output, "");
    assert_eq!(response.confidence, 0.0);
}

#[tokio::test(start_paused = true)]
async fn a_missing_input_blocks_without_retry() {
    let kind =
        Scripted::new("needy", vec![Answer::Fail(KindError::missing("the `content` to write"))]);
    let starts = kind.starts();
    let response =
        executor(kind).execute(RunRequest::new("needy", "go"), cx("needy")).await.unwrap();
    assert_eq!(response.status, RunState::Blocked);
    assert_eq!(starts.lock().unwrap().len(), 1, "blocked is not retried");
    let failure = response.failure.clone().unwrap();
    assert_eq!(failure.kind, FailureKind::MissingInput);
    assert!(failure.reason.contains("content"));
    use RunState::*;
    assert_eq!(states(&response), [(Pending, Running), (Running, Blocked)]);
}

#[tokio::test(start_paused = true)]
async fn soft_then_hard_timeout() {
    let kind = Scripted::new("slow", vec![Answer::Sleep(Duration::from_secs(3_600))]);
    let (observer, mut events) = ChannelObserver::new(64);
    let started = tokio::time::Instant::now();
    let response = executor(kind)
        .execute(
            RunRequest::new("slow", "go"),
            cx("slow").with_observer(std::sync::Arc::new(observer)),
        )
        .await
        .unwrap();
    assert_eq!(started.elapsed(), Duration::from_millis(300_000), "the default 5 min hard limit");
    assert_eq!(response.status, RunState::Failed);
    let failure = response.failure.unwrap();
    assert_eq!(failure.kind, FailureKind::HardTimeout);
    assert!(failure.reason.contains("300000 ms"), "{failure}");
    assert_eq!(response.warnings, ["passed the soft timeout of 120000 ms"]);
    assert_eq!(response.attempts, 1, "a hard timeout is not retried");
    let mut seen = Vec::new();
    while let Ok(event) = events.try_recv() {
        match event {
            RunEvent::SoftTimeout { after_ms, .. } => seen.push(format!("soft {after_ms}")),
            RunEvent::Transition { transition, .. } => seen.push(format!("{}", transition.to)),
            _ => {}
        }
    }
    assert_eq!(seen, ["running", "soft 120000", "failed"]);
}

#[tokio::test(start_paused = true)]
async fn the_hard_timeout_counts_retries_and_waits() {
    // The first attempt fails at once, the retry waits 1 s and then stalls: the run is cut
    // at 5 min from its start, in its second attempt.
    let kind = Scripted::new(
        "stall",
        vec![
            Answer::Fail(KindError::new(FailureKind::Timeout, "no answer")),
            Answer::Sleep(Duration::from_secs(3_600)),
        ],
    );
    let starts = kind.starts();
    let policy = RetryPolicy { max_retries: 5, ..RetryPolicy::executor_default() };
    let started = tokio::time::Instant::now();
    let response = executor(kind)
        .with_policy(policy)
        .execute(RunRequest::new("stall", "go"), cx("stall"))
        .await
        .unwrap();
    assert_eq!(started.elapsed(), Duration::from_secs(300));
    assert_eq!(starts.lock().unwrap().len(), 2);
    assert_eq!(response.failure.map(|f| f.kind), Some(FailureKind::HardTimeout));
    assert_eq!((response.attempts, response.retries), (2, 1));
}

#[tokio::test(start_paused = true)]
async fn a_panicking_handler_fails_the_run_and_the_executor_goes_on() {
    let mut registry = Registry::new();
    registry.register(Scripted::new("broken", vec![Answer::Panic])).unwrap();
    registry.register(Scripted::new("fine", vec![Answer::Ok("ok")])).unwrap();
    let executor = Executor::new(registry);
    let response = executor.execute(RunRequest::new("broken", "go"), cx("broken")).await.unwrap();
    assert_eq!(response.status, RunState::Failed);
    let failure = response.failure.unwrap();
    assert_eq!(failure.kind, FailureKind::Internal);
    assert!(failure.reason.contains("the handler broke"), "{failure}");
    assert_eq!(response.attempts, 1, "a panic is permanent");
    let response = executor.execute(RunRequest::new("fine", "go"), cx("fine")).await.unwrap();
    assert!(response.success());
}

#[test]
fn policy_precedence_agent_then_executor_kind_then_default() {
    let kind = Scripted::new("k", vec![Answer::Ok("")]);
    let mine = RetryPolicy { max_retries: 7, ..RetryPolicy::executor_default() };
    let per_kind = RetryPolicy { max_retries: 5, ..RetryPolicy::executor_default() };
    let per_agent = RetryPolicy { max_retries: 6, ..RetryPolicy::executor_default() };
    let executor = executor(kind);
    assert_eq!(executor.policy_for("k", &cx("k")), RetryPolicy::executor_default());
    let executor = executor.with_kind_policy("k", per_kind.clone());
    assert_eq!(executor.policy_for("k", &cx("k")), per_kind);
    let executor = executor.with_agent_policy("exec-k", per_agent.clone());
    assert_eq!(executor.policy_for("k", &cx("k")), per_agent);
    assert_eq!(executor.policy_for("k", &cx("k").with_policy(mine.clone())), mine);
}
