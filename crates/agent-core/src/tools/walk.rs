//! The confined, `.gitignore`-aware walk behind `search` and `glob`, and their glob filter.
//!
//! The walk applies ignore rules as ripgrep does (the `ignore` crate's gitignore matcher, `.ignore`
//! before `.gitignore`, the deepest rule deciding): it always starts at the workspace root, so the
//! `.gitignore` and `.ignore` files of the root and of every directory on the way down apply,
//! and nothing above the workspace is read (no parent directories' ignore files, no global git
//! configuration, no `.git` directory, which could point anywhere). A `.gitignore` applies
//! without a `.git` directory. Outside the requested scope every directory is pruned before it
//! is read.
//!
//! No step can block: symlinks are never followed (a symlinked directory is not descended, a
//! symlinked file is not opened by `search`), hidden entries (a name starting with `.`) are
//! skipped unless the scope names them, and a directory whose ignore file is not a regular file
//! inside the workspace (a FIFO that would block a read of its rules, a device, a link out of
//! the workspace) is skipped and reported, never entered.
//!
//! The walk reads directories through handles, never by path: each directory is opened from
//! its parent's handle (`openat2` with `RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS`, `O_NOFOLLOW`),
//! starting at the handle on the workspace root, and its entries and ignore files are read from
//! that handle. So a directory swapped for a symlink (by a command of the same run) while the
//! walk runs is never entered, and no name or rule from outside the workspace is read. An ignore
//! file that is itself a symlink is read only when it resolves beneath the root. A tree deeper
//! than 256 directories is cut there, with a note.
//!
//! A masked directory (the run's data directory inside the workspace, see
//! [`ToolContext::with_masked`](super::ToolContext::with_masked)) is pruned by its device and
//! inode (of the opened handle) before it is read, silently; `search` opens each file it visits
//! beneath the root through the masks again.

use std::ffi::{OsStr, OsString};
use std::fs::{self, File};
use std::io::Read as _;
use std::os::fd::{AsFd as _, BorrowedFd};
use std::os::unix::ffi::OsStrExt as _;
use std::os::unix::fs::MetadataExt as _;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use globset::{GlobBuilder, GlobMatcher};
use ignore::Match;
use ignore::gitignore::{Gitignore, GitignoreBuilder};
use rustix::fs::{Dir, Mode, OFlags};
use rustix::io::Errno;

use super::ToolError;
use super::beneath::{Beneath, Masks, open_entry};
use super::fs::kind_of;
use super::path::{display, resolve};

/// How many walk problems are reported by name; the rest are counted.
const MAX_NOTES: usize = 20;

/// The deepest directory below the workspace root that a walk enters.
const MAX_WALK_DEPTH: usize = 256;

/// The largest ignore file read: a larger one skips its directory.
const MAX_IGNORE_BYTES: u64 = 4 * 1024 * 1024;

/// What a walk covers: a directory or one file of the workspace.
#[derive(Debug)]
pub(super) struct Scope {
    /// The canonical workspace root.
    root: PathBuf,
    /// The canonical directory or file that was asked for.
    target: PathBuf,
    /// Whether `target` is a directory.
    is_dir: bool,
    /// The handle on the root the walk starts from, with the masked directories.
    beneath: Beneath,
}

/// What went wrong on the way, for the tool's output: entries that were skipped and why.
#[derive(Debug, Default)]
pub(super) struct Notes {
    shown: Vec<String>,
    more: usize,
}

/// A glob that file paths are matched against, as `glob` and `search`'s `glob` take it.
///
/// A pattern without `/` matches a file's name at any depth (`*.rs`); one with `/` matches the
/// path relative to the scope's directory (`src/**/*.rs`, `./*.rs` for the top level only). `*` and `?` stay within one name,
/// `**` crosses directories.
#[derive(Debug)]
pub(super) struct GlobFilter {
    matcher: GlobMatcher,
    by_name: bool,
}

