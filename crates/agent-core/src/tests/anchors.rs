//! The audit log's anchors: what `check_anchors` accepts and reports, what an agent's saved
//! record anchors, and (with feature `sled`) the anchor a run's seal keeps.

use agent_state::AgentStatus::*;
use serde_json::json;

use super::*;
use crate::{AnchorBreak, AnchorHolder, AuditAnchor, AuditRecord, check_anchors};

/// A log of `n` records, alternating between agents `a` and `b` (`a` appends the even ones).
async fn log_of(n: u64) -> Vec<AuditRecord> {
    let log = InMemoryAuditLog::new();
    for i in 0..n {
        let agent = if i % 2 == 0 { id("a") } else { id("b") };
        let event = AuditEvent::MissedHeartbeat { heartbeat: i };
        log.append(&agent, Timestamp(i), event).await.unwrap();
    }
    log.records(None).await.unwrap()
}

fn anchor(records: &[AuditRecord], seq: u64) -> AuditAnchor {
    AuditAnchor::of(&records[usize::try_from(seq).unwrap()])
}

#[tokio::test]
async fn anchors_accept_a_log_that_goes_on_past_an_agents_anchor() {
    let records = log_of(10).await;
    // `a` saved after record 4; it appended 6 and 8 before the run ended (or crashed).
    let agents = [(id("a"), anchor(&records, 4)), (id("b"), anchor(&records, 9))];
    assert_eq!(check_anchors(&records, Some(anchor(&records, 9)), &agents), []);
    assert_eq!(check_anchors(&records, None, &agents), []);
}

#[tokio::test]
async fn anchors_report_a_log_cut_before_an_agents_anchor() {
    let records = log_of(10).await;
    let agents = [(id("a"), anchor(&records, 4)), (id("b"), anchor(&records, 9))];
    let cut = &records[..7];

    let breaks = check_anchors(cut, None, &agents);

    assert_eq!(
        breaks,
        [AnchorBreak::Truncated {
            holder: AnchorHolder::Agent(id("b")),
            anchor: anchor(&records, 9),
            last: Some(anchor(&records, 6)),
        }]
    );
    let text = breaks[0].to_string();
    assert!(text.starts_with("agent `b`'s saved record anchors audit record 9 (hash "), "{text}");
    assert!(text.contains("but the log ends at record 6 (hash "), "{text}");
    assert!(text.ends_with("the audit log was truncated"), "{text}");
}

#[tokio::test]
async fn anchors_report_a_rewritten_record_at_an_anchor() {
    let records = log_of(10).await;
    let agents = [(id("a"), anchor(&records, 8))];
    // The log from record 5 on, rewritten with other content and chained again: the chain
    // itself verifies, but record 8 is no longer the one `a` anchored.
    let mut rewritten = records[..5].to_vec();
    for seq in 5..10u64 {
        let prev = rewritten.last().unwrap().hash;
        let event = AuditEvent::MissedHeartbeat { heartbeat: 100 + seq };
        rewritten.push(AuditRecord::new(seq, Timestamp(seq), id("a"), event, prev));
    }
    assert_eq!(crate::verify_chain(&rewritten), Ok(10));

    let breaks = check_anchors(&rewritten, Some(anchor(&records, 9)), &agents);

    assert_eq!(breaks.len(), 2, "{breaks:?}");
    assert!(matches!(
        &breaks[0],
        AnchorBreak::Rewritten { holder: AnchorHolder::Seal, found, .. } if *found == rewritten[9].hash
    ));
    assert!(matches!(
        &breaks[1],
        AnchorBreak::Rewritten { holder: AnchorHolder::Agent(a), .. } if *a == id("a")
    ));
    assert!(breaks[1].to_string().ends_with("the audit log was rewritten"), "{}", breaks[1]);
}

#[tokio::test]
async fn an_agents_anchor_on_another_agents_record_is_a_rewrite() {
    let records = log_of(4).await;
    // Record 3 is `b`'s; `a` claims it.
    let agents = [(id("a"), anchor(&records, 3))];
    assert!(matches!(
        check_anchors(&records, None, &agents)[..],
        [AnchorBreak::Rewritten { ref found_agent, .. }] if *found_agent == id("b")
    ));
}

#[tokio::test]
async fn the_seals_anchor_is_the_exact_end_of_the_log() {
    let records = log_of(6).await;
    assert_eq!(check_anchors(&records, Some(anchor(&records, 5)), &[]), []);
    assert_eq!(
        check_anchors(&records, Some(anchor(&records, 3)), &[]),
        [AnchorBreak::Extended {
            holder: AnchorHolder::Seal,
            anchor: anchor(&records, 3),
            last: anchor(&records, 5)
        }]
    );
    assert_eq!(
        check_anchors(&records[..4], Some(anchor(&records, 5)), &[]),
        [AnchorBreak::Truncated {
            holder: AnchorHolder::Seal,
            anchor: anchor(&records, 5),
            last: Some(anchor(&records, 3))
        }]
    );
    assert!(matches!(
        check_anchors(&[], Some(anchor(&records, 0)), &[])[..],
        [AnchorBreak::Truncated { last: None, .. }]
    ));
}

