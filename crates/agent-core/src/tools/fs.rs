//! The file tools: `read_file`, `write_file` and `list_dir`, confined to the workspace.
//!
//! No call can block indefinitely: only regular files are read or replaced and only
//! directories listed. A FIFO, socket or device is refused with [`ToolError::NotAFile`]
//! (permanent) before it is opened, and every open uses `O_NONBLOCK` (and `O_DIRECTORY` where
//! a directory is meant) with the type checked again on the opened handle, so a path swapped
//! for a FIFO between the check and the open still cannot hang the worker thread.
//!
//! What is read, listed or written is opened beneath the workspace root with `openat2`
//! (`RESOLVE_BENEATH | RESOLVE_NO_MAGICLINKS`, see `beneath.rs`), so a symlink created or
//! swapped while a call runs cannot lead it out of the workspace: `list_dir` reads the type and
//! the entries of the directory from that handle, never by path.

use std::ffi::OsStr;
use std::fs::{self, File};
use std::io::{ErrorKind, Read as _, Write as _};
use std::os::fd::AsFd as _;
use std::os::unix::ffi::OsStrExt as _;
use std::os::unix::fs::FileTypeExt as _;
use std::path::Path;

use async_trait::async_trait;
use serde::Deserialize;
use serde::de::DeserializeOwned;
use serde_json::{Value, json};

use rustix::fs::OFlags;

use super::beneath::{Beneath, Masks};
use super::path::{display, resolve};
use super::{Tool, ToolContext, ToolError, ToolOutput};

/// The largest file `read_file` returns: 1 MiB.
pub const MAX_READ_BYTES: u64 = 1024 * 1024;

/// `read_file { path }`: the UTF-8 content of a file in the workspace. No side effects.
///
/// Refuses directories, FIFOs, sockets and devices ([`ToolError::NotAFile`]: reading them could
/// block forever), files over [`MAX_READ_BYTES`] ([`ToolError::TooLarge`]) and files that are
/// not UTF-8 text ([`ToolError::Failed`]). `data` is `{"path", "bytes"}`.
#[derive(Debug)]
pub struct ReadFile {
    schema: Value,
}

/// `write_file { path, content }`: writes `content` to a file in the workspace, creating parent
/// directories. Has side effects.
///
/// The write is atomic: the content goes to a temporary file in the target's directory, is
/// flushed to disk, and is renamed over the target, so readers see the old or the new content,
/// never a mix. An existing file keeps its permissions. A target that is a directory, FIFO,
/// socket or device is refused ([`ToolError::NotAFile`]); it is never opened. `data` is
/// `{"path", "bytes"}`.
#[derive(Debug)]
pub struct WriteFile {
    schema: Value,
}

/// `list_dir { path? }`: the sorted entries of a workspace directory (default `.`), directories
/// with a trailing `/`. Symlinks are listed by name without following them. No side effects.
/// `output` is one entry per line; `data` is `{"path", "entries"}`.
#[derive(Debug)]
pub struct ListDir {
    schema: Value,
}

impl ReadFile {
    /// The tool's name.
    pub const NAME: &'static str = "read_file";

    /// The tool, with its argument schema.
    pub fn new() -> Self {
        Self {
            schema: json!({
                "type": "object",
                "properties": {
                    "path": {
                        "type": "string",
                        "minLength": 1,
                        "description": "file path relative to the workspace root",
                    },
                },
                "required": ["path"],
                "additionalProperties": false,
            }),
        }
    }
}

impl WriteFile {
    /// The tool's name.
    pub const NAME: &'static str = "write_file";

    /// The tool, with its argument schema.
    pub fn new() -> Self {
        Self {
            schema: json!({
                "type": "object",
                "properties": {
                    "path": {
                        "type": "string",
                        "minLength": 1,
                        "description": "file path relative to the workspace root",
                    },
                    "content": {
                        "type": "string",
                        "description": "the complete new content of the file",
                    },
                },
                "required": ["path", "content"],
                "additionalProperties": false,
            }),
        }
    }
}

