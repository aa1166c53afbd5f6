//! Creating and opening runs, and refusing what is not one.

use std::fs;

use agent_state::{RunId, Timestamp};
use run_store::{Durability, RUN_MARKER, RunMarker, RunStore, SCHEMA_VERSION, StoreError};

use crate::{new_run, snapshot};

#[test]
fn create_then_open_round_trips_marker_and_data() {
    let (_tmp, run, store) = new_run(Durability::Synced);
    let expected = RunMarker {
        format: "strata-run".into(),
        schema_version: SCHEMA_VERSION,
        run_id: RunId::parse("run-1").unwrap(),
        created_at: Timestamp(7),
        anchored: true,
    };
    assert_eq!(store.marker(), &expected);
    assert_eq!(store.dir(), run);
    store.tree("notes").unwrap().insert("greeting", "hello").unwrap();
    store.commit_blocking().unwrap();
    drop(store);

    assert_eq!(RunStore::peek(&run).unwrap(), expected);
    let store = RunStore::open(&run, Durability::Synced).unwrap();
    assert_eq!(store.marker(), &expected);
    assert_eq!(store.durability(), Durability::Synced);
    assert_eq!(
        store.tree("notes").unwrap().get("greeting").unwrap().as_deref(),
        Some(&b"hello"[..])
    );
}

#[test]
fn committed_data_survives_repeated_close_and_open() {
    let (_tmp, run, store) = new_run(Durability::Synced);
    let tree = store.tree("counter").unwrap();
    tree.insert("n", &0u64.to_be_bytes()).unwrap();
    store.commit_blocking().unwrap();
    drop((tree, store));
    for round in 1..=3u64 {
        let store = RunStore::open(&run, Durability::Synced).unwrap();
        let tree = store.tree("counter").unwrap();
        assert_eq!(tree.get("n").unwrap().as_deref(), Some(&(round - 1).to_be_bytes()[..]));
        tree.insert("n", &round.to_be_bytes()).unwrap();
        store.commit_blocking().unwrap();
        drop((tree, store));
        assert!(run.join("strata-run.seal").is_file(), "a clean close seals the run");
    }
    assert!(!run.join("db.before-recovery").exists(), "clean closes need no recovery copy");
}

#[test]
fn create_in_an_existing_empty_directory_works() {
    let tmp = tempfile::tempdir().unwrap();
    RunStore::create(tmp.path(), "run-1", Timestamp(0), Durability::Synced).unwrap();
    assert!(tmp.path().join(RUN_MARKER).is_file());
}

#[test]
fn create_refuses_a_non_empty_directory_and_leaves_it_untouched() {
    let tmp = tempfile::tempdir().unwrap();
    fs::write(tmp.path().join("thesis.txt"), "years of work").unwrap();
    let before = snapshot(tmp.path());
    let err = RunStore::create(tmp.path(), "run-1", Timestamp(0), Durability::Synced).unwrap_err();
    assert!(matches!(&err, StoreError::AlreadyExists { dir } if dir == tmp.path()), "{err:?}");
    assert!(err.to_string().contains("choose a new directory"), "{err}");
    assert_eq!(snapshot(tmp.path()), before);
}

#[test]
fn create_refuses_an_existing_run() {
    let (_tmp, run, store) = new_run(Durability::Synced);
    drop(store);
    let before = snapshot(&run);
    let err = RunStore::create(&run, "run-2", Timestamp(0), Durability::Synced).unwrap_err();
    assert!(matches!(err, StoreError::AlreadyExists { .. }), "{err:?}");
    assert_eq!(snapshot(&run), before);
}

#[test]
fn create_refuses_an_id_that_breaks_the_run_id_rule_and_makes_nothing() {
    let tmp = tempfile::tempdir().unwrap();
    let run = tmp.path().join("run");
    for id in ["a_b", "a.b", "", "../escape"] {
        let err = RunStore::create(&run, id, Timestamp(0), Durability::Synced).unwrap_err();
        assert!(matches!(err, StoreError::BadRunId { .. }), "{id}: {err:?}");
        assert!(err.to_string().contains("ASCII letters, digits or `-`"), "{err}");
        assert!(!run.exists(), "{id}: nothing is created");
    }
}

#[test]
fn a_run_whose_marker_names_an_id_of_the_old_rule_is_refused_as_old() {
    let (_tmp, run, store) = new_run(Durability::Synced);
    drop(store);
    let marker = fs::read_to_string(run.join(RUN_MARKER)).unwrap();
    fs::write(run.join(RUN_MARKER), marker.replace("\"run-1\"", "\"run_1.old\"")).unwrap();
    let before = snapshot(&run);
    let err = RunStore::open(&run, Durability::Synced).unwrap_err();
    assert!(matches!(err, StoreError::OldRunId { .. }), "{err:?}");
    let text = err.to_string();
    assert!(text.contains("older Strata") && text.contains("run_1.old"), "{text}");
    assert_eq!(snapshot(&run), before, "nothing is changed");
}

#[test]
fn create_refuses_a_file() {
    let tmp = tempfile::tempdir().unwrap();
    let file = tmp.path().join("run");
    fs::write(&file, "not a directory").unwrap();
    let err = RunStore::create(&file, "run-1", Timestamp(0), Durability::Synced).unwrap_err();
    assert!(matches!(err, StoreError::AlreadyExists { .. }), "{err:?}");
    assert_eq!(fs::read(&file).unwrap(), b"not a directory");
}

