//! An OODA agent improves a small file in a workspace over a few steps, on a deterministic
//! reasoner (no model): it reads `notes.md`, rewrites it (a plain action), tightens its own
//! prompt (a level-1 self-modification), fixes a typo in the notes as a level-3 change (its
//! test command must pass before and after, on a copy of the workspace), and stops. Every phase
//! prints as it happens, from the agent's event stream.
//!
//! ```sh
//! cargo run -p strata-agent-ooda --example improve            # in a temporary workspace
//! cargo run -p strata-agent-ooda --example improve -- DIR     # in DIR (notes.md is created there)
//! ```
//!
//! The test command runs in the workspace sandbox (built in); pass `--unsandboxed` to run it
//! without one.

use std::sync::Arc;

use agent_core::tools::{Sandbox, ToolContext, ToolRegistry};
use agent_core::{
    AgentContext, AgentDeps, InMemoryAuditLog, InMemoryStateStore, NextAction, ReasoningRequest,
    ScriptedAnswer, ScriptedReasoner, TokioClock, ToolCall,
};
use agent_ooda::{MODIFY_SELF, Ooda, ReasonerLoop};
use agent_state::ooda::{OodaConfig, OodaEventKind, SafetyLevel};
use agent_state::{AgentConfig, AgentId, AgentLayer};
use serde_json::json;

const NOTES: &str = "# Notes\n\nStrata runs teams of agnets.\nIt is durable\n";

/// The improver's decisions, from what its actions returned so far.
fn improver(request: &ReasoningRequest) -> ScriptedAnswer {
    let ReasoningRequest::NextAction { history, .. } = request else {
        return ScriptedAnswer::Fallback;
    };
    let done = |tool: &str| history.iter().filter(|r| !r.event && r.call.tool == tool).count();
    let call = |tool: &str, args| {
        ScriptedAnswer::Action(NextAction::Call(ToolCall { tool: tool.into(), args }))
    };
    match (done("read_file"), done("write_file"), done(MODIFY_SELF)) {
        (0, _, _) => call("read_file", json!({"path": "notes.md"})),
        (_, 0, _) => call(
            "write_file",
            json!({"path": "notes.md", "content": "# Notes\n\nStrata runs teams of agnets.\nIt is durable: a run survives a crash.\n"}),
        ),
        (_, _, 0) => call(
            MODIFY_SELF,
            json!({"modification_type": "prompt", "target": "prompt",
                   "change": {"append": "Keep every sentence short."}, "safety_level": 1}),
        ),
        (_, _, 1) => call(
            MODIFY_SELF,
            json!({"modification_type": "code", "target": "notes.md",
                   "change": {"replace": {"old": "agnets", "new": "agents"}}, "safety_level": 3}),
        ),
        _ => ScriptedAnswer::Action(NextAction::Finish {
            success: true,
            summary: "notes.md reads well and says what Strata does".into(),
        }),
    }
}

#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let unsandboxed = args.iter().any(|a| a == "--unsandboxed");
    let temp = tempfile::tempdir()?;
    let dir = match args.iter().find(|a| !a.starts_with("--")) {
        Some(d) => std::path::PathBuf::from(d),
        None => temp.path().to_path_buf(),
    };
    std::fs::create_dir_all(&dir)?;
    std::fs::write(dir.join("notes.md"), NOTES)?;

    let mut workspace = ToolContext::new(&dir)?;
    if unsandboxed {
        workspace = workspace.with_sandbox(Sandbox::unsandboxed());
    }
    let deps = Arc::new(AgentDeps {
        bus: Arc::new(message_bus::InMemoryBus::new()),
        boards: Arc::new(whiteboard::InMemoryWhiteboard::new()),
        governance: Arc::new(governance::InMemoryGovernance::new()),
        audit: Arc::new(InMemoryAuditLog::new()),
        reasoner: Arc::new(ScriptedReasoner::from_fn(improver)),
        tools: Arc::new(ToolRegistry::with_builtins()),
        workspace: Arc::new(workspace),
        clock: Arc::new(TokioClock::new()),
        state: Arc::new(InMemoryStateStore::new()),
        spawner: None,
        timeouts: Default::default(),
    });
    let id = AgentId::new("improver");
    let mut ctx = AgentContext::new(
        AgentConfig::new(id.as_str(), "Improver", AgentLayer::Bottom),
        "improves notes.md",
        deps,
    );

    let mut config = OodaConfig::new("Editor", "make notes.md clear and correct");
    config.tools = vec!["read_file".into(), "write_file".into()];
    config.self_modification_enabled = true;
    config.self_modification_level = SafetyLevel::MEDIUM;
    config.test_command = Some("grep -q '^# Notes' notes.md".into());
    let ceiling = config.tools.clone();
    let mut ooda = Ooda::new(id, config, ReasonerLoop, &ceiling, ctx.now())?;
    let mut events = ooda.subscribe();

    let printer = tokio::spawn(async move {
        while let Ok(event) = events.recv().await {
            let what = match event.kind {
                OodaEventKind::Act => format!("act      {}", event.data["action"]),
                OodaEventKind::ModifySelf => format!(
                    "modify   {} (v{})",
                    event.data["outcome"].as_str().unwrap_or("?"),
                    event.data["version"]
                ),
                OodaEventKind::Error => format!("error    {}", event.data["error"]),
                kind => serde_json::to_value(kind)
                    .ok()
                    .and_then(|v| v.as_str().map(str::to_owned))
                    .unwrap_or_default(),
            };
            // An example program prints what it shows.
            #[allow(clippy::print_stdout, reason = "the example's output")]
            {
                println!("[{:>2}] {what}", event.iteration);
            }
        }
    });

    let end = ooda.run(&mut ctx, 12).await?;
    drop(ooda);
    let _ = printer.await;

    #[allow(clippy::print_stdout, reason = "the example's output")]
    {
        println!();
        println!("stopped: {}", end.stop.map(|s| s.to_string()).unwrap_or_else(|| "no".into()));
        println!("{} phases ran; notes.md is now:\n", end.steps.len());
        println!("{}", std::fs::read_to_string(dir.join("notes.md"))?);
    }
    Ok(())
}
