//! A run whose seal is gone (deleted, or never written: killed) cannot pass `verify` truncated or
//! altered: the audit log's head is kept outside the store while the run goes, in the run's
//! anchor file and in a copy in the data directory, and `runs` lists such a run as damaged.
//! Deleting any one file does not make a damaged run verify; a run with no anchor at all is
//! told apart ("cannot be verified: no anchor"), never said to verify.

use std::path::Path;

use crate::support::{FAST, GATED_PLAN, Gate, Scratch, finished_run, listed_run, wait_for};

const SEAL: &str = "strata-run.seal";
const ANCHOR: &str = "strata-run.anchor";

/// Cuts the database file `db` of run directory `run` by a third, as in the report.
fn cut_by_a_third(run: &Path) {
    let db = run.join("db/db");
    let file = std::fs::OpenOptions::new().write(true).open(&db).unwrap();
    let len = file.metadata().unwrap().len();
    file.set_len(len - len / 3).unwrap();
    file.sync_all().unwrap();
}

/// Flips three bytes of the database file of run directory `run`, a third of the way in.
fn flip_three_bytes(run: &Path) {
    let db = run.join("db/db");
    let mut bytes = std::fs::read(&db).unwrap();
    let at = bytes.len() / 3;
    for b in &mut bytes[at..at + 3] {
        *b ^= 0xff;
    }
    std::fs::write(&db, bytes).unwrap();
}

/// `strata verify ID` exits 1 and says the run is damaged, with the anchors check broken;
/// `strata runs` lists it as damaged and says why. Returns verify's stdout.
#[track_caller]
fn assert_damaged(s: &Scratch, id: &str) -> String {
    let verify = s.strata(&["verify", id, "--data", "D"]);
    verify.code(1).stdout_has(&["BROKEN  ", "the run is damaged"]);
    assert!(!verify.stdout.contains("the run verifies"), "{}", verify.stdout);
    let json = s.strata(&["verify", id, "--data", "D", "--json"]).code(1).json();
    assert_eq!(json["ok"], false, "{json}");
    assert_eq!(json["verdict"], "the run is damaged", "{json}");

    let listed = listed_run(s, "D", id);
    assert_eq!(listed["status"], "damaged", "{listed}");
    assert!(!listed["damage"].as_str().unwrap_or_default().is_empty(), "{listed}");
    s.strata(&["runs", "--data", "D"]).code(0).stdout_has(&["damaged (", "    damaged: "]);
    verify.stdout.clone()
}

/// The line of verify's `stdout` about `check`.
fn check_line<'a>(stdout: &'a str, check: &str) -> &'a str {
    stdout
        .lines()
        .find(|l| l.contains(&format!(" {check}: ")))
        .unwrap_or_else(|| panic!("no `{check}` line in:\n{stdout}"))
}

#[test]
fn a_finished_run_verifies_with_its_anchor_files() {
    let s = Scratch::with_example();
    let run = finished_run(&s);
    assert!(run.join(ANCHOR).is_file());
    assert!(s.path("D/strata-anchors/r.anchor").is_file());
    s.strata(&["verify", "r", "--data", "D"]).code(0).stdout_has(&["the run verifies"]);
    assert_eq!(listed_run(&s, "D", "r")["status"], "succeeded");
}

#[test]
fn seal_deleted_and_store_cut_by_a_third_fails_verify() {
    let s = Scratch::with_example();
    let run = finished_run(&s);
    std::fs::remove_file(run.join(SEAL)).unwrap();
    cut_by_a_third(&run);
    let out = assert_damaged(&s, "r");
    let anchors = check_line(&out, "audit anchors");
    assert!(anchors.starts_with("BROKEN  audit anchors: "), "{out}");
    assert!(anchors.contains("the anchor file "), "the anchor file is named: {out}");
}

#[test]
fn seal_deleted_and_three_bytes_flipped_fails_verify() {
    let s = Scratch::with_example();
    let run = finished_run(&s);
    std::fs::remove_file(run.join(SEAL)).unwrap();
    flip_three_bytes(&run);
    assert_damaged(&s, "r");
}

#[test]
fn deleting_one_anchor_file_as_well_still_fails_verify() {
    for gone in [ANCHOR, "../strata-anchors/r.anchor"] {
        let s = Scratch::with_example();
        let run = finished_run(&s);
        std::fs::remove_file(run.join(SEAL)).unwrap();
        std::fs::remove_file(run.join(gone)).unwrap();
        cut_by_a_third(&run);
        assert_damaged(&s, "r");
    }
}

