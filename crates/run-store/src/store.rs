//! Opening and creating run directories, and the errors that say what is wrong with one.

use std::collections::BTreeSet;
use std::fs::{self, File};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, PoisonError};

use agent_state::{BackendError, RunId, RunIdError, Timestamp};
use serde::{Deserialize, Serialize};
use thiserror::Error;

use crate::anchor::{self, AnchorKeeper};
use crate::commit::{DiskSync, GroupCommit, Health, sync_dir};
use crate::seal::{self, Anchors, Found};

/// The marker file that makes a directory a Strata run.
pub const RUN_MARKER: &str = "strata-run.json";
/// The marker's `format` field.
pub const RUN_FORMAT: &str = "strata-run";
/// The schema version this build writes and reads.
pub const SCHEMA_VERSION: u32 = 1;
/// The sled database inside a run directory.
pub const DB_DIR: &str = "db";

/// The content of `strata-run.json`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct RunMarker {
    /// Always [`RUN_FORMAT`].
    pub format: String,
    /// The schema version the run was written with.
    pub schema_version: u32,
    /// The run's id.
    pub run_id: RunId,
    /// When it was created.
    pub created_at: Timestamp,
    /// The run keeps anchor files (see the crate docs), as every run created by this version
    /// does: one with neither seal nor anchor file lost them. `false` for a run created before
    /// anchor files existed.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub anchored: bool,
}

/// How hard [`RunStore::commit`] works.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Durability {
    /// sled flush, then `fdatasync`: a commit survives a process crash and a power loss.
    #[default]
    Synced,
    /// sled flush only: a commit survives a process crash but maybe not a power loss. Opt-in,
    /// logged as a warning when a store opens with it.
    NoSync,
}

/// A run directory that cannot be opened or created. Each message says what to do.
#[derive(Debug, Error)]
pub enum StoreError {
    /// No such directory.
    #[error("run directory {} does not exist; check the path or start a new run", .dir.display())]
    NotFound {
        /// The directory.
        dir: PathBuf,
    },
    /// The directory is not a Strata run.
    #[error(
        "{} is not a Strata run (no {RUN_MARKER} of format {RUN_FORMAT}); point at a run directory, or use an empty or new directory for a new run",
        .dir.display()
    )]
    NotARun {
        /// The directory.
        dir: PathBuf,
    },
    /// Creating a run where one (or other data) already exists.
    #[error("{} already exists and is not an empty directory; resume the run in it, or choose a new directory", .dir.display())]
    AlreadyExists {
        /// The directory.
        dir: PathBuf,
    },
    /// Written by another schema version.
    #[error(
        "run {} was written with schema version {found}, this build reads version {supported}; open it with a matching version of Strata",
        .dir.display()
    )]
    IncompatibleSchema {
        /// The directory.
        dir: PathBuf,
        /// The version it has.
        found: u32,
        /// The version this build reads.
        supported: u32,
    },
    /// Another process, or another open store in this process, has the database open.
    #[error(
        "run {} is in use (another process, or another open store in this process, holds its database lock); wait for it to finish or stop it first",
        .dir.display()
    )]
    Locked {
        /// The directory.
        dir: PathBuf,
    },
    /// The marker, the seal or the database is damaged. Nothing was changed.
    #[error(
        "run {} is damaged ({what}): {detail}; it was not opened: restore the run directory from a copy",
        .dir.display()
    )]
    Corrupted {
        /// The directory.
        dir: PathBuf,
        /// Which part: `marker`, `seal` or `database`.
        what: &'static str,
        /// What was found.
        detail: String,
    },
    /// A run that a live process is writing, whose copy (taken by
    /// [`RunStore::open_read_only`]) cannot be opened: files changed while they were copied.
    #[error(
        "run {} is being written by a live process and the copy taken to read it cannot be opened ({detail}); try again in a moment, or once the run has finished",
        .dir.display()
    )]
    CopyUnreadable {
        /// The directory.
        dir: PathBuf,
        /// What sled said about the copy.
        detail: String,
    },
    /// The run id breaks the one run id rule ([`agent_state::RUN_ID_RULE`]); nothing was
    /// created.
    #[error("cannot create a run in {}: {source}", .dir.display())]
    BadRunId {
        /// The directory.
        dir: PathBuf,
        /// Why the id is refused.
        #[source]
        source: RunIdError,
    },
    /// A run whose id breaks today's run id rule: started by a Strata from before run ids had
    /// one rule (it allowed `.` and `_`). Nothing was opened.
    #[error(
        "run {} has an id this version of Strata does not accept ({source}); it was started by an older Strata and cannot be opened: start its task again as a new run",
        .dir.display()
    )]
    OldRunId {
        /// The directory.
        dir: PathBuf,
        /// Why the id is refused.
        #[source]
        source: RunIdError,
    },
    /// The file system refused.
    #[error("cannot {action} {}: {source}", .path.display())]
    Io {
        /// What was being done.
        action: &'static str,
        /// Where.
        path: PathBuf,
        /// The error.
        #[source]
        source: std::io::Error,
    },
}

