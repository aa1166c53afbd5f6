//! A worker's structured answer (`return_results`): a status, a summary, the files it
//! created, changed, deleted or consulted, and the issues it knows of.
//!
//! [`AgentResult::parse`] checks the JSON a model wrote against the schema and says what is
//! wrong; [`AgentResult::unverified_artifacts`] compares the claimed changes with the paths
//! the agent's own tool calls touched (the journal), so a worker cannot claim files nobody
//! wrote.

use serde::{Deserialize, Serialize};

/// How the work went.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ResultStatus {
    /// Done.
    Success,
    /// Not done.
    Failure,
    /// Part of it done.
    Partial,
}

/// What happened to a file.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ChangeType {
    /// Written new.
    Created,
    /// Changed.
    Modified,
    /// Removed.
    Deleted,
    /// Read or consulted only.
    Referenced,
}

impl ChangeType {
    /// Whether the claim is that the file was written (created or modified).
    pub fn writes(self) -> bool {
        matches!(self, ChangeType::Created | ChangeType::Modified)
    }
}

/// One file the work touched.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Artifact {
    /// The file, relative to the workspace.
    pub file_path: String,
    /// What it is or what changed.
    pub description: String,
    /// What happened to it.
    pub change_type: ChangeType,
}

/// The structured result of a worker (the `result` argument of `return_results`).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AgentResult {
    /// How it went.
    pub status: ResultStatus,
    /// What was done, in words.
    pub summary: String,
    /// The files.
    pub artifacts: Vec<Artifact>,
    /// What still needs attention; empty when nothing does.
    pub known_issues: Vec<String>,
}

impl AgentResult {
    /// Reads a result from the JSON a worker gave, saying exactly what is wrong if it does not
    /// fit the schema.
    pub fn parse(value: &serde_json::Value) -> Result<Self, String> {
        let result: Self = serde_json::from_value(value.clone())
            .map_err(|e| format!("`result` does not match the schema: {e}"))?;
        if result.summary.trim().is_empty() {
            return Err("`result.summary` is empty; say what was done".into());
        }
        if let Some(a) = result.artifacts.iter().find(|a| a.file_path.trim().is_empty()) {
            return Err(format!(
                "an artifact ({}) has an empty `file_path`",
                if a.description.is_empty() { "no description" } else { &a.description }
            ));
        }
        Ok(result)
    }

    /// Whether the work succeeded.
    pub fn succeeded(&self) -> bool {
        self.status == ResultStatus::Success
    }

    /// The artifacts claimed as created or modified whose path is not among `touched` (the
    /// paths the agent's own tool calls wrote, relative to the workspace). Paths compare after
    /// dropping a leading `./`.
    pub fn unverified_artifacts<'a>(&'a self, touched: &[String]) -> Vec<&'a Artifact> {
        self.artifacts
            .iter()
            .filter(|a| a.change_type.writes())
            .filter(|a| !touched.iter().any(|t| same_path(t, &a.file_path)))
            .collect()
    }
}

/// Whether two workspace-relative paths name the same file (`./a/b` and `a/b`).
pub fn same_path(a: &str, b: &str) -> bool {
    fn norm(p: &str) -> &str {
        let p = p.trim();
        p.strip_prefix("./").unwrap_or(p).trim_end_matches('/')
    }
    norm(a) == norm(b)
}