#[test]
fn a_killed_run_verifies_intact_and_fails_cut() {
    let s = Scratch::with_example();
    s.write("gated.toml", GATED_PLAN);
    std::fs::create_dir_all(s.path("W")).unwrap();
    let _gate = Gate(s.path("W/go"));
    let args = [
        "run",
        "gated.toml",
        "--data",
        "D",
        "--workspace",
        "W",
        "--run-id",
        "k",
        FAST[0],
        FAST[1],
        "--quiet",
    ];
    let mut running = s.spawn(&args);
    wait_for("the gate step to start", || {
        assert!(!running.exited(), "strata exited before the gate");
        s.path("W/waiting").exists()
    });
    running.kill();
    let run = s.path("D/k");
    assert!(!run.join(SEAL).exists(), "a killed run has no seal");

    // Intact: it verifies (its anchor files, not a seal, anchor the log).
    let verify = s.strata(&["verify", "k", "--data", "D"]);
    verify.code(0).stdout_has(&["the run verifies", "anchor files"]);
    assert_eq!(listed_run(&s, "D", "k")["status"], "killed (resumable)");

    cut_by_a_third(&run);
    assert_damaged(&s, "k");

    // `resume` does not carry on from the older state (which would move the anchors onto it
    // and hide the cut): it refuses, and the run stays damaged.
    let resumed = s.strata(&["resume", "k", "--data", "D", "--quiet"]);
    assert_ne!(resumed.status.code(), Some(0), "{}", resumed.stdout);
    assert!(resumed.stderr.contains("the run is damaged"), "{}", resumed.stderr);
    assert_damaged(&s, "k");
}

#[test]
fn a_run_without_seal_or_anchor_cannot_be_verified() {
    let s = Scratch::with_example();
    let run = finished_run(&s);
    std::fs::remove_file(run.join(SEAL)).unwrap();
    std::fs::remove_file(run.join(ANCHOR)).unwrap();
    std::fs::remove_file(s.path("D/strata-anchors/r.anchor")).unwrap();
    // Created with anchor files: they were deleted.
    let out = s.strata(&["verify", "r", "--data", "D"]);
    out.code(1).stdout_has(&[
        "BROKEN  audit anchors: cannot be verified: no anchor",
        "they were deleted",
        "the run cannot be verified: no anchor",
    ]);
    assert!(!out.stdout.contains("the run verifies"), "{}", out.stdout);

    // A run from before anchor files (its marker does not say it keeps them): told apart.
    let marker = std::fs::read_to_string(run.join("strata-run.json")).unwrap();
    let mut value: serde_json::Value = serde_json::from_str(&marker).unwrap();
    value.as_object_mut().unwrap().remove("anchored");
    std::fs::write(run.join("strata-run.json"), value.to_string()).unwrap();
    let out = s.strata(&["verify", "r", "--data", "D"]);
    out.code(1).stdout_has(&[
        "cannot be verified: no anchor",
        "created by a strata from before anchor files",
        "the run cannot be verified: no anchor",
    ]);
}

/// A run on NATS has no seal for its audit log (the log is on the server): the run directory's
/// anchor files keep the newest record the server acknowledged, so records cut from the end of
/// the server's audit stream show.
#[test]
fn a_run_on_nats_whose_audit_stream_lost_its_end_fails_verify() {
    use crate::nats::{Namespace, run_args};
    let s = Scratch::with_example();
    let ns = Namespace::new();
    let url = nats_store::test_url();
    let id = ns.id();
    s.strata(&run_args("plan.toml", id, &url, &["--team", "team.toml"])).code(0);
    assert!(s.path(&format!("D/{id}/{ANCHOR}")).is_file());
    let verify = s.strata(&["verify", id, "--data", "D", "--json"]).code(0).json();
    assert!(
        verify["protection"].as_str().unwrap().contains("anchor files (2 of 2; up to record "),
        "{verify}"
    );

    // The server's audit stream loses its newest five records: it is made again (its deletes
    // and purges are denied) with the others, as they were.
    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    runtime.block_on(async {
        let store = nats_store::NatsStore::connect(&url, id).await.unwrap();
        let name = store.streams().await.unwrap().into_iter().find(|n| n.ends_with("_audit"));
        let js = store.jetstream();
        let mut stream = js.get_stream(name.unwrap()).await.unwrap();
        let info = stream.info().await.unwrap().clone();
        let mut kept = Vec::new();
        for seq in info.state.first_sequence..=info.state.last_sequence - 5 {
            kept.push(stream.get_raw_message(seq).await.unwrap());
        }
        js.delete_stream(&info.config.name).await.unwrap();
        js.create_stream(info.config.clone()).await.unwrap();
        for message in kept {
            let headers = message.headers.clone();
            let ack = js
                .publish_with_headers(message.subject.to_string(), headers, message.payload)
                .await
                .unwrap();
            ack.await.unwrap();
        }
    });
    let out = s.strata(&["verify", id, "--data", "D"]);
    out.code(1).stdout_has(&["BROKEN  audit anchors: ", "the anchor file ", "the run is damaged"]);
}
