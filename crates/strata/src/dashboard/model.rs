//! The dashboard's model of one run, folded from its audit records one at a time: every agent
//! (configured and spawned) with its layer, parent, status and current activity, the
//! stored metrics (heartbeat answers and scores, as the run summary shows them), the
//! decisions, progress, cost per agent and a time series of tokens and cost, the last event
//! lines, and the audit verification. Each change comes out as a small [`Delta`] for the
//! browsers watching; [`RunModel::snapshot_json`] is the whole picture.
//!
//! Pure: no I/O, no clock (times are given); the event lines are the front end's, made by the
//! formatter it is given ([`LineFn`]).

use std::collections::{HashMap, VecDeque};

use agent_core::{AuditEvent, AuditRecord};
use agent_pool::StoredMetrics;
use agent_state::{AgentId, AgentLayer, AgentStatus, Decision, DecisionStatus, RunId, shorten};
use serde::Serialize;

/// How an audit record becomes one line of text (such as [`crate::lines::event_line`]),
/// given the run's start in ms since the epoch.
pub type LineFn = fn(&AuditRecord, u64) -> String;

/// Event lines kept for the snapshot.
pub const EVENT_LINES: usize = 500;
/// Points of the tokens and cost series kept; older points are thinned out.
pub const SERIES_POINTS: usize = 1000;
/// Characters of a decision's content shown.
const WHAT_CHARS: usize = 200;
/// Characters of an agent's current activity shown.
const STEP_CHARS: usize = 160;

/// An agent as the dashboard shows it.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct AgentView {
    /// Its id.
    pub id: String,
    /// `top`, `mid` or `bottom`.
    pub layer: &'static str,
    /// Its role, if it has one.
    pub role: Option<String>,
    /// Its supervisor (a spawned agent: its spawner).
    pub parent: Option<String>,
    /// Its last status, as the lifecycle names it (`initializing` before its first transition).
    pub status: &'static str,
    /// The work it is doing, in words (see `Activity`): the step or package it is on and
    /// the tool call of its turn, else the reason of its last transition; never a warning.
    pub step: String,
    /// Model tokens it used (in and out).
    pub tokens: u64,
    /// Its cost in USD; `None` when not known (no price).
    pub cost: Option<f64>,
    /// Whether it was spawned during the run.
    pub spawned: bool,
}

/// An agent of the team file, before any record.
pub struct Seed {
    /// Its id.
    pub id: AgentId,
    /// Its layer.
    pub layer: AgentLayer,
    /// Its supervisor.
    pub parent: Option<AgentId>,
    /// Its role.
    pub role: Option<String>,
}

/// What an agent is doing, as its records tell (they do not name the step a lead assigned,
/// only what came of it): the work it was given (a spawned agent's task, the step of a result
/// or of a peer's help, a lead's executor at work), the tool call of its current turn (or a
/// governance act), and the reason of its last transition, which stands in for the rest; a
/// finished agent shows the reason and the last work it was seen on. The warnings (missed
/// heartbeats, errors, refusals, timeouts, stuck guards) change none of it.
#[derive(Clone, Debug, Default)]
struct Activity {
    /// The task it was spawned for, until it returns its results.
    assigned: Option<String>,
    /// The step or package it works on in this turn.
    work: Option<String>,
    /// The tool call (or act) of this turn.
    tool: Option<String>,
    /// Why its status last changed.
    reason: String,
    /// The last work or tool call it was seen on, kept when it goes idle or ends.
    last: Option<String>,
    /// Whether it is shutting down or terminated: it then shows its last work, not
    /// "shutdown complete" (which every finished agent would read alike).
    ended: bool,
}

impl Activity {
    /// The agent's `step`.
    fn step(&self) -> String {
        let step = match (self.current(), &self.last) {
            (Some(now), _) => now,
            (None, Some(last)) if self.ended => format!("{} · last: {last}", self.reason),
            (None, _) => self.reason.clone(),
        };
        shorten(&step, STEP_CHARS)
    }

    /// Its work and tool call of this turn, if it has any.
    fn current(&self) -> Option<String> {
        match (self.work.as_ref().or(self.assigned.as_ref()), &self.tool) {
            (Some(work), Some(tool)) => Some(format!("{work} · {tool}")),
            (Some(work), None) => Some(work.clone()),
            (None, Some(tool)) => Some(tool.clone()),
            (None, None) => None,
        }
    }

    /// What it is on, for its lead: its work, else its tool call.
    fn doing(&self) -> Option<&str> {
        self.work.as_deref().or(self.assigned.as_deref()).or(self.tool.as_deref())
    }
}

