//! Reading a run changes nothing in it (`inspect`, `verify`, `runs` work on a private copy,
//! also on a read-only directory), and `verify` notices an audit log cut short or rewritten,
//! which the log's own hash chain cannot show.

use std::path::{Path, PathBuf};
use std::process::Command;

use agent_core::{AuditEvent, AuditRecord};
use run_store::{Durability, RunStore};

use crate::support::{Scratch, finished_run, snapshot};

/// Opens the run as `strata resume` would (the seal's anchors are carried over), lets `edit`
/// change its trees (`RunStore::tree`), and closes it cleanly: a consistent rewrite, sealed
/// again, as a careful hand would make it.
fn edit_run(run: &Path, edit: impl FnOnce(&RunStore)) {
    let store = RunStore::open(run, Durability::Synced).unwrap();
    edit(&store);
    store.commit_blocking().unwrap();
    drop(store);
    // The store seals the run as it closes; wait until it has let go of the run.
    std::fs::File::open(run.join(run_store::RUN_MARKER)).unwrap().lock().unwrap();
}

/// `strata verify r --data DATA` (exit 1 when broken): its exit code and stdout.
fn verify(s: &Scratch, data: &str) -> (i32, String) {
    let out = s.strata(&["verify", "r", "--data", data]);
    (out.status.code().unwrap(), out.stdout)
}

/// The line of `stdout` about `check`.
fn check_line<'a>(stdout: &'a str, check: &str) -> &'a str {
    stdout
        .lines()
        .find(|l| l.contains(&format!(" {check}: ")))
        .unwrap_or_else(|| panic!("no `{check}` line in:\n{stdout}"))
}

#[test]
fn verify_reports_truncated_audit_log() {
    let s = Scratch::with_example();
    let run = finished_run(&s);
    let (code, out) = verify(&s, "D");
    assert_eq!(code, 0, "{out}");
    assert!(
        check_line(&out, "audit anchors").contains(
            "hash chain anchored in seal + agent records (the seal anchors the final record "
        ),
        "{out}"
    );

    // The newest three records (agents terminating) are cut; the chain of what is left links.
    let mut last = 0;
    edit_run(&run, |store| {
        let tree = store.tree("audit").unwrap();
        for _ in 0..3 {
            let (key, _) = tree.pop_max().unwrap().unwrap();
            last = u64::from_be_bytes(key.as_ref().try_into().unwrap());
        }
    });
    let (code, out) = verify(&s, "D");
    assert_eq!(code, 1, "{out}");
    assert!(check_line(&out, "audit chain").starts_with("ok "), "{out}");
    let anchors = check_line(&out, "audit anchors");
    assert!(
        anchors.starts_with("BROKEN  audit anchors: the run's seal anchors audit record "),
        "{out}"
    );
    assert!(anchors.contains(&format!("the log ends at record {} (hash ", last - 1)), "{out}");
    assert!(anchors.contains("the audit log was truncated"), "{out}");
    assert!(anchors.contains("agent `"), "the agents whose records were cut are named: {out}");
    assert!(out.ends_with("the run is damaged\n"), "{out}");

    // Without the seal (as if the run had crashed), the agents' records still show the cut.
    std::fs::remove_file(run.join("strata-run.seal")).unwrap();
    let (code, out) = verify(&s, "D");
    assert_eq!(code, 1, "{out}");
    let anchors = check_line(&out, "audit anchors");
    assert!(anchors.starts_with("BROKEN  audit anchors: agent `"), "{out}");
    assert!(anchors.contains("'s saved record anchors audit record "), "{out}");
    assert!(anchors.contains("the audit log was truncated"), "{out}");

    // The tree no longer shows invented final states without saying so.
    let tree = s.strata(&["inspect", "r", "--data", "D"]);
    tree.code(0).stdout_has(&["warning: agent `", "the audit log was truncated"]);
    let json = s.strata(&["inspect", "r", "--data", "D", "--json"]).code(0).json();
    assert!(!json["audit_damage"].as_array().unwrap().is_empty(), "{json}");
}

