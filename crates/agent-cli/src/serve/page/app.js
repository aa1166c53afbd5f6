// Strata dashboard: plain JavaScript, no build step, no download. The server is `strata serve`.
"use strict";

// The token: reads carry it in the cookie the first load set; signing sends it in a header,
// taken from the page (which only a request with the token is given).
const state = { token: (document.querySelector('meta[name="strata-token"]') || {}).content || "",
  run: null, source: null, nodes: new Map(), agents: new Map(),
  decisions: new Map(), humans: [], series: [], pending: [], frame: 0, scroll: 0,
  counts: new Map(), query: "", statusFilter: null, matched: null, beats: new Map() };
const MAX_EVENTS = 500;

function params() { return new URLSearchParams(location.hash.slice(1)); }
function headers(extra) {
  const h = Object.assign({}, extra || {});
  if (state.token) h["Authorization"] = "Bearer " + state.token;
  return h;
}
function link(run) {
  const p = new URLSearchParams();
  if (run) p.set("run", run);
  return "#" + p.toString();
}
function el(tag, cls, text) {
  const e = document.createElement(tag);
  if (cls) e.className = cls;
  if (text !== undefined) e.textContent = text;
  return e;
}
function duration(seconds) {
  if (seconds < 60) return seconds.toFixed(1) + " s";
  const m = Math.floor(seconds / 60);
  return m < 60 ? m + " min " + Math.round(seconds % 60) + " s" : Math.floor(m / 60) + " h " + (m % 60) + " min";
}
function showError(message) {
  const box = document.getElementById("error");
  box.textContent = message || "";
  box.hidden = !message;
}
async function getJson(url) {
  const r = await fetch(url, { headers: headers() });
  const body = await r.json().catch(() => ({ error: "not JSON (status " + r.status + ")" }));
  if (!r.ok) throw new Error(body.error || ("status " + r.status));
  return body;
}

function route() {
  const p = params();
  document.getElementById("home").href = link(null);
  const run = p.get("run");
  if (state.source) { state.source.close(); state.source = null; }
  document.body.dataset.live = "false";
  showError("");
  if (run) { openRun(run); } else { openList(); }
}

async function openList() {
  state.run = null;
  document.getElementById("list-view").hidden = false;
  document.getElementById("run-view").hidden = true;
  document.getElementById("title").textContent = "";
  const box = document.getElementById("runs");
  try {
    const runs = await getJson("/api/runs");
    const frag = document.createDocumentFragment();
    if (runs.length === 0) frag.appendChild(el("p", "muted", "no runs in this data directory yet"));
    for (const r of runs.slice().reverse()) {
      const a = el("a");
      a.dataset.run = r.id;
      a.href = link(r.id);
      a.appendChild(el("span", "st", r.status));
      a.appendChild(el("b", null, r.id));
      let line = "  " + r.title + " · " + r.started + " UTC";
      if (typeof r.duration_s === "number") line += " · " + duration(r.duration_s);
      line += " · " + (r.agents == null ? "?" : r.agents) + " agents";
      if (r.usage) {
        line += " · " + r.usage.tokens + " tokens";
        if (r.usage.cost_usd !== null && r.usage.cost_usd !== undefined) line += " · $" + r.usage.cost_usd.toFixed(4);
      }
      a.appendChild(el("span", "muted", line));
      if (r.failure) a.appendChild(el("div", "why", cut(r.failure)));
      frag.appendChild(a);
    }
    box.replaceChildren(frag);
  } catch (e) { showError("cannot list the runs: " + e.message); }
}

async function openRun(id) {
  state.run = id;
  document.getElementById("calls-panel").hidden = true;
  document.getElementById("timeline").replaceChildren();
  document.getElementById("list-view").hidden = true;
  document.getElementById("run-view").hidden = false;
  try {
    const snap = await getJson("/api/runs/" + encodeURIComponent(id));
    if (state.run !== id) return;
    renderSnapshot(snap);
    connect(id, snap.last_seq);
  } catch (e) { showError("cannot show run " + id + ": " + e.message); }
}

