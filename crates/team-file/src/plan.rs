//! The plan file: [`parse_plan`] into an [`agent_state::Task`] for a team, every check with
//! the position it refers to, and [`goal_plan_toml`], the plan file of a goal in words.

use std::collections::HashMap;
use std::path::Path;

use agent_core::tools::ToolRegistry;
use agent_pool::{AgentSpec, RoleSpec, TeamShape, TeamSpec};
use agent_state::{AgentId, AgentLayer, PlanStep, Role, StepTarget, Task};

use crate::error::{FileError, Seg, Source};
use crate::executor::{kinds, known_kinds};
use crate::limits::{
    MAX_ID_BYTES, MAX_PLAN_FILE_BYTES, MAX_PLAN_STEPS, MAX_PLAN_TEXT_BYTES, MAX_STEP_ARGS_BYTES,
    MAX_TEXT_BYTES,
};
use crate::raw::{RawPlan, RawStep};
use crate::team::list_or_none;

/// Parses and checks a plan file's `text` (the format is in the crate docs) for `team`, whose
/// executors' tools come from `tools`. `path` is used only in error messages. The first
/// mistake found is returned, pointing at where it is written.
///
/// A plan may have no steps (a goal-only task, which the top layer plans) and steps without a
/// `tool` (goal steps, whose executor chooses its tool calls): [`Task::is_scripted`] tells
/// whether any reasoner can carry the task out, or only one that plans.
pub fn parse_plan(
    path: &Path,
    text: &str,
    team: &TeamSpec,
    tools: &ToolRegistry,
) -> Result<Task, FileError> {
    let src = Source { path, text };
    src.check_size(MAX_PLAN_FILE_BYTES, "plan file")?;
    let raw: RawPlan = toml::from_str(text).map_err(|e| src.toml_error(&e))?;
    plan_controls(&src, &raw)?;
    plan_header(&src, &raw)?;
    let leads = leads(team);
    // A crew's lead and a single agent take every domain.
    let any_domain = team.shape() != TeamShape::Layered;
    let agents = by_id(team);
    let check = PlanCheck { src: &src, team, agents: &agents, leads: &leads, tools, any_domain };
    // Step ids and descriptions, all steps together (see MAX_PLAN_TEXT_BYTES).
    let mut text_bytes = 0_usize;
    let mut steps: Vec<PlanStep> = Vec::with_capacity(raw.steps.len());
    for i in 0..raw.steps.len() {
        let step = check.step(&raw, i, &steps, &mut text_bytes)?;
        steps.push(step);
    }
    let task = Task { id: raw.id.get_ref().clone(), goal: raw.goal.get_ref().clone(), steps };
    // Everything `check_request` refuses is caught above with a position; this is a safety net.
    task.check_request().map_err(|e| src.error(raw.id.span(), e.to_string()))?;
    Ok(task)
}

/// The plan's size in steps, its `id` and its `goal`.
fn plan_header(src: &Source<'_>, raw: &RawPlan) -> Result<(), FileError> {
    if let Some(extra) = raw.steps.get(MAX_PLAN_STEPS) {
        return Err(src.error(
            extra.get_ref().id.span(),
            format!(
                "too many steps: this is step {} of {}, and a plan has at most {MAX_PLAN_STEPS}; \
                 split the work into several plans",
                MAX_PLAN_STEPS + 1,
                raw.steps.len()
            ),
        ));
    }
    if raw.id.get_ref().trim().is_empty() {
        return Err(src.error(raw.id.span(), "the plan's `id` must not be empty"));
    }
    if raw.goal.get_ref().trim().is_empty() {
        return Err(src.error(raw.goal.span(), "the plan's `goal` must not be empty"));
    }
    check_len(src, &raw.id, "the plan's `id`", MAX_ID_BYTES)?;
    check_len(src, &raw.goal, "the plan's `goal`", MAX_TEXT_BYTES)?;
    Ok(())
}

