//! Damaged databases: refused with `Corrupted` and left byte-identical when the run was sealed;
//! recovered by sled, with a copy of the database as it was, when it was not.
//!
//! What sled 0.34.7 does by itself (measured with these same damages, without a seal): it never
//! panics and never errors; it opens the database with every record from the damage on missing
//! (truncated to 10 bytes or garbage at the start: all of them), and rewrites the file from the
//! damage on. Hence the seal.

use std::fs::{self, OpenOptions};
use std::io::{Seek, SeekFrom, Write};
use std::path::Path;

use run_store::{Durability, RunStore, StoreError};

use crate::{missing_records, new_run, snapshot, write_records};

const RECORDS: u32 = 2000;

/// A closed (sealed) run holding [`RECORDS`] committed records, and the length of `db/db`.
fn sealed_run() -> (tempfile::TempDir, std::path::PathBuf, u64) {
    let (tmp, run, store) = new_run(Durability::Synced);
    write_records(&store, RECORDS);
    drop(store);
    assert!(run.join("strata-run.seal").is_file());
    let len = fs::metadata(run.join("db/db")).unwrap().len();
    (tmp, run, len)
}

fn overwrite(path: &Path, at: u64, bytes: &[u8]) {
    let mut file = OpenOptions::new().write(true).open(path).unwrap();
    file.seek(SeekFrom::Start(at)).unwrap();
    file.write_all(bytes).unwrap();
}

fn truncate(path: &Path, len: u64) {
    OpenOptions::new().write(true).open(path).unwrap().set_len(len).unwrap();
}

/// Damages a sealed run with `damage`, and checks that open refuses it and changes nothing.
#[track_caller]
fn check_refused(damage: impl FnOnce(&Path, u64), expect_in_message: &str) {
    let (_tmp, run, len) = sealed_run();
    damage(&run, len);
    let before = snapshot(&run);
    let err = RunStore::open(&run, Durability::Synced).unwrap_err();
    assert!(matches!(err, StoreError::Corrupted { what: "database", .. }), "{err:?}");
    let message = err.to_string();
    assert!(message.contains(expect_in_message), "{message}");
    assert!(message.contains("restore the run directory from a copy"), "{message}");
    assert_eq!(snapshot(&run), before, "a refused open changes nothing");
    // And it stays refused: nothing was "repaired" behind the user's back.
    assert!(RunStore::open(&run, Durability::NoSync).is_err());
}

#[test]
fn truncated_to_a_few_bytes_is_refused() {
    check_refused(|run, _| truncate(&run.join("db/db"), 10), "db/db is 10 bytes");
}

#[test]
fn truncated_to_half_is_refused() {
    check_refused(|run, len| truncate(&run.join("db/db"), len / 2), "db/db is");
}

#[test]
fn truncated_to_nothing_is_refused() {
    check_refused(|run, _| truncate(&run.join("db/db"), 0), "db/db is 0 bytes");
}

#[test]
fn garbage_in_the_middle_is_refused() {
    check_refused(|run, len| overwrite(&run.join("db/db"), len / 2, &[0xAB; 64]), "CRC-32");
}

#[test]
fn garbage_at_the_start_is_refused() {
    check_refused(|run, _| overwrite(&run.join("db/db"), 0, &[0xAB; 64]), "CRC-32");
}

#[test]
fn a_damaged_sled_config_is_refused() {
    check_refused(|run, _| fs::write(run.join("db/conf"), "garbage\n").unwrap(), "db/conf");
}

#[test]
fn a_missing_sled_config_is_refused() {
    check_refused(|run, _| fs::remove_file(run.join("db/conf")).unwrap(), "db/conf is missing");
}

#[test]
fn a_file_added_to_the_database_is_refused() {
    check_refused(
        |run, _| fs::write(run.join("db/snap.0000000000000001"), "x").unwrap(),
        "appeared",
    );
}

