//! The model-based conformance test: generated sequences of operations on both traits, run on
//! a backend and on a reference model, each answer compared, and the whole state compared after
//! every restart and at the end.

use std::collections::BTreeMap;

use agent_state::{AgentId, BackendError, TaskOutcome, Timestamp};
use proptest::collection::vec;
use proptest::prelude::*;
use proptest::test_runner::{Config, TestCaseError, TestError, TestRunner};
use tokio::runtime::Runtime;

use super::data::{
    AGENTS, GHOST, TASKS, agent, agent_record, blob_contents, event, outcome, tool_keys,
    tool_output,
};
use super::{StoreFactory, Stores};
use crate::audit::{AuditAnchor, AuditEntry, AuditRecord, GENESIS_HASH};
use crate::blob::hash_of;
use crate::state::AgentRecord;
use crate::tools::ToolOutput;

/// Longest generated sequence.
const MAX_OPS: usize = 40;
/// Sequences generated when `PROPTEST_CASES` is unset.
const DEFAULT_CASES: u32 = 64;

/// Runs the model-based test; panics with the smallest failing sequence found.
pub(super) fn run<F: StoreFactory>(runtime: &Runtime, factory: &F, durable: bool) {
    let cases = std::env::var("PROPTEST_CASES")
        .ok()
        .and_then(|cases| cases.parse().ok())
        .unwrap_or(DEFAULT_CASES);
    let config = Config { cases, failure_persistence: None, ..Config::default() };
    let mut runner = TestRunner::new(config);
    let result = runner.run(&vec(op(), 1..=MAX_OPS), |ops| {
        runtime.block_on(check_sequence(factory, durable, &ops)).map_err(TestCaseError::fail)
    });
    match result {
        Ok(()) => {}
        Err(TestError::Fail(reason, ops)) => panic!(
            "agent-core conformance, model-based test: {reason}\nminimal failing sequence: {ops:#?}"
        ),
        Err(TestError::Abort(reason)) => {
            panic!("agent-core conformance, model-based test aborted: {reason}")
        }
    }
}

/// One generated operation. Indices pick from the suite's agents, keys, tasks and blobs; an
/// index one past the end names something never written (an unknown agent, key or blob).
#[derive(Clone, Debug)]
enum Op {
    /// Appends event `kind` for agent `agent`, through `append_record` if `whole`.
    Append {
        agent: usize,
        kind: usize,
        whole: bool,
    },
    /// Appends events (agent, kind) as one batch with `append_many`.
    AppendMany(Vec<(usize, usize)>),
    Records(Option<usize>),
    RecordsFrom(u64),
    HeadOf(usize),
    SaveAgent {
        agent: usize,
        version: u64,
    },
    /// Saves records (agent, version) as one batch with `save_agents`.
    SaveAgents(Vec<(usize, u64)>),
    Agents,
    BeginTool(usize),
    RecordTool {
        key: usize,
        version: u64,
    },
    ForgetTool(usize),
    Tool(usize),
    RecordOutcome {
        task: usize,
        version: u64,
    },
    Outcomes,
    PutBlob(usize),
    Blob(usize),
    /// Reopens a durable backend; nothing for one that keeps nothing across a restart.
    Restart,
}

fn op() -> impl Strategy<Value = Op> {
    let agents = AGENTS.len();
    let keys = tool_keys().len();
    let blobs = blob_contents().len();
    prop_oneof![
        8 => (0..agents, 0..5usize, any::<bool>())
            .prop_map(|(agent, kind, whole)| Op::Append { agent, kind, whole }),
        3 => vec((0..agents, 0..5usize), 0..4).prop_map(Op::AppendMany),
        2 => proptest::option::of(0..=agents).prop_map(Op::Records),
        2 => (0..MAX_OPS as u64 + 2).prop_map(Op::RecordsFrom),
        2 => (0..=agents).prop_map(Op::HeadOf),
        3 => (0..agents, 0..4u64).prop_map(|(agent, version)| Op::SaveAgent { agent, version }),
        2 => vec((0..agents, 0..4u64), 0..4).prop_map(Op::SaveAgents),
        1 => Just(Op::Agents),
        3 => (0..keys).prop_map(Op::BeginTool),
        3 => (0..keys, 0..4u64).prop_map(|(key, version)| Op::RecordTool { key, version }),
        2 => (0..=keys).prop_map(Op::ForgetTool),
        3 => (0..=keys).prop_map(Op::Tool),
        2 => (0..TASKS.len(), 0..3u64)
            .prop_map(|(task, version)| Op::RecordOutcome { task, version }),
        1 => Just(Op::Outcomes),
        2 => (0..blobs - 1).prop_map(Op::PutBlob),
        2 => (0..blobs).prop_map(Op::Blob),
        2 => Just(Op::Restart),
    ]
}