/// What a plan's steps are checked against: the file (for positions), the team, its leads and
/// the registered tools.
struct PlanCheck<'c> {
    src: &'c Source<'c>,
    team: &'c TeamSpec,
    /// The team's agents by id (a plan of a thousand steps for a team of a hundred thousand
    /// agents looks an agent up for each step).
    agents: &'c HashMap<&'c str, &'c AgentSpec>,
    leads: &'c [Lead<'c>],
    tools: &'c ToolRegistry,
    /// Every domain goes to the one lead (a crew) or the one agent (a single agent).
    any_domain: bool,
}

impl PlanCheck<'_> {
    /// Step `i` of `raw`, checked; `steps` are those before it, `text_bytes` the ids' and
    /// descriptions' bytes so far.
    fn step(
        &self,
        raw: &RawPlan,
        i: usize,
        steps: &[PlanStep],
        text_bytes: &mut usize,
    ) -> Result<PlanStep, FileError> {
        let src = self.src;
        let step = raw.steps[i].get_ref();
        let id = step.id.get_ref();
        if id.trim().is_empty() {
            return Err(src.error(step.id.span(), "a step's `id` must not be empty"));
        }
        if let Some(earlier) = raw.steps[..i].iter().find(|s| s.get_ref().id.get_ref() == id) {
            let line = src.position(earlier.get_ref().id.span()).0;
            return Err(src.error(
                step.id.span(),
                format!("step id `{id}` is already used on line {line}; step ids must be unique"),
            ));
        }
        check_len(src, &step.id, "a step's `id`", MAX_ID_BYTES)?;
        if let Some(d) = &step.description {
            check_len(src, d, "a step's `description`", MAX_TEXT_BYTES)?;
        }
        let target = step_target(src, step, (self.team, self.agents), self.leads, self.any_domain)?;
        let role = step_role(src, step, self.team)?;
        let description = step.description.as_ref().map(|d| d.get_ref().clone());
        let (tool, description, args) = match &step.tool {
            Some(tool) => {
                let args = self.scripted_args(i, step, tool, &target, role)?;
                let tool = tool.get_ref();
                (tool.clone(), description.unwrap_or_else(|| format!("{id} ({tool})")), args)
            }
            None => (String::new(), self.goal_step(step, &target)?, serde_json::Value::Null),
        };
        *text_bytes += id.len() + description.len();
        if *text_bytes > MAX_PLAN_TEXT_BYTES {
            return Err(src.error(
                step.id.span(),
                format!(
                    "the steps' ids and descriptions come to over {MAX_PLAN_TEXT_BYTES} bytes \
                     (256 KiB) by this step, more than a lead's whiteboard can list; shorten \
                     the descriptions or split the work into several plans"
                ),
            ));
        }
        Ok(PlanStep {
            id: id.clone(),
            description,
            target,
            tool,
            args,
            after: self.after(raw, i, steps)?,
            idempotent: step.idempotent,
            role: role.map(|r| r.name.clone()),
            acceptance: step.acceptance.clone().unwrap_or_default(),
        })
    }

    /// A goal step's description: what to do, without `args`; some executor must reach it.
    fn goal_step(&self, step: &RawStep, target: &StepTarget) -> Result<String, FileError> {
        let src = self.src;
        let id = step.id.get_ref();
        if let Some(d) = step.description.as_ref().filter(|d| d.get_ref().trim().is_empty()) {
            return Err(src.error(
                d.span(),
                "a goal step's `description` must say what to do; it is all its \
                 executor is told (or name the step's `tool` and `args`)",
            ));
        }
        let Some(description) = step.description.as_ref().map(|d| d.get_ref().clone()) else {
            return Err(src.error(
                step.id.span(),
                format!(
                    "step `{id}` names no `tool` and has no `description`: a scripted step \
                     names its `tool` (and `args`), a goal step says in `description` what \
                     to do and its executor's reasoner chooses the tools"
                ),
            ));
        };
        if step.args.is_some() {
            return Err(src.error(
                step.id.span(),
                format!(
                    "step `{id}` has `args` but no `tool`; name the `tool` they are for, or \
                     remove `args` (a goal step's executor chooses its tool calls)"
                ),
            ));
        }
        check_goal_reachable(src, step, target, self.team, self.domain_lead(target))?;
        Ok(description)
    }

    /// Step `i`'s `after`: steps listed before it (`steps`).
    fn after(&self, raw: &RawPlan, i: usize, steps: &[PlanStep]) -> Result<Vec<String>, FileError> {
        let step = raw.steps[i].get_ref();
        let id = step.id.get_ref();
        let mut after = Vec::with_capacity(step.after.len());
        for dep in &step.after {
            let name = dep.get_ref();
            if steps.iter().any(|s| &s.id == name) {
                after.push(name.clone());
                continue;
            }
            let message = if name == id {
                "a step cannot wait for itself".to_owned()
            } else if let Some(later) =
                raw.steps[i..].iter().find(|s| s.get_ref().id.get_ref() == name)
            {
                let line = self.src.position(later.get_ref().id.span()).0;
                format!(
                    "step `{name}` is listed later (line {line}); a step may wait only for steps listed before it"
                )
            } else {
                format!(
                    "no step `{name}` in this plan; a step may wait for a step listed before it ({})",
                    list_or_none(steps.iter().map(|s| s.id.as_str()))
                )
            };
            return Err(self.src.error(dep.span(), message));
        }
        Ok(after)
    }
}