#[test]
fn a_garbage_seal_is_refused() {
    let (_tmp, run, _) = sealed_run();
    fs::write(run.join("strata-run.seal"), "{{{").unwrap();
    let before = snapshot(&run);
    let err = RunStore::open(&run, Durability::Synced).unwrap_err();
    assert!(matches!(err, StoreError::Corrupted { what: "seal", .. }), "{err:?}");
    assert_eq!(snapshot(&run), before);
}

#[test]
fn an_intact_sealed_run_opens_with_every_record() {
    let (_tmp, run, _) = sealed_run();
    let store = RunStore::open(&run, Durability::Synced).unwrap();
    assert!(!run.join("strata-run.seal").exists(), "an open run has no seal");
    assert_eq!(missing_records(&store, RECORDS), 0);
}

/// After a crash there is no seal (it is removed when a run opens); sled's recovery then runs,
/// and may cut the log at the damage, but only after the database was copied.
#[test]
fn damage_in_an_unsealed_run_is_recovered_by_sled_after_a_copy_is_kept() {
    let (_tmp, run, len) = sealed_run();
    fs::remove_file(run.join("strata-run.seal")).unwrap(); // as after a crash
    overwrite(&run.join("db/db"), len / 2, &[0xAB; 64]);
    let damaged = snapshot(&run.join("db"));

    let (store, events) = crate::logged(|| RunStore::open(&run, Durability::Synced).unwrap());
    // sled 0.34.7 opens it and silently drops every record from the damage on.
    let missing = missing_records(&store, RECORDS);
    assert!(missing > 0 && missing < RECORDS as usize, "{missing} missing");
    assert_eq!(
        snapshot(&run.join("db.before-recovery")),
        damaged,
        "the copy is the database as it was"
    );
    assert!(
        events.iter().any(|e| e.starts_with("WARN") && e.contains("not closed cleanly")),
        "{events:?}"
    );
}

#[test]
fn a_tree_that_outlives_the_store_leaves_the_run_unsealed_but_intact() {
    let (_tmp, run, store) = new_run(Durability::Synced);
    write_records(&store, 10);
    let tree = store.tree("records").unwrap();
    drop(store);
    assert!(!run.join("strata-run.seal").exists(), "sled is still open through the tree");
    drop(tree);

    let store = RunStore::open(&run, Durability::Synced).unwrap();
    assert_eq!(missing_records(&store, 10), 0);
    assert!(run.join("db.before-recovery/db").is_file());
}

/// A process killed while sled 0.34 wrote a snapshot leaves `snap.<lsn>.generating` behind,
/// which sled then reads as the newest snapshot and refuses the database for (found by the
/// crash torture harness). Opening the run removes it, after keeping the copy of the crashed
/// database, and every committed record is there.
#[test]
fn a_snapshot_cut_short_by_a_crash_does_not_keep_the_run_from_opening() {
    let (_tmp, run, _) = sealed_run();
    fs::remove_file(run.join("strata-run.seal")).unwrap(); // as after a crash
    let unfinished = run.join("db/snap.FFFFFFFFFFFFFFF0.generating");
    fs::write(&unfinished, b"").unwrap();

    // What `inspect` and `verify` use opens a copy, and leaves the run as it is.
    let before = snapshot(&run);
    let copy = RunStore::open_read_only(&run).unwrap();
    assert_eq!(missing_records(&copy, RECORDS), 0);
    drop(copy);
    assert_eq!(snapshot(&run), before, "reading the run changed nothing");

    let store = RunStore::open(&run, Durability::Synced).unwrap();
    assert_eq!(missing_records(&store, RECORDS), 0, "every committed record is there");
    assert!(!unfinished.exists(), "the unfinished snapshot is gone");
    assert!(
        run.join("db.before-recovery/snap.FFFFFFFFFFFFFFF0.generating").is_file(),
        "the copy kept before recovery has it, as the crash left it"
    );
}
