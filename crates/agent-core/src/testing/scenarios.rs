//! Named conformance scenarios: one per guarantee in the `AuditLog` and `StateStore` docs.

use std::fmt::Debug;

use agent_state::{BackendError, Timestamp};

use super::data::{
    AGENTS, GHOST, TASKS, agent, agent_record, blob_contents, event, every_kind, outcome,
    tool_keys, tool_output,
};
use super::{StoreFactory, Stores};
use crate::audit::{AuditAnchor, AuditEntry, AuditRecord, GENESIS_HASH, verify_chain};
use crate::blob::hash_of;

/// The outcome of one scenario: `Err` says what differed from the contract.
type Check = Result<(), String>;

/// Fails the scenario with a message unless `cond` holds.
macro_rules! ensure {
    ($cond:expr, $($arg:tt)+) => {
        if !$cond {
            return Err(format!($($arg)+));
        }
    };
}

/// Runs one scenario on a fresh run, discards the run, and panics naming the scenario if it
/// failed.
macro_rules! scenario {
    ($factory:expr, $name:expr, $scenario:ident) => {{
        let mut run = Run::new($factory).await;
        let result = $scenario(&mut run).await;
        run.finish().await;
        if let Err(err) = result {
            panic!("agent-core conformance, scenario `{}`: {err}", $name);
        }
    }};
}

/// Runs every scenario, each on a fresh run; panics with the name of the first that fails.
pub(super) async fn run_all<F: StoreFactory>(factory: &F, durable: bool) {
    scenario!(factory, "an empty run has no records, heads, agents, outcomes or blobs", empty);
    scenario!(factory, "appends are numbered from 0 without gaps and chained", numbered);
    scenario!(factory, "every event kind and agent id comes back as appended", round_trip);
    scenario!(factory, "one agent's records keep the log's order and numbers", per_agent);
    scenario!(factory, "records_from returns the tail, and nothing past the end", tail);
    scenario!(factory, "head_of is each agent's last record", heads);
    scenario!(factory, "concurrent appends keep one linear chain", concurrent);
    scenario!(factory, "append_many appends a batch in order, chained, and returns it", batch);
    scenario!(factory, "records_of selects records by their event's name, in order", selected);
    scenario!(factory, "save_agent replaces, agents and agent_counts list by id", agents_by_id);
    scenario!(factory, "save_agents saves a batch, a later record replacing an earlier", saves);
    scenario!(factory, "the tool journal keeps begun, recorded and forgotten calls", journal);
    scenario!(factory, "the first outcome recorded for a task wins", first_outcome_wins);
    scenario!(factory, "a blob is stored once, whatever its size", blobs_once);
    if durable {
        scenario!(factory, "the log survives a restart and goes on where it ended", log_restart);
        scenario!(factory, "the state survives a restart, a begun call included", state_restart);
        scenario!(factory, "a batch of records and a batch of agents survive a restart", batches);
        scenario!(factory, "a large batch reads back from every record, across a restart", large);
    }
    scenario!(factory, "a second handle on the run sees and extends the same run", shared);
}

/// One scenario's run: the stores under test, reopened in place on restart.
struct Run<'f, F: StoreFactory> {
    factory: &'f F,
    stores: Option<Stores>,
    /// Second handles the scenario opened, discarded at the end.
    shared: Vec<Stores>,
}

impl<'f, F: StoreFactory> Run<'f, F> {
    async fn new(factory: &'f F) -> Self {
        Self { factory, stores: Some(factory.fresh().await), shared: Vec::new() }
    }

    fn stores(&self) -> Result<&Stores, String> {
        self.stores.as_ref().ok_or_else(|| "the run was not reopened".to_owned())
    }

    /// Reopens the run; `Ok(false)` for a backend that keeps nothing across a restart.
    async fn restart(&mut self) -> Result<bool, String> {
        let stores = self.stores.take().ok_or_else(|| "the run was not reopened".to_owned())?;
        match self.factory.reopen(stores).await {
            Some(stores) => {
                self.stores = Some(stores);
                Ok(true)
            }
            None => Err("the backend said it is durable, then did not reopen a run".to_owned()),
        }
    }

