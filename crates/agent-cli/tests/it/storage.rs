//! A run whose storage fails: a full disk ends the run with a typed reason and exit 1 instead
//! of a silent stall; what was stored before stays readable, and `resume` on a disk with space
//! again finishes the task.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use crate::support::{FAST, Scratch, listed_run};

/// A small tmpfs mounted at a directory while it lives. Mounting needs root (CI runs as root);
/// `None` where it is not allowed.
struct Tmpfs {
    at: PathBuf,
}

impl Tmpfs {
    fn mount(at: &Path, size: &str) -> Option<Self> {
        std::fs::create_dir_all(at).unwrap();
        let mounted = Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={size}"), "tmpfs"])
            .arg(at)
            .output()
            .is_ok_and(|o| o.status.success());
        mounted.then(|| Self { at: at.to_path_buf() })
    }
}

impl Drop for Tmpfs {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg("--lazy").arg(&self.at).status();
    }
}

/// Fills the file system of `dir` with one file until at most `leave` bytes are free, and
/// returns its path.
fn fill(dir: &Path, leave: u64) -> PathBuf {
    let filler = dir.join("filler");
    let mut file = std::fs::File::create(&filler).unwrap();
    let chunk = vec![0u8; 4096];
    loop {
        let free = free_bytes(dir);
        if free <= leave {
            return filler;
        }
        let n = usize::try_from((free - leave).min(chunk.len() as u64)).unwrap();
        if std::io::Write::write_all(&mut file, &chunk[..n]).is_err() {
            return filler;
        }
    }
}

fn free_bytes(dir: &Path) -> u64 {
    let out = Command::new("df").args(["--output=avail", "-B1"]).arg(dir).output().unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    text.lines().nth(1).and_then(|l| l.trim().parse().ok()).unwrap()
}

/// A full disk with the example plan (small: every write goes to sled's log; regression: one
/// run in about ten stalled, its tokio workers queued on sled's process-wide lock behind a
/// liveness batch that waited for the flush the full disk had wedged).
#[test]
fn a_full_disk_ends_the_run_with_a_storage_failure_and_resume_finishes_it() {
    full_disk_run(None);
}

/// A full disk with a plan of 300 KB and more (regression: the run stalled with no message,
/// forever, because sled writes a value that large to a file of its own, and a failed write
/// of that file wedged sled's log: every later flush, and the one when the database closes,
/// waited forever).
#[test]
fn a_full_disk_with_a_large_plan_ends_the_run_instead_of_stalling() {
    full_disk_run(Some(310 * 1024));
}

/// Runs the example plan, with a step writing `large` bytes when given, on a small tmpfs
/// filled up to what the plan needs plus 96 KiB; checks that the run ends (exit 1, the cause
/// and the way on in stderr), stays readable, and resumes to success once there is space.
#[allow(clippy::print_stderr, reason = "says why the test did not run where it cannot mount")]
fn full_disk_run(large: Option<usize>) {
    let s = Scratch::with_example();
    if let Some(bytes) = large {
        let plan = s.read("plan.toml");
        s.write(
            "plan.toml",
            &format!(
                "{plan}\n[[steps]]\nid = \"big\"\ndomain = \"docs\"\ntool = \"write_file\"\nargs = {{ path = \"big.txt\", content = \"{}\" }}\n",
                "x".repeat(bytes)
            ),
        );
    }
    let Some(disk) = Tmpfs::mount(&s.path("D"), "2m") else {
        eprintln!("not run: mounting a tmpfs needs root (CI runs as root)");
        return;
    };
    // Room for the run's files and the database's first writes, not for the whole run.
    let filler = fill(&disk.at, 96 * 1024 + large.unwrap_or(0) as u64);

    let mut run = s.spawn(&[
        "run",
        "plan.toml",
        "--team",
        "team.toml",
        "--data",
        "D",
        "--workspace",
        "W",
        "--run-id",
        "full",
        FAST[0],
        FAST[1],
        "--quiet",
    ]);
    // A stall is the bug under test: the run must end on its own. The bound is generous
    // (the run ends within seconds); it only keeps a stall from hanging the test.
    let started = Instant::now();
    while !run.exited() {
        assert!(
            started.elapsed() < Duration::from_secs(120),
            "the run stalled on a full disk instead of ending: {}",
            run.stderr_so_far()
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    let out = run.finish();
    out.code(1);
    assert!(
        out.stderr.contains("the data directory's disk is full (No space left on device)")
            && out.stderr.contains("strata resume"),
        "the error names the full disk and the way on:\n{}",
        out.stderr
    );

    // What was stored before the failure is readable, without writing to the full disk.
    s.strata(&["verify", "full", "--data", "D"]).code(0).stdout_has(&["the run verifies"]);
    s.strata(&["inspect", "full", "--data", "D"]).code(0).stdout_has(&["run full"]);

    // Space again: resume carries on to the end.
    std::fs::remove_file(filler).unwrap();
    s.strata(&["resume", "full", "--data", "D", "--quiet"])
        .code(0)
        .stdout_has(&["run full resumed", "task `hello` succeeded"]);
    assert_eq!(listed_run(&s, "D", "full")["status"], "succeeded");
    s.strata(&["verify", "full", "--data", "D"]).code(0).stdout_has(&["the run verifies"]);
    if large.is_some() {
        assert_eq!(s.read("W/big.txt").len(), large.unwrap_or(0));
    }
    drop(disk);
}
