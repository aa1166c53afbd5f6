//! `strata serve`: a web dashboard of the runs of a data directory, live.
//!
//! An axum server (HTTP/1) serves a small page (`serve/page/`, embedded: nothing is fetched at
//! run time) and a JSON API, each route a thin front of the library's [`Dashboard`]:
//!
//! - `GET /api/runs`: the runs (id, title, status, started, agents).
//! - `GET /api/runs/{id}`: a snapshot of one run ([`RunModel::snapshot_json`](strata::dashboard::RunModel::snapshot_json)).
//! - `GET /api/runs/{id}/events`: server-sent events, one small JSON delta per change
//!   ([`Delta`](strata::dashboard::Delta)), `id:` the last record's seq, so `Last-Event-ID` (or
//!   `?after=SEQ`) resumes ([`RunWatch::follow`](strata::dashboard::RunWatch::follow)).
//! - `GET /api/runs/{id}/calls` and `/timeline` (`?agent=ID`): as `strata inspect RUN calls
//!   --json` and `timeline --json` give them.
//! - `POST /api/runs/{id}/decisions/{decision}/approve` and `/veto` with
//!   `{"as": "NAME", "reason": "..."}`: through the operator inbox, as `strata approve` and
//!   `strata veto`; `POST /api/runs/{id}/cancel` and `/resume`.
//!
//! With `--nats URL`, the runs placed on that server's workers are listed too, and read from
//! the server alone (read-only here). Errors are JSON `{"error": "..."}`, the status from the
//! library's [`ApiErrorKind`].
//!
//! **Security** ([`guard`]): the library's access rules ([`strata::dashboard::access`]):
//! loopback by default, a token off it; the `Host` checked (421); every read needs the token
//! (header, or the cookie a first load with `?token=` sets, then redirected); signing takes it
//! from the `Authorization` header only (401; a `?token=` on a POST: 400). The page gets the
//! token for its signing requests in the page itself, which only a request with the token is
//! given. Every response body and event has the secrets this process knows redacted
//! ([`agent_core::secrets`]).
//!
//! `strata run --serve ADDR` (and `strata resume --serve ADDR`) serves the same dashboard from
//! the run's own process ([`serve_run`]): its run is fed by its event stream
//! ([`RunWatch::live`](strata::dashboard::RunWatch::live)), the other runs of the data directory
//! are read as here; the server stops once the run has ended and its last records are sent.

