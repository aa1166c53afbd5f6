//! `strata serve`, the web dashboard, over real HTTP: the runs list, the snapshot of a finished
//! run, the event stream of a run that is going, a human's approval through the API with the
//! token, and the bad input (a port in use, a data directory that does not exist, an address
//! off loopback without a token, an unknown run, malformed requests, signing without the
//! token: nothing written); a run on NATS JetStream read from its server, finished and live;
//! with `--nats URL`, a run placed on workers there, shown with no directory of it.
//!
//! The attacks on the dashboard: a read without the token (401), a foreign `Host` (DNS
//! rebinding: 421), the token in the URL of a signing POST or a cookie alone on one (refused),
//! and a stored record holding a secret of the serving process (served `[redacted]`).

use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use nats_store::test_url;
use serde_json::Value;

use crate::nats::{Namespace, run_args};
use crate::support::*;

/// A port nobody listens on (bound and released).
pub(crate) fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

/// `strata serve --data D --addr ADDR` and `extra`, once it listens.
pub(crate) fn serve(s: &Scratch, addr: &str, extra: &[&str]) -> Running {
    let mut args = vec!["serve", "--data", "D", "--addr", addr];
    args.extend_from_slice(extra);
    let mut running = s.spawn(&args);
    wait_for("strata serve to listen", || {
        assert!(!running.exited(), "serve exited:\n{}", running.stderr_so_far());
        running.stdout_so_far().contains("strata serve: http://")
    });
    printed(&running);
    running
}

/// The token of the server on each port, once read from the URL it printed ([`printed`]):
/// [`http`] and [`Events::open`] send it (`Authorization: Bearer`) unless the request gives its
/// own `Authorization` or `Cookie` (`("Authorization", "")` sends none that counts).
static TOKENS: Mutex<BTreeMap<u16, String>> = Mutex::new(BTreeMap::new());

/// The port and the token of a URL `strata serve` printed (`http://ADDR/?token=TOKEN`, and
/// `#run=ID` after it from `run --serve`), remembered for the requests to that port.
fn parse_url(url: &str) -> (u16, String) {
    let url = url.trim().split_once('#').map_or(url, |(url, _)| url);
    let (addr, token) = url.trim().split_once("/?token=").unwrap();
    let port: u16 = addr.rsplit(':').next().unwrap().parse().unwrap();
    let token = token.trim().to_owned();
    TOKENS.lock().unwrap().insert(port, token.clone());
    (port, token)
}

/// The port and the token `strata serve` printed in its URL.
fn printed(server: &Running) -> (u16, String) {
    let out = server.stdout_so_far();
    let url = out.lines().find_map(|l| l.strip_prefix("strata serve: http://")).unwrap();
    parse_url(url)
}

/// The request head's lines for `port` beyond the request line: `Host: 127.0.0.1:PORT` and the
/// port's token, unless `headers` give their own.
fn head(port: u16, headers: &[(&str, &str)]) -> String {
    let has = |name: &str| headers.iter().any(|(n, _)| n.eq_ignore_ascii_case(name));
    let mut head = String::new();
    if !has("Host") {
        head.push_str(&format!("Host: 127.0.0.1:{port}\r\n"));
    }
    if !has("Authorization")
        && !has("Cookie")
        && let Some(token) = TOKENS.lock().unwrap().get(&port)
    {
        head.push_str(&format!("Authorization: Bearer {token}\r\n"));
    }
    for (name, value) in headers {
        head.push_str(&format!("{name}: {value}\r\n"));
    }
    head
}

/// One HTTP/1.1 request to 127.0.0.1:`port`: the status, the response's head and its body.
fn http_full(
    port: u16,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: &str,
) -> (u16, String, String) {
    let mut stream = TcpStream::connect(("127.0.0.1", port)).unwrap();
    stream.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
    let request = format!(
        "{method} {path} HTTP/1.1\r\nConnection: close\r\nContent-Length: {}\r\n{}\r\n{body}",
        body.len(),
        head(port, headers)
    );
    stream.write_all(request.as_bytes()).unwrap();
    let mut response = String::new();
    stream.read_to_string(&mut response).unwrap();
    let status = response.split(' ').nth(1).and_then(|s| s.parse().ok()).unwrap_or(0);
    let (head, body) = response.split_once("\r\n\r\n").unwrap_or((&response, ""));
    (status, head.to_owned(), body.to_owned())
}

/// One HTTP/1.1 request to 127.0.0.1:`port`: the status and the body.
fn http(
    port: u16,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: &str,
) -> (u16, String) {
    let (status, _, body) = http_full(port, method, path, headers, body);
    (status, body)
}

/// The value of header `name` in a response's `head`.
fn header<'h>(head: &'h str, name: &str) -> Option<&'h str> {
    head.lines().find_map(|line| {
        let (n, v) = line.split_once(':')?;
        n.trim().eq_ignore_ascii_case(name).then(|| v.trim())
    })
}

/// A GET that must answer `status` with JSON.
#[track_caller]
pub(crate) fn get_json(port: u16, path: &str, headers: &[(&str, &str)], status: u16) -> Value {
    let (got, body) = http(port, "GET", path, headers, "");
    assert_eq!(got, status, "GET {path}: {body}");
    serde_json::from_str(&body).unwrap_or_else(|e| panic!("GET {path}: not JSON ({e}): {body}"))
}

