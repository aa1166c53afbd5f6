//! A layer's state saved in parts: cut and rebuilt unchanged, a save writes only what changed,
//! and a store rebuilds the state from its parts and the record's delta (also when a crash came
//! between writing the record and its parts), and still reads records of version 1.

use std::collections::BTreeMap;

use serde_json::{Value, json};

use crate::parts::{BehaviorDelta, PartChange, Saved, assemble, split};
use crate::{AgentRecord, InMemoryStateStore, StateStore};

/// A lead-like state: many steps with results, a tool loop's history, odd keys.
fn big_state(steps: usize, calls: usize) -> Value {
    let mut subtasks = serde_json::Map::new();
    let mut results = serde_json::Map::new();
    for i in 0..steps {
        subtasks.insert(
            format!("s{i}"),
            json!({ "goal": "x".repeat(60), "assignee": format!("bottom-{i}") }),
        );
        results.insert(format!("s{i}"), json!({ "success": true, "output": "done ".repeat(20) }));
    }
    let history: Vec<Value> = (0..calls)
        .map(|i| json!({ "call": i, "tool": "read_file", "output": "y".repeat(80) }))
        .collect();
    json!({
        "jobs": { "t/1~a": { "subtasks": subtasks, "results": results, "closed": false,
                             "loops": { "s0": { "history": history, "touched": [] } } } },
        "executors": {},
        "": [[], {}, null, [1, [2, 3]]],
    })
}

fn rebuilt(value: &Value) -> Value {
    let parts: BTreeMap<String, Value> =
        split(value).into_iter().map(|(p, v, _)| (p, v.clone())).collect();
    assemble(parts).unwrap()
}

#[test]
fn a_state_cut_into_parts_is_rebuilt_unchanged() {
    for value in [
        Value::Null,
        json!({}),
        json!([]),
        json!({ "a": 1, "b": [1, 2] }),
        big_state(0, 0),
        big_state(3, 40),
        big_state(200, 0),
        json!((0..500).map(|i| json!({ "i": i, "pad": "z".repeat(10) })).collect::<Vec<_>>()),
    ] {
        assert_eq!(rebuilt(&value), value);
    }
    assert_eq!(split(&json!({ "a": 1 })).len(), 1, "a small state is one part");
    let big = big_state(200, 0);
    let parts = split(&big);
    assert!(parts.len() >= 400, "one part per step and per result: {}", parts.len());
}

fn changed_paths(delta: &BehaviorDelta) -> Vec<(&str, bool)> {
    delta.changes.iter().map(|c| (c.path.as_str(), c.value.is_some())).collect()
}

#[test]
fn a_save_writes_only_the_parts_that_changed() {
    let mut state = big_state(100, 30);
    let first = Saved::Unknown.plan(1, &state).unwrap();
    let delta = first.parts.clone().unwrap();
    assert!(delta.replace, "the first save replaces every part");
    assert_eq!(first.behavior, Value::Null);
    let saved = first.next;
    assert!(saved.plan(1, &state).is_none(), "nothing changed, nothing written");
    let only_head = saved.plan(2, &state).unwrap().parts.unwrap();
    assert!(only_head.changes.is_empty() && !only_head.replace);

    // A new result, one more tool call, one result gone.
    let work = &mut state["jobs"]["t/1~a"];
    work["results"]["s100"] = json!({ "success": false });
    work["results"].as_object_mut().unwrap().remove("s5");
    work["loops"]["s0"]["history"].as_array_mut().unwrap().push(json!({ "call": 30 }));
    let delta = saved.plan(1, &state).unwrap().parts.unwrap();
    let mut paths = changed_paths(&delta);
    paths.sort_unstable();
    assert_eq!(
        paths,
        [
            ("/jobs/t~11~0a/loops/s0/history/~i30", true),
            ("/jobs/t~11~0a/results/s100", true),
            ("/jobs/t~11~0a/results/s5", false),
        ]
    );
    assert!(!delta.replace);
}

#[test]
fn a_small_state_goes_inline_and_is_not_written_again_unchanged() {
    let state = json!({ "queue": [], "done": ["t1"] });
    let plan = Saved::Unknown.plan(7, &state).unwrap();
    assert_eq!((plan.behavior.clone(), plan.parts.clone()), (state.clone(), None));
    assert!(plan.next.plan(7, &state).is_none());
    assert!(plan.next.plan(8, &state).is_some(), "the record's own fields changed");
}

fn record(name: &str, behavior: Value, parts: Option<BehaviorDelta>) -> AgentRecord {
    AgentRecord {
        id: agent_state::AgentId::new(name),
        metrics: agent_state::AgentMetrics::default(),
        retries: 0,
        heartbeat: 1,
        processed: Vec::new(),
        behavior,
        audit_head: None,
        parts,
    }
}

