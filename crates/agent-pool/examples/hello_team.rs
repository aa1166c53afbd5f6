//! Runs a three-layer team on a small plan: it writes two files and runs a shell command over
//! one of them, on the in-memory backends, with the rule-based reasoner.
//!
//! ```text
//! cargo run -p strata-agent-pool --example hello_team -- [WORKSPACE]
//! ```
//!
//! WORKSPACE defaults to `./strata-workspace`. The heartbeat here is 100 ms so the demo takes
//! about a second; the runtime's default is 4 s.
#![allow(clippy::print_stdout, reason = "an example prints its results")]

use std::sync::Arc;
use std::time::Duration;

use agent_core::tools::ToolContext;
use agent_core::{RuleBasedReasoner, check_transition_chain};
use agent_layers::{BottomSpec, MidSpec, TopSpec};
use agent_pool::{AgentSpec, RoleSpec, Team, TeamServices, TeamSpec};
use agent_state::{AgentConfig, AgentLayer, PlanStep, StepTarget, Task, TaskOutcome};

fn top(id: &str, power: &str, weight: f64) -> AgentSpec {
    AgentSpec {
        config: AgentConfig::new(id, format!("Power {power}"), AgentLayer::Top),
        role: RoleSpec::Top(TopSpec {
            power_type: power.into(),
            vote_weight: weight,
            signature_authority: vec!["plan".into()],
        }),
    }
}

fn lead(id: &str, domain: &str) -> AgentSpec {
    AgentSpec {
        config: AgentConfig::new(id, format!("{domain} lead"), AgentLayer::Mid)
            .with_supervisor("top-a"),
        role: RoleSpec::Mid(MidSpec { domain: domain.into(), max_subordinates: 4 }),
    }
}

fn executor(id: &str, lead: &str) -> AgentSpec {
    let tools = ["read_file", "write_file", "list_dir", "shell"].map(String::from).to_vec();
    AgentSpec {
        config: AgentConfig::new(id, format!("executor {id}"), AgentLayer::Bottom)
            .with_supervisor(lead),
        role: RoleSpec::Bottom(BottomSpec::new(tools)),
    }
}

fn step(id: &str, domain: &str, tool: &str, args: serde_json::Value, after: &[&str]) -> PlanStep {
    PlanStep::scripted(id, format!("{id} ({tool})"), StepTarget::Domain(domain.into()), tool, args)
        .with_after(after.iter().copied())
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    // This program is the sandbox launcher of its own `shell` commands: started as one, it
    // never returns from here. Call it first, before the async runtime starts any thread.
    agent_core::tools::run_sandbox_launcher_if_requested();
    tokio::runtime::Builder::new_current_thread().enable_all().build()?.block_on(run())
}

async fn run() -> Result<(), Box<dyn std::error::Error>> {
    let workspace = std::env::args().nth(1).unwrap_or_else(|| "strata-workspace".into());
    let services =
        TeamServices::in_memory(ToolContext::new(&workspace)?, Arc::new(RuleBasedReasoner::new()));
    let mut spec = TeamSpec::new(vec![
        top("top-a", "power_a", 2.0),
        top("top-b", "power_b", 1.0),
        top("top-c", "power_c", 1.0),
        lead("mid-docs", "docs"),
        lead("mid-build", "build"),
        executor("bottom-d1", "mid-docs"),
        executor("bottom-d2", "mid-docs"),
        executor("bottom-b1", "mid-build"),
    ]);
    spec.heartbeat = Duration::from_millis(100);
    let team = Team::start(spec, services.clone()).await?;
    println!(
        "team of {} agents started; workspace: {}",
        team.pool().len(),
        services.workspace.workspace().display()
    );

    let task = Task {
        id: "hello".into(),
        goal: "write a greeting and measure it".into(),
        steps: vec![
            step(
                "write-hello",
                "docs",
                "write_file",
                serde_json::json!({"path": "hello.txt", "content": "hello, strata\n"}),
                &[],
            ),
            step(
                "write-notes",
                "docs",
                "write_file",
                serde_json::json!({"path": "notes/plan.md", "content": "# Plan\n- greet\n- measure\n"}),
                &[],
            ),
            step(
                "measure",
                "build",
                "shell",
                serde_json::json!({"command": "wc -c < hello.txt"}),
                &["write-hello"],
            ),
        ],
    };
    team.submit(task).await?;
    let outcome = team.wait("hello").await;
    team.shutdown().await?;

    match &outcome {
        TaskOutcome::Succeeded { results, .. } => {
            println!("task `hello` succeeded:");
            for r in results {
                println!("  {:<12} by {:<10} {}", r.step_id, r.agent, r.output.trim());
            }
        }
        TaskOutcome::Failed { reason, .. } => println!("task `hello` failed: {reason}"),
    }
    println!(
        "\n{:<10} {:<7} {:<11} {:>5} {:>6} {:>5}",
        "agent", "layer", "status", "tasks", "signed", "score"
    );
    for line in team.summary().await {
        let m = &line.metrics;
        println!(
            "{:<10} {:<7} {:<11} {:>5} {:>6} {:>5.1}",
            line.id.as_str(),
            line.layer.as_str(),
            line.status.as_str(),
            m.tasks_completed,
            m.decisions_signed,
            line.score
        );
    }
    let records = services.audit.records(None).await?;
    check_transition_chain(&records)?;
    println!(
        "\naudit log: {} records, every agent's transition chain is consistent",
        records.len()
    );
    if !outcome.is_success() {
        std::process::exit(1);
    }
    Ok(())
}