use std::convert::Infallible;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::body::Bytes;
use axum::extract::{Path as UrlPath, RawQuery, Request, State};
use axum::http::{HeaderMap, HeaderValue, Method, StatusCode, header};
use axum::middleware::{self, Next};
use axum::response::sse::{Event, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use futures_util::stream::Stream;

use crate::cli::ServeArgs;
use crate::{Failure, bad_input};
use strata::dashboard::access::{Asked, Refusal, Verdict};
use strata::dashboard::{
    Access, Answer, ApiError, ApiErrorKind, Dashboard, EventLines, Follower, RESET, RunWatch, Sent,
    Server, Watches,
};
use strata::url::{query_escape, query_raw, query_value};

use strata::dashboard::Live;

#[cfg(test)]
mod tests;

const INDEX_HTML: &str = include_str!("serve/page/index.html");
const APP_JS: &str = include_str!("serve/page/app.js");
const STYLE_CSS: &str = include_str!("serve/page/style.css");

/// What every handler shares.
struct App {
    dashboard: Arc<Dashboard>,
    access: Access,
    /// Set when the server stops: the event streams end (else they would hold it open).
    stopping: tokio::sync::watch::Sender<bool>,
}

type Shared = Arc<App>;

impl App {
    /// The app of the runs in `data` (and those placed on `server`), behind `access`.
    fn new(data: PathBuf, server: Option<Server>, access: Access) -> Shared {
        let watches = Watches::new(Arc::new(EventLines));
        Arc::new(App {
            dashboard: Arc::new(Dashboard::new(data, server, watches)),
            access,
            stopping: tokio::sync::watch::Sender::new(false),
        })
    }
}

/// A listening socket and its access rules: checked and bound before anything else is done.
pub(crate) struct Bound {
    listener: tokio::net::TcpListener,
    access: Access,
}

/// Checks `addr` (given as `flag`) and the token (`token`, else `$STRATA_SERVE_TOKEN`, else a
/// new one; off loopback one must be given) and listens there.
pub(crate) async fn bind(flag: &str, addr: &str, token: Option<String>) -> Result<Bound, Failure> {
    let addr: SocketAddr = addr.parse().map_err(|_| {
        bad_input(anyhow::anyhow!(
            "{flag} {}: not an address; write it like 127.0.0.1:7878",
            addr.escape_debug()
        ))
    })?;
    let token = strata::dashboard::access::token_for(flag, addr, token)?;
    let listener = tokio::net::TcpListener::bind(addr).await.map_err(|e| {
        let why = if e.kind() == std::io::ErrorKind::AddrInUse {
            format!(
                "the port is in use (another `strata serve`?); choose another with {flag} 127.0.0.1:PORT"
            )
        } else {
            e.to_string()
        };
        bad_input(anyhow::anyhow!("cannot listen on {addr}: {why}"))
    })?;
    let local = listener.local_addr().unwrap_or(addr);
    Ok(Bound { listener, access: Access::new(token, local) })
}

/// `strata serve`.
pub(crate) async fn serve(args: ServeArgs) -> Result<u8, Failure> {
    if !args.data.is_dir() {
        return Err(bad_input(anyhow::anyhow!(
            "the data directory {} does not exist or is not a directory; give --data the directory of the runs (where `strata run --data` writes them)",
            args.data.display()
        )));
    }
    let Bound { listener, access } = bind("--addr", &args.addr, args.token.clone()).await?;
    let server = match &args.nats {
        Some(url) => Some(Server::connect(url).await?),
        None => None,
    };
    let app = App::new(args.data.clone(), server, access);
    // The one line that shows the token (a secret: `outln!` would redact it).
    crate::write_stdout_unredacted(format_args!("strata serve: {}\n", app.access.url()));
    outln!("  data: {} (Ctrl-C stops)", args.data.display());
    if let Some(url) = &args.nats {
        outln!("  and the runs placed on the workers of {url}");
    }
    let router = router(app.clone());
    let stopping = app.stopping.clone();
    let served = axum::serve(listener, router)
        .with_graceful_shutdown(async move {
            let _ = tokio::signal::ctrl_c().await;
            stopping.send_replace(true);
        })
        .await;
    app.dashboard.watches.stop();
    served.map_err(|e| Failure::Other(anyhow::anyhow!("the server failed: {e}")))?;
    Ok(0)
}

/// The dashboard a run's own process serves (`strata run --serve`): stopped by
/// [`Self::finish`] once the run has ended.
pub(crate) struct RunServer {
    app: Shared,
    watch: Arc<RunWatch>,
    server: tokio::task::JoinHandle<()>,
}

/// How long the event streams are given to send the run's last records when it has ended.
const LAST_RECORDS: Duration = Duration::from_millis(500);

/// Serves the dashboard on `bound` from the process of run `run_id` in `data` (the directory
/// `dir`): that run fed by `live` (its event stream), the others read from their stores.
pub(crate) async fn serve_run(
    bound: Bound,
    data: PathBuf,
    dir: &std::path::Path,
    run_id: &str,
    live: Live,
) -> Result<RunServer, Failure> {
    let Bound { listener, access } = bound;
    let watch = RunWatch::live(dir, live, Arc::new(EventLines)).await.map_err(|e| {
        Failure::Other(anyhow::Error::new(e.context("cannot watch the run for the dashboard")))
    })?;
    let app = App::new(data, None, access);
    app.dashboard.watches.insert(run_id, watch.clone());
    let mut stopped = app.stopping.subscribe();
    let router = router(app.clone());
    let server = tokio::spawn(async move {
        let served = axum::serve(listener, router)
            .with_graceful_shutdown(async move {
                let _ = stopped.wait_for(|stop| *stop).await;
            })
            .await;
        if let Err(e) = served {
            errln!("warning: the dashboard stopped: {e}");
        }
    });
    // On standard error: standard output may be the run's JSON lines.
    // The run's own page: the fragment survives the redirect that takes the token away.
    errln!("strata serve: {}#run={}", app.access.url(), query_escape(run_id));
    errln!("  run {run_id}: the dashboard stops when the run ends");
    Ok(RunServer { app, watch, server })
}

impl RunServer {
    /// The run has ended: sends its last records and its end, then stops the server.
    pub(crate) async fn finish(self) {
        self.watch.finish().await;
        tokio::time::sleep(LAST_RECORDS).await;
        self.app.stopping.send_replace(true);
        // An open connection is not waited for long.
        let mut server = self.server;
        if tokio::time::timeout(Duration::from_secs(3), &mut server).await.is_err() {
            server.abort();
        }
        self.app.dashboard.watches.stop();
    }
}

fn router(app: Shared) -> Router {
    Router::new()
        .route("/", get(index))
        .route("/app.js", get(|| async { page("text/javascript; charset=utf-8", APP_JS) }))
        .route("/style.css", get(|| async { page("text/css; charset=utf-8", STYLE_CSS) }))
        .route("/api/runs", get(runs))
        .route("/api/runs/{id}", get(snapshot))
        .route("/api/runs/{id}/events", get(events))
        .route("/api/runs/{id}/calls", get(model_calls))
        .route("/api/runs/{id}/timeline", get(timeline))
        .route("/api/runs/{id}/decisions/{decision}/{action}", post(decide))
        .route("/api/runs/{id}/cancel", post(cancel))
        .route("/api/runs/{id}/resume", post(resume))
        .fallback(|| async { error(StatusCode::NOT_FOUND, "no such page; the dashboard is at /") })
        .layer(middleware::from_fn_with_state(app.clone(), guard))
        .with_state(app)
}

fn page(kind: &'static str, body: &'static str) -> Response {
    ([(header::CONTENT_TYPE, kind), (header::CACHE_CONTROL, "no-cache")], body).into_response()
}

/// The page, with the token its signing requests send in their `Authorization` header (only
/// a request that had the token is given it).
async fn index(State(app): State<Shared>) -> Response {
    let body = INDEX_HTML.replace("{{TOKEN}}", &html_escape(app.access.token()));
    (
        [(header::CONTENT_TYPE, "text/html; charset=utf-8"), (header::CACHE_CONTROL, "no-store")],
        body,
    )
        .into_response()
}

/// `text` safe in an HTML attribute.
fn html_escape(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c => out.push(c),
        }
    }
    out
}

