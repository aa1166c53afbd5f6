//! What `strata exec KIND "objective"` runs as a team run: a team file with an executor that
//! runs the kind ([`with_executor_kind`]) and a plan of one step that calls it
//! ([`exec_plan_toml`]). Both are files like any other, stored in the run and read back by
//! `strata resume`.

use std::path::Path;

use agent_core::tools::ToolRegistry;
use agent_layers::BottomSpec;
use agent_pool::RoleSpec;
use agent_state::{AgentId, AgentLayer};

use crate::error::{FileError, Source};
use crate::executor::{kinds, known_kinds};
use crate::team::{TeamFile, parse_team};

/// A team file with an executor that runs one kind ([`with_executor_kind`]).
#[derive(Clone, Debug, PartialEq)]
pub struct ExecTeam {
    /// The team file's text, with the `kind` added if it was not there.
    pub text: String,
    /// The team it describes.
    pub team: TeamFile,
    /// The executor that runs the kind.
    pub executor: AgentId,
}

/// The team file `text` with an executor that runs `kind`: the first executor (in file order)
/// that already has that `kind`, else the first without a `kind`, which is given
/// `kind = "<kind>"` (the rest of the text, comments included, is kept as written). `path`
/// names the file in messages; the file is checked first ([`parse_team`]), so its mistakes
/// point into it.
///
/// Refused: an unknown kind, and a team with no executor that can take it (none at all, or
/// each with another kind).
///
/// ```
/// use std::path::Path;
///
/// use agent_core::tools::ToolRegistry;
///
/// # let Some(kind) = agent_executor::builtins().names().next().map(str::to_owned) else {
/// #     return Ok(());
/// # };
/// let tools = ToolRegistry::with_builtins();
/// let exec = team_file::with_executor_kind(
///     Path::new("team.toml"),
///     team_file::example_team_toml(),
///     &kind,
///     &tools,
/// )?;
/// assert_eq!(exec.executor.as_str(), "bottom-d1");
/// assert!(exec.text.contains(&format!("kind = \"{kind}\"")));
/// # Ok::<(), team_file::FileError>(())
/// ```
pub fn with_executor_kind(
    path: &Path,
    text: &str,
    kind: &str,
    tools: &ToolRegistry,
) -> Result<ExecTeam, FileError> {
    let src = Source { path, text };
    if !kinds().contains(kind) {
        return Err(src.error(
            0..0,
            format!("unknown executor kind `{kind}`; the kinds are: {}", known_kinds()),
        ));
    }
    let team = parse_team(path, text, tools)?;
    let executors = || {
        team.spec.agents.iter().filter(|a| a.config.layer == AgentLayer::Bottom).filter_map(|a| {
            match &a.role {
                RoleSpec::Bottom(BottomSpec { kind, .. }) => Some((&a.config.id, kind.as_deref())),
                _ => None,
            }
        })
    };
    if let Some((id, _)) = executors().find(|(_, k)| *k == Some(kind)) {
        let executor = id.clone();
        return Ok(ExecTeam { text: text.to_owned(), team, executor });
    }
    let Some((id, _)) = executors().find(|(_, k)| k.is_none()) else {
        let message = if executors().next().is_none() {
            format!(
                "the team has no executor to run `{kind}`; add a [[bottom]] executor (with `kind = \"{kind}\"`)"
            )
        } else {
            format!(
                "every executor of the team runs another kind; give one `kind = \"{kind}\"`, or add one without a kind"
            )
        };
        return Err(src.error(0..0, message));
    };
    let executor = id.clone();
    let mut doc: toml_edit::DocumentMut =
        text.parse().map_err(|e: toml_edit::TomlError| src.error(0..0, e.to_string()))?;
    let is_it = |t: &dyn toml_edit::TableLike| {
        t.get("id").and_then(toml_edit::Item::as_str) == Some(executor.as_str())
    };
    let mut added = false;
    match doc.get_mut("bottom") {
        Some(toml_edit::Item::ArrayOfTables(list)) => {
            if let Some(table) = list.iter_mut().find(|t| is_it(*t)) {
                table.insert("kind", toml_edit::value(kind));
                added = true;
            }
        }
        Some(toml_edit::Item::Value(toml_edit::Value::Array(list))) => {
            if let Some(table) = list
                .iter_mut()
                .filter_map(toml_edit::Value::as_inline_table_mut)
                .find(|t| is_it(*t))
            {
                table.insert("kind", kind.into());
                added = true;
            }
        }
        _ => {}
    }
    if !added {
        return Err(src.error(
            0..0,
            format!("executor `{executor}` could not be given `kind = \"{kind}\"` in the text"),
        ));
    }
    let text = doc.to_string();
    let team = parse_team(path, &text, tools)?;
    Ok(ExecTeam { text, team, executor })
}