/// An open run directory. Cheap to clone.
///
/// The database closes, and its lock is released, when the last clone and the last
/// [`tree`](Self::tree) handed out are dropped. If the trees are gone when the last clone drops,
/// the run is also sealed as closed cleanly (see the crate docs); a tree that outlives every
/// clone leaves the run unsealed, and the next [`open`](Self::open) then treats it like a run
/// that crashed.
#[derive(Clone)]
pub struct RunStore {
    inner: Arc<Inner>,
}

/// Fields drop in declaration order: the syncer stops (and joins) first, then sled closes, then
/// the seal is written (or the private copy removed), which needs sled closed.
struct Inner {
    dir: PathBuf,
    marker: RunMarker,
    durability: Durability,
    /// What the seal this store was opened from said: its anchors, or `None` if the run was not
    /// sealed (new, crashed, or being written by a live process).
    sealed: Option<Anchors>,
    /// The anchors the next seal will hold.
    anchors: Arc<Mutex<Anchors>>,
    /// The anchors the run held when this store opened it: the seal's, or else the newest
    /// anchor file's (lower bounds). Empty for a new run and a read-only copy.
    kept: Mutex<Anchors>,
    /// The anchors that are only lower bounds (taken from an anchor file when the run was
    /// opened unsealed) and that no backend has set since: see [`SealOnClose`].
    unconfirmed: Arc<Mutex<BTreeSet<String>>>,
    committer: GroupCommit,
    /// Writes the anchor files after each sync (none for a read-only copy). Declared after the
    /// syncer, which tells it of the last sync, and before the seal.
    keeper: Option<AnchorKeeper>,
    db: sled::Db,
    _close: OnClose,
}