/// Saves `states` one after the other through `store` as an agent does; returns the last plan's
/// record as handed to the store.
async fn save_all(store: &dyn StateStore, states: &[Value]) -> AgentRecord {
    let mut saved = Saved::Unknown;
    let mut last = None;
    for (n, state) in states.iter().enumerate() {
        let plan = saved.plan(n as u64, state).unwrap();
        let r = record("lead-1", plan.behavior, plan.parts);
        store.save_agent(&r).await.unwrap();
        saved = plan.next;
        last = Some(r);
    }
    last.unwrap()
}

fn states() -> Vec<Value> {
    let mut grown = big_state(60, 10);
    grown["jobs"]["t/1~a"]["results"]["s61"] = json!("new");
    grown["jobs"]["t/1~a"]["loops"]["s0"]["history"] = json!([]);
    vec![big_state(50, 10), json!({ "small": true }), big_state(60, 10), grown]
}

#[tokio::test]
async fn the_in_memory_store_rebuilds_the_state_from_its_parts() {
    let store = InMemoryStateStore::new();
    save_all(&store, &states()).await;
    let loaded = store.agents().await.unwrap();
    assert_eq!(loaded.len(), 1);
    assert_eq!(&loaded[0].behavior, states().last().unwrap());
    assert_eq!(loaded[0].parts, None);
}

#[test]
fn parts_that_do_not_fit_together_are_an_error() {
    let parts = BTreeMap::from([("/a".to_owned(), json!(1)), ("/a/b".to_owned(), json!(2))]);
    assert!(assemble(parts).is_err());
    let parts = BTreeMap::from([("/~inope".to_owned(), json!(1))]);
    assert!(assemble(parts).is_err());
    let _ = PartChange { path: String::new(), value: None };
}

#[cfg(feature = "sled")]
mod on_sled {
    use run_store::{Durability, RunStore};

    use super::*;
    use crate::SledStateStore;

    /// Opens the run again once the last store on it has closed.
    fn reopen(dir: &std::path::Path) -> RunStore {
        RunStore::open(dir, Durability::NoSync).unwrap()
    }

    #[tokio::test]
    async fn a_run_directory_rebuilds_the_state_after_a_reopen() {
        let root = tempfile::tempdir().unwrap();
        let dir = root.path().join("run");
        let store =
            RunStore::create(&dir, "r", agent_state::Timestamp(0), Durability::NoSync).unwrap();
        save_all(&SledStateStore::open(&store).unwrap(), &states()).await;
        drop(store);
        let store = reopen(&dir);
        let loaded = SledStateStore::open(&store).unwrap().agents().await.unwrap();
        assert_eq!(&loaded[0].behavior, states().last().unwrap());
    }

    /// A crash after the record (with its delta) was written and before its parts were: the
    /// delta in the record still gives the state.
    #[tokio::test]
    async fn a_record_written_without_its_parts_still_gives_its_state() {
        let root = tempfile::tempdir().unwrap();
        let dir = root.path().join("run");
        let store =
            RunStore::create(&dir, "r", agent_state::Timestamp(0), Durability::NoSync).unwrap();
        let all = states();
        let first = save_all(&SledStateStore::open(&store).unwrap(), &all[2..3]).await;
        // The next save's record alone, as if the process died before it wrote the parts.
        let mut saved = Saved::Unknown;
        saved = saved.plan(0, &all[2]).unwrap().next;
        let plan = saved.plan(1, &all[3]).unwrap();
        assert!(!plan.parts.as_ref().unwrap().replace);
        let head = record("lead-1", plan.behavior, plan.parts);
        let bytes = agent_state::encode(&head).unwrap();
        store.tree("agents").unwrap().insert(first.id.as_str(), bytes).unwrap();
        let loaded = SledStateStore::open(&store).unwrap().agents().await.unwrap();
        assert_eq!(loaded[0].behavior, all[3]);
    }

    /// A record written by version 1 (the state whole, no parts) still loads.
    #[tokio::test]
    async fn a_version_1_record_still_loads() {
        let root = tempfile::tempdir().unwrap();
        let dir = root.path().join("run");
        let store =
            RunStore::create(&dir, "r", agent_state::Timestamp(0), Durability::NoSync).unwrap();
        let old = json!({ "kind": "agent_record", "schema_version": 1, "value": {
            "id": "bottom-1", "metrics": agent_state::AgentMetrics::default(), "retries": 2,
            "heartbeat": 3, "processed": [], "behavior": { "queue": [] }
        }});
        store
            .tree("agents")
            .unwrap()
            .insert("bottom-1", serde_json::to_vec(&old).unwrap())
            .unwrap();
        let loaded = SledStateStore::open(&store).unwrap().agents().await.unwrap();
        assert_eq!((loaded[0].retries, &loaded[0].behavior), (2, &json!({ "queue": [] })));
    }
}
