//! The dashboard's page at 10 000 agents (`strata serve`, issue #20), in headless Chromium:
//! `strata init --scale 10000` writes a team and plan, `strata run` runs it, `strata serve`
//! serves it, and the page opens the run. Measured in the browser:
//!
//! - `snapshot_ms`: fetching the run's snapshot (`GET /api/runs/{id}`, the server's work and
//!   the transfer; Resource Timing), and its size, `snapshot_bytes`;
//! - `render_ms`: the page's full render of the tree when it opened the run
//!   (`window.__strataRenderMs`, building the DOM of 10 000 agents);
//! - `rerender_ms` / `rerender_layout_ms`: the median of 5 more full renders, without and with
//!   the style and layout they cause (forced by reading the tree's height);
//! - `burst_ms` / `burst_layout_ms`: the median time to apply a burst of 10 000 status updates
//!   (every agent changes status once, as one animation frame's batch of server-sent deltas,
//!   with its 10 000 event lines), without and with style and layout; `burst_per_update_us` is
//!   the latter over 10 000;
//! - `search_ms` / `search_layout_ms`: the median time to apply a search for one agent's id
//!   (every other agent hidden but its supervisors), without and with style and layout.
//!
//! The burst goes through the page's own `flush` of a frame's deltas, fed what the server
//! sends; the timings are the page's (`performance.now()`), not the WebDriver round trips.
//!
//! Under `cargo bench` the figures are written to `<target>/strata-bench/dashboard_page.json`,
//! where `cargo xtask bench` picks them up. Without Chromium and chromedriver the bench says so
//! and writes nothing (under `CI` it fails).
#![allow(missing_docs)]
#![allow(clippy::unwrap_used, clippy::expect_used, reason = "benchmarks")]
#![allow(clippy::print_stdout, clippy::print_stderr, reason = "the figures are printed")]

mod support;
#[allow(dead_code, unreachable_pub, reason = "the bench uses part of the client")]
#[path = "../tests/it/browser/webdriver.rs"]
mod webdriver;

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use support::target_dir;
use webdriver::Browser;

const STRATA: &str = env!("CARGO_BIN_EXE_strata");

/// Agents in the run.
const AGENTS: usize = 10_000;

/// Full renders and bursts measured after the first render (their median is reported).
const REPEATS: usize = 5;

/// The token `strata serve` is given.
const TOKEN: &str = "bench";

fn main() {
    let bench_mode = std::env::args().any(|a| a == "--bench");
    let browser = match Browser::start() {
        Ok(browser) => browser,
        Err(why) => {
            assert!(std::env::var_os("CI").is_none(), "the dashboard page bench needs them: {why}");
            eprintln!("dashboard/page: not run: {why}");
            return;
        }
    };
    let scratch = tempfile::tempdir().unwrap();
    let figure = measure(&browser, scratch.path());
    println!("dashboard/page: {figure}");
    if bench_mode {
        let dir = target_dir().join("strata-bench");
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join("dashboard_page.json"), format!("{figure}\n")).unwrap();
    }
}

