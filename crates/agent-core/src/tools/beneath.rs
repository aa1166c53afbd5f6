//! Opening paths beneath the workspace with `openat2(RESOLVE_BENEATH | RESOLVE_NO_MAGICLINKS)`,
//! and refusing what lies in a masked directory.
//!
//! [`resolve`](super::path::resolve) checks a path before it is used, but a symlink created or
//! swapped in between (by a command of the same run) could still lead out of the workspace.
//! The file tools therefore open what they read, list and write relative to a handle on the
//! workspace root with the kernel's `RESOLVE_BENEATH`: every component, including symlinks
//! met on the way, must resolve inside the root, absolute symlinks and `..` past the root fail
//! (`EXDEV`), and "magic" links such as `/proc/self/root` are never followed. Such a failure is
//! [`ToolError::PathOutsideWorkspace`]. A kernel without `openat2` (Linux before 5.6) gets a
//! typed refusal rather than an unconfined open.
//!
//! **Masked directories.** A directory of the workspace that holds what agents must not reach
//! (the run's data directory, when the workspace contains it: see
//! [`ToolContext::with_masked`](super::ToolContext::with_masked)) is refused on the *opened*
//! handle, not on the path: from the handle's directory (for a file, the directory the kernel
//! says holds it, checked to hold the same inode) the chain of `..` is followed up to the
//! workspace root, and a directory on it with the device and inode of a masked directory is
//! [`ToolError::Masked`]. So neither a symlink inside the workspace pointing into the masked
//! directory nor a rename of the masked directory (or of its parents) gets round it.

use std::ffi::{OsStr, OsString};
use std::fs::File;
use std::io::Read as _;
use std::os::fd::{AsFd, AsRawFd as _, BorrowedFd, OwnedFd};
use std::os::unix::ffi::OsStrExt as _;
use std::os::unix::fs::MetadataExt as _;
use std::path::{Component, Path, PathBuf};

use rustix::fs::{AtFlags, FileType, Mode, OFlags, ResolveFlags};
use rustix::io::Errno;

use super::path::display;
use super::{ToolContext, ToolError};

/// How every path is resolved: beneath the root, no magic links.
const RESOLVE: ResolveFlags = ResolveFlags::BENEATH.union(ResolveFlags::NO_MAGICLINKS);

/// How paths found by a walk that follows no link are resolved: beneath the root, no link at
/// all (a component swapped for a symlink since the walk saw it fails).
const RESOLVE_NO_LINKS: ResolveFlags = RESOLVE.union(ResolveFlags::NO_SYMLINKS);

/// How often an open is retried when the kernel reports a concurrent rename (`EAGAIN`).
const RETRIES: usize = 8;

/// The deepest chain of `..` followed from a handle to the workspace root.
const MAX_DEPTH: usize = 4096;

/// A file's identity: its device and inode.
type Id = (u64, u64);

/// A directory that no tool may read, list or write: its path and, when it existed at setup,
/// its identity (which a rename keeps).
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct MaskedDir {
    path: PathBuf,
    id: Option<Id>,
}

impl MaskedDir {
    /// The masked directory `path` (made absolute and, when it exists, canonical; its identity
    /// taken now). Blocking.
    pub(crate) fn new(path: &Path) -> Self {
        let path = std::fs::canonicalize(path)
            .or_else(|_| std::path::absolute(path))
            .unwrap_or_else(|_| path.to_path_buf());
        let id = std::fs::metadata(&path).ok().map(|m| (m.dev(), m.ino()));
        Self { path, id }
    }

    /// The directory's path.
    pub(crate) fn path(&self) -> &Path {
        &self.path
    }
}

/// The identities of the masked directories at the time of a call.
#[derive(Clone, Debug, Default)]
pub(crate) struct Masks {
    ids: Vec<Id>,
}

impl Masks {
    /// The masked directories' identities: as taken at setup, and as their paths are now.
    /// Blocking.
    pub(crate) fn now(dirs: &[MaskedDir]) -> Self {
        let mut ids = Vec::new();
        for dir in dirs {
            ids.extend(dir.id);
            if let Ok(meta) = std::fs::metadata(&dir.path) {
                ids.push((meta.dev(), meta.ino()));
            }
        }
        ids.sort_unstable();
        ids.dedup();
        Self { ids }
    }