/// What closing does: seal the run, or, for a read-only store, remove its private copy. The
/// work is done by the fields' `Drop`.
enum OnClose {
    Seal(#[allow(dead_code, reason = "held for its Drop")] SealOnClose),
    RemoveCopy(#[allow(dead_code, reason = "held for its Drop")] RemoveCopyOnClose),
}

/// Removes a read-only store's private copy of the database once sled has let go of it.
struct RemoveCopyOnClose {
    copy: Option<tempfile::TempDir>,
}

impl Drop for RemoveCopyOnClose {
    fn drop(&mut self) {
        let Some(copy) = self.copy.take() else { return };
        // Wait (briefly) for sled's background threads to let go of the copy before removing it.
        if let Ok(file) = File::open(copy.path().join(DB_DIR).join("db")) {
            let _ = seal::lock_within(&file, seal::CLOSE_PATIENCE);
        }
        crate::readcopy::forget(copy.path());
        if let Err(e) = copy.close() {
            tracing::warn!(error = %e, "could not remove the temporary copy of a run");
        }
    }
}

/// Seals the run when dropped, if every sync succeeded and sled has closed the database, then
/// releases the run's lock.
///
/// A run opened unsealed takes its anchors from its anchor files, which are lower bounds: the
/// database may hold more (records synced after the file's last write, before a crash). Such
/// an anchor is exact again only once its backend sets it (the audit log does when it opens).
/// A store closed while one is still unconfirmed (a `resume` of a finished run opens no audit
/// log) is left unsealed: a seal holding a lower bound as the exact end would make `verify`
/// call the records after it added after the close.
struct SealOnClose {
    dir: PathBuf,
    health: Health,
    anchors: Arc<Mutex<Anchors>>,
    unconfirmed: Arc<Mutex<BTreeSet<String>>>,
    /// The run's own lock: an exclusive flock on the marker, held while the store is open.
    /// Unlike sled's lock on `db/db`, which sled's background threads can hold a little after its
    /// last handle drops, it is released exactly when the store has closed.
    _run_lock: File,
}

/// A run's database as opened: the database, the disk it syncs (none without durability) and
/// the lock held on the run.
struct OpenedDb {
    db: sled::Db,
    disk: Option<DiskSync>,
    run_lock: File,
}

/// Where a run's streams ended, as known when its store starts.
struct KnownEnds {
    /// The seal's anchors, exact, if the run was sealed.
    sealed: Option<Anchors>,
    /// The newest anchor file's anchors and generation (empty and 0 if none): lower bounds.
    files: (Anchors, u64),
}

impl RunStore {
    /// Creates a new run in `dir`, which must not exist or must be an empty directory.
    ///
    /// The marker is written last, once the database files are on disk: a directory with a
    /// marker has a database.
    pub fn create(
        dir: &Path,
        run_id: &str,
        created_at: Timestamp,
        durability: Durability,
    ) -> Result<Self, StoreError> {
        let run_id = RunId::parse(run_id)
            .map_err(|source| StoreError::BadRunId { dir: dir.to_path_buf(), source })?;
        if dir.exists() {
            let empty =
                dir.is_dir() && fs::read_dir(dir).map_err(io_error("read", dir))?.next().is_none();
            if !empty {
                return Err(StoreError::AlreadyExists { dir: dir.to_path_buf() });
            }
        }
        fs::create_dir_all(dir).map_err(io_error("create", dir))?;
        let marker = RunMarker {
            format: RUN_FORMAT.to_owned(),
            schema_version: SCHEMA_VERSION,
            run_id,
            created_at,
            anchored: true,
        };
        let bytes = serde_json::to_vec_pretty(&marker).map_err(|e| StoreError::Corrupted {
            dir: dir.to_path_buf(),
            what: "marker",
            detail: e.to_string(),
        })?;
        let db = open_db(dir)?;
        // The database files and their directory entries are made durable (in both modes:
        // once, it is cheap) before the marker is written, atomically, then locked.
        let disk =
            DiskSync::open(&dir.join(DB_DIR)).map_err(io_error("sync the database of", dir))?;
        let disk = match durability {
            Durability::Synced => Some(disk),
            Durability::NoSync => {
                warn_no_sync(dir);
                None
            }
        };
        let marker_path = dir.join(RUN_MARKER);
        let tmp = dir.join(format!("{RUN_MARKER}.tmp"));
        let mut file = File::create(&tmp).map_err(io_error("create", &tmp))?;
        file.write_all(&bytes).map_err(io_error("write", &tmp))?;
        file.sync_all().map_err(io_error("sync", &tmp))?;
        fs::rename(&tmp, &marker_path).map_err(io_error("rename", &marker_path))?;
        sync_dir(dir).map_err(io_error("sync", dir))?;
        let run_lock = lock_run(dir)?;
        let opened = OpenedDb { db, disk, run_lock };
        let ends = KnownEnds { sealed: None, files: (Anchors::new(), 0) };
        let store = Self::start(dir, marker, durability, opened, ends)?;
        if let Some(keeper) = &store.inner.keeper {
            keeper.write_now().map_err(io_error("write the anchor file of", dir))?;
        }
        Ok(store)
    }

    /// Opens an existing run.
    ///
    /// Refuses, and changes nothing in `dir`, when it is not a run, is a run of another schema
    /// version, has a database locked by a live process, has no database, or was sealed when it
    /// last closed and its database no longer matches the seal. A run without a seal (it did
    /// not close cleanly) is copied to `db.before-recovery/` in the run directory, replacing an
    /// older copy, before sled recovers it; a warning says so.
    pub fn open(dir: &Path, durability: Durability) -> Result<Self, StoreError> {
        let marker = read_marker(dir)?;
        let run_lock = lock_run(dir)?;
        let db_dir = dir.join(DB_DIR);
        if !db_dir.join("db").is_file() {
            return Err(StoreError::Corrupted {
                dir: dir.to_path_buf(),
                what: "database",
                detail: format!("{DB_DIR}/db is missing"),
            });
        }
        // Hold the database's lock too while checking it, so that nothing writes meanwhile; it
        // is released just before sled takes it.
        let probe = lock_database(dir, &db_dir)?;
        let found = seal::check(dir, &db_dir)?;
        let sealed = match &found {
            Found::Sealed(bytes) => {
                let anchors = seal::anchors_of(dir, bytes)?;
                seal::unseal(dir).map_err(io_error("remove the seal of", dir))?;
                Some(anchors)
            }
            Found::Unsealed => {
                let backup = seal::back_up(dir, &db_dir)
                    .map_err(io_error("back up the database of", dir))?;
                tracing::warn!(
                    run = %dir.display(),
                    backup = %backup.display(),
                    "the run was not closed cleanly: sled recovers it and drops a torn tail of \
                     writes that were never committed; the database as it was is kept in the backup"
                );
                None
            }
        };
        drop(probe);
        let kept = anchor::newest(dir, None, &marker.run_id).unwrap_or_default();
        match open_db(dir).and_then(|db| Ok((db, disk_sync(dir, durability)?))) {
            Ok((db, disk)) => {
                let opened = OpenedDb { db, disk, run_lock };
                Self::start(dir, marker, durability, opened, KnownEnds { sealed, files: kept })
            }
            Err(e) => {
                if let Found::Sealed(bytes) = &found
                    && let Err(restore) = seal::restore(dir, bytes)
                {
                    tracing::error!(run = %dir.display(), error = %restore, "could not put the seal back");
                }
                Err(e)
            }
        }
    }

    /// Opens a private copy of a run's database, to read it without changing anything in `dir`.
    ///
    /// The run's `db/` is copied to a temporary directory (removed when the store closes) and
    /// the copy is opened; the original is never opened by sled, locked, backed up or unsealed,
    /// so this works on a read-only run directory and on a run that a live process is writing
    /// (the copy is then the run as it was while it was copied, as after a crash: sled drops a
    /// torn tail). A sealed run's copy is checked against the seal first, like
    /// [`open`](Self::open). Writes to the store's trees change only the copy, and
    /// [`commit`](Self::commit) makes nothing durable. Refuses what [`open`](Self::open) refuses,
    /// except a run in use; a copy of a live run that sled cannot open is
    /// [`StoreError::CopyUnreadable`].
    pub fn open_read_only(dir: &Path) -> Result<Self, StoreError> {
        /// A live process can replace a file while it is listed and copied: try again.
        const ATTEMPTS: u32 = 5;
        let marker = read_marker(dir)?;
        let db_dir = dir.join(DB_DIR);
        if !db_dir.join("db").is_file() {
            return Err(StoreError::Corrupted {
                dir: dir.to_path_buf(),
                what: "database",
                detail: format!("{DB_DIR}/db is missing"),
            });
        }
        let mut attempt = 0;
        let (copy, sealed) = loop {
            attempt += 1;
            let copy = crate::readcopy::create()
                .map_err(io_error("create a temporary directory to copy", dir))?;
            let copy_db = copy.path().join(DB_DIR);
            let before = seal::read(dir)?;
            match seal::copy_db(&db_dir, &copy_db) {
                Ok(()) => {}
                Err(e) if e.kind() == std::io::ErrorKind::NotFound && attempt < ATTEMPTS => {
                    continue;
                }
                Err(source) => {
                    return Err(StoreError::Io {
                        action: "copy the database of",
                        path: db_dir,
                        source,
                    });
                }
            }
            // A seal that is the same before and after the copy was there all along: nothing
            // wrote the database meanwhile, so the copy must match it.
            let sealed = match (before, seal::read(dir)?) {
                (Some(before), Some(after)) if before == after => {
                    Some(seal::check_bytes(dir, &before, &copy_db)?)
                }
                _ => None,
            };
            break (copy, sealed);
        };
        let db = match open_db(copy.path()) {
            Ok(db) => db,
            Err(StoreError::Corrupted { detail, .. })
                if sealed.is_none() && Self::is_in_use(dir)? =>
            {
                return Err(StoreError::CopyUnreadable { dir: dir.to_path_buf(), detail });
            }
            Err(StoreError::Corrupted { what, detail, .. }) => {
                return Err(StoreError::Corrupted { dir: dir.to_path_buf(), what, detail });
            }
            Err(StoreError::Io { action, source, .. }) => {
                return Err(StoreError::Io { action, path: dir.to_path_buf(), source });
            }
            Err(e) => return Err(e),
        };
        let committer = GroupCommit::start(db.clone(), None, None, copy.path())
            .map_err(io_error("start the sync thread for", dir))?;
        tracing::debug!(run = %dir.display(), copy = %copy.path().display(), "run opened read-only, on a copy");
        Ok(Self {
            inner: Arc::new(Inner {
                dir: dir.to_path_buf(),
                marker,
                durability: Durability::NoSync,
                anchors: Arc::new(Mutex::new(sealed.clone().unwrap_or_default())),
                kept: Mutex::new(Anchors::new()),
                unconfirmed: Arc::default(),
                sealed,
                committer,
                keeper: None,
                db,
                _close: OnClose::RemoveCopy(RemoveCopyOnClose { copy: Some(copy) }),
            }),
        })
    }

    /// Whether this store reads a private copy ([`open_read_only`](Self::open_read_only)).
    pub fn is_read_only(&self) -> bool {
        matches!(self.inner._close, OnClose::RemoveCopy(_))
    }

    /// Whether the run was sealed (closed cleanly, and unchanged since) when this store opened it.
    pub fn was_sealed(&self) -> bool {
        self.inner.sealed.is_some()
    }

    /// The anchor `name` that the run's seal held when this store opened it (see
    /// [`set_anchor`](Self::set_anchor)); `None` if the run was not sealed or the seal has no
    /// such anchor.
    pub fn sealed_anchor(&self, name: &str) -> Option<serde_json::Value> {
        self.inner.sealed.as_ref().and_then(|anchors| anchors.get(name).cloned())
    }

    /// Keeps `value` under `name` in the seal written when the store closes cleanly: a value a
    /// backend wants kept outside its own trees, such as the audit log's last hash, so that a
    /// changed database disagrees with its seal even if it agrees with itself. The last value
    /// set wins; the anchors of the seal a run was opened from are kept unless replaced.
    pub fn set_anchor(&self, name: &str, value: serde_json::Value) {
        self.inner
            .anchors
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .insert(name.to_owned(), value);
        self.inner.unconfirmed.lock().unwrap_or_else(PoisonError::into_inner).remove(name);
    }

    /// The anchor `name` the run held when this store opened it: the seal's if the run was
    /// sealed, else the newest anchor file's (a lower bound: the database held at least that
    /// when the file was written; see the crate docs). `None` for a new run, a read-only copy
    /// (a reader reads the anchor files itself: [`AnchorFile::read`](crate::AnchorFile::read)),
    /// and a run without anchors. A backend compares its data with it before it writes, so that
    /// a damaged run is not extended (and its anchors moved) as if it were whole.
    pub fn kept_anchor(&self, name: &str) -> Option<serde_json::Value> {
        self.inner.kept.lock().unwrap_or_else(PoisonError::into_inner).get(name).cloned()
    }

    /// Keeps a second copy of the run's anchor file in `index_dir` (created if missing), as
    /// `<run id>.anchor`, written with every later write of the run's copy, and written now.
    /// Call it right after opening, before backends open: if the run is not sealed and the copy
    /// there is newer than the run's own (which was deleted or is behind), its anchors become
    /// [`kept_anchor`](Self::kept_anchor) and the anchors that no backend has set since.
    pub fn keep_anchor_copy_in(&self, index_dir: &Path) -> Result<(), StoreError> {
        let Some(keeper) = &self.inner.keeper else { return Ok(()) };
        let run_id = &self.inner.marker.run_id;
        if self.inner.sealed.is_none()
            && let Some((found, generation)) =
                anchor::newest(&self.inner.dir, Some(index_dir), run_id)
        {
            let mut kept = self.inner.kept.lock().unwrap_or_else(PoisonError::into_inner);
            if *kept != found {
                let mut live = self.inner.anchors.lock().unwrap_or_else(PoisonError::into_inner);
                let mut unconfirmed =
                    self.inner.unconfirmed.lock().unwrap_or_else(PoisonError::into_inner);
                for (name, value) in &found {
                    if live.get(name) == kept.get(name) {
                        live.insert(name.clone(), value.clone());
                        unconfirmed.insert(name.clone());
                    }
                }
                keeper.adopt(live.clone(), generation);
                *kept = found;
            }
        }
        // Both copies hold the newest anchors from now on, whichever was missing or behind.
        keeper.write_now().map_err(io_error("write the anchor file of", &self.inner.dir))?;
        keeper.keep_copy_in(index_dir).map_err(io_error("write the anchor file copy in", index_dir))
    }

    /// Has the anchor files written with the store's anchors as they are now, without waiting
    /// for a sync (the thread that writes them does it soon, coalescing calls): for a backend
    /// whose anchored data is durable somewhere else than this store, such as an audit log on a
    /// NATS server, once the server acknowledged it. Every anchor set so far must be durable.
    pub fn anchors_durable(&self) {
        if let Some(keeper) = &self.inner.keeper {
            keeper.publish();
        }
    }

    /// How many times the anchor files have been written since the store opened.
    pub fn anchor_writes(&self) -> u64 {
        self.inner.keeper.as_ref().map_or(0, AnchorKeeper::writes)
    }

    /// Reads a run's marker without opening its database (for listings).
    pub fn peek(dir: &Path) -> Result<RunMarker, StoreError> {
        read_marker(dir)
    }

    /// Whether a live store (in this process or another) has the run open, without opening its
    /// database: listing runs must not start a crash recovery on a killed run.
    pub fn is_in_use(dir: &Path) -> Result<bool, StoreError> {
        read_marker(dir)?;
        let path = dir.join(RUN_MARKER);
        let file = File::open(&path).map_err(io_error("open", &path))?;
        match file.try_lock() {
            Ok(()) => {
                let _ = file.unlock();
                Ok(false)
            }
            Err(fs::TryLockError::WouldBlock) => Ok(true),
            Err(fs::TryLockError::Error(source)) => {
                Err(StoreError::Io { action: "lock", path, source })
            }
        }
    }

    /// Starts the store of the run in `dir` on its opened database, from the ends known.
    fn start(
        dir: &Path,
        marker: RunMarker,
        durability: Durability,
        opened: OpenedDb,
        ends: KnownEnds,
    ) -> Result<Self, StoreError> {
        let OpenedDb { db, disk, run_lock } = opened;
        let KnownEnds { sealed, files } = ends;
        // A seal holds the exact end; without one, the newest anchor file a lower bound.
        let kept = sealed.clone().unwrap_or(files.0);
        let anchors = Arc::new(Mutex::new(kept.clone()));
        // A seal's anchors are exact; an anchor file's are lower bounds until set again.
        let unconfirmed = Arc::new(Mutex::new(if sealed.is_some() {
            BTreeSet::new()
        } else {
            kept.keys().cloned().collect()
        }));
        let keeper = AnchorKeeper::start(
            dir,
            &marker.run_id,
            anchors.clone(),
            kept.clone(),
            files.1,
            durability == Durability::Synced,
        )
        .map_err(io_error("start the anchor thread for", dir))?;
        let committer = GroupCommit::start(db.clone(), disk, Some(keeper.hook()), dir)
            .map_err(io_error("start the sync thread for", dir))?;
        let seal = SealOnClose {
            dir: dir.to_path_buf(),
            health: committer.health(),
            anchors: anchors.clone(),
            unconfirmed: unconfirmed.clone(),
            _run_lock: run_lock,
        };
        tracing::info!(run = %dir.display(), run_id = %marker.run_id, ?durability, "run store open");
        Ok(Self {
            inner: Arc::new(Inner {
                dir: dir.to_path_buf(),
                marker,
                durability,
                sealed,
                anchors,
                kept: Mutex::new(kept),
                unconfirmed,
                committer,
                keeper: Some(keeper),
                db,
                _close: OnClose::Seal(seal),
            }),
        })
    }

    /// The run directory.
    pub fn dir(&self) -> &Path {
        &self.inner.dir
    }

    /// The run's marker.
    pub fn marker(&self) -> &RunMarker {
        &self.inner.marker
    }

    /// The durability mode.
    pub fn durability(&self) -> Durability {
        self.inner.durability
    }

    /// A named tree of the run's database. What is written to it is durable once a later
    /// [`commit`](Self::commit) returns `Ok`. Drop the trees before the last clone of the store,
    /// so that the store can seal the run when it closes.
    pub fn tree(&self, name: &str) -> Result<sled::Tree, BackendError> {
        self.inner
            .db
            .open_tree(name)
            .map_err(|e| BackendError::with_source("sled", format!("cannot open tree `{name}`"), e))
    }

    /// Waits until everything written to this store before the call is durable (see the crate
    /// docs). Concurrent callers share one sync. After a failed sync, this and every later
    /// commit fail: the run must be closed and opened again.
    pub async fn commit(&self) -> Result<(), BackendError> {
        self.inner.committer.commit().await
    }

    /// [`commit`](Self::commit) for code outside an async runtime. Blocks the calling thread:
    /// do not call it on an async runtime's worker.
    pub fn commit_blocking(&self) -> Result<(), BackendError> {
        self.inner.committer.commit_blocking()
    }

    /// Why the store accepts no more writes, once a sync failed (a full disk, an I/O error, a
    /// file system remounted read-only) or the syncer died: every later storing call fails with
    /// it. What was committed before stays readable. `None` while the store is healthy. Cheap:
    /// a runtime can poll it to end a run promptly instead of retrying into a dead store.
    pub fn failure(&self) -> Option<String> {
        self.inner.committer.health().failure()
    }

    /// How many syncs have run since the store opened (each may cover many commits).
    pub fn syncs(&self) -> u64 {
        self.inner.committer.syncs()
    }
}

impl std::fmt::Debug for RunStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RunStore")
            .field("dir", &self.inner.dir)
            .field("run_id", &self.inner.marker.run_id)
            .field("durability", &self.inner.durability)
            .finish_non_exhaustive()
    }
}

