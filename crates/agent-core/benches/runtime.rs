//! Benchmarks of the runtime's own overhead around one reasoning call: one `Agent::heartbeat`
//! that makes exactly one call, against the bare `Reasoner` call.
//!
//! Everything runs on in-memory backends and a current-thread tokio runtime, and the reasoner
//! (`RuleBasedReasoner`) answers at once, so `runtime/heartbeat_one_message` minus
//! `runtime/reasoner_call` is what the runtime adds to every heartbeat that has work.
//!
//! The heartbeat is measured in the steady state of a long-running agent: it has already
//! processed a thousand messages (warm-up). The in-memory audit log and bus keep everything, so the agent is replaced (untimed, and warmed
//! up again) every [`HEARTBEATS_PER_AGENT`] heartbeats to keep the bench's memory bounded.
#![allow(missing_docs)]
#![allow(clippy::unwrap_used, clippy::expect_used, reason = "benchmarks")]

use std::hint::black_box;
use std::sync::Arc;
use std::time::{Duration, Instant};

use agent_core::tools::{ToolContext, ToolRegistry};
use agent_core::{
    Agent, AgentBehavior, AgentContext, AgentDeps, AgentError, HeartbeatOutcome, InMemoryAuditLog,
    InMemoryStateStore, Persona, Reasoner, RuleBasedReasoner, TokioClock, new_message_id,
    system_prompt,
};
use agent_state::{
    Address, AgentConfig, AgentId, AgentLayer, BoardSnapshot, Message, MessageKind, PlanStep,
    StepTarget, Subtask, Timestamp,
};
use async_trait::async_trait;
use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use tracing_subscriber::layer::SubscriberExt as _;

/// Heartbeats an agent runs before it is measured.
const WARM_UP: usize = 1000;
use governance::InMemoryGovernance;
use message_bus::{InMemoryBus, MessageBus};
use tokio::runtime::Runtime;
use whiteboard::InMemoryWhiteboard;

/// Heartbeat acks the `system` inbox collects before the bench drains it (untimed); far below
/// the inbox's capacity.
const DRAIN_EVERY: u64 = 1024;
/// Heartbeats one agent serves in the bench before it is replaced by a fresh one.
const HEARTBEATS_PER_AGENT: u64 = 32_768;

const RESPONSIBILITIES: &str = "- Ask the reasoner for the next action once per heartbeat";

/// A bottom-layer behaviour that makes exactly one reasoning call per heartbeat with work.
struct OneCall {
    subtask: Subtask,
}

#[async_trait]
impl AgentBehavior for OneCall {
    fn responsibilities(&self) -> &'static str {
        RESPONSIBILITIES
    }

    async fn on_process(
        &mut self,
        ctx: &mut AgentContext,
        _messages: &[Message],
        _board: &BoardSnapshot,
    ) -> Result<(), AgentError> {
        let action = ctx.reasoner().next_action(ctx.persona(), &self.subtask, &[]).await?;
        black_box(action);
        Ok(())
    }
}

fn runtime() -> Runtime {
    tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap()
}

fn config() -> AgentConfig {
    AgentConfig::new("bottom-1", "Executor bottom-1", AgentLayer::Bottom).with_supervisor("mid-1")
}

fn subtask() -> Subtask {
    Subtask {
        task_id: "task-1".into(),
        step: PlanStep::scripted(
            "write-hello",
            "write a greeting",
            StepTarget::Domain("docs".into()),
            "write_file",
            serde_json::json!({"path": "hello.txt", "content": "hello, strata\n"}),
        ),
        assignee: AgentId::new("bottom-1"),
        attempt: 1,
    }
}

/// An agent in the steady state of a long-running one, on fresh in-memory services.
struct Fixture {
    agent: Agent,
    bus: Arc<dyn MessageBus>,
    /// Heartbeats run so far, warm-up included.
    heartbeats: u64,
}

impl Fixture {
    /// An initialized agent that has already processed [`WARM_UP`] messages, one per heartbeat.
    fn new(rt: &Runtime, workspace: &ToolContext) -> Self {
        let bus: Arc<dyn MessageBus> = Arc::new(InMemoryBus::new());
        let deps = Arc::new(AgentDeps {
            bus: bus.clone(),
            boards: Arc::new(InMemoryWhiteboard::new()),
            governance: Arc::new(InMemoryGovernance::new()),
            audit: Arc::new(InMemoryAuditLog::new()),
            reasoner: Arc::new(RuleBasedReasoner::new()),
            tools: Arc::new(ToolRegistry::with_builtins()),
            workspace: Arc::new(workspace.clone()),
            clock: Arc::new(TokioClock::starting_at(Timestamp(1_700_000_000_000))),
            state: Arc::new(InMemoryStateStore::new()),
            spawner: None,
            timeouts: Default::default(),
        });
        let behavior = Box::new(OneCall { subtask: subtask() });
        let agent = Agent::new(config(), behavior, deps).unwrap();
        let mut fixture = Self { agent, bus, heartbeats: 0 };
        rt.block_on(async {
            fixture.agent.initialize().await.unwrap();
            for _ in 0..WARM_UP {
                fixture.heartbeat().await;
            }
        });
        fixture
    }

