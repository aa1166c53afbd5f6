//! Wake on work: the latency of one message hop between two agents of a running team on the
//! in-memory backends, from the send to the moment the receiving agent has processed and
//! acknowledged it, with the heartbeat an hour away (so every hop is a wake-up, never a
//! heartbeat).
//!
//! A probe bus wraps the in-memory bus and reports each acknowledgement of the receiver's
//! inbox. `main` sends [`HOPS`] messages, [`PAUSE`] apart, from the lead to its executor (a
//! `warning`, which the executor takes, processes as a no-op, stores and acknowledges: the hop
//! and the turn's bookkeeping, not some layer's work), prints p50 and p99 and, under
//! `cargo bench`, writes them to `<target>/strata-bench/wake_hop.json`, where `cargo xtask
//! bench` picks them up.
#![allow(missing_docs)]
#![allow(clippy::unwrap_used, clippy::expect_used, reason = "benchmarks")]
#![allow(clippy::print_stdout, reason = "the figures are printed")]

mod support;

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};
use support::target_dir;

use agent_core::tools::{ToolContext, ToolRegistry};
use agent_core::{InMemoryAuditLog, InMemoryStateStore, RuleBasedReasoner, TokioClock};
use agent_layers::{BottomSpec, MidSpec, TopSpec};
use agent_pool::{AgentSpec, RoleSpec, Team, TeamServices, TeamSpec};
use agent_state::{
    Address, AgentConfig, AgentId, AgentLayer, BackendError, Message, MessageId, MessageKind,
    Timestamp,
};
use async_trait::async_trait;
use governance::InMemoryGovernance;
use message_bus::{InMemoryBus, InboxError, MessageBus, RegisterError, SendError};
use tokio::sync::mpsc;
use whiteboard::InMemoryWhiteboard;

/// Hops measured.
const HOPS: usize = 5_000;
/// The pause between two hops: each hop is measured on its own, not as part of a storm (a
/// storm to one agent is rate-bounded on purpose).
const PAUSE: Duration = Duration::from_micros(500);
/// The figure's id in the `cargo xtask bench` table.
const ID: &str = "pool/wake_message_hop";

/// The in-memory bus, reporting every acknowledgement of `watched`'s inbox.
struct ProbeBus {
    inner: InMemoryBus,
    watched: Address,
    acked: mpsc::UnboundedSender<()>,
}

