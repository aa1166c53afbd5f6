//! The run's anchors kept outside the database while the run goes, not only in the seal.
//!
//! Why: the seal ([`crate::seal`]) is written only when a run closes cleanly. A run that
//! crashed, was killed, or keeps its audit log elsewhere (NATS) has none, and deleting the seal
//! of one that closed turns it into such a run: sled's recovery then cuts a truncated or
//! overwritten log at its first damaged record, silently, and what is left agrees with itself.
//! So the store's anchors (the values backends hand to
//! [`RunStore::set_anchor`](crate::RunStore::set_anchor), such as the audit log's newest record)
//! are also written to an *anchor file* while the run goes: `strata-run.anchor` in the run
//! directory, and a second copy in an index directory the program names
//! ([`RunStore::keep_anchor_copy_in`](crate::RunStore::keep_anchor_copy_in); the CLI keeps it
//! in the data directory), so that deleting one file never removes every anchor.
//!
//! **What an anchor file promises.** Each value in it was durable in the database when it was
//! written: the syncer (see [`crate::commit`]) tells the [`AnchorKeeper`] just before a sync
//! flushes (it stages the anchors then: their records were written before) and again once the
//! sync succeeded (it hands the staged anchors to its own thread, which writes them). So an
//! anchor file is a lower bound of the database: a reader may find more, never less. The files
//! lag the database by at most one write; the seal, when there is one, holds the exact end.
//!
//! **Cost.** The syncer's part is a mutex and a clone of a few small values per sync. The
//! writing is on the keeper's own thread, off the commit path: each write is the file written
//! to a temporary name, synced, renamed and its directory synced, for each copy (two
//! `fdatasync` and two directory `fsync`), at most once per [`WRITE_INTERVAL`]; anchors that
//! change meanwhile are coalesced into the next write, and the last change is written when the
//! store closes. So the files lag the database by at most one interval plus one write.
//! Measured on this project's 2-core VM under load (1000 sequential commits, each moving the
//! anchor): 9 to 28 anchor writes instead of one per commit, and per-commit times within the
//! machine's noise of the same loop with no anchor change (0.55–1.4 ms against 0.6–0.7 ms
//! synced); one synced write of both copies took about 27 ms there. Writing on every sync
//! instead (tried first) doubled the synced commit time (1.3 ms to 2.8 ms): the anchor's
//! syncs competed with the database's on the device.
//!
//! **Format.** JSON: `format` ([`ANCHOR_FORMAT`]), `run_id`, `generation` (grows with every
//! write: the newer of two copies) and `anchors`.

use std::collections::BTreeMap;
use std::fs::{self, File};
use std::io::{self, Write};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, PoisonError};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use agent_state::RunId;
use serde::{Deserialize, Serialize};

use crate::commit::{SyncHook, sync_dir};
use crate::seal::Anchors;
use crate::store::StoreError;

/// The shortest time between two writes of the anchor files: anchors that change meanwhile
/// are written together at its end. Far below a heartbeat (4 s by default, 20 ms in the
/// fastest tests), so the files follow the run closely, while a run that commits every
/// millisecond does not spend its disk on them (measured: see the module docs).
pub const WRITE_INTERVAL: Duration = Duration::from_millis(50);

/// The anchor file in the run directory.
pub const ANCHOR_FILE: &str = "strata-run.anchor";
/// The anchor file's `format` field.
pub const ANCHOR_FORMAT: &str = "strata-run-anchor";

/// The content of an anchor file.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct AnchorFile {
    /// Always [`ANCHOR_FORMAT`].
    pub format: String,
    /// The run's id.
    pub run_id: RunId,
    /// Grows with every write: of two copies, the one with the higher generation is newer.
    pub generation: u64,
    /// The store's anchors, each durable in the database when the file was written.
    pub anchors: BTreeMap<String, serde_json::Value>,
}

impl AnchorFile {
    /// The anchor file in run directory `run_dir`.
    pub fn in_run(run_dir: &Path) -> PathBuf {
        run_dir.join(ANCHOR_FILE)
    }

    /// The copy of run `run_id`'s anchor file in index directory `index_dir` (see
    /// [`RunStore::keep_anchor_copy_in`](crate::RunStore::keep_anchor_copy_in)).
    pub fn in_index(index_dir: &Path, run_id: &str) -> PathBuf {
        index_dir.join(format!("{run_id}.anchor"))
    }