function connect(id, lastSeq) {
  const q = new URLSearchParams();
  if (lastSeq !== null && lastSeq !== undefined) q.set("after", String(lastSeq));
  const source = new EventSource("/api/runs/" + encodeURIComponent(id) + "/events?" + q.toString());
  state.source = source;
  source.onopen = () => { document.body.dataset.live = "true"; };
  source.onerror = () => { document.body.dataset.live = "false"; };
  source.onmessage = (m) => {
    let delta;
    try { delta = JSON.parse(m.data); } catch (e) { return; }
    state.pending.push(delta);
    if (!state.frame) state.frame = requestAnimationFrame(flush);
  };
}

function renderSnapshot(snap) {
  document.getElementById("title").textContent = snap.run_id + " · " + snap.title;
  state.humans = snap.humans || [];
  renderTree(snap.agents);
  state.decisions = new Map(snap.decisions.map((d) => [d.id, d]));
  renderDecisions();
  renderProgress(snap.progress);
  const events = document.getElementById("events");
  const frag = document.createDocumentFragment();
  state.beats = new Map();
  for (const line of snap.events) eventLine(line, frag);
  events.replaceChildren(frag);
  scrollEvents();
  state.series = snap.series.slice();
  renderCosts();
  renderAudit(snap.audit);
  renderMetrics(snap.metrics || []);
}

// One agent's element, cloned from a template; its parts are kept (in `state.nodes`) so an
// update writes them without querying the document.
let agentTemplate = null;
function agentNode(a) {
  if (!agentTemplate) {
    agentTemplate = el("div", "agent");
    const head = el("div", "head");
    for (const cls of ["fold", "dot", "id", "layer muted", "status", "step"]) head.appendChild(el("span", cls));
    agentTemplate.appendChild(head);
    agentTemplate.appendChild(el("div", "kids"));
  }
  const node = agentTemplate.cloneNode(true);
  node.dataset.agent = a.id;
  node.dataset.status = a.status;
  const head = node.firstChild;
  const parts = head.children;
  parts[2].textContent = a.id;
  parts[3].textContent = a.layer + (a.role ? " · " + a.role : "");
  parts[4].textContent = a.status;
  const step = a.step || "";
  parts[5].textContent = step;
  const entry = { node, kids: node.lastChild, status: parts[4], step: parts[5],
    statusText: a.status, stepText: step };
  state.nodes.set(a.id, entry);
  return entry;
}

// The whole tree, built off the document in one fragment; nodes kept by id for updates.
function renderTree(agents) {
  const t0 = performance.now();
  state.nodes = new Map();
  state.agents = new Map();
  state.counts = new Map();
  for (const a of agents) { state.agents.set(a.id, a); agentNode(a); count(a.status, 1); }
  const frag = document.createDocumentFragment();
  for (const a of agents) {
    const parent = a.parent && a.parent !== a.id ? state.nodes.get(a.parent) : null;
    if (parent) parent.node.classList.add("parent");
    (parent ? parent.kids : frag).appendChild(state.nodes.get(a.id).node);
  }
  const tree = document.getElementById("tree");
  tree.replaceChildren(frag);
  applyFilter();
  window.__strataRenderMs = performance.now() - t0;
}

// Agents per status, kept up to date by every update; drawn once per frame.
function count(status, n) { state.counts.set(status, (state.counts.get(status) || 0) + n); }

