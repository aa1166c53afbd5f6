//! Opening a run read-only, on a private copy: nothing in the run directory changes, a run held
//! by a live store can be read, a damaged one is refused; and the anchors a seal keeps.

use std::fs;

use run_store::{Durability, RunStore, StoreError};

use crate::{missing_records, new_run, snapshot, write_records};

/// Waits until the store at `run` has closed (its run lock is free).
fn closed(run: &std::path::Path) {
    let marker = fs::File::open(run.join(run_store::RUN_MARKER)).unwrap();
    marker.lock().unwrap();
}

#[test]
fn a_read_only_open_changes_nothing_in_a_sealed_run_directory() {
    let (_tmp, run, store) = new_run(Durability::Synced);
    write_records(&store, 100);
    drop(store);
    closed(&run);
    let before = snapshot(&run);

    let copy = RunStore::open_read_only(&run).unwrap();
    assert!(copy.is_read_only() && copy.was_sealed());
    assert_eq!(missing_records(&copy, 100), 0);
    // Writing to the copy changes only the copy.
    write_records(&copy, 200);
    copy.tree("more").unwrap().insert("k", "v").unwrap();
    copy.commit_blocking().unwrap();
    drop(copy);

    assert!(snapshot(&run) == before, "a read-only open changed the run directory");
    let store = RunStore::open(&run, Durability::Synced).unwrap();
    assert_eq!(store.tree("more").unwrap().get("k").unwrap(), None);
}

/// A run that did not close cleanly is read as is: no backup, no recovery, no seal written.
#[test]
fn a_read_only_open_of_an_unsealed_run_recovers_nothing_in_place() {
    let (_tmp, run, store) = new_run(Durability::Synced);
    write_records(&store, 50);
    // A tree that outlives its store leaves the run unsealed, as a crash does.
    let tree = store.tree("records").unwrap();
    drop(store);
    drop(tree);
    closed(&run);
    let before = snapshot(&run);

    let copy = RunStore::open_read_only(&run).unwrap();
    assert!(!copy.was_sealed());
    assert_eq!(missing_records(&copy, 50), 0);
    drop(copy);

    assert!(snapshot(&run) == before, "a read-only open changed the run directory");
    assert!(!run.join("db.before-recovery").exists());
}

#[test]
fn a_read_only_open_reads_a_run_that_a_live_store_is_writing() {
    let (_tmp, run, store) = new_run(Durability::Synced);
    write_records(&store, 100);

    let copy = RunStore::open_read_only(&run).unwrap();
    assert!(!copy.was_sealed(), "a live run has no seal");
    assert_eq!(missing_records(&copy, 100), 0);
    drop(copy);

    // The live store goes on, and closes cleanly.
    write_records(&store, 120);
    drop(store);
    closed(&run);
    let store = RunStore::open(&run, Durability::Synced).unwrap();
    assert!(store.was_sealed());
    assert_eq!(missing_records(&store, 120), 0);
}

#[test]
fn a_read_only_open_refuses_a_database_that_does_not_match_its_seal() {
    let (_tmp, run, store) = new_run(Durability::Synced);
    write_records(&store, 100);
    drop(store);
    closed(&run);
    let db = run.join("db").join("db");
    let len = fs::metadata(&db).unwrap().len();
    fs::OpenOptions::new().write(true).open(&db).unwrap().set_len(len - 10).unwrap();
    let before = snapshot(&run);

    let Err(StoreError::Corrupted { what, detail, dir }) = RunStore::open_read_only(&run) else {
        panic!("a database that does not match its seal must be refused")
    };
    assert_eq!((what, dir), ("database", run.clone()));
    assert!(detail.contains("db/db is "), "{detail}");
    assert!(snapshot(&run) == before, "a refused read-only open changed the run directory");
}

#[test]
fn the_seal_keeps_anchors_until_they_are_replaced() {
    let (_tmp, run, store) = new_run(Durability::Synced);
    assert_eq!(store.sealed_anchor("audit"), None);
    store.set_anchor("audit", serde_json::json!({"seq": 1}));
    store.set_anchor("audit", serde_json::json!({"seq": 2}));
    drop(store);
    closed(&run);

    let copy = RunStore::open_read_only(&run).unwrap();
    assert_eq!(copy.sealed_anchor("audit"), Some(serde_json::json!({"seq": 2})));
    drop(copy);
    // A store that sets nothing seals the anchors it was opened with.
    let store = RunStore::open(&run, Durability::Synced).unwrap();
    assert_eq!(store.sealed_anchor("audit"), Some(serde_json::json!({"seq": 2})));
    drop(store);
    closed(&run);
    let store = RunStore::open(&run, Durability::Synced).unwrap();
    assert_eq!(store.sealed_anchor("audit"), Some(serde_json::json!({"seq": 2})));
    assert_eq!(store.sealed_anchor("other"), None);
}
