//! Deterministic simulation (feature `sim`): a whole team on simulated time, in one thread,
//! driven by a seed, with crashes, message delays and reorderings, and slow and failing tools;
//! invariants checked after every step; a digest of the run to compare two runs of a seed.
//!
//! A [`Scenario`] is drawn from a seed ([`Scenario::from_seed`]): the team (one to three
//! powers, leads, executors: up to a few hundred agents), the tasks (scripted plans whose steps
//! call [`SimTool`]s), the simulated times at which the process "crashes" (the team is dropped
//! without shutting down, the bus puts in-flight messages back, and [`Team::resume`] carries
//! on), the bus's largest delay, the tools' latencies and failure rates, and whether a power
//! vetoes every plan. [`run`] plays it on a fresh current-thread tokio runtime with paused time
//! and returns a [`SimReport`].
//!
//! Everything the run depends on comes from the seed: message and decision ids from the
//! [`SimClock`] (not random UUIDs), each delay of the [`SimBus`] and each latency and failure of
//! a [`SimTool`] from a small in-crate generator, time from tokio's paused clock. Two runs of
//! one seed produce the same audit log, record for record, and so the same
//! [`SimReport::digest`].
//! Determinism also needs the runtime's own order, which a change must keep: the `select!`s of
//! the team's driver are `biased`, the scheduler sorts its busy agents where their order shows,
//! its ready queue keeps the order in which deliveries made agents ready, and the in-memory bus
//! lists inboxes sorted.
//!
//! After every step (one heartbeat period of simulated time) [`run`] checks:
//! - the audit log's hash chain verifies ([`agent_core::verify_chain`]) and its transitions
//!   form a chain ([`agent_core::check_transition_chain`]);
//! - no side effect ran twice: each step's [`SimTool`] effect is in the effect log at most once
//!   (a message processed twice, or a call repeated after a crash, would run it again);
//! - no decision was signed or vetoed by an agent that is not one of its required signers
//!   (governance's decisions, and every `signed` audit record against them);
//! - no message was lost: at the end, every message the [`SimBus`] held back was delivered;
//! - every task ends: each has an outcome within [`Scenario::horizon`] of simulated time.
//!
//! ```
//! use agent_pool::sim::{Scenario, run};
//!
//! let report = run(&Scenario::from_seed(7));
//! assert!(report.failure.is_none(), "{:?}", report.failure);
//! assert_eq!(report.digest, run(&Scenario::from_seed(7)).digest);
//! ```

use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use agent_core::tools::{ToolContext, ToolError, ToolOutput, ToolRegistry};
use agent_core::{
    AuditEvent, AuditRecord, Clock, ReasoningRequest, ScriptedAnswer, ScriptedReasoner, TokioClock,
    Verdict,
};
use agent_layers::{BottomSpec, MidSpec, TopSpec};
use agent_state::{
    Address, AgentConfig, AgentId, AgentLayer, BackendError, DecisionId, Message, MessageId,
    PlanStep, StepTarget, Task, Timestamp,
};
use async_trait::async_trait;
use governance::{Governance, InMemoryGovernance};
use message_bus::{InMemoryBus, InboxError, MessageBus, RegisterError, SendError};
use serde_json::{Value, json};

use crate::team::{AgentSpec, RoleSpec, Team, TeamServices, TeamSpec};

/// A scenario's tools: three to five, latencies up to 4 s, some failing transiently, some
/// permanently.
fn sim_tools(rng: &mut SplitMix64) -> Vec<ToolProfile> {
    (0..rng.between(3, 5))
        .map(|t| {
            let low = rng.between(0, 500);
            ToolProfile {
                name: format!("sim_tool_{t}"),
                latency_ms: (low, low + rng.between(0, 3500)),
                transient_per_mille: if rng.chance(500) { rng.between(50, 400) } else { 0 },
                permanent: rng.chance(100),
            }
        })
        .collect()
}