impl Scope {
    /// The scope `requested` (default: the whole workspace), resolved inside `root` like every
    /// tool's path: it must exist and be a directory or a regular file. Its type is read from
    /// a handle opened beneath the root (one in a masked directory is refused).
    ///
    /// Blocking: call it on the blocking pool.
    pub(super) fn new(
        tool: &str,
        root: &Path,
        requested: Option<&str>,
        masks: Masks,
    ) -> Result<Self, ToolError> {
        let target = resolve(root, tool, requested.unwrap_or("."))?;
        let beneath = Beneath::new(tool, root, masks)?;
        let meta = beneath
            .open(tool, &target, OFlags::PATH)?
            .metadata()
            .map_err(|err| ToolError::io(tool, &target, err))?;
        if !meta.is_dir() && !meta.is_file() {
            return Err(ToolError::NotAFile {
                tool: tool.to_owned(),
                path: display(root, &target),
                kind: kind_of(&meta.file_type()),
                expected: "regular files and directories",
                action: "searched",
            });
        }
        Ok(Self { root: root.to_path_buf(), target, is_dir: meta.is_dir(), beneath })
    }

    /// The canonical directory or file that was asked for.
    pub(super) fn target(&self) -> &Path {
        &self.target
    }

    /// The directory that relative glob patterns start from: the target, or a file's parent.
    pub(super) fn base(&self) -> &Path {
        match self.target.parent() {
            Some(parent) if !self.is_dir => parent,
            _ => &self.target,
        }
    }

    /// `path` as the workspace shows it.
    pub(super) fn show(&self, path: &Path) -> String {
        display(&self.root, path)
    }

    /// Walks the scope in a stable order (depth first, sorted by name in each directory) and
    /// calls `visit` with each regular file or symlink (never followed) that no ignore rule
    /// excludes and its type (of the entry itself, not of a link's target). Directories, FIFOs,
    /// sockets and devices are not visited. Problems (unreadable directories, bad ignore files)
    /// are collected in the returned [`Notes`] rather than failing the walk.
    ///
    /// Stops with [`ToolError::Timeout`] once `limit` of real time has passed (the tool limit,
    /// [`ToolContext::tool_timeout`](super::ToolContext::tool_timeout)), so a walk over a huge
    /// tree does not keep a blocking thread busy after its call was given up.
    ///
    /// Blocking: call it on the blocking pool.
    pub(super) fn walk(
        &self,
        tool: &str,
        limit: Duration,
        mut visit: impl FnMut(&Path, &fs::FileType),
    ) -> Result<Notes, ToolError> {
        let mut walk = Walk {
            scope: self,
            tool,
            started: Instant::now(),
            limit,
            notes: Notes::default(),
            rules: Vec::new(),
            visit: &mut visit,
        };
        let root = self.beneath.handle();
        let names =
            read_names(root).map_err(|errno| ToolError::io(tool, &self.root, errno.into()))?;
        let rules = walk.rules_of(root, &self.root, &names).map_err(|problem| {
            ToolError::failed(
                tool,
                format!(
                    "the workspace root's {problem}, so its ignore rules cannot be read; \
                     replace it with a regular file or remove it"
                ),
            )
        })?;
        walk.dir(root, &self.root, &names, rules, 0)?;
        Ok(walk.notes)
    }
}

/// One walk in progress.
struct Walk<'a, F> {
    scope: &'a Scope,
    tool: &'a str,
    started: Instant,
    limit: Duration,
    notes: Notes,
    /// The ignore rules of the directories from the root down to the current one.
    rules: Vec<Rules>,
    visit: &'a mut F,
}

/// The ignore rules one directory adds.
struct Rules {
    /// From its `.ignore`, which takes precedence over every `.gitignore`.
    ignore: Option<Gitignore>,
    /// From its `.gitignore`.
    gitignore: Option<Gitignore>,
    /// Whether it holds a `.git`: the `.gitignore` files above it do not apply below it.
    has_git: bool,
}