/// The plan file of a task given as a goal in words (`strata run --goal`): its `id` and `goal`
/// and no steps, which [`parse_plan`] reads back as [`Task::goal`]. The goal is written as a
/// TOML string, so any text (quotes, newlines, control characters) reads back the same.
pub fn goal_plan_toml(id: &str, goal: &str) -> String {
    let string = |s: &str| toml::Value::String(s.to_owned()).to_string();
    format!(
        "# A goal in words: the top layer plans the steps.\nid = {}\ngoal = {}\n",
        string(id),
        string(goal)
    )
}

impl PlanCheck<'_> {
    /// A scripted step's `args` as JSON, after checking its tool: registered, held by an executor
    /// the step reaches (or by the step's role), and taking these arguments. The `tool` may also
    /// name an executor kind ([`kind_args`]).
    fn scripted_args(
        &self,
        index: usize,
        step: &RawStep,
        tool: &toml::Spanned<String>,
        target: &StepTarget,
        role: Option<&Role>,
    ) -> Result<serde_json::Value, FileError> {
        let (src, tools) = (self.src, self.tools);
        let name = tool.get_ref();
        if OODA_CALLS.contains(&name.as_str()) {
            // A call only an OODA agent makes: `modify_self` (its arguments a modification,
            // checked here) or `send_message`.
            self.check_reachable(tool, Need::Ooda, target)?;
            let args = match &step.args {
                Some(args) => table_to_json(args)
                    .map_err(|m| src.error(tool.span(), format!("in `args`: {m}")))?,
                None => serde_json::Value::Null,
            };
            if name == agent_ooda::MODIFY_SELF {
                agent_state::ooda::Modification::parse(&args)
                    .map_err(|e| src.error(tool.span(), format!("in `args`: {e}")))?;
            }
            return Ok(args);
        }
        let Some(registered) = tools.get(name) else {
            if kinds().contains(name) {
                if role.is_none_or(|r| r.kind.as_deref() != Some(name.as_str())) {
                    self.check_reachable(tool, Need::Kind, target)?;
                }
                return kind_args(src, index, step, tool);
            }
            return Err(src.error(
                tool.span(),
                format!(
                    "unknown tool `{name}` (available: {}); or an executor kind its executor runs ({})",
                    tools.names().join(", "),
                    known_kinds()
                ),
            ));
        };
        // A lead spawns an agent of the step's role to run it: the role's tools count.
        if !role.is_some_and(|r| r.tools.contains(name)) {
            self.check_reachable(tool, Need::Tool, target)?;
        }
        tool_args(src, step, tool, registered.as_ref())
    }
}

