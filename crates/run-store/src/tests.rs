//! Unit tests of the seal and of group commit's bookkeeping.
#![allow(clippy::unwrap_used, clippy::expect_used, reason = "tests")]

use std::fs;
use std::time::Duration;

use crate::commit::{DiskSync, GroupCommit};
use crate::seal::{self, Found};
use crate::store::StoreError;

/// A bound on waiting for sled to let go of its lock after its handles dropped (returns as soon
/// as it does; sled's background threads can hold it a moment longer).
const PATIENCE: Duration = Duration::from_secs(10);

/// A closed sled database in `<tmp>/db` with one record, and the run directory `<tmp>`.
fn closed_db() -> tempfile::TempDir {
    let tmp = tempfile::tempdir().unwrap();
    let db = sled::open(tmp.path().join("db")).unwrap();
    db.insert("k", "v").unwrap();
    db.flush().unwrap();
    drop(db);
    // sled's background threads can hold its lock on `db/db` a little after the last handle
    // drops: wait for them (under load), so the database is closed when a test opens it again.
    let file = fs::File::open(tmp.path().join("db").join("db")).unwrap();
    assert!(seal::lock_within(&file, PATIENCE).unwrap(), "sled did not let go of the database");
    drop(file);
    tmp
}

#[test]
fn a_seal_matches_the_database_it_was_taken_of() {
    let tmp = closed_db();
    let (run, db) = (tmp.path(), tmp.path().join("db"));
    assert!(matches!(seal::check(run, &db).unwrap(), Found::Unsealed));
    assert!(seal::seal_if_closed(run, &db, PATIENCE, &Default::default()).unwrap());
    assert!(matches!(seal::check(run, &db).unwrap(), Found::Sealed(_)));
    seal::unseal(run).unwrap();
    assert!(matches!(seal::check(run, &db).unwrap(), Found::Unsealed));
}

#[test]
fn a_seal_names_the_file_that_changed() {
    let tmp = closed_db();
    let (run, db) = (tmp.path(), tmp.path().join("db"));
    assert!(seal::seal_if_closed(run, &db, PATIENCE, &Default::default()).unwrap());
    let len = fs::metadata(db.join("db")).unwrap().len();
    fs::OpenOptions::new().write(true).open(db.join("db")).unwrap().set_len(len - 1).unwrap();
    let Err(StoreError::Corrupted { what, detail, .. }) = seal::check(run, &db) else {
        panic!("a changed database must not match its seal")
    };
    assert_eq!(what, "database");
    assert!(detail.starts_with(&format!("db/db is {} bytes with CRC-32 ", len - 1)), "{detail}");
    assert!(detail.contains(&format!("but was {len} bytes")), "{detail}");
}

#[test]
fn no_seal_is_written_while_sled_holds_the_database() {
    let tmp = closed_db();
    let (run, db_dir) = (tmp.path(), tmp.path().join("db"));
    let db = sled::open(&db_dir).unwrap();
    assert!(!seal::seal_if_closed(run, &db_dir, Duration::ZERO, &Default::default()).unwrap());
    assert!(!run.join(seal::SEAL_FILE).exists());
    drop(db);
    assert!(seal::seal_if_closed(run, &db_dir, PATIENCE, &Default::default()).unwrap());
}

#[test]
fn a_restored_seal_is_the_same_seal() {
    let tmp = closed_db();
    let (run, db) = (tmp.path(), tmp.path().join("db"));
    assert!(seal::seal_if_closed(run, &db, PATIENCE, &Default::default()).unwrap());
    let Found::Sealed(bytes) = seal::check(run, &db).unwrap() else { panic!("sealed") };
    seal::unseal(run).unwrap();
    seal::restore(run, &bytes).unwrap();
    assert_eq!(fs::read(run.join(seal::SEAL_FILE)).unwrap(), bytes);
}

#[test]
fn a_backup_replaces_an_older_one() {
    let tmp = closed_db();
    let (run, db) = (tmp.path(), tmp.path().join("db"));
    let backup = seal::back_up(run, &db).unwrap();
    fs::write(backup.join("stale"), "from an older recovery").unwrap();
    let backup = seal::back_up(run, &db).unwrap();
    assert!(!backup.join("stale").exists());
    assert_eq!(fs::read(backup.join("db")).unwrap(), fs::read(db.join("db")).unwrap());
}

/// Every ticket is released by a sync that started after it was taken, so syncs never exceed
/// commits, and the store stays healthy.
#[test]
fn group_commit_releases_every_ticket_and_stays_healthy() {
    let tmp = tempfile::tempdir().unwrap();
    let db_dir = tmp.path().join("db");
    let db = sled::open(&db_dir).unwrap();
    let committer =
        GroupCommit::start(db.clone(), Some(DiskSync::open(&db_dir).unwrap()), None, tmp.path())
            .unwrap();
    std::thread::scope(|scope| {
        for t in 0..4u8 {
            let (db, committer) = (&db, &committer);
            scope.spawn(move || {
                for i in 0..25u8 {
                    db.insert([t, i], &[i]).unwrap();
                    committer.commit_blocking().unwrap();
                }
            });
        }
    });
    assert!((1..=100).contains(&committer.syncs()), "{}", committer.syncs());
    assert!(committer.health().is_healthy());
    let health = committer.health();
    drop(committer);
    assert!(health.is_healthy(), "a clean stop is not a failure");
}