impl<F: FnMut(&Path, &fs::FileType)> Walk<'_, F> {
    /// Walks the entries `names` of the directory `fd` (at `path`) with its `rules`.
    fn dir(
        &mut self,
        fd: BorrowedFd<'_>,
        path: &Path,
        names: &[OsString],
        rules: Rules,
        depth: usize,
    ) -> Result<(), ToolError> {
        self.rules.push(rules);
        let walked = self.entries(fd, path, names, depth);
        self.rules.pop();
        walked
    }

    fn entries(
        &mut self,
        fd: BorrowedFd<'_>,
        path: &Path,
        names: &[OsString],
        depth: usize,
    ) -> Result<(), ToolError> {
        for name in names {
            if self.started.elapsed() >= self.limit {
                return Err(ToolError::Timeout {
                    tool: self.tool.to_owned(),
                    after_ms: u64::try_from(self.limit.as_millis()).unwrap_or(u64::MAX),
                });
            }
            let child = path.join(name);
            let target = &self.scope.target;
            let on_the_way = target.starts_with(&child);
            if !on_the_way && !child.starts_with(target) {
                continue;
            }
            let is_hidden = name.as_bytes().first() == Some(&b'.');
            if is_hidden && !on_the_way {
                continue;
            }
            // The entry itself, never a link's target; gone since it was listed: not there.
            let entry = match open_entry(fd, name) {
                Ok(entry) => File::from(entry),
                Err(Errno::NOENT) => continue,
                Err(errno) => {
                    self.note(&child, &errno.to_string());
                    continue;
                }
            };
            let meta = match entry.metadata() {
                Ok(meta) => meta,
                Err(err) => {
                    self.note(&child, &err.to_string());
                    continue;
                }
            };
            let file_type = meta.file_type();
            if file_type.is_dir() && self.scope.beneath.masks().is_masked(meta.dev(), meta.ino()) {
                continue;
            }
            if self.ignored(&child, file_type.is_dir()) {
                continue;
            }
            if file_type.is_dir() {
                self.enter(entry.as_fd(), &child, depth + 1)?;
            } else if file_type.is_file() || file_type.is_symlink() {
                (self.visit)(&child, &file_type);
            }
        }
        Ok(())
    }

    /// Enters the directory `fd` (an `O_PATH` handle opened from its parent's) at `path`.
    fn enter(&mut self, fd: BorrowedFd<'_>, path: &Path, depth: usize) -> Result<(), ToolError> {
        if depth > MAX_WALK_DEPTH {
            self.note(path, &format!("deeper than {MAX_WALK_DEPTH} directories; not entered"));
            return Ok(());
        }
        let names = match read_names(fd) {
            Ok(names) => names,
            Err(errno) => {
                self.note(path, &errno.to_string());
                return Ok(());
            }
        };
        let rules = match self.rules_of(fd, path, &names) {
            Ok(rules) => rules,
            Err(problem) => {
                tracing::debug!(%problem, "directory skipped");
                self.note(path, &problem);
                return Ok(());
            }
        };
        self.dir(fd, path, &names, rules, depth)
    }

    /// The ignore rules of the directory `fd` (at `path`, holding `names`), or why its ignore
    /// files cannot be read safely.
    fn rules_of(
        &mut self,
        fd: BorrowedFd<'_>,
        path: &Path,
        names: &[OsString],
    ) -> Result<Rules, String> {
        let has =
            |name: &str| names.binary_search_by(|n| n.as_os_str().cmp(OsStr::new(name))).is_ok();
        let mut rules = Rules { ignore: None, gitignore: None, has_git: has(".git") };
        for name in [".gitignore", ".ignore"] {
            if !has(name) {
                continue;
            }
            let Some(text) = self.read_ignore_file(fd, path, name)? else { continue };
            let matcher = self.matcher(path, name, &text);
            if name == ".ignore" {
                rules.ignore = Some(matcher);
            } else {
                rules.gitignore = Some(matcher);
            }
        }
        Ok(rules)
    }

    /// The content of the ignore file `name` of the directory `fd` (at `path`): read from the
    /// handle when it is a regular file; when it is a symlink, read only if it resolves beneath
    /// the root to a regular file outside the masked directories (a broken link is missing).
    /// Anything else is a problem that skips the directory. Never blocks.
    fn read_ignore_file(
        &self,
        fd: BorrowedFd<'_>,
        path: &Path,
        name: &str,
    ) -> Result<Option<Vec<u8>>, String> {
        let cannot = |err: &dyn std::fmt::Display| format!("`{name}` cannot be read ({err})");
        let entry = match open_entry(fd, OsStr::new(name)) {
            Ok(entry) => File::from(entry),
            Err(Errno::NOENT) => return Ok(None),
            Err(errno) => return Err(cannot(&errno)),
        };
        let meta = entry.metadata().map_err(|err| cannot(&err))?;
        let flags = OFlags::RDONLY | OFlags::NONBLOCK | OFlags::NOCTTY;
        let file = if meta.is_file() {
            let flags = flags | OFlags::NOFOLLOW | OFlags::CLOEXEC;
            File::from(rustix::fs::openat(fd, name, flags, Mode::empty()).map_err(|e| cannot(&e))?)
        } else if meta.file_type().is_symlink() {
            let beneath = &self.scope.beneath;
            let linked = path.join(name);
            let open = |flags| match beneath.open(self.tool, &linked, flags) {
                Ok(file) => Ok(Some(file)),
                Err(ToolError::PathOutsideWorkspace { .. }) => {
                    Err(format!("`{name}` links out of the workspace"))
                }
                Err(ToolError::Masked { .. }) => {
                    Err(format!("`{name}` links into a masked directory"))
                }
                Err(ToolError::Io { source, .. })
                    if source.kind() == std::io::ErrorKind::NotFound =>
                {
                    Ok(None)
                }
                Err(err) => Err(cannot(&err)),
            };
            // Its type first (an `O_PATH` open has no effect), then the file itself.
            let Some(target) = open(OFlags::PATH)? else { return Ok(None) };
            let kind = target.metadata().map_err(|err| cannot(&err))?.file_type();
            if !kind.is_file() {
                return Err(format!("`{name}` links to {}, not a regular file", kind_of(&kind)));
            }
            let Some(file) = open(flags)? else { return Ok(None) };
            file
        } else {
            return Err(format!("`{name}` is {}, not a regular file", kind_of(&meta.file_type())));
        };
        let opened = file.metadata().map_err(|err| cannot(&err))?;
        if !opened.is_file() {
            return Err(format!(
                "`{name}` is {}, not a regular file",
                kind_of(&opened.file_type())
            ));
        }
        let mut text = Vec::new();
        file.take(MAX_IGNORE_BYTES + 1).read_to_end(&mut text).map_err(|err| cannot(&err))?;
        if text.len() as u64 > MAX_IGNORE_BYTES {
            return Err(format!("`{name}` is larger than {} MiB", MAX_IGNORE_BYTES >> 20));
        }
        Ok(Some(text))
    }

    /// The rules of the ignore file `name` of `dir`, read as git reads them; a line that does
    /// not parse is reported and left out.
    fn matcher(&mut self, dir: &Path, name: &str, text: &[u8]) -> Gitignore {
        let file = dir.join(name);
        let mut builder = GitignoreBuilder::new(dir);
        let text = String::from_utf8_lossy(text);
        let text = text.strip_prefix('\u{feff}').unwrap_or(&text);
        for (number, line) in text.lines().enumerate() {
            if let Err(err) = builder.add_line(Some(file.clone()), line) {
                self.note(&file, &format!("line {}: {err}", number + 1));
            }
        }
        builder.build().unwrap_or_else(|err| {
            self.note(&file, &err.to_string());
            Gitignore::empty()
        })
    }

    /// Whether the rules of the directories walked so far ignore `path`: the deepest rule
    /// that matches decides, `.ignore` files before `.gitignore` files (as ripgrep does).
    fn ignored(&self, path: &Path, is_dir: bool) -> bool {
        let decide = |matcher: Option<&Gitignore>| match matcher?.matched(path, is_dir) {
            Match::None => None,
            Match::Ignore(_) => Some(true),
            Match::Whitelist(_) => Some(false),
        };
        let (mut by_ignore, mut by_git, mut saw_git) = (None, None, false);
        for rules in self.rules.iter().rev() {
            by_ignore = by_ignore.or_else(|| decide(rules.ignore.as_ref()));
            if !saw_git {
                by_git = by_git.or_else(|| decide(rules.gitignore.as_ref()));
            }
            saw_git |= rules.has_git;
        }
        by_ignore.or(by_git).unwrap_or(false)
    }

    fn note(&mut self, path: &Path, problem: &str) {
        tracing::debug!(tool = self.tool, path = %path.display(), problem, "walk problem");
        self.notes.push(format!("{}: {problem}", self.scope.show(path)));
    }
}

