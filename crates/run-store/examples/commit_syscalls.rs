//! Creates a run, commits three small writes and closes it; run it under strace to see the
//! syscalls that make a commit durable:
//!
//! ```text
//! cargo build -p strata-run-store --example commit_syscalls
//! strace -f -e trace=fdatasync,fsync,sync_file_range,write target/debug/examples/commit_syscalls synced
//! strace -f -e trace=fdatasync,fsync,sync_file_range,write target/debug/examples/commit_syscalls no-sync
//! ```
//!
//! Each commit is announced on stderr (`write(2, "commit N\n", ...)` in the trace) before it
//! starts and after it returns.
#![allow(clippy::print_stderr, reason = "an example that narrates on stderr")]

use std::error::Error;

use agent_state::Timestamp;
use run_store::{Durability, RunStore};

fn main() -> Result<(), Box<dyn Error>> {
    let durability = match std::env::args().nth(1).as_deref() {
        Some("synced") | None => Durability::Synced,
        Some("no-sync") => Durability::NoSync,
        Some(other) => return Err(format!("unknown mode `{other}`: use synced or no-sync").into()),
    };
    let tmp = tempfile::tempdir()?;
    let run = tmp.path().join("run");
    eprintln!("create");
    let store = RunStore::create(&run, "strace", Timestamp(0), durability)?;
    let tree = store.tree("notes")?;
    for n in 1..=3u32 {
        tree.insert(n.to_be_bytes(), &b"a record of about two hundred bytes"[..])?;
        eprintln!("commit {n}");
        store.commit_blocking()?;
        eprintln!("commit {n} returned");
    }
    eprintln!("close");
    drop((tree, store));
    eprintln!("closed");
    Ok(())
}