/// A workspace tool's `args` as JSON: within the size of one call, fitting the tool's schema
/// and its own checks.
fn tool_args(
    src: &Source<'_>,
    step: &RawStep,
    tool: &toml::Spanned<String>,
    registered: &dyn agent_core::tools::Tool,
) -> Result<serde_json::Value, FileError> {
    let name = tool.get_ref();
    // `args` has no span of its own (toml 0.8 cannot span a table written with dotted keys,
    // `args.command = "..."`), so its errors point at the step's tool.
    let args = match &step.args {
        Some(args) => {
            table_to_json(args).map_err(|m| src.error(tool.span(), format!("in `args`: {m}")))?
        }
        None => serde_json::Value::Object(serde_json::Map::new()),
    };
    let size = args.to_string().len();
    if size > MAX_STEP_ARGS_BYTES {
        return Err(src.error(
            tool.span(),
            format!(
                "the step's `args` are {size} bytes as JSON, over the limit of \
                 {MAX_STEP_ARGS_BYTES} bytes (8 MiB) for one tool call; split the content \
                 over several steps"
            ),
        ));
    }
    let mut problems = agent_core::tools::validate(registered.schema(), &args);
    if problems.is_empty() {
        problems = registered.check_args(&args);
    }
    if !problems.is_empty() {
        return Err(src.error(
            tool.span(),
            format!("`args` do not fit the tool `{name}`: {}", problems.join("; ")),
        ));
    }
    Ok(args)
}

/// Refuses `value` (`what`, such as "a step's `description`") when it is over `max` bytes,
/// pointing at it.
fn check_len(
    src: &Source<'_>,
    value: &toml::Spanned<String>,
    what: &str,
    max: usize,
) -> Result<(), FileError> {
    let len = value.get_ref().len();
    if len <= max {
        return Ok(());
    }
    let hint = if max == MAX_TEXT_BYTES {
        "say what to do in fewer words; content (what a step writes) goes in its `args`"
    } else {
        "use a shorter one"
    };
    Err(src.error(value.span(), format!("{what} is {len} bytes, over the limit of {max}; {hint}")))
}

/// The `args` of a step whose `tool` is an executor kind (the `index`th step):
/// `objective`, what the run should do (a string, not empty, at most
/// [`agent_executor::MAX_OBJECTIVE_BYTES`]), and optionally `inputs`, an object the kind's
/// `inputs_schema` accepts (at most [`agent_executor::MAX_INPUTS_BYTES`] as JSON). Each error
/// points at its value when the file lets it be found, else at the `tool`.
fn kind_args(
    src: &Source<'_>,
    index: usize,
    step: &RawStep,
    tool: &toml::Spanned<String>,
) -> Result<serde_json::Value, FileError> {
    let kind = tool.get_ref();
    let at = |key: &str| {
        let path = [Seg::Key("steps"), Seg::Index(index), Seg::Key("args"), Seg::Key(key)];
        src.locate(&path).unwrap_or(tool.span())
    };
    let form = format!(
        "a step running the executor kind `{kind}` has `args = {{ objective = \"what to do\", inputs = {{ ... }} }}` (`inputs` optional)"
    );
    let empty = toml::Table::new();
    let args = step.args.as_ref().unwrap_or(&empty);
    if let Some(other) = args.keys().find(|k| !matches!(k.as_str(), "objective" | "inputs")) {
        return Err(src.error(at(other), format!("unknown argument `{other}`; {form}")));
    }
    let objective = match args.get("objective") {
        None => return Err(src.error(tool.span(), format!("`args` has no `objective`; {form}"))),
        Some(toml::Value::String(o)) if o.trim().is_empty() => {
            return Err(src.error(
                at("objective"),
                format!("the `objective` is empty: say in words what the `{kind}` run should do"),
            ));
        }
        Some(toml::Value::String(o)) if o.len() > agent_executor::MAX_OBJECTIVE_BYTES => {
            return Err(src.error(
                at("objective"),
                format!(
                    "the `objective` is {} bytes, over the limit of {}: shorten it, or put the material in a workspace file and name it in the objective",
                    o.len(),
                    agent_executor::MAX_OBJECTIVE_BYTES
                ),
            ));
        }
        Some(toml::Value::String(o)) => o.clone(),
        Some(_) => {
            return Err(src.error(at("objective"), format!("the `objective` is a string; {form}")));
        }
    };
    let mut out = serde_json::Map::new();
    out.insert("objective".into(), serde_json::Value::String(objective));
    if let Some(inputs) = args.get("inputs") {
        let toml::Value::Table(table) = inputs else {
            return Err(src.error(at("inputs"), format!("`inputs` is a table; {form}")));
        };
        let json = table_to_json(table).map_err(|m| src.error(at("inputs"), m))?;
        let size = json.to_string().len();
        if size > agent_executor::MAX_INPUTS_BYTES {
            return Err(src.error(
                at("inputs"),
                format!(
                    "`inputs` are {size} bytes as JSON, over the limit of {}; put large material in a workspace file and name it",
                    agent_executor::MAX_INPUTS_BYTES
                ),
            ));
        }
        let schema = kinds().get(kind).map(|k| k.inputs_schema()).unwrap_or_default();
        let problems = agent_core::tools::validate(&schema, &json);
        if !problems.is_empty() {
            return Err(src.error(
                at("inputs"),
                format!("`inputs` do not fit the kind `{kind}`: {}", problems.join("; ")),
            ));
        }
        out.insert("inputs".into(), json);
    }
    Ok(serde_json::Value::Object(out))
}