    /// Whether the directory entry `name` of `dir` is a masked directory (without following a
    /// link).
    pub(crate) fn is_masked_entry(&self, dir: BorrowedFd<'_>, name: &OsStr) -> bool {
        if self.ids.is_empty() {
            return false;
        }
        rustix::fs::statat(dir, name, AtFlags::SYMLINK_NOFOLLOW)
            .is_ok_and(|stat| self.ids.contains(&id(&stat)))
    }

    /// Whether `(dev, ino)` is a masked directory's.
    pub(crate) fn is_masked(&self, dev: u64, ino: u64) -> bool {
        self.ids.contains(&(dev, ino))
    }
}

/// A handle on the workspace root, through which everything is opened beneath it.
#[derive(Debug)]
pub(crate) struct Beneath {
    root: PathBuf,
    handle: OwnedFd,
    root_id: Id,
    masks: Masks,
}

impl Beneath {
    /// Opens the workspace `root` (canonical), with the masked directories' identities.
    pub(crate) fn new(tool: &str, root: &Path, masks: Masks) -> Result<Self, ToolError> {
        let handle = rustix::fs::open(
            root,
            OFlags::PATH | OFlags::DIRECTORY | OFlags::CLOEXEC,
            Mode::empty(),
        )
        .map_err(|errno| ToolError::io(tool, root, errno.into()))?;
        let root_id = rustix::fs::fstat(&handle)
            .map(|s| id(&s))
            .map_err(|e| ToolError::io(tool, root, e.into()))?;
        Ok(Self { root: root.to_path_buf(), handle, root_id, masks })
    }

    /// The canonical workspace root.
    pub(crate) fn root(&self) -> &Path {
        &self.root
    }

    /// The masked directories' identities.
    pub(crate) fn masks(&self) -> &Masks {
        &self.masks
    }