/// A JSON error (the secrets this process knows redacted).
fn error(status: StatusCode, message: impl Into<String>) -> Response {
    let message = message.into();
    let body = serde_json::json!({ "error": agent_core::secrets::redact(&message) }).to_string();
    (status, [(header::CONTENT_TYPE, "application/json")], body).into_response()
}

/// A JSON body, the secrets this process knows redacted.
fn json(status: StatusCode, body: String) -> Response {
    let body = match agent_core::secrets::redact(&body) {
        std::borrow::Cow::Borrowed(_) => body,
        std::borrow::Cow::Owned(redacted) => redacted,
    };
    (
        status,
        [(header::CONTENT_TYPE, "application/json"), (header::CACHE_CONTROL, "no-store")],
        body,
    )
        .into_response()
}

/// The HTTP status of a refusal of the dashboard's ([`ApiErrorKind::http_status`]).
fn status_of(kind: ApiErrorKind) -> StatusCode {
    StatusCode::from_u16(kind.http_status()).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR)
}

/// A JSON body, or the refusal as a JSON error.
fn reply(result: Result<serde_json::Value, ApiError>) -> Response {
    match result {
        Ok(body) => json(StatusCode::OK, body.to_string()),
        Err(e) => error(status_of(e.kind), e.message),
    }
}

