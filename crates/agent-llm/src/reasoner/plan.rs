//! The plan question: a task's goal in words into goal steps and the leads to create, asked so
//! that a small model can answer it (a short prompt, one worked example written in the order
//! the answer's grammar makes the model write, a schema that bounds the answer) and checked so
//! that every problem of an invalid plan goes back to the model by name.

use std::fmt::Write as _;

use agent_core::Plan;
use agent_state::{AgentLayer, LeadRequest, PlanStep, Role, RoleBook, StepTarget, Task};
use serde_json::{Value, json};

use crate::model_text::{one_line, shown, stripped};
use crate::structured::value_text;

/// Most characters of a plan step's id.
pub(crate) const STEP_ID_MAX: usize = 64;

/// Most steps a plan may have. A lead breaks its steps into pieces itself, so a plan names the
/// big pieces of a goal; and a small model that repeats itself stops here.
pub(crate) const MAX_STEPS: usize = 8;

/// Most characters of a step's description or acceptance check: a goal of a few sentences
/// fits, so a plan of one step can ask for the whole goal.
const TEXT_CHARS: u64 = 600;

/// Most characters of a domain.
const DOMAIN_CHARS: u64 = 32;

/// The order a step's properties are written in (the grammar follows the schema's `required`;
/// `role`, optional, comes last): what the step is, then where it goes and what it waits for.
const STEP_ORDER: [&str; 5] = ["id", "description", "domain", "after", "acceptance"];

/// A plan question for one task and team.
pub(crate) struct PlanQuestion<'a> {
    /// What the model is asked.
    pub(crate) prompt: String,
    /// The answer's schema.
    pub(crate) schema: Value,
    /// The lead (mid) roles; none: the plan has steps only.
    mids: Vec<&'a Role>,
    /// The worker (bottom) role names.
    workers: Vec<&'a str>,
    /// The domains of the leads the team has already (see [`Persona::domains`]).
    ///
    /// [`Persona::domains`]: agent_core::Persona::domains
    domains: &'a [String],
}

impl<'a> PlanQuestion<'a> {
    /// The question for `task`, with the leads and workers of `roles`, and the `domains` of
    /// the leads the team has already.
    pub(crate) fn new(task: &Task, roles: &'a RoleBook, domains: &'a [String]) -> Self {
        let mids: Vec<&Role> = roles.of_layer(AgentLayer::Mid).collect();
        let worker_roles: Vec<&Role> = roles.of_layer(AgentLayer::Bottom).collect();
        let mid_names: Vec<&str> = mids.iter().map(|r| r.name.as_str()).collect();
        let workers: Vec<&str> = worker_roles.iter().map(|r| r.name.as_str()).collect();
        let max_leads = mids
            .iter()
            .map(|r| r.max_instances.map_or(MAX_STEPS, |n| n as usize))
            .sum::<usize>()
            .clamp(1, MAX_STEPS);
        let schema = plan_schema(&mid_names, &workers, max_leads, domains);

        let mut prompt = format!("Plan task {}.\nGoal: {}\n", task.id, task.goal.trim());
        if !mids.is_empty() {
            prompt.push_str("Leads you may create, each for one domain (an area of work):\n");
            for r in &mids {
                let _ = writeln!(prompt, "- {}: {}", r.name, super::described(&r.description));
            }
        }
        if !worker_roles.is_empty() {
            prompt.push_str("Workers, one of which a step may name as its `role`:\n");
            for r in &worker_roles {
                let tools = if r.tools.is_empty() {
                    String::new()
                } else {
                    format!(" (tools: {})", r.tools.join(", "))
                };
                let _ =
                    writeln!(prompt, "- {}: {}{tools}", r.name, super::described(&r.description));
            }
        }
        if !task.steps.is_empty() {
            prompt.push_str(
                "The task lists these steps already; your plan replaces the list, so keep those \
                 still needed (with their ids):\n",
            );
            for s in &task.steps {
                let tool =
                    if s.is_scripted() { format!(" (tool `{}`)", s.tool) } else { String::new() };
                let after = if s.after.is_empty() {
                    String::new()
                } else {
                    format!(" after {}", s.after.join(", "))
                };
                let _ = writeln!(prompt, "- {}: {}{tool}{after}", s.id, s.description);
            }
        }
        prompt.push_str(
            "Each step says what to achieve (whoever does it chooses the tools), its `domain`, \
             the ids of the earlier steps it waits for (`after`: none for the first step; never \
             the step itself or a later one) and how to check it (`acceptance`). Step ids are \
             letters, digits, `-` and `_`, each used once.\n",
        );
        domain_rules(&mut prompt, !mids.is_empty(), domains);
        let _ = write!(
            prompt,
            "A goal that is one piece of work is one step, such as:\n{}\nSplit a goal into a few \
             steps when parts of it need different workers or must wait for other parts.",
            value_text(&example(task, &mids, &workers, domains), &schema)
        );
        Self { prompt, schema, mids, workers, domains }
    }