    async fn finish(mut self) {
        for stores in std::mem::take(&mut self.shared) {
            self.factory.discard(stores).await;
        }
        if let Some(stores) = self.stores.take() {
            self.factory.discard(stores).await;
        }
    }
}

fn ok<T>(result: Result<T, BackendError>, what: &str) -> Result<T, String> {
    result.map_err(|err| format!("{what} failed: {err}"))
}

fn same<T: PartialEq + Debug>(got: T, want: T, what: &str) -> Check {
    ensure!(got == want, "{what}: got {got:#?}, expected {want:#?}");
    Ok(())
}

/// Appends `n` records, alternating over [`AGENTS`], half through `append` and half through
/// `append_record`; returns the records as the model builds them.
async fn append_n(
    stores: &Stores,
    from: u64,
    n: u64,
    prev: &mut AuditRecord,
) -> Result<Vec<AuditRecord>, String> {
    let mut out = Vec::new();
    for i in from..from + n {
        let who = agent(AGENTS[usize::try_from(i).unwrap_or(0) % AGENTS.len()]);
        let at = Timestamp(1000 + i);
        let ev = event(usize::try_from(i).unwrap_or(0), i);
        let prev_hash = if i == 0 { GENESIS_HASH } else { prev.hash };
        let want = AuditRecord::new(i, at, who.clone(), ev.clone(), prev_hash);
        if i.is_multiple_of(2) {
            let seq = ok(stores.audit.append(&who, at, ev).await, "append")?;
            same(seq, i, "the sequence number append returned")?;
        } else {
            let got = ok(stores.audit.append_record(&who, at, ev).await, "append_record")?;
            same(&got, &want, "the record append_record returned")?;
        }
        *prev = want.clone();
        out.push(want);
    }
    Ok(out)
}

fn genesis() -> AuditRecord {
    AuditRecord::new(0, Timestamp(0), agent(GHOST), event(2, 0), GENESIS_HASH)
}

async fn empty<F: StoreFactory>(run: &mut Run<'_, F>) -> Check {
    let s = run.stores()?;
    same(ok(s.audit.records(None).await, "records")?, Vec::new(), "records of an empty log")?;
    same(ok(s.audit.records_from(0).await, "records_from")?, Vec::new(), "records_from(0)")?;
    same(ok(s.audit.records(Some(&agent(GHOST))).await, "records")?, Vec::new(), "records")?;
    same(ok(s.audit.head_of(&agent(AGENTS[0])).await, "head_of")?, None, "head_of")?;
    same(ok(s.state.agents().await, "agents")?, Vec::new(), "agents")?;
    same(ok(s.state.outcomes().await, "outcomes")?, Vec::new(), "outcomes")?;
    for key in tool_keys() {
        same(ok(s.state.tool(&key).await, "tool")?, None, &format!("tool({key:?})"))?;
    }
    let hash = hash_of(b"nothing");
    same(ok(s.state.blob(&hash).await, "blob")?, None, "an unknown blob")?;
    Ok(())
}

async fn numbered<F: StoreFactory>(run: &mut Run<'_, F>) -> Check {
    let s = run.stores()?;
    let want = append_n(s, 0, 12, &mut genesis()).await?;
    let got = ok(s.audit.records(None).await, "records")?;
    same(&got, &want, "records after 12 appends")?;
    let n = verify_chain(&got).map_err(|e| format!("verify_chain: {e}"))?;
    same(n, 12, "verified records")?;
    Ok(())
}

async fn round_trip<F: StoreFactory>(run: &mut Run<'_, F>) -> Check {
    let s = run.stores()?;
    let mut want = Vec::new();
    let mut prev = GENESIS_HASH;
    let mut seq = 0;
    for name in AGENTS {
        for ev in every_kind() {
            let who = agent(name);
            let record = AuditRecord::new(seq, Timestamp(seq), who.clone(), ev.clone(), prev);
            let got = ok(s.audit.append_record(&who, Timestamp(seq), ev).await, "append")?;
            same(&got, &record, "the appended record")?;
            prev = record.hash;
            seq += 1;
            want.push(record);
        }
    }
    same(ok(s.audit.records(None).await, "records")?, want, "every record")?;
    Ok(())
}

