//! The team file: [`parse_team`] into a [`TeamFile`] (the team and its roles, each agent's and
//! role's reasoner, prices, budget, conversation limits), every check with the position it
//! refers to, and [`default_team`].

use std::collections::{BTreeMap, HashSet};
use std::path::Path;
use std::str::FromStr;
use std::sync::Arc;
use std::time::Duration;

use agent_core::tools::{Sandbox, SandboxLimits, ToolContext, ToolRegistry};
use agent_layers::{BottomSpec, MidSpec, TopSpec};
use agent_llm::{Budget, ConversationLimits, OnExceed, Price, PriceTable};
use agent_pool::{AgentSpec, DEFAULT_HEARTBEAT, DEFAULT_MAX_AGENTS, RoleSpec, TeamSpec};
use agent_state::{
    AgentConfig, AgentId, AgentLayer, Capability, DEFAULT_MAX_SPAWN_DEPTH, GuardSettings, Limit,
    MAX_LIMIT_MS, OnStuck, Role, RoleBook, RoleError, Timeouts, check_agent_id, check_role_name,
};
use thiserror::Error;
use toml::Spanned;

use crate::error::{FileError, Seg, Source};
use crate::executor::{ExecutorSettings, check_kind, executor_settings};
use crate::limits::{MAX_TEAM_FILE_BYTES, check_heartbeat, parse_duration};
use crate::mcp::McpServerDecl;
use crate::raw::{
    Entry, EntryKind, RawBottom, RawBudget, RawConversation, RawMid, RawPrice, RawReasoner,
    RawRole, RawSandbox, RawTeam, RawTimeouts, RawTop,
};

/// A lead's `max_subordinates` when the team file does not say.
pub const DEFAULT_MAX_SUBORDINATES: usize = 4;

/// The largest `max_spawn_depth` a team file may give (the smallest is 1).
pub const MAX_SPAWN_DEPTH_LIMIT: u32 = 10;

/// A team file, parsed and checked: the team and how each agent reasons, what models cost,
/// the run's budget and how much each agent remembers.
#[derive(Clone, Debug, PartialEq)]
pub struct TeamFile {
    /// The team, ready for [`agent_pool::Team::start`].
    pub spec: TeamSpec,
    /// The reasoner of every agent not in `agent_reasoners`.
    pub default_reasoner: ReasonerSettings,
    /// Agents with a `reasoner` table of their own, with the default's fields filled in.
    pub agent_reasoners: BTreeMap<AgentId, ReasonerSettings>,
    /// Roles (`[[roles]]`) with a `reasoner` table of their own, by role name, with the
    /// default's fields filled in: the reasoner of the agents of that role spawned while the
    /// team works. A role's `model` is in the role itself (`spec.roles`).
    pub role_reasoners: BTreeMap<String, ReasonerSettings>,
    /// Model prices (`[prices]`).
    pub prices: PriceTable,
    /// The run's reasoning budget (`[budget]`).
    pub budget: Budget,
    /// How much history each agent keeps (`[conversation]`).
    pub conversation: ConversationLimits,
    /// The executor of the agents with a `kind` (`[http]`, `[[endpoints]]`, `[executor]`,
    /// `executor_retry`).
    pub executor: ExecutorSettings,
    /// How `shell` commands are confined (`[sandbox]`, and `network` of executors and roles).
    pub sandbox: SandboxSettings,
    /// The MCP servers whose tools executors and roles may list (`[[mcp_servers]]`).
    pub mcp_servers: Vec<McpServerDecl>,
}

/// The team file's sandbox settings: `[sandbox]` (network, limits) and the `network` of
/// executors (`[[bottom]]`) and roles (`[[roles]]`).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct SandboxSettings {
    /// Whether commands may use the network unless an agent or role says otherwise
    /// (`[sandbox] network`, default `false`).
    pub network: bool,
    /// The limits of every command.
    pub limits: SandboxLimits,
    /// Executors with their own `network`.
    pub agent_network: BTreeMap<AgentId, bool>,
    /// Roles with their own `network`, by role name.
    pub role_network: BTreeMap<String, bool>,
    /// Absolute paths commands see read-only even inside a hidden directory
    /// (`[sandbox] read_only`).
    pub read_only: Vec<std::path::PathBuf>,
    /// Names of Strata's environment variables passed to commands (`[sandbox] env`); nothing
    /// else of its environment reaches them but `PATH`, `LANG`, `TERM` and a `HOME`.
    pub env: Vec<String>,
}

impl SandboxSettings {
    /// The team's sandbox: the default network setting and the limits.
    pub fn sandbox(&self) -> Sandbox {
        let sandbox = Sandbox::new().with_network(self.network).with_limits(self.limits);
        let sandbox = sandbox.pass_env(self.env.iter().cloned());
        self.read_only.iter().fold(sandbox, |sandbox, path| sandbox.show_read_only(path))
    }

    /// Whether the commands of agent `id` (of role `role`, if it has one) may use the
    /// network: its own `network`, else its role's, else `[sandbox] network`.
    pub fn network_for(&self, id: &AgentId, role: Option<&str>) -> bool {
        self.agent_network
            .get(id)
            .or_else(|| role.and_then(|role| self.role_network.get(role)))
            .copied()
            .unwrap_or(self.network)
    }
}

impl TeamFile {
    /// The executor that runs the subtasks of this team's executors with a `kind`, in
    /// `workspace` ([`ExecutorSettings::executor`]).
    pub fn executor(&self, workspace: Arc<ToolContext>) -> agent_executor::Executor {
        self.executor.executor(workspace)
    }
}

/// Which reasoner an agent uses, and its settings.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ReasonerSettings {
    /// The kind.
    pub kind: ReasonerKind,
    /// Tools whose use makes a top power veto a plan.
    pub forbid_tools: Vec<String>,
    /// Options to vote for first in arbitration.
    pub prefer: Vec<String>,
    /// For `openai` and `anthropic`: the API's base URL (default: the vendor's; for `openai`,
    /// `$OPENAI_BASE_URL` first, as the official clients read it).
    pub base_url: Option<String>,
    /// The model (an agent's own `model` wins).
    pub model: Option<String>,
    /// For the model reasoners: whether answers stream from the model and show as they are
    /// written (`strata run`'s live view and `--json`); `None`: the default, on.
    pub stream: Option<bool>,
    /// The environment variable holding the API key.
    pub api_key_env: Option<String>,
    /// How long one model call may take.
    pub request_timeout: Option<Duration>,
    /// Most tokens one decision may generate.
    pub max_tokens: Option<u32>,
    /// For `openai` and `anthropic`: how structured answers are asked for (default
    /// [`agent_llm::StructuredOutput::Auto`], the best mode the server takes).
    pub structured_output: agent_llm::StructuredOutput,
    /// For `openai` and `anthropic`: the model is small (such as Gemma 3 270M behind a local
    /// server), so an executor is offered only its step's own tool, with the plan's arguments,
    /// as the embedded model always is. Default `false`.
    pub small_model: bool,
    /// For the model reasoners: most times an invalid plan goes back to the model with its
    /// problems before the plan is given up (0 to 10); `None`: the default,
    /// [`agent_llm::DEFAULT_PLAN_REPAIRS`].
    pub plan_repairs: Option<u32>,
}

