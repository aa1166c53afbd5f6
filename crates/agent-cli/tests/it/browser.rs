//! The web dashboard (`strata serve`) in a real browser: Debian's Chromium, headless, driven
//! through chromedriver by a minimal WebDriver client ([`webdriver`]).
//!
//! Needs `chromium` and `chromedriver` on the `PATH` (Debian's `chromium` and
//! `chromium-driver`, which `.ci/run` installs). Where they are missing, the tests fail when the
//! environment variable `CI` is set (CI installs them, so they must run there) and are skipped
//! with a note otherwise.

pub(crate) mod webdriver;

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use serde_json::{Value, json};

use crate::support::{Gate, Running, Scratch, wait_for};
use webdriver::Browser;

/// The run's heartbeat: slow enough that the event lines at the gate are the team's work, not
/// the executor's missed heartbeats while the shell step blocks it.
const HEARTBEAT: &str = "200ms";

/// How long the page may take to show what the run did.
const PAGE_PATIENCE: Duration = Duration::from_secs(30);

/// A browser, or `None` (with a note) where Chromium or chromedriver is missing outside CI.
#[allow(clippy::print_stderr, reason = "says why the test did not run where it cannot")]
fn browser() -> Option<Browser> {
    match Browser::start() {
        Ok(browser) => Some(browser),
        Err(why) => {
            let needs = "the browser tests need Chromium and chromedriver";
            assert!(std::env::var_os("CI").is_none(), "{needs}, and CI runs them: {why}");
            eprintln!("not run: {needs}: {why}");
            None
        }
    }
}

/// The client itself, on a page of its own (a `data:` URL): navigation, scripts, elements,
/// attributes, text, a click, and a screenshot that is a PNG.
#[test]
fn the_webdriver_client_drives_headless_chromium() {
    let Some(browser) = browser() else { return };
    let page = "<!doctype html><body data-live='true'><ul id='tree'>\
        <li data-agent='a' data-status='idle'><span class='step'>none</span></li>\
        <li data-agent='b' data-status='working'><span class='step'>build</span></li></ul>\
        <button id='go' onclick=\"document.querySelector('[data-agent=a]').dataset.status='done'\">go</button>\
        </body>";
    browser.goto(&format!("data:text/html,{}", page.replace('#', "%23")));
    assert_eq!(browser.execute("return document.body.dataset.live", &[]), json!("true"));
    let agents = browser.find_all("#tree [data-agent]");
    assert_eq!(agents.len(), 2);
    assert_eq!(browser.attribute(&agents[1], "data-status").as_deref(), Some("working"));
    assert_eq!(browser.attribute(&agents[1], "data-nothing"), None);
    assert_eq!(browser.text(&browser.find("[data-agent=b] .step").unwrap()), "build");
    assert!(browser.find("#absent").is_none());
    browser.click(&browser.find("#go").unwrap());
    browser.wait_for("the click's effect", std::time::Duration::from_secs(5), |b| {
        let status = b.execute("return arguments[0].dataset.status", &[agents[0].arg()]);
        if status == "done" { Ok(()) } else { Err(status.to_string()) }
    });
    let answer =
        browser.execute_async("arguments[arguments.length - 1](arguments[0] * 2)", &[json!(21)]);
    assert_eq!(answer, json!(42));
    let png = browser.screenshot();
    assert!(png.len() > 1000 && png.starts_with(b"\x89PNG\r\n\x1a\n"), "{} bytes", png.len());
}

/// `strata run` of the gated plan in `s` (run `gated`, with `more` arguments), once its gate
/// step waits; the gate, which lets it go on.
fn at_the_gate(s: &Scratch, more: &[&str]) -> (Running, Gate) {
    crate::support::start_gated(s, "gated", HEARTBEAT, &[&["--quiet"], more].concat(), |_| {})
}