async fn per_agent<F: StoreFactory>(run: &mut Run<'_, F>) -> Check {
    let s = run.stores()?;
    let all = append_n(s, 0, 11, &mut genesis()).await?;
    for name in AGENTS.iter().chain([&GHOST]) {
        let want: Vec<AuditRecord> =
            all.iter().filter(|r| r.agent.as_str() == *name).cloned().collect();
        let got = ok(s.audit.records(Some(&agent(name))).await, "records")?;
        same(got, want, &format!("records of `{name}`"))?;
    }
    Ok(())
}

async fn tail<F: StoreFactory>(run: &mut Run<'_, F>) -> Check {
    let s = run.stores()?;
    let all = append_n(s, 0, 7, &mut genesis()).await?;
    for from in 0..10u64 {
        let want: Vec<AuditRecord> = all.iter().filter(|r| r.seq >= from).cloned().collect();
        let got = ok(s.audit.records_from(from).await, "records_from")?;
        same(got, want, &format!("records_from({from})"))?;
    }
    same(ok(s.audit.records_from(u64::MAX).await, "records_from")?, Vec::new(), "from u64::MAX")?;
    Ok(())
}

async fn heads<F: StoreFactory>(run: &mut Run<'_, F>) -> Check {
    let s = run.stores()?;
    let mut prev = genesis();
    let mut all = append_n(s, 0, 6, &mut prev).await?;
    let check = |all: Vec<AuditRecord>| async move {
        for name in AGENTS.iter().chain([&GHOST]) {
            let want = all.iter().rfind(|r| r.agent.as_str() == *name).map(AuditAnchor::of);
            let got = ok(s.audit.head_of(&agent(name)).await, "head_of")?;
            same(got, want, &format!("head_of(`{name}`)"))?;
        }
        Ok::<(), String>(())
    };
    check(all.clone()).await?;
    all.extend(append_n(s, 6, 3, &mut prev).await?);
    check(all).await
}

/// The entries of a batch of `n` records numbered from `from`, over the suite's agents and
/// event kinds, and the records they become appended after `prev` (as [`append_n`] builds them).
fn batch_of(from: u64, n: u64, prev: &mut AuditRecord) -> (Vec<AuditEntry>, Vec<AuditRecord>) {
    let mut entries = Vec::new();
    let mut records = Vec::new();
    for seq in from..from + n {
        let who = agent(AGENTS[usize::try_from(seq).unwrap_or(0) % AGENTS.len()]);
        let ev = event(usize::try_from(seq).unwrap_or(0), seq);
        let prev_hash = if seq == 0 { GENESIS_HASH } else { prev.hash };
        let record = AuditRecord::new(seq, Timestamp(seq), who.clone(), ev.clone(), prev_hash);
        entries.push(AuditEntry { agent: who, at: Timestamp(seq), event: ev });
        records.push(record.clone());
        *prev = record;
    }
    (entries, records)
}

async fn batch<F: StoreFactory>(run: &mut Run<'_, F>) -> Check {
    let s = run.stores()?;
    let mut prev = genesis();
    let mut want = append_n(s, 0, 2, &mut prev).await?;
    let (entries, records) = batch_of(2, 5, &mut prev);
    same(ok(s.audit.append_many(entries).await, "append_many")?, records.clone(), "the batch")?;
    want.extend(records);
    same(ok(s.audit.append_many(Vec::new()).await, "append_many")?, Vec::new(), "an empty batch")?;
    want.extend(append_n(s, 7, 1, &mut prev).await?);
    let got = ok(s.audit.records(None).await, "records")?;
    same(&got, &want, "records after a batch")?;
    verify_chain(&got).map_err(|e| format!("the chain through a batch: {e}"))?;
    for name in AGENTS {
        let head = want.iter().rfind(|r| r.agent.as_str() == name).map(AuditAnchor::of);
        same(ok(s.audit.head_of(&agent(name)).await, "head_of")?, head, "head_of after a batch")?;
    }
    Ok(())
}