/// A scenario's team: `powers` powers, `leads` leads with one to twenty executors each, every
/// executor holding the tools `names`.
fn sim_team(rng: &mut SplitMix64, powers: u64, leads: u64, names: &[String]) -> TeamSpec {
    let mut agents = Vec::new();
    for p in 0..powers {
        agents.push(AgentSpec {
            config: AgentConfig::new(format!("top-{p}"), format!("Power {p}"), AgentLayer::Top)
                .with_role("governance"),
            role: RoleSpec::Top(TopSpec {
                power_type: format!("power_{p}"),
                vote_weight: if p == 0 { 2.0 } else { 1.0 },
                signature_authority: vec!["plan".into()],
            }),
        });
    }
    for l in 0..leads {
        let executors = rng.between(1, 20);
        let lead = format!("lead-{l}");
        agents.push(AgentSpec {
            config: AgentConfig::new(lead.as_str(), format!("Lead {l}"), AgentLayer::Mid)
                .with_supervisor("top-0"),
            role: RoleSpec::Mid(MidSpec {
                domain: format!("d{l}"),
                max_subordinates: usize::try_from(executors).unwrap_or(usize::MAX),
            }),
        });
        for e in 0..executors {
            let id = format!("exec-{l}-{e}");
            agents.push(AgentSpec {
                config: AgentConfig::new(id.as_str(), format!("Executor {id}"), AgentLayer::Bottom)
                    .with_supervisor(lead.as_str()),
                role: RoleSpec::Bottom(BottomSpec::new(names.iter().cloned())),
            });
        }
    }
    let mut team = TeamSpec::new(agents);
    team.max_agents = team.agents.len();
    team.heartbeat = Duration::from_secs(1);
    team.timeouts.task_ms = 20 * 60 * 1000;
    team
}

/// A scenario's tasks: one to three, of one to six steps (with `after` links) on the tools
/// `names`, each for the domain of one of the `leads` leads.
fn sim_tasks(rng: &mut SplitMix64, leads: u64, names: &[String]) -> Vec<Task> {
    (0..rng.between(1, 3))
        .map(|t| {
            let steps = rng.between(1, 6);
            let mut plan = Vec::new();
            for s in 0..steps {
                let id = format!("s{s}");
                let after = if s > 0 && rng.chance(400) {
                    vec![format!("s{}", rng.between(0, s - 1))]
                } else {
                    Vec::new()
                };
                let tool =
                    &names[usize::try_from(rng.between(0, names.len() as u64 - 1)).unwrap_or(0)];
                plan.push(PlanStep {
                    id: id.clone(),
                    description: format!("step {id} of task t{t}"),
                    target: StepTarget::Domain(format!("d{}", rng.between(0, leads - 1))),
                    tool: tool.clone(),
                    args: json!({ "effect": format!("t{t}/{id}") }),
                    after,
                    idempotent: false,
                    role: None,
                    acceptance: String::new(),
                });
            }
            Task { id: format!("t{t}"), goal: format!("simulated task {t}"), steps: plan }
        })
        .collect()
}

#[cfg(test)]
mod tests;

/// A small seeded generator (SplitMix64): fast, no dependency, the same sequence everywhere.
#[derive(Clone, Debug)]
pub struct SplitMix64(u64);

impl SplitMix64 {
    /// A generator starting from `seed`.
    pub fn new(seed: u64) -> Self {
        Self(seed)
    }

    /// The next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        mix(self.0)
    }

    /// A number in `low..=high` (`low` if the range is empty).
    pub fn between(&mut self, low: u64, high: u64) -> u64 {
        if high <= low {
            return low;
        }
        low + self.next_u64() % (high - low + 1)
    }

    /// `true` with probability `per_mille` / 1000.
    pub fn chance(&mut self, per_mille: u64) -> bool {
        self.next_u64() % 1000 < per_mille
    }
}