    /// The handle on the root (`O_PATH`): a walk starts from it.
    pub(crate) fn handle(&self) -> BorrowedFd<'_> {
        self.handle.as_fd()
    }

    /// Opens `path` (under the root) with `flags` (plus `O_CLOEXEC`), resolving beneath the
    /// root; refused when what was opened lies in a masked directory.
    pub(crate) fn open(&self, tool: &str, path: &Path, flags: OFlags) -> Result<File, ToolError> {
        let relative = relative(tool, &self.root, path)?;
        let fd = open_at(self.handle.as_fd(), &relative, flags, RESOLVE)
            .map_err(|e| error(tool, &self.root, path, e))?;
        self.check(tool, path, &fd)?;
        Ok(File::from(fd))
    }

    /// Like [`open`](Self::open), but no component may be a symlink (a trailing one fails
    /// with `O_NOFOLLOW`): for paths found by a walk that follows none.
    pub(crate) fn open_no_links(
        &self,
        tool: &str,
        path: &Path,
        flags: OFlags,
    ) -> Result<File, ToolError> {
        let relative = relative(tool, &self.root, path)?;
        let flags = flags | OFlags::NOFOLLOW;
        let fd = open_at(self.handle.as_fd(), &relative, flags, RESOLVE_NO_LINKS)
            .map_err(|e| error(tool, &self.root, path, e))?;
        self.check(tool, path, &fd)?;
        Ok(File::from(fd))
    }

    /// A handle on the directory `dir` (under the root) that can be listed and synced.
    pub(crate) fn open_dir(&self, tool: &str, dir: &Path) -> Result<OwnedFd, ToolError> {
        let relative = relative(tool, &self.root, dir)?;
        let flags = OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NONBLOCK;
        let fd = open_at(self.handle.as_fd(), &relative, flags, RESOLVE)
            .map_err(|e| error(tool, &self.root, dir, e))?;
        self.check(tool, dir, &fd)?;
        Ok(fd)
    }

    /// Creates `dir` (under the root) and its missing parents, one component at a time
    /// beneath the root: a component that is a symlink leading out of the workspace, or a
    /// masked directory, is refused before anything is created in it.
    pub(crate) fn create_dirs(&self, tool: &str, dir: &Path) -> Result<(), ToolError> {
        let relative = relative(tool, &self.root, dir)?;
        let mut current: Option<OwnedFd> = None;
        let mut current_id = self.root_id;
        let mut walked = self.root.clone();
        for component in relative.components() {
            let Component::Normal(name) = component else { continue };
            walked.push(name);
            let flags = OFlags::PATH | OFlags::DIRECTORY;
            let at = current.as_ref().map_or(self.handle.as_fd(), AsFd::as_fd);
            let opened = |at| {
                open_at(at, Path::new(name), flags, RESOLVE)
                    .map_err(|e| error(tool, &self.root, &walked, e))
            };
            let next = match opened(at) {
                Ok(next) => next,
                Err(ToolError::Io { source, .. })
                    if source.kind() == std::io::ErrorKind::NotFound =>
                {
                    match rustix::fs::mkdirat(at, name, Mode::from_raw_mode(0o777)) {
                        Ok(()) | Err(Errno::EXIST) => {}
                        Err(errno) => return Err(ToolError::io(tool, &walked, errno.into())),
                    }
                    opened(at)?
                }
                Err(err) => return Err(err),
            };
            // A symlink may lead anywhere beneath `current`: its chain up to `current` (or the
            // root) is checked.
            self.walk_up(tool, &walked, next.as_fd(), &[current_id, self.root_id])?;
            current_id = fd_id(tool, &walked, next.as_fd())?;
            current = Some(next);
        }
        Ok(())
    }

    /// Refuses `fd` (opened for `path`) when it lies in a masked directory.
    fn check(&self, tool: &str, path: &Path, fd: &OwnedFd) -> Result<(), ToolError> {
        if self.masks.ids.is_empty() {
            return Ok(());
        }
        let stat = rustix::fs::fstat(fd).map_err(|e| ToolError::io(tool, path, e.into()))?;
        if FileType::from_raw_mode(stat.st_mode) == FileType::Directory {
            return self.walk_up(tool, path, fd.as_fd(), &[self.root_id]);
        }
        // A file: the directory the kernel says holds it, checked to hold this very inode.
        let changed = || {
            ToolError::failed(
                tool,
                format!(
                    "`{}` was moved or replaced while it was being opened; retry the call",
                    display(&self.root, path)
                ),
            )
        };
        let link = format!("/proc/self/fd/{}", fd.as_raw_fd());
        let real = rustix::fs::readlinkat(rustix::fs::CWD, link.as_str(), Vec::new()).map_err(
            |errno| {
                ToolError::failed(
                    tool,
                    format!(
                        "cannot tell where `{}` lies ({errno}: /proc must be mounted); refused",
                        display(&self.root, path)
                    ),
                )
            },
        )?;
        let real = PathBuf::from(OsStr::from_bytes(real.as_bytes()));
        let Ok(inside) = real.strip_prefix(&self.root) else { return Err(changed()) };
        let (Some(name), parent) = (inside.file_name(), inside.parent()) else {
            return Err(changed());
        };
        let parent = match parent {
            Some(p) if !p.as_os_str().is_empty() => p,
            _ => Path::new("."),
        };
        let flags = OFlags::PATH | OFlags::DIRECTORY;
        let dir =
            open_at(self.handle.as_fd(), parent, flags, RESOLVE_NO_LINKS).map_err(|_| changed())?;
        let here =
            rustix::fs::statat(&dir, name, AtFlags::SYMLINK_NOFOLLOW).map_err(|_| changed())?;
        if id(&here) != id(&stat) {
            return Err(changed());
        }
        self.walk_up(tool, path, dir.as_fd(), &[self.root_id])
    }

    /// Follows `..` from the directory `fd` until one of `stops` (directories already known
    /// to be clean, the root among them): a masked directory on the way is refused, and so is
    /// reaching the top of the file system first.
    fn walk_up(
        &self,
        tool: &str,
        path: &Path,
        fd: BorrowedFd<'_>,
        stops: &[Id],
    ) -> Result<(), ToolError> {
        if self.masks.ids.is_empty() {
            return Ok(());
        }
        let mut current: Option<OwnedFd> = None;
        for _ in 0..MAX_DEPTH {
            let at = current.as_ref().map_or(fd, AsFd::as_fd);
            let here = fd_id(tool, path, at)?;
            if self.masks.ids.contains(&here) {
                return Err(ToolError::Masked {
                    tool: tool.to_owned(),
                    path: display(&self.root, path),
                });
            }
            if stops.contains(&here) {
                return Ok(());
            }
            let up = rustix::fs::openat(
                at,
                "..",
                OFlags::PATH | OFlags::DIRECTORY | OFlags::CLOEXEC,
                Mode::empty(),
            )
            .map_err(|e| ToolError::io(tool, path, e.into()))?;
            if fd_id(tool, path, up.as_fd())? == here {
                break;
            }
            current = Some(up);
        }
        Err(outside(&self.root, path))
    }
}

