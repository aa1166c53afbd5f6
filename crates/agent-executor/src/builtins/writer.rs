//! `writer_agent`: writes a text (a report, an email, a document) to a workspace file.
//!
//! With `content` it writes that text as given; without, it asks the agent's reasoner to draft
//! it from the objective (and the file's current text, which the draft revises, if the file
//! exists). The rule-based reasoner cannot draft: the run is then blocked
//! ([`FailureKind::MissingInput`](agent_state::FailureKind)) and says to give `content` or a
//! model reasoner.
//!
//! The file is `path` (relative to the workspace; default `drafts/<run id>.md`), written
//! atomically by the `write_file` tool, which keeps it inside the workspace; a path with `..`,
//! a root, or inside `.strata/` is refused before anything is written
//! ([`FailureKind::InvalidInput`](agent_state::FailureKind), permanent). Writing the same
//! request again leaves the same file: the kind is idempotent.

use agent_state::{Artifact, ChangeType};
use async_trait::async_trait;
use serde_json::{Value, json};

use super::text::workspace_path;
use crate::capsule::Capsule;
use crate::kind::{Kind, KindError, KindOutput};
use crate::request::RunRequest;

/// The name `writer_agent` is registered under.
pub const WRITER_AGENT: &str = "writer_agent";

/// The formats a draft may take.
pub const WRITER_FORMATS: [&str; 3] = ["report", "email", "document"];

/// The `writer_agent` kind.
#[derive(Clone, Copy, Debug, Default)]
pub struct WriterAgent;

#[async_trait]
impl Kind for WriterAgent {
    fn name(&self) -> &str {
        WRITER_AGENT
    }

    fn description(&self) -> &str {
        "writes a report, an email or a document to a workspace file: the given `content`, or a \
         draft its model reasoner writes from the objective"
    }

    fn inputs_schema(&self) -> Value {
        json!({
            "type": "object",
            "properties": {
                "path": {
                    "type": "string",
                    "minLength": 1,
                    "description": "the file to write, relative to the workspace; default drafts/<run id>.md",
                },
                "content": {
                    "type": "string",
                    "description": "the text to write as it is; without it, the reasoner drafts the text",
                },
                "format": {
                    "type": "string",
                    "enum": WRITER_FORMATS,
                    "description": "what the text is (report, email, document); default document",
                },
            },
            "additionalProperties": false,
        })
    }

    async fn run(
        &self,
        request: &RunRequest,
        capsule: &mut Capsule,
    ) -> Result<KindOutput, KindError> {
        let format = request.input_str("format").unwrap_or("document").to_owned();
        let requested = request
            .input_str("path")
            .map_or_else(|| format!("drafts/{}.md", capsule.run_id()), str::to_owned);
        let path = workspace_path(&requested, "path")?;
        let Some(root) = capsule.workspace().map(|w| w.workspace().to_path_buf()) else {
            return Err(KindError::invalid(
                "`writer_agent` writes a workspace file, and the executor has no workspace; run \
                 it with a workspace",
            ));
        };
        capsule.progress(10, format!("preparing {path}"));
        let existed = tokio::fs::symlink_metadata(root.join(&path)).await.is_ok();

        let (text, confidence) = match request.input_str("content") {
            Some(content) => (content.to_owned(), 1.0),
            None => {
                capsule.progress(30, format!("drafting the {format}"));
                let material = if existed {
                    match capsule.call_tool("read_file", json!({"path": path})).await {
                        Ok(read) => {
                            format!("The current text of {path}, to revise:\n{}", read.output)
                        }
                        Err(error) => {
                            tracing::debug!(path = %path, error = %error, "writer: the existing file could not be read; drafting afresh");
                            String::new()
                        }
                    }
                } else {
                    String::new()
                };
                let instruction = instruction(&format, request.objective.trim());
                match capsule.compose(&instruction, &material).await? {
                    Some(draft) => {
                        let mut draft = draft.trim().to_owned();
                        draft.push('\n');
                        (draft, 0.7)
                    }
                    None => {
                        return Err(KindError::missing(format!(
                            "the text to write: give `content`, or use a model reasoner \
                             (`--reasoner openai`, `anthropic` or `local`) to draft the {format}"
                        )));
                    }
                }
            }
        };

        capsule.progress(70, format!("writing {path}"));
        let written =
            capsule.call_tool("write_file", json!({"path": path, "content": text})).await?;
        let shown = written.data.get("path").and_then(Value::as_str).unwrap_or(&path).to_owned();
        let change_type = if existed { ChangeType::Modified } else { ChangeType::Created };
        let change = if existed { "modified" } else { "created" };
        capsule.note("file_written", json!({"path": shown, "bytes": text.len(), "change": change}));
        capsule.progress(100, format!("wrote {shown}"));
        Ok(KindOutput {
            primary_output: text.clone(),
            confidence,
            artifacts: vec![Artifact {
                file_path: shown.clone(),
                description: format!("the {format}"),
                change_type,
            }],
            data: json!({"path": shown, "bytes": text.len(), "format": format, "change": change}),
            needs_model: None,
        })
    }
}

/// What the reasoner is asked to write, by format.
fn instruction(format: &str, objective: &str) -> String {
    match format {
        "report" => format!(
            "Write a report on: {objective}\nUse Markdown with headings; open with a \
             one-paragraph summary. Answer with the report only."
        ),
        "email" => format!(
            "Write an email for: {objective}\nStart with a `Subject:` line, then the body. Leave \
             no placeholder you could fill. Answer with the email only."
        ),
        _ => format!(
            "Write a document for: {objective}\nUse Markdown. Answer with the document only."
        ),
    }
}
