//! The anchor files: the store's anchors kept outside the database while the run goes, in the
//! run directory and in an index directory, each value durable in the database when written.

use std::path::Path;
use std::time::{Duration, Instant};

use run_store::{ANCHOR_FILE, AnchorFile, Durability, RunStore, StoreError};
use serde_json::json;

use crate::new_run;

/// The anchors of the anchor file at `path` (panics if there is none).
fn anchors_at(path: &Path) -> serde_json::Value {
    let file = AnchorFile::read(path, "run-1").unwrap().expect("an anchor file");
    serde_json::to_value(file.anchors).unwrap()
}

/// Waits until the anchor file at `path` holds `expected` (a minute at most: a hang, not a
/// slow machine).
#[track_caller]
fn wait_for_anchors(path: &Path, expected: &serde_json::Value) {
    let deadline = Instant::now() + Duration::from_secs(60);
    while anchors_at(path) != *expected {
        assert!(Instant::now() < deadline, "the anchor file never held {expected}");
        std::thread::sleep(Duration::from_millis(2));
    }
}

/// Opens `run` again once the store that had it let go of it.
fn reopen(run: &Path) -> RunStore {
    std::fs::File::open(run.join(run_store::RUN_MARKER)).unwrap().lock().unwrap();
    RunStore::open(run, Durability::Synced).unwrap()
}

#[test]
fn a_new_run_has_an_empty_anchor_file_and_says_it_keeps_one() {
    let (_tmp, run, store) = new_run(Durability::Synced);
    assert!(store.marker().anchored);
    assert_eq!(anchors_at(&run.join(ANCHOR_FILE)), json!({}));
}

#[test]
fn a_committed_anchor_reaches_both_anchor_files_while_the_run_is_open() {
    let (tmp, run, store) = new_run(Durability::Synced);
    let index = tmp.path().join("index");
    store.keep_anchor_copy_in(&index).unwrap();
    let copy = AnchorFile::in_index(&index, "run-1");
    assert_eq!(anchors_at(&copy), json!({}));

    store.tree("t").unwrap().insert("k", "v").unwrap();
    store.set_anchor("audit", json!({"seq": 0}));
    store.commit_blocking().unwrap();
    let expected = json!({"audit": {"seq": 0}});
    wait_for_anchors(&run.join(ANCHOR_FILE), &expected);
    wait_for_anchors(&copy, &expected);

    // Set but not committed: no sync has made it durable, so no file holds it.
    store.set_anchor("audit", json!({"seq": 1}));
    std::thread::sleep(Duration::from_millis(20));
    assert_eq!(anchors_at(&run.join(ANCHOR_FILE)), expected);
    assert_eq!(anchors_at(&copy), expected);

    // Committed: it is.
    store.commit_blocking().unwrap();
    wait_for_anchors(&run.join(ANCHOR_FILE), &json!({"audit": {"seq": 1}}));
    wait_for_anchors(&copy, &json!({"audit": {"seq": 1}}));
}

#[test]
fn kept_anchors_come_from_the_seal_or_else_the_newest_anchor_file() {
    let (tmp, run, store) = new_run(Durability::Synced);
    let index = tmp.path().join("index");
    store.keep_anchor_copy_in(&index).unwrap();
    store.set_anchor("audit", json!({"seq": 5}));
    store.commit_blocking().unwrap();
    drop(store);

    // Sealed: the seal's.
    let store = reopen(&run);
    assert!(store.was_sealed());
    assert_eq!(store.kept_anchor("audit"), Some(json!({"seq": 5})));
    drop(store);

    // The seal deleted: the run's anchor file still holds it.
    std::fs::File::open(run.join(run_store::RUN_MARKER)).unwrap().lock().unwrap();
    std::fs::remove_file(run.join("strata-run.seal")).unwrap();
    let store = RunStore::open(&run, Durability::Synced).unwrap();
    assert!(!store.was_sealed());
    assert_eq!(store.kept_anchor("audit"), Some(json!({"seq": 5})));
    // Its backend confirms it, as the audit log does when it opens: the run is sealed again.
    store.set_anchor("audit", json!({"seq": 5}));
    drop(store);

    // The seal and the run's anchor file deleted: the index's copy still holds it, once named.
    std::fs::File::open(run.join(run_store::RUN_MARKER)).unwrap().lock().unwrap();
    std::fs::remove_file(run.join("strata-run.seal")).unwrap();
    std::fs::remove_file(run.join(ANCHOR_FILE)).unwrap();
    let store = RunStore::open(&run, Durability::Synced).unwrap();
    assert_eq!(store.kept_anchor("audit"), None);
    store.keep_anchor_copy_in(&index).unwrap();
    assert_eq!(store.kept_anchor("audit"), Some(json!({"seq": 5})));
    // ... and carries it on: both copies hold it again after the next commit.
    store.tree("t").unwrap().insert("k", "v").unwrap();
    store.commit_blocking().unwrap();
    wait_for_anchors(&run.join(ANCHOR_FILE), &json!({"audit": {"seq": 5}}));
    drop(store);
    let store = reopen(&run);
    assert_eq!(store.kept_anchor("audit"), Some(json!({"seq": 5})));
}

#[test]
fn a_run_opened_unsealed_is_sealed_again_only_once_a_backend_sets_its_anchors() {
    let (_tmp, run, store) = new_run(Durability::Synced);
    store.set_anchor("audit", json!({"seq": 5}));
    store.commit_blocking().unwrap();
    drop(store);
    // As after a crash: no seal, and the anchor file holds a lower bound (the database may
    // hold records synced after the file's last write).
    std::fs::File::open(run.join(run_store::RUN_MARKER)).unwrap().lock().unwrap();
    std::fs::remove_file(run.join("strata-run.seal")).unwrap();
    let store = RunStore::open(&run, Durability::Synced).unwrap();
    assert!(!store.was_sealed());
    // Closed with nobody setting the anchor (`resume` of a finished run opens no audit log):
    // sealing the lower bound would claim it as the log's exact end.
    drop(store);
    let store = reopen(&run);
    assert!(!store.was_sealed(), "a lower bound was sealed as the exact end");
    assert_eq!(store.kept_anchor("audit"), Some(json!({"seq": 5})));
    // Set again by its backend: exact, and sealed.
    store.set_anchor("audit", json!({"seq": 7}));
    drop(store);
    let store = reopen(&run);
    assert!(store.was_sealed());
    assert_eq!(store.sealed_anchor("audit"), Some(json!({"seq": 7})));
}

#[test]
fn an_anchor_file_of_another_run_or_of_no_run_is_refused() {
    let (tmp, run, store) = new_run(Durability::Synced);
    drop(store);
    let path = run.join(ANCHOR_FILE);
    assert!(AnchorFile::read(&path, "run-1").unwrap().is_some());
    assert!(matches!(
        AnchorFile::read(&path, "run-2"),
        Err(StoreError::Corrupted { what: "anchor", detail, .. }) if detail.contains("not of run `run-2`")
    ));
    std::fs::write(&path, "{").unwrap();
    assert!(matches!(
        AnchorFile::read(&path, "run-1"),
        Err(StoreError::Corrupted { what: "anchor", .. })
    ));
    assert!(AnchorFile::read(&tmp.path().join("none.anchor"), "run-1").unwrap().is_none());
}
