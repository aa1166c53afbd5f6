//! `writer_agent`: given content written as is, a draft from a model, blocked without either,
//! and paths that would leave the workspace refused before anything is written.

use agent_core::{ReasoningRequest, ScriptedAnswer};

use agent_executor::{ExecError, RunRequest, WRITER_AGENT};
use agent_state::{ChangeType, FailureKind, RunState};
use serde_json::json;

use crate::support::{Workspace, assert_rising_to_100, executor, rule_based, scripted};

#[tokio::test]
async fn given_content_is_written_created_then_modified_and_the_same_again() {
    let ws = Workspace::new();
    let executor = executor(ws.env());
    let request = || {
        RunRequest::new(WRITER_AGENT, "Save the status report").with_inputs(json!({
            "path": "reports/status.md",
            "content": "# Status\n\nAll green.\n",
            "format": "report",
        }))
    };
    let (cx, events) = rule_based(WRITER_AGENT);
    let first = executor.execute(request(), cx).await.unwrap();
    assert_eq!(first.status, RunState::Completed, "{:?}", first.failure);
    assert_eq!(ws.read("reports/status.md"), "# Status\n\nAll green.\n");
    assert_eq!(first.primary_output, "# Status\n\nAll green.\n");
    assert_eq!(first.needs_model, None, "nothing needed a model");
    assert_eq!(first.artifacts.len(), 1);
    assert_eq!(first.artifacts[0].file_path, "reports/status.md");
    assert_eq!(first.artifacts[0].change_type, ChangeType::Created);
    assert_eq!(first.data["change"], "created");
    let bytes = "# Status\n\nAll green.\n".len();
    assert_eq!(first.data["bytes"], bytes);
    let written = events.notes("file_written");
    assert_eq!(
        written,
        [json!({"path": "reports/status.md", "bytes": bytes, "change": "created"})]
    );
    assert_rising_to_100(&events);

    // Again: the same file, now modified in place (idempotent).
    let (cx, _) = rule_based(WRITER_AGENT);
    let second = executor.execute(request(), cx).await.unwrap();
    assert_eq!(second.status, RunState::Completed);
    assert_eq!(second.artifacts[0].change_type, ChangeType::Modified);
    assert_eq!(ws.read("reports/status.md"), "# Status\n\nAll green.\n");
    assert!(executor.registry().get(WRITER_AGENT).unwrap().idempotent());
}

#[tokio::test]
async fn without_a_path_it_writes_a_draft_named_after_the_run() {
    let ws = Workspace::new();
    let (cx, _) = rule_based(WRITER_AGENT);
    let request = RunRequest::new(WRITER_AGENT, "Note the date")
        .with_run_id("run-42".parse().unwrap())
        .with_inputs(json!({"content": "Monday\n"}));
    let response = executor(ws.env()).execute(request, cx).await.unwrap();
    assert_eq!(response.status, RunState::Completed, "{:?}", response.failure);
    assert_eq!(ws.read("drafts/run-42.md"), "Monday\n");
    assert_eq!(response.artifacts[0].file_path, "drafts/run-42.md");
}

#[tokio::test]
async fn with_a_model_it_drafts_the_text_revising_what_the_file_holds() {
    let ws = Workspace::new();
    ws.write("mail/invite.md", "Subject: Party\n\nCome by.\n");
    let (cx, _, reasoner) = scripted(
        WRITER_AGENT,
        vec![ScriptedAnswer::Compose("Subject: Party on Friday\n\nCome by at six.  \n\n".into())],
    );
    let request = RunRequest::new(WRITER_AGENT, "Invite the team to Friday's party at six")
        .with_inputs(json!({"path": "mail/invite.md", "format": "email"}));
    let response = executor(ws.env()).execute(request, cx).await.unwrap();
    assert_eq!(response.status, RunState::Completed, "{:?}", response.failure);
    assert_eq!(ws.read("mail/invite.md"), "Subject: Party on Friday\n\nCome by at six.\n");
    assert_eq!(response.artifacts[0].change_type, ChangeType::Modified);
    assert_eq!(response.needs_model, None);

    let requests = reasoner.requests();
    let [ReasoningRequest::Compose { instruction, material, .. }] = requests.as_slice() else {
        panic!("one compose request: {requests:?}")
    };
    assert!(instruction.contains("Write an email for: Invite the team"), "{instruction}");
    assert!(instruction.contains("`Subject:`"), "{instruction}");
    assert!(
        material
            .contains("The current text of mail/invite.md, to revise:\nSubject: Party\n\nCome by."),
        "{material}"
    );
}