/// Most repairs `[reasoner] plan_repairs` may give a plan.
const MAX_PLAN_REPAIRS: u32 = 10;

/// The reasoners a team file can name.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum ReasonerKind {
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

/// A reasoner kind that does not exist, such as a `--reasoner` flag's.
#[derive(Clone, Debug, PartialEq, Eq, Error)]
#[error("unknown reasoner kind `{kind}`; known kinds: {}", ReasonerKind::known())]
pub struct UnknownReasonerKind {
    /// The kind given.
    pub kind: String,
}

impl ReasonerKind {
    /// Every kind.
    pub const ALL: [ReasonerKind; 4] = [
        ReasonerKind::RuleBased,
        ReasonerKind::OpenAi,
        ReasonerKind::Anthropic,
        ReasonerKind::Local,
    ];

    /// The name used in team files and on the command line, such as `rule-based`; the
    /// [`FromStr`] impl reads it back.
    pub const fn as_str(self) -> &'static str {
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

impl FromStr for ReasonerKind {
    type Err = UnknownReasonerKind;

    /// The reasoner kind called `kind` ([`ReasonerKind::as_str`]).
    fn from_str(kind: &str) -> Result<Self, Self::Err> {
        ReasonerKind::ALL
            .into_iter()
            .find(|k| k.as_str() == kind)
            .ok_or_else(|| UnknownReasonerKind { kind: kind.to_owned() })
    }
}

/// Parses and checks a team file's `text` (the format is in the crate docs). `path` is used
/// only in error messages; `tools` is the registry the executors' tools (and `forbid_tools`)
/// must come from. The first mistake found is returned, pointing at where it is written.
pub fn parse_team(path: &Path, text: &str, tools: &ToolRegistry) -> Result<TeamFile, FileError> {
    let src = Source { path, text };
    src.check_size(MAX_TEAM_FILE_BYTES, "team file")?;
    let raw: RawTeam = toml::from_str(text).map_err(|e| src.toml_error(&e))?;
    TeamReader { src: &src, raw: &raw, tools }.read()
}

/// Reads a parsed team file into a [`TeamFile`], table by table, in the order its mistakes are
/// reported.
struct TeamReader<'r> {
    src: &'r Source<'r>,
    raw: &'r RawTeam,
    /// The registry the executors' tools must come from.
    tools: &'r ToolRegistry,
}

/// The configured agents read from a team file, with the settings kept beside the spec.
struct ReadAgents {
    specs: Vec<AgentSpec>,
    /// Reasoner settings of the agents that have their own.
    reasoners: BTreeMap<AgentId, ReasonerSettings>,
    /// The role of each configured agent that names one.
    roles: BTreeMap<AgentId, String>,
}

impl<'r> TeamReader<'r> {
    fn read(&self) -> Result<TeamFile, FileError> {
        let (src, raw, tools) = (self.src, self.raw, self.tools);
        team_controls(src, raw)?;
        let mcp_servers = crate::mcp::declared(src, &raw.mcp_servers)?;
        let heartbeat = self.heartbeat()?;
        let max_agents = self.max_agents()?;
        let default_reasoner = match &raw.reasoner {
            Some(r) => reasoner_settings(src, r, &ReasonerSettings::default(), tools)?,
            None => ReasonerSettings::default(),
        };
        let max_spawn_depth = self.max_spawn_depth()?;
        let (roles, role_reasoners) = role_book(src, &raw.roles, &default_reasoner, tools)?;
        let entries = self.entries();
        let team = self.index(&entries, max_agents)?;
        let timeouts = match &raw.timeouts {
            Some(t) => timeouts(src, t)?,
            None => Timeouts::default(),
        };
        let agents = self.agents(&team, &roles, &default_reasoner, timeouts)?;
        let executor = executor_settings(src, raw, &kinds(&agents.specs))?;
        let prices = match &raw.prices {
            Some(p) => price_table(src, p)?,
            None => PriceTable::new(),
        };
        let budget = match &raw.budget {
            Some(b) => budget(src, b)?,
            None => Budget::default(),
        };
        let conversation = match &raw.conversation {
            Some(c) => conversation_limits(src, c)?,
            None => ConversationLimits::default(),
        };
        let sandbox = sandbox_settings(src, raw)?;
        spawn_grants(src, &raw.roles, &roles, &sandbox)?;
        let mut spec = TeamSpec::new(agents.specs);
        spec.heartbeat = heartbeat;
        spec.max_agents = max_agents;
        spec.roles = roles;
        spec.max_spawn_depth = max_spawn_depth;
        spec.agent_roles = agents.roles;
        spec.timeouts = timeouts;
        // What a spawn is checked against at run time, as at load (`spawn_grants`).
        spec.network = agent_core::spawn::NetworkGrants {
            default: sandbox.network,
            agents: sandbox.agent_network.clone(),
            roles: sandbox.role_network.clone(),
        };
        self.governance(&mut spec, &budget)?;
        Ok(TeamFile {
            spec,
            default_reasoner,
            agent_reasoners: agents.reasoners,
            role_reasoners,
            prices,
            budget,
            conversation,
            executor,
            sandbox,
            mcp_servers,
        })
    }

    /// `heartbeat`, checked.
    fn heartbeat(&self) -> Result<Duration, FileError> {
        Ok(match &self.raw.heartbeat {
            Some(h) => parse_duration(h.get_ref())
                .and_then(|d| check_heartbeat(d).map_err(|e| e.to_string()))
                .map_err(|m| self.src.error(h.span(), format!("`heartbeat`: {m}")))?,
            None => DEFAULT_HEARTBEAT,
        })
    }

