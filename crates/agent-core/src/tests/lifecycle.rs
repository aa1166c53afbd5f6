//! Initialize and shutdown from every status, and the transition-chain check on hand-made logs.

use agent_state::{Actor, AgentMetrics, AgentStatus::*, ConfigErrorKind};
use whiteboard::{CreateError, Whiteboard};

use super::*;
use crate::{
    AgentRecord, AuditAnchor, AuditRecord, ChainError, HeartbeatOutcome, check_transition_chain,
};

#[tokio::test(start_paused = true)]
async fn initialize_registers_creates_the_board_runs_the_layer_setup_and_goes_idle() {
    let s = Services::new().await;
    let probe = Probe::default();
    let mut agent = s.agent(bottom_config(), &probe);
    assert_eq!(agent.status(), Initializing);
    assert!(!s.bus.is_registered(&id(ME)).await.unwrap());
    tokio::time::advance(Duration::from_millis(250)).await;

    agent.initialize().await.unwrap();

    assert_eq!(agent.status(), Idle);
    assert!(s.bus.is_registered(&id(ME)).await.unwrap());
    let board = s.boards.read(&Actor::System, &BoardId::Agent(id(ME))).await.unwrap();
    assert_eq!((board.layer, board.version), (Some(AgentLayer::Bottom), 0));
    // The layer's set-up ran after registration and board creation, before idle.
    assert_eq!(
        probe.with(|s| s.init_seen),
        Some(InitSeen { registered: true, board_version: Some(0), status: Initializing })
    );
    assert_eq!(
        s.transitions(ME).await,
        [(Initializing, Idle, "initialization complete".to_owned())]
    );
    assert_eq!(agent.ctx().metrics().last_active, Timestamp(START.0 + 250));
    assert_eq!(s.chain().await, [(id(ME), Idle)]);
}

#[tokio::test(start_paused = true)]
async fn an_on_initialize_error_leaves_the_agent_failed_and_returns_the_error() {
    let s = Services::new().await;
    let probe = Probe::default();
    probe.with(|s| s.fail_initialize = true);
    let mut agent = s.agent(bottom_config(), &probe);

    let err = agent.initialize().await.unwrap_err();

    assert_eq!(err.to_string(), transient().to_string());
    assert!(matches!(err, AgentError::Backend(_)), "{err:?}");
    assert_eq!(agent.status(), Failed);
    let transitions = s.transitions(ME).await;
    assert_eq!(transitions.len(), 1);
    assert_eq!((transitions[0].0, transitions[0].1), (Initializing, Failed));
    assert_eq!(transitions[0].2, format!("initialization failed: {err}"));
    assert_eq!(s.chain().await, [(id(ME), Failed)]);
}

#[tokio::test(start_paused = true)]
async fn a_board_that_cannot_be_created_fails_initialization_before_the_layer_setup() {
    let s = Services::new().await;
    s.boards.create(&id(ME), AgentLayer::Mid).await.unwrap();
    let probe = Probe::default();
    let mut agent = s.agent(bottom_config(), &probe);

    let err = agent.initialize().await.unwrap_err();

    assert!(matches!(err, AgentError::BoardCreate(CreateError::LayerMismatch { .. })), "{err:?}");
    assert_eq!(agent.status(), Failed);
    assert_eq!(probe.with(|s| s.init_seen), None, "on_initialize must not run");
    assert_eq!(s.edges(ME).await, [(Initializing, Failed)]);
}

#[tokio::test(start_paused = true)]
async fn an_invalid_configuration_is_refused_at_construction() {
    let s = Services::new().await;
    let config = AgentConfig::new(ME, "Executor One", AgentLayer::Bottom).with_supervisor(ME);
    let err = Agent::new(config, Box::new(TestBehavior(Probe::default())), s.deps.clone())
        .err()
        .expect("an agent that supervises itself is invalid");
    assert_eq!(err.kind, ConfigErrorKind::SupervisesItself);
}

/// Puts a fresh, initialized agent into `status` along allowed edges.
async fn agent_in(s: &Services, probe: &Probe, status: AgentStatus) -> Agent {
    agent_named_in(s, probe, ME, status).await
}