// The search (id, role, layer or status) and the status picked in the counts: agents that
// match are shown with the supervisors above them, every other agent is hidden. Collapsed
// subtrees open while a search is on, so a match is never hidden by a fold.
function matches(a, q) {
  if (state.statusFilter && a.status !== state.statusFilter) return false;
  return !q || a.id.toLowerCase().includes(q) || (a.role || "").toLowerCase().includes(q) ||
    a.status.includes(q) || String(a.layer).includes(q);
}
function applyFilter() {
  const q = state.query;
  const on = Boolean(q || state.statusFilter);
  let shown = null, matched = 0;
  if (on) {
    shown = new Set();
    for (const a of state.agents.values()) {
      if (!matches(a, q)) continue;
      matched++;
      let id = a.id;
      while (id && !shown.has(id)) {
        shown.add(id);
        const up = state.agents.get(id);
        id = up && up.parent && up.parent !== id ? up.parent : null;
      }
    }
  }
  for (const [id, e] of state.nodes) {
    const hide = on && !shown.has(id);
    if (e.node.hidden !== hide) e.node.hidden = hide;
  }
  document.getElementById("tree").classList.toggle("searching", on);
  state.matched = on ? matched : null;
  renderCounts();
}
function renderCounts() {
  const frag = document.createDocumentFragment();
  const total = state.agents.size;
  frag.appendChild(el("span", "muted", (state.matched === null ? total + " agents"
    : state.matched + " of " + total + " agents match") + " · "));
  for (const [status, n] of [...state.counts].filter(([, n]) => n > 0).sort()) {
    const b = el("button", null, status + " " + n);
    b.type = "button";
    b.dataset.statusCount = status;
    b.setAttribute("aria-pressed", String(state.statusFilter === status));
    frag.appendChild(b);
  }
  document.getElementById("counts").replaceChildren(frag);
}

// Writes only what changed, to the elements kept for the agent: no query, no layout read.
function updateAgent(a) {
  state.agents.set(a.id, a);
  let entry = state.nodes.get(a.id);
  if (!entry) {
    count(a.status, 1);
    state.countsChanged = true;
    entry = agentNode(a);
    const parent = a.parent && a.parent !== a.id ? state.nodes.get(a.parent) : null;
    if (parent) parent.node.classList.add("parent");
    (parent ? parent.kids : document.getElementById("tree")).appendChild(entry.node);
    return;
  }
  if (entry.statusText !== a.status) {
    state.countsChanged = true;
    count(entry.statusText, -1);
    count(a.status, 1);
    entry.statusText = a.status;
    entry.node.dataset.status = a.status;
    entry.status.textContent = a.status;
  }
  const step = a.step || "";
  if (entry.stepText !== step) {
    entry.stepText = step;
    entry.step.textContent = step;
  }
}

function renderProgress(p) {
  state.progress = p;
  const counter = p.planning ? "planning" : p.done + "/" + p.total + " steps";
  const text = counter + " · " + p.status + (p.outcome ? " (" + p.outcome + ")" : "");
  document.getElementById("progress").textContent = text;
  // A live run can be cancelled; one that stopped before its end can be resumed.
  const cancel = document.getElementById("cancel-run");
  if (p.status !== "running") { cancel.dataset.armed = ""; cancel.textContent = "cancel run"; }
  cancel.hidden = p.status !== "running";
  document.getElementById("resume-run").hidden =
    !["interrupted", "killed (resumable)", "failed"].includes(p.status);
}

// Cancel (as Ctrl-C does) and resume, with the token in the header; cancel asks for a
// second click within 5 s.
async function runAction(action) {
  const said = document.getElementById("action-result");
  said.textContent = action === "cancel" ? "cancelling…" : "resuming…";
  try {
    const r = await fetch("/api/runs/" + encodeURIComponent(state.run) + "/" + action,
      { method: "POST", headers: headers({ "Content-Type": "application/json" }), body: "{}" });
    const reply = await r.json().catch(() => ({}));
    if (!r.ok) { said.textContent = ""; showError(action + " refused: " + (reply.error || r.status)); return; }
    showError("");
    said.textContent = reply.message || reply.outcome;
    // A resumed run is a new process: follow it from its stored state.
    if (action === "resume" && state.run) route();
  } catch (e) { said.textContent = ""; showError(action + " failed: " + e.message); }
}
document.getElementById("cancel-run").addEventListener("click", (e) => {
  const b = e.target;
  if (b.dataset.armed !== "true") {
    b.dataset.armed = "true";
    b.textContent = "click again to cancel the run";
    setTimeout(() => { b.dataset.armed = ""; b.textContent = "cancel run"; }, 5000);
    return;
  }
  b.dataset.armed = "";
  b.textContent = "cancel run";
  runAction("cancel");
});
document.getElementById("resume-run").addEventListener("click", () => runAction("resume"));