/// SplitMix64's finalizer: a good 64-bit mix of `z`.
fn mix(mut z: u64) -> u64 {
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// A [`Clock`] on tokio's (paused) time whose message and decision ids come from a seed
/// instead of random UUIDs v4, so that a simulated run reproduces exactly.
pub struct SimClock {
    time: TokioClock,
    ids: Mutex<SplitMix64>,
}

impl SimClock {
    /// A clock starting at `start`, with ids drawn from `seed`.
    pub fn new(start: Timestamp, seed: u64) -> Self {
        Self { time: TokioClock::starting_at(start), ids: Mutex::new(SplitMix64::new(seed)) }
    }

    fn next_id(&self) -> u128 {
        let mut ids = self.ids.lock().unwrap_or_else(PoisonError::into_inner);
        (u128::from(ids.next_u64()) << 64) | u128::from(ids.next_u64())
    }
}

impl Clock for SimClock {
    fn now(&self) -> Timestamp {
        self.time.now()
    }

    fn message_id(&self) -> MessageId {
        MessageId::from_u128(self.next_id())
    }

    fn decision_id(&self) -> DecisionId {
        DecisionId::from_u128(self.next_id())
    }
}

/// A [`MessageBus`] decorator that delays messages to agents by a seeded amount of tokio time
/// (up to `max_delay`), so messages to one inbox can arrive out of order. A delayed send
/// returns `Ok(1)` at once, as a durable bus would once it holds the message; the message
/// reaches the inner bus later, across a simulated crash too (the network still holds it).
/// Messages to `system` and broadcasts pass at once. Sends to an unknown agent are refused as
/// the inner bus refuses them.
pub struct SimBus {
    inner: Arc<dyn MessageBus>,
    rng: Mutex<SplitMix64>,
    max_delay: Duration,
    /// Messages held back, and delivered.
    held: Arc<AtomicU64>,
    delivered: Arc<AtomicU64>,
    lost: Arc<AtomicU64>,
}

impl SimBus {
    /// Wraps `inner`; each message to an agent waits a seeded delay in `0..=max_delay`.
    pub fn new(inner: Arc<dyn MessageBus>, seed: u64, max_delay: Duration) -> Self {
        Self {
            inner,
            rng: Mutex::new(SplitMix64::new(seed)),
            max_delay,
            held: Arc::default(),
            delivered: Arc::default(),
            lost: Arc::default(),
        }
    }

    /// Messages held back so far, and how many of them reached the inner bus, and how many
    /// the inner bus refused when their time came.
    pub fn counts(&self) -> (u64, u64, u64) {
        (
            self.held.load(Ordering::SeqCst),
            self.delivered.load(Ordering::SeqCst),
            self.lost.load(Ordering::SeqCst),
        )
    }

    fn delay(&self) -> Duration {
        let max = u64::try_from(self.max_delay.as_millis()).unwrap_or(u64::MAX);
        let mut rng = self.rng.lock().unwrap_or_else(PoisonError::into_inner);
        // Half of the messages pass at once; the others wait up to the largest delay.
        if rng.chance(500) { Duration::ZERO } else { Duration::from_millis(rng.between(1, max)) }
    }
}

#[async_trait]
impl MessageBus for SimBus {
    async fn register(&self, agent: &AgentId) -> Result<(), RegisterError> {
        self.inner.register(agent).await
    }

    async fn unregister(&self, agent: &AgentId) -> Result<(), RegisterError> {
        self.inner.unregister(agent).await
    }

    async fn is_registered(&self, agent: &AgentId) -> Result<bool, BackendError> {
        self.inner.is_registered(agent).await
    }

    async fn registered(&self) -> Result<Vec<AgentId>, BackendError> {
        self.inner.registered().await
    }

    async fn send(&self, message: Message) -> Result<usize, SendError> {
        let Address::Agent(to) = &message.to else { return self.inner.send(message).await };
        let delay = self.delay();
        if delay.is_zero() || !self.inner.is_registered(to).await? {
            return self.inner.send(message).await;
        }
        self.held.fetch_add(1, Ordering::SeqCst);
        let inner = self.inner.clone();
        let delivered = self.delivered.clone();
        let lost = self.lost.clone();
        tokio::spawn(async move {
            tokio::time::sleep(delay).await;
            match inner.send(message).await {
                Ok(_) => delivered.fetch_add(1, Ordering::SeqCst),
                Err(error) => {
                    tracing::warn!(%error, "a delayed message could not be delivered");
                    lost.fetch_add(1, Ordering::SeqCst)
                }
            };
        });
        Ok(1)
    }

    /// A batch travels as one: held back by one delay (when every message goes to a
    /// registered agent, as for `send`), then handed to the inner bus as one batch, so it
    /// stays all or nothing and in order.
    async fn send_many(&self, messages: Vec<Message>) -> Result<Vec<usize>, SendError> {
        let delay = self.delay();
        let mut held_back = !delay.is_zero() && !messages.is_empty();
        for message in &messages {
            if !held_back {
                break;
            }
            held_back = match &message.to {
                Address::Agent(to) => self.inner.is_registered(to).await?,
                Address::System | Address::Broadcast => false,
            };
        }
        if !held_back {
            return self.inner.send_many(messages).await;
        }
        let count = messages.len();
        let n = u64::try_from(count).unwrap_or(u64::MAX);
        self.held.fetch_add(n, Ordering::SeqCst);
        let inner = self.inner.clone();
        let delivered = self.delivered.clone();
        let lost = self.lost.clone();
        tokio::spawn(async move {
            tokio::time::sleep(delay).await;
            match inner.send_many(messages).await {
                Ok(_) => delivered.fetch_add(n, Ordering::SeqCst),
                Err(error) => {
                    tracing::warn!(%error, "a delayed batch of messages could not be delivered");
                    lost.fetch_add(n, Ordering::SeqCst)
                }
            };
        });
        Ok(vec![1; count])
    }

    async fn take(&self, inbox: &Address, max: usize) -> Result<Vec<Message>, InboxError> {
        self.inner.take(inbox, max).await
    }

    async fn ack(&self, inbox: &Address, ids: &[MessageId]) -> Result<usize, InboxError> {
        self.inner.ack(inbox, ids).await
    }

    async fn release(&self, inbox: &Address) -> Result<usize, InboxError> {
        self.inner.release(inbox).await
    }

    async fn pending(&self, inbox: &Address) -> Result<usize, InboxError> {
        self.inner.pending(inbox).await
    }

    async fn inboxes_with_mail(&self) -> Result<Vec<AgentId>, BackendError> {
        self.inner.inboxes_with_mail().await
    }
}

/// How a [`SimTool`] behaves: its latency and its failures, all decided by the seed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ToolProfile {
    /// The tool's name.
    pub name: String,
    /// The shortest and longest latency of a call, in milliseconds of tokio time.
    pub latency_ms: (u64, u64),
    /// The chance, in thousandths, that a call fails transiently (before doing anything).
    pub transient_per_mille: u64,
    /// Every call fails (a tool that cannot do its job).
    pub permanent: bool,
}

