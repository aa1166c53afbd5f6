//! What the dashboard's API answers, without any HTTP ([`Dashboard`]): the runs of a data
//! directory (and those placed on a NATS server) as JSON rows, one run's snapshot, model calls
//! and timeline, and the requests that act on a run (approve, veto, cancel, resume). A front
//! end maps each answer ([`Answer`]) or refusal ([`ApiError`]) to its protocol's; the `strata
//! serve` routes are the HTTP ones.
//!
//! A run is found by id in the data directory; with a NATS server ([`Server`]), a run placed
//! there by a process elsewhere is found too, and read from the server alone. Such a run is
//! read-only here: acting on it goes through the operator inbox in the run's directory, on the
//! machine that coordinates it ([`ApiErrorKind::Conflict`]).

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use agent_pool::placement::{PlacedRun, REGISTRY, Registry};
use agent_state::RunId;
use serde::Deserialize;
use serde_json::{Value, json};

use super::watch::{RunWatch, SERVER_PATIENCE, Server, Watches, lock, unanswered};
use crate::error::{Error, Result};
use crate::operator::{OperatorRequest, Submitted, Target};
use crate::run::{BackgroundError, BackgroundResume};
use crate::run_dir::{RunInfo, TEAM_FILE, effective_status, format_time, now_ms};

#[cfg(test)]
mod tests;

/// Event lines in a snapshot.
pub const SNAPSHOT_EVENTS: usize = 500;
/// Largest request body accepted.
pub const MAX_BODY: usize = 64 * 1024;
/// Most call records [`Dashboard::calls`] returns: the latest ones (`omitted` says how many
/// earlier ones were left out).
pub const MOST_CALLS: usize = 200;
/// How long [`Dashboard::resume`] watches the resume it started, until the run is live again:
/// one that refuses the run (finished, running, needing `--unsandboxed`) does so within this.
pub const RESUME_CHECK: Duration = Duration::from_secs(10);
/// The file in the run's directory that a resume started by the dashboard writes its output
/// to.
pub const RESUME_LOG: &str = "resume.log";

/// Why the dashboard refuses a request, in the terms of HTTP's statuses.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ApiErrorKind {
    /// No such run, or no such action (404).
    NotFound,
    /// The run cannot be acted on from here, or refuses the request as it stands (409).
    Conflict,
    /// The request is malformed or names what cannot be (400).
    BadRequest,
    /// The request's body is over [`MAX_BODY`] (413).
    TooLarge,
    /// The NATS server of the placed runs does not answer (502).
    Unreachable,
    /// Anything else failed: storage, a server, the runtime (500).
    Failed,
}

impl ApiErrorKind {
    /// The HTTP status the dashboard answers it with (the number each variant names).
    pub const fn http_status(self) -> u16 {
        match self {
            Self::NotFound => 404,
            Self::Conflict => 409,
            Self::BadRequest => 400,
            Self::TooLarge => 413,
            Self::Unreachable => 502,
            Self::Failed => 500,
        }
    }
}

/// A refused request: why, and what to tell the client.
#[derive(Debug, thiserror::Error)]
#[error("{message}")]
pub struct ApiError {
    /// Why.
    pub kind: ApiErrorKind,
    /// What to tell the client.
    pub message: String,
}

impl ApiError {
    fn new(kind: ApiErrorKind, message: impl Into<String>) -> Self {
        Self { kind, message: message.into() }
    }

    /// An engine error: bad input is `bad_input`, anything else [`ApiErrorKind::Failed`].
    fn of(e: &Error, bad_input: ApiErrorKind) -> Self {
        let kind = if e.is_bad_input() { bad_input } else { ApiErrorKind::Failed };
        Self::new(kind, e.chain_text())
    }
}

/// What the dashboard answers a request that acts on a run.
#[derive(Debug, PartialEq)]
pub enum Answer {
    /// Done (200): the run took it.
    Done(Value),
    /// Accepted (202): queued, or under way.
    Accepted(Value),
}

/// The dashboard of a data directory: what its API reads and does.
pub struct Dashboard {
    data: PathBuf,
    /// `--nats URL`: the server whose placed runs are listed too.
    server: Option<Server>,
    /// The placed runs listed last (not in the data directory), shown as unreachable while
    /// the server does not answer.
    placed: Mutex<Vec<Value>>,
    /// The runs watched.
    pub watches: Watches,
}

/// The body of a signing request.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct SignBody {
    /// Who signs: one of the run's `[approvals] humans`.
    #[serde(rename = "as")]
    as_name: String,
    /// Why (a veto needs one).
    #[serde(default)]
    reason: Option<String>,
}

