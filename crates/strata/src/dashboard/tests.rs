//! The watches' reading of a run: the run of this process, fed by its event stream, loses no
//! record when the stream falls behind.
#![allow(clippy::unwrap_used, clippy::expect_used, reason = "tests")]

use std::sync::Arc;
use std::time::Duration;

use agent_core::AuditRecord;

use super::*;

/// Shows a run as a front end would, with plain event lines.
struct Plain;

impl RunReader for Plain {
    fn event_line(&self) -> LineFn {
        |r: &AuditRecord, _| format!("{} {:?}", r.agent.as_str(), r.event)
    }
}

/// The run of this process in a new directory of `tmp`, fed by `events`: its directory, what
/// the watch follows, and its audit log.
fn live_run(
    tmp: &std::path::Path,
    events: agent_core::EventHub,
) -> (std::path::PathBuf, Live, Arc<dyn agent_core::AuditLog>) {
    use crate::run_dir::{RunInfo, RunStatus, TEAM_FILE};
    let dir = tmp.join("r");
    let store = run_store::RunStore::create(
        &dir,
        "r",
        agent_state::Timestamp(crate::run_dir::now_ms()),
        run_store::Durability::NoSync,
    )
    .unwrap();
    std::fs::write(dir.join(TEAM_FILE), team_file::example_team_toml()).unwrap();
    RunInfo {
        run_id: agent_state::RunId::parse("r").unwrap(),
        task_id: "t".to_owned(),
        goal: "g".to_owned(),
        workspace: tmp.to_path_buf(),
        heartbeat_ms: 100,
        reasoner: None,
        flags: Default::default(),
        started_at: crate::run_dir::now_ms(),
        finished_at: None,
        status: RunStatus::Running,
        failure: None,
        unsandboxed: false,
        nats: None,
        local: false,
        usage: None,
    }
    .write(&dir)
    .unwrap();
    let stores = crate::Stores::sled(&store).unwrap();
    let audit = stores.audit.clone();
    (dir, Live { events, store, stores, ledger: None }, audit)
}

/// Appends record `i` of `top-a` to `audit` and publishes it on `events`: its seq.
async fn append(audit: &dyn agent_core::AuditLog, events: &agent_core::EventHub, i: u32) -> u64 {
    let agent = agent_state::AgentId::from("top-a");
    let event = agent_core::AuditEvent::Error { error: format!("e{i}"), retry: 1, max_retries: 3 };
    let now = agent_state::Timestamp(crate::run_dir::now_ms());
    let record = audit.append_record(&agent, now, event).await.unwrap();
    let seq = record.seq;
    events.publish(agent_core::TeamEvent::Audit(record));
    seq
}

/// Waits (10 s at most: a hang guard) until `w` has folded record `seq`.
async fn folded(w: &RunWatch, seq: u64) {
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while lock(&w.state).model.last_seq() != Some(seq) {
        assert!(std::time::Instant::now() < deadline, "record {seq} was not folded");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// The run of this process, fed by its event stream: a subscriber that fell behind (a hub
/// that keeps one event) loses no record: the missed ones are read from the audit log.
#[tokio::test]
async fn a_lagged_event_stream_loses_no_record() {
    let tmp = tempfile::tempdir().unwrap();
    let events = agent_core::EventHub::new(1);
    let (dir, live, audit) = live_run(tmp.path(), events.clone());
    let w = RunWatch::live(&dir, live, Arc::new(Plain)).await.unwrap();
    let mut last = 0;
    for i in 0..50u32 {
        last = append(audit.as_ref(), &events, i).await;
    }
    folded(&w, last).await;
    w.finish().await;
    let seqs: Vec<u64> = lock(&w.state).ring.iter().filter_map(|f| f.seq).collect();
    assert!(seqs.contains(&last), "{seqs:?}");
    // The ring starts before the first record: a follower that had record 0 cannot be told
    // what it missed from the ring, and reloads the snapshot.
    assert!(matches!(w.follow(Some(0)).next().await, Some(Sent::Reset)));
}

/// What a follower has now, without waiting.
async fn ready(follower: &mut Follower) -> Option<Sent> {
    tokio::select! {
        biased;
        sent = follower.next() => sent,
        () = std::future::ready(()) => None,
    }
}

/// A follower gets the frames the ring holds after the record it had, then each new one; one
/// that had the last record gets nothing until a new one comes; one that had none gets only
/// new ones.
#[tokio::test]
async fn a_follower_gets_the_frames_after_its_last_then_the_new_ones() {
    let tmp = tempfile::tempdir().unwrap();
    let events = agent_core::EventHub::new(64);
    let (dir, live, audit) = live_run(tmp.path(), events.clone());
    // Records before the watch: its ring starts with the first one's frame.
    let first = append(audit.as_ref(), &events, 0).await;
    let mut last = first;
    for i in 1..3u32 {
        last = append(audit.as_ref(), &events, i).await;
    }
    let w = RunWatch::live(&dir, live, Arc::new(Plain)).await.unwrap();
    folded(&w, last).await;
    assert_eq!(lock(&w.state).ring.front().and_then(|f| f.seq), Some(first));

    let mut behind = w.follow(Some(first));
    let mut seqs = Vec::new();
    while let Some(sent) = ready(&mut behind).await {
        let Sent::Frame(frame) = sent else { panic!("the ring holds what it missed") };
        seqs.push(frame.seq.unwrap());
    }
    assert!(seqs.iter().all(|&s| s > first), "{seqs:?}");
    assert!(seqs.contains(&last), "{seqs:?}");
    assert!(seqs.is_sorted(), "{seqs:?}");

    let mut current = w.follow(Some(last));
    assert!(ready(&mut current).await.is_none(), "nothing after the last record yet");
    let mut fresh = w.follow(None);
    assert!(ready(&mut fresh).await.is_none(), "a new follower reads the snapshot first");
    let new = append(audit.as_ref(), &events, 3).await;
    for follower in [&mut current, &mut fresh] {
        // Frames of a refresh of the run (its status, its audit check) may come first.
        let seq = async {
            loop {
                match follower.next().await {
                    Some(Sent::Frame(frame)) if frame.seq == Some(last) => continue,
                    Some(Sent::Frame(frame)) => return frame.seq,
                    other => panic!("a new frame: {other:?}"),
                }
            }
        };
        assert_eq!(tokio::time::timeout(Duration::from_secs(10), seq).await.unwrap(), Some(new));
    }
    w.finish().await;
}
