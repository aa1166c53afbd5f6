//! Level-3 validation: the agent's `test_command` runs before and after a change on a copy of
//! the workspace, inside the run's sandbox, in its own process group; the workspace itself is
//! touched only once the change has passed. The copy reads the workspace beneath its root
//! without following links (see [`copy_workspace`]).

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use agent_core::AgentContext;
use agent_core::tools::{EntryKind, ToolError, WorkspaceFiles};

use crate::modify::FileChange;
use crate::ooda::OodaError;

/// The most files a workspace copy takes.
pub const MAX_COPY_FILES: usize = 20_000;

/// The most bytes a workspace copy takes.
pub const MAX_COPY_BYTES: u64 = 256 * 1024 * 1024;

/// How much of a failed test run's output the refusal quotes.
const TAIL: usize = 2000;

/// Copies the workspace, runs `command` on the copy (it must pass), applies `files` to the
/// copy and runs it again (it must pass). The copy is removed afterwards.
pub(crate) async fn tests_before_and_after(
    ctx: &AgentContext,
    command: &str,
    files: &[FileChange],
    timeout_ms: u64,
) -> Result<(), OodaError> {
    let context = ctx.deps().workspace.clone();
    let copy = tokio::task::spawn_blocking(move || {
        copy_workspace(&WorkspaceFiles::of(&context).map_err(tool)?)
    })
    .await
    .map_err(|e| OodaError::Validation(format!("the copy task failed: {e}")))??;
    let root = copy.path().to_path_buf();
    run(ctx, &root, command, timeout_ms, false).await?;
    for f in files {
        let path = root.join(&f.path);
        match &f.after {
            Some(content) => {
                if let Some(parent) = path.parent() {
                    tokio::fs::create_dir_all(parent).await.map_err(io)?;
                }
                tokio::fs::write(&path, content).await.map_err(io)?;
            }
            None => match tokio::fs::remove_file(&path).await {
                Ok(()) => {}
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                Err(e) => return Err(io(e)),
            },
        }
    }
    run(ctx, &root, command, timeout_ms, true).await
}

fn io(e: std::io::Error) -> OodaError {
    OodaError::Validation(format!("cannot prepare the copy of the workspace: {e}"))
}

/// Runs `command` with `sh -c` in the sandbox, on `root`.
async fn run(
    ctx: &AgentContext,
    root: &Path,
    command: &str,
    timeout_ms: u64,
    after: bool,
) -> Result<(), OodaError> {
    let mut cmd = ctx.deps().workspace.sandbox().command(root, "sh");
    cmd.arg("-c")
        .arg(command)
        .current_dir(root)
        .process_group(0)
        .kill_on_drop(true)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let child = cmd
        .spawn()
        .map_err(|e| OodaError::Validation(format!("cannot start the test command: {e}")))?;
    let output =
        match tokio::time::timeout(Duration::from_millis(timeout_ms), child.wait_with_output())
            .await
        {
            Ok(Ok(output)) => output,
            Ok(Err(e)) => {
                return Err(OodaError::Validation(format!("the test command failed to run: {e}")));
            }
            Err(_) => {
                return Err(OodaError::TestsFailed {
                    command: command.to_owned(),
                    after,
                    output: format!("no result within {timeout_ms} ms (the agent's timeout_ms)"),
                });
            }
        };
    if output.status.success() {
        return Ok(());
    }
    let mut text = String::from_utf8_lossy(&output.stdout).into_owned();
    text.push_str(&String::from_utf8_lossy(&output.stderr));
    let text = text.trim();
    let mut start = text.len().saturating_sub(TAIL);
    while !text.is_char_boundary(start) {
        start += 1;
    }
    Err(OodaError::TestsFailed {
        command: command.to_owned(),
        after,
        output: format!("{} ({})", &text[start..], output.status),
    })
}

/// A copy of the workspace of `files` (without `.strata` and the masked directories) in a
/// temporary directory, within the limits.
///
/// Every directory is listed and every file read through [`WorkspaceFiles`]: opened beneath
/// the workspace root, never through a symlink, never in a masked directory. A file or
/// directory that a command swaps for a symlink (or a FIFO) while the copy runs is left out
/// like any link, so neither the copy nor a test command's output quoted by a refusal can hold
/// a file from outside the workspace.
fn copy_workspace(files: &WorkspaceFiles) -> Result<tempfile::TempDir, OodaError> {
    let copy = tempfile::Builder::new().prefix("strata-ooda-").tempdir().map_err(|e| {
        OodaError::Validation(format!("cannot create a copy of the workspace: {e}"))
    })?;
    let too_large = || {
        OodaError::Validation(format!(
            "the workspace is larger than a level-3 check copies ({MAX_COPY_FILES} files, {MAX_COPY_BYTES} bytes)"
        ))
    };
    let (mut count, mut bytes) = (0usize, 0u64);
    let mut stack: Vec<PathBuf> = vec![PathBuf::new()];
    while let Some(rel) = stack.pop() {
        let dir = if rel.as_os_str().is_empty() { Path::new(".") } else { rel.as_path() };
        let entries = match files.entries(dir) {
            Ok(entries) => entries,
            // Swapped for a link out, or into a masked directory, since it was listed.
            Err(e) if skipped(&e) => continue,
            Err(e) => return Err(tool(e)),
        };
        for (name, kind) in entries {
            if rel.as_os_str().is_empty() && name == ".strata" {
                continue;
            }
            let rel_path = rel.join(&name);
            let target = copy.path().join(&rel_path);
            match kind {
                EntryKind::Dir => {
                    count += 1;
                    if count > MAX_COPY_FILES {
                        return Err(too_large());
                    }
                    std::fs::create_dir_all(&target).map_err(io)?;
                    stack.push(rel_path);
                }
                EntryKind::File => {
                    count += 1;
                    if count > MAX_COPY_FILES {
                        return Err(too_large());
                    }
                    let content = match files.read(&rel_path, MAX_COPY_BYTES - bytes) {
                        Ok(content) => content,
                        Err(ToolError::TooLarge { .. }) => return Err(too_large()),
                        Err(e) if skipped(&e) => continue,
                        Err(e) => return Err(tool(e)),
                    };
                    bytes += content.len() as u64;
                    std::fs::write(&target, content).map_err(io)?;
                }
                // Symbolic links and special files are left out of the copy.
                EntryKind::Other => {}
            }
        }
    }
    Ok(copy)
}

