//! Team and plan files: the TOML a person writes, parsed into a [`TeamSpec`] and a [`Task`].
//!
//! This module does no I/O: the caller reads the file and passes its path (used only in
//! messages) and its text. Every error, from invalid TOML to a step whose tool no executor has,
//! is a [`FileError`] that points at the offending value as `path:line:column: message` and says
//! what is expected.
//!
//! Key items: [`parse_team`] → [`TeamFile`], [`parse_plan`] → [`Task`], [`default_team`] (the
//! team used without `--team`), and [`example_team_toml`] / [`example_plan_toml`] (what
//! `strata init` writes).
//!
//! # Limits
//!
//! Each is refused with the position where it is passed: a plan file over
//! [`MAX_PLAN_FILE_BYTES`] (16 MiB), a team file over [`MAX_TEAM_FILE_BYTES`] (32 MiB), more
//! than [`MAX_PLAN_STEPS`] (10 000) steps, a step whose `args` are over [`MAX_STEP_ARGS_BYTES`]
//! (8 MiB as JSON), and a `heartbeat` outside [`MIN_HEARTBEAT`] to [`MAX_HEARTBEAT`] (10 ms to
//! 1 h; the same range applies to `--heartbeat`). A file that is not UTF-8 ([`decode`]) points
//! at its first invalid byte. Ids and names (the plan and step ids, agent ids, names, roles,
//! models, domains, power types, tools, `after`, `prefer`) may not hold a control character
//! (newline, tab, escape, other C0/C1 controls); the goal and step descriptions are free text,
//! escaped where printed ([`escape_controls`]).
//!
//! # The team file
//!
//! Every field is shown below; those marked required must be given, the rest may be left out.
//! A field not listed here is an error, and so is a `supervisor` on a top power.
//!
//! ```toml
//! heartbeat = "4s"          # "250ms", "4s", "1m" or "1h"; default "4s"; 10ms to 1h
//! max_agents = 50           # the pool's limit; default 50
//!
//! [reasoner]                # the default for every agent; may be left out
//! kind = "rule-based"       # "rule-based" (default, no model), "openai", "anthropic", "local"
//! forbid_tools = []         # rule-based: top powers veto plans using these tools, e.g. ["shell"]
//! prefer = ["option-a"]     # rule-based: in arbitration, vote for the first of these
//! base_url = "http://127.0.0.1:11434/v1"   # openai/anthropic: default the vendor's API
//! model = "gpt-4o-mini"     # openai/anthropic: required here or on each agent; local:
//!                           # "gemma-3-270m-q4_k_m" (the only one)
//! api_key_env = "OPENAI_API_KEY"   # the variable holding the key (never the key itself);
//!                           # default OPENAI_API_KEY / ANTHROPIC_API_KEY when no base_url is set
//! request_timeout = "120s"  # one model call
//! max_tokens = 512          # most tokens one decision may generate
//!
//! [prices]                  # US dollars per million tokens, 0 or more; unpriced models cost 0
//! "gpt-4o-mini" = { input_per_mtok = 0.15, output_per_mtok = 0.6 }
//!
//! [budget]                  # per run, all agents together; every limit optional
//! max_tokens = 200000       # tokens in and out
//! max_cost_usd = 1.0
//! max_wall = "30m"          # wall time since the run started, all sessions
//! max_calls = 500           # model calls
//! on_exceed = "stop"        # "stop": the run fails with the reason; "ask": it pauses and the
//!                           # top powers vote on raising the limit by its original size
//!
//! [conversation]            # each agent's own history, oldest turns dropped past either limit
//! max_turns = 8
//! max_chars = 12000
//!
//! # Top powers sign, veto and arbitrate. The first one in the file proposes the plans.
//! [[top]]
//! id = "top-a"                     # required: 1 to 64 ASCII letters, digits, `-`, `_`
//! name = "Power A"                 # default: the id
//! power_type = "power_a"           # required
//! vote_weight = 2.0                # default 1.0; 0 or more
//! signature_authority = ["plan"]   # default ["plan"]; a power without "plan" signs no plans
//! # Optional on every agent:
//! role = "governance"              # used in the system prompt; default ""
//! capabilities = ["plan", "review", "arbitrate"]   # default: all its layer may hold
//! model = "some-model"             # for an LLM reasoner
//! temperature = 0.2                # 0.0 to 2.0
//! max_retries = 3                  # default 3
//! timeout_ms = 30000               # default 30000; above 0
//! reasoner = { forbid_tools = [], prefer = [] }   # overrides fields of [reasoner]
//!
//! [[top]]
//! id = "top-b"
//! power_type = "power_b"
//!
//! # Mid leads own a domain and delegate its steps to their executors.
//! [[mid]]
//! id = "mid-docs"
//! name = "Docs lead"
//! domain = "docs"                  # required; one lead per domain
//! supervisor = "top-a"             # required: a top power
//! max_subordinates = 4             # default 4
//!
//! # Bottom executors run tools.
//! [[bottom]]
//! id = "bottom-d1"
//! name = "Writer"
//! supervisor = "mid-docs"          # required: a mid lead
//! tools = ["write_file", "shell"] # required: registered tools, at least one
//! ```
//!
//! Capabilities: a top power may hold `plan`, `reflect`, `review`, `coordinate`, `delegate` and
//! `arbitrate`; a mid lead the same but `arbitrate`; a bottom executor `plan`, `execute`,
//! `reflect`, `tool_call`, `code_gen`, `test_exec` and `coordinate`.
//!
//! # The plan file
//!
//! ```toml
//! id = "hello"                     # required, not empty
//! goal = "write a greeting and measure it"   # required, not empty
//!
//! [[steps]]                        # at least one
//! id = "write-hello"               # required, unique in the plan
//! description = "write hello.txt"  # default: "<id> (<tool>)"
//! domain = "docs"                  # a lead's domain, or
//! # agent = "bottom-d1"            # a lead or an executor; neither: any executor with the tool
//! tool = "write_file"              # required: a registered tool an executor it reaches has
//! args = { path = "hello.txt", content = "hello\n" }   # checked against the tool's schema
//! # or, one per line: args.path = "hello.txt"
//!
//! [[steps]]
//! id = "measure"
//! domain = "docs"
//! tool = "shell"
//! args = { command = "wc -c < hello.txt" }
//! after = ["write-hello"]          # steps listed earlier that must finish first
//! ```

use std::borrow::Cow;
use std::collections::{BTreeMap, HashSet};
use std::ops::Range;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use agent_core::tools::ToolRegistry;
use agent_layers::{BottomSpec, MidSpec, TopSpec};
use agent_llm::{Budget, ConversationLimits, OnExceed, Price, PriceTable};
use agent_pool::{AgentSpec, DEFAULT_HEARTBEAT, DEFAULT_MAX_AGENTS, RoleSpec, TeamSpec};
use agent_state::{
    AgentConfig, AgentId, AgentLayer, Capability, PlanStep, StepTarget, Task, check_agent_id,
    find_control, is_control,
};
use serde::Deserialize;
use thiserror::Error;
use toml::Spanned;

#[cfg(test)]
mod tests;

/// A lead's `max_subordinates` when the team file does not say.
pub(crate) const DEFAULT_MAX_SUBORDINATES: usize = 4;

/// The largest plan file read: 16 MiB.
pub(crate) const MAX_PLAN_FILE_BYTES: usize = 16 * 1024 * 1024;
/// The largest team file read: 32 MiB (`strata init --scale 100000` writes about 7 MiB).
pub(crate) const MAX_TEAM_FILE_BYTES: usize = 32 * 1024 * 1024;
/// The most steps one plan may have.
pub(crate) const MAX_PLAN_STEPS: usize = 10_000;
/// The largest `args` of one step, measured as JSON: 8 MiB. This is the content of one tool
/// call, such as what a `write_file` step writes.
pub(crate) const MAX_STEP_ARGS_BYTES: usize = 8 * 1024 * 1024;
/// The shortest heartbeat, in the team file or `--heartbeat`: 10 ms.
pub(crate) const MIN_HEARTBEAT: Duration = Duration::from_millis(10);
/// The longest heartbeat, in the team file or `--heartbeat`: 1 hour.
pub(crate) const MAX_HEARTBEAT: Duration = Duration::from_secs(3600);