#[test]
fn verify_reports_rewritten_audit_record() {
    let s = Scratch::with_example();
    let run = finished_run(&s);
    // The last record, rewritten with another reason and a hash that matches: the chain still
    // links, only the anchors can tell.
    edit_run(&run, |store| {
        let tree = store.tree("audit").unwrap();
        let (key, value) = tree.last().unwrap().unwrap();
        // The last value holds the last record alone, or last among a batch's records (the
        // agents' `terminated` moves are appended together).
        let mut stored: serde_json::Value = serde_json::from_slice(&value).unwrap();
        let slot = if stored["kind"] == "audit_chunk" {
            stored["value"].as_array_mut().unwrap().last_mut().unwrap()
        } else {
            &mut stored
        };
        let old: AuditRecord = agent_state::decode(&serde_json::to_vec(slot).unwrap()).unwrap();
        let AuditEvent::Transition { from, to, .. } = old.event.clone() else {
            panic!("the last record is a transition: {old:?}")
        };
        let event = AuditEvent::Transition { from, to, reason: "nothing to see".into() };
        let new = AuditRecord::new(old.seq, old.at, old.agent, event, old.prev_hash);
        *slot = serde_json::from_slice(&agent_state::encode(&new).unwrap()).unwrap();
        tree.insert(key, serde_json::to_vec(&stored).unwrap()).unwrap();
    });

    let (code, out) = verify(&s, "D");
    assert_eq!(code, 1, "{out}");
    assert!(check_line(&out, "audit chain").starts_with("ok "), "{out}");
    let anchors = check_line(&out, "audit anchors");
    assert!(
        anchors.starts_with("BROKEN  audit anchors: the run's seal anchors audit record "),
        "{out}"
    );
    assert!(anchors.contains("the audit log was rewritten"), "{out}");
    assert!(anchors.contains("agent `"), "the agent whose record was rewritten is named: {out}");
}

/// Every command that reads a run, in every view, text and JSON.
fn read_everything(s: &Scratch, data: &str) {
    for view in ["tree", "audit", "messages", "whiteboards", "decisions", "metrics", "usage"] {
        s.strata(&["inspect", "r", view, "--data", data]).code(0);
        s.strata(&["inspect", "r", view, "--data", data, "--json"]).code(0);
    }
    s.strata(&["verify", "r", "--data", data]).code(0);
    s.strata(&["verify", "r", "--data", data, "--json"]).code(0);
    s.strata(&["runs", "--data", data]).code(0).stdout_has(&["r "]);
    s.strata(&["runs", "--data", data, "--json"]).code(0);
}

#[test]
fn inspection_changes_nothing_in_the_run_directory() {
    let s = Scratch::with_example();
    let run = finished_run(&s);
    let before = snapshot(&s.path("D"));
    read_everything(&s, "D");
    assert!(snapshot(&s.path("D")) == before, "reading a sealed run changed its directory");

    // A run that did not close cleanly: reading it recovers nothing, backs nothing up.
    std::fs::remove_file(run.join("strata-run.seal")).unwrap();
    let before = snapshot(&s.path("D"));
    read_everything(&s, "D");
    assert!(snapshot(&s.path("D")) == before, "reading an unsealed run changed its directory");
    assert!(!run.join("db.before-recovery").exists());
}

/// `DIR` mounted read-only at `AT` while it lives (a bind mount, which binds root too), or,
/// where mounting is not allowed, the tree made read-only with `chmod` (which binds everyone
/// but root).
struct ReadOnly {
    at: PathBuf,
    mounted: bool,
}

