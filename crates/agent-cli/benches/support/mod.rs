//! What the agent-cli benches share: where to write their figures.

use std::path::PathBuf;

/// Cargo's target directory: `CARGO_TARGET_DIR` when set, else `target` beside the workspace.
pub(crate) fn target_dir() -> PathBuf {
    match std::env::var_os("CARGO_TARGET_DIR") {
        Some(dir) => PathBuf::from(dir),
        None => PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../target"),
    }
}