/// The step's `role`, if it names one: a bottom role of the team.
fn step_role<'t>(
    src: &Source<'_>,
    step: &RawStep,
    team: &'t TeamSpec,
) -> Result<Option<&'t Role>, FileError> {
    let Some(role) = &step.role else {
        return Ok(None);
    };
    let name = role.get_ref();
    let bottom = || list_or_none(team.roles.of_layer(AgentLayer::Bottom).map(|r| r.name.as_str()));
    match team.roles.get(name) {
        Some(found) if found.layer == AgentLayer::Bottom => Ok(Some(found)),
        Some(found) => Err(src.error(
            role.span(),
            format!(
                "`{name}` is a {} role; a step's `role` names a bottom role, the agent that does the step ({})",
                found.layer,
                bottom()
            ),
        )),
        None if team.roles.is_empty() => Err(src.error(
            role.span(),
            format!(
                "the team has no roles, so a step cannot ask for the role `{name}`; remove `role`, or define it in the team file's [[roles]]"
            ),
        )),
        None => Err(src.error(
            role.span(),
            format!(
                "unknown role `{name}`; a step's `role` names a bottom role of the team ({})",
                bottom()
            ),
        )),
    }
}

/// Checks that a goal step reaches some executor, unless the team has roles (a lead may then
/// spawn the step's workers).
fn check_goal_reachable(
    src: &Source<'_>,
    step: &RawStep,
    target: &StepTarget,
    team: &TeamSpec,
    (leads, domain_lead): (&[Lead<'_>], Option<&Lead<'_>>),
) -> Result<(), FileError> {
    if !team.roles.is_empty() {
        return Ok(());
    }
    let (reached, place, span) = match (target, &step.domain, &step.agent) {
        (StepTarget::Domain(domain), Some(value), _) => {
            let lead = domain_lead;
            let name = lead.map_or("", |l| l.id.as_str());
            (
                lead.is_some_and(|l| !l.executors.is_empty()),
                format!("under the lead `{name}` of the domain `{domain}`"),
                value.span(),
            )
        }
        (StepTarget::Agent(id), _, Some(value)) => match leads.iter().find(|l| l.id == id) {
            Some(lead) => {
                (!lead.executors.is_empty(), format!("under the lead `{id}`"), value.span())
            }
            None => (true, String::new(), value.span()),
        },
        _ => (
            leads.iter().any(|l| !l.executors.is_empty()),
            "in the team".to_owned(),
            step.id.span(),
        ),
    };
    if reached {
        return Ok(());
    }
    Err(src.error(span, format!("there is no executor {place} to carry out the step")))
}

/// The goal and step descriptions are free text; they are escaped where they are printed.
fn plan_controls(src: &Source<'_>, raw: &RawPlan) -> Result<(), FileError> {
    src.no_control(&raw.id, "the plan's `id`")?;
    for step in &raw.steps {
        let step = step.get_ref();
        src.no_control(&step.id, "a step's `id`")?;
        for (value, what) in [
            (&step.tool, "`tool`"),
            (&step.domain, "`domain`"),
            (&step.agent, "`agent`"),
            (&step.role, "`role`"),
        ] {
            if let Some(v) = value {
                src.no_control(v, what)?;
            }
        }
        for v in &step.after {
            src.no_control(v, "a step in `after`")?;
        }
    }
    Ok(())
}

// ---------------------------------------------------------------------------------------------
// Plan checks.

/// A lead and its executors, from a team.
pub(crate) struct Lead<'t> {
    pub(crate) id: &'t AgentId,
    pub(crate) domain: &'t str,
    /// Each executor's id, tools and kind.
    pub(crate) executors: Vec<(&'t AgentId, &'t [String], Option<&'t str>)>,
}

pub(crate) fn leads(team: &TeamSpec) -> Vec<Lead<'_>> {
    // A single agent is its own lead: every step is its.
    if team.shape() == TeamShape::Single
        && let Some(agent) = team.agents.first()
        && let RoleSpec::Bottom(b) = &agent.role
    {
        let kind = b.kind.as_deref().or(b.ooda.as_ref().map(|_| OODA_KIND));
        return vec![Lead {
            id: &agent.config.id,
            domain: "",
            executors: vec![(&agent.config.id, &b.tools[..], kind)],
        }];
    }
    // Each lead's executors in one pass over the team, in the team's order.
    type Executor<'t> = (&'t AgentId, &'t [String], Option<&'t str>);
    let mut under: HashMap<&AgentId, Vec<Executor<'_>>> = HashMap::new();
    for a in &team.agents {
        if let (Some(lead), RoleSpec::Bottom(b)) = (&a.config.supervisor, &a.role) {
            let kind = b.kind.as_deref().or(b.ooda.as_ref().map(|_| OODA_KIND));
            under.entry(lead).or_default().push((&a.config.id, &b.tools[..], kind));
        }
    }
    team.agents
        .iter()
        .filter_map(|lead| match &lead.role {
            RoleSpec::Mid(m) => Some(Lead {
                id: &lead.config.id,
                domain: &m.domain,
                executors: under.get(&lead.config.id).cloned().unwrap_or_default(),
            }),
            _ => None,
        })
        .collect()
}