impl Drop for SealOnClose {
    fn drop(&mut self) {
        let dir = &self.dir;
        if !self.health.is_healthy() {
            tracing::warn!(run = %dir.display(), "a sync failed: the run is left unsealed");
            return;
        }
        let unconfirmed = self.unconfirmed.lock().unwrap_or_else(PoisonError::into_inner).clone();
        if !unconfirmed.is_empty() {
            tracing::info!(
                run = %dir.display(),
                anchors = ?unconfirmed,
                "the run was opened unsealed and no backend confirmed these anchors (their anchor \
                 files hold lower bounds): it is left unsealed, and recovered when it next opens"
            );
            return;
        }
        let anchors = self.anchors.lock().unwrap_or_else(PoisonError::into_inner).clone();
        match seal::seal_if_closed(dir, &dir.join(DB_DIR), seal::CLOSE_PATIENCE, &anchors) {
            Ok(true) => tracing::debug!(run = %dir.display(), "run closed and sealed"),
            Ok(false) => tracing::info!(
                run = %dir.display(),
                "a tree of the run outlived the store: the run is left unsealed and is recovered \
                 when it next opens"
            ),
            Err(e) => tracing::warn!(
                run = %dir.display(),
                error = %e,
                "could not seal the run: it is recovered when it next opens"
            ),
        }
    }
}