/// Whether an agent in `status` is busy with a turn.
fn busy(status: AgentStatus) -> bool {
    matches!(status, AgentStatus::Working | AgentStatus::WaitingApproval | AgentStatus::Blocked)
}

/// A tool call in a few words: the tool and its main argument (a path, a command, ...), and
/// whether it failed.
fn tool_call(tool: &str, args: &serde_json::Value, success: bool) -> String {
    let main = ["path", "command", "cmd", "file", "url", "query", "to", "name", "pattern"]
        .iter()
        .find_map(|key| args.get(key).and_then(serde_json::Value::as_str))
        .map(|arg| format!(" {}", shorten(arg.lines().next().unwrap_or_default(), 60)))
        .unwrap_or_default();
    format!("{tool}{main}{}", if success { "" } else { " (failed)" })
}

/// A signature or a veto.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Vote {
    /// Who.
    pub by: String,
    /// When (ms since the epoch).
    pub at: u64,
    /// Why (vetoes).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
}

/// A decision as the dashboard shows it.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct DecisionView {
    /// Its id.
    pub id: String,
    /// Who proposed it.
    pub proposer: String,
    /// What is decided, shortened.
    pub what: String,
    /// `pending`, `approved`, `vetoed`, ...
    pub status: &'static str,
    /// Who must sign.
    pub required: Vec<String>,
    /// The signatures.
    pub signatures: Vec<Vote>,
    /// The vetoes, with their reasons.
    pub vetoes: Vec<Vote>,
    /// The humans of whom one must sign, if a human must.
    pub humans: Vec<String>,
    /// Whether a human may sign or veto it now (pending, waiting for a human, and the run
    /// names humans who may).
    pub human_may_sign: bool,
}

/// One point of the tokens and cost series.
#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
pub struct CostPoint {
    /// Ms since the run started.
    pub t: u64,
    /// Tokens so far.
    pub tokens: u64,
    /// Cost so far, USD.
    pub cost: f64,
}

/// How far the task is.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Progress {
    /// Steps of the plan known to be done, as the live view counts them
    /// ([`Steps`](super::Steps)): never more than `total`.
    pub done: usize,
    /// Steps of the plan (0 while `planning`).
    pub total: usize,
    /// A goal whose plan is not known yet.
    pub planning: bool,
    /// The run's status: `running`, `succeeded`, `failed`, ...
    pub status: String,
    /// Why it failed, if it did.
    pub outcome: Option<String>,
}

/// The audit log's verification.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct AuditCheck {
    /// Whether everything checks.
    pub ok: bool,
    /// Records checked.
    pub records: u64,
    /// What is broken (empty when `ok`).
    pub problems: Vec<String>,
    /// What protects the log, in words.
    pub protection: String,
}

/// A cost change of one agent.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct AgentCost {
    /// The agent.
    pub id: String,
    /// Its tokens.
    pub tokens: u64,
    /// Its cost.
    pub cost: Option<f64>,
}

/// One change, sent to the browsers as JSON (`kind` says which).
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Delta {
    /// An audit record was folded: its line, the agent it changed (added or updated), and the
    /// progress if it changed.
    Record {
        /// Its sequence number.
        seq: u64,
        /// Its event line.
        line: String,
        /// The agent as it is now, if the record changed it.
        #[serde(skip_serializing_if = "Option::is_none")]
        agent: Option<AgentView>,
        /// Its lead (or spawner) as it is now, if the record changed what it coordinates.
        #[serde(skip_serializing_if = "Option::is_none")]
        lead: Option<Box<AgentView>>,
        /// The progress, if the record changed it.
        #[serde(skip_serializing_if = "Option::is_none")]
        progress: Option<Progress>,
    },
    /// A decision appeared or changed.
    Decision {
        /// The decision as it is now.
        decision: DecisionView,
    },
    /// Tokens or cost changed: the new point and the agents whose figures changed.
    Cost {
        /// The new point.
        point: CostPoint,
        /// The agents that changed.
        agents: Vec<AgentCost>,
    },
    /// The run's status changed.
    Progress {
        /// The progress.
        progress: Progress,
    },
    /// The audit verification changed.
    Audit {
        /// The verification.
        audit: AuditCheck,
    },
    /// The stored metrics changed (heartbeat answers, misses, tasks): every agent's.
    Metrics {
        /// Every stored agent's metrics and score, by id.
        metrics: Vec<StoredMetrics>,
    },
}