// The stored metrics: the numbers and scores the run summary and `inspect RUN metrics` show.
function renderMetrics(list) {
  const body = document.querySelector("#metrics tbody");
  const frag = document.createDocumentFragment();
  for (const a of list) {
    const m = a.metrics;
    const tr = el("tr");
    for (const v of [a.agent, m.tasks_completed, m.tasks_failed, m.heartbeats_responded, m.heartbeats_missed, a.score.toFixed(1)]) {
      tr.appendChild(el("td", null, String(v)));
    }
    frag.appendChild(tr);
  }
  body.replaceChildren(frag);
}

function renderAudit(a) {
  const box = document.getElementById("audit");
  box.dataset.ok = a.ok ? "true" : "false";
  box.textContent = a.ok
    ? "verified: " + a.records + " records, every hash links. " + a.protection
    : "BROKEN: " + a.problems.join("; ");
}

function renderDecisions() {
  const box = document.getElementById("decisions");
  const frag = document.createDocumentFragment();
  if (state.decisions.size === 0) frag.appendChild(el("p", "muted", "no decisions yet"));
  for (const d of state.decisions.values()) {
    const div = el("div", "decision");
    div.dataset.decision = d.id;
    div.dataset.status = d.status;
    div.appendChild(el("div", null, d.id.slice(0, 8) + " by " + d.proposer + " · "));
    div.firstChild.appendChild(el("b", "st", d.status));
    div.appendChild(el("div", "what", d.what));
    const signed = d.signatures.map((s) => s.by).join(", ") || "nobody";
    div.appendChild(el("div", "muted", "signed by " + signed + " · required: " + d.required.join(", ")));
    for (const v of d.vetoes) div.appendChild(el("div", "veto-reason", "vetoed by " + v.by + ": " + v.reason));
    if (d.humans.length) div.appendChild(el("div", "muted", "needs one human of: " + d.humans.join(", ")));
    if (d.human_may_sign) {
      const ok = el("button", "approve", "approve");
      const no = el("button", "veto", "veto");
      ok.onclick = () => sign(d.id, "approve");
      no.onclick = () => sign(d.id, "veto");
      div.appendChild(ok);
      div.appendChild(document.createTextNode(" "));
      div.appendChild(no);
    }
    frag.appendChild(div);
  }
  box.replaceChildren(frag);
}

async function sign(decision, action) {
  const who = prompt("Sign as (one of: " + state.humans.join(", ") + ")", state.humans[0] || "");
  if (!who) return;
  const body = { as: who };
  if (action === "veto") {
    const reason = prompt("Why veto?");
    if (!reason) return;
    body.reason = reason;
  }
  try {
    const r = await fetch("/api/runs/" + encodeURIComponent(state.run) + "/decisions/" +
      encodeURIComponent(decision) + "/" + action,
      { method: "POST", headers: headers({ "Content-Type": "application/json" }), body: JSON.stringify(body) });
    const reply = await r.json().catch(() => ({}));
    if (!r.ok) showError(action + " refused: " + (reply.error || r.status));
    else showError("");
  } catch (e) { showError(action + " failed: " + e.message); }
}