/// Whether a failed read or listing is of something left out of the copy: a link (or a path
/// swapped for one), a masked directory, a special file, or a file removed meanwhile.
fn skipped(e: &ToolError) -> bool {
    match e {
        ToolError::PathOutsideWorkspace { .. }
        | ToolError::Masked { .. }
        | ToolError::NotAFile { .. } => true,
        ToolError::Io { source, .. } => source.kind() == std::io::ErrorKind::NotFound,
        _ => false,
    }
}

fn tool(e: ToolError) -> OodaError {
    OodaError::Validation(format!("cannot copy the workspace: {e}"))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, reason = "tests")]

    use std::os::unix::fs::symlink;
    use std::sync::Arc;
    use std::sync::atomic::{AtomicBool, Ordering};

    use agent_core::tools::ToolContext;

    use super::*;

    /// Every file of the copy under `dir`, with its content.
    fn contents(dir: &Path) -> Vec<(PathBuf, String)> {
        let mut out = Vec::new();
        let mut stack = vec![dir.to_path_buf()];
        while let Some(d) = stack.pop() {
            for entry in std::fs::read_dir(&d).unwrap() {
                let entry = entry.unwrap();
                let kind = entry.file_type().unwrap();
                if kind.is_dir() {
                    stack.push(entry.path());
                } else {
                    let text = std::fs::read_to_string(entry.path()).unwrap_or_default();
                    out.push((entry.path(), text));
                }
            }
        }
        out
    }

    /// A command swapping a workspace file (and a directory) for a symlink to a file outside
    /// the workspace while level-3 copies are made: no copy ever holds the outside file.
    #[test]
    fn a_file_swapped_for_a_symlink_during_the_copy_is_never_copied() {
        let outside = tempfile::tempdir().unwrap();
        let secret = outside.path().join("shadow");
        std::fs::write(&secret, "root:SECRET-HASH:19000\n").unwrap();
        let workspace = tempfile::tempdir().unwrap();
        let ws = workspace.path().to_path_buf();
        std::fs::write(ws.join("notes.md"), "hello\n").unwrap();
        std::fs::create_dir_all(ws.join("d")).unwrap();
        std::fs::write(ws.join("d/shadow"), "hello\n").unwrap();
        let stop = Arc::new(AtomicBool::new(false));
        let swapper = {
            let (ws, secret, outside, stop) =
                (ws.clone(), secret.clone(), outside.path().to_path_buf(), Arc::clone(&stop));
            std::thread::spawn(move || {
                let mut swaps = 0;
                while !stop.load(Ordering::Relaxed) {
                    let _ = std::fs::remove_file(ws.join(".l"));
                    symlink(&secret, ws.join(".l")).unwrap();
                    std::fs::rename(ws.join(".l"), ws.join("notes.md")).unwrap();
                    std::fs::write(ws.join(".f"), "hello\n").unwrap();
                    std::fs::rename(ws.join(".f"), ws.join("notes.md")).unwrap();
                    // The directory too: moved aside, a link to the outside put in its place.
                    std::fs::rename(ws.join("d"), ws.join(".d")).unwrap();
                    symlink(&outside, ws.join("d")).unwrap();
                    std::fs::remove_file(ws.join("d")).unwrap();
                    std::fs::rename(ws.join(".d"), ws.join("d")).unwrap();
                    swaps += 1;
                }
                swaps
            })
        };
        let ctx = ToolContext::new(&ws).unwrap();
        for _ in 0..200 {
            let files = WorkspaceFiles::of(&ctx).unwrap();
            let copy = match copy_workspace(&files) {
                Ok(copy) => copy,
                // A file removed between the listing and the read is a failed copy, never a
                // leak; its message never quotes the outside file.
                Err(e) => {
                    assert!(!e.to_string().contains("SECRET"), "{e}");
                    continue;
                }
            };
            for (path, text) in contents(copy.path()) {
                assert!(!text.contains("SECRET"), "{} holds the outside file", path.display());
            }
        }
        stop.store(true, Ordering::Relaxed);
        assert!(swapper.join().unwrap() > 10, "the swapper must have raced the copies");
    }

    /// The masked directories (the run's data inside the workspace) are not copied.
    #[test]
    fn masked_directories_are_left_out_of_the_copy() {
        let workspace = tempfile::tempdir().unwrap();
        let ws = workspace.path();
        std::fs::create_dir_all(ws.join("data/r1")).unwrap();
        std::fs::write(ws.join("data/r1/team.toml"), "[[mcp_servers]]").unwrap();
        std::fs::write(ws.join("a.txt"), "a").unwrap();
        symlink("data/r1/team.toml", ws.join("link")).unwrap();
        let ctx = ToolContext::new(ws).unwrap().with_masked([ws.join("data/r1")]);
        let copy = copy_workspace(&WorkspaceFiles::of(&ctx).unwrap()).unwrap();
        let copied = contents(copy.path());
        assert_eq!(copied.len(), 1, "{copied:?}");
        assert!(copy.path().join("a.txt").exists());
        assert!(!copy.path().join("data/r1").exists());
    }
}
