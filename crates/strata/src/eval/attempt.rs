//! One attempt of an eval: its run started (its workspace made with the task's files first),
//! resumed, or found ended; driven to its end (at most the suite's task time limit, past which
//! it is a runaway the eval stops); measured from what it recorded; its task's check run on
//! its final workspace in the team's sandbox.

use std::future::Future;
use std::path::{Path, PathBuf};
use std::pin::Pin;

use agent_core::AuditEvent;
use agent_evolution::{SuiteFile, TaskFile, run_check};
use agent_state::{RunId, TaskOutcome};
use run_store::RunStore;

use super::{AttemptResult, CheckResult, EvalInfo, EvalOptions, StopReason, WORKSPACES_DIR};
use crate::error::{Context as _, Error, Result};
use crate::run::{End, Ended, Prepared, ResumeOptions, Resumed, Run, StartOptions};
use crate::run_dir::{RUN_FILE, RunInfo, RunStatus, RunUsage, data_dir, new_run_id};
use crate::stores::Stores;

/// What runs the attempts of an eval.
pub(super) struct Runner<'a> {
    /// The eval's directory.
    pub(super) dir: &'a Path,
    pub(super) suite: &'a SuiteFile,
    /// Per team, per task.
    pub(super) prepared: &'a [Vec<Prepared>],
    pub(super) options: &'a EvalOptions,
    /// The runs' options (their id and workspace set per attempt).
    pub(super) start: StartOptions,
}

/// An attempt's run, to drive or to read.
enum Session {
    /// It is working.
    Live(Box<Run>),
    /// It had ended: its directory and `run.json`.
    Ended(PathBuf, Box<RunInfo>),
}

/// What an attempt's run did, before its check.
struct Measure {
    succeeded: bool,
    status: RunStatus,
    stop: Option<StopReason>,
    runaway: bool,
    failure: Option<String>,
    wall_ms: u64,
    usage: Option<RunUsage>,
    repairs: u64,
    workspace: PathBuf,
}