/// Puts a fresh, initialized executor `name` (under [`SUPERVISOR`]) into `status`.
async fn agent_named_in(s: &Services, probe: &Probe, name: &str, status: AgentStatus) -> Agent {
    let config = AgentConfig { id: id(name), ..bottom_config() };
    let mut agent = s.agent(config, probe);
    if status == Initializing {
        return agent;
    }
    agent.initialize().await.unwrap();
    let path: &[AgentStatus] = match status {
        Idle => &[],
        Working => &[Working],
        WaitingApproval => &[WaitingApproval],
        Blocked => &[Working, Blocked],
        Failed => &[Working, Failed],
        other => panic!("no path to {other}"),
    };
    for &to in path {
        agent.ctx_mut().transition(to, "test set-up").await.unwrap();
    }
    assert_eq!(agent.status(), status);
    agent
}

#[tokio::test(start_paused = true)]
async fn shutdown_ends_terminated_and_unregistered_from_every_running_status() {
    // (status, the edges shutdown takes, whether the layer's clean-up runs)
    let cases = [
        (Idle, vec![(Idle, ShuttingDown), (ShuttingDown, Terminated)], true),
        (Working, vec![(Working, Idle), (Idle, ShuttingDown), (ShuttingDown, Terminated)], true),
        (
            WaitingApproval,
            vec![(WaitingApproval, Idle), (Idle, ShuttingDown), (ShuttingDown, Terminated)],
            true,
        ),
        (Blocked, vec![(Blocked, Failed), (Failed, Terminated)], false),
        (Failed, vec![(Failed, Terminated)], false),
        (Initializing, vec![(Initializing, Failed), (Failed, Terminated)], false),
    ];
    for (status, expected, cleanup) in cases {
        let s = Services::new().await;
        let probe = Probe::default();
        let mut agent = agent_in(&s, &probe, status).await;
        let before = s.edges(ME).await.len();

        agent.shutdown().await.unwrap();

        assert_eq!(agent.status(), Terminated, "from {status}");
        assert!(!s.bus.is_registered(&id(ME)).await.unwrap(), "from {status}");
        assert_eq!(s.edges(ME).await[before..], expected, "from {status}");
        assert_eq!(probe.with(|s| s.shutdowns), u32::from(cleanup), "from {status}");
        assert_eq!(s.chain().await, [(id(ME), Terminated)], "from {status}");
    }
}

#[tokio::test(start_paused = true)]
async fn a_terminated_agent_shuts_down_again_quietly_and_skips_heartbeats() {
    let s = Services::new().await;
    let probe = Probe::default();
    let mut agent = s.ready(&probe).await;
    agent.shutdown().await.unwrap();
    let edges = s.edges(ME).await;

    agent.shutdown().await.unwrap();
    assert_eq!(agent.heartbeat(1).await.unwrap(), HeartbeatOutcome::Skipped { status: Terminated });

    assert_eq!(s.edges(ME).await, edges);
    assert_eq!(probe.with(|s| s.shutdowns), 1);
    assert!(probe.calls().is_empty());
}

/// A log of hand-made records: (agent, from, to) for a transition, or (agent, None) for a refusal.
async fn log(entries: &[(&str, Option<(AgentStatus, AgentStatus)>)]) -> Vec<AuditRecord> {
    let audit = InMemoryAuditLog::new();
    for (n, (agent, edge)) in (0u64..).zip(entries) {
        let event = match edge {
            Some((from, to)) => {
                AuditEvent::Transition { from: *from, to: *to, reason: "test".into() }
            }
            None => AuditEvent::Denied { action: "write board b".into(), error: "no".into() },
        };
        audit.append(&id(agent), Timestamp(n), event).await.unwrap();
    }
    audit.records(None).await.unwrap()
}