    /// Reads the anchor file at `path`: `Ok(None)` when there is none, [`StoreError::Corrupted`]
    /// (what: `anchor`) when it is not an anchor file or belongs to another run than `run_id`.
    pub fn read(path: &Path, run_id: &str) -> Result<Option<Self>, StoreError> {
        let bytes = match fs::read(path) {
            Ok(bytes) => bytes,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
            Err(source) => {
                return Err(StoreError::Io { action: "read", path: path.to_path_buf(), source });
            }
        };
        let damaged = |detail: String| StoreError::Corrupted {
            dir: path.parent().map(Path::to_path_buf).unwrap_or_default(),
            what: "anchor",
            detail,
        };
        let file: Self = serde_json::from_slice(&bytes)
            .map_err(|e| damaged(format!("{} is not a valid anchor file: {e}", path.display())))?;
        if file.format != ANCHOR_FORMAT {
            return Err(damaged(format!("{} has format `{}`", path.display(), file.format)));
        }
        if file.run_id.as_str() != run_id {
            return Err(damaged(format!(
                "{} is the anchor file of run `{}`, not of run `{run_id}`",
                path.display(),
                file.run_id
            )));
        }
        Ok(Some(file))
    }

    /// Writes `self` to `path` atomically: a temporary file, synced if `sync`, renamed over
    /// `path`, and the directory synced if `sync`.
    pub(crate) fn write(&self, path: &Path, sync: bool) -> io::Result<()> {
        let bytes = serde_json::to_vec_pretty(self).map_err(io::Error::other)?;
        let dir = path.parent().unwrap_or_else(|| Path::new("."));
        let mut tmp_name = path.file_name().unwrap_or_default().to_os_string();
        tmp_name.push(".tmp");
        let tmp = dir.join(tmp_name);
        let mut file = File::create(&tmp)?;
        file.write_all(&bytes)?;
        if sync {
            file.sync_data()?;
        }
        drop(file);
        fs::rename(&tmp, path)?;
        if sync { sync_dir(dir) } else { Ok(()) }
    }
}

/// Keeps the anchor files current: the syncer's [`SyncHook`], and a thread that writes.
pub(crate) struct AnchorKeeper {
    shared: Arc<Shared>,
    thread: Option<JoinHandle<()>>,
}

struct Shared {
    state: Mutex<State>,
    /// Held while a file is written (taken before `state`): one writer at a time.
    writing: Mutex<()>,
    work: Condvar,
    /// The store's anchors, as backends set them.
    live: Arc<Mutex<Anchors>>,
    run_dir: PathBuf,
    run_id: RunId,
    sync: bool,
}

struct State {
    /// What the sync under way will make durable (set before its flush).
    staged: Option<Anchors>,
    /// Durable anchors the thread has yet to write.
    pending: Option<Anchors>,
    /// What was last taken to be written (or found when the store opened).
    written: Anchors,
    generation: u64,
    /// The second copy's directory, once named.
    index: Option<PathBuf>,
    /// How many writes have been made, for tests and measurements.
    writes: u64,
    /// The last write failed: said once, retried with the next change.
    failing: bool,
    stop: bool,
}

impl AnchorKeeper {
    /// Starts the keeper of the run in `run_dir` (id `run_id`), whose anchors backends set in
    /// `live`. `written` and `generation` are what the newest anchor file held (or the seal),
    /// so that unchanged anchors are not written again. `sync`: fsync each write.
    pub(crate) fn start(
        run_dir: &Path,
        run_id: &RunId,
        live: Arc<Mutex<Anchors>>,
        written: Anchors,
        generation: u64,
        sync: bool,
    ) -> io::Result<Self> {
        let shared = Arc::new(Shared {
            state: Mutex::new(State {
                staged: None,
                pending: None,
                written,
                generation,
                index: None,
                writes: 0,
                failing: false,
                stop: false,
            }),
            writing: Mutex::new(()),
            work: Condvar::new(),
            live,
            run_dir: run_dir.to_path_buf(),
            run_id: run_id.clone(),
            sync,
        });
        let worker = shared.clone();
        let thread =
            std::thread::Builder::new().name("strata-anchor".into()).spawn(move || worker.run())?;
        Ok(Self { shared, thread: Some(thread) })
    }

    /// The hook the syncer calls.
    pub(crate) fn hook(&self) -> Arc<dyn SyncHook> {
        self.shared.clone()
    }

    /// Keeps a second copy in `index_dir` from now on, and writes it now (with what the run's
    /// copy last held), so that both copies exist before the next change.
    pub(crate) fn keep_copy_in(&self, index_dir: &Path) -> io::Result<()> {
        fs::create_dir_all(index_dir)?;
        let _writing = self.shared.writing();
        let mut state = self.shared.lock();
        state.index = Some(index_dir.to_path_buf());
        let file = self.shared.file(state.generation, state.written.clone());
        file.write(&AnchorFile::in_index(index_dir, &self.shared.run_id), self.shared.sync)
    }

    /// Writes the run's copy now, synchronously (a new run's first, empty anchors).
    pub(crate) fn write_now(&self) -> io::Result<()> {
        let _writing = self.shared.writing();
        let state = self.shared.lock();
        let file = self.shared.file(state.generation, state.written.clone());
        file.write(&AnchorFile::in_run(&self.shared.run_dir), self.shared.sync)
    }