impl ReadOnly {
    fn new(dir: &Path, at: &Path) -> Self {
        std::fs::create_dir_all(at).unwrap();
        let ok = |c: &mut Command| c.output().map(|o| o.status.success()).unwrap_or(false);
        if ok(Command::new("mount").arg("--bind").arg(dir).arg(at)) {
            if ok(Command::new("mount").args(["-o", "remount,ro,bind"]).arg(at)) {
                return Self { at: at.to_path_buf(), mounted: true };
            }
            assert!(ok(Command::new("umount").arg(at)), "cannot undo the bind mount");
        }
        std::fs::remove_dir(at).unwrap();
        std::fs::rename(dir, at).unwrap();
        assert!(ok(Command::new("chmod").args(["-R", "a-w"]).arg(at)), "chmod failed");
        Self { at: at.to_path_buf(), mounted: false }
    }
}

impl Drop for ReadOnly {
    fn drop(&mut self) {
        if self.mounted {
            let _ = Command::new("umount").arg(&self.at).status();
        } else {
            let _ = Command::new("chmod").args(["-R", "u+w"]).arg(&self.at).status();
        }
    }
}

/// On a read-only mount (when the test may mount, as root in CI) every write fails with EROFS,
/// root's included, so passing proves nothing is opened for writing. Without mounting, the
/// tree is `chmod`ed read-only, which proves it only for a user other than root.
#[test]
fn inspect_works_on_read_only_run() {
    let s = Scratch::with_example();
    finished_run(&s);
    let before = snapshot(&s.path("D"));
    let ro = ReadOnly::new(&s.path("D"), &s.path("RO"));
    if ro.mounted {
        let probe = std::fs::write(s.path("RO/r/probe"), "x").unwrap_err();
        assert_eq!(probe.raw_os_error(), Some(30), "EROFS: the mount is read-only: {probe}");
    }
    read_everything(&s, "RO");
    s.strata(&["verify", "r", "--data", "RO"]).code(0).stdout_has(&[
        "ok      store: closed cleanly; the database matches its seal",
        "the run verifies",
    ]);
    // Mounted, the run is still in D; made read-only by chmod, it was moved to RO.
    let dir = if ro.mounted { "D" } else { "RO" };
    drop(ro);
    assert!(snapshot(&s.path(dir)) == before, "reading a read-only run changed it");
}

/// The private copies of runs being read in `tmp` (`strata-read-*`).
fn read_copies(tmp: &Path) -> Vec<PathBuf> {
    std::fs::read_dir(tmp)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.file_name().unwrap().to_string_lossy().starts_with("strata-read-"))
        .collect()
}

#[test]
fn a_reader_stopped_early_leaves_no_copy_behind() {
    let s = Scratch::with_example();
    finished_run(&s);
    let tmp = s.path("tmp");
    std::fs::create_dir(&tmp).unwrap();

    // Output closed before it is read (`strata inspect r audit | true`): the first line written
    // fails, strata exits 141 at once (the copy is made before anything is printed), and the
    // copy is gone with the process.
    let mut reader = s
        .command(&["inspect", "r", "audit", "--data", "D"])
        .env("TMPDIR", &tmp)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    drop(reader.stdout.take());
    let status = reader.wait().unwrap();
    assert_eq!(status.code(), Some(141), "{status:?}");
    assert_eq!(read_copies(&tmp), Vec::<PathBuf>::new(), "a copy was left by a closed pipe");

    // A copy left by a reader that was killed (`kill -9`: nothing of it ran) is removed by the
    // next reader, which knows its process is gone; one without a pid in its name is not ours.
    let mut gone = Command::new("true").spawn().unwrap();
    let pid = gone.id();
    gone.wait().unwrap();
    let stale = tmp.join(format!("strata-read-{pid}-a1b2c3"));
    std::fs::create_dir_all(stale.join("db")).unwrap();
    std::fs::write(stale.join("db").join("db"), vec![0_u8; 4096]).unwrap();
    let out = s.command(&["inspect", "r", "--data", "D"]).env("TMPDIR", &tmp).output().unwrap();
    assert!(out.status.success(), "{out:?}");
    assert_eq!(read_copies(&tmp), Vec::<PathBuf>::new(), "the stale copy was kept");
}