/// The names in the directory `fd` (any handle on it, `O_PATH` too), sorted, without `.` and
/// `..`. Reads from the handle, never by path.
fn read_names(fd: BorrowedFd<'_>) -> Result<Vec<OsString>, Errno> {
    let flags = OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NONBLOCK | OFlags::CLOEXEC;
    let readable = rustix::fs::openat(fd, ".", flags, Mode::empty())?;
    let mut names = Vec::new();
    for entry in Dir::new(readable)? {
        let entry = entry?;
        let raw = entry.file_name().to_bytes();
        if raw != b"." && raw != b".." {
            names.push(OsStr::from_bytes(raw).to_owned());
        }
    }
    names.sort();
    Ok(names)
}

impl Notes {
    /// Records a problem.
    pub(super) fn push(&mut self, note: String) {
        if self.shown.len() < MAX_NOTES {
            self.shown.push(note);
        } else {
            self.more += 1;
        }
    }

    /// The problems, each as `skipped: ...`, with a count of those not named.
    pub(super) fn lines(&self) -> Vec<String> {
        let mut lines: Vec<String> = self.shown.iter().map(|n| format!("skipped: {n}")).collect();
        if self.more > 0 {
            lines.push(format!("skipped: {} more problems not shown", self.more));
        }
        lines
    }
}