/// Files of a workspace opened on an agent's behalf by the runtime (OODA's workspace copy,
/// evolution's preparation of a workspace) as the file tools open them: beneath the root with
/// `openat2(RESOLVE_BENEATH | RESOLVE_NO_MAGICLINKS)`, never through a symlink, never in a
/// masked directory. So a command racing to swap a file for a symlink cannot lead a read out
/// of the workspace, and errors never quote the content of a file outside it.
#[derive(Debug)]
pub struct WorkspaceFiles {
    beneath: Beneath,
}

/// What an entry of a workspace directory is ([`WorkspaceFiles::entries`]), links not followed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum EntryKind {
    /// A regular file.
    File,
    /// A directory.
    Dir,
    /// A symlink, a FIFO, a socket or a device.
    Other,
}

impl WorkspaceFiles {
    /// The files of `ctx`'s workspace, with its masked directories. Blocking.
    pub fn of(ctx: &ToolContext) -> Result<Self, ToolError> {
        const TOOL: &str = "workspace";
        let masks = Masks::now(ctx.masked_dirs());
        Ok(Self { beneath: Beneath::new(TOOL, ctx.workspace(), masks)? })
    }

    /// The files of the directory `root` (made canonical), with no masked directory.
    /// Blocking.
    pub fn open(root: &Path) -> Result<Self, ToolError> {
        const TOOL: &str = "workspace";
        let canonical = std::fs::canonicalize(root).map_err(|e| ToolError::io(TOOL, root, e))?;
        Ok(Self { beneath: Beneath::new(TOOL, &canonical, Masks::default())? })
    }

    /// The canonical root.
    pub fn root(&self) -> &Path {
        self.beneath.root()
    }

    /// The entries of the directory `relative` (`.` for the root), sorted by name, without
    /// `.` and `..` and without masked directories; links are not followed. Blocking.
    pub fn entries(&self, relative: &Path) -> Result<Vec<(OsString, EntryKind)>, ToolError> {
        const TOOL: &str = "workspace";
        let path = self.beneath.root().join(relative);
        let handle = self.beneath.open_dir(TOOL, &path)?;
        let io = |errno: Errno| ToolError::io(TOOL, &path, errno.into());
        let mut entries = Vec::new();
        for entry in rustix::fs::Dir::read_from(&handle).map_err(io)? {
            let entry = entry.map_err(io)?;
            let raw = entry.file_name().to_bytes();
            if raw == b"." || raw == b".." {
                continue;
            }
            let name = OsStr::from_bytes(raw).to_owned();
            let stat = rustix::fs::statat(&handle, entry.file_name(), AtFlags::SYMLINK_NOFOLLOW)
                .map_err(io)?;
            let kind = match FileType::from_raw_mode(stat.st_mode) {
                FileType::RegularFile => EntryKind::File,
                FileType::Directory if self.beneath.masks.ids.contains(&id(&stat)) => continue,
                FileType::Directory => EntryKind::Dir,
                _ => EntryKind::Other,
            };
            entries.push((name, kind));
        }
        entries.sort_by(|a, b| a.0.cmp(&b.0));
        Ok(entries)
    }