/// The agents of `team` by id; the first of an id listed twice (a team refuses that).
fn by_id(team: &TeamSpec) -> HashMap<&str, &AgentSpec> {
    let mut agents = HashMap::with_capacity(team.agents.len());
    for agent in &team.agents {
        agents.entry(agent.config.id.as_str()).or_insert(agent);
    }
    agents
}

fn step_target(
    src: &Source<'_>,
    step: &RawStep,
    (team, agents): (&TeamSpec, &HashMap<&str, &AgentSpec>),
    leads: &[Lead<'_>],
    any_domain: bool,
) -> Result<StepTarget, FileError> {
    match (&step.domain, &step.agent) {
        (Some(_), Some(agent)) => Err(src.error(
            agent.span(),
            "a step names either a `domain` or an `agent`, not both; remove one",
        )),
        (Some(domain), None) => {
            if any_domain || leads.iter().any(|l| l.domain == domain.get_ref()) {
                Ok(StepTarget::Domain(domain.get_ref().clone()))
            } else {
                Err(src.error(
                    domain.span(),
                    format!(
                        "no lead has the domain `{}`; the team's domains: {}",
                        domain.get_ref(),
                        list_or_none(leads.iter().map(|l| l.domain))
                    ),
                ))
            }
        }
        (None, Some(agent)) => {
            let name = agent.get_ref();
            let found = agents.get(name.as_str());
            match found.map(|a| a.config.layer) {
                Some(AgentLayer::Mid | AgentLayer::Bottom) => {
                    Ok(StepTarget::Agent(AgentId::from(name.as_str())))
                }
                layer => {
                    let what = match layer {
                        Some(_) => format!("`{name}` is a top power, which runs no steps"),
                        None => format!("unknown agent `{name}`"),
                    };
                    let candidates = team
                        .agents
                        .iter()
                        .filter(|a| a.config.layer != AgentLayer::Top)
                        .map(|a| a.config.id.as_str());
                    Err(src.error(
                        agent.span(),
                        format!(
                            "{what}; a step's `agent` is a lead or an executor: {}",
                            list_or_none(candidates)
                        ),
                    ))
                }
            }
        }
        (None, None) => Ok(StepTarget::Any),
    }
}

/// What a scripted step's `tool` asks of its executor.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Need {
    /// The workspace tool of that name.
    Tool,
    /// The executor kind of that name.
    Kind,
    /// An OODA agent (the call is one of [`OODA_CALLS`]).
    Ooda,
}