/// What a sync makes durable beyond sled's flush: the files, for `Synced`; nothing for `NoSync`.
fn disk_sync(dir: &Path, durability: Durability) -> Result<Option<DiskSync>, StoreError> {
    match durability {
        Durability::Synced => DiskSync::open(&dir.join(DB_DIR))
            .map(Some)
            .map_err(io_error("sync the database of", dir)),
        Durability::NoSync => {
            warn_no_sync(dir);
            Ok(None)
        }
    }
}

/// The warning that makes the `NoSync` opt-in visible.
fn warn_no_sync(dir: &Path) {
    tracing::warn!(
        run = %dir.display(),
        "durability NoSync (opt-in): commits are not fdatasync'ed; a power loss can lose \
         acknowledged data"
    );
}

fn io_error(action: &'static str, path: &Path) -> impl FnOnce(std::io::Error) -> StoreError {
    let path = path.to_path_buf();
    move |source| StoreError::Io { action, path, source }
}

fn read_marker(dir: &Path) -> Result<RunMarker, StoreError> {
    if !dir.exists() {
        return Err(StoreError::NotFound { dir: dir.to_path_buf() });
    }
    if !dir.is_dir() {
        return Err(StoreError::NotARun { dir: dir.to_path_buf() });
    }
    let path = dir.join(RUN_MARKER);
    let bytes = match fs::read(&path) {
        Ok(bytes) => bytes,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            return Err(StoreError::NotARun { dir: dir.to_path_buf() });
        }
        Err(source) => return Err(StoreError::Io { action: "read", path, source }),
    };
    let corrupted =
        |detail: String| StoreError::Corrupted { dir: dir.to_path_buf(), what: "marker", detail };
    let value: serde_json::Value = serde_json::from_slice(&bytes)
        .map_err(|e| corrupted(format!("{RUN_MARKER} is not valid JSON: {e}")))?;
    if value.get("format").and_then(|f| f.as_str()) != Some(RUN_FORMAT) {
        return Err(StoreError::NotARun { dir: dir.to_path_buf() });
    }
    let Some(found) = value.get("schema_version").and_then(serde_json::Value::as_u64) else {
        return Err(corrupted(format!("{RUN_MARKER} has no numeric schema_version")));
    };
    if found != u64::from(SCHEMA_VERSION) {
        return Err(StoreError::IncompatibleSchema {
            dir: dir.to_path_buf(),
            found: u32::try_from(found).unwrap_or(u32::MAX),
            supported: SCHEMA_VERSION,
        });
    }
    if let Some(Err(source)) = value.get("run_id").and_then(|id| id.as_str()).map(RunId::parse) {
        return Err(StoreError::OldRunId { dir: dir.to_path_buf(), source });
    }
    serde_json::from_value(value).map_err(|e| corrupted(format!("{RUN_MARKER}: {e}")))
}

