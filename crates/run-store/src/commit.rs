//! Group commit: one thread flushes sled and calls `fdatasync`; each sync releases every writer
//! that asked before it started.
//!
//! Batches: [`GroupCommit::commit`] queues a waiter after the caller's writes are in sled. The
//! syncer takes the whole queue as its batch, flushes sled (which writes everything written so
//! far, so every write of the batch), syncs the files, and then releases the batch's waiters,
//! and only them: a waiter queued while a sync runs is in the next batch, which starts as soon
//! as the current one ends. Waking only the released waiters matters: waking a task costs the
//! syncer a few microseconds, and with 64 writers a wake-everyone scheme spent a third of each
//! sync cycle on wakes that found nothing to do.
//!
//! Tried and measured, and left out (64 writers, this 2-core VM): a second thread so that
//! sled's flush of one batch overlaps the `fdatasync` of the previous one, and lingering up to
//! half a sync for the writers the last sync released. Neither beat this simple loop; the cycle
//! is the device's two round trips (sled's `sync_file_range`, then the `fdatasync`) plus CPU.
//!
//! **Stalls.** sled 0.34 can wedge: a value too large for its log goes to a blob file of its
//! own, and when writing that file fails (a full disk) sled returns the error to the writer but
//! leaves the log buffer it had claimed unfinished, so every later flush (including the one
//! sled runs when a tree is dropped) waits forever. So the flush runs on a thread of its own
//! ("strata-flush") and the syncer waits for it in slices of [`STALL_CHECK`]; after each slice
//! it probes the data directory with a small write. A probe that fails (no space left, a
//! read-only or failing disk) ends the wait: the store is poisoned with the probe's error, and
//! the flush thread, stuck in sled, is left behind holding its handle on the database (so no
//! later drop of the database flushes and hangs either). A probe that succeeds means a slow
//! disk, not a dead one: the wait goes on. When the store closes, one last flush goes the same
//! way, so closing a store that sled wedged without a commit since does not hang.
//! The stuck flush keeps a read hold on sled's process-wide concurrency lock, which is why no
//! backend uses sled batches or transactions (the crate docs, "No batches").
//!
//! A failed sync poisons the store: the kernel may have dropped the dirty pages it could not
//! write (so a later successful `fdatasync` proves nothing about them), and sled stops accepting
//! writes after an I/O error. The failed batch, the queued waiters and every later commit fail;
//! batches synced before stay committed.

use std::collections::BTreeSet;
use std::ffi::OsString;
use std::fs::File;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, PoisonError, mpsc};
use std::thread::JoinHandle;
use std::time::Duration;

use agent_state::BackendError;
use tokio::sync::oneshot;

/// How long the syncer waits for a flush before it probes the data directory's disk.
pub(crate) const STALL_CHECK: Duration = Duration::from_millis(500);

/// How many bytes the probe writes: enough that a disk with no room for a database page
/// refuses it.
const PROBE_BYTES: usize = 64 * 1024;

/// The probe's file, in the run directory (not in the database's, which the seal lists).
const PROBE_FILE: &str = ".strata-space-probe";

/// The group-commit syncer of one database.
pub(crate) struct GroupCommit {
    shared: Arc<Shared>,
    /// The syncer; it hands back the flush thread when that one is not stuck in sled.
    thread: Option<JoinHandle<Option<JoinHandle<()>>>>,
}