impl ListDir {
    /// The tool's name.
    pub const NAME: &'static str = "list_dir";

    /// The tool, with its argument schema.
    pub fn new() -> Self {
        Self {
            schema: json!({
                "type": "object",
                "properties": {
                    "path": {
                        "type": "string",
                        "minLength": 1,
                        "description": "directory path relative to the workspace root; default \".\"",
                    },
                },
                "additionalProperties": false,
            }),
        }
    }
}

impl Default for ReadFile {
    fn default() -> Self {
        Self::new()
    }
}

impl Default for WriteFile {
    fn default() -> Self {
        Self::new()
    }
}

impl Default for ListDir {
    fn default() -> Self {
        Self::new()
    }
}

#[async_trait]
impl Tool for ReadFile {
    fn name(&self) -> &str {
        Self::NAME
    }

    fn description(&self) -> &str {
        "Read a UTF-8 text file inside the workspace (at most 1 MiB) and return its content."
    }

    fn schema(&self) -> &Value {
        &self.schema
    }

    fn has_side_effects(&self) -> bool {
        false
    }

    async fn call(&self, ctx: &ToolContext, args: Value) -> Result<ToolOutput, ToolError> {
        let PathArgs { path } = parse(Self::NAME, args)?;
        let ws = Workspace::of(ctx);
        blocking(Self::NAME, move || read_file(&ws.open(Self::NAME)?, &path)).await
    }
}

#[async_trait]
impl Tool for WriteFile {
    fn name(&self) -> &str {
        Self::NAME
    }

    fn description(&self) -> &str {
        "Write text to a file inside the workspace, replacing it atomically and creating parent \
         directories; returns the number of bytes written."
    }

    fn schema(&self) -> &Value {
        &self.schema
    }

    fn has_side_effects(&self) -> bool {
        true
    }

    /// Writing the same content again leaves the same file.
    fn idempotent(&self) -> bool {
        true
    }

    async fn call(&self, ctx: &ToolContext, args: Value) -> Result<ToolOutput, ToolError> {
        let WriteArgs { path, content } = parse(Self::NAME, args)?;
        let ws = Workspace::of(ctx);
        blocking(Self::NAME, move || write_file(&ws.open(Self::NAME)?, &path, &content)).await
    }
}

#[async_trait]
impl Tool for ListDir {
    fn name(&self) -> &str {
        Self::NAME
    }

    fn description(&self) -> &str {
        "List a directory inside the workspace (default: the root), one sorted entry per line, \
         directories ending in `/`."
    }

    fn schema(&self) -> &Value {
        &self.schema
    }

    fn has_side_effects(&self) -> bool {
        false
    }

    async fn call(&self, ctx: &ToolContext, args: Value) -> Result<ToolOutput, ToolError> {
        let ListArgs { path } = parse(Self::NAME, args)?;
        let ws = Workspace::of(ctx);
        blocking(Self::NAME, move || list_dir(&ws.open(Self::NAME)?, &path)).await
    }
}

/// What a file tool's blocking work needs of its context: the workspace root and the masked
/// directories, moved onto the blocking pool and opened there ([`Workspace::open`]).
pub(super) struct Workspace {
    root: std::path::PathBuf,
    masked: Vec<super::beneath::MaskedDir>,
}

impl Workspace {
    /// `ctx`'s workspace and masked directories.
    pub(super) fn of(ctx: &ToolContext) -> Self {
        Self { root: ctx.workspace().to_path_buf(), masked: ctx.masked_dirs().to_vec() }
    }

    /// A handle on the root, with the masked directories' identities now. Blocking.
    pub(super) fn open(&self, tool: &str) -> Result<Beneath, ToolError> {
        Beneath::new(tool, &self.root, Masks::now(&self.masked))
    }
}