async fn saves<F: StoreFactory>(run: &mut Run<'_, F>) -> Check {
    let s = run.stores()?;
    ok(s.state.save_agents(&[]).await, "save_agents")?;
    same(ok(s.state.agents().await, "agents")?, Vec::new(), "agents after an empty batch")?;
    let (a, b) = (AGENTS[0], AGENTS[1]);
    let batch = [agent_record(a, 1), agent_record(b, 2), agent_record(a, 3)];
    ok(s.state.save_agents(&batch).await, "save_agents")?;
    let mut want = vec![agent_record(a, 3), agent_record(b, 2)];
    want.sort_by(|x, y| x.id.cmp(&y.id));
    same(ok(s.state.agents().await, "agents")?, want.clone(), "agents after a batch")?;
    ok(s.state.save_agent(&agent_record(b, 4)).await, "save_agent")?;
    let want: Vec<_> =
        want.into_iter().map(|r| if r.id.as_str() == b { agent_record(b, 4) } else { r }).collect();
    same(ok(s.state.agents().await, "agents")?, want, "a single save after a batch")?;
    Ok(())
}

async fn batches<F: StoreFactory>(run: &mut Run<'_, F>) -> Check {
    let mut prev = genesis();
    let (entries, want) = batch_of(0, 6, &mut prev);
    let agents: Vec<_> = AGENTS.iter().map(|n| agent_record(n, 2)).collect();
    {
        let s = run.stores()?;
        ok(s.audit.append_many(entries).await, "append_many")?;
        ok(s.state.save_agents(&agents).await, "save_agents")?;
    }
    run.restart().await?;
    let s = run.stores()?;
    same(ok(s.audit.records(None).await, "records")?, want, "a batch after a restart")?;
    let mut agents = agents;
    agents.sort_by(|a, b| a.id.cmp(&b.id));
    same(ok(s.state.agents().await, "agents")?, agents, "saved agents after a restart")?;
    Ok(())
}

/// A batch far larger than one stored value of a backend that packs a batch's records
/// together: every record, every tail and every head comes back, before and after a restart,
/// and the log goes on after it.
async fn large<F: StoreFactory>(run: &mut Run<'_, F>) -> Check {
    let mut prev = genesis();
    let mut want = append_n(run.stores()?, 0, 3, &mut prev).await?;
    let (entries, records) = batch_of(3, 150, &mut prev);
    same(
        ok(run.stores()?.audit.append_many(entries).await, "append_many")?,
        records.clone(),
        "the batch",
    )?;
    want.extend(records);
    for restarted in [false, true] {
        if restarted {
            run.restart().await?;
        }
        let s = run.stores()?;
        same(ok(s.audit.records(None).await, "records")?, want.clone(), "records")?;
        for from in 0..=u64::try_from(want.len()).unwrap_or(u64::MAX).saturating_add(1) {
            let tail: Vec<AuditRecord> = want.iter().filter(|r| r.seq >= from).cloned().collect();
            let got = ok(s.audit.records_from(from).await, "records_from")?;
            same(got, tail, &format!("records_from({from}), restarted: {restarted}"))?;
        }
        for name in AGENTS {
            let head = want.iter().rfind(|r| r.agent.as_str() == name).map(AuditAnchor::of);
            same(ok(s.audit.head_of(&agent(name)).await, "head_of")?, head, "head_of")?;
        }
    }
    let s = run.stores()?;
    want.extend(append_n(s, 153, 2, &mut prev).await?);
    let got = ok(s.audit.records(None).await, "records")?;
    same(&got, &want, "records after appending past a restarted batch")?;
    verify_chain(&got).map_err(|e| format!("the chain through a large batch: {e}"))?;
    Ok(())
}