/// `strata serve --data D --addr 127.0.0.1:0 --token TOKEN` in `s`, and the URL it prints
/// (`http://127.0.0.1:PORT/?token=TOKEN`: the first load sets the cookie the page reads with).
pub(crate) fn serve(s: &Scratch, token: &str) -> (Running, String) {
    let mut server = s.spawn(&["serve", "--data", "D", "--addr", "127.0.0.1:0", "--token", token]);
    let mut url = None;
    wait_for("`strata serve` to print its URL", || {
        url = server
            .stdout_so_far()
            .lines()
            .find_map(|l| l.strip_prefix("strata serve: "))
            .map(|url| url.trim().to_owned());
        url.is_some() || server.exited()
    });
    let url = url.unwrap_or_else(|| panic!("`strata serve` failed:\n{}", server.stderr_so_far()));
    (server, url)
}

/// Each agent of the tree, by id, with its `data-status`, and the agent it is nested in.
fn page_tree(browser: &Browser) -> BTreeMap<String, (String, Option<String>)> {
    let tree = browser.execute(
        "return [...document.querySelectorAll('#tree [data-agent]')].map((e) => {
            const up = e.parentElement.closest('[data-agent]');
            return [e.dataset.agent, e.dataset.status, up ? up.dataset.agent : null];
        })",
        &[],
    );
    tree.as_array()
        .unwrap()
        .iter()
        .map(|a| {
            let text = |v: &Value| v.as_str().map(str::to_owned);
            (text(&a[0]).unwrap(), (text(&a[1]).unwrap_or_default(), text(&a[2])))
        })
        .collect()
}

/// The run's agents as `strata inspect RUN tree --json` gives them: id, (status, supervisor).
fn cli_tree(s: &Scratch, run: &str) -> BTreeMap<String, (String, Option<String>)> {
    let tree = s.strata(&["inspect", run, "tree", "--data", "D", "--json"]).code(0).json();
    tree["agents"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| {
            let supervisor = a["supervisor"].as_str().map(str::to_owned);
            (
                a["id"].as_str().unwrap().to_owned(),
                (a["status"].as_str().unwrap().to_owned(), supervisor),
            )
        })
        .collect()
}

/// For each status in the tree, the colours its agents are drawn in: per agent, the computed
/// text, background and border colours of its element and everything in it but the agents
/// nested in it.
fn status_colours(browser: &Browser) -> BTreeMap<String, BTreeSet<String>> {
    let colours = browser.execute(
        "const by = {};
         for (const e of document.querySelectorAll('#tree [data-agent]')) {
             const own = [e, ...e.querySelectorAll('*')]
                 .filter((x) => x === e || x.closest('[data-agent]') === e);
             const look = own.map((x) => {
                 const s = getComputedStyle(x);
                 return s.color + ' ' + s.backgroundColor + ' ' + s.borderColor;
             }).join(' | ');
             (by[e.dataset.status] ??= []).push(look);
         }
         return by",
        &[],
    );
    serde_json::from_value(colours).unwrap()
}

/// The text of the element `selector`, or an empty string when there is none.
fn text_of(browser: &Browser, selector: &str) -> String {
    let text = browser.execute(
        "const e = document.querySelector(arguments[0]); return e ? e.textContent : ''",
        &[json!(selector)],
    );
    text.as_str().unwrap_or_default().to_owned()
}

