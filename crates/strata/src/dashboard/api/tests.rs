//! Tests of the dashboard's API without HTTP: runs found (or not) by id, their rows, and the
//! refusals of requests that act on a run.
#![allow(clippy::unwrap_used, reason = "tests")]

use super::*;
use crate::dashboard::EventLines;
use crate::run_dir::RunStatus;

/// A run `id` in `data` that no process holds: its store, its `run.json` (started at
/// `started_at`, succeeded) and the example team file.
fn run(data: &Path, id: &str, started_at: u64) {
    let dir = data.join(id);
    let timestamp = agent_state::Timestamp(started_at);
    drop(run_store::RunStore::create(&dir, id, timestamp, run_store::Durability::NoSync).unwrap());
    std::fs::write(dir.join(TEAM_FILE), team_file::example_team_toml()).unwrap();
    RunInfo {
        run_id: agent_state::RunId::parse(id).unwrap(),
        task_id: "t".to_owned(),
        goal: format!("the goal of {id}"),
        workspace: dir.clone(),
        heartbeat_ms: 100,
        reasoner: None,
        flags: Default::default(),
        started_at,
        finished_at: Some(started_at + 2_500),
        status: RunStatus::Succeeded,
        failure: None,
        unsandboxed: false,
        nats: None,
        local: false,
        usage: None,
    }
    .write(&dir)
    .unwrap();
}

fn dashboard(data: &Path) -> Arc<Dashboard> {
    let watches = Watches::new(Arc::new(EventLines));
    Arc::new(Dashboard::new(data.to_path_buf(), None, watches))
}

fn kind<T: std::fmt::Debug>(result: Result<T, ApiError>) -> (ApiErrorKind, String) {
    let e = result.unwrap_err();
    (e.kind, e.message)
}

#[tokio::test]
async fn the_runs_are_rows_oldest_first_and_an_unknown_run_is_not_found() {
    let data = tempfile::tempdir().unwrap();
    run(data.path(), "late", 2_000);
    run(data.path(), "early", 1_000);
    std::fs::create_dir(data.path().join("not-a-run")).unwrap();
    let dashboard = dashboard(data.path());
    let rows = dashboard.runs().await.unwrap();
    let ids: Vec<&str> = rows.iter().map(|r| r["id"].as_str().unwrap()).collect();
    assert_eq!(ids, ["early", "late"]);
    assert_eq!(rows[0]["status"], "succeeded");
    assert_eq!(rows[0]["title"], "the goal of early");
    assert_eq!(rows[0]["duration_s"], 2.5);
    assert_eq!(rows[0]["agents"], team_agents(&data.path().join("early")).unwrap());
    assert!(rows[0].get("placed").is_none());

    assert_eq!(dashboard.run_dir("early").unwrap(), data.path().join("early"));
    for id in ["nope", "not-a-run", "../early", ".", ""] {
        let (kind, message) = kind(dashboard.run_dir(id));
        assert_eq!(kind, ApiErrorKind::NotFound, "{id}: {message}");
        assert!(message.ends_with("GET /api/runs lists them"), "{message}");
    }
    assert_eq!(kind(dashboard.local_run("nope", "elsewhere").await).0, ApiErrorKind::NotFound);
    assert_eq!(kind(dashboard.snapshot("nope").await).0, ApiErrorKind::NotFound);
    assert_eq!(kind(dashboard.calls("nope", None).await).0, ApiErrorKind::NotFound);
    assert_eq!(kind(dashboard.timeline("nope", None).await).0, ApiErrorKind::NotFound);
}

#[tokio::test]
async fn a_request_that_acts_on_a_run_is_checked_before_it_is_sent() {
    let data = tempfile::tempdir().unwrap();
    run(data.path(), "r", 1_000);
    let dashboard = dashboard(data.path());
    let decision = "00000000-0000-0000-0000-000000000001";
    let (no_action, message) = kind(dashboard.decide("r", decision, "sign", b"{}").await);
    assert_eq!(no_action, ApiErrorKind::NotFound);
    assert_eq!(message, "no action `sign`: POST .../approve or .../veto");
    let big = vec![b' '; MAX_BODY + 1];
    assert_eq!(
        kind(dashboard.decide("r", decision, "approve", &big).await).0,
        ApiErrorKind::TooLarge
    );
    assert_eq!(kind(dashboard.cancel("r", &big).await).0, ApiErrorKind::TooLarge);
    let (bad, message) = kind(dashboard.decide("r", decision, "approve", b"{\"who\": 1}").await);
    assert_eq!(bad, ApiErrorKind::BadRequest);
    assert!(message.starts_with("the body must be JSON like"), "{message}");
    let veto = dashboard.decide("r", decision, "veto", br#"{"as": "alice"}"#).await;
    assert_eq!(
        kind(veto),
        (ApiErrorKind::BadRequest, "a veto needs a reason: give \"reason\"".into())
    );
    let (bad, message) = kind(dashboard.cancel("r", b"[1]").await);
    assert_eq!(bad, ApiErrorKind::BadRequest);
    assert!(message.starts_with("the body must be empty or JSON like"), "{message}");
    // Well formed, but the run is not running: nothing to cancel.
    let (conflict, message) = kind(dashboard.cancel("r", b" ").await);
    assert_eq!(conflict, ApiErrorKind::Conflict, "{message}");
    assert!(message.contains("nothing to cancel"), "{message}");
    assert_eq!(kind(dashboard.cancel("gone", b"").await).0, ApiErrorKind::NotFound);
}

/// Each refusal's HTTP status, as the server answers it.
#[test]
fn each_refusal_has_its_status() {
    let statuses = [
        (ApiErrorKind::NotFound, 404),
        (ApiErrorKind::Conflict, 409),
        (ApiErrorKind::BadRequest, 400),
        (ApiErrorKind::TooLarge, 413),
        (ApiErrorKind::Unreachable, 502),
        (ApiErrorKind::Failed, 500),
    ];
    for (kind, status) in statuses {
        assert_eq!(kind.http_status(), status, "{kind:?}");
    }
}