#[tokio::test(start_paused = true)]
async fn the_chain_check_reports_a_bad_start_a_gap_and_a_forbidden_edge() {
    let bad_start = log(&[("a", Some((Idle, Working)))]).await;
    assert_eq!(
        check_transition_chain(&bad_start),
        Err(ChainError::BadStart { agent: id("a"), seq: 0, from: Idle })
    );

    let gap = log(&[("a", Some((Initializing, Idle))), ("a", Some((Working, Idle)))]).await;
    assert_eq!(
        check_transition_chain(&gap),
        Err(ChainError::Gap { agent: id("a"), seq: 1, from: Working, previous: Idle })
    );

    let forbidden = log(&[("a", Some((Initializing, Idle))), ("a", Some((Idle, Failed)))]).await;
    assert_eq!(
        check_transition_chain(&forbidden),
        Err(ChainError::Forbidden { agent: id("a"), seq: 1, from: Idle, to: Failed })
    );

    // A second agent's first record is judged on its own, not after the first agent's chain.
    let second_starts_late =
        log(&[("a", Some((Initializing, Idle))), ("b", Some((Idle, ShuttingDown)))]).await;
    assert_eq!(
        check_transition_chain(&second_starts_late),
        Err(ChainError::BadStart { agent: id("b"), seq: 1, from: Idle })
    );
}

#[tokio::test(start_paused = true)]
async fn the_chain_check_follows_each_agent_on_its_own_and_skips_other_events() {
    let records = log(&[
        ("b", Some((Initializing, Idle))),
        ("a", Some((Initializing, Idle))),
        ("a", None),
        ("b", Some((Idle, Working))),
        ("a", Some((Idle, ShuttingDown))),
        ("b", Some((Working, Failed))),
        ("a", Some((ShuttingDown, Terminated))),
    ])
    .await;
    assert_eq!(
        check_transition_chain(&records),
        Ok(vec![(id("a"), Terminated), (id("b"), Failed)])
    );
    assert_eq!(check_transition_chain(&[]), Ok(vec![]));
}

#[tokio::test(start_paused = true)]
async fn shutdown_reads_late_notices_and_keeps_real_work_for_a_resume() {
    let s = Services::new().await;
    let probe = Probe::default();
    let mut agent = s.ready(&probe).await;
    // What can land while the agent shuts down: the scheduler's last warning, another lead's
    // acknowledgement of a note, and work, which must survive for a run that resumes.
    s.send(Address::System, ME, MessageKind::Warning, serde_json::json!({"about": "x"})).await;
    s.send(
        Address::Agent(id("mid-2")),
        ME,
        MessageKind::PeerCoordinationResponse,
        serde_json::json!({"note": "mid-2 acknowledges"}),
    )
    .await;
    let work = s
        .send(Address::Agent(id("mid-2")), ME, MessageKind::TaskAssign, serde_json::json!({}))
        .await;
    // A warning from an agent is not the runtime's: it is kept too.
    let forged =
        s.send(Address::Agent(id("mid-2")), ME, MessageKind::Warning, serde_json::json!({})).await;

    agent.shutdown().await.unwrap();

    // What a resumed agent finds once it registers again.
    s.bus.register(&id(ME)).await.unwrap();
    let left: Vec<MessageId> = s.drain(&inbox(ME)).await.iter().map(|m| m.id).collect();
    assert_eq!(left, [work, forged]);
}

#[tokio::test(start_paused = true)]
async fn a_restored_agent_reports_the_metrics_of_its_record_with_counts_or_without() {
    let s = Services::new().await;
    let probe = Probe::default();
    let ready = s.ready(&probe).await;
    let counted = AgentMetrics {
        tasks_completed: 2,
        heartbeats_responded: 5,
        last_active: Timestamp(START.0 + 40),
        ..AgentMetrics::default()
    };
    let idle = AgentMetrics { last_active: Timestamp(START.0 + 70), ..AgentMetrics::default() };
    for metrics in [counted, idle] {
        let record = AgentRecord { metrics: metrics.clone(), ..ready.record() };
        let behavior = Box::new(TestBehavior(probe.clone()));
        let mut agent =
            Agent::restore(bottom_config(), behavior, s.deps.clone(), Idle, Some(record))
                .await
                .unwrap();
        assert_eq!(agent.ctx().metrics(), metrics);
        // Counting on from there keeps both what it had and when it was last active.
        agent.ctx_mut().metrics_mut().warnings_received += 1;
        let expected = AgentMetrics { warnings_received: 1, ..metrics };
        assert_eq!(agent.ctx().metrics(), expected);
    }
}