/// An answer, in a form both the backend and the model give.
#[derive(Debug, PartialEq)]
enum Answer {
    Done,
    Seq(u64),
    Record(Box<AuditRecord>),
    Records(Vec<AuditRecord>),
    Head(Option<AuditAnchor>),
    Agents(Vec<AgentRecord>),
    Tool(Option<Option<ToolOutput>>),
    Outcomes(Vec<TaskOutcome>),
    Blob(Option<Vec<u8>>),
    Failed(String),
}

/// The reference model: what the contract says the stores hold.
#[derive(Default)]
struct Model {
    log: Vec<AuditRecord>,
    agents: BTreeMap<AgentId, AgentRecord>,
    tools: BTreeMap<String, Option<ToolOutput>>,
    outcomes: BTreeMap<String, TaskOutcome>,
    blobs: BTreeMap<String, Vec<u8>>,
}

fn agent_at(i: usize) -> AgentId {
    agent(AGENTS.get(i).copied().unwrap_or(GHOST))
}

fn key_at(i: usize) -> String {
    tool_keys().get(i).cloned().unwrap_or_else(|| "never begun".to_owned())
}

fn blob_at(i: usize) -> Vec<u8> {
    blob_contents().get(i).cloned().unwrap_or_default()
}

/// The time of the record appended at step `step`.
fn at(step: usize) -> Timestamp {
    Timestamp(1_000 + u64::try_from(step).unwrap_or(0))
}

impl Model {
    /// Appends event `kind` of agent `agent` at step `step`, and returns the record.
    fn append(&mut self, step: usize, agent: usize, kind: usize) -> AuditRecord {
        let seq = self.log.len() as u64;
        let prev = self.log.last().map_or(GENESIS_HASH, |r| r.hash);
        let record =
            AuditRecord::new(seq, at(step), agent_at(agent), event(kind, at(step).0), prev);
        self.log.push(record.clone());
        record
    }

    fn apply(&mut self, step: usize, op: &Op) -> Answer {
        match op {
            Op::Append { agent, kind, whole } => {
                let record = self.append(step, *agent, *kind);
                if *whole { Answer::Record(Box::new(record)) } else { Answer::Seq(record.seq) }
            }
            Op::AppendMany(entries) => Answer::Records(
                entries.iter().map(|(agent, kind)| self.append(step, *agent, *kind)).collect(),
            ),
            Op::Records(who) => {
                let who = who.map(agent_at);
                Answer::Records(
                    self.log
                        .iter()
                        .filter(|r| who.as_ref().is_none_or(|a| *a == r.agent))
                        .cloned()
                        .collect(),
                )
            }
            Op::RecordsFrom(from) => {
                Answer::Records(self.log.iter().filter(|r| r.seq >= *from).cloned().collect())
            }
            Op::HeadOf(who) => {
                let who = agent_at(*who);
                Answer::Head(self.log.iter().rfind(|r| r.agent == who).map(AuditAnchor::of))
            }
            Op::SaveAgent { agent, version } => {
                let record = agent_record(agent_at(*agent).as_str(), *version);
                self.agents.insert(record.id.clone(), record);
                Answer::Done
            }
            Op::SaveAgents(batch) => {
                for (agent, version) in batch {
                    let record = agent_record(agent_at(*agent).as_str(), *version);
                    self.agents.insert(record.id.clone(), record);
                }
                Answer::Done
            }
            Op::Agents => Answer::Agents(self.agents.values().cloned().collect()),
            Op::BeginTool(key) => {
                self.tools.insert(key_at(*key), None);
                Answer::Done
            }
            Op::RecordTool { key, version } => {
                self.tools.insert(key_at(*key), Some(tool_output(*version)));
                Answer::Done
            }
            Op::ForgetTool(key) => {
                self.tools.remove(&key_at(*key));
                Answer::Done
            }
            Op::Tool(key) => Answer::Tool(self.tools.get(&key_at(*key)).cloned()),
            Op::RecordOutcome { task, version } => {
                let outcome = outcome(TASKS[*task % TASKS.len()], *version);
                self.outcomes.entry(outcome.task_id().to_owned()).or_insert(outcome);
                Answer::Done
            }
            Op::Outcomes => Answer::Outcomes(self.outcomes.values().cloned().collect()),
            Op::PutBlob(i) => {
                let content = blob_at(*i);
                self.blobs.entry(hash_of(&content)).or_insert(content);
                Answer::Done
            }
            Op::Blob(i) => Answer::Blob(self.blobs.get(&hash_of(&blob_at(*i))).cloned()),
            Op::Restart => Answer::Done,
        }
    }

    /// Every read, and what the model answers to it.
    fn observations(&mut self) -> Vec<(Op, Answer)> {
        let mut reads = vec![Op::Records(None), Op::Agents, Op::Outcomes, Op::RecordsFrom(0)];
        reads.extend((0..=AGENTS.len()).map(Op::HeadOf));
        reads.extend((0..=AGENTS.len()).map(|a| Op::Records(Some(a))));
        reads.extend((0..=tool_keys().len()).map(Op::Tool));
        reads.extend((0..blob_contents().len()).map(Op::Blob));
        reads
            .into_iter()
            .map(|op| {
                let answer = self.apply(0, &op);
                (op, answer)
            })
            .collect()
    }
}

