//! Group commit: one thread flushes sled and calls `fdatasync`; each sync releases every writer
//! that asked before it started.
//!
//! Tickets: [`GroupCommit::commit`] takes the next ticket (`requested + 1`) after the caller's
//! writes are in sled. The syncer reads `requested` as its target, flushes sled (which writes
//! everything written so far, so every ticket up to the target), syncs the files, and then
//! publishes `synced = target`. A ticket is durable once `synced >= ticket`. A request that
//! arrives while a sync runs has a larger ticket than that sync's target and waits for the next
//! one, which starts as soon as the current one ends.
//!
//! A failed sync poisons the store: the kernel may have dropped the dirty pages it could not
//! write (so a later successful `fdatasync` proves nothing about them), and sled stops accepting
//! writes after an I/O error. Tickets the failed sync covered, and every later one, fail; tickets
//! an earlier sync covered stay committed.

use std::collections::BTreeSet;
use std::ffi::OsString;
use std::fs::File;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, PoisonError};
use std::thread::JoinHandle;

use agent_state::BackendError;
use tokio::sync::watch;

/// The group-commit syncer of one database.
pub(crate) struct GroupCommit {
    shared: Arc<Shared>,
    thread: Option<JoinHandle<()>>,
}

/// Whether a store's syncs have all succeeded; outlives the syncer (the seal on close asks).
#[derive(Clone)]
pub(crate) struct Health(Arc<Shared>);

/// The files a sync makes durable after sled's flush, for [`Durability::Synced`]: the database
/// file (`fdatasync`), the blob files sled wrote since the last sync (values too large for the
/// log, which sled writes without any sync), and the directories whose entries changed.
///
/// [`Durability::Synced`]: crate::Durability::Synced
pub(crate) struct DiskSync {
    db_dir: PathBuf,
    db_file: File,
    db_entries: BTreeSet<OsString>,
    blobs: BTreeSet<OsString>,
}

/// What async committers watch.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
struct Progress {
    /// Every ticket up to this one is durable.
    synced: u64,
    /// A sync failed (or the syncer died): every ticket above `synced` fails.
    failed: bool,
}

#[derive(Default)]
struct State {
    /// The last ticket handed out.
    requested: u64,
    /// Every ticket up to this one is durable.
    synced: u64,
    /// Why the store is poisoned, once a sync failed or the syncer died.
    failed: Option<String>,
    /// The store is closing: the syncer finishes the pending requests and exits.
    stop: bool,
}

struct Shared {
    state: Mutex<State>,
    /// The syncer waits here for requests.
    work: Condvar,
    /// [`GroupCommit::commit_blocking`] waits here for progress.
    done: Condvar,
    /// [`GroupCommit::commit`] waits here for progress.
    progress: watch::Sender<Progress>,
    syncs: AtomicU64,
}

impl GroupCommit {
    /// Starts the syncer thread. `disk` makes the files durable; `None` stops at sled's flush.
    pub(crate) fn start(db: sled::Db, disk: Option<DiskSync>) -> io::Result<Self> {
        let (progress, _) = watch::channel(Progress::default());
        let shared = Arc::new(Shared {
            state: Mutex::new(State::default()),
            work: Condvar::new(),
            done: Condvar::new(),
            progress,
            syncs: AtomicU64::new(0),
        });
        let worker = shared.clone();
        let thread = std::thread::Builder::new()
            .name("strata-sync".into())
            .spawn(move || run(&worker, &db, disk))?;
        Ok(Self { shared, thread: Some(thread) })
    }

    /// Waits until everything written before this call is durable.
    ///
    /// Cancel-safe: dropping the future leaves at most one sync that nobody waits for.
    pub(crate) async fn commit(&self) -> Result<(), BackendError> {
        // Subscribe before taking the ticket, so that no update after it can be missed.
        let mut progress = self.shared.progress.subscribe();
        let ticket = self.request()?;
        loop {
            let now = *progress.borrow_and_update();
            if now.synced >= ticket {
                return Ok(());
            }
            if now.failed {
                return Err(self.shared.failure());
            }
            if progress.changed().await.is_err() {
                // Unreachable while `self` is borrowed (it owns the sender); say so anyway.
                return Err(BackendError::new("sled", "the sync thread stopped"));
            }
        }
    }

    /// [`commit`](Self::commit) for callers outside async code. Blocks the thread.
    pub(crate) fn commit_blocking(&self) -> Result<(), BackendError> {
        let ticket = self.request()?;
        let mut state = self.shared.lock();
        loop {
            if state.synced >= ticket {
                return Ok(());
            }
            if state.failed.is_some() {
                drop(state);
                return Err(self.shared.failure());
            }
            state = self.shared.done.wait(state).unwrap_or_else(PoisonError::into_inner);
        }
    }

    /// How many syncs have run.
    pub(crate) fn syncs(&self) -> u64 {
        self.shared.syncs.load(Ordering::Relaxed)
    }

    /// A handle that tells, after the syncer has stopped, whether every sync succeeded.
    pub(crate) fn health(&self) -> Health {
        Health(self.shared.clone())
    }

    /// Takes the next ticket and wakes the syncer; fails at once when the store is poisoned.
    fn request(&self) -> Result<u64, BackendError> {
        let mut state = self.shared.lock();
        if state.failed.is_some() {
            drop(state);
            return Err(self.shared.failure());
        }
        state.requested += 1;
        let ticket = state.requested;
        drop(state);
        self.shared.work.notify_one();
        Ok(ticket)
    }
}