    /// Sends one message (untimed), runs one heartbeat and returns how long it took.
    async fn heartbeat(&mut self) -> Duration {
        self.heartbeats += 1;
        let n = self.heartbeats;
        self.bus.send(query(self.agent.id(), n)).await.unwrap();
        let start = Instant::now();
        let outcome = self.agent.heartbeat(n).await;
        let took = start.elapsed();
        assert_eq!(outcome.unwrap(), HeartbeatOutcome::Processed { messages: 1 });
        if n.is_multiple_of(DRAIN_EVERY) {
            drain_system(&*self.bus).await;
        }
        took
    }
}

fn query(to: &AgentId, n: u64) -> Message {
    Message::new(
        new_message_id(),
        AgentId::new("mid-1"),
        to,
        MessageKind::StatusQuery,
        serde_json::Value::Null,
        Timestamp(n),
    )
}

/// Takes and acknowledges everything in the `system` inbox.
async fn drain_system(bus: &dyn MessageBus) {
    loop {
        let taken = bus.take(&Address::System, 1024).await.unwrap();
        if taken.is_empty() {
            return;
        }
        let ids: Vec<_> = taken.iter().map(|m| m.id).collect();
        bus.ack(&Address::System, &ids).await.unwrap();
    }
}

fn overhead(c: &mut Criterion) {
    let rt = runtime();
    let dir = tempfile::tempdir().unwrap();
    let workspace = ToolContext::new(dir.path()).unwrap();
    let mut group = c.benchmark_group("runtime");
    group.measurement_time(Duration::from_secs(3)).warm_up_time(Duration::from_secs(1));
    group.throughput(Throughput::Elements(1));

    // The bare call, as the behaviour makes it: through `Arc<dyn Reasoner>`, awaited.
    group.bench_function("reasoner_call", |bench| {
        let config = config();
        let prompt = system_prompt(&config, RESPONSIBILITIES);
        let persona = Persona {
            config: &config,
            system_prompt: &prompt,
            tools: &[],
            roles: &[],
            domains: &[],
        };
        let reasoner: Arc<dyn Reasoner> = Arc::new(RuleBasedReasoner::new());
        let subtask = subtask();
        bench.iter_custom(|iters| {
            rt.block_on(async {
                let start = Instant::now();
                for _ in 0..iters {
                    black_box(reasoner.next_action(persona, &subtask, &[]).await.unwrap());
                }
                start.elapsed()
            })
        });
    });

    // One heartbeat with one pending message: take, idle -> working (audited), read the board,
    // the one reasoning call, heartbeat ack to `system`, save the agent's state, ack,
    // working -> idle (audited). Sending the message beforehand, draining `system` and replacing
    // the agent are not timed.
    let mut fixture = Fixture::new(&rt, &workspace);
    group.bench_function("heartbeat_one_message", |bench| {
        bench.iter_custom(|iters| {
            let mut spent = Duration::ZERO;
            for _ in 0..iters {
                if fixture.heartbeats > HEARTBEATS_PER_AGENT {
                    fixture = Fixture::new(&rt, &workspace);
                }
                spent += rt.block_on(fixture.heartbeat());
            }
            spent
        });
    });

    // The same heartbeat with telemetry on: the OpenTelemetry layer (agent-telemetry) builds
    // the heartbeat's, message's and reasoning call's spans and hands them to a sink that drops
    // them (no export). Telemetry off is `heartbeat_one_message` above: no subscriber, every
    // span disabled at its callsite.
    let sink: Arc<dyn opentelemetry_sdk::trace::SpanProcessor> = Arc::new(Drop);
    let subscriber =
        tracing_subscriber::registry().with(agent_telemetry::OtelLayer::new(sink, None));
    tracing::subscriber::with_default(subscriber, || {
        group.bench_function("heartbeat_one_message_otel_on", |bench| {
            bench.iter_custom(|iters| {
                let mut spent = Duration::ZERO;
                for _ in 0..iters {
                    if fixture.heartbeats > HEARTBEATS_PER_AGENT {
                        fixture = Fixture::new(&rt, &workspace);
                    }
                    spent += rt.block_on(fixture.heartbeat());
                }
                spent
            });
        });
    });
    group.finish();
}

/// A span processor that drops every span: what telemetry on costs before the export.
#[derive(Debug)]
struct Drop;

impl opentelemetry_sdk::trace::SpanProcessor for Drop {
    fn on_start(&self, _: &mut opentelemetry_sdk::trace::Span, _: &opentelemetry::Context) {}
    fn on_end(&self, span: opentelemetry_sdk::trace::SpanData) {
        black_box(span);
    }
    fn force_flush(&self) -> opentelemetry_sdk::error::OTelSdkResult {
        Ok(())
    }
    fn shutdown_with_timeout(&self, _: Duration) -> opentelemetry_sdk::error::OTelSdkResult {
        Ok(())
    }
}

criterion_group!(benches, overhead);
criterion_main!(benches);