fn answer<T>(result: Result<T, BackendError>, ok: impl FnOnce(T) -> Answer) -> Answer {
    match result {
        Ok(value) => ok(value),
        Err(err) => Answer::Failed(err.to_string()),
    }
}

async fn apply(stores: &Stores, step: usize, op: &Op) -> Answer {
    let (audit, state) = (&stores.audit, &stores.state);
    match op {
        Op::Append { agent, kind, whole } => {
            let (who, ev) = (agent_at(*agent), event(*kind, at(step).0));
            if *whole {
                answer(audit.append_record(&who, at(step), ev).await, |r| {
                    Answer::Record(Box::new(r))
                })
            } else {
                answer(audit.append(&who, at(step), ev).await, Answer::Seq)
            }
        }
        Op::AppendMany(entries) => {
            let entries = entries
                .iter()
                .map(|(agent, kind)| AuditEntry {
                    agent: agent_at(*agent),
                    at: at(step),
                    event: event(*kind, at(step).0),
                })
                .collect();
            answer(audit.append_many(entries).await, Answer::Records)
        }
        Op::Records(who) => {
            let who = who.map(agent_at);
            answer(audit.records(who.as_ref()).await, Answer::Records)
        }
        Op::RecordsFrom(from) => answer(audit.records_from(*from).await, Answer::Records),
        Op::HeadOf(who) => answer(audit.head_of(&agent_at(*who)).await, Answer::Head),
        Op::SaveAgent { agent, version } => {
            let record = agent_record(agent_at(*agent).as_str(), *version);
            answer(state.save_agent(&record).await, |()| Answer::Done)
        }
        Op::SaveAgents(batch) => {
            let records: Vec<AgentRecord> = batch
                .iter()
                .map(|(agent, version)| agent_record(agent_at(*agent).as_str(), *version))
                .collect();
            answer(state.save_agents(&records).await, |()| Answer::Done)
        }
        Op::Agents => answer(state.agents().await, Answer::Agents),
        Op::BeginTool(key) => answer(state.begin_tool(&key_at(*key)).await, |()| Answer::Done),
        Op::RecordTool { key, version } => {
            let output = tool_output(*version);
            answer(state.record_tool(&key_at(*key), &output).await, |()| Answer::Done)
        }
        Op::ForgetTool(key) => answer(state.forget_tool(&key_at(*key)).await, |()| Answer::Done),
        Op::Tool(key) => answer(state.tool(&key_at(*key)).await, Answer::Tool),
        Op::RecordOutcome { task, version } => {
            let outcome = outcome(TASKS[*task % TASKS.len()], *version);
            answer(state.record_outcome(&outcome).await, |()| Answer::Done)
        }
        Op::Outcomes => answer(state.outcomes().await, Answer::Outcomes),
        Op::PutBlob(i) => {
            let content = blob_at(*i);
            answer(state.put_blob(&hash_of(&content), &content).await, |()| Answer::Done)
        }
        Op::Blob(i) => answer(state.blob(&hash_of(&blob_at(*i))).await, Answer::Blob),
        Op::Restart => Answer::Done,
    }
}

/// Runs `ops` on a fresh run and on the model; `Err` names the first difference.
async fn check_sequence<F: StoreFactory>(
    factory: &F,
    durable: bool,
    ops: &[Op],
) -> Result<(), String> {
    let mut stores = Some(factory.fresh().await);
    let result = check_on(factory, durable, ops, &mut stores).await;
    if let Some(stores) = stores {
        factory.discard(stores).await;
    }
    result
}

async fn check_on<F: StoreFactory>(
    factory: &F,
    durable: bool,
    ops: &[Op],
    slot: &mut Option<Stores>,
) -> Result<(), String> {
    let mut model = Model::default();
    for (step, op) in ops.iter().enumerate() {
        if matches!(op, Op::Restart) {
            if !durable {
                continue;
            }
            let stores = slot.take().ok_or("no stores")?;
            *slot = Some(
                factory
                    .reopen(stores)
                    .await
                    .ok_or_else(|| format!("step {step}: a durable backend did not reopen"))?,
            );
            observe(slot, &mut model, &format!("after the restart at step {step}")).await?;
            continue;
        }
        let want = model.apply(step, op);
        let stores = slot.as_ref().ok_or("no stores")?;
        let got = apply(stores, step, op).await;
        if got != want {
            return Err(format!("step {step}, {op:?}: got {got:#?}, expected {want:#?}"));
        }
    }
    observe(slot, &mut model, "at the end").await
}

async fn observe(slot: &Option<Stores>, model: &mut Model, when: &str) -> Result<(), String> {
    let stores = slot.as_ref().ok_or("no stores")?;
    for (op, want) in model.observations() {
        let got = apply(stores, 0, &op).await;
        if got != want {
            return Err(format!("{when}, {op:?}: got {got:#?}, expected {want:#?}"));
        }
    }
    Ok(())
}