/// The side effects the simulated tools performed, in order: one entry per effect key.
#[derive(Debug, Default)]
pub struct EffectLog(Mutex<Vec<String>>);

impl EffectLog {
    fn record(&self, key: &str) {
        self.0.lock().unwrap_or_else(PoisonError::into_inner).push(key.to_owned());
    }

    /// Every effect so far, in the order they happened.
    pub fn entries(&self) -> Vec<String> {
        self.0.lock().unwrap_or_else(PoisonError::into_inner).clone()
    }
}

/// A simulated tool: a real [`Tool`](agent_core::tools::Tool) whose behaviour the seed
/// decides. A call `{"effect": key}` waits a latency drawn from the seed, the key and the
/// attempt number (on tokio time), then fails transiently (an error, nothing done) with the
/// profile's chance, fails every time for a permanent profile, or performs its side effect:
/// `key` is appended to the [`EffectLog`]. Not idempotent, so a crashed call is reported
/// interrupted rather than run again.
pub struct SimTool {
    profile: ToolProfile,
    seed: u64,
    schema: Value,
    attempts: Mutex<BTreeMap<String, u64>>,
    effects: Arc<EffectLog>,
}

impl SimTool {
    /// A tool behaving as `profile`, its draws from `seed`, its effects going to `effects`.
    pub fn new(profile: ToolProfile, seed: u64, effects: Arc<EffectLog>) -> Self {
        Self {
            profile,
            seed,
            schema: json!({
                "type": "object",
                "properties": {
                    "effect": {
                        "type": "string",
                        "minLength": 1,
                        "description": "the side effect's key",
                    },
                },
                "required": ["effect"],
                "additionalProperties": false,
            }),
            attempts: Mutex::default(),
            effects,
        }
    }

