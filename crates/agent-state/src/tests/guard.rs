//! The guards' rules: loops, ping-pong, no progress and wait cycles, each against a small
//! reference written independently, plus the settings' bounds and the stop reasons' words.

use proptest::prelude::*;
use serde_json::json;

use super::id;
use crate::{
    AgentId, GuardSettings, OnStuck, PingPong, ProgressWatch, Repetition, TaskFailure, WaitEdge,
    WaitGraph, call_fingerprint, canonical_json, detect_loop, repeated_tail,
};

#[test]
fn the_defaults_are_three_calls_four_bounces_fifteen_heartbeats_and_stop() {
    let settings = GuardSettings::default();
    assert_eq!(
        (settings.repeat_limit, settings.bounce_limit, settings.idle_heartbeats),
        (3, 4, 15)
    );
    assert_eq!(settings.on_stuck, OnStuck::Stop);
    settings.check().unwrap();
    let bad = GuardSettings { repeat_limit: 1, ..settings };
    let err = bad.check().unwrap_err();
    assert_eq!(
        err.to_string(),
        "guard setting `repeat_limit` is 1, but it must be at least 2: one call is not a repetition"
    );
    assert!(GuardSettings { idle_heartbeats: 0, ..settings }.check().is_err());
    assert!(GuardSettings { bounce_limit: 2, ..settings }.check().is_err());
}

#[test]
fn the_same_call_in_any_key_order_has_one_fingerprint() {
    let a = json!({"path": "a.txt", "content": {"x": 1, "y": [1, {"b": 2, "a": 1}]}});
    let b: serde_json::Value = serde_json::from_str(
        r#"{"content": {"y": [1, {"a": 1, "b": 2}], "x": 1}, "path": "a.txt"}"#,
    )
    .unwrap();
    assert_eq!(call_fingerprint("write_file", &a), call_fingerprint("write_file", &b));
    assert_ne!(call_fingerprint("write_file", &a), call_fingerprint("edit_file", &a));
    let text = canonical_json(&a);
    assert_eq!(serde_json::from_str::<serde_json::Value>(&text).unwrap(), a);
}

#[test]
fn three_identical_calls_in_a_row_are_a_loop_and_two_are_not() {
    let calls = |list: &[&str]| list.iter().map(|s| (*s).to_owned()).collect::<Vec<_>>();
    assert_eq!(detect_loop(&calls(&["a", "b", "b"]), 3), None);
    assert_eq!(
        detect_loop(&calls(&["a", "b", "b", "b"]), 3),
        Some(Repetition { period: 1, times: 3 })
    );
    assert_eq!(
        detect_loop(&calls(&["x", "a", "b", "a", "b", "a", "b"]), 3),
        Some(Repetition { period: 2, times: 3 })
    );
    assert_eq!(detect_loop(&calls(&["a", "b", "c", "a", "b", "d"]), 2), None);
    assert_eq!(detect_loop(&[], 3), None);
}

#[test]
fn the_stop_reasons_say_who_what_and_what_to_change() {
    let failure = TaskFailure::Loop {
        agent: id("bottom-1"),
        item: "read_file {\"path\":\"a\"}".into(),
        repeats: 3,
    };
    assert!(failure.is_stuck());
    let text = failure.to_string();
    assert!(text.contains("`bottom-1` repeated read_file {\"path\":\"a\"} 3 times"), "{text}");
    assert!(text.contains("guards.repeat_limit"), "{text}");
    let cycle = TaskFailure::WaitCycle {
        cycle: vec![id("a"), id("b")],
        waits: vec!["a reply".into(), "results".into()],
    };
    assert_eq!(
        cycle.to_string(),
        "stopped a wait cycle: `a` waits on `b` for a reply, `b` waits on `a` for results; \
         nobody in it can go on: let one side answer without waiting (or stop waiting) in the \
         agents' instructions or the plan"
    );
    let none = TaskFailure::NoProgress { heartbeats: 15, agents: vec![] };
    assert!(none.to_string().contains("no progress for 15 heartbeats"), "{none}");
    let pong =
        TaskFailure::PingPong { agents: vec![id("a"), id("b")], item: "step s".into(), hops: 4 };
    assert!(pong.to_string().contains("`a` and `b` handed step s back and forth 4 times"));
    assert!(!TaskFailure::ShutDown.is_stuck());
    // Stop reasons are stored with the outcome: they read back the same.
    for failure in [failure, cycle, none, pong] {
        let text = serde_json::to_string(&failure).unwrap();
        assert_eq!(serde_json::from_str::<TaskFailure>(&text).unwrap(), failure);
    }
}

/// The reference: for each block length, count the repetitions by comparing slices.
fn reference_times(items: &[u8], period: usize) -> usize {
    let n = items.len();
    if period == 0 || period > n {
        return 0;
    }
    let block = &items[n - period..];
    (1..=n / period).take_while(|k| &items[n - k * period..n - (k - 1) * period] == block).count()
}

