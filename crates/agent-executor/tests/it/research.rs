//! `research_agent` on the workspace: sources from its documents (never `.strata/`), notes
//! with and without a model, and what blocks or fails it. URLs are in `research_http`.

use agent_core::{ReasoningRequest, ScriptedAnswer};

use agent_executor::{RESEARCH_AGENT, RunRequest};
use agent_state::{ChangeType, FailureKind, RunState};
use serde_json::json;

use crate::support::{Workspace, assert_rising_to_100, executor, rule_based, scripted};

/// A workspace with one document about the objective, one about something else, and another
/// run's capsule that mentions it too.
fn documents() -> Workspace {
    let ws = Workspace::new();
    ws.write(
        "docs/runtime.md",
        "# Runtime\n\nIntro.\nThe tokio scheduler runs tasks on worker threads.\nIt steals work.\n",
    );
    ws.write("docs/cooking.md", "# Cooking\n\nBoil the water first.\n");
    ws.write(".strata/capsules/other-run/notes.md", "tokio scheduler secret of another run\n");
    ws
}

#[tokio::test]
async fn it_gathers_matching_documents_and_lists_excerpts_on_the_rule_based_reasoner() {
    let ws = documents();
    let (cx, events) = rule_based(RESEARCH_AGENT);
    let response = executor(ws.env())
        .execute(RunRequest::new(RESEARCH_AGENT, "Research how the tokio scheduler works"), cx)
        .await
        .unwrap();
    assert_eq!(response.status, RunState::Completed, "{:?}", response.failure);

    let sources = response.data["sources"].as_array().unwrap();
    let names: Vec<&str> = sources.iter().map(|s| s["source"].as_str().unwrap()).collect();
    assert_eq!(names, ["docs/runtime.md"], "only the matching document, never .strata/");
    let excerpt = sources[0]["excerpt"].as_str().unwrap();
    assert!(excerpt.contains("The tokio scheduler runs tasks"), "{excerpt}");
    assert!(!response.primary_output.contains("another run"), "{}", response.primary_output);
    assert!(!events.text().contains("another run"));
    assert!(response.primary_output.contains("[1] docs/runtime.md"), "{}", response.primary_output);
    assert!(response.primary_output.contains("tokio scheduler runs tasks"));
    assert_eq!(response.data["keywords"], json!(["tokio", "scheduler", "works"]));

    // What needs a model is said, and the document is listed as consulted.
    let needs = response.needs_model.as_deref().unwrap();
    assert!(needs.contains("summarising"), "{needs}");
    assert_eq!(response.artifacts.len(), 1);
    assert_eq!(response.artifacts[0].file_path, "docs/runtime.md");
    assert_eq!(response.artifacts[0].change_type, ChangeType::Referenced);
    assert_eq!(events.notes("source_read")[0]["source"], "docs/runtime.md");
    assert_rising_to_100(&events);
}

#[tokio::test]
async fn with_a_model_it_composes_notes_from_the_material_and_cites_the_sources() {
    let ws = documents();
    let (cx, _, reasoner) = scripted(
        RESEARCH_AGENT,
        vec![ScriptedAnswer::Compose("Tokio steals work between threads [1].".into())],
    );
    let request = RunRequest::new(RESEARCH_AGENT, "Research the tokio scheduler")
        .with_inputs(json!({"paths": ["docs/cooking.md"]}));
    let response = executor(ws.env()).execute(request, cx).await.unwrap();
    assert_eq!(response.status, RunState::Completed, "{:?}", response.failure);
    assert_eq!(response.needs_model, None);
    assert!(
        response.primary_output.starts_with("Tokio steals work between threads [1]."),
        "{}",
        response.primary_output
    );
    // The named file comes first, then the search hit.
    assert!(
        response.primary_output.ends_with("Sources:\n[1] docs/cooking.md\n[2] docs/runtime.md"),
        "{}",
        response.primary_output
    );

    let requests = reasoner.requests();
    let [ReasoningRequest::Compose { instruction, material, .. }] = requests.as_slice() else {
        panic!("one compose request: {requests:?}")
    };
    assert!(instruction.contains("Research the tokio scheduler"), "{instruction}");
    assert!(material.contains("[2] docs/runtime.md\n# Runtime"), "{material}");
    assert!(material.contains("Boil the water first."), "{material}");
    assert!(!material.contains("another run"), "{material}");
}

#[tokio::test]
async fn nothing_found_and_no_urls_blocks_the_run_saying_what_to_give() {
    let ws = documents();
    let (cx, _) = rule_based(RESEARCH_AGENT);
    let response = executor(ws.env())
        .execute(RunRequest::new(RESEARCH_AGENT, "Research quantum chromodynamics"), cx)
        .await
        .unwrap();
    assert_eq!(response.status, RunState::Blocked);
    let failure = response.failure.unwrap();
    assert_eq!(failure.kind, FailureKind::MissingInput);
    assert!(failure.reason.contains("quantum, chromodynamics"), "{failure}");
    assert!(failure.reason.contains("`urls`"), "{failure}");
    assert_eq!(response.attempts, 1, "blocked, not retried");
}

#[tokio::test]
async fn a_path_into_the_state_directory_is_refused() {
    let ws = documents();
    for path in [".strata/capsules/other-run/notes.md", ".strata/**/*.md", "../outside.md"] {
        let (cx, _) = rule_based(RESEARCH_AGENT);
        let request = RunRequest::new(RESEARCH_AGENT, "Research the tokio scheduler")
            .with_inputs(json!({"paths": [path]}));
        let response = executor(ws.env()).execute(request, cx).await.unwrap();
        assert_eq!(response.status, RunState::Failed, "{path}");
        let failure = response.failure.unwrap();
        assert_eq!(failure.kind, FailureKind::InvalidInput, "{path}: {failure}");
        assert!(!response.primary_output.contains("another run"));
    }
}