/// The calls of an OODA agent's loop a plan step may name.
const OODA_CALLS: [&str; 2] = [agent_ooda::MODIFY_SELF, agent_ooda::SEND_MESSAGE];

/// How the plan checks see an OODA executor: as an executor of this kind.
const OODA_KIND: &str = "ooda";

/// An executor as the plan checks see it: its id, tools and kind (an OODA executor's is
/// [`OODA_KIND`]).
type ExecutorView<'t> = (&'t AgentId, &'t [String], Option<&'t str>);

/// Whether an executor with `tools` and `kind` meets `need` for `tool`.
fn fits(need: Need, tool: &str, tools: &[String], kind: Option<&str>) -> bool {
    match need {
        Need::Tool => tools.iter().any(|t| t == tool),
        Need::Kind => kind == Some(tool),
        Need::Ooda => kind == Some(OODA_KIND),
    }
}

impl<'c> PlanCheck<'c> {
    /// The team's leads, and the one a step for a domain goes to: the lead of that domain; in
    /// a crew, its lead; for a single agent, the agent.
    fn domain_lead(&self, target: &StepTarget) -> (&'c [Lead<'c>], Option<&'c Lead<'c>>) {
        let lead = match target {
            StepTarget::Domain(_) if self.any_domain => self.leads.first(),
            StepTarget::Domain(domain) => self.leads.iter().find(|l| l.domain == domain),
            _ => None,
        };
        (self.leads, lead)
    }

    /// Checks that some executor the step can reach has its `tool` (or, for [`Need::Kind`],
    /// runs that kind).
    fn check_reachable(
        &self,
        tool: &toml::Spanned<String>,
        need: Need,
        target: &StepTarget,
    ) -> Result<(), FileError> {
        let span = tool.span();
        let name = tool.get_ref();
        let leads = self.leads;
        let (place, executors): (String, Vec<ExecutorView<'_>>) = match target {
            StepTarget::Domain(domain) => {
                let lead = self.domain_lead(target).1;
                let executors = lead.map(|l| l.executors.clone()).unwrap_or_default();
                let lead_name = lead.map_or("", |l| l.id.as_str());
                let place = match lead {
                    // A single agent is its own lead, of no domain.
                    Some(l) if self.any_domain && l.domain.is_empty() => "in the team".to_owned(),
                    _ if self.any_domain => format!("under the lead `{lead_name}`"),
                    _ => format!("under the lead `{lead_name}` of the domain `{domain}`"),
                };
                (place, executors)
            }
            StepTarget::Agent(id) => match leads.iter().find(|l| l.id == id) {
                Some(lead) => (format!("under the lead `{id}`"), lead.executors.clone()),
                None => return self.check_executor(id, tool, need),
            },
            StepTarget::Any => {
                ("in the team".to_owned(), leads.iter().flat_map(|l| l.executors.clone()).collect())
            }
        };
        if executors.iter().any(|(_, tools, kind)| fits(need, name, tools, *kind)) {
            return Ok(());
        }
        Err(self.src.error(span, none_fits(need, name, &place, &executors)))
    }

    /// Checks that executor `id`, named by the step, meets `need` for `tool`.
    fn check_executor(
        &self,
        id: &AgentId,
        tool: &toml::Spanned<String>,
        need: Need,
    ) -> Result<(), FileError> {
        let name = tool.get_ref();
        let executor = self.agents.get(id.as_str());
        let (tools, kind) = executor
            .and_then(|a| match &a.role {
                RoleSpec::Bottom(b) => {
                    Some((&b.tools[..], b.kind.as_deref().or(b.ooda.as_ref().map(|_| OODA_KIND))))
                }
                _ => None,
            })
            .unwrap_or_default();
        if fits(need, name, tools, kind) {
            return Ok(());
        }
        let message = match need {
            Need::Tool => format!(
                "executor `{id}` does not have the tool `{name}`; it has: {}",
                list_or_none(tools.iter().map(String::as_str))
            ),
            Need::Kind => format!(
                "executor `{id}` does not run the executor kind `{name}` (its kind: {}); give it `kind = \"{name}\"` in the team file",
                kind.unwrap_or("none")
            ),
            Need::Ooda => format!(
                "`{name}` is a call of an OODA agent, and executor `{id}` is not one; give it `ooda = {{ ... }}` in the team file"
            ),
        };
        Err(self.src.error(tool.span(), message))
    }
}