/// A team file, parsed and checked: the team and how each agent reasons.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct TeamFile {
    /// The team, ready for `Team::start`.
    pub(crate) spec: TeamSpec,
    /// The reasoner of every agent not in `agent_reasoners`.
    pub(crate) default_reasoner: ReasonerSettings,
    /// Agents with a `reasoner` table of their own, with the default's fields filled in.
    pub(crate) agent_reasoners: BTreeMap<AgentId, ReasonerSettings>,
    /// Model prices (`[prices]`).
    pub(crate) prices: PriceTable,
    /// The run's reasoning budget (`[budget]`).
    pub(crate) budget: Budget,
    /// How much history each agent keeps (`[conversation]`).
    pub(crate) conversation: ConversationLimits,
}

/// Which reasoner an agent uses, and its settings.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct ReasonerSettings {
    /// The kind.
    pub(crate) kind: ReasonerKind,
    /// Tools whose use makes a top power veto a plan.
    pub(crate) forbid_tools: Vec<String>,
    /// Options to vote for first in arbitration.
    pub(crate) prefer: Vec<String>,
    /// For `openai` and `anthropic`: the API's base URL (default: the vendor's).
    pub(crate) base_url: Option<String>,
    /// The model (an agent's own `model` wins).
    pub(crate) model: Option<String>,
    /// The environment variable holding the API key.
    pub(crate) api_key_env: Option<String>,
    /// How long one model call may take.
    pub(crate) request_timeout: Option<Duration>,
    /// Most tokens one decision may generate.
    pub(crate) max_tokens: Option<u32>,
}

/// The reasoners a team file can name.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) enum ReasonerKind {
    /// [`agent_core::RuleBasedReasoner`]: deterministic, no model.
    #[default]
    RuleBased,
    /// An OpenAI-compatible chat completions API (OpenAI, vLLM, Ollama, LM Studio, llama.cpp).
    OpenAi,
    /// The Anthropic Messages API.
    Anthropic,
    /// The embedded Gemma 3 270M model (built with the `local` feature).
    Local,
}

/// A team or plan file that cannot be used: where, and what is expected there.
#[derive(Clone, Debug, PartialEq, Eq, Error)]
#[error(
    "{}:{line}:{column}: {}",
    escape_controls(&file.display().to_string()),
    escape_controls(message)
)]
pub(crate) struct FileError {
    /// The file, as the caller named it.
    pub(crate) file: PathBuf,
    /// 1-based line.
    pub(crate) line: usize,
    /// 1-based column, in characters.
    pub(crate) column: usize,
    /// What is wrong and what is expected.
    pub(crate) message: String,
}

/// A reasoner kind that does not exist, such as a `--reasoner` flag's.
#[derive(Clone, Debug, PartialEq, Eq, Error)]
#[error("unknown reasoner kind `{kind}`; known kinds: {}", ReasonerKind::known())]
pub(crate) struct UnknownReasonerKind {
    /// The kind given.
    pub(crate) kind: String,
}

impl ReasonerKind {
    /// Every kind.
    const ALL: [ReasonerKind; 4] = [
        ReasonerKind::RuleBased,
        ReasonerKind::OpenAi,
        ReasonerKind::Anthropic,
        ReasonerKind::Local,
    ];

    /// The name used in team files and on the command line.
    pub(crate) const fn as_str(self) -> &'static str {
        match self {
            ReasonerKind::RuleBased => "rule-based",
            ReasonerKind::OpenAi => "openai",
            ReasonerKind::Anthropic => "anthropic",
            ReasonerKind::Local => "local",
        }
    }

    fn known() -> String {
        Self::ALL.map(Self::as_str).join(", ")
    }
}

/// The reasoner kind called `kind`.
pub(crate) fn check_reasoner_kind(kind: &str) -> Result<ReasonerKind, UnknownReasonerKind> {
    ReasonerKind::ALL
        .into_iter()
        .find(|k| k.as_str() == kind)
        .ok_or_else(|| UnknownReasonerKind { kind: kind.to_owned() })
}

/// Parses and checks a team file. `path` is used only in error messages; `tools` is the
/// registry the executors' tools must come from.
pub(crate) fn parse_team(
    path: &Path,
    text: &str,
    tools: &ToolRegistry,
) -> Result<TeamFile, FileError> {
    let src = Source { path, text };
    src.check_size(MAX_TEAM_FILE_BYTES, "team file")?;
    let raw: RawTeam = toml::from_str(text).map_err(|e| src.toml_error(&e))?;
    team_controls(&src, &raw)?;
    let heartbeat = match &raw.heartbeat {
        Some(h) => parse_duration(h.get_ref())
            .and_then(check_heartbeat)
            .map_err(|m| src.error(h.span(), format!("`heartbeat`: {m}")))?,
        None => DEFAULT_HEARTBEAT,
    };
    let max_agents = match &raw.max_agents {
        Some(m) if *m.get_ref() == 0 => {
            return Err(src.error(m.span(), "`max_agents` must be at least 1"));
        }
        Some(m) if *m.get_ref() > agent_pool::MAX_POOL_SIZE => {
            return Err(src.error(
                m.span(),
                format!(
                    "`max_agents` is {}, over the largest pool, {}; split the team",
                    m.get_ref(),
                    agent_pool::MAX_POOL_SIZE
                ),
            ));
        }
        Some(m) => *m.get_ref(),
        None => DEFAULT_MAX_AGENTS,
    };
    let default_reasoner = match &raw.reasoner {
        Some(r) => reasoner_settings(&src, r, &ReasonerSettings::default(), tools)?,
        None => ReasonerSettings::default(),
    };
    let mut entries: Vec<Entry<'_>> = raw
        .top
        .iter()
        .map(Entry::top)
        .chain(raw.mid.iter().map(Entry::mid))
        .chain(raw.bottom.iter().map(Entry::bottom))
        .collect();
    entries.sort_by_key(|e| e.id.span().start);
    let team = TeamIndex::new(&src, &entries)?;
    if let Some(extra) = entries.get(max_agents) {
        let limit = match &raw.max_agents {
            Some(m) => format!("`max_agents` (line {}) is {max_agents}", src.position(m.span()).0),
            None => format!("the pool allows {max_agents} (the default `max_agents`)"),
        };
        return Err(src.error(
            extra.id.span(),
            format!(
                "too many agents for the pool: this is agent {} of {}, but {limit}; raise `max_agents` or remove agents",
                max_agents + 1,
                entries.len()
            ),
        ));
    }
    if !entries.iter().any(|e| e.layer == AgentLayer::Top) {
        return Err(src.error(
            0..0,
            "the team has no top power; add a [[top]] table (a team needs one to propose and sign plans)",
        ));
    }
    let mut domains: BTreeMap<&str, &Entry<'_>> = BTreeMap::new();
    let mut agents = Vec::with_capacity(entries.len());
    let mut agent_reasoners = BTreeMap::new();
    // Executors placed under each lead so far (counted as the entries go, not searched for:
    // a generated team has 100 000 agents).
    let mut placed: BTreeMap<&str, usize> = BTreeMap::new();
    for entry in &entries {
        let spec = agent_spec(&src, entry, &mut placed, &team, tools, &mut domains)?;
        if let Some(r) = entry.reasoner {
            let settings = reasoner_settings(&src, r, &default_reasoner, tools)?;
            agent_reasoners.insert(spec.config.id.clone(), settings);
        }
        agents.push(spec);
    }
    share_tool_lists(&mut agents);
    let prices = match &raw.prices {
        Some(p) => price_table(&src, p)?,
        None => PriceTable::new(),
    };
    let budget = match &raw.budget {
        Some(b) => budget(&src, b)?,
        None => Budget::default(),
    };
    let conversation = match &raw.conversation {
        Some(c) => conversation_limits(&src, c)?,
        None => ConversationLimits::default(),
    };
    Ok(TeamFile {
        spec: TeamSpec { agents, heartbeat, max_agents },
        default_reasoner,
        agent_reasoners,
        prices,
        budget,
        conversation,
    })
}

/// Makes executors with the same tools hold one list between them: a generated team of 100 000
/// executors then holds a few lists instead of 100 000 copies.
fn share_tool_lists(agents: &mut [AgentSpec]) {
    let mut lists: HashSet<Arc<[String]>> = HashSet::new();
    for agent in agents {
        if let RoleSpec::Bottom(spec) = &mut agent.role {
            match lists.get(&spec.tools) {
                Some(list) => spec.tools = list.clone(),
                None => {
                    lists.insert(spec.tools.clone());
                }
            }
        }
    }
}

