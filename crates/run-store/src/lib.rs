//! A Strata run directory: one sled database per run, with durable commits.
//!
//! The package is `strata-run-store` (`strata-run-store = "0.1"` in `Cargo.toml`); code
//! names it `run_store`.
//!
//! A run directory holds a marker file (`strata-run.json`: format, schema version, run id) and a
//! sled database (`db/`). [`RunStore`] opens or creates it, refuses what is not a Strata run, a
//! run written by another schema version, a damaged database, or one that a live process holds,
//! and hands out sled trees to the backends (bus, whiteboards, governance, audit log, agent state).
//! It does not know what is stored: the backends define their trees and records.
//!
//! **Durability.** sled 0.34's `flush` ends with `sync_file_range`, which does not flush the
//! device's write cache (sled issue #1452). [`RunStore::commit`] therefore flushes sled and then
//! calls `fdatasync` on the database file (and syncs the blob files and directory entries that
//! sled created since the last sync; sled syncs neither). Commits are grouped: one background
//! thread syncs, and every writer that asked before a sync started is released by that one sync,
//! so concurrent writers share its cost. When `commit` returns `Ok`, everything written to the
//! store's trees before the call survives a crash of the process and a loss of power.
//! [`Durability::NoSync`] skips the syncs (a process crash loses nothing, a power loss may); it
//! must be chosen explicitly and is logged as a warning when the store opens.
//!
//! **No batches.** A backend writes to its trees one key at a time: no `apply_batch`, no
//! transactions, no `checksum`. Those take a lock of sled's that is one for the whole process,
//! and taking it waits for every sled read and write in flight to end. A full disk can wedge
//! sled's log so that a flush never ends (see the module docs of the group commit): a batch
//! after it would wait forever, and so would every sled call queued behind the batch, in every
//! run of the process, including the tokio workers that should notice the failure and end the
//! run. Without batches a wedged flush holds up only itself.
//!
//! **Damage.** sled 0.34 recovers its log by cutting it at the first record that fails its
//! checksum and rewriting the file from there, without an error: a truncated or overwritten
//! database would open with data silently missing, and the damaged bytes would be gone. So
//! when a store closes (the last clone dropped, no tree left), it seals the run: `strata-run.seal`
//! lists every file of the database with its length and CRC-32. [`RunStore::open`] compares
//! before sled reads anything and refuses a mismatch with [`StoreError::Corrupted`], changing
//! nothing. A run without a seal did not close cleanly (a crash or a power loss): sled's
//! recovery is then expected to drop a torn tail, and the database is first copied to
//! `db.before-recovery/`, so that no byte is lost even if the damage was more than a torn tail.
//! Opening reads the whole database once (to check or to copy it).
//!
//! **Anchors.** The seal also keeps small values the backends hand to
//! [`RunStore::set_anchor`] (the audit log keeps its final record there), so that a database
//! rewritten to agree with itself still disagrees with its seal. A run that crashed, was
//! killed, or whose seal was deleted has no seal to compare with, and sled's silent recovery
//! would make a cut or overwritten log look whole; so the anchors are also kept *while the run
//! goes*, outside the database: after each group commit (at most once per
//! [`WRITE_INTERVAL`]) a thread writes the anchors that commit made durable to
//! `strata-run.anchor` in the run directory ([`AnchorFile`]) and to a copy in the directory
//! named by [`RunStore::keep_anchor_copy_in`] (the CLI: its data directory), each atomically
//! and synced. Each value there is a lower bound of the database. [`RunStore::kept_anchor`]
//! is what a run held when it opened (the seal's, else the newest anchor file's), which a
//! backend checks before it writes; the marker's `anchored` says the run keeps anchor files, so
//! a run that has lost all of them is told apart from one created before they existed.
//!
//! **Reading without writing.** [`RunStore::open_read_only`] copies the database to a private
//! temporary directory and opens the copy: the run directory is not opened for writing, locked,
//! recovered, backed up or unsealed, so a read-only directory or a run a live process is writing
//! can be read. A copy is removed when its store closes; [`remove_read_copies`] removes them
//! for a program about to exit early, and a copy left by a process that is gone (`kill -9`) is
//! removed by the next reader.
//!
//! ```
//! use run_store::{Durability, RunStore};
//! use agent_state::Timestamp;
//!
//! # tokio_test_block_on(async {
//! let dir = tempfile::tempdir()?;
//! let run = dir.path().join("run-1");
//! let store = RunStore::create(&run, "run-1", Timestamp(0), Durability::Synced)?;
//! store.tree("notes")?.insert("greeting", "hello")?;
//! store.commit().await?; // on disk, through fdatasync
//! drop(store);
//!
//! let store = RunStore::open(&run, Durability::Synced)?;
//! assert_eq!(store.tree("notes")?.get("greeting")?.as_deref(), Some(&b"hello"[..]));
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! # }).unwrap();
//! # fn tokio_test_block_on<F: std::future::Future>(f: F) -> F::Output {
//! #     tokio::runtime::Builder::new_current_thread().build().unwrap().block_on(f)
//! # }
//! ```

mod anchor;
mod commit;
mod readcopy;
mod seal;
mod store;

#[cfg(test)]
mod tests;

pub use anchor::{ANCHOR_FILE, ANCHOR_FORMAT, AnchorFile, WRITE_INTERVAL};
pub use commit::StoreFailed;
pub use readcopy::remove_read_copies;
pub use store::{
    DB_DIR, Durability, RUN_FORMAT, RUN_MARKER, RunMarker, RunStore, SCHEMA_VERSION, StoreError,
};
