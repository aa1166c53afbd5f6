//! The confined, `.gitignore`-aware walk behind `search` and `glob`, and their glob filter.
//!
//! The walk is the `ignore` crate's (ripgrep's): it always starts at the workspace root, so the
//! `.gitignore` and `.ignore` files of the root and of every directory on the way down apply,
//! and nothing above the workspace is read (no parent directories' ignore files, no global git
//! configuration, no `.git` directory, which could point anywhere). A `.gitignore` applies
//! without a `.git` directory. Outside the requested scope every directory is pruned before it
//! is read.
//!
//! No step can block: symlinks are never followed (a symlinked directory is not descended, a
//! symlinked file is not opened by `search`), hidden entries (a name starting with `.`) are
//! skipped unless the scope names them, and a directory whose ignore file is not a regular file
//! inside the workspace (a FIFO that the walker would block on when reading its rules, a device,
//! a link out of the workspace) is skipped and reported, never entered.
//!
//! A masked directory (the run's data directory inside the workspace, see
//! [`ToolContext::with_masked`](super::ToolContext::with_masked)) is pruned by its device and
//! inode before it is read, silently; `search` opens each file it visits beneath the root
//! through the masks again, so a directory renamed or swapped for a link while the walk runs
//! does not lead it in.

use std::fs;
use std::os::unix::fs::MetadataExt as _;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use globset::{GlobBuilder, GlobMatcher};
use ignore::{DirEntry, WalkBuilder};

use super::ToolError;
use super::beneath::Masks;
use super::fs::kind_of;
use super::path::{display, resolve};

/// The ignore files the walker reads in each directory it enters.
const IGNORE_FILES: [&str; 2] = [".gitignore", ".ignore"];

/// How many walk problems are reported by name; the rest are counted.
const MAX_NOTES: usize = 20;

/// What a walk covers: a directory or one file of the workspace.
#[derive(Debug)]
pub(super) struct Scope {
    /// The canonical workspace root.
    root: PathBuf,
    /// The canonical directory or file that was asked for.
    target: PathBuf,
    /// Whether `target` is a directory.
    is_dir: bool,
    /// The masked directories, pruned from the walk.
    masks: Masks,
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
    /// tool's path: it must exist and be a directory or a regular file.
    ///
    /// Blocking: call it on the blocking pool.
    pub(super) fn new(
        tool: &str,
        root: &Path,
        requested: Option<&str>,
        masks: Masks,
    ) -> Result<Self, ToolError> {
        let target = resolve(root, tool, requested.unwrap_or("."))?;
        let meta = fs::metadata(&target).map_err(|err| ToolError::io(tool, &target, err))?;
        if !meta.is_dir() && !meta.is_file() {
            return Err(ToolError::NotAFile {
                tool: tool.to_owned(),
                path: display(root, &target),
                kind: kind_of(&meta.file_type()),
                expected: "regular files and directories",
                action: "searched",
            });
        }
        Ok(Self { root: root.to_path_buf(), target, is_dir: meta.is_dir(), masks })
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

    /// Walks the scope in a stable order (sorted by name in each directory) and calls `visit`
    /// with each regular file or symlink (never followed) that no ignore rule excludes and its
    /// type (of the entry itself, not of a link's target). Directories, FIFOs, sockets and devices are not
    /// visited. Problems (unreadable directories, bad ignore files) are collected in the
    /// returned [`Notes`] rather than failing the walk.
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
        let started = Instant::now();
        // The walker reads the root's ignore files without asking the filter.
        if let Some(problem) = bad_ignore_file(&self.root, &self.root) {
            return Err(ToolError::failed(
                tool,
                format!(
                    "the workspace root's {problem}, so its ignore rules cannot be read; \
                     replace it with a regular file or remove it"
                ),
            ));
        }
        let notes = Arc::new(Mutex::new(Notes::default()));
        let filter = {
            let notes = Arc::clone(&notes);
            let root = self.root.clone();
            let target = self.target.clone();
            let masks = self.masks.clone();
            move |entry: &DirEntry| keep(&root, &target, &masks, entry, &notes)
        };
        let walker = WalkBuilder::new(&self.root)
            .standard_filters(true)
            // Nothing above the workspace and nothing a `.git` could point to is read.
            .parents(false)
            .git_global(false)
            .git_exclude(false)
            .require_git(false)
            // `keep` skips hidden entries itself, except those the scope names.
            .hidden(false)
            .follow_links(false)
            .sort_by_file_name(|a, b| a.cmp(b))
            .filter_entry(filter)
            .build();
        for entry in walker {
            if started.elapsed() >= limit {
                return Err(ToolError::Timeout {
                    tool: tool.to_owned(),
                    after_ms: u64::try_from(limit.as_millis()).unwrap_or(u64::MAX),
                });
            }
            let entry = match entry {
                Ok(entry) => entry,
                Err(err) => {
                    tracing::debug!(tool, %err, "walk problem");
                    lock(&notes).push(err.to_string());
                    continue;
                }
            };
            if entry.depth() == 0 {
                continue;
            }
            let Some(file_type) = entry.file_type() else { continue };
            if !(file_type.is_file() || file_type.is_symlink()) {
                continue;
            }
            visit(entry.path(), &file_type);
        }
        let notes = std::mem::take(&mut *lock(&notes));
        Ok(notes)
    }
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

/// The walk's filter: whether to keep `entry` (and, for a directory, descend into it).
fn keep(root: &Path, target: &Path, masks: &Masks, entry: &DirEntry, notes: &Mutex<Notes>) -> bool {
    let path = entry.path();
    if entry.file_type().is_some_and(|t| t.is_dir())
        && entry.metadata().is_ok_and(|m| masks.is_masked(m.dev(), m.ino()))
    {
        return false;
    }
    let on_the_way = target.starts_with(path);
    if !on_the_way && !path.starts_with(target) {
        return false;
    }
    let is_hidden = entry.file_name().as_encoded_bytes().first() == Some(&b'.');
    if is_hidden && !on_the_way {
        return false;
    }
    if entry.file_type().is_some_and(|t| t.is_dir())
        && let Some(problem) = bad_ignore_file(root, path)
    {
        tracing::debug!(%problem, "directory skipped");
        lock(notes).push(format!("{}: {problem}", display(root, path)));
        return false;
    }
    true
}

/// Why an ignore file of `dir` cannot be read safely, if it cannot: it exists and is not a
/// regular file, or is a symlink to something other than a regular file in the workspace.
/// Checked without opening anything.
fn bad_ignore_file(root: &Path, dir: &Path) -> Option<String> {
    for name in IGNORE_FILES {
        let path = dir.join(name);
        let Ok(meta) = fs::symlink_metadata(&path) else { continue };
        if meta.is_file() {
            continue;
        }
        if meta.file_type().is_symlink() {
            let inside = fs::canonicalize(&path).is_ok_and(|real| real.starts_with(root));
            match fs::metadata(&path) {
                Ok(target) if target.is_file() && inside => continue,
                Ok(target) if target.is_file() => {
                    return Some(format!("`{name}` links out of the workspace"));
                }
                Ok(target) => {
                    return Some(format!(
                        "`{name}` links to {}, not a regular file",
                        kind_of(&target.file_type())
                    ));
                }
                // A broken link is read as a missing file: the walker reports it, nothing blocks.
                Err(_) => continue,
            }
        }
        return Some(format!("`{name}` is {}, not a regular file", kind_of(&meta.file_type())));
    }
    None
}

fn lock(notes: &Mutex<Notes>) -> std::sync::MutexGuard<'_, Notes> {
    notes.lock().unwrap_or_else(PoisonError::into_inner)
}
