//! The seal a run gets when it closes cleanly, checked before it opens again, and the copy kept
//! before sled recovers a run that did not close cleanly.
//!
//! Why: sled 0.34 checks its log while it recovers and, at the first damaged record, treats the
//! rest as a torn write and rewrites the file from there, silently: a run whose database was
//! truncated or overwritten would open with data missing, and the damaged bytes would be gone.
//! The seal lists every file of the database with its length and CRC-32, taken once sled has
//! closed the database; [`check`] compares it before sled reads anything. A run without a seal
//! did not close cleanly (a crash, a power loss, or a sled tree that outlived the store); sled's
//! recovery is then expected to drop a torn tail, and [`back_up`] keeps a copy of the database as
//! it was first.
//!
//! The seal also keeps the store's *anchors* (see [`RunStore::set_anchor`]): small values the
//! backends ask to be kept outside the database, such as the audit log's final hash, so that a
//! database rewritten to be consistent with itself still disagrees with its seal.
//!
//! [`RunStore::set_anchor`]: crate::RunStore::set_anchor

use std::collections::BTreeMap;
use std::fs::{self, File};
use std::io::{self, Read, Write};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};

use crate::commit::sync_dir;
use crate::store::StoreError;

/// The seal file, in the run directory.
pub(crate) const SEAL_FILE: &str = "strata-run.seal";
/// Where [`back_up`] copies the database, in the run directory.
pub(crate) const BACKUP_DIR: &str = "db.before-recovery";
/// The seal's `format` field.
const SEAL_FORMAT: &str = "strata-run-seal";

/// What [`check`] found.
pub(crate) enum Found {
    /// A seal that matches the database; its bytes, to put back if the open fails after all.
    Sealed(Vec<u8>),
    /// No seal: the run did not close cleanly.
    Unsealed,
}

/// Named values kept in the seal (see [`RunStore::set_anchor`](crate::RunStore::set_anchor)).
pub(crate) type Anchors = BTreeMap<String, serde_json::Value>;

/// The content of the seal file.
#[derive(Debug, PartialEq, Eq, Serialize, Deserialize)]
struct Seal {
    format: String,
    files: Vec<SealedFile>,
    /// Absent in seals written before anchors existed.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    anchors: Anchors,
}

/// One file of the database directory.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
struct SealedFile {
    /// Relative to the database directory, `/`-separated.
    path: String,
    len: u64,
    crc32: u32,
}

/// Compares the database in `db_dir` with the seal in `run_dir`, touching nothing.
pub(crate) fn check(run_dir: &Path, db_dir: &Path) -> Result<Found, StoreError> {
    match read(run_dir)? {
        None => Ok(Found::Unsealed),
        Some(bytes) => check_bytes(run_dir, &bytes, db_dir).map(|_| Found::Sealed(bytes)),
    }
}

/// The seal file's bytes, if the run has one.
pub(crate) fn read(run_dir: &Path) -> Result<Option<Vec<u8>>, StoreError> {
    let path = run_dir.join(SEAL_FILE);
    match fs::read(&path) {
        Ok(bytes) => Ok(Some(bytes)),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(None),
        Err(source) => Err(StoreError::Io { action: "read", path, source }),
    }
}

/// Compares the database in `db_dir` with the seal `bytes` of the run in `run_dir` (`db_dir` may
/// be a copy of the run's database), touching nothing; returns the seal's anchors.
pub(crate) fn check_bytes(
    run_dir: &Path,
    bytes: &[u8],
    db_dir: &Path,
) -> Result<Anchors, StoreError> {
    let seal = parse(run_dir, bytes)?;
    let found = measure(db_dir).map_err(|source| StoreError::Io {
        action: "read",
        path: db_dir.to_path_buf(),
        source,
    })?;
    match difference(&seal.files, &found) {
        None => Ok(seal.anchors),
        Some(detail) => Err(StoreError::Corrupted {
            dir: run_dir.to_path_buf(),
            what: "database",
            detail: format!(
                "{detail}, which is not what it was when the run was last closed \
                 (checked against {SEAL_FILE}; nothing was changed)"
            ),
        }),
    }
}

/// The anchors of a seal that [`check`] accepted.
pub(crate) fn anchors_of(run_dir: &Path, bytes: &[u8]) -> Result<Anchors, StoreError> {
    parse(run_dir, bytes).map(|seal| seal.anchors)
}

fn parse(run_dir: &Path, bytes: &[u8]) -> Result<Seal, StoreError> {
    let damaged =
        |detail: String| StoreError::Corrupted { dir: run_dir.to_path_buf(), what: "seal", detail };
    let seal: Seal = serde_json::from_slice(bytes)
        .map_err(|e| damaged(format!("{SEAL_FILE} is not a valid seal: {e}")))?;
    if seal.format != SEAL_FORMAT {
        return Err(damaged(format!("{SEAL_FILE} has format `{}`", seal.format)));
    }
    Ok(seal)
}

/// Removes the seal, durably, before sled writes to the database: a crash from now on must not
/// find a seal that no longer matches.
pub(crate) fn unseal(run_dir: &Path) -> io::Result<()> {
    fs::remove_file(run_dir.join(SEAL_FILE))?;
    sync_dir(run_dir)
}

/// Puts back a seal that [`unseal`] removed (the open failed after all).
pub(crate) fn restore(run_dir: &Path, bytes: &[u8]) -> io::Result<()> {
    write_atomically(run_dir, bytes)
}

/// How long closing waits for sled's lock before it leaves the run unsealed. The lock can be
/// held a moment after sled's last handle dropped: by sled's background threads, or by a child
/// process being spawned, which holds copies of this process's files until it execs. Waiting
/// the whole time means that a sled tree outlived the store.
pub(crate) const CLOSE_PATIENCE: Duration = Duration::from_millis(200);