/// The dashboard end to end: a team run held at a gate, `strata serve` and headless Chromium.
/// The run is picked from the list; the tree shows every agent of the team, nested as the team
/// nests them, with a live event stream; statuses change while the run proceeds until they are
/// the ones `strata inspect` gives for the finished run, with the progress complete and the
/// audit log verified. A screenshot is taken at the gate (and written to `$STRATA_SCREENSHOT`
/// when that is set, relative to the repository: `STRATA_SCREENSHOT=docs/dashboard.png` makes
/// the README's picture).
#[test]
fn the_dashboard_shows_a_live_team_run_in_a_real_browser() {
    let Some(browser) = browser() else { return };
    let s = Scratch::new();
    let (run, gate) = at_the_gate(&s, &["--no-sync"]);
    let team = cli_tree(&s, "gated");
    assert!(team.len() >= 3, "{team:?}");

    let token = "browser-test-token";
    let (_server, url) = serve(&s, token);
    assert_eq!(url.split_once("/?token=").map(|(_, t)| t), Some(token), "{url}");
    // The URL as printed: its first load sets the cookie and drops the token from the URL.
    browser.goto(&url);
    let link = browser.wait_for("the run in the list", PAGE_PATIENCE, |b| {
        b.find("#runs a[data-run=\"gated\"]").ok_or_else(|| text_of(b, "#runs"))
    });
    let href = browser.execute("return location.href", &[]);
    assert!(!href.to_string().contains("token"), "the token stayed in the URL: {href}");
    // The row says how long the run has been going.
    let row = text_of(&browser, "#runs a[data-run=\"gated\"]");
    assert!(row.contains(" s · ") || row.contains(" min "), "no duration in the row: {row}");
    browser.click(&link);

    // Every agent of the team, nested under its supervisor, and the event stream open.
    let at_gate = browser.wait_for("every agent in the tree", PAGE_PATIENCE, |b| {
        let tree = page_tree(b);
        let same = tree.len() == team.len()
            && team.iter().all(|(id, (_, up))| tree.get(id).is_some_and(|(_, nest)| nest == up));
        if same { Ok(tree) } else { Err(format!("{tree:?}, expected the agents of {team:?}")) }
    });
    browser.wait_for("the event stream to open", PAGE_PATIENCE, |b| {
        let live = b.execute("return document.body.dataset.live", &[]);
        if live == "true" { Ok(()) } else { Err(live.to_string()) }
    });
    // At the gate an executor is working on the shell step, which the page says.
    let working: Vec<&String> =
        at_gate.iter().filter(|(_, (status, _))| status == "working").map(|(id, _)| id).collect();
    assert!(!working.is_empty(), "no agent is working at the gate: {at_gate:?}");
    let step = text_of(&browser, &format!("[data-agent=\"{}\"] .step", working[0]));
    assert!(!step.trim().is_empty(), "the working agent shows no step");
    assert!(!text_of(&browser, "#events").trim().is_empty(), "no event lines");
    assert!(browser.find("svg#cost-chart").is_some(), "no cost chart");
    let progress = text_of(&browser, "#progress");
    assert!(progress.contains("/3 steps") && !progress.starts_with("3/3"), "{progress}");

    let png = browser.screenshot();
    assert!(
        png.len() > 1000 && png.starts_with(b"\x89PNG\r\n\x1a\n"),
        "not a PNG: {} bytes",
        png.len()
    );
    std::fs::write(s.path("dashboard.png"), &png).unwrap();
    if let Some(path) = std::env::var_os("STRATA_SCREENSHOT") {
        // Relative to the repository (the test runs in the crate's directory).
        let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../..").join(path);
        std::fs::write(&path, &png)
            .unwrap_or_else(|e| panic!("cannot write the screenshot {}: {e}", path.display()));
    }
    // Statuses are told apart by colour.
    let colours = status_colours(&browser);
    if let (Some(working), Some(idle)) = (colours.get("working"), colours.get("idle")) {
        assert!(
            working.iter().all(|c| !idle.contains(c)),
            "a working agent is drawn in the colours of an idle one: {colours:#?}"
        );
    }

    // Released, the run ends; the page follows until it shows what `inspect` shows.
    gate.open();
    let out = run.finish();
    assert_eq!(out.status.code(), Some(0), "the run failed:\n{}", out.stderr);
    let finished = cli_tree(&s, "gated");
    let end = browser.wait_for("the finished run's statuses", PAGE_PATIENCE, |b| {
        let tree = page_tree(b);
        let progress = text_of(b, "#progress");
        if tree == finished && progress.starts_with("3/3 steps") && progress.contains("succeeded") {
            Ok(tree)
        } else {
            Err(format!("{progress}: {tree:?}, expected {finished:?}"))
        }
    });
    assert_ne!(end, at_gate, "no status changed while the run proceeded");
    assert!(end.values().all(|(status, _)| status != "working"), "{end:?}");
    browser.wait_for("the audit log verified", PAGE_PATIENCE, |b| {
        b.find("#audit[data-ok=\"true\"]").map(drop).ok_or_else(|| text_of(b, "#audit"))
    });
}