    /// The content of the regular file `relative` (not a symlink: a link, a FIFO, a socket or
    /// a device is refused without blocking), at most `limit` bytes (a larger file is
    /// [`ToolError::TooLarge`]). Blocking.
    pub fn read(&self, relative: &Path, limit: u64) -> Result<Vec<u8>, ToolError> {
        const TOOL: &str = "workspace";
        let path = self.beneath.root().join(relative);
        let file = self.beneath.open_no_links(
            TOOL,
            &path,
            OFlags::RDONLY | OFlags::NONBLOCK | OFlags::NOCTTY,
        )?;
        let io = |e| ToolError::io(TOOL, display(self.root(), &path), e);
        let meta = file.metadata().map_err(io)?;
        if !meta.is_file() {
            return Err(ToolError::NotAFile {
                tool: TOOL.to_owned(),
                path: display(self.root(), &path),
                kind: super::fs::kind_of(&meta.file_type()),
                expected: "regular files",
                action: "read",
            });
        }
        let too_large = |size| ToolError::TooLarge {
            tool: TOOL.to_owned(),
            path: PathBuf::from(display(self.root(), &path)),
            size,
            limit,
        };
        if meta.len() > limit {
            return Err(too_large(meta.len()));
        }
        let mut bytes = Vec::new();
        file.take(limit.saturating_add(1)).read_to_end(&mut bytes).map_err(io)?;
        if bytes.len() as u64 > limit {
            return Err(too_large(bytes.len() as u64));
        }
        Ok(bytes)
    }

    /// Writes `bytes` to the file `relative` (a plain relative path), creating its parent
    /// directories beneath the root; the file is replaced atomically, never opened (a symlink
    /// there is replaced, not followed). Blocking.
    pub fn write(&self, relative: &Path, bytes: &[u8]) -> Result<(), ToolError> {
        const TOOL: &str = "workspace";
        let target = self.beneath.root().join(relative);
        let (Some(dir), Some(_)) = (target.parent(), relative.file_name()) else {
            return Err(ToolError::invalid(TOOL, "the workspace root is not a file"));
        };
        self.beneath.create_dirs(TOOL, dir)?;
        super::fs::replace_file(TOOL, &self.beneath, &target, bytes, None, || Ok(()))
    }
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

fn id(stat: &rustix::fs::Stat) -> Id {
    #[allow(clippy::useless_conversion, reason = "the field types differ between targets")]
    (u64::from(stat.st_dev), u64::from(stat.st_ino))
}

fn fd_id(tool: &str, path: &Path, fd: BorrowedFd<'_>) -> Result<Id, ToolError> {
    rustix::fs::fstat(fd).map(|s| id(&s)).map_err(|e| ToolError::io(tool, path, e.into()))
}

/// Opens `relative` beneath `dir` with `flags` (plus `O_CLOEXEC`) and `resolve`, again on
/// `EAGAIN` or `EINTR` a few times.
fn open_at(
    dir: BorrowedFd<'_>,
    relative: &Path,
    flags: OFlags,
    resolve: ResolveFlags,
) -> Result<OwnedFd, Errno> {
    let mut attempts = 0;
    loop {
        match rustix::fs::openat2(dir, relative, flags | OFlags::CLOEXEC, Mode::empty(), resolve) {
            Err(Errno::AGAIN | Errno::INTR) if attempts < RETRIES => attempts += 1,
            result => return result,
        }
    }
}

/// The entry `name` of the directory `dir` itself, opened with `O_PATH | O_NOFOLLOW` (a
/// symlink is opened as the link, never followed) and resolved beneath `dir` with no link
/// allowed: for a walk that reads directories through handles, so a directory swapped for a
/// symlink while it runs is never entered.
pub(crate) fn open_entry(dir: BorrowedFd<'_>, name: &OsStr) -> Result<OwnedFd, Errno> {
    let flags = OFlags::PATH | OFlags::NOFOLLOW | OFlags::CLOEXEC;
    let mut attempts = 0;
    loop {
        match rustix::fs::openat2(dir, name, flags, Mode::empty(), RESOLVE_NO_LINKS) {
            Err(Errno::AGAIN | Errno::INTR) if attempts < RETRIES => attempts += 1,
            result => return result,
        }
    }
}

/// What a failed `openat2` means for a tool.
fn error(tool: &str, root: &Path, path: &Path, errno: Errno) -> ToolError {
    match errno {
        // A component left the root (`..`, an absolute symlink) or was a magic link (or, with
        // `RESOLVE_NO_SYMLINKS`, any link).
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