    /// A draw for `key`'s `attempt`: the same for the same seed, tool, key and attempt.
    fn draw(&self, key: &str, attempt: u64) -> SplitMix64 {
        let mut h = fnv(self.seed, self.profile.name.as_bytes());
        h = fnv(h, key.as_bytes());
        SplitMix64::new(mix(h ^ attempt))
    }
}

#[async_trait]
impl agent_core::tools::Tool for SimTool {
    fn name(&self) -> &str {
        &self.profile.name
    }

    fn description(&self) -> &str {
        "a simulated tool: waits, may fail, and records its side effect under `effect`"
    }

    fn schema(&self) -> &Value {
        &self.schema
    }

    fn has_side_effects(&self) -> bool {
        true
    }

    async fn call(&self, _ctx: &ToolContext, args: Value) -> Result<ToolOutput, ToolError> {
        let Some(key) = args.get("effect").and_then(Value::as_str) else {
            return Err(ToolError::InvalidArguments {
                tool: self.profile.name.clone(),
                problems: vec!["`effect` must be a string".into()],
            });
        };
        let attempt = {
            let mut attempts = self.attempts.lock().unwrap_or_else(PoisonError::into_inner);
            let n = attempts.entry(key.to_owned()).or_insert(0);
            *n += 1;
            *n
        };
        let mut draw = self.draw(key, attempt);
        let (low, high) = self.profile.latency_ms;
        tokio::time::sleep(Duration::from_millis(draw.between(low, high))).await;
        if self.profile.permanent {
            return Err(ToolError::Failed {
                tool: self.profile.name.clone(),
                message: "simulated permanent failure".into(),
            });
        }
        if draw.chance(self.profile.transient_per_mille) {
            return Err(ToolError::Failed {
                tool: self.profile.name.clone(),
                message: format!("simulated transient failure (attempt {attempt})"),
            });
        }
        self.effects.record(key);
        Ok(ToolOutput {
            success: true,
            output: format!("did {key}"),
            data: json!({ "effect": key, "attempt": attempt }),
        })
    }
}

/// One simulated run, drawn from a seed.
#[derive(Clone, Debug, PartialEq)]
pub struct Scenario {
    /// The seed everything was drawn from.
    pub seed: u64,
    /// The team.
    pub team: TeamSpec,
    /// The tasks, submitted at the start.
    pub tasks: Vec<Task>,
    /// The simulated tools.
    pub tools: Vec<ToolProfile>,
    /// The steps (heartbeat periods from the start) after which the process crashes and the
    /// team is resumed, in order.
    pub crashes: Vec<u64>,
    /// The bus's largest delay of a message.
    pub max_delay: Duration,
    /// The power that vetoes every plan, if any.
    pub vetoer: Option<AgentId>,
    /// How much simulated time every task has to end.
    pub horizon: Duration,
}