impl GlobFilter {
    /// The filter for `pattern`, given in the argument `argument` of `tool`.
    ///
    /// A pattern that could leave the scope (absolute, or with a `..` component) is refused
    /// with [`ToolError::InvalidArguments`]; choose the directory with `path` instead. One that
    /// does not parse is [`ToolError::InvalidPattern`].
    pub(super) fn new(
        tool: &str,
        argument: &'static str,
        pattern: &str,
    ) -> Result<Self, ToolError> {
        let relative = pattern.strip_prefix("./").unwrap_or(pattern);
        if relative.starts_with('/') || relative.split('/').any(|part| part == "..") {
            return Err(ToolError::invalid(
                tool,
                format!(
                    "`{argument}`: {pattern:?} must be relative to the searched directory, \
                     without a leading `/` or a `..`; choose the directory with `path`"
                ),
            ));
        }
        let matcher = GlobBuilder::new(relative)
            .literal_separator(true)
            .backslash_escape(true)
            .build()
            .map_err(|err| ToolError::InvalidPattern {
                tool: tool.into(),
                argument,
                pattern: pattern.into(),
                kind: "glob",
                reason: err.kind().to_string().into(),
            })?
            .compile_matcher();
        // `./*.rs` is a path pattern (top level only), `*.rs` a name pattern (any depth).
        Ok(Self { matcher, by_name: !pattern.contains('/') })
    }

    /// Whether the file at `path` (under `base`) matches.
    pub(super) fn matches(&self, base: &Path, path: &Path) -> bool {
        if self.by_name {
            return path.file_name().is_some_and(|name| self.matcher.is_match(name));
        }
        path.strip_prefix(base).is_ok_and(|relative| self.matcher.is_match(relative))
    }
}
