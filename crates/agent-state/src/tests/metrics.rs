//! The performance score (docs/concepts.md#metrics) and the running mean of task durations.

use crate::{
    AgentMetrics, RELIABILITY_WEIGHT, RESPONSIVENESS_CAP_MS, RESPONSIVENESS_WEIGHT, SUCCESS_WEIGHT,
    Timestamp,
};

#[track_caller]
fn assert_close(actual: f64, expected: f64) {
    assert!((actual - expected).abs() < 1e-9, "expected {expected}, got {actual}");
}

fn metrics(completed: u64, failed: u64, avg_ms: f64, responded: u64, missed: u64) -> AgentMetrics {
    AgentMetrics {
        tasks_completed: completed,
        tasks_failed: failed,
        average_task_duration_ms: avg_ms,
        heartbeats_responded: responded,
        heartbeats_missed: missed,
        ..AgentMetrics::default()
    }
}

#[test]
fn weights_are_the_seeds() {
    assert_eq!((SUCCESS_WEIGHT, RESPONSIVENESS_WEIGHT, RELIABILITY_WEIGHT), (40.0, 30.0, 30.0));
    assert_eq!(RESPONSIVENESS_CAP_MS, 60_000.0);
}

#[test]
fn a_fresh_agent_scores_100() {
    assert_eq!(AgentMetrics::default().performance_score(), 100.0);
}

/// Each case computed by hand from the documented weights:
/// `successRate*40 + (1 - min(avg/60000, 1))*30 + reliability*30`.
#[test]
fn hand_computed_scores() {
    let cases = [
        // 3/4 success, 30 s, 9/10 beats: 0.75*40 + 0.5*30 + 0.9*30
        (metrics(3, 1, 30_000.0, 9, 1), 72.0),
        // no tasks yet (rate 1), instant, no beats (rate 1)
        (metrics(0, 0, 0.0, 0, 0), 100.0),
        // all failed, 60 s or slower, all missed
        (metrics(0, 5, 60_000.0, 0, 3), 0.0),
        (metrics(0, 5, 120_000.0, 0, 3), 0.0),
        // 1/2 success, 15 s, no beats: 20 + 0.75*30 + 30
        (metrics(1, 1, 15_000.0, 0, 0), 72.5),
        // 4/5 success, 6 s, 3/4 beats: 32 + 0.9*30 + 0.75*30
        (metrics(4, 1, 6_000.0, 3, 1), 81.5),
        // perfect tasks, 59.4 s, perfect beats: 40 + 0.01*30 + 30
        (metrics(10, 0, 59_400.0, 100, 0), 70.3),
        // only heartbeats matter: 40 + 30 + 1/3*30
        (metrics(0, 0, 0.0, 1, 2), 80.0),
    ];
    for (m, expected) in cases {
        assert_close(m.performance_score(), expected);
    }
}

#[test]
fn degenerate_durations_do_not_poison_the_score() {
    // NaN and infinite averages count as the cap (responsiveness 0); negatives as 0.
    assert_close(metrics(1, 0, f64::NAN, 1, 0).performance_score(), 70.0);
    assert_close(metrics(1, 0, f64::INFINITY, 1, 0).performance_score(), 70.0);
    assert_close(metrics(1, 0, f64::NEG_INFINITY, 1, 0).performance_score(), 70.0);
    assert_close(metrics(1, 0, -5_000.0, 1, 0).performance_score(), 100.0);
}

#[test]
fn record_task_keeps_a_running_mean() {
    let mut m = AgentMetrics::default();
    m.record_task(true, 10_000, Timestamp(5));
    assert_eq!((m.tasks_completed, m.tasks_failed), (1, 0));
    assert_close(m.average_task_duration_ms, 10_000.0);
    m.record_task(false, 20_000, Timestamp(9));
    assert_eq!((m.tasks_completed, m.tasks_failed), (1, 1));
    assert_close(m.average_task_duration_ms, 15_000.0);
    m.record_task(true, 60_000, Timestamp(7));
    assert_eq!((m.tasks_completed, m.tasks_failed), (2, 1));
    assert_close(m.average_task_duration_ms, 30_000.0);
    // last_active never moves backwards.
    assert_eq!(m.last_active, Timestamp(9));
    // 2/3 success, 30 s, no beats: 26.67 + 15 + 30
    assert_close(m.performance_score(), 40.0 * 2.0 / 3.0 + 15.0 + 30.0);
}

#[test]
fn record_task_mean_matches_the_plain_mean() {
    let durations = [1u64, 7, 250, 3_000, 12, 99_999, 0, 42];
    let mut m = AgentMetrics::default();
    for (i, d) in durations.iter().enumerate() {
        m.record_task(i % 3 != 0, *d, Timestamp(i as u64));
    }
    let mean = durations.iter().sum::<u64>() as f64 / durations.len() as f64;
    assert!(
        (m.average_task_duration_ms - mean).abs() < 1e-6,
        "{} vs {mean}",
        m.average_task_duration_ms
    );
    assert_eq!(m.tasks_completed + m.tasks_failed, durations.len() as u64);
}

/// Regression: counts near `u64::MAX` (a long-lived or corrupted record) once overflowed the
/// task and heartbeat totals and panicked. The score must stay defined and in range.
#[test]
fn score_with_counts_near_u64_max_does_not_overflow() {
    let m = metrics(u64::MAX, u64::MAX, 0.0, u64::MAX, 1);
    let score = m.performance_score();
    assert!((0.0..=100.0).contains(&score), "{score}");
    // Half the tasks failed: 20 + 30 + ~30.
    assert_close(score, 80.0);
}

/// Regression: `record_task` on counts near `u64::MAX` must saturate, not panic.
#[test]
fn record_task_with_counts_near_u64_max_saturates() {
    let mut m = metrics(u64::MAX, u64::MAX, 10.0, 0, 0);
    m.record_task(true, 10, Timestamp(1));
    m.record_task(false, 10, Timestamp(2));
    assert_eq!((m.tasks_completed, m.tasks_failed), (u64::MAX, u64::MAX));
    assert!(m.average_task_duration_ms.is_finite());
}