/// A click on an agent in the tree opens its model calls: each call's head (model, tokens,
/// outcome), its prompt and answer or tool calls, and the whole request a click further; the
/// records are the ones `strata inspect RUN calls` lists for that agent. The timeline shows
/// the steps `strata inspect RUN timeline` lists, each linking to its worker's calls.
#[test]
fn a_click_on_an_agent_or_a_step_shows_the_model_calls_and_the_timeline_the_steps() {
    let Some(browser) = browser() else { return };
    let model = crate::fake_llm::FakeLlm::start(crate::fake_llm::Mode::Sensible);
    let s = crate::llm::scratch(&crate::llm::team(&crate::llm::openai(&model), ""));
    crate::llm::run(&s, &["--unsandboxed"]).code(0);
    let calls = s.strata(&["inspect", "r1", "calls", "--data", "D", "--json"]).code(0).json();
    let agent = calls["calls"][0]["agent"].as_str().unwrap().to_owned();
    let own =
        calls["calls"].as_array().unwrap().iter().filter(|c| c["agent"] == agent.as_str()).count();

    // run.json keeps the run's model usage, which `strata runs` and the runs list show.
    let listed = crate::support::listed_run(&s, "D", "r1");
    let tokens = listed["usage"]["tokens"].as_u64().unwrap_or(0);
    assert!(tokens > 0, "{listed}");
    assert_eq!(listed["usage"]["calls"], calls["calls"].as_array().unwrap().len(), "{listed}");

    let (_server, url) = serve(&s, "browser-calls-token");
    // The printed URL sets the cookie; then the run's own page.
    browser.goto(&url);
    let row = browser.wait_for("the run in the list", PAGE_PATIENCE, |b| {
        b.find("#runs a[data-run=\"r1\"]")
            .map(|_| text_of(b, "#runs a[data-run=\"r1\"]"))
            .ok_or_else(|| text_of(b, "#runs"))
    });
    assert!(row.contains(&format!(" · {tokens} tokens")), "{row}");
    browser.goto(&format!("{}/#run=r1", url.split("/?").next().unwrap()));
    // The tokens are charted though the team has no prices, and though the finished run was
    // read once (one point of the series, drawn from the run's start).
    browser.wait_for("the tokens charted", PAGE_PATIENCE, |b| {
        let points = b.execute(
            "const l = document.querySelector('#cost-chart polyline.tok');
             return l ? l.getAttribute('points').trim().split(/\\s+/).length : 0",
            &[],
        );
        if points.as_u64().unwrap_or(0) >= 2 { Ok(()) } else { Err(format!("{points} points")) }
    });
    let head = browser.wait_for("the agent in the tree", PAGE_PATIENCE, |b| {
        b.find(&format!("#tree [data-agent=\"{agent}\"] > .head"))
            .ok_or_else(|| text_of(b, "#tree"))
    });
    assert!(browser.find("#calls-panel:not([hidden])").is_none(), "the calls are shown unasked");
    browser.click(&head);
    let shown = browser.wait_for("the agent's calls", PAGE_PATIENCE, |b| {
        let n = b.find_all("#calls .call").len();
        if n == own { Ok(n) } else { Err(format!("{n} of {own}: {}", text_of(b, "#calls"))) }
    });
    assert_eq!(shown, own);
    assert_eq!(text_of(&browser, "#calls-agent"), agent);
    let first = text_of(&browser, "#calls .call");
    assert!(first.starts_with("#"), "{first}");
    assert!(first.contains("fake-model") && first.contains("answered"), "{first}");
    assert!(first.contains("prompt:"), "{first}");
    assert!(first.contains("whole request"), "{first}");
    browser.click(&browser.find("#calls-close").unwrap());
    browser.wait_for("the calls closed", PAGE_PATIENCE, |b| {
        b.find("#calls-panel[hidden]").map(drop).ok_or_else(|| "still open".to_owned())
    });

    // The timeline: the steps `inspect RUN timeline` lists, each linking to the model calls
    // of the agent that did it.
    let timeline = s.strata(&["inspect", "r1", "timeline", "--data", "D", "--json"]).code(0).json();
    let steps = timeline["steps"].as_array().unwrap();
    assert!(!steps.is_empty(), "{timeline:#}");
    browser.click(&browser.find("#timeline-load").unwrap());
    browser.wait_for("the timeline", PAGE_PATIENCE, |b| {
        let n = b.find_all("#timeline .work").len();
        if n == steps.len() { Ok(()) } else { Err(format!("{n} of {}", steps.len())) }
    });
    let first = text_of(&browser, "#timeline .work");
    let key = steps[0]["key"].as_str().unwrap();
    assert!(first.contains(key) && first.contains("input:"), "{first}");
    let worker = steps[0]["agent"].as_str().unwrap();
    // Each step names the model calls its worker made for it: the worker's calls that
    // started while it had the step, every one of them the worker's.
    let step_calls: Vec<u64> = steps[0]["calls"]
        .as_array()
        .unwrap_or_else(|| panic!("no calls in the step: {timeline:#}"))
        .iter()
        .filter_map(Value::as_u64)
        .collect();
    assert!(!step_calls.is_empty(), "the step's worker made no call for it: {timeline:#}");
    for seq in &step_calls {
        let call = calls["calls"].as_array().unwrap().iter().find(|c| c["seq"] == *seq).unwrap();
        assert_eq!(call["agent"], worker, "{call}");
    }
    let link = browser.find(&format!("#timeline .calls-link[data-agent=\"{worker}\"]")).unwrap();
    browser.click(&link);
    let heading = format!("{worker} for {key}");
    browser.wait_for("the step's calls", PAGE_PATIENCE, |b| {
        let shown = text_of(b, "#calls-agent");
        let n = b.find_all("#calls-panel:not([hidden]) #calls .call").len();
        if shown == heading && n == step_calls.len() {
            Ok(())
        } else {
            Err(format!("{shown}: {n} of {} calls: {}", step_calls.len(), text_of(b, "#calls")))
        }
    });
}