/// The body of a cancel: who asks (a name; `dashboard` when not given).
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct CancelBody {
    #[serde(rename = "as")]
    as_name: Option<String>,
}

impl Server {
    /// The registry of workers on the NATS server `url` (`--nats URL`); a server that does not
    /// answer within twice [`SERVER_PATIENCE`] (or has no JetStream) is bad input.
    pub async fn connect(url: &str) -> Result<Self> {
        let patience = SERVER_PATIENCE * 2;
        let connected = tokio::time::timeout(patience, async {
            let store = crate::stores::connect_flag(url, REGISTRY).await?;
            let registry = Registry::open(&store).await.map_err(|e| {
                Error::bad_input(format!("--nats {url}: the registry of workers: {e}"))
            })?;
            Ok(Server { url: url.to_owned(), store, registry })
        })
        .await;
        connected.unwrap_or_else(|_| {
            Err(Error::bad_input(format!(
                "--nats {url}: the NATS server did not answer within {}s; check the URL and that nats-server is running there",
                patience.as_secs()
            )))
        })
    }
}

impl Dashboard {
    /// The dashboard of the runs in `data` (and those placed on `server`), watched by
    /// `watches`.
    pub fn new(data: PathBuf, server: Option<Server>, watches: Watches) -> Self {
        Self { data, server, placed: Mutex::default(), watches }
    }

    /// The data directory.
    pub fn data(&self) -> &Path {
        &self.data
    }

    /// The directory of run `id` in the data directory ([`ApiErrorKind::NotFound`] if none).
    pub fn run_dir(&self, id: &str) -> Result<PathBuf, ApiError> {
        let missing = || {
            ApiError::new(
                ApiErrorKind::NotFound,
                format!(
                    "no run `{}` in {}; GET /api/runs lists them",
                    id.escape_debug(),
                    self.data.display()
                ),
            )
        };
        if !crate::run_dir::is_run_dir_name(id) {
            return Err(missing());
        }
        let dir = self.data.join(id);
        if RunInfo::read(&dir).is_err() {
            return Err(missing());
        }
        Ok(dir)
    }

    /// The directory of run `id`, to act on it: [`ApiErrorKind::NotFound`] when there is no
    /// such run, [`ApiErrorKind::Conflict`] when it is a run placed on the NATS server by
    /// another machine (`how` says where to act on it instead).
    pub async fn local_run(&self, id: &str, how: &str) -> Result<PathBuf, ApiError> {
        let missing = match self.run_dir(id) {
            Ok(dir) => return Ok(dir),
            Err(missing) => missing,
        };
        // Text that breaks the run id rule names no placed run.
        if let Some(server) = &self.server
            && let Ok(run_id) = RunId::parse(id)
            && (self.watches.is_placed(id)
                || matches!(
                    tokio::time::timeout(SERVER_PATIENCE, server.registry.run(&run_id)).await,
                    Ok(Ok(Some(_)))
                ))
        {
            return Err(ApiError::new(
                ApiErrorKind::Conflict,
                format!(
                    "run `{id}` is placed on the NATS server {} by another machine and has no directory in {}: this dashboard only reads it. {how}",
                    server.url,
                    self.data.display()
                ),
            ));
        }
        Err(missing)
    }

    /// The watch of run `id` (in the data directory, else placed on the NATS server).
    pub async fn watched(&self, id: &str) -> Result<Arc<RunWatch>, ApiError> {
        let dir = match self.run_dir(id) {
            Ok(dir) => dir,
            Err(missing) => {
                let Some(server) = &self.server else { return Err(missing) };
                // A placed run's id follows the run id rule; any other text names none.
                let run_id = match RunId::parse(id) {
                    Ok(run_id) => run_id,
                    Err(e) => return Err(ApiError::new(missing.kind, format!("{missing}; {e}"))),
                };
                return match self.watches.placed(&run_id, server).await {
                    Ok(Some(w)) => Ok(w),
                    Ok(None) => Err(ApiError::new(
                        missing.kind,
                        format!("{}; nor is it placed on the NATS server {}", missing, server.url),
                    )),
                    Err(e) => Err(ApiError::new(
                        ApiErrorKind::Unreachable,
                        format!(
                            "cannot read run `{id}` on the NATS server {}: {}",
                            server.url,
                            e.chain_text()
                        ),
                    )),
                };
            }
        };
        self.watches.get(id, &dir).await.map_err(|e| {
            ApiError::new(
                ApiErrorKind::Failed,
                format!("cannot read run `{id}`: {}", e.chain_text()),
            )
        })
    }