/// `records_of` over a log of single records of every kind, a batch of mixed kinds, a batch of
/// transitions only, and records whose other fields hold an event's name, as a key and value
/// and inside strings.
async fn selected<F: StoreFactory>(run: &mut Run<'_, F>) -> Check {
    let s = run.stores()?;
    let mut want = Vec::new();
    let mut prev = GENESIS_HASH;
    let mut singles = every_kind();
    singles.push(crate::audit::AuditEvent::ToolCall {
        tool: "shell".into(),
        args: serde_json::json!({"event": "spawned", "text": "\"event\":\"spawned\""}),
        success: true,
        summary: "\"event\":\"spawned\"".into(),
    });
    for (seq, ev) in (0..).zip(singles) {
        let who = agent(AGENTS[usize::try_from(seq).unwrap_or(0) % AGENTS.len()]);
        let record = AuditRecord::new(seq, Timestamp(seq), who.clone(), ev.clone(), prev);
        let got = ok(s.audit.append_record(&who, Timestamp(seq), ev).await, "append")?;
        same(&got, &record, "the appended record")?;
        prev = record.hash;
        want.push(record);
    }
    let mut last = want.last().cloned().unwrap_or_else(genesis);
    let from = u64::try_from(want.len()).unwrap_or(u64::MAX);
    let (entries, records) = batch_of(from, 60, &mut last);
    same(ok(s.audit.append_many(entries).await, "append_many")?, records.clone(), "the batch")?;
    want.extend(records);
    let from = u64::try_from(want.len()).unwrap_or(u64::MAX);
    let (mut entries, mut records) = (Vec::new(), Vec::new());
    for seq in from..from + 60 {
        let who = agent(AGENTS[usize::try_from(seq).unwrap_or(0) % AGENTS.len()]);
        let ev = event(0, seq);
        let record = AuditRecord::new(seq, Timestamp(seq), who.clone(), ev.clone(), last.hash);
        entries.push(AuditEntry { agent: who, at: Timestamp(seq), event: ev });
        records.push(record.clone());
        last = record;
    }
    same(ok(s.audit.append_many(entries).await, "append_many")?, records.clone(), "the batch")?;
    want.extend(records);
    for r in &want {
        let stored = serde_json::to_value(&r.event).map_err(|e| e.to_string())?;
        let tag = stored.get("event").and_then(serde_json::Value::as_str);
        same(tag, Some(r.event.name()), "an event's stored name and `AuditEvent::name`")?;
    }
    let mut names: Vec<&str> = want.iter().map(|r| r.event.name()).collect();
    names.sort_unstable();
    names.dedup();
    let asks: Vec<Vec<&str>> = names
        .iter()
        .map(|n| vec![*n])
        .chain([
            vec!["tool_call", "result"],
            vec!["transition", "spawned"],
            vec!["no_such"],
            vec![],
        ])
        .collect();
    for ask in asks {
        let expected: Vec<AuditRecord> =
            want.iter().filter(|r| ask.contains(&r.event.name())).cloned().collect();
        let got = ok(s.audit.records_of(&ask).await, "records_of")?;
        same(got, expected, &format!("records_of({ask:?})"))?;
    }
    Ok(())
}

async fn concurrent<F: StoreFactory>(run: &mut Run<'_, F>) -> Check {
    let first = run.stores()?.clone();
    let second = run.factory.share(&first).await;
    let handles: Vec<Stores> = match &second {
        Some(second) => vec![first.clone(), second.clone()],
        None => vec![first.clone(), first.clone()],
    };
    if let Some(second) = second {
        run.shared.push(second);
    }
    let mut tasks = tokio::task::JoinSet::new();
    for (w, stores) in handles.into_iter().enumerate() {
        for sub in 0..2 {
            let stores = stores.clone();
            tasks.spawn(async move {
                let who = agent(AGENTS[(w * 2 + sub) % AGENTS.len()]);
                let mut got = Vec::new();
                for i in 0..8u64 {
                    let ev = event(usize::try_from(i).unwrap_or(0), i);
                    let record = stores.audit.append_record(&who, Timestamp(i), ev).await?;
                    got.push(record);
                }
                Ok::<Vec<AuditRecord>, BackendError>(got)
            });
        }
    }
    let mut returned = Vec::new();
    while let Some(joined) = tasks.join_next().await {
        let records = joined.map_err(|e| format!("an appending task failed: {e}"))?;
        returned.extend(ok(records, "a concurrent append_record")?);
    }
    returned.sort_by_key(|r| r.seq);
    let log = ok(first.audit.records(None).await, "records")?;
    let n = verify_chain(&log).map_err(|e| format!("the chain after concurrent appends: {e}"))?;
    same(n, 32, "records after 4 writers appended 8 each")?;
    same(&log, &returned, "the log against what each append returned")?;
    for stores in &run.shared {
        let seen = ok(stores.audit.records(None).await, "records on the second handle")?;
        same(&seen, &log, "the log as the second handle reads it")?;
    }
    Ok(())
}