/// The plan file of one run of `kind` on `objective` with `inputs` (a JSON object, or `null`
/// for none) by `executor`: task `exec-<kind>`, its goal the objective, and one step,
/// `tool = "<kind>"`, `args = { objective, inputs }`. Any text reads back the same
/// ([`parse_plan`](crate::parse_plan) checks it like any plan). Refused, with what is wrong:
/// inputs that are not an object, or hold a JSON `null` or an integer too large for TOML
/// (which a plan file cannot hold).
pub fn exec_plan_toml(
    kind: &str,
    objective: &str,
    inputs: &serde_json::Value,
    executor: &AgentId,
) -> Result<String, String> {
    let mut args = toml::Table::new();
    args.insert("objective".into(), toml::Value::String(objective.to_owned()));
    match inputs {
        serde_json::Value::Null => {}
        serde_json::Value::Object(_) => {
            args.insert("inputs".into(), json_to_toml(inputs, "inputs")?);
        }
        _ => return Err("the inputs are a JSON object, such as {\"path\": \"notes.md\"}".into()),
    }
    let mut step = toml::Table::new();
    step.insert("id".into(), toml::Value::String(kind.to_owned()));
    step.insert("agent".into(), toml::Value::String(executor.to_string()));
    step.insert("tool".into(), toml::Value::String(kind.to_owned()));
    step.insert("args".into(), toml::Value::Table(args));
    let mut plan = toml::Table::new();
    plan.insert("id".into(), toml::Value::String(format!("exec-{kind}")));
    plan.insert("goal".into(), toml::Value::String(objective.to_owned()));
    plan.insert("steps".into(), toml::Value::Array(vec![toml::Value::Table(step)]));
    let body = toml::to_string(&plan).map_err(|e| format!("the plan cannot be written: {e}"))?;
    Ok(format!("# `strata exec {kind}`: one run of the kind, as a team run.\n{body}"))
}

/// A JSON value as TOML; `at` names it in errors (`inputs.path`).
fn json_to_toml(value: &serde_json::Value, at: &str) -> Result<toml::Value, String> {
    use serde_json::Value as J;
    Ok(match value {
        J::Null => {
            return Err(format!(
                "`{at}` is null, which a plan file cannot hold; leave it out instead"
            ));
        }
        J::Bool(b) => toml::Value::Boolean(*b),
        J::Number(n) => match (n.as_i64(), n.as_f64()) {
            (Some(i), _) => toml::Value::Integer(i),
            (None, Some(f)) if n.is_f64() => toml::Value::Float(f),
            _ => return Err(format!("`{at}` is {n}, too large for a plan file's integers")),
        },
        J::String(s) => toml::Value::String(s.clone()),
        J::Array(items) => toml::Value::Array(
            items
                .iter()
                .enumerate()
                .map(|(i, v)| json_to_toml(v, &format!("{at}[{i}]")))
                .collect::<Result<_, _>>()?,
        ),
        J::Object(map) => toml::Value::Table(
            map.iter()
                .map(|(k, v)| Ok((k.clone(), json_to_toml(v, &format!("{at}.{k}"))?)))
                .collect::<Result<_, String>>()?,
        ),
    })
}