/// A `strata serve` process, killed when dropped.
struct Server(Child);

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn measure(browser: &Browser, scratch: &Path) -> Value {
    let init = strata(scratch).args(["init", "team", "--scale", &AGENTS.to_string()]).status();
    assert!(init.unwrap().success(), "strata init --scale {AGENTS} failed");
    let started = Instant::now();
    let run = strata(scratch)
        .args(["run", "team/plan.toml", "--team", "team/team.toml", "--data", "data"])
        .args(["--workspace", "workspace", "--run-id", "page", "--quiet"])
        .stdout(Stdio::null())
        .status()
        .unwrap();
    assert!(run.success(), "strata run of {AGENTS} agents failed: {run}");
    eprintln!("dashboard/page: the run of {AGENTS} agents took {:.1?}", started.elapsed());

    let (server, addr) = serve(scratch);
    // The first load sets the token's cookie and redirects, keeping the fragment.
    browser.goto(&format!("http://{addr}/?token={TOKEN}#run=page"));
    let shown = browser.wait_for("the tree of every agent", Duration::from_secs(120), |b| {
        let state = b.execute(
            "return [document.querySelectorAll('#tree [data-agent]').length,
                     window.__strataRenderMs ?? null, document.getElementById('error').textContent]",
            &[],
        );
        if state[0] == AGENTS && state[1].is_number() { Ok(state) } else { Err(state.to_string()) }
    });
    let render_ms = shown[1].as_f64().unwrap();
    let snapshot = browser.execute(
        "const e = performance.getEntriesByType('resource')
             .filter((r) => new URL(r.name).pathname === '/api/runs/page')[0];
         return e ? [e.responseEnd - e.startTime, e.encodedBodySize || e.transferSize] : null",
        &[],
    );
    let is_page = browser.execute(
        "return typeof renderTree === 'function' && typeof flush === 'function'
                && typeof state === 'object'",
        &[],
    );
    assert_eq!(is_page, true, "the page no longer has `renderTree`, `flush` and `state`");

    // Full renders again, of the agents the page holds.
    let rerender = browser.execute(
        "const agents = [...state.agents.values()];
         const plain = [], laid = [];
         for (let i = 0; i < arguments[0]; i++) {
             let t0 = performance.now();
             renderTree(agents);
             plain.push(performance.now() - t0);
             t0 = performance.now();
             renderTree(agents);
             void document.getElementById('tree').offsetHeight;
             laid.push(performance.now() - t0);
         }
         return [plain, laid]",
        &[json!(REPEATS)],
    );
    // Bursts: every agent changes status once, in one frame's batch of deltas.
    let bursts = browser.execute(
        "const plain = [], laid = [];
         for (let i = 0; i < arguments[0]; i++) {
             const status = i % 2 === 0 ? 'working' : 'idle';
             const batch = [...state.agents.values()].map((a) => ({
                 kind: 'record',
                 agent: Object.assign({}, a, { status, step: 'bench burst ' + i }),
                 line: '[bench] ' + a.id + ' -> ' + status,
             }));
             const t0 = performance.now();
             state.pending = batch;
             flush();
             plain.push(performance.now() - t0);
             void document.getElementById('tree').offsetHeight;
             laid.push(performance.now() - t0);
         }
         return [plain, laid]",
        &[json!(REPEATS)],
    );
    // Searches: the id of one agent in the middle of the tree, as typed; the page hides every
    // agent but it and its supervisors. Then cleared.
    let searches = browser.execute(
        "const ids = [...state.agents.keys()];
         const plain = [], laid = [];
         for (let i = 0; i < arguments[0]; i++) {
             state.query = ids[Math.floor(ids.length / 2) + i].toLowerCase();
             const t0 = performance.now();
             applyFilter();
             plain.push(performance.now() - t0);
             void document.getElementById('tree').offsetHeight;
             laid.push(performance.now() - t0);
         }
         const shown = [...document.querySelectorAll('#tree [data-agent]')].filter((e) => !e.hidden).length;
         state.query = '';
         applyFilter();
         return [plain, laid, shown]",
        &[json!(REPEATS)],
    );
    assert!(
        searches[2].as_u64().is_some_and(|n| n > 0 && n < AGENTS as u64),
        "a search showed {} agents",
        searches[2]
    );
    let statuses = browser.execute(
        "return new Set([...document.querySelectorAll('#tree [data-agent]')]
             .map((e) => e.dataset.status)).size",
        &[],
    );
    assert_eq!(statuses, 1, "a burst left agents of another status");
    drop(server);

    let burst_ms = median(&bursts[0]);
    let burst_layout_ms = median(&bursts[1]);
    let round = |ms: f64| (ms * 100.0).round() / 100.0;
    json!({
        "id": format!("dashboard/page_{AGENTS}"),
        "agents": AGENTS,
        "snapshot_ms": round(snapshot[0].as_f64().unwrap_or(f64::NAN)),
        "snapshot_bytes": snapshot[1].as_f64().unwrap_or(f64::NAN),
        "render_ms": round(render_ms),
        "rerender_ms": round(median(&rerender[0])),
        "rerender_layout_ms": round(median(&rerender[1])),
        "burst_ms": round(burst_ms),
        "burst_layout_ms": round(burst_layout_ms),
        "burst_per_update_us": round(burst_layout_ms * 1000.0 / AGENTS as f64),
        "search_ms": round(median(&searches[0])),
        "search_layout_ms": round(median(&searches[1])),
    })
}

/// `strata serve` on a free loopback port, once it listens, and its address.
fn serve(scratch: &Path) -> (Server, String) {
    let mut child = strata(scratch)
        .args(["serve", "--data", "data", "--addr", "127.0.0.1:0", "--token", TOKEN])
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .unwrap();
    let mut stdout = BufReader::new(child.stdout.take().unwrap());
    let server = Server(child);
    let mut first = String::new();
    stdout.read_line(&mut first).unwrap();
    // The rest of what it prints, read so that its writes never fail.
    std::thread::spawn(move || std::io::copy(&mut stdout, &mut std::io::sink()));
    let addr = first
        .trim()
        .strip_prefix("strata serve: http://")
        .and_then(|rest| rest.split_once('/'))
        .map(|(addr, _)| addr.to_owned())
        .unwrap_or_else(|| panic!("`strata serve` printed no URL: {first:?}"));
    (server, addr)
}

/// The median of a JSON array of numbers.
fn median(values: &Value) -> f64 {
    let mut all: Vec<f64> = values.as_array().unwrap().iter().filter_map(Value::as_f64).collect();
    all.sort_by(f64::total_cmp);
    all[all.len() / 2]
}

fn strata(dir: &Path) -> Command {
    let mut command = Command::new(STRATA);
    command.current_dir(dir).stdin(Stdio::null());
    command
}