/// What a [`RunModel`] starts from: the run, its goal, its start, the agents of its team file
/// and the humans who may sign.
pub struct Outline {
    /// The run's id.
    pub run_id: RunId,
    /// Its goal (the page's title).
    pub title: String,
    /// When it started, ms since the epoch.
    pub started_at: u64,
    /// The agents of its team file.
    pub agents: Vec<Seed>,
    /// The humans who may sign (`[approvals] humans`).
    pub humans: Vec<String>,
}

/// The model of one run.
pub struct RunModel {
    run_id: RunId,
    title: String,
    started_at: u64,
    line: LineFn,
    agents: Vec<AgentView>,
    activity: Vec<Activity>,
    index: HashMap<String, usize>,
    decisions: Vec<DecisionView>,
    humans: Vec<String>,
    progress: Progress,
    /// The step counter, shared with the live view.
    steps: super::Steps,
    /// The task the counter counts.
    task_id: String,
    /// The run's decisions as last read (a goal's plan is the one its power proposed).
    raw_decisions: Vec<Decision>,
    series: Vec<CostPoint>,
    events: VecDeque<String>,
    last_seq: Option<u64>,
    audit: AuditCheck,
    /// The stored metrics ([`agent_pool::stored_metrics`]), as the run summary and
    /// `inspect RUN metrics` show them.
    metrics: Vec<StoredMetrics>,
}

impl RunModel {
    /// A run as `outline` describes it, running `task` (its plan's steps, none for a goal),
    /// its records made lines by `line`.
    pub fn new(outline: Outline, task: &agent_state::Task, line: LineFn) -> Self {
        let Outline { run_id, title, started_at, agents, humans } = outline;
        let steps = super::Steps::new(task);
        let mut model = Self {
            run_id,
            title,
            started_at,
            line,
            agents: Vec::with_capacity(agents.len()),
            activity: Vec::with_capacity(agents.len()),
            index: HashMap::with_capacity(agents.len()),
            decisions: Vec::new(),
            humans,
            progress: Progress {
                done: 0,
                total: task.steps.len(),
                planning: task.steps.is_empty(),
                status: "running".to_owned(),
                outcome: None,
            },
            steps,
            task_id: task.id.clone(),
            raw_decisions: Vec::new(),
            series: Vec::new(),
            events: VecDeque::with_capacity(EVENT_LINES),
            last_seq: None,
            audit: AuditCheck::default(),
            metrics: Vec::new(),
        };
        for seed in agents {
            model.add(
                seed.id.as_str(),
                seed.layer,
                seed.parent.map(|p| p.to_string()),
                seed.role,
                false,
            );
        }
        model
    }

    fn add(
        &mut self,
        id: &str,
        layer: AgentLayer,
        parent: Option<String>,
        role: Option<String>,
        spawned: bool,
    ) -> usize {
        if let Some(&i) = self.index.get(id) {
            return i;
        }
        let i = self.agents.len();
        self.agents.push(AgentView {
            id: id.to_owned(),
            layer: layer.as_str(),
            role,
            parent,
            status: AgentStatus::Initializing.as_str(),
            step: String::new(),
            tokens: 0,
            cost: None,
            spawned,
        });
        self.activity.push(Activity::default());
        self.index.insert(id.to_owned(), i);
        i
    }

    /// The last record folded.
    pub fn last_seq(&self) -> Option<u64> {
        self.last_seq
    }

    /// The next sequence number to read.
    pub fn next_seq(&self) -> u64 {
        self.last_seq.map_or(0, |s| s + 1)
    }

    /// How many agents.
    pub fn agent_count(&self) -> usize {
        self.agents.len()
    }

    /// Folds `record`; `None` when it was folded already (its seq is not after the last).
    pub fn fold(&mut self, record: &AuditRecord) -> Option<Delta> {
        if self.last_seq.is_some_and(|last| record.seq <= last) {
            return None;
        }
        self.last_seq = Some(record.seq);
        let line = (self.line)(record, self.started_at);
        if self.events.len() == EVENT_LINES {
            self.events.pop_front();
        }
        self.events.push_back(line.clone());
        let (changed, lead) = self.apply(record, &line);
        // Counted again only when the record marks a step done: folding stays O(1) a record
        // (the count reads the plan and the decisions).
        let progress =
            (self.steps.saw(record) && self.count_steps()).then(|| self.progress.clone());
        Some(Delta::Record {
            seq: record.seq,
            line,
            agent: changed.map(|i| self.agents[i].clone()),
            lead: lead.map(|i| Box::new(self.agents[i].clone())),
            progress,
        })
    }