/// A POST of `body` that must answer `status` with JSON.
#[track_caller]
fn post(port: u16, path: &str, token: Option<&str>, body: &str, status: u16) -> Value {
    // No token: an empty `Authorization`, so that the port's token is not sent either.
    let auth = token.map(|t| format!("Bearer {t}")).unwrap_or_default();
    let headers = vec![("Content-Type", "application/json"), ("Authorization", auth.as_str())];
    let (got, reply) = http(port, "POST", path, &headers, body);
    assert_eq!(got, status, "POST {path} {body}: {reply}");
    serde_json::from_str(&reply).unwrap_or_else(|e| panic!("POST {path}: not JSON ({e}): {reply}"))
}

/// An open event stream; its text so far.
struct Events {
    stream: TcpStream,
    text: String,
}

impl Events {
    fn open(port: u16, path: &str) -> Self {
        let mut stream = TcpStream::connect(("127.0.0.1", port)).unwrap();
        stream.set_read_timeout(Some(Duration::from_millis(200))).unwrap();
        let request = format!(
            "GET {path} HTTP/1.1\r\n{}\r\n",
            head(port, &[("Accept", "text/event-stream")])
        );
        stream.write_all(request.as_bytes()).unwrap();
        Self { stream, text: String::new() }
    }

    /// Reads until `found` holds for the text so far; panics after a minute.
    #[track_caller]
    fn until(&mut self, what: &str, found: impl Fn(&str) -> bool) {
        let deadline = Instant::now() + Duration::from_secs(60);
        let mut buf = [0u8; 8192];
        while !found(&self.text) {
            assert!(Instant::now() < deadline, "gave up waiting for {what}; got:\n{}", self.text);
            match self.stream.read(&mut buf) {
                Ok(0) => panic!("the event stream ended while waiting for {what}:\n{}", self.text),
                Ok(n) => self.text.push_str(&String::from_utf8_lossy(&buf[..n])),
                Err(e)
                    if matches!(
                        e.kind(),
                        std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                    ) => {}
                Err(e) => panic!("cannot read the event stream: {e}"),
            }
        }
    }

    /// The JSON of every `data:` line so far.
    fn deltas(&self) -> Vec<Value> {
        self.text
            .lines()
            .filter_map(|l| l.strip_prefix("data: "))
            .filter_map(|d| serde_json::from_str(d).ok())
            .collect()
    }
}