    /// A snapshot of run `id` ([`super::RunModel::snapshot_json`], the last
    /// [`SNAPSHOT_EVENTS`] event lines).
    pub async fn snapshot(&self, id: &str) -> Result<String, ApiError> {
        let w = self.watched(id).await?;
        Ok(lock(&w.state).model.snapshot_json(SNAPSHOT_EVENTS))
    }

    /// The runs: a row each (`id`, `task`, `title`, `status`, `started_at`, `started`,
    /// `duration_s`, `failure`, `agents`, `usage`), oldest first, with the placed runs the data
    /// directory does not hold (`placed: true`).
    pub async fn runs(self: &Arc<Self>) -> Result<Vec<Value>, ApiError> {
        let me = self.clone();
        let listed = tokio::task::spawn_blocking(move || me.local_rows()).await;
        let mut rows = match listed {
            Ok(Ok(rows)) => rows,
            Ok(Err(e)) => {
                return Err(ApiError::new(
                    ApiErrorKind::Failed,
                    format!("cannot read the data directory {}: {e}", self.data.display()),
                ));
            }
            Err(e) => {
                return Err(ApiError::new(
                    ApiErrorKind::Failed,
                    format!("cannot list the runs: {e}"),
                ));
            }
        };
        let local: Vec<String> =
            rows.iter().filter_map(|r| r["id"].as_str().map(str::to_owned)).collect();
        rows.extend(self.placed_rows(&local).await);
        rows.sort_by_key(|r| r["started_at"].as_u64().unwrap_or(0));
        Ok(rows)
    }

    /// The rows of the runs in the data directory (blocking: it reads their files).
    fn local_rows(&self) -> std::io::Result<Vec<Value>> {
        let mut rows = Vec::new();
        for entry in std::fs::read_dir(&self.data)?.flatten() {
            let dir = entry.path();
            let Ok(info) = RunInfo::read(&dir) else { continue };
            let agents = self.watches.agents(&info.run_id).or_else(|| team_agents(&dir));
            let end = info.finished_at.unwrap_or_else(now_ms);
            rows.push(json!({
                "id": info.run_id,
                "task": info.task_id,
                "title": info.goal,
                "status": effective_status(&dir, &info),
                "started_at": info.started_at,
                "started": format_time(info.started_at),
                "duration_s": end.saturating_sub(info.started_at) as f64 / 1000.0,
                "failure": info.failure,
                "agents": agents,
                "usage": info.usage,
            }));
        }
        rows.sort_by_key(|r| r["started_at"].as_u64().unwrap_or(0));
        Ok(rows)
    }

    /// The placed runs of the NATS server that the data directory does not hold (`local`, its
    /// run ids); those listed last, marked unreachable, if the server does not answer.
    async fn placed_rows(&self, local: &[String]) -> Vec<Value> {
        let Some(server) = &self.server else { return Vec::new() };
        let listed = tokio::time::timeout(SERVER_PATIENCE, server.registry.runs())
            .await
            .map_err(|_| unanswered(server))
            .and_then(|r| r.map_err(Error::failed_from));
        let mut last = lock(&self.placed);
        match listed {
            Ok(placed) => {
                let rows: Vec<Value> = placed
                    .iter()
                    .filter(|run| !local.iter().any(|id| *id == *run.run_id))
                    .map(|run| self.placed_row(run))
                    .collect();
                last.clone_from(&rows);
                rows
            }
            Err(e) => {
                let why = format!(
                    "cannot read the runs placed on the NATS server {}: {}",
                    server.url,
                    e.chain_text()
                );
                last.iter()
                    .cloned()
                    .map(|mut row| {
                        row["status"] = "unreachable".into();
                        row["error"] = why.clone().into();
                        row
                    })
                    .collect()
            }
        }
    }

    /// The row of placed run `run`.
    fn placed_row(&self, run: &PlacedRun) -> Value {
        let spec: Option<crate::placement::PlacedSpec> =
            serde_json::from_value(run.spec.clone()).ok();
        let (task, goal, started_at) =
            spec.map(|s| (s.task_id, s.goal, s.started_at)).unwrap_or_default();
        let agents = self.watches.agents(&run.run_id).unwrap_or(run.agents.len());
        json!({
            "id": run.run_id,
            "task": task,
            "title": goal,
            "status": if run.closed { "ended" } else { "running" },
            "started_at": started_at,
            "started": format_time(started_at),
            "agents": agents,
            "placed": true,
        })
    }