#[test]
fn open_of_a_missing_directory_is_not_found_and_creates_nothing() {
    let tmp = tempfile::tempdir().unwrap();
    let run = tmp.path().join("nope");
    let err = RunStore::open(&run, Durability::Synced).unwrap_err();
    assert!(matches!(&err, StoreError::NotFound { dir } if *dir == run), "{err:?}");
    assert!(err.to_string().contains("check the path"), "{err}");
    assert!(!run.exists());
    assert!(matches!(RunStore::peek(&run), Err(StoreError::NotFound { .. })));
}

#[test]
fn open_of_a_directory_without_marker_is_not_a_run_and_creates_nothing() {
    let tmp = tempfile::tempdir().unwrap();
    fs::write(tmp.path().join("notes.txt"), "mine").unwrap();
    let before = snapshot(tmp.path());
    let err = RunStore::open(tmp.path(), Durability::Synced).unwrap_err();
    assert!(matches!(err, StoreError::NotARun { .. }), "{err:?}");
    assert!(err.to_string().contains("point at a run directory"), "{err}");
    assert_eq!(snapshot(tmp.path()), before);
}

#[test]
fn open_of_a_file_is_not_a_run() {
    let tmp = tempfile::tempdir().unwrap();
    let file = tmp.path().join("run");
    fs::write(&file, "x").unwrap();
    let err = RunStore::open(&file, Durability::Synced).unwrap_err();
    assert!(matches!(err, StoreError::NotARun { .. }), "{err:?}");
}

#[test]
fn open_of_a_marker_with_another_format_is_not_a_run() {
    let tmp = tempfile::tempdir().unwrap();
    let marker = r#"{"format": "other-tool", "schema_version": 1, "run_id": "x", "created_at": 0}"#;
    fs::write(tmp.path().join(RUN_MARKER), marker).unwrap();
    let before = snapshot(tmp.path());
    let err = RunStore::open(tmp.path(), Durability::Synced).unwrap_err();
    assert!(matches!(err, StoreError::NotARun { .. }), "{err:?}");
    assert_eq!(snapshot(tmp.path()), before);
}

#[test]
fn open_of_a_run_with_schema_version_2_is_incompatible_and_untouched() {
    let (_tmp, run, store) = new_run(Durability::Synced);
    drop(store);
    let path = run.join(RUN_MARKER);
    let mut marker: serde_json::Value = serde_json::from_slice(&fs::read(&path).unwrap()).unwrap();
    marker["schema_version"] = 2.into();
    fs::write(&path, serde_json::to_vec(&marker).unwrap()).unwrap();
    let before = snapshot(&run);

    let err = RunStore::open(&run, Durability::Synced).unwrap_err();
    assert!(
        matches!(err, StoreError::IncompatibleSchema { found: 2, supported: SCHEMA_VERSION, .. }),
        "{err:?}"
    );
    assert!(err.to_string().contains("schema version 2, this build reads version 1"), "{err}");
    assert!(matches!(RunStore::peek(&run), Err(StoreError::IncompatibleSchema { found: 2, .. })));
    assert_eq!(snapshot(&run), before);
}

#[test]
fn open_of_a_marker_with_garbage_json_is_corrupted() {
    let (_tmp, run, store) = new_run(Durability::Synced);
    drop(store);
    fs::write(run.join(RUN_MARKER), "{ this is not json").unwrap();
    let before = snapshot(&run);
    let err = RunStore::open(&run, Durability::Synced).unwrap_err();
    assert!(matches!(err, StoreError::Corrupted { what: "marker", .. }), "{err:?}");
    assert!(err.to_string().contains("restore the run directory from a copy"), "{err}");
    assert_eq!(snapshot(&run), before);
}

#[test]
fn open_of_a_marker_without_schema_version_is_corrupted() {
    let tmp = tempfile::tempdir().unwrap();
    fs::write(tmp.path().join(RUN_MARKER), r#"{"format": "strata-run", "run_id": "x"}"#).unwrap();
    let err = RunStore::open(tmp.path(), Durability::Synced).unwrap_err();
    assert!(matches!(err, StoreError::Corrupted { what: "marker", .. }), "{err:?}");
}

#[test]
fn open_of_a_run_whose_database_is_gone_is_corrupted_and_creates_nothing() {
    let (_tmp, run, store) = new_run(Durability::Synced);
    drop(store);
    fs::remove_dir_all(run.join("db")).unwrap();
    let before = snapshot(&run);
    let err = RunStore::open(&run, Durability::Synced).unwrap_err();
    assert!(matches!(err, StoreError::Corrupted { what: "database", .. }), "{err:?}");
    assert!(err.to_string().contains("db/db is missing"), "{err}");
    assert_eq!(snapshot(&run), before, "sled must not create an empty database in its place");
}

#[test]
fn error_messages_are_lowercase_and_say_what_to_do() {
    let dir = std::path::PathBuf::from("/runs/r1");
    let errors = [
        StoreError::NotFound { dir: dir.clone() },
        StoreError::NotARun { dir: dir.clone() },
        StoreError::AlreadyExists { dir: dir.clone() },
        StoreError::IncompatibleSchema { dir: dir.clone(), found: 2, supported: 1 },
        StoreError::Locked { dir: dir.clone() },
        StoreError::Corrupted { dir, what: "database", detail: "db/db is missing".into() },
    ];
    for err in errors {
        let text = err.to_string();
        assert!(!text.starts_with(char::is_uppercase) && !text.ends_with('.'), "{text}");
        assert!(text.contains(';'), "a message says what is wrong; then what to do: {text}");
    }
}
