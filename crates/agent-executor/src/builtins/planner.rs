//! `planner_agent`: turns its objective into a plan (steps, dependencies, owners) whose
//! primary output is a Strata plan file (the TOML `strata run` takes; the format is in the
//! `team-file` crate's docs): the objective as `goal`, and one `[[steps]]` table per step with
//! its `id`, `description`, `after`, and, when known, its owner (`domain` or `agent`), `role`
//! and `acceptance`. Steps without a `tool` are goal steps: whoever carries one out chooses its
//! tool calls.
//!
//! - With a reasoner that plans ([`Reasoner::plans`](agent_core::Reasoner::plans)), the plan is
//!   the reasoner's ([`Reasoner::plan`](agent_core::Reasoner::plan) of the objective as a
//!   goal); it is checked like a submitted task (unique ids, `after` naming earlier steps) and
//!   a plan that fails the check fails the run ([`FailureKind::Malformed`]).
//! - With the rule-based reasoner, the objective is split as written: its numbered or
//!   bulleted lines, else its sentences, `;` and `then`, each step after the one before, owned
//!   by the `domain` input if given. `needs_model` says what that leaves out.
//!
//! `data.steps` holds the steps as `{id, description, after, owner, role}`; a reasoner's plan
//! also gives `data.leads` (the leads it would create, which a plan file does not name).

use agent_core::{Plan, ReasonError};
use agent_state::{FailureKind, PlanStep, RoleBook, StepTarget, Task, find_control};
use async_trait::async_trait;
use serde::Serialize;
use serde_json::{Value, json};

use crate::capsule::{Capsule, reason_failure};
use crate::kind::{Kind, KindError, KindOutput};
use crate::request::RunRequest;

/// The name `planner_agent` is registered under.
pub const PLANNER_AGENT: &str = "planner_agent";

/// What a plan made without a model leaves out.
pub const PLANNER_NEEDS_MODEL: &str =
    "choosing roles, owners and dependencies beyond the written order";

/// The `planner_agent` kind.
#[derive(Clone, Copy, Debug, Default)]
pub struct PlannerAgent;

#[async_trait]
impl Kind for PlannerAgent {
    fn name(&self) -> &str {
        PLANNER_AGENT
    }

    fn description(&self) -> &str {
        "organises the objective into a plan (steps, dependencies, owners) and returns it as a \
         Strata plan file"
    }

    fn inputs_schema(&self) -> Value {
        json!({
            "type": "object",
            "properties": {
                "id": {
                    "type": "string",
                    "minLength": 1,
                    "description": "the plan's id in the plan file; default plan-<run id>",
                },
                "domain": {
                    "type": "string",
                    "minLength": 1,
                    "description": "the lead domain that owns every step when the reasoner does not choose owners",
                },
            },
            "additionalProperties": false,
        })
    }

    async fn run(
        &self,
        request: &RunRequest,
        capsule: &mut Capsule,
    ) -> Result<KindOutput, KindError> {
        let (id, domain) = plan_names(request, capsule)?;
        let goal = request.objective.trim();

        capsule.progress(10, "planning");
        let planned = reasoner_plan(capsule, &id, goal).await?;
        let (steps, leads, needs_model, confidence) = match planned {
            Some(plan) => {
                capsule.progress(60, format!("the reasoner planned {} step(s)", plan.steps.len()));
                (plan.steps, plan.leads, None, 0.8)
            }
            None => {
                let steps = written_steps(goal, domain.as_deref());
                capsule.progress(60, format!("split the objective into {} step(s)", steps.len()));
                (steps, Vec::new(), Some(PLANNER_NEEDS_MODEL.to_owned()), 0.5)
            }
        };
        let task = Task { id: id.clone(), goal: goal.to_owned(), steps };
        task.check_request().map_err(|e| {
            KindError::new(
                FailureKind::Malformed,
                format!("the reasoner's plan cannot be used: {e}"),
            )
        })?;

        capsule.progress(80, "writing the plan file");
        let toml = plan_toml(&task, capsule.run_id())?;
        let data_steps: Vec<Value> = task
            .steps
            .iter()
            .map(|s| {
                json!({
                    "id": s.id,
                    "description": s.description,
                    "after": s.after,
                    "owner": owner(&s.target),
                    "role": s.role,
                })
            })
            .collect();
        capsule.progress(100, format!("planned {} step(s)", task.steps.len()));
        Ok(KindOutput {
            primary_output: toml,
            confidence,
            artifacts: Vec::new(),
            data: json!({"id": task.id, "goal": task.goal, "steps": data_steps, "leads": leads}),
            needs_model,
        })
    }
}

