//! The executor's run lifecycle (docs/concepts.md#executor-kinds): the table, the retry decisions,
//! and a property test of random operation sequences against an edge list written independently of
//! the code.

use proptest::prelude::*;

use crate::{
    AfterFailure, ErrorClass, FailureKind, RetryPolicy, RunFailure, RunLifecycle, RunState,
    RunTransitionError, Timestamp,
};

/// The run lifecycle as an edge list.
const EDGES: [(RunState, RunState); 5] = {
    use RunState::*;
    [
        (Pending, Running),
        (Running, Completed),
        (Running, Blocked),
        (Running, Failed),
        (Failed, Running),
    ]
};

fn transient() -> RunFailure {
    RunFailure::new(FailureKind::Network, "connection reset")
}

fn permanent() -> RunFailure {
    RunFailure::new(FailureKind::Client, "HTTP 404")
}

#[test]
fn the_table_is_the_seed_diagram() {
    for from in RunState::ALL {
        for to in RunState::ALL {
            assert_eq!(from.can_move_to(to), EDGES.contains(&(from, to)), "{from} -> {to}");
        }
    }
}

#[test]
fn a_transient_failure_is_retried_once_with_the_seed_delay() {
    let policy = RetryPolicy::executor_default();
    let mut run = RunLifecycle::new();
    run.start(Timestamp(0)).unwrap();
    let (t, after) = run.fail(Timestamp(10), transient(), &policy).unwrap();
    assert_eq!((t.from, t.to), (RunState::Running, RunState::Failed));
    assert_eq!(after, AfterFailure::Retry { retry: 1, delay_ms: 1_000 });
    assert!(!run.is_finished());
    let t = run.retry(Timestamp(1_010)).unwrap();
    assert_eq!((t.from, t.to, t.reason.as_str()), (RunState::Failed, RunState::Running, "retry 1"));
    assert_eq!((run.attempts(), run.retries()), (2, 1));
    // The one retry is spent: the next transient failure is final.
    let (_, after) = run.fail(Timestamp(1_020), transient(), &policy).unwrap();
    assert_eq!(after, AfterFailure::Final);
    assert!(run.is_finished());
    let err = run.retry(Timestamp(1_030)).unwrap_err();
    assert!(matches!(err, RunTransitionError::NoRetry { .. }), "{err}");
    assert!(err.to_string().contains("connection reset"), "{err}");
    assert_eq!(run.state(), RunState::Failed);
}

#[test]
fn a_permanent_failure_is_final_at_once() {
    let mut run = RunLifecycle::new();
    run.start(Timestamp(0)).unwrap();
    let (_, after) = run.fail(Timestamp(1), permanent(), &RetryPolicy::executor_default()).unwrap();
    assert_eq!(after, AfterFailure::Final);
    assert!(run.is_finished());
    assert_eq!(run.last_failure(), Some(&permanent()));
}

#[test]
fn blocked_is_final_and_keeps_what_is_missing() {
    let mut run = RunLifecycle::new();
    run.start(Timestamp(0)).unwrap();
    let t = run.block(Timestamp(5), "the `content` to write").unwrap();
    assert_eq!(t.to, RunState::Blocked);
    assert!(run.is_finished());
    assert_eq!(run.last_failure().map(|f| f.kind), Some(FailureKind::MissingInput));
    let err = run.retry(Timestamp(6)).unwrap_err();
    assert!(err.to_string().contains("from blocked to running"), "{err}");
    assert!(err.to_string().contains("nothing, it is final"), "{err}");
}

#[test]
fn a_pending_run_cannot_finish_and_start_is_not_a_retry() {
    let mut run = RunLifecycle::new();
    assert!(run.complete(Timestamp(0)).is_err());
    assert!(run.block(Timestamp(0), "x").is_err());
    assert!(run.abandon(Timestamp(0), transient()).is_err());
    assert_eq!(run.state(), RunState::Pending);
    run.start(Timestamp(0)).unwrap();
    run.fail(Timestamp(1), transient(), &RetryPolicy::executor_default()).unwrap();
    assert!(run.start(Timestamp(2)).is_err(), "failed -> running only through retry");
    assert_eq!(run.state(), RunState::Failed);
}