impl Scenario {
    /// The scenario of `seed`: one to three powers, one to sixteen leads with one to twenty
    /// executors each (up to 339 agents), one to three tasks of one to six steps (with
    /// `after` links), zero to two crashes in the first minute, bus delays up to 3 s, three
    /// to five tools (latencies up to 4 s, some failing transiently, some permanently), and
    /// in one scenario of ten a power that vetoes every plan.
    pub fn from_seed(seed: u64) -> Self {
        let mut rng = SplitMix64::new(seed);
        let powers = rng.between(1, 3);
        let leads = rng.between(1, 16);
        let tools = sim_tools(&mut rng);
        let names: Vec<String> = tools.iter().map(|t| t.name.clone()).collect();
        let team = sim_team(&mut rng, powers, leads, &names);
        let tasks = sim_tasks(&mut rng, leads, &names);
        let mut crashes: Vec<u64> = (0..rng.between(0, 2)).map(|_| rng.between(0, 60)).collect();
        crashes.sort_unstable();
        let max_delay = Duration::from_millis(rng.between(0, 3000));
        let vetoer =
            (powers > 1 && rng.chance(100)).then(|| AgentId::from(format!("top-{}", powers - 1)));
        Self {
            seed,
            team,
            tasks,
            tools,
            crashes,
            max_delay,
            vetoer,
            horizon: Duration::from_secs(2 * 60 * 60),
        }
    }

    /// How many agents the team has.
    pub fn agents(&self) -> usize {
        self.team.agents.len()
    }
}

/// What a simulated run did, and the first invariant it broke, if any.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SimReport {
    /// The scenario's seed.
    pub seed: u64,
    /// How many agents the team had.
    pub agents: usize,
    /// Steps played (heartbeat periods of simulated time).
    pub steps: u64,
    /// Crashes injected.
    pub crashes: usize,
    /// Audit records written.
    pub records: usize,
    /// Side effects performed.
    pub effects: usize,
    /// Each task's outcome, by id: `succeeded`, or `failed: ` and why.
    pub outcomes: BTreeMap<String, String>,
    /// A hash of the audit log (each record's agent, time and event, in order) and the
    /// outcomes: equal for two runs of one seed.
    pub digest: u64,
    /// The first broken invariant, with the step it was found at.
    pub failure: Option<String>,
}

/// FNV-1a over `bytes`, continuing from `hash`.
fn fnv(mut hash: u64, bytes: &[u8]) -> u64 {
    for b in bytes {
        hash ^= u64::from(*b);
        hash = hash.wrapping_mul(0x0000_0100_0000_01B3);
    }
    hash
}

const FNV_OFFSET: u64 = 0xCBF2_9CE4_8422_2325;

/// The digest of an audit log and the outcomes.
fn digest(records: &[AuditRecord], outcomes: &BTreeMap<String, String>) -> u64 {
    let mut hash = FNV_OFFSET;
    for r in records {
        hash = fnv(hash, format!("{}|{}|{}|{:?}\n", r.seq, r.agent, r.at.0, r.event).as_bytes());
    }
    for (task, outcome) in outcomes {
        hash = fnv(hash, format!("{task}={outcome}\n").as_bytes());
    }
    hash
}

/// Plays `scenario` on a fresh current-thread tokio runtime with paused time and reports.
/// A runtime that cannot be built is reported as the run's failure.
pub fn run(scenario: &Scenario) -> SimReport {
    let runtime =
        tokio::runtime::Builder::new_current_thread().enable_time().start_paused(true).build();
    match runtime {
        Ok(runtime) => runtime.block_on(play(scenario)),
        Err(e) => SimReport {
            seed: scenario.seed,
            agents: scenario.agents(),
            steps: 0,
            crashes: 0,
            records: 0,
            effects: 0,
            outcomes: BTreeMap::new(),
            digest: 0,
            failure: Some(format!("cannot build a tokio runtime: {e}")),
        },
    }
}

/// What the run holds on to across crashes: the backends and the world.
struct World {
    bus: Arc<InMemoryBus>,
    sim_bus: Arc<SimBus>,
    services: TeamServices,
    governance: Arc<InMemoryGovernance>,
    effects: Arc<EffectLog>,
}