/// The plan's id (the `id` input, else `plan-<run id>`) and the `domain` input, each checked
/// to be one line of printable text.
fn plan_names(
    request: &RunRequest,
    capsule: &Capsule,
) -> Result<(String, Option<String>), KindError> {
    let id = request
        .input_str("id")
        .map_or_else(|| format!("plan-{}", capsule.run_id()), |s| s.trim().to_owned());
    let domain = request.input_str("domain").map(|d| d.trim().to_owned());
    for (what, value) in [("id", Some(id.as_str())), ("domain", domain.as_deref())] {
        let Some(value) = value else { continue };
        if value.is_empty() {
            return Err(KindError::invalid(format!("`{what}` is empty; leave it out or name it")));
        }
        if let Some((index, c)) = find_control(value) {
            return Err(KindError::invalid(format!(
                "`{what}` has the control character {} at character {}; it must be one line \
                 of printable text",
                c.escape_unicode(),
                index + 1
            )));
        }
    }
    Ok((id, domain))
}

/// The reasoner's plan of `goal` as the task `id`; `None` when the reasoner does not plan or
/// cannot plan this one.
async fn reasoner_plan(
    capsule: &mut Capsule,
    id: &str,
    goal: &str,
) -> Result<Option<Plan>, KindError> {
    let reasoner = capsule.reasoner().clone();
    if !reasoner.plans() {
        return Ok(None);
    }
    capsule.spend_reasoner_call()?;
    let task = Task::goal(id.to_owned(), goal);
    match reasoner.plan(capsule.persona(), &task, &RoleBook::default()).await {
        Ok(plan) => Ok(Some(plan)),
        Err(ReasonError::CannotPlan { .. } | ReasonError::NeedsModel { .. }) => Ok(None),
        Err(error) => Err(reason_failure(error)),
    }
}

/// The steps of `goal` as written, each after the one before, owned by `domain` if given.
fn written_steps(goal: &str, domain: Option<&str>) -> Vec<PlanStep> {
    split_objective(goal)
        .into_iter()
        .enumerate()
        .map(|(i, description)| {
            let target = domain.map_or(StepTarget::Any, |d| StepTarget::Domain(d.to_owned()));
            PlanStep::goal(format!("step-{}", i + 1), description, target)
                .with_after((i > 0).then(|| format!("step-{i}")))
        })
        .collect()
}

/// Who owns a step: a domain, an agent, or nobody in particular.
fn owner(target: &StepTarget) -> Value {
    match target {
        StepTarget::Domain(domain) => json!(domain),
        StepTarget::Agent(agent) => json!(agent.as_str()),
        StepTarget::Any => Value::Null,
    }
}

/// The plan file as written.
#[derive(Serialize)]
struct PlanFile<'a> {
    id: &'a str,
    goal: &'a str,
    steps: Vec<StepFile<'a>>,
}

/// One `[[steps]]` table (simple values first, `args` last, as TOML wants).
#[derive(Serialize)]
struct StepFile<'a> {
    id: &'a str,
    #[serde(skip_serializing_if = "str::is_empty")]
    description: &'a str,
    #[serde(skip_serializing_if = "Option::is_none")]
    domain: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    agent: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    role: Option<&'a str>,
    #[serde(skip_serializing_if = "<[String]>::is_empty")]
    after: &'a [String],
    #[serde(skip_serializing_if = "str::is_empty")]
    acceptance: &'a str,
    #[serde(skip_serializing_if = "Option::is_none")]
    tool: Option<&'a str>,
    #[serde(skip_serializing_if = "is_false")]
    idempotent: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    args: Option<toml::Table>,
}

fn is_false(b: &bool) -> bool {
    !*b
}

/// `task` as a plan file: every string written as a TOML string (quotes, newlines and control
/// characters escaped), so it reads back the same.
pub(crate) fn plan_toml(task: &Task, run_id: &str) -> Result<String, KindError> {
    let mut steps = Vec::with_capacity(task.steps.len());
    for step in &task.steps {
        let (domain, agent) = match &step.target {
            StepTarget::Domain(d) => (Some(d.as_str()), None),
            StepTarget::Agent(a) => (None, Some(a.as_str())),
            StepTarget::Any => (None, None),
        };
        let scripted = step.is_scripted();
        let args = if scripted {
            Some(match &step.args {
                Value::Null => toml::Table::new(),
                args => toml::Table::try_from(args).map_err(|e| {
                    KindError::new(
                        FailureKind::Malformed,
                        format!(
                            "the `args` of step `{}` cannot be written in a plan file ({e}); a \
                             plan file's `args` are a table without nulls",
                            step.id
                        ),
                    )
                })?,
            })
        } else {
            None
        };
        steps.push(StepFile {
            id: &step.id,
            description: &step.description,
            domain,
            agent,
            role: step.role.as_deref(),
            after: &step.after,
            acceptance: &step.acceptance,
            tool: scripted.then_some(step.tool.as_str()),
            idempotent: step.idempotent,
            args,
        });
    }
    let file = PlanFile { id: &task.id, goal: &task.goal, steps };
    let body = toml::to_string(&file).map_err(|e| {
        KindError::new(FailureKind::Internal, format!("cannot write the plan file: {e}"))
    })?;
    Ok(format!(
        "# A plan by {}, run {run_id}. Steps without a `tool` are goal steps.\n{body}",
        PLANNER_AGENT
    ))
}

