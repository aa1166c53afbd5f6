//! `strata serve`: a web dashboard of the runs of a data directory, live.
//!
//! An axum server (HTTP/1) serves a small page (`serve/page/`, embedded: nothing is fetched at
//! run time) and a JSON API:
//!
//! - `GET /api/runs`: the runs (id, title, status, started, agents).
//! - `GET /api/runs/{id}`: a snapshot of one run ([`RunModel::snapshot_json`](strata::dashboard::RunModel::snapshot_json)).
//! - `GET /api/runs/{id}/events`: server-sent events, one small JSON delta per change
//!   ([`Delta`](strata::dashboard::Delta)), `id:` the last record's seq, so `Last-Event-ID` (or `?after=SEQ`)
//!   resumes.
//! - `POST /api/runs/{id}/decisions/{decision}/approve` and `/veto` with
//!   `{"as": "NAME", "reason": "..."}`: through the operator inbox, as `strata approve` and
//!   `strata veto` ([`strata::operator::send_decision`]).
//!
//! Runs are read as `strata inspect` reads them (the library's [`strata::dashboard`], with
//! [`reader`]). With `--nats URL`, the runs placed
//! on that server's workers (`strata run --nats URL` with `strata worker`s live there) are
//! listed too, and read from the server alone, so a dashboard on another machine, with no
//! directory of the run, shows them; a run in both is the data directory's. Such a run is
//! read-only here: signing goes through the operator inbox in the run's directory, on the
//! machine that coordinates it. Errors are JSON `{"error": "..."}`.
//!
//! **Security** ([`guard`]). Loopback by default; bound elsewhere, a token must be given
//! (`--token` or `$STRATA_SERVE_TOKEN`), else one is generated. Every request is refused (421)
//! unless its `Host` is the bound address, `localhost:PORT` or a loopback address with the
//! port (a page of another site that renamed itself to this address, DNS rebinding, cannot
//! read it). Every read (the page, its script, the JSON API, the event streams) needs the
//! token: `Authorization: Bearer TOKEN`, or the cookie `strata_token_PORT` (`HttpOnly`,
//! `SameSite=Strict`) that a GET with `?token=TOKEN` sets before redirecting to the same URL
//! without the token (the printed URL, `http://ADDR/?token=TOKEN`, does this). Signing (a
//! POST) takes the token from the `Authorization` header only: a cookie alone, which a
//! browser would send on a forged request too, is refused (401), and so is a `?token=` on a
//! POST (400). The page gets the token for its signing requests in the page itself, which
//! only a request with the token is given. Every response body and event has the secrets this
//! process knows redacted ([`agent_core::secrets`]).
//!
//! `strata run --serve ADDR` (and `strata resume --serve ADDR`) serves the same dashboard from
//! the run's own process ([`serve_run`]): its run is fed by its event stream
//! ([`RunWatch::live`](strata::dashboard::RunWatch::live)), the other runs of the data directory are read as here; the
//! server stops once the run has ended and its last records are sent.