impl World {
    fn new(scenario: &Scenario) -> Result<Self, String> {
        let seed = scenario.seed;
        let bus = Arc::new(InMemoryBus::new());
        let sim_bus = Arc::new(SimBus::new(bus.clone(), mix(seed ^ 1), scenario.max_delay));
        let governance = Arc::new(InMemoryGovernance::new());
        let effects = Arc::new(EffectLog::default());
        let mut tools = ToolRegistry::new();
        for profile in &scenario.tools {
            let tool = SimTool::new(profile.clone(), mix(seed ^ 2), effects.clone());
            tools.register(Arc::new(tool)).map_err(|e| e.to_string())?;
        }
        // The simulated tools never touch the workspace; the context still needs a directory.
        let workspace = ToolContext::new(std::env::temp_dir()).map_err(|e| e.to_string())?;
        let vetoer = scenario.vetoer.clone();
        let reasoner = ScriptedReasoner::from_fn(move |request| match request {
            ReasoningRequest::Review { agent, .. } if Some(agent) == vetoer.as_ref() => {
                ScriptedAnswer::Verdict(Verdict::Veto { reason: "the simulation's vetoer".into() })
            }
            _ => ScriptedAnswer::Fallback,
        });
        let services = TeamServices {
            bus: sim_bus.clone(),
            governance: governance.clone(),
            clock: Arc::new(SimClock::new(Timestamp(1_700_000_000_000), mix(seed ^ 3))),
            tools: Arc::new(tools),
            ..TeamServices::in_memory(workspace, Arc::new(reasoner))
        };
        Ok(Self { bus, sim_bus, services, governance, effects })
    }

    /// Every invariant that must hold after any step.
    async fn check(&self) -> Result<Vec<AuditRecord>, String> {
        let records = self.services.audit.records(None).await.map_err(|e| e.to_string())?;
        agent_core::verify_chain(&records).map_err(|e| format!("audit chain: {e}"))?;
        agent_core::check_transition_chain(&records)
            .map_err(|e| format!("transition chain: {e}"))?;
        let mut seen = BTreeSet::new();
        for effect in self.effects.entries() {
            if !seen.insert(effect.clone()) {
                return Err(format!("side effect `{effect}` ran twice"));
            }
        }
        let decisions: BTreeMap<DecisionId, agent_state::Decision> = self
            .governance
            .list()
            .await
            .map_err(|e| e.to_string())?
            .into_iter()
            .map(|d| (d.id, d))
            .collect();
        for d in decisions.values() {
            let stranger = d
                .signatures
                .iter()
                .map(|s| &s.signer)
                .chain(d.vetoes.iter().map(|v| &v.vetoer))
                .find(|a| !d.required_signers.contains(a));
            if let Some(stranger) = stranger {
                return Err(format!("decision {} signed by `{stranger}`, not a signer", d.id));
            }
        }
        for r in &records {
            if let AuditEvent::Decision { decision, action, .. } = &r.event
                && (action == "signed" || action == "vetoed")
                && let Some(d) = decisions.get(decision)
                && d.proposer != r.agent
                && !d.required_signers.contains(&r.agent)
            {
                return Err(format!("`{}` {action} decision {decision}, not a signer", r.agent));
            }
        }
        Ok(records)
    }
}

/// The process dies: the team is dropped, nothing is shut down. A dropped team's tasks end
/// when the runtime next reaches them, not at once, and a task already woken may still write
/// (a tool call that just returned records its result): a real crash stops every task at
/// once. So the old team's tasks are waited out before anything is resumed; what they wrote
/// meanwhile is what happened before the crash. Only the [`SimBus`]'s deliveries (the network)
/// outlive it.
async fn crash(team: Team, bus: &SimBus) -> Result<(), String> {
    drop(team);
    let metrics = tokio::runtime::Handle::current().metrics();
    for _ in 0..CRASH_YIELDS {
        let (held, delivered, lost) = bus.counts();
        let network = usize::try_from(held - delivered - lost).unwrap_or(usize::MAX);
        if metrics.num_alive_tasks() <= network {
            return Ok(());
        }
        tokio::task::yield_now().await;
    }
    Err(format!("the crashed team's tasks are still alive after {CRASH_YIELDS} yields"))
}