async fn agents_by_id<F: StoreFactory>(run: &mut Run<'_, F>) -> Check {
    let s = run.stores()?;
    for name in AGENTS.iter().rev() {
        ok(s.state.save_agent(&agent_record(name, 1)).await, "save_agent")?;
    }
    ok(s.state.save_agent(&agent_record(AGENTS[2], 2)).await, "save_agent")?;
    let mut want: Vec<_> =
        AGENTS.iter().map(|n| agent_record(n, if *n == AGENTS[2] { 2 } else { 1 })).collect();
    want.sort_by(|a, b| a.id.cmp(&b.id));
    same(ok(s.state.agents().await, "agents")?, want.clone(), "agents, by id")?;
    let counts: Vec<_> = want.into_iter().map(crate::state::AgentCounts::of).collect();
    same(ok(s.state.agent_counts().await, "agent_counts")?, counts, "agent_counts, by id")?;
    Ok(())
}

async fn journal<F: StoreFactory>(run: &mut Run<'_, F>) -> Check {
    let s = run.stores()?;
    let keys = tool_keys();
    let mut model: std::collections::BTreeMap<String, Option<crate::tools::ToolOutput>> =
        Default::default();
    let compare = |model: &std::collections::BTreeMap<String, Option<crate::tools::ToolOutput>>,
                   step: &str| {
        let model = model.clone();
        let step = step.to_owned();
        let keys = keys.clone();
        async move {
            for key in &keys {
                let got = ok(s.state.tool(key).await, "tool")?;
                same(got, model.get(key).cloned(), &format!("after {step}: tool({key:?})"))?;
            }
            Ok::<(), String>(())
        }
    };
    for (i, key) in keys.iter().enumerate() {
        let v = u64::try_from(i).unwrap_or(0);
        ok(s.state.begin_tool(key).await, "begin_tool")?;
        model.insert(key.clone(), None);
        compare(&model, &format!("begin_tool({key:?})")).await?;
        ok(s.state.record_tool(key, &tool_output(v)).await, "record_tool")?;
        model.insert(key.clone(), Some(tool_output(v)));
        compare(&model, &format!("record_tool({key:?})")).await?;
    }
    // Recording again replaces; a record without a begin is kept; forgetting an unknown key
    // changes nothing; a forgotten key may begin again.
    ok(s.state.record_tool(&keys[0], &tool_output(40)).await, "record_tool")?;
    model.insert(keys[0].clone(), Some(tool_output(40)));
    ok(s.state.forget_tool(&keys[2]).await, "forget_tool")?;
    model.remove(&keys[2]);
    compare(&model, "forget_tool").await?;
    ok(s.state.forget_tool("never begun").await, "forget_tool of an unknown key")?;
    ok(s.state.forget_tool(&keys[2]).await, "forget_tool twice")?;
    compare(&model, "forget_tool of unknown keys").await?;
    ok(s.state.begin_tool(&keys[2]).await, "begin_tool after forget_tool")?;
    model.insert(keys[2].clone(), None);
    ok(s.state.forget_tool(&keys[3]).await, "forget_tool")?;
    model.remove(&keys[3]);
    ok(s.state.record_tool(&keys[3], &tool_output(41)).await, "record_tool without begin")?;
    model.insert(keys[3].clone(), Some(tool_output(41)));
    compare(&model, "the end").await
}