/// The ids of the agents the page shows (neither hidden by the search nor folded away).
fn visible_agents(browser: &Browser) -> BTreeSet<String> {
    let ids = browser.execute(
        "return [...document.querySelectorAll('#tree [data-agent]')]
             .filter((e) => e.firstChild.checkVisibility()).map((e) => e.dataset.agent)",
        &[],
    );
    serde_json::from_value(ids).unwrap()
}

/// Types `text` into the agent search (as the `input` event a keystroke fires) and waits for
/// the frame that applies it.
fn search(browser: &Browser, text: &str) {
    browser.execute_async(
        "const [text, done] = arguments;
         const box = document.getElementById('search');
         box.value = text;
         box.dispatchEvent(new Event('input'));
         requestAnimationFrame(() => requestAnimationFrame(() => done(null)))",
        &[json!(text)],
    );
}

/// The tree at 10 000 agents is searched by id, role or status (a match shown with the
/// supervisors above it, nothing else), filtered by a status picked from the counts per
/// status, and folded by subtree; an agent's missed heartbeats are one event line with a
/// count. The run is a real one; the 10 000 agents are then drawn by the page's own render,
/// as a snapshot of that size would be.
#[test]
fn the_tree_of_10000_agents_is_searched_counted_and_folded_and_missed_beats_fold() {
    let Some(browser) = browser() else { return };
    let s = Scratch::with_example();
    crate::support::finished_run(&s);
    let team = cli_tree(&s, "r");
    let (_server, url) = serve(&s, "browser-search-token");
    browser.goto(&url);
    browser.goto(&format!("{}/#run=r", url.split("/?").next().unwrap()));
    browser.wait_for("every agent in the tree", PAGE_PATIENCE, |b| {
        let n = page_tree(b).len();
        if n == team.len() { Ok(()) } else { Err(format!("{n} of {}", team.len())) }
    });
    let counts = text_of(&browser, "#counts");
    assert!(counts.starts_with(&format!("{} agents", team.len())), "{counts}");
    // The run's own tree: a search for one executor shows it and its supervisors only.
    let (executor, (_, lead)) = team.iter().find(|(id, _)| id.starts_with("bottom")).unwrap();
    search(&browser, executor);
    let lead = lead.clone().unwrap();
    let shown = visible_agents(&browser);
    assert!(shown.contains(executor) && shown.contains(&lead), "{shown:?}");
    assert!(shown.len() < team.len(), "nothing was hidden: {shown:?}");
    assert!(text_of(&browser, "#counts").starts_with("1 of "), "{}", text_of(&browser, "#counts"));
    search(&browser, "");
    assert_eq!(visible_agents(&browser).len(), team.len());

    // 10 000 agents: one top, 100 leads, 9 899 executors (a third of them working).
    let drawn = browser.execute(
        "const agents = [{ id: 'top-a', layer: 'top', parent: null, role: 'power', status: 'idle', tokens: 0 }];
         for (let l = 0; l < 100; l++) agents.push({ id: 'mid-' + l, layer: 'mid', parent: 'top-a',
             role: 'lead', status: 'idle', tokens: 0 });
         for (let e = 0; agents.length < 10000; e++) agents.push({ id: 'e-' + e, layer: 'bottom',
             parent: 'mid-' + (e % 100), role: e === 107 ? 'tester' : 'coder',
             status: e % 3 === 0 ? 'working' : 'idle', step: 'step ' + e, tokens: 0 });
         renderTree(agents);
         return document.querySelectorAll('#tree [data-agent]').length",
        &[],
    );
    assert_eq!(drawn, 10_000);
    let counts = text_of(&browser, "#counts");
    assert!(
        counts.starts_with("10000 agents")
            && counts.contains("idle 6700")
            && counts.contains("working 3300"),
        "{counts}"
    );
    // By id: e-107 and the two above it.
    search(&browser, "e-107");
    let expected: BTreeSet<String> = [
        "top-a", "mid-7", "e-107", "e-1070", "e-1071", "e-1072", "e-1073", "e-1074", "e-1075",
        "e-1076", "e-1077", "e-1078", "e-1079",
    ]
    .iter()
    .map(|s| (*s).to_owned())
    .chain((0..10).map(|i| format!("mid-{}", (1070 + i) % 100)))
    .collect();
    assert_eq!(visible_agents(&browser), expected);
    // By role: the one tester.
    search(&browser, "tester");
    assert_eq!(
        visible_agents(&browser),
        ["top-a", "mid-7", "e-107"].iter().map(|s| (*s).to_owned()).collect()
    );
    assert!(text_of(&browser, "#counts").starts_with("1 of 10000 agents match"));
    // By the status picked in the counts: every working agent, with its lead and the top.
    search(&browser, "");
    browser.click(&browser.find("#counts button[data-status-count=\"working\"]").unwrap());
    let working = visible_agents(&browser);
    assert_eq!(working.len(), 3300 + 100 + 1, "{} shown", working.len());
    assert!(working.contains("e-0") && !working.contains("e-1"));
    browser.click(&browser.find("#counts button[data-status-count=\"working\"]").unwrap());
    assert_eq!(visible_agents(&browser).len(), 10_000);

    // Folding a lead hides its executors; collapse all leaves the top and the leads.
    browser.click(&browser.find("#tree [data-agent=\"mid-7\"] > .head .fold").unwrap());
    let folded = visible_agents(&browser);
    assert!(folded.contains("mid-7") && !folded.contains("e-7") && folded.contains("e-8"));
    browser.click(&browser.find("#collapse-all").unwrap());
    assert_eq!(visible_agents(&browser), std::iter::once("top-a".to_owned()).collect());
    // A search opens what is folded, to show its matches.
    search(&browser, "e-107");
    assert!(visible_agents(&browser).contains("e-107"));
    search(&browser, "");
    browser.click(&browser.find("#expand-all").unwrap());
    assert_eq!(visible_agents(&browser).len(), 10_000);

    // Missed heartbeats: one line per agent, its latest, with the count.
    let lines = browser.execute(
        "const before = document.querySelectorAll('#events > div').length;
         state.pending = [3, 4, 5].map((n) => ({ kind: 'record',
             line: '[  1' + n + '.00s] e-5          missed heartbeat ' + n }))
             .concat([{ kind: 'record', line: '[  16.00s] e-6          missed heartbeat 6' }]);
         flush();
         const all = [...document.querySelectorAll('#events > div')];
         return [all.length - before, all.map((e) => e.textContent).filter((t) => t.includes('missed'))]",
        &[],
    );
    assert_eq!(lines[0], 2, "{lines}");
    let beats: Vec<String> = serde_json::from_value(lines[1].clone()).unwrap();
    assert_eq!(
        beats,
        vec![
            "[  15.00s] e-5          missed heartbeat 5  (3 missed heartbeats)".to_owned(),
            "[  16.00s] e-6          missed heartbeat 6".to_owned()
        ]
    );
}