    /// Run `id`'s model calls (every agent's, or `agent`'s) as `strata inspect RUN calls
    /// --json` gives them ([`crate::audit::calls_json`]), the latest [`MOST_CALLS`], with how
    /// many earlier ones were `omitted`; read from a copy of the run's store.
    pub async fn calls(&self, id: &str, agent: Option<&str>) -> Result<Value, ApiError> {
        let dir = self.run_dir(id)?;
        let read = async {
            let store = crate::operator::read_copy(&dir).await?;
            tokio::task::spawn_blocking(move || crate::audit::call_records(&store))
                .await
                .map_err(Error::failed_from)?
        };
        let all = read.await.map_err(|e| {
            ApiError::new(
                ApiErrorKind::Failed,
                format!("cannot read run `{id}`'s model calls: {}", e.chain_text()),
            )
        })?;
        let mine = crate::audit::calls_of_agent(all.clone(), agent);
        let omitted = mine.len().saturating_sub(MOST_CALLS);
        let mut body = crate::audit::calls_json(&mine[omitted..], &all);
        body["omitted"] = Value::from(omitted);
        Ok(body)
    }

    /// Run `id`'s timeline (every piece of work, or that `agent` did or asked for) as `strata
    /// inspect RUN timeline --json` gives it ([`crate::audit::timeline::json`]), read from a
    /// copy of the run's stores.
    pub async fn timeline(&self, id: &str, agent: Option<&str>) -> Result<Value, ApiError> {
        let dir = self.run_dir(id)?;
        let read = async {
            let info = RunInfo::read(&dir)?;
            let store = crate::operator::read_copy(&dir).await?;
            crate::audit::timeline::Sources::read(&dir, &store, &info).await
        };
        let sources = read.await.map_err(|e| {
            ApiError::new(
                ApiErrorKind::Failed,
                format!("cannot read run `{id}`'s timeline: {}", e.chain_text()),
            )
        })?;
        Ok(sources.json(agent))
    }

    /// Stops the live run `id` as Ctrl-C does (it ends interrupted and can be resumed),
    /// through its operator inbox, as `human:NAME` (`body`: empty, or `{"as": "NAME"}`;
    /// `dashboard` when no name is given).
    pub async fn cancel(&self, id: &str, body: &[u8]) -> Result<Answer, ApiError> {
        let how = "Cancel it where it runs (Ctrl-C, or the `strata serve` of that machine).";
        self.local_run(id, how).await?;
        check_size(body)?;
        let body: CancelBody = if body.iter().all(u8::is_ascii_whitespace) {
            CancelBody::default()
        } else {
            serde_json::from_slice(body).map_err(|e| {
                ApiError::new(
                    ApiErrorKind::BadRequest,
                    format!("the body must be empty or JSON like {{\"as\": \"NAME\"}}: {e}"),
                )
            })?
        };
        let human = body.as_name.unwrap_or_else(|| "dashboard".to_owned());
        let by = format!("human:{human}");
        match crate::operator::send_cancel(&self.data, id, &human).await {
            Ok(Submitted::Applied(done)) => Ok(Answer::Done(
                json!({"outcome": done.outcome, "by": by, "message": "the run stops as on Ctrl-C; resume it to go on"}),
            )),
            Ok(Submitted::Queued | Submitted::TimedOut) => Ok(Answer::Accepted(
                json!({"outcome": "queued", "by": by, "message": "the run has not taken the cancel yet; it stops when it reads its requests"}),
            )),
            Err(e) => Err(ApiError::of(&e, ApiErrorKind::Conflict)),
        }
    }

    /// Resumes run `id` in the background with the process `command` makes (`strata resume
    /// ID --data DATA --quiet`), its output in the run's [`RESUME_LOG`]
    /// ([`crate::run::resume_in_background`]): accepted once the run is live again, a
    /// conflict when the resume refuses the run (with what it said).
    pub async fn resume<F>(&self, id: &str, command: F) -> Result<Answer, ApiError>
    where
        F: FnOnce() -> std::io::Result<std::process::Command> + Send + 'static,
    {
        let how = "Resume it on the machine that coordinates it (`strata resume` there).";
        let dir = self.local_run(id, how).await?;
        let resumed =
            crate::run::resume_in_background(&dir, command, RESUME_LOG, RESUME_CHECK).await;
        let (kind, message) = match resumed {
            Ok(BackgroundResume::Running) => {
                (ApiErrorKind::Conflict, format!("run {id} is running: there is nothing to resume"))
            }
            Ok(BackgroundResume::Finished) => {
                let message = format!("run {id} resumed and ended");
                return Ok(Answer::Done(json!({"outcome": "finished", "message": message})));
            }
            Ok(BackgroundResume::Refused { status, said }) => (
                ApiErrorKind::Conflict,
                format!("`strata resume {id}` ended at once ({status}): {said}"),
            ),
            Ok(BackgroundResume::Resuming) => {
                let message = format!(
                    "run {id} is resuming; its output goes to {RESUME_LOG} in its directory"
                );
                return Ok(Answer::Accepted(json!({"outcome": "resuming", "message": message})));
            }
            Err(BackgroundError::Status(e)) => {
                (ApiErrorKind::Failed, format!("cannot tell whether run {id} is running: {e}"))
            }
            Err(BackgroundError::Start(e)) => {
                (ApiErrorKind::Failed, format!("cannot start `strata resume {id}`: {e}"))
            }
        };
        Err(ApiError::new(kind, message))
    }