/// How many times [`crash`] lets the runtime run before giving up on the old tasks.
const CRASH_YIELDS: usize = 10_000;

async fn play(scenario: &Scenario) -> SimReport {
    let mut report = SimReport {
        seed: scenario.seed,
        agents: scenario.agents(),
        steps: 0,
        crashes: 0,
        records: 0,
        effects: 0,
        outcomes: BTreeMap::new(),
        digest: 0,
        failure: None,
    };
    let world = match World::new(scenario) {
        Ok(world) => world,
        Err(e) => {
            report.failure = Some(format!("cannot set up the world: {e}"));
            return report;
        }
    };
    if let Err(e) = simulate(scenario, &world, &mut report).await {
        report.failure = Some(format!("step {}: {e}", report.steps));
    }
    let records = world.services.audit.records(None).await.unwrap_or_default();
    report.records = records.len();
    report.effects = world.effects.entries().len();
    report.digest = digest(&records, &report.outcomes);
    report
}

async fn simulate(
    scenario: &Scenario,
    world: &World,
    report: &mut SimReport,
) -> Result<(), String> {
    let spec = scenario.team.clone();
    let mut team =
        Team::start(spec.clone(), world.services.clone()).await.map_err(|e| e.to_string())?;
    for task in &scenario.tasks {
        team.submit(task.clone()).await.map_err(|e| format!("submit {}: {e}", task.id))?;
    }
    let step = spec.heartbeat;
    let bound = scenario.horizon.as_millis() / step.as_millis().max(1);
    let mut crashes = scenario.crashes.iter().peekable();
    loop {
        tokio::time::sleep(step).await;
        report.steps += 1;
        world.check().await?;
        while crashes.next_if(|at| **at <= report.steps).is_some() {
            crash(team, &world.sim_bus).await?;
            world.bus.restart(); // a durable bus on reopen: in-flight messages are pending again
            report.crashes += 1;
            team = Team::resume(spec.clone(), world.services.clone())
                .await
                .map_err(|e| format!("resume: {e}"))?;
            world.check().await?;
        }
        let open: Vec<&str> = scenario
            .tasks
            .iter()
            .map(|t| t.id.as_str())
            .filter(|id| team.outcome(id).is_none())
            .collect();
        if open.is_empty() && crashes.peek().is_none() {
            break;
        }
        if u128::from(report.steps) >= bound {
            return Err(format!("tasks {open:?} did not end within {:?}", scenario.horizon));
        }
    }
    for task in &scenario.tasks {
        if let Some(outcome) = team.outcome(&task.id) {
            let text = match outcome {
                agent_state::TaskOutcome::Succeeded { .. } => "succeeded".to_owned(),
                agent_state::TaskOutcome::Failed { reason, .. } => format!("failed: {reason}"),
            };
            report.outcomes.insert(task.id.clone(), text);
        }
    }
    team.shutdown().await.map_err(|e| format!("shutdown: {e}"))?;
    // Every message held back has had its time to arrive.
    tokio::time::sleep(scenario.max_delay + step).await;
    let records = world.check().await?;
    let finals = agent_core::check_transition_chain(&records).map_err(|e| e.to_string())?;
    if let Some((agent, status)) =
        finals.iter().find(|(_, s)| *s != agent_state::AgentStatus::Terminated)
    {
        return Err(format!("after shutdown `{agent}` is {status}, not terminated"));
    }
    let (held, delivered, lost) = world.sim_bus.counts();
    if delivered + lost != held {
        return Err(format!(
            "{} of {held} delayed messages never arrived",
            held - delivered - lost
        ));
    }
    Ok(())
}