    /// What `record` (whose event line is `line`) changes: the agent it changed and the lead
    /// (or spawner) whose coordination it changed, by index.
    fn apply(&mut self, record: &AuditRecord, line: &str) -> (Option<usize>, Option<usize>) {
        let me = self.index.get(record.agent.as_str()).copied();
        let mut lead = None;
        let changed = match &record.event {
            AuditEvent::Spawned { spawn } => {
                let (i, spawner) = self.spawned(spawn, me);
                lead = spawner;
                Some(i)
            }
            AuditEvent::Despawned { agent, .. } => {
                let gone = self.index.get(agent.as_str()).copied();
                lead = me.map(|s| {
                    self.activity[s].tool = Some(format!("dismissed {agent}"));
                    self.refresh(s)
                });
                gone.map(|i| {
                    let what = &mut self.activity[i];
                    (what.assigned, what.work, what.tool) = (None, None, None);
                    what.reason = "dismissed".to_owned();
                    self.refresh(i)
                })
            }
            AuditEvent::Transition { from, to, reason } => {
                me.map(|i| self.transition(i, (*from, *to), reason))
            }
            AuditEvent::ToolCall { tool, args, success, .. } => me.map(|i| {
                self.activity[i].tool = Some(tool_call(tool, args, *success));
                lead = self.coordinate(i);
                self.refresh(i)
            }),
            AuditEvent::Result { task, .. } => me.map(|i| {
                let what = &mut self.activity[i];
                what.assigned = None;
                what.work = Some(task.clone());
                what.tool = Some("returned results".to_owned());
                lead = self.coordinate(i);
                self.refresh(i)
            }),
            AuditEvent::PeerHelp { step: Some(step), .. } => me.map(|i| {
                self.activity[i].work = Some(step.clone());
                lead = self.coordinate(i);
                self.refresh(i)
            }),
            AuditEvent::Decision { decision, action, .. } => me.map(|i| {
                let id = decision.to_string();
                let id = id.get(..8).unwrap_or(&id);
                self.activity[i].tool = Some(format!("decision {id} {action}"));
                self.refresh(i)
            }),
            AuditEvent::Ooda { .. } | AuditEvent::Operator { .. } => me.map(|i| {
                self.activity[i].tool = Some(after_agent(line, record.agent.as_str()));
                self.refresh(i)
            }),
            // Warnings and what is not work: the step stays.
            AuditEvent::Denied { .. }
            | AuditEvent::Error { .. }
            | AuditEvent::Retry { .. }
            | AuditEvent::MissedHeartbeat { .. }
            | AuditEvent::TimedOut { .. }
            | AuditEvent::SoftTimeout { .. }
            | AuditEvent::ToolOutcomeUnknown { .. }
            | AuditEvent::Stuck { .. }
            | AuditEvent::RunInputs { .. }
            | AuditEvent::Unsandboxed { .. }
            | AuditEvent::WorkerLost { .. }
            | AuditEvent::AgentPanicked { .. }
            | AuditEvent::AnswerRepair { .. }
            | AuditEvent::PeerHelp { step: None, .. } => None,
        };
        (changed, lead)
    }

    /// Adds the agent `spawn` made, with its task; the spawner (`me`) coordinates it. The new
    /// agent's index and the spawner's.
    fn spawned(
        &mut self,
        spawn: &agent_core::SpawnRecord,
        me: Option<usize>,
    ) -> (usize, Option<usize>) {
        let i = self.add(
            spawn.agent.as_str(),
            spawn.layer,
            Some(spawn.parent.to_string()),
            Some(spawn.role.clone()),
            true,
        );
        let task = spawn.task_prompt.lines().next().unwrap_or_default().trim();
        let task =
            if task.is_empty() { spawn.key.clone() } else { format!("{}: {task}", spawn.key) };
        self.activity[i].assigned = Some(task);
        self.refresh(i);
        // The spawner coordinates it: the new agent is the news, the spawner its lead.
        let lead = me.map(|s| {
            self.activity[s].work = Some(format!("coordinating {}", spawn.key));
            self.refresh(s)
        });
        (i, lead)
    }