/// Parses and checks a plan file for `team`, whose executors' tools come from `tools`. `path`
/// is used only in error messages.
pub(crate) fn parse_plan(
    path: &Path,
    text: &str,
    team: &TeamSpec,
    tools: &ToolRegistry,
) -> Result<Task, FileError> {
    let src = Source { path, text };
    src.check_size(MAX_PLAN_FILE_BYTES, "plan file")?;
    let raw: RawPlan = toml::from_str(text).map_err(|e| src.toml_error(&e))?;
    plan_controls(&src, &raw)?;
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
    if raw.steps.is_empty() {
        return Err(src.error(0..0, "the plan has no steps; add at least one [[steps]] table"));
    }
    let leads = leads(team);
    let mut steps: Vec<PlanStep> = Vec::with_capacity(raw.steps.len());
    for (i, step) in raw.steps.iter().enumerate() {
        let step = step.get_ref();
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
        let target = step_target(&src, step, team, &leads)?;
        let tool = step.tool.get_ref();
        let Some(registered) = tools.get(tool) else {
            return Err(src.error(
                step.tool.span(),
                format!("unknown tool `{tool}` (available: {})", tools.names().join(", ")),
            ));
        };
        check_reachable(&src, step, &target, team, &leads)?;
        // `args` has no span of its own (toml 0.8 cannot span a table written with dotted keys,
        // `args.command = "..."`), so its errors point at the step's tool.
        let args = match &step.args {
            Some(args) => table_to_json(args)
                .map_err(|m| src.error(step.tool.span(), format!("in `args`: {m}")))?,
            None => serde_json::Value::Object(serde_json::Map::new()),
        };
        let size = args.to_string().len();
        if size > MAX_STEP_ARGS_BYTES {
            return Err(src.error(
                step.tool.span(),
                format!(
                    "the step's `args` are {size} bytes as JSON, over the limit of \
                     {MAX_STEP_ARGS_BYTES} bytes (8 MiB) for one tool call; split the content \
                     over several steps"
                ),
            ));
        }
        let problems = agent_core::tools::validate(registered.schema(), &args);
        if !problems.is_empty() {
            return Err(src.error(
                step.tool.span(),
                format!("`args` do not fit the tool `{tool}`: {}", problems.join("; ")),
            ));
        }
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
                let line = src.position(later.get_ref().id.span()).0;
                format!(
                    "step `{name}` is listed later (line {line}); a step may wait only for steps listed before it"
                )
            } else {
                format!(
                    "no step `{name}` in this plan; a step may wait for a step listed before it ({})",
                    list_or_none(steps.iter().map(|s| s.id.as_str()))
                )
            };
            return Err(src.error(dep.span(), message));
        }
        steps.push(PlanStep {
            id: id.clone(),
            description: step.description.clone().unwrap_or_else(|| format!("{id} ({tool})")),
            target,
            tool: tool.clone(),
            args,
            after,
            idempotent: step.idempotent,
        });
    }
    let task = Task { id: raw.id.get_ref().clone(), goal: raw.goal.get_ref().clone(), steps };
    // Everything `check` refuses is caught above with a position; this is a safety net.
    task.check().map_err(|e| src.error(raw.id.span(), e.to_string()))?;
    Ok(task)
}

/// The team used when no team file is given: the one [`example_team_toml`] describes.
pub(crate) fn default_team() -> TeamFile {
    let all: Vec<String> =
        ["read_file", "write_file", "list_dir", "shell"].map(String::from).to_vec();
    let top = |id: &str, name: &str, power: &str, weight: f64| AgentSpec {
        config: AgentConfig::new(id, name, AgentLayer::Top),
        role: RoleSpec::Top(TopSpec {
            power_type: power.into(),
            vote_weight: weight,
            signature_authority: vec!["plan".into()],
        }),
    };
    let mid = |id: &str, name: &str, domain: &str| AgentSpec {
        config: AgentConfig::new(id, name, AgentLayer::Mid).with_supervisor("top-a"),
        role: RoleSpec::Mid(MidSpec {
            domain: domain.into(),
            max_subordinates: DEFAULT_MAX_SUBORDINATES,
        }),
    };
    let bottom = |id: &str, name: &str, lead: &str| AgentSpec {
        config: AgentConfig::new(id, name, AgentLayer::Bottom).with_supervisor(lead),
        role: RoleSpec::Bottom(BottomSpec { tools: all.clone().into() }),
    };
    TeamFile {
        spec: TeamSpec::new(vec![
            top("top-a", "Power A", "power_a", 2.0),
            top("top-b", "Power B", "power_b", 1.0),
            top("top-c", "Power C", "power_c", 1.0),
            mid("mid-docs", "Docs lead", "docs"),
            mid("mid-build", "Build lead", "build"),
            bottom("bottom-d1", "Docs executor 1", "mid-docs"),
            bottom("bottom-d2", "Docs executor 2", "mid-docs"),
            bottom("bottom-b1", "Build executor 1", "mid-build"),
            bottom("bottom-b2", "Build executor 2", "mid-build"),
        ]),
        default_reasoner: ReasonerSettings::default(),
        agent_reasoners: BTreeMap::new(),
        prices: PriceTable::new(),
        budget: Budget::default(),
        conversation: ConversationLimits::default(),
    }
}

/// A team file describing [`default_team`], with a comment on every field.
pub(crate) fn example_team_toml() -> &'static str {
    EXAMPLE_TEAM
}

/// The smallest team `strata init --scale` writes: three powers, a lead and an executor.
pub(crate) const MIN_SCALE: usize = 5;

/// A generated team file of `agents` agents (checked by the caller to be from [`MIN_SCALE`]
/// to the largest pool): three powers, one lead per thousand agents (1 to 1 000), the rest
/// executors spread evenly over the leads, each lead with its own domain `dN`.
pub(crate) fn scaled_team_toml(agents: usize) -> String {
    let leads = (agents / 1000).clamp(1, 1000);
    let executors = agents - 3 - leads;
    let per_lead = executors.div_ceil(leads);
    let mut text = format!(
        "# A generated team of {agents} agents (`strata init --scale {agents}`): three powers,\n\
         # {leads} lead(s), {executors} executors.\n\nheartbeat = \"4s\"\nmax_agents = {agents}\n\n"
    );
    for (i, weight) in [2.0, 1.0, 1.0].into_iter().enumerate() {
        text.push_str(&format!(
            "[[top]]\nid = \"top-{i}\"\npower_type = \"power_{i}\"\nvote_weight = {weight:.1}\nsignature_authority = [\"plan\"]\n\n"
        ));
    }
    for l in 0..leads {
        text.push_str(&format!(
            "[[mid]]\nid = \"lead-{l}\"\ndomain = \"d{l}\"\nsupervisor = \"top-0\"\nmax_subordinates = {per_lead}\n\n"
        ));
    }
    for e in 0..executors {
        text.push_str(&format!(
            "[[bottom]]\nid = \"e-{e}\"\nsupervisor = \"lead-{}\"\ntools = [\"write_file\", \"shell\"]\n\n",
            e % leads
        ));
    }
    text
}

/// A plan for [`scaled_team_toml`]'s team: work for a share of it, one step per hundred agents
/// (at least one per lead, at most [`MAX_PLAN_STEPS`]), each writing a small file, spread over
/// the leads' domains.
pub(crate) fn scaled_plan_toml(agents: usize) -> String {
    let leads = (agents / 1000).clamp(1, 1000);
    let steps = (agents / 100).clamp(leads, MAX_PLAN_STEPS);
    let mut text = format!(
        "# Work for a share of the generated team of {agents} agents: {steps} steps.\n\n\
         id = \"scale-{agents}\"\ngoal = \"write one file per step across the team\"\n\n"
    );
    for s in 0..steps {
        text.push_str(&format!(
            "[[steps]]\nid = \"s{s}\"\ndomain = \"d{}\"\ntool = \"write_file\"\nargs = {{ path = \"out/{s}.txt\", content = \"step {s}\\n\" }}\n\n",
            s % leads
        ));
    }
    text
}

