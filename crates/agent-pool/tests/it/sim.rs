//! The deterministic simulation (feature `sim`): a seed's run reproduces exactly, different
//! seeds differ, and the invariants hold on a spread of seeds.

use agent_pool::sim::{Scenario, SimReport, run};

fn played(seed: u64) -> SimReport {
    let report = run(&Scenario::from_seed(seed));
    assert!(report.failure.is_none(), "seed {seed}: {:?}", report.failure);
    report
}

#[test]
fn a_seed_reproduces_exactly() {
    for seed in [0, 1, 2, 3, 17, 42, 1234, u64::MAX] {
        let first = played(seed);
        let second = played(seed);
        assert!(first.records > 0, "seed {seed} wrote no audit record");
        assert_eq!(first, second, "seed {seed} ran differently twice");
    }
}

#[test]
fn different_seeds_differ() {
    let digests: std::collections::BTreeSet<u64> = (100..110).map(|s| played(s).digest).collect();
    assert_eq!(digests.len(), 10, "ten seeds gave only {} distinct runs", digests.len());
}

#[test]
fn scenarios_cover_crashes_large_teams_and_failures() {
    let reports: Vec<SimReport> = (0..40).map(played).collect();
    assert!(reports.iter().any(|r| r.crashes > 0), "no seed crashed");
    assert!(reports.iter().any(|r| r.agents >= 100), "no team of a hundred agents");
    let outcomes = || reports.iter().flat_map(|r| r.outcomes.values());
    assert!(outcomes().any(|o| o == "succeeded"), "no task succeeded");
    assert!(outcomes().any(|o| o.starts_with("failed")), "no task failed");
}