/// Agents shut down together end as each one's own `shutdown` would end it: terminated,
/// unregistered, along the same edges, with the layer's clean-up run where `shutdown` runs it,
/// and each saved record anchored at its agent's last audit record (its `terminated`). The
/// idle ones go through each step as a batch: their `shutting_down` records are appended as
/// one run of the log, and so are their `terminated` records.
#[tokio::test(start_paused = true)]
async fn agents_shut_down_together_end_as_each_ones_own_shutdown_would_end_it() {
    // (agent, its status, the edges its shutdown takes, whether the layer's clean-up runs)
    let cases = [
        ("bottom-1", Idle, vec![(Idle, ShuttingDown), (ShuttingDown, Terminated)], true),
        (
            "bottom-2",
            Working,
            vec![(Working, Idle), (Idle, ShuttingDown), (ShuttingDown, Terminated)],
            true,
        ),
        ("bottom-3", Failed, vec![(Failed, Terminated)], false),
        ("bottom-4", Idle, vec![(Idle, ShuttingDown), (ShuttingDown, Terminated)], true),
        ("bottom-5", Terminated, vec![], false),
        ("bottom-6", Idle, vec![(Idle, ShuttingDown), (ShuttingDown, Terminated)], true),
    ];
    let s = Services::new().await;
    let mut agents = Vec::new();
    let mut probes = Vec::new();
    let mut before = Vec::new();
    for (name, status, _, _) in &cases {
        let probe = Probe::default();
        let mut agent = agent_named_in(&s, &probe, name, Idle).await;
        match status {
            Idle => {}
            Working => agent.ctx_mut().transition(Working, "test set-up").await.unwrap(),
            Failed => {
                agent.ctx_mut().transition(Working, "test set-up").await.unwrap();
                agent.ctx_mut().transition(Failed, "test set-up").await.unwrap();
            }
            Terminated => agent.shutdown().await.unwrap(),
            other => panic!("no set-up for {other}"),
        }
        probe.with(|s| s.shutdowns = 0);
        before.push(s.edges(name).await.len());
        agents.push(agent);
        probes.push(probe);
    }
    // The clean-up of the terminated agent ran before; only this call's count.
    let log_before = s.audit.records(None).await.unwrap().len();

    let results = Agent::shutdown_many(&mut agents.iter_mut().collect::<Vec<_>>()).await;

    assert_eq!(results.len(), cases.len());
    let saved = s.deps.state.agents().await.unwrap();
    for (i, (name, status, expected, cleanup)) in cases.iter().enumerate() {
        assert!(results[i].is_ok(), "{name} from {status}: {:?}", results[i]);
        assert_eq!(agents[i].status(), Terminated, "{name} from {status}");
        assert!(!s.bus.is_registered(&id(name)).await.unwrap(), "{name}");
        assert_eq!(s.edges(name).await[before[i]..], expected[..], "{name} from {status}");
        assert_eq!(probes[i].with(|s| s.shutdowns), u32::from(*cleanup), "{name}");
        let last = s.audit.records(Some(&id(name))).await.unwrap().last().cloned().unwrap();
        let record = saved.iter().find(|r| r.id == id(name)).expect("a saved record");
        assert_eq!(record.audit_head, Some(AuditAnchor::of(&last)), "{name}'s anchor");
    }
    let chain = s.chain().await;
    assert!(chain.iter().all(|(_, status)| *status == Terminated), "{chain:?}");
    assert_eq!(chain.len(), cases.len());
    // The batched steps: the idle agents' records of each step are one run of the log.
    let log = s.audit.records(None).await.unwrap();
    let idle = ["bottom-1", "bottom-4", "bottom-6"];
    for to in [ShuttingDown, Terminated] {
        let seqs: Vec<u64> = log[log_before..]
            .iter()
            .filter(|r| r.transition().is_some_and(|t| t.to == to))
            .filter(|r| idle.contains(&r.agent.as_str()))
            .map(|r| r.seq)
            .collect();
        assert_eq!(seqs.len(), idle.len(), "{to}");
        assert!(seqs.windows(2).all(|w| w[1] == w[0] + 1), "{to}: {seqs:?}");
    }
}

