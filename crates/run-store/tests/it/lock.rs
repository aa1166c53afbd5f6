//! A database held by a live store, in this process or another, is refused with `Locked`.

use std::io::{BufRead, BufReader, Read, Write};
use std::path::Path;
use std::process::{Command, Stdio};

use run_store::{Durability, RunStore, StoreError};

use crate::{new_run, snapshot, write_records};

/// The run directory's files outside the sled database, and the names of those inside.
fn without_database(run: &Path) -> Vec<(std::path::PathBuf, Vec<u8>)> {
    snapshot(run)
        .into_iter()
        .map(
            |(path, bytes)| if path.starts_with("db") { (path, Vec::new()) } else { (path, bytes) },
        )
        .collect()
}

/// Set by [`a_run_held_by_another_process_is_locked`] for the child it starts.
const HOLD_ENV: &str = "STRATA_TEST_HOLD_RUN";

#[test]
fn a_second_open_in_this_process_is_locked() {
    let (_tmp, run, store) = new_run(Durability::Synced);
    write_records(&store, 10);
    for durability in [Durability::Synced, Durability::NoSync] {
        let err = RunStore::open(&run, durability).unwrap_err();
        assert!(matches!(&err, StoreError::Locked { dir } if *dir == run), "{err:?}");
        assert!(err.to_string().contains("wait for it to finish or stop it first"), "{err}");
    }
    assert!(!run.join("db.before-recovery").exists() && !run.join("strata-run.seal").exists());
    drop(store);
    assert!(run.join("strata-run.seal").exists(), "the refused opens did not disturb the close");
    RunStore::open(&run, Durability::Synced).unwrap();
}

/// The lock is the flock sled takes on `db/db`, so it works across processes. The child is this
/// test binary, running only [`hold_run_for_parent`].
#[test]
fn a_run_held_by_another_process_is_locked_and_untouched() {
    let (_tmp, run, store) = new_run(Durability::Synced);
    write_records(&store, 10);
    drop(store);

    let mut child = Command::new(std::env::current_exe().unwrap())
        .args(["--exact", "lock::hold_run_for_parent", "--test-threads=1", "--quiet"])
        .env(HOLD_ENV, &run)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .unwrap();
    let mut stdout = BufReader::new(child.stdout.take().unwrap());
    let mut seen = String::new();
    loop {
        let mut line = String::new();
        assert_ne!(stdout.read_line(&mut line).unwrap(), 0, "the child exited early: {seen}");
        if line.trim() == "holding" {
            break;
        }
        seen.push_str(&line);
    }

    // The child's sled may write to its database in the background: compare the rest.
    let before = without_database(&run);
    let err = RunStore::open(&run, Durability::Synced).unwrap_err();
    assert!(matches!(err, StoreError::Locked { .. }), "{err:?}");
    assert_eq!(without_database(&run), before, "a refused open changes nothing");

    drop(child.stdin.take()); // the child closes the run and exits
    let mut rest = String::new();
    stdout.read_to_string(&mut rest).unwrap();
    assert!(child.wait().unwrap().success(), "{rest}");
    let store = RunStore::open(&run, Durability::Synced).unwrap();
    assert_eq!(crate::missing_records(&store, 10), 0);
}

/// Not a test of its own (it returns at once): the child of
/// [`a_run_held_by_another_process_is_locked_and_untouched`], which sets [`HOLD_ENV`] to a run.
/// Opens that run, prints `holding`, and keeps it open until its stdin closes.
#[test]
fn hold_run_for_parent() {
    let Some(run) = std::env::var_os(HOLD_ENV) else { return };
    let store = RunStore::open(Path::new(&run), Durability::Synced).unwrap();
    // Straight to stdout: the test harness captures `println!` but not this.
    let mut stdout = std::io::stdout();
    writeln!(stdout, "holding").unwrap();
    stdout.flush().unwrap();
    std::io::stdin().read_to_end(&mut Vec::new()).unwrap();
    drop(store);
}