/// Takes the run's lock (an exclusive flock on its marker), or says that a live store holds it.
/// Waits up to [`OPEN_PATIENCE`]: a process that was just killed may have left a child that is
/// being spawned, which holds a copy of the lock until it execs.
fn lock_run(dir: &Path) -> Result<File, StoreError> {
    let path = dir.join(RUN_MARKER);
    let file = File::open(&path).map_err(io_error("open", &path))?;
    match seal::lock_within(&file, OPEN_PATIENCE) {
        Ok(true) => Ok(file),
        Ok(false) => Err(StoreError::Locked { dir: dir.to_path_buf() }),
        Err(source) => Err(StoreError::Io { action: "lock", path, source }),
    }
}

/// Takes the database's lock (the flock sled takes on `db/db`) through a file of our own. With
/// the run's lock held no other store holds it, so something that holds it for longer than
/// [`OPEN_PATIENCE`] is not a Strata store, or is a sled tree that outlived its store.
fn lock_database(dir: &Path, db_dir: &Path) -> Result<File, StoreError> {
    let path = db_dir.join("db");
    let file = File::open(&path).map_err(io_error("open", &path))?;
    match seal::lock_within(&file, OPEN_PATIENCE) {
        Ok(true) => Ok(file),
        Ok(false) => Err(StoreError::Locked { dir: dir.to_path_buf() }),
        Err(source) => Err(StoreError::Io { action: "lock", path, source }),
    }
}