    /// Checks an answer beyond its schema and turns it into a [`Plan`] of goal steps; an
    /// invalid one gives every problem, named (see [`check_plan`]).
    pub(crate) fn check(&self, v: &Value) -> Result<Plan, String> {
        check_plan(v, &self.mids, &self.workers, self.domains)
    }
}

/// What the question says of a step's domain: one of the team's leads' (`domains`), one of
/// the leads the plan proposes (with `lead_roles` to create them), or free.
fn domain_rules(prompt: &mut String, lead_roles: bool, domains: &[String]) {
    if !domains.is_empty() {
        let listed: Vec<String> = domains.iter().map(|d| format!("`{d}`")).collect();
        let _ = writeln!(
            prompt,
            "The team has a lead for each of these domains already; a step for one of \
             them goes to its lead: {}.",
            listed.join(", ")
        );
        prompt.push_str(if lead_roles {
            "Propose a lead in `leads` only for another domain; every step's domain is one \
             of these or of a lead you propose.\n"
        } else {
            "Every step's domain is one of these.\n"
        });
    } else if lead_roles {
        prompt.push_str(
            "Propose one lead per domain in `leads`; every step's domain is one of theirs.\n",
        );
    } else {
        prompt.push_str(
            "A step's domain is a short name for its area of work, such as `docs` or `code`.\n",
        );
    }
}

/// The worked example: the goal as one step, for the first of the team's leads (`domains`)
/// or else the first lead role that can spawn a worker (its domain the lead's name without
/// `_lead`), and that worker. A model that only copies it plans a valid step that asks for
/// the whole goal.
fn example(task: &Task, mids: &[&Role], workers: &[&str], domains: &[String]) -> Value {
    // With fixed leads, the example's step goes to the first (it proposes no lead); else to
    // the first lead role that can spawn a worker, proposed as the example's one lead.
    let (domain, lead, worker) = if let Some(domain) = domains.first() {
        (domain.as_str(), None, workers.first().copied())
    } else {
        let lead = mids
            .iter()
            .find(|m| m.enabled_agents.iter().any(|w| workers.contains(&w.as_str())))
            .or(mids.first());
        let worker = lead
            .and_then(|m| m.enabled_agents.iter().find(|w| workers.contains(&w.as_str())))
            .map(String::as_str)
            .or(workers.first().copied());
        let domain = lead
            .map(|l| l.name.strip_suffix("_lead").filter(|d| !d.is_empty()).unwrap_or(&l.name))
            .unwrap_or("work");
        (domain, lead, worker)
    };
    let goal: String = one_line(task.goal.trim(), TEXT_CHARS as usize);
    let mut step = json!({
        "id": "step-1",
        "description": goal,
        "domain": domain,
        "after": [],
        "acceptance": "what the goal asks for is done"
    });
    if let Some(worker) = worker {
        step["role"] = json!(worker);
    }
    match lead {
        Some(lead) => json!({"leads": [{"role": lead.name, "domain": domain}], "steps": [step]}),
        None if mids.is_empty() => json!({"steps": [step]}),
        None => json!({"leads": [], "steps": [step]}),
    }
}

/// The JSON Schema of a plan answer: leads of the mid roles `mid_names` (none without them),
/// at most `max_leads` (none needed when the team has leads for `domains` already), and one
/// to [`MAX_STEPS`] goal steps, each naming one of the `worker_names` roles or none; without
/// mid roles, a team with leads already has each step's domain one of their `domains`.
/// Strings and arrays are bounded, so a model decoding under its grammar cannot run on.
pub(crate) fn plan_schema(
    mid_names: &[&str],
    worker_names: &[&str],
    max_leads: usize,
    domains: &[String],
) -> Value {
    let id = json!({
        "type": "string",
        "minLength": 1,
        "maxLength": STEP_ID_MAX,
        "pattern": format!("^[A-Za-z0-9_-]{{1,{STEP_ID_MAX}}}$")
    });
    let mut step_properties = json!({
        "id": id,
        "description": {"type": "string", "minLength": 1, "maxLength": TEXT_CHARS},
        "domain": {"type": "string", "minLength": 1, "maxLength": DOMAIN_CHARS},
        "after": {"type": "array", "items": id, "maxItems": MAX_STEPS - 1},
        "acceptance": {"type": "string", "maxLength": TEXT_CHARS}
    });
    if !worker_names.is_empty() {
        let mut allowed: Vec<Value> = worker_names.iter().map(|n| json!(n)).collect();
        allowed.push(Value::Null);
        step_properties["role"] = json!({ "enum": allowed });
    }
    if mid_names.is_empty() && !domains.is_empty() {
        step_properties["domain"] = json!({ "enum": domains });
    }
    let steps_schema = json!({
        "type": "array",
        "minItems": 1,
        "maxItems": MAX_STEPS,
        "items": {
            "type": "object",
            "properties": step_properties,
            "required": STEP_ORDER
        }
    });
    if mid_names.is_empty() {
        return json!({
            "type": "object",
            "properties": {"steps": steps_schema},
            "required": ["steps"]
        });
    }
    json!({
        "type": "object",
        "properties": {
            "leads": {
                "type": "array",
                "minItems": usize::from(domains.is_empty()),
                "maxItems": max_leads,
                "items": {
                    "type": "object",
                    "properties": {
                        "role": {"enum": mid_names},
                        "domain": {"type": "string", "minLength": 1, "maxLength": DOMAIN_CHARS}
                    },
                    "required": ["role", "domain"]
                }
            },
            "steps": steps_schema
        },
        "required": ["leads", "steps"]
    })
}