    /// Takes `anchors` (generation `generation`) as what was written last: a newer copy found
    /// in the index.
    pub(crate) fn adopt(&self, anchors: Anchors, generation: u64) {
        let mut state = self.shared.lock();
        state.written = anchors;
        state.generation = state.generation.max(generation);
    }

    /// Hands the store's anchors to the thread to write, now, without a sync: for anchors
    /// whose values are durable elsewhere (an audit log on a NATS server).
    pub(crate) fn publish(&self) {
        let live = self.shared.live.lock().unwrap_or_else(PoisonError::into_inner).clone();
        let mut state = self.shared.lock();
        if *state.pending.as_ref().unwrap_or(&state.written) != live {
            state.pending = Some(live);
            drop(state);
            self.shared.work.notify_one();
        }
    }

    /// How many writes the keeper's thread has made.
    pub(crate) fn writes(&self) -> u64 {
        self.shared.lock().writes
    }
}

impl Drop for AnchorKeeper {
    /// Writes what is pending, then stops the thread.
    fn drop(&mut self) {
        self.shared.lock().stop = true;
        self.shared.work.notify_one();
        if let Some(thread) = self.thread.take()
            && thread.join().is_err()
        {
            tracing::error!("the anchor thread of the run panicked");
        }
    }
}

impl SyncHook for Shared {
    fn before_sync(&self) {
        let live = self.live.lock().unwrap_or_else(PoisonError::into_inner).clone();
        self.lock().staged = Some(live);
    }

    fn after_sync(&self) {
        let mut state = self.lock();
        let Some(staged) = state.staged.take() else { return };
        let newest = state.pending.as_ref().unwrap_or(&state.written);
        if *newest != staged {
            state.pending = Some(staged);
            drop(state);
            self.work.notify_one();
        }
    }
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn writing(&self) -> MutexGuard<'_, ()> {
        self.writing.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn file(&self, generation: u64, anchors: Anchors) -> AnchorFile {
        AnchorFile {
            format: ANCHOR_FORMAT.to_owned(),
            run_id: self.run_id.clone(),
            generation,
            anchors,
        }
    }

    /// The thread: writes each pending change, coalescing those that come meanwhile; at stop,
    /// writes what is pending and exits.
    fn run(&self) {
        let mut last_write: Option<Instant> = None;
        loop {
            {
                let mut state = self.lock();
                while state.pending.is_none() && !state.stop {
                    state = self.work.wait(state).unwrap_or_else(PoisonError::into_inner);
                }
                if state.pending.is_none() {
                    break; // stopping, and nothing is pending
                }
                // At most one write per interval (what comes meanwhile joins it), except the
                // last one, when the store closes.
                while let Some(at) = last_write
                    && !state.stop
                {
                    let Some(left) = WRITE_INTERVAL.checked_sub(at.elapsed()) else { break };
                    state = self
                        .work
                        .wait_timeout(state, left)
                        .unwrap_or_else(PoisonError::into_inner)
                        .0;
                }
            }
            last_write = Some(Instant::now());
            let _writing = self.writing();
            let (file, index) = {
                let mut state = self.lock();
                let Some(anchors) = state.pending.take() else { continue };
                state.generation += 1;
                // Taken: a synchronous write from now on writes these, not older ones.
                state.written = anchors.clone();
                (self.file(state.generation, anchors), state.index.clone())
            };
            let mut result = file.write(&AnchorFile::in_run(&self.run_dir), self.sync);
            if let Some(index) = &index {
                let copy = file.write(&AnchorFile::in_index(index, &self.run_id), self.sync);
                result = result.and(copy);
            }
            let mut state = self.lock();
            state.writes += 1;
            match result {
                Ok(()) => state.failing = false,
                Err(e) => {
                    if !state.failing {
                        tracing::error!(
                            run = %self.run_dir.display(),
                            error = %e,
                            "cannot write the run's anchor file: the audit log is anchored \
                             only up to the last write that succeeded"
                        );
                    }
                    state.failing = true;
                }
            }
        }
    }
}

/// The newest of the anchor files of the run in `run_dir` (the run's copy, and the index's if
/// `index_dir` is given) that can be read: its anchors and generation. A copy that cannot be
/// read is logged and skipped (a reader such as `strata verify` reports it).
pub(crate) fn newest(
    run_dir: &Path,
    index_dir: Option<&Path>,
    run_id: &str,
) -> Option<(Anchors, u64)> {
    let mut paths = vec![AnchorFile::in_run(run_dir)];
    if let Some(index) = index_dir {
        paths.push(AnchorFile::in_index(index, run_id));
    }
    paths
        .iter()
        .filter_map(|path| match AnchorFile::read(path, run_id) {
            Ok(file) => file,
            Err(e) => {
                tracing::warn!(error = %e, "an anchor file of the run cannot be read");
                None
            }
        })
        .max_by_key(|file| file.generation)
        .map(|file| (file.anchors, file.generation))
}