/// A plan for [`example_team_toml`]'s team that uses all three layers and both domains, writes
/// real files and runs a real shell command once a write is done.
pub(crate) fn example_plan_toml() -> &'static str {
    EXAMPLE_PLAN
}

const EXAMPLE_TEAM: &str = r##"# A Strata team: three top powers, two mid leads, two bottom executors per lead.
# Run a plan with it: strata run plan.toml --team team.toml

heartbeat = "4s"      # how often each agent with work takes a turn: "250ms", "4s", "1m"
max_agents = 50       # the pool's limit

# How agents decide. An agent may override these with its own
# `reasoner = { kind = "...", forbid_tools = [...], prefer = [...] }`.
# kind: "rule-based" (deterministic, no model), "openai" (any OpenAI-compatible server),
# "anthropic", or "local" (the embedded model; `strata model fetch` first). With a model, set
# `model`, and `base_url` / `api_key_env` as needed; add [prices], [budget] and [conversation]
# tables to count cost and cap spending (see the crate docs of agent-cli's files module).
[reasoner]
kind = "rule-based"
forbid_tools = []     # top powers veto any plan that uses one of these tools
prefer = []           # in arbitration, vote for the first of these options on the ballot

# Optional on every agent: role = "..." (for the system prompt), capabilities = [...]
# (default: all its layer may hold), model, temperature (0.0 to 2.0), max_retries = 3,
# timeout_ms = 30000.

# Top powers sign plans, veto them and arbitrate conflicts; votes are weighted.
# The first one proposes the plans; those with "plan" authority sign them.
[[top]]
id = "top-a"
name = "Power A"
power_type = "power_a"
vote_weight = 2.0
signature_authority = ["plan"]

[[top]]
id = "top-b"
name = "Power B"
power_type = "power_b"
vote_weight = 1.0
signature_authority = ["plan"]

[[top]]
id = "top-c"
name = "Power C"
power_type = "power_c"
vote_weight = 1.0
signature_authority = ["plan"]

# Mid leads each own a domain: plan steps for that domain go to them, and they hand
# each step to one of their executors.
[[mid]]
id = "mid-docs"
name = "Docs lead"
domain = "docs"
supervisor = "top-a"
max_subordinates = 4

[[mid]]
id = "mid-build"
name = "Build lead"
domain = "build"
supervisor = "top-a"
max_subordinates = 4

# Bottom executors run tools in the workspace: read_file, write_file, list_dir, shell.
[[bottom]]
id = "bottom-d1"
name = "Docs executor 1"
supervisor = "mid-docs"
tools = ["read_file", "write_file", "list_dir", "shell"]

[[bottom]]
id = "bottom-d2"
name = "Docs executor 2"
supervisor = "mid-docs"
tools = ["read_file", "write_file", "list_dir", "shell"]

[[bottom]]
id = "bottom-b1"
name = "Build executor 1"
supervisor = "mid-build"
tools = ["read_file", "write_file", "list_dir", "shell"]

[[bottom]]
id = "bottom-b2"
name = "Build executor 2"
supervisor = "mid-build"
tools = ["read_file", "write_file", "list_dir", "shell"]
"##;

const EXAMPLE_PLAN: &str = r##"# A plan for the team in team.toml.
#
# The first top power proposes it as a decision; the powers with "plan" authority review
# it and sign it (or veto it). Each mid lead then gets the steps of its domain and hands
# them to its executors, which run the tools in the workspace and report back up.

id = "hello"
goal = "write a greeting and notes, then measure the greeting"

[[steps]]
id = "write-hello"
description = "write the greeting"
domain = "docs"                 # for the lead of the docs domain
tool = "write_file"
args = { path = "hello.txt", content = "hello, strata\n" }

[[steps]]
id = "write-notes"
description = "write the notes"
agent = "bottom-d2"             # or name an agent: a lead, or an executor as here
tool = "write_file"
args = { path = "notes/plan.md", content = "# Plan\n- greet\n- measure\n" }

[[steps]]
id = "measure"
description = "count the greeting's bytes"
domain = "build"
tool = "shell"
args = { command = "wc -c < hello.txt" }
after = ["write-hello"]         # waits until the greeting is written

[[steps]]
id = "list"
description = "list the workspace"
domain = "build"
tool = "list_dir"
args = { path = "." }
after = ["write-hello", "write-notes"]
"##;