/// Checks a plan answer beyond its schema and turns it into a [`Plan`] of goal steps. Every
/// problem is reported, by name, for the repair: lead roles that are not mid roles, two leads
/// for a domain, no steps, step ids invalid or used twice, a step for a domain no lead leads, a
/// step waiting for itself, for a later step or for no step, a step role that is not a worker
/// role or not one its lead can spawn. Without mid roles the plan has steps only, their domains
/// free text, or one of `domains` when the team has leads for them already (which a step may
/// also name with mid roles).
pub(crate) fn check_plan(
    v: &Value,
    mids: &[&Role],
    worker_roles: &[&str],
    domains: &[String],
) -> Result<Plan, String> {
    let mut check = PlanAnswer {
        mids,
        worker_roles,
        domains,
        leads: Vec::new(),
        ids: Vec::new(),
        steps: Vec::new(),
        problems: Vec::new(),
    };
    if !mids.is_empty() {
        check.read_leads(v);
    }
    let items = v.get("steps").and_then(Value::as_array).map(Vec::as_slice).unwrap_or_default();
    if items.is_empty() {
        check.problems.push("the plan has no steps; give at least one".to_owned());
    }
    check.ids = items.iter().map(|item| text(item, "id")).collect();
    check.steps.reserve(items.len());
    for (index, item) in items.iter().enumerate() {
        let step = check.read_step(index, item);
        check.steps.push(step);
    }
    let PlanAnswer { steps, leads, problems, .. } = check;
    if problems.is_empty() { Ok(Plan { steps, leads }) } else { Err(super::listed(problems)) }
}

/// The trimmed text of `item`'s `key` (empty if it has none).
fn text(item: &Value, key: &str) -> String {
    item.get(key).and_then(Value::as_str).map(str::trim).unwrap_or_default().to_owned()
}

/// A plan answer being checked: what it is checked against, what is read so far, and every
/// problem found.
struct PlanAnswer<'a> {
    /// The team's mid roles (none: the plan has steps only, their domains free text).
    mids: &'a [&'a Role],
    worker_roles: &'a [&'a str],
    /// The domains of the team's leads.
    domains: &'a [String],
    leads: Vec<LeadRequest>,
    /// Every step's id, in order.
    ids: Vec<String>,
    /// The steps read so far.
    steps: Vec<PlanStep>,
    problems: Vec<String>,
}

