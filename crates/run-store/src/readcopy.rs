//! The private copies [`RunStore::open_read_only`](crate::RunStore::open_read_only) reads from,
//! and making sure none is left behind.
//!
//! A copy is a temporary directory named `strata-read-<pid>-<random>`, removed when its store
//! closes. A process can end without closing it: a reader whose output was closed
//! (`strata inspect RUN | head` exits at once), Ctrl-C, `kill -9`. So:
//! - the process keeps the list of its live copies, and [`remove_read_copies`] removes them (a
//!   program calls it before it exits early: the CLI does on a closed pipe and on Ctrl-C);
//! - every new copy first removes the copies of processes that are gone (the pid in the name is
//!   not a live process), which covers `kill -9`.

use std::path::{Path, PathBuf};
use std::sync::Mutex;

/// What every copy's directory name starts with.
const PREFIX: &str = "strata-read-";

/// This process's live copies.
static LIVE: Mutex<Vec<PathBuf>> = Mutex::new(Vec::new());

/// Creates a new copy directory in the system's temporary directory, after removing the copies
/// left by processes that are gone.
pub(crate) fn create() -> std::io::Result<tempfile::TempDir> {
    let parent = std::env::temp_dir();
    remove_stale(&parent);
    let dir = tempfile::Builder::new()
        .prefix(&format!("{PREFIX}{}-", std::process::id()))
        .tempdir_in(&parent)?;
    live().push(dir.path().to_path_buf());
    Ok(dir)
}

/// `dir` was removed by its store: no longer this process's to remove.
pub(crate) fn forget(dir: &Path) {
    live().retain(|d| d != dir);
}

/// Removes every copy this process still has open (their stores must not be used afterwards):
/// for a program about to exit without dropping its stores. Errors are ignored: a copy that
/// cannot be removed now is removed by the next reader once this process is gone.
pub fn remove_read_copies() {
    let dirs = std::mem::take(&mut *live());
    for dir in dirs {
        let _ = std::fs::remove_dir_all(&dir);
    }
}

fn live() -> std::sync::MutexGuard<'static, Vec<PathBuf>> {
    LIVE.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// Removes the copies in `parent` whose process is gone. A copy made before copies carried a
/// pid has none and is left alone.
fn remove_stale(parent: &Path) {
    let Ok(entries) = std::fs::read_dir(parent) else { return };
    for entry in entries.flatten() {
        let name = entry.file_name();
        let Some(pid) = name.to_str().and_then(owner) else { continue };
        if pid != std::process::id() && !alive(pid) {
            let path = entry.path();
            match std::fs::remove_dir_all(&path) {
                Ok(()) => {
                    tracing::debug!(copy = %path.display(), pid, "removed a read copy left by a process that is gone")
                }
                Err(e) => {
                    tracing::debug!(copy = %path.display(), error = %e, "could not remove a stale read copy")
                }
            }
        }
    }
}

/// The pid in a copy's name, `strata-read-<pid>-<random>`.
fn owner(name: &str) -> Option<u32> {
    let rest = name.strip_prefix(PREFIX)?;
    let (pid, random) = rest.split_once('-')?;
    if random.is_empty() || pid.is_empty() || !pid.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    pid.parse().ok()
}

/// Whether a process with this pid exists (or might: anything but "no such process").
fn alive(pid: u32) -> bool {
    let Ok(pid) = i32::try_from(pid) else { return true };
    // Signal 0 only checks that the process exists.
    match nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid), None) {
        Ok(()) => true,
        Err(errno) => errno != nix::errno::Errno::ESRCH,
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, reason = "tests")]
mod tests {
    use super::*;

    #[test]
    fn the_owner_is_read_from_the_name() {
        assert_eq!(owner("strata-read-1234-abCD12"), Some(1234));
        assert_eq!(owner("strata-read-abc123"), None, "a copy from before pids were kept");
        assert_eq!(owner("strata-read-12x-ab"), None);
        assert_eq!(owner("strata-read-12-"), None);
        assert_eq!(owner("other-12-ab"), None);
    }

    #[test]
    fn copies_of_gone_processes_are_removed_and_live_ones_kept() {
        let parent = tempfile::tempdir().unwrap();
        // A child that has exited and been reaped: its pid is gone.
        let mut child = std::process::Command::new("true").spawn().unwrap();
        let gone = child.id();
        child.wait().unwrap();
        let stale = parent.path().join(format!("{PREFIX}{gone}-aaaaaa"));
        let mine = parent.path().join(format!("{PREFIX}{}-bbbbbb", std::process::id()));
        let old = parent.path().join(format!("{PREFIX}cccccc"));
        for dir in [&stale, &mine, &old] {
            std::fs::create_dir_all(dir.join("db")).unwrap();
        }
        remove_stale(parent.path());
        assert!(!stale.exists(), "the copy of a process that is gone is removed");
        assert!(mine.exists(), "this process's copy is kept");
        assert!(old.exists(), "a copy without a pid is left alone");
    }
}