/// Seals the run, with `anchors`, if sled has closed its database: `Ok(false)` when something
/// still holds the database's lock after `patience` (a sled tree that outlived the store), and
/// then nothing is written.
pub(crate) fn seal_if_closed(
    run_dir: &Path,
    db_dir: &Path,
    patience: Duration,
    anchors: &Anchors,
) -> io::Result<bool> {
    let db_file = File::open(db_dir.join("db"))?;
    if !lock_within(&db_file, patience)? {
        return Ok(false);
    }
    // Held until the seal is written, so that nobody opens the database meanwhile.
    for dir in [db_dir.join("blobs"), db_dir.to_path_buf()] {
        sync_dir(&dir)?;
    }
    let seal =
        Seal { format: SEAL_FORMAT.to_owned(), files: measure(db_dir)?, anchors: anchors.clone() };
    let bytes = serde_json::to_vec_pretty(&seal).map_err(io::Error::other)?;
    write_atomically(run_dir, &bytes)?;
    drop(db_file);
    Ok(true)
}

/// Copies the database directory to [`BACKUP_DIR`] (replacing an older copy) and returns where.
pub(crate) fn back_up(run_dir: &Path, db_dir: &Path) -> io::Result<PathBuf> {
    let backup = run_dir.join(BACKUP_DIR);
    match fs::remove_dir_all(&backup) {
        Err(e) if e.kind() != io::ErrorKind::NotFound => return Err(e),
        _ => {}
    }
    copy_dir(db_dir, &backup, true)?;
    sync_dir(run_dir)?;
    Ok(backup)
}

/// Copies the database directory `db_dir` to `to` (which must not exist), without syncing: a
/// private copy to read. A file that disappears while it is copied (a live process replaced it)
/// is an error of kind `NotFound`; the caller may try again.
pub(crate) fn copy_db(db_dir: &Path, to: &Path) -> io::Result<()> {
    copy_dir(db_dir, to, false)
}

/// Takes `file`'s exclusive lock, retrying (with growing pauses) for up to `patience`: `false`
/// if it is still held then.
pub(crate) fn lock_within(file: &File, patience: Duration) -> io::Result<bool> {
    let start = Instant::now();
    let mut pause = Duration::from_micros(100);
    loop {
        match file.try_lock() {
            Ok(()) => return Ok(true),
            Err(fs::TryLockError::Error(e)) => return Err(e),
            Err(fs::TryLockError::WouldBlock) if start.elapsed() >= patience => return Ok(false),
            Err(fs::TryLockError::WouldBlock) => {
                std::thread::sleep(pause);
                pause = (pause * 2).min(Duration::from_millis(20));
            }
        }
    }
}

/// Every file under `db_dir`, sorted by path.
fn measure(db_dir: &Path) -> io::Result<Vec<SealedFile>> {
    let mut files = Vec::new();
    let mut pending = vec![(db_dir.to_path_buf(), String::new())];
    while let Some((dir, prefix)) = pending.pop() {
        for entry in fs::read_dir(&dir)? {
            let entry = entry?;
            let name = format!("{prefix}{}", entry.file_name().to_string_lossy());
            if entry.file_type()?.is_dir() {
                pending.push((entry.path(), format!("{name}/")));
            } else {
                let (len, crc32) = checksum(&entry.path())?;
                files.push(SealedFile { path: name, len, crc32 });
            }
        }
    }
    files.sort_by(|a, b| a.path.cmp(&b.path));
    Ok(files)
}

fn checksum(path: &Path) -> io::Result<(u64, u32)> {
    let mut file = File::open(path)?;
    let mut hasher = crc32fast::Hasher::new();
    let mut buf = vec![0; 1 << 16];
    let mut len = 0u64;
    loop {
        let n = file.read(&mut buf)?;
        if n == 0 {
            return Ok((len, hasher.finalize()));
        }
        hasher.update(&buf[..n]);
        len += n as u64;
    }
}

/// The first way `found` differs from `sealed`, in words.
fn difference(sealed: &[SealedFile], found: &[SealedFile]) -> Option<String> {
    let db = crate::DB_DIR;
    for file in sealed {
        match found.iter().find(|f| f.path == file.path) {
            None => return Some(format!("{db}/{} is missing", file.path)),
            Some(now) if now != file => {
                return Some(format!(
                    "{db}/{} is {} bytes with CRC-32 {:08x}, but was {} bytes with CRC-32 {:08x}",
                    file.path, now.len, now.crc32, file.len, file.crc32
                ));
            }
            Some(_) => {}
        }
    }
    found
        .iter()
        .find(|f| !sealed.iter().any(|s| s.path == f.path))
        .map(|extra| format!("{db}/{} appeared", extra.path))
}

fn write_atomically(run_dir: &Path, bytes: &[u8]) -> io::Result<()> {
    let tmp = run_dir.join(format!("{SEAL_FILE}.tmp"));
    let mut file = File::create(&tmp)?;
    file.write_all(bytes)?;
    file.sync_all()?;
    fs::rename(&tmp, run_dir.join(SEAL_FILE))?;
    sync_dir(run_dir)
}

fn copy_dir(from: &Path, to: &Path, sync: bool) -> io::Result<()> {
    fs::create_dir_all(to)?;
    for entry in fs::read_dir(from)? {
        let entry = entry?;
        let target = to.join(entry.file_name());
        if entry.file_type()?.is_dir() {
            copy_dir(&entry.path(), &target, sync)?;
        } else {
            fs::copy(entry.path(), &target)?;
            if sync {
                File::open(&target)?.sync_all()?;
            }
        }
    }
    if sync { sync_dir(to) } else { Ok(()) }
}