    /// `max_agents`, from 1 to the largest pool.
    fn max_agents(&self) -> Result<usize, FileError> {
        Ok(match &self.raw.max_agents {
            Some(m) if *m.get_ref() == 0 => {
                return Err(self.src.error(m.span(), "`max_agents` must be at least 1"));
            }
            Some(m) if *m.get_ref() > agent_pool::MAX_POOL_SIZE => {
                return Err(self.src.error(
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
        })
    }

    /// `max_spawn_depth`, from 1 to [`MAX_SPAWN_DEPTH_LIMIT`].
    fn max_spawn_depth(&self) -> Result<u32, FileError> {
        Ok(match &self.raw.max_spawn_depth {
            Some(d) if !(1..=MAX_SPAWN_DEPTH_LIMIT).contains(d.get_ref()) => {
                return Err(self.src.error(
                    d.span(),
                    format!(
                        "`max_spawn_depth` must be from 1 to {MAX_SPAWN_DEPTH_LIMIT}, not {} (a top power's lead is depth 1; default {DEFAULT_MAX_SPAWN_DEPTH})",
                        d.get_ref()
                    ),
                ));
            }
            Some(d) => *d.get_ref(),
            None => DEFAULT_MAX_SPAWN_DEPTH,
        })
    }

    /// The `[[top]]`, `[[mid]]` and `[[bottom]]` entries in the order they are written.
    fn entries(&self) -> Vec<Entry<'r>> {
        let raw = self.raw;
        let mut entries: Vec<Entry<'r>> = raw
            .top
            .iter()
            .map(Entry::top)
            .chain(raw.mid.iter().map(Entry::mid))
            .chain(raw.bottom.iter().map(Entry::bottom))
            .collect();
        entries.sort_by_key(|e| e.id.span().start);
        entries
    }

    /// The entries by id, each id once; at most `max_agents` of them, making the team's
    /// shape (`crate::shape`).
    fn index<'e>(
        &self,
        entries: &'e [Entry<'r>],
        max_agents: usize,
    ) -> Result<TeamIndex<'e, 'r>, FileError> {
        let src = self.src;
        let team = TeamIndex::new(src, entries)?;
        if let Some(extra) = entries.get(max_agents) {
            let limit = match &self.raw.max_agents {
                Some(m) => {
                    format!("`max_agents` (line {}) is {max_agents}", src.position(m.span()).0)
                }
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
        crate::shape::shape(src, self.raw, entries)?;
        Ok(team)
    }

    /// Every entry's agent spec, reasoner and role, checked against the team.
    fn agents(
        &self,
        team: &TeamIndex<'_, 'r>,
        roles: &RoleBook,
        default_reasoner: &ReasonerSettings,
        timeouts: Timeouts,
    ) -> Result<ReadAgents, FileError> {
        let (src, tools) = (self.src, self.tools);
        let entries = team.entries;
        let mut read = ReadAgents {
            specs: Vec::with_capacity(entries.len()),
            reasoners: BTreeMap::new(),
            roles: BTreeMap::new(),
        };
        let mut domains: BTreeMap<&str, &Entry<'_>> = BTreeMap::new();
        // Executors placed under each lead so far (counted as the entries go, not searched
        // for: a generated team has 100 000 agents).
        let mut placed: BTreeMap<&str, usize> = BTreeMap::new();
        for entry in entries {
            let mut spec = agent_spec(src, entry, &mut placed, team, tools, &mut domains)?;
            if entry.timeout_ms.is_none() {
                // Its turns are bounded by the team's `[timeouts] turn_ms`.
                spec.config.timeout_ms = timeouts.turn_ms;
            }
            if let Some(r) = entry.reasoner {
                let settings = reasoner_settings(src, r, default_reasoner, tools)?;
                read.reasoners.insert(spec.config.id.clone(), settings);
            }
            if let Some(role) = agent_role(src, entry, roles)? {
                read.roles.insert(spec.config.id.clone(), role);
            }
            read.specs.push(spec);
        }
        share_tool_lists(&mut read.specs);
        Ok(read)
    }

    /// `[guards]`, `[arbitration]` and `[approvals]` into `spec`; a budget that asks a human
    /// needs one.
    fn governance(&self, spec: &mut TeamSpec, budget: &Budget) -> Result<(), FileError> {
        let (src, raw) = (self.src, self.raw);
        if let Some(g) = &raw.guards {
            spec.guards = guards(src, g)?;
        }
        if let Some(a) = &raw.arbitration {
            let d = spec.arbitration;
            spec.arbitration = agent_state::ArbitrationSettings {
                escalations: a.escalations.unwrap_or(d.escalations),
                acceptance: a.acceptance.unwrap_or(d.acceptance),
                vetoed_plans: a.vetoed_plans.unwrap_or(d.vetoed_plans),
            };
        }
        if let Some(a) = &raw.approvals {
            spec.approvals = approvals(src, a)?;
        }
        if budget.on_exceed == OnExceed::AskHuman
            && spec.approvals.humans.is_empty()
            && let Some(o) = raw.budget.as_ref().and_then(|b| b.on_exceed.as_ref())
        {
            return Err(src.error(
                o.span(),
                "[budget] `on_exceed = \"ask_human\"` needs someone to decide: list them in [approvals] `humans = [\"name\"]`",
            ));
        }
        Ok(())
    }
}

/// The kind of every executor that has one, by id.
fn kinds(agents: &[AgentSpec]) -> BTreeMap<AgentId, String> {
    agents
        .iter()
        .filter_map(|a| match &a.role {
            RoleSpec::Bottom(BottomSpec { kind: Some(kind), .. }) => {
                Some((a.config.id.clone(), kind.to_string()))
            }
            _ => None,
        })
        .collect()
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

/// The team used when no team file is given: the one
/// [`example_team_toml`](crate::example_team_toml) describes (3 powers, 2 leads, 4 executors).
pub fn default_team() -> TeamFile {
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
        role: RoleSpec::Bottom(BottomSpec::new(all.iter().cloned())),
    };
    let mut spec = TeamSpec::new(vec![
        top("top-a", "Power A", "power_a", 2.0),
        top("top-b", "Power B", "power_b", 1.0),
        top("top-c", "Power C", "power_c", 1.0),
        mid("mid-docs", "Docs lead", "docs"),
        mid("mid-build", "Build lead", "build"),
        bottom("bottom-d1", "Docs executor 1", "mid-docs"),
        bottom("bottom-d2", "Docs executor 2", "mid-docs"),
        bottom("bottom-b1", "Build executor 1", "mid-build"),
        bottom("bottom-b2", "Build executor 2", "mid-build"),
    ]);
    // Its turns are bounded by the team's `[timeouts] turn_ms`, as a file's agents' are.
    for agent in &mut spec.agents {
        agent.config.timeout_ms = spec.timeouts.turn_ms;
    }
    TeamFile {
        spec,
        default_reasoner: ReasonerSettings::default(),
        agent_reasoners: BTreeMap::new(),
        role_reasoners: BTreeMap::new(),
        prices: PriceTable::new(),
        budget: Budget::default(),
        conversation: ConversationLimits::default(),
        executor: ExecutorSettings::default(),
        sandbox: SandboxSettings::default(),
        mcp_servers: Vec::new(),
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
    let config = agent_config(src, entry, team)?;
    let role = match entry.kind {
        EntryKind::Top(raw) => top_role(src, entry, raw, &config)?,
        EntryKind::Mid(raw) => mid_role(src, entry, raw, domains)?,
        EntryKind::Bottom(raw) => bottom_role(src, raw, placed, team, tools)?,
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

/// An entry's configuration: name, supervisor, role, capabilities, model, temperature,
/// retries and turn limit; a `kind` only on an executor.
fn agent_config(
    src: &Source<'_>,
    entry: &Entry<'_>,
    team: &TeamIndex<'_, '_>,
) -> Result<AgentConfig, FileError> {
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
        config.timeout_ms = turn_limit(src, timeout)?;
    }
    if let Some(kind) = entry.executor_kind
        && entry.layer != AgentLayer::Bottom
    {
        return Err(src.error(
            kind.span(),
            format!(
                "a {} runs no executor kind: only a bottom executor takes a `kind` (the kind it runs its subtasks through); remove it, or put it on an executor",
                noun(entry.layer)
            ),
        ));
    }
    Ok(config)
}

/// An agent's `timeout_ms`: above 0, at most [`MAX_LIMIT_MS`].
fn turn_limit(src: &Source<'_>, timeout: &Spanned<u64>) -> Result<u64, FileError> {
    if *timeout.get_ref() == 0 {
        return Err(src.error(timeout.span(), "`timeout_ms` must be greater than 0"));
    }
    if *timeout.get_ref() > MAX_LIMIT_MS {
        return Err(src.error(
            timeout.span(),
            format!(
                "`timeout_ms` is {}, over the longest time limit, {MAX_LIMIT_MS} ms (7 days); give the longest one heartbeat turn may take, such as {}",
                timeout.get_ref(),
                agent_state::DEFAULT_TURN_MS
            ),
        ));
    }
    Ok(*timeout.get_ref())
}

/// A `[[top]]` entry's role: a required signer must hold `review`.
fn top_role(
    src: &Source<'_>,
    entry: &Entry<'_>,
    raw: &RawTop,
    config: &AgentConfig,
) -> Result<RoleSpec, FileError> {
    let spec = top_spec(src, raw)?;
    // A required signer that may not review would leave what it must sign pending.
    if !spec.signature_authority.is_empty() && !config.has(Capability::Review) {
        let span =
            entry.capabilities.and_then(|c| c.first()).map_or(entry.id.span(), Spanned::span);
        return Err(src.error(
            span,
            format!(
                "top power `{}` has signature authority ({}) but not the capability `review`, which signing needs: what it must sign would stay pending forever; add \"review\" to its `capabilities`, or drop the authority (`signature_authority = []`)",
                entry.id(),
                spec.signature_authority.join(", ")
            ),
        ));
    }
    Ok(RoleSpec::Top(spec))
}

/// A `[[mid]]` entry's role: its domain, not empty and not another lead's.
fn mid_role<'e, 'a>(
    src: &Source<'_>,
    entry: &'e Entry<'a>,
    raw: &'a RawMid,
    domains: &mut BTreeMap<&'a str, &'e Entry<'a>>,
) -> Result<RoleSpec, FileError> {
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
    Ok(RoleSpec::Mid(MidSpec { domain: domain.clone(), max_subordinates }))
}

/// A `[[bottom]]` entry's role: room under its lead, its tools, and an executor `kind` or an
/// `ooda` loop (not both).
fn bottom_role<'a>(
    src: &Source<'_>,
    raw: &'a RawBottom,
    placed: &mut BTreeMap<&'a str, usize>,
    team: &TeamIndex<'_, 'a>,
    tools: &ToolRegistry,
) -> Result<RoleSpec, FileError> {
    // A single agent has no lead (the shape is checked first).
    if let Some(supervisor) = &raw.supervisor {
        room_under_lead(src, supervisor, placed, team)?;
    }
    let spec = BottomSpec::new(executor_tools(src, &raw.tools, tools)?);
    Ok(match (&raw.kind, &raw.ooda) {
        (Some(_), Some(ooda)) => {
            return Err(src.error(
                ooda.span(),
                "an executor runs either an executor `kind` or an `ooda` loop, not both; remove one",
            ));
        }
        (Some(kind), None) => RoleSpec::Bottom(spec.with_kind(check_kind(src, kind)?)),
        (None, Some(ooda)) => {
            let config = ooda_config(src, ooda, &spec.tools)?;
            RoleSpec::Bottom(spec.with_ooda(config))
        }
        (None, None) => RoleSpec::Bottom(spec),
    })
}

/// Room for one more executor under the lead `supervisor` names (its `max_subordinates`).
fn room_under_lead<'a>(
    src: &Source<'_>,
    supervisor: &'a Spanned<String>,
    placed: &mut BTreeMap<&'a str, usize>,
    team: &TeamIndex<'_, 'a>,
) -> Result<(), FileError> {
    let lead = supervisor.get_ref();
    let max = team.by_id.get(lead.as_str()).and_then(|e| match e.kind {
        EntryKind::Mid(m) => Some(m.max_subordinates.unwrap_or(DEFAULT_MAX_SUBORDINATES)),
        _ => None,
    });
    let siblings = placed.entry(lead.as_str()).or_insert(0);
    if let Some(max) = max
        && *siblings >= max
    {
        return Err(src.error(
            supervisor.span(),
            format!(
                "lead `{lead}` already has {max} executors, its `max_subordinates`; raise it or report to another lead ({})",
                team.ids_on(AgentLayer::Mid)
            ),
        ));
    }
    *siblings += 1;
    Ok(())
}

/// An executor's `ooda = { ... }`: an OODA configuration (version 1 or 2; see
/// `agent_state::ooda`), its `tools` by default the executor's, all of them among the
/// executor's.
fn ooda_config(
    src: &Source<'_>,
    raw: &Spanned<toml::Table>,
    granted: &[String],
) -> Result<agent_state::ooda::OodaConfig, FileError> {
    let mut json = crate::plan::table_to_json(raw.get_ref())
        .map_err(|m| src.error(raw.span(), format!("in `ooda`: {m}")))?;
    if let serde_json::Value::Object(map) = &mut json {
        map.entry("tools").or_insert_with(|| serde_json::json!(granted));
    }
    let config = agent_state::ooda::OodaConfig::from_json(json)
        .map_err(|e| src.error(raw.span(), format!("in `ooda`: {e}")))?;
    if let Some(tool) = config.tools.iter().find(|t| !granted.contains(t)) {
        return Err(src.error(
            raw.span(),
            format!(
                "in `ooda`: the tool `{tool}` is not one of the executor's `tools` ({}); an OODA agent holds at most those",
                granted.join(", ")
            ),
        ));
    }
    if !config.sandbox_enabled {
        return Err(src.error(
            raw.span(),
            "in `ooda`: `sandbox_enabled = false` is refused: an OODA agent's actions run in the run's sandbox",
        ));
    }
    Ok(config)
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
    // Built only for an error: listing the layer's ids for every entry of a generated team of
    // 100 000 agents would make parsing quadratic.
    let wanted = || {
        format!(
            "a {} reports to a {} ({})",
            noun(entry.layer),
            noun(expected),
            team.ids_on(expected)
        )
    };
    if name == entry.id() {
        return Err(src.error(
            supervisor.span(),
            format!("supervisor cycle: `{name}` cannot supervise itself; {}", wanted()),
        ));
    }
    let Some(boss) = team.by_id.get(name.as_str()) else {
        return Err(src.error(supervisor.span(), format!("unknown agent `{name}`; {}", wanted())));
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
                    format!("supervisor cycle: {}; {}", chain.join(" → "), wanted()),
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
    Err(src
        .error(supervisor.span(), format!("`{name}` is a {}, but {}", noun(boss.layer), wanted())))
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
            let message =
                crate::mcp::unknown_mcp_tool(name.get_ref(), tools).unwrap_or_else(|| {
                    format!("unknown tool `{}` (available: {})", name.get_ref(), available())
                });
            return Err(src.error(name.span(), message));
        }
        if !out.contains(name.get_ref()) {
            out.push(name.get_ref().clone());
        }
    }
    Ok(out)
}

/// A reasoner's `forbid_tools`: registered tools.
fn forbidden_tools(
    src: &Source<'_>,
    list: &[Spanned<String>],
    tools: &ToolRegistry,
) -> Result<Vec<String>, FileError> {
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
    Ok(list.iter().map(|t| t.get_ref().clone()).collect())
}

/// A reasoner's `base_url`: an http(s) URL with a host, trimmed.
fn base_url(src: &Source<'_>, u: &Spanned<String>) -> Result<String, FileError> {
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
    Ok(url.to_owned())
}

/// A reasoner's `api_key_env`: an environment variable's name (never the key).
fn api_key_env(src: &Source<'_>, v: &Spanned<String>) -> Result<String, FileError> {
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
    Ok(name.clone())
}

fn reasoner_settings(
    src: &Source<'_>,
    raw: &RawReasoner,
    base: &ReasonerSettings,
    tools: &ToolRegistry,
) -> Result<ReasonerSettings, FileError> {
    let kind = match &raw.kind {
        Some(kind) => ReasonerKind::from_str(kind.get_ref())
            .map_err(|e| src.error(kind.span(), e.to_string()))?,
        None => base.kind,
    };
    let forbid_tools = match &raw.forbid_tools {
        Some(list) => forbidden_tools(src, list, tools)?,
        None => base.forbid_tools.clone(),
    };
    let prefer = match &raw.prefer {
        Some(list) => list.iter().map(|p| p.get_ref().clone()).collect(),
        None => base.prefer.clone(),
    };
    let base_url = match &raw.base_url {
        Some(u) => Some(base_url(src, u)?),
        None => base.base_url.clone(),
    };
    let model = match &raw.model {
        Some(m) if m.get_ref().trim().is_empty() => {
            return Err(src.error(m.span(), "`model` must not be empty"));
        }
        Some(m) => Some(m.get_ref().trim().to_owned()),
        None => base.model.clone(),
    };
    let stream = raw.stream.or(base.stream);
    let api_key_env = match &raw.api_key_env {
        Some(v) => Some(api_key_env(src, v)?),
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
    let structured_output = match &raw.structured_output {
        Some(m) => m
            .get_ref()
            .parse::<agent_llm::StructuredOutput>()
            .map_err(|e| src.error(m.span(), format!("`structured_output`: {e}")))?,
        None => base.structured_output,
    };
    let small_model = raw.small_model.unwrap_or(base.small_model);
    let plan_repairs = match &raw.plan_repairs {
        Some(n) if *n.get_ref() > MAX_PLAN_REPAIRS => {
            return Err(
                src.error(n.span(), format!("`plan_repairs` must be at most {MAX_PLAN_REPAIRS}"))
            );
        }
        Some(n) => Some(*n.get_ref()),
        None => base.plan_repairs,
    };
    Ok(ReasonerSettings {
        kind,
        forbid_tools,
        prefer,
        base_url,
        model,
        stream,
        api_key_env,
        request_timeout,
        max_tokens,
        structured_output,
        small_model,
        plan_repairs,
    })
}

// ---------------------------------------------------------------------------------------------
// Roles.

/// `[[roles]]`: the checked [`RoleBook`], and the roles with a `reasoner` table of their own.
/// Names, layers, tool and capability names are read here with their positions; the rules
/// between roles (what each may enable, what its layer may hold) are [`RoleBook::new`]'s, and
/// its error is pointed at the value it is about ([`role_error`]).
fn role_book(
    src: &Source<'_>,
    raw: &[RawRole],
    default_reasoner: &ReasonerSettings,
    tools: &ToolRegistry,
) -> Result<(RoleBook, BTreeMap<String, ReasonerSettings>), FileError> {
    let mut roles = Vec::with_capacity(raw.len());
    let mut reasoners = BTreeMap::new();
    for (i, r) in raw.iter().enumerate() {
        let name = r.name.get_ref();
        check_role_name(name).map_err(|e| src.error(r.name.span(), e.to_string()))?;
        if let Some(first) = raw[..i].iter().find(|o| o.name.get_ref() == name) {
            let line = src.position(first.name.span()).0;
            return Err(src.error(
                r.name.span(),
                format!(
                    "role `{name}` is already defined on line {line}; role names must be unique"
                ),
            ));
        }
        roles.push(role(src, r, tools)?);
        if let Some(settings) = &r.reasoner {
            reasoners
                .insert(name.clone(), reasoner_settings(src, settings, default_reasoner, tools)?);
        }
    }
    let book = RoleBook::new(roles).map_err(|e| role_error(src, raw, &e))?;
    Ok((book, reasoners))
}

/// One `[[roles]]` entry, read (the rules between roles are the role book's).
fn role(src: &Source<'_>, r: &RawRole, tools: &ToolRegistry) -> Result<Role, FileError> {
    let name = r.name.get_ref();
    let layer = match r.layer.get_ref().as_str() {
        "mid" => AgentLayer::Mid,
        "bottom" => AgentLayer::Bottom,
        // Refused by the role book, with its reason.
        "top" => AgentLayer::Top,
        other => {
            return Err(src.error(
                r.layer.span(),
                format!(
                    "`layer` is \"mid\" (a lead, which may spawn agents) or \"bottom\" (an executor), not \"{other}\""
                ),
            ));
        }
    };
    let mut role = Role::new(name.clone(), layer);
    role.description = r.description.clone().unwrap_or_default();
    if let Some(prompt) = &r.system_prompt {
        if prompt.get_ref().trim().is_empty() {
            return Err(src.error(
                prompt.span(),
                "`system_prompt` must not be empty; leave it out to use the layer's own",
            ));
        }
        role.system_prompt = Some(prompt.get_ref().clone());
    }
    match (&r.tools, layer) {
        (Some(list), AgentLayer::Bottom) => role.tools = executor_tools(src, list, tools)?,
        // Refused by the role book: only bottom roles call tools.
        (Some(list), _) => {
            role.tools = list.get_ref().iter().map(|t| t.get_ref().clone()).collect()
        }
        (None, AgentLayer::Bottom) => {
            return Err(src.error(
                r.name.span(),
                format!(
                    "role `{name}` is a bottom role and needs `tools`, the tools its agents run (available: {})",
                    tools.names().join(", ")
                ),
            ));
        }
        (None, _) => {}
    }
    if let Some(names) = &r.capabilities {
        role.capabilities = Some(capability_names(src, layer, names)?);
    }
    if let Some(m) = &r.model {
        if m.get_ref().trim().is_empty() {
            return Err(src.error(m.span(), "`model` must not be empty"));
        }
        role.model = Some(m.get_ref().trim().to_owned());
    }
    if let Some(list) = &r.enabled_agents {
        role.enabled_agents = list.get_ref().iter().map(|e| e.get_ref().clone()).collect();
    }
    role.max_instances = r.max_instances.as_ref().map(|m| *m.get_ref());
    // Whether its layer may have one is the role book's check.
    if let Some(kind) = &r.kind {
        role.kind = Some(check_kind(src, kind)?);
    }
    Ok(role)
}

/// A [`RoleError`] as a [`FileError`] pointing at the value it is about: the `enabled_agents`
/// entry, the capability, the `tools` list, the `layer`, the name.
fn role_error(src: &Source<'_>, raw: &[RawRole], error: &RoleError) -> FileError {
    let find = |name: &str| raw.iter().find(|r| r.name.get_ref() == name);
    let enabled_entry = |role: &str, enabled: &str| {
        find(role)
            .and_then(|r| r.enabled_agents.as_ref())
            .and_then(|list| list.get_ref().iter().find(|e| e.get_ref() == enabled))
            .map(Spanned::span)
    };
    let mut message = error.to_string();
    let (role, span) = match error {
        RoleError::BadName { name } => (name, None),
        RoleError::Duplicate { role } => {
            (role, raw.iter().filter(|r| r.name.get_ref() == role).nth(1).map(|r| r.name.span()))
        }
        RoleError::TopRole { role } => (role, find(role).map(|r| r.layer.span())),
        RoleError::UnknownRole { role, enabled, .. }
        | RoleError::EnablesHigherLayer { role, enabled, .. } => {
            (role, enabled_entry(role, enabled))
        }
        RoleError::CannotDelegate { role, .. } => {
            (role, find(role).and_then(|r| r.enabled_agents.as_ref()).map(Spanned::span))
        }
        RoleError::CapabilityNotAllowed { role, layer, capability } => {
            let allowed: Vec<&str> = layer.capabilities().map(Capability::as_str).collect();
            message = format!("{message}; allowed: {}", allowed.join(", "));
            let span = find(role)
                .and_then(|r| r.capabilities.as_ref())
                .and_then(|list| list.iter().find(|c| c.get_ref() == capability.as_str()))
                .map(Spanned::span);
            (role, span)
        }
        RoleError::ToolsNotAllowed { role, .. } => {
            (role, find(role).and_then(|r| r.tools.as_ref()).map(Spanned::span))
        }
        RoleError::ZeroInstances { role } => {
            (role, find(role).and_then(|r| r.max_instances.as_ref()).map(Spanned::span))
        }
        RoleError::KindNotAllowed { role, .. } => {
            (role, find(role).and_then(|r| r.kind.as_ref()).map(Spanned::span))
        }
    };
    let span = span.or_else(|| find(role).map(|r| r.name.span())).unwrap_or(0..0);
    src.error(span, message)
}

/// A role's capability names, each a known capability (whether its layer may hold it is the
/// role book's check).
fn capability_names(
    src: &Source<'_>,
    layer: AgentLayer,
    names: &[Spanned<String>],
) -> Result<Vec<Capability>, FileError> {
    let mut capabilities = Vec::with_capacity(names.len());
    for name in names {
        let Some(capability) = Capability::ALL.into_iter().find(|c| c.as_str() == name.get_ref())
        else {
            let allowed: Vec<&str> = layer.capabilities().map(Capability::as_str).collect();
            return Err(src.error(
                name.span(),
                format!(
                    "unknown capability `{}`; a {layer} role may hold: {}",
                    name.get_ref(),
                    allowed.join(", ")
                ),
            ));
        };
        if !capabilities.contains(&capability) {
            capabilities.push(capability);
        }
    }
    Ok(capabilities)
}

/// The role of a configured agent, when the team has `[[roles]]` and the agent names one
/// (`role`): it must be a role of the agent's layer. Without `[[roles]]`, and on a top power,
/// `role` is free text for the system prompt; a top power's `role` may not name a role of the
/// team, which is always of another layer.
fn agent_role(
    src: &Source<'_>,
    entry: &Entry<'_>,
    roles: &RoleBook,
) -> Result<Option<String>, FileError> {
    let Some(role) = entry.role else {
        return Ok(None);
    };
    if roles.is_empty() {
        return Ok(None);
    }
    let name = role.get_ref();
    let of_layer = || list_or_none(roles.of_layer(entry.layer).map(|r| r.name.as_str()));
    match (roles.get(name), entry.layer) {
        (None, AgentLayer::Top) => Ok(None),
        (Some(found), AgentLayer::Top) => Err(src.error(
            role.span(),
            format!(
                "`{name}` is a {} role, and a top power takes no role from [[roles]] (roles are for leads and executors); use another word for the top power's `role`",
                found.layer
            ),
        )),
        (None, layer) => Err(src.error(
            role.span(),
            format!(
                "unknown role `{name}`; in a team with [[roles]], a {}'s `role` names a {layer} role ({})",
                noun(layer),
                of_layer()
            ),
        )),
        (Some(found), layer) if found.layer != layer => Err(src.error(
            role.span(),
            format!(
                "`{name}` is a {} role, but `{}` is a {}; a {}'s `role` names a {layer} role ({})",
                found.layer,
                entry.id(),
                noun(layer),
                noun(layer),
                of_layer()
            ),
        )),
        (Some(_), _) => Ok(Some(name.clone())),
    }
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
            "ask_human" => OnExceed::AskHuman,
            other => {
                return Err(src.error(
                    o.span(),
                    format!(
                        "`on_exceed` is \"stop\" (the run stops), \"ask\" (the top layer votes on an extension) or \"ask_human\" (one of the [approvals] humans decides it), not \"{other}\""
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

/// `[timeouts]`: each limit given is checked (from 1 ms to 7 days), the others keep their
/// defaults.
fn timeouts(src: &Source<'_>, raw: &RawTimeouts) -> Result<Timeouts, FileError> {
    let mut timeouts = Timeouts::default();
    for (value, limit) in [
        (&raw.tool_ms, Limit::Tool),
        (&raw.reasoning_ms, Limit::Reasoning),
        (&raw.silence_ms, Limit::Silence),
        (&raw.turn_ms, Limit::Turn),
        (&raw.subtask_ms, Limit::Subtask),
        (&raw.task_ms, Limit::Task),
    ] {
        if let Some(v) = value {
            timeouts.set(limit, *v.get_ref()).map_err(|e| {
                let span = src
                    .locate(&[Seg::Key("timeouts"), Seg::Key(limit.key())])
                    .filter(|_| v.span().is_empty())
                    .unwrap_or_else(|| v.span());
                src.error(span, format!("[timeouts] {e}"))
            })?;
        }
    }
    // The soft limits after every hard one, each checked against its own hard limit.
    for (value, limit) in [
        (&raw.tool_soft_ms, Limit::Tool),
        (&raw.turn_soft_ms, Limit::Turn),
        (&raw.task_soft_ms, Limit::Task),
    ] {
        if let Some(v) = value {
            timeouts.set_soft(limit, *v.get_ref()).map_err(|e| {
                let key = limit.soft_key().unwrap_or_default();
                let span = src
                    .locate(&[Seg::Key("timeouts"), Seg::Key(key)])
                    .filter(|_| v.span().is_empty())
                    .unwrap_or_else(|| v.span());
                src.error(span, format!("[timeouts] {e}"))
            })?;
        }
    }
    Ok(timeouts)
}

/// `[guards]`: each threshold given is checked against its minimum, the others keep their
/// defaults; `on_stuck` is `stop` or `escalate`.
/// `[approvals]`: each human's name checked (the characters of an agent id, at most 64, no
/// repeats), and `plans = true` only with a human to sign.
fn approvals(
    src: &Source<'_>,
    raw: &crate::raw::RawApprovals,
) -> Result<agent_pool::Approvals, FileError> {
    let mut approvals = agent_pool::Approvals::default();
    if let Some(humans) = &raw.humans {
        for (i, name) in humans.get_ref().iter().enumerate() {
            let span = src
                .locate(&[Seg::Key("approvals"), Seg::Key("humans"), Seg::Index(i)])
                .filter(|_| name.span().is_empty())
                .unwrap_or_else(|| name.span());
            if let Err(e) = agent_state::check_human_name(name.get_ref()) {
                return Err(src.error(span, format!("[approvals] `humans`: {e}")));
            }
            if approvals.humans.contains(name.get_ref()) {
                return Err(src.error(
                    span,
                    format!("[approvals] `humans` lists `{}` twice", name.get_ref()),
                ));
            }
            approvals.humans.push(name.get_ref().clone());
        }
    }
    if let Some(plans) = &raw.plans {
        approvals.plans = *plans.get_ref();
        if approvals.plans && approvals.humans.is_empty() {
            let span = src
                .locate(&[Seg::Key("approvals"), Seg::Key("plans")])
                .filter(|_| plans.span().is_empty())
                .unwrap_or_else(|| plans.span());
            return Err(src.error(
                span,
                "[approvals] `plans = true` needs someone to sign: list them in `humans = [\"name\"]`",
            ));
        }
    }
    Ok(approvals)
}

fn guards(src: &Source<'_>, raw: &crate::raw::RawGuards) -> Result<GuardSettings, FileError> {
    let mut guards = GuardSettings::default();
    let fields = [
        (&raw.repeat_limit, "repeat_limit"),
        (&raw.bounce_limit, "bounce_limit"),
        (&raw.idle_heartbeats, "idle_heartbeats"),
        (&raw.wait_heartbeats, "wait_heartbeats"),
    ];
    for (value, name) in fields {
        let Some(value) = value else { continue };
        let mut candidate = guards;
        let slot = match name {
            "repeat_limit" => &mut candidate.repeat_limit,
            "bounce_limit" => &mut candidate.bounce_limit,
            "idle_heartbeats" => &mut candidate.idle_heartbeats,
            _ => &mut candidate.wait_heartbeats,
        };
        *slot = *value.get_ref();
        if let Err(e) = candidate.check() {
            let span = src
                .locate(&[Seg::Key("guards"), Seg::Key(name)])
                .filter(|_| value.span().is_empty())
                .unwrap_or_else(|| value.span());
            return Err(src.error(span, format!("[guards] {e}")));
        }
        guards = candidate;
    }
    if let Some(o) = &raw.on_stuck {
        guards.on_stuck = match o.get_ref().as_str() {
            "stop" => OnStuck::Stop,
            "escalate" => OnStuck::Escalate,
            other => {
                return Err(src.error(
                    o.span(),
                    format!(
                        "`on_stuck` is \"stop\" (the task ends with the reason) or \"escalate\" \
                         (the stuck agent's supervisor is told first), not \"{other}\""
                    ),
                ));
            }
        };
    }
    Ok(guards)
}

/// `[sandbox]` and the `network` of executors and roles.
fn sandbox_settings(src: &Source<'_>, raw: &RawTeam) -> Result<SandboxSettings, FileError> {
    let mut settings = SandboxSettings::default();
    if let Some(table) = &raw.sandbox {
        sandbox_limits(src, table, &mut settings)?;
    }
    for bottom in &raw.bottom {
        if let Some(network) = &bottom.network {
            settings
                .agent_network
                .insert(AgentId::new(bottom.id.get_ref().as_str()), *network.get_ref());
        }
    }
    for role in &raw.roles {
        if let Some(network) = &role.network {
            settings.role_network.insert(role.name.get_ref().clone(), *network.get_ref());
        }
    }
    Ok(settings)
}

/// A spawned agent gets at most what its spawner holds: a role that `enabled_agents` names
/// holds no tool its spawning role of the same layer lacks (across layers the `enabled_agents`
/// entry is the grant: a lead holds no tools), no capability the spawning role's layer may
/// hold and it does not, and the network only where its spawner has it. Refused at the
/// `enabled_agents` entry; the spawner checks the same at run time
/// (`agent_core::spawn::check_grant`).
fn spawn_grants(
    src: &Source<'_>,
    raw: &[RawRole],
    book: &RoleBook,
    sandbox: &SandboxSettings,
) -> Result<(), FileError> {
    let network = |role: &str| sandbox.role_network.get(role).copied().unwrap_or(sandbox.network);
    for r in raw {
        let Some(parent) = book.get(r.name.get_ref()) else { continue };
        for entry in r.enabled_agents.iter().flat_map(|list| list.get_ref()) {
            let Some(child) = book.get(entry.get_ref()) else { continue };
            let mut more = None;
            if parent.layer == child.layer {
                more = child
                    .tools
                    .iter()
                    .find(|t| !parent.tools.contains(t))
                    .map(|t| format!("the tool `{t}`"));
            }
            if more.is_none() {
                let caps = parent.capabilities();
                more = child
                    .capabilities()
                    .into_iter()
                    .find(|c| parent.layer.allows(*c) && !caps.contains(c))
                    .map(|c| format!("the capability `{c}`"));
            }
            if more.is_none() && network(&child.name) && !network(&parent.name) {
                more = Some("the network".to_owned());
            }
            if let Some(what) = more {
                return Err(src.error(
                    entry.span(),
                    format!(
                        "role `{}` may not spawn `{}`: it would hold {what}, which `{}` does not; a spawned agent gets at most its spawner's tools, network and capabilities",
                        parent.name, child.name, parent.name
                    ),
                ));
            }
        }
    }
    Ok(())
}

/// `[sandbox]`'s network and limits, each limit at least 1.
fn sandbox_limits(
    src: &Source<'_>,
    raw: &RawSandbox,
    settings: &mut SandboxSettings,
) -> Result<(), FileError> {
    const MIB: u64 = 1024 * 1024;
    if let Some(network) = &raw.network {
        settings.network = *network.get_ref();
    }
    for path in raw.read_only.iter().flatten() {
        src.no_control(path, "`read_only`")?;
        if !path.get_ref().starts_with('/') {
            return Err(src.error(
                path.span(),
                format!(
                    "`read_only`: {:?} is not an absolute path; give each path from `/`",
                    path.get_ref()
                ),
            ));
        }
        settings.read_only.push(std::path::PathBuf::from(path.get_ref()));
    }
    for name in raw.env.iter().flatten() {
        let valid = !name.get_ref().is_empty()
            && name.get_ref().bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_')
            && !name.get_ref().starts_with(|c: char| c.is_ascii_digit());
        if !valid {
            return Err(src.error(
                name.span(),
                format!(
                    "`env`: {:?} is not an environment variable's name (letters, digits, `_`)",
                    name.get_ref()
                ),
            ));
        }
        if agent_core::secrets::ENV_VARS.contains(&name.get_ref().as_str()) {
            return Err(src.error(
                name.span(),
                format!(
                    "`env`: `{}` is one of strata's own secrets, never given to a command",
                    name.get_ref()
                ),
            ));
        }
        settings.env.push(name.get_ref().clone());
    }
    let limits = &mut settings.limits;
    for (value, name, slot, unit) in [
        (&raw.memory_mb, "memory_mb", &mut limits.memory_bytes, MIB),
        (&raw.processes, "processes", &mut limits.processes, 1),
        (&raw.file_size_mb, "file_size_mb", &mut limits.file_bytes, MIB),
        (&raw.open_files, "open_files", &mut limits.open_files, 1),
        (&raw.tmp_mb, "tmp_mb", &mut limits.tmp_bytes, MIB),
    ] {
        if let Some(v) = value {
            let n = *v.get_ref();
            let Some(amount) = n.checked_mul(unit).filter(|_| n >= 1) else {
                return Err(src.error(
                    v.span(),
                    format!("`{name}` must be a whole number from 1 to {}", u64::MAX / unit),
                ));
            };
            *slot = amount;
        }
    }
    Ok(())
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

/// Refuses control characters in the team file's ids and names, before anything echoes them.
fn team_controls(src: &Source<'_>, raw: &RawTeam) -> Result<(), FileError> {
    let reasoners = raw
        .reasoner
        .iter()
        .chain(raw.top.iter().filter_map(|t| t.reasoner.as_ref()))
        .chain(raw.mid.iter().filter_map(|m| m.reasoner.as_ref()))
        .chain(raw.bottom.iter().filter_map(|b| b.reasoner.as_ref()))
        .chain(raw.roles.iter().filter_map(|r| r.reasoner.as_ref()));
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
    for role in &raw.roles {
        src.no_control(&role.name, "a role's `name`")?;
        src.no_control(&role.layer, "`layer`")?;
        if let Some(model) = &role.model {
            src.no_control(model, "`model`")?;
        }
        for v in role.tools.iter().flat_map(|t| t.get_ref()) {
            src.no_control(v, "a tool")?;
        }
        for v in role.capabilities.iter().flatten() {
            src.no_control(v, "a capability")?;
        }
        for v in role.enabled_agents.iter().flat_map(|e| e.get_ref()) {
            src.no_control(v, "a role in `enabled_agents`")?;
        }
    }
    Ok(())
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

pub(crate) fn list_or_none<'s>(items: impl Iterator<Item = &'s str>) -> String {
    let items: Vec<&str> = items.collect();
    if items.is_empty() { "none".to_owned() } else { items.join(", ") }
}
