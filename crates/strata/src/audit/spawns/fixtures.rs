//! Hand-built audit logs for tests of what is read from them (the agents' tree, results,
//! costs): a record-by-record builder, a small configured team and a run that spawns. Built
//! for this crate's tests and, with the feature `testing`, for other crates' (the
//! `strata` command tests its text views on the same logs).

use std::collections::HashMap;

use agent_core::{AuditEvent, AuditRecord, CostMeter, GENESIS_HASH, SpawnRecord};
use agent_state::{
    AgentId, AgentLayer, AgentResult, AgentStatus, Artifact, ChangeType, ResultStatus, Timestamp,
};

use super::Configured;

/// Builds a log record by record.
#[derive(Default)]
pub struct Log(pub Vec<AuditRecord>);

impl Log {
    /// Appends a record of `agent` with `event`.
    pub fn push(&mut self, agent: &str, event: AuditEvent) -> &mut Self {
        let seq = self.0.len() as u64;
        self.0.push(AuditRecord::new(
            seq,
            Timestamp(1_000 + seq),
            AgentId::from(agent),
            event,
            GENESIS_HASH,
        ));
        self
    }

    /// Appends `agent`'s transition from `from` to `to`.
    pub fn to(&mut self, agent: &str, from: AgentStatus, to: AgentStatus) -> &mut Self {
        self.push(agent, AuditEvent::Transition { from, to, reason: "test".into() })
    }

    /// Appends `parent`'s spawn of the executor `agent` of `role`, with `task`, at `depth`.
    pub fn spawn(
        &mut self,
        parent: &str,
        agent: &str,
        role: &str,
        task: &str,
        depth: u32,
    ) -> &mut Self {
        let spawn = SpawnRecord {
            agent: AgentId::from(agent),
            parent: AgentId::from(parent),
            role: role.into(),
            layer: AgentLayer::Bottom,
            task_prompt: task.into(),
            key: format!("key-{agent}"),
            domain: None,
            depth,
        };
        self.push(parent, AuditEvent::Spawned { spawn })
    }

    /// Appends `agent`'s result, `trusted` or not.
    pub fn result(&mut self, agent: &str, result: AgentResult, trusted: bool) -> &mut Self {
        self.push(agent, AuditEvent::Result { task: format!("task of {agent}"), result, trusted })
    }

    /// Appends `parent`'s dismissal of `agent`.
    pub fn despawn(&mut self, parent: &str, agent: &str) -> &mut Self {
        let event =
            AuditEvent::Despawned { agent: AgentId::from(agent), summary: "done\nfor now".into() };
        self.push(parent, event)
    }
}

/// A configured agent `id` of `layer` under `supervisor`.
pub fn configured(id: &str, layer: AgentLayer, supervisor: Option<&str>) -> Configured {
    Configured {
        id: AgentId::from(id),
        layer,
        supervisor: supervisor.map(AgentId::from),
        role: None,
    }
}

/// The example's shape, cut down: two powers, a lead under the first, an executor under it.
pub fn team() -> Vec<Configured> {
    vec![
        configured("top-a", AgentLayer::Top, None),
        configured("top-b", AgentLayer::Top, None),
        configured("mid-docs", AgentLayer::Mid, Some("top-a")),
        configured("bottom-d1", AgentLayer::Bottom, Some("mid-docs")),
    ]
}

/// A successful result saying `summary`, with one created artifact.
pub fn done(summary: &str) -> AgentResult {
    AgentResult {
        status: ResultStatus::Success,
        summary: summary.into(),
        artifacts: vec![Artifact {
            file_path: "src/parser.rs".into(),
            description: "the parser".into(),
            change_type: ChangeType::Created,
        }],
        known_issues: Vec::new(),
    }
}

/// Costs from a table; an agent not in it has no known cost.
pub struct Costs(pub HashMap<AgentId, f64>);

impl CostMeter for Costs {
    fn cost_usd(&self, agent: &AgentId) -> Option<f64> {
        self.0.get(agent).copied()
    }
}

/// Costs of the agents in `pairs`.
pub fn costs(pairs: &[(&str, f64)]) -> Costs {
    Costs(pairs.iter().map(|&(a, c)| (AgentId::from(a), c)).collect())
}

/// A run where top-a spawned w1 (which spawned w2, then dismissed it) and mid-docs spawned w3.
pub fn spawning_run() -> Log {
    use AgentStatus::{Idle, Initializing, Terminated, Working};
    let mut log = Log::default();
    for a in ["top-a", "top-b", "mid-docs", "bottom-d1"] {
        log.to(a, Initializing, Idle);
    }
    log.spawn("top-a", "w1", "coder", "Write the parser\nwith tests and docs", 1)
        .to("w1", Initializing, Idle)
        .to("w1", Idle, Working)
        .spawn("w1", "w2", "tester", &"Test every rule of the grammar ".repeat(4), 2)
        .to("w2", Initializing, Idle)
        .result("w2", done("tested"), false)
        .despawn("w1", "w2")
        .to("w2", Idle, Terminated)
        .result("w1", done("parser written"), true)
        .spawn("mid-docs", "w3", "writer", "Document it", 1)
        .to("w3", Initializing, Idle);
    log
}