    /// Agent `i` went `from` a status `to` another, for `reason`; `i`.
    fn transition(
        &mut self,
        i: usize,
        (from, to): (AgentStatus, AgentStatus),
        reason: &impl std::fmt::Display,
    ) -> usize {
        let what = &mut self.activity[i];
        what.reason = reason.to_string();
        what.ended = matches!(to, AgentStatus::ShuttingDown | AgentStatus::Terminated);
        if !busy(to) {
            (what.work, what.tool) = (None, None);
            if matches!(to, AgentStatus::ShuttingDown | AgentStatus::Terminated) {
                what.assigned = None;
            }
        } else if !busy(from) {
            // A new turn.
            (what.work, what.tool) = (None, None);
        }
        self.agents[i].status = to.as_str();
        self.refresh(i)
    }

    /// Sets the step of agent `i` from its activity; `i`.
    fn refresh(&mut self, i: usize) -> usize {
        if let Some(now) = self.activity[i].current() {
            self.activity[i].last = Some(now);
        }
        self.agents[i].step = self.activity[i].step();
        i
    }

    /// The lead of agent `i` (its supervisor or spawner, a mid-layer agent) coordinates what
    /// `i` is on now; the lead's index, if it changed.
    fn coordinate(&mut self, i: usize) -> Option<usize> {
        let parent = self.agents[i].parent.as_deref()?;
        let &p = self.index.get(parent)?;
        if p == i || self.agents[p].layer != AgentLayer::Mid.as_str() {
            return None;
        }
        let doing = self.activity[i].doing()?;
        let work = Some(format!("coordinating {}: {doing}", self.agents[i].id));
        if self.activity[p].work == work {
            return None;
        }
        self.activity[p].work = work;
        let before = std::mem::take(&mut self.agents[p].step);
        self.refresh(p);
        (self.agents[p].step != before).then_some(p)
    }

    /// Takes the run's decisions as they are now; a delta for each that is new or changed.
    pub fn set_decisions(&mut self, decisions: &[Decision]) -> Vec<Delta> {
        let mut out = Vec::new();
        self.raw_decisions = decisions.to_vec();
        if self.count_steps() {
            out.push(Delta::Progress { progress: self.progress.clone() });
        }
        for d in decisions {
            let view = self.decision_view(d);
            match self.decisions.iter_mut().find(|v| v.id == view.id) {
                Some(old) if *old == view => {}
                Some(old) => {
                    *old = view.clone();
                    out.push(Delta::Decision { decision: view });
                }
                None => {
                    self.decisions.push(view.clone());
                    out.push(Delta::Decision { decision: view });
                }
            }
        }
        out
    }

    fn decision_view(&self, d: &Decision) -> DecisionView {
        let humans: Vec<String> =
            d.human_approval.as_ref().map(|h| h.allowed.clone()).unwrap_or_default();
        let human_may_sign = d.status == DecisionStatus::Pending
            && d.needs_human()
            && humans.iter().any(|h| self.humans.contains(h));
        DecisionView {
            id: d.id.to_string(),
            proposer: d.proposer.to_string(),
            what: what(&d.content),
            status: d.status.as_str(),
            required: d.required_signers.iter().map(ToString::to_string).collect(),
            signatures: d
                .signatures
                .iter()
                .map(|s| Vote { by: s.signer.to_string(), at: s.at.0, reason: None })
                .collect(),
            vetoes: d
                .vetoes
                .iter()
                .map(|v| Vote {
                    by: v.vetoer.to_string(),
                    at: v.at.0,
                    reason: Some(v.reason.clone()),
                })
                .collect(),
            humans,
            human_may_sign,
        }
    }

    /// Takes each agent's tokens and cost at `now` (ms since the epoch); a delta with a new
    /// point of the series when a figure changed.
    pub fn set_usage(&mut self, now: u64, usage: &[AgentCost]) -> Option<Delta> {
        let mut changed = Vec::new();
        for u in usage {
            let Some(&i) = self.index.get(&u.id) else { continue };
            let a = &mut self.agents[i];
            if a.tokens != u.tokens || a.cost != u.cost {
                a.tokens = u.tokens;
                a.cost = u.cost;
                changed.push(u.clone());
            }
        }
        if changed.is_empty() {
            return None;
        }
        let tokens = self.agents.iter().map(|a| a.tokens).sum();
        let cost = self.agents.iter().filter_map(|a| a.cost).sum();
        let point = CostPoint { t: now.saturating_sub(self.started_at), tokens, cost };
        if self.series.len() >= SERIES_POINTS {
            // Every other point of the older half goes: the shape stays, the size is bounded.
            let half = self.series.len() / 2;
            let mut k = 0;
            self.series.retain(|_| {
                k += 1;
                k > half || k % 2 == 0
            });
        }
        self.series.push(point);
        Some(Delta::Cost { point, agents: changed })
    }