/// The flush thread as the syncer sees it: where to ask for a sync and hear how it went.
struct Flusher {
    requests: mpsc::SyncSender<()>,
    replies: mpsc::Receiver<Outcome>,
    thread: JoinHandle<()>,
    /// Where the probe writes: the run directory.
    probe_dir: PathBuf,
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

/// Told of each sync by the syncer (the run's anchor keeper, [`crate::anchor`]): `before_sync`
/// just before sled's flush (what it sees then is made durable by this sync), `after_sync` once
/// the sync succeeded. Called on the syncer thread, one sync at a time: keep both cheap.
pub(crate) trait SyncHook: Send + Sync {
    /// A sync is about to flush everything written so far.
    fn before_sync(&self);
    /// That sync succeeded.
    fn after_sync(&self);
}

/// How a sync ended, for its waiters: `Err` carries the reason.
type Outcome = Result<(), String>;

/// One commit waiting for the next sync.
enum Waiter {
    Async(oneshot::Sender<Outcome>),
    Blocking(mpsc::SyncSender<Outcome>),
}

#[derive(Default)]
struct State {
    /// The waiters of the next sync.
    queued: Vec<Waiter>,
    /// Why the store is poisoned, once a sync failed or the syncer died.
    failed: Option<String>,
    /// The store is closing: the syncer serves the queued waiters and exits.
    stop: bool,
}

struct Shared {
    state: Mutex<State>,
    /// The syncer waits here for waiters.
    work: Condvar,
    syncs: AtomicU64,
}

impl GroupCommit {
    /// Starts the syncer thread. `disk` makes the files durable; `None` stops at sled's flush.
    /// `hook` is told of each sync. `probe_dir` is where a stalled flush's probe writes (the
    /// run directory).
    pub(crate) fn start(
        db: sled::Db,
        disk: Option<DiskSync>,
        hook: Option<Arc<dyn SyncHook>>,
        probe_dir: &Path,
    ) -> io::Result<Self> {
        let shared = Arc::new(Shared {
            state: Mutex::new(State::default()),
            work: Condvar::new(),
            syncs: AtomicU64::new(0),
        });
        let (requests, asked) = mpsc::sync_channel(1);
        let (answer, replies) = mpsc::sync_channel(1);
        let flush = std::thread::Builder::new()
            .name("strata-flush".into())
            .spawn(move || flush_loop(&db, disk, &asked, &answer))?;
        let flusher = Flusher { requests, replies, thread: flush, probe_dir: probe_dir.to_owned() };
        let worker = shared.clone();
        let thread = std::thread::Builder::new()
            .name("strata-sync".into())
            .spawn(move || run(&worker, flusher, hook.as_deref()))?;
        Ok(Self { shared, thread: Some(thread) })
    }

    /// Waits until everything written before this call is durable.
    ///
    /// Cancel-safe: dropping the future leaves at most one sync that nobody waits for.
    pub(crate) async fn commit(&self) -> Result<(), BackendError> {
        let (sender, receiver) = oneshot::channel();
        self.queue(Waiter::Async(sender))?;
        outcome(receiver.await.ok())
    }

    /// [`commit`](Self::commit) for callers outside async code. Blocks the thread.
    pub(crate) fn commit_blocking(&self) -> Result<(), BackendError> {
        let (sender, receiver) = mpsc::sync_channel(1);
        self.queue(Waiter::Blocking(sender))?;
        outcome(receiver.recv().ok())
    }

    /// How many syncs have run.
    pub(crate) fn syncs(&self) -> u64 {
        self.shared.syncs.load(Ordering::Relaxed)
    }

    /// A handle that tells, after the syncer has stopped, whether every sync succeeded.
    pub(crate) fn health(&self) -> Health {
        Health(self.shared.clone())
    }

    /// Queues `waiter` for the next sync and wakes the syncer; fails at once when the store is
    /// poisoned.
    fn queue(&self, waiter: Waiter) -> Result<(), BackendError> {
        let mut state = self.shared.lock();
        if let Some(reason) = &state.failed {
            return Err(failure(reason));
        }
        state.queued.push(waiter);
        drop(state);
        self.shared.work.notify_one();
        Ok(())
    }
}

impl Drop for GroupCommit {
    fn drop(&mut self) {
        self.shared.lock().stop = true;
        self.shared.work.notify_one();
        if let Some(thread) = self.thread.take() {
            match thread.join() {
                // The flush thread ends once the syncer has dropped its side of the channel.
                Ok(Some(flush)) => {
                    if flush.join().is_err() {
                        tracing::error!("the flush thread of the run database panicked");
                    }
                }
                Ok(None) => {}
                Err(_) => tracing::error!("the sync thread of the run database panicked"),
            }
        }
    }
}

impl Health {
    /// `true` while no sync has failed and the syncer has not died.
    pub(crate) fn is_healthy(&self) -> bool {
        self.0.lock().failed.is_none()
    }