/// `POST` to the dashboard's API with the token in the header, as the page does: the status
/// and the JSON answer.
fn post(browser: &Browser, path: &str) -> (u64, Value) {
    let answer = browser.execute_async(
        "const [path, done] = arguments;
         fetch(path, { method: 'POST', headers: headers({ 'Content-Type': 'application/json' }), body: '{}' })
             .then(async (r) => done([r.status, await r.json().catch(() => null)]))",
        &[json!(path)],
    );
    (answer[0].as_u64().unwrap_or(0), answer[1].clone())
}

/// A live run is cancelled from the dashboard (two clicks): it stops as on Ctrl-C (exit 130,
/// `interrupted`, the cancel audited under the name); the page then offers to resume it, and
/// the resume started from the page finishes the task, its gate step's command not run twice.
/// A run that is not running cannot be cancelled, nor a running one resumed (409).
#[test]
fn a_live_run_is_cancelled_and_resumed_from_the_dashboard() {
    let Some(browser) = browser() else { return };
    let s = Scratch::new();
    let (mut run, gate) = at_the_gate(&s, &[]);
    let (_server, url) = serve(&s, "browser-cancel-token");
    browser.goto(&url);
    browser.goto(&format!("{}/#run=gated", url.split("/?").next().unwrap()));
    let cancel = browser.wait_for("the cancel button", PAGE_PATIENCE, |b| {
        b.find("#cancel-run:not([hidden])").ok_or_else(|| text_of(b, "#progress"))
    });
    assert!(browser.find("#resume-run:not([hidden])").is_none(), "a live run offers a resume");
    let (status, answer) = post(&browser, "/api/runs/gated/resume");
    assert_eq!(status, 409, "{answer}");
    assert!(answer["error"].as_str().unwrap().contains("is running"), "{answer}");

    // One click arms the button; the second cancels.
    browser.click(&cancel);
    assert_eq!(text_of(&browser, "#cancel-run"), "click again to cancel the run");
    let requests = s.path("D/gated/requests");
    let asked = std::fs::read_dir(&requests).map(Iterator::count).unwrap_or(0);
    assert_eq!(asked, 0, "one click sent a request to {}", requests.display());
    assert!(!run.exited(), "one click cancelled the run");
    browser.click(&cancel);
    let out = run.finish();
    assert_eq!(out.status.code(), Some(130), "not stopped as on Ctrl-C:\n{}", out.stderr);
    assert_eq!(crate::support::listed_run(&s, "D", "gated")["status"], "interrupted");
    let audit = s.strata(&["inspect", "gated", "audit", "--data", "D"]).code(0).stdout.clone();
    assert!(audit.contains("OPERATOR cancel the run CANCELLED"), "{audit}");
    assert!(audit.contains("human:dashboard"), "{audit}");
    let (status, answer) = post(&browser, "/api/runs/gated/cancel");
    assert_eq!(status, 409, "{answer}");
    assert!(answer["error"].as_str().unwrap().contains("is not running"), "{answer}");

    // The page offers the resume; the resumed run waits at the gate again, then finishes.
    let resume = browser.wait_for("the resume button", PAGE_PATIENCE, |b| {
        b.find("#resume-run:not([hidden])").ok_or_else(|| text_of(b, "#progress"))
    });
    browser.click(&resume);
    browser.wait_for("the resumed run to be running", PAGE_PATIENCE, |_| {
        match crate::support::listed_run(&s, "D", "gated")["status"].as_str() {
            Some("running") => Ok(()),
            other => Err(format!("{other:?}")),
        }
    });
    gate.open();
    browser.wait_for("the resumed run's end on the page", PAGE_PATIENCE, |b| {
        let progress = text_of(b, "#progress");
        if progress.starts_with("3/3 steps") && progress.contains("succeeded") {
            Ok(())
        } else {
            Err(format!("{progress}; resume.log: {}", s.read("D/gated/resume.log")))
        }
    });
    assert_eq!(crate::support::listed_run(&s, "D", "gated")["status"], "succeeded");
    assert_eq!(s.read("W/count.txt"), "ran\n", "the gate's command ran twice");
    assert!(browser.find("#resume-run:not([hidden])").is_none());
}
