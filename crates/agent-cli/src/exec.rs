//! `strata exec KIND "objective"`: one run of an executor kind (docs/concepts.md#executor-kinds),
//! as a durable team run. The team is the `--team` file (or the default team) with an executor that
//! runs the kind ([`team_file::with_executor_kind`]), the plan one step calling it
//! ([`team_file::exec_plan_toml`]); both are stored in the run like any other, so `runs`, `inspect`
//! and `resume` work on it. Everything is checked before the run directory is created: an unknown
//! kind, an empty or too long objective, inputs the kind does not take, a bad team file are bad
//! input (exit 2). `strata exec --list` lists the kinds.

use agent_executor::{Kind, Registry};
use anyhow::anyhow;
use team_file::escape_controls as esc;

use crate::cli::ExecArgs;
use crate::run::{self, Prepared};
use crate::{Failure, bad_input};

/// `strata exec`.
pub(crate) async fn exec(args: ExecArgs) -> Result<u8, Failure> {
    if args.list {
        // Listing runs nothing: the team file's MCP servers are not started.
        let team = args.start.team.as_deref().map(strata::run::read_team).transpose()?;
        list(&agent_executor::builtins(), team.as_ref(), args.start.output.json);
        return Ok(0);
    }
    // clap requires both unless `--list`.
    let (Some(kind), Some(objective)) = (&args.kind, &args.objective) else {
        return Err(bad_input(anyhow!(
            "give the kind and the objective: strata exec KIND \"what to do\""
        )));
    };
    let inputs = inputs(args.inputs.as_deref(), &args.input)?;
    let options = run::start_options(&args.start);
    let team = args.start.team.as_deref();
    let prepared = Prepared::from_exec(team, kind, objective, inputs, &options).await?;
    run::start(prepared, &args.start).await
}

/// The inputs from `--inputs JSON` (an object) and each `--input KEY=VALUE` (a string, over
/// the same key of `--inputs`); `null` when neither is given.
fn inputs(json: Option<&str>, pairs: &[String]) -> Result<serde_json::Value, Failure> {
    let mut inputs = match json {
        None => serde_json::Map::new(),
        Some(text) => match serde_json::from_str(text) {
            Ok(serde_json::Value::Object(map)) => map,
            Ok(_) => {
                return Err(bad_input(anyhow!(
                    "--inputs is a JSON object, such as '{{\"path\": \"notes/x.md\"}}'"
                )));
            }
            Err(e) => return Err(bad_input(anyhow!("--inputs is not JSON: {e}"))),
        },
    };
    for pair in pairs {
        let Some((key, value)) = pair.split_once('=').filter(|(k, _)| !k.trim().is_empty()) else {
            return Err(bad_input(anyhow!(
                "--input `{}` is not KEY=VALUE, such as --input path=notes/x.md",
                esc(pair)
            )));
        };
        inputs.insert(key.trim().to_owned(), serde_json::Value::String(value.to_owned()));
    }
    if json.is_none() && pairs.is_empty() {
        return Ok(serde_json::Value::Null);
    }
    Ok(serde_json::Value::Object(inputs))
}

/// `strata exec --list`: each kind with what it does, whether a run of it may be repeated
/// after a crash, and its inputs; with a team file, the endpoints it configures.
fn list(registry: &Registry, team: Option<&team_file::TeamFile>, json: bool) {
    let endpoints = strata::exec::endpoints(team);
    if json {
        outln!("{}", strata::exec::list_json(registry, &endpoints));
        return;
    }
    for kind in registry.kinds() {
        outln!("{}", kind_text(kind.as_ref()));
    }
    if !endpoints.is_empty() {
        outln!("endpoints (integrations_agent, from the team file):");
        for e in endpoints {
            let about = if e.description.is_empty() {
                String::new()
            } else {
                format!("  {}", e.description)
            };
            outln!("  {:<16} {:<6} {}{}", e.name, e.method.as_str(), e.url, esc(&about));
        }
    }
    outln!(
        "run one with: strata exec KIND \"objective\" [--input KEY=VALUE]... [--inputs JSON] [--team FILE]"
    );
}

/// One kind as `--list` shows it: its name and description, then its inputs
/// ([`strata::exec::inputs`]), one a line.
fn kind_text(kind: &dyn Kind) -> String {
    let repeat = if kind.idempotent() {
        "safe to run again"
    } else {
        "has side effects: not run again after a crash"
    };
    let mut out = format!("{}: {} ({repeat})\n", kind.name(), esc(kind.description()));
    let inputs = strata::exec::inputs(kind);
    if inputs.is_empty() {
        out.push_str("  inputs: none\n");
        return out;
    }
    out.push_str("  inputs:\n");
    for input in inputs {
        let required = if input.required { ", required" } else { "" };
        out.push_str(&format!(
            "    {:<14} {:<18} {}\n",
            input.name,
            format!("({}{required})", input.type_name),
            esc(&input.description)
        ));
    }
    out
}
