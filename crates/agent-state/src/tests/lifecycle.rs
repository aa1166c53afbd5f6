//! The transition table (docs/concepts.md#lifecycle) and `Lifecycle::apply`.

use super::id;
use crate::{AgentStatus, Lifecycle, Timestamp, TransitionError, TransitionRecord, can_transition};

use AgentStatus::*;

/// The statuses in the order of `enum AgentStatus`, the rows and columns of
/// [`SEED_TABLE`].
const ORDER: [AgentStatus; 8] =
    [Initializing, Idle, Working, WaitingApproval, Blocked, Failed, ShuttingDown, Terminated];

/// The documented lifecycle table, written out as an allow-matrix: row = from, column = to,
/// in [`ORDER`]. 1 = allowed.
#[rustfmt::skip]
const SEED_TABLE: [[u8; 8]; 8] = [
    //               init idle work wait blck fail shut term
    /* initializing */ [0,   1,   0,   0,   0,   1,   0,   0],
    /* idle         */ [0,   0,   1,   1,   0,   0,   1,   0],
    /* working      */ [0,   1,   0,   1,   1,   1,   0,   0],
    /* waiting_appr */ [0,   1,   1,   0,   1,   0,   0,   0],
    /* blocked      */ [0,   0,   1,   0,   0,   1,   0,   0],
    /* failed       */ [0,   0,   1,   0,   0,   0,   0,   1],
    /* shutting_down*/ [0,   0,   0,   0,   0,   0,   0,   1],
    /* terminated   */ [0,   0,   0,   0,   0,   0,   0,   0],
];

#[test]
fn all_lists_the_eight_statuses_in_seed_order() {
    assert_eq!(AgentStatus::ALL, ORDER);
}

#[test]
fn can_transition_equals_seed_000_table_for_all_64_pairs() {
    let mut mismatches = Vec::new();
    for (i, from) in ORDER.into_iter().enumerate() {
        for (j, to) in ORDER.into_iter().enumerate() {
            let expected = SEED_TABLE[i][j] == 1;
            if can_transition(from, to) != expected || from.can_transition_to(to) != expected {
                mismatches.push(format!("{from} -> {to}: expected {expected}"));
            }
        }
    }
    assert!(mismatches.is_empty(), "table differs from the documented one: {mismatches:#?}");
}

#[test]
fn the_table_has_seventeen_edges() {
    let edges: usize = SEED_TABLE.iter().flatten().map(|&b| usize::from(b)).sum();
    assert_eq!(edges, 17);
    let count = ORDER.iter().map(|s| s.successors().len()).sum::<usize>();
    assert_eq!(count, 17);
}

#[test]
fn only_terminated_is_terminal() {
    for s in ORDER {
        assert_eq!(s.is_terminal(), s == Terminated, "{s}");
    }
}

#[test]
fn apply_agrees_with_the_table_for_all_64_pairs() {
    for (i, from) in ORDER.into_iter().enumerate() {
        for (j, to) in ORDER.into_iter().enumerate() {
            let mut life = Lifecycle::restore(id("a"), from);
            let result = life.apply(to, "r", Timestamp(7));
            assert_eq!(result.is_ok(), SEED_TABLE[i][j] == 1, "{from} -> {to}");
            let expected_status = if result.is_ok() { to } else { from };
            assert_eq!(life.status(), expected_status, "{from} -> {to}");
        }
    }
}

#[test]
fn new_lifecycle_starts_initializing() {
    let life = Lifecycle::new(id("bottom-1"));
    assert_eq!(life.status(), Initializing);
    assert_eq!(life.agent(), &id("bottom-1"));
}

#[test]
fn apply_returns_the_full_record() {
    let mut life = Lifecycle::new(id("bottom-1"));
    let record = life.apply(Idle, "initialization complete", Timestamp(1_000)).unwrap();
    assert_eq!(
        record,
        TransitionRecord {
            agent: id("bottom-1"),
            from: Initializing,
            to: Idle,
            reason: "initialization complete".into(),
            at: Timestamp(1_000),
        }
    );
    assert_eq!(life.status(), Idle);

    let record =
        life.apply(Working, String::from("processing messages"), Timestamp(1_004)).unwrap();
    assert_eq!((record.from, record.to, record.at), (Idle, Working, Timestamp(1_004)));
    assert_eq!(record.reason, "processing messages");
}

#[test]
fn refused_transition_leaves_status_unchanged_and_names_from_to_and_allowed() {
    let mut life = Lifecycle::restore(id("mid-1"), Idle);
    let before = life.clone();
    let err = life.apply(Terminated, "skip shutdown", Timestamp(5)).unwrap_err();
    assert_eq!(life, before);
    assert_eq!(
        err,
        TransitionError {
            agent: id("mid-1"),
            from: Idle,
            to: Terminated,
            allowed: "working, waiting_approval, shutting_down".to_owned(),
        }
    );
    let msg = err.to_string();
    assert_eq!(
        msg,
        "agent mid-1: transition idle -> terminated is not allowed \
         (allowed from idle: working, waiting_approval, shutting_down)"
    );
}

#[test]
fn refused_transition_from_terminated_says_none_allowed() {
    let mut life = Lifecycle::restore(id("a"), Terminated);
    for to in ORDER {
        let err = life.apply(to, "again", Timestamp(1)).unwrap_err();
        assert_eq!(err.allowed, "none");
        assert!(err.to_string().contains("(allowed from terminated: none)"), "{err}");
        assert_eq!(life.status(), Terminated);
    }
}

#[test]
fn self_loops_are_refused() {
    for s in ORDER {
        let mut life = Lifecycle::restore(id("a"), s);
        assert!(life.apply(s, "stay", Timestamp(0)).is_err(), "{s} -> {s}");
        assert_eq!(life.status(), s);
    }
}

#[test]
fn full_lifecycle_of_seed_000_walks_allowed_edges() {
    // initialize, work, fail after retries, get reassigned work, finish, shut down.
    let mut life = Lifecycle::new(id("bottom-1"));
    let path = [Idle, Working, Failed, Working, Idle, ShuttingDown, Terminated];
    let mut from = Initializing;
    for (t, to) in path.into_iter().enumerate() {
        let r = life.apply(to, "step", Timestamp(t as u64)).unwrap();
        assert_eq!((r.from, r.to), (from, to));
        from = to;
    }
    assert!(life.status().is_terminal());
}