#[tokio::test]
async fn a_log_with_a_hole_at_an_anchor_reports_the_missing_record() {
    let records = log_of(6).await;
    let mut holed = records.clone();
    holed.remove(2);
    assert_eq!(
        check_anchors(&holed, None, &[(id("a"), anchor(&records, 2))]),
        [AnchorBreak::Missing {
            holder: AnchorHolder::Agent(id("a")),
            anchor: anchor(&records, 2)
        }]
    );
}

/// The record saved after a heartbeat anchors the last audit record the agent had appended
/// then; the shutdown saves once more, so the record anchors its final `terminated`.
#[tokio::test(start_paused = true)]
async fn a_saved_agent_record_anchors_the_agents_last_audit_record() {
    let s = Services::new().await;
    let probe = Probe::default();
    let mut agent = s.ready(&probe).await;
    s.send(inbox(SUPERVISOR), ME, MessageKind::StatusQuery, json!({})).await;
    agent.heartbeat(1).await.unwrap();

    let saved = s.deps.state.agents().await.unwrap();
    let head = saved[0].audit_head.expect("an anchor");
    let mine = s.audit.records(Some(&id(ME))).await.unwrap();
    // Saved while working, before the transition back to idle.
    let at_save = mine.iter().rev().find(|r| r.seq == head.seq).unwrap();
    assert_eq!(head, AuditAnchor::of(at_save));
    assert_eq!(at_save.transition().map(|t| t.to), Some(Working));
    assert!(mine.last().unwrap().seq > head.seq, "the anchor is a lower bound");

    agent.shutdown().await.unwrap();
    let saved = s.deps.state.agents().await.unwrap();
    let last = s.audit.records(Some(&id(ME))).await.unwrap().last().cloned().unwrap();
    assert_eq!(last.transition().map(|t| t.to), Some(Terminated));
    assert_eq!(saved[0].audit_head, Some(AuditAnchor::of(&last)));
}

/// Records saved before anchors existed have no `audit_head` field, and still load.
#[test]
fn an_agent_record_without_an_anchor_still_loads() {
    let old = json!({
        "id": "bottom-1", "metrics": agent_state::AgentMetrics::default(), "retries": 0,
        "heartbeat": 3, "processed": [], "behavior": null
    });
    let record: crate::AgentRecord = serde_json::from_value(old).unwrap();
    assert_eq!(record.audit_head, None);
}

#[cfg(feature = "sled")]
mod on_sled {
    use run_store::{Durability, RunStore};

    use super::*;
    use crate::SledAuditLog;

    /// Opens the run again once the last store on it has closed (see `state_store`).
    fn reopen(dir: &std::path::Path) -> RunStore {
        let db = std::fs::File::open(dir.join(run_store::DB_DIR).join("db")).unwrap();
        db.lock().unwrap();
        drop(db);
        RunStore::open(dir, Durability::NoSync).unwrap()
    }

    #[tokio::test]
    async fn the_seal_anchors_the_final_audit_record_and_heads_survive_a_reopen() {
        let root = tempfile::tempdir().unwrap();
        let dir = root.path().join("run");
        let run = RunStore::create(&dir, "run-1", Timestamp(0), Durability::NoSync).unwrap();
        let log = SledAuditLog::open(&run).unwrap();
        for i in 0..5 {
            let agent = if i % 2 == 0 { id("a") } else { id("b") };
            log.append(&agent, Timestamp(i), AuditEvent::MissedHeartbeat { heartbeat: i })
                .await
                .unwrap();
        }
        let records = log.records(None).await.unwrap();
        assert_eq!(SledAuditLog::sealed_anchor(&run).unwrap(), None, "a new run is not sealed");
        drop((log, run));

        let run = reopen(&dir);
        assert_eq!(SledAuditLog::sealed_anchor(&run).unwrap(), Some(anchor(&records, 4)));
        let log = SledAuditLog::open(&run).unwrap();
        // Read from the log (once), then kept up to date by appends.
        assert_eq!(log.head_of(&id("b")).await.unwrap(), Some(anchor(&records, 3)));
        assert_eq!(log.head_of(&id("c")).await.unwrap(), None);
        log.append(&id("b"), Timestamp(9), AuditEvent::MissedHeartbeat { heartbeat: 9 })
            .await
            .unwrap();
        let records = log.records(None).await.unwrap();
        assert_eq!(log.head_of(&id("b")).await.unwrap(), Some(anchor(&records, 5)));
        assert_eq!(log.head_of(&id("a")).await.unwrap(), Some(anchor(&records, 4)));
        drop((log, run));

        // A store that never opens the audit log keeps the seal's anchor when it closes.
        drop(reopen(&dir));
        let run = reopen(&dir);
        assert_eq!(SledAuditLog::sealed_anchor(&run).unwrap(), Some(anchor(&records, 5)));
    }
}