use std::convert::Infallible;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::body::Bytes;
use axum::extract::{Path as UrlPath, RawQuery, Request, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::middleware::{self, Next};
use axum::response::sse::{Event, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use futures_util::stream::Stream;
use serde::Deserialize;

use agent_pool::placement::{REGISTRY, Registry};

use crate::cli::ServeArgs;
use crate::{Failure, bad_input};
use strata::dashboard::watch;
use strata::operator::{OperatorRequest, Submitted};
use strata::run::{BackgroundError, BackgroundResume};
use strata::run_dir::RunInfo;

mod reader;

pub(crate) use strata::dashboard::Live;

#[cfg(test)]
mod tests;

/// The environment variable of the token.
pub(crate) const TOKEN_VAR: &str = "STRATA_SERVE_TOKEN";
/// Event lines in a snapshot.
const SNAPSHOT_EVENTS: usize = 500;
/// The delta that tells a page it missed some: it reloads the snapshot.
const RESET: &str = r#"{"kind":"reset"}"#;
/// Largest request body accepted.
const MAX_BODY: usize = 64 * 1024;

const INDEX_HTML: &str = include_str!("serve/page/index.html");
const APP_JS: &str = include_str!("serve/page/app.js");
const STYLE_CSS: &str = include_str!("serve/page/style.css");

/// What every handler shares.
struct App {
    data: PathBuf,
    /// `--nats URL`: the server whose placed runs are listed too.
    server: Option<watch::Server>,
    /// The placed runs listed last (not in the data directory), shown as unreachable while
    /// the server does not answer.
    placed: std::sync::Mutex<Vec<serde_json::Value>>,
    token: String,
    /// Where the server listens: the `Host` a request must name, and the cookie's name.
    local: SocketAddr,
    watches: watch::Watches,
    /// Set when the server stops: the event streams end (else they would hold it open).
    stopping: tokio::sync::watch::Sender<bool>,
}

type Shared = Arc<App>;

/// A listening socket and the token: checked and bound before anything else is done.
pub(crate) struct Bound {
    listener: tokio::net::TcpListener,
    local: SocketAddr,
    token: String,
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
    let given = token.or_else(|| std::env::var(TOKEN_VAR).ok()).filter(|t| !t.trim().is_empty());
    let loopback = addr.ip().is_loopback();
    if !loopback && given.is_none() {
        let how = if flag == "--addr" { "--token TOKEN or " } else { "" };
        return Err(bad_input(anyhow::anyhow!(
            "{flag} {addr} is not a loopback address: give a token ({how}${TOKEN_VAR}) so that nobody else on the network can read the runs or sign"
        )));
    }
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
    let token = given.unwrap_or_else(|| uuid::Uuid::new_v4().simple().to_string());
    // Redacted from what is stored and served, like every secret of this process.
    agent_core::secrets::register(&token);
    Ok(Bound { listener, local, token })
}

/// `strata serve`.
pub(crate) async fn serve(args: ServeArgs) -> Result<u8, Failure> {
    if !args.data.is_dir() {
        return Err(bad_input(anyhow::anyhow!(
            "the data directory {} does not exist or is not a directory; give --data the directory of the runs (where `strata run --data` writes them)",
            args.data.display()
        )));
    }
    let Bound { listener, local, token } = bind("--addr", &args.addr, args.token.clone()).await?;
    let server = match &args.nats {
        Some(url) => Some(placed_runs(url).await?),
        None => None,
    };
    let app = Arc::new(App {
        data: args.data.clone(),
        server,
        placed: std::sync::Mutex::default(),
        token: token.clone(),
        local,
        watches: watch::Watches::new(reader::reader()),
        stopping: tokio::sync::watch::Sender::new(false),
    });
    // The one line that shows the token (a secret: `outln!` would redact it).
    crate::write_stdout_unredacted(format_args!("strata serve: {}\n", url(local, &token)));
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
    app.watches.stop();
    served.map_err(|e| Failure::Other(anyhow::anyhow!("the server failed: {e}")))?;
    Ok(0)
}

/// The registry of workers on the server `url` (`--nats URL`); a server that does not answer
/// (or has no JetStream) is bad input.
async fn placed_runs(url: &str) -> Result<watch::Server, Failure> {
    let connected = tokio::time::timeout(watch::SERVER_PATIENCE * 2, async {
        let store = strata::stores::connect_flag(url, REGISTRY).await?;
        let registry = Registry::open(&store).await.map_err(|e| {
            bad_input(anyhow::anyhow!("--nats {url}: the registry of workers: {e}"))
        })?;
        Ok::<_, Failure>(watch::Server { url: url.to_owned(), store, registry })
    })
    .await;
    connected.unwrap_or_else(|_| {
        Err(bad_input(anyhow::anyhow!(
            "--nats {url}: the NATS server did not answer within {}s; check the URL and that nats-server is running there",
            (watch::SERVER_PATIENCE * 2).as_secs()
        )))
    })
}

/// The dashboard a run's own process serves (`strata run --serve`): stopped by
/// [`Self::finish`] once the run has ended.
pub(crate) struct RunServer {
    app: Shared,
    watch: Arc<watch::RunWatch>,
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
    let Bound { listener, local, token } = bound;
    let watch = watch::RunWatch::live(dir, live, reader::reader()).await.map_err(|e| {
        Failure::Other(anyhow::Error::new(e.context("cannot watch the run for the dashboard")))
    })?;
    let app = Arc::new(App {
        data,
        server: None,
        placed: std::sync::Mutex::default(),
        token: token.clone(),
        local,
        watches: watch::Watches::new(reader::reader()),
        stopping: tokio::sync::watch::Sender::new(false),
    });
    app.watches.insert(run_id, watch.clone());
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
    errln!("strata serve: {}#run={}", url(local, &token), query_escape(run_id));
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
        self.app.watches.stop();
    }
}

/// The URL to open: the page, with the token for its first load (which sets the cookie).
fn url(local: SocketAddr, token: &str) -> String {
    format!("http://{local}/?token={}", query_escape(token))
}

/// `text` percent-encoded for a query value.
fn query_escape(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for b in text.bytes() {
        if b.is_ascii_alphanumeric() || b"-._~".contains(&b) {
            out.push(char::from(b));
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

/// `text` percent-decoded (`+` is a space), if it is valid UTF-8 once decoded.
fn query_unescape(text: &str) -> Option<String> {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'%' => {
                let hex = std::str::from_utf8(bytes.get(i + 1..i + 3)?).ok()?;
                out.push(u8::from_str_radix(hex, 16).ok()?);
                i += 3;
            }
            b'+' => {
                out.push(b' ');
                i += 1;
            }
            b => {
                out.push(b);
                i += 1;
            }
        }
    }
    String::from_utf8(out).ok()
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
    let body = INDEX_HTML.replace("{{TOKEN}}", &html_escape(&app.token));
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

/// Whether `given` is the token (compared in constant time).
fn token_ok(app: &App, given: Option<&str>) -> bool {
    let Some(given) = given else { return false };
    let (a, b) = (given.as_bytes(), app.token.as_bytes());
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

/// The token of a request's `Authorization: Bearer TOKEN` header.
fn header_token(request: &Request) -> Option<&str> {
    let value = request.headers().get(header::AUTHORIZATION)?;
    value.to_str().ok()?.strip_prefix("Bearer ")
}

/// The name of the cookie that carries the token of the server on `local` (cookies are shared
/// by every port of a host: the port keeps two dashboards apart).
fn cookie_name(local: SocketAddr) -> String {
    format!("strata_token_{}", local.port())
}

/// The token of a request's cookie of this server.
fn cookie_token<'r>(request: &'r Request, name: &str) -> Option<&'r str> {
    request
        .headers()
        .get_all(header::COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(';'))
        .find_map(|pair| pair.trim().strip_prefix(name)?.strip_prefix('='))
}

/// The `?token=` of a request's query (decoded), and the query without it.
fn query_token(query: Option<&str>) -> Option<(String, String)> {
    let query = query?;
    let mut token = None;
    let mut rest = Vec::new();
    for pair in query.split('&') {
        match pair.strip_prefix("token=") {
            Some(value) if token.is_none() => {
                token = Some(query_unescape(value).unwrap_or_default())
            }
            _ if pair.is_empty() => {}
            _ => rest.push(pair),
        }
    }
    Some((token?, rest.join("&")))
}

/// Whether `host` (a request's `Host`) names the server listening on `local`: its own address,
/// `localhost` or a loopback address, with its port (80 when none is given); any IP address
/// with the port when it listens on all of them. A name a page of another site could resolve
/// to this address (DNS rebinding) is none of these.
fn host_ok(local: SocketAddr, host: &str) -> bool {
    let host = host.trim();
    let (name, port) = if let Some(rest) = host.strip_prefix('[') {
        let Some((ip, after)) = rest.split_once(']') else { return false };
        match after.strip_prefix(':') {
            Some(port) => (ip, port.parse::<u16>().ok()),
            None if after.is_empty() => (ip, Some(80)),
            None => return false,
        }
    } else {
        match host.rsplit_once(':') {
            Some((name, port)) => (name, port.parse::<u16>().ok()),
            None => (host, Some(80)),
        }
    };
    if port != Some(local.port()) {
        return false;
    }
    if name.eq_ignore_ascii_case("localhost") {
        return true;
    }
    match name.parse::<std::net::IpAddr>() {
        Ok(ip) => ip == local.ip() || ip.is_loopback() || local.ip().is_unspecified(),
        Err(_) => false,
    }
}

/// What every request passes first: its `Host` must name this server (else 421); every
/// request needs the token, from the `Authorization` header or this server's cookie, and a
/// POST (signing) from the header only; a GET with `?token=TOKEN` sets the cookie and
/// redirects to the same URL without the token.
async fn guard(State(app): State<Shared>, request: Request, next: Next) -> Response {
    let host = request
        .headers()
        .get(header::HOST)
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned)
        .or_else(|| request.uri().authority().map(|a| a.as_str().to_owned()));
    if !host.as_deref().is_some_and(|h| host_ok(app.local, h)) {
        return error(
            StatusCode::MISDIRECTED_REQUEST,
            format!(
                "the Host {} is not this server's address: open http://{}/ (or localhost with its port)",
                host.as_deref().unwrap_or("(none)").escape_debug(),
                app.local
            ),
        );
    }
    let reading = matches!(*request.method(), axum::http::Method::GET | axum::http::Method::HEAD);
    let api = request.uri().path().starts_with("/api/");
    if let Some((token, rest)) = query_token(request.uri().query()) {
        if !reading {
            return error(
                StatusCode::BAD_REQUEST,
                "signing never takes the token from the URL (it would be logged and could be forged by a link): send `Authorization: Bearer TOKEN`",
            );
        }
        if !token_ok(&app, Some(&token)) {
            return unauthorized(api, "the token in the URL is not this server's");
        }
        let path = request.uri().path();
        let location = if rest.is_empty() { path.to_owned() } else { format!("{path}?{rest}") };
        let cookie = format!(
            "{}={}; Path=/; HttpOnly; SameSite=Strict",
            cookie_name(app.local),
            query_escape(&app.token)
        );
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
        return response;
    }
    let by_header = header_token(&request).is_some_and(|t| token_ok(&app, Some(t)));
    if by_header {
        return next.run(request).await;
    }
    if !reading {
        return error(
            StatusCode::UNAUTHORIZED,
            "signing needs the token `strata serve` printed in the header `Authorization: Bearer TOKEN` (a cookie alone is not enough)",
        );
    }
    let name = cookie_name(app.local);
    let by_cookie = cookie_token(&request, &name)
        .and_then(query_unescape)
        .is_some_and(|t| token_ok(&app, Some(&t)));
    if by_cookie {
        return next.run(request).await;
    }
    unauthorized(api, "no token")
}

/// The refusal of a read without the token: JSON for the API, a line of text for a page.
fn unauthorized(api: bool, why: &str) -> Response {
    let message = format!(
        "{why}: open the URL `strata serve` printed (http://ADDR/?token=TOKEN), or send `Authorization: Bearer TOKEN`"
    );
    if api {
        return error(StatusCode::UNAUTHORIZED, message);
    }
    (
        StatusCode::UNAUTHORIZED,
        [(header::CONTENT_TYPE, "text/plain; charset=utf-8"), (header::CACHE_CONTROL, "no-store")],
        message,
    )
        .into_response()
}

/// An error of a handler: its status and message, sent as JSON.
struct ApiError(StatusCode, String);

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        error(self.0, self.1)
    }
}