/// The answer to a request that acts on a run: 200 done, 202 accepted, or the refusal.
fn answer(result: Result<Answer, ApiError>) -> Response {
    match result {
        Ok(Answer::Done(body)) => json(StatusCode::OK, body.to_string()),
        Ok(Answer::Accepted(body)) => json(StatusCode::ACCEPTED, body.to_string()),
        Err(e) => error(status_of(e.kind), e.message),
    }
}

/// What every request passes first: the library's access rules ([`Access::check`]) on its
/// method, URL, `Host`, `Authorization` and cookies.
async fn guard(State(app): State<Shared>, request: Request, next: Next) -> Response {
    let verdict = {
        let headers = request.headers();
        let value = |name| headers.get(name).and_then(|v: &HeaderValue| v.to_str().ok());
        let host = value(header::HOST)
            .map(str::to_owned)
            .or_else(|| request.uri().authority().map(|a| a.as_str().to_owned()));
        let asked = Asked {
            reading: matches!(*request.method(), Method::GET | Method::HEAD),
            path: request.uri().path(),
            query: request.uri().query(),
            host: host.as_deref(),
            authorization: value(header::AUTHORIZATION),
            cookies: headers
                .get_all(header::COOKIE)
                .iter()
                .filter_map(|v| v.to_str().ok())
                .collect(),
        };
        app.access.check(&asked)
    };
    match verdict {
        Verdict::Pass => next.run(request).await,
        Verdict::Redirect { location, cookie } => {
            let mut response = StatusCode::SEE_OTHER.into_response();
            let headers = response.headers_mut();
            if let (Ok(location), Ok(cookie)) =
                (HeaderValue::from_str(&location), HeaderValue::from_str(&cookie))
            {
                headers.insert(header::LOCATION, location);
                headers.insert(header::SET_COOKIE, cookie);
                headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
                headers.insert(header::REFERRER_POLICY, HeaderValue::from_static("no-referrer"));
            }
            response
        }
        Verdict::Refused { refusal: Refusal::Host, message } => {
            error(StatusCode::MISDIRECTED_REQUEST, message)
        }
        Verdict::Refused { refusal: Refusal::TokenInUrl, message } => {
            error(StatusCode::BAD_REQUEST, message)
        }
        Verdict::Refused { refusal: Refusal::NoToken { page: false }, message } => {
            error(StatusCode::UNAUTHORIZED, message)
        }
        // A page is refused in a line of text.
        Verdict::Refused { refusal: Refusal::NoToken { page: true }, message } => (
            StatusCode::UNAUTHORIZED,
            [
                (header::CONTENT_TYPE, "text/plain; charset=utf-8"),
                (header::CACHE_CONTROL, "no-store"),
            ],
            message,
        )
            .into_response(),
    }
}

/// `GET /api/runs`.
async fn runs(State(app): State<Shared>) -> Response {
    reply(app.dashboard.runs().await.map(serde_json::Value::Array))
}

/// `GET /api/runs/{id}`.
async fn snapshot(State(app): State<Shared>, UrlPath(id): UrlPath<String>) -> Response {
    match app.dashboard.snapshot(&id).await {
        Ok(body) => json(StatusCode::OK, body),
        Err(e) => error(status_of(e.kind), e.message),
    }
}

/// The `agent=` of a query, decoded.
fn agent_of(query: Option<&str>) -> Option<String> {
    query.and_then(|q| query_value(q, "agent"))
}

