//! What a run that ended did, in numbers: its outcome and duration, the files it wrote, the
//! decisions its powers took, and every agent's stored metrics. `strata run` prints it at the
//! end; a program gets it from [`Ended::summary`](crate::run::Ended::summary).

use std::collections::BTreeSet;
use std::time::Duration;

use agent_core::{AuditEvent, AuditRecord};
use agent_pool::{AgentSummary, TeamServices};
use agent_state::{AgentLayer, AgentMetrics, Decision, TaskOutcome};

use crate::error::{Error, Result};
use crate::run::Ended;
use crate::run_dir::now_ms;

/// A run's end in numbers.
#[derive(Debug, Clone)]
pub struct Summary {
    /// The task's outcome.
    pub outcome: TaskOutcome,
    /// Seconds from its start to its end (to now, if `run.json` has no end).
    pub duration_s: f64,
    /// The files it wrote (see [`files_written`]).
    pub files_written: Vec<String>,
    /// Every decision of its governance, in order.
    pub decisions: Vec<Decision>,
    /// Every agent, with its stored metrics.
    pub agents: Vec<AgentSummary>,
}

impl Summary {
    /// The sum of one metric over the agents of `layer`.
    pub fn layer_sum(&self, layer: AgentLayer, metric: fn(&AgentMetrics) -> u64) -> u64 {
        self.agents.iter().filter(|a| a.layer == layer).map(|a| metric(&a.metrics)).sum()
    }

    /// Retries over every agent.
    pub fn retries(&self) -> u64 {
        self.agents.iter().map(|a| a.metrics.retries).sum()
    }

    /// Failed tasks over every agent.
    pub fn failures(&self) -> u64 {
        self.agents.iter().map(|a| a.metrics.tasks_failed).sum()
    }
}

impl Ended {
    /// The run's end in numbers, or `None` when the task has no outcome (the run was
    /// interrupted, or its storage failed). The audit log and the decisions are read again,
    /// a few times, when a backend fails (a NATS server restarting as the run ends), so that
    /// a run that ended is not reported as an error for it.
    pub async fn summary(&self) -> Result<Option<Summary>> {
        let Some(outcome) = self.outcome() else { return Ok(None) };
        let (records, decisions) = reads(&self.services).await?;
        let agents = self.team.summary().await;
        let end = self.info.finished_at.unwrap_or_else(now_ms);
        let duration_s = end.saturating_sub(self.info.started_at) as f64 / 1000.0;
        let files_written = files_written(&records);
        Ok(Some(Summary { outcome, duration_s, files_written, decisions, agents }))
    }
}

/// The events [`files_written`] reads files from: a large team's log is mostly other records,
/// which the summary does not decode.
const WRITES: [&str; 2] = ["tool_call", "result"];

/// How many times [`reads`] reads again.
const READS_AGAIN: u32 = 3;

/// The audit log's records that may name files written ([`WRITES`]) and the decisions, read
/// again up to [`READS_AGAIN`] times.
async fn reads(services: &TeamServices) -> Result<(Vec<AuditRecord>, Vec<Decision>)> {
    let mut attempt = 0;
    loop {
        let read = async {
            let records = services.audit.records_of(&WRITES).await.map_err(Error::failed_from)?;
            let decisions = services.governance.list().await.map_err(Error::failed_from)?;
            Ok::<_, Error>((records, decisions))
        };
        match read.await {
            Ok(read) => return Ok(read),
            Err(e) if attempt < READS_AGAIN => {
                attempt += 1;
                tracing::debug!(error = %e, attempt, "reading the run for its summary failed; again");
                tokio::time::sleep(Duration::from_millis(500)).await;
            }
            Err(e) => return Err(e),
        }
    }
}

/// Files a run wrote, from its audited `write_file` calls and the files trusted structured
/// results say were created or modified (an executor kind's run, such as `writer_agent`).
pub fn files_written(records: &[AuditRecord]) -> Vec<String> {
    let files: BTreeSet<String> = records
        .iter()
        .flat_map(|r| match &r.event {
            AuditEvent::ToolCall { tool, args, success: true, .. } if tool == "write_file" => {
                args.get("path").and_then(|p| p.as_str()).map(str::to_owned).into_iter().collect()
            }
            AuditEvent::Result { result, trusted: true, .. } => result
                .artifacts
                .iter()
                .filter(|a| a.change_type.writes())
                .map(|a| a.file_path.clone())
                .collect(),
            _ => Vec::new(),
        })
        .collect();
    files.into_iter().collect()
}

#[cfg(test)]
mod tests {
    use agent_core::AuditEvent;
    use serde_json::json;

    use super::*;
    use crate::tests::record;

    fn write(path: &str, success: bool) -> AuditRecord {
        record(AuditEvent::ToolCall {
            tool: "write_file".into(),
            args: json!({ "path": path, "content": "x" }),
            success,
            summary: "wrote 1 bytes".into(),
        })
    }

    #[test]
    fn files_written_are_the_successful_writes_once_each_with_their_names() {
        let records = [write("a\nb.txt", true), write("c.txt", false), write("a\nb.txt", true)];
        assert_eq!(files_written(&records), ["a\nb.txt"]);
    }
}