#[test]
fn abandoning_takes_back_a_granted_retry() {
    let mut run = RunLifecycle::new();
    run.start(Timestamp(0)).unwrap();
    run.fail(Timestamp(1), transient(), &RetryPolicy::executor_default()).unwrap();
    let hard = RunFailure::new(FailureKind::HardTimeout, "300000 ms passed");
    assert_eq!(run.abandon(Timestamp(2), hard.clone()).unwrap(), None);
    assert!(run.is_finished());
    assert_eq!(run.last_failure(), Some(&hard));
    assert!(run.retry(Timestamp(3)).is_err());
}

#[test]
fn failure_classes_follow_the_seed() {
    use FailureKind::*;
    for kind in [Network, RateLimited, Timeout, Server] {
        assert_eq!(kind.class(), ErrorClass::Transient, "{kind}");
    }
    for kind in [
        InvalidInput,
        Permission,
        Client,
        Malformed,
        MissingInput,
        Internal,
        HardTimeout,
        Cancelled,
    ] {
        assert_eq!(kind.class(), ErrorClass::Permanent, "{kind}");
    }
    assert_eq!(FailureKind::from_http_status(200), None);
    assert_eq!(FailureKind::from_http_status(302), None);
    assert_eq!(FailureKind::from_http_status(400), Some(Client));
    assert_eq!(FailureKind::from_http_status(401), Some(Permission));
    assert_eq!(FailureKind::from_http_status(403), Some(Permission));
    assert_eq!(FailureKind::from_http_status(404), Some(Client));
    assert_eq!(FailureKind::from_http_status(408), Some(Timeout));
    assert_eq!(FailureKind::from_http_status(429), Some(RateLimited));
    assert_eq!(FailureKind::from_http_status(500), Some(Server));
    assert_eq!(FailureKind::from_http_status(503), Some(Server));
    assert_eq!(FailureKind::from_http_status(600), None);
}

#[derive(Clone, Debug)]
enum Op {
    Start,
    Complete,
    Block,
    Fail(bool),
    Retry,
    Abandon,
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        Just(Op::Start),
        Just(Op::Complete),
        Just(Op::Block),
        any::<bool>().prop_map(Op::Fail),
        Just(Op::Retry),
        Just(Op::Abandon),
    ]
}

proptest! {
    /// Any sequence: every accepted change is an edge, a refused one changes nothing, retries
    /// never exceed the policy's, only transient failures are retried, and attempts are one
    /// more than retries once started.
    #[test]
    fn random_sequences_follow_the_table(
        ops in proptest::collection::vec(op(), 0..40),
        max_retries in 0u32..4,
    ) {
        let policy = RetryPolicy { max_retries, ..RetryPolicy::executor_default() };
        let mut run = RunLifecycle::new();
        for (i, op) in ops.into_iter().enumerate() {
            let at = Timestamp(i as u64);
            let before = run.clone();
            let result = match op {
                Op::Start => run.start(at).map(Some),
                Op::Complete => run.complete(at).map(Some),
                Op::Block => run.block(at, "input").map(Some),
                Op::Fail(t) => {
                    let failure = if t { transient() } else { permanent() };
                    run.fail(at, failure, &policy).map(|(tr, after)| {
                        let retry = matches!(after, AfterFailure::Retry { .. });
                        assert!(!retry || t, "a permanent failure was granted a retry");
                        assert_eq!(retry, t && before.retries() < max_retries);
                        Some(tr)
                    })
                }
                Op::Retry => run.retry(at).map(Some),
                Op::Abandon => run.abandon(at, RunFailure::new(FailureKind::Cancelled, "stop")),
            };
            match result {
                Ok(Some(t)) => {
                    prop_assert!(EDGES.contains(&(t.from, t.to)), "{:?} -> {:?}", t.from, t.to);
                    prop_assert_eq!(t.from, before.state());
                    prop_assert_eq!(t.to, run.state());
                }
                Ok(None) => prop_assert_eq!(run.state(), RunState::Failed),
                Err(_) => prop_assert_eq!(&run, &before, "a refused change changed the run"),
            }
            prop_assert!(run.retries() <= max_retries);
            if run.state() != RunState::Pending {
                prop_assert_eq!(run.attempts(), run.retries() + 1);
            }
        }
    }
}
