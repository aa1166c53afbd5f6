//! Opening paths beneath the workspace with `openat2(RESOLVE_BENEATH | RESOLVE_NO_MAGICLINKS)`.
//!
//! [`resolve`](super::path::resolve) checks a path before it is used, but a symlink created or
//! swapped in between (by a command of the same run) could still lead out of the workspace.
//! The file tools therefore open what they read, list and write relative to a handle on the
//! workspace root with the kernel's `RESOLVE_BENEATH`: every component, including symlinks
//! met on the way, must resolve inside the root, absolute symlinks and `..` past the root fail
//! (`EXDEV`), and "magic" links such as `/proc/self/root` are never followed. Such a failure is
//! [`ToolError::PathOutsideWorkspace`]. A kernel without `openat2` (Linux before 5.6) gets a
//! typed refusal rather than an unconfined open.

use std::fs::File;
use std::os::fd::OwnedFd;
use std::path::{Component, Path, PathBuf};

use rustix::fs::{Mode, OFlags, ResolveFlags};
use rustix::io::Errno;

use super::ToolError;
use super::path::display;

/// How every path is resolved: beneath the root, no magic links.
const RESOLVE: ResolveFlags = ResolveFlags::BENEATH.union(ResolveFlags::NO_MAGICLINKS);

/// How often an open is retried when the kernel reports a concurrent rename (`EAGAIN`).
const RETRIES: usize = 8;

/// Opens `path` (under `root`) with `flags` (plus `O_CLOEXEC`), resolving beneath `root`.
pub(super) fn open(tool: &str, root: &Path, path: &Path, flags: OFlags) -> Result<File, ToolError> {
    let relative = relative(tool, root, path)?;
    let dir = root_handle(tool, root)?;
    open_at(tool, root, path, &dir, &relative, flags).map(File::from)
}

/// A handle on the directory `dir` (under `root`) that can be listed and synced.
pub(super) fn open_dir(tool: &str, root: &Path, dir: &Path) -> Result<OwnedFd, ToolError> {
    let relative = relative(tool, root, dir)?;
    let handle = root_handle(tool, root)?;
    open_at(
        tool,
        root,
        dir,
        &handle,
        &relative,
        OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NONBLOCK,
    )
}

/// Creates `dir` (under `root`) and its missing parents, one component at a time beneath
/// `root`: a component that is a symlink leading out of the workspace is refused.
pub(super) fn create_dirs(tool: &str, root: &Path, dir: &Path) -> Result<(), ToolError> {
    let relative = relative(tool, root, dir)?;
    let mut current = root_handle(tool, root)?;
    let mut walked = root.to_path_buf();
    for component in relative.components() {
        let Component::Normal(name) = component else { continue };
        walked.push(name);
        let flags = OFlags::PATH | OFlags::DIRECTORY;
        current = match open_at(tool, root, &walked, &current, Path::new(name), flags) {
            Ok(next) => next,
            Err(ToolError::Io { source, .. }) if source.kind() == std::io::ErrorKind::NotFound => {
                match rustix::fs::mkdirat(&current, name, Mode::from_raw_mode(0o777)) {
                    Ok(()) | Err(Errno::EXIST) => {}
                    Err(errno) => return Err(ToolError::io(tool, &walked, errno.into())),
                }
                open_at(tool, root, &walked, &current, Path::new(name), flags)?
            }
            Err(err) => return Err(err),
        };
    }
    Ok(())
}

/// `path` relative to `root` (`.` for the root), refusing one outside it.
fn relative(tool: &str, root: &Path, path: &Path) -> Result<PathBuf, ToolError> {
    let Ok(relative) = path.strip_prefix(root) else {
        return Err(outside(root, path));
    };
    if relative.components().any(|c| !matches!(c, Component::Normal(_) | Component::CurDir)) {
        return Err(ToolError::invalid(
            tool,
            format!("`{}`: not a plain relative path", display(root, path)),
        ));
    }
    Ok(if relative.as_os_str().is_empty() { PathBuf::from(".") } else { relative.to_path_buf() })
}

/// An `O_PATH` handle on the workspace root.
fn root_handle(tool: &str, root: &Path) -> Result<OwnedFd, ToolError> {
    rustix::fs::open(root, OFlags::PATH | OFlags::DIRECTORY | OFlags::CLOEXEC, Mode::empty())
        .map_err(|errno| ToolError::io(tool, root, errno.into()))
}

fn open_at(
    tool: &str,
    root: &Path,
    path: &Path,
    dir: &OwnedFd,
    relative: &Path,
    flags: OFlags,
) -> Result<OwnedFd, ToolError> {
    let mut attempts = 0;
    loop {
        match rustix::fs::openat2(dir, relative, flags | OFlags::CLOEXEC, Mode::empty(), RESOLVE) {
            Err(Errno::AGAIN | Errno::INTR) if attempts < RETRIES => attempts += 1,
            Ok(fd) => return Ok(fd),
            Err(errno) => return Err(error(tool, root, path, errno)),
        }
    }
}

/// What a failed `openat2` means for a tool.
fn error(tool: &str, root: &Path, path: &Path, errno: Errno) -> ToolError {
    match errno {
        // A component left the root (`..`, an absolute symlink) or was a magic link.
        Errno::XDEV | Errno::LOOP => outside(root, path),
        Errno::NOSYS => ToolError::failed(
            tool,
            "this kernel has no openat2 (Linux 5.6 or later), which the file tools need to keep \
             paths inside the workspace; run Strata on a newer kernel",
        ),
        errno => ToolError::io(tool, path, errno.into()),
    }
}

fn outside(root: &Path, path: &Path) -> ToolError {
    ToolError::PathOutsideWorkspace { path: display(root, path), workspace: root.to_path_buf() }
}