impl PlanAnswer<'_> {
    /// The plan's leads: mid roles, one per domain.
    fn read_leads(&mut self, v: &Value) {
        let mid_roles: Vec<&str> = self.mids.iter().map(|r| r.name.as_str()).collect();
        for lead in v.get("leads").and_then(Value::as_array).into_iter().flatten() {
            let (role, domain) = (text(lead, "role"), text(lead, "domain"));
            if !mid_roles.contains(&role.as_str()) {
                self.problems.push(format!(
                    "lead role {} is not a lead (mid) role; use one of: {}",
                    shown(&role),
                    mid_roles.join(", ")
                ));
            }
            if domain.is_empty() {
                self.problems.push(format!("the lead of role {} has no domain", shown(&role)));
            } else if self.leads.iter().any(|l| l.domain == domain && l.role == role) {
                continue; // the same lead written twice: once is what was meant
            } else if self.leads.iter().any(|l| l.domain == domain) {
                self.problems
                    .push(format!("two leads for domain {}; one lead per domain", shown(&domain)));
            } else if self.domains.contains(&domain) {
                self.problems.push(format!(
                    "the team has a lead for domain {} already; give its steps that domain \
                     and propose no lead for it",
                    shown(&domain)
                ));
            }
            self.leads.push(LeadRequest { role, domain });
        }
    }

    /// Step `index`, `item`, as a goal step.
    fn read_step(&mut self, index: usize, item: &Value) -> PlanStep {
        let id = self.ids[index].clone();
        let name = shown(&id);
        let valid_id = !id.is_empty()
            && id.len() <= STEP_ID_MAX
            && id.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_');
        if !valid_id {
            self.problems.push(format!(
                "step id {name} is not valid: use 1 to {STEP_ID_MAX} ASCII letters, digits, `-` and `_`"
            ));
        } else if self.steps.iter().any(|s| s.id == id) {
            self.problems.push(format!("step id {name} is used twice; step ids must be unique"));
        }
        let description = stripped(&text(item, "description"));
        if description.is_empty() {
            self.problems.push(format!("step {name} has no description"));
        }
        let domain = text(item, "domain");
        if domain.is_empty() {
            self.problems.push(format!("step {name} has no domain"));
        } else if (!self.mids.is_empty() || !self.domains.is_empty())
            && !self.leads.iter().any(|l| l.domain == domain)
            && !self.domains.contains(&domain)
        {
            let led: Vec<&str> = (self.domains.iter().map(String::as_str))
                .chain(self.leads.iter().map(|l| l.domain.as_str()))
                .collect();
            self.problems.push(if self.mids.is_empty() {
                format!(
                    "step {name} is for domain {}, which no lead of the team leads; use one \
                     of: {}",
                    shown(&domain),
                    led.join(", ")
                )
            } else {
                format!(
                    "step {name} is for domain {}, which none of your leads leads; propose a \
                     lead for it or use one of your leads' domains ({})",
                    shown(&domain),
                    if led.is_empty() { "you proposed none".to_owned() } else { led.join(", ") }
                )
            });
        }
        let after = self.read_after(index, item, &name);
        let role = self.read_role(item, &name, &domain);
        PlanStep {
            id,
            description,
            target: StepTarget::Domain(domain),
            tool: String::new(),
            args: Value::Null,
            after,
            idempotent: false,
            role,
            acceptance: stripped(&text(item, "acceptance")),
        }
    }

    /// Step `index`'s `after`: steps listed before it, each once.
    fn read_after(&mut self, index: usize, item: &Value, name: &str) -> Vec<String> {
        let id = &self.ids[index];
        let mut after: Vec<String> = Vec::new();
        for earlier in item.get("after").and_then(Value::as_array).into_iter().flatten() {
            let earlier = earlier.as_str().map(str::trim).unwrap_or_default();
            let problem = if earlier == id {
                Some(format!(
                    "step {name} waits for itself; `after` names only steps listed before it"
                ))
            } else if self.ids[index + 1..].iter().any(|later| later == earlier) {
                Some(format!(
                    "step {name} waits for {}, which comes after it; list {} first, or leave \
                     it out of `after`",
                    shown(earlier),
                    shown(earlier)
                ))
            } else if !self.steps.iter().any(|s| s.id == earlier) {
                Some(format!(
                    "step {name} waits for {}, which is no step of the plan; `after` names \
                     only steps listed before it",
                    shown(earlier)
                ))
            } else {
                None
            };
            match problem {
                Some(problem) => self.problems.push(problem),
                None if !after.iter().any(|a| a == earlier) => after.push(earlier.to_owned()),
                None => {}
            }
        }
        after
    }

    /// A step's `role`: a worker role its lead (of `domain`) can spawn.
    fn read_role(&mut self, item: &Value, name: &str, domain: &str) -> Option<String> {
        let role = Some(text(item, "role")).filter(|r| !r.is_empty())?;
        let worker_roles = self.worker_roles;
        let lead = self.leads.iter().find(|l| l.domain == domain);
        if !worker_roles.contains(&role.as_str()) {
            self.problems.push(if worker_roles.is_empty() {
                format!(
                    "step {name} names role {}, but there are no worker roles; leave `role` out",
                    shown(&role)
                )
            } else {
                format!(
                    "step {name} names role {}, which is not a worker (bottom) role; use \
                     one of: {}",
                    shown(&role),
                    worker_roles.join(", ")
                )
            });
        } else if let Some(lead_role) = lead
            .and_then(|l| self.mids.iter().find(|m| m.name == l.role))
            .filter(|m| !m.enabled_agents.is_empty())
            && !lead_role.enabled_agents.contains(&role)
        {
            self.problems.push(format!(
                "step {name} names role {}, which its lead ({}, domain {}) cannot spawn; \
                 use one of: {}",
                shown(&role),
                lead_role.name,
                shown(domain),
                lead_role.enabled_agents.join(", ")
            ));
        }
        Some(role)
    }
}
