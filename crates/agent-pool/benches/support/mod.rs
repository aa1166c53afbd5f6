//! What the agent-pool benches share: where to write their figures and how to read the
//! process's resident memory. Each bench includes this module and uses a part of it.
#![allow(dead_code, reason = "each bench uses a part of it")]

use std::path::PathBuf;

/// Cargo's target directory: `CARGO_TARGET_DIR` when set (relative to the workspace root when
/// relative), else `target/` in the workspace root, the nearest directory up from here with a
/// `Cargo.lock`.
pub(crate) fn target_dir() -> PathBuf {
    let here = std::env::current_dir().unwrap();
    let root = here
        .ancestors()
        .find(|dir| dir.join("Cargo.lock").is_file())
        .unwrap_or(&here)
        .to_path_buf();
    match std::env::var_os("CARGO_TARGET_DIR") {
        Some(dir) => root.join(dir),
        None => root.join("target"),
    }
}

/// The process's resident set size, from `VmRSS` in `/proc/self/status` (Linux).
pub(crate) fn resident_bytes() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status")
        .expect("memory per agent is measured from /proc/self/status (Linux only)");
    let kib: u64 = status
        .lines()
        .find_map(|line| line.strip_prefix("VmRSS:"))
        .and_then(|rest| rest.trim().strip_suffix("kB"))
        .and_then(|kib| kib.trim().parse().ok())
        .expect("a VmRSS line in kB in /proc/self/status");
    kib * 1024
}