/// An audit log whose `append_many` refuses a batch holding a transition to `to`, `left`
/// times; every other call goes through.
struct RefusesBatches {
    inner: Arc<InMemoryAuditLog>,
    to: AgentStatus,
    left: std::sync::atomic::AtomicU32,
}

impl RefusesBatches {
    fn new(inner: Arc<InMemoryAuditLog>, to: AgentStatus, times: u32) -> Self {
        Self { inner, to, left: std::sync::atomic::AtomicU32::new(times) }
    }
}

#[async_trait]
impl AuditLog for RefusesBatches {
    async fn append(
        &self,
        agent: &AgentId,
        at: Timestamp,
        event: AuditEvent,
    ) -> Result<u64, BackendError> {
        self.inner.append(agent, at, event).await
    }

    async fn append_many(
        &self,
        entries: Vec<crate::AuditEntry>,
    ) -> Result<Vec<AuditRecord>, BackendError> {
        use std::sync::atomic::Ordering::SeqCst;
        let holds = entries
            .iter()
            .any(|e| matches!(e.event, AuditEvent::Transition { to, .. } if to == self.to));
        if holds && self.left.fetch_update(SeqCst, SeqCst, |n| n.checked_sub(1)).is_ok() {
            return Err(BackendError::with_source(
                "test",
                "the log refused the batch",
                transient(),
            ));
        }
        self.inner.append_many(entries).await
    }

    async fn records(&self, agent: Option<&AgentId>) -> Result<Vec<AuditRecord>, BackendError> {
        self.inner.records(agent).await
    }

    async fn head_of(&self, agent: &AgentId) -> Result<Option<AuditAnchor>, BackendError> {
        self.inner.head_of(agent).await
    }
}

/// A batch write that fails is the error of every agent of the batch, not lost: each stops
/// where the failure left it (shutting down, unregistered, not terminated, its record not
/// anchored at a `terminated`), and shutting them down again ends them terminated.
#[tokio::test(start_paused = true)]
async fn a_failed_batch_write_is_every_agents_error_and_a_second_shutdown_ends_them() {
    let s = Services::new().await;
    let log = Arc::new(RefusesBatches::new(s.audit.clone(), Terminated, 1));
    let deps = Arc::new(AgentDeps { audit: log, ..(*s.deps).clone() });
    let names = ["bottom-1", "bottom-2", "bottom-3"];
    let mut agents = Vec::new();
    for name in names {
        let config = AgentConfig { id: id(name), ..bottom_config() };
        let behavior = Box::new(TestBehavior(Probe::default()));
        let mut agent = Agent::new(config, behavior, deps.clone()).unwrap();
        agent.initialize().await.unwrap();
        agents.push(agent);
    }

    let results = Agent::shutdown_many(&mut agents.iter_mut().collect::<Vec<_>>()).await;

    for (name, (agent, result)) in names.iter().zip(agents.iter().zip(&results)) {
        let err = result.as_ref().expect_err("the batch failed");
        assert!(err.to_string().contains("the log refused the batch"), "{name}: {err}");
        assert!(err.to_string().contains(&transient().to_string()), "{name}: {err}");
        assert_eq!(agent.status(), ShuttingDown, "{name}");
        assert!(!s.bus.is_registered(&id(name)).await.unwrap(), "{name}");
        assert_eq!(s.edges(name).await.last(), Some(&(Idle, ShuttingDown)), "{name}");
    }

    let results = Agent::shutdown_many(&mut agents.iter_mut().collect::<Vec<_>>()).await;

    assert!(results.iter().all(Result::is_ok), "{results:?}");
    let saved = s.deps.state.agents().await.unwrap();
    for (name, agent) in names.iter().zip(&agents) {
        assert_eq!(agent.status(), Terminated, "{name}");
        let last = s.audit.records(Some(&id(name))).await.unwrap().last().cloned().unwrap();
        assert_eq!(last.transition().map(|t| (t.from, t.to)), Some((ShuttingDown, Terminated)));
        let record = saved.iter().find(|r| r.id == id(name)).expect("a saved record");
        assert_eq!(record.audit_head, Some(AuditAnchor::of(&last)), "{name}'s anchor");
    }
    assert!(s.chain().await.iter().all(|(_, status)| *status == Terminated));
}