#[test]
fn serve_lists_the_runs_and_shows_a_finished_run_whole() {
    let s = Scratch::with_example();
    finished_run(&s);
    let port = free_port();
    let server = serve(&s, &format!("127.0.0.1:{port}"), &["--token", "t0k"]);
    assert!(server.stdout_so_far().contains(&format!("http://127.0.0.1:{port}/?token=t0k")));

    for (path, kind, needle) in [
        ("/", "text/html", "id=\"tree\""),
        ("/app.js", "text/javascript", "__strataRenderMs"),
        ("/style.css", "text/css", "data-status"),
    ] {
        let (status, head, body) = http_full(port, "GET", path, &[], "");
        assert_eq!(status, 200, "{path}: {head}\n{body}");
        assert!(header(&head, "content-type").unwrap().starts_with(kind), "{path}: {head}");
        assert!(body.contains(needle), "{path} lacks {needle}");
    }

    let runs = get_json(port, "/api/runs", &[], 200);
    let run = &runs.as_array().unwrap()[0];
    assert_eq!(
        (run["id"].as_str(), run["status"].as_str(), run["agents"].as_u64()),
        (Some("r"), Some("succeeded"), Some(9))
    );
    assert!(run["title"].as_str().unwrap().contains("greeting"), "{run}");
    // How long it took, and no failure: what `strata runs --json` says of it.
    let listed = s.strata(&["runs", "--data", "D", "--json"]).code(0).json();
    assert_eq!(run["duration_s"], listed[0]["duration_s"], "{run}");
    assert!(run["duration_s"].as_f64().unwrap() > 0.0, "{run}");
    assert_eq!(run["failure"], Value::Null, "{run}");

    let snap = get_json(port, "/api/runs/r", &[], 200);
    let agents = snap["agents"].as_array().unwrap();
    let ids: Vec<&str> = agents.iter().map(|a| a["id"].as_str().unwrap()).collect();
    for id in
        ["top-a", "top-b", "top-c", "mid-docs", "mid-build", "bottom-d1", "bottom-d2", "bottom-b1"]
    {
        assert!(ids.contains(&id), "{id} missing: {ids:?}");
    }
    assert_eq!(agents.len(), 9);
    for a in agents {
        assert_eq!(a["status"], "terminated", "{a}");
        assert!(["top", "mid", "bottom"].contains(&a["layer"].as_str().unwrap()), "{a}");
    }
    let mid = agents.iter().find(|a| a["id"] == "mid-docs").unwrap();
    assert_eq!(mid["parent"], "top-a");
    let decision = &snap["decisions"][0];
    assert_eq!(decision["status"], "approved", "{decision}");
    assert_eq!(decision["signatures"].as_array().unwrap().len(), 2, "{decision}");
    assert_eq!(decision["human_may_sign"], false);
    assert_eq!(snap["audit"]["ok"], true, "{}", snap["audit"]);
    assert_eq!(snap["progress"]["status"], "succeeded");
    assert_eq!(snap["progress"]["done"], snap["progress"]["total"]);
    let last = snap["last_seq"].as_u64().unwrap();
    assert_eq!(snap["audit"]["records"].as_u64(), Some(last + 1));
    assert!(!snap["events"].as_array().unwrap().is_empty());

    // Resumes after a seq: the records after it, with their ids.
    let mut events = Events::open(port, &format!("/api/runs/r/events?after={}", last - 2));
    events.until("the last two records", |t| t.contains(&format!("id: {last}")));
    assert!(events.text.contains("text/event-stream"), "{}", events.text);
    assert!(!events.text.contains(&format!("id: {}\n", last - 2)), "{}", events.text);

    // Unknown runs and pages: 404 with a JSON error.
    let e = get_json(port, "/api/runs/nope", &[], 404);
    assert!(e["error"].as_str().unwrap().contains("no run `nope`"), "{e}");
    get_json(port, "/api/runs/..", &[], 404);
    get_json(port, "/api/runs/nope/events", &[], 404);
    get_json(port, "/nothing/here", &[], 404);
    post(port, "/api/runs/nope/decisions/x/approve", Some("t0k"), r#"{"as":"alice"}"#, 404);
    server.kill();
}

/// The example team with alice allowed to sign and every plan needing a human, and a
/// one-step plan.
fn human_scratch() -> Scratch {
    let s = Scratch::with_example();
    let team = s.read("team.toml");
    s.write("team.toml", &format!("{team}\n[approvals]\nhumans = [\"alice\"]\nplans = true\n"));
    s.write(
        "plan.toml",
        r#"
id = "signed"
goal = "write a note once a human signs"

[[steps]]
id = "note"
domain = "docs"
tool = "write_file"
args = { path = "note.txt", content = "signed\n" }
"#,
    );
    s
}

#[test]
fn a_live_run_streams_its_records_and_a_human_approves_through_the_api() {
    let s = human_scratch();
    let mut run = start_run(&s, "h1");
    let decision = pending_decision(&s, &mut run, "h1", "the plan to wait for a human", |d| {
        d["status"] == "pending" && d["human_approval"]["allowed"][0] == "alice"
    });
    let port = free_port();
    let server = serve(&s, &format!("127.0.0.1:{port}"), &[]);
    let (_, token) = printed(&server);
    assert_eq!(token.len(), 32, "a generated token: {token}");

    let runs = get_json(port, "/api/runs", &[], 200);
    assert_eq!(runs[0]["status"], "running", "{runs}");
    let snap = get_json(port, "/api/runs/h1", &[], 200);
    assert_eq!(snap["humans"][0], "alice");
    let d = snap["decisions"]
        .as_array()
        .unwrap()
        .iter()
        .find(|d| d["id"] == decision.as_str())
        .unwrap();
    assert_eq!(
        (d["status"].as_str(), d["human_may_sign"].as_bool()),
        (Some("pending"), Some(true)),
        "{d}"
    );
    let last = snap["last_seq"].as_u64().unwrap();
    let mut events = Events::open(port, &format!("/api/runs/h1/events?after={last}"));
    events.until("the stream to open", |t| t.contains("text/event-stream"));

    // Signing without the token, or with a wrong one, or malformed: refused, nothing written.
    let requests = s.path("D/h1/requests");
    let before = snapshot(&requests);
    let path = format!("/api/runs/h1/decisions/{decision}/approve");
    let body = r#"{"as":"alice"}"#;
    let e = post(port, &path, None, body, 401);
    assert!(e["error"].as_str().unwrap().contains("token"), "{e}");
    post(port, &path, Some("wrong"), body, 401);
    let (status, _) = http(port, "POST", &path, &[("Authorization", "Basic alice")], body);
    assert_eq!(status, 401);
    post(port, &path, Some(&token), "{not json", 400);
    let e = post(port, &path, Some(&token), "{}", 400);
    assert!(e["error"].as_str().unwrap().contains("`as`"), "{e}");
    post(port, &path, Some(&token), r#"{"as":"alice","extra":1}"#, 400);
    let e = post(port, "/api/runs/h1/decisions/not-a-decision/approve", Some(&token), body, 400);
    assert!(e["error"].as_str().unwrap().contains("not a decision id"), "{e}");
    let veto = format!("/api/runs/h1/decisions/{decision}/veto");
    let e = post(port, &veto, Some(&token), body, 400);
    assert!(e["error"].as_str().unwrap().contains("reason"), "{e}");
    post(port, &format!("/api/runs/h1/decisions/{decision}/sign"), Some(&token), body, 404);
    // The token in the URL of a signing request (with no header, or with it too), or in the
    // cookie alone (which a forged cross-site request would carry): refused.
    let json = ("Content-Type", "application/json");
    let in_url = format!("{path}?token={token}");
    let (status, e) = http(port, "POST", &in_url, &[json, ("Authorization", "")], body);
    assert_eq!(status, 400, "{e}");
    assert!(e.contains("never takes the token from the URL"), "{e}");
    assert_eq!(http(port, "POST", &in_url, &[json], body).0, 400);
    let cookie = format!("strata_token_{port}={token}");
    let (status, e) = http(port, "POST", &path, &[json, ("Cookie", &cookie)], body);
    assert_eq!(status, 401, "{e}");
    assert!(e.contains("a cookie alone is not enough"), "{e}");
    assert_eq!(snapshot(&requests), before, "a refused request wrote to the run's requests");

    // With the token: through the operator inbox, applied by the live run.
    let reply = post(port, &path, Some(&token), body, 200);
    assert_eq!(
        (reply["outcome"].as_str(), reply["by"].as_str()),
        (Some("approved"), Some("human:alice")),
        "{reply}"
    );
    events.until("the approval and the step on the stream", |t| {
        t.contains("\"kind\":\"record\"")
            && t.contains("\"status\":\"approved\"")
            && t.contains("write_file")
    });
    let deltas = events.deltas();
    let seqs: Vec<u64> = deltas.iter().filter_map(|d| d["seq"].as_u64()).collect();
    assert!(seqs.iter().all(|&s| s > last), "records at or before {last}: {seqs:?}");
    assert!(seqs.windows(2).all(|w| w[0] < w[1]), "not in order: {seqs:?}");
    run.finish().code(0);
    events.until("the run's end", |t| t.contains("\"status\":\"succeeded\""));
    let snap = get_json(port, "/api/runs/h1", &[], 200);
    assert_eq!(snap["progress"]["status"], "succeeded");
    assert_eq!(snap["audit"]["ok"], true, "{}", snap["audit"]);
    server.kill();
}

#[test]
fn serve_refuses_bad_input() {
    let s = Scratch::with_example();
    std::fs::create_dir_all(s.path("D")).unwrap();
    // A port in use.
    let taken = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = taken.local_addr().unwrap().to_string();
    s.strata(&["serve", "--data", "D", "--addr", &addr]).bad_input(&[
        "cannot listen",
        &addr,
        "in use",
    ]);
    // No data directory.
    let free = format!("127.0.0.1:{}", free_port());
    s.strata(&["serve", "--data", "missing", "--addr", &free])
        .bad_input(&["missing", "does not exist"]);
    // Not an address.
    s.strata(&["serve", "--data", "D", "--addr", "localhost"])
        .bad_input(&["--addr", "not an address"]);
    // Off loopback without a token.
    let mut no_env = s.command(&["serve", "--data", "D", "--addr", "0.0.0.0:1"]);
    no_env.env_remove("STRATA_SERVE_TOKEN");
    Out::of(&["serve", "--data", "D", "--addr", "0.0.0.0:1"], &mut no_env)
        .bad_input(&["not a loopback address", "--token"]);
    // A NATS server that does not answer.
    let nobody = format!("nats://127.0.0.1:{}", free_port());
    s.strata(&["serve", "--data", "D", "--nats", &nobody, "--addr", &free]).bad_input(&[
        "--nats",
        &nobody,
        "cannot connect",
    ]);
    assert!(!s.path("D").read_dir().unwrap().any(|_| true), "nothing written");
}

#[test]
fn every_read_needs_the_token_from_the_header_or_the_cookie_its_url_sets() {
    let s = Scratch::with_example();
    std::fs::create_dir_all(s.path("D")).unwrap();
    let port = free_port();
    let mut command = s.command(&["serve", "--data", "D", "--addr", &format!("0.0.0.0:{port}")]);
    command.env("STRATA_SERVE_TOKEN", "envtok-1234");
    let mut server = Scratch::spawn_command(&["serve"], &mut command);
    wait_for("strata serve to listen", || {
        assert!(!server.exited(), "serve exited:\n{}", server.stderr_so_far());
        server.stdout_so_far().contains("/?token=envtok-1234")
    });
    // No token: nothing is read, not even the page or its script.
    let none = ("Authorization", "");
    get_json(port, "/api/runs", &[none], 401);
    get_json(port, "/api/runs/x/events", &[none], 401);
    for page in ["/", "/app.js", "/style.css", "/nothing"] {
        let (status, body) = http(port, "GET", page, &[none], "");
        assert_eq!(status, 401, "{page}: {body}");
        assert!(body.contains("?token="), "{page}: {body}");
    }
    get_json(port, "/api/runs?token=nope", &[none], 401);
    get_json(port, "/api/runs", &[("Authorization", "Bearer envtok-1234")], 200);

    // The printed URL sets the cookie and sends the browser to the URL without the token.
    let (status, head, _) = http_full(port, "GET", "/?token=envtok-1234", &[none], "");
    assert_eq!(status, 303, "{head}");
    assert_eq!(header(&head, "location"), Some("/"), "{head}");
    let set = header(&head, "set-cookie").unwrap();
    let name = format!("strata_token_{port}");
    assert!(set.starts_with(&format!("{name}=envtok-1234;")), "{set}");
    for attribute in ["HttpOnly", "SameSite=Strict", "Path=/"] {
        assert!(set.contains(attribute), "{set}");
    }
    let (status, head, _) =
        http_full(port, "GET", "/api/runs/x/events?after=3&token=envtok-1234", &[none], "");
    assert_eq!((status, header(&head, "location")), (303, Some("/api/runs/x/events?after=3")));
    // The cookie alone reads everything, and the page is given the token for its signing.
    let cookie = format!("{name}=envtok-1234");
    let with_cookie = [("Cookie", cookie.as_str())];
    assert_eq!(get_json(port, "/api/runs", &with_cookie, 200), serde_json::json!([]));
    let (status, page) = http(port, "GET", "/", &with_cookie, "");
    assert_eq!(status, 200);
    assert!(page.contains(r#"<meta name="strata-token" content="envtok-1234">"#), "{page}");
    // Another token, or the cookie of another port: refused.
    get_json(port, "/api/runs", &[("Cookie", &format!("{name}=nope"))], 401);
    get_json(port, "/api/runs", &[("Cookie", "strata_token_1=envtok-1234")], 401);
    server.kill();
}

#[test]
fn a_request_for_another_host_is_refused_even_with_the_token() {
    let s = Scratch::with_example();
    std::fs::create_dir_all(s.path("D")).unwrap();
    let server = serve(&s, "127.0.0.1:0", &["--token", "rebind-tok"]);
    let (port, _) = printed(&server);
    // DNS rebinding: a page of evil.example, its name now resolving to 127.0.0.1.
    for host in [
        format!("evil.example:{port}"),
        format!("127.0.0.1.nip.io:{port}"),
        "127.0.0.1".to_owned(),
        format!("127.0.0.1:{}", port.wrapping_add(1)),
    ] {
        for path in ["/", "/api/runs", "/?token=rebind-tok"] {
            let (status, body) = http(port, "GET", path, &[("Host", &host)], "");
            assert_eq!(status, 421, "Host {host} {path}: {body}");
        }
        let (status, _) = http(
            port,
            "POST",
            "/api/runs/x/decisions/y/approve",
            &[("Host", &host), ("Content-Type", "application/json")],
            r#"{"as":"alice"}"#,
        );
        assert_eq!(status, 421, "Host {host}");
    }
    for host in [format!("localhost:{port}"), format!("127.0.0.1:{port}"), format!("[::1]:{port}")]
    {
        get_json(port, "/api/runs", &[("Host", &host)], 200);
    }
    server.kill();
}

/// A secret of the serving process (`$OPENAI_API_KEY`) in a record stored by a run that did
/// not know it: served `[redacted]`, in the snapshot and on the event stream.
#[test]
fn a_served_record_holding_a_secret_shows_it_redacted() {
    const SECRET: &str = "sk-test-served-3e9d1c7a5b";
    let s = Scratch::with_example();
    s.write("W/notes.txt", &format!("{SECRET} is the key\n"));
    s.write(
        "notes.toml",
        r#"id = "notes"
goal = "read the notes"

[[steps]]
id = "read"
domain = "docs"
tool = "read_file"
args = { path = "notes.txt" }
"#,
    );
    let args = ["run", "notes.toml", "--data", "D", "--workspace", "W", "--run-id", "n"];
    let mut command = s.command(&[&args[..], &FAST, &["--quiet"]].concat());
    command.env_remove("OPENAI_API_KEY");
    Out::of(&args, &mut command).code(0);
    let stored = s.strata(&["inspect", "n", "audit", "--data", "D", "--json"]);
    assert!(stored.stdout.contains(SECRET), "the run did not know the secret: it is stored");

    let mut command = s.command(&["serve", "--data", "D", "--addr", "127.0.0.1:0"]);
    command.env("OPENAI_API_KEY", SECRET);
    let mut server = Scratch::spawn_command(&["serve"], &mut command);
    wait_for("strata serve to listen", || {
        assert!(!server.exited(), "serve exited:\n{}", server.stderr_so_far());
        server.stdout_so_far().contains("strata serve: http://")
    });
    let (port, _) = printed(&server);
    let (status, snap) = http(port, "GET", "/api/runs/n", &[], "");
    assert_eq!(status, 200, "{snap}");
    assert!(!snap.contains(SECRET), "served the secret: {snap}");
    assert!(snap.contains("[redacted] is the key"), "{snap}");
    let mut events = Events::open(port, "/api/runs/n/events?after=0");
    events.until("the records", |t| t.contains("read_file"));
    assert!(!events.text.contains(SECRET), "streamed the secret: {}", events.text);
    server.kill();
}

/// `strata run gated.toml --serve ADDR` and `extra`, at its gate: the process, the gate, the
/// port and the token it printed.
fn serving_run(s: &Scratch, extra: &[&str]) -> (Running, Gate, u16, String) {
    let more = [&["--no-sync", "--serve", "127.0.0.1:0"], extra].concat();
    let (mut run, gate) = crate::support::start_gated(s, "g", FAST[1], &more, |_| {});
    let mut url = None;
    wait_for("the run's dashboard URL", || {
        assert!(!run.exited(), "the run exited:\n{}", run.stderr_so_far());
        url = run
            .stderr_so_far()
            .lines()
            .find_map(|l| l.strip_prefix("strata serve: http://").map(str::to_owned));
        url.is_some()
    });
    let url = url.unwrap_or_default();
    // The URL opens the run itself, not the list of runs.
    assert!(url.trim().ends_with("#run=g"), "{url}");
    let (port, token) = parse_url(&url);
    (run, gate, port, token)
}

#[test]
fn a_run_serves_its_own_dashboard_from_its_event_stream_until_it_ends() {
    let s = Scratch::new();
    let (run, gate, port, token) = serving_run(&s, &["--quiet"]);
    assert_eq!(token.len(), 32, "a generated token: {token}");

    let runs = get_json(port, "/api/runs", &[], 200);
    let listed = runs.as_array().unwrap().iter().find(|r| r["id"] == "g").unwrap();
    assert_eq!((listed["status"].as_str(), listed["agents"].as_u64()), (Some("running"), Some(9)));
    let snap = get_json(port, "/api/runs/g", &[], 200);
    let agents = snap["agents"].as_array().unwrap();
    let mut ids: Vec<&str> = agents.iter().map(|a| a["id"].as_str().unwrap()).collect();
    ids.sort_unstable();
    ids.dedup();
    assert_eq!((agents.len(), ids.len()), (9, 9), "every agent of the default team: {ids:?}");
    assert_eq!(snap["progress"]["status"], "running", "{}", snap["progress"]);
    // Signing needs the token here too.
    post(port, "/api/runs/g/decisions/x/approve", None, r#"{"as":"alice"}"#, 401);

    let last = snap["last_seq"].as_u64().unwrap();
    let mut events = Events::open(port, &format!("/api/runs/g/events?after={last}"));
    events.until("the stream to open", |t| t.contains("text/event-stream"));
    gate.open();
    events.until("the last step and the run's end", |t| {
        t.contains("done.txt") && t.contains("\"status\":\"succeeded\"")
    });
    // Once the run has ended, the server stops: the stream ends.
    let deadline = Instant::now() + Duration::from_secs(30);
    let mut buf = [0u8; 8192];
    loop {
        assert!(Instant::now() < deadline, "the stream did not end:\n{}", events.text);
        match events.stream.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => events.text.push_str(&String::from_utf8_lossy(&buf[..n])),
            Err(e)
                if matches!(
                    e.kind(),
                    std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                ) => {}
            Err(_) => break,
        }
    }
    run.finish().code(0);
    let seqs: Vec<u64> = events.deltas().iter().filter_map(|d| d["seq"].as_u64()).collect();
    assert!(seqs.iter().all(|&s| s > last), "records at or before {last}: {seqs:?}");
    assert!(seqs.windows(2).all(|w| w[0] < w[1]), "not in order: {seqs:?}");
    assert!(TcpStream::connect(("127.0.0.1", port)).is_err(), "still serving after the run");

    // Every record of the run reached the stream: its last is the one `strata serve` reads.
    let other = free_port();
    let server = serve(&s, &format!("127.0.0.1:{other}"), &[]);
    let end = get_json(other, "/api/runs/g", &[], 200);
    assert_eq!(seqs.last().copied(), end["last_seq"].as_u64(), "{}", events.text);
    assert_eq!(end["progress"]["status"], "succeeded");
    server.kill();
}

#[test]
fn run_serve_refuses_a_port_in_use_before_writing_anything() {
    let s = Scratch::new();
    s.write("gated.toml", GATED_PLAN);
    let taken = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = taken.local_addr().unwrap().to_string();
    s.strata(&["run", "gated.toml", "--data", "D", "--serve", &addr]).bad_input(&[
        "cannot listen",
        &addr,
        "in use",
        "--serve",
    ]);
    s.strata(&["run", "gated.toml", "--data", "D", "--serve", "nowhere"])
        .bad_input(&["--serve", "not an address"]);
    let args = ["run", "gated.toml", "--data", "D", "--serve", "0.0.0.0:1"];
    let mut no_env = s.command(&args);
    no_env.env_remove("STRATA_SERVE_TOKEN");
    Out::of(&args, &mut no_env).bad_input(&["not a loopback address", "STRATA_SERVE_TOKEN"]);
    assert!(!s.path("D").exists(), "the data directory was written");
}

/// A run on NATS (`strata run --nats URL`): the dashboard reads its audit log, decisions and
/// agents from the server `run.json` names (its sled database holds none of them).
#[test]
fn serve_shows_a_finished_run_on_nats_from_its_server() {
    let s = Scratch::with_example();
    let ns = Namespace::new();
    let url = test_url();
    let id = ns.id();
    s.strata(&run_args("plan.toml", id, &url, &["--team", "team.toml"]))
        .code(0)
        .stdout_has(&["task `hello` succeeded"]);
    let inspected = s.strata(&["inspect", id, "audit", "--data", "D", "--json"]).code(0).json();
    let decisions = s.strata(&["inspect", id, "decisions", "--data", "D", "--json"]).code(0).json();

    let server = serve(&s, "127.0.0.1:0", &["--token", "t0k"]);
    let (port, token) = printed(&server);
    assert_eq!(token, "t0k");
    let runs = get_json(port, "/api/runs", &[], 200);
    let listed = runs.as_array().unwrap().iter().find(|r| r["id"] == id).unwrap();
    assert_eq!(
        (listed["status"].as_str(), listed["agents"].as_u64()),
        (Some("succeeded"), Some(9))
    );

    let snap = get_json(port, &format!("/api/runs/{id}"), &[], 200);
    let agents = snap["agents"].as_array().unwrap();
    let mut ids: Vec<&str> = agents.iter().map(|a| a["id"].as_str().unwrap()).collect();
    ids.sort_unstable();
    ids.dedup();
    assert_eq!((agents.len(), ids.len()), (9, 9), "every agent of the team: {ids:?}");
    for a in agents {
        assert_eq!(a["status"], "terminated", "{a}");
        assert!(["top", "mid", "bottom"].contains(&a["layer"].as_str().unwrap()), "{a}");
    }
    let decision = &snap["decisions"][0];
    assert_eq!(snap["decisions"].as_array().unwrap().len(), 1, "{}", snap["decisions"]);
    assert_eq!(decision["id"], decisions[0]["id"], "the decision on the server: {decision}");
    assert_eq!(decision["status"], "approved", "{decision}");
    assert_eq!(decision["signatures"].as_array().unwrap().len(), 2, "{decision}");
    assert_eq!(snap["progress"]["status"], "succeeded", "{}", snap["progress"]);
    assert_eq!(snap["progress"]["done"], snap["progress"]["total"], "{}", snap["progress"]);
    assert!(snap["progress"]["total"].as_u64().unwrap() > 0, "{}", snap["progress"]);
    let audit = &snap["audit"];
    assert_eq!(audit["ok"], true, "{audit}");
    assert!(audit["protection"].as_str().unwrap().contains("on the NATS server"), "{audit}");
    let records = inspected.as_array().unwrap().len() as u64;
    assert_eq!(audit["records"].as_u64(), Some(records), "{audit}");
    assert_eq!(snap["last_seq"].as_u64(), Some(records - 1));
    assert!(!snap["events"].as_array().unwrap().is_empty());
    server.kill();
}

/// A live run on NATS, at its gate: the dashboard follows it on the server and streams its
/// last records and its end.
#[test]
fn a_live_run_on_nats_streams_its_records() {
    let s = Scratch::new();
    let ns = Namespace::new();
    let url = test_url();
    let id = ns.id();
    s.write("gated.toml", GATED_PLAN);
    std::fs::create_dir_all(s.path("W")).unwrap();
    let gate = Gate(s.path("W/go"));
    let mut run = s.spawn(&run_args("gated.toml", id, &url, &[]));
    wait_for("the gate step to start", || {
        assert!(!run.exited(), "the run exited before the gate:\n{}", run.stderr_so_far());
        s.path("W/waiting").exists()
    });
    let server = serve(&s, "127.0.0.1:0", &[]);
    let (port, _) = printed(&server);
    let runs = get_json(port, "/api/runs", &[], 200);
    assert_eq!(runs[0]["status"], "running", "{runs}");
    let snap = get_json(port, &format!("/api/runs/{id}"), &[], 200);
    assert_eq!(snap["progress"]["status"], "running", "{}", snap["progress"]);
    assert_eq!(snap["agents"].as_array().unwrap().len(), 9, "{}", snap["agents"]);
    let last = snap["last_seq"].as_u64().unwrap();
    let mut events = Events::open(port, &format!("/api/runs/{id}/events?after={last}"));
    events.until("the stream to open", |t| t.contains("text/event-stream"));
    gate.open();
    events.until("the last step and the run's end", |t| {
        t.contains("done.txt") && t.contains("\"status\":\"succeeded\"")
    });
    run.finish().code(0);
    let seqs: Vec<u64> = events.deltas().iter().filter_map(|d| d["seq"].as_u64()).collect();
    assert!(!seqs.is_empty() && seqs.iter().all(|&s| s > last), "after {last}: {seqs:?}");
    assert!(seqs.windows(2).all(|w| w[0] < w[1]), "not in order: {seqs:?}");
    let end = get_json(port, &format!("/api/runs/{id}"), &[], 200);
    assert_eq!(end["progress"]["status"], "succeeded", "{}", end["progress"]);
    assert_eq!(end["audit"]["ok"], true, "{}", end["audit"]);
    // Verified once more at the end: every record of the run, not those of the last check.
    let last = end["last_seq"].as_u64().unwrap();
    assert_eq!(seqs.last(), Some(&last), "{}", events.text);
    assert_eq!(end["audit"]["records"].as_u64(), Some(last + 1), "{}", end["audit"]);
    server.kill();
}

/// `strata serve --nats URL` on another machine (an empty data directory): a run placed on
/// a worker of that server is listed and shown whole from the server, read-only (signing is
/// refused: it needs the run's directory); the gate opens and the run ends. The server going
/// away leaves the dashboard serving, the run marked unreachable.
#[test]
fn serve_nats_shows_a_run_placed_on_workers_with_no_directory_here() {
    let s = Scratch::new();
    let nats = crate::workers::Server::start();
    let url = nats.url();
    let gate = Gate(s.path("W/go"));
    let worker = crate::workers::worker(&s, &url, "wdash", &[]);
    let run = crate::workers::gated_run(&s, &url, "placed");
    std::fs::create_dir_all(s.path("EMPTY")).unwrap();
    let args =
        ["serve", "--data", "EMPTY", "--nats", &url, "--addr", "127.0.0.1:0", "--token", "T"];
    let mut server = s.spawn(&args);
    wait_for("strata serve to listen", || {
        assert!(!server.exited(), "serve exited:\n{}", server.stderr_so_far());
        server.stdout_so_far().contains("strata serve: http://")
    });
    let (port, token) = printed(&server);
    assert_eq!(token, "T");

    let runs = get_json(port, "/api/runs", &[], 200);
    let rows = runs.as_array().unwrap();
    assert_eq!(rows.len(), 1, "{runs}");
    let listed = &rows[0];
    assert_eq!(listed["id"], "placed", "{listed}");
    assert_eq!(listed["status"], "running", "{listed}");
    assert_eq!(listed["agents"].as_u64(), Some(9), "{listed}");
    assert_eq!(listed["task"], "gated", "{listed}");

    let snap = get_json(port, "/api/runs/placed", &[], 200);
    let agents = snap["agents"].as_array().unwrap();
    let mut ids: Vec<&str> = agents.iter().map(|a| a["id"].as_str().unwrap()).collect();
    ids.sort_unstable();
    ids.dedup();
    assert_eq!((agents.len(), ids.len()), (9, 9), "every agent of the team: {ids:?}");
    for agent in ["top-a", "mid-build", "bottom-b1"] {
        assert!(ids.contains(&agent), "{agent} missing: {ids:?}");
    }
    assert_eq!(snap["progress"]["status"], "running", "{}", snap["progress"]);
    assert!(snap["progress"]["total"].as_u64().unwrap() > 0, "{}", snap["progress"]);
    assert!(!snap["events"].as_array().unwrap().is_empty(), "{snap}");
    assert_eq!(snap["audit"]["ok"], true, "{}", snap["audit"]);
    // Read-only here: signing needs the run's directory.
    let refused =
        post(port, "/api/runs/placed/decisions/d-1/approve", Some("T"), r#"{"as":"alice"}"#, 409);
    let why = refused["error"].as_str().unwrap();
    assert!(why.contains("machine that coordinates the run"), "{why}");
    // A run nowhere is still unknown; text that cannot be a run id is not asked of the server.
    get_json(port, "/api/runs/nowhere", &[], 404);
    let bad = get_json(port, "/api/runs/no_where", &[], 404);
    let why = bad["error"].as_str().unwrap();
    assert!(why.contains("`no_where` cannot be a run id"), "{why}");

    gate.open();
    run.finish().code(0).stdout_has(&["task `gated` succeeded"]);
    // The end, and every record up to the last: on a loaded machine the audit summary was
    // once read a poll before the last records (records == last_seq).
    wait_for("the dashboard to see the run end with all its records", || {
        let snap = get_json(port, "/api/runs/placed", &[], 200);
        snap["progress"]["status"] == "ended"
            && snap["audit"]["records"].as_u64() == snap["last_seq"].as_u64().map(|l| l + 1)
    });
    let end = get_json(port, "/api/runs/placed", &[], 200);
    assert_eq!(end["audit"]["ok"], true, "{}", end["audit"]);
    let last = end["last_seq"].as_u64().unwrap();
    assert_eq!(end["audit"]["records"].as_u64(), Some(last + 1), "{}", end["audit"]);

    // The server goes away: the dashboard keeps serving and says the run cannot be read.
    drop(worker);
    drop(nats);
    wait_for("the run to be marked unreachable", || {
        let snap = get_json(port, "/api/runs/placed", &[], 200);
        snap["progress"]["status"] == "unreachable"
    });
    let (status, _) = http(port, "GET", "/api/runs", &[], "");
    assert_eq!(status, 200);
    assert!(!server.exited(), "serve stopped: {}", server.stderr_so_far());
    server.kill();
}

/// `GET /api/runs/{id}/calls[?agent=ID]` and `GET /api/runs/{id}/timeline[?agent=ID]`: the
/// model calls and the timeline of a run as `inspect RUN calls --json` and `timeline --json`
/// give them (what the dashboard shows), one agent's with `agent`; a run that is not there is
/// a 404, and the token is needed as for every read.
#[test]
fn the_api_serves_a_runs_model_calls_and_timeline_per_agent() {
    let server = crate::fake_llm::FakeLlm::start(crate::fake_llm::Mode::Sensible);
    let s = crate::llm::scratch(&crate::llm::team(&crate::llm::openai(&server), ""));
    crate::llm::run(&s, &["--unsandboxed"]).code(0);
    let stored = s.strata(&["inspect", "r1", "calls", "--data", "D", "--json"]).code(0).json();

    let running = serve(&s, "127.0.0.1:0", &[]);
    let (port, _) = printed(&running);
    let all = get_json(port, "/api/runs/r1/calls", &[], 200);
    let calls = all["calls"].as_array().unwrap();
    assert!(!calls.is_empty(), "{all:#}");
    assert_eq!(all["calls"], stored["calls"], "the same records as inspect's");
    assert_eq!(all["omitted"], 0);
    let agent = calls[0]["agent"].as_str().unwrap();
    let own = get_json(port, &format!("/api/runs/r1/calls?agent={agent}"), &[], 200);
    let own = own["calls"].as_array().unwrap();
    assert!(!own.is_empty() && own.iter().all(|c| c["agent"] == agent), "{own:#?}");
    let nobody = get_json(port, "/api/runs/r1/calls?agent=nobody", &[], 200);
    assert_eq!(nobody["calls"], serde_json::json!([]));
    let missing = get_json(port, "/api/runs/nope/calls", &[], 404);
    assert!(missing["error"].as_str().unwrap().contains("no run `nope`"), "{missing}");
    get_json(port, "/api/runs/r1/calls", &[("Authorization", "")], 401);
    // The timeline, as `inspect RUN timeline --json` gives it.
    let timeline = s.strata(&["inspect", "r1", "timeline", "--data", "D", "--json"]).code(0).json();
    assert_eq!(get_json(port, "/api/runs/r1/timeline", &[], 200), timeline);
    let worker = timeline["steps"][0]["agent"].as_str().unwrap();
    let own = get_json(port, &format!("/api/runs/r1/timeline?agent={worker}"), &[], 200);
    let own = own["steps"].as_array().unwrap();
    assert!(!own.is_empty() && own.iter().all(|st| st["agent"] == worker || st["for"] == worker));
    get_json(port, "/api/runs/nope/timeline", &[], 404);
    running.kill();
}