/// The directory of run `id`, or a 404.
fn run_dir(app: &App, id: &str) -> Result<PathBuf, ApiError> {
    let missing = || {
        ApiError(
            StatusCode::NOT_FOUND,
            format!(
                "no run `{}` in {}; GET /api/runs lists them",
                id.escape_debug(),
                app.data.display()
            ),
        )
    };
    crate::cli::parse_run_dir_name(id).map_err(|_| missing())?;
    let dir = app.data.join(id);
    if RunInfo::read(&dir).is_err() {
        return Err(missing());
    }
    Ok(dir)
}

/// The placed runs of the server of `--nats` that the data directory does not hold (`local`,
/// its run ids), as rows of `GET /api/runs`; those listed last, marked unreachable, if the
/// server does not answer.
async fn placed_rows(app: &App, local: &[String]) -> Vec<serde_json::Value> {
    let Some(server) = &app.server else { return Vec::new() };
    let listed = tokio::time::timeout(watch::SERVER_PATIENCE, server.registry.runs())
        .await
        .map_err(|_| watch::unanswered(server))
        .and_then(|r| r.map_err(strata::Error::failed_from));
    let mut last = watch::lock(&app.placed);
    match listed {
        Ok(placed) => {
            let rows: Vec<serde_json::Value> = placed
                .iter()
                .filter(|run| !local.iter().any(|id| *id == *run.run_id))
                .map(|run| placed_row(app, run))
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
fn placed_row(app: &App, run: &agent_pool::placement::PlacedRun) -> serde_json::Value {
    let spec: Option<strata::placement::PlacedSpec> = serde_json::from_value(run.spec.clone()).ok();
    let (task, goal, started_at) =
        spec.map(|s| (s.task_id, s.goal, s.started_at)).unwrap_or_default();
    let agents = app.watches.agents(&run.run_id).unwrap_or(run.agents.len());
    serde_json::json!({
        "id": run.run_id,
        "task": task,
        "title": goal,
        "status": if run.closed { "ended" } else { "running" },
        "started_at": started_at,
        "started": crate::runs::format_time(started_at),
        "agents": agents,
        "placed": true,
    })
}

/// `GET /api/runs`.
async fn runs(State(app): State<Shared>) -> Response {
    let data = app.data.clone();
    let app2 = app.clone();
    let listed = tokio::task::spawn_blocking(move || -> std::io::Result<Vec<serde_json::Value>> {
        let mut rows = Vec::new();
        for entry in std::fs::read_dir(&data)?.flatten() {
            let dir = entry.path();
            let Ok(info) = RunInfo::read(&dir) else { continue };
            let agents = app2.watches.agents(&info.run_id).or_else(|| team_agents(&dir));
            let end = info.finished_at.unwrap_or_else(strata::run_dir::now_ms);
            rows.push(serde_json::json!({
                "id": info.run_id,
                "task": info.task_id,
                "title": info.goal,
                "status": crate::runs::effective_status(&dir, &info),
                "started_at": info.started_at,
                "started": crate::runs::format_time(info.started_at),
                "duration_s": end.saturating_sub(info.started_at) as f64 / 1000.0,
                "failure": info.failure,
                "agents": agents,
                "usage": info.usage,
            }));
        }
        rows.sort_by_key(|r| r["started_at"].as_u64().unwrap_or(0));
        Ok(rows)
    })
    .await;
    match listed {
        Ok(Ok(mut rows)) => {
            let local: Vec<String> =
                rows.iter().filter_map(|r| r["id"].as_str().map(str::to_owned)).collect();
            rows.extend(placed_rows(&app, &local).await);
            rows.sort_by_key(|r| r["started_at"].as_u64().unwrap_or(0));
            json(StatusCode::OK, serde_json::Value::Array(rows).to_string())
        }
        Ok(Err(e)) => error(
            StatusCode::INTERNAL_SERVER_ERROR,
            format!("cannot read the data directory {}: {e}", app.data.display()),
        ),
        Err(e) => error(StatusCode::INTERNAL_SERVER_ERROR, format!("cannot list the runs: {e}")),
    }
}

/// How many agents the team file of the run in `dir` configures.
fn team_agents(dir: &std::path::Path) -> Option<usize> {
    let path = dir.join(strata::run_dir::TEAM_FILE);
    let text = std::fs::read_to_string(&path).ok()?;
    let tools = agent_core::tools::ToolRegistry::with_builtins();
    team_file::parse_stored_team(&path, &text, &tools).ok().map(|t| t.spec.agents.len())
}

/// The watch of run `id` (in the data directory, else placed on the server of `--nats`), or
/// the error response.
async fn watched(app: &App, id: &str) -> Result<Arc<watch::RunWatch>, ApiError> {
    let dir = match run_dir(app, id) {
        Ok(dir) => dir,
        Err(missing) => {
            let Some(server) = &app.server else { return Err(missing) };
            // A placed run's id follows the run id rule; any other text names none.
            let run_id = match agent_state::RunId::parse(id) {
                Ok(run_id) => run_id,
                Err(e) => return Err(ApiError(missing.0, format!("{}; {e}", missing.1))),
            };
            return match app.watches.placed(&run_id, server).await {
                Ok(Some(w)) => Ok(w),
                Ok(None) => Err(ApiError(
                    missing.0,
                    format!("{}; nor is it placed on the NATS server {}", missing.1, server.url),
                )),
                Err(e) => Err(ApiError(
                    StatusCode::BAD_GATEWAY,
                    format!(
                        "cannot read run `{id}` on the NATS server {}: {}",
                        server.url,
                        e.chain_text()
                    ),
                )),
            };
        }
    };
    app.watches.get(id, &dir).await.map_err(|e| {
        ApiError(
            StatusCode::INTERNAL_SERVER_ERROR,
            format!("cannot read run `{id}`: {}", e.chain_text()),
        )
    })
}

/// `GET /api/runs/{id}`.
async fn snapshot(State(app): State<Shared>, UrlPath(id): UrlPath<String>) -> Response {
    match watched(&app, &id).await {
        Ok(w) => {
            let body = watch::lock(&w.state).model.snapshot_json(SNAPSHOT_EVENTS);
            json(StatusCode::OK, body)
        }
        Err(e) => e.into_response(),
    }
}

/// The directory of run `id` (or a 404) and the `agent=` of `query`, decoded.
fn run_and_agent(
    app: &App,
    id: &str,
    query: Option<&str>,
) -> Result<(PathBuf, Option<String>), ApiError> {
    let dir = run_dir(app, id)?;
    let agent = query
        .and_then(|q| q.split('&').find_map(|p| p.strip_prefix("agent=")).and_then(query_unescape));
    Ok((dir, agent))
}

/// Most call records `GET /api/runs/{id}/calls` returns: the latest ones (`omitted` says how
/// many earlier ones were left out).
const MOST_CALLS: usize = 200;

/// `GET /api/runs/{id}/calls[?agent=ID]`: the run's model calls (every agent's, or one's) as
/// `strata inspect RUN calls --json` prints them, the latest [`MOST_CALLS`], read from a copy
/// of the run's store.
async fn model_calls(
    State(app): State<Shared>,
    UrlPath(id): UrlPath<String>,
    RawQuery(query): RawQuery,
) -> Response {
    let (dir, agent) = match run_and_agent(&app, &id, query.as_deref()) {
        Ok(found) => found,
        Err(e) => return e.into_response(),
    };
    let read = async {
        let store = strata::operator::read_copy(&dir).await?;
        let all = tokio::task::spawn_blocking(move || {
            agent_llm::LlmStore::load_calls(&agent_llm::SledLlmStore::open(&store)?)
        })
        .await??;
        Ok::<_, anyhow::Error>(all)
    };
    let all = match read.await {
        Ok(all) => all,
        Err(e) => {
            return error(
                StatusCode::INTERNAL_SERVER_ERROR,
                format!("cannot read run `{id}`'s model calls: {e:#}"),
            );
        }
    };
    let mine = strata::audit::calls_of_agent(all.clone(), agent.as_deref());
    let omitted = mine.len().saturating_sub(MOST_CALLS);
    let mut body = crate::inspect::calls::json(&mine[omitted..], &all);
    body["omitted"] = serde_json::Value::from(omitted);
    json(StatusCode::OK, body.to_string())
}

/// `GET /api/runs/{id}/timeline[?agent=ID]`: the run's steps and spawned agents' work, as
/// `strata inspect RUN timeline --json` gives them, read from a copy of the run's stores.
async fn timeline(
    State(app): State<Shared>,
    UrlPath(id): UrlPath<String>,
    RawQuery(query): RawQuery,
) -> Response {
    let (dir, agent) = match run_and_agent(&app, &id, query.as_deref()) {
        Ok(found) => found,
        Err(e) => return e.into_response(),
    };
    let read = async {
        let info = RunInfo::read(&dir)?;
        let store = strata::operator::read_copy(&dir).await?;
        let stores = strata::Stores::of_run(&store, &dir, &info).await?;
        let records = stores.audit.records(None).await?;
        let started_at = info.started_at;
        let (messages, calls) = tokio::task::spawn_blocking(move || -> anyhow::Result<_> {
            let messages = strata::audit::timeline::bus_history(&store, &info)?;
            let calls = agent_llm::LlmStore::load_calls(&agent_llm::SledLlmStore::open(&store)?)?;
            Ok((messages, calls))
        })
        .await??;
        Ok::<_, anyhow::Error>((started_at, records, messages, calls))
    };
    match read.await {
        Ok((started_at, records, messages, calls)) => {
            let entries = strata::audit::timeline::of_agent(
                strata::audit::timeline::build(&messages, &records),
                agent.as_deref(),
            );
            let body = crate::inspect::timeline::json(&entries, started_at, &calls);
            json(StatusCode::OK, body.to_string())
        }
        Err(e) => error(
            StatusCode::INTERNAL_SERVER_ERROR,
            format!("cannot read run `{id}`'s timeline: {e:#}"),
        ),
    }
}

/// `GET /api/runs/{id}/events`.
async fn events(
    State(app): State<Shared>,
    UrlPath(id): UrlPath<String>,
    RawQuery(query): RawQuery,
    headers: HeaderMap,
) -> Response {
    let w = match watched(&app, &id).await {
        Ok(w) => w,
        Err(e) => return e.into_response(),
    };
    let after = headers
        .get("last-event-id")
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.trim().parse::<u64>().ok())
        .or_else(|| {
            let query = query?;
            query.split('&').find_map(|p| p.strip_prefix("after="))?.parse::<u64>().ok()
        });
    let stream = delta_stream(w, after, app.stopping.subscribe());
    let mut response = Sse::new(stream)
        .keep_alive(KeepAlive::new().interval(Duration::from_secs(15)).text("keep-alive"))
        .into_response();
    response.headers_mut().insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    response
}

/// The frames after `after` that the ring still holds, then every new one; a `reset` when
/// some were lost (the page then reloads the snapshot).
fn delta_stream(
    w: Arc<watch::RunWatch>,
    after: Option<u64>,
    stopping: tokio::sync::watch::Receiver<bool>,
) -> impl Stream<Item = Result<Event, Infallible>> + Send {
    let receiver = w.frames.subscribe();
    // Subscribed first: a frame made meanwhile is in the ring and on the receiver, and is
    // sent once (frames up to `seen` are skipped on the receiver).
    let (first, seen) = {
        let state = watch::lock(&w.state);
        let seen = state.ring.back().map_or(0, |f| f.n);
        let last = state.model.last_seq();
        let first: Vec<Event> = match after {
            Some(after) if last.is_some_and(|l| l > after) => {
                let covered = state.ring.front().is_some_and(|f| f.seq.is_some_and(|s| s <= after));
                if covered {
                    state
                        .ring
                        .iter()
                        .filter(|f| f.seq.is_some_and(|s| s > after))
                        .map(|f| frame_event(f))
                        .collect()
                } else {
                    vec![Event::default().data(RESET)]
                }
            }
            _ => Vec::new(),
        };
        (first, seen)
    };
    futures_util::stream::unfold(
        (first.into_iter(), receiver, seen, w, stopping),
        |(mut first, mut receiver, seen, w, mut stopping)| async move {
            if let Some(event) = first.next() {
                return Some((Ok(event), (first, receiver, seen, w, stopping)));
            }
            loop {
                let received = tokio::select! {
                    // What was sent before the server stops is sent first.
                    biased;
                    received = receiver.recv() => received,
                    _ = stopping.wait_for(|stop| *stop) => return None,
                };
                match received {
                    Ok(frame) if frame.n <= seen => continue,
                    Ok(frame) => {
                        w.touch();
                        let event = frame_event(&frame);
                        return Some((Ok(event), (first, receiver, frame.n, w, stopping)));
                    }
                    Err(tokio::sync::broadcast::error::RecvError::Lagged(_)) => {
                        let event = Event::default().data(RESET);
                        let seen = current_n(&w);
                        return Some((Ok(event), (first, receiver, seen, w, stopping)));
                    }
                    Err(tokio::sync::broadcast::error::RecvError::Closed) => return None,
                }
            }
        },
    )
}

/// The number of the last frame of the run.
fn current_n(w: &watch::RunWatch) -> u64 {
    watch::lock(&w.state).ring.back().map_or(0, |f| f.n)
}

fn frame_event(frame: &watch::Frame) -> Event {
    let event = Event::default().data(agent_core::secrets::redact(&frame.json));
    match frame.seq {
        Some(seq) => event.id(seq.to_string()),
        None => event,
    }
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

/// The directory of run `id` in the data directory, or the answer that refuses to act on it:
/// 404 when there is no such run, 409 when it is a run placed on the NATS server by another
/// machine (`how` says where to act on it instead).
async fn local_run(app: &App, id: &str, how: &str) -> Result<PathBuf, Response> {
    match run_dir(app, id) {
        Ok(dir) => Ok(dir),
        Err(e) => {
            // Text that breaks the run id rule names no placed run.
            if let Some(server) = &app.server
                && let Ok(run_id) = agent_state::RunId::parse(id)
                && (app.watches.is_placed(id)
                    || matches!(
                        tokio::time::timeout(watch::SERVER_PATIENCE, server.registry.run(&run_id))
                            .await,
                        Ok(Ok(Some(_)))
                    ))
            {
                return Err(error(
                    StatusCode::CONFLICT,
                    format!(
                        "run `{id}` is placed on the NATS server {} by another machine and has no directory in {}: this dashboard only reads it. {how}",
                        server.url,
                        app.data.display()
                    ),
                ));
            }
            Err(e.into_response())
        }
    }
}

/// The body of `POST /api/runs/ID/cancel`: who asks (a name; `dashboard` when not given).
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct CancelBody {
    #[serde(rename = "as")]
    as_name: Option<String>,
}

/// `POST /api/runs/ID/cancel`: stops a live run as Ctrl-C does (it ends interrupted and can
/// be resumed), through its operator inbox; audited as `human:NAME`.
async fn cancel(State(app): State<Shared>, UrlPath(id): UrlPath<String>, body: Bytes) -> Response {
    if let Err(e) = local_run(
        &app,
        &id,
        "Cancel it where it runs (Ctrl-C, or the `strata serve` of that machine).",
    )
    .await
    {
        return e;
    }
    if body.len() > MAX_BODY {
        return error(StatusCode::PAYLOAD_TOO_LARGE, "the request body is too large");
    }
    let body: CancelBody = if body.iter().all(u8::is_ascii_whitespace) {
        CancelBody::default()
    } else {
        match serde_json::from_slice(&body) {
            Ok(body) => body,
            Err(e) => {
                return error(
                    StatusCode::BAD_REQUEST,
                    format!("the body must be empty or JSON like {{\"as\": \"NAME\"}}: {e}"),
                );
            }
        }
    };
    let human = body.as_name.unwrap_or_else(|| "dashboard".to_owned());
    match strata::operator::send_cancel(&app.data, &id, &human).await.map_err(Failure::from) {
        Ok(Submitted::Applied(done)) => json(
            StatusCode::OK,
            serde_json::json!({"outcome": done.outcome, "by": format!("human:{human}"), "message": "the run stops as on Ctrl-C; resume it to go on"}).to_string(),
        ),
        Ok(Submitted::Queued | Submitted::TimedOut) => json(
            StatusCode::ACCEPTED,
            serde_json::json!({"outcome": "queued", "by": format!("human:{human}"), "message": "the run has not taken the cancel yet; it stops when it reads its requests"}).to_string(),
        ),
        Err(Failure::BadInput(e)) => error(StatusCode::CONFLICT, format!("{e:#}")),
        Err(Failure::Other(e)) => error(StatusCode::INTERNAL_SERVER_ERROR, format!("{e:#}")),
    }
}

/// How long `POST /api/runs/ID/resume` watches the `strata resume` it started, until the run
/// is live again: one that refuses the run (finished, running, needing `--unsandboxed`) does
/// so within this.
const RESUME_CHECK: Duration = Duration::from_secs(10);

/// The file in the run's directory that a resume started by the dashboard writes its output
/// to.
pub(crate) const RESUME_LOG: &str = "resume.log";

/// `POST /api/runs/ID/resume`: starts `strata resume ID --data DATA --quiet` (this program,
/// with this server's environment, its API keys among it) in the background, its output in the
/// run's `resume.log`. 202 once the run is live again (the page then reads it anew, and its
/// watch follows it); a resume that refuses the run is answered 409 with what it said.
async fn resume(State(app): State<Shared>, UrlPath(id): UrlPath<String>) -> Response {
    let dir = match local_run(
        &app,
        &id,
        "Resume it on the machine that coordinates it (`strata resume` there).",
    )
    .await
    {
        Ok(dir) => dir,
        Err(e) => return e,
    };
    let data = app.data.clone();
    let resume_id = id.clone();
    let command = move || {
        let mut command = std::process::Command::new(std::env::current_exe()?);
        command.arg("resume").arg(&resume_id).arg("--data").arg(&data).arg("--quiet");
        Ok(command)
    };
    let resumed = strata::run::resume_in_background(&dir, command, RESUME_LOG, RESUME_CHECK).await;
    match resumed {
        Ok(BackgroundResume::Running) => {
            error(StatusCode::CONFLICT, format!("run {id} is running: there is nothing to resume"))
        }
        Ok(BackgroundResume::Finished) => json(
            StatusCode::OK,
            serde_json::json!({"outcome": "finished", "message": format!("run {id} resumed and ended")}).to_string(),
        ),
        Ok(BackgroundResume::Refused { status, said }) => error(
            StatusCode::CONFLICT,
            format!("`strata resume {id}` ended at once ({status}): {said}"),
        ),
        Ok(BackgroundResume::Resuming) => json(
            StatusCode::ACCEPTED,
            serde_json::json!({"outcome": "resuming", "message": format!("run {id} is resuming; its output goes to {RESUME_LOG} in its directory")}).to_string(),
        ),
        Err(BackgroundError::Status(e)) => error(
            StatusCode::INTERNAL_SERVER_ERROR,
            format!("cannot tell whether run {id} is running: {e}"),
        ),
        Err(BackgroundError::Start(e)) => error(
            StatusCode::INTERNAL_SERVER_ERROR,
            format!("cannot start `strata resume {id}`: {e}"),
        ),
    }
}

/// `POST /api/runs/{id}/decisions/{decision}/{approve|veto}`.
async fn decide(
    State(app): State<Shared>,
    UrlPath((id, decision, action)): UrlPath<(String, String, String)>,
    body: Bytes,
) -> Response {
    let veto = match action.as_str() {
        "approve" => false,
        "veto" => true,
        other => {
            return error(
                StatusCode::NOT_FOUND,
                format!("no action `{}`: POST .../approve or .../veto", other.escape_debug()),
            );
        }
    };
    if let Err(e) = local_run(&app, &id, "Approvals and vetoes go through the operator inbox in the run's directory: sign from the machine that coordinates the run (its `strata serve`, or `strata approve`/`strata veto` there)").await {
        return e;
    }
    let body = match sign_body(&body) {
        Ok(body) => body,
        Err(refused) => return refused.into_response(),
    };
    let reason = body.reason.unwrap_or_default();
    if veto && reason.trim().is_empty() {
        return error(StatusCode::BAD_REQUEST, "a veto needs a reason: give \"reason\"");
    }
    let request = move |decision, human| {
        if veto {
            OperatorRequest::Veto { decision, human, reason }
        } else {
            OperatorRequest::Approve { decision, human }
        }
    };
    let target = strata::operator::Target {
        data: &app.data,
        run: &id,
        as_name: Some(&body.as_name),
        no_wait: false,
    };
    let sent = strata::operator::send_decision(&target, &decision, request)
        .await
        .map(|sent| (sent.decision, sent.human, sent.delivery.submitted))
        .map_err(Failure::from);
    decided(&id, sent)
}

/// The body of a signing request, or the answer that refuses it.
fn sign_body(body: &[u8]) -> Result<SignBody, ApiError> {
    if body.len() > MAX_BODY {
        let too_large = "the request body is too large".to_owned();
        return Err(ApiError(StatusCode::PAYLOAD_TOO_LARGE, too_large));
    }
    serde_json::from_slice(body).map_err(|e| {
        ApiError(
            StatusCode::BAD_REQUEST,
            format!("the body must be JSON like {{\"as\": \"NAME\", \"reason\": \"why\"}}: {e}"),
        )
    })
}

/// The answer to a signature or a veto of run `id`, as `sent` through its operator inbox.
fn decided(
    id: &str,
    sent: Result<(agent_state::DecisionId, String, Submitted), Failure>,
) -> Response {
    let reply = |status, outcome: &str, decision: String, human: &str, message: &str| {
        json(
            status,
            serde_json::json!({"outcome": outcome, "decision": decision, "by": format!("human:{human}"), "message": message})
                .to_string(),
        )
    };
    match sent {
        Ok((d, human, Submitted::Applied(done))) => {
            reply(StatusCode::OK, &done.outcome, d.to_string(), &human, "applied by the run")
        }
        Ok((d, human, Submitted::Queued)) => reply(
            StatusCode::ACCEPTED,
            "queued",
            d.to_string(),
            &human,
            &format!(
                "run {id} is not running: the request is queued; `strata resume {id}` applies it"
            ),
        ),
        Ok((d, human, Submitted::TimedOut)) => reply(
            StatusCode::ACCEPTED,
            "queued",
            d.to_string(),
            &human,
            "the run has not taken the request yet; it is applied when the run reads its requests",
        ),
        Err(Failure::BadInput(e)) => error(StatusCode::BAD_REQUEST, format!("{e:#}")),
        Err(Failure::Other(e)) => error(StatusCode::INTERNAL_SERVER_ERROR, format!("{e:#}")),
    }
}