impl Runner<'_> {
    /// Runs attempt `index` of `info` to its result (recording its run id in `eval.json`
    /// before the run starts): the result, `None` when `stop` interrupted its run (resumable),
    /// and whether `stop` completed (it is not to be polled again).
    pub(super) async fn run<F: Future<Output = ()>>(
        &self,
        info: &mut EvalInfo,
        index: usize,
        stop: Pin<&mut F>,
    ) -> Result<(Option<AttemptResult>, bool)> {
        let attempt = info.attempts[index].clone();
        let (task_index, task) = super::task_of(self.suite, &attempt.task)?;
        let prepared =
            self.prepared.get(attempt.team).and_then(|row| row.get(task_index)).ok_or_else(
                || {
                    Error::bad_input(format!(
                        "eval.json names a team #{} it does not have",
                        attempt.team
                    ))
                },
            )?;
        let found = match &attempt.run_id {
            Some(id) => self.existing(id).await?,
            None => None,
        };
        let session = match found {
            Some(session) => session,
            None => {
                let id = attempt.run_id.unwrap_or_else(|| new_run_id(&prepared.task.id));
                info.attempts[index].run_id = Some(id.clone());
                info.write(self.dir)?;
                self.start(&id, task, prepared).await?
            }
        };
        let (measure, stopped) = self.drive(session, stop).await?;
        let Some(measure) = measure else { return Ok((None, stopped)) };
        let check = match measure.succeeded {
            true => Some(self.check(task, prepared, &measure.workspace).await?),
            false => None,
        };
        Ok((Some(result(measure, check)), stopped))
    }

    /// The run `id` an attempt recorded: `None` when it never started (what its start left,
    /// its directory without `run.json`, is removed); else ended, or resumed.
    async fn existing(&self, id: &str) -> Result<Option<Session>> {
        let data = &self.options.data;
        let dir = data.join(id);
        if !dir.join(RUN_FILE).is_file() {
            if dir.exists() {
                // What `Run::start` makes first: the database, then its marker.
                let unrecorded = dir.join(run_store::RUN_MARKER).is_file()
                    || dir.join(run_store::DB_DIR).is_dir()
                    || std::fs::read_dir(&dir).map(|mut d| d.next().is_none()).unwrap_or(false);
                if !unrecorded {
                    return Err(Error::bad_input(format!(
                        "{} is in the way of the eval's run `{id}` and is not one: move it away",
                        dir.display()
                    )));
                }
                std::fs::remove_dir_all(&dir).with_context(|| {
                    format!("cannot remove the unstarted run {}", dir.display())
                })?;
            }
            return Ok(None);
        }
        let info = RunInfo::read(&dir).map_err(Error::bad_input_from)?;
        if matches!(info.status, RunStatus::Succeeded | RunStatus::Failed) {
            return Ok(Some(Session::Ended(dir, Box::new(info))));
        }
        let options = ResumeOptions {
            data: data.clone(),
            unsandboxed: self.options.unsandboxed,
            no_sync: self.options.no_sync,
            observer: self.start.observer.clone(),
        };
        Ok(Some(match Run::resume(id, &options).await? {
            Resumed::Finished { info, dir } => Session::Ended(dir, info),
            Resumed::Running(run) => Session::Live(run),
        }))
    }

    /// Starts the run `id` of `prepared` in a fresh workspace holding `task`'s files.
    async fn start(&self, id: &RunId, task: &TaskFile, prepared: &Prepared) -> Result<Session> {
        let workspace = self.dir.join(WORKSPACES_DIR).join(id);
        let files = task.files.clone();
        let made = workspace.clone();
        tokio::task::spawn_blocking(move || -> std::io::Result<()> {
            // A workspace left by a start that was killed before its run was recorded.
            if made.exists() {
                std::fs::remove_dir_all(&made)?;
            }
            std::fs::create_dir_all(&made)?;
            match files {
                Some(files) => agent_evolution::copy_files(&files, &made),
                None => Ok(()),
            }
        })
        .await
        .context("making the workspace failed")?
        .with_context(|| format!("cannot make the workspace {}", workspace.display()))?;
        let options = StartOptions {
            run_id: Some(id.clone()),
            workspace: Some(workspace),
            ..self.start.clone()
        };
        let run = Run::start(prepared.clone(), &options).await?;
        Ok(Session::Live(Box::new(run)))
    }

    /// Drives a live run to its end, or `stop`, or past the suite's task time limit (a
    /// runaway: stopped, resumable), and measures it (`None` when `stop` interrupted it);
    /// and whether `stop` completed.
    async fn drive<F: Future<Output = ()>>(
        &self,
        session: Session,
        stop: Pin<&mut F>,
    ) -> Result<(Option<Measure>, bool)> {
        let run = match session {
            Session::Ended(dir, info) => return Ok((Some(stored(&dir, &info).await?), false)),
            Session::Live(run) => run,
        };
        let limit = self.suite.task_timeout;
        let (mut stopped, mut runaway) = (false, false);
        let ended = run
            .drive(async {
                tokio::select! {
                    () = stop => stopped = true,
                    () = tokio::time::sleep(limit) => runaway = true,
                }
            })
            .await?;
        if let End::Storage(error) = &ended.end {
            return Err(Error::failed(format!(
                "the storage of run {} failed: {error}; free space (or fix the disk) and resume the eval",
                ended.info.run_id
            )));
        }
        let interrupted = matches!(ended.end, End::Interrupted { .. });
        if stopped && interrupted {
            return Ok((None, true));
        }
        let mut measure = live(&ended).await?;
        if runaway && interrupted {
            measure.runaway = true;
            measure.failure = Some(format!(
                "it ran past the suite's task_timeout_ms ({} ms) and the eval stopped it (`strata resume {}` goes on with it)",
                limit.as_millis(),
                ended.info.run_id
            ));
        }
        Ok((Some(measure), stopped))
    }

    /// Runs `task`'s check on `workspace` in the sandbox of `prepared`'s team (hiding the
    /// data directory).
    async fn check(
        &self,
        task: &TaskFile,
        prepared: &Prepared,
        workspace: &Path,
    ) -> Result<CheckResult> {
        let sandbox = crate::services::sandbox(&prepared.team, self.options.unsandboxed)?
            .hide(data_dir(&self.options.data));
        let limit = self.suite.check_timeout;
        Ok(match run_check(&task.check, &sandbox, workspace, limit).await {
            Ok(ran) if ran.cannot_run() => CheckResult {
                passed: false,
                code: ran.code,
                error: Some(format!("the check `{}` cannot run: {}", task.check, ran.stderr)),
            },
            Ok(ran) => CheckResult {
                passed: ran.passed(),
                code: ran.code,
                error: (!ran.stderr.is_empty()).then_some(ran.stderr),
            },
            Err(e) => CheckResult { passed: false, code: None, error: Some(e.to_string()) },
        })
    }
}