    /// Takes where the task stands at its top power, when it could be read (see
    /// [`Steps::power`](super::Steps::power)); a delta when the counter changed.
    pub fn set_power(&mut self, power: Option<agent_layers::TaskProgress>) -> Option<Delta> {
        self.steps.power(power);
        self.count_steps().then(|| Delta::Progress { progress: self.progress.clone() })
    }

    /// The task the step counter counts.
    pub fn task_id(&self) -> &str {
        &self.task_id
    }

    /// Whether `id` is one of the run's agents that take tasks and hold their plans: its top
    /// powers, a crew's lead, a single agent (the configured agents without a supervisor).
    pub fn takes_tasks(&self, id: &AgentId) -> bool {
        self.index.get(id.as_str()).is_some_and(|&i| {
            let agent = &self.agents[i];
            agent.layer == "top" || (!agent.spawned && agent.parent.is_none())
        })
    }

    /// Counts the steps again; whether the counter changed.
    fn count_steps(&mut self) -> bool {
        let (done, total, planning) = match self.steps.count(&self.task_id, &self.raw_decisions) {
            Some((done, total)) => (done, total, false),
            None => (0, 0, true),
        };
        if (self.progress.done, self.progress.total, self.progress.planning)
            == (done, total, planning)
        {
            return false;
        }
        (self.progress.done, self.progress.total, self.progress.planning) = (done, total, planning);
        true
    }

    /// Takes the run's status and failure; a delta when they changed.
    pub fn set_status(&mut self, status: &str, outcome: Option<String>) -> Option<Delta> {
        if self.progress.status == status && self.progress.outcome == outcome {
            return None;
        }
        self.progress.status = status.to_owned();
        self.progress.outcome = outcome;
        Some(Delta::Progress { progress: self.progress.clone() })
    }

    /// Takes the audit verification; a delta when it changed.
    pub fn set_audit(&mut self, audit: AuditCheck) -> Option<Delta> {
        if self.audit == audit {
            return None;
        }
        self.audit = audit.clone();
        Some(Delta::Audit { audit })
    }

    /// Takes the stored metrics; a delta when they changed.
    pub fn set_metrics(&mut self, metrics: Vec<StoredMetrics>) -> Option<Delta> {
        if self.metrics == metrics {
            return None;
        }
        self.metrics = metrics.clone();
        Some(Delta::Metrics { metrics })
    }

    /// The whole picture as JSON text, with the last `events` event lines.
    pub fn snapshot_json(&self, events: usize) -> String {
        #[derive(Serialize)]
        struct Snapshot<'a> {
            run_id: &'a str,
            title: &'a str,
            started_at: u64,
            last_seq: Option<u64>,
            agents: &'a [AgentView],
            decisions: &'a [DecisionView],
            humans: &'a [String],
            progress: &'a Progress,
            series: &'a [CostPoint],
            events: Vec<&'a str>,
            audit: &'a AuditCheck,
            metrics: &'a [StoredMetrics],
        }
        let skip = self.events.len().saturating_sub(events);
        let snapshot = Snapshot {
            run_id: &self.run_id,
            title: &self.title,
            started_at: self.started_at,
            last_seq: self.last_seq,
            agents: &self.agents,
            decisions: &self.decisions,
            humans: &self.humans,
            progress: &self.progress,
            series: &self.series,
            events: self.events.iter().skip(skip).map(String::as_str).collect(),
            audit: &self.audit,
            metrics: &self.metrics,
        };
        serde_json::to_string(&snapshot).unwrap_or_else(|e| {
            serde_json::json!({ "error": format!("cannot serialise the run: {e}") }).to_string()
        })
    }
}

/// An event `line` without its time and the id of its `agent`.
fn after_agent(line: &str, agent: &str) -> String {
    let what = line.split_once("] ").map_or(line, |(_, rest)| rest);
    what.trim_start().strip_prefix(agent).unwrap_or(what).trim_start().to_owned()
}

/// A decision's content in a few words: its first text field among the usual ones, else its
/// JSON, shortened.
fn what(content: &serde_json::Value) -> String {
    if let Some(text) = content.as_str() {
        return shorten(text, WHAT_CHARS);
    }
    for key in ["summary", "goal", "title", "task", "what", "kind"] {
        if let Some(text) = content.get(key).and_then(|v| v.as_str()) {
            return shorten(text, WHAT_CHARS);
        }
    }
    shorten(&content.to_string(), WHAT_CHARS)
}