proptest! {
    #[test]
    fn the_tail_repetition_matches_the_reference(items in proptest::collection::vec(0u8..3, 0..24)) {
        let got = repeated_tail(&items);
        if items.is_empty() {
            prop_assert_eq!(got, None);
        } else {
            let got = got.unwrap();
            let best = (1..=crate::MAX_LOOP_PERIOD.min(items.len()))
                .map(|p| reference_times(&items, p))
                .max()
                .unwrap();
            prop_assert_eq!(got.times, best);
            prop_assert_eq!(reference_times(&items, got.period), got.times);
            // The shortest block with that many repetitions.
            for p in 1..got.period {
                prop_assert!(reference_times(&items, p) < got.times);
            }
        }
    }

    #[test]
    fn a_block_repeated_enough_is_always_a_loop(
        prefix in proptest::collection::vec(0u8..4, 0..6),
        block in proptest::collection::vec(10u8..20, 1..=3),
        times in 2usize..6,
        limit in 2u32..6,
    ) {
        let mut calls: Vec<String> = prefix.iter().map(|i| format!("call {i}")).collect();
        for _ in 0..times {
            calls.extend(block.iter().map(|i| format!("call {i}")));
        }
        let found = detect_loop(&calls, limit);
        if times >= limit as usize {
            prop_assert!(found.is_some_and(|r| r.times >= times), "{:?}", found);
        }
        // Distinct calls never loop.
        let distinct: Vec<String> = (0..calls.len()).map(|i| format!("call #{i}")).collect();
        prop_assert_eq!(detect_loop(&distinct, limit), None);
    }

    #[test]
    fn ping_pong_fires_exactly_when_the_last_hops_stay_between_two_agents_both_ways(
        hops in proptest::collection::vec((0usize..3, 0usize..3), 1..40),
        limit in 3u32..6,
    ) {
        let agents = [id("a"), id("b"), id("c")];
        let mut rule = PingPong::default();
        // The reference: the run of hops within one pair since the last break or detection.
        let mut run: Vec<(usize, usize)> = Vec::new();
        for (from, to) in hops {
            let bounce = rule.observe("task/s", &agents[from], &agents[to], limit);
            if from == to {
                prop_assert!(bounce.is_none());
                continue;
            }
            if run.last().is_some_and(|&(f, t)| (f, t) == (to, from) || (f, t) == (from, to)) {
                run.push((from, to));
            } else {
                run = vec![(from, to)];
            }
            if run.len() >= limit as usize && run.iter().any(|h| h.0 != run[0].0) {
                let bounce = bounce.expect("a bounce");
                let first = run[0];
                prop_assert_eq!(&bounce.agents, &[agents[first.0].clone(), agents[first.1].clone()]);
                prop_assert_eq!(bounce.hops, run.len());
                run.clear();
            } else {
                prop_assert!(bounce.is_none());
            }
        }
    }

    #[test]
    fn no_progress_counts_the_heartbeats_since_the_mark_last_moved(
        beats in proptest::collection::vec((0u64..3, any::<bool>()), 1..40),
    ) {
        let mut watch = ProgressWatch::default();
        let mut last_mark = 0;
        let mut idle = 0u32;
        for (mark, open) in beats {
            let got = watch.heartbeat(mark, open);
            if mark != last_mark || !open {
                idle = 0;
            } else {
                idle += 1;
            }
            last_mark = mark;
            prop_assert_eq!(got, idle);
        }
    }

    #[test]
    fn a_wait_cycle_is_found_exactly_when_the_graph_has_one(
        edges in proptest::collection::vec((0usize..5, 0usize..5), 0..12),
    ) {
        let agents: Vec<AgentId> = (0..5).map(|i| id(&format!("agent-{i}"))).collect();
        let mut graph = WaitGraph::new();
        let mut reach = [[false; 5]; 5];
        for &(a, b) in &edges {
            graph.add(WaitEdge {
                waiter: agents[a].clone(),
                on: agents[b].clone(),
                what: format!("{a}->{b}"),
                task: None,
            });
            reach[a][b] = true;
        }
        // Reference: transitive closure; a cycle exists iff some agent reaches itself.
        for k in 0..5 {
            for i in 0..5 {
                for j in 0..5 {
                    if reach[i][k] && reach[k][j] {
                        reach[i][j] = true;
                    }
                }
            }
        }
        let has_cycle = (0..5).any(|i| reach[i][i]);
        let cycle = graph.cycle();
        prop_assert_eq!(cycle.is_some(), has_cycle);
        if let Some(cycle) = cycle {
            prop_assert!(!cycle.is_empty());
            for (i, edge) in cycle.iter().enumerate() {
                prop_assert!(graph.edges().any(|e| e == edge));
                let next = &cycle[(i + 1) % cycle.len()];
                prop_assert_eq!(&edge.on, &next.waiter);
            }
            // A simple cycle: no agent waits twice in it.
            let mut waiters: Vec<&AgentId> = cycle.iter().map(|e| &e.waiter).collect();
            waiters.sort();
            waiters.dedup();
            prop_assert_eq!(waiters.len(), cycle.len());
            // Deterministic.
            prop_assert_eq!(graph.cycle(), Some(cycle));
        }
    }
}

#[test]
fn a_step_handed_back_and_forth_is_a_ping_pong_and_a_reassignment_is_not() {
    let (lead, e1, e2) = (id("lead"), id("e1"), id("e2"));
    let mut rule = PingPong::default();
    // Assigned, reported back, reassigned to another executor, reported back: normal.
    for (from, to) in [(&lead, &e1), (&e1, &lead), (&lead, &e2), (&e2, &lead)] {
        assert_eq!(rule.observe("t/s", from, to, 4), None);
    }
    // The same executor again and again: a ping-pong on the fourth hop between the two.
    let mut rule = PingPong::default();
    let hops = [(&lead, &e1), (&e1, &lead), (&lead, &e1)];
    for (from, to) in hops {
        assert_eq!(rule.observe("t/s", from, to, 4), None);
    }
    let bounce = rule.observe("t/s", &e1, &lead, 4).unwrap();
    assert_eq!(bounce.agents, [lead.clone(), e1.clone()]);
    assert_eq!((bounce.item.as_str(), bounce.hops), ("t/s", 4));
    // One way only is no ping-pong (that is a loop's business).
    let mut rule = PingPong::default();
    for _ in 0..6 {
        assert_eq!(rule.observe("t/s", &lead, &e1, 4), None);
    }
}