function renderCosts() {
  const body = document.querySelector("#costs tbody");
  const rows = [...state.agents.values()].filter((a) => a.tokens > 0 || a.cost)
    .sort((x, y) => (y.cost || 0) - (x.cost || 0) || y.tokens - x.tokens).slice(0, 200);
  const frag = document.createDocumentFragment();
  for (const a of rows) {
    const tr = el("tr");
    tr.dataset.costAgent = a.id;
    tr.appendChild(el("td", null, a.id));
    tr.appendChild(el("td", null, String(a.tokens)));
    tr.appendChild(el("td", null, a.cost == null ? "?" : a.cost.toFixed(4)));
    frag.appendChild(tr);
  }
  if (rows.length === 0) {
    const tr = el("tr");
    const td = el("td", "muted", "no model usage recorded");
    td.colSpan = 3;
    tr.appendChild(td);
    frag.appendChild(tr);
  }
  body.replaceChildren(frag);
  const svg = document.getElementById("cost-chart");
  // A run starts at no tokens: a run read once (finished) has one point, drawn from there.
  const s = state.series.length && state.series[0].t > 0
    ? [{ t: 0, tokens: 0, cost: 0 }].concat(state.series) : state.series;
  const ns = "http://www.w3.org/2000/svg";
  svg.replaceChildren();
  if (s.length === 0) return;
  const tMax = Math.max(1, s[s.length - 1].t), kMax = Math.max(1, ...s.map((p) => p.tokens));
  const cMax = Math.max(1e-9, ...s.map((p) => p.cost));
  const line = (f, cls) => {
    const path = document.createElementNS(ns, "polyline");
    path.setAttribute("class", cls);
    path.setAttribute("points", s.map((p) => (p.t / tMax * 318 + 1).toFixed(1) + "," +
      (118 - f(p) * 116).toFixed(1)).join(" "));
    svg.appendChild(path);
  };
  line((p) => p.tokens / kMax, "tok");
  line((p) => p.cost / cMax, "usd");
}

// The event lines scrolled to the bottom once per frame, after the frame's writes (reading
// the height in the middle of them would force a layout per batch).
function scrollEvents() {
  if (state.scroll) return;
  state.scroll = requestAnimationFrame(() => {
    state.scroll = 0;
    const events = document.getElementById("events");
    events.scrollTop = events.scrollHeight;
  });
}

// Deltas of one animation frame, applied together: only the last MAX_EVENTS event lines of
// a batch are added, and nothing of the layout is read.
function flush() {
  state.frame = 0;
  const batch = state.pending;
  state.pending = [];
  const lines = [];
  let costs = false, decisions = false;
  for (const d of batch) {
    switch (d.kind) {
      case "record":
        if (d.agent) updateAgent(d.agent);
        if (d.lead) updateAgent(d.lead);
        if (d.progress) renderProgress(d.progress);
        lines.push(d.line);
        break;
      case "decision": state.decisions.set(d.decision.id, d.decision); decisions = true; break;
      case "cost":
        state.series.push(d.point);
        for (const c of d.agents) {
          const a = state.agents.get(c.id);
          if (a) { a.tokens = c.tokens; a.cost = c.cost; }
        }
        costs = true;
        break;
      case "progress": renderProgress(d.progress); break;
      case "audit": renderAudit(d.audit); break;
      case "metrics": renderMetrics(d.metrics); break;
      case "reset":
        if (state.source) state.source.close();
        openRun(state.run);
        return;
      default: break;
    }
  }
  if (lines.length) {
    const events = document.getElementById("events");
    const frag = document.createDocumentFragment();
    for (const line of lines.slice(-MAX_EVENTS)) eventLine(line, frag);
    events.appendChild(frag);
    let extra = events.childElementCount - MAX_EVENTS;
    while (extra-- > 0) events.firstElementChild.remove();
    scrollEvents();
  }
  if (decisions) renderDecisions();
  if (costs) renderCosts();
  // A new agent or a new status changes the counts, and what a search or a status shows.
  if (state.countsChanged) {
    state.countsChanged = false;
    if (state.query || state.statusFilter) applyFilter(); else renderCounts();
  }
}