    /// Why the store accepts no more writes, once a sync failed or the syncer died.
    pub(crate) fn failure(&self) -> Option<String> {
        self.0.lock().failed.clone()
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

    /// Poisons the store and fails every queued waiter.
    fn fail(&self, reason: &str) {
        let queued = {
            let mut state = self.lock();
            if state.failed.is_none() {
                state.failed = Some(reason.to_owned());
            }
            std::mem::take(&mut state.queued)
        };
        release(queued, &Err(reason.to_owned()));
    }
}

impl Waiter {
    fn release(self, outcome: &Outcome) {
        // A waiter that went away (a cancelled commit) has nobody to tell.
        match self {
            Self::Async(sender) => drop(sender.send(outcome.clone())),
            Self::Blocking(sender) => drop(sender.send(outcome.clone())),
        }
    }
}

/// The syncer thread. Returns the flush thread when it is not stuck in sled.
fn run(shared: &Shared, flusher: Flusher, hook: Option<&dyn SyncHook>) -> Option<JoinHandle<()>> {
    // If anything below panics (sled can), waiters must hear of it rather than wait forever:
    // the batch in hand is dropped (its waiters see the syncer gone), the queue is failed.
    let _guard = PanicGuard(shared);
    loop {
        let batch = {
            let mut state = shared.lock();
            while state.queued.is_empty() && !state.stop {
                state = shared.work.wait(state).unwrap_or_else(PoisonError::into_inner);
            }
            if state.queued.is_empty() {
                break; // stopping, and nothing is queued
            }
            std::mem::take(&mut state.queued)
        };
        if let Some(hook) = hook {
            hook.before_sync();
        }
        let outcome = flusher.sync();
        shared.syncs.fetch_add(1, Ordering::Relaxed);
        if let (Some(hook), Ok(())) = (hook, &outcome) {
            hook.after_sync();
        }
        if let Err(reason) = &outcome {
            tracing::error!(error = %reason, "sync of the run database failed; the store is poisoned");
            shared.fail(reason);
        }
        release(batch, &outcome);
        if outcome.is_err() {
            return None;
        }
    }
    // Closing: one last flush, bounded like the others, so that sled's own flush when the
    // database is dropped has nothing left to wait for (or never runs: see the module docs).
    if shared.lock().failed.is_some() {
        return None;
    }
    if let Some(hook) = hook {
        hook.before_sync();
    }
    if let Err(reason) = flusher.sync() {
        tracing::error!(error = %reason, "the last sync of the run database failed");
        shared.fail(&reason);
        return None;
    }
    if let Some(hook) = hook {
        hook.after_sync();
    }
    let Flusher { requests, thread, .. } = flusher;
    drop(requests);
    Some(thread)
}

/// The flush thread: a sync for each request, until the syncer lets go.
fn flush_loop(
    db: &sled::Db,
    mut disk: Option<DiskSync>,
    requests: &mpsc::Receiver<()>,
    replies: &mpsc::SyncSender<Outcome>,
) {
    while requests.recv().is_ok() {
        let outcome = match std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            sync(db, disk.as_mut())
        })) {
            Ok(outcome) => outcome,
            Err(_) => Err("the flush of the database panicked".to_owned()),
        };
        if replies.send(outcome).is_err() {
            return;
        }
    }
}

