//! Builders shared by the team scenarios: a standard three-layer team on in-memory services.

use std::sync::Arc;
use std::time::Duration;

use agent_core::tools::ToolContext;
use agent_core::{RuleBasedReasoner, TokioClock};
use agent_layers::{BottomSpec, MidSpec, TopSpec};
use agent_pool::{AgentSpec, RoleSpec, TeamServices, TeamSpec};
use agent_state::{AgentConfig, AgentLayer, PlanStep, StepTarget, Task, Timestamp};

pub(crate) fn top(id: &str, power: &str, weight: f64) -> AgentSpec {
    AgentSpec {
        config: AgentConfig::new(id, format!("Power {power}"), AgentLayer::Top)
            .with_role("governance"),
        role: RoleSpec::Top(TopSpec {
            power_type: power.into(),
            vote_weight: weight,
            signature_authority: vec!["plan".into()],
        }),
    }
}

pub(crate) fn mid(id: &str, domain: &str, supervisor: &str) -> AgentSpec {
    AgentSpec {
        config: AgentConfig::new(id, format!("Lead {domain}"), AgentLayer::Mid)
            .with_supervisor(supervisor),
        role: RoleSpec::Mid(MidSpec { domain: domain.into(), max_subordinates: 4 }),
    }
}

pub(crate) fn bottom(id: &str, supervisor: &str, tools: &[&str]) -> AgentSpec {
    AgentSpec {
        config: AgentConfig::new(id, format!("Executor {id}"), AgentLayer::Bottom)
            .with_supervisor(supervisor),
        role: RoleSpec::Bottom(BottomSpec::new(tools.iter().map(|t| (*t).to_owned()))),
    }
}

/// Three powers, two leads (docs, build), two executors each.
pub(crate) fn standard_team() -> TeamSpec {
    let all = ["read_file", "write_file", "list_dir", "shell"];
    let mut spec = TeamSpec::new(vec![
        top("top-a", "power_a", 2.0),
        top("top-b", "power_b", 1.0),
        top("top-c", "power_c", 1.0),
        mid("mid-docs", "docs", "top-a"),
        mid("mid-build", "build", "top-a"),
        bottom("bottom-d1", "mid-docs", &all),
        bottom("bottom-d2", "mid-docs", &all),
        bottom("bottom-b1", "mid-build", &all),
        bottom("bottom-b2", "mid-build", &all),
    ]);
    spec.heartbeat = Duration::from_secs(4);
    spec
}

pub(crate) fn services(workspace: &std::path::Path) -> TeamServices {
    TeamServices {
        clock: Arc::new(TokioClock::starting_at(Timestamp(1_700_000_000_000))),
        ..TeamServices::in_memory(
            ToolContext::new(workspace).unwrap(),
            Arc::new(RuleBasedReasoner::new()),
        )
    }
}

/// The services of one agent created straight into a pool (no team, no spawner).
pub(crate) fn agent_deps(services: &TeamServices) -> Arc<agent_core::AgentDeps> {
    Arc::new(agent_core::AgentDeps {
        bus: services.bus.clone(),
        boards: services.boards.clone(),
        governance: services.governance.clone(),
        audit: services.audit.clone(),
        reasoner: services.reasoner.clone(),
        tools: services.tools.clone(),
        workspace: services.workspace.clone(),
        clock: services.clock.clone(),
        state: services.state.clone(),
        spawner: None,
        timeouts: Default::default(),
    })
}

pub(crate) fn step(id: &str, domain: &str, tool: &str, args: serde_json::Value) -> PlanStep {
    PlanStep::scripted(
        id,
        format!("{id} with {tool}"),
        StepTarget::Domain(domain.into()),
        tool,
        args,
    )
}

/// A plan that writes two files, lists them and runs a shell command over them.
pub(crate) fn hello_task(id: &str) -> Task {
    Task {
        id: id.into(),
        goal: "write a greeting and check it".into(),
        steps: vec![
            step(
                "write-hello",
                "docs",
                "write_file",
                serde_json::json!({"path": "hello.txt", "content": "hello, strata\n"}),
            ),
            step(
                "write-notes",
                "docs",
                "write_file",
                serde_json::json!({"path": "docs/notes.md", "content": "# Notes\n"}),
            ),
            step(
                "count",
                "build",
                "shell",
                serde_json::json!({"command": "wc -c < hello.txt > size.txt && cat size.txt"}),
            )
            .with_after(["write-hello"]),
        ],
    }
}

/// `{"type": "object"}`: the schema of the test tools, which take any arguments.
pub(crate) fn object_schema() -> &'static serde_json::Value {
    static SCHEMA: std::sync::OnceLock<serde_json::Value> = std::sync::OnceLock::new();
    SCHEMA.get_or_init(|| serde_json::json!({"type": "object"}))
}