/// The attempt's result from what its run did and its check.
fn result(measure: Measure, check: Option<CheckResult>) -> AttemptResult {
    let usage = measure.usage.unwrap_or(RunUsage { calls: 0, tokens: 0, cost_usd: Some(0.0) });
    AttemptResult {
        passed: measure.succeeded && check.as_ref().is_some_and(|c| c.passed),
        status: measure.status,
        stop: measure.stop,
        runaway: measure.runaway,
        failure: measure.failure,
        check,
        wall_ms: measure.wall_ms,
        model_calls: usage.calls,
        tokens: usage.tokens,
        cost_usd: usage.cost_usd,
        repairs: measure.repairs,
    }
}

/// Model answers sent back for repair, in `records`.
fn repairs(records: &[agent_core::AuditRecord]) -> u64 {
    records.iter().filter(|r| matches!(r.event, AuditEvent::AnswerRepair { .. })).count() as u64
}

fn wall_ms(info: &RunInfo) -> u64 {
    info.finished_at.unwrap_or_else(crate::run_dir::now_ms).saturating_sub(info.started_at)
}

/// The typed stop of an outcome without success.
fn stop_of(outcome: &TaskOutcome) -> Option<StopReason> {
    match outcome {
        TaskOutcome::Failed { reason, .. } => Some(StopReason::of(reason)),
        _ if outcome.is_success() => None,
        _ => Some(StopReason::Failed),
    }
}

/// What a run that was just driven to its end did.
async fn live(ended: &Ended) -> Result<Measure> {
    let records = ended.services.audit.records(None).await.map_err(Error::failed_from)?;
    let outcome = ended.outcome();
    Ok(Measure {
        succeeded: ended.succeeded(),
        status: ended.info.status,
        stop: outcome.as_ref().and_then(stop_of),
        runaway: false,
        failure: ended.info.failure.clone(),
        wall_ms: wall_ms(&ended.info),
        usage: ended.info.usage.clone(),
        repairs: repairs(&records),
        workspace: ended.info.workspace.clone(),
    })
}

/// What the run in `dir` (its `run.json` `info`) did, read from a private copy of its store:
/// a run found ended when the eval resumed. Its typed stop is its stored outcome's, or the
/// budget when its usage ledger says it stopped the run (a budget stop stores no outcome).
async fn stored(dir: &Path, info: &RunInfo) -> Result<Measure> {
    let store = RunStore::open_read_only(dir).map_err(Error::failed_from)?;
    let stores = Stores::sled(&store)?;
    let records = stores.audit.records(None).await.map_err(Error::failed_from)?;
    let outcomes = stores.state.outcomes().await.map_err(Error::failed_from)?;
    let outcome = outcomes.into_iter().find(|o| o.task_id() == info.task_id);
    let ledger = agent_llm::LlmStore::load_usage(&agent_llm::SledLlmStore::open(&store)?)?;
    let budget = ledger.is_some_and(|report| report.stopped.is_some());
    let stop = match (&outcome, info.status) {
        (Some(outcome), _) => stop_of(outcome),
        (None, RunStatus::Failed) if budget => Some(StopReason::Budget),
        (None, RunStatus::Failed) => Some(StopReason::Failed),
        (None, _) => None,
    };
    Ok(Measure {
        succeeded: info.status == RunStatus::Succeeded,
        status: info.status,
        stop,
        runaway: false,
        failure: info.failure.clone(),
        wall_ms: wall_ms(info),
        usage: info.usage.clone(),
        repairs: repairs(&records),
        workspace: info.workspace.clone(),
    })
}