/// Why none of `executors` (those `place` names) meets `need` for `tool`.
fn none_fits(need: Need, tool: &str, place: &str, executors: &[ExecutorView<'_>]) -> String {
    if executors.is_empty() {
        return format!("there is no executor {place} to run `{tool}`");
    }
    let mut have: Vec<&str> = match need {
        Need::Tool => executors.iter().flat_map(|(_, t, _)| t.iter().map(String::as_str)).collect(),
        Need::Kind | Need::Ooda => executors.iter().filter_map(|(_, _, k)| *k).collect(),
    };
    have.sort_unstable();
    have.dedup();
    match need {
        Need::Tool => {
            format!("no executor {place} has the tool `{tool}`; they have: {}", have.join(", "))
        }
        Need::Kind => format!(
            "no executor {place} runs the executor kind `{tool}` (their kinds: {}); give one `kind = \"{tool}\"` in the team file",
            list_or_none(have.into_iter())
        ),
        Need::Ooda => format!(
            "`{tool}` is a call of an OODA agent, and no executor {place} is one; give one `ooda = {{ ... }}` in the team file"
        ),
    }
}

/// The JSON of a TOML table; datetimes become strings.
pub(crate) fn table_to_json(table: &toml::Table) -> Result<serde_json::Value, String> {
    let mut map = serde_json::Map::with_capacity(table.len());
    for (key, value) in table {
        map.insert(key.clone(), value_to_json(value)?);
    }
    Ok(serde_json::Value::Object(map))
}

fn value_to_json(value: &toml::Value) -> Result<serde_json::Value, String> {
    use serde_json::Value as J;
    Ok(match value {
        toml::Value::String(s) => J::String(s.clone()),
        toml::Value::Integer(i) => J::from(*i),
        toml::Value::Float(f) => serde_json::Number::from_f64(*f)
            .map(J::Number)
            .ok_or_else(|| format!("{f} cannot be passed to a tool; use a finite number"))?,
        toml::Value::Boolean(b) => J::Bool(*b),
        toml::Value::Datetime(d) => J::String(d.to_string()),
        toml::Value::Array(items) => {
            J::Array(items.iter().map(value_to_json).collect::<Result<_, _>>()?)
        }
        toml::Value::Table(t) => table_to_json(t)?,
    })
}
