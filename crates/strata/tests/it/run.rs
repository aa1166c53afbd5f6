//! The engine's durable run through its public API: a run of the hello example started,
//! interrupted and resumed to success; bad input refused before anything is written; a stored
//! input changed after the run recorded it refused on resume.

use std::path::{Path, PathBuf};

use strata::run::{End, Prepared, ResumeOptions, Resumed, Run, StartOptions};
use strata::run_dir::{PLAN_FILE, RUN_FILE, RunStatus};

fn example(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples/hello").join(name)
}

/// The hello example's options in `data`, with commands unsandboxed (this test process is not
/// a sandbox launcher; the sandbox has tests of its own).
fn options(data: &Path) -> StartOptions {
    StartOptions { unsandboxed: true, ..StartOptions::new(data) }
}

async fn interrupted_run(data: &Path) -> agent_state::RunId {
    let options = options(data);
    let prepared =
        Prepared::from_files(Some(&example("team.toml")), &example("plan.toml"), &options)
            .await
            .unwrap();
    let run = Run::start(prepared, &options).await.unwrap();
    let run_id = run.info().run_id.clone();
    assert_eq!(run.info().status, RunStatus::Running);
    // Stopped at once, as by Ctrl-C.
    let ended = run.drive(std::future::ready(())).await.unwrap();
    assert!(matches!(ended.end, End::Interrupted { .. }), "{:?}", ended.end);
    assert_eq!(ended.info.status, RunStatus::Interrupted);
    assert!(ended.outcome().is_none());
    run_id
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_started_and_interrupted_resumes_to_success_and_then_is_finished() {
    let data = tempfile::tempdir().unwrap();
    let run_id = interrupted_run(data.path()).await;
    let resume = ResumeOptions { unsandboxed: true, ..ResumeOptions::new(data.path()) };
    let Resumed::Running(run) = Run::resume(&run_id, &resume).await.unwrap() else {
        panic!("an interrupted run goes on");
    };
    let workspace = run.info().workspace.clone();
    let ended = run.drive(std::future::pending()).await.unwrap();
    assert!(ended.succeeded(), "{:?}", ended.end);
    assert_eq!(ended.info.status, RunStatus::Succeeded);
    assert_eq!(std::fs::read_to_string(workspace.join("hello.txt")).unwrap(), "hello, strata\n");
    // The run's database is open while its team and services live.
    drop(ended);
    // A finished run starts nothing again.
    match Run::resume(&run_id, &resume).await.unwrap() {
        Resumed::Finished { info, .. } => assert_eq!(info.status, RunStatus::Succeeded),
        Resumed::Running(_) => panic!("a finished run is not resumed"),
    }
}

#[tokio::test]
async fn bad_input_is_refused_with_the_path_and_nothing_is_written() {
    let root = tempfile::tempdir().unwrap();
    let data = root.path().join("runs");
    let options = options(&data);
    let missing = root.path().join("no-such-plan.toml");
    let error =
        Prepared::from_files(Some(&example("team.toml")), &missing, &options).await.err().unwrap();
    assert!(error.is_bad_input(), "{error}");
    assert!(error.to_string().contains("no-such-plan.toml"), "{error}");
    let team = root.path().join("team.toml");
    std::fs::write(&team, "[[agents]]\nid = \n").unwrap();
    let error =
        Prepared::from_files(Some(&team), &example("plan.toml"), &options).await.err().unwrap();
    assert!(error.is_bad_input(), "{error}");
    assert!(error.chain_text().contains("team.toml"), "{}", error.chain_text());
    let error = Prepared::from_goal(None, "  ", &options).await.err().unwrap();
    assert!(error.is_bad_input(), "{error}");
    let prepared =
        Prepared::from_files(Some(&example("team.toml")), &example("plan.toml"), &options)
            .await
            .unwrap();
    // A run id is a `RunId`: one of another rule cannot be named at all.
    let error = "a_b".parse::<agent_state::RunId>().err().unwrap();
    assert!(error.to_string().contains("a_b"), "{error}");
    drop(prepared);
    assert!(!data.exists(), "nothing is written for bad input");
    let error = Run::resume("nope", &ResumeOptions::new(&data)).await.err().unwrap();
    assert!(error.is_bad_input(), "{error}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_plan_changed_after_the_run_recorded_it_is_refused_on_resume() {
    let data = tempfile::tempdir().unwrap();
    let run_id = interrupted_run(data.path()).await;
    let plan = data.path().join(&run_id).join(PLAN_FILE);
    let text = std::fs::read_to_string(&plan).unwrap();
    std::fs::write(&plan, text.replace("hello, strata", "hello, mallory")).unwrap();
    let resume = ResumeOptions { unsandboxed: true, ..ResumeOptions::new(data.path()) };
    let error = Run::resume(&run_id, &resume).await.err().unwrap();
    assert!(error.is_bad_input(), "{error}");
    assert!(error.to_string().contains("changed after the run recorded it"), "{error}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_named_under_the_old_run_id_rule_is_refused_as_older_and_left_as_it_was() {
    let data = tempfile::tempdir().unwrap();
    let run_id = interrupted_run(data.path()).await;
    // An older Strata allowed `_` and `.` in a run id.
    let old = data.path().join("old_run.1");
    std::fs::rename(data.path().join(&run_id), &old).unwrap();
    for file in [RUN_FILE, run_store::RUN_MARKER] {
        let text = std::fs::read_to_string(old.join(file)).unwrap();
        std::fs::write(old.join(file), text.replace(run_id.as_str(), "old_run.1")).unwrap();
    }
    let before = std::fs::read(old.join(RUN_FILE)).unwrap();
    let resume = ResumeOptions::new(data.path());
    let error = Run::resume("old_run.1", &resume).await.err().unwrap();
    assert!(error.is_bad_input(), "{error}");
    let text = error.chain_text();
    assert!(text.contains("old_run.1") && text.contains("older Strata"), "{text}");
    assert_eq!(std::fs::read(old.join(RUN_FILE)).unwrap(), before, "run.json is untouched");
}