// One event line, added to `into`; an agent's missed heartbeats fold into one line, its
// latest, with how many there were, moved to the end each time another comes.
const MISSED_BEAT = /^\[\s*-?[\d.]+s\] (\S+)\s+missed heartbeat \d+$/;
function eventLine(line, into) {
  const beat = MISSED_BEAT.exec(line);
  if (!beat) { into.appendChild(el("div", null, line)); return; }
  const seen = state.beats.get(beat[1]);
  if (seen && seen.node.parentNode) {
    seen.count++;
    seen.node.textContent = line + "  (" + seen.count + " missed heartbeats)";
    into.appendChild(seen.node);
    return;
  }
  const node = el("div", "beats", line);
  state.beats.set(beat[1], { node, count: 1 });
  into.appendChild(node);
}

// An agent's model calls (GET /api/runs/RUN/calls?agent=ID), opened by a click on the agent
// in the tree: each call's prompt, answer and tool calls with their results, cut; the whole
// request a click away. Model text is set as text, never as markup.
const SHOWN = 300;
function cut(text) {
  text = (text || "").trim();
  return text.length > SHOWN ? text.slice(0, SHOWN) + "… (" + text.length + " characters)" : text;
}
function labelled(label, text) {
  const line = el("div");
  line.appendChild(el("span", "label", label + " "));
  line.appendChild(document.createTextNode(cut(text)));
  return line;
}
function callNode(c) {
  const node = el("div", "call");
  node.dataset.outcome = c.outcome;
  let head = "#" + c.seq + " · " + c.provider + "/" + c.model + " · " + (c.latency_ms / 1000).toFixed(1) +
    " s · " + c.usage.input_tokens + " in / " + c.usage.output_tokens + " out tokens";
  if (c.cost_usd !== null && c.cost_usd !== undefined) head += " · $" + c.cost_usd.toFixed(4);
  head += c.outcome === "answered" ? " · answered" : " · FAILED (" + c.kind + "): " + c.message;
  if (c.retries) head += " · " + c.retries + " retried";
  node.appendChild(el("div", "call-head", head));
  const messages = c.messages || [];
  if (messages.length) node.appendChild(labelled("prompt:", messages[messages.length - 1].content));
  if (c.outcome === "answered" && (c.answer || !(c.tool_calls || []).length)) {
    node.appendChild(labelled("answer:", c.answer));
  }
  for (const t of c.tool_calls || []) {
    node.appendChild(labelled("calls " + t.name + ":", t.arguments));
    if (t.result !== undefined) node.appendChild(labelled("  result:", t.result));
  }
  const whole = el("details");
  whole.appendChild(el("summary", "muted", "whole request (" + messages.length + " messages)"));
  whole.appendChild(el("pre", null, "system:\n" + c.system));
  for (const m of messages) {
    let text = m.role + ":\n" + m.content;
    for (const t of m.tool_calls || []) text += "\n[called " + t.name + " " + t.arguments + "]";
    whole.appendChild(el("pre", null, text));
  }
  if (c.answer) whole.appendChild(el("pre", null, "answer:\n" + c.answer));
  node.appendChild(whole);
  return node;
}
// `only`: the seqs of the calls to show (a step's, from the timeline), else every call of the
// agent; `step` names that step in the heading.
async function openCalls(agent, only, step) {
  const run = state.run;
  const panel = document.getElementById("calls-panel");
  const box = document.getElementById("calls");
  document.getElementById("calls-agent").textContent = agent + (step ? " for " + step : "");
  panel.hidden = false;
  box.replaceChildren(el("p", "muted", "loading…"));
  try {
    const body = await getJson("/api/runs/" + encodeURIComponent(run) + "/calls?agent=" + encodeURIComponent(agent));
    if (state.run !== run) return;
    const frag = document.createDocumentFragment();
    const calls = only ? body.calls.filter((c) => only.includes(c.seq)) : body.calls;
    if (body.omitted) frag.appendChild(el("p", "muted", body.omitted + " earlier calls not shown (strata inspect " + run + " calls " + agent + ")"));
    if (!calls.length) frag.appendChild(el("p", "muted", "no model call by " + agent + (step ? " for " + step : "")));
    for (const c of calls) frag.appendChild(callNode(c));
    box.replaceChildren(frag);
  } catch (e) { box.replaceChildren(el("p", "muted", "cannot read the calls: " + e.message)); }
}
// The run's timeline (GET /api/runs/RUN/timeline): each step and spawned agent's task, with
// who did it for whom, when, its input and output (cut) and its records on the way; each
// links to the model calls of who did it.
function workNode(w) {
  const node = el("div", "work");
  node.dataset.success = String(w.success);
  const outcome = w.end_s === null ? "not finished"
    : (w.success === true ? "succeeded" : w.success === false ? "FAILED" : "ended, no result returned");
  let head = w.kind + " " + w.key + (w.attempt > 1 ? " (attempt " + w.attempt + ")" : "") + " · " +
    w.agent + " for " + w.for + " · from " + w.start_s.toFixed(2) + " s";
  if (w.end_s !== null) head += " to " + w.end_s.toFixed(2) + " s (" + w.duration_s.toFixed(2) + " s)";
  const line = el("div", "work-head", head + " · " + outcome);
  const seqs = w.calls || [];
  const calls = el("a", "calls-link", "model calls (" + seqs.length + ")");
  calls.dataset.agent = w.agent;
  calls.dataset.calls = seqs.join(",");
  calls.dataset.step = w.key;
  line.appendChild(calls);
  node.appendChild(line);
  node.appendChild(labelled("input:", w.input));
  for (const r of w.records) node.appendChild(el("div", "rec", r.line));
  if (w.output !== null && w.output !== undefined) node.appendChild(labelled("output:", w.output));
  return node;
}
async function openTimeline() {
  const run = state.run;
  const box = document.getElementById("timeline");
  box.replaceChildren(el("p", "muted", "loading…"));
  try {
    const body = await getJson("/api/runs/" + encodeURIComponent(run) + "/timeline");
    if (state.run !== run) return;
    const frag = document.createDocumentFragment();
    if (!body.steps.length) frag.appendChild(el("p", "muted", "no step was handed out in this run"));
    for (const w of body.steps) frag.appendChild(workNode(w));
    box.replaceChildren(frag);
  } catch (e) { box.replaceChildren(el("p", "muted", "cannot read the timeline: " + e.message)); }
}
document.getElementById("timeline-load").addEventListener("click", openTimeline);
document.getElementById("timeline").addEventListener("click", (e) => {
  const link = e.target.closest(".calls-link");
  if (link) {
    const only = link.dataset.calls ? link.dataset.calls.split(",").map(Number) : [];
    openCalls(link.dataset.agent, only, link.dataset.step);
  }
});
document.getElementById("tree").addEventListener("click", (e) => {
  if (e.target.classList.contains("fold")) {
    e.target.closest(".agent").classList.toggle("collapsed");
    return;
  }
  const head = e.target.closest(".head");
  const agent = head && head.parentElement && head.parentElement.dataset.agent;
  if (agent) openCalls(agent);
});
let searchFrame = 0;
document.getElementById("search").addEventListener("input", (e) => {
  state.query = e.target.value.trim().toLowerCase();
  if (!searchFrame) searchFrame = requestAnimationFrame(() => { searchFrame = 0; applyFilter(); });
});
document.getElementById("counts").addEventListener("click", (e) => {
  const status = e.target.dataset && e.target.dataset.statusCount;
  if (!status) return;
  state.statusFilter = state.statusFilter === status ? null : status;
  applyFilter();
});
for (const [button, fold] of [["collapse-all", true], ["expand-all", false]]) {
  document.getElementById(button).addEventListener("click", () => {
    for (const e of state.nodes.values()) {
      if (e.kids.firstChild) e.node.classList.toggle("collapsed", fold);
    }
  });
}
document.getElementById("calls-close").addEventListener("click", () => {
  document.getElementById("calls-panel").hidden = true;
});

window.addEventListener("hashchange", route);
route();