/// Parses a tool's arguments, for calls that bypass the registry's schema check.
pub(super) fn parse<T: DeserializeOwned>(tool: &str, args: Value) -> Result<T, ToolError> {
    serde_json::from_value(args)
        .map_err(|err| ToolError::invalid(tool, format!("arguments: {err}")))
}

/// Runs blocking work on tokio's blocking pool (which also keeps paused test time from
/// jumping ahead while it runs).
pub(super) async fn blocking<T, F>(tool: &str, work: F) -> Result<T, ToolError>
where
    T: Send + 'static,
    F: FnOnce() -> Result<T, ToolError> + Send + 'static,
{
    tokio::task::spawn_blocking(work).await.map_err(|err| {
        ToolError::failed(
            tool,
            format!("the tool's worker stopped before finishing ({err}); retry the call"),
        )
    })?
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct PathArgs {
    path: String,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct WriteArgs {
    path: String,
    content: String,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct ListArgs {
    #[serde(default = "dot")]
    path: String,
}

fn dot() -> String {
    ".".to_owned()
}

fn read_file(ws: &Beneath, requested: &str) -> Result<ToolOutput, ToolError> {
    const TOOL: &str = ReadFile::NAME;
    let root = ws.root();
    let path = resolve(root, TOOL, requested)?;
    let (bytes, _) = read_regular(TOOL, ws, &path, requested)?;
    let size = bytes.len() as u64;
    let content = String::from_utf8(bytes).map_err(|err| {
        let offset = err.utf8_error().valid_up_to();
        ToolError::failed(
            TOOL,
            format!(
                "`{requested}` is not UTF-8 text (invalid byte at offset {offset}); \
                 read_file only returns text"
            ),
        )
    })?;
    Ok(ToolOutput {
        success: true,
        data: json!({ "path": display(root, &path), "bytes": size }),
        output: content,
    })
}

/// The bytes of the regular file at `path` (resolved from `requested`), at most
/// [`MAX_READ_BYTES`], and the metadata of the handle they were read from.
///
/// A directory is refused with [`ToolError::Failed`], a FIFO, socket or device with
/// [`ToolError::NotAFile`] (before opening, and again on the handle: the path may have been
/// replaced in between; the open uses `O_NONBLOCK`, so it cannot block), a larger file with
/// [`ToolError::TooLarge`].
pub(super) fn read_regular(
    tool: &str,
    ws: &Beneath,
    path: &Path,
    requested: &str,
) -> Result<(Vec<u8>, fs::Metadata), ToolError> {
    let root = ws.root();
    let io = |err| ToolError::io(tool, path, err);
    let is_dir = || {
        ToolError::failed(
            tool,
            format!("`{requested}` is a directory; use list_dir to see its entries"),
        )
    };
    // Refused before opening (opening a device can have effects of its own), and again on the
    // handle: the path may have been replaced in between.
    let before = fs::metadata(path).map_err(io)?;
    if before.is_dir() {
        return Err(is_dir());
    }
    not_a_regular_file(tool, root, path, &before.file_type(), "read")?;
    let file = ws.open(tool, path, OFlags::RDONLY | OFlags::NONBLOCK | OFlags::NOCTTY)?;
    let meta = file.metadata().map_err(io)?;
    if meta.is_dir() {
        return Err(is_dir());
    }
    not_a_regular_file(tool, root, path, &meta.file_type(), "read")?;
    let too_large = |size| ToolError::TooLarge {
        tool: tool.to_owned(),
        path: path.to_path_buf(),
        size,
        limit: MAX_READ_BYTES,
    };
    if meta.len() > MAX_READ_BYTES {
        return Err(too_large(meta.len()));
    }
    // The file may grow between the size check and the read: read at most one byte too many.
    let mut bytes = Vec::new();
    file.take(MAX_READ_BYTES + 1).read_to_end(&mut bytes).map_err(io)?;
    let size = bytes.len() as u64;
    if size > MAX_READ_BYTES {
        return Err(too_large(size));
    }
    Ok((bytes, meta))
}

fn write_file(ws: &Beneath, requested: &str, content: &str) -> Result<ToolOutput, ToolError> {
    const TOOL: &str = WriteFile::NAME;
    let root = ws.root();
    let target = resolve(root, TOOL, requested)?;
    let dir = match target.parent() {
        Some(dir) if target != root => dir,
        _ => {
            return Err(ToolError::failed(
                TOOL,
                format!("`{requested}` is the workspace root; give the path of a file"),
            ));
        }
    };
    ws.create_dirs(TOOL, dir)?;
    // `target` is canonical when it exists, so this is the file itself; a dangling symlink is
    // replaced by the rename like a missing file. The target is never opened.
    let previous = match fs::symlink_metadata(&target) {
        Ok(meta) if meta.is_dir() => {
            return Err(ToolError::failed(
                TOOL,
                format!("`{requested}` is a directory; give the path of a file"),
            ));
        }
        Ok(meta) if meta.file_type().is_symlink() => None,
        Ok(meta) => {
            not_a_regular_file(TOOL, root, &target, &meta.file_type(), "written")?;
            Some(meta.permissions())
        }
        Err(err) if err.kind() == ErrorKind::NotFound => None,
        Err(err) => return Err(ToolError::io(TOOL, &target, err)),
    };
    replace_file(TOOL, ws, &target, content.as_bytes(), previous, || Ok(()))?;
    let bytes = content.len();
    let shown = display(root, &target);
    Ok(ToolOutput {
        success: true,
        output: format!("wrote {bytes} bytes to {shown}"),
        data: json!({ "path": shown, "bytes": bytes }),
    })
}

/// Replaces `target` (in an existing directory of the workspace) with `content` atomically: a
/// temporary file in the same directory, flushed to disk and given `permissions`, is renamed
/// over it, and the directory is synced. The directory is opened beneath the root (a symlink
/// swapped in cannot lead out, a masked directory is refused) and the file and rename are
/// relative to that handle.
/// `before_rename` runs last before the rename and may still refuse (the temporary file is
/// removed then). The target is never opened.
pub(super) fn replace_file(
    tool: &str,
    ws: &Beneath,
    target: &Path,
    content: &[u8],
    permissions: Option<fs::Permissions>,
    before_rename: impl FnOnce() -> Result<(), ToolError>,
) -> Result<(), ToolError> {
    let (Some(dir), Some(name)) = (target.parent(), target.file_name()) else {
        return Err(ToolError::failed(tool, "the workspace root is not a file"));
    };
    let handle = ws.open_dir(tool, dir)?;
    let temp = format!(".strata-write-{}.tmp", uuid::Uuid::new_v4().simple());
    // Best effort: the temporary file is ours and useless after a failure.
    let discard = |err| {
        let _ = rustix::fs::unlinkat(&handle, temp.as_str(), rustix::fs::AtFlags::empty());
        err
    };
    write_temp(&handle, &temp, content, permissions)
        .map_err(|err| ToolError::io(tool, target, err))
        .map_err(discard)?;
    before_rename().map_err(discard)?;
    rustix::fs::renameat(&handle, temp.as_str(), &handle, name)
        .map_err(|errno| ToolError::io(tool, target, errno.into()))
        .map_err(discard)?;
    // Make the rename itself durable; some file systems cannot sync a directory, which only
    // weakens durability, so it is logged rather than reported.
    if let Err(err) = rustix::fs::fsync(&handle) {
        tracing::debug!(dir = %dir.display(), %err, "could not sync directory after write");
    }
    Ok(())
}

fn write_temp(
    dir: &std::os::fd::OwnedFd,
    temp: &str,
    content: &[u8],
    permissions: Option<fs::Permissions>,
) -> std::io::Result<()> {
    // `O_EXCL` never opens something already there, FIFO or not; `O_NOFOLLOW` no symlink.
    let flags = OFlags::WRONLY
        | OFlags::CREATE
        | OFlags::EXCL
        | OFlags::NOFOLLOW
        | OFlags::NONBLOCK
        | OFlags::NOCTTY
        | OFlags::CLOEXEC;
    let mut file =
        File::from(rustix::fs::openat(dir, temp, flags, rustix::fs::Mode::from_raw_mode(0o666))?);
    if !file.metadata()?.file_type().is_file() {
        return Err(std::io::Error::other("the temporary file is not a regular file"));
    }
    file.write_all(content)?;
    if let Some(permissions) = permissions {
        file.set_permissions(permissions)?;
    }
    file.sync_all()
}

fn list_dir(ws: &Beneath, requested: &str) -> Result<ToolOutput, ToolError> {
    const TOOL: &str = ListDir::NAME;
    let root = ws.root();
    let dir = resolve(root, TOOL, requested)?;
    let io = |err| ToolError::io(TOOL, &dir, err);
    // The directory is opened with O_DIRECTORY, which fails at once on anything else; this
    // check (on a handle opened beneath the root, never by path) only gives that failure a
    // clear message.
    let meta = ws.open(TOOL, &dir, OFlags::PATH)?.metadata().map_err(io)?;
    if !meta.is_dir() {
        let kind = kind_of(&meta.file_type());
        return Err(ToolError::NotAFile {
            tool: TOOL.to_owned(),
            path: display(root, &dir),
            kind,
            expected: "directories",
            action: "listed",
        });
    }
    let handle = ws.open_dir(TOOL, &dir)?;
    let mut entries = Vec::new();
    let io = |errno: rustix::io::Errno| ToolError::io(TOOL, &dir, errno.into());
    for entry in rustix::fs::Dir::read_from(&handle).map_err(io)? {
        let entry = entry.map_err(io)?;
        let raw = entry.file_name().to_bytes();
        if raw == b"." || raw == b".." {
            continue;
        }
        let mut name = String::from_utf8_lossy(raw).into_owned();
        let is_dir = match entry.file_type() {
            rustix::fs::FileType::Unknown => {
                let stat = rustix::fs::statat(
                    &handle,
                    entry.file_name(),
                    rustix::fs::AtFlags::SYMLINK_NOFOLLOW,
                )
                .map_err(io)?;
                rustix::fs::FileType::from_raw_mode(stat.st_mode) == rustix::fs::FileType::Directory
            }
            file_type => file_type == rustix::fs::FileType::Directory,
        };
        if is_dir {
            // A masked directory (the run's data) is not shown.
            if ws.masks().is_masked_entry(handle.as_fd(), OsStr::from_bytes(raw)) {
                continue;
            }
            name.push('/');
        }
        entries.push(name);
    }
    entries.sort();
    Ok(ToolOutput {
        success: true,
        output: entries.join("\n"),
        data: json!({ "path": display(root, &dir), "entries": entries }),
    })
}

/// [`ToolError::NotAFile`] unless `file_type` is a regular file (directories are the caller's
/// business and pass here).
pub(super) fn not_a_regular_file(
    tool: &str,
    root: &Path,
    path: &Path,
    file_type: &fs::FileType,
    action: &'static str,
) -> Result<(), ToolError> {
    if file_type.is_file() || file_type.is_dir() {
        return Ok(());
    }
    Err(ToolError::NotAFile {
        tool: tool.to_owned(),
        path: display(root, path),
        kind: kind_of(file_type),
        expected: "regular files",
        action,
    })
}

/// What a file type is, with its article, for messages.
pub(super) fn kind_of(file_type: &fs::FileType) -> &'static str {
    if file_type.is_fifo() {
        "a FIFO (named pipe)"
    } else if file_type.is_socket() {
        "a socket"
    } else if file_type.is_char_device() {
        "a character device"
    } else if file_type.is_block_device() {
        "a block device"
    } else if file_type.is_symlink() {
        "a symlink"
    } else if file_type.is_dir() {
        "a directory"
    } else if file_type.is_file() {
        "a regular file"
    } else {
        "not a regular file"
    }
}