#[async_trait]
impl MessageBus for ProbeBus {
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
        self.inner.send(message).await
    }
    async fn send_many(&self, messages: Vec<Message>) -> Result<Vec<usize>, SendError> {
        self.inner.send_many(messages).await
    }
    async fn take(&self, inbox: &Address, max: usize) -> Result<Vec<Message>, InboxError> {
        self.inner.take(inbox, max).await
    }
    async fn ack(&self, inbox: &Address, ids: &[MessageId]) -> Result<usize, InboxError> {
        let acked = self.inner.ack(inbox, ids).await?;
        if acked > 0 && *inbox == self.watched {
            let _ = self.acked.send(());
        }
        Ok(acked)
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

fn spec() -> TeamSpec {
    let top = |id: &str, weight: f64| AgentSpec {
        config: AgentConfig::new(id, id, AgentLayer::Top).with_role("governance"),
        role: RoleSpec::Top(TopSpec {
            power_type: id.into(),
            vote_weight: weight,
            signature_authority: vec!["plan".into()],
        }),
    };
    let mut spec = TeamSpec::new(vec![
        top("top-a", 2.0),
        top("top-b", 1.0),
        top("top-c", 1.0),
        AgentSpec {
            config: AgentConfig::new("mid-1", "lead", AgentLayer::Mid).with_supervisor("top-a"),
            role: RoleSpec::Mid(MidSpec { domain: "docs".into(), max_subordinates: 4 }),
        },
        AgentSpec {
            config: AgentConfig::new("bottom-1", "executor", AgentLayer::Bottom)
                .with_supervisor("mid-1"),
            role: RoleSpec::Bottom(BottomSpec::new(["read_file"])),
        },
    ]);
    spec.heartbeat = Duration::from_secs(3600);
    spec
}

fn main() {
    let bench_mode = std::env::args().any(|a| a == "--bench");
    // The measuring loop as a task of a one-thread runtime, like an agent: the hop as the
    // runtime costs it, without a thread wake-up at either end.
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    let local = rt.block_on(async { tokio::spawn(hops()).await.unwrap() });
    // From another thread into a two-worker runtime (as `strata` runs): each end of the hop
    // also pays a thread wake-up.
    let rt =
        tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
    let crossing = rt.block_on(hops());
    let (p50, p99) = (percentile(&local, 0.50), percentile(&local, 0.99));
    let (x50, x99) = (percentile(&crossing, 0.50), percentile(&crossing, 0.99));
    println!("{ID}: p50 {p50:.1} µs, p99 {p99:.1} µs over {HOPS} hops in the runtime");
    println!("{ID}: p50 {x50:.1} µs, p99 {x99:.1} µs from another thread (2 workers)");
    if bench_mode {
        let round = |v: f64| (v * 10.0).round() / 10.0;
        let figure = serde_json::json!({
            "id": ID,
            "p50_us": round(p50),
            "p99_us": round(p99),
            "cross_thread_p50_us": round(x50),
            "cross_thread_p99_us": round(x99),
            "hops": HOPS,
        });
        let dir = target_dir().join("strata-bench");
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join("wake_hop.json"), format!("{figure}\n")).unwrap();
    }
}

async fn hops() -> Vec<f64> {
    let workspace = tempfile::tempdir().unwrap();
    let executor = AgentId::new("bottom-1");
    let (acked, mut acks) = mpsc::unbounded_channel();
    let bus = Arc::new(ProbeBus {
        inner: InMemoryBus::new(),
        watched: Address::Agent(executor.clone()),
        acked,
    });
    let services = TeamServices {
        bus,
        boards: Arc::new(InMemoryWhiteboard::new()),
        governance: Arc::new(InMemoryGovernance::new()),
        audit: Arc::new(InMemoryAuditLog::new()),
        clock: Arc::new(TokioClock::starting_at(Timestamp(1_700_000_000_000))),
        workspace: Arc::new(ToolContext::new(workspace.path()).unwrap()),
        tools: Arc::new(ToolRegistry::with_builtins()),
        reasoner: Arc::new(RuleBasedReasoner::new()),
        state: Arc::new(InMemoryStateStore::new()),
        reasoners: BTreeMap::new(),
        agent_tools: BTreeMap::new(),
        role_reasoners: Default::default(),
        role_tools: Default::default(),
        costs: None,
        executor: None,
        events: agent_core::EventHub::default(),
    };
    let team = Team::start(spec(), services).await.unwrap();
    // The team's own bus (the waking one): a send through it wakes the driver.
    let bus = team.services().bus.clone();
    let lead = AgentId::new("mid-1");
    let mut samples = Vec::with_capacity(HOPS);
    for n in 0..HOPS {
        let query = Message::new(
            agent_core::new_message_id(),
            Address::Agent(lead.clone()),
            &executor,
            MessageKind::Warning,
            serde_json::json!({ "n": n }),
            Timestamp(0),
        );
        let sent = Instant::now();
        bus.send(query).await.unwrap();
        acks.recv().await.unwrap();
        samples.push(sent.elapsed().as_secs_f64() * 1e6);
        // Pause without parking the thread, so each hop starts on a warm core.
        let resume = Instant::now() + PAUSE;
        while Instant::now() < resume {
            tokio::task::yield_now().await;
        }
    }
    team.shutdown().await.unwrap();
    samples.sort_by(f64::total_cmp);
    samples
}

fn percentile(sorted: &[f64], p: f64) -> f64 {
    let index = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[index.min(sorted.len() - 1)]
}