// ---------------------------------------------------------------------------------------------
// The files as written.

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawTeam {
    #[serde(default)]
    heartbeat: Option<Spanned<String>>,
    #[serde(default)]
    max_agents: Option<Spanned<usize>>,
    #[serde(default)]
    reasoner: Option<RawReasoner>,
    #[serde(default)]
    prices: Option<BTreeMap<String, Spanned<RawPrice>>>,
    #[serde(default)]
    budget: Option<RawBudget>,
    #[serde(default)]
    conversation: Option<RawConversation>,
    #[serde(default)]
    top: Vec<RawTop>,
    #[serde(default)]
    mid: Vec<RawMid>,
    #[serde(default)]
    bottom: Vec<RawBottom>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawReasoner {
    #[serde(default)]
    kind: Option<Spanned<String>>,
    #[serde(default)]
    forbid_tools: Option<Vec<Spanned<String>>>,
    #[serde(default)]
    prefer: Option<Vec<Spanned<String>>>,
    #[serde(default)]
    base_url: Option<Spanned<String>>,
    #[serde(default)]
    model: Option<Spanned<String>>,
    #[serde(default)]
    api_key_env: Option<Spanned<String>>,
    #[serde(default)]
    request_timeout: Option<Spanned<String>>,
    #[serde(default)]
    max_tokens: Option<Spanned<u32>>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawPrice {
    input_per_mtok: f64,
    output_per_mtok: f64,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawBudget {
    #[serde(default)]
    max_tokens: Option<Spanned<u64>>,
    #[serde(default)]
    max_cost_usd: Option<Spanned<f64>>,
    #[serde(default)]
    max_wall: Option<Spanned<String>>,
    #[serde(default)]
    max_calls: Option<Spanned<u64>>,
    #[serde(default)]
    on_exceed: Option<Spanned<String>>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawConversation {
    #[serde(default)]
    max_turns: Option<Spanned<usize>>,
    #[serde(default)]
    max_chars: Option<Spanned<usize>>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawTop {
    id: Spanned<String>,
    #[serde(default)]
    name: Option<Spanned<String>>,
    power_type: Spanned<String>,
    #[serde(default)]
    vote_weight: Option<Spanned<f64>>,
    #[serde(default)]
    signature_authority: Option<Vec<Spanned<String>>>,
    /// Refused with a message of its own rather than as an unknown field.
    #[serde(default)]
    supervisor: Option<Spanned<String>>,
    #[serde(default)]
    role: Option<Spanned<String>>,
    #[serde(default)]
    capabilities: Option<Vec<Spanned<String>>>,
    #[serde(default)]
    model: Option<Spanned<String>>,
    #[serde(default)]
    temperature: Option<Spanned<f32>>,
    #[serde(default)]
    max_retries: Option<u32>,
    #[serde(default)]
    timeout_ms: Option<Spanned<u64>>,
    #[serde(default)]
    reasoner: Option<RawReasoner>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawMid {
    id: Spanned<String>,
    #[serde(default)]
    name: Option<Spanned<String>>,
    domain: Spanned<String>,
    supervisor: Spanned<String>,
    #[serde(default)]
    max_subordinates: Option<usize>,
    #[serde(default)]
    role: Option<Spanned<String>>,
    #[serde(default)]
    capabilities: Option<Vec<Spanned<String>>>,
    #[serde(default)]
    model: Option<Spanned<String>>,
    #[serde(default)]
    temperature: Option<Spanned<f32>>,
    #[serde(default)]
    max_retries: Option<u32>,
    #[serde(default)]
    timeout_ms: Option<Spanned<u64>>,
    #[serde(default)]
    reasoner: Option<RawReasoner>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawBottom {
    id: Spanned<String>,
    #[serde(default)]
    name: Option<Spanned<String>>,
    supervisor: Spanned<String>,
    tools: Spanned<Vec<Spanned<String>>>,
    #[serde(default)]
    role: Option<Spanned<String>>,
    #[serde(default)]
    capabilities: Option<Vec<Spanned<String>>>,
    #[serde(default)]
    model: Option<Spanned<String>>,
    #[serde(default)]
    temperature: Option<Spanned<f32>>,
    #[serde(default)]
    max_retries: Option<u32>,
    #[serde(default)]
    timeout_ms: Option<Spanned<u64>>,
    #[serde(default)]
    reasoner: Option<RawReasoner>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawPlan {
    id: Spanned<String>,
    goal: Spanned<String>,
    #[serde(default)]
    steps: Vec<Spanned<RawStep>>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawStep {
    id: Spanned<String>,
    #[serde(default)]
    description: Option<String>,
    #[serde(default)]
    domain: Option<Spanned<String>>,
    #[serde(default)]
    agent: Option<Spanned<String>>,
    tool: Spanned<String>,
    #[serde(default)]
    args: Option<toml::Table>,
    #[serde(default)]
    after: Vec<Spanned<String>>,
    /// Running the step twice is safe: a call interrupted by a crash may run again.
    #[serde(default)]
    idempotent: bool,
}

/// One agent of a team file, whatever its layer.
struct Entry<'a> {
    layer: AgentLayer,
    id: &'a Spanned<String>,
    name: Option<&'a Spanned<String>>,
    supervisor: Option<&'a Spanned<String>>,
    role: Option<&'a Spanned<String>>,
    capabilities: Option<&'a Vec<Spanned<String>>>,
    model: Option<&'a Spanned<String>>,
    temperature: Option<&'a Spanned<f32>>,
    max_retries: Option<u32>,
    timeout_ms: Option<&'a Spanned<u64>>,
    reasoner: Option<&'a RawReasoner>,
    kind: EntryKind<'a>,
}

enum EntryKind<'a> {
    Top(&'a RawTop),
    Mid(&'a RawMid),
    Bottom(&'a RawBottom),
}

impl<'a> Entry<'a> {
    fn top(raw: &'a RawTop) -> Self {
        Self {
            layer: AgentLayer::Top,
            id: &raw.id,
            name: raw.name.as_ref(),
            supervisor: raw.supervisor.as_ref(),
            role: raw.role.as_ref(),
            capabilities: raw.capabilities.as_ref(),
            model: raw.model.as_ref(),
            temperature: raw.temperature.as_ref(),
            max_retries: raw.max_retries,
            timeout_ms: raw.timeout_ms.as_ref(),
            reasoner: raw.reasoner.as_ref(),
            kind: EntryKind::Top(raw),
        }
    }

    fn mid(raw: &'a RawMid) -> Self {
        Self {
            layer: AgentLayer::Mid,
            id: &raw.id,
            name: raw.name.as_ref(),
            supervisor: Some(&raw.supervisor),
            role: raw.role.as_ref(),
            capabilities: raw.capabilities.as_ref(),
            model: raw.model.as_ref(),
            temperature: raw.temperature.as_ref(),
            max_retries: raw.max_retries,
            timeout_ms: raw.timeout_ms.as_ref(),
            reasoner: raw.reasoner.as_ref(),
            kind: EntryKind::Mid(raw),
        }
    }

    fn bottom(raw: &'a RawBottom) -> Self {
        Self {
            layer: AgentLayer::Bottom,
            id: &raw.id,
            name: raw.name.as_ref(),
            supervisor: Some(&raw.supervisor),
            role: raw.role.as_ref(),
            capabilities: raw.capabilities.as_ref(),
            model: raw.model.as_ref(),
            temperature: raw.temperature.as_ref(),
            max_retries: raw.max_retries,
            timeout_ms: raw.timeout_ms.as_ref(),
            reasoner: raw.reasoner.as_ref(),
            kind: EntryKind::Bottom(raw),
        }
    }

    fn id(&self) -> &'a str {
        self.id.get_ref()
    }
}

/// The agents of a team file by id, once ids are known to be valid and unique.
struct TeamIndex<'e, 'a> {
    by_id: BTreeMap<&'a str, &'e Entry<'a>>,
    entries: &'e [Entry<'a>],
}

impl<'e, 'a> TeamIndex<'e, 'a> {
    fn new(src: &Source<'_>, entries: &'e [Entry<'a>]) -> Result<Self, FileError> {
        let mut by_id: BTreeMap<&'a str, &'e Entry<'a>> = BTreeMap::new();
        for entry in entries {
            check_agent_id(entry.id())
                .map_err(|kind| src.error(entry.id.span(), kind.to_string()))?;
            if let Some(first) = by_id.insert(entry.id(), entry) {
                let line = src.position(first.id.span()).0;
                return Err(src.error(
                    entry.id.span(),
                    format!(
                        "agent id `{}` is already used by the {} on line {line}; ids must be unique",
                        entry.id(),
                        noun(first.layer)
                    ),
                ));
            }
        }
        Ok(Self { by_id, entries })
    }

    /// The ids on `layer`, in file order, for messages.
    fn ids_on(&self, layer: AgentLayer) -> String {
        list_or_none(self.entries.iter().filter(|e| e.layer == layer).map(Entry::id))
    }
}

/// A file's path and text, to turn byte spans into positions.
struct Source<'a> {
    path: &'a Path,
    text: &'a str,
}

impl Source<'_> {
    fn error(&self, span: Range<usize>, message: impl Into<String>) -> FileError {
        let (line, column) = self.position(span);
        FileError { file: self.path.to_path_buf(), line, column, message: message.into() }
    }

    /// Refuses a text over `limit` bytes, pointing at where the limit is passed.
    fn check_size(&self, limit: usize, what: &str) -> Result<(), FileError> {
        if self.text.len() <= limit {
            return Ok(());
        }
        Err(self.error(
            limit..limit,
            format!(
                "the {what} is {} bytes, over the limit of {limit} bytes; the limit is passed \
                 here: make the file smaller",
                self.text.len()
            ),
        ))
    }

    /// Refuses a control character in an id or a name, pointing at the value.
    fn no_control(&self, value: &Spanned<String>, what: &str) -> Result<(), FileError> {
        match find_control(value.get_ref()) {
            None => Ok(()),
            Some((index, c)) => Err(self.error(
                value.span(),
                format!(
                    "{what}: character {} is the control character {}; ids and names are one \
                     line of printable text (no newline, tab or escape)",
                    index + 1,
                    c.escape_unicode()
                ),
            )),
        }
    }

    fn toml_error(&self, error: &toml::de::Error) -> FileError {
        let message = error.message().trim().replace('\n', "; ");
        self.error(error.span().unwrap_or(0..0), message)
    }

    /// The 1-based line and column (in characters) where `span` starts.
    fn position(&self, span: Range<usize>) -> (usize, usize) {
        let mut start = span.start.min(self.text.len());
        while !self.text.is_char_boundary(start) {
            start -= 1;
        }
        let before = &self.text[..start];
        let line_start = before.rfind('\n').map_or(0, |i| i + 1);
        (before.matches('\n').count() + 1, before[line_start..].chars().count() + 1)
    }
}

// ---------------------------------------------------------------------------------------------
// Team checks.

fn agent_spec<'e, 'a>(
    src: &Source<'_>,
    entry: &'e Entry<'a>,
    placed: &mut BTreeMap<&'a str, usize>,
    team: &TeamIndex<'_, 'a>,
    tools: &ToolRegistry,
    domains: &mut BTreeMap<&'a str, &'e Entry<'a>>,
) -> Result<AgentSpec, FileError> {
    let id = entry.id();
    let name = match entry.name {
        Some(name) if name.get_ref().trim().is_empty() => {
            return Err(
                src.error(name.span(), "`name` must not be empty; leave it out to use the id")
            );
        }
        Some(name) => name.get_ref().clone(),
        None => id.to_owned(),
    };
    let mut config = AgentConfig::new(id, name, entry.layer);
    if let Some(supervisor) = entry.supervisor {
        check_supervisor(src, entry, supervisor, team)?;
        config.supervisor = Some(AgentId::from(supervisor.get_ref().as_str()));
    }
    if let Some(role) = entry.role {
        config.role = role.get_ref().clone();
    }
    if let Some(capabilities) = entry.capabilities {
        config.capabilities = parse_capabilities(src, entry.layer, capabilities)?.into();
    }
    config.model = entry.model.map(|m| m.get_ref().clone());
    if let Some(t) = entry.temperature {
        if !(0.0..=2.0).contains(t.get_ref()) {
            return Err(src.error(
                t.span(),
                format!("`temperature` must be from 0.0 to 2.0, not {}", t.get_ref()),
            ));
        }
        config.temperature = Some(*t.get_ref());
    }
    if let Some(retries) = entry.max_retries {
        config.max_retries = retries;
    }
    if let Some(timeout) = entry.timeout_ms {
        if *timeout.get_ref() == 0 {
            return Err(src.error(timeout.span(), "`timeout_ms` must be greater than 0"));
        }
        config.timeout_ms = *timeout.get_ref();
    }
    let role = match entry.kind {
        EntryKind::Top(raw) => RoleSpec::Top(top_spec(src, raw)?),
        EntryKind::Mid(raw) => {
            let domain = raw.domain.get_ref();
            if domain.trim().is_empty() {
                return Err(src.error(raw.domain.span(), "`domain` must not be empty"));
            }
            if let Some(lead) = domains.insert(domain, entry) {
                let line = src.position(lead.id.span()).0;
                return Err(src.error(
                    raw.domain.span(),
                    format!(
                        "domain `{domain}` already has a lead, `{}` (line {line}); each domain has one lead",
                        lead.id()
                    ),
                ));
            }
            let max_subordinates = raw.max_subordinates.unwrap_or(DEFAULT_MAX_SUBORDINATES);
            RoleSpec::Mid(MidSpec { domain: domain.clone(), max_subordinates })
        }
        EntryKind::Bottom(raw) => {
            let lead = raw.supervisor.get_ref();
            let max = team.by_id.get(lead.as_str()).and_then(|e| match e.kind {
                EntryKind::Mid(m) => Some(m.max_subordinates.unwrap_or(DEFAULT_MAX_SUBORDINATES)),
                _ => None,
            });
            let siblings = placed.entry(lead.as_str()).or_insert(0);
            if let Some(max) = max
                && *siblings >= max
            {
                return Err(src.error(
                    raw.supervisor.span(),
                    format!(
                        "lead `{lead}` already has {max} executors, its `max_subordinates`; raise it or report to another lead ({})",
                        team.ids_on(AgentLayer::Mid)
                    ),
                ));
            }
            *siblings += 1;
            RoleSpec::Bottom(BottomSpec { tools: executor_tools(src, &raw.tools, tools)?.into() })
        }
    };
    // Everything `validate` refuses is caught above with a position; this is a safety net.
    config.validate().map_err(|e| {
        let span = match e.field() {
            "name" => entry.name.map(Spanned::span),
            "supervisor" => entry.supervisor.map(Spanned::span),
            "temperature" => entry.temperature.map(Spanned::span),
            "timeout_ms" => entry.timeout_ms.map(Spanned::span),
            "role" => entry.role.map(Spanned::span),
            "model" => entry.model.map(Spanned::span),
            _ => None,
        };
        src.error(span.unwrap_or(entry.id.span()), e.kind.to_string())
    })?;
    Ok(AgentSpec { config, role })
}

fn top_spec(src: &Source<'_>, raw: &RawTop) -> Result<TopSpec, FileError> {
    if raw.power_type.get_ref().trim().is_empty() {
        return Err(src.error(raw.power_type.span(), "`power_type` must not be empty"));
    }
    let vote_weight = match &raw.vote_weight {
        Some(w) if !w.get_ref().is_finite() || *w.get_ref() < 0.0 => {
            return Err(src.error(
                w.span(),
                format!("`vote_weight` must be a number of 0 or more, not {}", w.get_ref()),
            ));
        }
        Some(w) => *w.get_ref(),
        None => 1.0,
    };
    let signature_authority = match &raw.signature_authority {
        Some(list) => {
            if let Some(empty) = list.iter().find(|a| a.get_ref().trim().is_empty()) {
                return Err(src.error(
                    empty.span(),
                    "a signature authority must not be empty; use names such as \"plan\"",
                ));
            }
            list.iter().map(|a| a.get_ref().clone()).collect()
        }
        None => vec![agent_layers::PLAN_AUTHORITY.to_owned()],
    };
    Ok(TopSpec { power_type: raw.power_type.get_ref().clone(), vote_weight, signature_authority })
}

fn check_supervisor(
    src: &Source<'_>,
    entry: &Entry<'_>,
    supervisor: &Spanned<String>,
    team: &TeamIndex<'_, '_>,
) -> Result<(), FileError> {
    let name = supervisor.get_ref();
    let Some(expected) = (match entry.layer {
        AgentLayer::Top => None,
        AgentLayer::Mid => Some(AgentLayer::Top),
        AgentLayer::Bottom => Some(AgentLayer::Mid),
    }) else {
        return Err(
            src.error(supervisor.span(), "a top power has no supervisor; remove `supervisor`")
        );
    };
    let wanted = format!(
        "a {} reports to a {} ({})",
        noun(entry.layer),
        noun(expected),
        team.ids_on(expected)
    );
    if name == entry.id() {
        return Err(src.error(
            supervisor.span(),
            format!("supervisor cycle: `{name}` cannot supervise itself; {wanted}"),
        ));
    }
    let Some(boss) = team.by_id.get(name.as_str()) else {
        return Err(src.error(supervisor.span(), format!("unknown agent `{name}`; {wanted}")));
    };
    if boss.layer == expected {
        return Ok(());
    }
    // Follow the chain: a loop back to this agent is a cycle, which deserves its own words.
    let mut chain = vec![entry.id(), name.as_str()];
    let mut at = *boss;
    while let Some(next) = at.supervisor.map(|s| s.get_ref().as_str()) {
        if chain.contains(&next) {
            if next == entry.id() {
                chain.push(next);
                return Err(src.error(
                    supervisor.span(),
                    format!("supervisor cycle: {}; {wanted}", chain.join(" → ")),
                ));
            }
            break;
        }
        chain.push(next);
        match team.by_id.get(next) {
            Some(e) => at = e,
            None => break,
        }
    }
    Err(src.error(supervisor.span(), format!("`{name}` is a {}, but {wanted}", noun(boss.layer))))
}

fn parse_capabilities(
    src: &Source<'_>,
    layer: AgentLayer,
    names: &[Spanned<String>],
) -> Result<Vec<Capability>, FileError> {
    let allowed = || layer.capabilities().map(Capability::as_str).collect::<Vec<_>>().join(", ");
    let mut capabilities = Vec::with_capacity(names.len());
    for name in names {
        let Some(capability) = Capability::ALL.into_iter().find(|c| c.as_str() == name.get_ref())
        else {
            return Err(src.error(
                name.span(),
                format!(
                    "unknown capability `{}`; a {} may hold: {}",
                    name.get_ref(),
                    noun(layer),
                    allowed()
                ),
            ));
        };
        if !layer.allows(capability) {
            return Err(src.error(
                name.span(),
                format!(
                    "a {} may not hold the capability `{capability}`; allowed: {}",
                    noun(layer),
                    allowed()
                ),
            ));
        }
        if !capabilities.contains(&capability) {
            capabilities.push(capability);
        }
    }
    Ok(capabilities)
}

fn executor_tools(
    src: &Source<'_>,
    names: &Spanned<Vec<Spanned<String>>>,
    tools: &ToolRegistry,
) -> Result<Vec<String>, FileError> {
    let available = || tools.names().join(", ");
    if names.get_ref().is_empty() {
        return Err(src.error(
            names.span(),
            format!("an executor needs at least one tool (available: {})", available()),
        ));
    }
    let mut out: Vec<String> = Vec::with_capacity(names.get_ref().len());
    for name in names.get_ref() {
        if tools.get(name.get_ref()).is_none() {
            return Err(src.error(
                name.span(),
                format!("unknown tool `{}` (available: {})", name.get_ref(), available()),
            ));
        }
        if !out.contains(name.get_ref()) {
            out.push(name.get_ref().clone());
        }
    }
    Ok(out)
}

fn reasoner_settings(
    src: &Source<'_>,
    raw: &RawReasoner,
    base: &ReasonerSettings,
    tools: &ToolRegistry,
) -> Result<ReasonerSettings, FileError> {
    let kind = match &raw.kind {
        Some(kind) => check_reasoner_kind(kind.get_ref())
            .map_err(|e| src.error(kind.span(), e.to_string()))?,
        None => base.kind,
    };
    let forbid_tools = match &raw.forbid_tools {
        Some(list) => {
            if let Some(bad) = list.iter().find(|t| tools.get(t.get_ref()).is_none()) {
                return Err(src.error(
                    bad.span(),
                    format!(
                        "unknown tool `{}` in `forbid_tools` (available: {})",
                        bad.get_ref(),
                        tools.names().join(", ")
                    ),
                ));
            }
            list.iter().map(|t| t.get_ref().clone()).collect()
        }
        None => base.forbid_tools.clone(),
    };
    let prefer = match &raw.prefer {
        Some(list) => list.iter().map(|p| p.get_ref().clone()).collect(),
        None => base.prefer.clone(),
    };
    let base_url = match &raw.base_url {
        Some(u) => {
            let url = u.get_ref().trim();
            let scheme_ok = url.starts_with("http://") || url.starts_with("https://");
            let host_ok = url.split_once("://").is_some_and(|(_, rest)| {
                !rest.is_empty() && !rest.starts_with('/') && !rest.contains(char::is_whitespace)
            });
            if !scheme_ok || !host_ok {
                return Err(src.error(
                    u.span(),
                    format!(
                        "`base_url` `{url}` is not an http(s) URL; write it like \"https://api.openai.com/v1\" or \"http://127.0.0.1:11434/v1\""
                    ),
                ));
            }
            Some(url.to_owned())
        }
        None => base.base_url.clone(),
    };
    let model = match &raw.model {
        Some(m) if m.get_ref().trim().is_empty() => {
            return Err(src.error(m.span(), "`model` must not be empty"));
        }
        Some(m) => Some(m.get_ref().trim().to_owned()),
        None => base.model.clone(),
    };
    let api_key_env = match &raw.api_key_env {
        Some(v) => {
            let name = v.get_ref();
            let valid = !name.is_empty()
                && !name.starts_with(|c: char| c.is_ascii_digit())
                && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_');
            if !valid {
                return Err(src.error(
                    v.span(),
                    format!(
                        "`api_key_env` `{name}` is not an environment variable name; name the variable that holds the key, such as \"OPENAI_API_KEY\" (the key itself never goes in the team file)"
                    ),
                ));
            }
            Some(name.clone())
        }
        None => base.api_key_env.clone(),
    };
    let request_timeout = match &raw.request_timeout {
        Some(t) => Some(parse_duration(t.get_ref()).map_err(|m| src.error(t.span(), m))?),
        None => base.request_timeout,
    };
    let max_tokens = match &raw.max_tokens {
        Some(m) if *m.get_ref() == 0 => {
            return Err(src.error(m.span(), "`max_tokens` must be at least 1"));
        }
        Some(m) => Some(*m.get_ref()),
        None => base.max_tokens,
    };
    Ok(ReasonerSettings {
        kind,
        forbid_tools,
        prefer,
        base_url,
        model,
        api_key_env,
        request_timeout,
        max_tokens,
    })
}

/// `[prices]`: `"model" = { input_per_mtok = 0.15, output_per_mtok = 0.6 }`.
fn price_table(
    src: &Source<'_>,
    raw: &BTreeMap<String, Spanned<RawPrice>>,
) -> Result<PriceTable, FileError> {
    let mut table = PriceTable::new();
    for (model, price) in raw {
        let p = price.get_ref();
        table
            .set(
                model.clone(),
                Price { input_per_mtok: p.input_per_mtok, output_per_mtok: p.output_per_mtok },
            )
            .map_err(|e| src.error(price.span(), e.to_string()))?;
    }
    Ok(table)
}

/// `[budget]`.
fn budget(src: &Source<'_>, raw: &RawBudget) -> Result<Budget, FileError> {
    let positive = |v: &Option<Spanned<u64>>, name: &str| -> Result<Option<u64>, FileError> {
        match v {
            Some(n) if *n.get_ref() == 0 => Err(src.error(
                n.span(),
                format!("`{name}` must be at least 1 (leave it out for no limit)"),
            )),
            Some(n) => Ok(Some(*n.get_ref())),
            None => Ok(None),
        }
    };
    let max_cost_usd = match &raw.max_cost_usd {
        Some(c) if !c.get_ref().is_finite() || *c.get_ref() <= 0.0 => {
            return Err(src.error(
                c.span(),
                "`max_cost_usd` must be a number of US dollars above 0 (leave it out for no limit)",
            ));
        }
        Some(c) => Some(*c.get_ref()),
        None => None,
    };
    let max_wall = match &raw.max_wall {
        Some(w) => Some(parse_duration(w.get_ref()).map_err(|m| src.error(w.span(), m))?),
        None => None,
    };
    let on_exceed = match &raw.on_exceed {
        None => OnExceed::Stop,
        Some(o) => match o.get_ref().as_str() {
            "stop" => OnExceed::Stop,
            "ask" => OnExceed::AskTop,
            other => {
                return Err(src.error(
                    o.span(),
                    format!(
                        "`on_exceed` is \"stop\" (the run stops) or \"ask\" (the top layer votes on an extension), not \"{other}\""
                    ),
                ));
            }
        },
    };
    Ok(Budget {
        max_tokens: positive(&raw.max_tokens, "max_tokens")?,
        max_cost_usd,
        max_wall,
        max_calls: positive(&raw.max_calls, "max_calls")?,
        on_exceed,
    })
}

/// `[conversation]`.
fn conversation_limits(
    src: &Source<'_>,
    raw: &RawConversation,
) -> Result<ConversationLimits, FileError> {
    let mut limits = ConversationLimits::default();
    for (value, name, slot) in [
        (&raw.max_turns, "max_turns", &mut limits.max_turns),
        (&raw.max_chars, "max_chars", &mut limits.max_chars),
    ] {
        if let Some(v) = value {
            if *v.get_ref() == 0 {
                return Err(src.error(v.span(), format!("`{name}` must be at least 1")));
            }
            *slot = *v.get_ref();
        }
    }
    Ok(limits)
}

/// Checks a heartbeat against [`MIN_HEARTBEAT`] and [`MAX_HEARTBEAT`].
pub(crate) fn check_heartbeat(heartbeat: Duration) -> Result<Duration, String> {
    if (MIN_HEARTBEAT..=MAX_HEARTBEAT).contains(&heartbeat) {
        Ok(heartbeat)
    } else {
        Err(format!(
            "a heartbeat of {} ms is out of range; use 10ms to 1h (such as \"250ms\" or \"4s\")",
            heartbeat.as_millis()
        ))
    }
}

/// The text of a team or plan file read as `bytes` (the caller reads at most `limit + 1`):
/// refused when not UTF-8, pointing at the first invalid byte, or over `limit` bytes,
/// pointing at where the limit is passed. `path` is used only in messages.
pub(crate) fn decode(path: &Path, bytes: Vec<u8>, limit: usize) -> Result<String, FileError> {
    let head = &bytes[..bytes.len().min(limit)];
    if let Err(e) = std::str::from_utf8(head) {
        // A character cut by the limit is not an encoding error; the size error follows.
        if e.error_len().is_some() || bytes.len() <= limit {
            let at = e.valid_up_to();
            let text = String::from_utf8_lossy(&head[..at]);
            let byte = head.get(at).copied().unwrap_or_default();
            return Err(Source { path, text: &text }.error(
                at..at,
                format!(
                    "the file is not UTF-8 text: byte 0x{byte:02X} at byte offset {at} cannot \
                     start or continue a character; save the file as UTF-8"
                ),
            ));
        }
    }
    if bytes.len() > limit {
        let text = String::from_utf8_lossy(head);
        return Err(Source { path, text: &text }.error(
            limit..limit,
            format!(
                "the file is over the limit of {limit} bytes; the limit is passed here: make the \
                 file smaller"
            ),
        ));
    }
    String::from_utf8(bytes).map_err(|e| {
        // Unreachable after the checks above; reported like them all the same.
        let at = e.utf8_error().valid_up_to();
        FileError {
            file: path.to_path_buf(),
            line: 1,
            column: 1,
            message: format!("the file is not UTF-8 text (byte offset {at}); save it as UTF-8"),
        }
    })
}

/// `text` with control characters escaped so it prints as one line: `\n`, `\r`, `\t`, and
/// `\u{..}` for the others (see [`agent_state::find_control`]).
pub(crate) fn escape_controls(text: &str) -> Cow<'_, str> {
    if !text.chars().any(is_control) {
        return Cow::Borrowed(text);
    }
    let mut out = String::with_capacity(text.len() + 8);
    for c in text.chars() {
        match c {
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if is_control(c) => out.extend(c.escape_unicode()),
            c => out.push(c),
        }
    }
    Cow::Owned(out)
}

/// Refuses control characters in the team file's ids and names, before anything echoes them.
fn team_controls(src: &Source<'_>, raw: &RawTeam) -> Result<(), FileError> {
    let reasoners = raw
        .reasoner
        .iter()
        .chain(raw.top.iter().filter_map(|t| t.reasoner.as_ref()))
        .chain(raw.mid.iter().filter_map(|m| m.reasoner.as_ref()))
        .chain(raw.bottom.iter().filter_map(|b| b.reasoner.as_ref()));
    for r in reasoners {
        let fields = [(&r.kind, "`kind`"), (&r.model, "`model`"), (&r.base_url, "`base_url`")];
        for (value, what) in fields {
            if let Some(v) = value {
                src.no_control(v, what)?;
            }
        }
        for v in r.forbid_tools.iter().flatten() {
            src.no_control(v, "a tool in `forbid_tools`")?;
        }
        for v in r.prefer.iter().flatten() {
            src.no_control(v, "an option in `prefer`")?;
        }
    }
    let entries = raw
        .top
        .iter()
        .map(Entry::top)
        .chain(raw.mid.iter().map(Entry::mid))
        .chain(raw.bottom.iter().map(Entry::bottom));
    for entry in entries {
        src.no_control(entry.id, "an agent's `id`")?;
        for (value, what) in [
            (entry.name, "`name`"),
            (entry.supervisor, "`supervisor`"),
            (entry.role, "`role`"),
            (entry.model, "`model`"),
        ] {
            if let Some(v) = value {
                src.no_control(v, what)?;
            }
        }
        for v in entry.capabilities.into_iter().flatten() {
            src.no_control(v, "a capability")?;
        }
        match entry.kind {
            EntryKind::Top(t) => {
                src.no_control(&t.power_type, "`power_type`")?;
                for v in t.signature_authority.iter().flatten() {
                    src.no_control(v, "a signature authority")?;
                }
            }
            EntryKind::Mid(m) => src.no_control(&m.domain, "`domain`")?,
            EntryKind::Bottom(b) => {
                for v in b.tools.get_ref() {
                    src.no_control(v, "a tool")?;
                }
            }
        }
    }
    Ok(())
}

/// Refuses control characters in the plan file's ids and names, before anything echoes them.
/// The goal and step descriptions are free text; they are escaped where they are printed.
fn plan_controls(src: &Source<'_>, raw: &RawPlan) -> Result<(), FileError> {
    src.no_control(&raw.id, "the plan's `id`")?;
    for step in &raw.steps {
        let step = step.get_ref();
        src.no_control(&step.id, "a step's `id`")?;
        src.no_control(&step.tool, "`tool`")?;
        for (value, what) in [(&step.domain, "`domain`"), (&step.agent, "`agent`")] {
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

/// Parses `250ms`, `4s`, `1m` or `1h`, above zero.
fn parse_duration(text: &str) -> Result<Duration, String> {
    let bad = || {
        format!(
            "`{text}` is not a duration; write a whole number and a unit (ms, s, m or h), such as \"250ms\", \"4s\" or \"1m\""
        )
    };
    let digits = text.bytes().take_while(u8::is_ascii_digit).count();
    let (number, unit) = text.split_at(digits);
    let number: u64 = number.parse().map_err(|_| bad())?;
    let millis = match unit {
        "ms" => Some(number),
        "s" => number.checked_mul(1_000),
        "m" => number.checked_mul(60_000),
        "h" => number.checked_mul(3_600_000),
        _ => None,
    }
    .ok_or_else(bad)?;
    if millis == 0 {
        return Err(format!("`{text}` is no time at all; a duration must be longer than 0"));
    }
    Ok(Duration::from_millis(millis))
}

// ---------------------------------------------------------------------------------------------
// Plan checks.

/// A lead and its executors, from a team.
struct Lead<'t> {
    id: &'t AgentId,
    domain: &'t str,
    executors: Vec<(&'t AgentId, &'t [String])>,
}

fn leads(team: &TeamSpec) -> Vec<Lead<'_>> {
    team.agents
        .iter()
        .filter_map(|lead| match &lead.role {
            RoleSpec::Mid(m) => Some(Lead {
                id: &lead.config.id,
                domain: &m.domain,
                executors: team
                    .agents
                    .iter()
                    .filter(|a| a.config.supervisor.as_ref() == Some(&lead.config.id))
                    .filter_map(|a| match &a.role {
                        RoleSpec::Bottom(b) => Some((&a.config.id, &b.tools[..])),
                        _ => None,
                    })
                    .collect(),
            }),
            _ => None,
        })
        .collect()
}

fn step_target(
    src: &Source<'_>,
    step: &RawStep,
    team: &TeamSpec,
    leads: &[Lead<'_>],
) -> Result<StepTarget, FileError> {
    match (&step.domain, &step.agent) {
        (Some(_), Some(agent)) => Err(src.error(
            agent.span(),
            "a step names either a `domain` or an `agent`, not both; remove one",
        )),
        (Some(domain), None) => {
            if leads.iter().any(|l| l.domain == domain.get_ref()) {
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
            let found = team.agents.iter().find(|a| a.config.id.as_str() == name);
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

/// Checks that some executor the step can reach has its tool.
fn check_reachable(
    src: &Source<'_>,
    step: &RawStep,
    target: &StepTarget,
    team: &TeamSpec,
    leads: &[Lead<'_>],
) -> Result<(), FileError> {
    let tool = step.tool.get_ref();
    let (place, executors): (String, Vec<(&AgentId, &[String])>) = match target {
        StepTarget::Domain(domain) => {
            let lead = leads.iter().find(|l| l.domain == domain);
            let executors = lead.map(|l| l.executors.clone()).unwrap_or_default();
            let name = lead.map_or("", |l| l.id.as_str());
            (format!("under the lead `{name}` of the domain `{domain}`"), executors)
        }
        StepTarget::Agent(id) => match leads.iter().find(|l| l.id == id) {
            Some(lead) => (format!("under the lead `{id}`"), lead.executors.clone()),
            None => {
                let executor = team.agents.iter().find(|a| &a.config.id == id);
                let tools = executor.and_then(|a| match &a.role {
                    RoleSpec::Bottom(b) => Some(&b.tools[..]),
                    _ => None,
                });
                let tools = tools.unwrap_or_default();
                if tools.contains(tool) {
                    return Ok(());
                }
                return Err(src.error(
                    step.tool.span(),
                    format!(
                        "executor `{id}` does not have the tool `{tool}`; it has: {}",
                        list_or_none(tools.iter().map(String::as_str))
                    ),
                ));
            }
        },
        StepTarget::Any => {
            ("in the team".to_owned(), leads.iter().flat_map(|l| l.executors.clone()).collect())
        }
    };
    if executors.iter().any(|(_, tools)| tools.contains(tool)) {
        return Ok(());
    }
    let message = if executors.is_empty() {
        format!("there is no executor {place} to run `{tool}`")
    } else {
        let mut have: Vec<&str> =
            executors.iter().flat_map(|(_, t)| t.iter().map(String::as_str)).collect();
        have.sort_unstable();
        have.dedup();
        format!("no executor {place} has the tool `{tool}`; they have: {}", have.join(", "))
    };
    Err(src.error(step.tool.span(), message))
}

/// The JSON of a TOML table; datetimes become strings.
fn table_to_json(table: &toml::Table) -> Result<serde_json::Value, String> {
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

// ---------------------------------------------------------------------------------------------
// Words.

fn noun(layer: AgentLayer) -> &'static str {
    match layer {
        AgentLayer::Top => "top power",
        AgentLayer::Mid => "mid lead",
        AgentLayer::Bottom => "bottom executor",
    }
}

fn list_or_none<'s>(items: impl Iterator<Item = &'s str>) -> String {
    let items: Vec<&str> = items.collect();
    if items.is_empty() { "none".to_owned() } else { items.join(", ") }
}