impl Flusher {
    /// Has the flush thread sync, and waits for it; a flush that stalls while the data
    /// directory cannot be written fails with the reason (see the module docs).
    fn sync(&self) -> Outcome {
        if self.requests.send(()).is_err() {
            return Err("the flush thread stopped".to_owned());
        }
        loop {
            match self.replies.recv_timeout(STALL_CHECK) {
                Ok(outcome) => return outcome,
                Err(mpsc::RecvTimeoutError::Disconnected) => {
                    return Err("the flush thread stopped".to_owned());
                }
                Err(mpsc::RecvTimeoutError::Timeout) => {
                    if let Err(e) = probe(&self.probe_dir) {
                        return Err(format!(
                            "{} while writing the run's database (it stopped writing)",
                            disk_error(&e)
                        ));
                    }
                    tracing::warn!(
                        "a sync of the run database is slow; the disk takes writes, so it goes on"
                    );
                }
            }
        }
    }
}

/// Writes and removes a small file in `dir`: whether the disk takes writes.
fn probe(dir: &Path) -> io::Result<()> {
    use std::io::Write as _;
    let path = dir.join(PROBE_FILE);
    let written = File::create(&path).and_then(|mut file| {
        file.write_all(&[0u8; PROBE_BYTES])?;
        file.sync_data()
    });
    let _ = std::fs::remove_file(&path);
    written
}

/// What a write error of the data directory means, in words: a full disk is named as such.
pub(crate) fn disk_error(e: &io::Error) -> String {
    if e.kind() == io::ErrorKind::StorageFull || e.raw_os_error() == Some(28) {
        "the data directory's disk is full (No space left on device)".to_owned()
    } else {
        format!("the data directory cannot be written ({e})")
    }
}

fn release(waiters: Vec<Waiter>, outcome: &Outcome) {
    for waiter in waiters {
        waiter.release(outcome);
    }
}

/// A commit's result from what its waiter received (`None`: the syncer went away first).
fn outcome(received: Option<Outcome>) -> Result<(), BackendError> {
    match received {
        Some(Ok(())) => Ok(()),
        Some(Err(reason)) => Err(failure(&reason)),
        None => Err(failure("the sync thread stopped")),
    }
}

fn failure(reason: &str) -> BackendError {
    BackendError::with_source(
        "sled",
        format!(
            "could not make the write durable ({reason}); the run's database refuses further \
             commits: stop the run and open it again"
        ),
        StoreFailed { reason: reason.to_owned() },
    )
}

/// The source of every error a poisoned store answers with: trying again cannot help (see
/// the module docs), so a caller that retries storage errors stops at this one.
#[derive(Debug, thiserror::Error)]
#[error("the run's store refuses writes: {reason}")]
pub struct StoreFailed {
    /// Why: the failed sync's reason.
    pub reason: String,
}

impl StoreFailed {
    /// Whether `error` (a storage error) comes from a store that takes no more writes: a
    /// poisoned store, or sled after an I/O error (sled 0.34 keeps its first I/O error and
    /// answers every later operation with it).
    pub fn is_cause_of(error: &BackendError) -> bool {
        error.source.as_deref().is_some_and(|source| {
            source.is::<StoreFailed>()
                || source
                    .downcast_ref::<sled::Error>()
                    .is_some_and(|e| matches!(e, sled::Error::Io(_)))
        })
    }
}

fn sync(db: &sled::Db, disk: Option<&mut DiskSync>) -> Outcome {
    db.flush().map_err(|e| match e {
        sled::Error::Io(e) => format!("{} while writing the run's database", disk_error(&e)),
        e => format!("sled flush: {e}"),
    })?;
    if let Some(disk) = disk {
        disk.sync().map_err(|e| format!("{} while syncing the run's database", disk_error(&e)))?;
    }
    Ok(())
}

/// Poisons the store if the syncer thread unwinds.
struct PanicGuard<'a>(&'a Shared);

impl Drop for PanicGuard<'_> {
    fn drop(&mut self) {
        if std::thread::panicking() {
            self.0.fail("the sync thread panicked");
        }
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
