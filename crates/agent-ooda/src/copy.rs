//! Level-3 validation: the agent's `test_command` runs before and after a change on a copy of
//! the workspace, inside the run's sandbox, in its own process group; the workspace itself is
//! touched only once the change has passed.

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use agent_core::AgentContext;

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
    let workspace = ctx.deps().workspace.workspace().to_path_buf();
    let copy = tokio::task::spawn_blocking(move || copy_workspace(&workspace))
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

/// A copy of `workspace` (without `.strata`) in a temporary directory, within the limits.
fn copy_workspace(workspace: &Path) -> Result<tempfile::TempDir, OodaError> {
    let copy = tempfile::Builder::new().prefix("strata-ooda-").tempdir().map_err(|e| {
        OodaError::Validation(format!("cannot create a copy of the workspace: {e}"))
    })?;
    let (mut files, mut bytes) = (0usize, 0u64);
    let mut stack: Vec<PathBuf> = vec![PathBuf::new()];
    while let Some(rel) = stack.pop() {
        let dir = workspace.join(&rel);
        let entries = std::fs::read_dir(&dir).map_err(io)?;
        for entry in entries {
            let entry = entry.map_err(io)?;
            let name = entry.file_name();
            if rel.as_os_str().is_empty() && name == ".strata" {
                continue;
            }
            let rel_path = rel.join(&name);
            let kind = entry.file_type().map_err(io)?;
            let target = copy.path().join(&rel_path);
            if kind.is_dir() {
                std::fs::create_dir_all(&target).map_err(io)?;
                stack.push(rel_path);
            } else if kind.is_file() {
                files += 1;
                bytes += entry.metadata().map_err(io)?.len();
                if files > MAX_COPY_FILES || bytes > MAX_COPY_BYTES {
                    return Err(OodaError::Validation(format!(
                        "the workspace is larger than a level-3 check copies ({MAX_COPY_FILES} files, {MAX_COPY_BYTES} bytes)"
                    )));
                }
                std::fs::copy(entry.path(), &target).map_err(io)?;
            }
            // Symbolic links and special files are left out of the copy.
        }
    }
    Ok(copy)
}