#[tokio::test]
async fn without_content_the_rule_based_reasoner_blocks_and_writes_nothing() {
    let ws = Workspace::new();
    let (cx, _) = rule_based(WRITER_AGENT);
    let request = RunRequest::new(WRITER_AGENT, "Write the launch announcement")
        .with_inputs(json!({"path": "news/launch.md", "format": "document"}));
    let response = executor(ws.env()).execute(request, cx).await.unwrap();
    assert_eq!(response.status, RunState::Blocked);
    let failure = response.failure.unwrap();
    assert_eq!(failure.kind, FailureKind::MissingInput);
    assert!(
        failure.reason.contains("the text to write: give `content`, or use a model reasoner"),
        "{failure}"
    );
    assert_eq!(response.attempts, 1);
    assert!(!ws.exists("news/launch.md"));
}

#[tokio::test]
async fn a_path_leaving_the_workspace_fails_for_good_and_writes_nothing_outside() {
    let ws = Workspace::new();
    for path in [
        "../escape",
        "../escape.md",
        "/tmp/strata-writer-escape.md",
        ".strata/capsules/x.md",
        "a/../../escape",
    ] {
        let (cx, _) = rule_based(WRITER_AGENT);
        let request = RunRequest::new(WRITER_AGENT, "Write it")
            .with_inputs(json!({"path": path, "content": "out\n"}));
        let response = executor(ws.env()).execute(request, cx).await.unwrap();
        assert_eq!(response.status, RunState::Failed, "{path}");
        let failure = response.failure.unwrap();
        assert_eq!(failure.kind, FailureKind::InvalidInput, "{path}: {failure}");
        assert_eq!(response.attempts, 1, "{path}: permanent");
        assert!(response.artifacts.is_empty(), "{path}");
    }
    assert!(!ws.outside.join("escape").exists());
    assert!(!ws.outside.join("escape.md").exists());
    assert!(!std::path::Path::new("/tmp/strata-writer-escape.md").exists());
    assert!(!ws.exists(".strata/capsules/x.md"));
}

#[tokio::test]
async fn bad_requests_are_refused_before_a_run() {
    let ws = Workspace::new();
    let executor = executor(ws.env());
    let (cx, _) = rule_based(WRITER_AGENT);
    let empty = executor.execute(RunRequest::new(WRITER_AGENT, "  \n"), cx.clone()).await;
    assert!(matches!(empty, Err(ExecError::EmptyObjective { .. })), "{empty:?}");

    let bad_format = RunRequest::new(WRITER_AGENT, "Write it")
        .with_inputs(json!({"content": "x", "format": "poem"}));
    let Err(ExecError::BadInputs { problem, .. }) = executor.execute(bad_format, cx.clone()).await
    else {
        panic!("a format outside the enum is refused")
    };
    assert!(problem.contains("`format`"), "{problem}");

    let unknown = RunRequest::new(WRITER_AGENT, "Write it").with_inputs(json!({"contents": "x"}));
    assert!(matches!(executor.execute(unknown, cx).await, Err(ExecError::BadInputs { .. })));
    assert_eq!(std::fs::read_dir(&ws.root).unwrap().count(), 0, "nothing ran");
}