    /// Signs (`action` `approve`) or vetoes (`veto`) decision `decision` of run `id` through
    /// its operator inbox, as `strata approve` and `strata veto` do; `body` is
    /// `{"as": "NAME", "reason": "..."}` (a veto needs a reason).
    pub async fn decide(
        &self,
        id: &str,
        decision: &str,
        action: &str,
        body: &[u8],
    ) -> Result<Answer, ApiError> {
        let veto = match action {
            "approve" => false,
            "veto" => true,
            other => {
                return Err(ApiError::new(
                    ApiErrorKind::NotFound,
                    format!("no action `{}`: POST .../approve or .../veto", other.escape_debug()),
                ));
            }
        };
        self.local_run(id, "Approvals and vetoes go through the operator inbox in the run's directory: sign from the machine that coordinates the run (its `strata serve`, or `strata approve`/`strata veto` there)").await?;
        let body = sign_body(body)?;
        let reason = body.reason.unwrap_or_default();
        if veto && reason.trim().is_empty() {
            let message = "a veto needs a reason: give \"reason\"";
            return Err(ApiError::new(ApiErrorKind::BadRequest, message));
        }
        let request = move |decision, human| {
            if veto {
                OperatorRequest::Veto { decision, human, reason }
            } else {
                OperatorRequest::Approve { decision, human }
            }
        };
        let target =
            Target { data: &self.data, run: id, as_name: Some(&body.as_name), no_wait: false };
        let sent = crate::operator::send_decision(&target, decision, request)
            .await
            .map_err(|e| ApiError::of(&e, ApiErrorKind::BadRequest))?;
        Ok(decided(id, &sent.decision, &sent.human, &sent.delivery.submitted))
    }
}

/// Refuses a body over [`MAX_BODY`].
fn check_size(body: &[u8]) -> Result<(), ApiError> {
    if body.len() > MAX_BODY {
        return Err(ApiError::new(ApiErrorKind::TooLarge, "the request body is too large"));
    }
    Ok(())
}

/// The body of a signing request, or the refusal.
fn sign_body(body: &[u8]) -> Result<SignBody, ApiError> {
    check_size(body)?;
    serde_json::from_slice(body).map_err(|e| {
        ApiError::new(
            ApiErrorKind::BadRequest,
            format!("the body must be JSON like {{\"as\": \"NAME\", \"reason\": \"why\"}}: {e}"),
        )
    })
}

/// The answer to a signature or a veto of decision `d` of run `id` by `human`, as its
/// operator inbox took it (`submitted`).
fn decided(id: &str, d: &agent_state::DecisionId, human: &str, submitted: &Submitted) -> Answer {
    let reply = |outcome: &str, message: &str| json!({"outcome": outcome, "decision": d.to_string(), "by": format!("human:{human}"), "message": message});
    match submitted {
        Submitted::Applied(done) => Answer::Done(reply(&done.outcome, "applied by the run")),
        Submitted::Queued => Answer::Accepted(reply(
            "queued",
            &format!(
                "run {id} is not running: the request is queued; `strata resume {id}` applies it"
            ),
        )),
        Submitted::TimedOut => Answer::Accepted(reply(
            "queued",
            "the run has not taken the request yet; it is applied when the run reads its requests",
        )),
    }
}

/// How many agents the team file of the run in `dir` configures.
pub fn team_agents(dir: &Path) -> Option<usize> {
    let path = dir.join(TEAM_FILE);
    let text = std::fs::read_to_string(&path).ok()?;
    let tools = agent_core::tools::ToolRegistry::with_builtins();
    team_file::parse_stored_team(&path, &text, &tools).ok().map(|t| t.spec.agents.len())
}