impl Drop for GroupCommit {
    fn drop(&mut self) {
        self.shared.lock().stop = true;
        self.shared.work.notify_one();
        if let Some(thread) = self.thread.take()
            && thread.join().is_err()
        {
            tracing::error!("the sync thread of the run database panicked");
        }
    }
}

impl Health {
    /// `true` while no sync has failed and the syncer has not died.
    pub(crate) fn is_healthy(&self) -> bool {
        self.0.lock().failed.is_none()
    }
}

impl DiskSync {
    /// Opens the database file of the sled database in `db_dir` and makes what is there now
    /// durable: the database and configuration files and the directory entries up to the run
    /// directory (sled creates them without syncing).
    pub(crate) fn open(db_dir: &Path) -> io::Result<Self> {
        let db_file = File::open(db_dir.join("db"))?;
        let mut disk = Self {
            db_dir: db_dir.to_path_buf(),
            db_file,
            db_entries: BTreeSet::new(),
            blobs: BTreeSet::new(),
        };
        for entry in ["db", "conf"] {
            sync_file(&db_dir.join(entry))?;
        }
        disk.blobs = names(&db_dir.join("blobs"))?;
        for blob in &disk.blobs {
            sync_file(&db_dir.join("blobs").join(blob))?;
        }
        disk.db_entries = names(db_dir)?;
        sync_dir(&db_dir.join("blobs"))?;
        sync_dir(db_dir)?;
        if let Some(run_dir) = db_dir.parent() {
            sync_dir(run_dir)?;
        }
        Ok(disk)
    }

    /// Makes what sled has written (and flushed) durable.
    fn sync(&mut self) -> io::Result<()> {
        // Blobs: sled writes a value that is too large for its log to a file of its own, with no
        // sync at all, and the log record that points to it is only as good as the file.
        let blobs_dir = self.db_dir.join("blobs");
        let blobs = names(&blobs_dir)?;
        if blobs != self.blobs {
            for blob in blobs.difference(&self.blobs) {
                match sync_file(&blobs_dir.join(blob)) {
                    // Collected by sled since it was listed: nothing to keep.
                    Err(e) if e.kind() == io::ErrorKind::NotFound => {}
                    other => other?,
                }
            }
            sync_dir(&blobs_dir)?;
            self.blobs = blobs;
        }
        // Directory entries: snapshot files and the like, renamed into place unsynced.
        let entries = names(&self.db_dir)?;
        if entries != self.db_entries {
            sync_dir(&self.db_dir)?;
            self.db_entries = entries;
        }
        self.db_file.sync_data()
    }
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn failure(&self) -> BackendError {
        let reason = self.lock().failed.clone().unwrap_or_else(|| "sync failed".into());
        BackendError::new(
            "sled",
            format!(
                "could not make the write durable ({reason}); the run's database refuses further \
                 commits: stop the run and open it again"
            ),
        )
    }

    /// Poisons the store and wakes every waiter.
    fn fail(&self, reason: String) {
        let mut state = self.lock();
        if state.failed.is_none() {
            state.failed = Some(reason);
        }
        let synced = state.synced;
        self.progress.send_replace(Progress { synced, failed: true });
        drop(state);
        self.done.notify_all();
    }
}

/// The syncer thread.
fn run(shared: &Shared, db: &sled::Db, mut disk: Option<DiskSync>) {
    // If anything below panics (sled can), waiters must hear of it rather than wait forever.
    let guard = PanicGuard(shared);
    loop {
        let target = {
            let mut state = shared.lock();
            while state.requested == state.synced && !state.stop {
                state = shared.work.wait(state).unwrap_or_else(PoisonError::into_inner);
            }
            if state.requested == state.synced {
                break; // stopping, and nothing is pending
            }
            state.requested
        };
        let result = sync(db, disk.as_mut());
        shared.syncs.fetch_add(1, Ordering::Relaxed);
        match result {
            Ok(()) => {
                let mut state = shared.lock();
                state.synced = target;
                shared.progress.send_replace(Progress { synced: target, failed: false });
                drop(state);
                shared.done.notify_all();
            }
            Err(e) => {
                tracing::error!(error = %e, "sync of the run database failed; the store is poisoned");
                shared.fail(e);
                break;
            }
        }
    }
    std::mem::forget(guard);
}

fn sync(db: &sled::Db, disk: Option<&mut DiskSync>) -> Result<(), String> {
    db.flush().map_err(|e| format!("sled flush: {e}"))?;
    if let Some(disk) = disk {
        disk.sync().map_err(|e| format!("fdatasync: {e}"))?;
    }
    Ok(())
}

/// Poisons the store if the syncer thread unwinds.
struct PanicGuard<'a>(&'a Shared);

impl Drop for PanicGuard<'_> {
    fn drop(&mut self) {
        self.0.fail("the sync thread panicked".into());
    }
}

fn names(dir: &Path) -> io::Result<BTreeSet<OsString>> {
    match std::fs::read_dir(dir) {
        Ok(entries) => entries.map(|entry| entry.map(|e| e.file_name())).collect(),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(BTreeSet::new()),
        Err(e) => Err(e),
    }
}

fn sync_file(path: &Path) -> io::Result<()> {
    File::open(path)?.sync_data()
}

/// `fsync` of a directory, which makes the entries created, renamed or removed in it durable.
pub(crate) fn sync_dir(path: &Path) -> io::Result<()> {
    match File::open(path) {
        Ok(dir) => dir.sync_all(),
        // sled creates `blobs/` lazily in some versions; nothing to sync yet.
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(e),
    }
}
