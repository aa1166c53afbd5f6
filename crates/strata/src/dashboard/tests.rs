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

/// The run of this process, fed by its event stream: a subscriber that fell behind (a hub
/// that keeps one event) loses no record: the missed ones are read from the audit log.
#[tokio::test]
async fn a_lagged_event_stream_loses_no_record() {
    use crate::run_dir::{RunInfo, RunStatus, TEAM_FILE};
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("r");
    let store = run_store::RunStore::create(
        &dir,
        "r",
        agent_state::Timestamp(crate::run_dir::now_ms()),
        run_store::Durability::NoSync,
    )
    .unwrap();
    std::fs::write(dir.join(TEAM_FILE), team_file::example_team_toml()).unwrap();
    RunInfo {
        run_id: "r".to_owned(),
        task_id: "t".to_owned(),
        goal: "g".to_owned(),
        workspace: tmp.path().to_path_buf(),
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
    let events = agent_core::EventHub::new(1);
    let live = Live { events: events.clone(), store, stores, ledger: None };
    let w = RunWatch::live(&dir, live, Arc::new(Plain)).await.unwrap();
    let agent = agent_state::AgentId::from("top-a");
    let mut last = 0;
    for i in 0..50u32 {
        let event =
            agent_core::AuditEvent::Error { error: format!("e{i}"), retry: 1, max_retries: 3 };
        let record = audit
            .append_record(&agent, agent_state::Timestamp(crate::run_dir::now_ms()), event)
            .await
            .unwrap();
        last = record.seq;
        events.publish(agent_core::TeamEvent::Audit(record));
    }
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while lock(&w.state).model.last_seq() != Some(last) {
        assert!(std::time::Instant::now() < deadline, "the missed records were not read");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    w.finish().await;
    let seqs: Vec<u64> = lock(&w.state).ring.iter().filter_map(|f| f.seq).collect();
    assert!(seqs.contains(&last), "{seqs:?}");
}