/// The objective split as written: its numbered or bulleted lines (the lines before the first
/// item introduce the list; a line after an item continues it), else its sentences, `;` and
/// `then`. At least one step: the whole objective.
pub(crate) fn split_objective(objective: &str) -> Vec<String> {
    let lines: Vec<&str> = objective.lines().map(str::trim).filter(|l| !l.is_empty()).collect();
    let mut parts: Vec<String> = Vec::new();
    if lines.iter().any(|l| list_item(l).is_some()) {
        let mut started = false;
        for line in &lines {
            match list_item(line) {
                Some(item) => {
                    started = true;
                    parts.push(item.to_owned());
                }
                None if started => {
                    if let Some(last) = parts.last_mut() {
                        last.push(' ');
                        last.push_str(line);
                    }
                }
                None => {}
            }
        }
    } else {
        let text = lines.join(" ");
        for sentence in sentences(&text) {
            parts.extend(split_then(sentence));
        }
    }
    let steps: Vec<String> = parts.iter().map(|p| tidy(p)).filter(|p| !p.is_empty()).collect();
    if steps.is_empty() { vec![tidy(objective)] } else { steps }
}

/// The text of a list item (`1. x`, `2) x`, `(3) x`, `- x`, `* x`, `• x`, `+ x`), if the line
/// is one.
fn list_item(line: &str) -> Option<&str> {
    for bullet in ["- ", "* ", "• ", "+ "] {
        if let Some(rest) = line.strip_prefix(bullet) {
            return Some(rest);
        }
    }
    let inner = line.strip_prefix('(').unwrap_or(line);
    let digits = inner.chars().take_while(char::is_ascii_digit).count();
    if digits == 0 || digits > 3 {
        return None;
    }
    let rest = &inner[digits..];
    let rest = rest.strip_prefix(['.', ')'])?;
    rest.starts_with(char::is_whitespace).then(|| rest.trim_start())
}

/// `text` cut after `.`, `!` or `?` followed by a space, and at `;`.
fn sentences(text: &str) -> Vec<&str> {
    let mut out = Vec::new();
    let mut start = 0;
    let mut chars = text.char_indices().peekable();
    while let Some((i, c)) = chars.next() {
        let end_here = match c {
            ';' => true,
            '.' | '!' | '?' => chars.peek().is_none_or(|(_, next)| next.is_whitespace()),
            _ => false,
        };
        if end_here {
            out.push(&text[start..i]);
            start = i + c.len_utf8();
        }
    }
    out.push(&text[start..]);
    out
}

/// A sentence cut at the word `then` (`a, then b`, `a and then b`, `a then b`).
fn split_then(sentence: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut current: Vec<&str> = Vec::new();
    for word in sentence.split_whitespace() {
        let bare = word.trim_matches(|c: char| !c.is_alphanumeric()).to_ascii_lowercase();
        if bare == "then" {
            if current.last().is_some_and(|w| w.eq_ignore_ascii_case("and")) {
                current.pop();
            }
            out.push(current.join(" "));
            current.clear();
        } else {
            current.push(word);
        }
    }
    out.push(current.join(" "));
    out
}

/// A step's description: spaces collapsed, connectors and trailing punctuation removed, and
/// the first letter capitalised.
fn tidy(part: &str) -> String {
    let text = part.split_whitespace().collect::<Vec<_>>().join(" ");
    let text = text.trim_matches(|c: char| c == ',' || c == ';' || c == '.' || c.is_whitespace());
    let text = text.strip_suffix(" and").unwrap_or(text);
    let text = ["and ", "And "].iter().find_map(|p| text.strip_prefix(p)).unwrap_or(text);
    let mut chars = text.chars();
    match chars.next() {
        Some(first) => first.to_uppercase().chain(chars).collect(),
        None => String::new(),
    }
}