async fn first_outcome_wins<F: StoreFactory>(run: &mut Run<'_, F>) -> Check {
    let s = run.stores()?;
    for (i, task) in TASKS.iter().enumerate().rev() {
        let v = u64::try_from(i).unwrap_or(0);
        ok(s.state.record_outcome(&outcome(task, v)).await, "record_outcome")?;
    }
    for task in TASKS {
        ok(s.state.record_outcome(&outcome(task, 9)).await, "record_outcome again")?;
    }
    let mut want: Vec<_> =
        TASKS.iter().enumerate().map(|(i, t)| outcome(t, u64::try_from(i).unwrap_or(0))).collect();
    want.sort_by(|a, b| a.task_id().cmp(b.task_id()));
    same(ok(s.state.outcomes().await, "outcomes")?, want, "outcomes, by task id")?;
    Ok(())
}

/// A content larger than a NATS server's default maximum message (1 MB).
fn big_blob() -> Vec<u8> {
    (0..2_500_000u32).map(|i| (i.wrapping_mul(2_654_435_761) >> 24) as u8).collect()
}

async fn blobs_once<F: StoreFactory>(run: &mut Run<'_, F>) -> Check {
    let s = run.stores()?;
    let mut contents = blob_contents();
    contents.pop();
    contents.push(big_blob());
    for content in &contents {
        let hash = hash_of(content);
        ok(s.state.put_blob(&hash, content).await, "put_blob")?;
        let got = ok(s.state.blob(&hash).await, "blob")?;
        ensure!(got.as_ref() == Some(content), "blob of {} bytes did not come back", content.len());
    }
    // Storing the same hash again changes nothing, even with other bytes.
    let hash = hash_of(&contents[1]);
    ok(s.state.put_blob(&hash, b"other bytes").await, "put_blob again")?;
    same(ok(s.state.blob(&hash).await, "blob")?, Some(contents[1].clone()), "a blob stored twice")?;
    same(ok(s.state.blob(&hash_of(b"never stored")).await, "blob")?, None, "an unknown blob")?;
    Ok(())
}

async fn log_restart<F: StoreFactory>(run: &mut Run<'_, F>) -> Check {
    let mut prev = genesis();
    let mut want = append_n(run.stores()?, 0, 5, &mut prev).await?;
    run.restart().await?;
    let s = run.stores()?;
    same(ok(s.audit.records(None).await, "records")?, want.clone(), "records after a restart")?;
    for name in AGENTS {
        let head = want.iter().rfind(|r| r.agent.as_str() == name).map(AuditAnchor::of);
        same(ok(s.audit.head_of(&agent(name)).await, "head_of")?, head, "head_of after a restart")?;
    }
    want.extend(append_n(s, 5, 4, &mut prev).await?);
    run.restart().await?;
    let s = run.stores()?;
    let got = ok(s.audit.records(None).await, "records")?;
    same(&got, &want, "records after appending past a restart")?;
    verify_chain(&got).map_err(|e| format!("the chain across restarts: {e}"))?;
    Ok(())
}