#[tokio::test(start_paused = true)]
async fn shutting_down_no_agents_together_does_nothing() {
    assert!(Agent::shutdown_many(&mut []).await.is_empty());
}

/// Agents initialized together end as each one's own `initialize` would end it: registered,
/// with a board, idle (their moves to idle one run of the log), or failed with its error when
/// its layer's set-up fails, the others unaffected.
#[tokio::test(start_paused = true)]
async fn agents_initialized_together_end_as_each_ones_own_initialize_would_end_it() {
    let s = Services::new().await;
    let names = ["bottom-1", "bottom-2", "bottom-3", "bottom-4"];
    let mut agents = Vec::new();
    let mut probes = Vec::new();
    for name in names {
        let probe = Probe::default();
        probe.with(|s| s.fail_initialize = name == "bottom-3");
        let config = AgentConfig { id: id(name), ..bottom_config() };
        agents.push(
            Agent::new(config, Box::new(TestBehavior(probe.clone())), s.deps.clone()).unwrap(),
        );
        probes.push(probe);
    }

    let results = Agent::initialize_many(&mut agents).await;

    assert_eq!(results.len(), names.len());
    for (i, name) in names.iter().enumerate() {
        // Each layer's set-up saw its inbox and board ready, still initializing.
        let seen = probes[i].with(|s| s.init_seen).expect("its set-up ran");
        assert!(seen.registered, "{name}");
        assert_eq!(seen.board_version, Some(0), "{name}");
        assert_eq!(seen.status, Initializing, "{name}");
        if *name == "bottom-3" {
            let err = results[i].as_ref().expect_err("its set-up failed");
            assert_eq!(err.to_string(), transient().to_string());
            assert_eq!(agents[i].status(), Failed);
            assert_eq!(s.edges(name).await, [(Initializing, Failed)]);
        } else {
            assert!(results[i].is_ok(), "{name}: {:?}", results[i]);
            assert_eq!(agents[i].status(), Idle, "{name}");
            assert_eq!(s.edges(name).await, [(Initializing, Idle)], "{name}");
            let idle = s.audit.records(Some(&id(name))).await.unwrap().last().cloned().unwrap();
            assert_eq!(agents[i].ctx().metrics().last_active, idle.at, "{name}");
        }
    }
    let seqs: Vec<u64> = s
        .audit
        .records(None)
        .await
        .unwrap()
        .iter()
        .filter(|r| r.transition().is_some_and(|t| t.to == Idle))
        .map(|r| r.seq)
        .collect();
    assert_eq!(seqs.len(), 3);
    assert!(seqs.windows(2).all(|w| w[1] == w[0] + 1), "one run of the log: {seqs:?}");
    s.chain().await;
}

/// A failed batch append of the moves to idle is every agent's error, as a failed append is
/// the error of `initialize`: each agent goes failed (its own append of that works here).
#[tokio::test(start_paused = true)]
async fn a_failed_batch_append_at_initialization_is_every_agents_error() {
    let s = Services::new().await;
    let deps = Arc::new(AgentDeps {
        audit: Arc::new(RefusesBatches::new(s.audit.clone(), Idle, u32::MAX)),
        ..(*s.deps).clone()
    });
    let names = ["bottom-1", "bottom-2"];
    let mut agents: Vec<Agent> = names
        .iter()
        .map(|name| {
            let config = AgentConfig { id: id(name), ..bottom_config() };
            Agent::new(config, Box::new(TestBehavior(Probe::default())), deps.clone()).unwrap()
        })
        .collect();

    let results = Agent::initialize_many(&mut agents).await;

    for (name, (agent, result)) in names.iter().zip(agents.iter().zip(&results)) {
        let err = result.as_ref().expect_err("the batch failed");
        assert!(err.to_string().contains("the log refused the batch"), "{name}: {err}");
        assert_eq!(agent.status(), Failed, "{name}");
        assert_eq!(s.edges(name).await, [(Initializing, Failed)], "{name}");
    }
}

#[tokio::test(start_paused = true)]
async fn initializing_no_agents_together_does_nothing() {
    assert!(Agent::initialize_many(&mut []).await.is_empty());
}