/// How long opening waits for a lock before it answers [`StoreError::Locked`]. A lock can be
/// held a moment after its owner let go: sled's background threads may still hold sled's, and a
/// child process being spawned (by any thread of the owner's process) holds copies of the
/// owner's files, locks included, until it execs.
const OPEN_PATIENCE: std::time::Duration = std::time::Duration::from_millis(500);

/// Removes snapshots that a crash cut short, so that sled can open the database.
///
/// sled 0.34.7 writes a snapshot as `snap.<lsn>.generating` and renames it once it is complete
/// and synced, but when it opens a database it skips only files ending in `.in___motion`: an
/// unfinished `.generating` file (a process killed while sled wrote one) sorts after the last
/// good snapshot, is read as one, and sled refuses the whole database as corrupted. Such a
/// file never held anything sled relies on (the log and the previous snapshot hold it all),
/// so it is removed. The torture harness found it (a run killed while sled wrote a
/// snapshot could not be resumed). Returns how many were removed.
fn remove_unfinished_snapshots(db: &Path) -> std::io::Result<usize> {
    let entries = match fs::read_dir(db) {
        Ok(entries) => entries,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(0),
        Err(e) => return Err(e),
    };
    let mut removed = 0;
    for entry in entries {
        let entry = entry?;
        let name = entry.file_name();
        let name = name.to_string_lossy();
        if name.starts_with("snap.") && name.ends_with(".generating") {
            fs::remove_file(entry.path())?;
            tracing::warn!(
                file = %entry.path().display(),
                "removed a database snapshot that a crash cut short (sled rebuilds it from its log)"
            );
            removed += 1;
        }
    }
    Ok(removed)
}