/// `GET /api/runs/{id}/calls[?agent=ID]`: the run's model calls, the latest ones.
async fn model_calls(
    State(app): State<Shared>,
    UrlPath(id): UrlPath<String>,
    RawQuery(query): RawQuery,
) -> Response {
    reply(app.dashboard.calls(&id, agent_of(query.as_deref()).as_deref()).await)
}

/// `GET /api/runs/{id}/timeline[?agent=ID]`: the run's steps and spawned agents' work.
async fn timeline(
    State(app): State<Shared>,
    UrlPath(id): UrlPath<String>,
    RawQuery(query): RawQuery,
) -> Response {
    reply(app.dashboard.timeline(&id, agent_of(query.as_deref()).as_deref()).await)
}

/// `GET /api/runs/{id}/events`.
async fn events(
    State(app): State<Shared>,
    UrlPath(id): UrlPath<String>,
    RawQuery(query): RawQuery,
    headers: HeaderMap,
) -> Response {
    let w = match app.dashboard.watched(&id).await {
        Ok(w) => w,
        Err(e) => return error(status_of(e.kind), e.message),
    };
    let after = headers
        .get("last-event-id")
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.trim().parse::<u64>().ok())
        .or_else(|| query_raw(query.as_deref()?, "after")?.parse::<u64>().ok());
    let stream = delta_stream(w.follow(after), app.stopping.subscribe());
    let mut response = Sse::new(stream)
        .keep_alive(KeepAlive::new().interval(Duration::from_secs(15)).text("keep-alive"))
        .into_response();
    response.headers_mut().insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    response
}

/// What `follower` sends, as server-sent events, until the server stops.
fn delta_stream(
    follower: Follower,
    stopping: tokio::sync::watch::Receiver<bool>,
) -> impl Stream<Item = Result<Event, Infallible>> + Send {
    futures_util::stream::unfold((follower, stopping), |(mut follower, mut stopping)| async move {
        let sent = tokio::select! {
            // What was sent before the server stops is sent first.
            biased;
            sent = follower.next() => sent?,
            _ = stopping.wait_for(|stop| *stop) => return None,
        };
        let event = match &sent {
            Sent::Frame(frame) => {
                let event = Event::default().data(agent_core::secrets::redact(&frame.json));
                match frame.seq {
                    Some(seq) => event.id(seq.to_string()),
                    None => event,
                }
            }
            Sent::Reset => Event::default().data(RESET),
        };
        Some((Ok(event), (follower, stopping)))
    })
}

/// `POST /api/runs/ID/cancel`: stops a live run as Ctrl-C does (it ends interrupted and can
/// be resumed), through its operator inbox; audited as `human:NAME`.
async fn cancel(State(app): State<Shared>, UrlPath(id): UrlPath<String>, body: Bytes) -> Response {
    answer(app.dashboard.cancel(&id, &body).await)
}

/// `POST /api/runs/ID/resume`: starts `strata resume ID --data DATA --quiet` (this program,
/// with this server's environment, its API keys among it) in the background, its output in the
/// run's `resume.log`. 202 once the run is live again (the page then reads it anew, and its
/// watch follows it); a resume that refuses the run is answered 409 with what it said.
async fn resume(State(app): State<Shared>, UrlPath(id): UrlPath<String>) -> Response {
    let data = app.dashboard.data().to_path_buf();
    let resume_id = id.clone();
    let command = move || {
        let mut command = std::process::Command::new(std::env::current_exe()?);
        command.arg("resume").arg(&resume_id).arg("--data").arg(&data).arg("--quiet");
        Ok(command)
    };
    answer(app.dashboard.resume(&id, command).await)
}

/// `POST /api/runs/{id}/decisions/{decision}/{approve|veto}`.
async fn decide(
    State(app): State<Shared>,
    UrlPath((id, decision, action)): UrlPath<(String, String, String)>,
    body: Bytes,
) -> Response {
    answer(app.dashboard.decide(&id, &decision, &action, &body).await)
}