async fn state_restart<F: StoreFactory>(run: &mut Run<'_, F>) -> Check {
    let keys = tool_keys();
    let big = big_blob();
    {
        let s = run.stores()?;
        for name in AGENTS {
            ok(s.state.save_agent(&agent_record(name, 3)).await, "save_agent")?;
        }
        ok(s.state.begin_tool(&keys[0]).await, "begin_tool")?;
        ok(s.state.begin_tool(&keys[1]).await, "begin_tool")?;
        ok(s.state.record_tool(&keys[1], &tool_output(5)).await, "record_tool")?;
        ok(s.state.begin_tool(&keys[2]).await, "begin_tool")?;
        ok(s.state.forget_tool(&keys[2]).await, "forget_tool")?;
        ok(s.state.record_outcome(&outcome(TASKS[1], 1)).await, "record_outcome")?;
        ok(s.state.put_blob(&hash_of(&big), &big).await, "put_blob")?;
    }
    run.restart().await?;
    let s = run.stores()?;
    let mut want: Vec<_> = AGENTS.iter().map(|n| agent_record(n, 3)).collect();
    want.sort_by(|a, b| a.id.cmp(&b.id));
    same(ok(s.state.agents().await, "agents")?, want, "agents after a restart")?;
    same(ok(s.state.tool(&keys[0]).await, "tool")?, Some(None), "a begun call after a restart")?;
    same(ok(s.state.tool(&keys[1]).await, "tool")?, Some(Some(tool_output(5))), "a result")?;
    same(ok(s.state.tool(&keys[2]).await, "tool")?, None, "a forgotten call after a restart")?;
    same(ok(s.state.outcomes().await, "outcomes")?, vec![outcome(TASKS[1], 1)], "outcomes")?;
    ok(s.state.record_outcome(&outcome(TASKS[1], 2)).await, "record_outcome")?;
    same(ok(s.state.outcomes().await, "outcomes")?, vec![outcome(TASKS[1], 1)], "first wins")?;
    ensure!(
        ok(s.state.blob(&hash_of(&big)).await, "blob")?.as_deref() == Some(&big[..]),
        "the large blob did not survive a restart"
    );
    Ok(())
}

async fn shared<F: StoreFactory>(run: &mut Run<'_, F>) -> Check {
    let first = run.stores()?.clone();
    let Some(second) = run.factory.share(&first).await else { return Ok(()) };
    run.shared.push(second.clone());
    let keys = tool_keys();
    // The failover case: a call begun by one process, which then dies, is seen as begun (not
    // to be run again) by the process that takes over.
    ok(first.state.begin_tool(&keys[0]).await, "begin_tool")?;
    same(ok(second.state.tool(&keys[0]).await, "tool")?, Some(None), "a call begun elsewhere")?;
    ok(second.state.record_tool(&keys[0], &tool_output(8)).await, "record_tool")?;
    same(
        ok(first.state.tool(&keys[0]).await, "tool")?,
        Some(Some(tool_output(8))),
        "a result recorded elsewhere",
    )?;
    ok(first.state.record_outcome(&outcome(TASKS[0], 1)).await, "record_outcome")?;
    ok(second.state.record_outcome(&outcome(TASKS[0], 2)).await, "record_outcome")?;
    same(ok(second.state.outcomes().await, "outcomes")?, vec![outcome(TASKS[0], 1)], "first wins")?;
    ok(second.state.save_agent(&agent_record(AGENTS[0], 4)).await, "save_agent")?;
    same(ok(first.state.agents().await, "agents")?, vec![agent_record(AGENTS[0], 4)], "agents")?;
    let content = blob_contents().swap_remove(2);
    ok(first.state.put_blob(&hash_of(&content), &content).await, "put_blob")?;
    same(ok(second.state.blob(&hash_of(&content)).await, "blob")?, Some(content), "a blob")?;
    // Appends alternate between the two handles: one chain.
    let mut want = Vec::new();
    let mut prev = GENESIS_HASH;
    for i in 0..6u64 {
        let stores = if i.is_multiple_of(2) { &first } else { &second };
        let who = agent(AGENTS[usize::try_from(i).unwrap_or(0) % 2]);
        let record = AuditRecord::new(i, Timestamp(i), who.clone(), event(1, i), prev);
        let got = ok(stores.audit.append_record(&who, Timestamp(i), event(1, i)).await, "append")?;
        same(&got, &record, "a record appended after the other handle's")?;
        prev = record.hash;
        want.push(record);
    }
    same(ok(first.audit.records(None).await, "records")?, want.clone(), "the first handle's log")?;
    same(ok(second.audit.records(None).await, "records")?, want.clone(), "the second's")?;
    // The first handle knows the last record of an agent only the second appended for.
    let head = want.iter().rfind(|r| r.agent.as_str() == AGENTS[1]).map(AuditAnchor::of);
    let got = ok(first.audit.head_of(&agent(AGENTS[1])).await, "head_of")?;
    same(got, head, "head_of an agent that appended on the other handle")?;
    Ok(())
}