fn open_db(dir: &Path) -> Result<sled::Db, StoreError> {
    let path = dir.join(DB_DIR);
    remove_unfinished_snapshots(&path).map_err(|source| StoreError::Io {
        action: "clean up the database in",
        path: path.clone(),
        source,
    })?;
    let config = sled::Config::new().path(&path);
    // sled 0.34 can panic on some damaged files instead of returning an error. The default
    // panic hook still prints the panic; the caller gets `Corrupted`.
    let opened = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| config.open()));
    let corrupted =
        |detail: String| StoreError::Corrupted { dir: dir.to_path_buf(), what: "database", detail };
    match opened {
        Ok(Ok(db)) => Ok(db),
        // sled reports a held lock as `ErrorKind::Other` with this text.
        Ok(Err(sled::Error::Io(e)))
            if e.kind() == std::io::ErrorKind::WouldBlock
                || e.to_string().contains("could not acquire lock") =>
        {
            Err(StoreError::Locked { dir: dir.to_path_buf() })
        }
        Ok(Err(sled::Error::Io(source))) => {
            Err(StoreError::Io { action: "open the database in", path, source })
        }
        Ok(Err(e)) => Err(corrupted(format!("sled cannot open it: {e}"))),
        Err(panic) => {
            let detail = panic
                .downcast_ref::<String>()
                .cloned()
                .or_else(|| panic.downcast_ref::<&str>().map(|s| (*s).to_owned()))
                .unwrap_or_else(|| "no message".into());
            Err(corrupted(format!("sled panicked while reading it: {detail}")))
        }
    }
}
